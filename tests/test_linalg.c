/*
 * The matrix-product kernels against their scalar oracle: identical bits
 * for every shape and row count (the encoder's batch invariance rests on
 * this), and the oracle against a double-precision product. Also the f16
 * conversions and the activations.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helpers.h"
#include "aural/model.h"
#include "internal.h"
#include "mix_case.h"


/* A random (rows, cols) matrix, packed, as f32 or f16, with its row-major
 * values (as the kernels see them) in `plain`. */
static aural__mat make_mat(size_t rows, size_t cols, int f16, float *plain,
                           void **mem) {
  size_t n = aural__packed_size(rows, cols);
  aural__mat m = {.rows = (int)rows, .cols = (int)cols};
  if (f16) {
    uint16_t *p = calloc(n, sizeof *p);
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < cols; c++) {
        uint16_t h = aural__f32_to_f16(test_frand());
        p[aural__packed_at(r, c, cols)] = h;
        plain[r * cols + c] = aural__f16_to_f32(h);
      }
    m.f16 = p;
    *mem = p;
  } else {
    float *p = calloc(n, sizeof *p);
    for (size_t r = 0; r < rows; r++)
      for (size_t c = 0; c < cols; c++)
        p[aural__packed_at(r, c, cols)] = plain[r * cols + c] = test_frand();
    m.f32 = p;
    *mem = p;
  }
  return m;
}

/* Shapes cover: row counts of the few-row kernels (1-5), of the tiles (one
 * block of 6, blocks of 3 to 6 rows, 5/6 splits), of several chunks of row
 * blocks (73, 150); partial, odd and single panels; k in one block, in
 * blocks with a short last one, and below the four k of one prefetch
 * step. */
static void test_kernel_matches_oracle_bit_for_bit(void **state) {
  (void)state;
  const size_t rows[] = {1, 15, 16, 17, 31, 32, 33, 100};
  const size_t cols[] = {1, 3, 7, 64, 257, 600};
  const size_t ns[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 19, 50, 73, 150};
  const size_t n_rows = sizeof rows / sizeof *rows,
               n_cols = sizeof cols / sizeof *cols, n_ns = sizeof ns / sizeof *ns,
               n_max = 150;
  int n_checked = 0;
  for (int f16 = 0; f16 < 2; f16++)
    for (size_t ri = 0; ri < n_rows; ri++)
      for (size_t ci = 0; ci < n_cols; ci++) {
        size_t R = rows[ri], C = cols[ci];
        float *plain = malloc(R * C * sizeof *plain);
        void *mem;
        aural__mat w = make_mat(R, C, f16, plain, &mem);
        float *b = malloc(R * sizeof *b);
        for (size_t r = 0; r < R; r++) b[r] = test_frand();
        float *x = malloc(n_max * C * sizeof *x);
        for (size_t i = 0; i < n_max * C; i++) x[i] = test_frand() * 4;
        float *fast = malloc(n_max * R * sizeof *fast);
        float *ref = malloc(n_max * R * sizeof *ref);
        for (size_t ni = 0; ni < n_ns; ni++) {
          size_t n = ns[ni];
          for (int with_bias = 0; with_bias < 2; with_bias++) {
            const float *bb = with_bias ? b : NULL;
            aural__linear_ref(&w, bb, x, n, ref);
            /* Both ways of broadcasting the inputs (AVX-512). */
            for (int bc = 0; bc < 2; bc++) {
              aural__gemm_broadcast(bc);
              aural__linear(&w, bb, x, n, fast);
              aural__gemm_broadcast(-1);
              assert_memory_equal(fast, ref, n * R * sizeof *fast);
            }
            aural__linear(&w, bb, x, n, fast);
            assert_memory_equal(fast, ref, n * R * sizeof *fast);
            n_checked++;
            /* The oracle is a correct product. */
            for (size_t i = 0; i < n; i++)
              for (size_t r = 0; r < R; r++) {
                double acc = with_bias ? b[r] : 0;
                for (size_t c = 0; c < C; c++)
                  acc += (double)x[i * C + c] * plain[r * C + c];
                assert_true(fabs(ref[i * R + r] - acc) <=
                            1e-5 * (1 + fabs(acc)) * sqrt((double)C));
              }
          }
          /* Row i of a batch equals the same row computed alone. */
          if (n > 1) {
            aural__linear(&w, b, x + (n - 1) * C, 1, ref);
            aural__linear(&w, b, x, n, fast);
            assert_memory_equal(fast + (n - 1) * R, ref, R * sizeof *ref);
          }
        }
        free(plain);
        free(mem);
        free(b);
        free(x);
        free(fast);
        free(ref);
      }
  printf("  %d shapes: kernel '%s' equals the oracle\n", n_checked,
         aural__gemm_kernel());
}

