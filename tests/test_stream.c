/*
 * aural_stream tests: outputs bit-identical however the audio arrives and
 * however computes are grouped (alone or batched), equal to the plain
 * frontend + encoder path, chunk boundaries and the final chunk, CTC text
 * with the collapse carried across chunks, other rates and channels,
 * errors, and no allocation after create.
 */
#include <malloc.h>
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
#include "synth_model.h"

static aural_model *load_model(const char *name) {
  char rel[128];
  snprintf(rel, sizeof rel, "encoder/%s.safetensors", name);
  aural_model *m;
  aural_err err = {0};
  if (aural_model_load(test_data_path(rel), NULL, &m, &err) != 0)
    fail_msg("%s", err.msg);
  return m;
}

/* n_frames of deterministic speech-like audio: a few tones with a slow
 * envelope, plus noise; channel c is scaled differently so that a downmix
 * matters. */
static float *make_audio(size_t n_frames, int channels, double rate_hz) {
  float *x = malloc(n_frames * (size_t)channels * sizeof *x);
  uint32_t seed = 12345;
  for (size_t i = 0; i < n_frames; i++) {
    double t = (double)i / rate_hz;
    double env = 0.5 + 0.5 * sin(2 * M_PI * 1.3 * t);
    double v = env * (0.2 * sin(2 * M_PI * 220 * t) +
                      0.1 * sin(2 * M_PI * 1250 * t + 1.0) +
                      0.05 * sin(2 * M_PI * 3100 * t));
    for (int c = 0; c < channels; c++) {
      seed = seed * 1664525u + 1013904223u;
      double noise = ((double)(seed >> 8) / 16777216.0 - 0.5) * 0.02;
      x[i * (size_t)channels + (size_t)c] =
          (float)(v * (1.0 + 0.3 * c) + noise);
    }
  }
  return x;
}

/* Everything one stream put out, chunks concatenated. */
typedef struct result {
  size_t n_frames, n_chunks, cap;
  float *emb, *logits, *feats;
  char text[65536];
  size_t chunk_n[256];
  int final_seen;
  uint64_t chunk0; /* the stream's first chunk (config.first_chunk) */
} result;

static void result_free(result *r) {
  free(r->emb);
  free(r->logits);
  free(r->feats);
  free(r);
}

/* Pulls every chunk that is ready into r, checking their numbering. */
static void drain(aural_stream *s, result *r) {
  aural_stream_info in;
  aural_stream_get_info(s, &in);
  size_t C = in.chunk_frames, d = (size_t)in.d_model,
         v = (size_t)in.vocab_size, m = (size_t)in.n_mels;
  for (;;) {
    if (r->n_frames + C > r->cap) {
      r->cap = (r->n_frames + C) * 2;
      r->emb = realloc(r->emb, r->cap * d * sizeof(float));
      r->logits = realloc(r->logits, r->cap * (v ? v : 1) * sizeof(float));
      r->feats = realloc(r->feats, r->cap * m * sizeof(float));
    }
    char text[4096];
    assert_true(in.text_max_bytes <= sizeof text);
    aural_chunk ch = {
        .emb = in.outputs & AURAL_STREAM_EMBEDDINGS ? r->emb + r->n_frames * d
                                                    : NULL,
        .logits = in.outputs & AURAL_STREAM_LOGITS ? r->logits + r->n_frames * v
                                                   : NULL,
        .features = in.outputs & AURAL_STREAM_FEATURES
                        ? r->feats + r->n_frames * m
                        : NULL,
        .max_frames = C,
        .text = in.outputs & AURAL_STREAM_TEXT ? text : NULL,
        .text_cap = sizeof text};
    int rc = aural_stream_pull(s, &ch);
    assert_true(rc == 0 || rc == 1);
    if (rc == 0) return;
    assert_false(r->final_seen);
    assert_int_equal(ch.seq, r->chunk0 + r->n_chunks);
    assert_int_equal(ch.first_frame, (r->chunk0 + r->n_chunks) * C);
    assert_true(ch.final || ch.n_frames == C);
    assert_true(ch.n_frames <= C);
    if (ch.text != NULL) {
      assert_int_equal(strlen(text), ch.text_len);
      if (ch.text_len > 0 && r->text[0] != '\0') strcat(r->text, " ");
      strcat(r->text, text);
    }
    if (r->n_chunks < 256) r->chunk_n[r->n_chunks] = ch.n_frames;
    r->n_chunks++;
    r->n_frames += ch.n_frames;
    r->final_seen = ch.final;
  }
}

/* Pushes pcm (n frames) in pushes of `step` frames (0: all at once),
 * computing and draining after each. */
static void feed(aural_stream *s, const float *pcm, size_t n, int channels,
                 size_t step, result *r) {
  if (step == 0) step = n;
  for (size_t at = 0; at < n;) {
    size_t want = n - at < step ? n - at : step, taken;
    assert_int_equal(
        aural_stream_push(s, pcm + at * (size_t)channels, want, &taken), 0);
    at += taken;
    if (taken < want) assert_int_equal(aural_stream_input_room(s), 0);
    assert_int_equal(aural_stream_compute(s), 0);
    drain(s, r);
    /* Once computed and drained, a stream always takes input. */
    assert_true(aural_stream_input_room(s) > 0);
  }
}

static void finish(aural_stream *s, result *r) {
  assert_int_equal(aural_stream_end(s), 0);
  assert_int_equal(aural_stream_compute(s), 0);
  drain(s, r);
  aural_stream_stats st;
  aural_stream_get_stats(s, &st);
  assert_true(st.done);
  assert_int_equal(st.n_pending_frames, 0);
  assert_int_equal(st.n_ready_frames, 0);
}

/* One whole stream over pcm with cfg. */
static result *run_stream(const aural_model *m, const aural_stream_config *cfg,
                          const float *pcm, size_t n, size_t step) {
  aural_stream *s;
  aural_err err = {0};
  if (aural_stream_create(m, cfg, &s, &err) != 0) fail_msg("%s", err.msg);
  result *r = calloc(1, sizeof *r);
  r->chunk0 = cfg->first_chunk;
  feed(s, pcm, n, cfg->n_channels, step, r);
  finish(s, r);
  aural_stream_destroy(s);
  return r;
}

static void assert_same(const result *a, const result *b, size_t d, size_t v,
                        size_t m, unsigned outputs) {
  assert_int_equal(a->n_frames, b->n_frames);
  assert_int_equal(a->n_chunks, b->n_chunks);
  if (outputs & AURAL_STREAM_EMBEDDINGS)
    assert_memory_equal(a->emb, b->emb, a->n_frames * d * sizeof(float));
  if (outputs & AURAL_STREAM_LOGITS)
    assert_memory_equal(a->logits, b->logits, a->n_frames * v * sizeof(float));
  if (outputs & AURAL_STREAM_FEATURES)
    assert_memory_equal(a->feats, b->feats, a->n_frames * m * sizeof(float));
  assert_string_equal(a->text, b->text);
}

/* The plain path: a frontend without CMVN over the whole input, then the
 * encoder over all its frames in one call. */
typedef struct plain {
  float *feats, *emb, *logits;
  size_t n, cap, mels;
} plain;

static int plain_frames(void *user, const float *rows, size_t n,
                        uint64_t first) {
  plain *p = user;
  assert_int_equal(first, p->n);
  if (p->n + n > p->cap) {
    p->cap = (p->n + n) * 2;
    p->feats = realloc(p->feats, p->cap * p->mels * sizeof(float));
  }
  memcpy(p->feats + p->n * p->mels, rows, n * p->mels * sizeof(float));
  p->n += n;
  return 0;
}

static void plain_run(const aural_model *m, const float *pcm, size_t n,
                      double rate_hz, int channels, plain *p) {
  const aural_model_config *c = aural_model_get_config(m);
  memset(p, 0, sizeof *p);
  p->mels = (size_t)c->fbank.num_mel_bins;
  aural_frontend_config fc;
  aural_frontend_config_default(&fc);
  fc.fbank = c->fbank;
  fc.input_rate_hz = rate_hz;
  fc.n_channels = channels;
  aural_frontend *fe;
  assert_int_equal(aural_frontend_create(&fc, &fe, NULL), 0);
  assert_int_equal(aural_frontend_push(fe, pcm, n, plain_frames, p), 0);
  assert_int_equal(aural_frontend_finish(fe, plain_frames, p), 0);
  aural_frontend_destroy(fe);
  size_t d = (size_t)c->d_model, v = (size_t)c->vocab_size;
  p->emb = malloc((p->n + 1) * d * sizeof(float));
  p->logits = v ? malloc((p->n + 1) * v * sizeof(float)) : NULL;
  aural_encoder *e;
  assert_int_equal(aural_encoder_create(m, NULL, &e, NULL), 0);
  assert_int_equal(aural_encoder_forward(e, p->feats, p->n, p->emb, p->logits),
                   0);
  aural_encoder_destroy(e);
}

