/*
 * The numeric kernels of the encoder: matrix products, attention, layer
 * norm and activations. Here: the scalar oracle, the AVX-512 kernels and
 * the choice among the kernel sets (at the end); the AVX2 kernels, which
 * give the AVX-512 kernels' bits, are in linalg_avx2.c.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "aural/encoder.h"
#include "internal.h"
#include "kernels.h"

/* The vector kernels are x86's (AVX-512 here, AVX2 in linalg_avx2.c);
 * elsewhere (aarch64) the scalar set is the only one. */
#if defined(__x86_64__)
#define AURAL_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define AURAL_X86 0
#endif

/* The kernels of one instruction set (the table at the end of the file):
 * the entry points below go through the set chosen once per process. */
typedef struct kernel_set {
  aural__isa isa;
  const char *name; /* aural_gemm_name() */
  void (*linear)(const aural__mat *, const float *, const float *, size_t,
                 float *);
  void (*scores)(const float *, size_t, size_t, const float *, size_t,
                 size_t, double, double *);
  void (*mix_rows)(const aural__mix_plan *, double *, size_t, const float *,
                   size_t, const float *, size_t, size_t, float *,
                   size_t); /* head sizes that are a multiple of 16 */
  void (*layer_norm)(const float *, float *, size_t, int, const float *,
                     const float *, float); /* n rows of a width that is a
                                               multiple of 16 */
  void (*gelu)(float *, size_t);
  void (*rope)(float *, int, int, const float *, const float *);
} kernel_set;
static const kernel_set *kernels(void);

static int gemm_bcast_forced = -1; /* aural__gemm_broadcast() */

void aural__gemm_broadcast(int how) { gemm_bcast_forced = how; }

static void linear_bf16_ref(const aural__mat *w, const float *b,
                            const float *x, size_t n, float *y);

/* The plain way, and the oracle (f32 and f16 weights). One panel of 16
 * outputs and one chain's k at a time: the chain's weights are read (f16
 * widened) once into wc, then every row of x runs its 16 chains through
 * them, and y holds the running totals until the bias is added. Each
 * output is still one chain after another, each from zero, so the bits
 * are the contract's; the 16 chains are independent, so a compiler may
 * run them side by side in vectors (as it does for aarch64) without
 * changing one. */
__attribute__((always_inline)) static inline void
linear_plain(const aural__mat *w, const float *b, const float *x, size_t n,
             float *y) {
  size_t rows = (size_t)w->rows, cols = (size_t)w->cols;
  float wc[AURAL__CHAIN][AURAL__PANEL];
  for (size_t r0 = 0; r0 < rows; r0 += AURAL__PANEL) {
    size_t nr = rows - r0 < AURAL__PANEL ? rows - r0 : AURAL__PANEL;
    for (size_t c0 = 0; c0 < cols; c0 += AURAL__CHAIN) {
      size_t nc = cols - c0 < AURAL__CHAIN ? cols - c0 : AURAL__CHAIN;
      for (size_t c = 0; c < nc; c++) { /* rows past the end are zeros */
        size_t at = aural__packed_at(r0, c0 + c, cols);
        for (size_t l = 0; l < AURAL__PANEL; l++)
          wc[c][l] = w->f32 != NULL ? w->f32[at + l]
                                    : aural__f16_to_f32(w->f16[at + l]);
      }
      for (size_t i = 0; i < n; i++) {
        const float *xi = x + i * cols + c0;
        float chain[AURAL__PANEL] = {0};
        for (size_t c = 0; c < nc; c++)
#pragma GCC unroll 16 /* (so that the chains stay in registers) */
          for (size_t l = 0; l < AURAL__PANEL; l++)
            chain[l] = fmaf(xi[c], wc[c][l], chain[l]);
        float *yi = y + i * rows + r0;
        for (size_t l = 0; l < nr; l++) /* from +0, as +0 + -0 is +0 */
          yi[l] = (c0 == 0 ? 0.0f : yi[l]) + chain[l];
      }
    }
    for (size_t i = 0; i < n; i++) {
      float *yi = y + i * rows + r0;
      for (size_t l = 0; l < nr; l++) {
        if (cols == 0) yi[l] = 0.0f;
        if (b != NULL) yi[l] += b[r0 + l];
      }
    }
  }
}

#if AURAL_X86
/* On x86 a second copy for CPUs with FMA: in the first every fmaf is a
 * call into libm (7 times slower in chunk mode). A branch, not an ifunc,
 * whose resolver would run before a sanitizer's runtime is up. */
__attribute__((target("fma"))) static void
linear_plain_fma(const aural__mat *w, const float *b, const float *x,
                 size_t n, float *y) {
  linear_plain(w, b, x, n, y);
}
#endif

void aural__linear_ref(const aural__mat *w, const float *b, const float *x,
                       size_t n, float *y) {
  if (w->bf16 != NULL)
    linear_bf16_ref(w, b, x, n, y);
#if AURAL_X86
  else if (__builtin_cpu_supports("fma"))
    linear_plain_fma(w, b, x, n, y);
#endif
  else
    linear_plain(w, b, x, n, y);
}

#if AURAL_X86
/*
 * The AVX-512 kernels. Output columns go 32 at a time (two panels, two
 * vectors); rows of x go a few at a time, each row's input broadcast and
 * multiplied into its two accumulators, so one k step is 2 loads of W and
 * 2 MR fused multiply-adds. Six rows keep 12 accumulators in registers and
 * both FMA units busy. A panel past the last one repeats the last, with
 * its lanes masked off, so that the loops over k have no branches. Every
 * AURAL__CHAIN values of k the chains are added into running totals and
 * start again from zero (aural__linear's contract); the totals take as
 * many more registers, which six rows still leave.
 */
#define F32_W(p, at) _mm512_loadu_ps((const float *)(p) + (at))
#define F16_W(p, at) \
  _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)(p) + (at))))

/* The 16 floats of a as doubles: lanes 0-7 in t[0], lanes 8-15 in t[1]. */
__attribute__((target("avx512f"), always_inline)) static inline void
widen(__m512d *t, __m512 a) {
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
  t[0] = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
  t[1] = _mm512_cvtps_pd(hi);
}

/* t += a, in double (t as widen() lays it out). */
__attribute__((target("avx512f"), always_inline)) static inline void
widen_add(__m512d *t, __m512 a) {
  __m512d w[2];
  widen(w, a);
  t[0] = _mm512_add_pd(t[0], w[0]);
  t[1] = _mm512_add_pd(t[1], w[1]);
}

