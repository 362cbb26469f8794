/*
 * aural/encoder.h — the per-stream state of the causal sliding-window
 * Transformer encoder, and CTC greedy decoding.
 *
 *   aural_encoder_config ec;
 *   aural_encoder_config_default(&ec);
 *   aural_encoder *enc;
 *   if (aural_encoder_create(model, &ec, &enc, &err) < 0) die(err.msg);
 *   // any number of new fbank frames per call, in stream order:
 *   aural_encoder_forward(enc, feats, n, emb, logits);  // (n, d), (n, V)
 *   aural_encoder_destroy(enc);
 *
 * Each layer keeps a ring of the keys and values of the last W frames,
 * allocated at create; a call allocates nothing, and memory does not grow
 * with the length of the stream. A model with a lead-in (its config's
 * lead_in_frames, aural/model.h) has the first call after create or reset
 * run that many frames of silence before the caller's. Outputs do not
 * depend on how frames are split into calls, or on max_batch_frames: they
 * are bit-identical (every product sums in the same order whatever its
 * row count; tests/test_encoder.c, test_chunk_invariance).
 */
#ifndef AURAL_ENCODER_H
#define AURAL_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "aural/error.h"
#include "aural/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most rows of one pass: an encoder's max_batch_frames, an aural_batch's
 * max_rows. */
#define AURAL_ENCODER_MAX_BATCH_FRAMES 65536

typedef struct aural_encoder_config {
  uint64_t first_frame;   /* absolute index of the stream's first frame
                             (its position, plus the model's lead-in) */
  size_t max_batch_frames; /* frames computed together, at most
                              AURAL_ENCODER_MAX_BATCH_FRAMES; larger calls
                              are split (default, and 0: 64) */
} aural_encoder_config;

typedef struct aural_encoder aural_encoder;

void aural_encoder_config_default(aural_encoder_config *cfg);

/* Creates the state of one stream over model, which must outlive it.
 * Allocates everything the stream will ever need. Returns 0, AURAL_EINVAL
 * (model or out NULL, max_batch_frames above its bound) or AURAL_ENOMEM.
 * Thread-safe. */
int aural_encoder_create(const aural_model *model,
                         const aural_encoder_config *cfg, aural_encoder **out,
                         aural_err *err);

/* Encodes the next n frames. feats: (n, num_mel_bins) fbank features before
 * CMVN (the model applies its own). emb: (n, d_model) outputs after the
 * final norm, or NULL. logits: (n, vocab_size) raw CTC head outputs, or
 * NULL (must be NULL when the model has no head). Allocates nothing;
 * real-time-safe; one encoder is not thread-safe, distinct encoders over
 * one model are. Returns 0 or AURAL_EINVAL. */
int aural_encoder_forward(aural_encoder *enc, const float *feats, size_t n,
                          float *emb, float *logits);

/* Starts a new stream at first_frame, forgetting all history (the next
 * call runs the lead-in again). */
void aural_encoder_reset(aural_encoder *enc, uint64_t first_frame);

/* Absolute index of the next frame forward() expects. */
uint64_t aural_encoder_next_frame(const aural_encoder *enc);

/* Bytes one encoder created with cfg occupies: the KV rings (fixed by the
 * model) plus scratch for max_batch_frames. SIZE_MAX where a size
 * overflows, or for what create refuses (model NULL, max_batch_frames
 * above its bound). */
size_t aural_encoder_state_bytes(const aural_model *model,
                                 const aural_encoder_config *cfg);

/* NULL-safe. */
void aural_encoder_destroy(aural_encoder *enc);

/* Several streams at once: their new frames are stacked so that each
 * weight matrix is read once per layer for all of them, while attention
 * stays per stream over its own rings. Every stream's outputs are
 * bit-identical to what aural_encoder_forward gives it alone. The batch is
 * scratch for up to max_rows rows (one thread at a time); more rows are
 * done in several passes.
 *
 *   aural_batch *b;
 *   aural_batch_create(model, 256, &b, &err);
 *   aural_batch_item items[] = {{enc1, f1, 50, e1, NULL},
 *                               {enc2, f2, 50, e2, NULL}};
 *   aural_encoder_forward_batch(b, items, 2);
 */
typedef struct aural_batch aural_batch;

typedef struct aural_batch_item {
  aural_encoder *enc;  /* the stream; at most once per call */
  const float *feats;  /* (n, num_mel_bins) as for aural_encoder_forward */
  size_t n;            /* new frames, may be 0 */
  float *emb;          /* (n, d_model) or NULL */
  float *logits;       /* (n, vocab_size) or NULL */
} aural_batch_item;

/* Allocates scratch for passes of up to max_rows rows
 * (1..AURAL_ENCODER_MAX_BATCH_FRAMES) over
 * encoders of model. Returns 0, AURAL_EINVAL (model or out NULL, max_rows
 * out of range) or AURAL_ENOMEM. Thread-safe. */
int aural_batch_create(const aural_model *model, size_t max_rows,
                       aural_batch **out, aural_err *err);

/* Encodes every item's frames. Returns AURAL_EINVAL (and computes
 * nothing) if b is NULL, items is NULL with n_items > 0, an encoder is of
 * another model or appears twice, or logits are asked of a model without
 * a head. Allocates nothing. Not thread-safe
 * on one batch or on encoders in use elsewhere. */
int aural_encoder_forward_batch(aural_batch *b, const aural_batch_item *items,
                                size_t n_items);

/* NULL-safe. */
void aural_batch_destroy(aural_batch *b);

/* CTC greedy decoding: the best token per frame, repeats collapsed and
 * blanks (id 0) dropped. logits: (n_frames, vocab_size). *prev carries the
 * previous frame's best token across calls (start with -1), so decoding
 * chunk by chunk equals decoding all at once. Writes at most max_ids token
 * ids and returns how many were produced (ids beyond max_ids are
 * counted but dropped). */
size_t aural_ctc_greedy(const float *logits, size_t n_frames, int vocab_size,
                        int *prev, int *ids, size_t max_ids);

/* Name of the matrix-product kernel in use on this CPU (the library's own
 * AVX-512 kernel; its AVX2 + FMA kernel where AVX-512 is missing; its
 * scalar reference where both are). Static string; thread-safe. */
const char *aural_gemm_name(void);

/* The instruction set of the kernels in use: "avx512", "avx2" or
 * "scalar". The best one the CPU runs, chosen once per process, unless
 * the environment variable AURAL_ISA names another (one the CPU cannot
 * run is refused with a line on stderr). Every set gives the same bits in
 * matrix products; AVX2 and AVX-512 give the same bits throughout. Static
 * string; thread-safe. */
const char *aural_isa_name(void);

#ifdef __cplusplus
}
#endif

#endif
