/*
 * One stream's pipeline: frontend -> pending features -> encoder ->
 * computed rows -> chunks (DESIGN.md §3).
 *
 *   push:    pcm --frontend--> pend (pend_cap, n_mels)
 *   compute: pend --encoder--> out_* rows (out_cap = C + pend_cap)
 *   pull:    C rows of out_* (or the final rest) --> the caller's chunk
 *
 * Every buffer is sized at create. What keeps push from overflowing `pend`
 * is a bound on what the frontend can still produce: after x input frames
 * the resampler has given at most floor(x * ratio) + SLACK model-rate
 * samples in all, flush included, and every complete window is a frame at
 * once. Push takes only input whose worst case fits in the room left, so
 * even the flush at end always fits. The resampler holds back up to
 * HOLD_S of output, which that bound counts against the room although it
 * has not come out yet; `pend` has that many frames beyond
 * max_pending_frames, so that an emptied stream always takes input.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aural/stream.h"
#include "internal.h"

#define SLACK 16    /* model-rate samples soxr may give beyond x * ratio */
#define HOLD_S 0.25 /* output the resampler may hold back, seconds */

struct aural_stream {
  const aural_model *model;
  aural_frontend *fe;
  aural_encoder *enc;     /* NULL when only features are produced */
  unsigned outputs;       /* AURAL_STREAM_* in effect */
  size_t C, mels, d, v;
  size_t hop, win;        /* model-rate samples */
  double in_rate_hz, model_rate_hz;
  double ratio;           /* model rate / input rate */
  uint64_t slack;         /* SLACK when resampling, else 0 */
  size_t text_max;        /* bytes of a chunk's text with its NUL, or 0 */
  size_t token_max;       /* bytes of the longest token */
  size_t pend_cap, n_pending;
  float *pend;            /* (pend_cap, mels) features awaiting compute */
  size_t out_cap, out_head, n_ready; /* rows [out_head, +n_ready) ready */
  float *out_emb;         /* (out_cap, d) or NULL */
  float *out_logits;      /* (out_cap, v) or NULL (logits or text) */
  float *out_feats;       /* (out_cap, mels) or NULL */
  int *ids;               /* (C) tokens of one chunk, for text */
  uint64_t n_in, n_made, n_encoded, n_chunks; /* since the stream's first */
  uint64_t chunk0, frame0; /* its first chunk and frame (first_chunk) */
  size_t batch_k;         /* rows of this stream in the current batch */
  int prev_token;         /* CTC collapse state across chunks */
  int ended, done, marked;
  int failed;             /* the error that broke the stream, or 0 */
  aural_decoder *dec;     /* AURAL_STREAM_WORDS, or NULL */
  size_t words_max, segments_max;
};

void aural_stream_config_default(aural_stream_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->n_channels = 1;
  cfg->nonfinite = AURAL_NONFINITE_REJECT;
  cfg->chunk_frames = 50;
  cfg->max_pending_frames = 256;
  cfg->encoder_batch_frames = AURAL__DEFAULT_BATCH;
  aural_decoder_config_default(&cfg->decoder);
}

/* The output bits in effect, or a negative code with err set. */
static int resolve_outputs(const aural_model_config *c, unsigned want,
                           aural_err *err) {
  const unsigned all = AURAL_STREAM_EMBEDDINGS | AURAL_STREAM_LOGITS |
                       AURAL_STREAM_TEXT | AURAL_STREAM_FEATURES |
                       AURAL_STREAM_WORDS;
  if (want == 0)
    return (int)(AURAL_STREAM_EMBEDDINGS |
                 (c->vocab_size > 0 ? AURAL_STREAM_LOGITS | AURAL_STREAM_TEXT
                                    : 0u));
  if (want & ~all)
    return aural__err_set(err, AURAL_ECONFIG,
                          "stream: outputs 0x%x has unknown bits", want);
  if ((want & (AURAL_STREAM_LOGITS | AURAL_STREAM_TEXT |
               AURAL_STREAM_WORDS)) &&
      c->vocab_size == 0)
    return aural__err_set(err, AURAL_ECONFIG,
                          "stream: outputs asks for logits, text or words, "
                          "but the model has no CTC head");
  return (int)want;
}

