/*
 * aural bench: how fast the library's stages run, on one thread.
 *
 * encoder: frames per second of a random model, chunk and frame mode;
 * then chunk mode and the FMA peak on every CPU at once.
 * frontend: the cost of one 10 ms feature frame when audio arrives 10 ms at
 * a time, as it does from a microphone: 16 kHz mono straight into the
 * fbank, and 44.1 kHz stereo and 48 kHz mono through downmix and resampler.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <aural.h>
#include <aural/proto.h>

#include "bench_words.h"
#include "cli.h"
#include "synth_model.h"

/* s as a quoted, escaped JSON string (malloc'd), or NULL when out of
 * memory. */
static char *json_string(const char *s) {
  size_t cap = 6 * strlen(s) + 3;
  char *out = malloc(cap);
  if (out == NULL) return NULL;
  aural_jw w;
  aural_jw_init(&w, out, cap - 1);
  aural_jw_string(&w, s);
  long n = aural_jw_finish(&w);
  if (n < 0) {
    free(out);
    return NULL;
  }
  out[n] = '\0';
  return out;
}

static void usage(FILE *to) {
  fprintf(to,
          "Usage: aural bench [OPTIONS] [SUITE...]\n"
          "\n"
          "Measures speed on one thread, and (encoder) on every CPU at\n"
          "once. Suites (default: all):\n"
          "  encoder    frames per second of a model (-m), or of a\n"
          "             random-weight model built from the flags below\n"
          "             (default: the 'base' model), streaming with the\n"
          "             KV cache: chunk mode (50 frames per call) and\n"
          "             frame mode (1 frame per call), with f32 and with\n"
          "             f16 weights in memory, and in precision bf16\n"
          "             (AVX512-BF16, or emulated: the line says which);\n"
          "             then several streams batched into one pass; then\n"
          "             chunk mode, f32 and bf16, on every CPU at once, a\n"
          "             stream per thread, and the FMA peak of all of\n"
          "             them together, by wall clock (what serving and\n"
          "             'aural encode -j' can reach here: less than\n"
          "             CPUs x one thread where CPUs share a core);\n"
          "             achieved GFLOP/s against this core's measured\n"
          "             FMA peak for the kernels in use (AVX-512, AVX2\n"
          "             or scalar: the best this CPU runs, or AURAL_ISA's\n"
          "             choice; bf16 with AVX512-BF16: against the dot\n"
          "             products' measured peak)\n"
          "  frontend   microseconds of CPU per 10 ms feature frame, fed\n"
          "             10 ms of audio per push (16 kHz mono; 44.1 kHz\n"
          "             stereo and 48 kHz mono through the resampler)\n"
          "  words      (only when named) the words decoder's CPU per\n"
          "             frame beside the encoder's, on the bundled\n"
          "             recording, with the model's lexicon and LM (-m,\n"
          "             default the bundled model; --lexicon, --lm,\n"
          "             --beam N: default the decoder's, 64), and its\n"
          "             memory per stream\n"
          "\n"
          "Model flags (encoder):\n"
          "      --d-model N   embedding width (default 256)\n"
          "      --heads N     attention heads (default 4)\n"
          "      --d-ff N      feed-forward width (default 1024)\n"
          "      --layers N    layers (default 6)\n"
          "      --window N    attention window W in frames (default 50)\n"
          "      --pos KIND    rope, sinusoidal or none (default rope)\n"
          "      --chunk N     frames per call in chunk mode (default 50)\n"
          "      --streams N   streams batched into one pass for the\n"
          "                    batched measurement (default 8; 1: none)\n"
          "      --cpus N      threads for the every-CPU measurement\n"
          "                    (default: the CPUs this process may use;\n"
          "                    1: none)\n"
          "\n"
          "Options:\n"
          "  -m, --model PATH  measure this model file instead (its\n"
          "                    weights as f32 and as f16 in memory); the\n"
          "                    model flags do not apply\n"
          "      --seconds S   audio per measurement (default 20)\n"
          "      --repeat N    measurements per case; the best is kept\n"
          "                    (default 3)\n"
          "      --json        print one JSON object instead of text\n"
          "      --save-model PATH  write the random model the flags\n"
          "                    describe to PATH and exit (for aurald and\n"
          "                    'aural load'; nothing is measured)\n"
          "  -h, --help        show this help\n"
          "\n"
          "An option that no suite run uses (--lexicon without words,\n"
          "a model flag without encoder, -m with frontend alone) is a\n"
          "bad command line.\n"
          "\n"
          "Exit status: 0 on success, 1 if the model, the words' resources\n"
          "or --save-model's file could not be read or written, 2 for a bad\n"
          "command line.\n");
}

static int count_frames(void *user, const float *rows, size_t n,
                        uint64_t first) {
  (void)rows;
  (void)first;
  *(size_t *)user += n;
  return 0;
}

/* Deterministic test signal: two sweeping tones in noise, speech-like in
 * level, so every part of the spectrum is busy. */
static void fill_signal(float *x, size_t n_frames, int n_ch, double rate) {
  uint32_t s = 12345;
  for (size_t i = 0; i < n_frames; i++) {
    double t = (double)i / rate;
    double v = 0.2 * sin(2 * M_PI * (200 + 50 * sin(t)) * t) +
               0.1 * sin(2 * M_PI * (2500 + 400 * sin(3 * t)) * t);
    for (int c = 0; c < n_ch; c++) {
      s = s * 1664525u + 1013904223u;
      x[i * (size_t)n_ch + (size_t)c] =
          (float)(v + 0.02 * ((double)(s >> 8) / 16777216.0 - 0.5));
    }
  }
}

typedef struct frontend_case {
  double rate_hz;
  int n_channels;
  double us_per_frame; /* best CPU time per emitted frame */
  double wall_us_per_frame;
  size_t n_frames;
} frontend_case;

