/*
 * The push-based frontend: downmix -> (resample) -> frame -> fbank -> CMVN.
 *
 * Data flow for one push, in sub-blocks of at most BLOCK input frames so
 * that every buffer has a size fixed at create time:
 *
 *   pcm (n, channels) --downmix/sanitise--> mono (BLOCK)
 *       --resampler, or straight through--> samples (ring of model-rate
 *       samples not yet fully consumed by frames)
 *       --one window per hop--> feats (BATCH, n_mels) --> caller's fn
 *
 * Each frame depends only on its own window of model-rate samples, and the
 * resampler is split-invariant, so the features do not depend on how the
 * caller splits its pushes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aural/frontend.h"
#include "aural/resampler.h"
#include "internal.h"

#define BLOCK 1024 /* input frames downmixed per step */
#define BATCH 64   /* feature frames per callback at most */

struct aural_frontend {
  aural__fbank fb;
  aural_frontend_config cfg;
  aural_resampler *rs;     /* NULL when the input is at the model rate */
  float *mono;             /* (BLOCK) downmixed input */
  float *samples;          /* (samples_cap) model-rate samples */
  size_t samples_cap;
  size_t n_samples;        /* valid samples in `samples` */
  float *feats;            /* (BATCH, n_mels) frames not yet delivered */
  size_t n_feats;
  aural_frontend_stats stats;
  int finished;
  int busy;                /* in a push or finish: fn may not call in */
  /* The caller's callback during one push or finish. */
  aural_frames_fn fn;
  void *user;
};

void aural_frontend_config_default(aural_frontend_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  aural_fbank_opts_default(&cfg->fbank);
  cfg->input_rate_hz = 16000.0;
  cfg->n_channels = 1;
  cfg->nonfinite = AURAL_NONFINITE_REJECT;
}

int aural_frontend_create(const aural_frontend_config *cfg,
                          aural_frontend **out, aural_err *err) {
  if (out == NULL || cfg == NULL)
    return aural__err_set(err, AURAL_EINVAL, "frontend: no %s",
                          out == NULL ? "out pointer" : "config");
  *out = NULL;
  if (!(cfg->input_rate_hz >= AURAL_RATE_MIN_HZ &&
        cfg->input_rate_hz <= AURAL_RATE_MAX_HZ))
    return aural__err_set(err, AURAL_ERATE,
                          "input sample rate %.10g Hz is outside the "
                          "supported %g..%g Hz",
                          cfg->input_rate_hz, AURAL_RATE_MIN_HZ,
                          AURAL_RATE_MAX_HZ);
  if (cfg->n_channels < 1 || cfg->n_channels > AURAL_MAX_CHANNELS)
    return aural__err_set(err, AURAL_ECHANNELS,
                          "%d channels is outside the supported 1..%d",
                          cfg->n_channels, AURAL_MAX_CHANNELS);
  if ((unsigned)cfg->nonfinite > AURAL_NONFINITE_ZERO)
    return aural__err_set(err, AURAL_ECONFIG,
                          "nonfinite policy %d is neither REJECT (0) nor "
                          "ZERO (1)",
                          (int)cfg->nonfinite);

  aural_frontend *fe = calloc(1, sizeof *fe);
  if (fe == NULL) return aural__err_set(err, AURAL_ENOMEM, "out of memory");
  fe->cfg = *cfg;
  int rc = aural__fbank_init(&fe->fb, &cfg->fbank, err);
  if (rc < 0) {
    free(fe);
    return rc;
  }
  size_t n_mels = (size_t)fe->fb.n_mels;

  if (cfg->input_rate_hz != cfg->fbank.sample_rate_hz) {
    rc = aural_resampler_create(cfg->input_rate_hz, cfg->fbank.sample_rate_hz,
                                &fe->rs, err);
    if (rc < 0) goto fail;
  }
  /* Room for one window plus the most one step can add: a block at the
   * model rate, or a resampler burst; bigger bursts are taken in parts. */
  fe->samples_cap = fe->fb.win + 4 * BLOCK;
  fe->mono = malloc(BLOCK * sizeof *fe->mono);
  fe->samples = malloc(fe->samples_cap * sizeof *fe->samples);
  fe->feats = malloc(BATCH * n_mels * sizeof *fe->feats);
  if (fe->mono == NULL || fe->samples == NULL || fe->feats == NULL) goto oom;

  *out = fe;
  return 0;
oom:
  rc = aural__err_set(err, AURAL_ENOMEM, "frontend: out of memory");
fail:
  aural_frontend_destroy(fe);
  return rc;
}

/* Hands the batched frames to the caller. */
static int deliver(aural_frontend *fe) {
  if (fe->n_feats == 0) return 0;
  uint64_t first = fe->stats.n_feature_frames - fe->n_feats;
  size_t n = fe->n_feats;
  fe->n_feats = 0;
  return fe->fn(fe->user, fe->feats, n, first);
}

/* Computes every frame whose window lies in `samples`, then keeps only the
 * samples later frames still need. */
static int make_frames(aural_frontend *fe) {
  size_t n_mels = (size_t)fe->fb.n_mels;
  size_t at = 0;
  while (at + fe->fb.win <= fe->n_samples) {
    float *row = fe->feats + fe->n_feats * n_mels;
    aural__fbank_compute(&fe->fb, fe->samples + at, row);
    fe->n_feats++;
    fe->stats.n_feature_frames++;
    at += fe->fb.hop;
    if (fe->n_feats == BATCH) {
      int rc = deliver(fe);
      if (rc != 0) {
        /* Keep the stream consistent even though the caller stopped. */
        memmove(fe->samples, fe->samples + at,
                (fe->n_samples - at) * sizeof *fe->samples);
        fe->n_samples -= at;
        return rc;
      }
    }
  }
  /* hop <= window (validated), so at <= n_samples here. */
  memmove(fe->samples, fe->samples + at,
          (fe->n_samples - at) * sizeof *fe->samples);
  fe->n_samples -= at;
  return 0;
}

