/*
 * The kernel sets against each other: the AVX2 kernels give the bits of
 * the AVX-512 kernels, kernel by kernel (gelu, layer norm, attention
 * scores and mix, matrix products) and through whole models (every golden
 * test model, models of odd widths, the bundled model), in chunk and
 * frame mode. Skipped, saying so, on a CPU that lacks one of the two.
 * Also: AURAL_ISA picks the set in use.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include <aural.h>

#include "helpers.h"
#include "internal.h"
#include "mix_case.h"
#include "npy.h"
#include "synth_model.h"


/* Both vector sets run here; else the test is skipped with the reason. */
static void need_both(void) {
  if (!aural__isa_supported(AURAL__ISA_AVX512) ||
      !aural__isa_supported(AURAL__ISA_AVX2)) {
    printf("  SKIPPED: this CPU lacks %s: AVX2 and AVX-512 cannot be "
           "compared here\n",
           aural__isa_supported(AURAL__ISA_AVX2) ? "AVX-512" : "AVX2");
    skip();
  }
}

/* The set in use before a test switched, put back after it. */
static aural__isa chosen;

static int restore_isa(void **state) {
  (void)state;
  assert_true(aural__isa_use(chosen));
  return 0;
}

static void use(aural__isa isa) { assert_true(aural__isa_use(isa)); }

/* Bit patterns equal, except that two NaNs are equal whatever their
 * payload and sign (the two sets' instructions may propagate different
 * NaN operands). */
static void assert_same_floats(const float *a, const float *b, size_t n,
                               const char *what) {
  for (size_t i = 0; i < n; i++) {
    if (isnan(a[i]) && isnan(b[i])) continue;
    if (memcmp(&a[i], &b[i], sizeof *a) != 0)
      fail_msg("%s: value %zu is %.9g with AVX2, %.9g with AVX-512", what, i,
               (double)a[i], (double)b[i]);
  }
}

/* AURAL_ISA, when it names a set this CPU runs, is the set in use; when it
 * is unset, the best one is. */
static void test_environment_picks_the_set(void **state) {
  (void)state;
  const char *want = getenv("AURAL_ISA");
  aural__isa in_use = aural__isa_in_use(), best = AURAL__ISA_SCALAR;
  for (int i = AURAL__ISA_AVX512; i > AURAL__ISA_SCALAR; i--)
    if (aural__isa_supported((aural__isa)i)) {
      best = (aural__isa)i;
      break;
    }
  assert_string_equal(aural_isa_name(), aural__isa_name(in_use));
  if (want == NULL || *want == '\0') {
    assert_int_equal(in_use, best);
  } else {
    int named = -1;
    for (int i = AURAL__ISA_SCALAR; i <= AURAL__ISA_AVX512; i++)
      if (strcasecmp(want, aural__isa_name((aural__isa)i)) == 0) named = i;
    if (named >= 0 && aural__isa_supported((aural__isa)named))
      assert_int_equal(in_use, named);
    else
      assert_int_equal(in_use, best); /* refused: the best instead */
  }
  assert_true(aural__isa_supported(AURAL__ISA_SCALAR));
  printf("  AURAL_ISA=%s: kernels '%s' (%s)\n", want ? want : "(unset)",
         aural_isa_name(), aural_gemm_name());
}

/* gelu over every interval of the erf polynomial, past its end, and the
 * special values; at lengths that leave every tail of 1 to 15. */
static void test_gelu_bits(void **state) {
  (void)state;
  need_both();
  enum { N = 100003 };
  float *x = malloc(N * sizeof *x), *a = malloc(N * sizeof *a),
        *b = malloc(N * sizeof *b);
  for (size_t i = 0; i < N; i++) x[i] = (float)((double)i - N / 2) * 2e-4f;
  const float sp[] = {INFINITY, -INFINITY, NAN, -0.0f, 0.0f, 1e-40f,
                      -1e-40f, 3e38f, -3e38f, 5.656854f, -5.656854f};
  memcpy(x + 17, sp, sizeof sp);
  for (size_t len = N - 16; len <= N; len++) {
    memcpy(a, x, len * sizeof *x);
    memcpy(b, x, len * sizeof *x);
    use(AURAL__ISA_AVX2);
    aural__gelu(a, len);
    use(AURAL__ISA_AVX512);
    aural__gelu(b, len);
    assert_same_floats(a, b, len, "gelu");
  }
  free(x);
  free(a);
  free(b);
}