static int bench_frontend_case(frontend_case *bc, double seconds, int repeat) {
  size_t n_in = (size_t)(seconds * bc->rate_hz);
  size_t hop_in = (size_t)(bc->rate_hz / 100); /* 10 ms per push */
  float *x = malloc(n_in * (size_t)bc->n_channels * sizeof *x);
  if (x == NULL) return -1;
  fill_signal(x, n_in, bc->n_channels, bc->rate_hz);

  aural_frontend_config cfg;
  aural_frontend_config_default(&cfg);
  cfg.input_rate_hz = bc->rate_hz;
  cfg.n_channels = bc->n_channels;
  aural_err err;
  aural_frontend *fe;
  if (aural_frontend_create(&cfg, &fe, &err) < 0) {
    fprintf(stderr, "aural bench: %s\n", err.msg);
    free(x);
    return -1;
  }
  bc->us_per_frame = INFINITY;
  bc->wall_us_per_frame = INFINITY;
  for (int r = 0; r < repeat; r++) {
    size_t n_frames = 0;
    aural_frontend_reset(fe);
    double c0 = cli_thread_cpu_s(), w0 = cli_now_s();
    for (size_t at = 0; at < n_in; at += hop_in) {
      size_t k = n_in - at < hop_in ? n_in - at : hop_in;
      aural_frontend_push(fe, x + at * (size_t)bc->n_channels, k,
                          count_frames, &n_frames);
    }
    aural_frontend_finish(fe, count_frames, &n_frames);
    double cpu = cli_thread_cpu_s() - c0, wall = cli_now_s() - w0;
    bc->n_frames = n_frames;
    bc->us_per_frame = fmin(bc->us_per_frame, cpu * 1e6 / (double)n_frames);
    bc->wall_us_per_frame =
        fmin(bc->wall_us_per_frame, wall * 1e6 / (double)n_frames);
  }
  aural_frontend_destroy(fe);
  free(x);
  return 0;
}

#if defined(__x86_64__)
/* This core's fp32 FMA peak with the vectors of one instruction set: 12
 * independent chains of fused multiply-adds, enough to cover the FMA
 * latency on both units. NAME##_run does PEAK_TURNS turns of the chains
 * (PEAK_TURNS * 12 * LANES * 2 flops); NAME is the best GFLOP/s of three
 * runs, by this thread's CPU time. */
#define PEAK_TURNS 20000000L
#define DEFINE_PEAK(NAME, TARGET, VEC, LANES, SET1, FMADD, STORE)              \
  __attribute__((target(TARGET))) static void NAME##_run(void) {              \
    VEC acc[12];                                                               \
    for (int j = 0; j < 12; j++) acc[j] = SET1((float)j);                      \
    const VEC m = SET1(0.999999f), a = SET1(1e-6f);                            \
    for (long i = 0; i < PEAK_TURNS; i++) {                                    \
      _Pragma("GCC unroll 12") for (int j = 0; j < 12; j++) acc[j] =           \
          FMADD(acc[j], m, a);                                                 \
    }                                                                          \
    float sink = 0, lanes[LANES];                                              \
    for (int j = 0; j < 12; j++) {                                             \
      STORE(lanes, acc[j]);                                                    \
      for (int l = 0; l < LANES; l++) sink += lanes[l];                        \
    }                                                                          \
    volatile float keep = sink;                                                \
    (void)keep;                                                                \
  }                                                                            \
  static double NAME(void) {                                                   \
    double best = 0;                                                           \
    for (int rep = 0; rep < 3; rep++) {                                        \
      double t0 = cli_thread_cpu_s();                                          \
      NAME##_run();                                                            \
      double t = cli_thread_cpu_s() - t0;                                      \
      best = fmax(best, (double)PEAK_TURNS * 12 * LANES * 2 / t / 1e9);        \
    }                                                                          \
    return best;                                                               \
  }
DEFINE_PEAK(peak_gflops_avx512, "avx512f,fma", __m512, 16, _mm512_set1_ps,
            _mm512_fmadd_ps, _mm512_storeu_ps)
DEFINE_PEAK(peak_gflops_avx2, "avx2,fma", __m256, 8, _mm256_set1_ps,
            _mm256_fmadd_ps, _mm256_storeu_ps)

/* AVX512-BF16's dot products as DEFINE_PEAK measures the FMA: each of 16
 * lanes does two products and two adds per instruction. Only on a CPU
 * that has them. */
static inline __m512 dp_step(__m512 acc, __m512 m, __m512 a)
    __attribute__((target("avx512f,avx512bf16"), always_inline));
static inline __m512 dp_step(__m512 acc, __m512 m, __m512 a) {
  return _mm512_dpbf16_ps(acc, (__m512bh)m, (__m512bh)a);
}
DEFINE_PEAK(peak_gflops_bf16_lanes, "avx512f,avx512bf16", __m512, 16,
            _mm512_set1_ps, dp_step, _mm512_storeu_ps)
static double peak_gflops_bf16(void) { return 2 * peak_gflops_bf16_lanes(); }

#endif

/* The FMA peaks of this core: AVX-512 (0 without it) and AVX2 (0 without
 * AVX2 and FMA; both 0 on other CPUs, whose kernels are scalar). */
static void peak_gflops(double *avx512, double *avx2) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  int fma = __builtin_cpu_supports("fma");
  *avx512 = fma && __builtin_cpu_supports("avx512f") ? peak_gflops_avx512() : 0.0;
  *avx2 = fma && __builtin_cpu_supports("avx2") ? peak_gflops_avx2() : 0.0;
#else
  *avx512 = *avx2 = 0.0;
#endif
}

typedef struct enc_result {
  double frames_per_s;
  double gflops;
} enc_result;

/* Features for the encoder cases: the test signal's samples scaled to
 * the range of log-mel features. */
static void fill_feats(float *feats, size_t n) {
  fill_signal(feats, n, 1, 1000.0);
  for (size_t i = 0; i < n; i++) feats[i] = feats[i] * 20.0f + 5.0f;
}

/* One stream fed `step` frames per call: its encoder, input and output,
 * and the frames a run takes (n_frames rounded up to whole calls). */
