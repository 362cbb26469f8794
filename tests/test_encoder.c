/*
 * Encoder tests: parity with the PyTorch reference (goldens from
 * tools/reference/gen_encoder_goldens.py), independence from how frames
 * are grouped into calls, f16 weights in memory, CTC decoding, and memory
 * that does not grow with the stream.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <aural.h>

#include "helpers.h"
#include "npy.h"
#include "synth_model.h"

#define PARITY_TOL 1e-4

static float *load_npy(const char *rel, size_t *rows, size_t *cols) {
  float *data;
  char err[256];
  if (npy_read_f32(test_data_path(rel), &data, rows, cols, err, sizeof err))
    fail_msg("%s", err);
  return data;
}

static aural_model *load_model_at(const char *path, aural_weight_type wt) {
  aural_model_load_config lc;
  aural_model_load_config_default(&lc);
  lc.weights = wt;
  aural_model *m;
  aural_err err = {0};
  if (aural_model_load(path, &lc, &m, &err) != 0) fail_msg("%s", err.msg);
  return m;
}

static aural_model *load_model(const char *name, aural_weight_type wt) {
  char rel[128];
  if (snprintf(rel, sizeof rel, "encoder/%s.safetensors", name) >= (int)sizeof rel)
    fail_msg("model name too long: %s", name);
  return load_model_at(test_data_path(rel), wt);
}

/* Runs feats (n, mels) through a fresh encoder in calls of `step` frames
 * (0: all at once). */
static void run(const aural_model *m, uint64_t start, const float *feats,
                size_t n, size_t step, size_t batch, float *emb,
                float *logits) {
  const aural_model_config *c = aural_model_get_config(m);
  aural_encoder_config ec;
  aural_encoder_config_default(&ec);
  ec.first_frame = start;
  if (batch) ec.max_batch_frames = batch;
  aural_encoder *e;
  aural_err err;
  assert_int_equal(aural_encoder_create(m, &ec, &e, &err), 0);
  if (step == 0) step = n;
  size_t mels = (size_t)c->fbank.num_mel_bins, d = (size_t)c->d_model,
         v = (size_t)c->vocab_size;
  for (size_t at = 0; at < n; at += step) {
    size_t k = n - at < step ? n - at : step;
    assert_int_equal(aural_encoder_forward(e, feats + at * mels, k,
                                           emb + at * d,
                                           logits ? logits + at * v : NULL),
                     0);
  }
  assert_int_equal(aural_encoder_next_frame(e), start + n);
  aural_encoder_destroy(e);
}

static double max_diff(const float *a, const float *b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(a[i])) return INFINITY;
    m = fmax(m, fabs((double)a[i] - b[i]));
  }
  return m;
}

typedef struct golden_case {
  char name[64];
  size_t n_frames;
  unsigned long long start;
  int has_head;
  char dtype[8];
} golden_case;

static int read_cases(golden_case *cases, int max) {
  FILE *f = fopen(test_data_path("encoder/cases.txt"), "r");
  assert_non_null(f);
  int n = 0;
  while (n < max &&
         fscanf(f, "%63s %zu %llu %d %7s", cases[n].name, &cases[n].n_frames,
                &cases[n].start, &cases[n].has_head, cases[n].dtype) == 5)
    n++;
  fclose(f);
  return n;
}

static void check_case(const golden_case *gc, aural_weight_type wt) {
  size_t t_in, mels, t_emb, d;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  char rel[128];
  snprintf(rel, sizeof rel, "encoder/%s.emb.npy", gc->name);
  float *gold = load_npy(rel, &t_emb, &d);
  assert_int_equal(t_emb, gc->n_frames);
  assert_true(t_in >= gc->n_frames);
  aural_model *m = load_model(gc->name, wt);
  const aural_model_config *c = aural_model_get_config(m);
  assert_int_equal((size_t)c->d_model, d);
  float *emb = malloc(t_emb * d * sizeof *emb);
  float *logits = NULL, *gold_logits = NULL;
  size_t t_l = 0, v = 0;
  assert_int_equal(c->vocab_size > 0, gc->has_head);
  if (gc->has_head) {
    snprintf(rel, sizeof rel, "encoder/%s.logits.npy", gc->name);
    gold_logits = load_npy(rel, &t_l, &v);
    assert_int_equal(v, (size_t)c->vocab_size);
    logits = malloc(t_l * v * sizeof *logits);
  }
  run(m, gc->start, feats, t_emb, 50, 0, emb, logits);
  double de = max_diff(emb, gold, t_emb * d);
  double dl = gc->has_head ? max_diff(logits, gold_logits, t_l * v) : 0;
  printf("  %-20s %s start %-7llu W %-5d %s %s: max |C - torch| emb %.2e "
         "logits %.2e\n",
         gc->name, gc->dtype, gc->start, c->window,
         c->norm_first ? "pre-LN " : "post-LN", 
         wt == AURAL_WEIGHTS_F16 ? "f16 in memory" : "f32 in memory", de, dl);
  assert_true(de <= PARITY_TOL);
  assert_true(dl <= PARITY_TOL);
  free(emb);
  free(logits);
  free(gold);
  free(gold_logits);
  free(feats);
  aural_model_free(m);
}

static void test_parity_with_pytorch(void **state) {
  (void)state;
  golden_case cases[32];
  int n = read_cases(cases, 32);
  assert_true(n >= 6);
  int saw_offset = 0, saw_f16 = 0, saw_head = 0;
  for (int i = 0; i < n; i++) {
    check_case(&cases[i], AURAL_WEIGHTS_F32);
    saw_offset |= cases[i].start >= 360000;
    saw_f16 |= strcmp(cases[i].dtype, "F16") == 0;
    saw_head |= cases[i].has_head;
    /* Half-precision files lose nothing when kept as half in memory. */
    if (strcmp(cases[i].dtype, "F16") == 0)
      check_case(&cases[i], AURAL_WEIGHTS_F16);
  }
  assert_true(saw_offset && saw_f16 && saw_head);
}

/* The bundled model (a trained one: larger activations, so more float32
 * rounding to keep in check than the random goldens above) on the streams
 * of tests/data/default, made by tools/reference/gen_default_goldens.py
 * from the reference in float64: the bundled recording and the held-out
 * utterance that was furthest off before the matrix products ran in short
 * chains. Each stream runs fresh, in 50-frame chunks and frame by frame,
 * with the file's half-precision weights kept as f32 and as f16. */
