/*
 * Frontend tests: parity with torchaudio's Kaldi fbank (goldens from
 * tools/gen_fbank_goldens.py), independence from push sizes, resampler
 * quality, non-finite input, CMVN and configuration parsing.
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <aural.h>

#include "helpers.h"
#include "npy.h"

#define PARITY_TOL 2e-3

/* The golden features of the cases that go through the resampler hold x86
 * libsoxr's bits. Elsewhere (arm64) its output differs in the last bits
 * (2e-7 at most on mono8k), that is by rounding noise some 135 dB below
 * the signal (test_resampler_snr). Where the signal has no energy of its
 * own, in digital silence and above the band of upsampled audio, that
 * noise is all a mel bin holds, and its log differs by up to 2.9 between
 * the two. So in those cases a value may instead be within
 * RESAMPLED_ENERGY_REL of the file's largest golden mel energy, in energy
 * (-90 dB; arm64 is within 1e-12). */
#define RESAMPLED_ENERGY_REL 1e-9

/* Collects every frame a frontend emits, checking they arrive in order. */
typedef struct sink {
  float *rows;
  size_t n_rows, cap_rows, dim;
  size_t n_calls;
} sink;

static int sink_fn(void *user, const float *rows, size_t n, uint64_t first) {
  sink *s = user;
  assert_int_equal(first, s->n_rows);
  if (s->n_rows + n > s->cap_rows) {
    s->cap_rows = (s->n_rows + n) * 2;
    s->rows = realloc(s->rows, s->cap_rows * s->dim * sizeof *s->rows);
    assert_non_null(s->rows);
  }
  memcpy(s->rows + s->n_rows * s->dim, rows, n * s->dim * sizeof *rows);
  s->n_rows += n;
  s->n_calls++;
  return 0;
}

/* A whole audio file in memory. */
typedef struct audio {
  float *pcm; /* (n_frames, n_channels) */
  size_t n_frames;
  int n_channels;
  double rate_hz;
} audio;

static audio load_audio(const char *path) {
  aural_audiofile *af;
  aural_err err = {0};
  int rc = aural_audiofile_open(path, &af, &err);
  if (rc != 0) fail_msg("%s", err.msg);
  aural_audiofile_info info;
  aural_audiofile_get_info(af, &info);
  audio a = {.n_channels = info.n_channels, .rate_hz = info.rate_hz};
  a.pcm = malloc(((size_t)info.n_frames + 1) * (size_t)a.n_channels *
                 sizeof *a.pcm);
  assert_non_null(a.pcm);
  size_t n;
  while ((rc = aural_audiofile_read(af, a.pcm + a.n_frames * (size_t)a.n_channels,
                                    4096, &n, &err)) == 0 &&
         n > 0)
    a.n_frames += n;
  assert_int_equal(rc, 0);
  assert_int_equal(a.n_frames, info.n_frames);
  aural_audiofile_close(af);
  return a;
}

static aural_frontend *make_frontend(double rate_hz, int n_channels) {
  aural_frontend_config cfg;
  aural_frontend_config_default(&cfg);
  cfg.input_rate_hz = rate_hz;
  cfg.n_channels = n_channels;
  aural_frontend *fe;
  aural_err err = {0};
  int rc = aural_frontend_create(&cfg, &fe, &err);
  if (rc != 0) fail_msg("%s", err.msg);
  return fe;
}

/* Features of a through a frontend made from cfg (its rate and channels
 * set from a), pushed `step` frames at a time (0: all at once). */
static sink features_with(aural_frontend_config cfg, const audio *a,
                          size_t step) {
  cfg.input_rate_hz = a->rate_hz;
  cfg.n_channels = a->n_channels;
  aural_frontend *fe;
  aural_err err = {0};
  if (aural_frontend_create(&cfg, &fe, &err) != 0) fail_msg("%s", err.msg);
  sink s = {.dim = (size_t)aural_frontend_dim(fe)};
  if (step == 0) step = a->n_frames > 0 ? a->n_frames : 1;
  for (size_t at = 0; at < a->n_frames; at += step) {
    size_t k = a->n_frames - at < step ? a->n_frames - at : step;
    assert_int_equal(aural_frontend_push(fe, a->pcm + at * (size_t)a->n_channels,
                                         k, sink_fn, &s),
                     0);
  }
  assert_int_equal(aural_frontend_finish(fe, sink_fn, &s), 0);
  aural_frontend_destroy(fe);
  return s;
}

/* The same with the default options. */
static sink features(const audio *a, size_t step) {
  aural_frontend_config cfg;
  aural_frontend_config_default(&cfg);
  return features_with(cfg, a, step);
}