typedef struct chunk_share {
  aural_encoder *e;
  float *feats, *out;
  size_t step, n_frames;
} chunk_share;

/* Frees what c holds and leaves it empty (so freeing it again is safe). */
static void chunk_share_free(chunk_share *c) {
  aural_encoder_destroy(c->e);
  free(c->feats);
  free(c->out);
  *c = (chunk_share){0};
}

/* c's encoder and buffers, warmed up until the rings are full; -1 (and
 * why on stderr) when they cannot be made. */
static int chunk_share_init(chunk_share *c, const aural_model *m, size_t step,
                            size_t n_frames) {
  const aural_model_config *mc = aural_model_get_config(m);
  size_t mels = (size_t)mc->fbank.num_mel_bins, d = (size_t)mc->d_model;
  *c = (chunk_share){.step = step,
                     .n_frames = (n_frames + step - 1) / step * step};
  aural_encoder_config ec;
  aural_encoder_config_default(&ec);
  ec.max_batch_frames = step;
  aural_err err;
  if (aural_encoder_create(m, &ec, &c->e, &err) < 0) {
    fprintf(stderr, "aural bench: %s\n", err.msg);
    return -1;
  }
  c->feats = malloc(step * mels * sizeof *c->feats);
  c->out = malloc(step * d * sizeof *c->out);
  if (c->feats == NULL || c->out == NULL) {
    fprintf(stderr, "aural bench: out of memory for a stream\n");
    chunk_share_free(c);
    return -1;
  }
  fill_feats(c->feats, step * mels);
  for (size_t done = 0; done < (size_t)mc->window + step; done += step)
    aural_encoder_forward(c->e, c->feats, step, c->out, NULL);
  return 0;
}

/* One run of c: its n_frames frames, step per call. */
static void run_chunk_share(void *p) {
  chunk_share *c = p;
  for (size_t done = 0; done < c->n_frames; done += c->step)
    aural_encoder_forward(c->e, c->feats, c->step, c->out, NULL);
}

/* Frames per second of one encoder fed `step` frames per call, best of
 * `repeat` runs over n_frames frames after a warm-up that fills the rings. */
static int bench_encoder_mode(const aural_model *m, size_t step,
                              size_t n_frames, int repeat, enc_result *res) {
  chunk_share c;
  if (chunk_share_init(&c, m, step, n_frames) < 0) return -1;
  res->frames_per_s = 0;
  for (int r = 0; r < repeat; r++) {
    double t0 = cli_thread_cpu_s();
    run_chunk_share(&c);
    double t = cli_thread_cpu_s() - t0;
    res->frames_per_s = fmax(res->frames_per_s, (double)c.n_frames / t);
  }
  res->gflops = res->frames_per_s * (double)aural_model_flops_per_frame(m) / 1e9;
  chunk_share_free(&c);
  return 0;
}

/* Frames per second (all streams together) of n_streams streams whose
 * 50-frame chunks go through one aural_batch pass, as the daemon batches
 * streams that are ready at the same moment. */
static int bench_batched(const aural_model *m, size_t step, size_t n_streams,
                         size_t n_frames, int repeat, enc_result *res) {
  const aural_model_config *c = aural_model_get_config(m);
  size_t mels = (size_t)c->fbank.num_mel_bins, d = (size_t)c->d_model;
  aural_encoder **encs = calloc(n_streams, sizeof *encs);
  aural_batch_item *items = calloc(n_streams, sizeof *items);
  float *feats = malloc(step * mels * sizeof *feats);
  float *out = malloc(n_streams * step * d * sizeof *out);
  aural_batch *b = NULL;
  aural_err err;
  int rc = encs && items && feats && out ? 0 : -1;
  if (rc == 0) rc = aural_batch_create(m, step * n_streams, &b, &err);
  for (size_t s = 0; rc == 0 && s < n_streams; s++)
    rc = aural_encoder_create(m, NULL, &encs[s], &err);
  if (rc == 0) {
    fill_feats(feats, step * mels);
    for (size_t s = 0; s < n_streams; s++)
      items[s] = (aural_batch_item){.enc = encs[s], .feats = feats, .n = step,
                                    .emb = out + s * step * d};
    for (size_t done = 0; done < (size_t)c->window + step; done += step)
      aural_encoder_forward_batch(b, items, n_streams);
    res->frames_per_s = 0;
    for (int r = 0; r < repeat; r++) {
      double t0 = cli_thread_cpu_s();
      size_t frames = 0;
      for (; frames < n_frames; frames += step * n_streams)
        aural_encoder_forward_batch(b, items, n_streams);
      double t = cli_thread_cpu_s() - t0;
      res->frames_per_s = fmax(res->frames_per_s, (double)frames / t);
    }
    res->gflops =
        res->frames_per_s * (double)aural_model_flops_per_frame(m) / 1e9;
  } else {
    fprintf(stderr, "aural bench: %s\n", err.msg);
  }
  for (size_t s = 0; encs != NULL && s < n_streams; s++)
    aural_encoder_destroy(encs[s]);
  aural_batch_destroy(b);
  free(encs);
  free(items);
  free(feats);
  free(out);
  return rc;
}

/* ---- every CPU at once ---------------------------------------------- */

/* Threads that do their shares of a round at the same moment: each round
 * starts once every thread is ready and ends when the last is done. */
typedef struct together {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state; /* 0: threads still being started, 1: go, -1: give up */
  pthread_barrier_t go, done;
  int rounds;
  void (*share)(void *arg); /* one thread's part of a round */
} together;

typedef struct together_arg {
  together *t;
  void *arg;
} together_arg;

static void *together_main(void *p) {
  together_arg *ta = p;
  together *t = ta->t;
  pthread_mutex_lock(&t->mu);
  while (t->state == 0) pthread_cond_wait(&t->cv, &t->mu);
  int state = t->state;
  pthread_mutex_unlock(&t->mu);
  if (state < 0) return NULL;
  for (int r = 0; r < t->rounds; r++) {
    pthread_barrier_wait(&t->go);
    t->share(ta->arg);
    pthread_barrier_wait(&t->done);
  }
  return NULL;
}