static void test_default_model_parity(void **state) {
  (void)state;
  const char *path = getenv("AURAL_DEFAULT_MODEL");
  assert_non_null(path);
  size_t t, mels, t_e, d, t_l, v;
  float *feats = load_npy("default/input.npy", &t, &mels);
  float *gold_e = load_npy("default/emb.npy", &t_e, &d);
  float *gold_l = load_npy("default/logits.npy", &t_l, &v);
  assert_true(t_e == t && t_l == t);
  float *emb = malloc(t * d * sizeof *emb);
  float *logits = malloc(t * v * sizeof *logits);
  assert_true(emb != NULL && logits != NULL);
  FILE *spans = fopen(test_data_path("default/spans.txt"), "r");
  assert_non_null(spans);
  const aural_weight_type wts[] = {AURAL_WEIGHTS_F32, AURAL_WEIGHTS_F16};
  int n_runs = 0;
  for (int wi = 0; wi < 2; wi++) {
    aural_model *m = load_model_at(path, wts[wi]);
    const aural_model_config *c = aural_model_get_config(m);
    assert_int_equal((size_t)c->fbank.num_mel_bins, mels);
    assert_int_equal((size_t)c->d_model, d);
    assert_int_equal((size_t)c->vocab_size, v);
    rewind(spans);
    char name[128];
    size_t first, n;
    while (fscanf(spans, "%127s %zu %zu", name, &first, &n) == 3) {
      assert_true(n > 0 && first + n <= t);
      const size_t steps[] = {50, 1};
      for (int si = 0; si < 2; si++) {
        run(m, 0, feats + first * mels, n, steps[si], 0, emb, logits);
        double de = max_diff(emb, gold_e + first * d, n * d);
        double dl = max_diff(logits, gold_l + first * v, n * v);
        printf("  default model, %-20s %4zu frames, %s, %2zu frame(s) per "
               "call: max |C - torch| emb %.2e logits %.2e\n",
               name, n, wts[wi] == AURAL_WEIGHTS_F16 ? "f16" : "f32",
               steps[si], de, dl);
        assert_true(de <= PARITY_TOL);
        assert_true(dl <= PARITY_TOL);
        n_runs++;
      }
    }
    aural_model_free(m);
  }
  assert_true(n_runs >= 8); /* two streams at least, each four ways */
  fclose(spans);
  free(emb);
  free(logits);
  free(feats);
  free(gold_e);
  free(gold_l);
}

/* Greedy CTC transcript (token ids) of a fresh stream of the model over
 * feats (n, mels); returns its length. */
static size_t greedy_ids(const aural_model *m, const float *feats, size_t n,
                         int *ids, size_t max_ids) {
  const aural_model_config *c = aural_model_get_config(m);
  size_t d = (size_t)c->d_model, v = (size_t)c->vocab_size;
  float *emb = malloc(n * d * sizeof *emb);
  float *logits = malloc(n * v * sizeof *logits);
  assert_true(emb != NULL && logits != NULL);
  run(m, 0, feats, n, 50, 0, emb, logits);
  int prev = -1;
  size_t k = aural_ctc_greedy(logits, n, c->vocab_size, &prev, ids, max_ids);
  free(emb);
  free(logits);
  return k;
}

