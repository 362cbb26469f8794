/*
 * What the portable kernels of linalg.c share with the kernels of each
 * instruction set: the entry points of the AVX2 kernels (linalg_avx2.c)
 * and the pieces both vector paths must compute identically.
 *
 * Every vector path gives, lane for lane, the bits of the AVX-512 path:
 * the same operations on each value in the same order, only in narrower
 * registers. Matrix products and attention scores also equal the scalar
 * oracle; gelu, layer norm and the attention mix equal the AVX-512 path
 * but not the oracle (their sums go in lanes, their exp is AURAL__EXP's).
 */
#ifndef AURAL_KERNELS_H
#define AURAL_KERNELS_H

#include <stddef.h>

#include "internal.h"

/* The coefficients of the vector erf (gelu): erf on [k/4, (k+1)/4) is
 * sum_d aural__erf_c[d][k] t^d, t = z - (k + 1/2) / 4 (linalg.c). */
extern const float aural__erf_c[7][16];

/* exp(x) in double for x <= 0 (the softmax's score minus its largest),
 * the same operations in both vector paths: x below -708 is taken as
 * -708 (whose exp, 3e-308, is 0 once a weight is rounded to float);
 * n = x / ln 2 rounded to the nearest integer by adding 1.5 * 2^52
 * (whose low bits then hold n); r = x - n ln 2 in two steps (|r| <=
 * 0.347); e^r by its Taylor polynomial of degree 12 in Horner's form
 * (relative error below 1e-15); times 2^n built from n's bits. Within a
 * few units in the last place of libm's exp. */
#define AURAL__EXP_MIN (-708.0)
#define AURAL__EXP_SHIFT 6755399441055744.0 /* 1.5 * 2^52 */
#define AURAL__EXP_LOG2E 1.4426950408889634
#define AURAL__EXP_LN2_HI 0.693145751953125 /* ln 2's first 32 bits */
#define AURAL__EXP_LN2_LO 1.4286068203094173e-06 /* ln 2 - LN2_HI */
#define AURAL__EXP_DEGREE 12
/* 1 / d! for d = 0 .. AURAL__EXP_DEGREE. */
static const double aural__exp_c[AURAL__EXP_DEGREE + 1] = {
    1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040,
    1.0 / 40320, 1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800,
    1.0 / 479001600};

/* The cached frames of an attention row as at most two runs of
 * consecutive ring slots, oldest first: [slot_first, end of ring) and
 * then [0, rest). */
typedef struct aural__slot_runs {
  size_t start[2], len[2];
  int n;
} aural__slot_runs;

static inline aural__slot_runs aural__runs_of(size_t n_slots,
                                              size_t slot_first,
                                              size_t n_ctx) {
  aural__slot_runs r = {.n = 1};
  size_t first_len =
      n_slots - slot_first < n_ctx ? n_slots - slot_first : n_ctx;
  r.start[0] = slot_first;
  r.len[0] = first_len;
  if (first_len < n_ctx) {
    r.start[1] = 0;
    r.len[1] = n_ctx - first_len;
    r.n = 2;
  }
  return r;
}

/* The slots of group g (slots 16 g to 16 g + 15) that lie in [lo, hi),
 * as a bit mask. */
static inline unsigned aural__group_mask(size_t g, size_t lo, size_t hi) {
  size_t a = 16 * g, b = a + 16;
  lo = lo > a ? lo : a;
  hi = hi < b ? hi : b;
  return lo >= hi ? 0 : ((1u << (hi - lo)) - 1) << (lo - a);
}

/* The slots of group g that hold one of the cached frames. */
static inline unsigned aural__ctx_mask(const aural__slot_runs *runs,
                                       size_t g) {
  unsigned m = 0;
  for (int ri = 0; ri < runs->n; ri++)
    m |= aural__group_mask(g, runs->start[ri], runs->start[ri] + runs->len[ri]);
  return m;
}

/* The frames of a mixing plan in the order both vector paths take them
 * (internal.h, aural__attention_mix_rows) for its ROWS rows (a constant
 * equal to mp->g): stretch by stretch, each
 * frame's value at vp and its weights in slot s; where every row sees the
 * frames, in pairs. FRAME(C, PARTIAL, vp, s, i) adds frame i into chain C
 * (0: even frames) of each row (PARTIAL: of each row that sees it);
 * SWAP(j) exchanges row j's two chains, for a row whose run of slots now
 * begins at an odd frame, so that its chains go on as they were. The sum
 * of a row's two chains does not depend on which is which. */