/* share(args[i]) on n threads at once (this one takes args[0]), `rounds`
 * times: the shortest round in wall-clock seconds, or -1 when the threads
 * cannot be started. */
static double together_run(int n, int rounds, void (*share)(void *),
                           void **args) {
  together t = {.state = 0, .rounds = rounds, .share = share};
  if (pthread_barrier_init(&t.go, NULL, (unsigned)n) != 0) return -1;
  if (pthread_barrier_init(&t.done, NULL, (unsigned)n) != 0) {
    pthread_barrier_destroy(&t.go);
    return -1;
  }
  pthread_mutex_init(&t.mu, NULL);
  pthread_cond_init(&t.cv, NULL);
  pthread_t *th = calloc((size_t)n, sizeof *th);
  together_arg *ta = calloc((size_t)n, sizeof *ta);
  int started = 1;
  if (th != NULL && ta != NULL)
    for (; started < n; started++) {
      ta[started] = (together_arg){&t, args[started]};
      if (pthread_create(&th[started], NULL, together_main, &ta[started]) != 0)
        break;
    }
  int ok = th != NULL && ta != NULL && started == n;
  pthread_mutex_lock(&t.mu);
  t.state = ok ? 1 : -1;
  pthread_cond_broadcast(&t.cv);
  pthread_mutex_unlock(&t.mu);
  double best = -1;
  for (int r = 0; ok && r < rounds; r++) {
    pthread_barrier_wait(&t.go);
    double t0 = cli_now_s();
    share(args[0]);
    pthread_barrier_wait(&t.done);
    double wall = cli_now_s() - t0;
    best = best < 0 ? wall : fmin(best, wall);
  }
  for (int i = 1; th != NULL && ta != NULL && i < started; i++)
    pthread_join(th[i], NULL);
  free(th);
  free(ta);
  pthread_barrier_destroy(&t.go);
  pthread_barrier_destroy(&t.done);
  pthread_cond_destroy(&t.cv);
  pthread_mutex_destroy(&t.mu);
  return best;
}

#if defined(__x86_64__)
static void run_peak_avx512(void *p) {
  (void)p;
  peak_gflops_avx512_run();
}
static void run_peak_avx2(void *p) {
  (void)p;
  peak_gflops_avx2_run();
}
#endif

/* What every CPU does at once: chunk mode, one stream per thread over the
 * one model (as aurald's workers and 'aural encode -j' run), and (where
 * peak is not NULL) the FMA peak of the kernels in use, all by wall
 * clock. A core's own figures do not show what the machine as a whole can
 * do where CPUs share a core's units or are given less than a whole
 * core. */
static int bench_all_cpus(const aural_model *m, size_t step, size_t n_frames,
                          int repeat, int n, enc_result *chunk,
                          double *peak) {
  chunk_share *sh = calloc((size_t)n, sizeof *sh);
  void **args = calloc((size_t)n, sizeof *args);
  int rc = sh != NULL && args != NULL ? 0 : -1, made = 0;
  if (rc < 0) fprintf(stderr, "aural bench: out of memory for %d streams\n", n);
  for (; rc == 0 && made < n; made++) {
    rc = chunk_share_init(&sh[made], m, step, n_frames);
    args[made] = &sh[made];
  }
  if (rc == 0) {
    double wall = together_run(n, repeat, run_chunk_share, args);
    if (wall <= 0) {
      fprintf(stderr, "aural bench: cannot start %d threads\n", n);
      rc = -1;
    } else {
      chunk->frames_per_s = (double)n * (double)sh[0].n_frames / wall;
      chunk->gflops =
          chunk->frames_per_s * (double)aural_model_flops_per_frame(m) / 1e9;
    }
  }
  if (peak != NULL) *peak = 0;
#if defined(__x86_64__)
  const char *isa = aural_isa_name();
  int avx512 = strcmp(isa, "avx512") == 0, avx2 = strcmp(isa, "avx2") == 0;
  if (rc == 0 && peak != NULL && (avx512 || avx2)) {
    void (*run_peak)(void *) = avx512 ? run_peak_avx512 : run_peak_avx2;
    int lanes = avx512 ? 16 : 8;
    double wall = together_run(n, 5, run_peak, args);
    if (wall > 0)
      *peak = (double)n * (double)PEAK_TURNS * 12 * lanes * 2 / wall / 1e9;
  }
#endif
  for (int i = 0; i < made; i++) chunk_share_free(&sh[i]);
  free(sh);
  free(args);
  return rc;
}

typedef struct enc_bench {
  const char *model_path; /* a model file, or NULL: the random one */
  synth_spec spec;        /* the random model; for a file, its shape */
  size_t chunk;
  double seconds;
  int repeat;
  double peak;            /* the FMA peak of the kernels in use (0: scalar) */
  double peak_avx512, peak_avx2;
  double peak_bf16; /* AVX512-BF16's dot-product peak (0: emulated) */
  uint64_t flops_per_frame, n_params;
  enc_result chunk_f32, frame_f32, chunk_f16, frame_f16;
  enc_result chunk_bf16, frame_bf16; /* precision bf16 */
  int bf16_native;                   /* with AVX512-BF16 (else emulated) */
  size_t bf16_dot_rows; /* products of up to this many rows with them */
  size_t streams;         /* streams per batched pass */
  enc_result batched_f32; /* all of them together, chunk mode */
  int cpus;               /* threads at once for the next three (1: none) */
  enc_result all_f32;     /* chunk mode, a stream per thread, all together */
  enc_result all_bf16;    /* the same in precision bf16 */
  double peak_all;        /* the FMA peak of all of them (0: scalar) */
} enc_bench;