/* The matrices of models whose widths are not multiples of 16 or 32
 * (d_model 96 with heads of 32, d_ff 200; d_model 72 with heads of 24,
 * d_ff 136; 80 mel bins in; an odd vocabulary out), at the row counts of
 * chunks of 1, 7, 17 and 50 frames: the kernel equals the oracle, and
 * each row has the bits it has alone. */
static void test_odd_model_shapes_match_oracle(void **state) {
  (void)state;
  const size_t shapes[][2] = {{288, 96}, {96, 96},  {200, 96}, {96, 200},
                              {96, 80},  {216, 72}, {72, 72},  {136, 72},
                              {72, 136}, {72, 80},  {29, 72},  {29, 96}};
  const size_t ns[] = {1, 7, 17, 50};
  const size_t n_max = 50;
  for (int f16 = 0; f16 < 2; f16++)
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
      size_t R = shapes[si][0], C = shapes[si][1];
      float *plain = malloc(R * C * sizeof *plain);
      void *mem;
      aural__mat w = make_mat(R, C, f16, plain, &mem);
      float *b = malloc(R * sizeof *b), *x = malloc(n_max * C * sizeof *x);
      for (size_t r = 0; r < R; r++) b[r] = test_frand();
      for (size_t i = 0; i < n_max * C; i++) x[i] = test_frand() * 4;
      float *fast = malloc(n_max * R * sizeof *fast),
            *ref = malloc(n_max * R * sizeof *ref),
            *one = malloc(R * sizeof *one);
      for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        size_t n = ns[ni];
        aural__linear(&w, b, x, n, fast);
        aural__linear_ref(&w, b, x, n, ref);
        assert_memory_equal(fast, ref, n * R * sizeof *fast);
        for (size_t i = 0; i < n; i++) {
          aural__linear(&w, b, x + i * C, 1, one);
          assert_memory_equal(fast + i * R, one, R * sizeof *one);
        }
      }
      free(plain);
      free(mem);
      free(b);
      free(x);
      free(fast);
      free(ref);
      free(one);
    }
}

/* Precision bf16: a random (rows, cols) matrix in the paired bf16 layout,
 * its weights (as bfloat16 values) row-major in plain. */
static aural__mat make_bf16_mat(size_t rows, size_t cols, float *plain,
                                uint16_t **mem) {
  uint16_t *p = calloc(aural__bf16_packed_size(rows, cols), sizeof *p);
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      uint16_t h = aural__f32_to_bf16(test_frand());
      p[aural__bf16_packed_at(r, c, cols)] = h;
      plain[r * cols + c] = aural__bf16_to_f32(h);
    }
  *mem = p;
  return (aural__mat){.bf16 = p, .rows = (int)rows, .cols = (int)cols};
}

/* The bf16 kernel (AVX512-BF16's dot products, or their emulation) against
 * the bf16 oracle bit for bit, for the shapes and row counts of the f32
 * test, inputs with denormals and values that round up to the next
 * exponent among them; each row of a batch as it is alone; the oracle
 * within float rounding of a double product of the bf16-rounded inputs.
 * Where the CPU has AVX512-BF16, its dot products against the emulation
 * too. */
