/*
 * aural/stream.h — one stream's whole pipeline: audio in, chunks out.
 *
 *   aural_stream_config sc;
 *   aural_stream_config_default(&sc);        // 50-frame chunks, model rate
 *   sc.input_rate_hz = 44100; sc.n_channels = 2;
 *   aural_stream *s;
 *   if (aural_stream_create(model, &sc, &s, &err) < 0) die(err.msg);
 *   aural_stream_info info;
 *   aural_stream_get_info(s, &info);         // dims, frame_seconds, ...
 *   aural_chunk ch = {.emb = malloc(info.chunk_frames * info.d_model * 4),
 *                     .max_frames = info.chunk_frames,
 *                     .text_cap = info.text_max_bytes};
 *   if (info.text_max_bytes > 0)            // a CTC head: text; without
 *     ch.text = malloc(info.text_max_bytes); // one a text buffer is refused
 *   while ((n = read_audio(pcm)) > 0)
 *     for (size_t at = 0, k; at < n; at += k) {
 *       aural_stream_push(s, pcm + at * 2, n - at, &k);  // may take part
 *       aural_stream_compute(s);                         // encode pending
 *       while (aural_stream_pull(s, &ch) == 1) use(&ch); // whole chunks
 *     }
 *   aural_stream_end(s);                     // the frontend flushes
 *   aural_stream_compute(s);
 *   while (aural_stream_pull(s, &ch) == 1) use(&ch);  // the last is final
 *   aural_stream_destroy(s);
 *
 * Many streams, one batched encoder pass per round:
 *
 *   aural_batch *b;
 *   aural_batch_create(model, 1024, &b, &err);
 *   // each stream: push at most aural_stream_input_room(s) frames, then
 *   aural_stream_compute_batch(b, streams, n_streams);
 *   // each stream: pull its chunks
 *
 * A stream is a frontend (downmix, resampling, Kaldi fbank), an encoder
 * state (KV rings) and a chunker over a shared, read-only aural_model: the
 * pipeline of DESIGN.md §3 in one object. Push runs only the frontend: its
 * features wait, pending, until aural_stream_compute() encodes them, or
 * aural_stream_compute_batch() encodes those of many streams in one
 * batched pass, bit-identical to each stream alone. Chunk k holds frames
 * [kC, kC + C); after aural_stream_end() the remaining frames go out as a
 * final chunk, which is empty when the frames filled whole chunks
 * (PROTOCOL.md §5); a stream with no frames has no chunk. With a CTC head,
 * each chunk carries its greedy text, repeats collapsed across chunk
 * boundaries. Outputs do not depend on how the audio is split into pushes
 * or how computes are grouped: they are bit-identical.
 *
 * Everything is allocated at create; push, end, compute and pull allocate
 * nothing and are real-time-safe. When the input is resampled, push, end
 * and reset are not: libsoxr makes its state in the first pushes after
 * create or reset, grows its queues now and then (mostly within the first
 * second, at some rates many seconds later) and in its flush
 * (aural/resampler.h). A stream has no
 * threads of its own and is not thread-safe; distinct streams over one
 * model are independent.
 * Capture and arrival times are the caller's business: a chunk names its
 * frames, and frame t starts t * frame_seconds into the stream.
 */
#ifndef AURAL_STREAM_H
#define AURAL_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aural/decoder.h"
#include "aural/encoder.h"
#include "aural/error.h"
#include "aural/frontend.h"
#include "aural/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a stream produces (aural_stream_config.outputs). */
#define AURAL_STREAM_EMBEDDINGS (1u << 0) /* encoder output (n, d_model) */
#define AURAL_STREAM_LOGITS (1u << 1)     /* CTC head output before
                                             log-softmax (n, vocab_size) */
#define AURAL_STREAM_TEXT (1u << 2)       /* greedy CTC text per chunk */
#define AURAL_STREAM_FEATURES (1u << 3)   /* log-mel fbank before CMVN
                                             (n, num_mel_bins) */
