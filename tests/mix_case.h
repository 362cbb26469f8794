/* A group of attention rows for aural__attention_mix_rows, as the encoder
 * makes them, for the kernel tests (test_linalg, test_isa): a stream
 * whose first frame is `first`, a ring of `w` value slots holding frames
 * up to t0 - 1 (frame f in slot f mod w), and rows for frames t0 ..
 * t0 + g - 1 whose values are not in the ring yet. Header-only; include
 * after internal.h and helpers.h. */
#ifndef AURAL_TESTS_MIX_CASE_H
#define AURAL_TESTS_MIX_CASE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct mix_case {
  size_t g, w, hs, ldv, ld_new, lds;
  uint64_t first, t0;
  float *ring;     /* (w, ldv) */
  float *v_new;    /* (g, ld_new) */
  double *scores;  /* (g, lds), random; the kernel overwrites a copy */
  size_t n_ctx[AURAL__MIX_ROWS];
  aural__mix_plan plan;
} mix_case;

/* Random values and scores (spread: the scores' scale). */
static inline void mix_case_make(mix_case *mc, size_t g, size_t w, size_t hs,
                                 uint64_t first, uint64_t t0, double spread) {
  memset(mc, 0, sizeof *mc);
  mc->g = g, mc->w = w, mc->hs = hs, mc->first = first, mc->t0 = t0;
  mc->ldv = hs + 3, mc->ld_new = hs + 5, mc->lds = (w + 15) / 16 * 16;
  mc->ring = malloc(w * mc->ldv * sizeof *mc->ring);
  mc->v_new = malloc(g * mc->ld_new * sizeof *mc->v_new);
  mc->scores = malloc(g * mc->lds * sizeof *mc->scores);
  for (size_t i = 0; i < w * mc->ldv; i++) mc->ring[i] = test_frand();
  for (size_t i = 0; i < g * mc->ld_new; i++) mc->v_new[i] = test_frand();
  for (size_t i = 0; i < g * mc->lds; i++)
    mc->scores[i] = (double)test_frand() * spread;
  for (size_t j = 0; j < g; j++) {
    uint64_t t = t0 + j, seen = t - first + 1;
    mc->n_ctx[j] = (size_t)(seen < w ? seen : w);
  }
  uint64_t lo0 = t0 + 1 - mc->n_ctx[0];
  aural__mix_plan_of(&mc->plan, g, w, (size_t)(lo0 % w), mc->n_ctx[0] - 1,
                     mc->n_ctx);
}

/* The group through the kernels in use: o (g, hs). */
static inline void mix_case_run(const mix_case *mc, float *o) {
  double *sc = malloc(mc->g * mc->lds * sizeof *sc);
  memcpy(sc, mc->scores, mc->g * mc->lds * sizeof *sc);
  aural__attention_mix_rows(&mc->plan, sc, mc->lds, mc->ring, mc->ldv,
                            mc->v_new, mc->ld_new, mc->hs, o, mc->hs);
  free(sc);
}

/* Row j alone, as a group of one: the earlier rows' values written into
 * the ring first, as the encoder does after a group. o (hs). */
static inline void mix_case_run_row(const mix_case *mc, size_t j, float *o) {
  float *ring = malloc(mc->w * mc->ldv * sizeof *ring);
  memcpy(ring, mc->ring, mc->w * mc->ldv * sizeof *ring);
  for (size_t jj = 0; jj < j; jj++)
    memcpy(ring + ((mc->t0 + jj) % mc->w) * mc->ldv,
           mc->v_new + jj * mc->ld_new, mc->hs * sizeof *ring);
  size_t n = mc->n_ctx[j];
  uint64_t lo = mc->t0 + j + 1 - n;
  aural__mix_plan one;
  aural__mix_plan_of(&one, 1, mc->w, (size_t)(lo % mc->w), n - 1, &n);
  double *sc = malloc(mc->lds * sizeof *sc);
  memcpy(sc, mc->scores + j * mc->lds, mc->lds * sizeof *sc);
  aural__attention_mix_rows(&one, sc, 0, ring, mc->ldv,
                            mc->v_new + j * mc->ld_new, 0, mc->hs, o, 0);
  free(sc);
  free(ring);
}

/* Row j as internal.h defines the vector paths' mix, written out: its
 * float weights (as aural__attention_mix leaves them over a copy of its
 * scores), then for each lane the products of the 1st, 3rd, ... frames of
 * each run of slots (from its first frame to the ring's end, then from
 * slot 0) in one float chain and of the 2nd, 4th, ... in another, oldest
 * first, the two added in double and rounded once. o (hs). */
static inline void mix_case_chains(const mix_case *mc, size_t j, float *o) {
  size_t n = mc->n_ctx[j], w = mc->w;
  uint64_t lo = mc->t0 + j + 1 - n;
  size_t first = (size_t)(lo % w);
  double *sc = malloc(mc->lds * sizeof *sc);
  float *scratch = malloc(mc->hs * sizeof *scratch);
  memcpy(sc, mc->scores + j * mc->lds, mc->lds * sizeof *sc);
  aural__attention_mix(sc, mc->ring, mc->ldv, mc->hs, w, first, n, scratch);
  const float *p = (const float *)sc;
  size_t len0 = w - first < n ? w - first : n;
  size_t start[2] = {first, 0}, len[2] = {len0, n - len0};
  for (size_t c = 0; c < mc->hs; c++) {
    float chain[2] = {0.0f, 0.0f};
    uint64_t f = lo;
    for (int r = 0; r < 2; r++)
      for (size_t k = 0; k < len[r]; k++, f++) {
        const float *v = f < mc->t0 ? mc->ring + (f % w) * mc->ldv
                                    : mc->v_new + (f - mc->t0) * mc->ld_new;
        chain[k % 2] = fmaf(p[start[r] + k], v[c], chain[k % 2]);
      }
    o[c] = (float)((double)chain[0] + (double)chain[1]);
  }
  free(sc);
  free(scratch);
}

/* Row j in double: softmax over its frames' scores, values summed. */
static inline void mix_case_reference(const mix_case *mc, size_t j,
                                      double *o) {
  size_t n = mc->n_ctx[j];
  uint64_t lo = mc->t0 + j + 1 - n;
  const double *sj = mc->scores + j * mc->lds;
  double best = -INFINITY, sum = 0.0;
  for (uint64_t f = lo; f <= mc->t0 + j; f++)
    best = sj[f % mc->w] > best ? sj[f % mc->w] : best;
  for (uint64_t f = lo; f <= mc->t0 + j; f++) sum += exp(sj[f % mc->w] - best);
  for (size_t c = 0; c < mc->hs; c++) {
    double acc = 0.0;
    for (uint64_t f = lo; f <= mc->t0 + j; f++) {
      const float *v = f < mc->t0 ? mc->ring + (f % mc->w) * mc->ldv
                                  : mc->v_new + (f - mc->t0) * mc->ld_new;
      acc += exp(sj[f % mc->w] - best) / sum * v[c];
    }
    o[c] = acc;
  }
}

static inline void mix_case_free(mix_case *mc) {
  free(mc->ring);
  free(mc->v_new);
  free(mc->scores);
}

#endif
