/*
 * The word n-gram language model: an ARPA file read into one hash table of
 * n-grams (orders 1 to 4) over the lexicon's word ids, with the backoff
 * rule of the ARPA format. Scores are log10 probabilities, as in the file.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aural/decoder.h"
#include "internal.h"

#define MAX_FILE_BYTES (1024u << 20)
#define MAX_NGRAMS (64u << 20)

typedef struct ngram {
  uint32_t w[AURAL__LM_MAX_ORDER]; /* words, oldest first; unused are 0 */
  uint8_t n;                       /* 0: an empty slot */
  float logp, backoff;             /* log10 */
} ngram;

struct aural_lm {
  int order;
  uint32_t n_lex;    /* the lexicon's words; then <s>, </s>, <unk> */
  ngram *table;      /* (cap) open addressing */
  size_t cap;
  size_t n_grams[AURAL__LM_MAX_ORDER];
  size_t n_dropped;
  bool has_unk;
  float min_unigram; /* log10, the lowest unigram of a word */
  uint8_t *in_lm;    /* (n_lex) whether the LM lists the word */
  float *node_best;  /* (lexicon nodes) best unigram log10 below the node */
  size_t n_nodes;
};

static uint32_t hash_ngram(const uint32_t *w, int n) {
  uint32_t h = 2166136261u ^ (uint32_t)n;
  for (int i = 0; i < n; i++) {
    h ^= w[i];
    h *= 16777619u;
    h ^= h >> 15;
  }
  return h;
}

static ngram *find_slot(const aural_lm *lm, const uint32_t *w, int n) {
  size_t mask = lm->cap - 1;
  for (size_t i = hash_ngram(w, n) & mask;; i = (i + 1) & mask) {
    ngram *g = &lm->table[i];
    if (g->n == 0) return g;
    if (g->n == n && memcmp(g->w, w, (size_t)n * sizeof *w) == 0) return g;
  }
}

const float *aural__lm_find(const aural_lm *lm, const uint32_t *w, int n) {
  if (n < 1 || n > lm->order) return NULL;
  const ngram *g = find_slot(lm, w, n);
  return g->n != 0 ? &g->logp : NULL;
}

/* --- reading -------------------------------------------------------------- */

typedef struct reader {
  const char *name;
  aural_err *err;
  const aural_lexicon *lex;
  const char *s;
  size_t len, at, line;
  bool again; /* next_line gives the last line once more */
  const char *last;
  size_t last_n;
} reader;

/* The next line, without its end; false at the end of the text. */
static bool next_line(reader *r, const char **s, size_t *n) {
  if (r->again) {
    r->again = false;
    *s = r->last;
    *n = r->last_n;
    return true;
  }
  if (r->at >= r->len) return false;
  const char *p = r->s + r->at;
  const char *nl = memchr(p, '\n', r->len - r->at);
  *n = nl != NULL ? (size_t)(nl - p) : r->len - r->at;
  r->at += *n + 1;
  r->line++;
  *s = p;
  if (*n > 0 && p[*n - 1] == '\r') (*n)--;
  r->last = *s;
  r->last_n = *n;
  return true;
}

static bool blank_line(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t') return false;
  return true;
}

/* Splits s into fields on spaces and tabs; returns how many (at most max;
 * max + 1 when there are more). */
static int split(const char *s, size_t n, const char **f, size_t *fl,
                 int max) {
  int k = 0;
  for (size_t i = 0; i < n;) {
    while (i < n && (s[i] == ' ' || s[i] == '\t')) i++;
    if (i == n) break;
    size_t j = i;
    while (j < n && s[j] != ' ' && s[j] != '\t') j++;
    if (k == max) return max + 1;
    f[k] = s + i;
    fl[k++] = j - i;
    i = j;
  }
  return k;
}

/* A decimal number as ARPA writes it ("-1.2345", "-2.5e-05", "-99"),
 * read without the C locale's help. */
