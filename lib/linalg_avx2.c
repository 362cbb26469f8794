/*
 * The AVX2 + FMA + F16C kernels: the AVX-512 kernels of linalg.c for CPUs
 * without AVX-512, in 8-lane registers (a 16-lane vector there is two
 * here: a panel of 16 outputs, 16 slots of a key group, 16 values of a
 * head or of a row). Every value goes through the same operations in the
 * same order as in the AVX-512 kernel, so both paths give the same bits;
 * only the register blocking differs, sized for 16 registers instead of
 * 32. kernels.h states the contracts.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "kernels.h"

#define KERNEL __attribute__((target("avx2,fma,f16c")))
#define KERNEL_INLINE \
  __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

/* Lanes 0 .. n - 1 of 8 set (all of them when n >= 8). */
KERNEL_INLINE __m256i first_lanes(size_t n) {
  int k = n > 8 ? 8 : (int)n;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The 8 floats at p, or the lanes of m alone (the others zero): a masked
 * load or store only where m leaves lanes out. On an AMD Zen 4 a masked
 * load and store cost three times a plain pair (1.75 against 0.57 ns in
 * a loop of them), and the attention mix and the tiles' totals did them
 * on every full vector. */
KERNEL_INLINE __m256 load_lanes(const float *p, __m256i m) {
  return _mm256_movemask_ps(_mm256_castsi256_ps(m)) == 0xff
             ? _mm256_loadu_ps(p)
             : _mm256_maskload_ps(p, m);
}
KERNEL_INLINE void store_lanes(float *p, __m256i m, __m256 v) {
  if (_mm256_movemask_ps(_mm256_castsi256_ps(m)) == 0xff)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, m, v);
}

/* The lanes of 4 doubles whose bit is set in the low 4 bits of bits. */
KERNEL_INLINE __m256i lanes_of4(unsigned bits) {
  const __m256i sel = _mm256_setr_epi64x(1, 2, 4, 8);
  return _mm256_cmpeq_epi64(
      _mm256_and_si256(_mm256_set1_epi64x((long long)bits), sel), sel);
}

/* The same for 4 doubles, bits being the lanes' bits as for lanes_of4(). */
KERNEL_INLINE __m256d load_lanes4(const double *p, unsigned bits) {
  return (bits & 0xfu) == 0xfu
             ? _mm256_loadu_pd(p)
             : _mm256_maskload_pd(p, lanes_of4(bits));
}
KERNEL_INLINE void store_lanes4(double *p, unsigned bits, __m256d v) {
  if ((bits & 0xfu) == 0xfu)
    _mm256_storeu_pd(p, v);
  else
    _mm256_maskstore_pd(p, lanes_of4(bits), v);
}

/* The 8 floats of a as doubles: lanes 0-3 in t[0], lanes 4-7 in t[1]. */
KERNEL_INLINE void widen(__m256d *t, __m256 a) {
  t[0] = _mm256_cvtps_pd(_mm256_castps256_ps128(a));
  t[1] = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
}

/* The 8 doubles of t (as widen() lays them out) rounded to floats. */
KERNEL_INLINE __m256 narrow(const __m256d *t) {
  return _mm256_set_m128(_mm256_cvtpd_ps(t[1]), _mm256_cvtpd_ps(t[0]));
}

/* The sum of 8 double lanes (lo: lanes 0-3, hi: lanes 4-7) in the order of
 * linalg.c's sum8(): upper four onto lower four, upper two onto lower two,
 * lane 1 onto lane 0. */
KERNEL_INLINE double sum8(__m256d lo, __m256d hi) {
  __m256d a = _mm256_add_pd(hi, lo);
  __m128d b = _mm_add_pd(_mm256_extractf128_pd(a, 1), _mm256_castpd256_pd128(a));
  return _mm_cvtsd_f64(b) + _mm_cvtsd_f64(_mm_unpackhi_pd(b, b));
}

/* The largest of 8 double lanes, in the order of linalg.c's max8(). */
KERNEL_INLINE double max8(__m256d lo, __m256d hi) {
  __m256d a = _mm256_max_pd(hi, lo);
  __m128d b = _mm_max_pd(_mm256_extractf128_pd(a, 1), _mm256_castpd256_pd128(a));
  return _mm_cvtsd_f64(_mm_max_pd(b, _mm_unpackhi_pd(b, b)));
}

/* ---- matrix products ---------------------------------------------------- */

/*
 * As in linalg.c, each output is k in chains of AURAL__CHAIN fused
 * multiply-adds from zero, the chains added in order into a total, then
 * the bias. A panel (16 outputs) is two vectors here. Few rows (frame
 * mode): the rows against several panels, the weights streaming past
 * once. Many rows: register tiles of 3 to 6 rows x one panel (12
 * accumulators, two weight vectors and a broadcast: 15 of the 16
 * registers; the totals live in memory, touched once per chain).
 */
