/*
 * The streaming word decoder: a frame-synchronous CTC beam search over the
 * lexicon's prefix tree with an n-gram LM (aural/decoder.h), and the
 * endpoint rules that cut the stream into final segments.
 *
 * A hypothesis is a state (LM history, tree node, last frame's token) with
 * its score and the words it emitted. Each frame, every hypothesis tries
 * the blank, a repeat of its token (CTC collapses it) and the frame's
 * likely tokens that continue its tree path; reaching a node where words
 * end also emits each of them and returns to the root. Candidates in the
 * same state merge: another alignment of the same words (the same hash of
 * the segment's words) adds its probability, other words keep the better
 * (their futures score alike). The best `beam` within `beam_threshold` of
 * the best survive. Emitted words live in a
 * pool of links (word, times, parent), shared by the hypotheses that
 * descend from them and compacted when it fills.
 *
 * Custom words (cfg.boost_words) have a prefix tree of their own: its
 * nodes are numbered after the main tree's (x_node), its words after the
 * main lexicon's, and from the root a token enters both trees. A custom
 * word's LM score and boost are included early, like the LM's unigram
 * below a main node, so that its prefixes survive pruning.
 */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aural/decoder.h"
#include "internal.h"

#define LN10 2.302585092994046

/* One emitted word; parent is the link before it (index + 1, 0: none). */
typedef struct link {
  uint32_t word, parent;
  uint64_t start, end;
  float confidence;
} link;

typedef struct hyp {
  double score;       /* natural log: acoustic + weighted LM + penalties */
  aural__lm_ctx ctx;  /* LM history */
  uint32_t node;      /* place in the tree: 0 between words */
  uint32_t prev;      /* the last frame's token (0: blank) */
  uint32_t link;      /* the last emitted word (index + 1; 0: none) */
  uint64_t words;     /* a hash of the segment's words, in order */
  float smear;        /* the early LM score included for node */
  uint64_t word_start; /* frame the word in progress began */
  float word_lp;      /* its tokens' log-posteriors, summed */
  uint32_t word_frames;
  /* A word emitted this frame, given a link once the hypothesis survives
   * (pending_word + 1; 0: none). */
  uint32_t pending_word;
  float pending_conf;
} hyp;

/* LM queries repeat: the hypotheses share histories, and a word ends at
 * several frames in a row. A direct-mapped memo of the last answers per
 * decoder saves most trips to the LM's large table; the answers are the
 * LM's own, so outputs do not change. */
#define LM_MEMO_SLOTS 4096
typedef struct lm_memo {
  aural__lm_ctx ctx, next;
  uint32_t w; /* UINT32_MAX: empty */
  float logp;
} lm_memo;

struct aural_decoder {
  aural_decoder_config cfg;
  const aural_lexicon *lex;
  const aural_lm *lm;
  int vocab;
  float lm_scale;      /* lm_weight * ln 10: log10 -> weighted natural log */
  const aural_lexicon *xlex; /* custom words, or NULL */
  uint32_t x_node;     /* the main tree's node count: custom nodes follow */
  uint32_t x_word;     /* the main lexicon's word count: custom words follow */
  uint32_t *x_lm;      /* (xlex words) LM index, or AURAL__LM_NONE: floor */
  float *x_smear;      /* (xlex nodes) early score: best LM score + boost */
  uint64_t silence_frames, idle_frames, max_frames;
  lm_memo *memo;       /* (LM_MEMO_SLOTS) */

  hyp *cur;            /* (beam) this frame's survivors */
  size_t n_cur;
  hyp *cand;           /* (cand_cap) the next frame's candidates */
  size_t n_cand, cand_cap;
  uint32_t *slot;      /* (slot_cap) candidate index + 1 by state hash */
  uint32_t *slot_gen;  /* (slot_cap) the frame that wrote the slot */
  size_t slot_cap;
  uint32_t gen;
  uint32_t *heap;      /* (beam) candidate indices, worst on top */
  float *lp;           /* (vocab) this frame's log-posteriors */
  int *tokens;         /* (max_tokens) this frame's likely tokens */

  link *pool;          /* (pool_cap) */
  uint32_t *remap;     /* (pool_cap) compaction's new indices */
  size_t n_pool, pool_cap;