static bool parse_number(const char *s, size_t n, float *out) {
  size_t i = 0;
  bool neg = false;
  if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
  double mant = 0;
  int digits = 0, exp10 = 0;
  for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++)
    if (digits < 18) mant = mant * 10 + (s[i] - '0');
    else exp10++;
  if (i < n && s[i] == '.') {
    for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++, digits++)
      if (digits < 18) {
        mant = mant * 10 + (s[i] - '0');
        exp10--;
      }
  }
  if (digits == 0) return false;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    bool eneg = false;
    if (i < n && (s[i] == '-' || s[i] == '+')) eneg = s[i++] == '-';
    int e = 0, ed = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++, ed++)
      if (e < 10000) e = e * 10 + (s[i] - '0');
    if (ed == 0) return false;
    exp10 += eneg ? -e : e;
  }
  if (i != n) return false;
  double v = mant * pow(10.0, exp10);
  if (!isfinite(v) || v > 1e30) return false;
  *out = (float)(neg ? -v : v);
  return true;
}

/* The LM's index of a word: the lexicon's id, or one of the three
 * markers after them; -1 when the lexicon lacks it. */
static int64_t word_index(const reader *r, const char *s, size_t n,
                          uint32_t n_lex) {
  char w[80];
  if (n >= sizeof w) return -1;
  memcpy(w, s, n);
  w[n] = '\0';
  if (strcmp(w, "<s>") == 0) return n_lex;
  if (strcmp(w, "</s>") == 0) return n_lex + 1;
  if (strcmp(w, "<unk>") == 0) return n_lex + 2;
  return aural_lexicon_find(r->lex, w);
}

/* "\data\" and its "ngram N=COUNT" lines; the counts into want[]. */
static int read_header(reader *r, size_t want[AURAL__LM_MAX_ORDER],
                       int *order) {
  const char *s;
  size_t n;
  bool seen = false;
  while (next_line(r, &s, &n)) {
    if (blank_line(s, n)) {
      if (seen && *order > 0) return 0;
      continue;
    }
    if (!seen) {
      if (n != 6 || memcmp(s, "\\data\\", 6) != 0)
        return aural__err_set(r->err, AURAL_EFORMAT,
                              "%s:%zu: not an ARPA file (\\data\\ expected)",
                              r->name, r->line);
      seen = true;
      continue;
    }
    int k;
    unsigned long long count;
    char tail;
    char buf[64];
    if (n >= sizeof buf) n = sizeof buf - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (sscanf(buf, "ngram %d=%llu%c", &k, &count, &tail) != 2 || k < 1)
      return aural__err_set(r->err, AURAL_EFORMAT,
                            "%s:%zu: \"ngram N=COUNT\" expected", r->name,
                            r->line);
    if (k != *order + 1 || k > AURAL__LM_MAX_ORDER)
      return aural__err_set(r->err, AURAL_EFORMAT,
                            "%s:%zu: ngram %d out of order (orders 1 to %d, "
                            "in turn)",
                            r->name, r->line, k, AURAL__LM_MAX_ORDER);
    if (count > MAX_NGRAMS)
      return aural__err_set(r->err, AURAL_EFORMAT,
                            "%s:%zu: %llu %d-grams, more than %u", r->name,
                            r->line, count, k, MAX_NGRAMS);
    want[k - 1] = (size_t)count;
    *order = k;
  }
  return aural__err_set(r->err, AURAL_ETRUNCATED,
                        "%s: the file ends in its \\data\\ section", r->name);
}