/* Layer norm of rows of widths 16 to 1024, residual-stream-like values
 * (offsets in the hundreds), with and without an affine part. */
static void test_layer_norm_bits(void **state) {
  (void)state;
  need_both();
  const int widths[] = {16, 32, 48, 96, 256, 272, 1024};
  for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
    int d = widths[wi];
    size_t n = 9;
    float *x = malloc(n * (size_t)d * sizeof *x), *a = malloc(n * (size_t)d * sizeof *a),
          *b = malloc(n * (size_t)d * sizeof *b), *g = malloc((size_t)d * sizeof *g),
          *be = malloc((size_t)d * sizeof *be);
    for (size_t i = 0; i < n * (size_t)d; i++)
      x[i] = test_frand() * (float)(1 + i % 7 * 40) + (float)(i / (size_t)d) * 75.0f;
    for (int i = 0; i < d; i++) {
      g[i] = 1.0f + 0.1f * test_frand();
      be[i] = test_frand();
    }
    memcpy(a, x, n * (size_t)d * sizeof *x);
    memcpy(b, x, n * (size_t)d * sizeof *x);
    use(AURAL__ISA_AVX2);
    aural__layer_norm(a, n, d, g, be, 1e-5f);
    use(AURAL__ISA_AVX512);
    aural__layer_norm(b, n, d, g, be, 1e-5f);
    assert_same_floats(a, b, n * (size_t)d, "layer norm");
    free(x);
    free(a);
    free(b);
    free(g);
    free(be);
  }
}

/* Attention: scores of several rows at once and the mix, over head sizes
 * that take the vector mix (multiples of 16: 1 to 8 vectors of 16, so
 * every way the AVX-512 mix splits a head into blocks of at most 4) and
 * that do not, rings that wrap, windows partly filled, and score spreads
 * wide enough that exp underflows (libmvec's special-case lanes). */
static void test_attention_bits(void **state) {
  (void)state;
  need_both();
  const size_t head_sizes[] = {1, 7, 16, 24, 32, 48, 64, 80, 96, 112, 128};
  const size_t windows[] = {1, 7, 16, 37, 50, 100};
  const double spreads[] = {1.0, 30.0, 3000.0};
  for (size_t hi = 0; hi < sizeof head_sizes / sizeof *head_sizes; hi++)
    for (size_t wi = 0; wi < sizeof windows / sizeof *windows; wi++) {
      size_t hs = head_sizes[hi], w = windows[wi], w_pad = (w + 15) / 16 * 16,
             n_rows = 7, ldq = hs + 3, ldv = hs + 5;
      float *kt = malloc(hs * w_pad * sizeof *kt),
            *q = malloc(n_rows * ldq * sizeof *q),
            *v = malloc(w * ldv * sizeof *v);
      double *sa = malloc(n_rows * w_pad * sizeof *sa),
             *sb = malloc(n_rows * w_pad * sizeof *sb);
      float *oa = malloc(hs * sizeof *oa), *ob = malloc(hs * sizeof *ob);
      for (size_t i = 0; i < hs * w_pad; i++) kt[i] = test_frand();
      for (size_t i = 0; i < n_rows * ldq; i++) q[i] = test_frand() * 3;
      for (size_t i = 0; i < w * ldv; i++) v[i] = test_frand();
      use(AURAL__ISA_AVX2);
      aural__attention_scores(q, ldq, n_rows, kt, w_pad, hs, 0.17, sa);
      use(AURAL__ISA_AVX512);
      aural__attention_scores(q, ldq, n_rows, kt, w_pad, hs, 0.17, sb);
      assert_memory_equal(sa, sb, n_rows * w_pad * sizeof *sa);
      for (size_t si = 0; si < sizeof spreads / sizeof *spreads; si++)
        for (size_t first = 0; first < w; first += w > 10 ? 5 : 1)
          for (size_t n = 1; n <= w; n += w > 10 ? 6 : 1) {
            for (size_t s = 0; s < w_pad; s++)
              sa[s] = sb[s] = (double)test_frand() * spreads[si];
            use(AURAL__ISA_AVX2);
            aural__attention_mix(sa, v, ldv, hs, w, first, n, oa);
            use(AURAL__ISA_AVX512);
            aural__attention_mix(sb, v, ldv, hs, w, first, n, ob);
            assert_same_floats(oa, ob, hs, "attention mix");
          }
      free(kt);
      free(q);
      free(v);
      free(sa);
      free(sb);
      free(oa);
      free(ob);
    }
}