static void plain_free(plain *p) {
  free(p->feats);
  free(p->emb);
  free(p->logits);
}

/* Whole-signal greedy tokens, separated by single spaces. */
static void whole_text(const aural_model *m, const float *logits, size_t n,
                       char *out) {
  int v = aural_model_get_config(m)->vocab_size;
  int *ids = malloc((n + 1) * sizeof *ids), prev = -1;
  size_t k = aural_ctc_greedy(logits, n, v, &prev, ids, n);
  out[0] = '\0';
  for (size_t i = 0; i < k; i++) {
    if (i > 0) strcat(out, " ");
    strcat(out, aural_model_token(m, ids[i]));
  }
  free(ids);
}

static void check_against_plain(const aural_model *m, double rate_hz,
                                int channels, size_t n_in, size_t step) {
  const aural_model_config *c = aural_model_get_config(m);
  size_t d = (size_t)c->d_model, v = (size_t)c->vocab_size,
         mels = (size_t)c->fbank.num_mel_bins;
  float *pcm = make_audio(n_in, channels, rate_hz);
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.input_rate_hz = rate_hz;
  sc.n_channels = channels;
  sc.outputs = AURAL_STREAM_EMBEDDINGS | AURAL_STREAM_FEATURES |
               (v ? AURAL_STREAM_LOGITS | AURAL_STREAM_TEXT : 0);
  result *r = run_stream(m, &sc, pcm, n_in, step);
  plain p;
  plain_run(m, pcm, n_in, rate_hz, channels, &p);
  assert_true(p.n > 100);
  assert_int_equal(r->n_frames, p.n);
  assert_memory_equal(r->feats, p.feats, p.n * mels * sizeof(float));
  assert_memory_equal(r->emb, p.emb, p.n * d * sizeof(float));
  if (v) {
    assert_memory_equal(r->logits, p.logits, p.n * v * sizeof(float));
    static char want[65536];
    whole_text(m, p.logits, p.n, want);
    assert_string_equal(r->text, want);
  }
  printf("  %g Hz x %d, pushes of %zu: %zu frames in %zu chunks equal the "
         "plain path\n", rate_hz, channels, step, p.n, r->n_chunks);
  plain_free(&p);
  result_free(r);
  free(pcm);
}

/* Pushes of 1 sample, 160 samples and the whole signal give the same bits,
 * and those of the frontend + encoder run over the whole signal. */
static void test_split_invariance(void **state) {
  (void)state;
  const char *models[] = {"prenorm_gelu_rope", "tiny", "wide_window"};
  for (size_t mi = 0; mi < 3; mi++) {
    aural_model *m = load_model(models[mi]);
    const aural_model_config *c = aural_model_get_config(m);
    size_t d = (size_t)c->d_model, v = (size_t)c->vocab_size,
           mels = (size_t)c->fbank.num_mel_bins;
    size_t n = 37920; /* 235 frames: 4 whole chunks and 35 */
    float *pcm = make_audio(n, 1, 16000);
    aural_stream_config sc;
    aural_stream_config_default(&sc);
    sc.outputs = AURAL_STREAM_EMBEDDINGS | AURAL_STREAM_FEATURES |
                 (v ? AURAL_STREAM_LOGITS | AURAL_STREAM_TEXT : 0);
    result *whole = run_stream(m, &sc, pcm, n, 0);
    assert_int_equal(whole->n_frames, 235);
    assert_int_equal(whole->n_chunks, 5);
    assert_int_equal(whole->chunk_n[4], 35);
    const size_t steps[] = {1, 160, 4097};
    for (size_t i = 0; i < 3; i++) {
      result *r = run_stream(m, &sc, pcm, n, steps[i]);
      assert_same(r, whole, d, v, mels, sc.outputs);
      result_free(r);
    }
    /* Features alone run no encoder and give the same features. */
    aural_stream_config fc = sc;
    fc.outputs = AURAL_STREAM_FEATURES;
    result *f = run_stream(m, &fc, pcm, n, 500);
    assert_int_equal(f->n_chunks, whole->n_chunks);
    assert_memory_equal(f->feats, whole->feats, 235 * mels * sizeof(float));
    result_free(f);
    check_against_plain(m, 16000, 1, n, 160);
    if (v) printf("  %s: text \"%.60s...\"\n", models[mi], whole->text);
    result_free(whole);
    free(pcm);
    aural_model_free(m);
  }
}

/* A stream resumed from chunk k (its audio from that chunk's first
 * sample, as a cluster node takes a stream over) numbers its chunks and
 * frames from k and, once the window of every layer has filled again
 * (n_layers * (window - 1) frames), gives the bits of the whole stream. */
static void test_resume_from_chunk(void **state) {
  (void)state;
  const char *models[] = {"prenorm_gelu_rope", "tiny"};
  for (size_t mi = 0; mi < 2; mi++) {
    aural_model *m = load_model(models[mi]);
    const aural_model_config *c = aural_model_get_config(m);
    size_t d = (size_t)c->d_model, v = (size_t)c->vocab_size;
    size_t n = 400 + 399 * 160; /* 400 frames */
    float *pcm = make_audio(n, 1, 16000);
    aural_stream_config sc;
    aural_stream_config_default(&sc);
    sc.chunk_frames = 20;
    sc.outputs = AURAL_STREAM_EMBEDDINGS | (v ? AURAL_STREAM_LOGITS : 0);
    result *whole = run_stream(m, &sc, pcm, n, 777);
    size_t settle = (size_t)(c->n_layers * (c->window - 1));
    size_t k0 = 3, C = sc.chunk_frames, f0 = k0 * C;
    size_t same_from = (settle + C - 1) / C * C; /* frames after f0 */
    assert_true(f0 + same_from < whole->n_frames);
    sc.first_chunk = k0;
    result *r = run_stream(m, &sc, pcm + f0 * 160, n - f0 * 160, 555);
    assert_int_equal(r->n_frames, whole->n_frames - f0);
    size_t rows = whole->n_frames - f0 - same_from;
    assert_memory_equal(r->emb + same_from * d,
                        whole->emb + (f0 + same_from) * d,
                        rows * d * sizeof(float));
    if (v)
      assert_memory_equal(r->logits + same_from * v,
                          whole->logits + (f0 + same_from) * v,
                          rows * v * sizeof(float));
    /* Before the windows fill again the first frames differ. */
    assert_memory_not_equal(r->emb, whole->emb + f0 * d, d * sizeof(float));
    printf("  %s: resumed at chunk %zu, identical after %zu frames\n",
           models[mi], k0, same_from);
    sc.first_chunk = AURAL_STREAM_MAX_FIRST_CHUNK + 1;
    aural_stream *bad = NULL;
    aural_err err = {0};
    assert_int_equal(aural_stream_create(m, &sc, &bad, &err), AURAL_ECONFIG);
    assert_non_null(strstr(err.msg, "first_chunk"));
    result_free(r);
    result_free(whole);
    free(pcm);
    aural_model_free(m);
  }
}

/* Chunk boundaries: whole chunks end with an empty final chunk, a partial
 * one is final itself, a stream without frames has no chunk. */