/* One n-gram line of order k. */
static int read_ngram(reader *r, aural_lm *lm, int k, const char *s,
                      size_t n) {
  const char *f[AURAL__LM_MAX_ORDER + 2];
  size_t fl[AURAL__LM_MAX_ORDER + 2];
  int nf = split(s, n, f, fl, k + 2);
  if (nf != k + 1 && nf != k + 2)
    return aural__err_set(r->err, AURAL_EFORMAT,
                          "%s:%zu: a %d-gram line has %d fields (%d or %d "
                          "expected)",
                          r->name, r->line, k, nf, k + 1, k + 2);
  float logp, backoff = 0;
  if (!parse_number(f[0], fl[0], &logp) || logp > 1e-4f)
    return aural__err_set(r->err, AURAL_EFORMAT,
                          "%s:%zu: \"%.*s\" is not a log10 probability",
                          r->name, r->line, (int)(fl[0] > 32 ? 32 : fl[0]),
                          f[0]);
  if (nf == k + 2 && !parse_number(f[k + 1], fl[k + 1], &backoff))
    return aural__err_set(r->err, AURAL_EFORMAT,
                          "%s:%zu: \"%.*s\" is not a backoff weight", r->name,
                          r->line, (int)(fl[k + 1] > 32 ? 32 : fl[k + 1]),
                          f[k + 1]);
  uint32_t w[AURAL__LM_MAX_ORDER] = {0};
  for (int i = 0; i < k; i++) {
    int64_t id = word_index(r, f[i + 1], fl[i + 1], lm->n_lex);
    if (id < 0) {
      lm->n_dropped++;
      return 0;
    }
    w[i] = (uint32_t)id;
  }
  ngram *g = find_slot(lm, w, k);
  if (g->n != 0)
    return aural__err_set(r->err, AURAL_EFORMAT,
                          "%s:%zu: this %d-gram is listed twice", r->name,
                          r->line, k);
  *g = (ngram){.n = (uint8_t)k, .logp = logp, .backoff = backoff};
  memcpy(g->w, w, sizeof w);
  lm->n_grams[k - 1]++;
  if (k == 1 && w[0] < lm->n_lex) lm->in_lm[w[0]] = 1;
  if (k == 1 && w[0] == lm->n_lex + 2) lm->has_unk = true;
  if (k == 1 && w[0] < lm->n_lex && logp < lm->min_unigram)
    lm->min_unigram = logp;
  return 0;
}

/* The "\k-grams:" sections in turn, then "\end\". */
static int read_sections(reader *r, aural_lm *lm,
                         const size_t want[AURAL__LM_MAX_ORDER]) {
  const char *s;
  size_t n;
  for (int k = 1; k <= lm->order; k++) {
    char head[32];
    snprintf(head, sizeof head, "\\%d-grams:", k);
    bool got;
    while ((got = next_line(r, &s, &n)) && blank_line(s, n)) {}
    if (!got || n != strlen(head) || memcmp(s, head, n) != 0)
      return aural__err_set(r->err, AURAL_EFORMAT,
                            "%s:%zu: \"%s\" expected", r->name, r->line, head);
    size_t seen = 0;
    while (next_line(r, &s, &n) && !blank_line(s, n)) {
      if (s[0] == '\\') { /* the next section, without a blank line */
        r->again = true;
        break;
      }
      if (++seen > want[k - 1])
        return aural__err_set(r->err, AURAL_EFORMAT,
                              "%s:%zu: more %d-grams than the %zu of \\data\\",
                              r->name, r->line, k, want[k - 1]);
      int rc = read_ngram(r, lm, k, s, n);
      if (rc < 0) return rc;
    }
    if (seen != want[k - 1])
      return aural__err_set(r->err, AURAL_EFORMAT,
                            "%s: %zu %d-grams, but \\data\\ announced %zu",
                            r->name, seen, k, want[k - 1]);
  }
  bool got;
  while ((got = next_line(r, &s, &n)) && blank_line(s, n)) {}
  if (!got || n != 5 || memcmp(s, "\\end\\", 5) != 0)
    return aural__err_set(r->err, AURAL_EFORMAT, "%s:%zu: \"\\end\\\" expected",
                          r->name, r->line);
  return 0;
}

/* Each tree node's best unigram below it: what the decoder adds early. */
static void fill_node_best(aural_lm *lm, const aural_lexicon *lex) {
  for (size_t i = lex->n_nodes; i-- > 0;) {
    const aural__lex_node *nd = &lex->nodes[i];
    float best = -INFINITY;
    for (uint32_t k = 0; k < nd->n_words; k++) {
      uint32_t w = aural__lm_word(lm, lex->node_words[nd->first_word + k]);
      if (w == AURAL__LM_NONE) continue;
      const float *g = aural__lm_find(lm, &w, 1);
      if (g != NULL && *g > best) best = *g;
    }
    for (uint32_t e = 0; e < nd->n_edges; e++) {
      float c = lm->node_best[lex->edges[nd->first_edge + e].child];
      if (c > best) best = c;
    }
    lm->node_best[i] = best;
  }
}

