/*
 * aural/frontend.h — push-based audio frontend: PCM in, log-mel frames out.
 *
 *   aural_frontend_config cfg;
 *   aural_frontend_config_default(&cfg);
 *   cfg.input_rate_hz = 44100; cfg.n_channels = 2;
 *   aural_frontend *fe;
 *   if (aural_frontend_create(&cfg, &fe, &err) < 0) ...
 *   aural_frontend_push(fe, pcm, n_frames, on_frames, user);  // any size
 *   aural_frontend_finish(fe, on_frames, user);               // end of stream
 *   aural_frontend_destroy(fe);
 *
 * Input: interleaved float PCM at any supported rate and channel count,
 * nominal full scale ±1. It is downmixed by averaging, resampled to the
 * model rate with libsoxr when needed, and turned into Kaldi-compatible
 * fbank frames (aural/fbank.h). Frame t covers model-rate samples
 * [t*hop, t*hop + window). The features do not depend on how the input is
 * split into pushes: they are bit-identical. They are raw log-mel energies:
 * a model's global CMVN is applied by its encoder (aural/encoder.h), in one
 * place only, so the frontend has no CMVN of its own to apply it twice.
 */
#ifndef AURAL_FRONTEND_H
#define AURAL_FRONTEND_H

#include <stddef.h>
#include <stdint.h>

#include "aural/error.h"
#include "aural/fbank.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AURAL_MAX_CHANNELS 256

/* Samples whose magnitude exceeds this (60 dB above full scale) are
 * clamped to it and counted, so that no power overflows float. */
#define AURAL_SAMPLE_ABS_MAX 1000.0f

/* What a push does with NaN or infinite samples. */
typedef enum aural_nonfinite_policy {
  AURAL_NONFINITE_REJECT = 0, /* the push fails with AURAL_ENONFINITE and
                                 consumes nothing */
  AURAL_NONFINITE_ZERO,       /* each such sample is replaced by 0, counted */
} aural_nonfinite_policy;

typedef struct aural_frontend_config {
  aural_fbank_opts fbank;  /* feature options (model config) */
  double input_rate_hz;    /* rate of the pushed PCM */
  int n_channels;          /* channels of the pushed PCM, 1..AURAL_MAX_CHANNELS */
  aural_nonfinite_policy nonfinite;
} aural_frontend_config;

typedef struct aural_frontend_stats {
  uint64_t n_input_frames;   /* PCM frames (samples per channel) accepted */
  uint64_t n_feature_frames; /* fbank frames emitted */
  uint64_t n_nonfinite;      /* samples replaced by 0 (policy ZERO) */
  uint64_t n_clamped;        /* samples clamped to ±AURAL_SAMPLE_ABS_MAX */
} aural_frontend_stats;

typedef struct aural_frontend aural_frontend;

/* Receives n_frames consecutive feature frames, row-major
 * (n_frames, num_mel_bins), the first being frame number first_frame of the
 * stream. Valid during the call only. A nonzero return stops the push and is
 * returned by it. It may not call into its own frontend: a push, finish or
 * reset from inside it returns AURAL_ESTATE and does nothing (destroy
 * there is a use after free). */
typedef int (*aural_frames_fn)(void *user, const float *frames,
                               size_t n_frames, uint64_t first_frame);

/* Defaults: DESIGN.md §2 fbank options, 16 kHz mono input, reject
 * non-finite samples. */
void aural_frontend_config_default(aural_frontend_config *cfg);

/* Validates cfg and allocates every buffer the object will ever use.
 * Returns 0, AURAL_EINVAL (cfg or out NULL), AURAL_ECONFIG, AURAL_ERATE,
 * AURAL_ECHANNELS or AURAL_ENOMEM with err naming the problem.
 * Thread-safe. */
int aural_frontend_create(const aural_frontend_config *cfg,
                          aural_frontend **out, aural_err *err);

/* Consumes n interleaved PCM frames (n * n_channels floats) and calls fn
 * with every feature frame that became complete, in batches. Allocates
 * nothing at the model's rate; when resampling, libsoxr allocates (its
 * state in the first calls after create or reset, and more queue now and
 * then: aural/resampler.h). With policy
 * REJECT, a block holding a non-finite sample returns
 * AURAL_ENONFINITE before anything is consumed or fn is called. Returns
 * 0, AURAL_ESTATE after finish or from inside fn, AURAL_EINVAL (pcm or
 * fn NULL with n > 0), AURAL_ERESAMPLE (libsoxr failed), or fn's nonzero
 * return. Real-time-safe at the model's rate, apart from fn; one object
 * is not thread-safe, distinct objects are independent. */
int aural_frontend_push(aural_frontend *fe, const float *pcm, size_t n,
                        aural_frames_fn fn, void *user);

/* Ends the stream: flushes the resampler and emits the last complete
 * frames (a partial window is dropped, as with snip_edges). Returns 0,
 * AURAL_ESTATE when already finished or from inside fn, AURAL_EINVAL (fn
 * NULL), AURAL_ERESAMPLE, or fn's nonzero return. */
int aural_frontend_finish(aural_frontend *fe, aural_frames_fn fn,
                          void *user);

/* Returns to the freshly created state, ready for a new stream (when
 * resampling, not real-time-safe: aural_resampler_reset). Returns 0,
 * AURAL_ESTATE from inside a push's or finish's fn, or AURAL_ERESAMPLE
 * when libsoxr fails. */
int aural_frontend_reset(aural_frontend *fe);

/* Counters since create or the last reset. */
void aural_frontend_get_stats(const aural_frontend *fe,
                              aural_frontend_stats *stats);

/* Feature width (num_mel_bins). */
int aural_frontend_dim(const aural_frontend *fe);

/* NULL-safe. */
void aural_frontend_destroy(aural_frontend *fe);

/* The frontend's first step on its own: n frames of n_channels interleaved
 * samples averaged into mono (n values), a non-finite sample taken as 0
 * and one beyond +-AURAL_SAMPLE_ABS_MAX clamped, each counted into the
 * counter given (either may be NULL). A program that converts audio to
 * mono at the model's rate before sending it (aural send --cluster)
 * computes with this and aural_resampler exactly the samples a frontend
 * would. Returns 0, or AURAL_EINVAL (nothing read or written) when
 * n_channels is outside 1..AURAL_MAX_CHANNELS, or pcm or mono is NULL
 * with n > 0. */
int aural_frontend_downmix(const float *pcm, size_t n, int n_channels,
                           float *mono, uint64_t *n_nonfinite,
                           uint64_t *n_clamped);

#ifdef __cplusplus
}
#endif

#endif
