/*
 * What the portable kernels of linalg.c share with the kernels of each
 * instruction set: the entry points of the AVX2 kernels (linalg_avx2.c)
 * and the pieces both vector paths must compute identically.
 *
 * Every vector path gives, lane for lane, the bits of the AVX-512 path:
 * the same operations on each value in the same order, only in narrower
 * registers. Matrix products and attention scores also equal the scalar
 * oracle; gelu, layer norm and the attention mix equal the AVX-512 path
 * but not the oracle (their sums go in lanes, their exp is libmvec's).
 */
#ifndef AURAL_KERNELS_H
#define AURAL_KERNELS_H

#include <stddef.h>

#include "internal.h"

/* The coefficients of the vector erf (gelu): erf on [k/4, (k+1)/4) is
 * sum_d aural__erf_c[d][k] t^d, t = z - (k + 1/2) / 4 (linalg.c). */
extern const float aural__erf_c[7][16];

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

/* The AVX2 + FMA + F16C kernels, with the contracts of the AVX-512 ones
 * in linalg.c: the matrix product (any shape), attention scores (w_pad a
 * multiple of 16), the mix (hs a multiple of 16), one row of layer norm
 * (d a multiple of 16) and gelu (any n). Only for a CPU that has all
 * three extensions. */
void aural__linear_avx2(const aural__mat *w, const float *b, const float *x,
                        size_t n, float *y);
void aural__scores_avx2(const float *q, size_t ldq, size_t n_rows,
                        const float *kt, size_t w_pad, size_t hs,
                        double scale, double *scores);
void aural__mix_avx2(double *scores, const float *v, size_t ldv, size_t hs,
                     size_t n_slots, size_t slot_first, size_t n_ctx,
                     float *o);
void aural__layer_norm_row_avx2(float *r, int d, const float *g,
                                const float *b, float eps);
void aural__gelu_avx2(float *x, size_t n);

#endif