#define F32_W(p, at) _mm256_loadu_ps((const float *)(p) + (at))
#define F16_W(p, at) \
  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)(p) + (at))))

/* MR rows of x (K apart) against NP panels over all of k. ws[q] points at
 * panel q's first k; y at the first output, rows N apart; vector v (half
 * v % 2 of panel v / 2) is stored in the lanes of ms[v] alone, after its
 * bias bs[v] is added. */
#define DEFINE_FEW(NAME, MR, NP, LOAD)                                         \
  KERNEL_INLINE void NAME(const void *const *ws, const float *x, size_t K,     \
                          float *y, size_t N, const __m256 *bs,                \
                          const __m256i *ms) {                                 \
    __m256 tot[MR][2 * NP];                                                    \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                       \
      _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) tot[r][v] =     \
          _mm256_setzero_ps();                                                 \
    for (size_t k0 = 0; k0 < K; k0 += AURAL__CHAIN) {                          \
      size_t k1 = K - k0 < AURAL__CHAIN ? K : k0 + AURAL__CHAIN;               \
      __m256 acc[MR][2 * NP];                                                  \
      _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                     \
        _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) acc[r][v] =   \
            _mm256_setzero_ps();                                               \
      _Pragma("GCC unroll 4") for (size_t k = k0; k < k1; k++) {               \
        __m256 w[2 * NP];                                                      \
        _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) w[v] =        \
            LOAD(ws[v / 2], k * 16 + 8 * (v % 2));                             \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                 \
          __m256 xv = _mm256_set1_ps(x[(size_t)r * K + k]);                    \
          _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) acc[r][v] = \
              _mm256_fmadd_ps(xv, w[v], acc[r][v]);                            \
        }                                                                      \
      }                                                                        \
      _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                     \
        _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++) tot[r][v] =   \
            _mm256_add_ps(tot[r][v], acc[r][v]);                               \
    }                                                                          \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                       \
      _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NP; v++)                 \
        store_lanes(y + (size_t)r * N + 8 * v, ms[v],                          \
                    _mm256_add_ps(tot[r][v], bs[v]));                          \
  }
#define DEFINE_FEW_ALL(T, LOAD)    \
  DEFINE_FEW(few1_##T, 1, 4, LOAD) \
  DEFINE_FEW(few2_##T, 2, 2, LOAD) \
  DEFINE_FEW(few3_##T, 3, 2, LOAD) \
  DEFINE_FEW(few4_##T, 4, 1, LOAD) \
  DEFINE_FEW(few5_##T, 5, 1, LOAD)
DEFINE_FEW_ALL(f32, F32_W)
DEFINE_FEW_ALL(f16, F16_W)

/* One k step of a tile: the panel's two weight vectors at k against MR
 * rows. */
#define TILE_STEP(MR, k)                                                       \
  do {                                                                         \
    __m256 a_ = _mm256_loadu_ps(w0 + 16 * (k)),                                \
           c_ = _mm256_loadu_ps(w0 + 16 * (k) + 8);                            \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                     \
      __m256 xv = _mm256_broadcast_ss(x + (size_t)r * ldx + (k));              \
      acc[r][0] = _mm256_fmadd_ps(xv, a_, acc[r][0]);                          \
      acc[r][1] = _mm256_fmadd_ps(xv, c_, acc[r][1]);                          \
    }                                                                          \
  } while (0)

/* Many rows: MR rows of x (ldx apart) against the float panel w0 over kc
 * values of k, as linalg.c's tiles: the first k block starts from zero,
 * later ones from the totals left in y; the last adds the bias; every
 * four k, the next pf_n of the pf_lines lines from pf on are prefetched
 * into L2. */
#define DEFINE_TILE(NAME, MR)                                                  \
  KERNEL_INLINE void NAME(const float *w0, const float *x, size_t ldx,         \
                          size_t kc, float *y, size_t N, const __m256 *bs,     \
                          const __m256i *ms, int first, int last,              \
                          const char *pf, size_t pf_lines, size_t pf_n) {      \
    __m256 tot[MR][2];                                                         \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                       \
      _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) tot[r][h] =          \
          first ? _mm256_setzero_ps()                                          \
                : load_lanes(y + (size_t)r * N + 8 * h, ms[h]);                \
    for (size_t k0 = 0; k0 < kc; k0 += AURAL__CHAIN) {                         \
      size_t k1 = kc - k0 < AURAL__CHAIN ? kc : k0 + AURAL__CHAIN, k = k0;     \
      __m256 acc[MR][2];                                                       \
      _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) acc[r][0] =         \
          acc[r][1] = _mm256_setzero_ps();                                     \
      for (; k + 4 <= k1; k += 4) {                                            \
        size_t n_pf = pf_lines < pf_n ? pf_lines : pf_n;                       \
        for (size_t i = 0; i < n_pf; i++, pf += 64) _mm_prefetch(pf, _MM_HINT_T1); \
        pf_lines -= n_pf;                                                      \
        /* Not unrolled: with 16 registers, GCC 12 unrolling these four     \
         * steps spills an accumulator (about 4% slower). */               \
        _Pragma("GCC unroll 1") for (size_t u = k; u < k + 4; u++)             \
          TILE_STEP(MR, u);                                                    \
      }                                                                        \
      for (; k < k1; k++) TILE_STEP(MR, k);                                    \
      _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                     \
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) tot[r][h] =        \
            _mm256_add_ps(tot[r][h], acc[r][h]);                               \
    }                                                                          \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                       \
      _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)                      \
        store_lanes(y + (size_t)r * N + 8 * h, ms[h],                          \
                    last ? _mm256_add_ps(tot[r][h], bs[h]) : tot[r][h]);       \
  }