static size_t edit_distance(const int *a, size_t na, const int *b, size_t nb) {
  size_t *row = malloc((nb + 1) * sizeof *row);
  assert_non_null(row);
  for (size_t j = 0; j <= nb; j++) row[j] = j;
  for (size_t i = 1; i <= na; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= nb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  size_t dist = row[nb];
  free(row);
  return dist;
}

/* A stream that begins with speech (the bundled recording, whose speech
 * starts 18 ms in, without its first 2, 5 or 8 frames, from its features)
 * decodes as the whole recording does, but for what the cut takes of its
 * first phones. The weights as trained had never heard speech in a
 * stream's first frames: without the lead-in, from frame 7 on they lose
 * "the quick b" (11 of 82 phones differ); with it (models/README.md) at
 * most 2 differ, at frame 8. */
static void test_default_model_hears_the_first_frame(void **state) {
  (void)state;
  const char *path = getenv("AURAL_DEFAULT_MODEL");
  assert_non_null(path);
  size_t t, mels;
  float *feats = load_npy("default/input.npy", &t, &mels);
  FILE *spans = fopen(test_data_path("default/spans.txt"), "r");
  assert_non_null(spans);
  char name[128];
  size_t first, n;
  assert_int_equal(fscanf(spans, "%127s %zu %zu", name, &first, &n), 3);
  assert_string_equal(name, "sample.flac");
  fclose(spans);
  aural_model *m = load_model_at(path, AURAL_WEIGHTS_F32);
  enum { MAX_IDS = 512 };
  int whole[MAX_IDS], cut[MAX_IDS];
  size_t n_whole = greedy_ids(m, feats + first * mels, n, whole, MAX_IDS);
  assert_true(n_whole >= 70 && n_whole < MAX_IDS);
  for (size_t skip = 2; skip <= 8; skip += 3) {
    size_t n_cut = greedy_ids(m, feats + (first + skip) * mels, n - skip, cut,
                              MAX_IDS);
    size_t dist = edit_distance(whole, n_whole, cut, n_cut);
    printf("  default model, sample.flac from frame %zu: %zu of %zu phones "
           "differ from the whole recording's\n",
           skip, dist, n_whole);
    assert_true(dist <= 2); /* what 80 ms less of "the" may cost */
  }
  aural_model_free(m);
  free(feats);
}

/* Precision bf16 on the bundled model against the float64 reference on
 * the streams of tests/data/default: its error (README, "Precision bf16")
 * within BF16_LOGIT_TOL of the reference's logits, the frames' best tokens
 * the reference's on at least BF16_ARGMAX_AGREE of frames, and 50-frame
 * chunks and single frames bit-identical to each other (test_chunk_
 * invariance covers more groupings). The bound belongs to the bundled
 * weights and these two streams, measured when the weights change (now
 * 0.59 and 0.94); it can sit close to them because bf16's bits are the
 * same on every machine, AVX512-BF16 or emulated. Other utterances go
 * further (over 100 held out, max 1.56: README). A bf16 kernel that
 * breaks fails the linalg suite's bit-exact checks first. */
#define BF16_LOGIT_TOL 1.0
#define BF16_ARGMAX_AGREE 0.97
static void test_default_model_bf16(void **state) {
  (void)state;
  const char *path = getenv("AURAL_DEFAULT_MODEL");
  assert_non_null(path);
  size_t t, mels, t_l, v;
  float *feats = load_npy("default/input.npy", &t, &mels);
  float *gold_l = load_npy("default/logits.npy", &t_l, &v);
  assert_true(t_l == t);
  aural_model *m = load_model_at(path, AURAL_WEIGHTS_BF16);
  assert_int_equal(aural_model_precision(m), AURAL_PRECISION_BF16);
  const aural_model_config *c = aural_model_get_config(m);
  size_t d = (size_t)c->d_model;
  float *emb = malloc(t * d * sizeof *emb), *emb1 = malloc(t * d * sizeof *emb1);
  float *lg = malloc(t * v * sizeof *lg), *lg1 = malloc(t * v * sizeof *lg1);
  FILE *spans = fopen(test_data_path("default/spans.txt"), "r");
  assert_non_null(spans);
  char name[128];
  size_t first, n, n_streams = 0;
  while (fscanf(spans, "%127s %zu %zu", name, &first, &n) == 3) {
    run(m, 0, feats + first * mels, n, 50, 0, emb, lg);
    /* Frame by frame over the first 200 frames (the encoder is causal:
     * they do not depend on the frames after them). */
    size_t n1 = n < 200 ? n : 200;
    run(m, 0, feats + first * mels, n1, 1, 0, emb1, lg1);
    assert_memory_equal(emb, emb1, n1 * d * sizeof *emb);
    assert_memory_equal(lg, lg1, n1 * v * sizeof *lg);
    const float *g = gold_l + first * v;
    double dl = max_diff(lg, g, n * v);
    size_t agree = 0;
    for (size_t i = 0; i < n; i++) {
      size_t a = 0, b = 0;
      for (size_t j = 1; j < v; j++) {
        if (lg[i * v + j] > lg[i * v + a]) a = j;
        if (g[i * v + j] > g[i * v + b]) b = j;
      }
      agree += a == b;
    }
    printf("  default model, %-20s %4zu frames, bf16: max |C - torch| logits "
           "%.3f; best token the reference's on %.1f%% of frames\n",
           name, n, dl, 100.0 * (double)agree / (double)n);
    assert_true(dl <= BF16_LOGIT_TOL);
    assert_true((double)agree >= BF16_ARGMAX_AGREE * (double)n);
    n_streams++;
  }
  assert_true(n_streams >= 2);
  fclose(spans);
  aural_model_free(m);
  free(emb);
  free(emb1);
  free(lg);
  free(lg1);
  free(feats);
  free(gold_l);
}

/* Runs t frames of feats through m grouped several ways — frame by frame,
 * calls of 7, 17, 50 and t - 1 frames, passes of 13 rows — and fails
 * unless each gives the bits of one call over all t frames: embeddings,
 * and logits when m has a head. */
static void check_groupings(const aural_model *m, const char *name,
                            uint64_t start, const float *feats, size_t t) {
  const aural_model_config *c = aural_model_get_config(m);
  size_t d = (size_t)c->d_model, v = (size_t)c->vocab_size;
  float *whole = malloc(t * d * sizeof *whole),
        *part = malloc(t * d * sizeof *part);
  float *whole_l = v ? malloc(t * v * sizeof *whole_l) : NULL,
        *part_l = v ? malloc(t * v * sizeof *part_l) : NULL;
  run(m, start, feats, t, 0, t, whole, whole_l);
  const size_t steps[] = {1, 7, 17, 50, t - 1, 0};
  for (size_t s = 0; s < sizeof steps / sizeof *steps; s++) {
    /* The last: every call at once, in passes of 13 rows. */
    run(m, start, feats, t, steps[s], steps[s] ? 0 : 13, part, part_l);
    if (memcmp(part, whole, t * d * sizeof *part) != 0 ||
        (v && memcmp(part_l, whole_l, t * v * sizeof *part_l) != 0))
      fail_msg("%s (d_model %d, %d heads, d_ff %d): %s %zu differs from one "
               "call over %zu frames: max difference emb %.3g logits %.3g",
               name, c->d_model, c->n_heads, c->d_ff,
               steps[s] ? "frames per call" : "passes of rows",
               steps[s] ? steps[s] : (size_t)13, t,
               max_diff(part, whole, t * d),
               v ? max_diff(part_l, whole_l, t * v) : 0.0);
  }
  printf("  %-24s d_model %3d, %d heads, d_ff %4d: every grouping "
         "bit-identical\n",
         name, c->d_model, c->n_heads, c->d_ff);
  free(whole);
  free(part);
  free(whole_l);
  free(part_l);
}

/* Models built in memory (tools/aural/synth_model.c) whose widths are not
 * multiples of 16 or 32, as the golden models' are. */
static aural_model *load_synth(const synth_spec *s, const char *name,
                               aural_weight_type wt) {
  size_t size;
  unsigned char *bytes = synth_model(s, &size);
  assert_non_null(bytes);
  aural_model_load_config lc;
  aural_model_load_config_default(&lc);
  lc.weights = wt;
  aural_model *m;
  aural_err err = {0};
  int rc = aural_model_load_buffer(bytes, size, name, &lc, &m, &err);
  free(bytes);
  if (rc != 0) fail_msg("%s", err.msg);
  return m;
}

/* Frame by frame, chunks of 7, 17 and 50 frames, passes that split calls
 * and everything at once give the same bits (README: the chunk size never
 * changes the result): every golden model, and models of odd widths —
 * d_model 96 in 3 heads of 32 with d_ff 200, d_model 72 in 3 heads of 24
 * with d_ff 136 — with every position encoding, both norms, both
 * activations, a head of 29 tokens, CMVN, f16 weights, and windows of
 * one and two frames. */
static void test_chunk_invariance(void **state) {
  (void)state;
  golden_case cases[32];
  int n = read_cases(cases, 32);
  size_t t_in, mels;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  size_t t = 600; /* enough for every ring to wrap */
  assert_true(t_in >= t);
  for (int i = 0; i < n; i++) {
    aural_model *m = load_model(cases[i].name, AURAL_WEIGHTS_F32);
    check_groupings(m, cases[i].name, cases[i].start, feats, t);
    aural_model_free(m);
    /* Precision bf16 keeps the contract of groupings too (every third
     * case: the scalar suites run it with the bf16 oracle). */
    if (i % 3 != 0) continue;
    m = load_model(cases[i].name, AURAL_WEIGHTS_BF16);
    check_groupings(m, cases[i].name, cases[i].start, feats, t);
    aural_model_free(m);
  }
  const struct {
    const char *name;
    synth_spec spec;
    aural_weight_type wt;
  } odd[] = {
      {"d96_prenorm_gelu_rope",
       {.d_model = 96, .n_heads = 3, .n_layers = 2, .d_ff = 200, .window = 50,
        .pos_encoding = "rope", .activation = "gelu", .norm_first = 1,
        .final_norm = 1, .seed = 7},
       AURAL_WEIGHTS_F32},
      {"d72_postnorm_gelu_sin",
       {.d_model = 72, .n_heads = 3, .n_layers = 2, .d_ff = 136, .window = 37,
        .pos_encoding = "sinusoidal", .activation = "gelu", .vocab_size = 29,
        .cmvn = 1, .seed = 8},
       AURAL_WEIGHTS_F32},
      {"d72_prenorm_gelu_rope_f16",
       {.d_model = 72, .n_heads = 3, .n_layers = 2, .d_ff = 136, .window = 50,
        .pos_encoding = "rope", .activation = "gelu", .norm_first = 1,
        .final_norm = 1, .vocab_size = 29, .f16 = 1, .seed = 9},
       AURAL_WEIGHTS_F16},
      {"d96_prenorm_relu_none",
       {.d_model = 96, .n_heads = 3, .n_layers = 2, .d_ff = 200, .window = 50,
        .pos_encoding = "none", .activation = "relu", .norm_first = 1,
        .vocab_size = 29, .seed = 10},
       AURAL_WEIGHTS_F32},
      {"d96_postnorm_gelu_bf16",
       {.d_model = 96, .n_heads = 3, .n_layers = 2, .d_ff = 200, .window = 50,
        .pos_encoding = "rope", .activation = "gelu", .norm_first = 0,
        .vocab_size = 29, .seed = 11},
       AURAL_WEIGHTS_BF16},
      {"d72_prenorm_gelu_bf16",
       {.d_model = 72, .n_heads = 3, .n_layers = 2, .d_ff = 136, .window = 37,
        .pos_encoding = "sinusoidal", .activation = "gelu", .norm_first = 1,
        .final_norm = 1, .vocab_size = 29, .seed = 12},
       AURAL_WEIGHTS_BF16},
      {"d72_lead37_postnorm_sin",
       {.d_model = 72, .n_heads = 3, .n_layers = 2, .d_ff = 136, .window = 37,
        .pos_encoding = "sinusoidal", .activation = "gelu", .vocab_size = 29,
        .cmvn = 1, .lead_in_frames = 37, .seed = 13},
       AURAL_WEIGHTS_F32},
      /* Windows narrower than a group of attention rows (three): a
       * group's frames then share ring slots. */
      {"d96_window1_rope",
       {.d_model = 96, .n_heads = 3, .n_layers = 2, .d_ff = 200, .window = 1,
        .pos_encoding = "rope", .activation = "gelu", .norm_first = 1,
        .final_norm = 1, .vocab_size = 29, .seed = 14},
       AURAL_WEIGHTS_F32},
      {"d72_window2_sin",
       {.d_model = 72, .n_heads = 3, .n_layers = 2, .d_ff = 136, .window = 2,
        .pos_encoding = "sinusoidal", .activation = "gelu", .vocab_size = 29,
        .seed = 15},
       AURAL_WEIGHTS_F32},
  };
  for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
    aural_model *m = load_synth(&odd[i].spec, odd[i].name, odd[i].wt);
    check_groupings(m, odd[i].name, 0, feats, 300);
    check_groupings(m, odd[i].name, 360000, feats, 120);
    /* Positions that pass 2^64 (a caller's first_frame near the top of
     * its range) keep the ring's slots in step. */
    check_groupings(m, odd[i].name, UINT64_MAX - 60, feats, 120);
    aural_model_free(m);
  }
  free(feats);
}