static void test_chunk_boundaries(void **state) {
  (void)state;
  aural_model *m = load_model("prenorm_gelu_rope");
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.chunk_frames = 20;
  /* 400 + 159 * 160 samples: exactly 160 frames, 8 chunks. */
  size_t n = 400 + 159 * 160;
  float *pcm = make_audio(n, 1, 16000);
  result *r = run_stream(m, &sc, pcm, n, 333);
  assert_int_equal(r->n_frames, 160);
  assert_int_equal(r->n_chunks, 9);
  assert_int_equal(r->chunk_n[7], 20);
  assert_int_equal(r->chunk_n[8], 0); /* the empty end marker */
  assert_true(r->final_seen);
  result_free(r);
  /* One sample less: 159 frames, the last chunk partial and final. */
  r = run_stream(m, &sc, pcm, n - 1, 333);
  assert_int_equal(r->n_frames, 159);
  assert_int_equal(r->n_chunks, 8);
  assert_int_equal(r->chunk_n[7], 19);
  result_free(r);
  /* Fewer samples than one window: no frames, no chunk, yet done. */
  r = run_stream(m, &sc, pcm, 399, 0);
  assert_int_equal(r->n_chunks, 0);
  result_free(r);
  /* Frame timing comes from the model's frontend. */
  aural_stream *s;
  assert_int_equal(aural_stream_create(m, &sc, &s, NULL), 0);
  aural_stream_info in;
  aural_stream_get_info(s, &in);
  assert_int_equal(in.hop_samples, 160);
  assert_int_equal(in.window_samples, 400);
  assert_true(in.frame_seconds == 160.0 / 16000.0);
  assert_int_equal(in.outputs, AURAL_STREAM_EMBEDDINGS | AURAL_STREAM_LOGITS |
                                   AURAL_STREAM_TEXT);
  /* A chunk is not final before the end, even when nothing is pending. */
  size_t taken;
  assert_int_equal(aural_stream_push(s, pcm, 400 + 19 * 160, &taken), 0);
  assert_int_equal(aural_stream_compute(s), 0);
  float emb[20 * 64];
  assert_true((size_t)in.d_model * 20 <= sizeof emb / sizeof emb[0]);
  aural_chunk ch = {.emb = emb, .max_frames = 20};
  size_t n_next;
  bool final;
  assert_int_equal(aural_stream_ready(s, &n_next, &final), 1);
  assert_int_equal(n_next, 20);
  assert_false(final);
  /* Either output may be left out; a NULL stream is refused. */
  assert_int_equal(aural_stream_ready(s, NULL, NULL), 1);
  assert_int_equal(aural_stream_ready(s, &n_next, NULL), 1);
  assert_int_equal(n_next, 20);
  assert_int_equal(aural_stream_ready(s, NULL, &final), 1);
  assert_false(final);
  assert_int_equal(aural_stream_ready(NULL, &n_next, &final), AURAL_EINVAL);
  assert_int_equal(aural_stream_pull(NULL, &ch), AURAL_EINVAL);
  char text[4096];
  ch.text = text;
  ch.text_cap = 20 * (in.token_max_bytes + 1); /* one byte short */
  assert_int_equal(aural_stream_pull(s, &ch), AURAL_EINVAL);
  ch.text_cap++;
  assert_int_equal(aural_stream_pull(s, &ch), 1);
  assert_false(ch.final);
  assert_int_equal(aural_stream_ready(s, &n_next, &final), 0);
  assert_int_equal(aural_stream_pull(s, &ch), 0);
  assert_int_equal(aural_stream_end(s), 0);
  /* The empty final chunk needs no room at all. */
  assert_int_equal(aural_stream_ready(s, &n_next, &final), 1);
  assert_int_equal(n_next, 0);
  assert_true(final);
  ch = (aural_chunk){.emb = emb, .max_frames = 0, .text = text, .text_cap = 1};
  assert_int_equal(aural_stream_pull(s, &ch), 1);
  assert_int_equal(ch.text_len, 0);
  assert_true(ch.final);
  assert_int_equal(ch.n_frames, 0);
  assert_int_equal(ch.seq, 1);
  assert_int_equal(ch.first_frame, 20);
  assert_int_equal(aural_stream_pull(s, &ch), 0);
  /* reset: a new stream with the same config. */
  assert_int_equal(aural_stream_reset(s), 0);
  assert_int_equal(aural_stream_push(s, pcm, 400 + 19 * 160, &taken), 0);
  assert_int_equal(aural_stream_compute(s), 0);
  float emb2[20 * 64];
  ch = (aural_chunk){.emb = emb2, .max_frames = 20};
  assert_int_equal(aural_stream_pull(s, &ch), 1);
  assert_int_equal(ch.seq, 0);
  assert_memory_equal(emb, emb2, 20 * (size_t)in.d_model * sizeof(float));
  aural_stream_destroy(s);
  free(pcm);
  aural_model_free(m);
}

/* The chunk size changes how frames are grouped into encoder calls, never
 * the result, on models whose widths are not multiples of 16 or 32:
 * d_model 96 in 3 heads of 32 with d_ff 200, and 72 in 3 heads of 24 with
 * d_ff 136. Chunks of 1, 7, 17 and 50 frames, each encoded as soon as it
 * is whole, as aural encode --chunk-frames runs them. */
static void test_chunk_size_odd_shapes(void **state) {
  (void)state;
  const synth_spec specs[] = {
      {.d_model = 96, .n_heads = 3, .n_layers = 2, .d_ff = 200, .window = 50,
       .pos_encoding = "rope", .activation = "gelu", .norm_first = 1,
       .final_norm = 1, .vocab_size = 29, .seed = 3},
      {.d_model = 72, .n_heads = 3, .n_layers = 2, .d_ff = 136, .window = 50,
       .pos_encoding = "sinusoidal", .activation = "gelu", .vocab_size = 29,
       .cmvn = 1, .seed = 4},
  };
  size_t n = 37920; /* 235 frames */
  float *pcm = make_audio(n, 1, 16000);
  for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
    size_t size;
    unsigned char *bytes = synth_model(&specs[i], &size);
    assert_non_null(bytes);
    aural_model *m;
    aural_err err = {0};
    if (aural_model_load_buffer(bytes, size, "odd", NULL, &m, &err) != 0)
      fail_msg("%s", err.msg);
    free(bytes);
    size_t d = (size_t)specs[i].d_model, v = (size_t)specs[i].vocab_size;
    aural_stream_config sc;
    aural_stream_config_default(&sc);
    result *ref = run_stream(m, &sc, pcm, n, 0);
    assert_int_equal(ref->n_frames, 235);
    const size_t chunks[] = {1, 7, 17, 50};
    for (size_t ci = 0; ci < 4; ci++) {
      sc.chunk_frames = sc.max_pending_frames = chunks[ci];
      result *r = run_stream(m, &sc, pcm, n, 4000);
      assert_int_equal(r->n_frames, ref->n_frames);
      assert_memory_equal(r->emb, ref->emb, ref->n_frames * d * sizeof(float));
      assert_memory_equal(r->logits, ref->logits,
                          ref->n_frames * v * sizeof(float));
      assert_string_equal(r->text, ref->text);
      result_free(r);
    }
    printf("  d_model %zu, d_ff %d: chunks of 1, 7, 17 and 50 frames give "
           "the same bits\n", d, specs[i].d_ff);
    result_free(ref);
    aural_model_free(m);
  }
  free(pcm);
}

/* Other input rates and channel counts; a pending capacity of one frame
 * still makes progress. */
static void test_rates_and_channels(void **state) {
  (void)state;
  aural_model *m = load_model("prenorm_gelu_rope");
  check_against_plain(m, 44100, 2, 44100 * 2, 1000);
  check_against_plain(m, 8000, 1, 8000 * 2, 1);
  check_against_plain(m, 4000, 3, 4000 * 2, 77);
  check_against_plain(m, 48000, 1, 48000 * 2, 0);
  /* Tiny pending room: computes after every few frames, same bits. */
  size_t n = 22050 * 2;
  float *pcm = make_audio(n, 2, 22050);
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.input_rate_hz = 22050;
  sc.n_channels = 2;
  result *a = run_stream(m, &sc, pcm, n, 0);
  sc.max_pending_frames = 1;
  sc.chunk_frames = 50;
  result *b = run_stream(m, &sc, pcm, n, 0);
  const aural_model_config *c = aural_model_get_config(m);
  assert_same(a, b, (size_t)c->d_model, (size_t)c->vocab_size,
              (size_t)c->fbank.num_mel_bins,
              AURAL_STREAM_EMBEDDINGS | AURAL_STREAM_LOGITS);
  result_free(a);
  result_free(b);
  free(pcm);
  aural_model_free(m);
}