/* The 16 doubles of t (lanes 0-7, lanes 8-15) rounded to floats. */
__attribute__((target("avx512f"), always_inline)) static inline __m512
narrow(const __m512d *t) {
  __m256 lo = _mm512_cvtpd_ps(t[0]), hi = _mm512_cvtpd_ps(t[1]);
  return _mm512_castpd_ps(_mm512_insertf64x4(
      _mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

/* Few rows (frame mode): MR rows of x (K apart) against NP panels over all
 * of k, so that the weights stream past the rows once. More panels when
 * there are fewer rows, for enough independent chains to cover the FMA
 * latency. ws[q] points at panel q's first k; y at the first output, rows
 * N apart; lanes outside ms[q] are neither read nor written. The bias bs is
 * added after the last chain. */
#define DEFINE_FEW(NAME, MR, NP, LOAD)                                         \
  __attribute__((target("avx512f,fma,f16c"), always_inline)) static inline void \
  NAME(const void *const *ws, const float *x, size_t K, float *y, size_t N,    \
       const __m512 *bs, const __mmask16 *ms) {                                \
    __m512 tot[MR][NP];                                                        \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                       \
      _Pragma("GCC unroll 8") for (int q = 0; q < NP; q++) tot[r][q] =         \
          _mm512_setzero_ps();                                                 \
    for (size_t k0 = 0; k0 < K; k0 += AURAL__CHAIN) {                          \
      size_t k1 = K - k0 < AURAL__CHAIN ? K : k0 + AURAL__CHAIN;               \
      __m512 acc[MR][NP];                                                      \
      _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                     \
        _Pragma("GCC unroll 8") for (int q = 0; q < NP; q++) acc[r][q] =       \
            _mm512_setzero_ps();                                               \
      _Pragma("GCC unroll 4") for (size_t k = k0; k < k1; k++) {               \
        __m512 w[NP];                                                          \
        _Pragma("GCC unroll 8") for (int q = 0; q < NP; q++) w[q] =            \
            LOAD(ws[q], k * 16);                                               \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) {                 \
          __m512 xv = _mm512_set1_ps(x[(size_t)r * K + k]);                    \
          _Pragma("GCC unroll 8") for (int q = 0; q < NP; q++) acc[r][q] =     \
              _mm512_fmadd_ps(xv, w[q], acc[r][q]);                            \
        }                                                                      \
      }                                                                        \
      _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                     \
        _Pragma("GCC unroll 8") for (int q = 0; q < NP; q++) tot[r][q] =       \
            _mm512_add_ps(tot[r][q], acc[r][q]);                               \
    }                                                                          \
    _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                       \
      _Pragma("GCC unroll 8") for (int q = 0; q < NP; q++)                     \
        _mm512_mask_storeu_ps(y + (size_t)r * N + 16 * q, ms[q],               \
                              _mm512_add_ps(tot[r][q], bs[q]));                \
  }
#define DEFINE_FEW_ALL(T, LOAD)    \
  DEFINE_FEW(few1_##T, 1, 8, LOAD) \
  DEFINE_FEW(few2_##T, 2, 4, LOAD) \
  DEFINE_FEW(few3_##T, 3, 4, LOAD) \
  DEFINE_FEW(few4_##T, 4, 2, LOAD) \
  DEFINE_FEW(few5_##T, 5, 2, LOAD)
DEFINE_FEW_ALL(f32, F32_W)
DEFINE_FEW_ALL(f16, F16_W)

#define MR_MAX 6 /* rows of a tile */

/* One chain of a tile, in assembly: for the MR rows of x (ldx floats
 * apart) and both panels (w1 is w0 plus w1_off floats), acc[r][q] = the
 * fused multiply-add chain from zero of x[r][k] * panel q's row k over
 * k = 0 .. n-1 (n >= 1). Each k step loads the two weight vectors once,
 * then does the 2 MR multiply-adds, in that order per accumulator, as the
 * oracle does. Each row's input is broadcast to every lane either inside
 * each of its two multiply-adds, from memory ({1to16}; bc 0), or once by
 * its own instruction for both (bc 1), the same bits either way: on an
 * AMD Zen 4 the first is 1.4% faster in chunk mode (nine alternating
 * runs); on an Intel Xeon, whose two FMA units a step's 14 loads against
 * 8 hold back, the second is about 6% faster (gemm_bcast). Written out by hand
 * because GCC, given the same loop in intrinsics, rotates the accumulators
 * through spare registers with a move per step and spills some: about 10%
 * of the peak lost in the kernel that does 95% of the encoder's work. */
#define CHAIN_ROW_AT(BC, OP, R, AT)                                            \
  ".if %c[mr] > " #R "\n\t"                                                    \
  ".if %c[flags] & 2\n\t"                                                      \
  BC " " AT ", %%zmm29\n\t"                                                    \
  OP " %%zmm29, %%zmm30, %[a" #R "0]\n\t"                                      \
  OP " %%zmm29, %%zmm31, %[a" #R "1]\n\t"                                      \
  ".else\n\t"                                                                  \
  OP " " AT "%{1to16%}, %%zmm30, %[a" #R "0]\n\t"                              \
  OP " " AT "%{1to16%}, %%zmm31, %[a" #R "1]\n\t"                              \
  ".endif\n\t"                                                                 \
  ".endif\n\t"
#define CHAIN_ROW(BC, OP, R, X, OFF)                                           \
  CHAIN_ROW_AT(BC, OP, R, OFF "(%[" X "])")
#define CHAIN_ROW_LD(BC, OP, R, X, OFF, SCALE)                                 \
  CHAIN_ROW_AT(BC, OP, R, OFF "(%[" X "],%[ld]," #SCALE ")")
/* Step j of a group of four: weights at byte WOFF, inputs at byte XOFF. */
#define CHAIN_STEP(BC, OP, WOFF, XOFF)                                         \
  "vmovups " WOFF "(%[w]), %%zmm30\n\t"                                        \
  "vmovups " WOFF "(%[w],%[woff],1), %%zmm31\n\t"                              \
  CHAIN_ROW(BC, OP, 0, "x", XOFF) CHAIN_ROW_LD(BC, OP, 1, "x", XOFF, 1)        \
  CHAIN_ROW_LD(BC, OP, 2, "x", XOFF, 2) CHAIN_ROW(BC, OP, 3, "x3", XOFF)       \
  CHAIN_ROW_LD(BC, OP, 4, "x3", XOFF, 1) CHAIN_ROW_LD(BC, OP, 5, "x3", XOFF, 2)
#define ZERO2(R)                                                               \
  "vpxord %[a" #R "0], %[a" #R "0], %[a" #R "0]\n\t"                           \
  "vpxord %[a" #R "1], %[a" #R "1], %[a" #R "1]\n\t"
/* The whole chain: each step's input is 4 bytes (a float, or a bf16
 * pair) and its weights 64 (one line of each panel); OP accumulates, the
 * input broadcast by BC first (bc 1), or inside OP (bc 0): flags holds
 * bc (2) and l1 (1), as the assembler reads them. Four steps per turn
 * of the loop (fewer pointer updates beside the arithmetic), then the
 * steps left one at a time. Each
 * turn also prefetches two lines, pf after its first step and pf after
 * its third, moving pf on by ps0 and ps1 (chain_pf): spread out so, the
 * prefetches cost nothing, where a burst of them before the chain stalled
 * the tile for about 5% of its time. They go into L1 as well as L2 when l1
 * is set, for float weights: on an AMD Zen 4 that made chunk mode 2-5%
 * faster than L2 alone in four of five sets of alternating runs, and level
 * in the fifth. Half-precision and bfloat16 weights, which came out 2-3%
 * slower in a run like that, prefetch into L2 alone. */
#define CHAIN_PF(I)                                                            \
  ".if %c[flags] & 1\n\t"                                                      \
  "prefetcht0 (%[pf])\n\t"                                                     \
  ".else\n\t"                                                                  \
  "prefetcht1 (%[pf])\n\t"                                                     \
  ".endif\n\t"                                                                 \
  "add %[ps" #I "], %[pf]\n\t"
#define CHAIN_ASM(BC, OP)                                                      \
  ZERO2(0) ZERO2(1) ZERO2(2) ZERO2(3) ZERO2(4) ZERO2(5)                        \
  "test %[n4], %[n4]\n\t"                                                      \
  "jz 2f\n\t"                                                                  \
  "1:\n\t"                                                                     \
  CHAIN_STEP(BC, OP, "", "") CHAIN_PF(0) CHAIN_STEP(BC, OP, "64", "4")         \
  CHAIN_STEP(BC, OP, "128", "8") CHAIN_PF(1) CHAIN_STEP(BC, OP, "192", "12")   \
  "add $256, %[w]\n\t"                                                         \
  "add $16, %[x]\n\t"                                                          \
  "add $16, %[x3]\n\t"                                                         \
  "dec %[n4]\n\t"                                                              \
  "jnz 1b\n\t"                                                                 \
  "2:\n\t"                                                                     \
  "test %[n1], %[n1]\n\t"                                                      \
  "jz 4f\n\t"                                                                  \
  "3:\n\t"                                                                     \
  CHAIN_STEP(BC, OP, "", "")                                                   \
  "add $64, %[w]\n\t"                                                          \
  "add $4, %[x]\n\t"                                                           \
  "add $4, %[x3]\n\t"                                                          \
  "dec %[n1]\n\t"                                                              \
  "jnz 3b\n\t"                                                                 \
  "4:\n\t"
#define CHAIN_OPERANDS                                                         \
  : [a00] "=&v"(acc[0][0]), [a01] "=&v"(acc[0][1]),                            \
    [a10] "=&v"(acc[1][0]), [a11] "=&v"(acc[1][1]),                            \
    [a20] "=&v"(acc[2][0]), [a21] "=&v"(acc[2][1]),                            \
    [a30] "=&v"(acc[3][0]), [a31] "=&v"(acc[3][1]),                            \
    [a40] "=&v"(acc[4][0]), [a41] "=&v"(acc[4][1]),                            \
    [a50] "=&v"(acc[5][0]), [a51] "=&v"(acc[5][1]),                            \
    [w] "+r"(w0), [x] "+r"(x), [x3] "+r"(x3), [n4] "+r"(n4), [n1] "+r"(n1),    \
    [pf] "+r"(pf.at)                                                           \
  : [ld] "r"(ld), [woff] "r"(woff), [mr] "i"(mr), [ps0] "r"(pf.step[0]),       \
    [ps1] "r"(pf.step[1]), [flags] "i"(l1 | bc << 1)                           \
  : "xmm29", "xmm30", "xmm31", "memory", "cc"

/* A chain's prefetching: the first line, and how far to move on after
 * each of a turn's two prefetches (64 or 0 bytes). */
typedef struct chain_pf {
  const char *at;
  size_t step[2];
} chain_pf;

/* Plans the prefetches of a chain of `turns` turns: the next `want` of
 * the *lines lines from *pf on (fewer if fewer are left), two per turn at
 * most; any more go at once, here. A turn with nothing to fetch fetches
 * `idle` (a line the chain reads anyway); when fewer lines are left than
 * turns, the last turns fetch lines past the slice, which is harmless (a
 * prefetch never faults). Moves *pf and *lines past what it plans. */
__attribute__((always_inline)) static inline chain_pf
chain_pf_of(const char **pf, size_t *lines, size_t want, size_t turns,
            const void *idle) {
  if (want > *lines) want = *lines;
  size_t per_turn = want == 0 ? 0 : want <= turns ? 1 : 2;
  size_t in_loop = per_turn * turns < want ? per_turn * turns : want;
  chain_pf c = {.at = per_turn ? *pf : (const char *)idle,
                .step = {per_turn ? 64 : 0, per_turn == 2 ? 64 : 0}};
  for (size_t i = in_loop; i < want; i++)
    _mm_prefetch(*pf + 64 * i, _MM_HINT_T1);
  *pf += 64 * want;
  *lines -= want;
  return c;
}

__attribute__((target("avx512f,fma"), always_inline)) static inline void
tile_chain(int mr, const float *w0, size_t w1_off, const float *x,
           size_t ldx, size_t n, chain_pf pf, int l1, int bc,
           __m512 acc[MR_MAX][2]) {
  const float *x3 = x + 3 * ldx;
  size_t ld = ldx * sizeof(float), woff = w1_off * sizeof(float);
  size_t n4 = n / 4, n1 = n % 4;
  __asm__ volatile(CHAIN_ASM("vbroadcastss", "vfmadd231ps") CHAIN_OPERANDS);
}

/* A tile's running totals of its MR rows x 32 outputs: from zero in the
 * first k block, else from y; each chain added in; stored (with the bias
 * after the last k block). The tiles' variables: y, N, ms, bs, first,
 * last, acc. */
#define TILE_TOTALS(MR)                                                        \
  __m512 tot[MR][2];                                                           \
  _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                         \
    _Pragma("GCC unroll 2") for (int q = 0; q < 2; q++) tot[r][q] =            \
        first ? _mm512_setzero_ps()                                            \
              : _mm512_maskz_loadu_ps(ms[q], y + (size_t)r * N + 16 * q);
#define TILE_ADD_CHAIN(MR)                                                     \
  _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                         \
    _Pragma("GCC unroll 2") for (int q = 0; q < 2; q++) tot[r][q] =            \
        _mm512_add_ps(tot[r][q], acc[r][q]);
#define TILE_STORE(MR)                                                         \
  _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                         \
    _Pragma("GCC unroll 2") for (int q = 0; q < 2; q++)                        \
      _mm512_mask_storeu_ps(y + (size_t)r * N + 16 * q, ms[q],                 \
                            last ? _mm512_add_ps(tot[r][q], bs[q])             \
                                 : tot[r][q]);

/* Many rows: MR rows of x (ldx apart) against two float panels w0, w1
 * over kc values of k. y points at the tile's first output, rows N apart.
 * The first k block starts from zero, later ones from the totals left in
 * y, so each output is the same sum of chains in order; the last k block
 * adds the bias. During each chain, the next pf_n lines per four k of the
 * pf_lines lines from pf on are prefetched into L2 (and L1 with l1, a
 * constant): the caller points pf at the weights it needs next. bc (a
 * constant): tile_chain's. */
#define DEFINE_TILE(NAME, MR)                                                  \
  __attribute__((target("avx512f,fma"), always_inline)) static inline void    \
  NAME(const float *w0, const float *w1, const float *x, size_t ldx,           \
       size_t kc, float *y, size_t N, const __m512 *bs, const __mmask16 *ms,   \
       int first, int last, const char *pf, size_t pf_lines, size_t pf_n,      \
       int l1, int bc) {                                                       \
    TILE_TOTALS(MR)                                                            \
    for (size_t k0 = 0; k0 < kc; k0 += AURAL__CHAIN) {                         \
      size_t n = kc - k0 < AURAL__CHAIN ? kc - k0 : AURAL__CHAIN;              \
      chain_pf cp = chain_pf_of(&pf, &pf_lines, (n / 4) * pf_n, n / 4,       \
                                w0 + 16 * k0);                                 \
      __m512 acc[MR_MAX][2];                                                   \
      tile_chain(MR, w0 + 16 * k0, (size_t)(w1 - w0), x + k0, ldx, n, cp, l1,  \
                 bc, acc);                                                     \
      TILE_ADD_CHAIN(MR)                                                       \
    }                                                                          \
    TILE_STORE(MR)                                                             \
  }
DEFINE_TILE(tile1, 1)
DEFINE_TILE(tile2, 2)
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
_Static_assert(KC % AURAL__CHAIN == 0, "k blocks hold whole chains");

/* While the row blocks of a chunk go through one panel pair's block of
 * weights, the next block is prefetched into L2: the next pair's, else the
 * first pair's at the next k block (none after the last). Row blocks take
 * turns at its two panels, each fetching a slice of at most `per` lines,
 * pf_n lines every four k. elem is the weights' element size; kc (this k
 * block) and kn (the next one) count k, a bf16 pair being two. */
typedef struct next_block {
  const char *at[2]; /* each panel's first line (NULL: none) */
  size_t lines, per, pf_n;
} next_block;

static inline next_block next_block_of(const void *w, size_t elem, size_t ps,
                                       size_t n_panels, size_t p, size_t np,
                                       size_t k0, size_t kc, size_t kn,
                                       size_t n_blocks) {
  size_t pn = p + np, k1 = k0, kcn = kc;
  if (pn >= n_panels) pn = 0, k1 = k0 + kc, kcn = kn;
  next_block nb;
  size_t n_sl = n_blocks > 1 ? n_blocks / 2 : 1;
  nb.lines = kcn * AURAL__PANEL * elem / 64;
  nb.per = (nb.lines + n_sl - 1) / n_sl;
  nb.pf_n = kc >= 4 ? (nb.per + kc / 4 - 1) / (kc / 4) : 0;
  for (size_t q = 0; q < 2; q++)
    nb.at[q] = pn + q < n_panels
                   ? (const char *)w + (pn * ps + q * ps + k1 * AURAL__PANEL) * elem
                   : NULL;
  return nb;
}

/* The slice of the chunk's row block i (0 for its first): where it starts
 * and how many lines, *n (none: 0, and dflt returned in its place). */
static inline const char *next_block_slice(const next_block *nb, size_t i,
                                           const void *dflt, size_t *n) {
  size_t at = i / 2 * nb->per;
  const char *base = nb->at[i % 2];
  *n = 0;
  if (base == NULL || at >= nb->lines) return (const char *)dflt;
  *n = nb->lines - at < nb->per ? nb->lines - at : nb->per;
  return base + 64 * at;
}

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
#define DEFINE_LINEAR(NAME, T, ELEM, BC)                                       \
  __attribute__((target("avx512f,fma,f16c"))) static void NAME(               \
      const ELEM *w, size_t N, size_t K, const float *b, const float *x,       \
      size_t M, float *y) {                                                    \
    size_t n_panels = (N + AURAL__PANEL - 1) / AURAL__PANEL;                   \
    size_t ps = aural__panel_stride(K);                                        \
    if (M < MR_MAX) {                                                          \
      /* One kernel per row count 1..5; no rows, no panels to go over. */     \
      size_t np = M == 1 ? 8 : M <= 3 ? 4 : 2, k0 = 0;                         \
      for (size_t p = 0; M > 0 && p < n_panels; p += np) {                     \
        PANEL_SETUP(ELEM)                                                      \
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
    const size_t np = 2;                                                       \
    const int l1 = sizeof(ELEM) == sizeof(float); /* CHAIN_ASM says why */   \
    aural__row_blocks rb = aural__row_blocks_of(M, MR_MAX, MC_BLOCKS);         \
    /* Half-precision panels are widened once per block into this buffer   \
     * (exactly: every half is a float) and reused by every row block. */   \
    float wide[2 * KC * AURAL__PANEL] __attribute__((aligned(64)));            \
    for (size_t j0 = 0; j0 < rb.nb; j0 += rb.ch) {                             \
      size_t j1 = rb.nb - j0 < rb.ch ? rb.nb : j0 + rb.ch;                     \
      size_t i0 = aural__row_block_start(&rb, j0);                             \
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
          next_block nb = next_block_of(w, sizeof(ELEM), ps, n_panels, p, np,  \
                                        k0, kc, kn, j1 - j0);                  \
          float *yp = y + i0 * N + p * AURAL__PANEL;                           \
          const float *xj = x + i0 * K + k0;                                   \
          for (size_t j = j0; j < j1; j++) {                                   \
            size_t mr = aural__row_block_rows(&rb, j), n;                      \
            const char *pfj = next_block_slice(&nb, j - j0, w0, &n);           \
            size_t pf_n = nb.pf_n;                                             \
            switch (mr) {                                                      \
            case 3: tile3(w0, w1, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n, l1, BC); break; \
            case 4: tile4(w0, w1, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n, l1, BC); break; \
            case 5: tile5(w0, w1, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n, l1, BC); break; \
            default: tile6(w0, w1, xj, K, kc, yp, N, bs, ms, first, last, pfj, n, pf_n, l1, BC); break; \
            }                                                                  \
            xj += mr * K;                                                      \
            yp += mr * N;                                                      \
          }                                                                    \
        }                                                                      \
      }                                                                        \
    }                                                                          \
  }
DEFINE_LINEAR(linear_f32, f32, float, 0)
DEFINE_LINEAR(linear_f32_bc, f32, float, 1)
DEFINE_LINEAR(linear_f16, f16, uint16_t, 0)
DEFINE_LINEAR(linear_f16_bc, f16, uint16_t, 1)

/* Whether the tiles broadcast each input by an instruction of its own
 * (tile_chain's bc): on Intel cores, chosen once with the kernels, unless
 * a test asked otherwise. */
static bool gemm_bcast_cpu;

static bool gemm_bcast(void) {
  return gemm_bcast_forced >= 0 ? gemm_bcast_forced != 0 : gemm_bcast_cpu;
}

static void linear_avx512(const aural__mat *w, const float *b, const float *x,
                          size_t M, float *y) {
  size_t N = (size_t)w->rows, K = (size_t)w->cols;
  bool bc = gemm_bcast();
  if (w->f32 != NULL)
    (bc ? linear_f32_bc : linear_f32)(w->f32, N, K, b, x, M, y);
  else
    (bc ? linear_f16_bc : linear_f16)(w->f16, N, K, b, x, M, y);
}

/*
 * Precision bf16 (model.h): y = x W^T + b with W in bfloat16 and each
 * input rounded to bfloat16, summed in float as AVX512-BF16's dot product
 * sums: for each pair of k (2i, 2i + 1), k = 2i + 1's product is added to
 * the running sum and then k = 2i's, each add rounded once (a product of
 * two bfloat16 is exact in float), with denormal inputs taken as zero and
 * denormal results flushed to zero. The chains, their totals and the bias
 * go as in f32: chains of AURAL__CHAIN k (whole pairs) from zero, added
 * in order, then the bias; also with denormals flushed, so that the CPUs
 * with the dot product and those without give the same bits.
 *
 * Without AVX512-BF16 (or with AURAL_BF16=emulate), the float kernels
 * above do it: each k block of weights is widened to float, and of the
 * inputs rounded, with the two k of each pair swapped, so that the f32
 * tile's chains in k order are the dot product's in its order; MXCSR's
 * flush-to-zero and denormals-are-zero make their adds the dot product's.
 * With it, the tile below takes the pairs as they are.
 */
#define MXCSR_FTZ_DAZ 0x8040u

/* 16 floats rounded to bfloat16 (aural__f32_to_bf16), as float bits:
 * zeros and denormals to a signed zero, infinities kept, NaN quiet. */
__attribute__((target("avx512f"), always_inline)) static inline __m512i
round_bf16(__m512 v) {
  const __m512i expo = _mm512_set1_epi32(0x7f800000),
                hi = _mm512_set1_epi32((int)0xffff0000u);
  __m512i u = _mm512_castps_si512(v);
  __mmask16 tiny = _mm512_testn_epi32_mask(u, expo); /* exponent 0 */
  __m512i r = _mm512_add_epi32(
      u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                          _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                           _mm512_set1_epi32(1))));
  __mmask16 special = _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, expo), expo);
  __mmask16 nan = _mm512_mask_test_epi32_mask(special, u, _mm512_set1_epi32(0x7fffff));
  r = _mm512_and_si512(_mm512_mask_mov_epi32(r, special, u), hi);
  r = _mm512_mask_or_epi32(r, nan, r, _mm512_set1_epi32(0x400000)); /* quiet */
  return _mm512_mask_and_epi32(r, tiny, u, _mm512_set1_epi32((int)0x80000000u));
}

/* Rows [0, m) of x (K apart), k in [k0, k0 + kc) (kc even), rounded to
 * bfloat16 into xs (KC apart) as floats, each pair's two k swapped; k
 * past K is zero. */
__attribute__((target("avx512f"))) static void round_rows_swapped(
    const float *x, size_t K, size_t m, size_t k0, size_t kc, float *xs) {
  for (size_t i = 0; i < m; i++)
    for (size_t k = 0; k < kc; k += 16) {
      size_t left = k0 + k < K ? K - (k0 + k) : 0;
      __mmask16 in = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
      __m512 v = _mm512_maskz_loadu_ps(in, x + i * K + k0 + k);
      __m512 r = _mm512_castsi512_ps(round_bf16(v));
      __mmask16 out = kc - k >= 16 ? 0xffff : (__mmask16)((1u << (kc - k)) - 1);
      _mm512_mask_storeu_ps(xs + i * KC + k, out, _mm512_permute_ps(r, 0xb1));
    }
}

/* The same rows as bfloat16 pairs (k = 2i low, 2i + 1 high), the dot
 * product's input: xp (KC / 2 apart). AVX512-BF16's own conversion rounds
 * as round_bf16() does (to nearest even; zeros and denormals to a signed
 * zero, infinities kept, NaN quiet with its upper payload), 32 k at once. */
__attribute__((target("avx512f,avx512bf16"))) static void round_rows_pairs(
    const float *x, size_t K, size_t m, size_t k0, size_t kc, uint32_t *xp) {
  for (size_t i = 0; i < m; i++)
    for (size_t k = 0; k < kc; k += 32) {
      const float *xi = x + i * K + k0 + k;
      size_t left = k0 + k < K ? K - (k0 + k) : 0;
      __mmask16 in0 = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1),
                in1 = left >= 32 ? 0xffff
                      : left > 16 ? (__mmask16)((1u << (left - 16)) - 1)
                                  : 0;
      __m512bh r = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(in1, xi + 16),
                                       _mm512_maskz_loadu_ps(in0, xi));
      size_t n_pairs = (kc - k) / 2 < 16 ? (kc - k) / 2 : 16;
      _mm512_mask_storeu_epi32(xp + i * (KC / 2) + k / 2,
                               (__mmask16)((1u << n_pairs) - 1),
                               (__m512i)r);
    }
}

/* A k block (kp pairs from pair j0) of a bf16 panel widened to floats in
 * the swapped order of round_rows_swapped: dst[2 i] is k = 2 (j0 + i) + 1,
 * dst[2 i + 1] is k = 2 (j0 + i), 16 lanes each. */
__attribute__((target("avx512f"))) static void widen_bf16_swapped(
    const uint16_t *panel, size_t j0, size_t kp, float *dst) {
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  for (size_t i = 0; i < kp; i++) {
    __m512i line = _mm512_loadu_si512(panel + (j0 + i) * 2 * AURAL__PANEL);
    _mm512_store_ps(dst + 32 * i, _mm512_castsi512_ps(_mm512_and_si512(line, hi)));
    _mm512_store_ps(dst + 32 * i + 16,
                    _mm512_castsi512_ps(_mm512_slli_epi32(line, 16)));
  }
}

/* One chain of the native tile: as tile_chain(), over n pairs, each k
 * step a dot product of the pairs of both panels with each row's pair
 * (broadcast). x is ldx pairs apart; w1 is w0 plus w1_off elements. The
 * dot product's two factors commute (each product is exact). */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void
tile_chain_dp(int mr, const uint16_t *w0, size_t w1_off, const uint32_t *x,
              size_t ldx, size_t n, chain_pf pf, __m512 acc[MR_MAX][2]) {
  const int l1 = 0, bc = 1;
  const uint32_t *x3 = x + 3 * ldx;
  size_t ld = ldx * sizeof(uint32_t), woff = w1_off * sizeof(uint16_t);
  size_t n4 = n / 4, n1 = n % 4;
  __asm__ volatile(CHAIN_ASM("vpbroadcastd", "vdpbf16ps") CHAIN_OPERANDS);
}

/* DEFINE_TILE's tile over bf16 pairs with the dot product: kp pairs, y,
 * the totals and the prefetching as there. */
#define DEFINE_TILE_DP(NAME, MR)                                               \
  __attribute__((target("avx512f,avx512bf16"), always_inline)) static inline  \
  void NAME(const uint16_t *w0, const uint16_t *w1, const uint32_t *x,         \
            size_t ldx, size_t kp, float *y, size_t N, const __m512 *bs,       \
            const __mmask16 *ms, int first, int last, const char *pf,          \
            size_t pf_lines, size_t pf_n) {                                    \
    TILE_TOTALS(MR)                                                            \
    for (size_t j0 = 0; j0 < kp; j0 += AURAL__CHAIN / 2) {                     \
      size_t n = kp - j0 < AURAL__CHAIN / 2 ? kp - j0 : AURAL__CHAIN / 2;      \
      chain_pf cp = chain_pf_of(&pf, &pf_lines, (n / 2) * pf_n, n / 4,       \
                                w0 + 32 * j0);                                 \
      __m512 acc[MR_MAX][2];                                                   \
      tile_chain_dp(MR, w0 + 32 * j0, (size_t)(w1 - w0), x + j0, ldx, n, cp,   \
                    acc);                                                      \
      TILE_ADD_CHAIN(MR)                                                       \
    }                                                                          \
    TILE_STORE(MR)                                                             \
  }
DEFINE_TILE_DP(tile_dp1, 1)
DEFINE_TILE_DP(tile_dp2, 2)
DEFINE_TILE_DP(tile_dp3, 3)
DEFINE_TILE_DP(tile_dp4, 4)
DEFINE_TILE_DP(tile_dp5, 5)
DEFINE_TILE_DP(tile_dp6, 6)

/*
 * Either way, rows in blocks of 1 to 6 (as linear_f32's many-row path)
 * and chunks of blocks; for each chunk and k block the chunk's inputs are
 * rounded once, then each panel pair's block of weights is used by every
 * row block (widened once first, when emulating, whose tiles take bc, a
 * constant, as linear_f32's do).
 */
__attribute__((target("avx512f,fma,avx512bf16"), always_inline)) static inline void
linear_bf16_body(const aural__mat *mat, const float *b, const float *x,
                 size_t M, float *y, bool native, int bc) {
  size_t N = (size_t)mat->rows, K = (size_t)mat->cols, Kp = (K + 1) / 2 * 2;
  size_t n_panels = (N + AURAL__PANEL - 1) / AURAL__PANEL, np = 2, k0 = 0;
  size_t ps = aural__bf16_panel_stride(K);
  const uint16_t *w = mat->bf16;
  aural__row_blocks rb = aural__row_blocks_of(M, MR_MAX, MC_BLOCKS);
  /* Inputs of one chunk and k block, rounded (as floats, or as pairs),
   * and (emulating) one panel pair's weights widened. */
  _Static_assert(MC_BLOCKS * MR_MAX * KC * sizeof(float) <= 80 * 1024,
                 "the rounded inputs stay a modest stack frame");
  float xs[MC_BLOCKS * MR_MAX * KC] __attribute__((aligned(64)));
  float wide[2 * KC * AURAL__PANEL] __attribute__((aligned(64)));
  unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | MXCSR_FTZ_DAZ);
  for (size_t j0 = 0; j0 < rb.nb; j0 += rb.ch) {
    size_t j1 = rb.nb - j0 < rb.ch ? rb.nb : j0 + rb.ch;
    size_t i0 = aural__row_block_start(&rb, j0),
           i1 = aural__row_block_start(&rb, j1);
    for (k0 = 0; k0 < Kp; k0 += KC) {
      size_t kc = Kp - k0 < KC ? Kp - k0 : KC;
      size_t kn = Kp - k0 - kc < KC ? Kp - k0 - kc : KC;
      int first = k0 == 0, last = k0 + kc == Kp;
      if (native)
        round_rows_pairs(x + i0 * K, K, i1 - i0, k0, kc, (uint32_t *)xs);
      else
        round_rows_swapped(x + i0 * K, K, i1 - i0, k0, kc, xs);
      for (size_t p = 0; p < n_panels; p += np) {
        PANEL_SETUP(uint16_t)
        /* Pair k0 / 2 is k0 * AURAL__PANEL elements in, as an f32
         * panel's k0: PANEL_SETUP's pointers are right for bf16 too. */
        const uint16_t *w0 = ws[0], *w1 = ws[1];
        if (!native) {
          widen_bf16_swapped(w0, 0, kc / 2, wide);
          widen_bf16_swapped(w1, 0, kc / 2, wide + KC * AURAL__PANEL);
        }
        next_block nb = next_block_of(w, sizeof *w, ps, n_panels, p, np, k0,
                                      kc, kn, j1 - j0);
        float *yp = y + i0 * N + p * AURAL__PANEL;
        size_t at = 0; /* row of xs */
        for (size_t j = j0; j < j1; j++) {
          size_t mr = aural__row_block_rows(&rb, j), n;
          const char *pf = next_block_slice(&nb, j - j0, w0, &n);
          size_t pf_n = nb.pf_n;
          if (native) {
            const uint32_t *xj = (const uint32_t *)xs + at * (KC / 2);
            switch (mr) {
            case 1: tile_dp1(w0, w1, xj, KC / 2, kc / 2, yp, N, bs, ms, first, last, pf, n, pf_n); break;
            case 2: tile_dp2(w0, w1, xj, KC / 2, kc / 2, yp, N, bs, ms, first, last, pf, n, pf_n); break;
            case 3: tile_dp3(w0, w1, xj, KC / 2, kc / 2, yp, N, bs, ms, first, last, pf, n, pf_n); break;
            case 4: tile_dp4(w0, w1, xj, KC / 2, kc / 2, yp, N, bs, ms, first, last, pf, n, pf_n); break;
            case 5: tile_dp5(w0, w1, xj, KC / 2, kc / 2, yp, N, bs, ms, first, last, pf, n, pf_n); break;
            default: tile_dp6(w0, w1, xj, KC / 2, kc / 2, yp, N, bs, ms, first, last, pf, n, pf_n); break;
            }
          } else {
            const float *xj = xs + at * KC, *v0 = wide, *v1 = wide + KC * AURAL__PANEL;
            switch (mr) {
            case 1: tile1(v0, v1, xj, KC, kc, yp, N, bs, ms, first, last, pf, n, pf_n, 0, bc); break;
            case 2: tile2(v0, v1, xj, KC, kc, yp, N, bs, ms, first, last, pf, n, pf_n, 0, bc); break;
            case 3: tile3(v0, v1, xj, KC, kc, yp, N, bs, ms, first, last, pf, n, pf_n, 0, bc); break;
            case 4: tile4(v0, v1, xj, KC, kc, yp, N, bs, ms, first, last, pf, n, pf_n, 0, bc); break;
            case 5: tile5(v0, v1, xj, KC, kc, yp, N, bs, ms, first, last, pf, n, pf_n, 0, bc); break;
            default: tile6(v0, v1, xj, KC, kc, yp, N, bs, ms, first, last, pf, n, pf_n, 0, bc); break;
            }
          }
          at += mr;
          yp += mr * N;
        }
      }
    }
  }
  _mm_setcsr(csr);
}

__attribute__((target("avx512f,fma,avx512bf16"))) static void linear_bf16_avx512(
    const aural__mat *mat, const float *b, const float *x, size_t M, float *y,
    bool native) {
  if (gemm_bcast())
    linear_bf16_body(mat, b, x, M, y, native, 1);
  else
    linear_bf16_body(mat, b, x, M, y, native, 0);
}

#endif /* AURAL_X86 */

/* A float as the bf16 kernels take it: a denormal is a zero of its sign. */
static inline float flush(float v) {
  return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v;
}

/* Precision bf16 the plain way: the oracle. For each chain of k, its
 * inputs are rounded once into a chain-sized array; y holds the running
 * totals until the bias is added, so nothing is allocated. */
static void linear_bf16_ref(const aural__mat *w, const float *b,
                            const float *x, size_t n, float *y) {
  size_t rows = (size_t)w->rows, cols = (size_t)w->cols;
  float xr[AURAL__CHAIN + 1];
  for (size_t i = 0; i < n; i++) {
    float *yi = y + i * rows;
    for (size_t c0 = 0; c0 < cols; c0 += AURAL__CHAIN) {
      size_t c1 = cols - c0 < AURAL__CHAIN ? cols : c0 + AURAL__CHAIN;
      for (size_t c = c0; c < c1; c++)
        xr[c - c0] = aural__bf16_to_f32(aural__f32_to_bf16(x[i * cols + c]));
      xr[c1 - c0] = 0.0f; /* an odd cols's pair */
      for (size_t r = 0; r < rows; r++) {
        float chain = 0.0f;
        for (size_t c = c0; c < c1; c += 2) {
          float w_lo = aural__bf16_to_f32(w->bf16[aural__bf16_packed_at(r, c, cols)]),
                w_hi = c + 1 < cols ? aural__bf16_to_f32(w->bf16[aural__bf16_packed_at(r, c + 1, cols)])
                                    : 0.0f;
          chain = flush(fmaf(xr[c + 1 - c0], w_hi, chain));
          chain = flush(fmaf(xr[c - c0], w_lo, chain));
        }
        /* From +0, as the vector paths' totals (+0 + -0 is +0). */
        yi[r] = flush((c0 == 0 ? 0.0f : yi[r]) + chain);
      }
    }
    for (size_t r = 0; r < rows; r++) {
      if (cols == 0) yi[r] = 0.0f;
      if (b != NULL) yi[r] = flush(yi[r] + flush(b[r]));
    }
  }
}

#if AURAL_X86
/* AVX512-BF16: CPUID leaf 7, subleaf 1, EAX bit 5 (with AVX-512 in use),
 * unless AURAL_BF16=emulate asks for the emulation; read once. Where the
 * core runs the dot products slower than the FMA kernels emulate them,
 * products of more than BF16_DOT_ROWS_SLOW rows take the emulation (the
 * same bits, faster), unless AURAL_BF16=dot asks for the dot products at
 * every size.
 *
 * Where the dot products are slow, up to 7 rows they still win, since
 * they read the weights as they are while the emulation widens each block
 * of them first, a cost that more rows share. Measured on an Intel Xeon
 * (family 6 model 207), base model, one thread, frames/s with the dot
 * products against the emulation: 1 row 2,467 against 1,694; 4 rows
 * 6,448 against 5,248; 8 rows level (7,219, 7,217); 12 rows 7,617
 * against 9,004; 50 rows 6,695 against 10,933. */
#define BF16_DOT_ROWS_SLOW 7

static bool bf16_cpu, bf16_cpu_has; /* trusted; and what CPUID says */
static size_t bf16_dot_rows;        /* products of at most this many rows
                                       take the dot products */
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;
static bool bf16_self_check(void);
static bool bf16_dot_slow(void);
static void detect_bf16(void) {
  unsigned a, b, c, d;
  const char *want = getenv("AURAL_BF16");
  kernels(); /* the self-check's tiles broadcast as chosen there */
  if (want != NULL && *want != '\0' && strcmp(want, "emulate") != 0 &&
      strcmp(want, "dot") != 0)
    fprintf(stderr, "aural: AURAL_BF16=%s is not emulate or dot; ignored\n",
            want);
  bf16_cpu_has = __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
                 (a & (1u << 5)) && __builtin_cpu_supports("avx512f");
  bf16_cpu = bf16_cpu_has && !(want != NULL && strcmp(want, "emulate") == 0);
  if (bf16_cpu && !bf16_self_check()) {
    fprintf(stderr, "aural: this CPU's AVX512-BF16 dot products disagree "
                    "with their emulation; precision bf16 is emulated\n");
    bf16_cpu = false;
  }
  if (!bf16_cpu)
    bf16_dot_rows = 0;
  else if ((want != NULL && strcmp(want, "dot") == 0) || !bf16_dot_slow())
    bf16_dot_rows = SIZE_MAX;
  else
    bf16_dot_rows = BF16_DOT_ROWS_SLOW;
}

/* Seconds for DOT_PROBE_ROUNDS rounds of 12 independent dot products
 * (dot = true) or FMAs: the best of DOT_PROBE_TRIES. */
#define DOT_PROBE_ROUNDS 4000
#define DOT_PROBE_TRIES 5
__attribute__((target("avx512f,fma,avx512bf16"))) static double
dot_probe_s(bool dot) {
  double best = INFINITY;
  for (int t = 0; t < DOT_PROBE_TRIES; t++) {
    __m512 acc[12];
    for (int j = 0; j < 12; j++) acc[j] = _mm512_set1_ps((float)j);
    const __m512 one = _mm512_set1_ps(1.0f), tiny = _mm512_set1_ps(0x1p-20f);
    const __m512bh pair = (__m512bh)_mm512_set1_epi32(0x3f803f80); /* 1, 1 */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < DOT_PROBE_ROUNDS; i++)
      for (int j = 0; j < 12; j++)
        acc[j] = dot ? _mm512_dpbf16_ps(acc[j], pair, pair)
                     : _mm512_fmadd_ps(acc[j], one, tiny);
    for (int j = 0; j < 12; j++) /* computed before the clock is read */
      __asm__ volatile("" : "+v"(acc[j]));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    float lanes[16], sum = 0;
    for (int j = 0; j < 12; j++) {
      _mm512_storeu_ps(lanes, acc[j]);
      sum += lanes[0];
    }
    volatile float keep = sum; /* the loop's results are used */
    (void)keep;
    best = fmin(best, (double)(t1.tv_sec - t0.tv_sec) +
                          (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
  }
  return best;
}

/* Whether the dot products (32 products each) do fewer products a second
 * than the FMAs (16 each) would: a dot product taking more than twice an
 * FMA's time. AMD's Zen 4 runs one in an FMA's time (twice the products);
 * the Intel Xeon above in four times it (half the products). */
static bool bf16_dot_slow(void) {
  double fma = dot_probe_s(false), dot = dot_probe_s(true);
  return dot > 2.0 * fma;
}

/* Before the dot products are trusted: a product of 7 rows and 20
 * outputs over 67 k (two chains, an odd k, a partial panel) done both
 * ways must give the same bits. */
static bool bf16_self_check(void) {
  enum { M = 7, N = 20, K = 67 };
  static uint16_t w[2 * ((K + 1) / 2 + 1) * 2 * AURAL__PANEL];
  float x[M * K], bias[N], y0[M * N], y1[M * N];
  uint32_t rng = 12345u;
  for (size_t i = 0; i < sizeof w / sizeof *w; i++) w[i] = 0;
  for (int r = 0; r < N; r++)
    for (int k = 0; k < K; k++) {
      rng = rng * 1664525u + 1013904223u;
      w[aural__bf16_packed_at((size_t)r, (size_t)k, K)] =
          aural__f32_to_bf16((float)(int32_t)rng / 2147483648.0f);
    }
  for (int i = 0; i < M * K; i++) {
    rng = rng * 1664525u + 1013904223u;
    x[i] = (float)(int32_t)rng / 1073741824.0f;
  }
  for (int r = 0; r < N; r++) bias[r] = (float)r / 7.0f;
  aural__mat m = {.bf16 = w, .rows = N, .cols = K};
  linear_bf16_avx512(&m, bias, x, M, y0, true);
  linear_bf16_avx512(&m, bias, x, M, y1, false);
  return memcmp(y0, y1, sizeof y0) == 0;
}
#endif

static aural__bf16_path bf16_forced; /* aural__bf16_force() */

void aural__bf16_force(aural__bf16_path path) { bf16_forced = path; }

size_t aural_model_bf16_dot_rows(void) {
#if AURAL_X86
  pthread_once(&bf16_once, detect_bf16);
  if (kernels()->isa != AURAL__ISA_AVX512) return 0;
  return bf16_forced == AURAL__BF16_EMULATE ? 0
         : bf16_forced == AURAL__BF16_DOT   ? (bf16_cpu ? SIZE_MAX : 0)
                                            : bf16_dot_rows;
#else
  return 0;
#endif
}

bool aural_model_bf16_native(void) { return aural_model_bf16_dot_rows() > 0; }

bool aural__bf16_cpu(void) {
#if AURAL_X86
  pthread_once(&bf16_once, detect_bf16);
  return bf16_cpu_has;
#else
  return false;
#endif
}

void aural__linear(const aural__mat *w, const float *b, const float *x,
                   size_t n, float *y) {
  if (n == 0) return; /* (the many-row drivers divide by row blocks) */
  if (w->bf16 == NULL)
    kernels()->linear(w, b, x, n, y);
#if AURAL_X86
  else if (kernels()->isa == AURAL__ISA_AVX512)
    linear_bf16_avx512(w, b, x, n, y, n <= aural_model_bf16_dot_rows());
  else if (kernels()->isa == AURAL__ISA_AVX2)
    aural__linear_bf16_avx2(w, b, x, n, y);
#endif
  else
    linear_bf16_ref(w, b, x, n, y);
}

/* Exact-erf gelu, 16 at a time. erf(z) for |z| < 4 is a degree-6
 * polynomial on each of 16 intervals of width 1/4, its coefficients
 * picked per lane with a permute (all 16 intervals of one coefficient fit
 * one register); above 4 it is 1. Within 6e-8 of erf everywhere, about
 * three times faster than libmvec's erff. */
/* Generated by tools/gen_erf_coeffs.py: erf on [k/4, (k+1)/4) is
 * sum_d aural__erf_c[d][k] t^d, t = z - (k + 1/2) / 4; largest absolute
 * error of the float evaluation 5.82e-08. */
const float aural__erf_c[7][16] __attribute__((aligned(64))) = {
    {1.403162032e-01f, 4.041168988e-01f, 6.232408881e-01f, 7.840750813e-01f, 8.883882165e-01f, 9.481700659e-01f, 9.784437418e-01f, 9.919900298e-01f, 9.973459840e-01f, 9.992170334e-01f, 9.997946024e-01f, 9.999521375e-01f, 9.999901056e-01f, 9.999982119e-01f, 9.999997020e-01f, 9.999999404e-01f},
    {1.110885262e+00f, 9.803528190e-01f, 7.634995580e-01f, 5.247450471e-01f, 3.182739615e-01f, 1.703597754e-01f, 8.047225326e-02f, 3.354582563e-02f, 1.234081946e-02f, 4.006478004e-03f, 1.147875446e-03f, 2.902284905e-04f, 6.475879491e-05f, 1.275178329e-05f, 2.215933591e-06f, 3.398257604e-07f},
    {-1.388606578e-01f, -3.676322997e-01f, -4.771872163e-01f, -4.591519237e-01f, -3.580582142e-01f, -2.342446893e-01f, -1.307674199e-01f, -6.289842725e-02f, -2.622424252e-02f, -9.515384212e-03f, -3.013172187e-03f, -8.344063535e-04f, -2.023709385e-04f, -4.303714741e-05f, -8.032719052e-06f, -1.316814178e-06f},
    {-3.587182760e-01f, -2.348750234e-01f, -5.567479134e-02f, 9.291964769e-02f, 1.624502838e-01f, 1.579380035e-01f, 1.148419306e-01f, 6.744214147e-02f, 3.303780779e-02f, 1.373050921e-02f, 4.890281707e-03f, 1.502423198e-03f, 3.999627079e-04f, 9.256100748e-05f, 1.866695675e-05f, 3.286753554e-06f},
    {6.870590150e-02f, 1.665809900e-01f, 1.764584333e-01f, 1.123969555e-01f, 2.797457948e-02f, -3.049970232e-02f, -4.971873760e-02f, -4.226018488e-02f, -2.636112273e-02f, -1.313334052e-02f, -5.414301530e-03f, -1.881731325e-03f, -5.575502291e-04f, -1.418763131e-04f, -3.116429798e-05f, -5.931268788e-06f},
    {1.035279259e-01f, 4.532615095e-02f, -2.703499421e-02f, -6.670913845e-02f, -6.106118858e-02f, -3.064393997e-02f, -2.303273417e-03f, 1.132801641e-02f, 1.244421583e-02f, 8.360583335e-03f, 4.236416426e-03f, 1.727707684e-03f, 5.842616665e-04f, 1.665794553e-04f, 4.045950845e-05f, 8.430421076e-06f},
    {-2.251009084e-02f, -4.980013892e-02f, -4.116240144e-02f, -1.041778736e-02f, 1.537253335e-02f, 2.204489708e-02f, 1.439882815e-02f, 4.144094884e-03f, -1.783651416e-03f, -3.097804496e-03f, -2.245846437e-03f, -1.143763191e-03f, -4.553539911e-04f, -1.479093480e-04f, -4.007918324e-05f, -9.180581401e-06f},
};

/* gelu in place of the values x[j] whose lane j is in m; the others are
 * neither read nor written. The values past the last 16 of a call take
 * the same polynomial, in a masked vector: the feed-forward rows of a
 * pass are one call of n * d_ff values and where a value falls in it
 * depends on the row count n, so a value computed another way there (by
 * erff, say) would make a frame's output depend on how many frames were
 * computed with it whenever d_ff is not a multiple of 16. */
#if AURAL_X86
__attribute__((target("avx512f"), always_inline)) static inline void
gelu16(float *x, __mmask16 m, const __m512 *c) {
  const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f),
               rsqrt2 = _mm512_set1_ps((float)M_SQRT1_2),
               four = _mm512_set1_ps(4.0f), quarter = _mm512_set1_ps(0.25f);
  const __m512i last = _mm512_set1_epi32(15),
                sign = _mm512_set1_epi32((int)0x80000000u);
  __m512 v = _mm512_maskz_loadu_ps(m, x), z = _mm512_mul_ps(v, rsqrt2);
  __m512 a = _mm512_abs_ps(z);
  __m512i k = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_mul_ps(a, four)), last);
  __m512 t = _mm512_sub_ps(a, _mm512_mul_ps(_mm512_add_ps(_mm512_cvtepi32_ps(k), half), quarter));
  __m512 e = _mm512_permutexvar_ps(k, c[6]);
  for (int d = 5; d >= 0; d--)
    e = _mm512_fmadd_ps(e, t, _mm512_permutexvar_ps(k, c[d]));
  e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(a, four, _CMP_GE_OQ), one);
  e = _mm512_castsi512_ps(_mm512_xor_epi32( /* erf(-z) = -erf(z) */
      _mm512_castps_si512(e), _mm512_and_epi32(_mm512_castps_si512(z), sign)));
  _mm512_mask_storeu_ps(x, m, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, e)));
}