static void test_parity_with_torchaudio(void **state) {
  (void)state;
  FILE *cases = fopen(test_data_path("fbank/cases.txt"), "r");
  assert_non_null(cases);
  char name[64];
  double rate;
  int n_ch;
  size_t n_expected;
  int n_cases = 0;
  double worst = 0;
  while (fscanf(cases, "%63s %lf %d %zu", name, &rate, &n_ch, &n_expected) ==
         4) {
    char rel[128], npy[4096], err[256];
    snprintf(rel, sizeof rel, "fbank/%s.npy", name);
    snprintf(npy, sizeof npy, "%s", test_data_path(rel));
    snprintf(rel, sizeof rel, "fbank/%s.wav", name);
    audio a = load_audio(test_data_path(rel));
    assert_true(a.rate_hz == rate);
    assert_int_equal(a.n_channels, n_ch);

    float *gold;
    size_t g_rows, g_cols;
    if (npy_read_f32(npy, &gold, &g_rows, &g_cols, err, sizeof err) != 0)
      fail_msg("%s", err);
    sink s = features(&a, 0);
    assert_int_equal(s.n_rows, n_expected);
    assert_int_equal(s.n_rows, g_rows);
    assert_int_equal(s.dim, g_cols);
    double max_diff = 0, top = 0;
    for (size_t i = 0; i < g_rows * g_cols; i++) top = fmax(top, exp(gold[i]));
    size_t n_energy = 0; /* values held to RESAMPLED_ENERGY_REL instead */
    for (size_t i = 0; i < g_rows * g_cols; i++) {
      assert_true(isfinite(s.rows[i]));
      double diff = fabs((double)s.rows[i] - gold[i]);
      if (diff > PARITY_TOL && rate != 16000 &&
          fabs(exp((double)s.rows[i]) - exp((double)gold[i])) <=
              RESAMPLED_ENERGY_REL * top) {
        n_energy++;
        continue;
      }
      max_diff = fmax(max_diff, diff);
    }
    printf("  %-13s %6.0f Hz x%d  %4zu frames  max |C - torchaudio| = %.2e",
           name, rate, n_ch, s.n_rows, max_diff);
    if (n_energy > 0)
      printf(" (and %zu values within %.0e of the top energy)", n_energy,
             RESAMPLED_ENERGY_REL);
    printf("\n");
    assert_true(max_diff <= PARITY_TOL);
    worst = fmax(worst, max_diff);
    n_cases++;
    free(gold);
    free(s.rows);
    free(a.pcm);
  }
  fclose(cases);
  printf("  worst over %d cases: %.2e (tolerance %.0e)\n", n_cases, worst,
         PARITY_TOL);
  assert_true(n_cases >= 7);
}

/* Pushing 1, 7, 160, 4096 frames at a time or everything at once gives the
 * same bits, at the model rate and through the resampler. */
static void check_invariance(const char *rel) {
  audio a = load_audio(test_data_path(rel));
  sink whole = features(&a, 0);
  assert_true(whole.n_rows > 50);
  const size_t steps[] = {1, 7, 160, 4096, 441, 1000};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    sink s = features(&a, steps[i]);
    assert_int_equal(s.n_rows, whole.n_rows);
    assert_memory_equal(s.rows, whole.rows,
                        whole.n_rows * whole.dim * sizeof *whole.rows);
    free(s.rows);
  }
  free(whole.rows);
  free(a.pcm);
}

static void test_push_size_invariance_16k(void **state) {
  (void)state;
  check_invariance("fbank/speech.wav");
}

static void test_push_size_invariance_resampled(void **state) {
  (void)state;
  check_invariance("fbank/stereo44k.wav");
  check_invariance("fbank/mono8k.wav");
}

/* Collects resampler output. */
typedef struct samples {
  float *x;
  size_t n, cap;
} samples;

static int samples_fn(void *user, const float *x, size_t n) {
  samples *s = user;
  assert_true(s->n + n <= s->cap);
  memcpy(s->x + s->n, x, n * sizeof *x);
  s->n += n;
  return 0;
}

/* SNR of a 1 kHz sine resampled to 16 kHz against the analytic 16 kHz
 * sine, skipping the filter's start-up and run-out at both ends. */
static double resampled_sine_snr_db(double in_rate, size_t *n_out) {
  const double f = 1000.0, amp = 0.5, seconds = 2.0;
  size_t n_in = (size_t)(in_rate * seconds);
  float *x = malloc(n_in * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < n_in; i++)
    x[i] = (float)(amp * sin(2 * M_PI * f * (double)i / in_rate));
  aural_resampler *rs;
  aural_err err;
  assert_int_equal(aural_resampler_create(in_rate, 16000, &rs, &err), 0);
  samples out = {.cap = 40000};
  out.x = malloc(out.cap * sizeof *out.x);
  assert_non_null(out.x);
  /* Irregular pushes, as a device would deliver. */
  for (size_t at = 0, k = 1; at < n_in; at += k, k = k * 7 % 977 + 1) {
    if (k > n_in - at) k = n_in - at;
    assert_int_equal(aural_resampler_push(rs, x + at, k, samples_fn, &out), 0);
  }
  assert_int_equal(aural_resampler_finish(rs, samples_fn, &out), 0);
  double sig = 0, noise = 0;
  size_t margin = 800; /* 50 ms */
  for (size_t i = margin; i + margin < out.n; i++) {
    double ref = amp * sin(2 * M_PI * f * (double)i / 16000.0);
    sig += ref * ref;
    noise += (out.x[i] - ref) * (out.x[i] - ref);
  }
  *n_out = out.n;
  aural_resampler_destroy(rs);
  free(out.x);
  free(x);
  return 10 * log10(sig / noise);
}

static void test_resampler_snr(void **state) {
  (void)state;
  const double rates[] = {44100, 48000};
  for (size_t i = 0; i < 2; i++) {
    size_t n_out;
    double snr = resampled_sine_snr_db(rates[i], &n_out);
    printf("  1 kHz sine %.0f Hz -> 16 kHz: SNR %.1f dB, %zu samples\n",
           rates[i], snr, n_out);
    assert_true(snr >= 80.0);
    assert_int_equal(n_out, 32000); /* 2 s, no delay, nothing lost */
  }
}

static int count_samples_fn(void *user, const float *out, size_t n) {
  (void)out;
  *(size_t *)user += n;
  return 0;
}

/* A NULL callback or samples is refused, as the frontend refuses them,
 * and consumes nothing: the object still works. */
