/* Internal helpers shared by the library's modules (not installed). */
#ifndef AURAL_INTERNAL_H
#define AURAL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "aural/error.h"

/* Fills err (when not NULL) with code and a formatted message; returns code
 * so that callers can write `return aural__err_set(err, AURAL_E..., ...)`. */
int aural__err_set(aural_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Opens path read-only for a reader of `what` ("an audio file", "a model
 * file") and checks what can be known before reading: it exists, is not a
 * directory, is not an empty regular file, and (when regular_only) is a
 * regular file. flags are added to O_RDONLY | O_CLOEXEC. Returns the fd or
 * a negative code with err naming path and problem; *st is filled. */
struct stat;
int aural__open_input(const char *path, int flags, int regular_only,
                      const char *what, struct stat *st, aural_err *err);

/* The whole of fd, whose size at open was size, into a new buffer (free
 * it). Read, not mapped: a mapped file that another process truncates
 * raises SIGBUS, read() returns less. A file that shrank or grew while it
 * was read is refused. */
int aural__read_all(int fd, const char *path, size_t size, unsigned char **out,
                    aural_err *err);

/* A regular file of at most max_bytes, read whole into a new buffer (free
 * it): aural__open_input, then aural__read_all. */
int aural__read_file(const char *path, const char *what, size_t max_bytes,
                     unsigned char **out, size_t *size, aural_err *err);

/* ---- gzipped resources (gzip.c) ---------------------------------------- */

/* Whether data starts as gzip data does (1f 8b). */
bool aural__is_gzip(const void *data, size_t len);

/* The gzip data (RFC 1952, one member or several one after another)
 * inflated into a new buffer (free it) of at most max_out bytes. Errors
 * (corrupt, cut short, trailing bytes, larger than max_out) name name. */
int aural__gunzip(const void *data, size_t len, const char *name,
                  size_t max_out, unsigned char **out, size_t *out_len,
                  aural_err *err);

/* For a loader of text that may be gzipped: when *text is, it is inflated
 * (at most max_out bytes) into *plain (free it; NULL otherwise) and *text
 * and *len describe that instead. A UTF-8 byte order mark at the start of
 * the text is skipped. */
int aural__plain_text(const char **text, size_t *len, const char *name,
                      size_t max_out, unsigned char **plain, aural_err *err);

/* Length of the valid UTF-8 sequence at p (at most n bytes), or 0 for an
 * invalid, overlong or surrogate one. */
size_t aural__utf8_len(const unsigned char *p, size_t n);

/* Whether the k-byte UTF-8 sequence at p is a C1 control character
 * (U+0080..U+009F), which words must not hold as they hold no C0 one. */
static inline bool aural__utf8_c1(const unsigned char *p, size_t k) {
  return k == 2 && p[0] == 0xc2 && p[1] < 0xa0;
}

/* a * b into *out, false on size_t overflow. */
static inline int aural__mul_ok(size_t a, size_t b, size_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}


/* ---- JSON documents (json.c) ------------------------------------------ */

#include <stdbool.h>
#include <stdio.h>

#include "aural/proto.h"

/* A parsed document: js over the caller's text, its tokens in storage
 * sized to it. */
typedef struct aural__json {
  aural_json js;
  aural_json_token *tokens;
} aural__json;

/* Parses text (which must outlive *out) with the protocol's strict reader.
 * Returns 0, AURAL_EFORMAT with why naming the byte and what is wrong
 * ("byte 57 (in "a"): duplicate member name "b""), or AURAL_ENOMEM. */
int aural__json_parse(aural__json **out, const char *text, size_t len,
                      char *why, size_t why_len);
void aural__json_free(aural__json *d);

/* The string at token tok decoded into new memory (free it), or NULL when
 * tok is not a string, holds \u0000, or memory ran out. */
char *aural__json_strdup(const aural_json *js, int tok);

/* Whether token tok exists and is of that kind. */
bool aural__json_is(const aural_json *js, int tok, aural_json_kind kind);

/* The index of the token after the value at tok (its children skipped):
 * an object's members are key, value, key, value... */
int aural__json_after(const aural_json *js, int tok);

/* Whether the string at tok decodes to want (shorter than 64 bytes). */
bool aural__json_string_is(const aural_json *js, int tok, const char *want);

/* ---- lexicon (lexicon.c), for the decoder ------------------------------ */

#include "aural/decoder.h"

#define AURAL_LEXICON_MAX_TOKENS 48 /* tokens of one pronunciation */
#define AURAL_LEXICON_MAX_HOMOPHONES 64 /* words of one pronunciation */

typedef struct aural__lex_node {
  uint32_t first_edge, n_edges; /* children: edges[first_edge ..] */
  uint32_t first_word, n_words; /* words ending here: node_words[..] */
} aural__lex_node;

typedef struct aural__lex_edge {
  uint32_t token; /* sorted within a node */
  uint32_t child;
} aural__lex_edge;

struct aural_lexicon {
  char *text;          /* the words, NUL-terminated, one after another */
  size_t text_len;
  uint32_t *word_at;   /* (n_words) offset of each word in text */
  size_t n_words;
  uint32_t *hash;      /* (hash_cap) word id + 1, or 0: open addressing */
  size_t hash_cap;
  aural__lex_node *nodes; /* (n_nodes) node 0 is the root */
  size_t n_nodes;
  aural__lex_edge *edges; /* (n_nodes - 1) */
  uint32_t *node_words;   /* (n_prons) word ids, grouped by node */
  size_t n_prons;
  uint32_t max_node_words; /* most words ending at one node */
  int vocab_size;
};

/* The child of node along token, or 0 (the root is no one's child). */
uint32_t aural__lex_child(const aural_lexicon *lex, uint32_t node, int token);

/* ---- language model (lm.c), for the decoder ---------------------------- */

#define AURAL__LM_MAX_ORDER 4
#define AURAL__LM_NONE UINT32_MAX /* a word the LM cannot score */

/* A history: the last n (< order) words, oldest first, cut to the longest
 * suffix the model lists, so that equal histories compare equal. */
typedef struct aural__lm_ctx {
  uint32_t w[AURAL__LM_MAX_ORDER - 1];
  int n;
} aural__lm_ctx;

/* The LM's index of a lexicon word (its <unk> for a word it does not
 * list), or AURAL__LM_NONE. */
uint32_t aural__lm_word(const aural_lm *lm, uint32_t lex_word);
uint32_t aural__lm_bos(const aural_lm *lm);
uint32_t aural__lm_eos(const aural_lm *lm);
/* log10 P(w | ctx) and the history after w. */
float aural__lm_next(const aural_lm *lm, const aural__lm_ctx *ctx, uint32_t w,
                     aural__lm_ctx *next);
/* The n-gram w[0..n): its {log10 p, log10 backoff}, or NULL. */
const float *aural__lm_find(const aural_lm *lm, const uint32_t *w, int n);
/* log10 of the LM's <unk> unigram, or of its lowest unigram when it has
 * no <unk>: the score of a custom word it does not list. */
float aural__lm_floor(const aural_lm *lm);
/* The lexicon the LM was loaded over (aural_lm_load's lex). */
const aural_lexicon *aural__lm_lexicon(const aural_lm *lm);
/* The best log10 unigram of the words at or below a lexicon node. */
float aural__lm_node_best(const aural_lm *lm, uint32_t node);

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


/* ---- model (model.c) --------------------------------------------------- */

#include "aural/model.h"

/* A weight matrix W (rows, cols) as used by y = x W^T: rows are output
 * features. Stored packed for the GEMM kernels in panels of
 * AURAL__PANEL rows: panel p holds W[p*16 + j][k] at
 * p * aural__panel_stride(cols) + k*16 + j; rows past the end are zero.
 * Panels are one 64-byte line further apart than their size, so that the
 * panels a kernel streams side by side (whose size is often a multiple of
 * 4 KB) do not all fall into the same cache sets. One of f32 / f16 /
 * bf16 is set.
 *
 * bf16 matrices (precision bf16) pair the k: panel p holds W[p*16 + j]
 * [2i + h] at p * aural__bf16_panel_stride(cols) + i*32 + j*2 + h, so that
 * one 64-byte line holds k = 2i and 2i + 1 of the panel's 16 rows (the
 * pairs a bfloat16 dot product takes); an odd cols gets a zero k. */
#define AURAL__PANEL 16
typedef struct aural__mat {
  const float *f32;    /* (n_panels, cols, 16) or NULL */
  const uint16_t *f16; /* (n_panels, cols, 16) IEEE half, or NULL */
  const uint16_t *bf16; /* (n_panels, (cols + 1) / 2, 16, 2) or NULL */
  int rows, cols;
} aural__mat;

/* Elements from one bf16 panel to the next: its pairs of k, plus one
 * line, as for f32. */
static inline size_t aural__bf16_panel_stride(size_t cols) {
  return ((cols + 1) / 2 + 1) * 2 * AURAL__PANEL;
}

/* Elements a packed bf16 (rows, cols) matrix occupies. */
static inline size_t aural__bf16_packed_size(size_t rows, size_t cols) {
  return (rows + AURAL__PANEL - 1) / AURAL__PANEL *
         aural__bf16_panel_stride(cols);
}

/* Offset of W[r][c] in the packed bf16 layout. */
static inline size_t aural__bf16_packed_at(size_t r, size_t c, size_t cols) {
  return r / AURAL__PANEL * aural__bf16_panel_stride(cols) +
         c / 2 * 2 * AURAL__PANEL + r % AURAL__PANEL * 2 + c % 2;
}

/* Elements from one panel to the next. */
static inline size_t aural__panel_stride(size_t cols) {
  return (cols + 1) * AURAL__PANEL;
}

/* Elements a packed (rows, cols) matrix occupies. */
static inline size_t aural__packed_size(size_t rows, size_t cols) {
  return (rows + AURAL__PANEL - 1) / AURAL__PANEL * aural__panel_stride(cols);
}

/* Offset of W[r][c] in the packed layout. */
static inline size_t aural__packed_at(size_t r, size_t c, size_t cols) {
  return r / AURAL__PANEL * aural__panel_stride(cols) + c * AURAL__PANEL +
         r % AURAL__PANEL;
}

typedef struct aural__layer {
  aural__mat qkv;      /* (3 d, d): rows q, k, v */
  const float *b_qkv;  /* (3 d) */
  aural__mat out;      /* (d, d) */
  const float *b_out;  /* (d) */
  aural__mat ff1;      /* (d_ff, d) */
  const float *b_ff1;  /* (d_ff) */
  aural__mat ff2;      /* (d, d_ff) */
  const float *b_ff2;  /* (d) */
  const float *ln1_w, *ln1_b, *ln2_w, *ln2_b; /* (d) each */
} aural__layer;

struct aural_model {
  aural_model_config cfg;
  aural__mat in_proj;       /* (d, n_mels) */
  const float *b_in;        /* (d) */
  aural__layer *layers;     /* (n_layers) */
  const float *norm_w, *norm_b; /* (d) final norm, or NULL */
  aural__mat head;          /* (V, d), rows 0 when absent */
  const float *b_head;      /* (V) */
  const float *cmvn_mean, *cmvn_std; /* (n_mels) or NULL */
  float *lead_feats;        /* (min(lead_in_frames, AURAL__LEAD_ROWS),
                               n_mels) features of silence, or NULL */
  char **vocab;             /* (V) token strings */
  float *f32;               /* arena: every f32 tensor */
  uint16_t *f16;            /* arena: matrices kept in half precision or
                               (precision bf16) in bfloat16 */
  aural_precision precision;
  uint64_t n_params;
  uint64_t weight_bytes;
};

/* Names of a file's tensors matched to the names a config calls for:
 * found[i] (n_want) is the index in have (n_have names, no two equal) of
 * want[i], or SIZE_MAX when have lacks it. Sorts an index of have once and
 * binary-searches it for each wanted name: O((n_want + n_have) log n_have)
 * comparisons however large a header is. *n_cmp (when not NULL) gets the
 * number of name comparisons the searches made, so that a test can check
 * the bound. Returns 0 or AURAL_ENOMEM. */
int aural__match_names(const char *const *have, size_t n_have,
                       const char *const *want, size_t n_want, size_t *found,
                       uint64_t *n_cmp);

/* Bytes of one encoder's state with max_batch_frames = batch, and of one
 * aural_batch of `rows` rows, for a model of config c (encoder.c); SIZE_MAX
 * on overflow. */
size_t aural__encoder_bytes(const aural_model_config *c, size_t batch);
size_t aural__ring_bytes(const aural_model_config *c);
size_t aural__batch_bytes(const aural_model_config *c, size_t rows);

/* The model of a batch, and its scratch of (*cap) items that
 * aural_stream_compute_batch fills (stream.c); one user at a time. */
#include "aural/encoder.h"
const aural_model *aural__batch_model(const aural_batch *b);
aural_batch_item *aural__batch_items(aural_batch *b, size_t *cap);

/* Rows of an encoder's own scratch by default (aural_encoder_config). */
#define AURAL__DEFAULT_BATCH 64
/* Rows of silence a model keeps for its lead-in, which an encoder runs in
 * passes of this many (any split gives the same bits). */
#define AURAL__LEAD_ROWS 16

/* IEEE half <-> float, exact / round-to-nearest-even. */
float aural__f16_to_f32(uint16_t h);
uint16_t aural__f32_to_f16(float f);

/* float -> bfloat16 as AVX512-BF16's conversion does it: zeros and
 * denormals to a zero of their sign, infinities kept, NaN kept quiet,
 * others rounded to nearest even. And back (exact). */
static inline uint16_t aural__f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
  if ((u & 0x7f800000u) == 0x7f800000u)
    return (uint16_t)((u >> 16) | ((u & 0x7fffffu) ? 0x40u : 0u));
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float aural__bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}


/* ---- linear algebra (linalg.c) ----------------------------------------- */

/* y (n, W.rows) = x (n, W.cols) W^T + b (b may be NULL). The fast path
 * picks a SIMD kernel for this CPU; aural__linear_ref is the plain scalar
 * oracle. Every kernel computes each output the same way: k in runs of
 * AURAL__CHAIN, each run a fused multiply-add chain from zero, the runs'
 * sums added in order, then the bias. So all of them give the same bits,
 * whatever n is: results never depend on how rows are batched. Short
 * chains keep the partial sums small, and with them the rounding: one
 * chain over all of k put a trained model's streaming logits past 1e-4
 * from a float64 forward (tools/train/check_parity.py). */
#define AURAL__CHAIN 32
void aural__linear(const aural__mat *w, const float *b, const float *x,
                   size_t n, float *y);
void aural__linear_ref(const aural__mat *w, const float *b, const float *x,
                       size_t n, float *y);

/* Attention of one head of one query row: q (hs) over n_ctx cached
 * frames. Frame j (oldest first) is in ring slot (slot_first + j) mod
 * n_slots: its key lane c at kt[c * w_pad + slot] (keys transposed, so that
 * 16 slots load as one vector), its value at v[slot * ldv]. Writes o (hs);
 * scores (w_pad) is scratch. Scores, softmax and the sums of the weighted
 * values' chains are in double precision; each output is rounded to float
 * once. */
void aural__attention(const float *q, const float *kt, size_t w_pad,
                      const float *v, size_t ldv, size_t hs, size_t n_slots,
                      size_t slot_first, size_t n_ctx, double scale,
                      double *scores, float *o);
void aural__attention_ref(const float *q, const float *kt, size_t w_pad,
                          const float *v, size_t ldv, size_t hs,
                          size_t n_slots, size_t slot_first, size_t n_ctx,
                          double scale, double *scores, float *o);

/* aural__attention in its two steps, for several rows of one head at once.
 * Scores of n_rows query rows (ldq apart) against every one of the w_pad
 * slots of kt, context or not (every slot must hold a number): scores
 * (n_rows, w_pad), row r's score for slot s at scores[r * w_pad + s]. */
void aural__attention_scores(const float *q, size_t ldq, size_t n_rows,
                             const float *kt, size_t w_pad, size_t hs,
                             double scale, double *scores);
void aural__attention_scores_ref(const float *q, size_t ldq, size_t n_rows,
                                 const float *kt, size_t w_pad, size_t hs,
                                 double scale, double *scores);
/* Softmax over the n_ctx context slots of one row of scores (overwritten)
 * and the weighted sum of their values into o (hs): aural__attention_mix_rows
 * for one row whose frames are all in the ring (numbered from 0, the
 * oldest). */
void aural__attention_mix(double *scores, const float *v, size_t ldv,
                          size_t hs, size_t n_slots, size_t slot_first,
                          size_t n_ctx, float *o);

/* Up to AURAL__MIX_ROWS query rows of one head, of consecutive frames,
 * mixed together so that each value loaded serves every row that sees it.
 * The group's frames are numbered from the oldest that any row sees:
 * frames 0 .. n_old - 1 are in the ring, frame i in slot (slot_first + i)
 * mod n_slots; frame n_old + j is row j's own, whose value is not in the
 * ring yet (it is at v_new + j * ld_new) but whose score is in slot
 * (slot_first + n_old + j) mod n_slots like any other. Row j sees the
 * n_ctx[j] frames that end at its own. aural__mix_plan_of() works out, once
 * for every head, which rows see which stretches of frames. */
#define AURAL__MIX_ROWS 3
typedef struct aural__mix_plan {
  size_t g, n_slots, slot_first, n_old;
  size_t lo[AURAL__MIX_ROWS];    /* row j sees frames lo[j] .. n_old + j */
  size_t n_ctx[AURAL__MIX_ROWS]; /* n_old + j - lo[j] + 1 */
  int n_seg;
  struct aural__mix_seg {
    size_t i0, n;   /* frames i0 .. i0 + n - 1, in slots s0 .. s0 + n - 1 */
    size_t s0;
    int is_new;     /* their values are rows of v_new, else ring slots */
    int all;        /* every row sees each of them */
    unsigned flip;  /* bit j: row j's even chain takes the odd frames */
  } seg[10];
} aural__mix_plan;
/* g rows (1 .. AURAL__MIX_ROWS) as above; n_ctx[0] = n_old + 1 (row 0
 * sees frame 0), every n_ctx[j] at most n_slots and n_old + j + 1, and
 * n_old + j + 1 - n_ctx[j] nondecreasing in j. */
void aural__mix_plan_of(aural__mix_plan *mp, size_t g, size_t n_slots,
                        size_t slot_first, size_t n_old, const size_t *n_ctx);
/* Softmax over each row's context (its scores, row j at scores + j * lds,
 * overwritten; each row's first 16 ceil(n_slots / 16) doubles are read,
 * in the context or not) and the weighted sums of its values into
 * o + j * ldo (hs).
 * The vector paths: each weight rounded to float; the row's context as
 * runs of consecutive slots, oldest first (from its first frame to the
 * ring's end, then from slot 0), the products of each run's 1st, 3rd, ...
 * frames in one float chain and of its 2nd, 4th, ... in another (both
 * going on from run to run), the two added in double and rounded once.
 * The plain path sums every product in double. Either way a row's bits do
 * not depend on the group it was mixed in. */
void aural__attention_mix_rows(const aural__mix_plan *mp, double *scores,
                               size_t lds, const float *v, size_t ldv,
                               const float *v_new, size_t ld_new, size_t hs,
                               float *o, size_t ldo);

/* In place over n rows of width d: y = (x - mean) / sqrt(var + eps) * g + b. */
void aural__layer_norm(float *x, size_t n, int d, const float *g,
                       const float *b, float eps);
/* The same from x into y (which may be x). */
void aural__layer_norm_to(const float *x, float *y, size_t n, int d,
                          const float *g, const float *b, float eps);

/* In place over n values. A value's result has the same bits whatever n
 * is and wherever the value sits in x: the encoder calls them once over
 * all the rows of a pass, so anything else would make a frame's output
 * depend on how many frames were computed with it. */
void aural__gelu(float *x, size_t n);
/* Rotary positions of one row: pairs (2i, 2i+1) of each of the n_heads
 * heads of v (hs each) turned by the angle whose cosine and sine are
 * cs[i] and sn[i]: (a, b) -> (a cs - b sn, a sn + b cs), each product
 * rounded, then the sum (the same bits on every path). */
void aural__rope(float *v, int n_heads, int hs, const float *cs,
                 const float *sn);
void aural__relu(float *x, size_t n);

/* For tests that compare the bf16 paths in one process: products of bf16
 * matrices take the emulation even where the CPU has AVX512-BF16
 * (EMULATE), or its dot products at every size where it has them (DOT),
 * or as aural_model_bf16_dot_rows() says (AUTO). Not thread-safe: call it
 * while no other thread computes. */
typedef enum aural__bf16_path {
  AURAL__BF16_AUTO,
  AURAL__BF16_EMULATE,
  AURAL__BF16_DOT,
} aural__bf16_path;
void aural__bf16_force(aural__bf16_path path);
/* Whether CPUID reports AVX512-BF16 (with AVX-512), whatever the self-check
 * at first use and AURAL_BF16 made of it. */
bool aural__bf16_cpu(void);

/* For tests that compare the two ways the AVX-512 matrix products
 * broadcast their inputs (the same bits): each row's input by an
 * instruction of its own (1, Intel's), or inside each multiply-add (0,
 * AMD's), or as chosen for this CPU (-1). Not thread-safe. */
void aural__gemm_broadcast(int how);

/* Name of the kernel aural__linear uses on this CPU. */
const char *aural__gemm_kernel(void);

/* The instruction sets the kernels come in. The best one this CPU runs is
 * chosen once per process; the environment variable AURAL_ISA (avx512,
 * avx2 or scalar) forces another that the CPU runs. Whatever the set,
 * matrix products and attention scores have the scalar oracle's bits;
 * the AVX2 and AVX-512 sets also agree with each other bit for bit in
 * gelu, layer norm and the attention mix (kernels.h). */
typedef enum aural__isa {
  AURAL__ISA_SCALAR,
  AURAL__ISA_AVX2,  /* AVX2 + FMA + F16C */
  AURAL__ISA_AVX512 /* AVX-512F + FMA + F16C */
} aural__isa;
aural__isa aural__isa_in_use(void);
/* Whether this CPU and its OS run isa's kernels. */
bool aural__isa_supported(aural__isa isa);
/* "scalar", "avx2" or "avx512". */
const char *aural__isa_name(aural__isa isa);
/* For tests that compare sets in one process: switches every kernel to
 * isa's from now on, or returns false (and changes nothing) when the CPU
 * cannot run it. Not thread-safe: call it while no other thread computes. */
bool aural__isa_use(aural__isa isa);

#endif