/* Several streams computed in one batch per round equal each alone. */
static void test_batch_equals_alone(void **state) {
  (void)state;
  aural_model *m = load_model("prenorm_gelu_rope");
  const aural_model_config *c = aural_model_get_config(m);
  size_t d = (size_t)c->d_model, v = (size_t)c->vocab_size,
         mels = (size_t)c->fbank.num_mel_bins;
  enum { N = 5 };
  const double rates[N] = {16000, 16000, 44100, 8000, 16000};
  const int chans[N] = {1, 1, 2, 1, 1};
  const size_t lens[N] = {30000, 16160, 80000, 20000, 399};
  const size_t steps[N] = {700, 1, 3000, 123, 50};
  float *pcm[N];
  aural_stream *s[N];
  result *got[N];
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  const unsigned all = AURAL_STREAM_EMBEDDINGS | AURAL_STREAM_LOGITS |
                       AURAL_STREAM_TEXT | AURAL_STREAM_FEATURES;
  for (int i = 0; i < N; i++) {
    pcm[i] = make_audio(lens[i], chans[i], rates[i]);
    sc.outputs = i == 3 ? AURAL_STREAM_FEATURES : all; /* no encoder */
    sc.input_rate_hz = rates[i];
    sc.n_channels = chans[i];
    sc.chunk_frames = i == 1 ? 7 : 50;
    assert_int_equal(aural_stream_create(m, &sc, &s[i], NULL), 0);
    got[i] = calloc(1, sizeof *got[i]);
  }
  aural_batch *b;
  assert_int_equal(aural_batch_create(m, 16, &b, NULL), 0);
  /* Rounds: each stream pushes up to its step, then one batched compute. */
  size_t at[N] = {0};
  int live = N;
  while (live > 0) {
    aural_stream *round[N];
    size_t n_round = 0;
    for (int i = 0; i < N; i++) {
      aural_stream_stats st;
      aural_stream_get_stats(s[i], &st);
      if (st.done) continue;
      if (at[i] < lens[i]) {
        size_t want = lens[i] - at[i] < steps[i] ? lens[i] - at[i] : steps[i];
        size_t taken;
        const float *x = pcm[i] + at[i] * (size_t)chans[i];
        assert_int_equal(aural_stream_push(s[i], x, want, &taken), 0);
        at[i] += taken;
      } else if (!st.ended) {
        assert_int_equal(aural_stream_end(s[i]), 0);
      }
      round[n_round++] = s[i];
    }
    assert_int_equal(aural_stream_compute_batch(b, round, n_round), 0);
    live = 0;
    for (size_t i = 0; i < n_round; i++) {
      int k = 0;
      while (s[k] != round[i]) k++;
      drain(s[k], got[k]);
      aural_stream_stats st;
      aural_stream_get_stats(s[k], &st);
      live += !st.done;
    }
  }
  for (int i = 0; i < N; i++) {
    sc.outputs = i == 3 ? AURAL_STREAM_FEATURES : all;
    sc.input_rate_hz = rates[i];
    sc.n_channels = chans[i];
    sc.chunk_frames = i == 1 ? 7 : 50;
    result *alone = run_stream(m, &sc, pcm[i], lens[i], 0);
    assert_same(got[i], alone, d, v, mels, sc.outputs);
    printf("  stream %d: %zu frames batched == alone\n", i, alone->n_frames);
    result_free(alone);
  }
  /* Refused, computing nothing: a stream twice, a NULL, another model. */
  aural_stream *twice[2] = {s[0], s[0]};
  assert_int_equal(aural_stream_compute_batch(b, twice, 2), AURAL_EINVAL);
  aural_stream *null1[2] = {s[0], NULL};
  assert_int_equal(aural_stream_compute_batch(b, null1, 2), AURAL_EINVAL);
  aural_model *other = load_model("tiny");
  aural_stream *stranger;
  assert_int_equal(aural_stream_create(other, NULL, &stranger, NULL), 0);
  aural_stream *mixed[2] = {s[1], stranger};
  assert_int_equal(aural_stream_compute_batch(b, mixed, 2), AURAL_EINVAL);
  /* The marks of a refused call are cleared: a valid call still works. */
  assert_int_equal(aural_stream_compute_batch(b, s, N), 0);
  aural_stream_destroy(stranger);
  aural_model_free(other);
  aural_batch_destroy(b);
  for (int i = 0; i < N; i++) {
    aural_stream_destroy(s[i]);
    result_free(got[i]);
    free(pcm[i]);
  }
  aural_model_free(m);
}

static void test_errors(void **state) {
  (void)state;
  aural_model *m = load_model("prenorm_gelu_rope");
  aural_model *nohead = load_model("postnorm_relu_sin");
  aural_stream *s = (aural_stream *)1;
  aural_err err = {0};
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.chunk_frames = 0;
  assert_int_equal(aural_stream_create(m, &sc, &s, &err), AURAL_ECONFIG);
  assert_null(s);
  assert_contains(err.msg, "chunk_frames");
  aural_stream_config_default(&sc);
  sc.max_pending_frames = AURAL_STREAM_MAX_FRAMES + 1;
  assert_int_equal(aural_stream_create(m, &sc, &s, &err), AURAL_ECONFIG);
  assert_contains(err.msg, "max_pending_frames");
  /* The encoder's bound on its rows is the stream's too, refused as the
   * stream's field. */
  aural_stream_config_default(&sc);
  sc.encoder_batch_frames = AURAL_ENCODER_MAX_BATCH_FRAMES + 1;
  assert_int_equal(aural_stream_create(m, &sc, &s, &err), AURAL_ECONFIG);
  assert_null(s);
  assert_contains(err.msg, "stream: encoder_batch_frames");
  sc.encoder_batch_frames = 0;
  assert_int_equal(aural_stream_create(m, &sc, &s, &err), AURAL_ECONFIG);
  assert_contains(err.msg, "encoder_batch_frames");
  aural_stream_config_default(&sc);
  sc.outputs = 1u << 9;
  assert_int_equal(aural_stream_create(m, &sc, &s, &err), AURAL_ECONFIG);
  sc.outputs = AURAL_STREAM_TEXT;
  assert_int_equal(aural_stream_create(nohead, &sc, &s, &err), AURAL_ECONFIG);
  assert_contains(err.msg, "CTC head");
  aural_stream_config_default(&sc);
  sc.input_rate_hz = 100;
  assert_int_equal(aural_stream_create(m, &sc, &s, &err), AURAL_ERATE);
  sc.input_rate_hz = NAN;
  assert_int_equal(aural_stream_create(m, &sc, &s, &err), AURAL_ERATE);
  assert_null(s);
  aural_stream_config_default(&sc);
  sc.n_channels = 0;
  assert_int_equal(aural_stream_create(m, &sc, &s, &err), AURAL_ECHANNELS);
  aural_stream_config_default(&sc);
  sc.nonfinite = (aural_nonfinite_policy)2;
  assert_int_equal(aural_stream_create(m, &sc, &s, &err), AURAL_ECONFIG);
  assert_contains(err.msg, "nonfinite");
  aural_stream_destroy(NULL);

  /* A model without a head: embeddings only by default. */
  assert_int_equal(aural_stream_create(nohead, NULL, &s, &err), 0);
  aural_stream_info in;
  aural_stream_get_info(s, &in);
  assert_int_equal(in.outputs, AURAL_STREAM_EMBEDDINGS);
  assert_int_equal(in.text_max_bytes, 0);
  aural_stream_destroy(s);

  assert_int_equal(aural_stream_create(m, NULL, &s, &err), 0);
  aural_stream_get_info(s, &in);
  float *pcm = make_audio(16000, 1, 16000);
  size_t taken = 99;
  assert_int_equal(aural_stream_push(s, pcm, 10, NULL), AURAL_EINVAL);
  assert_int_equal(aural_stream_push(s, NULL, 10, &taken), AURAL_EINVAL);
  assert_int_equal(taken, 0);
  pcm[5000] = NAN;
  assert_int_equal(aural_stream_push(s, pcm + 4000, 2000, &taken),
                   AURAL_ENONFINITE);
  assert_int_equal(taken, 0);
  pcm[5000] = 0;
  assert_int_equal(aural_stream_push(s, pcm, 16000, &taken), 0);
  assert_int_equal(taken, 16000);
  aural_stream_stats st;
  aural_stream_get_stats(s, &st);
  assert_int_equal(st.n_input_frames, 16000);
  assert_int_equal(st.n_feature_frames, 98);
  assert_int_equal(st.n_pending_frames, 98);
  assert_int_equal(aural_stream_compute(s), 0);
  aural_stream_get_stats(s, &st);
  assert_int_equal(st.n_encoded_frames, 98);
  assert_int_equal(st.n_ready_frames, 98);
  assert_false(st.ended);
  /* Buffers too small, or for outputs the stream lacks: nothing pulled. */
  size_t C = in.chunk_frames;
  float *emb = malloc(C * (size_t)in.d_model * sizeof *emb);
  float feats[50 * 80];
  char text[8];
  aural_chunk ch = {.emb = emb, .max_frames = C - 1};
  assert_int_equal(aural_stream_pull(s, &ch), AURAL_EINVAL);
  ch = (aural_chunk){.text = text, .text_cap = sizeof text};
  assert_int_equal(aural_stream_pull(s, &ch), AURAL_EINVAL);
  ch = (aural_chunk){.features = feats, .max_frames = C};
  assert_int_equal(aural_stream_pull(s, &ch), AURAL_EINVAL);
  assert_int_equal(aural_stream_pull(s, NULL), AURAL_EINVAL);
  ch = (aural_chunk){.emb = emb, .max_frames = C};
  assert_int_equal(aural_stream_pull(s, &ch), 1);
  assert_int_equal(ch.seq, 0);
  /* After end: no more input, no second end. */
  assert_int_equal(aural_stream_end(s), 0);
  assert_int_equal(aural_stream_end(s), AURAL_ESTATE);
  assert_int_equal(aural_stream_push(s, pcm, 10, &taken), AURAL_ESTATE);
  assert_int_equal(aural_stream_input_room(s), 0);
  free(emb);
  free(pcm);
  aural_stream_destroy(s);
  aural_model_free(nohead);
  aural_model_free(m);
}