  aural_word *final;   /* (pool_cap) the waiting final segment */
  size_t n_final;
  bool final_ready, ended;

  uint64_t frame;       /* frames consumed */
  uint64_t seg_frames;  /* frames of the open segment */
  uint64_t trailing;    /* its trailing non-speech frames */
  uint64_t segments;
};

void aural_decoder_config_default(aural_decoder_config *cfg) {
  *cfg = (aural_decoder_config){
      .beam = 64,
      .beam_threshold = 14.0f,
      .max_tokens = 8,
      .token_threshold = 10.0f,
      .lm_weight = 0.8f,
      .word_penalty = -1.0f,
      .blank_penalty = 1.5f,
      .endpoint_silence_s = 0.8f,
      .endpoint_idle_s = 2.4f,
      .endpoint_max_s = 20.0f,
      .boost_words = NULL,
      .boost = 7.0f,
      .sum_alignments = true,
  };
}

static int check_config(const aural_decoder_config *c, aural_err *err) {
  const char *bad = NULL;
  if (c->beam < 1 || c->beam > 4096) bad = "beam must be 1..4096";
  else if (!(c->beam_threshold > 0) || !isfinite(c->beam_threshold))
    bad = "beam_threshold must be positive";
  else if (c->max_tokens < 1 || c->max_tokens > 1024)
    bad = "max_tokens must be 1..1024";
  else if (!(c->token_threshold > 0) || !isfinite(c->token_threshold))
    bad = "token_threshold must be positive";
  else if (!(c->lm_weight >= 0) || !isfinite(c->lm_weight))
    bad = "lm_weight must be 0 or more";
  else if (!isfinite(c->word_penalty))
    bad = "word_penalty must be finite";
  else if (!(c->blank_penalty >= 0 && c->blank_penalty <= 100))
    bad = "blank_penalty must be in [0, 100]";
  else if (!(c->endpoint_silence_s > 0 && c->endpoint_silence_s < 3600))
    bad = "endpoint_silence_s must be in (0, 3600)";
  else if (!(c->endpoint_idle_s > 0 && c->endpoint_idle_s < 3600))
    bad = "endpoint_idle_s must be in (0, 3600)";
  else if (!(c->endpoint_max_s > 0 && c->endpoint_max_s <= 600))
    bad = "endpoint_max_s must be in (0, 600]";
  else if (!(c->boost >= 0 && c->boost <= 100))
    bad = "boost must be in [0, 100]";
  if (bad != NULL)
    return aural__err_set(err, AURAL_ECONFIG, "decoder: %s", bad);
  return 0;
}

/* The segment's starting state: one hypothesis at the root after <s>,
 * its last token prev (0, the blank, at the start of the stream): the
 * token of the frame before, which CTC collapses with the same token
 * next, whichever segment that frame ended. */
static void start_segment(aural_decoder *d, uint32_t prev) {
  hyp h = {.score = 0, .prev = prev};
  if (d->lm != NULL) {
    aural__lm_ctx none = {.n = 0};
    aural__lm_next(d->lm, &none, aural__lm_bos(d->lm), &h.ctx);
  }
  d->cur[0] = h;
  d->n_cur = 1;
  d->n_pool = 0;
  d->seg_frames = 0;
  d->trailing = 0;
}

/* The best early score of the custom words at or below node n of xlex. */
static float custom_best(aural_decoder *d, uint32_t n) {
  const aural__lex_node *nd = &d->xlex->nodes[n];
  float best = -INFINITY;
  for (uint32_t i = 0; i < nd->n_words; i++) {
    uint32_t w = d->xlex->node_words[nd->first_word + i];
    float lp = 0;
    if (d->lm != NULL) {
      aural__lm_ctx none = {.n = 0}, next;
      lp = d->x_lm[w] != AURAL__LM_NONE
               ? aural__lm_next(d->lm, &none, d->x_lm[w], &next)
               : aural__lm_floor(d->lm);
    }
    if (d->lm_scale * lp > best) best = d->lm_scale * lp;
  }
  for (uint32_t e = 0; e < nd->n_edges; e++) {
    float b = custom_best(d, d->xlex->edges[nd->first_edge + e].child);
    if (b > best) best = b;
  }
  d->x_smear[n] = best + d->cfg.boost;
  return best;
}