/* The mix of groups of rows (mix_case.h), and rotary positions: the two
 * sets give the same bits. */
static void test_mix_rows_and_rope_bits(void **state) {
  (void)state;
  need_both();
  const size_t head_sizes[] = {16, 32, 48, 64, 80, 128};
  const size_t windows[] = {1, 2, 3, 16, 50, 100};
  for (size_t hi = 0; hi < sizeof head_sizes / sizeof *head_sizes; hi++)
    for (size_t wi = 0; wi < sizeof windows / sizeof *windows; wi++)
      for (size_t g = 1; g <= AURAL__MIX_ROWS; g++) {
        size_t hs = head_sizes[hi], w = windows[wi];
        for (uint64_t t0 = 500; t0 < 500 + w + 2; t0 += w > 10 ? 11 : 1)
          for (uint64_t behind = 0; behind <= w + 1;
               behind += w > 10 ? 13 : 1) {
            mix_case mc;
            mix_case_make(&mc, g, w, hs, t0 - behind, t0, 30.0);
            float *oa = malloc(g * hs * sizeof *oa),
                  *ob = malloc(g * hs * sizeof *ob);
            use(AURAL__ISA_AVX2);
            mix_case_run(&mc, oa);
            use(AURAL__ISA_AVX512);
            mix_case_run(&mc, ob);
            assert_same_floats(oa, ob, g * hs, "mix of a group of rows");
            free(oa);
            free(ob);
            mix_case_free(&mc);
          }
      }
  const int rope_heads[] = {16, 24, 48, 64};
  for (size_t i = 0; i < sizeof rope_heads / sizeof *rope_heads; i++) {
    int hs = rope_heads[i], n_heads = 3;
    float va[192], vb[192], cs[33], sn[33];
    for (int k = 0; k < n_heads * hs; k++) va[k] = vb[k] = test_frand() * 5;
    for (int k = 0; k < hs / 2 + 1; k++) {
      cs[k] = cosf(0.37f * (float)k + 0.1f);
      sn[k] = sinf(0.37f * (float)k + 0.1f);
    }
    use(AURAL__ISA_AVX2);
    aural__rope(va, n_heads, hs, cs, sn);
    use(AURAL__ISA_AVX512);
    aural__rope(vb, n_heads, hs, cs, sn);
    assert_same_floats(va, vb, (size_t)(n_heads * hs), "rotary positions");
  }
}

/* Matrix products: both sets equal the oracle (test_linalg); here they
 * are compared with each other directly as well, f32 and f16. */
static void test_linear_bits(void **state) {
  (void)state;
  need_both();
  const size_t shapes[][2] = {{1, 1}, {17, 3}, {33, 64}, {100, 257},
                              {200, 96}, {96, 200}, {29, 72}, {256, 1024}};
  const size_t ns[] = {1, 2, 3, 4, 5, 6, 7, 13, 50, 73};
  for (int f16 = 0; f16 < 2; f16++)
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
      size_t R = shapes[si][0], C = shapes[si][1], n_max = 73;
      size_t n_packed = aural__packed_size(R, C);
      aural__mat w = {.rows = (int)R, .cols = (int)C};
      void *mem = f16 ? calloc(n_packed, sizeof(uint16_t))
                      : calloc(n_packed, sizeof(float));
      for (size_t r = 0; r < R; r++)
        for (size_t c = 0; c < C; c++) {
          size_t at = aural__packed_at(r, c, C);
          if (f16)
            ((uint16_t *)mem)[at] = aural__f32_to_f16(test_frand());
          else
            ((float *)mem)[at] = test_frand();
        }
      if (f16)
        w.f16 = mem;
      else
        w.f32 = mem;
      float *b = malloc(R * sizeof *b), *x = malloc(n_max * C * sizeof *x),
            *ya = malloc(n_max * R * sizeof *ya),
            *yb = malloc(n_max * R * sizeof *yb);
      for (size_t r = 0; r < R; r++) b[r] = test_frand();
      for (size_t i = 0; i < n_max * C; i++) x[i] = test_frand() * 4;
      for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        use(AURAL__ISA_AVX2);
        aural__linear(&w, b, x, ns[ni], ya);
        use(AURAL__ISA_AVX512);
        aural__linear(&w, b, x, ns[ni], yb);
        assert_memory_equal(ya, yb, ns[ni] * R * sizeof *ya);
      }
      free(mem);
      free(b);
      free(x);
      free(ya);
      free(yb);
    }
}