static int parse_text(const char *text, size_t len, const char *name,
                      const aural_lexicon *lex, aural_lm **out,
                      aural_err *err) {
  *out = NULL;
  if (text == NULL || lex == NULL)
    return aural__err_set(err, AURAL_EINVAL, "LM: no text or no lexicon");
  reader r = {.name = name ? name : "LM", .err = err, .lex = lex, .s = text,
              .len = len};
  if (memchr(text, '\0', len) != NULL)
    return aural__err_set(err, AURAL_EFORMAT, "%s: a NUL byte", r.name);
  aural_lm *lm = calloc(1, sizeof *lm);
  if (lm == NULL) return aural__err_set(err, AURAL_ENOMEM, "out of memory");
  lm->n_lex = (uint32_t)lex->n_words;
  lm->min_unigram = 0;
  size_t want[AURAL__LM_MAX_ORDER] = {0};
  int rc = read_header(&r, want, &lm->order);
  size_t total = 0;
  for (int k = 0; k < lm->order; k++) total += want[k];
  /* An n-gram line takes 4 bytes at least ("-1 a" and its end): a file
   * cannot make the table larger than its own size warrants. */
  if (rc == 0 && total > len / 4)
    rc = aural__err_set(err, AURAL_EFORMAT,
                        "%s: \\data\\ announces %zu n-grams, more than its "
                        "%zu bytes can hold",
                        r.name, total, len);
  if (rc == 0) {
    lm->cap = 16;
    while (lm->cap < total + total / 2) lm->cap *= 2;
    lm->table = calloc(lm->cap, sizeof *lm->table);
    lm->in_lm = calloc(lm->n_lex + 1, 1);
    lm->n_nodes = lex->n_nodes;
    lm->node_best = malloc(lex->n_nodes * sizeof *lm->node_best);
    if (!lm->table || !lm->in_lm || !lm->node_best)
      rc = aural__err_set(err, AURAL_ENOMEM, "out of memory for %zu n-grams",
                          total);
  }
  if (rc == 0) rc = read_sections(&r, lm, want);
  uint32_t bos = lm->n_lex, eos = lm->n_lex + 1;
  if (rc == 0 && (aural__lm_find(lm, &bos, 1) == NULL ||
                  aural__lm_find(lm, &eos, 1) == NULL))
    rc = aural__err_set(err, AURAL_EFORMAT,
                        "%s: <s> and </s> must be 1-grams", r.name);
  if (rc < 0) {
    aural_lm_destroy(lm);
    return rc;
  }
  fill_node_best(lm, lex);
  *out = lm;
  return 0;
}

int aural_lm_load_buffer(const char *text, size_t len, const char *name,
                         const aural_lexicon *lex, aural_lm **out,
                         aural_err *err) {
  *out = NULL;
  unsigned char *plain;
  int rc = aural__plain_text(&text, &len, name ? name : "LM",
                             MAX_FILE_BYTES, &plain, err);
  if (rc == 0) rc = parse_text(text, len, name, lex, out, err);
  free(plain);
  return rc;
}

int aural_lm_load(const char *path, const aural_lexicon *lex, aural_lm **out,
                  aural_err *err) {
  *out = NULL;
  unsigned char *buf;
  size_t size;
  int rc = aural__read_file(path, "an ARPA language model", MAX_FILE_BYTES,
                            &buf, &size, err);
  if (rc < 0) return rc;
  rc = aural_lm_load_buffer((const char *)buf, size, path, lex, out, err);
  free(buf);
  return rc;
}

void aural_lm_destroy(aural_lm *lm) {
  if (lm == NULL) return;
  free(lm->table);
  free(lm->in_lm);
  free(lm->node_best);
  free(lm);
}