/* A model's lead-in (lead_in_frames K) is K rows of silence's features
 * before the stream's own: the outputs equal, bit for bit, those of the
 * same weights without a lead-in over those rows and then the frames,
 * from the K-th on. Whatever the split of calls, through a reset, and in a
 * batch beside another stream. K = 37 runs in passes of 16 rows; K = 10
 * in one. */
static void test_lead_in_is_silence_before_the_stream(void **state) {
  (void)state;
  size_t t_in, mels;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  const size_t t = 120;
  const synth_spec specs[] = {
      {.d_model = 72, .n_heads = 3, .n_layers = 2, .d_ff = 136, .window = 37,
       .pos_encoding = "sinusoidal", .activation = "gelu", .vocab_size = 29,
       .cmvn = 1, .lead_in_frames = 37, .seed = 13},
      {.d_model = 96, .n_heads = 3, .n_layers = 2, .d_ff = 200, .window = 50,
       .pos_encoding = "rope", .activation = "gelu", .norm_first = 1,
       .final_norm = 1, .vocab_size = 29, .lead_in_frames = 10, .seed = 14},
  };
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
    synth_spec plain = specs[i];
    plain.lead_in_frames = 0;
    aural_model *lead = load_synth(&specs[i], "lead", AURAL_WEIGHTS_F32);
    aural_model *none = load_synth(&plain, "no lead", AURAL_WEIGHTS_F32);
    const aural_model_config *c = aural_model_get_config(lead);
    assert_int_equal(c->lead_in_frames, specs[i].lead_in_frames);
    assert_int_equal(aural_model_get_config(none)->lead_in_frames, 0);
    size_t k = (size_t)c->lead_in_frames, d = (size_t)c->d_model,
           v = (size_t)c->vocab_size;
    float *in = malloc((k + t) * mels * sizeof *in);
    float *want = malloc((k + t) * d * sizeof *want);
    float *want_l = malloc((k + t) * v * sizeof *want_l);
    float *got = malloc(t * d * sizeof *got);
    float *got_l = malloc(t * v * sizeof *got_l);
    assert_true(in && want && want_l && got && got_l);
    for (size_t j = 0; j < k * mels; j++) in[j] = (float)log((double)FLT_EPSILON);
    memcpy(in + k * mels, feats, t * mels * sizeof *in);
    run(none, 1000, in, k + t, 0, 0, want, want_l);
    for (size_t step = 1; step <= t; step += 49) {
      run(lead, 1000, feats, t, step, 0, got, got_l);
      assert_memory_equal(got, want + k * d, t * d * sizeof *got);
      assert_memory_equal(got_l, want_l + k * v, t * v * sizeof *got_l);
    }
    /* A reset runs the lead-in again; a batch primes its streams. */
    aural_encoder *e, *other;
    aural_err err;
    assert_int_equal(aural_encoder_create(lead, NULL, &e, &err), 0);
    assert_int_equal(aural_encoder_create(lead, NULL, &other, &err), 0);
    assert_int_equal(aural_encoder_forward(e, feats + 5 * mels, 30, got, NULL), 0);
    aural_encoder_reset(e, 1000);
    assert_int_equal(aural_encoder_next_frame(e), 1000);
    aural_batch *b;
    assert_int_equal(aural_batch_create(lead, 64, &b, &err), 0);
    aural_batch_item items[] = {{other, feats, 3, NULL, NULL},
                                {e, feats, t, got, got_l}};
    assert_int_equal(aural_encoder_forward_batch(b, items, 2), 0);
    assert_memory_equal(got, want + k * d, t * d * sizeof *got);
    assert_memory_equal(got_l, want_l + k * v, t * v * sizeof *got_l);
    assert_int_equal(aural_encoder_next_frame(e), 1000 + t);
    aural_batch_destroy(b);
    aural_encoder_destroy(e);
    aural_encoder_destroy(other);
    free(in);
    free(want);
    free(want_l);
    free(got);
    free(got_l);
    aural_model_free(lead);
    aural_model_free(none);
  }
  free(feats);
}