DEFINE_TILE(tile1, 1) /* for precision bf16's few rows */
DEFINE_TILE(tile2, 2)
DEFINE_TILE(tile3, 3)
DEFINE_TILE(tile4, 4)
DEFINE_TILE(tile5, 5)
DEFINE_TILE(tile6, 6)

/* Panels [p, p + np) at k = k0: pointers (a panel past the last repeats
 * the last), the lanes to store of each half (none past the last panel)
 * and the bias (zero without; adding +0 keeps a chain's bits, as a chain
 * that starts from +0 never ends at -0). */
#define PANEL_SETUP()                                                          \
  const void *ws[4];                                                           \
  __m256 bs[8];                                                                \
  __m256i ms[8];                                                               \
  for (size_t q = 0; q < np; q++) {                                            \
    size_t pq = p + q < n_panels ? p + q : n_panels - 1;                       \
    size_t c = pq * AURAL__PANEL, left = p + q < n_panels ? N - c : 0;         \
    ws[q] = w + pq * ps + k0 * AURAL__PANEL;                                   \
    for (size_t h = 0; h < 2; h++) {                                           \
      size_t n_h = left > 8 * h ? left - 8 * h : 0;                            \
      ms[2 * q + h] = first_lanes(n_h);                                        \
      bs[2 * q + h] = b != NULL && n_h > 0                                     \
                          ? _mm256_maskload_ps(b + c + 8 * h, ms[2 * q + h])   \
                          : _mm256_setzero_ps();                               \
    }                                                                          \
  }

/* k values per block when there are many rows: one f32 panel of 256 k is
 * 16 KB, which stays in L1 while every row block of the chunk uses it;
 * rows in chunks of at most MC_BLOCKS row blocks (72 rows), whose inputs
 * for one k block (72 KB) stay in L2. */
#define KC 256
#define MC_BLOCKS 12
#define MR_MAX 6
_Static_assert(KC % AURAL__CHAIN == 0, "k blocks hold whole chains");

/*
 * linalg.c's driver with one panel per tile: few rows (at most 5) stream
 * the weights past rows held in registers; many rows go in blocks of 3
 * to 6 (balanced) and chunks of blocks; for each chunk and k block, the
 * panels go in turn, each panel's block of weights loaded once and used
 * by every row block of the chunk, while the next panel's block is
 * prefetched into L2, a slice per row block.
 */
