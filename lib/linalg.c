/*
 * The numeric kernels of the encoder: matrix products, layer norm and
 * activations.
 */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aural/encoder.h"
#include "internal.h"

void aural__linear_ref(const aural__mat *w, const float *b, const float *x,
                       size_t n, float *y) {
  size_t rows = (size_t)w->rows, cols = (size_t)w->cols;
  for (size_t i = 0; i < n; i++) {
    for (size_t r = 0; r < rows; r++) {
      float acc = 0.0f;
      for (size_t c = 0; c < cols; c++) {
        size_t at = aural__packed_at(r, c, cols);
        float wv = w->f32 != NULL ? w->f32[at] : aural__f16_to_f32(w->f16[at]);
        acc = fmaf(x[i * cols + c], wv, acc);
      }
      y[i * rows + r] = b != NULL ? acc + b[r] : acc;
    }
  }
}

/*
 * The AVX-512 kernels. Output columns go 32 at a time (two panels, two
 * vectors); rows of x go a few at a time, each row's input broadcast and
 * multiplied into its two accumulators, so one k step is 2 loads of W and
 * 2 MR fused multiply-adds. Six rows keep 12 accumulators in registers and
 * both FMA units busy. A panel past the last one repeats the last, with
 * its lanes masked off, so that the loops over k have no branches.
 */
#define F32_W(p, at) _mm512_loadu_ps((const float *)(p) + (at))
#define F16_W(p, at) \
  _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)(p) + (at))))

/* Few rows (frame mode): MR rows of x (K apart) against NP panels over all
 * of k, so that the weights stream past the rows once. More panels when
 * there are fewer rows, for enough independent chains to cover the FMA
 * latency. ws[q] points at panel q's first k; y at the first output, rows
 * N apart; lanes outside ms[q] are neither read nor written. The bias bs is
 * added after the chain. */
#define DEFINE_FEW(NAME, MR, NP, LOAD)                                         \
  __attribute__((target("avx512f,fma,f16c"), always_inline)) static inline void \
  NAME(const void *const *ws, const float *x, size_t K, float *y, size_t N,    \
       const __m512 *bs, const __mmask16 *ms) {                                \
    __m512 acc[MR][NP];                                                        \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                       \
      _Pragma("GCC unroll 8") for (int q = 0; q < NP; q++) acc[r][q] =         \
          _mm512_setzero_ps();                                                 \
    _Pragma("GCC unroll 4") for (size_t k = 0; k < K; k++) {                   \
      __m512 w[NP];                                                            \
      _Pragma("GCC unroll 8") for (int q = 0; q < NP; q++) w[q] =              \
          LOAD(ws[q], k * 16);                                                 \
      _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                   \
        __m512 xv = _mm512_set1_ps(x[(size_t)r * K + k]);                      \
        _Pragma("GCC unroll 8") for (int q = 0; q < NP; q++) acc[r][q] =       \
            _mm512_fmadd_ps(xv, w[q], acc[r][q]);                              \
      }                                                                        \
    }                                                                          \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                       \
      _Pragma("GCC unroll 8") for (int q = 0; q < NP; q++)                     \
        _mm512_mask_storeu_ps(y + (size_t)r * N + 16 * q, ms[q],               \
                              _mm512_add_ps(acc[r][q], bs[q]));                \
  }