static void test_resampler_null_arguments(void **state) {
  (void)state;
  aural_err err = {0};
  aural_resampler *rs;
  assert_int_equal(aural_resampler_create(48000, 16000, &rs, &err), 0);
  float x[4800] = {0};
  size_t n_out = 0;
  assert_int_equal(aural_resampler_push(rs, x, 4800, NULL, NULL),
                   AURAL_EINVAL);
  assert_int_equal(aural_resampler_push(rs, NULL, 5, count_samples_fn,
                                        &n_out),
                   AURAL_EINVAL);
  assert_int_equal(aural_resampler_push(rs, NULL, 0, count_samples_fn,
                                        &n_out),
                   0);
  assert_int_equal(aural_resampler_finish(rs, NULL, NULL), AURAL_EINVAL);
  assert_int_equal(aural_resampler_push(rs, x, 4800, count_samples_fn,
                                        &n_out),
                   0);
  assert_int_equal(aural_resampler_finish(rs, count_samples_fn, &n_out), 0);
  assert_int_equal(n_out, 1600);
  assert_int_equal(aural_resampler_finish(rs, count_samples_fn, &n_out),
                   AURAL_ESTATE);
  aural_resampler_destroy(rs);
}

static int count_fn(void *user, const float *rows, size_t n, uint64_t first) {
  (void)rows;
  (void)first;
  *(size_t *)user += n;
  return 0;
}

static void test_nonfinite_rejected(void **state) {
  (void)state;
  audio a = load_audio(test_data_path("fbank/speech.wav"));
  sink clean = features(&a, 0);

  aural_frontend *fe = make_frontend(16000, 1);
  sink s = {.dim = clean.dim};
  float bad[320];
  memcpy(bad, a.pcm, sizeof bad);
  bad[100] = NAN;
  size_t calls = 0;
  assert_int_equal(aural_frontend_push(fe, bad, 320, count_fn, &calls),
                   AURAL_ENONFINITE);
  bad[100] = INFINITY;
  assert_int_equal(aural_frontend_push(fe, bad, 320, count_fn, &calls),
                   AURAL_ENONFINITE);
  assert_int_equal(calls, 0);
  /* A rejected block leaves no trace: the stream continues as if it had
   * never been pushed. */
  assert_int_equal(aural_frontend_push(fe, a.pcm, a.n_frames, sink_fn, &s), 0);
  assert_int_equal(aural_frontend_finish(fe, sink_fn, &s), 0);
  assert_int_equal(s.n_rows, clean.n_rows);
  assert_memory_equal(s.rows, clean.rows, s.n_rows * s.dim * sizeof *s.rows);
  aural_frontend_stats st;
  aural_frontend_get_stats(fe, &st);
  assert_int_equal(st.n_input_frames, a.n_frames);
  assert_int_equal(st.n_nonfinite, 0);
  aural_frontend_destroy(fe);
  free(s.rows);
  free(clean.rows);
  free(a.pcm);
}

static void test_nonfinite_zeroed_and_huge_clamped(void **state) {
  (void)state;
  aural_frontend_config cfg;
  aural_frontend_config_default(&cfg);
  cfg.nonfinite = AURAL_NONFINITE_ZERO;
  aural_frontend *fe;
  assert_int_equal(aural_frontend_create(&cfg, &fe, NULL), 0);
  float x[1600];
  for (size_t i = 0; i < 1600; i++) x[i] = (float)sin((double)i * 0.1) * 0.1f;
  x[10] = NAN;
  x[500] = -INFINITY;
  x[900] = 1e30f;
  x[901] = -1e30f;
  sink s = {.dim = 80};
  assert_int_equal(aural_frontend_push(fe, x, 1600, sink_fn, &s), 0);
  assert_int_equal(aural_frontend_finish(fe, sink_fn, &s), 0);
  assert_int_equal(s.n_rows, 8);
  for (size_t i = 0; i < s.n_rows * s.dim; i++) assert_true(isfinite(s.rows[i]));
  aural_frontend_stats st;
  aural_frontend_get_stats(fe, &st);
  assert_int_equal(st.n_nonfinite, 2);
  assert_int_equal(st.n_clamped, 2);
  aural_frontend_destroy(fe);
  free(s.rows);
}

static void test_reset_and_state(void **state) {
  (void)state;
  audio a = load_audio(test_data_path("fbank/stereo44k.wav"));
  aural_frontend *fe = make_frontend(a.rate_hz, a.n_channels);
  sink first = {.dim = 80}, second = {.dim = 80};
  assert_int_equal(aural_frontend_push(fe, a.pcm, a.n_frames, sink_fn, &first), 0);
  assert_int_equal(aural_frontend_finish(fe, sink_fn, &first), 0);
  size_t calls = 0;
  assert_int_equal(aural_frontend_push(fe, a.pcm, 10, count_fn, &calls),
                   AURAL_ESTATE);
  assert_int_equal(aural_frontend_finish(fe, count_fn, &calls), AURAL_ESTATE);
  assert_int_equal(aural_frontend_reset(fe), 0);
  assert_int_equal(aural_frontend_push(fe, a.pcm, a.n_frames, sink_fn, &second), 0);
  assert_int_equal(aural_frontend_finish(fe, sink_fn, &second), 0);
  assert_int_equal(first.n_rows, second.n_rows);
  assert_memory_equal(first.rows, second.rows, first.n_rows * 80 * sizeof(float));
  aural_frontend_destroy(fe);
  free(first.rows);
  free(second.rows);
  free(a.pcm);
}

static int stop_fn(void *user, const float *rows, size_t n, uint64_t first) {
  (void)rows;
  (void)first;
  (void)n;
  (*(int *)user)++;
  return -42;
}

static void test_callback_stops_push(void **state) {
  (void)state;
  aural_frontend *fe = make_frontend(16000, 1);
  float x[16000] = {0};
  int calls = 0;
  assert_int_equal(aural_frontend_push(fe, x, 16000, stop_fn, &calls), -42);
  assert_int_equal(calls, 1);
  aural_frontend_destroy(fe);
}

