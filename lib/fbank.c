/*
 * Kaldi-compatible log-mel filterbank, computed one frame at a time.
 *
 * The steps and their order follow torchaudio.compliance.kaldi.fbank, which
 * is the reference: scale, remove the frame's mean, pre-emphasis (the first
 * sample is emphasised against itself), window, zero-pad to the FFT size,
 * power spectrum, triangular mel filters on the mel scale
 * 1127 ln(1 + f/700), and the natural log floored at FLT_EPSILON.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "aural/fbank.h"
#include "aural/resampler.h"
#include "internal.h"

void aural_fbank_opts_default(aural_fbank_opts *opts) {
  *opts = (aural_fbank_opts){
      .sample_rate_hz = 16000.0,
      .num_mel_bins = 80,
      .frame_length_ms = 25.0,
      .frame_shift_ms = 10.0,
      .dither = 0.0,
      .preemphasis_coefficient = 0.97,
      .remove_dc_offset = true,
      .window_type = AURAL_WINDOW_POVEY,
      .round_to_power_of_two = true,
      .snip_edges = true,
      .low_freq = 20.0,
      .high_freq = 0.0,
      .use_power = true,
      .use_log_fbank = true,
      .use_energy = false,
      .input_scale = 32768.0,
  };
}

/* Same expression and evaluation order as torchaudio, so that the
 * truncation lands on the same integer. */
static double samples_of_ms(double rate_hz, double ms) {
  return rate_hz * ms * 0.001;
}

/* The count truncated, or 0 where it is negative, NaN or beyond size_t:
 * options that were never validated must not reach a conversion the C
 * standard leaves undefined. ((double)SIZE_MAX is 2^64.) */
static size_t samples_count(double rate_hz, double ms) {
  double x = samples_of_ms(rate_hz, ms);
  return x >= 0 && x < (double)SIZE_MAX ? (size_t)x : 0;
}

size_t aural_fbank_window_samples(const aural_fbank_opts *opts) {
  return samples_count(opts->sample_rate_hz, opts->frame_length_ms);
}

size_t aural_fbank_hop_samples(const aural_fbank_opts *opts) {
  return samples_count(opts->sample_rate_hz, opts->frame_shift_ms);
}

size_t aural_fbank_n_frames(const aural_fbank_opts *opts, size_t n_samples) {
  size_t win = aural_fbank_window_samples(opts);
  size_t hop = aural_fbank_hop_samples(opts);
  if (win == 0 || hop == 0 || n_samples < win) return 0;
  return 1 + (n_samples - win) / hop;
}

static const char *const window_names[] = {
    [AURAL_WINDOW_POVEY] = "povey",
    [AURAL_WINDOW_HANNING] = "hanning",
    [AURAL_WINDOW_HAMMING] = "hamming",
    [AURAL_WINDOW_RECTANGULAR] = "rectangular",
    [AURAL_WINDOW_BLACKMAN] = "blackman",
};

#define MAX_WINDOW_SAMPLES 65536
#define MAX_MEL_BINS 1024