__attribute__((target("avx512f"))) static void gelu_avx512(float *x,
                                                          size_t n) {
  __m512 c[7];
  for (int d = 0; d < 7; d++) c[d] = _mm512_load_ps(aural__erf_c[d]);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) gelu16(x + i, 0xffff, c);
  if (i < n) gelu16(x + i, (__mmask16)((1u << (n - i)) - 1), c);
}

#endif /* AURAL_X86 */

/* gelu the plain way: the scalar path's (libm's erff), not bit for bit
 * the vector paths' polynomial. */
static void gelu_ref(float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
}

void aural__gelu(float *x, size_t n) { kernels()->gelu(x, n); }

typedef aural__slot_runs slot_runs;

/* Softmax of the context's scores, in place, in double: exp(s - max),
 * and 1 / their sum returned. */
static double softmax_ref(double *scores, const slot_runs *runs) {
  double best = -INFINITY, sum = 0.0;
  for (int ri = 0; ri < runs->n; ri++)
    for (size_t s = runs->start[ri]; s < runs->start[ri] + runs->len[ri]; s++)
      best = scores[s] > best ? scores[s] : best;
  for (int ri = 0; ri < runs->n; ri++)
    for (size_t s = runs->start[ri]; s < runs->start[ri] + runs->len[ri]; s++) {
      scores[s] = exp(scores[s] - best);
      sum += scores[s];
    }
  return 1.0 / sum;
}