/* A callback that calls back into its own frontend or resampler: each
 * such call is refused with AURAL_ESTATE and changes nothing. (A push
 * from inside the callback ran the frame loop again over the samples the
 * outer loop was walking: a memmove of negative size.) */
typedef struct reentry {
  aural_frontend *fe;
  aural_resampler *rs;
  const float *x;
  size_t n_rows, n_samples;
  int calls, rc[3];
} reentry;

static int reenter_frontend_fn(void *user, const float *rows, size_t n,
                               uint64_t first) {
  (void)rows;
  (void)first;
  reentry *r = user;
  r->n_rows += n;
  if (r->calls++ == 0) {
    r->rc[0] = aural_frontend_push(r->fe, r->x, 16000, reenter_frontend_fn, r);
    r->rc[1] = aural_frontend_finish(r->fe, reenter_frontend_fn, r);
    r->rc[2] = aural_frontend_reset(r->fe);
  }
  return 0;
}

static int reenter_resampler_fn(void *user, const float *out, size_t n) {
  (void)out;
  reentry *r = user;
  r->n_samples += n;
  if (r->calls++ == 0) {
    r->rc[0] = aural_resampler_push(r->rs, r->x, 4800, reenter_resampler_fn, r);
    r->rc[1] = aural_resampler_finish(r->rs, reenter_resampler_fn, r);
    r->rc[2] = aural_resampler_reset(r->rs);
  }
  return 0;
}

static int count_rows_fn(void *user, const float *rows, size_t n,
                         uint64_t first) {
  (void)rows;
  (void)first;
  *(size_t *)user += n;
  return 0;
}

static void test_callback_reentry_refused(void **state) {
  (void)state;
  static float x[48000];
  for (size_t i = 0; i < 48000; i++) x[i] = (float)sin((double)i * 0.01) * 0.1f;
  /* At 16 kHz, and at 48 kHz through the resampler, whose finish still
   * delivers frames: the calls from that callback are refused too. */
  const double rates[] = {16000, 48000};
  for (size_t k = 0; k < 2; k++) {
    reentry r = {.fe = make_frontend(rates[k], 1), .x = x};
    assert_int_equal(aural_frontend_push(r.fe, x, 48000, reenter_frontend_fn,
                                         &r),
                     0);
    for (int i = 0; i < 3; i++) assert_int_equal(r.rc[i], AURAL_ESTATE);
    r.calls = 0;
    memset(r.rc, 0, sizeof r.rc);
    size_t in_push = r.n_rows;
    assert_int_equal(aural_frontend_finish(r.fe, reenter_frontend_fn, &r), 0);
    if (rates[k] != 16000) {
      assert_true(r.n_rows > in_push);
      for (int i = 0; i < 3; i++) assert_int_equal(r.rc[i], AURAL_ESTATE);
    }
    /* As from the 48000 samples alone. */
    aural_frontend *plain = make_frontend(rates[k], 1);
    size_t want = 0;
    assert_int_equal(aural_frontend_push(plain, x, 48000, count_rows_fn, &want),
                     0);
    assert_int_equal(aural_frontend_finish(plain, count_rows_fn, &want), 0);
    assert_int_equal(r.n_rows, want);
    aural_frontend_destroy(plain);
    aural_frontend_destroy(r.fe);
  }

  reentry r = {.x = x};
  assert_int_equal(aural_resampler_create(48000, 16000, &r.rs, NULL), 0);
  assert_int_equal(aural_resampler_push(r.rs, x, 48000, reenter_resampler_fn,
                                        &r),
                   0);
  for (int i = 0; i < 3; i++) assert_int_equal(r.rc[i], AURAL_ESTATE);
  r.calls = 0;
  memset(r.rc, 0, sizeof r.rc);
  assert_int_equal(aural_resampler_finish(r.rs, reenter_resampler_fn, &r), 0);
  for (int i = 0; i < 3; i++) assert_int_equal(r.rc[i], AURAL_ESTATE);
  assert_int_equal(r.n_samples, 16000);
  aural_resampler_destroy(r.rs);
}