static int bench_encoder(enc_bench *b) {
  size_t size = 0;
  unsigned char *file = NULL;
  if (b->model_path == NULL) {
    /* Not gigabytes of random weights for the loader to refuse: a file
     * over its limit on memory was written in full first (6.4 GiB and
     * 18 s for --d-model 8192), and one malloc could not hold failed
     * without a word. */
    uint64_t need = synth_model_tensor_bytes(&b->spec);
    if (need > AURAL_MODEL_DEFAULT_MAX_MEMORY) {
      fprintf(stderr, "aural bench: d_model %d, d_ff %d and %d layers need "
                      "%.1f GiB of weights; the limit is %.1f GiB\n",
              b->spec.d_model, b->spec.d_ff, b->spec.n_layers,
              (double)need / (1 << 30),
              (double)AURAL_MODEL_DEFAULT_MAX_MEMORY / (1 << 30));
      return -1;
    }
    if ((file = synth_model(&b->spec, &size)) == NULL) {
      fprintf(stderr, "aural bench: out of memory for the model\n");
      return -1;
    }
  }
  size_t frames = (size_t)(b->seconds * 100);
  /* f32 weights, f16 weights, then precision bf16. */
  for (int pass = 0; pass < 3; pass++) {
    int half = pass == 1;
    aural_model_load_config lc;
    aural_model_load_config_default(&lc);
    lc.weights = half ? AURAL_WEIGHTS_F16 : AURAL_WEIGHTS_F32;
    if (pass == 2) lc.precision = AURAL_PRECISION_BF16;
    aural_model *m;
    aural_err err;
    int lrc = b->model_path != NULL
                  ? aural_model_load(b->model_path, &lc, &m, &err)
                  : aural_model_load_buffer(file, size, "bench model", &lc,
                                            &m, &err);
    if (lrc < 0) {
      fprintf(stderr, "aural bench: %s\n", err.msg);
      free(file);
      return -1;
    }
    if (b->model_path != NULL) {
      const aural_model_config *mc = aural_model_get_config(m);
      b->spec.d_model = mc->d_model;
      b->spec.n_heads = mc->n_heads;
      b->spec.d_ff = mc->d_ff;
      b->spec.n_layers = mc->n_layers;
      b->spec.window = mc->window;
      b->spec.pos_encoding = cli_pos_name(mc->pos_encoding);
    }
    b->flops_per_frame = aural_model_flops_per_frame(m);
    b->n_params = aural_model_n_params(m);
    /* Frame mode is slower; a fifth of the frames measures it as well. */
    enc_result *chunk = pass == 0   ? &b->chunk_f32
                        : pass == 1 ? &b->chunk_f16
                                    : &b->chunk_bf16,
               *frame = pass == 0   ? &b->frame_f32
                        : pass == 1 ? &b->frame_f16
                                    : &b->frame_bf16;
    int rc = bench_encoder_mode(m, b->chunk, frames, b->repeat, chunk);
    if (rc == 0)
      rc = bench_encoder_mode(m, 1, frames / 5 + 1, b->repeat, frame);
    if (rc == 0 && pass == 0 && b->streams > 1)
      rc = bench_batched(m, b->chunk, b->streams, frames, b->repeat,
                         &b->batched_f32);
    if (rc == 0 && pass != 1 && b->cpus > 1)
      rc = bench_all_cpus(m, b->chunk, frames, b->repeat, b->cpus,
                          pass == 0 ? &b->all_f32 : &b->all_bf16,
                          pass == 0 ? &b->peak_all : NULL);
    aural_model_free(m);
    if (rc < 0) {
      free(file);
      return -1;
    }
  }
  free(file);
  b->bf16_native = aural_model_bf16_native();
  b->bf16_dot_rows = aural_model_bf16_dot_rows();
  peak_gflops(&b->peak_avx512, &b->peak_avx2);
#if defined(__x86_64__)
  b->peak_bf16 = b->bf16_native ? peak_gflops_bf16() : 0.0;
#endif
  const char *isa = aural_isa_name();
  b->peak = strcmp(isa, "avx512") == 0 ? b->peak_avx512
            : strcmp(isa, "avx2") == 0 ? b->peak_avx2
                                       : 0.0;
  return 0;
}

/* Writes the random model the flags describe, for benchmarks that need a
 * file (aurald, aural load). */
static int save_model(const synth_spec *spec, const char *path) {
  size_t size;
  unsigned char *file = synth_model(spec, &size);
  if (file == NULL) {
    fprintf(stderr, "aural bench: out of memory for the model\n");
    return EXIT_FAIL;
  }
  FILE *f = fopen(path, "wb");
  int ok = f != NULL && fwrite(file, 1, size, f) == size;
  if (f != NULL && fclose(f) != 0) ok = 0;
  free(file);
  if (!ok) {
    fprintf(stderr, "aural bench: cannot write %s: %s\n", path,
            strerror(errno));
    return EXIT_FAIL;
  }
  printf("%s: random model, d_model %d, %d heads, d_ff %d, %d layers, "
         "window %d, %s (%zu bytes)\n",
         path, spec->d_model, spec->n_heads, spec->d_ff, spec->n_layers,
         spec->window, spec->pos_encoding, size);
  return EXIT_OK;
}

/* The results as one JSON object, with the words suite's member first
 * when it ran (words: its '"words": {...}', or NULL). bf16's dot_rows is
 * aural_model_bf16_dot_rows(), -1 where the dot products take every size. */
