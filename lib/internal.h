/* Internal helpers shared by the library's modules (not installed). */
#ifndef AURAL_INTERNAL_H
#define AURAL_INTERNAL_H

#include <stddef.h>

#include "aural/error.h"

/* Fills err (when not NULL) with code and a formatted message; returns code
 * so that callers can write `return aural__err_set(err, AURAL_E..., ...)`. */
int aural__err_set(aural_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* a * b into *out, false on size_t overflow. */
static inline int aural__mul_ok(size_t a, size_t b, size_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}


/* ---- fbank (fbank.c) --------------------------------------------------- */

#include <fftw3.h>

#include "aural/fbank.h"

/* Everything needed to turn one window of samples into one feature frame:
 * precomputed window and mel weights, and the FFT plan with its buffers. */
typedef struct aural__fbank {
  aural_fbank_opts opts;
  size_t win;     /* samples per analysis window */
  size_t hop;     /* samples between frames */
  size_t n_fft;   /* FFT length (window padded with zeros) */
  int n_mels;     /* output width */
  double *window; /* (win) window function */
  size_t *mel_lo; /* (n_mels) first FFT bin with a nonzero weight */
  size_t *mel_n;  /* (n_mels) number of consecutive nonzero weights */
  size_t *mel_at; /* (n_mels) offset of the bin's weights in mel_w */
  double *mel_w;  /* (sum of mel_n) triangular filter weights */
  double *fft_in; /* (n_fft) */
  fftw_complex *fft_out; /* (n_fft / 2 + 1) */
  fftw_plan plan;
} aural__fbank;

int aural__fbank_init(aural__fbank *fb, const aural_fbank_opts *opts,
                      aural_err *err);

/* One frame: samples (win) at the model rate, not yet scaled, to
 * out (n_mels). Uses fb's buffers: one fbank per thread at a time.
 * Computed in double precision: in float, FFT rounding alone moves the
 * log energy of weak bins next to strong ones (a pure tone's leakage, the
 * empty top band of upsampled audio) by up to 3e-3. */
void aural__fbank_compute(aural__fbank *fb, const float *samples, float *out);

void aural__fbank_free(aural__fbank *fb);

#endif