#define AURAL_STREAM_WORDS (1u << 4)      /* words: the lexicon and LM
                                             decoder of aural/decoder.h */

/* Bound on chunk_frames and max_pending_frames (encoder_batch_frames:
 * AURAL_ENCODER_MAX_BATCH_FRAMES). */
#define AURAL_STREAM_MAX_FRAMES 1000000
/* Bound on first_chunk: 2^40 chunks of 500 ms are 17,000 years. */
#define AURAL_STREAM_MAX_FIRST_CHUNK (1ull << 40)

typedef struct aural_stream_config {
  double input_rate_hz;   /* rate of the pushed PCM; 0 (default): the
                             model's sample rate */
  int n_channels;         /* interleaved channels, 1..AURAL_MAX_CHANNELS
                             (default 1); downmixed by averaging */
  aural_nonfinite_policy nonfinite; /* NaN/inf samples (default REJECT) */
  unsigned outputs;       /* AURAL_STREAM_* bits; 0 (default): embeddings,
                             plus logits and text when the model has a CTC
                             head. Features alone run no encoder. */
  size_t chunk_frames;    /* C, frames per chunk (default 50) */
  size_t max_pending_frames; /* features a push may leave awaiting compute
                                (default 256); a few more frames of
                                resampler delay are added when resampling
                                (aural_stream_info.pending_cap) */
  size_t encoder_batch_frames; /* rows of the encoder's own scratch for
                                  aural_stream_compute, 1..
                                  AURAL_ENCODER_MAX_BATCH_FRAMES (default
                                  64); more are encoded in several passes */
  uint64_t first_chunk;   /* 0 (default): the stream from its start. Else
                             the rest of a longer stream, from this chunk
                             on (a stream resumed elsewhere): chunks number
                             from it and frames from first_chunk *
                             chunk_frames (positions, first_frame and word
                             times too), and the first sample pushed is
                             that frame's first. At most
                             AURAL_STREAM_MAX_FIRST_CHUNK. */
  /* AURAL_STREAM_WORDS: the resources (which must outlive the stream; lm
   * may be NULL, else loaded over lexicon) and the search's settings. */
  const aural_lexicon *lexicon;
  const aural_lm *lm;
  aural_decoder_config decoder;
} aural_stream_config;

/* What a stream is, for sizing buffers and timing frames. */
typedef struct aural_stream_info {
  double model_rate_hz;  /* features are computed at this rate */
  size_t hop_samples;    /* model-rate samples from one frame to the next */
  size_t window_samples; /* model-rate samples one frame covers */
  double frame_seconds;  /* hop_samples / model_rate_hz: frame t starts at
                            t * frame_seconds */
  size_t chunk_frames;   /* C */
  size_t pending_cap;    /* features a stream holds before compute */
  unsigned outputs;      /* the AURAL_STREAM_* bits in effect */
  int n_mels, d_model, vocab_size; /* row widths of the outputs */
  size_t text_max_bytes; /* a chunk's text at most, with its NUL */
  size_t token_max_bytes; /* the longest token: a chunk of n frames has at
                             most n * (token_max_bytes + 1) + 1 bytes */
  size_t words_max;      /* a chunk's words at most (finals and partial) */
  size_t segments_max;   /* final segments that can end in one chunk */
} aural_stream_info;