static void print_bench_json(const enc_bench *eb, const frontend_case *cases,
                             size_t n_cases, int run_enc, int run_fe,
                             const char *words) {
  /* The model file's path as a JSON string (escaped), or null. */
  char *file_json = eb->model_path ? json_string(eb->model_path) : NULL;
  printf("{");
  if (words != NULL) printf("%s%s", words, run_enc || run_fe ? ", " : "");
  if (run_enc)
    printf("\"isa\": \"%s\", \"gemm\": \"%s\", \"peak_gflops\": %.1f, "
           "\"peak_gflops_avx512\": %.1f, \"peak_gflops_avx2\": %.1f, "
           "\"peak_gflops_bf16\": %.1f, "
           "\"model\": {\"d_model\": "
           "%d, \"n_heads\": %d, \"d_ff\": %d, \"n_layers\": %d, \"window\": "
           "%d, \"pos_encoding\": \"%s\", \"n_params\": %llu, "
           "\"file\": %s}, "
           "\"flops_per_frame\": %llu, \"chunk_frames\": %zu, "
           "\"chunk_frames_per_s\": %.1f, \"chunk_gflops\": %.2f, "
           "\"frame_frames_per_s\": %.1f, \"frame_gflops\": %.2f, "
           "\"f16\": {\"chunk_frames_per_s\": %.1f, \"chunk_gflops\": %.2f, "
           "\"frame_frames_per_s\": %.1f, \"frame_gflops\": %.2f}, "
           "\"bf16\": {\"native\": %s, \"dot_rows\": %lld, "
           "\"chunk_frames_per_s\": %.1f, "
           "\"chunk_gflops\": %.2f, \"frame_frames_per_s\": %.1f, "
           "\"frame_gflops\": %.2f}, "
           "\"batched\": {\"streams\": %zu, \"frames_per_s\": %.1f, "
           "\"gflops\": %.2f}, "
           "\"all_cpus\": {\"cpus\": %d, \"chunk_frames_per_s\": %.1f, "
           "\"chunk_gflops\": %.2f, \"peak_gflops\": %.1f, "
           "\"bf16_chunk_frames_per_s\": %.1f}%s",
           aural_isa_name(), aural_gemm_name(), eb->peak, eb->peak_avx512,
           eb->peak_avx2, eb->peak_bf16, eb->spec.d_model, eb->spec.n_heads,
           eb->spec.d_ff, eb->spec.n_layers, eb->spec.window,
           eb->spec.pos_encoding, (unsigned long long)eb->n_params,
           file_json != NULL ? file_json : "null",
           (unsigned long long)eb->flops_per_frame, eb->chunk,
           eb->chunk_f32.frames_per_s, eb->chunk_f32.gflops,
           eb->frame_f32.frames_per_s, eb->frame_f32.gflops,
           eb->chunk_f16.frames_per_s, eb->chunk_f16.gflops,
           eb->frame_f16.frames_per_s, eb->frame_f16.gflops,
           eb->bf16_native ? "true" : "false",
           eb->bf16_dot_rows == SIZE_MAX ? -1LL : (long long)eb->bf16_dot_rows,
           eb->chunk_bf16.frames_per_s,
           eb->chunk_bf16.gflops, eb->frame_bf16.frames_per_s,
           eb->frame_bf16.gflops, eb->streams,
           eb->batched_f32.frames_per_s, eb->batched_f32.gflops, eb->cpus,
           eb->all_f32.frames_per_s, eb->all_f32.gflops, eb->peak_all,
           eb->all_bf16.frames_per_s,
           run_fe ? ", " : "");
  if (run_fe) {
    printf("\"frontend\": [");
    for (size_t i = 0; i < n_cases; i++)
      printf("%s{\"rate_hz\": %.0f, \"channels\": %d, \"push_ms\": 10, "
             "\"frames\": %zu, \"cpu_us_per_frame\": %.3f, "
             "\"wall_us_per_frame\": %.3f}",
             i ? ", " : "", cases[i].rate_hz, cases[i].n_channels,
             cases[i].n_frames, cases[i].us_per_frame,
             cases[i].wall_us_per_frame);
    printf("]");
  }
  printf("}\n");
  free(file_json);
}