/* The custom words' LM indices and early scores. */
static int setup_custom(aural_decoder *d, const aural_lexicon *xlex) {
  d->xlex = xlex;
  d->x_node = (uint32_t)d->lex->n_nodes;
  d->x_word = (uint32_t)d->lex->n_words;
  d->x_lm = malloc(xlex->n_words * sizeof *d->x_lm);
  d->x_smear = malloc(xlex->n_nodes * sizeof *d->x_smear);
  if (d->x_lm == NULL || d->x_smear == NULL) return -1;
  for (size_t w = 0; w < xlex->n_words; w++) {
    d->x_lm[w] = AURAL__LM_NONE;
    if (d->lm == NULL) continue;
    /* The LM's words are the main lexicon's, in lower case. */
    char low[80];
    const char *text = aural_lexicon_word(xlex, (int)w);
    size_t n = strlen(text);
    if (n >= sizeof low) continue;
    for (size_t i = 0; i <= n; i++)
      low[i] = (char)((unsigned char)text[i] < 0x80 ? tolower(text[i])
                                                      : text[i]);
    int id = aural_lexicon_find(d->lex, low);
    d->x_lm[w] = aural__lm_word(d->lm, id >= 0 ? (uint32_t)id : UINT32_MAX);
  }
  custom_best(d, 0);
  return 0;
}

int aural_decoder_create(const aural_decoder_config *cfg,
                         const aural_model *model, const aural_lexicon *lex,
                         const aural_lm *lm, aural_decoder **out,
                         aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "decoder: no out pointer");
  *out = NULL;
  aural_decoder_config dflt;
  if (cfg == NULL) {
    aural_decoder_config_default(&dflt);
    cfg = &dflt;
  }
  int rc = check_config(cfg, err);
  if (rc < 0) return rc;
  if (model == NULL || lex == NULL)
    return aural__err_set(err, AURAL_EINVAL, "decoder: no model or lexicon");
  const aural_model_config *mc = aural_model_get_config(model);
  const aural_lexicon *xlex = cfg->boost_words;
  if (mc->vocab_size != lex->vocab_size ||
      (xlex != NULL && xlex->vocab_size != mc->vocab_size))
    return aural__err_set(err, AURAL_ECONFIG,
                          "decoder: the %s was made for %d tokens, the "
                          "model has %d",
                          mc->vocab_size != lex->vocab_size ? "lexicon"
                                                            : "custom words",
                          mc->vocab_size != lex->vocab_size ? lex->vocab_size
                                                            : xlex->vocab_size,
                          mc->vocab_size);
  /* The LM's tables are indexed by the word ids and tree nodes of the
   * lexicon it was loaded over: with another, they would be read out of
   * bounds. */
  if (lm != NULL && aural__lm_lexicon(lm) != lex)
    return aural__err_set(err, AURAL_ECONFIG,
                          "decoder: the LM was loaded over another lexicon "
                          "(aural_lm_load's lex must be the decoder's)");
  aural_decoder *d = calloc(1, sizeof *d);
  if (d == NULL) return aural__err_set(err, AURAL_ENOMEM, "out of memory");
  d->cfg = *cfg;
  d->lex = lex;
  d->lm = lm;
  d->vocab = mc->vocab_size;
  d->lm_scale = (float)(cfg->lm_weight * LN10);
  d->x_node = UINT32_MAX; /* no custom words */
  d->x_word = UINT32_MAX;
  double frame_s = mc->fbank.frame_shift_ms * 1e-3;
  /* Durations in whole frames (the float's own rounding forgiven). */
  d->silence_frames = (uint64_t)ceil(cfg->endpoint_silence_s / frame_s - 1e-4);
  d->idle_frames = (uint64_t)ceil(cfg->endpoint_idle_s / frame_s - 1e-4);
  d->max_frames = (uint64_t)ceil(cfg->endpoint_max_s / frame_s - 1e-4);
  size_t beam = (size_t)cfg->beam;
  int tokens = cfg->max_tokens < d->vocab - 1 ? cfg->max_tokens : d->vocab - 1;
  /* Per hypothesis: the blank, a repeat, and per token a step down each
   * tree plus a word end for each word at the nodes reached. */
  size_t per_token = 1 + lex->max_node_words;
  if (xlex != NULL) per_token += 1 + xlex->max_node_words;
  d->cand_cap = beam * (2 + (size_t)tokens * per_token);
  d->slot_cap = 16;
  while (d->slot_cap < 2 * d->cand_cap) d->slot_cap *= 2;
  /* Links: the words of the segment's hypotheses. A segment lasts at most
   * endpoint_max_s, at least one frame per word. */
  d->pool_cap = beam * 64 + 1024;
  d->cur = malloc(beam * sizeof *d->cur);
  d->cand = malloc(d->cand_cap * sizeof *d->cand);
  d->slot = malloc(d->slot_cap * sizeof *d->slot);
  d->slot_gen = calloc(d->slot_cap, sizeof *d->slot_gen);
  d->heap = malloc(beam * sizeof *d->heap);
  d->lp = malloc((size_t)d->vocab * sizeof *d->lp);
  d->tokens = malloc((size_t)(tokens + 1) * sizeof *d->tokens);
  d->pool = malloc(d->pool_cap * sizeof *d->pool);
  d->remap = malloc(d->pool_cap * sizeof *d->remap);
  d->final = malloc(d->pool_cap * sizeof *d->final);
  d->memo = malloc(LM_MEMO_SLOTS * sizeof *d->memo);
  if (d->memo != NULL)
    for (size_t i = 0; i < LM_MEMO_SLOTS; i++) d->memo[i].w = UINT32_MAX;
  if (!d->cur || !d->cand || !d->slot || !d->slot_gen || !d->heap || !d->lp ||
      !d->tokens || !d->pool || !d->remap || !d->final || !d->memo ||
      (xlex != NULL && setup_custom(d, xlex) < 0)) {
    aural_decoder_destroy(d);
    return aural__err_set(err, AURAL_ENOMEM, "decoder: out of memory");
  }
  start_segment(d, 0);
  *out = d;
  return 0;
}