static void test_bad_create(void **state) {
  (void)state;
  const struct {
    double rate;
    int ch;
    int code;
    const char *word;
  } cases[] = {
      {0, 1, AURAL_ERATE, "0 Hz"},        {1, 1, AURAL_ERATE, "1 Hz"},
      {1e7, 1, AURAL_ERATE, "Hz"},        {NAN, 1, AURAL_ERATE, "Hz"},
      /* Rates just outside are printed as given, not rounded onto the
       * bound ("4000 Hz is outside the supported 4000..768000 Hz"). */
      {3999.9999, 1, AURAL_ERATE, "3999.9999 Hz"},
      {768000.0001, 1, AURAL_ERATE, "768000.0001 Hz"},
      {16000, 0, AURAL_ECHANNELS, "0 channels"},
      {16000, 100000, AURAL_ECHANNELS, "100000 channels"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aural_frontend_config cfg;
    aural_frontend_config_default(&cfg);
    cfg.input_rate_hz = cases[i].rate;
    cfg.n_channels = cases[i].ch;
    aural_frontend *fe = (aural_frontend *)&cfg; /* must be reset to NULL */
    aural_err err = {0};
    assert_int_equal(aural_frontend_create(&cfg, &fe, &err), cases[i].code);
    assert_null(fe);
    assert_non_null(strstr(err.msg, cases[i].word));
  }
  /* A policy out of the enum is a config error, as create promises. */
  aural_frontend_config cfg;
  aural_frontend_config_default(&cfg);
  cfg.nonfinite = (aural_nonfinite_policy)2;
  aural_frontend *fe = (aural_frontend *)&cfg;
  aural_err err = {0};
  assert_int_equal(aural_frontend_create(&cfg, &fe, &err), AURAL_ECONFIG);
  assert_null(fe);
  assert_non_null(strstr(err.msg, "nonfinite policy 2"));
  aural_frontend_destroy(NULL);
}

/* No config, or nowhere to put the object: AURAL_EINVAL naming what is
 * missing, as the stream, encoder and model calls do (they crashed). */
static void test_create_null_arguments(void **state) {
  (void)state;
  aural_frontend_config cfg;
  aural_frontend_config_default(&cfg);
  aural_frontend *fe = (aural_frontend *)&cfg;
  aural_err err = {0};
  assert_int_equal(aural_frontend_create(&cfg, NULL, &err), AURAL_EINVAL);
  assert_non_null(strstr(err.msg, "frontend: no out pointer"));
  assert_int_equal(aural_frontend_create(NULL, &fe, &err), AURAL_EINVAL);
  assert_non_null(strstr(err.msg, "frontend: no config"));
  assert_int_equal(aural_frontend_create(NULL, &fe, NULL), AURAL_EINVAL);
  err = (aural_err){0};
  assert_int_equal(aural_resampler_create(48000, 16000, NULL, &err),
                   AURAL_EINVAL);
  assert_non_null(strstr(err.msg, "resampler: no out pointer"));
}

/* No JSON text for a nonzero length, or no options: refused by name (the
 * parser read from NULL). */
static void test_config_json_null(void **state) {
  (void)state;
  aural_fbank_opts o;
  aural_fbank_opts_default(&o);
  aural_err err = {0};
  assert_int_equal(aural_fbank_opts_from_json(&o, NULL, 5, &err),
                   AURAL_EINVAL);
  assert_non_null(strstr(err.msg, "aural.config: no JSON text"));
  assert_int_equal(aural_fbank_opts_from_json(NULL, "{}", 2, &err),
                   AURAL_EINVAL);
  assert_non_null(strstr(err.msg, "no options"));
  assert_int_equal(aural_fbank_opts_validate(NULL, &err), AURAL_EINVAL);
  assert_non_null(strstr(err.msg, "no options"));
  assert_int_equal(o.num_mel_bins, 80); /* left alone */
}

/* Sample counts of options never validated: 0 where rate x length is
 * negative, NaN or beyond size_t (a conversion the C standard leaves
 * undefined; it gave 18446744073709551216 for a window of -25 ms), and no
 * frames from a window of 0. */
static void test_sample_counts_of_bad_options(void **state) {
  (void)state;
  aural_fbank_opts o;
  aural_fbank_opts_default(&o);
  const double ms[] = {-25, NAN, INFINITY, 1e300, -INFINITY};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
    o.frame_length_ms = ms[i];
    o.frame_shift_ms = ms[i];
    assert_int_equal(aural_fbank_window_samples(&o), 0);
    assert_int_equal(aural_fbank_hop_samples(&o), 0);
    assert_int_equal(aural_fbank_n_frames(&o, 100000), 0);
  }
  o.frame_length_ms = 0;
  o.frame_shift_ms = 10;
  assert_int_equal(aural_fbank_n_frames(&o, 100000), 0);
  o.frame_length_ms = 25;
  assert_int_equal(aural_fbank_window_samples(&o), 400);
  assert_int_equal(aural_fbank_n_frames(&o, 16000), 98);
}

/* A channel count out of 1..AURAL_MAX_CHANNELS reads nothing (0 read
 * beyond pcm, and a negative count far beyond) and is AURAL_EINVAL. */
static void test_downmix_bad_channels(void **state) {
  (void)state;
  float pcm[4] = {0.5f, 0.25f, -0.5f, 1.0f}, mono[2] = {7, 7};
  uint64_t bad = 0, clamped = 0;
  const int channels[] = {-1, 0, AURAL_MAX_CHANNELS + 1, INT_MIN};
  for (size_t i = 0; i < sizeof channels / sizeof channels[0]; i++) {
    assert_int_equal(aural_frontend_downmix(pcm, 2, channels[i], mono, &bad,
                                            &clamped),
                     AURAL_EINVAL);
    assert_true(mono[0] == 7 && mono[1] == 7);
  }
  assert_int_equal(aural_frontend_downmix(NULL, 2, 2, mono, NULL, NULL),
                   AURAL_EINVAL);
  assert_int_equal(aural_frontend_downmix(pcm, 2, 2, NULL, NULL, NULL),
                   AURAL_EINVAL);
  assert_int_equal(aural_frontend_downmix(NULL, 0, 2, NULL, NULL, NULL), 0);
  assert_int_equal(aural_frontend_downmix(pcm, 2, 2, mono, &bad, &clamped),
                   0);
  assert_true(mono[0] == 0.375f && mono[1] == 0.25f);
  assert_true(bad == 0 && clamped == 0);
}