int aural_fbank_opts_validate(const aural_fbank_opts *o, aural_err *err) {
  const char *bad = "aural.config: frontend option";
  if (o == NULL)
    return aural__err_set(err, AURAL_EINVAL, "fbank: no options");
  if (!(o->sample_rate_hz >= AURAL_RATE_MIN_HZ &&
        o->sample_rate_hz <= AURAL_RATE_MAX_HZ))
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s sample_rate = %.10g Hz is outside %g..%g", bad,
                          o->sample_rate_hz, AURAL_RATE_MIN_HZ,
                          AURAL_RATE_MAX_HZ);
  /* torchaudio's get_mel_banks asserts num_bins > 3. */
  if (o->num_mel_bins < 4 || o->num_mel_bins > MAX_MEL_BINS)
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s num_mel_bins = %d is outside 4..%d", bad,
                          o->num_mel_bins, MAX_MEL_BINS);
  if (!(o->frame_length_ms > 0) || !(o->frame_shift_ms > 0) ||
      !(o->frame_length_ms < 1e4) || !(o->frame_shift_ms < 1e4))
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s frame_length = %g ms / frame_shift = %g ms must "
                          "be positive and below 10 s",
                          bad, o->frame_length_ms, o->frame_shift_ms);
  size_t win = aural_fbank_window_samples(o);
  size_t hop = aural_fbank_hop_samples(o);
  if (win < 2 || win > MAX_WINDOW_SAMPLES)
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s frame_length gives %zu samples per window; "
                          "2..%d are supported",
                          bad, win, MAX_WINDOW_SAMPLES);
  /* torchaudio refuses an odd FFT size: its mel banks cover n_fft / 2
   * bins, and that must be a whole number. */
  if (!o->round_to_power_of_two && win % 2 != 0)
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s frame_length gives an odd window of %zu "
                          "samples, and with round_to_power_of_two = false "
                          "that is the FFT size, which must be even",
                          bad, win);
  if (hop < 1 || hop > win)
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s frame_shift gives %zu samples per hop; 1..%zu "
                          "(the window) are supported",
                          bad, hop, win);
  if (o->dither != 0.0)
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s dither = %g: only 0 is supported (features must "
                          "be deterministic)",
                          bad, o->dither);
  if (!(o->preemphasis_coefficient >= 0 && o->preemphasis_coefficient <= 1))
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s preemphasis_coefficient = %g is outside 0..1",
                          bad, o->preemphasis_coefficient);
  if ((unsigned)o->window_type > AURAL_WINDOW_BLACKMAN)
    return aural__err_set(err, AURAL_ECONFIG, "%s window_type %d is unknown",
                          bad, (int)o->window_type);
  if (!o->snip_edges)
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s snip_edges = false is not supported (a stream "
                          "cannot reflect samples it has not seen yet)",
                          bad);
  if (o->use_energy)
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s use_energy = true is not supported", bad);
  double nyquist = o->sample_rate_hz / 2;
  double high = o->high_freq > 0 ? o->high_freq : nyquist + o->high_freq;
  if (!(o->low_freq >= 0 && o->low_freq < high && high <= nyquist))
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s low_freq = %g / high_freq = %g: need 0 <= low < "
                          "high <= Nyquist (%g Hz)",
                          bad, o->low_freq, o->high_freq, nyquist);
  if (!(o->input_scale > 0 && isfinite(o->input_scale)))
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s input_scale = %g must be positive and finite",
                          bad, o->input_scale);
  return 0;
}

/* Reads a number field if present. */
static int json_number(const aural_json *js, const char *key, double *out,
                       aural_err *err) {
  int it = aural_json_get(js, 0, key);
  if (it < 0) return 0;
  if (aural_json_double(js, it, out) != 0)
    return aural__err_set(err, AURAL_ECONFIG,
                          "aural.config: field \"%s\" must be a number", key);
  return 0;
}

static int json_bool(const aural_json *js, const char *key, bool *out,
                     aural_err *err) {
  int it = aural_json_get(js, 0, key);
  if (it < 0) return 0;
  if (aural_json_bool(js, it, out) != 0)
    return aural__err_set(err, AURAL_ECONFIG,
                          "aural.config: field \"%s\" must be true or false",
                          key);
  return 0;
}

int aural_fbank_opts_from_json(aural_fbank_opts *opts, const char *json,
                               size_t json_len, aural_err *err) {
  if (opts == NULL)
    return aural__err_set(err, AURAL_EINVAL, "fbank: no options");
  if (json == NULL && json_len > 0)
    return aural__err_set(err, AURAL_EINVAL,
                          "aural.config: no JSON text (NULL, %zu bytes)",
                          json_len);
  aural__json *doc;
  char why[256];
  int rc = aural__json_parse(&doc, json, json_len, why, sizeof why);
  if (rc < 0)
    return aural__err_set(err, rc == AURAL_ENOMEM ? rc : AURAL_ECONFIG,
                          "aural.config: not valid JSON: %s", why);
  const aural_json *js = &doc->js;
  aural_fbank_opts o = *opts;
  double mel = o.num_mel_bins;
  if (!aural__json_is(js, 0, AURAL_JSON_OBJECT))
    rc = aural__err_set(err, AURAL_ECONFIG,
                        "aural.config: must be a JSON object");
  if (rc == 0) rc = json_number(js, "sample_rate", &o.sample_rate_hz, err);
  if (rc == 0) rc = json_number(js, "num_mel_bins", &mel, err);
  if (rc == 0 && (mel != floor(mel) || !(fabs(mel) < 1e6)))
    rc = aural__err_set(err, AURAL_ECONFIG,
                        "aural.config: field \"num_mel_bins\" must be an "
                        "integer");
  if (rc == 0) o.num_mel_bins = (int)mel;
  if (rc == 0) rc = json_number(js, "frame_length", &o.frame_length_ms, err);
  if (rc == 0) rc = json_number(js, "frame_shift", &o.frame_shift_ms, err);
  if (rc == 0) rc = json_number(js, "dither", &o.dither, err);
  if (rc == 0)
    rc = json_number(js, "preemphasis_coefficient",
                     &o.preemphasis_coefficient, err);
  if (rc == 0)
    rc = json_bool(js, "remove_dc_offset", &o.remove_dc_offset, err);
  if (rc == 0)
    rc = json_bool(js, "round_to_power_of_two", &o.round_to_power_of_two,
                   err);
  if (rc == 0) rc = json_bool(js, "snip_edges", &o.snip_edges, err);
  if (rc == 0) rc = json_number(js, "low_freq", &o.low_freq, err);
  if (rc == 0) rc = json_number(js, "high_freq", &o.high_freq, err);
  if (rc == 0) rc = json_bool(js, "use_power", &o.use_power, err);
  if (rc == 0) rc = json_bool(js, "use_log_fbank", &o.use_log_fbank, err);
  if (rc == 0) rc = json_bool(js, "use_energy", &o.use_energy, err);
  if (rc == 0) rc = json_number(js, "input_scale", &o.input_scale, err);
  int wt = aural_json_get(js, 0, "window_type");
  if (rc == 0 && wt >= 0) {
    int found = -1;
    for (int i = 0; i <= AURAL_WINDOW_BLACKMAN; i++)
      if (aural__json_string_is(js, wt, window_names[i])) found = i;
    if (found < 0)
      rc = aural__err_set(err, AURAL_ECONFIG,
                          "aural.config: field \"window_type\" must be one of "
                          "povey, hanning, hamming, rectangular, blackman");
    else
      o.window_type = (aural_window_type)found;
  }
  aural__json_free(doc);
  if (rc == 0) rc = aural_fbank_opts_validate(&o, err);
  if (rc == 0) *opts = o;
  return rc;
}