#define DEFINE_LINEAR(T, ELEM)                                                 \
  KERNEL static void linear_##T(const ELEM *w, size_t N, size_t K,             \
                                const float *b, const float *x, size_t M,      \
                                float *y) {                                    \
    size_t n_panels = (N + AURAL__PANEL - 1) / AURAL__PANEL;                   \
    size_t ps = aural__panel_stride(K);                                        \
    if (M < MR_MAX) {                                                          \
      size_t np = M == 1 ? 4 : M <= 3 ? 2 : 1, k0 = 0;                         \
      for (size_t p = 0; M > 0 && p < n_panels; p += np) {                     \
        PANEL_SETUP()                                                          \
        float *yp = y + p * AURAL__PANEL;                                      \
        switch (M) {                                                           \
        case 1: few1_##T(ws, x, K, yp, N, bs, ms); break;                      \
        case 2: few2_##T(ws, x, K, yp, N, bs, ms); break;                      \
        case 3: few3_##T(ws, x, K, yp, N, bs, ms); break;                      \
        case 4: few4_##T(ws, x, K, yp, N, bs, ms); break;                      \
        case 5: few5_##T(ws, x, K, yp, N, bs, ms); break;                      \
        }                                                                      \
      }                                                                        \
      return;                                                                  \
    }                                                                          \
    const size_t np = 1;                                                       \
    aural__row_blocks rb = aural__row_blocks_of(M, MR_MAX, MC_BLOCKS);         \
    /* Half-precision panels are widened once per block (exactly). */        \
    float wide[KC * AURAL__PANEL] __attribute__((aligned(32)));                \
    for (size_t j0 = 0; j0 < rb.nb; j0 += rb.ch) {                             \
      size_t j1 = rb.nb - j0 < rb.ch ? rb.nb : j0 + rb.ch;                     \
      size_t i0 = aural__row_block_start(&rb, j0);                             \
      for (size_t k0 = 0; k0 < K; k0 += KC) {                                  \
        size_t kc = K - k0 < KC ? K - k0 : KC;                                 \
        size_t kn = K - k0 - kc < KC ? K - k0 - kc : KC;                       \
        int first = k0 == 0, last = k0 + kc == K;                              \
        for (size_t p = 0; p < n_panels; p++) {                                \
          PANEL_SETUP()                                                        \
          const float *w0 = (const float *)ws[0];                              \
          if (sizeof(ELEM) == 2) {                                             \
            for (size_t k = 0; k < kc; k++)                                    \
              for (size_t h = 0; h < 2; h++)                                   \
                _mm256_store_ps(wide + k * AURAL__PANEL + 8 * h,               \
                                F16_W(ws[0], 16 * k + 8 * h));                 \
            w0 = wide;                                                         \
          }                                                                    \
          /* The next block of weights: the next panel's, else the first   \
           * panel's at the next k block (none after the last), lp lines,   \
           * a slice of at most `per` lines per row block. */               \
          size_t pn = p + 1, k1 = k0, kcn = kc, nbc = j1 - j0;                 \
          if (pn >= n_panels) pn = 0, k1 = k0 + kc, kcn = kn;                  \
          size_t lp = kcn * AURAL__PANEL * sizeof(ELEM) / 64,                  \
                 per = (lp + nbc - 1) / nbc,                                   \
                 pf_n = kc >= 4 ? (per + kc / 4 - 1) / (kc / 4) : 0;           \
          const ELEM *wn = w + pn * ps + k1 * AURAL__PANEL;                    \
          float *yp = y + i0 * N + p * AURAL__PANEL;                           \
          const float *xj = x + i0 * K + k0;                                   \
          for (size_t j = j0; j < j1; j++) {                                   \
            size_t mr = aural__row_block_rows(&rb, j), at = (j - j0) * per,    \
                   n = 0;                                                      \
            const char *pfj = (const char *)w0;                                \
            if (at < lp) {                                                     \
              pfj = (const char *)wn + 64 * at;                                \
              n = lp - at < per ? lp - at : per;                               \
            }                                                                  \
            switch (mr) {                                                      \
            case 3: tile3(w0, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n); break; \
            case 4: tile4(w0, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n); break; \
            case 5: tile5(w0, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n); break; \
            default: tile6(w0, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n); break; \
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

void aural__linear_avx2(const aural__mat *w, const float *b, const float *x,
                        size_t n, float *y) {
  size_t N = (size_t)w->rows, K = (size_t)w->cols;
  if (w->f32 != NULL)
    linear_f32(w->f32, N, K, b, x, n, y);
  else
    linear_f16(w->f16, N, K, b, x, n, y);
}

/* ---- precision bf16 ------------------------------------------------------ */

/*
 * linalg.c's emulation of the bfloat16 dot product (linear_bf16_avx512()
 * without AVX512-BF16) on the tiles above: for each chunk of row blocks
 * and k block, the chunk's inputs are rounded to bfloat16 once, each pair's
 * two k swapped, and each panel's block of weights is widened to floats in
 * the same swapped order, so that the tiles' chains in k order add the
 * products in the dot product's order; MXCSR's flush-to-zero and
 * denormals-are-zero make the adds its adds. The same bits as the AVX-512
 * paths, with stack buffers only. Few rows go through the tiles too (one
 * to six rows): widening a block costs about what one row's products do,
 * so this is for chunks more than single frames.
 */
#define MXCSR_FTZ_DAZ 0x8040u

/* Rows [0, m) of x (K apart), k in [k0, k0 + kc) (kc even), rounded into
 * xs (KC apart) with each pair's two k swapped; k past K is zero. */
static void round_rows_swapped(const float *x, size_t K, size_t m, size_t k0,
                               size_t kc, float *xs) {
  for (size_t i = 0; i < m; i++)
    for (size_t k = 0; k < kc; k++)
      xs[i * KC + (k ^ 1)] =
          k0 + k < K ? aural__bf16_to_f32(aural__f32_to_bf16(x[i * K + k0 + k]))
                     : 0.0f;
}

/* kp pairs of a bf16 panel (pairs of 16 rows, as internal.h lays them
 * out) widened to floats in that swapped order: dst[32 i .. 32 i + 15] is
 * k = 2 i + 1, dst[32 i + 16 ..] is k = 2 i. */
KERNEL_INLINE void widen_bf16_swapped(const uint16_t *panel, size_t kp,
                                      float *dst) {
  const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
  for (size_t i = 0; i < kp; i++)
    for (size_t h = 0; h < 2; h++) {
      __m256i line = _mm256_loadu_si256(
          (const __m256i *)(panel + i * 2 * AURAL__PANEL + 16 * h));
      _mm256_store_ps(dst + 32 * i + 8 * h,
                      _mm256_castsi256_ps(_mm256_and_si256(line, hi)));
      _mm256_store_ps(dst + 32 * i + 16 + 8 * h,
                      _mm256_castsi256_ps(_mm256_slli_epi32(line, 16)));
    }
}

KERNEL void aural__linear_bf16_avx2(const aural__mat *mat, const float *b,
                                    const float *x, size_t M, float *y) {
  /* (M >= 1: aural__linear() returns at once for no rows) */
  size_t N = (size_t)mat->rows, K = (size_t)mat->cols, Kp = (K + 1) / 2 * 2;
  size_t n_panels = (N + AURAL__PANEL - 1) / AURAL__PANEL, np = 1, k0 = 0;
  size_t ps = aural__bf16_panel_stride(K);
  const uint16_t *w = mat->bf16;
  aural__row_blocks rb = aural__row_blocks_of(M, MR_MAX, MC_BLOCKS);
  float xs[MC_BLOCKS * MR_MAX * KC] __attribute__((aligned(32)));
  float wide[KC * AURAL__PANEL] __attribute__((aligned(32)));
  unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | MXCSR_FTZ_DAZ);
  for (size_t j0 = 0; j0 < rb.nb; j0 += rb.ch) {
    size_t j1 = rb.nb - j0 < rb.ch ? rb.nb : j0 + rb.ch;
    size_t i0 = aural__row_block_start(&rb, j0),
           i1 = aural__row_block_start(&rb, j1);
    for (k0 = 0; k0 < Kp; k0 += KC) {
      size_t kc = Kp - k0 < KC ? Kp - k0 : KC;
      int first = k0 == 0, last = k0 + kc == Kp;
      round_rows_swapped(x + i0 * K, K, i1 - i0, k0, kc, xs);
      for (size_t p = 0; p < n_panels; p++) {
        PANEL_SETUP()
        /* Pair k0 / 2 is k0 * AURAL__PANEL elements in, as an f32
         * panel's k0: PANEL_SETUP's pointer is right for bf16 too. */
        widen_bf16_swapped(ws[0], kc / 2, wide);
        float *yp = y + i0 * N + p * AURAL__PANEL;
        const float *xj = xs;
        for (size_t j = j0; j < j1; j++) {
          size_t mr = aural__row_block_rows(&rb, j);
          switch (mr) {
          case 1: tile1(wide, xj, KC, kc, yp, N, bs, ms, first, last, NULL, 0, 0); break;
          case 2: tile2(wide, xj, KC, kc, yp, N, bs, ms, first, last, NULL, 0, 0); break;
          case 3: tile3(wide, xj, KC, kc, yp, N, bs, ms, first, last, NULL, 0, 0); break;
          case 4: tile4(wide, xj, KC, kc, yp, N, bs, ms, first, last, NULL, 0, 0); break;
          case 5: tile5(wide, xj, KC, kc, yp, N, bs, ms, first, last, NULL, 0, 0); break;
          default: tile6(wide, xj, KC, kc, yp, N, bs, ms, first, last, NULL, 0, 0); break;
          }
          xj += mr * KC;
          yp += mr * N;
        }
      }
    }
  }
  _mm_setcsr(csr);
}

/* ---- gelu ---------------------------------------------------------------- */

/* linalg.c's gelu16() on 8 values: the interval's coefficient is picked
 * from the low 8 (lo) or high 8 (hi) of the 16 with two permutes and a
 * blend instead of one permute (one permute when no lane needs the high
 * 8: the same coefficients either way). The lanes of m alone (the others are
 * neither read nor written). */
KERNEL_INLINE void gelu8(float *x, __m256i m, const __m256 *lo,
                         const __m256 *hi) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f),
               rsqrt2 = _mm256_set1_ps((float)M_SQRT1_2),
               four = _mm256_set1_ps(4.0f), quarter = _mm256_set1_ps(0.25f),
               sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
  const __m256i last = _mm256_set1_epi32(15), seven = _mm256_set1_epi32(7);
  __m256 v = load_lanes(x, m);
  __m256 z = _mm256_mul_ps(v, rsqrt2);
  __m256 a = _mm256_andnot_ps(sign, z);
  __m256i k = _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_mul_ps(a, four)), last);
  __m256 t = _mm256_sub_ps(
      a, _mm256_mul_ps(_mm256_add_ps(_mm256_cvtepi32_ps(k), half), quarter));
  __m256i upper = _mm256_cmpgt_epi32(k, seven);
  __m256 e;
  if (_mm256_testz_si256(upper, upper)) {
    /* Every lane in the first 8 intervals (|x| < 2.83, nearly always):
     * half the permutes and no blends. */
    e = _mm256_permutevar8x32_ps(lo[6], k);
    for (int d = 5; d >= 0; d--)
      e = _mm256_fmadd_ps(e, t, _mm256_permutevar8x32_ps(lo[d], k));
  } else {
    __m256 up = _mm256_castsi256_ps(upper);
#define PICK(d)                                                                \
  _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo[d], k),                         \
                   _mm256_permutevar8x32_ps(hi[d], k), up)
    e = PICK(6);
    for (int d = 5; d >= 0; d--) e = _mm256_fmadd_ps(e, t, PICK(d));
#undef PICK
  }
  e = _mm256_blendv_ps(e, one, _mm256_cmp_ps(a, four, _CMP_GE_OQ));
  e = _mm256_xor_ps(e, _mm256_and_ps(z, sign)); /* erf(-z) = -erf(z) */
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, e));
  store_lanes(x, m, y);
}