#define DEFINE_FEW_ALL(T, LOAD)    \
  DEFINE_FEW(few1_##T, 1, 8, LOAD) \
  DEFINE_FEW(few2_##T, 2, 4, LOAD) \
  DEFINE_FEW(few3_##T, 3, 4, LOAD) \
  DEFINE_FEW(few4_##T, 4, 2, LOAD) \
  DEFINE_FEW(few5_##T, 5, 2, LOAD)
DEFINE_FEW_ALL(f32, F32_W)
DEFINE_FEW_ALL(f16, F16_W)

/* Many rows: MR rows of x (ldx apart) against two float panels w0, w1
 * over kc values of k. y points at the tile's first output, rows N apart.
 * The first k block starts from zero, later ones from the partial sums
 * left in y, so each output stays one fused multiply-add chain over k in
 * order; the last k block adds the bias. Every four k, the next pf_n of
 * the pf_lines lines from pf on are prefetched into L2: the caller points
 * pf at the weights it needs next. */
#define DEFINE_TILE(NAME, MR)                                                  \
  __attribute__((target("avx512f,fma"), always_inline)) static inline void    \
  NAME(const float *w0, const float *w1, const float *x, size_t ldx,           \
       size_t kc, float *y, size_t N, const __m512 *bs, const __mmask16 *ms,   \
       int first, int last, const char *pf, size_t pf_lines, size_t pf_n) {    \
    __m512 acc[MR][2];                                                         \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                       \
      _Pragma("GCC unroll 2") for (int q = 0; q < 2; q++) acc[r][q] =          \
          first ? _mm512_setzero_ps()                                          \
                : _mm512_maskz_loadu_ps(ms[q], y + (size_t)r * N + 16 * q);    \
    size_t k = 0;                                                              \
    for (; k + 4 <= kc; k += 4) {                                              \
      size_t n_pf = pf_lines < pf_n ? pf_lines : pf_n;                         \
      for (size_t i = 0; i < n_pf; i++, pf += 64) _mm_prefetch(pf, _MM_HINT_T1); \
      pf_lines -= n_pf;                                                        \
      _Pragma("GCC unroll 4") for (size_t u = k; u < k + 4; u++) {             \
        __m512 a = _mm512_loadu_ps(w0 + 16 * u),                               \
               c = _mm512_loadu_ps(w1 + 16 * u);                               \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                 \
          __m512 xv = _mm512_set1_ps(x[(size_t)r * ldx + u]);                  \
          acc[r][0] = _mm512_fmadd_ps(xv, a, acc[r][0]);                       \
          acc[r][1] = _mm512_fmadd_ps(xv, c, acc[r][1]);                       \
        }                                                                      \
      }                                                                        \
    }                                                                          \
    for (; k < kc; k++) {                                                      \
      __m512 a = _mm512_loadu_ps(w0 + 16 * k),                                 \
             c = _mm512_loadu_ps(w1 + 16 * k);                                 \
      _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                   \
        __m512 xv = _mm512_set1_ps(x[(size_t)r * ldx + k]);                    \
        acc[r][0] = _mm512_fmadd_ps(xv, a, acc[r][0]);                         \
        acc[r][1] = _mm512_fmadd_ps(xv, c, acc[r][1]);                         \
      }                                                                        \
    }                                                                          \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                       \
      _Pragma("GCC unroll 2") for (int q = 0; q < 2; q++)                      \
        _mm512_mask_storeu_ps(y + (size_t)r * N + 16 * q, ms[q],               \
                              last ? _mm512_add_ps(acc[r][q], bs[q])           \
                                   : acc[r][q]);                               \
  }
DEFINE_TILE(tile3, 3)
DEFINE_TILE(tile4, 4)
DEFINE_TILE(tile5, 5)
DEFINE_TILE(tile6, 6)

/* Panels [p, p + np) at k = k0: pointers (a panel past the last repeats
 * the last), store masks (zero past the last) and bias (zero without). */
#define PANEL_SETUP(ELEM)                                                      \
  const void *ws[8];                                                           \
  __m512 bs[8];                                                                \
  __mmask16 ms[8];                                                             \
  for (size_t q = 0; q < np; q++) {                                            \
    size_t pq = p + q < n_panels ? p + q : n_panels - 1;                       \
    size_t c = pq * AURAL__PANEL, left = N - c;                                \
    ws[q] = w + pq * ps + k0 * AURAL__PANEL;                                   \
    ms[q] = p + q >= n_panels ? 0                                              \
            : left >= 16      ? 0xffff                                         \
                              : (__mmask16)((1u << left) - 1);                 \
    /* Adding +0 where there is no bias keeps the chain's bits: a chain    \
     * that starts from +0 never ends at -0. */                              \
    bs[q] = b != NULL ? _mm512_maskz_loadu_ps(ms[q], b + c)                    \
                      : _mm512_setzero_ps();                                   \
  }

/* k values per block when there are many rows: two f32 panels of 256 k
 * are 32 KB, which stay in L1 while every row block of the chunk uses
 * them. Rows go in chunks of at most MC_BLOCKS row blocks (72 rows), whose
 * inputs for one k block (72 KB) stay in L2 while the chunk goes through
 * every panel pair. */
#define KC 256
#define MC_BLOCKS 12
#define MR_MAX 6

/*
 * Few rows (frame mode): the rows stay in registers and the weights stream
 * past them once, np panels at a time. Many rows (chunk mode, batches): the
 * rows are split into blocks of 3 to 6 (sizes differing by at most one, so
 * that no block is left with one or two rows and half-idle FMA units), and
 * the blocks into chunks; for each chunk and k block, the panel pairs go
 * in turn, each pair's block of weights loaded once and used by every row
 * block of the chunk, while the next pair's block is prefetched into L2, a
 * slice per row block.
 */
#define DEFINE_LINEAR(T, ELEM)                                                 \
  __attribute__((target("avx512f,fma,f16c"))) static void linear_##T(         \
      const ELEM *w, size_t N, size_t K, const float *b, const float *x,       \
      size_t M, float *y) {                                                    \
    size_t n_panels = (N + AURAL__PANEL - 1) / AURAL__PANEL;                   \
    size_t ps = aural__panel_stride(K);                                        \
    if (M < MR_MAX) {                                                          \
      size_t np = M == 1 ? 8 : M <= 3 ? 4 : 2, k0 = 0;                         \
      for (size_t p = 0; p < n_panels; p += np) {                              \
        PANEL_SETUP(ELEM)                                                      \
        float *yp = y + p * AURAL__PANEL;                                      \
        switch (M) {                                                           \
        case 1: few1_##T(ws, x, K, yp, N, bs, ms); break;                      \
        case 2: few2_##T(ws, x, K, yp, N, bs, ms); break;                      \
        case 3: few3_##T(ws, x, K, yp, N, bs, ms); break;                      \
        case 4: few4_##T(ws, x, K, yp, N, bs, ms); break;                      \
        default: few5_##T(ws, x, K, yp, N, bs, ms); break;                     \
        }                                                                      \
      }                                                                        \
      return;                                                                  \
    }                                                                          \
    const size_t np = 2;                                                       \
    /* Row block j starts at row j * mr_lo + min(j, n_hi): mr_lo + 1 rows    \
     * for the first n_hi blocks, mr_lo for the others. */                   \
    size_t nb = (M + MR_MAX - 1) / MR_MAX, mr_lo = M / nb, n_hi = M % nb;     \
    /* Half-precision panels are widened once per block into this buffer   \
     * (exactly: every half is a float) and reused by every row block. */   \
    float wide[2 * KC * AURAL__PANEL] __attribute__((aligned(64)));            \
    size_t n_ch = (nb + MC_BLOCKS - 1) / MC_BLOCKS,                            \
           ch = (nb + n_ch - 1) / n_ch; /* blocks per chunk, balanced */      \
    for (size_t j0 = 0; j0 < nb; j0 += ch) {                                   \
      size_t j1 = nb - j0 < ch ? nb : j0 + ch;                                 \
      size_t i0 = j0 * mr_lo + (j0 < n_hi ? j0 : n_hi);                        \
      for (size_t k0 = 0; k0 < K; k0 += KC) {                                  \
        size_t kc = K - k0 < KC ? K - k0 : KC;                                 \
        size_t kn = K - k0 - kc < KC ? K - k0 - kc : KC;                       \
        int first = k0 == 0, last = k0 + kc == K;                              \
        for (size_t p = 0; p < n_panels; p += np) {                            \
          PANEL_SETUP(ELEM)                                                    \
          const float *w0 = (const float *)ws[0], *w1 = (const float *)ws[1];  \
          if (sizeof(ELEM) == 2) {                                             \
            for (size_t q = 0; q < np; q++)                                    \
              for (size_t k = 0; k < kc; k++)                                  \
                _mm512_store_ps(wide + (q * KC + k) * AURAL__PANEL,            \
                                F16_W(ws[q], 16 * k));                         \
            w0 = wide;                                                         \
            w1 = wide + KC * AURAL__PANEL;                                     \
          }                                                                    \
          /* The next block of weights: the next pair's, else the first    \
           * pair's at the next k block (none after the last): lp lines of  \
           * each panel. Row blocks take turns at the two panels, each      \
           * fetching a slice of at most `per` lines, pf_n every four k. */ \
          size_t pn = p + np, k1 = k0, kcn = kc, nbc = j1 - j0;                \
          if (pn >= n_panels) pn = 0, k1 = k0 + kc, kcn = kn;                  \
          size_t lp = kcn * AURAL__PANEL * sizeof(ELEM) / 64,                  \
                 n_sl = nbc > 1 ? nbc / 2 : 1, per = (lp + n_sl - 1) / n_sl,   \
                 pf_n = kc >= 4 ? (per + kc / 4 - 1) / (kc / 4) : 0;           \
          const ELEM *wn = w + pn * ps + k1 * AURAL__PANEL;                    \
          float *yp = y + i0 * N + p * AURAL__PANEL;                           \
          const float *xj = x + i0 * K + k0;                                   \
          for (size_t j = j0; j < j1; j++) {                                   \
            size_t mr = mr_lo + (j < n_hi), q = (j - j0) % 2,                  \
                   at = (j - j0) / 2 * per, n = 0;                             \
            const char *pfj = (const char *)w0;                                \
            if (pn + q < n_panels && at < lp) {                                \
              pfj = (const char *)(wn + q * ps) + 64 * at;                     \
              n = lp - at < per ? lp - at : per;                               \
            }                                                                  \
            switch (mr) {                                                      \
            case 3: tile3(w0, w1, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n); break; \
            case 4: tile4(w0, w1, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n); break; \
            case 5: tile5(w0, w1, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n); break; \
            default: tile6(w0, w1, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n); break; \
            }                                                                  \
            xj += mr * K;                                                      \
            yp += mr * N;                                                      \
          }                                                                    \
        }                                                                      \
      }                                                                        \
    }                                                                          \
  }
DEFINE_LINEAR(f32, float)
DEFINE_LINEAR(f16, uint16_t)

static void linear_avx512(const aural__mat *w, const float *b, const float *x,
                          size_t M, float *y) {
  size_t N = (size_t)w->rows, K = (size_t)w->cols;
  if (w->f32 != NULL)
    linear_f32(w->f32, N, K, b, x, M, y);
  else
    linear_f16(w->f16, N, K, b, x, M, y);
}

typedef void (*linear_fn)(const aural__mat *, const float *, const float *,
                          size_t, float *);
static linear_fn linear_impl;
static const char *kernel_name;
static pthread_once_t kernel_once = PTHREAD_ONCE_INIT;

static void pick_kernel(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") &&
      getenv("AURAL_GEMM_SCALAR") == NULL) {
    linear_impl = linear_avx512;
    kernel_name = "aural AVX-512 FMA (register tiles of 3-6 rows x 32 "
                  "columns over L1-sized weight blocks; f16 weights via F16C)";
  } else {
    linear_impl = aural__linear_ref;
    kernel_name = "aural scalar reference (no AVX-512 on this CPU: slow)";
  }
}

const char *aural__gemm_kernel(void) {
  pthread_once(&kernel_once, pick_kernel);
  return kernel_name;
}

void aural__linear(const aural__mat *w, const float *b, const float *x,
                   size_t n, float *y) {
  pthread_once(&kernel_once, pick_kernel);
  linear_impl(w, b, x, n, y);
}

/* glibc's vector math library (libmvec): erf on 16 floats at a time,
 * within a few ulp of erff. */
__attribute__((target("avx512f"))) __m512 _ZGVeN16v_erff(__m512 x);

__attribute__((target("avx512f"))) static void gelu_avx512(float *x,
                                                          size_t n) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f),
               rsqrt2 = _mm512_set1_ps((float)M_SQRT1_2);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    __m512 e = _ZGVeN16v_erff(_mm512_mul_ps(v, rsqrt2));
    _mm512_storeu_ps(x + i,
                     _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, e)));
  }
  for (; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
}