static double mel_scale(double hz) { return 1127.0 * log(1.0 + hz / 700.0); }

/* Window function values as torchaudio's _feature_window_function. */
static void fill_window(double *w, size_t n, aural_window_type type) {
  double a = 2.0 * M_PI / (double)(n - 1);
  for (size_t i = 0; i < n; i++) {
    double hann = 0.5 - 0.5 * cos(a * (double)i);
    switch (type) {
    case AURAL_WINDOW_POVEY: w[i] = pow(hann, 0.85); break;
    case AURAL_WINDOW_HANNING: w[i] = hann; break;
    case AURAL_WINDOW_HAMMING:
      w[i] = 0.54 - 0.46 * cos(a * (double)i);
      break;
    case AURAL_WINDOW_RECTANGULAR: w[i] = 1.0; break;
    case AURAL_WINDOW_BLACKMAN:
      w[i] = 0.42 - 0.5 * cos(a * (double)i) + 0.08 * cos(2.0 * a * (double)i);
      break;
    }
  }
}

/* The mel filters: triangles evenly spaced on the mel scale between low
 * and high, evaluated at the centre frequency of each FFT bin. Sets each
 * filter's mel_lo, mel_n and mel_at, stores its nonzero weights in
 * fb->mel_w when that is allocated, and returns how many there are. Run
 * once to count and once to fill, so that mel_w holds the nonzero
 * weights alone (about two per FFT bin, as neighbouring triangles
 * overlap by half), never n_mels x n_bins: that was 256 MiB per frontend
 * for 1024 bins and a window of 65536 samples, both allowed. */
static size_t mel_filters(aural__fbank *fb, size_t n_bins) {
  const aural_fbank_opts *o = &fb->opts;
  double nyquist = o->sample_rate_hz / 2;
  double high = o->high_freq > 0 ? o->high_freq : nyquist + o->high_freq;
  double mel_low = mel_scale(o->low_freq), mel_high = mel_scale(high);
  double delta = (mel_high - mel_low) / (fb->n_mels + 1);
  double bin_hz = o->sample_rate_hz / (double)fb->n_fft;
  size_t at = 0;
  for (int m = 0; m < fb->n_mels; m++) {
    double left = mel_low + m * delta, centre = left + delta,
           right = centre + delta;
    fb->mel_at[m] = at;
    fb->mel_lo[m] = 0;
    fb->mel_n[m] = 0;
    for (size_t k = 0; k < n_bins; k++) {
      double mel = mel_scale(bin_hz * (double)k);
      double up = (mel - left) / (centre - left);
      double down = (right - mel) / (right - centre);
      double w = fmax(0.0, fmin(up, down));
      if (w <= 0.0) continue;
      if (fb->mel_n[m] == 0) fb->mel_lo[m] = k;
      /* Triangles are convex, so nonzero weights are consecutive. */
      if (fb->mel_w != NULL) fb->mel_w[at] = w;
      at++;
      fb->mel_n[m] = k + 1 - fb->mel_lo[m];
    }
  }
  return at;
}

/* FFTW's planner is not thread-safe; the library makes it so once, so that
 * objects may be created from any thread. Execution of a plan is. */
static pthread_once_t planner_once = PTHREAD_ONCE_INIT;
static void make_planner_thread_safe(void) {
  fftw_make_planner_thread_safe();
}