void aural_decoder_destroy(aural_decoder *d) {
  if (d == NULL) return;
  free(d->cur);
  free(d->cand);
  free(d->slot);
  free(d->slot_gen);
  free(d->heap);
  free(d->lp);
  free(d->tokens);
  free(d->pool);
  free(d->remap);
  free(d->final);
  free(d->memo);
  free(d->x_lm);
  free(d->x_smear);
  free(d);
}

/* --- one frame ------------------------------------------------------------ */

/* Log-softmax of one frame, and its likely tokens (not the blank) into
 * d->tokens, best first. Returns how many; *argmax is the best token. */
static int frame_posteriors(aural_decoder *d, const float *logits,
                            int *argmax) {
  float mx = -INFINITY;
  for (int k = 0; k < d->vocab; k++) {
    float v = isfinite(logits[k]) ? logits[k] : -1e30f;
    d->lp[k] = v;
    if (v > mx) mx = v;
  }
  double sum = 0;
  for (int k = 0; k < d->vocab; k++) sum += exp((double)(d->lp[k] - mx));
  float lse = mx + (float)log(sum);
  int best = 0;
  for (int k = 0; k < d->vocab; k++) {
    d->lp[k] -= lse;
    if (d->lp[k] > d->lp[best]) best = k;
  }
  *argmax = best;
  /* Tokens are tried by the posteriors themselves; the search sees the
   * blank penalized, and the endpoint rules (argmax) do not. */
  float floor_lp = d->lp[best] - d->cfg.token_threshold;
  d->lp[0] -= d->cfg.blank_penalty;
  /* The most likely non-blank tokens, by insertion into a short list. */
  int n = 0, max = d->cfg.max_tokens;
  for (int k = 1; k < d->vocab; k++) {
    if (d->lp[k] < floor_lp) continue;
    if (n == max && d->lp[k] <= d->lp[d->tokens[n - 1]]) continue;
    int i = n < max ? n++ : n - 1;
    while (i > 0 && d->lp[d->tokens[i - 1]] < d->lp[k]) {
      d->tokens[i] = d->tokens[i - 1];
      i--;
    }
    d->tokens[i] = k;
  }
  return n;
}