void aural__gelu(float *x, size_t n) {
  pthread_once(&kernel_once, pick_kernel);
  if (linear_impl != aural__linear_ref) {
    gelu_avx512(x, n);
    return;
  }
  for (size_t i = 0; i < n; i++)
    x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
}

/* The cached frames as at most two runs of consecutive slots, oldest
 * first: [slot_first, end of ring) and then [0, rest). */
typedef struct slot_runs {
  size_t start[2], len[2];
  int n;
} slot_runs;

static slot_runs runs_of(size_t n_slots, size_t slot_first, size_t n_ctx) {
  slot_runs r = {.n = 1};
  size_t first_len = n_slots - slot_first < n_ctx ? n_slots - slot_first : n_ctx;
  r.start[0] = slot_first;
  r.len[0] = first_len;
  if (first_len < n_ctx) {
    r.start[1] = 0;
    r.len[1] = n_ctx - first_len;
    r.n = 2;
  }
  return r;
}

/* Softmax of scores (n) in place; returns 1 / sum of the exponentials. */
static float softmax_ref(float *scores, size_t n) {
  float best = -INFINITY, sum = 0.0f;
  for (size_t j = 0; j < n; j++)
    if (scores[j] > best) best = scores[j];
  for (size_t j = 0; j < n; j++) {
    scores[j] = expf(scores[j] - best);
    sum += scores[j];
  }
  return 1.0f / sum;
}