/* The fast matrix product agrees with the scalar oracle through a whole
 * model: f32 weights through GEMM versus the same weights as f16 gives
 * differences of f16 rounding only, and identical calls are bit-identical. */
static void test_reset_repeats_exactly(void **state) {
  (void)state;
  aural_model *m = load_model("prenorm_gelu_rope", AURAL_WEIGHTS_F32);
  size_t t_in, mels;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  size_t d = 32, t = 300;
  float *a = malloc(t * d * sizeof *a), *b = malloc(t * d * sizeof *b);
  aural_encoder *e;
  assert_int_equal(aural_encoder_create(m, NULL, &e, NULL), 0);
  assert_int_equal(aural_encoder_forward(e, feats, t, a, NULL), 0);
  aural_encoder_reset(e, 0);
  assert_int_equal(aural_encoder_forward(e, feats, t, b, NULL), 0);
  assert_memory_equal(a, b, t * d * sizeof *a);
  /* Logits requested from a model without a head are refused. */
  aural_model *nohead = load_model("postnorm_relu_sin", AURAL_WEIGHTS_F32);
  aural_encoder *e2;
  assert_int_equal(aural_encoder_create(nohead, NULL, &e2, NULL), 0);
  assert_int_equal(aural_encoder_forward(e2, feats, 1, a, b), AURAL_EINVAL);
  aural_encoder_destroy(e2);
  aural_model_free(nohead);
  aural_encoder_destroy(e);
  aural_model_free(m);
  free(a);
  free(b);
  free(feats);
}

static void test_ctc_greedy(void **state) {
  (void)state;
  /* Frames' best tokens: 0 1 1 0 1 2 2 0 0 3 3 -> 1 1 2 3. */
  const int best[] = {0, 1, 1, 0, 1, 2, 2, 0, 0, 3, 3};
  size_t n = sizeof best / sizeof best[0];
  float logits[11 * 4];
  for (size_t t = 0; t < n; t++)
    for (int v = 0; v < 4; v++) logits[t * 4 + v] = v == best[t] ? 1.0f : -1.0f;
  int ids[16], prev = -1;
  size_t k = aural_ctc_greedy(logits, n, 4, &prev, ids, 16);
  assert_int_equal(k, 4);
  const int want[] = {1, 1, 2, 3};
  assert_memory_equal(ids, want, sizeof want);
  /* Chunk by chunk, with the state carried, gives the same. */
  int ids2[16];
  size_t k2 = 0;
  prev = -1;
  for (size_t at = 0; at < n; at += 2) {
    size_t m = n - at < 2 ? n - at : 2;
    k2 += aural_ctc_greedy(logits + at * 4, m, 4, &prev, ids2 + k2, 16 - k2);
  }
  assert_int_equal(k2, 4);
  assert_memory_equal(ids2, want, sizeof want);
  /* Overflowing max_ids is counted, not written. */
  prev = -1;
  assert_int_equal(aural_ctc_greedy(logits, n, 4, &prev, ids, 2), 4);

  /* Against the reference's own greedy decoding of its logits. */
  size_t t_l, v;
  float *gl = load_npy("encoder/prenorm_gelu_rope.logits.npy", &t_l, &v);
  int *got = malloc(t_l * sizeof *got);
  prev = -1;
  size_t n_got = aural_ctc_greedy(gl, t_l, (int)v, &prev, got, t_l);
  FILE *f = fopen(test_data_path("encoder/prenorm_gelu_rope.ctc.txt"), "r");
  assert_non_null(f);
  size_t i = 0;
  int id;
  while (i < t_l && fscanf(f, "%d", &id) == 1) {
    assert_true(i < n_got);
    assert_int_equal(got[i], id);
    i++;
  }
  fclose(f);
  assert_int_equal(i, n_got);
  free(got);
  free(gl);
}

/* Resident memory of this process, in kB. */
static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f == NULL) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident * 4;
}