static void test_config_json(void **state) {
  (void)state;
  aural_fbank_opts o;
  aural_fbank_opts_default(&o);
  aural_err err = {0};
  const char *good =
      "{\"d_model\": 256, \"num_mel_bins\": 64, \"frame_length\": 32,"
      " \"window_type\": \"hamming\", \"low_freq\": 60, \"high_freq\": -400,"
      " \"remove_dc_offset\": false, \"input_scale\": 1.0}";
  assert_int_equal(aural_fbank_opts_from_json(&o, good, strlen(good), &err), 0);
  assert_int_equal(o.num_mel_bins, 64);
  assert_true(o.frame_length_ms == 32 && o.frame_shift_ms == 10);
  assert_int_equal(o.window_type, AURAL_WINDOW_HAMMING);
  assert_false(o.remove_dc_offset);
  assert_true(o.low_freq == 60 && o.high_freq == -400 && o.input_scale == 1);
  assert_int_equal(aural_fbank_window_samples(&o), 512);
  assert_int_equal(aural_fbank_n_frames(&o, 511), 0);
  assert_int_equal(aural_fbank_n_frames(&o, 512 + 160 * 3), 4);

  /* Each broken config is refused, names its field and leaves o alone. */
  const struct {
    const char *json, *word;
  } bad[] = {
      {"not json", "JSON"},
      {"[1, 2]", "object"},
      {"{\"num_mel_bins\": \"80\"}", "num_mel_bins"},
      {"{\"num_mel_bins\": 80.5}", "num_mel_bins"},
      {"{\"num_mel_bins\": 0}", "num_mel_bins"},
      {"{\"num_mel_bins\": 1e300}", "num_mel_bins"},
      /* Options torchaudio's fbank refuses (its get_mel_banks asserts
       * num_bins > 3 and an even padded window): no reference computes
       * such features, so no model can have been trained on them. */
      {"{\"num_mel_bins\": 3}", "num_mel_bins"},
      {"{\"round_to_power_of_two\": false, \"frame_length\": 25.0625}",
       "odd window of 401"},
      {"{\"sample_rate\": 0}", "sample_rate"},
      {"{\"frame_shift\": 0}", "frame_"},
      {"{\"frame_shift\": 40}", "frame_shift"},
      {"{\"dither\": 1.0}", "dither"},
      {"{\"snip_edges\": false}", "snip_edges"},
      {"{\"use_energy\": true}", "use_energy"},
      {"{\"use_power\": 1}", "use_power"},
      {"{\"window_type\": \"kaiser\"}", "window_type"},
      {"{\"low_freq\": 9000}", "low_freq"},
      {"{\"input_scale\": -1}", "input_scale"},
      {"{\"preemphasis_coefficient\": 2}", "preemphasis"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    aural_fbank_opts before = o;
    err.msg[0] = '\0';
    assert_int_equal(aural_fbank_opts_from_json(&o, bad[i].json,
                                                strlen(bad[i].json), &err),
                     AURAL_ECONFIG);
    if (strstr(err.msg, bad[i].word) == NULL)
      fail_msg("config %s: message '%s' lacks '%s'", bad[i].json, err.msg,
               bad[i].word);
    assert_memory_equal(&o, &before, sizeof o);
  }
}

/* A config that is not JSON is reported at the byte where parsing
 * stopped. Two threads parse two broken configs at once, each broken at
 * a different byte: each must be told its own offset (a parser's global
 * error position, shared between threads, would give one the other's). */
typedef struct bad_json_job {
  const char *json;
  size_t expect_at; /* the offset of the first byte that is not JSON */
  int n_wrong;
  char wrong_msg[600];
} bad_json_job;

static void *parse_bad_json(void *arg) {
  bad_json_job *job = arg;
  char expect[64];
  snprintf(expect, sizeof expect, "byte %zu (", job->expect_at);
  for (int i = 0; i < 50000; i++) {
    aural_fbank_opts o;
    aural_fbank_opts_default(&o);
    aural_err err = {0};
    int rc = aural_fbank_opts_from_json(&o, job->json, strlen(job->json),
                                        &err);
    if (rc != AURAL_ECONFIG || strstr(err.msg, expect) == NULL) {
      if (job->n_wrong++ == 0)
        snprintf(job->wrong_msg, sizeof job->wrong_msg, "rc %d: %s", rc,
                 err.msg);
    }
  }
  return NULL;
}

static void test_config_json_error_offset(void **state) {
  (void)state;
  bad_json_job jobs[2] = {
      {.json = "{\"sample_rate\": 16000, \"dither\": x}"},
      {.json = "{\"num_mel_bins\": 80,\n \"frame_shift\": 10,\n"
               " \"low_freq\": 20, \"high_freq\": [1, 2,, 3]}"},
  };
  jobs[0].expect_at = (size_t)(strchr(jobs[0].json, 'x') - jobs[0].json);
  jobs[1].expect_at = (size_t)(strstr(jobs[1].json, ",,") - jobs[1].json) + 1;

  /* One at a time first, then both at once. */
  for (int j = 0; j < 2; j++) {
    aural_fbank_opts o;
    aural_fbank_opts_default(&o);
    aural_err err = {0};
    assert_int_equal(aural_fbank_opts_from_json(&o, jobs[j].json,
                                                strlen(jobs[j].json), &err),
                     AURAL_ECONFIG);
    printf("  %s\n", err.msg);
    char expect[64];
    snprintf(expect, sizeof expect, "byte %zu (", jobs[j].expect_at);
    if (strstr(err.msg, expect) == NULL)
      fail_msg("config %s: message '%s' lacks '%s'", jobs[j].json, err.msg,
               expect);
  }
  pthread_t th[2];
  for (int j = 0; j < 2; j++)
    assert_int_equal(pthread_create(&th[j], NULL, parse_bad_json, &jobs[j]),
                     0);
  for (int j = 0; j < 2; j++) assert_int_equal(pthread_join(th[j], NULL), 0);
  for (int j = 0; j < 2; j++)
    if (jobs[j].n_wrong > 0)
      fail_msg("config %d, parsed beside another: %d of 50000 messages lack "
               "\"byte %zu (\", e.g. %s",
               j, jobs[j].n_wrong, jobs[j].expect_at, jobs[j].wrong_msg);
}

/* Each window type and a magnitude spectrum give finite features, and the
 * non-default options change them (they are really applied). */
static void test_option_variants(void **state) {
  (void)state;
  audio a = load_audio(test_data_path("fbank/speech.wav"));
  sink base = features(&a, 0);
  const char *variants[] = {
      "{\"window_type\": \"hanning\"}",     "{\"window_type\": \"hamming\"}",
      "{\"window_type\": \"rectangular\"}", "{\"window_type\": \"blackman\"}",
      "{\"use_power\": false}",             "{\"use_log_fbank\": false}",
      "{\"round_to_power_of_two\": false}", "{\"preemphasis_coefficient\": 0}",
  };
  for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++) {
    aural_frontend_config cfg;
    aural_frontend_config_default(&cfg);
    assert_int_equal(aural_fbank_opts_from_json(&cfg.fbank, variants[i],
                                                strlen(variants[i]), NULL),
                     0);
    sink s = features_with(cfg, &a, 0);
    assert_int_equal(s.n_rows, base.n_rows);
    double diff = 0;
    for (size_t k = 0; k < s.n_rows * 80; k++) {
      assert_true(isfinite(s.rows[k]));
      diff = fmax(diff, fabs((double)s.rows[k] - base.rows[k]));
    }
    assert_true(diff > 1e-3);
    free(s.rows);
  }
  free(base.rows);
  free(a.pcm);
}