KERNEL void aural__gelu_avx2(float *x, size_t n) {
  __m256 lo[7], hi[7];
  for (int d = 0; d < 7; d++) {
    lo[d] = _mm256_loadu_ps(aural__erf_c[d]);
    hi[d] = _mm256_loadu_ps(aural__erf_c[d] + 8);
  }
  size_t i = 0;
  for (; i + 8 <= n; i += 8) gelu8(x + i, first_lanes(8), lo, hi);
  if (i < n) gelu8(x + i, first_lanes(n - i), lo, hi);
}

/* ---- attention ----------------------------------------------------------- */

/* linalg.c's score kernels: R rows against NG vectors of 8 slots from kt,
 * even lanes of q into one float chain, odd lanes into another, per slot;
 * then ((double) even + (double) odd) * scale. */
#define DEFINE_SCORES(NAME, R, NG)                                             \
  KERNEL_INLINE void NAME(const float *q, size_t ldq, const float *kt,         \
                          size_t w_pad, size_t hs, __m256d vscale,             \
                          double *scores) {                                    \
    __m256 acc[R][2][NG];                                                      \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                        \
      _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)                      \
        _Pragma("GCC unroll 4") for (int g = 0; g < NG; g++) acc[r][h][g] =    \
            _mm256_setzero_ps();                                               \
    for (size_t c = 0; c < hs; c += 2) {                                       \
      _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {                    \
        if (c + (size_t)h >= hs) break;                                        \
        const float *row = kt + (c + (size_t)h) * w_pad;                       \
        __m256 k[NG];                                                          \
        _Pragma("GCC unroll 4") for (int g = 0; g < NG; g++) {                 \
          k[g] = _mm256_loadu_ps(row + 8 * g);                                 \
          __asm__("" : "+x"(k[g])); /* loaded once, not once per row */       \
        }                                                                      \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                  \
          __m256 bq = _mm256_set1_ps(q[(size_t)r * ldq + c + (size_t)h]);      \
          _Pragma("GCC unroll 4") for (int g = 0; g < NG; g++) acc[r][h][g] =  \
              _mm256_fmadd_ps(bq, k[g], acc[r][h][g]);                         \
        }                                                                      \
      }                                                                        \
    }                                                                          \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                        \
      _Pragma("GCC unroll 4") for (int g = 0; g < NG; g++) {                   \
        __m256d t[2], u[2];                                                    \
        widen(t, acc[r][0][g]);                                                \
        widen(u, acc[r][1][g]);                                                \
        double *out = scores + (size_t)r * w_pad + 8 * g;                      \
        _mm256_storeu_pd(out, _mm256_mul_pd(_mm256_add_pd(t[0], u[0]), vscale)); \
        _mm256_storeu_pd(out + 4,                                              \
                         _mm256_mul_pd(_mm256_add_pd(t[1], u[1]), vscale));    \
      }                                                                        \
  }