static float *load_npy(const char *rel, size_t *rows, size_t *cols) {
  float *data;
  char err[256];
  if (npy_read_f32(test_data_path(rel), &data, rows, cols, err, sizeof err))
    fail_msg("%s", err);
  return data;
}

/* Runs n frames of feats through a fresh encoder, `step` frames per call. */
static void run(const aural_model *m, uint64_t start, const float *feats,
                size_t n, size_t step, float *emb, float *logits) {
  const aural_model_config *c = aural_model_get_config(m);
  aural_encoder_config ec;
  aural_encoder_config_default(&ec);
  ec.first_frame = start;
  aural_encoder *e;
  aural_err err;
  assert_int_equal(aural_encoder_create(m, &ec, &e, &err), 0);
  size_t mels = (size_t)c->fbank.num_mel_bins, d = (size_t)c->d_model,
         v = (size_t)c->vocab_size;
  for (size_t at = 0; at < n; at += step) {
    size_t k = n - at < step ? n - at : step;
    assert_int_equal(aural_encoder_forward(e, feats + at * mels, k,
                                           emb + at * d,
                                           logits ? logits + at * v : NULL),
                     0);
  }
  aural_encoder_destroy(e);
}

/* m's outputs over n frames of feats with the AVX2 kernels and with the
 * AVX-512 kernels, in calls of 50 frames (the tiles), of 7 (small tiles)
 * and of 1 (the few-row kernels): the same bits. */
static void check_model(const aural_model *m, const char *name, uint64_t start,
                        const float *feats, size_t n) {
  const aural_model_config *c = aural_model_get_config(m);
  size_t d = (size_t)c->d_model, v = (size_t)c->vocab_size;
  float *ea = malloc(n * d * sizeof *ea), *eb = malloc(n * d * sizeof *eb);
  float *la = v ? malloc(n * v * sizeof *la) : NULL,
        *lb = v ? malloc(n * v * sizeof *lb) : NULL;
  const size_t steps[] = {50, 7, 1};
  for (size_t si = 0; si < sizeof steps / sizeof *steps; si++) {
    size_t t = steps[si] == 1 ? (n < 150 ? n : 150) : n;
    use(AURAL__ISA_AVX2);
    run(m, start, feats, t, steps[si], ea, la);
    use(AURAL__ISA_AVX512);
    run(m, start, feats, t, steps[si], eb, lb);
    char what[160];
    snprintf(what, sizeof what, "%s, %zu frame(s) per call, embeddings", name,
             steps[si]);
    assert_same_floats(ea, eb, t * d, what);
    if (v) {
      snprintf(what, sizeof what, "%s, %zu frame(s) per call, logits", name,
               steps[si]);
      assert_same_floats(la, lb, t * v, what);
    }
  }
  printf("  %-28s d_model %3d, %d heads of %3d, d_ff %4d: AVX2 = AVX-512, "
         "bit for bit\n",
         name, c->d_model, c->n_heads, c->d_model / c->n_heads, c->d_ff);
  free(ea);
  free(eb);
  free(la);
  free(lb);
}

static aural_model *load_file(const char *path, aural_weight_type wt) {
  aural_model_load_config lc;
  aural_model_load_config_default(&lc);
  lc.weights = wt;
  aural_model *m;
  aural_err err = {0};
  if (aural_model_load(path, &lc, &m, &err) != 0) fail_msg("%s", err.msg);
  return m;
}

/* Every golden test model (tests/data/encoder/cases.txt), with f32 and
 * with f16 weights in memory, at its start frame (some an hour in). */
static void test_golden_models_bits(void **state) {
  (void)state;
  need_both();
  size_t t_in, mels;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  FILE *f = fopen(test_data_path("encoder/cases.txt"), "r");
  assert_non_null(f);
  char name[64], dtype[8];
  size_t n_frames;
  unsigned long long start;
  int has_head, n_cases = 0;
  while (fscanf(f, "%63s %zu %llu %d %7s", name, &n_frames, &start, &has_head,
                dtype) == 5) {
    char rel[128], label[96];
    snprintf(rel, sizeof rel, "encoder/%s.safetensors", name);
    for (int half = 0; half < 2; half++) {
      aural_model *m = load_file(test_data_path(rel),
                                 half ? AURAL_WEIGHTS_F16 : AURAL_WEIGHTS_F32);
      snprintf(label, sizeof label, "%s%s", name, half ? " (f16)" : "");
      check_model(m, label, start, feats, 400);
      aural_model_free(m);
    }
    n_cases++;
  }
  fclose(f);
  assert_true(n_cases >= 8);
  free(feats);
}