/* The largest options a model config may give (1024 mel bins, a window of
 * 65536 samples) make a frontend of a few MiB, what its buffers and the
 * filters' nonzero weights need: every stream makes one. Storing each
 * filter's weights over all 32768 FFT bins took 256 MiB. */
static void test_largest_config_memory(void **state) {
  (void)state;
  aural_frontend_config cfg;
  aural_frontend_config_default(&cfg);
  const char *big = "{\"num_mel_bins\": 1024, \"frame_length\": 4096}";
  assert_int_equal(aural_fbank_opts_from_json(&cfg.fbank, big, strlen(big),
                                              NULL),
                   0);
  assert_int_equal(aural_fbank_window_samples(&cfg.fbank), 65536);
  size_t before = test_allocated_bytes();
  aural_frontend *fe;
  aural_err err = {0};
  assert_int_equal(aural_frontend_create(&cfg, &fe, &err), 0);
  size_t bytes = test_allocated_bytes() - before;
  printf("  1024 mel bins, 65536-sample window: create allocated %zu bytes\n",
         bytes);
  assert_true(bytes < (size_t)16 << 20);

  /* Still the features of a signal: a tone lands in its own bins. */
  size_t n = 65536 + 160 * 3;
  float *x = malloc(n * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(0.5 * sin(2 * M_PI * 1000.0 * (double)i / 16000.0));
  sink s = {.dim = 1024};
  assert_int_equal(aural_frontend_push(fe, x, n, sink_fn, &s), 0);
  assert_int_equal(aural_frontend_finish(fe, sink_fn, &s), 0);
  assert_int_equal(s.n_rows, 4);
  size_t top = 0;
  for (size_t m = 0; m < 1024; m++)
    if (s.rows[m] > s.rows[top]) top = m;
  /* 1000 Hz on the mel scale between 20 Hz and 8 kHz, 1025 steps. */
  double mel = 1127.0 * log(1.0 + 1000.0 / 700.0),
         lo = 1127.0 * log(1.0 + 20.0 / 700.0),
         hi = 1127.0 * log(1.0 + 8000.0 / 700.0);
  double expect = (mel - lo) / ((hi - lo) / 1025.0) - 1;
  assert_true(fabs((double)top - expect) <= 1.5);
  aural_frontend_destroy(fe);
  free(s.rows);
  free(x);
}

/* A push at the model's rate makes no heap allocation, not even one it
 * frees again, from the first push after create or reset on (counted by
 * tests/alloc_calls.c); nor do the counters. */
static void test_push_allocates_nothing(void **state) {
  (void)state;
  enum { N = 16000 * 2 };
  float *pcm = malloc(N * 2 * sizeof *pcm);
  for (size_t i = 0; i < N * 2; i++) pcm[i] = 0.3f * test_frand();
  const int channels[] = {1, 2};
  for (int c = 0; c < 2; c++) {
    unsigned long at_create = test_alloc_calls();
    aural_frontend *fe = make_frontend(16000, channels[c]);
    /* The count sees the library's allocations: create has some. */
    assert_true(test_alloc_calls() > at_create);
    sink s = {.dim = (size_t)aural_frontend_dim(fe)};
    s.cap_rows = 400;
    s.rows = malloc(s.cap_rows * s.dim * sizeof *s.rows);
    for (int round = 0; round < 2; round++) {
      s.n_rows = 0;
      unsigned long before = test_alloc_calls();
      for (size_t at = 0, k = 1; at < N; at += k, k = k * 3 % 1000 + 1) {
        if (k > N - at) k = N - at;
        assert_int_equal(aural_frontend_push(fe, pcm + at * (size_t)channels[c],
                                             k, sink_fn, &s),
                         0);
      }
      aural_frontend_stats st;
      aural_frontend_get_stats(fe, &st);
      unsigned long n_alloc = test_alloc_calls() - before;
      if (n_alloc != 0)
        fail_msg("%d channel(s), round %d: pushes made %lu heap allocations",
                 channels[c], round, n_alloc);
      assert_int_equal(st.n_feature_frames, s.n_rows);
      assert_int_equal(s.n_rows, 1 + (N - 400) / 160);
      assert_int_equal(aural_frontend_reset(fe), 0);
    }
    free(s.rows);
    aural_frontend_destroy(fe);
  }
  free(pcm);
}

/* Frontends created, used and destroyed on several threads at once, each
 * thread with FFT sizes of its own, so that FFTW plans and destroys plans
 * concurrently (aural_frontend_create is thread-safe): every thread's
 * features equal those made alone, bit for bit. */
enum { FE_THREADS = 4, FE_ROUNDS = 800, FE_SAMPLES = 8000, FE_ROWS = 64 };

typedef struct fe_job {
  aural_frontend_config cfg[2];
  const float *pcm;
  const float *want[2]; /* (FE_ROWS, 80) each, n_want rows */
  size_t n_want[2];
  int n_wrong;
  char wrong[sizeof ((aural_err *)0)->msg + 100];
} fe_job;

/* Collects rows without cmocka's asserts, which are not for threads. */
typedef struct fe_rows {
  float rows[FE_ROWS * 80];
  size_t n;
} fe_rows;

static int fe_collect(void *user, const float *rows, size_t n,
                      uint64_t first) {
  fe_rows *r = user;
  if (first != r->n || r->n + n > FE_ROWS) return 1;
  memcpy(r->rows + r->n * 80, rows, n * 80 * sizeof *rows);
  r->n += n;
  return 0;
}

static int fe_run(const aural_frontend_config *cfg, const float *pcm,
                  fe_rows *out, char *why, size_t why_len) {
  aural_frontend *fe;
  aural_err err = {0};
  out->n = 0;
  if (aural_frontend_create(cfg, &fe, &err) != 0) {
    snprintf(why, why_len, "create: %.400s", err.msg);
    return -1;
  }
  int rc = aural_frontend_push(fe, pcm, FE_SAMPLES, fe_collect, out);
  if (rc == 0) rc = aural_frontend_finish(fe, fe_collect, out);
  aural_frontend_destroy(fe);
  if (rc != 0) snprintf(why, why_len, "push or finish: %d", rc);
  return rc;
}

static void *fe_thread(void *arg) {
  fe_job *j = arg;
  fe_rows *got = malloc(sizeof *got);
  for (int i = 0; i < FE_ROUNDS && got != NULL; i++) {
    int k = i % 2;
    char why[420] = "";
    /* Mostly plans made and destroyed, the planner's part; some used. */
    if (i % 16 != 0) {
      aural_frontend *fe;
      if (aural_frontend_create(&j->cfg[k], &fe, NULL) != 0) {
        if (j->n_wrong++ == 0)
          snprintf(j->wrong, sizeof j->wrong, "round %d: create failed", i);
      }
      aural_frontend_destroy(fe);
    } else if (fe_run(&j->cfg[k], j->pcm, got, why, sizeof why) != 0 ||
               got->n != j->n_want[k] ||
               memcmp(got->rows, j->want[k], got->n * 80 * sizeof(float)) !=
                   0) {
      if (j->n_wrong++ == 0)
        snprintf(j->wrong, sizeof j->wrong, "round %d: %zu rows of %zu %s",
                 i, got->n, j->n_want[k], why);
    }
  }
  free(got);
  return NULL;
}

static void test_threads_create_and_push(void **state) {
  (void)state;
  /* Windows of 10, 20, 25, 50, 64, 100, 30 ms and 25 ms unrounded: FFTs
   * of 256, 512, 512, 1024, 1024, 2048, 512 and 400 points. */
  const double window_ms[FE_THREADS * 2] = {10, 20, 25, 50, 64, 100, 30, 25};
  float *pcm = malloc(FE_SAMPLES * sizeof *pcm);
  for (size_t i = 0; i < FE_SAMPLES; i++) pcm[i] = 0.3f * test_frand();
  fe_job jobs[FE_THREADS];
  fe_rows *alone = malloc(FE_THREADS * 2 * sizeof *alone);
  for (int t = 0; t < FE_THREADS; t++) {
    jobs[t] = (fe_job){.pcm = pcm};
    for (int k = 0; k < 2; k++) {
      aural_frontend_config *c = &jobs[t].cfg[k];
      aural_frontend_config_default(c);
      c->fbank.frame_length_ms = window_ms[t * 2 + k];
      c->fbank.round_to_power_of_two = t * 2 + k != FE_THREADS * 2 - 1;
      char why[420] = "";
      fe_rows *a = &alone[t * 2 + k];
      if (fe_run(c, pcm, a, why, sizeof why) != 0) fail_msg("%s", why);
      jobs[t].want[k] = a->rows;
      jobs[t].n_want[k] = a->n;
      assert_true(a->n > 0);
    }
  }
  pthread_t th[FE_THREADS];
  for (int t = 0; t < FE_THREADS; t++)
    assert_int_equal(pthread_create(&th[t], NULL, fe_thread, &jobs[t]), 0);
  for (int t = 0; t < FE_THREADS; t++)
    assert_int_equal(pthread_join(th[t], NULL), 0);
  for (int t = 0; t < FE_THREADS; t++)
    if (jobs[t].n_wrong > 0)
      fail_msg("thread %d: %d of %d rounds failed or differ from the same "
               "alone, first %s",
               t, jobs[t].n_wrong, FE_ROUNDS, jobs[t].wrong);
  free(alone);
  free(pcm);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parity_with_torchaudio),
      cmocka_unit_test(test_push_size_invariance_16k),
      cmocka_unit_test(test_push_size_invariance_resampled),
      cmocka_unit_test(test_resampler_snr),
      cmocka_unit_test(test_resampler_null_arguments),
      cmocka_unit_test(test_nonfinite_rejected),
      cmocka_unit_test(test_nonfinite_zeroed_and_huge_clamped),
      cmocka_unit_test(test_reset_and_state),
      cmocka_unit_test(test_callback_stops_push),
      cmocka_unit_test(test_callback_reentry_refused),
      cmocka_unit_test(test_bad_create),
      cmocka_unit_test(test_create_null_arguments),
      cmocka_unit_test(test_config_json_null),
      cmocka_unit_test(test_sample_counts_of_bad_options),
      cmocka_unit_test(test_downmix_bad_channels),
      cmocka_unit_test(test_config_json),
      cmocka_unit_test(test_config_json_error_offset),
      cmocka_unit_test(test_option_variants),
      cmocka_unit_test(test_largest_config_memory),
      cmocka_unit_test(test_push_allocates_nothing),
      cmocka_unit_test(test_threads_create_and_push),
  };
  test_select_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