/* The results as lines of text. */
static void print_bench_table(const enc_bench *eb,
                              const frontend_case *cases, size_t n_cases,
                              int run_enc, int run_fe) {
  if (run_enc) {
    printf("encoder%s%s: d_model %d, %d heads, d_ff %d, %d layers, W %d, %s; "
           "%.2f M parameters, %.2f MFLOP per frame\n",
           eb->model_path ? " " : "", eb->model_path ? eb->model_path : "",
           eb->spec.d_model, eb->spec.n_heads, eb->spec.d_ff, eb->spec.n_layers,
           eb->spec.window, eb->spec.pos_encoding, (double)eb->n_params / 1e6,
           (double)eb->flops_per_frame / 1e6);
    printf("  kernels: %s (AURAL_ISA chooses): %s\n", aural_isa_name(),
           aural_gemm_name());
    printf("  this core's FMA peak: AVX-512 %.0f GFLOP/s, AVX2 %.0f GFLOP/s; "
           "%% of peak: %s\n",
           eb->peak_avx512, eb->peak_avx2,
           eb->peak > 0 ? (strcmp(aural_isa_name(), "avx2") ? "of AVX-512's"
                                                            : "of AVX2's")
                        : "none for the scalar kernels");
    const struct {
      const char *name;
      const enc_result *r;
    } rows[] = {{"chunk f32", &eb->chunk_f32}, {"frame f32", &eb->frame_f32},
                {"chunk f16", &eb->chunk_f16}, {"frame f16", &eb->frame_f16},
                {"chunk bf16", &eb->chunk_bf16}, {"frame bf16", &eb->frame_bf16}};
    for (size_t i = 0; i < 6; i++) {
      /* bf16 with the dot products: against their own peak. */
      size_t n_rows = i % 2 == 0 ? eb->chunk : 1;
      double peak = i >= 4 && eb->peak_bf16 > 0 && n_rows <= eb->bf16_dot_rows
                        ? eb->peak_bf16
                        : eb->peak;
      printf("  %s: %8.0f frames/s  %6.1f GFLOP/s (%2.0f%% of peak), "
             "%.0f real-time streams\n",
             rows[i].name, rows[i].r->frames_per_s, rows[i].r->gflops,
             peak > 0 ? 100 * rows[i].r->gflops / peak : 0.0,
             rows[i].r->frames_per_s / 100);
    }
    if (eb->peak_bf16 > 0 && eb->bf16_dot_rows == SIZE_MAX)
      printf("  (bf16: precision bf16, AVX512-BF16 dot products; %% of their "
             "peak, %.0f GFLOP/s)\n",
             eb->peak_bf16);
    else if (eb->peak_bf16 > 0)
      printf("  (bf16: precision bf16, AVX512-BF16 dot products for products "
             "of up to %zu rows, %% of their peak, %.0f GFLOP/s; more rows "
             "emulated by the f32 kernels, faster on this CPU, %% of the FMA "
             "peak)\n",
             eb->bf16_dot_rows, eb->peak_bf16);
    else
      printf("  (bf16: precision bf16, emulated by the f32 kernels, without "
             "AVX512-BF16's dot products; %% of the FMA peak)\n");
    if (eb->streams > 1)
      printf("  %zu streams batched, chunk f32: %8.0f frames/s  %6.1f GFLOP/s "
             "(%2.0f%% of peak), %.0f real-time streams\n",
             eb->streams, eb->batched_f32.frames_per_s, eb->batched_f32.gflops,
             eb->peak > 0 ? 100 * eb->batched_f32.gflops / eb->peak : 0.0,
             eb->batched_f32.frames_per_s / 100);
    if (eb->cpus > 1) {
      printf("  %d CPUs at once, a stream each, chunk f32: %8.0f frames/s "
             "(%.2fx one thread), %.0f real-time streams\n",
             eb->cpus, eb->all_f32.frames_per_s,
             eb->all_f32.frames_per_s / eb->chunk_f32.frames_per_s,
             eb->all_f32.frames_per_s / 100);
      printf("  %d CPUs at once, a stream each, chunk bf16: %7.0f frames/s "
             "(%.2fx one thread), %.0f real-time streams\n",
             eb->cpus, eb->all_bf16.frames_per_s,
             eb->all_bf16.frames_per_s / eb->chunk_bf16.frames_per_s,
             eb->all_bf16.frames_per_s / 100);
      if (eb->peak_all > 0)
        printf("  %d CPUs at once, FMA peak: %.0f GFLOP/s (%.2fx this "
               "core's; chunk f32 at %.0f%% of it)\n",
               eb->cpus, eb->peak_all, eb->peak_all / eb->peak,
               100 * eb->all_f32.gflops / eb->peak_all);
    }
  }
  if (run_fe) {
    printf("frontend, 10 ms per push, one thread, best of %d over %.0f s of "
           "audio:\n",
           eb->repeat, eb->seconds);
    for (size_t i = 0; i < n_cases; i++)
      printf("  %6.0f Hz x%d: %6.2f us CPU per frame (%.0fx real time)\n",
             cases[i].rate_hz, cases[i].n_channels, cases[i].us_per_frame,
             1e4 / cases[i].us_per_frame);
  }
}