static void test_bf16_kernel_matches_oracle(void **state) {
  (void)state;
  const size_t rows[] = {1, 16, 17, 33, 100};
  const size_t cols[] = {1, 2, 3, 7, 64, 257, 600};
  const size_t ns[] = {0, 1, 2, 5, 6, 7, 13, 50, 73, 150};
  const size_t n_max = 150;
  int native = aural_model_bf16_native(), n_checked = 0;
  /* A CPU with the dot products uses them (unless told to emulate): a
   * kernel the start-up self-check refused fails here, not silently. */
  const char *want = getenv("AURAL_BF16");
  if (aural__bf16_cpu() && aural__isa_in_use() == AURAL__ISA_AVX512 &&
      !(want != NULL && strcmp(want, "emulate") == 0) && !native)
    fail_msg("this CPU has AVX512-BF16, but its dot products disagreed with "
             "the emulation at start-up");
  /* The sizes the dot products take: all, none, or up to 7 rows where
   * the start-up probe found them slow; what the tests force, as said. */
  size_t dot_rows = aural_model_bf16_dot_rows();
  assert_int_equal(native, dot_rows > 0);
  assert_true(dot_rows == 0 || dot_rows == 7 || dot_rows == SIZE_MAX);
  aural__bf16_force(AURAL__BF16_EMULATE);
  assert_true(aural_model_bf16_dot_rows() == 0);
  aural__bf16_force(AURAL__BF16_DOT);
  assert_true(aural_model_bf16_dot_rows() == (native ? SIZE_MAX : 0));
  aural__bf16_force(AURAL__BF16_AUTO);
  assert_true(aural_model_bf16_dot_rows() == dot_rows);
  printf("  bf16 dot products for products of up to %s rows\n",
         dot_rows == SIZE_MAX ? "any number of" : dot_rows == 7 ? "7" : "0");
  for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++)
    for (size_t ci = 0; ci < sizeof cols / sizeof *cols; ci++) {
      size_t R = rows[ri], C = cols[ci];
      float *plain = malloc(R * C * sizeof *plain);
      uint16_t *mem;
      aural__mat w = make_bf16_mat(R, C, plain, &mem);
      float *b = malloc(R * sizeof *b), *x = malloc(n_max * C * sizeof *x);
      for (size_t r = 0; r < R; r++) b[r] = test_frand();
      b[0] = 1e-40f; /* a denormal bias: zero to the dot product's adds */
      for (size_t i = 0; i < n_max * C; i++) {
        x[i] = test_frand() * 4;
        if (i % 97 == 5) x[i] = 3e-39f;        /* denormal */
        if (i % 89 == 7) x[i] = 1.0f + 0x1.ffp-9f; /* rounds up to 2^0 + 2^-7 */
        if (i % 83 == 3) x[i] = -0.0f;
      }
      float *fast = malloc(n_max * R * sizeof *fast),
            *ref = malloc(n_max * R * sizeof *ref);
      for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        size_t n = ns[ni];
        for (int with_bias = 0; with_bias < 2; with_bias++) {
          const float *bb = with_bias ? b : NULL;
          aural__linear(&w, bb, x, n, fast);
          aural__linear_ref(&w, bb, x, n, ref);
          assert_memory_equal(fast, ref, n * R * sizeof *fast);
          if (native) /* each path at every size, as the one in use */
            for (int p = AURAL__BF16_EMULATE; p <= AURAL__BF16_DOT; p++) {
              aural__bf16_force((aural__bf16_path)p);
              aural__linear(&w, bb, x, n, ref);
              aural__bf16_force(AURAL__BF16_AUTO);
              assert_memory_equal(fast, ref, n * R * sizeof *fast);
            }
          for (int bc = 0; bc < 2; bc++) { /* (linear_f32's) */
            aural__gemm_broadcast(bc);
            aural__bf16_force(AURAL__BF16_EMULATE);
            aural__linear(&w, bb, x, n, ref);
            aural__bf16_force(AURAL__BF16_AUTO);
            aural__gemm_broadcast(-1);
            assert_memory_equal(fast, ref, n * R * sizeof *fast);
          }
          n_checked++;
          aural__linear_ref(&w, bb, x, n, ref);
          for (size_t i = 0; i < n; i++)
            for (size_t r = 0; r < R; r++) {
              double acc = with_bias && r > 0 ? b[r] : 0, mag = fabs(acc);
              for (size_t c = 0; c < C; c++) {
                double xv = aural__bf16_to_f32(aural__f32_to_bf16(x[i * C + c]));
                acc += xv * plain[r * C + c];
                mag += fabs(xv * plain[r * C + c]);
              }
              assert_true(fabs(ref[i * R + r] - acc) <= 1e-6 * (1 + mag));
            }
        }
        if (n > 1) {
          aural__linear(&w, b, x + (n - 1) * C, 1, ref);
          aural__linear(&w, b, x, n, fast);
          assert_memory_equal(fast + (n - 1) * R, ref, R * sizeof *ref);
        }
      }
      free(plain);
      free(mem);
      free(b);
      free(x);
      free(fast);
      free(ref);
    }
  printf("  %d shapes: the bf16 %s equal the oracle\n", n_checked,
         native ? "dot products (AVX512-BF16) and their emulation"
                : "kernels (this CPU has no AVX512-BF16: emulated, or the "
                  "oracle off AVX-512)");
}