#if AURAL_X86
/* exp of 8 doubles <= 0, as kernels.h's AURAL__EXP says (the AVX2 path
 * does the same in 4 lanes, so their softmax weights have the same
 * bits). */
__attribute__((target("avx512f,fma"), always_inline)) static inline __m512d
exp8(__m512d x) {
  const __m512d shift = _mm512_set1_pd(AURAL__EXP_SHIFT);
  x = _mm512_max_pd(x, _mm512_set1_pd(AURAL__EXP_MIN));
  __m512d t = _mm512_fmadd_pd(x, _mm512_set1_pd(AURAL__EXP_LOG2E), shift);
  __m512d n = _mm512_sub_pd(t, shift);
  __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(AURAL__EXP_LN2_HI), x);
  r = _mm512_fnmadd_pd(n, _mm512_set1_pd(AURAL__EXP_LN2_LO), r);
  __m512d p = _mm512_set1_pd(aural__exp_c[AURAL__EXP_DEGREE]);
  for (int d = AURAL__EXP_DEGREE - 1; d >= 0; d--)
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(aural__exp_c[d]));
  __m512i scale = _mm512_slli_epi64(
      _mm512_add_epi64(_mm512_castpd_si512(t), _mm512_set1_epi64(1023)), 52);
  return _mm512_mul_pd(p, _mm512_castsi512_pd(scale));
}