int cmd_bench(int argc, char **argv) {
  /* O_D .. O_POS, together, are the random model's flags. */
  enum { O_SECONDS = 256, O_REPEAT, O_JSON, O_D, O_HEADS, O_FF, O_LAYERS,
         O_WINDOW, O_POS, O_CHUNK, O_STREAMS, O_CPUS, O_SAVE, O_LEXICON, O_LM,
         O_BEAM };
  static const struct option opts[] = {
      {"seconds", required_argument, NULL, O_SECONDS},
      {"model", required_argument, NULL, 'm'},
      {"repeat", required_argument, NULL, O_REPEAT},
      {"json", no_argument, NULL, O_JSON},
      {"d-model", required_argument, NULL, O_D},
      {"heads", required_argument, NULL, O_HEADS},
      {"d-ff", required_argument, NULL, O_FF},
      {"layers", required_argument, NULL, O_LAYERS},
      {"window", required_argument, NULL, O_WINDOW},
      {"pos", required_argument, NULL, O_POS},
      {"chunk", required_argument, NULL, O_CHUNK},
      {"streams", required_argument, NULL, O_STREAMS},
      {"cpus", required_argument, NULL, O_CPUS},
      {"save-model", required_argument, NULL, O_SAVE},
      {"lexicon", required_argument, NULL, O_LEXICON},
      {"lm", required_argument, NULL, O_LM},
      {"beam", required_argument, NULL, O_BEAM},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  enc_bench eb = {.chunk = 50, .seconds = 20, .repeat = 3, .streams = 8,
                  .cpus = cli_cpus_available()};
  synth_spec_base(&eb.spec);
  int json = 0, c, li, model_flags = 0;
  size_t v = 0;
  const char *save = NULL, *lexicon = NULL, *lm = NULL;
  size_t beam = 0; /* the decoder's default */
  /* The last option given that only one suite, or only a measurement,
   * uses: checked against the suites once they are known. */
  const char *model_flag = NULL, *enc_only = NULL, *words_only = NULL,
             *measure_only = NULL;
  optind = 1;
  while ((li = -1, c = getopt_long(argc, argv, "m:h", opts, &li)) != -1) {
    int bad = 0;
    size_t lo = 1, hi = 0; /* the range of the value parsed, for a message */
    if (c >= O_D && c <= O_POS) model_flags = 1;
    if (li >= 0 && c >= O_D && c <= O_POS) model_flag = opts[li].name;
    if (li >= 0 && c >= O_CHUNK && c <= O_CPUS) enc_only = opts[li].name;
    if (li >= 0 && c >= O_LEXICON && c <= O_BEAM) words_only = opts[li].name;
    if (li >= 0 && c >= O_SECONDS && c <= O_JSON) measure_only = opts[li].name;
    switch (c) {
    case 'm': eb.model_path = optarg; break;
    case O_SECONDS:
      hi = 3600;
      bad = cli_parse_size(optarg, lo, hi, &v);
      eb.seconds = (double)v;
      break;
    case O_REPEAT:
      hi = 100;
      bad = cli_parse_size(optarg, lo, hi, &v);
      eb.repeat = (int)v;
      break;
    case O_JSON: json = 1; break;
#define DIM(opt, field, min, max)                \
  case opt:                                      \
    lo = min, hi = max;                          \
    bad = cli_parse_size(optarg, lo, hi, &v);    \
    eb.spec.field = (int)v;                      \
    break;
      DIM(O_D, d_model, 2, 8192)
      DIM(O_HEADS, n_heads, 1, 1024)
      DIM(O_FF, d_ff, 1, 65536)
      DIM(O_LAYERS, n_layers, 1, 256)
      DIM(O_WINDOW, window, 1, 100000)
#undef DIM
    case O_CHUNK:
      hi = 4096;
      bad = cli_parse_size(optarg, lo, hi, &eb.chunk);
      break;
    case O_STREAMS:
      hi = 64;
      bad = cli_parse_size(optarg, lo, hi, &eb.streams);
      break;
    case O_CPUS:
      hi = 1024;
      bad = cli_parse_size(optarg, lo, hi, &v);
      eb.cpus = (int)v;
      break;
    case O_POS:
      if (strcmp(optarg, "rope") && strcmp(optarg, "sinusoidal") &&
          strcmp(optarg, "none"))
        bad = -1;
      eb.spec.pos_encoding = optarg;
      break;
    case O_SAVE: save = optarg; break;
    case O_LEXICON: lexicon = optarg; break;
    case O_LM: lm = optarg; break;
    case O_BEAM:
      hi = 4096;
      bad = cli_parse_size(optarg, lo, hi, &beam);
      break;
    case 'h': usage(stdout); return EXIT_OK;
    default:
      fprintf(stderr, "(see 'aural bench --help')\n");
      return EXIT_USAGE;
    }
    if (bad) {
      const char *name = "?";
      for (size_t i = 0; opts[i].name != NULL; i++)
        if (opts[i].val == c) name = opts[i].name;
      /* The bound is told: --help gives only the defaults. */
      if (hi > 0)
        fprintf(stderr, "aural bench: --%s %s: expected an integer in "
                        "%zu..%zu\n", name, optarg, lo, hi);
      else
        fprintf(stderr, "aural bench: --%s %s: expected rope, sinusoidal "
                        "or none\n", name, optarg);
      return EXIT_USAGE;
    }
  }
  if (eb.model_path != NULL && (model_flags || save != NULL)) {
    fprintf(stderr, "aural bench: -m measures a model file; the model flags "
                    "and --save-model describe a random one\n");
    return EXIT_USAGE;
  }
  if (eb.spec.d_model % eb.spec.n_heads != 0) {
    fprintf(stderr, "aural bench: --heads %d does not divide --d-model %d\n",
            eb.spec.n_heads, eb.spec.d_model);
    return EXIT_USAGE;
  }
  if (save != NULL && (optind < argc || enc_only != NULL ||
                       words_only != NULL || measure_only != NULL)) {
    /* It writes the model and exits: whatever else was asked would be
     * left undone without a word. */
    fprintf(stderr,
            "aural bench: --save-model writes a model and measures nothing: "
            "not with %s%s\n(see 'aural bench --help')\n",
            optind < argc ? "a SUITE such as " : "--",
            optind < argc      ? argv[optind]
            : enc_only != NULL   ? enc_only
            : words_only != NULL ? words_only
                                 : measure_only);
    return EXIT_USAGE;
  }
  if (save != NULL) return save_model(&eb.spec, save);
  int run_enc = optind == argc, run_fe = optind == argc, run_words = 0;
  for (int i = optind; i < argc; i++) {
    if (strcmp(argv[i], "encoder") == 0) {
      run_enc = 1;
    } else if (strcmp(argv[i], "frontend") == 0) {
      run_fe = 1;
    } else if (strcmp(argv[i], "words") == 0) {
      run_words = 1;
    } else {
      fprintf(stderr,
              "aural bench: unknown suite '%s' (known: encoder, frontend, "
              "words)\n",
              argv[i]);
      return EXIT_USAGE;
    }
  }

  /* An option that no suite run uses would be ignored, and the user left
   * to think it measured what was asked. */
  const char *unused = NULL, *needs = NULL;
  if (!run_enc && (enc_only != NULL || model_flag != NULL)) {
    unused = enc_only != NULL ? enc_only : model_flag;
    needs = "the encoder suite";
  } else if (!run_words && words_only != NULL) {
    unused = words_only;
    needs = "the words suite (named: it runs only then)";
  } else if (!run_enc && !run_words && eb.model_path != NULL) {
    unused = "model";
    needs = "the encoder or words suite";
  }
  if (needs != NULL) {
    fprintf(stderr, "aural bench: --%s needs %s\n(see 'aural bench --help')\n",
            unused, needs);
    return EXIT_USAGE;
  }
  char *words_json = NULL;
  if (run_words &&
      bench_words(eb.model_path ? eb.model_path : cli_default_model(),
                  lexicon, lm, (int)beam, eb.seconds, eb.repeat,
                  json ? &words_json : NULL) < 0)
    return EXIT_FAIL;
  if (!run_enc && !run_fe) {
    if (words_json != NULL) printf("{%s}\n", words_json);
    free(words_json);
    return EXIT_OK;
  }
  frontend_case cases[] = {{16000, 1, 0, 0, 0}, {44100, 2, 0, 0, 0},
                           {48000, 1, 0, 0, 0}};
  size_t n_cases = sizeof cases / sizeof cases[0];
  if (run_fe)
    for (size_t i = 0; i < n_cases; i++)
      if (bench_frontend_case(&cases[i], eb.seconds, eb.repeat) < 0) {
        free(words_json);
        return EXIT_FAIL;
      }
  if (run_enc && bench_encoder(&eb) < 0) {
    free(words_json);
    return EXIT_FAIL;
  }

  if (json)
    print_bench_json(&eb, cases, n_cases, run_enc, run_fe, words_json);
  else print_bench_table(&eb, cases, n_cases, run_enc, run_fe);
  free(words_json);
  return EXIT_OK;
}