DEFINE_SCORES(scores3x2, 3, 2)
DEFINE_SCORES(scores1x4, 1, 4)
DEFINE_SCORES(scores1x2, 1, 2)

KERNEL void aural__scores_avx2(const float *q, size_t ldq, size_t n_rows,
                               const float *kt, size_t w_pad, size_t hs,
                               double scale, double *scores) {
  const __m256d vscale = _mm256_set1_pd(scale);
  size_t n_vec = w_pad / 8;
  size_t r = 0;
  /* Three rows at a time against 16 slots, then one row against 32. */
  for (; r + 3 <= n_rows; r += 3)
    for (size_t g = 0; g + 2 <= n_vec; g += 2)
      scores3x2(q + r * ldq, ldq, kt + 8 * g, w_pad, hs, vscale,
                scores + r * w_pad + 8 * g);
  for (; r < n_rows; r++) {
    size_t g = 0;
    for (; g + 4 <= n_vec; g += 4)
      scores1x4(q + r * ldq, ldq, kt + 8 * g, w_pad, hs, vscale,
                scores + r * w_pad + 8 * g);
    for (; g + 2 <= n_vec; g += 2)
      scores1x2(q + r * ldq, ldq, kt + 8 * g, w_pad, hs, vscale,
                scores + r * w_pad + 8 * g);
  }
}