/* The sum of the 8 lanes of t in the order the AVX2 kernels take too: the
 * upper four lanes onto the lower four, the upper two of those onto the
 * lower two, then lane 1 onto lane 0. */
__attribute__((target("avx512f"), always_inline)) static inline double
sum8(__m512d t) {
  __m256d a = _mm256_add_pd(_mm512_extractf64x4_pd(t, 1),
                            _mm512_castpd512_pd256(t));
  __m128d b = _mm_add_pd(_mm256_extractf128_pd(a, 1), _mm256_castpd256_pd128(a));
  return _mm_cvtsd_f64(b) + _mm_cvtsd_f64(_mm_unpackhi_pd(b, b));
}

/* The largest of the 8 lanes of t, in the same order as sum8(). */
__attribute__((target("avx512f"), always_inline)) static inline double
max8(__m512d t) {
  __m256d a = _mm256_max_pd(_mm512_extractf64x4_pd(t, 1),
                            _mm512_castpd512_pd256(t));
  __m128d b = _mm_max_pd(_mm256_extractf128_pd(a, 1), _mm256_castpd256_pd128(a));
  return _mm_cvtsd_f64(_mm_max_pd(b, _mm_unpackhi_pd(b, b)));
}

static inline __mmask16 ctx_mask(const slot_runs *runs, size_t g) {
  return (__mmask16)aural__ctx_mask(runs, g);
}