/* Scalar attention: the oracle, and the path for head sizes that are not
 * a multiple of 16 or CPUs without AVX-512. */
void aural__attention_ref(const float *q, const float *kt, size_t w_pad,
                          const float *v, size_t ldv, size_t hs,
                          size_t n_slots, size_t slot_first, size_t n_ctx,
                          float scale, float *scores, float *o) {
  slot_runs runs = runs_of(n_slots, slot_first, n_ctx);
  size_t j = 0;
  for (int ri = 0; ri < runs.n; ri++)
    for (size_t s = runs.start[ri]; s < runs.start[ri] + runs.len[ri]; s++) {
      float sc = 0.0f;
      for (size_t c = 0; c < hs; c++) sc += q[c] * kt[c * w_pad + s];
      scores[j++] = sc * scale;
    }
  float inv = softmax_ref(scores, n_ctx);
  memset(o, 0, hs * sizeof *o);
  j = 0;
  for (int ri = 0; ri < runs.n; ri++)
    for (size_t s = runs.start[ri]; s < runs.start[ri] + runs.len[ri]; s++) {
      const float *vs = v + s * ldv;
      float pj = scores[j++] * inv;
      for (size_t c = 0; c < hs; c++) o[c] += pj * vs[c];
    }
}

__attribute__((target("avx512f"))) __m512 _ZGVeN16v_expf(__m512 x);