/* Counters and state since create or the last reset. */
typedef struct aural_stream_stats {
  uint64_t n_input_frames;   /* PCM frames taken by push */
  uint64_t n_feature_frames; /* frames the frontend made */
  uint64_t n_encoded_frames; /* frames computed */
  uint64_t first_frame;      /* the stream's first frame (first_chunk *
                                chunk_frames): frame numbers are this plus
                                the counts here */
  uint64_t n_chunks;         /* chunks pulled */
  size_t n_pending_frames;   /* features awaiting compute */
  size_t n_ready_frames;     /* computed frames not yet pulled */
  uint64_t n_nonfinite;      /* samples replaced by 0 (policy ZERO) */
  uint64_t n_clamped;        /* samples clamped to ±AURAL_SAMPLE_ABS_MAX */
  int error;                 /* the code that broke the stream (a failed
                                push, end or compute; AURAL_EOVERFLOW), or
                                0 */
  bool ended;                /* aural_stream_end() was called */
  bool done;                 /* ended, and the last chunk was pulled (or
                                there is none): nothing more will come */
} aural_stream_stats;

/* One chunk, into caller-owned buffers. The caller sets the input fields;
 * aural_stream_pull() sets the rest. */
typedef struct aural_chunk {
  /* In: NULL, or room for max_frames rows of an output the stream has;
   * chunk_frames rows and text_max_bytes always suffice, and
   * aural_stream_ready() says the next chunk's size, for exact buffers. */
  float *emb;         /* (max_frames, d_model) */
  float *logits;      /* (max_frames, vocab_size) */
  float *features;    /* (max_frames, n_mels) */
  size_t max_frames;  /* at least the chunk's frames when a row buffer is
                         given */
  char *text;         /* (text_cap) NUL-terminated, tokens separated by
                         single spaces; or NULL */
  size_t text_cap;    /* at least n_frames * (token_max_bytes + 1) + 1 when
                         text is given */
  aural_word *words;  /* (words_cap) or NULL; at least words_max */
  size_t words_cap;
  uint32_t *segments; /* (segments_cap), given with words, at least
                         segments_max; or NULL with words */
  size_t segments_cap;
  /* Out. */
  uint64_t seq;         /* chunk number, from 0 */
  uint64_t first_frame; /* seq * chunk_frames */
  size_t n_frames;      /* C, or fewer (even 0) for the final chunk */
  size_t text_len;      /* bytes of text before its NUL */
  /* Words: words[0 .. n_final_words) are the finals of the n_segments
   * segments that ended in this chunk, in order (segments[i] words each);
   * they never change. Then n_partial_words words: the open segment so
   * far, which may. Word frames count from the stream's first. */
  size_t n_segments, n_final_words, n_partial_words;
  bool final;           /* the stream's last chunk */
} aural_chunk;

typedef struct aural_stream aural_stream;

/* Fills cfg with the defaults above; call it before setting fields. */
void aural_stream_config_default(aural_stream_config *cfg);

/* Creates a stream over model (which must outlive it), allocating all the
 * memory it will ever use. cfg may be NULL for the defaults. Returns 0,
 * AURAL_EINVAL (model or out NULL), AURAL_ECONFIG (a field out of range,
 * or logits/text of a model without a CTC head), AURAL_ERATE,
 * AURAL_ECHANNELS or AURAL_ENOMEM, with err naming the field.
 * Thread-safe. */
int aural_stream_create(const aural_model *model,
                        const aural_stream_config *cfg, aural_stream **out,
                        aural_err *err);

/* NULL-safe. The stream's buffers are freed; the model is not. */
void aural_stream_destroy(aural_stream *s);

/* Runs the frontend over the first input frames of pcm (n_frames * n_channels
 * interleaved floats) and keeps their features pending. Takes as many
 * frames as fit (aural_stream_input_room()) and says how many in *n_taken;
 * 0 when the pending features are full: compute, then push the rest.
 * Returns 0, AURAL_ENONFINITE (policy REJECT; nothing taken),
 * AURAL_ESTATE after end or a failure, AURAL_ERESAMPLE (libsoxr failed:
 * the stream fails), or AURAL_EINVAL. Real-time-safe
 * when the input is at the model's rate (see the top). */
int aural_stream_push(aural_stream *s, const float *pcm, size_t n_frames,
                      size_t *n_taken);