static int check_frames(const char *field, size_t v, size_t max,
                        aural_err *err) {
  if (v >= 1 && v <= max) return 0;
  return aural__err_set(err, AURAL_ECONFIG,
                        "stream: %s %zu is outside 1..%zu", field, v, max);
}

/* Bytes of the longest token (the blank, id 0, is never written). */
static size_t longest_token(const aural_model *m) {
  size_t longest = 0;
  int v = aural_model_get_config(m)->vocab_size;
  for (int id = 1; id < v; id++) {
    size_t n = strlen(aural_model_token(m, id));
    if (n > longest) longest = n;
  }
  return longest;
}

/* The stream's buffers, in its one block after the struct. */
enum { BUF_PEND, BUF_EMB, BUF_LOGITS, BUF_FEATS, BUF_IDS, N_BUFS };

/* Byte offsets of the buffers a stream of this geometry has (0: none) and
 * the size of its block; 0 on overflow. Each starts on a 64-byte line. */
static size_t layout(const aural_stream *s, size_t off[N_BUFS]) {
  size_t sizes[N_BUFS] = {0}, total = (sizeof *s + 63) / 64 * 64;
  int ok = aural__mul_ok(s->pend_cap, s->mels * sizeof(float),
                         &sizes[BUF_PEND]);
  if (s->outputs & AURAL_STREAM_EMBEDDINGS)
    ok &= aural__mul_ok(s->out_cap, s->d * sizeof(float), &sizes[BUF_EMB]);
  if (s->outputs &
      (AURAL_STREAM_LOGITS | AURAL_STREAM_TEXT | AURAL_STREAM_WORDS))
    ok &= aural__mul_ok(s->out_cap, s->v * sizeof(float), &sizes[BUF_LOGITS]);
  if (s->outputs & AURAL_STREAM_FEATURES)
    ok &= aural__mul_ok(s->out_cap, s->mels * sizeof(float),
                        &sizes[BUF_FEATS]);
  if (s->outputs & AURAL_STREAM_TEXT)
    ok &= aural__mul_ok(s->C, sizeof(int), &sizes[BUF_IDS]);
  for (int i = 0; i < N_BUFS && ok; i++) {
    off[i] = sizes[i] ? total : 0;
    size_t padded = (sizes[i] + 63) / 64 * 64;
    ok = padded >= sizes[i] && total <= SIZE_MAX - padded;
    total += padded;
  }
  return ok ? total : 0;
}

static float *floats_at(aural_stream *s, size_t off) {
  return off ? (float *)((unsigned char *)s + off) : NULL;
}

/* Fills the geometry of a stream from its model and config. */
static int setup(aural_stream *s, const aural_model *model,
                 const aural_stream_config *cfg, aural_err *err) {
  const aural_model_config *c = aural_model_get_config(model);
  int outputs = resolve_outputs(c, cfg->outputs, err);
  if (outputs < 0) return outputs;
  int rc = check_frames("chunk_frames", cfg->chunk_frames,
                        AURAL_STREAM_MAX_FRAMES, err);
  if (rc == 0)
    rc = check_frames("max_pending_frames", cfg->max_pending_frames,
                      AURAL_STREAM_MAX_FRAMES, err);
  /* The encoder's own bound, checked here so that the error is the
   * stream's, naming its field. */
  if (rc == 0)
    rc = check_frames("encoder_batch_frames", cfg->encoder_batch_frames,
                      AURAL_ENCODER_MAX_BATCH_FRAMES, err);
  if (rc < 0) return rc;
  if (cfg->first_chunk > AURAL_STREAM_MAX_FIRST_CHUNK)
    return aural__err_set(err, AURAL_ECONFIG,
                          "stream: first_chunk %llu is above %llu",
                          (unsigned long long)cfg->first_chunk,
                          (unsigned long long)AURAL_STREAM_MAX_FIRST_CHUNK);
  s->model = model;
  s->outputs = (unsigned)outputs;
  s->C = cfg->chunk_frames;
  s->chunk0 = cfg->first_chunk;
  s->frame0 = cfg->first_chunk * cfg->chunk_frames;
  s->mels = (size_t)c->fbank.num_mel_bins;
  s->d = (size_t)c->d_model;
  s->v = (size_t)c->vocab_size;
  s->hop = aural_fbank_hop_samples(&c->fbank);
  s->win = aural_fbank_window_samples(&c->fbank);
  s->model_rate_hz = c->fbank.sample_rate_hz;
  /* Any other bad rate is refused by the frontend, named. */
  s->in_rate_hz =
      cfg->input_rate_hz != 0 ? cfg->input_rate_hz : s->model_rate_hz;
  s->ratio = s->model_rate_hz / s->in_rate_hz;
  size_t extra = 0;
  if (s->in_rate_hz != s->model_rate_hz) {
    s->slack = SLACK;
    extra = (size_t)ceil(s->model_rate_hz * HOLD_S + SLACK) / s->hop + 2;
  }
  s->pend_cap = cfg->max_pending_frames + extra;
  s->out_cap = s->C + s->pend_cap;
  if (s->outputs & AURAL_STREAM_TEXT) {
    /* C tokens, a space after each but the last, and the NUL. */
    s->token_max = longest_token(model);
    if (aural__mul_ok(s->C, s->token_max + 1, &s->text_max) &&
        s->text_max < SIZE_MAX)
      s->text_max++;
    else
      s->text_max = 0;
    if (s->text_max == 0)
      return aural__err_set(err, AURAL_ECONFIG,
                            "stream: chunk_frames %zu makes the text buffer "
                            "overflow", s->C);
  }
  s->prev_token = -1;
  return 0;
}