/* Inputs that are not ordinary numbers (NaN with a payload, of either
 * sign, infinities, the largest float, which rounds to infinity, a negative
 * denormal), one per row, go through every bf16 path with the same bits:
 * the kernel in use against the oracle, and where the CPU has AVX512-BF16,
 * its own conversion and dot products against the emulation. With rows of
 * 3 (k padded to a whole pair), a path that rounded a value past the row's
 * end into the padding would meet the next row's infinity there and give
 * NaN, which finite inputs cannot show (0 times a finite value adds
 * nothing). */
static void test_bf16_special_inputs(void **state) {
  (void)state;
  const uint32_t special[] = {0x7fa01234u, 0xffc12345u, 0x7f800000u,
                              0xff800000u, 0x7f7fffffu, 0x80200000u,
                              0x7f7f8000u};
  enum { N_ROWS = sizeof special / sizeof *special };
  const size_t cols[] = {3, 64, 70, 257};
  int native = aural_model_bf16_native();
  for (size_t ci = 0; ci < sizeof cols / sizeof *cols; ci++) {
    size_t R = 33, C = cols[ci];
    float *plain = malloc(R * C * sizeof *plain);
    uint16_t *mem;
    aural__mat w = make_bf16_mat(R, C, plain, &mem);
    float *x = malloc(N_ROWS * C * sizeof *x), *fast = malloc(N_ROWS * R * sizeof *fast),
          *ref = malloc(N_ROWS * R * sizeof *ref);
    for (size_t i = 0; i < N_ROWS * C; i++) x[i] = test_frand();
    for (size_t i = 0; i < N_ROWS; i++)
      memcpy(x + i * C + (i * 13) % C, &special[i], sizeof(float));
    const size_t ns[] = {1, N_ROWS}; /* a row alone, and all together */
    for (size_t ni = 0; ni < 2; ni++) {
      size_t n = ns[ni];
      aural__linear(&w, NULL, x, n, fast);
      aural__linear_ref(&w, NULL, x, n, ref);
      assert_memory_equal(fast, ref, n * R * sizeof *fast);
      if (native)
        for (int p = AURAL__BF16_EMULATE; p <= AURAL__BF16_DOT; p++) {
          aural__bf16_force((aural__bf16_path)p);
          aural__linear(&w, NULL, x, n, ref);
          aural__bf16_force(AURAL__BF16_AUTO);
          assert_memory_equal(fast, ref, n * R * sizeof *fast);
        }
    }
    free(plain);
    free(mem);
    free(x);
    free(fast);
    free(ref);
  }
}

/* bfloat16 rounding: to nearest, ties to even; denormals to signed zero;
 * infinities kept and NaN quiet (as AVX512-BF16's conversion). */