/* Appends model-rate samples, making frames whenever the buffer fills. Also
 * the resampler's output callback. */
static int take_samples(void *user, const float *x, size_t n) {
  aural_frontend *fe = user;
  while (n > 0) {
    size_t room = fe->samples_cap - fe->n_samples;
    size_t k = n < room ? n : room;
    memcpy(fe->samples + fe->n_samples, x, k * sizeof *x);
    fe->n_samples += k;
    x += k;
    n -= k;
    int rc = make_frames(fe);
    if (rc != 0) return rc;
  }
  return 0;
}

/* Index of the first non-finite value in pcm (n_values), or n_values. */
static size_t first_nonfinite(const float *pcm, size_t n_values) {
  for (size_t i = 0; i < n_values; i++)
    if (!isfinite(pcm[i])) return i;
  return n_values;
}

int aural_frontend_downmix(const float *pcm, size_t n, int n_channels,
                           float *mono, uint64_t *n_nonfinite,
                           uint64_t *n_clamped) {
  /* The count sets the stride through pcm: one out of range would read
   * far beyond it (a negative one, converted) or divide by 0. */
  if (n_channels < 1 || n_channels > AURAL_MAX_CHANNELS ||
      (n > 0 && (pcm == NULL || mono == NULL)))
    return AURAL_EINVAL;
  size_t ch = (size_t)n_channels;
  uint64_t bad = 0, clamped = 0;
  for (size_t i = 0; i < n; i++) {
    float acc = 0.0f;
    for (size_t c = 0; c < ch; c++) {
      float v = pcm[i * ch + c];
      if (!isfinite(v)) {
        v = 0.0f;
        bad++;
      } else if (fabsf(v) > AURAL_SAMPLE_ABS_MAX) {
        v = copysignf(AURAL_SAMPLE_ABS_MAX, v);
        clamped++;
      }
      acc += v;
    }
    mono[i] = ch == 1 ? acc : acc / (float)ch;
  }
  if (n_nonfinite != NULL) *n_nonfinite += bad;
  if (n_clamped != NULL) *n_clamped += clamped;
  return 0;
}

/* Averages the channels of n frames into fe->mono, counting what was
 * replaced or clamped (create validated the channel count). */
static void downmix(aural_frontend *fe, const float *pcm, size_t n) {
  (void)aural_frontend_downmix(pcm, n, fe->cfg.n_channels, fe->mono,
                               &fe->stats.n_nonfinite, &fe->stats.n_clamped);
}

int aural_frontend_push(aural_frontend *fe, const float *pcm, size_t n,
                        aural_frames_fn fn, void *user) {
  if (fe->finished || fe->busy) return AURAL_ESTATE;
  if (n == 0) return 0;
  if (pcm == NULL || fn == NULL) return AURAL_EINVAL;
  size_t ch = (size_t)fe->cfg.n_channels;
  size_t n_values;
  if (!aural__mul_ok(n, ch, &n_values)) return AURAL_EINVAL;
  if (fe->cfg.nonfinite == AURAL_NONFINITE_REJECT &&
      first_nonfinite(pcm, n_values) < n_values)
    return AURAL_ENONFINITE;

  fe->fn = fn;
  fe->user = user;
  fe->busy = 1;
  int rc = 0;
  for (size_t done = 0; done < n && rc == 0;) {
    size_t k = n - done < BLOCK ? n - done : BLOCK;
    downmix(fe, pcm + done * ch, k);
    fe->stats.n_input_frames += k;
    done += k;
    rc = fe->rs != NULL ? aural_resampler_push(fe->rs, fe->mono, k,
                                               take_samples, fe)
                        : take_samples(fe, fe->mono, k);
  }
  if (rc == 0) rc = deliver(fe);
  fe->busy = 0;
  return rc;
}

int aural_frontend_finish(aural_frontend *fe, aural_frames_fn fn,
                          void *user) {
  if (fe->finished || fe->busy) return AURAL_ESTATE;
  if (fn == NULL) return AURAL_EINVAL;
  fe->finished = 1;
  fe->fn = fn;
  fe->user = user;
  fe->busy = 1;
  int rc = fe->rs != NULL ? aural_resampler_finish(fe->rs, take_samples, fe)
                          : 0;
  if (rc == 0) rc = deliver(fe);
  fe->busy = 0;
  return rc;
}

int aural_frontend_reset(aural_frontend *fe) {
  if (fe->busy) return AURAL_ESTATE;
  fe->n_samples = 0;
  fe->n_feats = 0;
  fe->finished = 0;
  memset(&fe->stats, 0, sizeof fe->stats);
  return fe->rs != NULL ? aural_resampler_reset(fe->rs) : 0;
}

void aural_frontend_get_stats(const aural_frontend *fe,
                              aural_frontend_stats *stats) {
  *stats = fe->stats;
}

int aural_frontend_dim(const aural_frontend *fe) { return fe->fb.n_mels; }

void aural_frontend_destroy(aural_frontend *fe) {
  if (fe == NULL) return;
  aural__fbank_free(&fe->fb);
  aural_resampler_destroy(fe->rs);
  free(fe->mono);
  free(fe->samples);
  free(fe->feats);
  free(fe);
}