/* The words decoder, and the most words and segments a chunk can carry:
 * segments end at least min_segment_frames apart, and each holds at most
 * max_words words, as does the partial. */
static int setup_words(aural_stream *s, const aural_stream_config *cfg,
                       aural_err *err) {
  if (cfg->lexicon == NULL)
    return aural__err_set(err, AURAL_ECONFIG,
                          "stream: words need a lexicon (config.lexicon)");
  int rc = aural_decoder_create(&cfg->decoder, s->model, cfg->lexicon,
                                cfg->lm, &s->dec, err);
  if (rc < 0) return rc;
  aural_decoder_info di;
  aural_decoder_get_info(s->dec, &di);
  s->segments_max = s->C / di.min_segment_frames + 2;
  s->words_max = (s->segments_max + 1) * di.max_words;
  return 0;
}

/* Feeds the decoder the chunk's n rows of logits and writes what it says
 * into ch (whose buffers check_chunk found large enough, or NULL). */
static void chunk_words(aural_stream *s, size_t n, bool final,
                        aural_chunk *ch) {
  const float *lg = s->out_logits + s->out_head * s->v;
  size_t nw = 0, nseg = 0, k;
  aural_word *w = ch->words;
  size_t cap = w != NULL ? ch->words_cap : 0;
  for (size_t at = 0;;) {
    at += aural_decoder_push(s->dec, lg + at * s->v, n - at);
    if (at == n && final) aural_decoder_end(s->dec);
    if (aural_decoder_final(s->dec, w ? w + nw : NULL, cap - nw, &k) == 1) {
      /* setup_words() sized the buffers from the decoder's promises. */
      assert(w == NULL || (nseg < ch->segments_cap && k <= cap - nw));
      if (ch->segments != NULL) ch->segments[nseg] = (uint32_t)k;
      nseg++;
      nw += k;
    }
    if (at == n) break;
  }
  ch->n_segments = nseg;
  ch->n_final_words = nw;
  ch->n_partial_words =
      w != NULL ? aural_decoder_partial(s->dec, w + nw, cap - nw) : 0;
  /* The decoder counts frames from its own first. */
  for (size_t i = 0; w != NULL && i < nw + ch->n_partial_words; i++) {
    w[i].start_frame += s->frame0;
    w[i].end_frame += s->frame0;
  }
}

