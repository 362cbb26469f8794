/*
 * aural/resampler.h — streaming sample-rate conversion (libsoxr, HQ).
 *
 *   aural_resampler *rs;
 *   aural_resampler_create(44100, 16000, &rs, &err);
 *   aural_resampler_push(rs, pcm, n, on_samples, user);   // any block size
 *   aural_resampler_finish(rs, on_samples, user);         // flush the tail
 *   aural_resampler_destroy(rs);
 *
 * Mono float in, mono float out. Input is regrouped internally into fixed
 * blocks of in_rate/100 samples, so the output is bit-identical whatever the
 * sizes of the pushed blocks. The output is time-aligned with the input (no
 * leading delay) and has round(n_in * out_rate / in_rate) samples in total.
 */
#ifndef AURAL_RESAMPLER_H
#define AURAL_RESAMPLER_H

#include <stddef.h>

#include "aural/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Supported input rates, inclusive. */
#define AURAL_RATE_MIN_HZ 4000.0
#define AURAL_RATE_MAX_HZ 768000.0

typedef struct aural_resampler aural_resampler;

/* Receives a block of output samples; a nonzero return stops the push and
 * is returned by it. The block is valid during the call only. A push,
 * finish or reset of the same resampler from inside it returns
 * AURAL_ESTATE and does nothing. */
typedef int (*aural_samples_fn)(void *user, const float *samples,
                                size_t n_samples);

/* Creates a converter from in_rate_hz to out_rate_hz (both within
 * AURAL_RATE_MIN_HZ..AURAL_RATE_MAX_HZ). The converter's own buffers are
 * allocated here; libsoxr allocates its filter state in the first push and
 * finish after create or reset, and grows its queues when they fill
 * further than before: mostly within the first second of input, but at
 * some rates now and then many seconds later. Returns 0, AURAL_ERATE,
 * AURAL_ERESAMPLE, AURAL_ENOMEM or AURAL_EINVAL (out NULL). */
int aural_resampler_create(double in_rate_hz, double out_rate_hz,
                           aural_resampler **out, aural_err *err);

/* Converts n samples; calls fn zero or more times with output. Returns 0,
 * fn's nonzero return, AURAL_ESTATE after finish or from inside fn,
 * AURAL_ERESAMPLE (libsoxr failed), or AURAL_EINVAL (fn NULL, or samples
 * NULL with n > 0; nothing consumed). Not real-time-safe: libsoxr may
 * allocate (see create). Not thread-safe on one object; distinct objects
 * are independent. */
int aural_resampler_push(aural_resampler *rs, const float *samples, size_t n,
                         aural_samples_fn fn, void *user);

/* Flushes the remaining output; afterwards only reset or destroy apply
 * (push and finish return AURAL_ESTATE). Returns 0, fn's nonzero return,
 * AURAL_ESTATE (already finished, or from inside fn), AURAL_ERESAMPLE, or
 * AURAL_EINVAL when fn is NULL. */
int aural_resampler_finish(aural_resampler *rs, aural_samples_fn fn,
                           void *user);

/* Returns the object to its freshly created state: libsoxr frees its
 * state here and makes it again in the next push, so neither is
 * real-time-safe. Returns 0, AURAL_ESTATE from inside a push's or
 * finish's fn, or AURAL_ERESAMPLE when libsoxr fails. */
int aural_resampler_reset(aural_resampler *rs);

/* NULL-safe. */
void aural_resampler_destroy(aural_resampler *rs);

#ifdef __cplusplus
}
#endif

#endif