#define AURAL__MIX_WALK(mp, ROWS, v, ldv, v_new, ld_new, FRAME, SWAP)         \
  do {                                                                         \
    unsigned flip_ = 0;                                                        \
    for (int k_ = 0; k_ < (mp)->n_seg; k_++) {                                 \
      const struct aural__mix_seg *sg_ = &(mp)->seg[k_];                       \
      size_t i = sg_->i0, s = sg_->s0, end_ = sg_->i0 + sg_->n;                \
      size_t vs_ = sg_->is_new ? (ld_new) : (ldv);                             \
      const float *vp = sg_->is_new ? (v_new) + (i - (mp)->n_old) * (ld_new)   \
                                    : (v) + s * (ldv);                         \
      _Pragma("GCC unroll 4") for (int j_ = 0; j_ < (ROWS); j_++)              \
        if ((flip_ ^ sg_->flip) >> j_ & 1) SWAP(j_);                           \
      flip_ = sg_->flip;                                                       \
      if (sg_->all) {                                                          \
        if (i % 2) {                                                           \
          FRAME(1, 0, vp, s, i);                                               \
          i++, s++, vp += vs_;                                                 \
        }                                                                      \
        for (; i + 2 <= end_; i += 2, s += 2, vp += 2 * vs_) {                 \
          FRAME(0, 0, vp, s, i);                                               \
          FRAME(1, 0, vp + vs_, s + 1, i + 1);                                 \
        }                                                                      \
        if (i < end_) FRAME(0, 0, vp, s, i);                                   \
      } else {                                                                 \
        for (; i < end_; i++, s++, vp += vs_) {                                \
          if (i % 2)                                                           \
            FRAME(1, 1, vp, s, i);                                             \
          else                                                                 \
            FRAME(0, 1, vp, s, i);                                             \
        }                                                                      \
      }                                                                        \
    }                                                                          \
  } while (0)

/* How the many-row drivers of both vector paths split M >= 1 rows: nb
 * blocks of at most mr_max rows whose sizes differ by at most one (the
 * first n_hi blocks have mr_lo + 1 rows, the others mr_lo), so that no
 * block is left with one or two rows; and chunks of ch blocks (at most mc,
 * balanced), whose inputs stay in L2 while the chunk goes through every
 * panel. */
typedef struct aural__row_blocks {
  size_t nb, mr_lo, n_hi, ch;
} aural__row_blocks;

static inline aural__row_blocks aural__row_blocks_of(size_t m, size_t mr_max,
                                                     size_t mc) {
  aural__row_blocks rb;
  rb.nb = (m + mr_max - 1) / mr_max;
  rb.mr_lo = m / rb.nb;
  rb.n_hi = m % rb.nb;
  size_t n_ch = (rb.nb + mc - 1) / mc;
  rb.ch = (rb.nb + n_ch - 1) / n_ch;
  return rb;
}

/* Row block j's first row (j <= nb: nb gives M), and its rows. */
static inline size_t aural__row_block_start(const aural__row_blocks *rb,
                                            size_t j) {
  return j * rb->mr_lo + (j < rb->n_hi ? j : rb->n_hi);
}
static inline size_t aural__row_block_rows(const aural__row_blocks *rb,
                                           size_t j) {
  return rb->mr_lo + (j < rb->n_hi);
}

/* The AVX2 + FMA + F16C kernels, with the contracts of the AVX-512 ones
 * in linalg.c: the matrix product (any shape), attention scores (w_pad a
 * multiple of 16), the mix (hs a multiple of 16), one row of layer norm
 * (d a multiple of 16) and gelu (any n). Only for a CPU that has all
 * three extensions. */
void aural__linear_avx2(const aural__mat *w, const float *b, const float *x,
                        size_t n, float *y);
/* Precision bf16's products (linalg.c's contract) on these kernels, for
 * n >= 1 rows: the bits of the AVX-512 paths. */
void aural__linear_bf16_avx2(const aural__mat *w, const float *b,
                             const float *x, size_t n, float *y);
void aural__scores_avx2(const float *q, size_t ldq, size_t n_rows,
                        const float *kt, size_t w_pad, size_t hs,
                        double scale, double *scores);
void aural__mix_rows_avx2(const aural__mix_plan *mp, double *scores,
                          size_t lds, const float *v, size_t ldv,
                          const float *v_new, size_t ld_new, size_t hs,
                          float *o, size_t ldo);
void aural__layer_norm_row_avx2(const float *s, float *r, int d, const float *g,
                                const float *b, float eps);
void aural__gelu_avx2(float *x, size_t n);

#endif