int aural_stream_create(const aural_model *model,
                        const aural_stream_config *cfg, aural_stream **out,
                        aural_err *err) {
  if (out == NULL || model == NULL)
    return aural__err_set(err, AURAL_EINVAL, "stream: no %s",
                          out == NULL ? "out pointer" : "model");
  *out = NULL;
  aural_stream_config defaults;
  if (cfg == NULL) {
    aural_stream_config_default(&defaults);
    cfg = &defaults;
  }
  aural_stream geo = {0};
  int rc = setup(&geo, model, cfg, err);
  if (rc < 0) return rc;
  size_t off[N_BUFS];
  size_t bytes = layout(&geo, off);
  aural_stream *s = bytes ? calloc(1, bytes) : NULL;
  if (s == NULL)
    return aural__err_set(err, AURAL_ENOMEM,
                          "stream: out of memory for chunks of %zu frames",
                          geo.C);
  *s = geo;
  s->pend = floats_at(s, off[BUF_PEND]);
  s->out_emb = floats_at(s, off[BUF_EMB]);
  s->out_logits = floats_at(s, off[BUF_LOGITS]);
  s->out_feats = floats_at(s, off[BUF_FEATS]);
  s->ids = off[BUF_IDS] ? (int *)((unsigned char *)s + off[BUF_IDS]) : NULL;

  aural_frontend_config fc;
  aural_frontend_config_default(&fc);
  fc.fbank = aural_model_get_config(model)->fbank;
  fc.input_rate_hz = s->in_rate_hz;
  fc.n_channels = cfg->n_channels;
  fc.nonfinite = cfg->nonfinite;
  /* No CMVN here: the encoder applies the model's own, and features are
   * an output before CMVN. */
  rc = aural_frontend_create(&fc, &s->fe, err);
  if (rc == 0 && (s->outputs & AURAL_STREAM_WORDS)) rc = setup_words(s, cfg, err);
  if (rc == 0 && (s->outputs & ~AURAL_STREAM_FEATURES)) {
    aural_encoder_config ec;
    aural_encoder_config_default(&ec);
    ec.max_batch_frames = cfg->encoder_batch_frames;
    ec.first_frame = s->frame0;
    rc = aural_encoder_create(model, &ec, &s->enc, err);
  }
  if (rc < 0) {
    aural_stream_destroy(s);
    return rc;
  }
  *out = s;
  return 0;
}

void aural_stream_destroy(aural_stream *s) {
  if (s == NULL) return;
  aural_frontend_destroy(s->fe);
  aural_encoder_destroy(s->enc);
  aural_decoder_destroy(s->dec);
  free(s);
}

/* Frontend callback: appends features to the pending rows. The input room
 * guarantees they fit; if they did not, the stream fails cleanly. */
static int on_features(void *user, const float *rows, size_t n,
                       uint64_t first) {
  aural_stream *s = user;
  (void)first;
  if (n > s->pend_cap - s->n_pending) return AURAL_ESTATE;
  memcpy(s->pend + s->n_pending * s->mels, rows, n * s->mels * sizeof *rows);
  s->n_pending += n;
  s->n_made += n;
  return 0;
}

size_t aural_stream_input_room(const aural_stream *s) {
  if (s->ended || s->failed) return 0;
  /* Frames the frontend may have made in all, then model-rate samples that
   * make no more: frame f needs samples up to f * hop + win. */
  uint64_t frames = s->n_made + (s->pend_cap - s->n_pending);
  uint64_t limit = (uint64_t)s->win - 1 + frames * (uint64_t)s->hop;
  uint64_t x_max = limit;
  if (s->slack > 0) {
    if (limit < s->slack) return 0;
    x_max = (uint64_t)floor((double)(limit - s->slack) / s->ratio);
    while (x_max > 0 && floor((double)x_max * s->ratio) + (double)s->slack >
                            (double)limit)
      x_max--;
  }
  if (x_max <= s->n_in) return 0;
  uint64_t room = x_max - s->n_in;
  return room > SIZE_MAX / AURAL_MAX_CHANNELS ? SIZE_MAX / AURAL_MAX_CHANNELS
                                              : (size_t)room;
}

int aural_stream_push(aural_stream *s, const float *pcm, size_t n_frames,
                      size_t *n_taken) {
  if (n_taken == NULL) return AURAL_EINVAL;
  *n_taken = 0;
  if (s->ended || s->failed) return AURAL_ESTATE;
  if (n_frames == 0) return 0;
  if (pcm == NULL) return AURAL_EINVAL;
  size_t room = aural_stream_input_room(s);
  size_t k = n_frames < room ? n_frames : room;
  if (k == 0) return 0;
  int rc = aural_frontend_push(s->fe, pcm, k, on_features, s);
  /* These two consume nothing; anything else left the frontend midway. */
  if (rc == AURAL_ENONFINITE || rc == AURAL_EINVAL) return rc;
  if (rc != 0) {
    s->failed = rc;
    return rc;
  }
  s->n_in += k;
  *n_taken = k;
  return 0;
}