/* The slots of group g (slots 16 g to 16 g + 15) that lie in [lo, hi). */
static inline __mmask16 group_mask(size_t g, size_t lo, size_t hi) {
  size_t a = 16 * g, b = a + 16;
  lo = lo > a ? lo : a;
  hi = hi < b ? hi : b;
  return lo >= hi ? 0 : (__mmask16)(((1u << (hi - lo)) - 1) << (lo - a));
}

/* The slots of group g that hold one of the n_ctx cached frames. */
static inline __mmask16 ctx_mask(const slot_runs *runs, size_t g) {
  __mmask16 m = 0;
  for (int ri = 0; ri < runs->n; ri++)
    m |= group_mask(g, runs->start[ri], runs->start[ri] + runs->len[ri]);
  return m;
}

/* o (NV vectors) = sum over the cached slots s of scores[s] * inv times
 * the NV vectors at v + s * ldv: even and odd slots of each run in separate
 * chains, added at the end. */
#define DEFINE_PV(NAME, NV)                                                    \
  __attribute__((target("avx512f,fma"), always_inline)) static inline void    \
  NAME(const slot_runs *runs, const float *scores, float inv, const float *v,  \
       size_t ldv, float *o) {                                                 \
    __m512 acc[2][NV];                                                         \
    _Pragma("GCC unroll 4") for (int i = 0; i < NV; i++) acc[0][i] =           \
        acc[1][i] = _mm512_setzero_ps();                                       \
    for (int ri = 0; ri < runs->n; ri++) {                                     \
      size_t s = runs->start[ri], end = s + runs->len[ri];                     \
      for (; s + 2 <= end; s += 2) {                                           \
        __m512 p0 = _mm512_set1_ps(scores[s] * inv),                           \
               p1 = _mm512_set1_ps(scores[s + 1] * inv);                       \
        const float *v0 = v + s * ldv, *v1 = v0 + ldv;                         \
        _Pragma("GCC unroll 4") for (int i = 0; i < NV; i++) {                 \
          acc[0][i] = _mm512_fmadd_ps(p0, _mm512_loadu_ps(v0 + 16 * i), acc[0][i]); \
          acc[1][i] = _mm512_fmadd_ps(p1, _mm512_loadu_ps(v1 + 16 * i), acc[1][i]); \
        }                                                                      \
      }                                                                        \
      if (s < end) {                                                           \
        __m512 p0 = _mm512_set1_ps(scores[s] * inv);                           \
        _Pragma("GCC unroll 4") for (int i = 0; i < NV; i++) acc[0][i] =       \
            _mm512_fmadd_ps(p0, _mm512_loadu_ps(v + s * ldv + 16 * i), acc[0][i]); \
      }                                                                        \
    }                                                                          \
    _Pragma("GCC unroll 4") for (int i = 0; i < NV; i++)                       \
      _mm512_storeu_ps(o + 16 * i, _mm512_add_ps(acc[0][i], acc[1][i]));       \
  }
