/*
 * aural/fbank.h — Kaldi-compatible log-mel filterbank options.
 *
 *   aural_fbank_opts o;
 *   aural_fbank_opts_default(&o);              // DESIGN.md §2 defaults
 *   aural_err err;
 *   if (aural_fbank_opts_from_json(&o, cfg_json, strlen(cfg_json), &err) < 0)
 *     fprintf(stderr, "%s\n", err.msg);       // names the bad field
 *
 * The features are those of torchaudio.compliance.kaldi.fbank with these
 * options, applied to samples multiplied by input_scale.
 */
#ifndef AURAL_FBANK_H
#define AURAL_FBANK_H

#include <stdbool.h>
#include <stddef.h>

#include "aural/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum aural_window_type {
  AURAL_WINDOW_POVEY = 0,   /* Hann window raised to the power 0.85 */
  AURAL_WINDOW_HANNING,     /* symmetric Hann */
  AURAL_WINDOW_HAMMING,     /* 0.54 - 0.46 cos */
  AURAL_WINDOW_RECTANGULAR, /* all ones */
  AURAL_WINDOW_BLACKMAN,    /* Kaldi's Blackman, coefficient 0.42 */
} aural_window_type;

typedef struct aural_fbank_opts {
  double sample_rate_hz;          /* model rate; features are computed here */
  int num_mel_bins;               /* output width */
  double frame_length_ms;         /* analysis window length */
  double frame_shift_ms;          /* hop between frames */
  double dither;                  /* must be 0: features are deterministic */
  double preemphasis_coefficient; /* x[i] -= c * x[i-1] */
  bool remove_dc_offset;          /* subtract each frame's mean */
  aural_window_type window_type;
  bool round_to_power_of_two; /* FFT size: next power of two >= window */
  bool snip_edges;            /* must be true: frames lie inside the signal */
  double low_freq;            /* lowest mel band edge, Hz */
  double high_freq;           /* highest edge; <= 0 means Nyquist + value */
  bool use_power;             /* power spectrum (else magnitude) */
  bool use_log_fbank;         /* natural log of the energies, floored */
  bool use_energy;            /* must be false: no energy column */
  double input_scale;         /* samples are multiplied by this first */
} aural_fbank_opts;

/* The defaults of DESIGN.md §2 (16 kHz, 80 bins, 25/10 ms, povey, ...). */
void aural_fbank_opts_default(aural_fbank_opts *opts);

/* Overrides opts with the frontend fields found in a JSON object (the
 * model's aural.config): sample_rate, num_mel_bins, frame_length,
 * frame_shift, dither, preemphasis_coefficient, remove_dc_offset,
 * window_type, round_to_power_of_two, snip_edges, low_freq, high_freq,
 * use_power, use_log_fbank, use_energy, input_scale. Absent fields keep
 * their value; other fields are ignored. Validates the result. Returns 0,
 * AURAL_ECONFIG with err naming the field, or AURAL_EINVAL (opts NULL, or
 * json NULL with json_len > 0). Thread-safe. */
int aural_fbank_opts_from_json(aural_fbank_opts *opts, const char *json,
                               size_t json_len, aural_err *err);

/* Checks that opts describe features this library computes. Returns 0,
 * AURAL_ECONFIG with err naming the field, or AURAL_EINVAL (opts NULL). */
int aural_fbank_opts_validate(const aural_fbank_opts *opts, aural_err *err);

/* Samples per analysis window and per hop at sample_rate_hz, computed as
 * torchaudio does (truncating rate * ms * 0.001); 0 where that is
 * negative, NaN or beyond size_t (options not validated). */
size_t aural_fbank_window_samples(const aural_fbank_opts *opts);
size_t aural_fbank_hop_samples(const aural_fbank_opts *opts);

/* Frames produced from n samples with snip_edges: 0 if n < window (or
 * either count is 0), else 1 + (n - window) / hop. */
size_t aural_fbank_n_frames(const aural_fbank_opts *opts, size_t n_samples);

#ifdef __cplusplus
}
#endif

#endif