int aural_stream_end(aural_stream *s) {
  if (s->ended) return AURAL_ESTATE;
  s->ended = 1;
  if (s->failed) return AURAL_ESTATE;
  int rc = aural_frontend_finish(s->fe, on_features, s);
  if (rc != 0) s->failed = rc;
  return rc;
}

int aural_stream_abort(aural_stream *s) {
  if (s->ended) return AURAL_ESTATE;
  s->ended = 1;
  s->n_pending = 0;
  return 0;
}

/* Moves the computed rows not yet pulled to the front of the out buffers
 * and returns how many pending frames fit after them. */
static size_t begin_compute(aural_stream *s) {
  if (s->out_head > 0) {
    size_t h = s->out_head, n = s->n_ready;
    if (s->out_emb)
      memmove(s->out_emb, s->out_emb + h * s->d, n * s->d * sizeof(float));
    if (s->out_logits)
      memmove(s->out_logits, s->out_logits + h * s->v,
              n * s->v * sizeof(float));
    if (s->out_feats)
      memmove(s->out_feats, s->out_feats + h * s->mels,
              n * s->mels * sizeof(float));
    s->out_head = 0;
  }
  size_t room = s->out_cap - s->n_ready;
  return s->n_pending < room ? s->n_pending : room;
}

/* Row pointers of the next computed frame, for the encoder. */
static float *emb_at(aural_stream *s) {
  return s->out_emb ? s->out_emb + s->n_ready * s->d : NULL;
}
static float *logits_at(aural_stream *s) {
  return s->out_logits ? s->out_logits + s->n_ready * s->v : NULL;
}

/* Rows of the k just computed whose outputs (embeddings, logits, and
 * features when they are one) are all finite, counted from the first. */
static size_t finite_rows(const aural_stream *s, size_t k) {
  for (size_t r = 0; r < k; r++) {
    const float *e = s->out_emb ? s->out_emb + (s->n_ready + r) * s->d : NULL;
    const float *l =
        s->out_logits ? s->out_logits + (s->n_ready + r) * s->v : NULL;
    const float *f = s->out_feats ? s->pend + r * s->mels : NULL;
    for (size_t j = 0; e != NULL && j < s->d; j++)
      if (!isfinite(e[j])) return r;
    for (size_t j = 0; l != NULL && j < s->v; j++)
      if (!isfinite(l[j])) return r;
    for (size_t j = 0; f != NULL && j < s->mels; j++)
      if (!isfinite(f[j])) return r;
  }
  return k;
}

/* The first k pending frames were encoded: they become ready rows. A
 * model can overflow on some input (weights, CMVN or input_scale that are
 * finite but huge; features, before CMVN, only with an input_scale far
 * beyond any real one): then the stream fails with AURAL_EOVERFLOW at the
 * first frame whose outputs are NaN or infinite, and the frames before it
 * come out as its last, rather than NaN going on to text, words and
 * subscribers. Returns 0 or AURAL_EOVERFLOW. */
static int end_compute(aural_stream *s, size_t k) {
  if (k == 0) return 0;
  size_t m = s->mels, good = finite_rows(s, k);
  if (s->out_feats)
    memcpy(s->out_feats + s->n_ready * m, s->pend, good * m * sizeof(float));
  memmove(s->pend, s->pend + k * m, (s->n_pending - k) * m * sizeof(float));
  s->n_pending -= k;
  s->n_ready += good;
  s->n_encoded += good;
  if (good == k) return 0;
  s->n_pending = 0;
  s->failed = AURAL_EOVERFLOW;
  return AURAL_EOVERFLOW;
}

int aural_stream_compute(aural_stream *s) {
  if (s->failed) return AURAL_ESTATE;
  size_t k = begin_compute(s);
  if (k == 0) return 0;
  if (s->enc != NULL) {
    int rc = aural_encoder_forward(s->enc, s->pend, k, emb_at(s),
                                   logits_at(s));
    if (rc < 0) {
      s->failed = rc;
      return rc;
    }
  }
  return end_compute(s, k);
}