DEFINE_PV(pv_block4, 4)
DEFINE_PV(pv_block1, 1)

/* The same with 16-wide vectors, slot by slot rather than oldest first:
 * scores (indexed by slot) of 64 slots at a time from the transposed keys,
 * in one pass however the cached frames wrap around the ring, exp from
 * libmvec, values 16 lanes of the head at a time. Sums go in another order
 * than the oracle's (within rounding of it), but always the same one for
 * the same frame, however the frames came in. Lanes of slots outside the
 * context load nothing. Needs hs % 16 == 0. */
__attribute__((target("avx512f,fma"))) static void attention_avx512(
    const float *qh, const float *kh, size_t w_pad, const float *vr,
    size_t ldv, size_t hs, size_t n_slots, size_t slot_first, size_t n_ctx,
    float scale, float *scores, float *oh) {
  size_t nv = hs / 16, n_grp = (n_slots + 15) / 16;
  slot_runs runs = runs_of(n_slots, slot_first, n_ctx);
  const __m512 vscale = _mm512_set1_ps(scale);
  __m512 vbest = _mm512_set1_ps(-INFINITY);
  for (size_t g0 = 0; g0 < n_grp; g0 += 4) {
    __mmask16 m[4];
    for (size_t g = 0; g < 4; g++)
      m[g] = g0 + g < n_grp ? ctx_mask(&runs, g0 + g) : 0;
    /* Eight chains: four groups of slots, even and odd lanes of q. */
    __m512 acc[2][4];
    for (int h = 0; h < 2; h++)
      for (int g = 0; g < 4; g++) acc[h][g] = _mm512_setzero_ps();
    for (size_t c = 0; c < hs; c += 2) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; h++) {
        __m512 bq = _mm512_set1_ps(qh[c + (size_t)h]);
        const float *row = kh + (c + (size_t)h) * w_pad + 16 * g0;
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++)
          acc[h][g] = _mm512_fmadd_ps(
              bq, _mm512_maskz_loadu_ps(m[g], row + 16 * g), acc[h][g]);
      }
    }
    for (size_t g = 0; g < 4; g++) {
      if (!m[g]) continue;
      __m512 sc = _mm512_mul_ps(_mm512_add_ps(acc[0][g], acc[1][g]), vscale);
      _mm512_mask_storeu_ps(scores + 16 * (g0 + g), m[g], sc);
      vbest = _mm512_mask_max_ps(vbest, m[g], vbest, sc);
    }
  }
  vbest = _mm512_set1_ps(_mm512_reduce_max_ps(vbest));
  __m512 vsum = _mm512_setzero_ps();
  for (size_t g = 0; g < n_grp; g++) {
    __mmask16 m = ctx_mask(&runs, g);
    if (!m) continue;
    __m512 e = _ZGVeN16v_expf(_mm512_sub_ps(
        _mm512_mask_loadu_ps(vbest, m, scores + 16 * g), vbest));
    e = _mm512_maskz_mov_ps(m, e);
    _mm512_mask_storeu_ps(scores + 16 * g, m, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  float inv = 1.0f / _mm512_reduce_add_ps(vsum);
  /* Values: four vectors of the head at once (then one), even and odd
   * slots of each run in separate chains. */
  size_t v0 = 0;
  for (; v0 + 4 <= nv; v0 += 4) pv_block4(&runs, scores, inv, vr + 16 * v0, ldv, oh + 16 * v0);
  for (; v0 < nv; v0++) pv_block1(&runs, scores, inv, vr + 16 * v0, ldv, oh + 16 * v0);
}

void aural__attention(const float *q, const float *kt, size_t w_pad,
                      const float *v, size_t ldv, size_t hs, size_t n_slots,
                      size_t slot_first, size_t n_ctx, float scale,
                      float *scores, float *o) {
  pthread_once(&kernel_once, pick_kernel);
  if (linear_impl != aural__linear_ref && hs % 16 == 0)
    attention_avx512(q, kt, w_pad, v, ldv, hs, n_slots, slot_first, n_ctx,
                     scale, scores, o);
  else
    aural__attention_ref(q, kt, w_pad, v, ldv, hs, n_slots, slot_first,
                         n_ctx, scale, scores, o);
}

/* One row of layer norm, the plain way: the oracle, and the path for
 * widths that are not a multiple of 16. */
static void layer_norm_row_ref(float *r, int d, const float *g,
                               const float *b, float eps) {
  float mean = 0.0f, var = 0.0f;
  for (int k = 0; k < d; k++) mean += r[k];
  mean /= (float)d;
  for (int k = 0; k < d; k++) var += (r[k] - mean) * (r[k] - mean);
  var /= (float)d;
  float inv = 1.0f / sqrtf(var + eps);
  for (int k = 0; k < d; k++) r[k] = (r[k] - mean) * inv * g[k] + b[k];
}

/* The same 16 lanes at a time (mean, then the variance about it). */
__attribute__((target("avx512f,fma"))) static void layer_norm_row_avx512(
    float *r, int d, const float *g, const float *b, float eps) {
  __m512 acc = _mm512_setzero_ps();
  for (int k = 0; k < d; k += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(r + k));
  float mean = _mm512_reduce_add_ps(acc) / (float)d;
  __m512 vm = _mm512_set1_ps(mean);
  acc = _mm512_setzero_ps();
  for (int k = 0; k < d; k += 16) {
    __m512 c = _mm512_sub_ps(_mm512_loadu_ps(r + k), vm);
    acc = _mm512_fmadd_ps(c, c, acc);
  }
  float var = _mm512_reduce_add_ps(acc) / (float)d;
  __m512 inv = _mm512_set1_ps(1.0f / sqrtf(var + eps));
  for (int k = 0; k < d; k += 16) {
    __m512 c = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(r + k), vm), inv);
    _mm512_storeu_ps(r + k, _mm512_fmadd_ps(c, _mm512_loadu_ps(g + k),
                                            _mm512_loadu_ps(b + k)));
  }
}

void aural__layer_norm(float *x, size_t n, int d, const float *g,
                       const float *b, float eps) {
  pthread_once(&kernel_once, pick_kernel);
  int vec = linear_impl != aural__linear_ref && d % 16 == 0;
  for (size_t i = 0; i < n; i++) {
    if (vec)
      layer_norm_row_avx512(x + i * (size_t)d, d, g, b, eps);
    else
      layer_norm_row_ref(x + i * (size_t)d, d, g, b, eps);
  }
}

void aural__relu(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

const char *aural_gemm_name(void) { return aural__gemm_kernel(); }