#endif /* AURAL_X86 */

/*
 * Attention in two steps, so that several query rows of a chunk can share
 * the loads of the key ring: scores of rows against every slot, then, row
 * by row, softmax over the row's context and the weighted sum of values.
 *
 * A slot's score is ((double) even chain + (double) odd chain) * scale,
 * where the even chain is the float fused multiply-add chain of q[c] k[c]
 * over c = 0, 2, 4, ... from zero and the odd chain the same over c = 1,
 * 3, 5, ... Both paths below compute exactly that for each lane, so a
 * frame's attention has the same bits however many rows were scored
 * together.
 */

/* The chains of one slot, the plain way. */
static double score_chain(const float *q, const float *k, size_t stride,
                          size_t hs, double scale) {
  float even = 0.0f, odd = 0.0f;
  for (size_t c = 0; c + 1 < hs; c += 2) {
    even = fmaf(q[c], k[c * stride], even);
    odd = fmaf(q[c + 1], k[(c + 1) * stride], odd);
  }
  if (hs % 2) even = fmaf(q[hs - 1], k[(hs - 1) * stride], even);
  return ((double)even + (double)odd) * scale;
}

void aural__attention_scores_ref(const float *q, size_t ldq, size_t n_rows,
                                 const float *kt, size_t w_pad, size_t hs,
                                 double scale, double *scores) {
  for (size_t r = 0; r < n_rows; r++)
    for (size_t s = 0; s < w_pad; s++)
      scores[r * w_pad + s] = score_chain(q + r * ldq, kt + s, w_pad, hs, scale);
}

#if AURAL_X86
/* R rows against NG groups of 16 slots starting at kt: for each pair of
 * lanes of q, NG key vectors are loaded once and used by every row. */
#define DEFINE_SCORES(NAME, R, NG)                                             \
  __attribute__((target("avx512f,fma"), always_inline)) static inline void    \
  NAME(const float *q, size_t ldq, const float *kt, size_t w_pad, size_t hs,   \
       __m512d vscale, double *scores) {                                       \
    __m512 acc[R][2][NG];                                                      \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                        \
      _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++)                      \
        _Pragma("GCC unroll 4") for (int g = 0; g < NG; g++) acc[r][h][g] =    \
            _mm512_setzero_ps();                                               \
    for (size_t c = 0; c < hs; c += 2) {                                       \
      /* Lane c into the even chains, lane c + 1 (if any) into the odd. */    \
      _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {                    \
        if (c + (size_t)h >= hs) break;                                        \
        const float *row = kt + (c + (size_t)h) * w_pad;                       \
        __m512 k[NG];                                                          \
        _Pragma("GCC unroll 4") for (int g = 0; g < NG; g++) {                 \
          k[g] = _mm512_loadu_ps(row + 16 * g);                                \
          /* In a register: loaded once, not once per row. */                 \
          __asm__("" : "+v"(k[g]));                                            \
        }                                                                      \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                  \
          __m512 bq = _mm512_set1_ps(q[(size_t)r * ldq + c + (size_t)h]);      \
          _Pragma("GCC unroll 4") for (int g = 0; g < NG; g++) acc[r][h][g] =  \
              _mm512_fmadd_ps(bq, k[g], acc[r][h][g]);                         \
        }                                                                      \
      }                                                                        \
    }                                                                          \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                        \
      _Pragma("GCC unroll 4") for (int g = 0; g < NG; g++) {                   \
        __m512d t[2];                                                          \
        widen(t, acc[r][0][g]);                                                \
        widen_add(t, acc[r][1][g]);                                            \
        double *out = scores + (size_t)r * w_pad + 16 * g;                     \
        _mm512_storeu_pd(out, _mm512_mul_pd(t[0], vscale));                    \
        _mm512_storeu_pd(out + 8, _mm512_mul_pd(t[1], vscale));                \
      }                                                                        \
  }
DEFINE_SCORES(scores3x4, 3, 4)
DEFINE_SCORES(scores1x4, 1, 4)
DEFINE_SCORES(scores3x1, 3, 1)
DEFINE_SCORES(scores1x1, 1, 1)

__attribute__((target("avx512f,fma"))) static void scores_avx512(
    const float *q, size_t ldq, size_t n_rows, const float *kt, size_t w_pad,
    size_t hs, double scale, double *scores) {
  const __m512d vscale = _mm512_set1_pd(scale);
  for (size_t r = 0; r < n_rows;) {
    int three = n_rows - r >= 3; /* three rows at a time, then one */
    const float *qr = q + r * ldq;
    double *sr = scores + r * w_pad;
    size_t g = 0;
    for (; g + 4 <= w_pad / 16; g += 4)
      if (three)
        scores3x4(qr, ldq, kt + 16 * g, w_pad, hs, vscale, sr + 16 * g);
      else
        scores1x4(qr, ldq, kt + 16 * g, w_pad, hs, vscale, sr + 16 * g);
    for (; g < w_pad / 16; g++)
      if (three)
        scores3x1(qr, ldq, kt + 16 * g, w_pad, hs, vscale, sr + 16 * g);
      else
        scores1x1(qr, ldq, kt + 16 * g, w_pad, hs, vscale, sr + 16 * g);
    r += three ? 3 : 1;
  }
}

#endif /* AURAL_X86 */

void aural__attention_scores(const float *q, size_t ldq, size_t n_rows,
                             const float *kt, size_t w_pad, size_t hs,
                             double scale, double *scores) {
  kernels()->scores(q, ldq, n_rows, kt, w_pad, hs, scale, scores);
}

/* With at most three rows a plan has at most 9 cuts (2 per row, n_old and
 * two wraps) and so at most 8 stretches; the kernels take 1 to 3 rows. */
_Static_assert(AURAL__MIX_ROWS == 3, "mixing plans are sized for 3 rows");
void aural__mix_plan_of(aural__mix_plan *mp, size_t g, size_t n_slots,
                        size_t slot_first, size_t n_old, const size_t *n_ctx) {
  mp->g = g;
  mp->n_slots = n_slots;
  mp->slot_first = slot_first;
  mp->n_old = n_old;
  size_t lo_max = 0, end = n_old + g;
  for (size_t j = 0; j < g; j++) {
    mp->n_ctx[j] = n_ctx[j];
    mp->lo[j] = n_old + j + 1 - n_ctx[j];
    lo_max = mp->lo[j] > lo_max ? mp->lo[j] : lo_max;
  }
  /* Frames lo_max .. n_old are seen by every row (none if lo_max is past
   * n_old: rows whose windows do not overlap). */
  size_t cuts[2 * AURAL__MIX_ROWS + 4], n_cuts = 0;
  for (size_t j = 0; j < g; j++) {
    cuts[n_cuts++] = mp->lo[j];
    cuts[n_cuts++] = n_old + j + 1;
  }
  cuts[n_cuts++] = n_old;
  for (size_t wrap = n_slots - slot_first; wrap < end; wrap += n_slots)
    cuts[n_cuts++] = wrap; /* at most twice: end - lo[0] <= n_slots + g - 1 */
  for (size_t i = 1; i < n_cuts; i++) /* insertion sort: a dozen values */
    for (size_t k = i; k > 0 && cuts[k - 1] > cuts[k]; k--) {
      size_t t = cuts[k];
      cuts[k] = cuts[k - 1];
      cuts[k - 1] = t;
    }
  /* Frame first_wrap (and first_wrap + n_slots) is in slot 0: where a
   * row's second run of slots begins. */
  size_t first_wrap = (n_slots - slot_first) % n_slots;
  mp->n_seg = 0;
  size_t at = mp->lo[0];
  for (size_t i = 0; i <= n_cuts; i++) {
    size_t next = i < n_cuts ? cuts[i] : end;
    if (next <= at) continue;
    if (next > end) next = end;
    struct aural__mix_seg *sg = &mp->seg[mp->n_seg++];
    sg->i0 = at;
    sg->n = next - at;
    sg->s0 = (slot_first + at) % n_slots;
    sg->is_new = at >= n_old;
    sg->all = at >= lo_max && at <= n_old;
    /* Each row's run that holds these frames began at its first frame or
     * at the last slot 0 before them, if later. */
    size_t wrap = at >= first_wrap
                      ? first_wrap + (at - first_wrap) / n_slots * n_slots
                      : 0;
    sg->flip = 0;
    for (size_t j = 0; j < g; j++) {
      size_t run0 = at >= first_wrap && wrap > mp->lo[j] ? wrap : mp->lo[j];
      sg->flip |= (unsigned)(run0 % 2) << j;
    }
    at = next;
    if (at == end) break;
  }
}

/* Where frame i's value is. */
static inline const float *mix_value(const aural__mix_plan *mp, size_t i,
                                     const float *v, size_t ldv,
                                     const float *v_new, size_t ld_new) {
  return i < mp->n_old ? v + ((mp->slot_first + i) % mp->n_slots) * ldv
                       : v_new + (i - mp->n_old) * ld_new;
}

/* The group the plain way, row by row: softmax over the row's context in
 * double, then its values oldest first, summed in double. */
static void mix_rows_ref(const aural__mix_plan *mp, double *scores,
                         size_t lds, const float *v, size_t ldv,
                         const float *v_new, size_t ld_new, size_t hs,
                         float *o, size_t ldo) {
  for (size_t j = 0; j < mp->g; j++) {
    double *sj = scores + j * lds;
    slot_runs runs = aural__runs_of(
        mp->n_slots, (mp->slot_first + mp->lo[j]) % mp->n_slots, mp->n_ctx[j]);
    double inv = softmax_ref(sj, &runs);
    for (size_t c = 0; c < hs; c++) {
      double acc = 0.0;
      for (size_t i = mp->lo[j]; i <= mp->n_old + j; i++) {
        size_t s = (mp->slot_first + i) % mp->n_slots;
        acc += (double)(float)(sj[s] * inv) *
               mix_value(mp, i, v, ldv, v_new, ld_new)[c];
      }
      o[j * ldo + c] = (float)acc;
    }
  }
}

/* One row whose n_ctx frames are all in the ring from slot_first on: its
 * plan, and where its own (last) frame's value is. */
static const float *one_row_plan(aural__mix_plan *mp, const float *v,
                                 size_t ldv, size_t n_slots,
                                 size_t slot_first, size_t n_ctx) {
  aural__mix_plan_of(mp, 1, n_slots, slot_first, n_ctx - 1, &n_ctx);
  return v + ((slot_first + n_ctx - 1) % n_slots) * ldv;
}

/* Scalar attention: the oracle, and the path for head sizes that are not
 * a multiple of 16 or CPUs without AVX2. */