/* Checks the streams of a batch: of b's model, none twice, none failed. */
static int check_batch(const aural_model *m, aural_stream *const *streams,
                       size_t n) {
  int rc = 0;
  size_t i = 0;
  for (; i < n && rc == 0; i++) {
    aural_stream *s = streams[i];
    if (s == NULL || s->model != m || s->marked) rc = AURAL_EINVAL;
    else if (s->failed) rc = AURAL_ESTATE;
    else s->marked = 1;
  }
  for (size_t j = 0; j < i; j++)
    if (streams[j] != NULL) streams[j]->marked = 0;
  return rc;
}

int aural_stream_compute_batch(aural_batch *b, aural_stream *const *streams,
                               size_t n_streams) {
  if (b == NULL || (streams == NULL && n_streams > 0)) return AURAL_EINVAL;
  int rc = check_batch(aural__batch_model(b), streams, n_streams);
  if (rc < 0) return rc;
  size_t cap;
  aural_batch_item *items = aural__batch_items(b, &cap);
  /* Streams with frames are at most as many as rows, so groups of `cap`
   * streams split nothing that one call would have done in one pass. */
  for (size_t at = 0; at < n_streams;) {
    size_t first = at, n_items = 0;
    for (; at < n_streams && n_items < cap; at++) {
      aural_stream *s = streams[at];
      s->batch_k = begin_compute(s);
      if (s->batch_k > 0 && s->enc != NULL)
        items[n_items++] = (aural_batch_item){
            .enc = s->enc, .feats = s->pend, .n = s->batch_k,
            .emb = emb_at(s), .logits = logits_at(s)};
    }
    if (n_items > 0) rc = aural_encoder_forward_batch(b, items, n_items);
    for (size_t i = first; i < at; i++) {
      if (rc < 0) streams[i]->failed = rc; /* checked above: unreachable */
      else (void)end_compute(streams[i], streams[i]->batch_k); /* alone */
    }
    if (rc < 0) return rc;
  }
  return 0;
}

/* Checks the caller's buffers against the stream's outputs and a chunk
 * of n frames. */
static int check_chunk(const aural_stream *s, const aural_chunk *ch,
                       size_t n) {
  if ((ch->emb && !(s->outputs & AURAL_STREAM_EMBEDDINGS)) ||
      (ch->logits && !(s->outputs & AURAL_STREAM_LOGITS)) ||
      (ch->features && !(s->outputs & AURAL_STREAM_FEATURES)) ||
      (ch->text && !(s->outputs & AURAL_STREAM_TEXT)))
    return AURAL_EINVAL;
  if ((ch->emb || ch->logits || ch->features) && ch->max_frames < n)
    return AURAL_EINVAL;
  /* n <= C, so this does not overflow (text_max did not). */
  if (ch->text && ch->text_cap < n * (s->token_max + 1) + 1)
    return AURAL_EINVAL;
  if ((ch->words || ch->segments) &&
      (!(s->outputs & AURAL_STREAM_WORDS) || ch->words == NULL ||
       ch->segments == NULL || ch->words_cap < s->words_max ||
       ch->segments_cap < s->segments_max))
    return AURAL_EINVAL;
  return 0;
}

/* The next chunk's size and whether it is the last: 1, or 0 when none
 * can be pulled yet. */
static int next_chunk(const aural_stream *s, size_t *n_frames, bool *final) {
  *n_frames = 0;
  *final = false;
  if (s->done) return 0;
  if (s->n_ready >= s->C) {
    *n_frames = s->C;
    return 1;
  }
  /* The end, once everything pending is computed; after a failure what
   * was computed is all there is. A stream without frames has no chunk. */
  if (!s->failed && (!s->ended || s->n_pending > 0)) return 0;
  if (s->n_ready == 0 && s->n_chunks == 0) return 0;
  *n_frames = s->n_ready;
  *final = true;
  return 1;
}

int aural_stream_ready(const aural_stream *s, size_t *n_frames,
                       bool *final) {
  if (s == NULL) return AURAL_EINVAL;
  size_t n;
  bool f;
  int rc = next_chunk(s, &n, &f);
  if (n_frames != NULL) *n_frames = n;
  if (final != NULL) *final = f;
  return rc;
}

/* Greedy CTC text of the n rows at the head, the collapse state carried
 * from the previous chunk; written to text when it is not NULL. */