/* Models whose widths are not multiples of 16 or 32 (d_model 96 in 3
 * heads of 32 with d_ff 200; d_model 72 in 3 heads of 24, which take the
 * plain attention mix and layer norm on both sets, with d_ff 136), and
 * the bundled model. */
static void test_odd_and_bundled_models_bits(void **state) {
  (void)state;
  need_both();
  size_t t_in, mels;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  const struct {
    const char *name;
    synth_spec spec;
    aural_weight_type wt;
  } odd[] = {
      {"d96 gelu rope",
       {.d_model = 96, .n_heads = 3, .n_layers = 2, .d_ff = 200, .window = 50,
        .pos_encoding = "rope", .activation = "gelu", .norm_first = 1,
        .final_norm = 1, .vocab_size = 29, .seed = 7},
       AURAL_WEIGHTS_F32},
      {"d96 relu post-LN (f16)",
       {.d_model = 96, .n_heads = 3, .n_layers = 2, .d_ff = 200, .window = 37,
        .pos_encoding = "sinusoidal", .activation = "relu", .cmvn = 1,
        .f16 = 1, .seed = 11},
       AURAL_WEIGHTS_F16},
      {"d72 gelu sin",
       {.d_model = 72, .n_heads = 3, .n_layers = 2, .d_ff = 136, .window = 37,
        .pos_encoding = "sinusoidal", .activation = "gelu", .vocab_size = 29,
        .cmvn = 1, .seed = 8},
       AURAL_WEIGHTS_F32},
      {"base (random)", {0}, AURAL_WEIGHTS_F32},
      {"d96 gelu rope (bf16)",
       {.d_model = 96, .n_heads = 3, .n_layers = 2, .d_ff = 200, .window = 50,
        .pos_encoding = "rope", .activation = "gelu", .norm_first = 1,
        .final_norm = 1, .vocab_size = 29, .seed = 7},
       AURAL_WEIGHTS_BF16},
      {"base (random, bf16)", {0}, AURAL_WEIGHTS_BF16},
  };
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
    synth_spec spec = odd[i].spec;
    if (spec.d_model == 0) synth_spec_base(&spec);
    size_t size;
    unsigned char *bytes = synth_model(&spec, &size);
    assert_non_null(bytes);
    aural_model_load_config lc;
    aural_model_load_config_default(&lc);
    lc.weights = odd[i].wt;
    aural_model *m;
    aural_err err = {0};
    int rc = aural_model_load_buffer(bytes, size, odd[i].name, &lc, &m, &err);
    free(bytes);
    if (rc != 0) fail_msg("%s", err.msg);
    check_model(m, odd[i].name, 0, feats, 300);
    aural_model_free(m);
  }
  free(feats);
  const char *path = getenv("AURAL_DEFAULT_MODEL");
  assert_non_null(path);
  size_t t, d_mels;
  float *dfeats = load_npy("default/input.npy", &t, &d_mels);
  const aural_weight_type wts[] = {AURAL_WEIGHTS_F32, AURAL_WEIGHTS_F16,
                                   AURAL_WEIGHTS_BF16};
  const char *const labels[] = {"bundled model", "bundled model (f16)",
                                "bundled model (bf16)"};
  for (int wi = 0; wi < 3; wi++) {
    aural_model *m = load_file(path, wts[wi]);
    check_model(m, labels[wi], 0, dfeats, t < 400 ? t : 400);
    aural_model_free(m);
  }
  free(dfeats);
}

int main(void) {
  chosen = aural__isa_in_use();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_environment_picks_the_set),
      cmocka_unit_test_teardown(test_gelu_bits, restore_isa),
      cmocka_unit_test_teardown(test_layer_norm_bits, restore_isa),
      cmocka_unit_test_teardown(test_attention_bits, restore_isa),
      cmocka_unit_test_teardown(test_mix_rows_and_rope_bits, restore_isa),
      cmocka_unit_test_teardown(test_linear_bits, restore_isa),
      cmocka_unit_test_teardown(test_golden_models_bits, restore_isa),
      cmocka_unit_test_teardown(test_odd_and_bundled_models_bits, restore_isa),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