/* linalg.c's exp8() in 4 lanes. */
KERNEL_INLINE __m256d exp4(__m256d x) {
  const __m256d shift = _mm256_set1_pd(AURAL__EXP_SHIFT);
  x = _mm256_max_pd(x, _mm256_set1_pd(AURAL__EXP_MIN));
  __m256d t = _mm256_fmadd_pd(x, _mm256_set1_pd(AURAL__EXP_LOG2E), shift);
  __m256d n = _mm256_sub_pd(t, shift);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(AURAL__EXP_LN2_HI), x);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(AURAL__EXP_LN2_LO), r);
  __m256d p = _mm256_set1_pd(aural__exp_c[AURAL__EXP_DEGREE]);
  for (int d = AURAL__EXP_DEGREE - 1; d >= 0; d--)
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(aural__exp_c[d]));
  __m256i scale = _mm256_slli_epi64(
      _mm256_add_epi64(_mm256_castpd_si256(t), _mm256_set1_epi64x(1023)), 52);
  return _mm256_mul_pd(p, _mm256_castsi256_pd(scale));
}

/* linalg.c's softmax_avx512(): the max and the exps over the context's
 * slots in 8 double lanes (two vectors of 4 here), each 16-slot group as
 * two halves of 8, exp (exp4) four lanes at a time; the weights as floats
 * over the scores. */
KERNEL_INLINE float *softmax_avx2(double *scores, size_t n_slots,
                                       size_t slot_first, size_t n_ctx) {
  size_t n_grp = (n_slots + 15) / 16;
  aural__slot_runs runs = aural__runs_of(n_slots, slot_first, n_ctx);
  __m256d best[2] = {_mm256_set1_pd(-INFINITY), _mm256_set1_pd(-INFINITY)};
  for (size_t g = 0; g < n_grp; g++) {
    unsigned m = aural__ctx_mask(&runs, g);
    for (int h = 0; h < 4; h++) { /* quarters of 4 slots */
      __m256d in = _mm256_castsi256_pd(lanes_of4(m >> 4 * h));
      __m256d sc = load_lanes4(scores + 16 * g + 4 * h, m >> 4 * h);
      best[h % 2] = _mm256_blendv_pd(best[h % 2],
                                     _mm256_max_pd(best[h % 2], sc), in);
    }
  }
  __m256d vbest = _mm256_set1_pd(max8(best[0], best[1]));
  __m256d sum[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()};
  for (size_t g = 0; g < n_grp; g++) {
    unsigned m = aural__ctx_mask(&runs, g);
    for (int h = 0; h < 2; h++) {
      unsigned mh = (m >> 8 * h) & 0xffu;
      if (!mh) continue;
      for (int i = 0; i < 2; i++) {
        double *sp = scores + 16 * g + 8 * h + 4 * i;
        __m256i in = lanes_of4(mh >> 4 * i);
        __m256d x = _mm256_sub_pd(
            _mm256_blendv_pd(vbest, load_lanes4(sp, mh >> 4 * i),
                             _mm256_castsi256_pd(in)),
            vbest);
        __m256d e = _mm256_and_pd(exp4(x), _mm256_castsi256_pd(in));
        store_lanes4(sp, mh >> 4 * i, e);
        sum[i] = _mm256_add_pd(sum[i], e);
      }
    }
  }
  __m256d inv = _mm256_set1_pd(1.0 / sum8(sum[0], sum[1]));
  float *p = (float *)scores;
  for (size_t g = 0; g < n_grp; g++) {
    __m256d e[4];
    for (int i = 0; i < 4; i++) e[i] = _mm256_loadu_pd(scores + 16 * g + 4 * i);
    for (int i = 0; i < 4; i++) e[i] = _mm256_mul_pd(e[i], inv);
    for (int i = 0; i < 2; i++) _mm256_storeu_ps(p + 16 * g + 8 * i, narrow(e + 2 * i));
  }
  return p;
}

/* linalg.c's MIX_FRAME and DEFINE_MIX_PV in 8 lanes: 16 lanes of the head
 * (two vectors) at a time, so that three rows' chains fit the 16
 * registers; each lane's chains are linalg.c's. */
#define MIX_FRAME(G, C, PARTIAL, vp, s, i)                                     \
  do {                                                                         \
    __m256 vv[2] = {_mm256_loadu_ps(vp), _mm256_loadu_ps((vp) + 8)};          \
    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {                      \
      if (PARTIAL && ((i) < mp->lo[j] || (i) > mp->n_old + (size_t)j))         \
        continue;                                                              \
      __m256 wj = _mm256_set1_ps(p[j][s]);                                     \
      acc[j][C][0] = _mm256_fmadd_ps(wj, vv[0], acc[j][C][0]);                 \
      acc[j][C][1] = _mm256_fmadd_ps(wj, vv[1], acc[j][C][1]);                 \
    }                                                                          \
  } while (0)