/* NULL where a caller must give something is AURAL_EINVAL with err
 * filled, never a crash (STYLE.md: nothing a caller can cause crashes
 * lib/). */
static void test_null_arguments(void **state) {
  (void)state;
  aural_model *m = load_model("prenorm_gelu_rope");
  aural_err err = {0};
  aural_stream *s = (aural_stream *)1;
  assert_int_equal(aural_stream_create(NULL, NULL, &s, &err), AURAL_EINVAL);
  assert_contains(err.msg, "stream: no model");
  err = (aural_err){0};
  assert_int_equal(aural_stream_create(m, NULL, NULL, &err), AURAL_EINVAL);
  assert_contains(err.msg, "stream: no out");
  aural_encoder *enc = (aural_encoder *)1;
  assert_int_equal(aural_encoder_create(NULL, NULL, &enc, &err),
                   AURAL_EINVAL);
  assert_contains(err.msg, "encoder: no model");
  assert_int_equal(aural_encoder_create(m, NULL, NULL, &err), AURAL_EINVAL);
  aural_batch *b = (aural_batch *)1;
  assert_int_equal(aural_batch_create(NULL, 8, &b, &err), AURAL_EINVAL);
  assert_contains(err.msg, "batch: no model");
  assert_int_equal(aural_batch_create(m, 8, NULL, &err), AURAL_EINVAL);
  aural_model *m2 = (aural_model *)1;
  err = (aural_err){0};
  assert_int_equal(aural_model_load(NULL, NULL, &m2, &err), AURAL_EINVAL);
  assert_int_equal(err.code, AURAL_EINVAL);
  assert_contains(err.msg, "no path given for a model file");

  assert_int_equal(aural_stream_create(m, NULL, &s, &err), 0);
  assert_int_equal(aural_batch_create(m, 8, &b, &err), 0);
  assert_int_equal(aural_stream_compute_batch(b, NULL, 1), AURAL_EINVAL);
  assert_int_equal(aural_stream_compute_batch(NULL, &s, 1), AURAL_EINVAL);
  assert_int_equal(aural_stream_compute_batch(b, NULL, 0), 0);
  assert_int_equal(aural_encoder_forward_batch(NULL, NULL, 0), AURAL_EINVAL);
  assert_int_equal(aural_encoder_forward_batch(b, NULL, 1), AURAL_EINVAL);
  assert_int_equal(aural_encoder_forward_batch(b, NULL, 0), 0);
  assert_int_equal(aural_stream_compute_batch(b, &s, 1), 0);
  aural_batch_destroy(b);
  aural_stream_destroy(s);
  aural_model_free(m);
}

/* Abort drops what is not computed yet; what is comes out, then a final
 * chunk. */
static void test_abort(void **state) {
  (void)state;
  aural_model *m = load_model("prenorm_gelu_rope");
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.chunk_frames = 30;
  float *pcm = make_audio(32000, 1, 16000);
  result *whole = run_stream(m, &sc, pcm, 32000, 0);
  aural_stream *s;
  assert_int_equal(aural_stream_create(m, &sc, &s, NULL), 0);
  result *r = calloc(1, sizeof *r);
  size_t taken;
  /* 400 + 69 * 160 samples: 70 frames computed, 2 chunks and 10 rows. */
  assert_int_equal(aural_stream_push(s, pcm, 400 + 69 * 160, &taken), 0);
  assert_int_equal(aural_stream_compute(s), 0);
  assert_int_equal(aural_stream_push(s, pcm + taken, 8000, &taken), 0);
  drain(s, r);
  assert_int_equal(r->n_chunks, 2);
  assert_int_equal(aural_stream_abort(s), 0);
  assert_int_equal(aural_stream_abort(s), AURAL_ESTATE);
  assert_int_equal(aural_stream_end(s), AURAL_ESTATE);
  assert_int_equal(aural_stream_push(s, pcm, 10, &taken), AURAL_ESTATE);
  assert_int_equal(aural_stream_compute(s), 0);
  drain(s, r);
  assert_int_equal(r->n_chunks, 3);
  assert_int_equal(r->chunk_n[2], 10);
  assert_true(r->final_seen);
  size_t d = (size_t)aural_model_get_config(m)->d_model;
  assert_memory_equal(r->emb, whole->emb, 70 * d * sizeof(float));
  aural_stream_stats st;
  aural_stream_get_stats(s, &st);
  assert_true(st.done);
  assert_int_equal(st.n_pending_frames, 0);
  result_free(r);
  result_free(whole);
  aural_stream_destroy(s);
  free(pcm);
  aural_model_free(m);
}

/* A model whose values are all finite can still overflow on some input:
 * here its input_scale is 1e300, so that digital silence makes finite
 * features and any sound infinite ones. Its outputs used to come out NaN,
 * and the CLI printed no text or one word over and over, exit 0. A
 * stream now fails with AURAL_EOVERFLOW at its first such frame, the
 * frames before it come out as its last chunks, and a stream batched
 * beside it is computed as if alone. */
static void test_overflow_fails_only_its_stream(void **state) {
  (void)state;
  size_t size;
  char *bytes = test_loud_model(&size);
  aural_model *m;
  aural_err err = {0};
  if (aural_model_load_buffer(bytes, size, "loud", NULL, &m, &err) != 0)
    fail_msg("%s", err.msg);
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.chunk_frames = 30;
  /* 1 s of silence, then sound (loud) or more silence (quiet). */
  enum { N = 32000, SILENT = 16000 };
  float *loud = make_audio(N, 1, 16000), *quiet = calloc(N, sizeof *quiet);
  memset(loud, 0, SILENT * sizeof *loud);
  result *alone = run_stream(m, &sc, quiet, N, 0);
  size_t d = (size_t)aural_model_get_config(m)->d_model;

  /* Alone: the frames of silence, then the failure. */
  aural_stream *s;
  assert_int_equal(aural_stream_create(m, &sc, &s, NULL), 0);
  result *r = calloc(1, sizeof *r);
  size_t taken;
  int rc = 0;
  for (size_t pos = 0; pos < N && rc == 0; pos += taken) {
    assert_int_equal(aural_stream_push(s, loud + pos, N - pos, &taken), 0);
    rc = aural_stream_compute(s);
    drain(s, r);
  }
  assert_int_equal(rc, AURAL_EOVERFLOW);
  drain(s, r);
  assert_true(r->final_seen);
  aural_stream_stats st;
  aural_stream_get_stats(s, &st);
  assert_int_equal(st.error, AURAL_EOVERFLOW);
  assert_true(st.done);
  /* The last frame of silence alone is frame 97; the windows after it
   * hold sound. */
  assert_true(r->n_frames >= 90 && r->n_frames <= 98);
  for (size_t i = 0; i < r->n_frames * d; i++) assert_true(isfinite(r->emb[i]));
  assert_memory_equal(r->emb, alone->emb, r->n_frames * d * sizeof(float));
  assert_int_equal(aural_stream_compute(s), AURAL_ESTATE);
  assert_int_equal(aural_stream_push(s, quiet, 10, &taken), AURAL_ESTATE);
  printf("  alone: %zu frames of silence out, then AURAL_EOVERFLOW\n",
         r->n_frames);
  result_free(r);
  aural_stream_destroy(s);

  /* Features alone (no encoder): the same, from the same frame. */
  aural_stream_config fc = sc;
  fc.outputs = AURAL_STREAM_FEATURES;
  assert_int_equal(aural_stream_create(m, &fc, &s, NULL), 0);
  r = calloc(1, sizeof *r);
  rc = 0;
  for (size_t pos = 0; pos < N && rc == 0; pos += taken) {
    assert_int_equal(aural_stream_push(s, loud + pos, N - pos, &taken), 0);
    rc = aural_stream_compute(s);
    drain(s, r);
  }
  assert_int_equal(rc, AURAL_EOVERFLOW);
  drain(s, r);
  assert_true(r->final_seen);
  assert_int_equal(r->n_frames, 98);
  for (size_t i = 0; i < r->n_frames * 80; i++)
    assert_true(isfinite(r->feats[i]));
  result_free(r);
  aural_stream_destroy(s);

  /* Batched with a quiet stream: the batch succeeds, the loud stream fails
   * alone, the quiet one gets every frame it gets alone. */
  aural_batch *b;
  assert_int_equal(aural_batch_create(m, 256, &b, NULL), 0);
  aural_stream *two[2];
  result *rs[2];
  for (int i = 0; i < 2; i++) {
    assert_int_equal(aural_stream_create(m, &sc, &two[i], NULL), 0);
    rs[i] = calloc(1, sizeof *rs[i]);
  }
  size_t pos[2] = {0, 0};
  while (pos[1] < N) {
    aural_stream *live[2];
    size_t n_live = 0;
    for (int i = 0; i < 2; i++) {
      aural_stream_get_stats(two[i], &st);
      if (st.error != 0) continue;
      const float *pcm = i == 0 ? loud : quiet;
      assert_int_equal(aural_stream_push(two[i], pcm + pos[i], N - pos[i],
                                         &taken), 0);
      pos[i] += taken;
      live[n_live++] = two[i];
    }
    assert_int_equal(aural_stream_compute_batch(b, live, n_live), 0);
    for (int i = 0; i < 2; i++) drain(two[i], rs[i]);
  }
  assert_int_equal(aural_stream_end(two[1]), 0);
  assert_int_equal(aural_stream_compute_batch(b, &two[1], 1), 0);
  drain(two[1], rs[1]);
  aural_stream_get_stats(two[0], &st);
  assert_int_equal(st.error, AURAL_EOVERFLOW);
  assert_true(rs[0]->final_seen && rs[0]->n_frames < 100);
  aural_stream_get_stats(two[1], &st);
  assert_int_equal(st.error, 0);
  assert_true(rs[1]->final_seen);
  assert_int_equal(rs[1]->n_frames, alone->n_frames);
  assert_memory_equal(rs[1]->emb, alone->emb,
                      alone->n_frames * d * sizeof(float));
  printf("  batched: the loud stream failed after %zu frames, the quiet "
         "one has all %zu\n", rs[0]->n_frames, rs[1]->n_frames);
  for (int i = 0; i < 2; i++) {
    result_free(rs[i]);
    aural_stream_destroy(two[i]);
  }
  aural_batch_destroy(b);
  result_free(alone);
  free(loud);
  free(quiet);
  free(bytes);
  aural_model_free(m);
}