static uint32_t state_hash(const aural__lm_ctx *c, uint32_t node,
                           uint32_t prev) {
  uint32_t h = 2166136261u;
  uint32_t v[6] = {c->w[0], c->w[1], c->w[2], (uint32_t)c->n, node, prev};
  for (int i = 0; i < 6; i++) {
    h = (h ^ v[i]) * 16777619u;
    h ^= h >> 13;
  }
  return h;
}

/* aural__lm_next through the memo. */
static float lm_next(aural_decoder *d, const aural__lm_ctx *ctx, uint32_t w,
                     aural__lm_ctx *next) {
  lm_memo *m = &d->memo[state_hash(ctx, w, 0) & (LM_MEMO_SLOTS - 1)];
  if (m->w == w && memcmp(&m->ctx, ctx, sizeof *ctx) == 0) {
    *next = m->next;
    return m->logp;
  }
  float logp = aural__lm_next(d->lm, ctx, w, next);
  *m = (lm_memo){.ctx = *ctx, .next = *next, .w = w, .logp = logp};
  return logp;
}

static bool same_state(const hyp *a, const hyp *b) {
  return a->node == b->node && a->prev == b->prev && a->ctx.n == b->ctx.n &&
         memcmp(a->ctx.w, b->ctx.w, sizeof a->ctx.w) == 0;
}

/* Adds a candidate, or improves the one in the same state. */
static void add_candidate(aural_decoder *d, const hyp *h) {
  size_t mask = d->slot_cap - 1;
  for (size_t i = state_hash(&h->ctx, h->node, h->prev) & mask;;
       i = (i + 1) & mask) {
    if (d->slot_gen[i] != d->gen) {
      if (d->n_cand == d->cand_cap) return; /* cannot happen: sized above */
      d->slot_gen[i] = d->gen;
      d->slot[i] = (uint32_t)d->n_cand + 1;
      d->cand[d->n_cand++] = *h;
      return;
    }
    hyp *c = &d->cand[d->slot[i] - 1];
    if (same_state(c, h)) {
      /* The same words by another alignment: their probabilities add.
       * Other words: the better is kept (their futures score alike). */
      bool same_words = d->cfg.sum_alignments && c->words == h->words;
      double hi = c->score > h->score ? c->score : h->score;
      double lo = c->score > h->score ? h->score : c->score;
      if (h->score > c->score) *c = *h;
      if (same_words) c->score = hi + log1p(exp(lo - hi));
      return;
    }
  }
}

/* h stepped by token k into node (of the main tree, or custom when at or
 * past x_node), scored lp: the candidate that goes on down the tree and
 * one for each word that ends at node. */
static void enter_node(aural_decoder *d, const hyp *h, int k, uint32_t node,
                       uint64_t t) {
  bool custom = node >= d->x_node;
  const aural_lexicon *lex = custom ? d->xlex : d->lex;
  uint32_t local = custom ? node - d->x_node : node;
  float smear = custom             ? d->x_smear[local]
                : d->lm != NULL    ? d->lm_scale * aural__lm_node_best(d->lm, node)
                                   : 0.0f;
  if (!isfinite(smear)) return; /* no word below it can be scored */
  hyp n = *h;
  n.pending_word = 0;
  n.node = node;
  n.prev = (uint32_t)k;
  n.score += d->lp[k] + (smear - h->smear);
  n.smear = smear;
  if (h->node == 0) {
    n.word_start = t;
    n.word_lp = 0;
    n.word_frames = 0;
  }
  n.word_lp += d->lp[k];
  n.word_frames++;
  const aural__lex_node *nd = &lex->nodes[local];
  if (nd->n_edges > 0) add_candidate(d, &n);
  for (uint32_t i = 0; i < nd->n_words; i++) {
    uint32_t w = lex->node_words[nd->first_word + i];
    hyp e = n;
    float lm = custom ? d->cfg.boost : 0.0f;
    if (d->lm != NULL) {
      uint32_t lw = custom ? d->x_lm[w] : aural__lm_word(d->lm, w);
      if (lw != AURAL__LM_NONE) {
        lm += d->lm_scale * lm_next(d, &h->ctx, lw, &e.ctx);
      } else if (custom) { /* no <unk>: the floor, and a fresh history */
        lm += d->lm_scale * aural__lm_floor(d->lm);
        e.ctx = (aural__lm_ctx){.n = 0};
      } else {
        continue;
      }
    }
    e.score += lm - smear + d->cfg.word_penalty;
    e.node = 0;
    e.smear = 0;
    e.pending_word = (custom ? d->x_word + w : w) + 1;
    e.words = (h->words ^ e.pending_word) * 0x9e3779b97f4a7c15ull;
    e.words ^= e.words >> 29;
    e.pending_conf = expf(n.word_lp / (float)n.word_frames);
    add_candidate(d, &e);
  }
}