void aural_lm_get_info(const aural_lm *lm, aural_lm_info *info) {
  *info = (aural_lm_info){.order = lm->order, .n_dropped = lm->n_dropped};
  for (int k = 0; k < AURAL__LM_MAX_ORDER; k++)
    info->n_grams[k] = lm->n_grams[k];
  info->memory_bytes = sizeof *lm + lm->cap * sizeof *lm->table + lm->n_lex +
                       lm->n_nodes * sizeof *lm->node_best;
}

/* --- scoring -------------------------------------------------------------- */

uint32_t aural__lm_word(const aural_lm *lm, uint32_t lex_word) {
  if (lex_word < lm->n_lex && lm->in_lm[lex_word]) return lex_word;
  return lm->has_unk ? lm->n_lex + 2 : AURAL__LM_NONE;
}

uint32_t aural__lm_bos(const aural_lm *lm) { return lm->n_lex; }
uint32_t aural__lm_eos(const aural_lm *lm) { return lm->n_lex + 1; }

float aural__lm_floor(const aural_lm *lm) {
  if (lm->has_unk) {
    uint32_t unk = lm->n_lex + 2;
    return aural__lm_find(lm, &unk, 1)[0];
  }
  return lm->min_unigram;
}

float aural__lm_node_best(const aural_lm *lm, uint32_t node) {
  return lm->node_best[node];
}

float aural__lm_next(const aural_lm *lm, const aural__lm_ctx *ctx, uint32_t w,
                     aural__lm_ctx *next) {
  uint32_t g[AURAL__LM_MAX_ORDER];
  float score = 0;
  float logp = -INFINITY;
  int found = 0; /* the length of the n-gram found: the longest known
                  * suffix of (ctx, w) */
  /* Longest history first: P(w | h) = bow(h) P(w | h'), h' without its
   * oldest word, down to the unigram. */
  for (int n = ctx->n; n >= 0; n--) {
    memcpy(g, ctx->w + (ctx->n - n), (size_t)n * sizeof *g);
    g[n] = w;
    const float *e = aural__lm_find(lm, g, n + 1);
    if (e != NULL) {
      logp = score + e[0];
      found = n + 1;
      break;
    }
    if (n > 0) {
      const float *h = aural__lm_find(lm, g, n);
      if (h != NULL) score += h[1];
    }
  }
  /* The next history: the last order - 1 words, cut to the longest
   * suffix the model knows (a longer one scores the same). */
  uint32_t h[AURAL__LM_MAX_ORDER + 1];
  int n = ctx->n;
  memcpy(h, ctx->w, (size_t)n * sizeof *h);
  h[n++] = w;
  int keep = n < lm->order - 1 ? n : lm->order - 1;
  /* The suffixes longer than the one found are not listed (the loop above
   * looked them up); the one found is. */
  if (keep > found) keep = found;
  while (keep > 0 && keep < found &&
         aural__lm_find(lm, h + (n - keep), keep) == NULL)
    keep--;
  next->n = keep;
  memset(next->w, 0, sizeof next->w);
  memcpy(next->w, h + (n - keep), (size_t)keep * sizeof *h);
  return logp;
}

double aural_lm_score(const aural_lm *lm, const int *words, size_t n) {
  if (lm == NULL || words == NULL || n == 0) return -INFINITY;
  uint32_t ids[AURAL__LM_MAX_ORDER];
  size_t first = n > (size_t)lm->order ? n - (size_t)lm->order : 0;
  int k = 0;
  for (size_t i = first; i < n; i++) {
    int w = words[i];
    uint32_t id = w == AURAL_LM_BOS   ? aural__lm_bos(lm)
                  : w == AURAL_LM_EOS ? aural__lm_eos(lm)
                  : w >= 0            ? aural__lm_word(lm, (uint32_t)w)
                                      : AURAL__LM_NONE;
    if (id == AURAL__LM_NONE) return -INFINITY;
    ids[k++] = id;
  }
  aural__lm_ctx ctx = {.n = k - 1}, next;
  memcpy(ctx.w, ids, (size_t)(k - 1) * sizeof *ids);
  return aural__lm_next(lm, &ctx, ids[k - 1], &next);
}