static void test_bf16_conversion(void **state) {
  (void)state;
  assert_int_equal(aural__f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(aural__f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);  /* tie, even */
  assert_int_equal(aural__f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);  /* tie, up */
  assert_int_equal(aural__f32_to_bf16(1.0f + 0x1.2p-8f), 0x3f81);
  assert_int_equal(aural__f32_to_bf16(-2.0f), 0xc000);
  assert_int_equal(aural__f32_to_bf16(1e-40f), 0x0000);
  assert_int_equal(aural__f32_to_bf16(-1e-40f), 0x8000);
  assert_int_equal(aural__f32_to_bf16(INFINITY), 0x7f80);
  assert_int_equal(aural__f32_to_bf16(3.4e38f), 0x7f80); /* rounds past max */
  assert_true((aural__f32_to_bf16(NAN) & 0x7fc0) == 0x7fc0);
  for (int i = 0; i < 10000; i++) {
    float f = test_frand() * 1000.0f;
    float back = aural__bf16_to_f32(aural__f32_to_bf16(f));
    assert_true(fabsf(back - f) <= fabsf(f) * 0x1p-8f);
  }
}

/* An activation gives each value the same bits wherever it sits in the
 * call and however long the call is: the feed-forward rows of a pass are
 * one call of n * d_ff values, so a value's place in it depends on the
 * row count. Widths 200 and 136 leave 8 values past the last 16 when n is
 * odd; lengths 1 to 40 and every offset cover all the rest. */
static void test_activation_bits_independent_of_length(void **state) {
  (void)state;
  enum { N_MAX = 50 * 200 };
  float *x = malloc(N_MAX * sizeof *x), *all = malloc(N_MAX * sizeof *all),
        *part = malloc(N_MAX * sizeof *part);
  for (size_t i = 0; i < N_MAX; i++) x[i] = test_frand() * 5;
  for (int relu = 0; relu < 2; relu++) {
    void (*act)(float *, size_t) = relu ? aural__relu : aural__gelu;
    memcpy(all, x, N_MAX * sizeof *x);
    act(all, N_MAX);
    /* The rows of chunks of 1, 7, 17 and 50 frames. */
    const size_t widths[] = {200, 136}, ns[] = {1, 7, 17, 50};
    for (size_t wi = 0; wi < 2; wi++)
      for (size_t ni = 0; ni < 4; ni++) {
        size_t len = widths[wi] * ns[ni];
        memcpy(part, x, len * sizeof *x);
        act(part, len);
        for (size_t i = 0; i < len; i++)
          if (memcmp(&part[i], &all[i], sizeof *part) != 0)
            fail_msg("%s over %zu rows of %zu: value %zu is %.9g, %.9g in a "
                     "call of %d (difference %.3g)",
                     relu ? "relu" : "gelu", ns[ni], widths[wi], i,
                     (double)part[i], (double)all[i], N_MAX,
                     fabs((double)part[i] - all[i]));
      }
    /* Short calls at every offset. */
    for (size_t len = 1; len <= 40; len++)
      for (size_t at = 0; at < 16; at++) {
        memcpy(part, x + at, len * sizeof *x);
        act(part, len);
        assert_memory_equal(part, all + at, len * sizeof *part);
      }
  }
  free(x);
  free(all);
  free(part);
}

/* No rows: nothing is written. The output buffer is all canaries (rows
 * of y and beyond), for every kernel the row-count switch might pick. */
static void test_zero_rows_write_nothing(void **state) {
  (void)state;
  const size_t R = 33, C = 40, n_canary = 8 * R;
  const float canary = -1234.5f;
  for (int f16 = 0; f16 < 2; f16++) {
    float *plain = malloc(R * C * sizeof *plain);
    void *mem;
    aural__mat w = make_mat(R, C, f16, plain, &mem);
    float b[33], x[8 * 40];
    for (size_t r = 0; r < R; r++) b[r] = test_frand();
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = test_frand();
    float *y = malloc(n_canary * sizeof *y);
    for (size_t i = 0; i < n_canary; i++) y[i] = canary;
    aural__linear(&w, b, x, 0, y);
    aural__linear_ref(&w, b, x, 0, y);
    for (size_t i = 0; i < n_canary; i++)
      if (y[i] != canary)
        fail_msg("%s kernel (%s weights), n = 0: y[%zu] (row %zu) was "
                 "written",
                 aural__gemm_kernel(), f16 ? "f16" : "f32", i, i / R);
    free(y);
    free(plain);
    free(mem);
  }
}

static void test_f16_conversion(void **state) {
  (void)state;
  /* Every half value survives half -> float -> half. */
  for (uint32_t h = 0; h < 65536; h++) {
    float f = aural__f16_to_f32((uint16_t)h);
    if (isnan(f)) {
      assert_true((aural__f32_to_f16(f) & 0x7c00) == 0x7c00);
      continue;
    }
    assert_int_equal(aural__f32_to_f16(f), h);
  }
  assert_true(aural__f16_to_f32(0x3c00) == 1.0f);
  assert_true(aural__f16_to_f32(0xc000) == -2.0f);
  assert_true(aural__f16_to_f32(0x0001) == ldexpf(1.0f, -24));
  assert_int_equal(aural__f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
  assert_int_equal(aural__f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00); /* tie to even */
  assert_int_equal(aural__f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
  assert_int_equal(aural__f32_to_f16(1e-9f), 0);
}

static void test_activations(void **state) {
  (void)state;
  float x[1000], y[1000];
  for (int i = 0; i < 1000; i++) x[i] = y[i] = (float)(i - 500) * 0.013f;
  aural__gelu(y, 1000);
  for (int i = 0; i < 1000; i++) {
    double v = x[i], want = 0.5 * v * (1 + erf(v / sqrt(2.0)));
    assert_true(fabs(y[i] - want) <= 1e-6 * (1 + fabs(want)));
  }
  /* A fine grid over every interval of the vector erf and past its end. */
  enum { N_FINE = 48000 };
  float *fx = malloc(N_FINE * sizeof *fx), *fy = malloc(N_FINE * sizeof *fy);
  for (int i = 0; i < N_FINE; i++) fx[i] = fy[i] = (float)(i - N_FINE / 2) * 0.0005f;
  aural__gelu(fy, N_FINE);
  double worst = 0;
  for (int i = 0; i < N_FINE; i++) {
    double v = fx[i], want = 0.5 * v * (1 + erf(v / sqrt(2.0)));
    double err = fabs(fy[i] - want) / (1 + fabs(want));
    worst = err > worst ? err : worst;
  }
  assert_true(worst <= 3e-7);
  free(fx);
  free(fy);
  float sp[16] = {INFINITY, NAN, -0.0f, 0.0f, 1e-30f, -1e-30f, 40.0f, -40.0f};
  for (int i = 8; i < 16; i++) sp[i] = 1.0f;
  aural__gelu(sp, 16);
  assert_true(sp[0] == INFINITY && isnan(sp[1]) && sp[2] == 0 && sp[3] == 0);
  assert_true(fabsf(sp[4] - 0.5e-30f) <= 1e-36f && fabsf(sp[5] + 0.5e-30f) <= 1e-36f);
  assert_true(sp[6] == 40.0f && sp[7] == 0.0f);
  for (int i = 0; i < 1000; i++) y[i] = x[i];
  aural__relu(y, 1000);
  for (int i = 0; i < 1000; i++) assert_true(y[i] == (x[i] > 0 ? x[i] : 0));
  /* Layer norm: zero mean, unit variance before the affine part. */
  float row[64], g[64], b[64];
  for (int i = 0; i < 64; i++) {
    row[i] = test_frand() * 10 + 3;
    g[i] = 1;
    b[i] = 0;
  }
  aural__layer_norm(row, 1, 64, g, b, 1e-5f);
  double mean = 0, var = 0;
  for (int i = 0; i < 64; i++) mean += row[i];
  mean /= 64;
  for (int i = 0; i < 64; i++) var += (row[i] - mean) * (row[i] - mean);
  assert_true(fabs(mean) < 1e-5 && fabs(var / 64 - 1) < 1e-4);
}

/* Scores of rows taken together have the same bits as each row alone and
 * as the scalar chains (so a frame's attention does not depend on how the
 * rows of a chunk were grouped), for head sizes odd and even and rings of
 * one to seven 16-slot groups. */
static void test_attention_scores_bits(void **state) {
  (void)state;
  const size_t head_sizes[] = {1, 7, 16, 24, 32, 64, 80};
  for (size_t hi = 0; hi < sizeof head_sizes / sizeof *head_sizes; hi++)
    for (size_t w_pad = 16; w_pad <= 112; w_pad += 16) {
      size_t hs = head_sizes[hi], ldq = hs + 5, n_rows = 7;
      float *kt = malloc(hs * w_pad * sizeof *kt),
            *q = malloc(n_rows * ldq * sizeof *q);
      double *all = malloc(n_rows * w_pad * sizeof *all),
             *one = malloc(w_pad * sizeof *one),
             *ref = malloc(n_rows * w_pad * sizeof *ref);
      for (size_t i = 0; i < hs * w_pad; i++) kt[i] = test_frand() * 2 - 1;
      for (size_t i = 0; i < n_rows * ldq; i++) q[i] = test_frand() * 3 - 1.5f;
      aural__attention_scores(q, ldq, n_rows, kt, w_pad, hs, 0.3, all);
      aural__attention_scores_ref(q, ldq, n_rows, kt, w_pad, hs, 0.3, ref);
      assert_memory_equal(all, ref, n_rows * w_pad * sizeof *all);
      for (size_t r = 0; r < n_rows; r++) {
        aural__attention_scores(q + r * ldq, ldq, 1, kt, w_pad, hs, 0.3, one);
        assert_memory_equal(one, all + r * w_pad, w_pad * sizeof *one);
      }
      free(kt);
      free(q);
      free(all);
      free(one);
      free(ref);
    }
}

/* The vector attention against the scalar oracle, over ring positions
 * that wrap and windows that are partly filled. */
static void test_attention_matches_oracle(void **state) {
  (void)state;
  /* Head sizes 64, 16 and 80 (four vectors, one, four and one), 32 (two)
   * and 24 (one and a half). */
  const size_t configs[][2] = {{256, 4}, {64, 1}, {128, 8}, {48, 3},
                               {160, 2}, {96, 3}, {72, 3}};
  for (size_t ci = 0; ci < sizeof configs / sizeof *configs; ci++) {
    size_t d = configs[ci][0], heads = configs[ci][1];
    const size_t windows[] = {1, 7, 16, 50, 100};
    for (size_t wi = 0; wi < 5; wi++) {
      size_t w = windows[wi], w_pad = (w + 15) / 16 * 16;
      float *kt = malloc(d * w_pad * sizeof *kt), *v = malloc(w * d * sizeof *v);
      float *q = malloc(d * sizeof *q), *o1 = malloc(d * sizeof *o1),
            *o2 = malloc(d * sizeof *o2);
      double *sc = malloc(w_pad * sizeof *sc);
      for (size_t i = 0; i < d * w_pad; i++) kt[i] = test_frand();
      for (size_t i = 0; i < w * d; i++) v[i] = test_frand();
      for (size_t i = 0; i < d; i++) q[i] = test_frand() * 3;
      for (size_t first = 0; first < w; first += (w > 10 ? 7 : 1))
        for (size_t n = 1; n <= w; n += (w > 10 ? 9 : 1)) {
          for (size_t h = 0; h < heads; h++) {
            size_t hs = d / heads;
            aural__attention(q + h * hs, kt + h * hs * w_pad, w_pad, v + h * hs,
                             d, hs, w, first, n, 0.125, sc, o1 + h * hs);
            aural__attention_ref(q + h * hs, kt + h * hs * w_pad, w_pad,
                                 v + h * hs, d, hs, w, first, n, 0.125, sc,
                                 o2 + h * hs);
          }
          for (size_t i = 0; i < d; i++)
            assert_true(fabsf(o1[i] - o2[i]) <= 1e-5f * (1 + fabsf(o2[i])));
        }
      free(kt);
      free(v);
      free(q);
      free(o1);
      free(o2);
      free(sc);
    }
  }
}

/* Row j of a mixed group has the bits of `want`, made as `how`. */
static void expect_row(const mix_case *mc, size_t j, const float *got,
                       const float *want, const char *how) {
  if (memcmp(got, want, mc->hs * sizeof *got) != 0)
    fail_msg("hs %zu, window %zu, row %zu of %zu, t0 %llu, first %llu: "
             "not the bits of %s", mc->hs, mc->w, j, mc->g,
             (unsigned long long)mc->t0, (unsigned long long)mc->first, how);
}

/* Rows mixed as a group give each row the bits it gets alone (so a
 * frame's attention does not depend on the chunk it came in), on the
 * vector paths exactly the float chains internal.h defines (written out
 * in mix_case.h), and the softmax-weighted sums of a double computation
 * within 1e-5: groups of 1 to 3 rows,
 * head sizes on the vector path and off it, rings that wrap within the
 * group, windows partly filled (a stream's first frames) and full. */
static void test_mix_rows_group_invariance(void **state) {
  (void)state;
  const size_t head_sizes[] = {16, 24, 48, 64, 80};
  const size_t windows[] = {1, 2, 5, 16, 50, 64};
  for (size_t hi = 0; hi < sizeof head_sizes / sizeof *head_sizes; hi++)
    for (size_t wi = 0; wi < sizeof windows / sizeof *windows; wi++)
      for (size_t g = 1; g <= AURAL__MIX_ROWS; g++) {
        size_t hs = head_sizes[hi], w = windows[wi];
        for (uint64_t t0 = 1000; t0 < 1000 + w + 2; t0 += w > 10 ? 7 : 1) {
          const uint64_t behind[] = {0, 1, 2, w - 1, w, w + 5};
          for (size_t bi = 0; bi < sizeof behind / sizeof *behind; bi++) {
            mix_case mc;
            mix_case_make(&mc, g, w, hs, t0 - behind[bi], t0, 4.0);
            float *all = malloc(g * hs * sizeof *all),
                  *one = malloc(hs * sizeof *one);
            double *ref = malloc(hs * sizeof *ref);
            mix_case_run(&mc, all);
            for (size_t j = 0; j < g; j++) {
              mix_case_run_row(&mc, j, one);
              expect_row(&mc, j, all + j * hs, one, "the row mixed alone");
              if (hs % 16 == 0 && aural__isa_in_use() != AURAL__ISA_SCALAR) {
                mix_case_chains(&mc, j, one);
                expect_row(&mc, j, all + j * hs, one,
                           "the chains internal.h defines");
              }
              mix_case_reference(&mc, j, ref);
              for (size_t c = 0; c < hs; c++)
                assert_true(fabs(all[j * hs + c] - ref[c]) <=
                            1e-5 * (1 + fabs(ref[c])));
            }
            free(all);
            free(one);
            free(ref);
            mix_case_free(&mc);
          }
        }
      }
}

/* Long sums lose little: with 600 positive terms, one float chain over k
 * drifts to a relative RMS error of about 3.8e-7 (its partial sums grow to
 * hundreds; 1.3e-7 with chains of 256), where chains of AURAL__CHAIN = 32
 * added in order stay at 7.5e-8 (the float rounding of the result alone
 * is about 2.9e-8). Both kernels (every row count) and the oracle must
 * stay within 1e-7. */
static void test_long_products_keep_precision(void **state) {
  (void)state;
  const size_t R = 64, C = 600, n = 40;
  float *plain = malloc(R * C * sizeof *plain);
  float *x = malloc(n * C * sizeof *x), *y = malloc(n * R * sizeof *y);
  float *packed = calloc(aural__packed_size(R, C), sizeof *packed);
  for (size_t r = 0; r < R; r++)
    for (size_t c = 0; c < C; c++)
      packed[aural__packed_at(r, c, C)] = plain[r * C + c] =
          1.0f + 0.5f * test_frand();
  for (size_t i = 0; i < n * C; i++) x[i] = 1.0f + 0.5f * test_frand();
  aural__mat w = {.rows = (int)R, .cols = (int)C, .f32 = packed};
  const size_t ns[] = {1, 5, n};
  for (int path = 0; path < 4; path++) {
    size_t m = path < 3 ? ns[path] : n;
    if (path < 3)
      aural__linear(&w, NULL, x, m, y);
    else
      aural__linear_ref(&w, NULL, x, m, y);
    double sq = 0.0;
    for (size_t i = 0; i < m; i++)
      for (size_t r = 0; r < R; r++) {
        double want = 0.0;
        for (size_t c = 0; c < C; c++)
          want += (double)x[i * C + c] * plain[r * C + c];
        double rel = (y[i * R + r] - want) / want;
        sq += rel * rel;
      }
    double rms = sqrt(sq / (double)(m * R));
    assert_true(rms <= 1e-7);
  }
  free(plain);
  free(x);
  free(y);
  free(packed);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kernel_matches_oracle_bit_for_bit),
      cmocka_unit_test(test_odd_model_shapes_match_oracle),
      cmocka_unit_test(test_bf16_kernel_matches_oracle),
      cmocka_unit_test(test_bf16_special_inputs),
      cmocka_unit_test(test_bf16_conversion),
      cmocka_unit_test(test_zero_rows_write_nothing),
      cmocka_unit_test(test_long_products_keep_precision),
      cmocka_unit_test(test_attention_scores_bits),
      cmocka_unit_test(test_attention_matches_oracle),
      cmocka_unit_test(test_mix_rows_group_invariance),
      cmocka_unit_test(test_f16_conversion),
      cmocka_unit_test(test_activations),
      cmocka_unit_test(test_activation_bits_independent_of_length),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