int aural__fbank_init(aural__fbank *fb, const aural_fbank_opts *opts,
                      aural_err *err) {
  memset(fb, 0, sizeof *fb);
  int rc = aural_fbank_opts_validate(opts, err);
  if (rc < 0) return rc;
  fb->opts = *opts;
  fb->win = aural_fbank_window_samples(opts);
  fb->hop = aural_fbank_hop_samples(opts);
  fb->n_mels = opts->num_mel_bins;
  fb->n_fft = fb->win;
  if (opts->round_to_power_of_two) {
    fb->n_fft = 1;
    while (fb->n_fft < fb->win) fb->n_fft *= 2;
  }
  size_t n_bins = fb->n_fft / 2; /* the Nyquist bin has no weight */

  fb->window = malloc(fb->win * sizeof *fb->window);
  fb->mel_lo = calloc((size_t)fb->n_mels, sizeof *fb->mel_lo);
  fb->mel_n = calloc((size_t)fb->n_mels, sizeof *fb->mel_n);
  fb->mel_at = calloc((size_t)fb->n_mels, sizeof *fb->mel_at);
  fb->fft_in = fftw_alloc_real(fb->n_fft);
  fb->fft_out = fftw_alloc_complex(n_bins + 1);
  if (fb->mel_lo && fb->mel_n && fb->mel_at) {
    size_t n_weights = mel_filters(fb, n_bins);
    fb->mel_w = malloc((n_weights ? n_weights : 1) * sizeof *fb->mel_w);
  }
  if (!fb->window || !fb->mel_lo || !fb->mel_n || !fb->mel_at || !fb->mel_w ||
      !fb->fft_in || !fb->fft_out) {
    aural__fbank_free(fb);
    return aural__err_set(err, AURAL_ENOMEM, "fbank: out of memory");
  }
  fill_window(fb->window, fb->win, opts->window_type);
  mel_filters(fb, n_bins);

  pthread_once(&planner_once, make_planner_thread_safe);
  fb->plan = fftw_plan_dft_r2c_1d((int)fb->n_fft, fb->fft_in, fb->fft_out,
                                   FFTW_ESTIMATE | FFTW_DESTROY_INPUT);
  if (fb->plan == NULL) {
    aural__fbank_free(fb);
    return aural__err_set(err, AURAL_EFFT, "fbank: FFTW could not plan a "
                          "real FFT of size %zu", fb->n_fft);
  }
  return 0;
}

void aural__fbank_compute(aural__fbank *fb, const float *samples, float *out) {
  const aural_fbank_opts *o = &fb->opts;
  double *x = fb->fft_in;
  size_t win = fb->win;

  /* Scale and remove the DC offset (mean over the window). */
  double sum = 0.0;
  for (size_t i = 0; i < win; i++) {
    x[i] = (double)samples[i] * o->input_scale;
    sum += x[i];
  }
  if (o->remove_dc_offset) {
    double mean = sum / (double)win;
    for (size_t i = 0; i < win; i++) x[i] -= mean;
  }

  /* Pre-emphasis, last sample first so each uses the unmodified previous
   * one; sample 0 is emphasised against itself (replicate padding). */
  double c = o->preemphasis_coefficient;
  if (c != 0.0) {
    for (size_t i = win - 1; i > 0; i--) x[i] -= c * x[i - 1];
    x[0] -= c * x[0];
  }

  for (size_t i = 0; i < win; i++) x[i] *= fb->window[i];
  for (size_t i = win; i < fb->n_fft; i++) x[i] = 0.0;

  fftw_execute_dft_r2c(fb->plan, x, fb->fft_out);

  /* Power (or magnitude) spectrum, reusing the input buffer. */
  size_t n_bins = fb->n_fft / 2;
  double *spec = x;
  for (size_t k = 0; k < n_bins; k++) {
    double re = fb->fft_out[k][0], im = fb->fft_out[k][1];
    double p = re * re + im * im;
    spec[k] = o->use_power ? p : sqrt(p);
  }

  for (int m = 0; m < fb->n_mels; m++) {
    const double *w = fb->mel_w + fb->mel_at[m];
    const double *s = spec + fb->mel_lo[m];
    double e = 0.0;
    for (size_t k = 0; k < fb->mel_n[m]; k++) e += w[k] * s[k];
    out[m] = (float)(o->use_log_fbank ? log(fmax(e, FLT_EPSILON)) : e);
  }
}

void aural__fbank_free(aural__fbank *fb) {
  if (fb == NULL) return;
  if (fb->plan != NULL) fftw_destroy_plan(fb->plan);
  fftw_free(fb->fft_in);
  fftw_free(fb->fft_out);
  free(fb->window);
  free(fb->mel_lo);
  free(fb->mel_n);
  free(fb->mel_at);
  free(fb->mel_w);
  memset(fb, 0, sizeof *fb);
}