static void test_memory_flat_over_100k_frames(void **state) {
  (void)state;
  aural_model *m = load_model("prenorm_gelu_rope", AURAL_WEIGHTS_F32);
  size_t t_in, mels;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  aural_encoder *e;
  assert_int_equal(aural_encoder_create(m, NULL, &e, NULL), 0);
  float emb[50 * 32], logits[50 * 16];
  long warm = 0;
  for (size_t done = 0, at = 0; done < 100000; done += 50) {
    if (at + 50 > t_in) at = 0;
    assert_int_equal(aural_encoder_forward(e, feats + at * mels, 50, emb,
                                           logits),
                     0);
    at += 50;
    if (done == 5000) warm = rss_kb();
  }
  long end = rss_kb();
  printf("  RSS after warm-up %ld kB, after 100,000 frames %ld kB\n", warm,
         end);
  assert_true(warm > 0);
  assert_true(end - warm <= 64); /* a page or so of noise, no growth */
  for (size_t i = 0; i < 50 * 32; i++) assert_true(isfinite(emb[i]));
  aural_encoder_destroy(e);
  aural_model_free(m);
  free(feats);
}

/* aural_encoder_forward and aural_encoder_forward_batch make no heap
 * allocation, not even one freed again (tests/alloc_calls.c), from the
 * first call (the lead-in's) on, with f32 or f16 weights or bf16
 * precision, embeddings and logits, and batches split into passes. */
static void test_forward_allocates_nothing(void **state) {
  (void)state;
  const char *path = getenv("AURAL_DEFAULT_MODEL");
  assert_non_null(path);
  char paths[2][4096];
  snprintf(paths[0], sizeof paths[0], "%s",
           test_data_path("encoder/prenorm_gelu_rope.safetensors"));
  snprintf(paths[1], sizeof paths[1], "%s", path);
  size_t t_in, mels;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  assert_true(t_in >= 300 && mels == 80);
  for (int mi = 0; mi < 2; mi++)
    for (int kind = 0; kind < 3; kind++) {
      aural_model_load_config lc;
      aural_model_load_config_default(&lc);
      lc.weights = kind == 1 ? AURAL_WEIGHTS_F16 : AURAL_WEIGHTS_F32;
      if (kind == 2) lc.precision = AURAL_PRECISION_BF16;
      aural_model *m;
      aural_err err = {0};
      if (aural_model_load(paths[mi], &lc, &m, &err) != 0)
        fail_msg("%s", err.msg);
      const aural_model_config *c = aural_model_get_config(m);
      size_t d = (size_t)c->d_model, v = (size_t)c->vocab_size;
      float *emb = malloc(300 * d * sizeof *emb);
      float *lg = v ? malloc(300 * v * sizeof *lg) : NULL;
      aural_encoder *e[2];
      for (int k = 0; k < 2; k++)
        assert_int_equal(aural_encoder_create(m, NULL, &e[k], NULL), 0);
      aural_batch *b;
      assert_int_equal(aural_batch_create(m, 40, &b, NULL), 0);
      unsigned long before = test_alloc_calls();
      int rc = 0;
      for (size_t at = 0, n = 1; at + n <= 150 && rc == 0; at += n, n += 7)
        rc = aural_encoder_forward(e[0], feats + at * mels, n, emb, lg);
      aural_batch_item items[2] = {
          {e[0], feats + 150 * mels, 70, emb, lg},
          {e[1], feats, 50, emb + 70 * d, lg ? lg + 70 * v : NULL}};
      if (rc == 0) rc = aural_encoder_forward_batch(b, items, 2);
      unsigned long n_alloc = test_alloc_calls() - before;
      assert_int_equal(rc, 0);
      if (n_alloc != 0)
        fail_msg("%s, weights %d, precision %d: %lu heap allocations",
                 paths[mi], (int)lc.weights, (int)lc.precision, n_alloc);
      for (size_t i = 0; i < 120 * d; i++) assert_true(isfinite(emb[i]));
      aural_batch_destroy(b);
      for (int k = 0; k < 2; k++) aural_encoder_destroy(e[k]);
      free(emb);
      free(lg);
      aural_model_free(m);
    }
  free(feats);
}

/* The process's first use of the library, on four threads at once: the
 * kernels chosen once per process (and the bf16 check) are set up while
 * models load and encode, and every thread sees the same choice and the
 * bits of the same load alone. This test runs first in its program; under
 * ThreadSanitizer a lazy set-up without its once-guard is reported. */
enum { FIRST_THREADS = 4, FIRST_FRAMES = 60 };

typedef struct first_job {
  aural_model_load_config lc;
  const char *path; /* test_data_path's buffer is not for threads */
  const float *feats;
  const char *isa, *gemm, *text;
  bool bf16_native;
  float emb[FIRST_FRAMES * 32];
  char failed[600];
} first_job;

static void *first_use(void *arg) {
  first_job *j = arg;
  j->isa = aural_isa_name();
  j->gemm = aural_gemm_name();
  j->bf16_native = aural_model_bf16_native();
  j->text = aural_strerror(AURAL_ENONFINITE);
  aural_model *m;
  aural_encoder *e;
  aural_err err = {0};
  if (aural_model_load(j->path, &j->lc, &m, &err) != 0) {
    snprintf(j->failed, sizeof j->failed, "load: %s", err.msg);
    return NULL;
  }
  if (aural_encoder_create(m, NULL, &e, &err) != 0)
    snprintf(j->failed, sizeof j->failed, "create: %s", err.msg);
  else if (aural_encoder_forward(e, j->feats, FIRST_FRAMES, j->emb, NULL) != 0)
    snprintf(j->failed, sizeof j->failed, "forward failed");
  aural_encoder_destroy(e);
  aural_model_free(m);
  return NULL;
}

static void test_threads_first_use(void **state) {
  (void)state;
  size_t t_in, mels;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  assert_true(t_in >= FIRST_FRAMES && mels == 80);
  first_job *jobs = calloc(FIRST_THREADS + 1, sizeof *jobs);
  char path[4096];
  snprintf(path, sizeof path, "%s",
           test_data_path("encoder/prenorm_gelu_rope.safetensors"));
  for (int t = 0; t <= FIRST_THREADS; t++) {
    jobs[t].path = path;
    aural_model_load_config_default(&jobs[t].lc);
    jobs[t].lc.weights = t % 2 ? AURAL_WEIGHTS_F16 : AURAL_WEIGHTS_F32;
    if (t % 4 == 2) jobs[t].lc.precision = AURAL_PRECISION_BF16;
    jobs[t].feats = feats;
  }
  pthread_t th[FIRST_THREADS];
  for (int t = 0; t < FIRST_THREADS; t++)
    assert_int_equal(pthread_create(&th[t], NULL, first_use, &jobs[t]), 0);
  for (int t = 0; t < FIRST_THREADS; t++)
    assert_int_equal(pthread_join(th[t], NULL), 0);
  first_job *alone = &jobs[FIRST_THREADS];
  for (int t = 0; t < FIRST_THREADS; t++) {
    if (jobs[t].failed[0] != '\0') fail_msg("thread %d: %s", t, jobs[t].failed);
    alone->lc = jobs[t].lc;
    first_use(alone);
    if (alone->failed[0] != '\0') fail_msg("alone: %s", alone->failed);
    assert_string_equal(jobs[t].isa, alone->isa);
    assert_string_equal(jobs[t].gemm, alone->gemm);
    assert_int_equal(jobs[t].bf16_native, alone->bf16_native);
    assert_string_equal(jobs[t].text, alone->text);
    assert_memory_equal(jobs[t].emb, alone->emb, sizeof alone->emb);
  }
  free(jobs);
  free(feats);
}