void aural__attention_ref(const float *q, const float *kt, size_t w_pad,
                          const float *v, size_t ldv, size_t hs,
                          size_t n_slots, size_t slot_first, size_t n_ctx,
                          double scale, double *scores, float *o) {
  aural__attention_scores_ref(q, hs, 1, kt, w_pad, hs, scale, scores);
  aural__mix_plan mp;
  const float *own = one_row_plan(&mp, v, ldv, n_slots, slot_first, n_ctx);
  mix_rows_ref(&mp, scores, 0, v, ldv, own, 0, hs, o, 0);
}

#if AURAL_X86
/* Softmax of each of G rows' contexts 8 slots at a time: max and exp
 * (exp8, double) over the context's lanes, then the weights e * (1 / sum)
 * rounded to float and written over the scores as floats (group g's 16
 * floats take the bytes of doubles 8 g to 8 g + 7, which no later group
 * reads). The rows go side by side through each step, so that one row's
 * sums and division overlap another's work; each row's operations are
 * the same whatever G is. p[j]: row j's floats, slot for slot. */
#define DEFINE_SOFTMAX(NAME, G)                                                \
  __attribute__((target("avx512f,fma"), always_inline)) static inline void    \
  NAME(const aural__mix_plan *mp, double *scores, size_t lds, float **p) {     \
    size_t n_grp = (mp->n_slots + 15) / 16;                                    \
    slot_runs runs[G];                                                         \
    __m512d vbest[G], vsum[G], inv[G];                                         \
    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {                      \
      runs[j] = aural__runs_of(mp->n_slots,                                    \
                               (mp->slot_first + mp->lo[j]) % mp->n_slots,     \
                               mp->n_ctx[j]);                                  \
      vbest[j] = _mm512_set1_pd(-INFINITY);                                    \
      vsum[j] = _mm512_setzero_pd();                                           \
    }                                                                          \
    for (size_t g = 0; g < n_grp; g++)                                         \
      _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {                    \
        __mmask16 m = ctx_mask(&runs[j], g);                                   \
        for (int h = 0; h < 2; h++) {                                          \
          __mmask8 mh = (__mmask8)(m >> 8 * h);                                \
          __m512d sc =                                                         \
              _mm512_maskz_loadu_pd(mh, scores + j * lds + 16 * g + 8 * h);    \
          vbest[j] = _mm512_mask_max_pd(vbest[j], mh, vbest[j], sc);           \
        }                                                                      \
      }                                                                        \
    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) vbest[j] =             \
        _mm512_set1_pd(max8(vbest[j]));                                        \
    for (size_t g = 0; g < n_grp; g++)                                         \
      _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {                    \
        __mmask16 m = ctx_mask(&runs[j], g);                                   \
        for (int h = 0; h < 2; h++) {                                          \
          __mmask8 mh = (__mmask8)(m >> 8 * h);                                \
          if (!mh) continue;                                                   \
          double *sp = scores + j * lds + 16 * g + 8 * h;                      \
          __m512d x = _mm512_sub_pd(_mm512_mask_loadu_pd(vbest[j], mh, sp),    \
                                    vbest[j]);                                 \
          __m512d e = _mm512_maskz_mov_pd(mh, exp8(x));                        \
          _mm512_mask_storeu_pd(sp, mh, e);                                    \
          vsum[j] = _mm512_add_pd(vsum[j], e);                                 \
        }                                                                      \
      }                                                                        \
    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {                      \
      inv[j] = _mm512_set1_pd(1.0 / sum8(vsum[j]));                            \
      p[j] = (float *)(scores + j * lds);                                      \
    }                                                                          \
    for (size_t g = 0; g < n_grp; g++)                                         \
      _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {                    \
        const double *sp = scores + j * lds + 16 * g;                          \
        __m512d e[2] = {_mm512_mul_pd(_mm512_loadu_pd(sp), inv[j]),            \
                        _mm512_mul_pd(_mm512_loadu_pd(sp + 8), inv[j])};       \
        _mm512_storeu_ps(p[j] + 16 * g, narrow(e));                            \
      }                                                                        \
  }
DEFINE_SOFTMAX(softmax1, 1)
DEFINE_SOFTMAX(softmax2, 2)
DEFINE_SOFTMAX(softmax3, 3)

/* One frame's value (NV vectors at vp) times each row's weight for it
 * (slot s of p[j]) into chain C of the rows: all G rows, or (PARTIAL)
 * those that see frame i. */
#define MIX_FRAME(G, NV, C, PARTIAL, vp, s, i)                                 \
  do {                                                                         \
    __m512 vv[NV];                                                             \
    _Pragma("GCC unroll 4") for (int q = 0; q < NV; q++) {                     \
      vv[q] = _mm512_loadu_ps((vp) + 16 * q);                                  \
      __asm__("" : "+v"(vv[q])); /* in a register, not loaded per row */       \
    }                                                                          \
    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++) {                      \
      if (PARTIAL && ((i) < mp->lo[j] || (i) > mp->n_old + (size_t)j))         \
        continue;                                                              \
      __m512 wj = _mm512_set1_ps(p[j][s]);                                     \
      _Pragma("GCC unroll 4") for (int q = 0; q < NV; q++) acc[j][C][q] =      \
          _mm512_fmadd_ps(wj, vv[q], acc[j][C][q]);                            \
    }                                                                          \
  } while (0)

/* The values of G rows, NV vectors of 16 lanes from v, v_new and o on (a
 * block of the head), in the order of kernels.h's AURAL__MIX_WALK. */
#define DEFINE_MIX_PV(NAME, G, NV)                                             \
  __attribute__((target("avx512f,fma"), always_inline)) static inline void    \
  NAME(const aural__mix_plan *mp, float *const *p, const float *v,             \
       size_t ldv, const float *v_new, size_t ld_new, float *o, size_t ldo) {  \
    enum { G_ = G, NV_ = NV };                                                 \
    __m512 acc[G][2][NV];                                                      \
    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)                        \
      _Pragma("GCC unroll 4") for (int q = 0; q < NV; q++) acc[j][0][q] =      \
          acc[j][1][q] = _mm512_setzero_ps();                                  \
    AURAL__MIX_WALK(mp, G, v, ldv, v_new, ld_new, MIX_FRAME_, MIX_SWAP_);      \
    _Pragma("GCC unroll 4") for (int j = 0; j < G; j++)                        \
      _Pragma("GCC unroll 4") for (int q = 0; q < NV; q++) {                   \
        __m512d t[2];                                                          \
        widen(t, acc[j][0][q]);                                                \
        widen_add(t, acc[j][1][q]);                                            \
        _mm512_storeu_ps(o + (size_t)j * ldo + 16 * q, narrow(t));             \
      }                                                                        \
  }
/* The walk's steps, for the G_ rows and NV_ vectors of DEFINE_MIX_PV. */
#define MIX_FRAME_(C, PARTIAL, vp, s, i)                                       \
  MIX_FRAME(G_, NV_, C, PARTIAL, vp, s, i)
#define MIX_SWAP_(j)                                                           \
  _Pragma("GCC unroll 4") for (int q = 0; q < NV_; q++) {                      \
    __m512 t = acc[j][0][q];                                                   \
    acc[j][0][q] = acc[j][1][q];                                               \
    acc[j][1][q] = t;                                                          \
  }
DEFINE_MIX_PV(mix_pv1x1, 1, 1)
DEFINE_MIX_PV(mix_pv1x2, 1, 2)
DEFINE_MIX_PV(mix_pv1x3, 1, 3)
DEFINE_MIX_PV(mix_pv1x4, 1, 4)
DEFINE_MIX_PV(mix_pv2x1, 2, 1)
DEFINE_MIX_PV(mix_pv2x2, 2, 2)
DEFINE_MIX_PV(mix_pv2x3, 2, 3)
DEFINE_MIX_PV(mix_pv2x4, 2, 4)
DEFINE_MIX_PV(mix_pv3x1, 3, 1)
DEFINE_MIX_PV(mix_pv3x2, 3, 2)
DEFINE_MIX_PV(mix_pv3x3, 3, 3)
DEFINE_MIX_PV(mix_pv3x4, 3, 4)

typedef void mix_pv_fn(const aural__mix_plan *mp, float *const *p,
                       const float *v, size_t ldv, const float *v_new,
                       size_t ld_new, float *o, size_t ldo);
/* mix_pv[g - 1][nv - 1]: the kernel for g rows and nv vectors. */
static mix_pv_fn *const mix_pv[AURAL__MIX_ROWS][4] = {
    {mix_pv1x1, mix_pv1x2, mix_pv1x3, mix_pv1x4},
    {mix_pv2x1, mix_pv2x2, mix_pv2x3, mix_pv2x4},
    {mix_pv3x1, mix_pv3x2, mix_pv3x3, mix_pv3x4}};

/* Each row's softmax, then the values. */
__attribute__((target("avx512f,fma"))) static void mix_rows_avx512(
    const aural__mix_plan *mp, double *scores, size_t lds, const float *v,
    size_t ldv, const float *v_new, size_t ld_new, size_t hs, float *o,
    size_t ldo) {
  float *p[AURAL__MIX_ROWS] = {NULL};
  switch (mp->g) {
  case 1: softmax1(mp, scores, lds, p); break;
  case 2: softmax2(mp, scores, lds, p); break;
  default: softmax3(mp, scores, lds, p); break;
  }
  /* Four vectors of the head at a time (three rows' 24 accumulators and
   * the four values fill 28 of the 32 registers), then the one to three
   * left together: each value is loaded once for every row, and each
   * weight broadcast once for as many lanes as fit. */
  size_t nv = hs / 16;
  for (size_t q = 0; q < nv; q += 4) {
    size_t n = nv - q < 4 ? nv - q : 4;
    mix_pv[mp->g - 1][n - 1](mp, p, v + 16 * q, ldv, v_new + 16 * q, ld_new,
                             o + 16 * q, ldo);
  }
}

#endif /* AURAL_X86 */

void aural__attention_mix_rows(const aural__mix_plan *mp, double *scores,
                               size_t lds, const float *v, size_t ldv,
                               const float *v_new, size_t ld_new, size_t hs,
                               float *o, size_t ldo) {
  /* Every vector path takes the plain way for the same head sizes, so
   * that they all give the same bits. */
  if (hs % 16 == 0)
    kernels()->mix_rows(mp, scores, lds, v, ldv, v_new, ld_new, hs, o, ldo);
  else
    mix_rows_ref(mp, scores, lds, v, ldv, v_new, ld_new, hs, o, ldo);
}

void aural__attention_mix(double *scores, const float *v, size_t ldv,
                          size_t hs, size_t n_slots, size_t slot_first,
                          size_t n_ctx, float *o) {
  aural__mix_plan mp;
  const float *own = one_row_plan(&mp, v, ldv, n_slots, slot_first, n_ctx);
  aural__attention_mix_rows(&mp, scores, 0, v, ldv, own, 0, hs, o, 0);
}

void aural__attention(const float *q, const float *kt, size_t w_pad,
                      const float *v, size_t ldv, size_t hs, size_t n_slots,
                      size_t slot_first, size_t n_ctx, double scale,
                      double *scores, float *o) {
  aural__attention_scores(q, hs, 1, kt, w_pad, hs, scale, scores);
  aural__attention_mix(scores, v, ldv, hs, n_slots, slot_first, n_ctx, o);
}

/* One row of layer norm, the plain way: the oracle, and the path for
 * widths that are not a multiple of 16. Mean, variance and the scaling in
 * double precision (a residual stream with entries in the hundreds loses
 * too much to float sums), rounded to float once per output. */
static void layer_norm_row_ref(const float *s, float *r, int d,
                               const float *g, const float *b, float eps) {
  double mean = 0.0, var = 0.0;
  for (int k = 0; k < d; k++) mean += s[k];
  mean /= (double)d;
  for (int k = 0; k < d; k++) var += (s[k] - mean) * (s[k] - mean);
  var /= (double)d;
  double inv = 1.0 / sqrt(var + (double)eps);
  for (int k = 0; k < d; k++)
    r[k] = (float)((s[k] - mean) * inv * g[k] + b[k]);
}