/* Bytes in use on the heap (glibc). */
static size_t heap_in_use(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

/* Push, compute (alone and batched), pull and end leave the heap as it
 * was. At the model rate: libsoxr, behind the resampler, grows its own
 * buffers in its first calls and in its flush, which is not this
 * library's to change. */
static void test_no_allocation_after_create(void **state) {
  (void)state;
  aural_model *m = load_model("prenorm_gelu_rope");
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.outputs = AURAL_STREAM_EMBEDDINGS | AURAL_STREAM_LOGITS |
               AURAL_STREAM_TEXT | AURAL_STREAM_FEATURES;
  size_t n = 16000 * 3;
  float *pcm = make_audio(n, 1, 16000);
  aural_stream *s;
  assert_int_equal(aural_stream_create(m, &sc, &s, NULL), 0);
  aural_stream_info in;
  aural_stream_get_info(s, &in);
  size_t C = in.chunk_frames;
  float *emb = malloc(C * (size_t)in.d_model * sizeof(float));
  float *lg = malloc(C * (size_t)in.vocab_size * sizeof(float));
  float *ft = malloc(C * (size_t)in.n_mels * sizeof(float));
  char *text = malloc(in.text_max_bytes);
  aural_chunk ch = {.emb = emb, .logits = lg, .features = ft,
                    .max_frames = C, .text = text,
                    .text_cap = in.text_max_bytes};
  aural_batch *b;
  assert_int_equal(aural_batch_create(m, 64, &b, NULL), 0);
  size_t taken, at = 0, chunks = 0, before = heap_in_use();
  while (at < n) {
    size_t want = n - at < 1000 ? n - at : 1000;
    assert_int_equal(aural_stream_push(s, pcm + at, want, &taken), 0);
    at += taken;
    assert_int_equal(at % 2 ? aural_stream_compute(s)
                            : aural_stream_compute_batch(b, &s, 1), 0);
    while (aural_stream_pull(s, &ch) == 1) chunks++;
  }
  assert_int_equal(aural_stream_end(s), 0);
  assert_int_equal(aural_stream_compute(s), 0);
  while (aural_stream_pull(s, &ch) == 1) chunks++;
  assert_true(ch.final);
  assert_int_equal(heap_in_use(), before);
  assert_true(chunks > 4);
  aural_batch_destroy(b);
  aural_stream_destroy(s);
  free(emb);
  free(lg);
  free(ft);
  free(text);
  free(pcm);
  aural_model_free(m);
}

/* Fails naming call when it made a heap allocation on this thread (any,
 * freed or not: tests/alloc_calls.c counts the calls). */
#define NO_ALLOC(call)                                                     \
  do {                                                                     \
    unsigned long before_ = test_alloc_calls();                            \
    call;                                                                  \
    unsigned long n_ = test_alloc_calls() - before_;                       \
    if (n_ != 0) fail_msg("%s made %lu heap allocations", #call, n_);      \
  } while (0)

/* One stream, every call its header calls real-time-safe, through a
 * whole stream, an end, an abort and a reset: not one allocation, even
 * one freed before the call returns. When the input is resampled, libsoxr
 * grows its own buffers in push, end and reset (aural/stream.h); the
 * other calls are checked then. */
static void stream_calls_allocate_nothing(const aural_model *m,
                                          aural_stream_config sc,
                                          const float *pcm, size_t n) {
  aural_stream *s;
  aural_err err = {0};
  if (aural_stream_create(m, &sc, &s, &err) != 0) fail_msg("%s", err.msg);
  aural_stream_info in;
  aural_stream_get_info(s, &in);
  size_t C = in.chunk_frames, ch_n = (size_t)sc.n_channels;
  bool resampled =
      sc.input_rate_hz != 0 && sc.input_rate_hz != in.model_rate_hz;
  aural_chunk ch = {.max_frames = C};
  if (in.outputs & AURAL_STREAM_EMBEDDINGS)
    ch.emb = malloc(C * (size_t)in.d_model * sizeof(float));
  if (in.outputs & AURAL_STREAM_LOGITS)
    ch.logits = malloc(C * (size_t)in.vocab_size * sizeof(float));
  if (in.outputs & AURAL_STREAM_FEATURES)
    ch.features = malloc(C * (size_t)in.n_mels * sizeof(float));
  if (in.outputs & AURAL_STREAM_TEXT) {
    ch.text = malloc(in.text_max_bytes);
    ch.text_cap = in.text_max_bytes;
  }
  if (in.outputs & AURAL_STREAM_WORDS) {
    ch.words = malloc(in.words_max * sizeof *ch.words);
    ch.words_cap = in.words_max;
    ch.segments = malloc(in.segments_max * sizeof *ch.segments);
    ch.segments_cap = in.segments_max;
  }
  aural_batch *b;
  assert_int_equal(aural_batch_create(m, 64, &b, NULL), 0);
  for (int round = 0; round < 2; round++) {
    size_t at = 0, chunks = 0, taken = 0;
    int rc = 0;
    size_t room = 0, n_ready = 0;
    bool final = false;
    aural_stream_stats st;
    while (at < n) {
      size_t want = n - at < 777 ? n - at : 777;
      NO_ALLOC(room = aural_stream_input_room(s));
      assert_true(room > 0);
      if (resampled)
        rc = aural_stream_push(s, pcm + at * ch_n, want, &taken);
      else
        NO_ALLOC(rc = aural_stream_push(s, pcm + at * ch_n, want, &taken));
      assert_int_equal(rc, 0);
      at += taken;
      NO_ALLOC(rc = at % 2 ? aural_stream_compute(s)
                           : aural_stream_compute_batch(b, &s, 1));
      assert_int_equal(rc, 0);
      NO_ALLOC(aural_stream_get_stats(s, &st));
      for (;;) {
        NO_ALLOC(rc = aural_stream_ready(s, &n_ready, &final));
        if (rc == 0) break;
        NO_ALLOC(rc = aural_stream_pull(s, &ch));
        assert_int_equal(rc, 1);
        chunks++;
      }
    }
    if (round == 0) {
      if (resampled) rc = aural_stream_end(s);
      else NO_ALLOC(rc = aural_stream_end(s));
    } else {
      NO_ALLOC(rc = aural_stream_abort(s));
    }
    assert_int_equal(rc, 0);
    NO_ALLOC(rc = aural_stream_compute(s));
    assert_int_equal(rc, 0);
    while (aural_stream_ready(s, &n_ready, &final) == 1)
      NO_ALLOC(chunks += (size_t)aural_stream_pull(s, &ch));
    assert_true(ch.final);
    assert_true(chunks > 4);
    NO_ALLOC(aural_stream_get_stats(s, &st));
    assert_true(st.done);
    if (resampled) rc = aural_stream_reset(s);
    else NO_ALLOC(rc = aural_stream_reset(s));
    assert_int_equal(rc, 0);
  }
  aural_batch_destroy(b);
  aural_stream_destroy(s);
  free(ch.emb);
  free(ch.logits);
  free(ch.features);
  free(ch.text);
  free(ch.words);
  free(ch.segments);
}

static void test_real_time_calls_allocate_nothing(void **state) {
  (void)state;
  aural_model *m = load_model("prenorm_gelu_rope");
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.outputs = AURAL_STREAM_EMBEDDINGS | AURAL_STREAM_LOGITS |
               AURAL_STREAM_TEXT | AURAL_STREAM_FEATURES;
  size_t n = 16000 * 3;
  float *pcm = make_audio(n, 1, 16000);
  stream_calls_allocate_nothing(m, sc, pcm, n);
  free(pcm);
  /* 44.1 kHz stereo. */
  sc.input_rate_hz = 44100;
  sc.n_channels = 2;
  n = 44100 * 3;
  pcm = make_audio(n, 2, 44100);
  stream_calls_allocate_nothing(m, sc, pcm, n);
  free(pcm);
  aural_model_free(m);

  /* Words: the bundled model, its lexicon and LM. */
  aural_err err = {0};
  const char *path = getenv("AURAL_DEFAULT_MODEL");
  assert_non_null(path);
  if (aural_model_load(path, NULL, &m, &err) != 0) fail_msg("%s", err.msg);
  aural_lexicon *lex;
  aural_lm *lm;
  if (aural_lexicon_load(test_data_path("words/sample.lexicon.txt"), m, &lex,
                         &err) < 0 ||
      aural_lm_load(test_data_path("words/sample.lm.arpa"), lex, &lm, &err) <
          0)
    fail_msg("%s", err.msg);
  aural_audiofile *af;
  if (aural_audiofile_open(test_data_path("../../models/sample.flac"), &af,
                           &err) < 0)
    fail_msg("%s", err.msg);
  aural_audiofile_info ai;
  aural_audiofile_get_info(af, &ai);
  pcm = malloc((size_t)ai.n_frames * (size_t)ai.n_channels * sizeof *pcm);
  assert_int_equal(aural_audiofile_read(af, pcm, (size_t)ai.n_frames, &n,
                                        &err), 0);
  aural_audiofile_close(af);
  aural_stream_config_default(&sc);
  sc.input_rate_hz = ai.rate_hz;
  sc.n_channels = ai.n_channels;
  sc.outputs = AURAL_STREAM_WORDS | AURAL_STREAM_TEXT;
  sc.lexicon = lex;
  sc.lm = lm;
  stream_calls_allocate_nothing(m, sc, pcm, n);
  free(pcm);
  aural_lm_destroy(lm);
  aural_lexicon_destroy(lex);
  aural_model_free(m);
}

/* One model, lexicon and LM shared by streams on several threads at once,
 * each thread with streams, a batch and a chunk size of its own, created
 * there (FFTW plans, libsoxr, the encoder state and the word decoder):
 * every thread's chunks (embeddings, text, words with their frames and
 * confidences) are bit-identical to the same streams run alone. Run under
 * ThreadSanitizer in CI. */
enum { SHARE_THREADS = 3, SHARE_STREAMS = 2, SHARE_OUT = 1 << 15 };

typedef struct share_job {
  const aural_model *m;
  const aural_lexicon *lex;
  const aural_lm *lm;
  const float *pcm;
  size_t n;
  double rate_hz;
  size_t chunk, step;
  /* Out: per stream, the words and text as text, and a hash of the
   * embeddings' bits; or what failed. */
  char out[SHARE_STREAMS][SHARE_OUT];
  uint64_t emb_hash[SHARE_STREAMS];
  char failed[sizeof ((aural_err *)0)->msg + 16];
} share_job;

static void share_append(char *out, const char *fmt, ...) {
  size_t len = strlen(out);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out + len, SHARE_OUT - len, fmt, ap);
  va_end(ap);
}

/* No cmocka asserts here: they are not for threads. */
static void *share_run(void *arg) {
  share_job *j = arg;
  aural_stream *s[SHARE_STREAMS] = {NULL};
  aural_batch *b = NULL;
  aural_word *words = NULL;
  uint32_t *segs = NULL;
  float *emb = NULL;
  char *text = NULL;
  aural_err err = {0};
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.input_rate_hz = j->rate_hz;
  sc.outputs = AURAL_STREAM_EMBEDDINGS | AURAL_STREAM_TEXT |
               AURAL_STREAM_WORDS;
  sc.chunk_frames = j->chunk;
  sc.lexicon = j->lex;
  sc.lm = j->lm;
  for (int k = 0; k < SHARE_STREAMS; k++)
    if (aural_stream_create(j->m, &sc, &s[k], &err) != 0) {
      snprintf(j->failed, sizeof j->failed, "create: %s", err.msg);
      goto done;
    }
  if (aural_batch_create(j->m, 128, &b, &err) != 0) {
    snprintf(j->failed, sizeof j->failed, "batch: %s", err.msg);
    goto done;
  }
  aural_stream_info in;
  aural_stream_get_info(s[0], &in);
  words = malloc(in.words_max * sizeof *words);
  segs = malloc(in.segments_max * sizeof *segs);
  emb = malloc(in.chunk_frames * (size_t)in.d_model * sizeof *emb);
  text = malloc(in.text_max_bytes);
  if (!words || !segs || !emb || !text) {
    snprintf(j->failed, sizeof j->failed, "out of memory");
    goto done;
  }
  for (int k = 0; k < SHARE_STREAMS; k++) {
    j->out[k][0] = '\0';
    j->emb_hash[k] = 1469598103934665603ull;
  }
  /* Stream k starts k steps late, so the batch has uneven rows. */
  size_t at[SHARE_STREAMS] = {0};
  bool all_done = false;
  for (int round = 0; !all_done; round++) {
    for (int k = 0; k < SHARE_STREAMS; k++) {
      if (round < k) continue;
      if (at[k] < j->n) {
        size_t want = j->n - at[k] < j->step ? j->n - at[k] : j->step, taken;
        if (aural_stream_push(s[k], j->pcm + at[k], want, &taken) != 0) {
          snprintf(j->failed, sizeof j->failed, "push");
          goto done;
        }
        at[k] += taken;
      } else {
        aural_stream_stats st;
        aural_stream_get_stats(s[k], &st);
        if (!st.ended) aural_stream_end(s[k]);
      }
    }
    if (aural_stream_compute_batch(b, s, SHARE_STREAMS) != 0) {
      snprintf(j->failed, sizeof j->failed, "compute_batch");
      goto done;
    }
    all_done = true;
    for (int k = 0; k < SHARE_STREAMS; k++) {
      aural_chunk ch = {.emb = emb, .max_frames = in.chunk_frames,
                        .text = text, .text_cap = in.text_max_bytes,
                        .words = words, .words_cap = in.words_max,
                        .segments = segs, .segments_cap = in.segments_max};
      int rc;
      while ((rc = aural_stream_pull(s[k], &ch)) == 1) {
        share_append(j->out[k], "[%llu %s|", (unsigned long long)ch.seq,
                     text);
        for (size_t w = 0; w < ch.n_final_words + ch.n_partial_words; w++)
          share_append(j->out[k], " %s %llu %llu %a", words[w].text,
                       (unsigned long long)words[w].start_frame,
                       (unsigned long long)words[w].end_frame,
                       (double)words[w].confidence);
        share_append(j->out[k], "]");
        const unsigned char *bytes = (const unsigned char *)emb;
        for (size_t i = 0; i < ch.n_frames * (size_t)in.d_model * 4; i++)
          j->emb_hash[k] = (j->emb_hash[k] ^ bytes[i]) * 1099511628211ull;
      }
      if (rc < 0) {
        snprintf(j->failed, sizeof j->failed, "pull: %d", rc);
        goto done;
      }
      aural_stream_stats st;
      aural_stream_get_stats(s[k], &st);
      if (!st.done) all_done = false;
    }
  }
done:
  for (int k = 0; k < SHARE_STREAMS; k++) aural_stream_destroy(s[k]);
  aural_batch_destroy(b);
  free(words);
  free(segs);
  free(emb);
  free(text);
  return NULL;
}

/* The bundled model with the sample lexicon and LM, and the bundled
 * recording opened (*ai its info), for the tests of words. */
static void open_words_sample(aural_model **m, aural_lexicon **lex,
                              aural_lm **lm, aural_audiofile **af,
                              aural_audiofile_info *ai) {
  aural_err err = {0};
  const char *path = getenv("AURAL_DEFAULT_MODEL");
  assert_non_null(path);
  if (aural_model_load(path, NULL, m, &err) != 0) fail_msg("%s", err.msg);
  if (aural_lexicon_load(test_data_path("words/sample.lexicon.txt"), *m, lex,
                         &err) < 0 ||
      aural_lm_load(test_data_path("words/sample.lm.arpa"), *lex, lm, &err) <
          0)
    fail_msg("%s", err.msg);
  if (aural_audiofile_open(test_data_path("../../models/sample.flac"), af,
                           &err) < 0)
    fail_msg("%s", err.msg);
  aural_audiofile_get_info(*af, ai);
}

static void test_threads_share_model(void **state) {
  (void)state;
  aural_model *m;
  aural_lexicon *lex;
  aural_lm *lm;
  aural_audiofile *af;
  aural_audiofile_info ai;
  open_words_sample(&m, &lex, &lm, &af, &ai);
  aural_err err = {0};
  assert_int_equal(ai.n_channels, 1);
  /* The first 2.5 s: "the quick brown fox", ended by end of stream. */
  size_t n = (size_t)(ai.rate_hz * 2.5);
  float *pcm = malloc(n * sizeof *pcm);
  assert_int_equal(aural_audiofile_read(af, pcm, n, &n, &err), 0);
  aural_audiofile_close(af);
  const size_t chunks[SHARE_THREADS] = {50, 7, 32},
               steps[SHARE_THREADS] = {2205, 441, 1000};
  share_job *jobs = calloc(SHARE_THREADS, sizeof *jobs);
  share_job *alone = calloc(1, sizeof *alone);
  for (int t = 0; t < SHARE_THREADS; t++)
    jobs[t] = (share_job){.m = m, .lex = lex, .lm = lm, .pcm = pcm, .n = n,
                          .rate_hz = ai.rate_hz, .chunk = chunks[t],
                          .step = steps[t]};
  pthread_t th[SHARE_THREADS];
  for (int t = 0; t < SHARE_THREADS; t++)
    assert_int_equal(pthread_create(&th[t], NULL, share_run, &jobs[t]), 0);
  for (int t = 0; t < SHARE_THREADS; t++)
    assert_int_equal(pthread_join(th[t], NULL), 0);
  for (int t = 0; t < SHARE_THREADS; t++) {
    if (jobs[t].failed[0] != '\0')
      fail_msg("thread %d: %s", t, jobs[t].failed);
    *alone = jobs[t];
    share_run(alone);
    if (alone->failed[0] != '\0') fail_msg("alone: %s", alone->failed);
    if (t == 0) print_message("    %.160s\n", alone->out[0]);
    assert_non_null(strstr(alone->out[0], " fox "));
    for (int k = 0; k < SHARE_STREAMS; k++) {
      assert_string_equal(jobs[t].out[k], alone->out[k]);
      assert_int_equal(jobs[t].emb_hash[k], alone->emb_hash[k]);
    }
  }
  free(alone);
  free(jobs);
  free(pcm);
  aural_lm_destroy(lm);
  aural_lexicon_destroy(lex);
  aural_model_free(m);
}

/* Words: the finals (words, frames, confidences) of the bundled model on
 * the bundled sample do not depend on chunk size or push size, and a
 * stream asking words needs a lexicon and buffers big enough. */
static char *stream_words(const aural_model *m, const aural_lexicon *lex,
                          const aural_lm *lm, const float *pcm, size_t n,
                          double rate, size_t chunk, size_t step) {
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.input_rate_hz = rate;
  sc.outputs = AURAL_STREAM_WORDS;
  sc.chunk_frames = chunk;
  sc.lexicon = lex;
  sc.lm = lm;
  aural_stream *s;
  aural_err err;
  assert_int_equal(aural_stream_create(m, &sc, &s, &err), 0);
  aural_stream_info in;
  aural_stream_get_info(s, &in);
  aural_word *words = malloc(in.words_max * sizeof *words);
  uint32_t *segs = malloc(in.segments_max * sizeof *segs);
  size_t cap = 1 << 16, len = 0;
  char *out = calloc(1, cap);
  for (size_t at = 0;;) {
    if (at < n) {
      size_t k = n - at < step ? n - at : step, taken;
      assert_int_equal(aural_stream_push(s, pcm + at, k, &taken), 0);
      at += taken;
    } else {
      assert_int_equal(aural_stream_end(s), 0);
    }
    assert_int_equal(aural_stream_compute(s), 0);
    aural_chunk ch = {.words = words, .words_cap = in.words_max,
                      .segments = segs, .segments_cap = in.segments_max};
    int rc;
    bool final = false;
    while ((rc = aural_stream_pull(s, &ch)) == 1) {
      assert_true(ch.n_final_words + ch.n_partial_words <= in.words_max);
      size_t w = 0;
      for (size_t g = 0; g < ch.n_segments; g++) {
        len += (size_t)snprintf(out + len, cap - len, "|");
        for (uint32_t i = 0; i < segs[g]; i++, w++)
          len += (size_t)snprintf(
              out + len, cap - len, " %s %llu %llu %a", words[w].text,
              (unsigned long long)words[w].start_frame,
              (unsigned long long)words[w].end_frame,
              (double)words[w].confidence);
      }
      assert_int_equal(w, ch.n_final_words);
      final = ch.final;
    }
    assert_int_equal(rc, 0);
    if (final) break;
  }
  /* Buffers one word short are refused. */
  aural_chunk small = {.words = words, .words_cap = in.words_max - 1,
                       .segments = segs, .segments_cap = in.segments_max};
  assert_int_equal(aural_stream_pull(s, &small), AURAL_EINVAL);
  free(words);
  free(segs);
  aural_stream_destroy(s);
  return out;
}

static void test_words(void **state) {
  (void)state;
  aural_model *m;
  aural_lexicon *lex;
  aural_lm *lm;
  aural_audiofile *af;
  aural_audiofile_info ai;
  open_words_sample(&m, &lex, &lm, &af, &ai);
  aural_err err = {0};
  float *pcm = malloc((size_t)ai.n_frames * sizeof *pcm);
  size_t n = 0;
  assert_int_equal(
      aural_audiofile_read(af, pcm, (size_t)ai.n_frames, &n, &err), 0);
  aural_audiofile_close(af);
  char *want = stream_words(m, lex, lm, pcm, n, ai.rate_hz, 50, n);
  printf("  finals:%.200s\n", want);
  assert_non_null(strstr(want, " quick "));
  const size_t chunks[] = {1, 7, 50, 50}, steps[] = {4097, 1000, 1, 160};
  for (size_t i = 0; i < 4; i++) {
    char *got = stream_words(m, lex, lm, pcm, n, ai.rate_hz, chunks[i],
                             steps[i]);
    if (strcmp(got, want) != 0)
      fail_msg("chunks of %zu, pushes of %zu: finals differ:\n%s\n%s",
               chunks[i], steps[i], got, want);
    free(got);
  }
  /* Words without a lexicon, or from a model without a head. */
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.outputs = AURAL_STREAM_WORDS;
  aural_stream *s;
  assert_int_equal(aural_stream_create(m, &sc, &s, &err), AURAL_ECONFIG);
  assert_non_null(strstr(err.msg, "lexicon"));
  aural_model *tiny = load_model("tiny");
  sc.lexicon = lex;
  assert_int_equal(aural_stream_create(tiny, &sc, &s, &err), AURAL_ECONFIG);
  aural_model_free(tiny);
  free(want);
  free(pcm);
  aural_lm_destroy(lm);
  aural_lexicon_destroy(lex);
  aural_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_invariance),
      cmocka_unit_test(test_chunk_boundaries),
      cmocka_unit_test(test_resume_from_chunk),
      cmocka_unit_test(test_chunk_size_odd_shapes),
      cmocka_unit_test(test_rates_and_channels),
      cmocka_unit_test(test_batch_equals_alone),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_abort),
      cmocka_unit_test(test_overflow_fails_only_its_stream),
      cmocka_unit_test(test_no_allocation_after_create),
      cmocka_unit_test(test_real_time_calls_allocate_nothing),
      cmocka_unit_test(test_words),
      cmocka_unit_test(test_threads_share_model),
  };
  test_select_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