/* One model, several streams on several threads at once: each stream's
 * output equals the same stream run alone. */
typedef struct thread_job {
  const aural_model *model;
  const float *feats;
  size_t n, step;
  uint64_t start;
  float *emb;
} thread_job;

static void *thread_main(void *arg) {
  thread_job *j = arg;
  aural_encoder *e;
  aural_encoder_config ec;
  aural_encoder_config_default(&ec);
  ec.first_frame = j->start;
  if (aural_encoder_create(j->model, &ec, &e, NULL) != 0) return NULL;
  for (size_t at = 0; at < j->n; at += j->step) {
    size_t k = j->n - at < j->step ? j->n - at : j->step;
    aural_encoder_forward(e, j->feats + at * 80, k, j->emb + at * 32, NULL);
  }
  aural_encoder_destroy(e);
  return j;
}

static void test_model_shared_across_threads(void **state) {
  (void)state;
  aural_model *m = load_model("prenorm_gelu_rope", AURAL_WEIGHTS_F32);
  size_t t_in, mels;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  enum { N_THREADS = 4 };
  thread_job jobs[N_THREADS];
  pthread_t th[N_THREADS];
  size_t n = 1000;
  for (int i = 0; i < N_THREADS; i++) {
    jobs[i] = (thread_job){.model = m, .feats = feats + (size_t)i * 100 * mels,
                           .n = n, .step = (size_t)(1 + 16 * i),
                           .start = (uint64_t)i * 1000};
    jobs[i].emb = malloc(n * 32 * sizeof(float));
    assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
  }
  float *alone = malloc(n * 32 * sizeof *alone);
  for (int i = 0; i < N_THREADS; i++) {
    void *ret;
    assert_int_equal(pthread_join(th[i], &ret), 0);
    assert_ptr_equal(ret, &jobs[i]);
    run(m, jobs[i].start, jobs[i].feats, n, 50, 0, alone, NULL);
    assert_memory_equal(jobs[i].emb, alone, n * 32 * sizeof *alone);
    free(jobs[i].emb);
  }
  free(alone);
  free(feats);
  aural_model_free(m);
}

/* Streams batched together give each stream exactly the bits it gets
 * alone, whatever the grouping: uneven frame counts, empty items, items
 * split across passes, and several calls in a row. */
static void test_batch_equals_alone(void **state) {
  (void)state;
  const char *models[] = {"prenorm_gelu_rope", "wide_window", "offset_sin"};
  size_t t_in, mels;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  for (size_t mi = 0; mi < 3; mi++) {
    aural_model *m = load_model(models[mi], AURAL_WEIGHTS_F32);
    const aural_model_config *c = aural_model_get_config(m);
    size_t d = (size_t)c->d_model, v = (size_t)c->vocab_size;
    enum { N_STREAMS = 5, N_CALLS = 4 };
    const size_t counts[N_CALLS][N_STREAMS] = {
        {50, 1, 0, 7, 130}, {50, 50, 50, 50, 50}, {0, 3, 99, 1, 2},
        {64, 65, 1, 0, 13}};
    size_t total[N_STREAMS] = {0};
    for (int k = 0; k < N_CALLS; k++)
      for (int s = 0; s < N_STREAMS; s++) total[s] += counts[k][s];
    aural_encoder *enc[N_STREAMS];
    float *emb[N_STREAMS], *lg[N_STREAMS], *alone = malloc(400 * d * sizeof *alone);
    float *alone_lg = v ? malloc(400 * v * sizeof *alone_lg) : NULL;
    for (int s = 0; s < N_STREAMS; s++) {
      aural_encoder_config ec;
      aural_encoder_config_default(&ec);
      ec.first_frame = (uint64_t)s * 1000;
      assert_int_equal(aural_encoder_create(m, &ec, &enc[s], NULL), 0);
      emb[s] = malloc(total[s] * d * sizeof(float));
      lg[s] = v ? malloc(total[s] * v * sizeof(float)) : NULL;
    }
    aural_batch *b;
    assert_int_equal(aural_batch_create(m, 64, &b, NULL), 0);
    size_t at[N_STREAMS] = {0};
    for (int k = 0; k < N_CALLS; k++) {
      aural_batch_item items[N_STREAMS];
      for (int s = 0; s < N_STREAMS; s++) {
        items[s] = (aural_batch_item){
            .enc = enc[s], .feats = feats + ((size_t)s * 37 + at[s]) * mels,
            .n = counts[k][s], .emb = emb[s] + at[s] * d,
            .logits = v ? lg[s] + at[s] * v : NULL};
        at[s] += counts[k][s];
      }
      assert_int_equal(aural_encoder_forward_batch(b, items, N_STREAMS), 0);
    }
    for (int s = 0; s < N_STREAMS; s++) {
      assert_int_equal(aural_encoder_next_frame(enc[s]),
                       (uint64_t)s * 1000 + total[s]);
      run(m, (uint64_t)s * 1000, feats + (size_t)s * 37 * mels, total[s], 50,
          0, alone, alone_lg);
      assert_memory_equal(emb[s], alone, total[s] * d * sizeof *alone);
      if (v) assert_memory_equal(lg[s], alone_lg, total[s] * v * sizeof *alone);
    }
    printf("  %-18s 5 streams, 4 calls, passes of 64 rows: identical to "
           "each stream alone\n", models[mi]);

    /* Refused: a stream twice, a stream of another model. */
    aural_batch_item twice[2] = {{enc[0], feats, 1, alone, NULL},
                                 {enc[0], feats, 1, alone, NULL}};
    assert_int_equal(aural_encoder_forward_batch(b, twice, 2), AURAL_EINVAL);
    aural_model *other = load_model("none_w1", AURAL_WEIGHTS_F32);
    aural_encoder *stranger;
    assert_int_equal(aural_encoder_create(other, NULL, &stranger, NULL), 0);
    aural_batch_item wrong[1] = {{stranger, feats, 1, alone, NULL}};
    assert_int_equal(aural_encoder_forward_batch(b, wrong, 1), AURAL_EINVAL);
    aural_batch_item late[2] = {{enc[1], feats, 0, alone, NULL},
                                {enc[1], feats, 0, alone, NULL}};
    assert_int_equal(aural_encoder_forward_batch(b, late, 2), AURAL_EINVAL);
    assert_int_equal(aural_encoder_next_frame(enc[0]), total[0]);
    /* A refused batch leaves no encoder marked as listed. */
    aural_batch_item fine[2] = {{enc[0], feats, 0, alone, NULL},
                                {enc[1], feats, 0, alone, NULL}};
    assert_int_equal(aural_encoder_forward_batch(b, fine, 2), 0);
    aural_encoder_destroy(stranger);
    aural_model_free(other);

    aural_batch_destroy(b);
    for (int s = 0; s < N_STREAMS; s++) {
      aural_encoder_destroy(enc[s]);
      free(emb[s]);
      free(lg[s]);
    }
    free(alone);
    free(alone_lg);
    aural_model_free(m);
  }
  free(feats);
}