/* The expansions of h by token k (not the blank) at frame t. */
static void expand_token(aural_decoder *d, const hyp *h, int k, uint64_t t) {
  if ((uint32_t)k == h->prev) { /* a repeat: the same token goes on */
    hyp n = *h;
    n.pending_word = 0;
    n.score += d->lp[k];
    if (h->node != 0) {
      n.word_lp += d->lp[k];
      n.word_frames++;
    }
    add_candidate(d, &n);
    return;
  }
  if (h->node < d->x_node || d->xlex == NULL) {
    uint32_t child = aural__lex_child(d->lex, h->node, k);
    if (child != 0) enter_node(d, h, k, child, t);
  }
  if (d->xlex != NULL && (h->node == 0 || h->node >= d->x_node)) {
    uint32_t from = h->node == 0 ? 0 : h->node - d->x_node;
    uint32_t child = aural__lex_child(d->xlex, from, k);
    if (child != 0) enter_node(d, h, k, d->x_node + child, t);
  }
}

/* Heap of candidate indices, the worst score on top. */
static bool worse(const aural_decoder *d, uint32_t a, uint32_t b) {
  return d->cand[a].score < d->cand[b].score;
}

static void sift_down(aural_decoder *d, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && worse(d, d->heap[l], d->heap[m])) m = l;
    if (r < n && worse(d, d->heap[r], d->heap[m])) m = r;
    if (m == i) return;
    uint32_t tmp = d->heap[i];
    d->heap[i] = d->heap[m];
    d->heap[m] = tmp;
    i = m;
  }
}

/* Compacts the pool to the links the hypotheses still reach. */
static void compact_pool(aural_decoder *d) {
  memset(d->remap, 0, d->n_pool * sizeof *d->remap);
  for (size_t i = 0; i < d->n_cur; i++)
    for (uint32_t l = d->cur[i].link; l != 0 && d->remap[l - 1] == 0;
         l = d->pool[l - 1].parent)
      d->remap[l - 1] = 1;
  uint32_t n = 0;
  for (size_t i = 0; i < d->n_pool; i++) {
    if (d->remap[i] == 0) continue;
    link k = d->pool[i];
    if (k.parent != 0) k.parent = d->remap[k.parent - 1];
    d->pool[n++] = k;
    d->remap[i] = n;
  }
  for (size_t i = 0; i < d->n_cur; i++)
    if (d->cur[i].link != 0) d->cur[i].link = d->remap[d->cur[i].link - 1];
  d->n_pool = n;
}

/* The survivors: the best `beam` candidates within the threshold, best
 * first; their pending words get links. */
static void select_survivors(aural_decoder *d, uint64_t t) {
  size_t beam = (size_t)d->cfg.beam, n = 0;
  double best = -INFINITY;
  for (size_t i = 0; i < d->n_cand; i++)
    if (d->cand[i].score > best) best = d->cand[i].score;
  for (size_t i = 0; i < d->n_cand; i++) {
    if (d->cand[i].score < best - d->cfg.beam_threshold) continue;
    if (n < beam) {
      d->heap[n++] = (uint32_t)i;
      for (size_t j = n - 1; j > 0 && worse(d, d->heap[j], d->heap[(j - 1) / 2]);
           j = (j - 1) / 2) {
        uint32_t tmp = d->heap[j];
        d->heap[j] = d->heap[(j - 1) / 2];
        d->heap[(j - 1) / 2] = tmp;
      }
    } else if (worse(d, d->heap[0], (uint32_t)i)) {
      d->heap[0] = (uint32_t)i;
      sift_down(d, n, 0);
    }
  }
  /* Best first, for the partial and for ties to resolve the same way. */
  for (size_t m = n; m > 1; m--) {
    uint32_t tmp = d->heap[0];
    d->heap[0] = d->heap[m - 1];
    d->heap[m - 1] = tmp;
    sift_down(d, m - 1, 0);
  }
  for (size_t i = 0; i < n; i++) d->cur[i] = d->cand[d->heap[i]];
  d->n_cur = n;
  for (size_t i = 0; i < n; i++) {
    hyp *h = &d->cur[i];
    if (h->pending_word == 0) continue;
    link *k = &d->pool[d->n_pool++];
    *k = (link){.word = h->pending_word - 1,
                .parent = h->link,
                .start = h->word_start,
                .end = t + 1,
                .confidence = h->pending_conf};
    h->link = (uint32_t)d->n_pool;
    h->pending_word = 0;
  }
}