#if AURAL_X86
/* The same in 8 double lanes (a row of 16 floats at a time, as two
 * halves), R rows side by side: each row's sums are chains of dependent
 * adds, so one row at a time waits on their latency. Each row's
 * operations are the same whatever R is. The sums go in lanes rather than
 * in order, so the bits may differ from the oracle's by a rounding. */
#define DEFINE_LN(NAME, R)                                                     \
  __attribute__((target("avx512f,fma"), always_inline)) static inline void    \
  NAME(const float *x, float *y, size_t ld, int d, const float *g,           \
       const float *b, float eps) {                                            \
    __m512d acc[R][2], vm[R], inv[R], c[2], gw[2], bw[2];                      \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) acc[r][0] =            \
        acc[r][1] = _mm512_setzero_pd();                                       \
    for (int k = 0; k < d; k += 16)                                            \
      _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                      \
        widen_add(acc[r], _mm512_loadu_ps(x + r * ld + k));                    \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                      \
      vm[r] = _mm512_set1_pd(sum8(_mm512_add_pd(acc[r][0], acc[r][1])) / d);   \
      acc[r][0] = acc[r][1] = _mm512_setzero_pd();                             \
    }                                                                          \
    for (int k = 0; k < d; k += 16)                                            \
      _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                    \
        widen(c, _mm512_loadu_ps(x + r * ld + k));                             \
        for (int h = 0; h < 2; h++) {                                          \
          c[h] = _mm512_sub_pd(c[h], vm[r]);                                   \
          acc[r][h] = _mm512_fmadd_pd(c[h], c[h], acc[r][h]);                  \
        }                                                                      \
      }                                                                        \
    _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                      \
      double var = sum8(_mm512_add_pd(acc[r][0], acc[r][1])) / d;              \
      inv[r] = _mm512_set1_pd(1.0 / sqrt(var + (double)eps));                  \
    }                                                                          \
    for (int k = 0; k < d; k += 16) {                                          \
      widen(gw, _mm512_loadu_ps(g + k));                                       \
      widen(bw, _mm512_loadu_ps(b + k));                                       \
      _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                    \
        widen(c, _mm512_loadu_ps(x + r * ld + k));                             \
        for (int h = 0; h < 2; h++)                                            \
          c[h] = _mm512_fmadd_pd(                                              \
              _mm512_mul_pd(_mm512_sub_pd(c[h], vm[r]), inv[r]), gw[h], bw[h]); \
        _mm512_storeu_ps(y + r * ld + k, narrow(c));                           \
      }                                                                        \
    }                                                                          \
  }
DEFINE_LN(layer_norm4, 4)
DEFINE_LN(layer_norm1, 1)

__attribute__((target("avx512f,fma"))) static void layer_norm_avx512(
    const float *x, float *y, size_t n, int d, const float *g, const float *b,
    float eps) {
  size_t i = 0, ld = (size_t)d;
  for (; i + 4 <= n; i += 4) layer_norm4(x + i * ld, y + i * ld, ld, d, g, b, eps);
  for (; i < n; i++) layer_norm1(x + i * ld, y + i * ld, ld, d, g, b, eps);
}

static void layer_norm_avx2(const float *x, float *y, size_t n, int d,
                            const float *g, const float *b, float eps) {
  for (size_t i = 0; i < n; i++)
    aural__layer_norm_row_avx2(x + i * (size_t)d, y + i * (size_t)d, d, g, b,
                               eps);
}

#endif /* AURAL_X86 */

static void layer_norm_ref(const float *x, float *y, size_t n, int d,
                           const float *g, const float *b, float eps) {
  for (size_t i = 0; i < n; i++)
    layer_norm_row_ref(x + i * (size_t)d, y + i * (size_t)d, d, g, b, eps);
}

void aural__layer_norm_to(const float *x, float *y, size_t n, int d,
                          const float *g, const float *b, float eps) {
  /* As in the mix, widths that are not a multiple of 16 take the plain
   * way on every path. */
  if (d % 16 == 0)
    kernels()->layer_norm(x, y, n, d, g, b, eps);
  else
    layer_norm_ref(x, y, n, d, g, b, eps);
}

void aural__layer_norm(float *x, size_t n, int d, const float *g,
                       const float *b, float eps) {
  aural__layer_norm_to(x, x, n, d, g, b, eps);
}

void aural__relu(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* ---- rotary positions ------------------------------------------------ */

static void rope_ref(float *v, int n_heads, int hs, const float *cs,
                     const float *sn) {
  for (int h = 0; h < n_heads; h++) {
    float *hv = v + h * hs;
    for (int i = 0; i < hs / 2; i++) {
      float a = hv[2 * i], b = hv[2 * i + 1];
      hv[2 * i] = a * cs[i] - b * sn[i];
      hv[2 * i + 1] = a * sn[i] + b * cs[i];
    }
  }
}

#if AURAL_X86
/* Eight pairs at a time: v times each pair's cosine, plus v with each
 * pair's two swapped times (-sine, +sine); a product with -sn is the
 * negated product, so the sum is rope_ref's difference. Each product is
 * rounded before the sum: the project compiles with -ffp-contract=off
 * (meson.build), so no multiply and add become one fused multiply-add
 * here or in rope_ref. */
__attribute__((target("avx512f"))) static void rope_avx512(
    float *v, int n_heads, int hs, const float *cs, const float *sn) {
  if (hs % 16) {
    rope_ref(v, n_heads, hs, cs, sn);
    return;
  }
  const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1,
                                       1, 0, 0);
  const __m512 sign = _mm512_set_ps(1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1,
                                    1, -1, 1, -1);
  for (int h = 0; h < n_heads; h++) {
    float *hv = v + h * hs;
    for (int i = 0; i < hs; i += 16) {
      __m512 c = _mm512_permutexvar_ps(
          dup, _mm512_maskz_loadu_ps(0xff, cs + i / 2));
      __m512 s = _mm512_mul_ps(
          _mm512_permutexvar_ps(dup, _mm512_maskz_loadu_ps(0xff, sn + i / 2)),
          sign);
      __m512 x = _mm512_loadu_ps(hv + i);
      __m512 swapped = _mm512_permute_ps(x, 0xb1); /* (b, a) in each pair */
      _mm512_storeu_ps(hv + i, _mm512_add_ps(_mm512_mul_ps(x, c),
                                             _mm512_mul_ps(swapped, s)));
    }
  }
}
#endif /* AURAL_X86 */

void aural__rope(float *v, int n_heads, int hs, const float *cs,
                 const float *sn) {
  kernels()->rope(v, n_heads, hs, cs, sn);
}

/* ---- choosing the kernels ------------------------------------------- */

/* Indexed by aural__isa. */
static const kernel_set kernel_sets[] = {
    {AURAL__ISA_SCALAR, "aural scalar reference (slow)", aural__linear_ref,
     aural__attention_scores_ref, mix_rows_ref, layer_norm_ref, gelu_ref,
     rope_ref},
#if AURAL_X86
    {AURAL__ISA_AVX2,
     "aural AVX2 FMA (register tiles of 3-6 rows x 16 columns over "
     "L1-sized weight blocks; f16 weights via F16C)",
     aural__linear_avx2, aural__scores_avx2, aural__mix_rows_avx2,
     layer_norm_avx2, aural__gelu_avx2, rope_ref},
    {AURAL__ISA_AVX512,
     "aural AVX-512 FMA (register tiles of 3-6 rows x 32 columns over "
     "L1-sized weight blocks; f16 weights via F16C)",
     linear_avx512, scores_avx512, mix_rows_avx512, layer_norm_avx512,
     gelu_avx512, rope_avx512},
#endif
};
static const char *const isa_names[] = {"scalar", "avx2", "avx512"};

static const kernel_set *active_set;
static pthread_once_t kernel_once = PTHREAD_ONCE_INIT;

#if AURAL_X86
/* F16C, from CPUID leaf 1 (ECX bit 29): clang before 15 has no "f16c"
 * for __builtin_cpu_supports. */
static bool has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

/* The extensions isa needs that this CPU (and its OS) lack, as a list for
 * a message; "" when it has them all. */
static const char *isa_missing(aural__isa isa, char *buf, size_t cap) {
#if AURAL_X86
  __builtin_cpu_init();
  int avx512f = isa == AURAL__ISA_AVX512 && !__builtin_cpu_supports("avx512f");
  int avx2 = isa == AURAL__ISA_AVX2 && !__builtin_cpu_supports("avx2");
  int vec = isa != AURAL__ISA_SCALAR;
  int fma = vec && !__builtin_cpu_supports("fma");
  int f16c = vec && !has_f16c();
  snprintf(buf, cap, "%s%s%s%s", avx512f ? " AVX-512F" : "",
           avx2 ? " AVX2" : "", fma ? " FMA" : "", f16c ? " F16C" : "");
  return buf;
#else
  snprintf(buf, cap, "%s", isa == AURAL__ISA_SCALAR ? "" : " x86 (not this CPU)");
  return buf;
#endif
}

bool aural__isa_supported(aural__isa isa) {
  char buf[64];
  return *isa_missing(isa, buf, sizeof buf) == '\0';
}

/*
 * Once per process: the best kernels this CPU runs (AVX-512, else AVX2 +
 * FMA + F16C, else scalar), unless AURAL_ISA names another set (or the
 * older AURAL_GEMM_SCALAR, set to anything, asks for the scalar one). A
 * set the CPU cannot run, or a name that is no set, is refused with one
 * line on stderr, and the best set is used. This is the library's one
 * message of its own: the choice is process-wide, made before any object
 * with a log callback exists, and answers an explicit request of whoever
 * set the environment.
 */
static void pick_kernel(void) {
  aural__isa best = AURAL__ISA_SCALAR;
  for (int i = AURAL__ISA_AVX512; i > AURAL__ISA_SCALAR; i--)
    if (aural__isa_supported((aural__isa)i)) {
      best = (aural__isa)i;
      break;
    }
  aural__isa use = best;
  const char *want = getenv("AURAL_ISA");
  if ((want == NULL || *want == '\0') && getenv("AURAL_GEMM_SCALAR") != NULL)
    want = "scalar";
  if (want != NULL && *want != '\0') {
    int found = -1;
    for (int i = 0; i < (int)(sizeof isa_names / sizeof *isa_names); i++)
      if (strcasecmp(want, isa_names[i]) == 0) found = i;
    char buf[64];
    if (found < 0)
      fprintf(stderr,
              "aural: AURAL_ISA=%s is not one of avx512, avx2, scalar; "
              "using %s\n",
              want, isa_names[best]);
    else if (*isa_missing((aural__isa)found, buf, sizeof buf) != '\0')
      fprintf(stderr, "aural: AURAL_ISA=%s refused: this CPU lacks%s; using %s\n",
              want, buf, isa_names[best]);
    else
      use = (aural__isa)found;
  }
  active_set = &kernel_sets[use];
#if AURAL_X86
  gemm_bcast_cpu = __builtin_cpu_is("intel");
#endif
}

static const kernel_set *kernels(void) {
  pthread_once(&kernel_once, pick_kernel);
  return active_set;
}

aural__isa aural__isa_in_use(void) { return kernels()->isa; }

const char *aural__isa_name(aural__isa isa) { return isa_names[isa]; }

bool aural__isa_use(aural__isa isa) {
  kernels();
  if (!aural__isa_supported(isa)) return false;
  active_set = &kernel_sets[isa];
  return true;
}

/* The kernels' name, which says how the AVX-512 tiles broadcast. */
static const char *gemm_name(void) {
  const kernel_set *k = kernels();
#if AURAL_X86
  if (k->isa == AURAL__ISA_AVX512 && gemm_bcast())
    return "aural AVX-512 FMA (register tiles of 3-6 rows x 32 columns over "
           "L1-sized weight blocks, each input broadcast once per step; f16 "
           "weights via F16C)";
#endif
  return k->name;
}

const char *aural__gemm_kernel(void) { return gemm_name(); }

const char *aural_gemm_name(void) { return gemm_name(); }

const char *aural_isa_name(void) { return isa_names[kernels()->isa]; }