#define DEFINE_MIX_PV(NAME, G)                                                 \
  KERNEL_INLINE void NAME(const aural__mix_plan *mp, float *const *p,          \
                          const float *v, size_t ldv, const float *v_new,      \
                          size_t ld_new, float *o, size_t ldo) {               \
    enum { G_ = G };                                                           \
    __m256 acc[G][2][2];                                                       \
    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)                        \
      _Pragma("GCC unroll 2") for (int q = 0; q < 2; q++) acc[j][0][q] =       \
          acc[j][1][q] = _mm256_setzero_ps();                                  \
    AURAL__MIX_WALK(mp, G, v, ldv, v_new, ld_new, MIX_FRAME_, MIX_SWAP_);      \
    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)                        \
      _Pragma("GCC unroll 2") for (int q = 0; q < 2; q++) {                    \
        __m256d t[2], u[2];                                                    \
        widen(t, acc[j][0][q]);                                                \
        widen(u, acc[j][1][q]);                                                \
        t[0] = _mm256_add_pd(t[0], u[0]);                                      \
        t[1] = _mm256_add_pd(t[1], u[1]);                                      \
        _mm256_storeu_ps(o + (size_t)j * ldo + 8 * q, narrow(t));              \
      }                                                                        \
  }
#define MIX_FRAME_(C, PARTIAL, vp, s, i) MIX_FRAME(G_, C, PARTIAL, vp, s, i)
#define MIX_SWAP_(j)                                                           \
  _Pragma("GCC unroll 2") for (int q = 0; q < 2; q++) {                        \
    __m256 t = acc[j][0][q];                                                   \
    acc[j][0][q] = acc[j][1][q];                                               \
    acc[j][1][q] = t;                                                          \
  }
DEFINE_MIX_PV(mix_pv1, 1)
DEFINE_MIX_PV(mix_pv2, 2)
DEFINE_MIX_PV(mix_pv3, 3)

KERNEL void aural__mix_rows_avx2(const aural__mix_plan *mp, double *scores,
                                 size_t lds, const float *v, size_t ldv,
                                 const float *v_new, size_t ld_new, size_t hs,
                                 float *o, size_t ldo) {
  float *p[AURAL__MIX_ROWS];
  for (size_t j = 0; j < mp->g; j++)
    p[j] = softmax_avx2(scores + j * lds, mp->n_slots,
                             (mp->slot_first + mp->lo[j]) % mp->n_slots,
                             mp->n_ctx[j]);
  for (size_t c = 0; c < hs; c += 16) {
    const float *vc = v + c, *nc = v_new + c;
    float *oc = o + c;
    switch (mp->g) {
    case 1: mix_pv1(mp, p, vc, ldv, nc, ld_new, oc, ldo); break;
    case 2: mix_pv2(mp, p, vc, ldv, nc, ld_new, oc, ldo); break;
    default: mix_pv3(mp, p, vc, ldv, nc, ld_new, oc, ldo); break;
    }
  }
}

/* ---- layer norm ---------------------------------------------------------- */

/* linalg.c's layer_norm_row_avx512(): its two vectors of 8 double lanes
 * (values 0-7 and 8-15 of each 16) are four of 4 here (values 0-3, 4-7,
 * 8-11, 12-15), added pairwise as there before the lanes are summed. */
KERNEL void aural__layer_norm_row_avx2(const float *s, float *r, int d,
                                       const float *g, const float *b,
                                       float eps) {
  __m256d acc[4];
  for (int j = 0; j < 4; j++) acc[j] = _mm256_setzero_pd();
  for (int k = 0; k < d; k += 16)
    for (int j = 0; j < 4; j++)
      acc[j] = _mm256_add_pd(acc[j], _mm256_cvtps_pd(_mm_loadu_ps(s + k + 4 * j)));
  __m256d vm = _mm256_set1_pd(sum8(_mm256_add_pd(acc[0], acc[2]),
                                   _mm256_add_pd(acc[1], acc[3])) / d);
  for (int j = 0; j < 4; j++) acc[j] = _mm256_setzero_pd();
  for (int k = 0; k < d; k += 16)
    for (int j = 0; j < 4; j++) {
      __m256d c = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(s + k + 4 * j)), vm);
      acc[j] = _mm256_fmadd_pd(c, c, acc[j]);
    }
  double var = sum8(_mm256_add_pd(acc[0], acc[2]),
                    _mm256_add_pd(acc[1], acc[3])) / d;
  __m256d inv = _mm256_set1_pd(1.0 / sqrt(var + (double)eps));
  for (int k = 0; k < d; k += 16)
    for (int j = 0; j < 4; j++) {
      int at = k + 4 * j;
      __m256d c = _mm256_cvtps_pd(_mm_loadu_ps(s + at)),
              gw = _mm256_cvtps_pd(_mm_loadu_ps(g + at)),
              bw = _mm256_cvtps_pd(_mm_loadu_ps(b + at));
      c = _mm256_fmadd_pd(_mm256_mul_pd(_mm256_sub_pd(c, vm), inv), gw, bw);
      _mm_storeu_ps(r + at, _mm256_cvtpd_ps(c));
    }
}