static void step(aural_decoder *d, const float *logits) {
  uint64_t t = d->frame;
  int argmax;
  int n_tok = frame_posteriors(d, logits, &argmax);
  d->gen++;
  if (d->gen == 0) { /* wrapped: every slot looks current */
    memset(d->slot_gen, 0, d->slot_cap * sizeof *d->slot_gen);
    d->gen = 1;
  }
  d->n_cand = 0;
  for (size_t i = 0; i < d->n_cur; i++) {
    const hyp *h = &d->cur[i];
    hyp b = *h;
    b.score += d->lp[0];
    b.prev = 0;
    add_candidate(d, &b);
    bool repeat_tried = h->prev == 0;
    for (int j = 0; j < n_tok; j++) {
      expand_token(d, h, d->tokens[j], t);
      if ((uint32_t)d->tokens[j] == h->prev) repeat_tried = true;
    }
    /* A token goes on while it is likely, even when not among the best. */
    if (!repeat_tried) expand_token(d, h, (int)h->prev, t);
  }
  select_survivors(d, t);
  d->frame++;
  d->seg_frames++;
  d->trailing = argmax == 0 ? d->trailing + 1 : 0;
}

/* --- segments ------------------------------------------------------------- */

/* The hypothesis a segment ends with: the best between words, </s>
 * scored, else the best of all (its word in progress is lost). */
static const hyp *segment_best(aural_decoder *d) {
  const hyp *best = NULL;
  double best_score = -INFINITY;
  for (size_t i = 0; i < d->n_cur; i++) {
    const hyp *h = &d->cur[i];
    if (h->node != 0) continue;
    double s = h->score;
    if (d->lm != NULL) {
      aural__lm_ctx next;
      s += d->lm_scale * lm_next(d, &h->ctx, aural__lm_eos(d->lm), &next);
    }
    if (best == NULL || s > best_score) {
      best = h;
      best_score = s;
    }
  }
  return best != NULL ? best : &d->cur[0];
}

/* The words of the chain ending at link l, oldest first, at most cap into
 * out; returns how many there are. */
static size_t chain_words(const aural_decoder *d, uint32_t l, aural_word *out,
                          size_t cap) {
  size_t n = 0;
  for (uint32_t k = l; k != 0; k = d->pool[k - 1].parent) n++;
  size_t i = n;
  for (uint32_t k = l; k != 0; k = d->pool[k - 1].parent) {
    i--;
    if (i >= cap) continue;
    const link *w = &d->pool[k - 1];
    const char *text = w->word < d->x_word
                           ? aural_lexicon_word(d->lex, (int)w->word)
                           : aural_lexicon_word(d->xlex, (int)(w->word - d->x_word));
    out[i] = (aural_word){.text = text,
                          .start_frame = w->start,
                          .end_frame = w->end,
                          .confidence = w->confidence};
  }
  return n;
}

/* Ends the open segment: its words become the final (when it has any),
 * and the search starts afresh from the token the segment ended on: a
 * token that goes on past the cut (the word's last, below the blank at
 * the frame cut) is that token still, not the start of a new word. */
static void end_segment(aural_decoder *d) {
  const hyp *h = segment_best(d);
  if (h->link != 0) {
    d->n_final = chain_words(d, h->link, d->final, d->pool_cap);
    d->final_ready = true;
    d->segments++;
  }
  start_segment(d, h->prev);
}

/* The endpoint rules after a frame; true when a final is waiting.
 * A segment that reaches max_frames ends at its first non-speech frame
 * with the best hypothesis between words: cut inside a word, the word
 * would be lost, and its rest, in the next segment, read as other words.
 * Speech without such a frame is cut silence_frames later. */