/* Input frames the next push takes in full: the most whose features are
 * sure to fit beside the pending ones, the resampler's delay counted. 0
 * after end. Real-time-safe. */
size_t aural_stream_input_room(const aural_stream *s);

/* Marks the end of the input: the frontend flushes (its last features are
 * pending; there is always room for them), so that after the next compute
 * the final chunk can be pulled. Returns 0, AURAL_ESTATE when already
 * ended or after a failure, or AURAL_ERESAMPLE (libsoxr failed while
 * flushing: the stream fails). Real-time-safe when the input is at the
 * model's rate. */
int aural_stream_end(aural_stream *s);

/* Ends the stream at once, as on an error or a deadline: pending
 * features and what the frontend holds are dropped, and the frames already
 * computed come out as the last chunks, the last one final. Returns 0, or
 * AURAL_ESTATE when already ended. Real-time-safe. */
int aural_stream_abort(aural_stream *s);

/* Encodes the pending features (those that fit beside computed frames not
 * yet pulled: pull whole chunks to make room) with the stream's own
 * encoder scratch. Returns 0, AURAL_EOVERFLOW (a frame's embeddings,
 * logits or, as an output, features came out NaN or infinite, as a model
 * with huge weights, CMVN or input_scale gives on some input: the stream
 * fails, and the frames before that one come out as its last chunks), or
 * AURAL_ESTATE after a failure.
 * Real-time-safe; not thread-safe with other calls on the stream. */
int aural_stream_compute(aural_stream *s);

/* The same for n_streams streams of b's model at once: every stream's
 * pending frames go through aural_encoder_forward_batch() together, so
 * each weight matrix is read once per pass for all of them; each stream's
 * outputs are bit-identical to aural_stream_compute() on it alone. Returns
 * 0, or AURAL_EINVAL (b NULL, streams NULL with n_streams > 0, a NULL
 * stream, one of another model, one listed twice) or AURAL_ESTATE (a failed stream), and then computes nothing. A
 * stream whose outputs overflow fails alone, as in aural_stream_compute()
 * (its stats' error is AURAL_EOVERFLOW): the call still returns 0 and
 * the others' outputs are untouched.
 * Allocates nothing; one batch and its streams on one thread at a time. */
int aural_stream_compute_batch(aural_batch *b, aural_stream *const *streams,
                               size_t n_streams);

/* Whether a chunk can be pulled now: 1 with its frame count and final
 * flag (either pointer may be NULL when the caller does not want it), or
 * 0; AURAL_EINVAL for a NULL stream. Real-time-safe. */
int aural_stream_ready(const aural_stream *s, size_t *n_frames, bool *final);

/* Copies the next chunk into chunk's buffers and fills its out fields.
 * Returns 1 when a chunk was pulled, 0 when none is complete yet (or the
 * stream is done), AURAL_EINVAL (a NULL stream or chunk, a buffer for an
 * output the stream does not have, max_frames or text_cap too small for
 * this chunk, words without segments or either below words_max or
 * segments_max; nothing is consumed). The CTC collapse state advances
 * even when text is NULL. After a failed push, end or compute, the frames
 * computed before it still come out, as after aural_stream_abort().
 * Real-time-safe. */
int aural_stream_pull(aural_stream *s, aural_chunk *chunk);

/* Dimensions and timing of the stream, fixed at create. Thread-safe. */
void aural_stream_get_info(const aural_stream *s, aural_stream_info *info);

/* Counters and state (aural_stream_stats). Real-time-safe. */
void aural_stream_get_stats(const aural_stream *s, aural_stream_stats *stats);

/* Starts a new stream with the same config, forgetting all history and
 * anything pending. Returns 0 or AURAL_ERESAMPLE. Real-time-safe at the
 * model's rate; when the input is resampled, libsoxr frees its state here
 * and grows it again in the next pushes (aural_resampler_reset). */
int aural_stream_reset(aural_stream *s);

#ifdef __cplusplus
}
#endif

#endif