static size_t chunk_text(aural_stream *s, size_t n, char *text) {
  const float *lg = s->out_logits + s->out_head * s->v;
  size_t n_ids = aural_ctc_greedy(lg, n, (int)s->v, &s->prev_token, s->ids,
                                  s->C);
  if (text == NULL) return 0;
  size_t len = 0;
  for (size_t i = 0; i < n_ids; i++) {
    const char *tok = aural_model_token(s->model, s->ids[i]);
    size_t tl = strlen(tok);
    if (len > 0) text[len++] = ' ';
    memcpy(text + len, tok, tl);
    len += tl;
  }
  text[len] = '\0';
  return len;
}

int aural_stream_pull(aural_stream *s, aural_chunk *ch) {
  if (s == NULL || ch == NULL) return AURAL_EINVAL;
  size_t n;
  bool final;
  int ready = next_chunk(s, &n, &final);
  int rc = check_chunk(s, ch, n);
  if (rc < 0) return rc;
  if (!ready) {
    /* Done when nothing more can come: ended without frames. */
    if (s->n_ready == 0 && s->n_chunks == 0 &&
        (s->failed || (s->ended && s->n_pending == 0)))
      s->done = 1;
    return 0;
  }
  size_t h = s->out_head;
  if (ch->emb)
    memcpy(ch->emb, s->out_emb + h * s->d, n * s->d * sizeof(float));
  if (ch->logits)
    memcpy(ch->logits, s->out_logits + h * s->v, n * s->v * sizeof(float));
  if (ch->features)
    memcpy(ch->features, s->out_feats + h * s->mels,
           n * s->mels * sizeof(float));
  ch->text_len = 0;
  if (s->outputs & AURAL_STREAM_TEXT) ch->text_len = chunk_text(s, n, ch->text);
  ch->n_segments = ch->n_final_words = ch->n_partial_words = 0;
  if (s->dec != NULL) chunk_words(s, n, final, ch);
  ch->seq = s->chunk0 + s->n_chunks++;
  ch->first_frame = s->frame0 + s->n_encoded - s->n_ready;
  ch->n_frames = n;
  ch->final = final;
  s->out_head += n;
  s->n_ready -= n;
  if (s->n_ready == 0) s->out_head = 0;
  if (final) s->done = 1;
  return 1;
}

void aural_stream_get_info(const aural_stream *s, aural_stream_info *info) {
  memset(info, 0, sizeof *info);
  info->model_rate_hz = s->model_rate_hz;
  info->hop_samples = s->hop;
  info->window_samples = s->win;
  info->frame_seconds = (double)s->hop / s->model_rate_hz;
  info->chunk_frames = s->C;
  info->pending_cap = s->pend_cap;
  info->outputs = s->outputs;
  info->n_mels = (int)s->mels;
  info->d_model = (int)s->d;
  info->vocab_size = (int)s->v;
  info->text_max_bytes = s->text_max;
  info->token_max_bytes = s->token_max;
  info->words_max = s->words_max;
  info->segments_max = s->segments_max;
}

void aural_stream_get_stats(const aural_stream *s, aural_stream_stats *st) {
  aural_frontend_stats fs;
  aural_frontend_get_stats(s->fe, &fs);
  memset(st, 0, sizeof *st);
  st->n_input_frames = s->n_in;
  st->n_feature_frames = s->n_made;
  st->n_encoded_frames = s->n_encoded;
  st->first_frame = s->frame0;
  st->n_chunks = s->n_chunks;
  st->n_pending_frames = s->n_pending;
  st->n_ready_frames = s->n_ready;
  st->n_nonfinite = fs.n_nonfinite;
  st->n_clamped = fs.n_clamped;
  st->ended = s->ended;
  st->error = s->failed;
  /* Done as well when it ended with no frames at all: no chunk will come
   * (pull would say so too, but a caller that asks ready() first never
   * pulls). */
  st->done = s->done || (s->n_ready == 0 && s->n_chunks == 0 &&
                         (s->failed || (s->ended && s->n_pending == 0)));
}

int aural_stream_reset(aural_stream *s) {
  int rc = aural_frontend_reset(s->fe);
  if (s->enc != NULL) aural_encoder_reset(s->enc, s->frame0);
  s->n_pending = s->out_head = s->n_ready = 0;
  s->n_in = s->n_made = s->n_encoded = s->n_chunks = 0;
  s->prev_token = -1;
  s->ended = s->done = 0;
  if (s->dec != NULL) aural_decoder_reset(s->dec);
  s->failed = rc;
  return rc;
}