static bool endpoint(aural_decoder *d) {
  bool words = d->cur[0].link != 0;
  if (d->n_pool + (size_t)d->cfg.beam > d->pool_cap) compact_pool(d);
  /* The pool still full: the hypotheses hold that many words between
   * them, and the segment ends before one is lost. */
  bool full = d->n_pool + (size_t)d->cfg.beam > d->pool_cap;
  bool between = d->trailing > 0 && d->cur[0].node == 0;
  bool longest = d->seg_frames >= d->max_frames &&
                 (between || d->seg_frames >= d->max_frames + d->silence_frames);
  bool end = (words && d->trailing >= d->silence_frames) ||
             (!words && d->trailing >= d->idle_frames) || longest || full;
  if (!end) return false;
  end_segment(d);
  return d->final_ready;
}

size_t aural_decoder_push(aural_decoder *d, const float *logits,
                          size_t n_frames) {
  if (d == NULL || (logits == NULL && n_frames > 0)) return 0;
  if (d->ended || d->final_ready) return 0;
  for (size_t i = 0; i < n_frames; i++) {
    step(d, logits + i * (size_t)d->vocab);
    if (endpoint(d)) return i + 1;
  }
  return n_frames;
}

void aural_decoder_end(aural_decoder *d) {
  if (d == NULL || d->ended) return;
  d->ended = true;
  if (!d->final_ready) end_segment(d);
}

int aural_decoder_final(aural_decoder *d, aural_word *out, size_t cap,
                        size_t *n_words) {
  if (d == NULL || !d->final_ready) {
    if (n_words != NULL) *n_words = 0;
    return 0;
  }
  size_t n = d->n_final < cap ? d->n_final : cap;
  if (out != NULL && n > 0) memcpy(out, d->final, n * sizeof *out);
  if (n_words != NULL) *n_words = d->n_final;
  d->final_ready = false;
  d->n_final = 0;
  return 1;
}

size_t aural_decoder_partial(const aural_decoder *d, aural_word *out,
                             size_t cap) {
  if (d == NULL || d->n_cur == 0) return 0;
  return chain_words(d, d->cur[0].link, out, out != NULL ? cap : 0);
}

/* The fewest frames a segment that ends with words can last, from the
 * rules in endpoint(), each counted from the segment's start (every frame
 * runs step() first, so at least one): the trailing non-speech
 * (silence_frames; the frame that emits the last word may itself be
 * non-speech, when a token below the blank wins the search), the idle
 * rule (idle_frames: the best hypothesis may be inside a word while
 * another, between words, holds some, and segment_best takes that one),
 * the longest segment, and the full pool (a frame adds at most a link per
 * survivor, so beam per frame from an empty pool). */
static uint64_t min_segment_frames(const aural_decoder *d) {
  uint64_t full = d->pool_cap / (size_t)d->cfg.beam, m = d->silence_frames;
  if (d->idle_frames < m) m = d->idle_frames;
  if (d->max_frames < m) m = d->max_frames;
  if (full < m) m = full;
  return m > 0 ? m : 1;
}

void aural_decoder_get_info(const aural_decoder *d, aural_decoder_info *info) {
  if (info == NULL) return;
  if (d == NULL) {
    *info = (aural_decoder_info){0};
    return;
  }
  *info = (aural_decoder_info){
      .frames = d->frame,
      .segments = d->segments,
      .memory_bytes = sizeof *d + (size_t)d->cfg.beam * (sizeof *d->cur +
                                                         sizeof *d->heap) +
                      d->cand_cap * sizeof *d->cand +
                      d->slot_cap * 2 * sizeof *d->slot +
                      (size_t)d->vocab * sizeof *d->lp +
                      LM_MEMO_SLOTS * sizeof *d->memo +
                      d->pool_cap * (sizeof *d->pool + sizeof *d->remap +
                                     sizeof *d->final),
      .max_words = d->pool_cap,
      .min_segment_frames = min_segment_frames(d)};
}

void aural_decoder_reset(aural_decoder *d) {
  if (d == NULL) return;
  d->frame = 0;
  d->segments = 0;
  d->final_ready = false;
  d->ended = false;
  d->n_final = 0;
  start_segment(d, 0);
}