/* Rows of several streams share every matrix product of a batched pass
 * (and, in the daemon, a round). A stream whose features are NaN,
 * infinite or huge (a model whose input_scale or CMVN overflows on its
 * audio) gets non-finite outputs; the streams beside it must still get
 * exactly the bits they get alone. Each pass here holds 20 rows of each
 * stream, so the bad stream's rows share the kernels' tiles of 6 rows with
 * both neighbours'; the kernel sets are covered by the suite's *_avx2 and
 * *_scalar runs, the weights' types here (f32, f16, bf16). */
static void test_batch_nonfinite_stream_stays_its_own(void **state) {
  (void)state;
  size_t t_in, mels;
  float *feats = load_npy("encoder/input.npy", &t_in, &mels);
  const aural_weight_type wts[] = {AURAL_WEIGHTS_F32, AURAL_WEIGHTS_F16,
                                   AURAL_WEIGHTS_BF16};
  enum { N = 40 };
  float *bad = malloc(N * mels * sizeof *bad);
  memcpy(bad, feats, N * mels * sizeof *bad);
  bad[3 * mels + 7] = NAN;
  bad[11 * mels] = INFINITY;
  bad[20 * mels + 79] = -INFINITY;
  bad[30 * mels + 40] = 1e30f;
  for (size_t wi = 0; wi < 3; wi++) {
    aural_model *m = load_model("prenorm_gelu_rope", wts[wi]);
    const aural_model_config *c = aural_model_get_config(m);
    size_t d = (size_t)c->d_model, v = (size_t)c->vocab_size;
    aural_encoder *enc[3];
    float *emb[3], *lg[3];
    for (int s = 0; s < 3; s++) {
      assert_int_equal(aural_encoder_create(m, NULL, &enc[s], NULL), 0);
      emb[s] = malloc(N * d * sizeof(float));
      lg[s] = malloc(N * v * sizeof(float));
    }
    aural_batch *b;
    assert_int_equal(aural_batch_create(m, 64, &b, NULL), 0);
    /* Two calls, the bad stream between the good ones and its rows in
     * the same tiles as theirs. */
    for (size_t at = 0; at < N; at += N / 2) {
      aural_batch_item items[3];
      for (int s = 0; s < 3; s++) {
        const float *f = s == 1 ? bad : feats + (size_t)(s + 1) * 50 * mels;
        items[s] = (aural_batch_item){.enc = enc[s], .feats = f + at * mels,
                                      .n = N / 2, .emb = emb[s] + at * d,
                                      .logits = lg[s] + at * v};
      }
      assert_int_equal(aural_encoder_forward_batch(b, items, 3), 0);
    }
    size_t n_bad = 0;
    for (size_t i = 0; i < N * d; i++) n_bad += !isfinite(emb[1][i]);
    assert_true(n_bad > 0); /* the case is what it claims to be */
    float *alone = malloc(N * d * sizeof *alone);
    float *alone_lg = malloc(N * v * sizeof *alone_lg);
    for (int s = 0; s < 3; s += 2) {
      run(m, 0, feats + (size_t)(s + 1) * 50 * mels, N, 0, 0, alone, alone_lg);
      assert_memory_equal(emb[s], alone, N * d * sizeof *alone);
      assert_memory_equal(lg[s], alone_lg, N * v * sizeof *alone_lg);
    }
    printf("  weights %s: %zu of %d outputs of the bad stream non-finite, "
           "the two beside it identical to each alone\n",
           wi == 0 ? "f32" : wi == 1 ? "f16" : "bf16", n_bad, (int)(N * d));
    free(alone);
    free(alone_lg);
    aural_batch_destroy(b);
    for (int s = 0; s < 3; s++) {
      aural_encoder_destroy(enc[s]);
      free(emb[s]);
      free(lg[s]);
    }
    aural_model_free(m);
  }
  free(bad);
  free(feats);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_threads_first_use), /* first: see there */
      cmocka_unit_test(test_parity_with_pytorch),
      cmocka_unit_test(test_default_model_parity),
      cmocka_unit_test(test_default_model_bf16),
      cmocka_unit_test(test_chunk_invariance),
      cmocka_unit_test(test_lead_in_is_silence_before_the_stream),
      cmocka_unit_test(test_default_model_hears_the_first_frame),
      cmocka_unit_test(test_reset_repeats_exactly),
      cmocka_unit_test(test_ctc_greedy),
      cmocka_unit_test(test_memory_flat_over_100k_frames),
      cmocka_unit_test(test_model_shared_across_threads),
      cmocka_unit_test(test_batch_equals_alone),
      cmocka_unit_test(test_batch_nonfinite_stream_stays_its_own),
      cmocka_unit_test(test_forward_allocates_nothing),
  };
  test_select_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
