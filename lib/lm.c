/*
 * The word n-gram language model: an ARPA file, or the same model in
 * aural's binary form (tools/words/lmbin.py: the n-grams as a sorted trie,
 * probabilities of orders 2 and up quantized to 256 levels), read into one
 * hash table of n-grams (orders 1 to 4) over the lexicon's word ids, with
 * the backoff rule of the ARPA format. Scores are log10 probabilities, as
 * in the file.
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
  const aural_lexicon *lex; /* the lexicon it was read over: its word ids
                               and tree nodes index the tables below (only
                               compared, never read through) */
  uint32_t n_lex;    /* the lexicon's words; then <s>, </s>, <unk> */
  ngram *table;      /* (cap) open addressing, linear probing */
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
  /* home_slot reads the top bits, in which n-grams of nearby ids land
   * near each other. That clusters them (longer probe runs), but the
   * decoder's lookups come in such groups: on the bundled LM, mixing the
   * bits further (murmur3's finalizer) made loading about 8% slower and
   * the decoder slower in four alternating runs of four (aural bench
   * words, by 0.4 to 2.2 points of the encoder's time; runs of one build
   * vary by 3). */
  return h;
}

/* The slot a hash starts at: the hash scaled to the table's size (which
 * need not be a power of two: it is 1.5 times the n-grams). */
static size_t home_slot(const aural_lm *lm, uint32_t h) {
  return (size_t)(((uint64_t)h * lm->cap) >> 32);
}

/* The n-gram w's slot (its hash h), or the empty slot where it goes. */
static ngram *find_slot_at(const aural_lm *lm, const uint32_t *w, int n,
                           uint32_t h) {
  for (size_t i = home_slot(lm, h);;) {
    ngram *g = &lm->table[i];
    if (g->n == 0) return g;
    if (g->n == n && memcmp(g->w, w, (size_t)n * sizeof *w) == 0) return g;
    if (++i == lm->cap) i = 0;
  }
}

static ngram *find_slot(const aural_lm *lm, const uint32_t *w, int n) {
  return find_slot_at(lm, w, n, hash_ngram(w, n));
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

/* The next line, without its end (nor the spaces and tabs before it,
 * so that "\end\ " reads as "\end\"); false at the end of the text. */
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
  while (*n > 0 && (p[*n - 1] == ' ' || p[*n - 1] == '\t')) (*n)--;
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
static int64_t word_index(const aural_lexicon *lex, const char *s, size_t n,
                          uint32_t n_lex) {
  char w[80];
  if (n >= sizeof w) return -1;
  memcpy(w, s, n);
  w[n] = '\0';
  if (strcmp(w, "<s>") == 0) return n_lex;
  if (strcmp(w, "</s>") == 0) return n_lex + 1;
  if (strcmp(w, "<unk>") == 0) return n_lex + 2;
  return aural_lexicon_find(lex, w);
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
    if (seen && *order > 0 && s[0] == '\\') {
      r->again = true; /* the first section, without a blank line */
      return 0;
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

/* Puts the k-gram w (words, unused trailing ones 0) into the table; false
 * when it is there already. */
static bool add_ngram_at(aural_lm *lm, const uint32_t w[AURAL__LM_MAX_ORDER],
                         int k, uint32_t h, float logp, float backoff) {
  ngram *g = find_slot_at(lm, w, k, h);
  if (g->n != 0) return false;
  *g = (ngram){.n = (uint8_t)k, .logp = logp, .backoff = backoff};
  memcpy(g->w, w, sizeof g->w);
  lm->n_grams[k - 1]++;
  if (k == 1 && w[0] < lm->n_lex) lm->in_lm[w[0]] = 1;
  if (k == 1 && w[0] == lm->n_lex + 2) lm->has_unk = true;
  if (k == 1 && w[0] < lm->n_lex && logp < lm->min_unigram)
    lm->min_unigram = logp;
  return true;
}

static bool add_ngram(aural_lm *lm, const uint32_t w[AURAL__LM_MAX_ORDER],
                      int k, float logp, float backoff) {
  return add_ngram_at(lm, w, k, hash_ngram(w, k), logp, backoff);
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
    int64_t id = word_index(r->lex, f[i + 1], fl[i + 1], lm->n_lex);
    if (id < 0) {
      lm->n_dropped++;
      return 0;
    }
    w[i] = (uint32_t)id;
  }
  if (!add_ngram(lm, w, k, logp, backoff))
    return aural__err_set(r->err, AURAL_EFORMAT,
                          "%s:%zu: this %d-gram is listed twice", r->name,
                          r->line, k);
  return 0;
}

/* The error for a line s (n bytes; got false: the file ended) that is
 * not the section header want: what came instead, and for a section of
 * an order past the announced ones, that \data\ did not announce it. */
static int unexpected(reader *r, bool got, const char *s, size_t n,
                      const char *want, int order) {
  if (!got)
    return aural__err_set(r->err, AURAL_ETRUNCATED,
                          "%s: the file ends: \"%s\" expected", r->name, want);
  int k = 0;
  size_t i = 1;
  while (n > 0 && s[0] == '\\' && i < n && i < 4 && s[i] >= '0' &&
         s[i] <= '9')
    k = k * 10 + (s[i++] - '0');
  if (i > 1 && n - i == 7 && memcmp(s + i, "-grams:", 7) == 0 && k > order)
    return aural__err_set(r->err, AURAL_EFORMAT,
                          "%s:%zu: a section of %d-grams, which \\data\\ "
                          "does not announce (its orders are 1 to %d): "
                          "\"%s\" expected",
                          r->name, r->line, k, order, want);
  return aural__err_set(r->err, AURAL_EFORMAT,
                        "%s:%zu: \"%.*s%s\" where \"%s\" expected", r->name,
                        r->line, (int)(n > 40 ? 40 : n), s,
                        n > 40 ? "..." : "", want);
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
      return unexpected(r, got, s, n, head, lm->order);
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
    return unexpected(r, got, s, n, "\\end\\", lm->order);
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

/* The table and per-word arrays for total n-grams. */
static int alloc_lm(aural_lm *lm, const aural_lexicon *lex, size_t total,
                    aural_err *err) {
  lm->cap = total + total / 2 + 16; /* always an empty slot */
  lm->table = calloc(lm->cap, sizeof *lm->table);
  lm->in_lm = calloc(lm->n_lex + 1, 1);
  lm->n_nodes = lex->n_nodes;
  lm->node_best = malloc(lex->n_nodes * sizeof *lm->node_best);
  if (!lm->table || !lm->in_lm || !lm->node_best)
    return aural__err_set(err, AURAL_ENOMEM, "out of memory for %zu n-grams",
                          total);
  return 0;
}

/* Either reader's end: the checks on what was read, then *out. */
static int finish_lm(aural_lm *lm, const aural_lexicon *lex, int rc,
                     const char *name, aural_lm **out, aural_err *err) {
  uint32_t bos = lm->n_lex, eos = lm->n_lex + 1;
  if (rc == 0 && (aural__lm_find(lm, &bos, 1) == NULL ||
                  aural__lm_find(lm, &eos, 1) == NULL))
    rc = aural__err_set(err, AURAL_EFORMAT,
                        "%s: <s> and </s> must be 1-grams", name);
  /* Without <unk>, a lexicon word the LM does not list cannot be output:
   * an LM that lists none of them (another spelling, such as upper case)
   * would make a decoder that says nothing. */
  size_t known = 0;
  for (uint32_t w = 0; rc == 0 && w < lm->n_lex; w++) known += lm->in_lm[w];
  if (rc == 0 && known == 0 && !lm->has_unk)
    rc = aural__err_set(err, AURAL_EFORMAT,
                        "%s: none of its words is in the lexicon (%zu "
                        "n-grams dropped), and it has no <unk>: a decoder "
                        "could output no word (do the two spell words "
                        "alike, in the same case?)",
                        name, lm->n_dropped);
  if (rc < 0) {
    aural_lm_destroy(lm);
    return rc;
  }
  fill_node_best(lm, lex);
  lm->lex = lex;
  *out = lm;
  return 0;
}

static int parse_text(const char *text, size_t len, const char *name,
                      const aural_lexicon *lex, aural_lm **out,
                      aural_err *err) {
  reader r = {.name = name, .err = err, .lex = lex, .s = text, .len = len};
  if (memchr(text, '\0', len) != NULL)
    return aural__err_set(err, AURAL_EFORMAT, "%s: a NUL byte", r.name);
  aural_lm *lm = calloc(1, sizeof *lm);
  if (lm == NULL) return aural__err_set(err, AURAL_ENOMEM, "out of memory");
  lm->n_lex = (uint32_t)lex->n_words;
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
  if (rc == 0) rc = alloc_lm(lm, lex, total, err);
  if (rc == 0) rc = read_sections(&r, lm, want);
  return finish_lm(lm, lex, rc, r.name, out, err);
}

/* --- the binary form ------------------------------------------------------ */

#define BIN_MAGIC "AURALLMB"
#define BIN_VERSION 1u
#define BIN_LEVELS 256

typedef struct bin {
  const unsigned char *p;
  size_t len, at;
  const char *name;
  aural_err *err; /* may be NULL */
  int rc;         /* bin_take's failure */
} bin;

/* The next n bytes, or NULL (and the error set) when the file ends first. */
static const unsigned char *bin_take(bin *b, size_t n, const char *what) {
  if (n > b->len - b->at) {
    b->rc = aural__err_set(b->err, AURAL_ETRUNCATED,
                           "%s: the file ends in its %s (byte %zu)", b->name,
                           what, b->at);
    return NULL;
  }
  const unsigned char *q = b->p + b->at;
  b->at += n;
  return q;
}

static uint32_t le32(const unsigned char *q) {
  return (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
         (uint32_t)q[3] << 24;
}

static uint64_t le64(const unsigned char *q) {
  return le32(q) | (uint64_t)le32(q + 4) << 32;
}

static float lef32(const unsigned char *q) {
  uint32_t u = le32(q);
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* A varint of at most 5 bytes below 2^32 from s[*at..n); false when it
 * runs past n or is longer or larger. */
static bool varint(const unsigned char *s, size_t n, size_t *at,
                   uint32_t *out) {
  uint64_t v = 0;
  for (int i = 0; i < 5 && *at < n; i++) {
    unsigned char c = s[(*at)++];
    v |= (uint64_t)(c & 0x7f) << (7 * i);
    if (!(c & 0x80)) {
      if (v > UINT32_MAX) return false;
      *out = (uint32_t)v;
      return true;
    }
  }
  return false;
}

/* A log10 probability (at most 0, with ARPA's rounding) or a backoff. */
static bool good_logp(float x) { return isfinite(x) && x <= 1e-4f; }

/* The vocabulary: n NUL-terminated words, each mapped to the lexicon's id
 * (or a marker's) into map[], AURAL__LM_NONE for a word it lacks. */
static int bin_vocabulary(bin *b, const aural_lexicon *lex, uint32_t n_lex,
                          size_t n, uint32_t *map) {
  const unsigned char *q = bin_take(b, 8, "header");
  if (q == NULL) return b->rc;
  uint64_t bytes = le64(q);
  if (bytes > b->len - b->at || bytes < 2 * (uint64_t)n)
    return aural__err_set(b->err, AURAL_EFORMAT,
                          "%s: a vocabulary of %llu bytes for %zu words, in "
                          "a file of %zu",
                          b->name, (unsigned long long)bytes, n, b->len);
  const char *s = (const char *)bin_take(b, (size_t)bytes, "vocabulary");
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    const char *nul = memchr(s + at, '\0', (size_t)bytes - at);
    if (nul == NULL || nul == s + at)
      return aural__err_set(b->err, AURAL_EFORMAT,
                            "%s: word %zu of the vocabulary is %s", b->name,
                            i, nul == NULL ? "cut short" : "empty");
    size_t len = (size_t)(nul - (s + at));
    int64_t id = word_index(lex, s + at, len, n_lex);
    map[i] = id < 0 ? AURAL__LM_NONE : (uint32_t)id;
    at += len + 1;
  }
  if (at != bytes)
    return aural__err_set(b->err, AURAL_EFORMAT,
                          "%s: %llu bytes after the vocabulary's %zu words",
                          b->name, (unsigned long long)(bytes - at), n);
  return 0;
}

/* Order k's quantization levels into lev[]: probabilities, then backoffs
 * when k is below the order. */
static int bin_levels(bin *b, int k, bool backoffs,
                      float lev[2][BIN_LEVELS]) {
  for (int t = 0; t < (backoffs ? 2 : 1); t++) {
    const unsigned char *q = bin_take(b, 4 * BIN_LEVELS, "levels");
    if (q == NULL) return b->rc;
    for (int i = 0; i < BIN_LEVELS; i++) {
      lev[t][i] = lef32(q + 4 * i);
      if (t == 0 ? !good_logp(lev[t][i]) : !isfinite(lev[t][i]))
        return aural__err_set(b->err, AURAL_EFORMAT,
                              "%s: %d-gram %s level %d is %g", b->name, k,
                              t == 0 ? "probability" : "backoff", i,
                              (double)lev[t][i]);
    }
  }
  return 0;
}

#define BIN_PENDING 16

/* The at-th k-gram, g (hash h), with its levels, into the table. */
static int bin_insert(bin *b, aural_lm *lm, int k, const float *plev,
                      const float *blev, const unsigned char *ps,
                      const unsigned char *bs, const uint32_t *g, uint32_t h,
                      size_t at) {
  if (!add_ngram_at(lm, g, k, h, plev[ps[at]], bs != NULL ? blev[bs[at]] : 0))
    return aural__err_set(b->err, AURAL_EFORMAT,
                          "%s: %d-gram %zu is listed twice", b->name, k, at);
  return 0;
}

/* Order k (2 and up): the children of each of the n_ctx (k-1)-grams in
 * ctx (file word ids, k - 1 per row), n of them, into the table; their
 * rows into next (k per row) when it is not NULL. */
static int bin_order(bin *b, aural_lm *lm, int k, const uint32_t *ctx,
                     size_t n_ctx, size_t n, size_t n_words,
                     const uint32_t *map, uint32_t *next) {
  bool backoffs = k < lm->order;
  float lev[2][BIN_LEVELS];
  int rc = bin_levels(b, k, backoffs, lev);
  if (rc < 0) return rc;
  const unsigned char *q = bin_take(b, 16, "header");
  if (q == NULL) return b->rc;
  uint64_t count_bytes = le64(q), word_bytes = le64(q + 8);
  size_t rest = b->len - b->at, per = backoffs ? 2 : 1;
  if (count_bytes > rest || word_bytes > rest - count_bytes ||
      n > (rest - count_bytes - word_bytes) / per)
    return aural__err_set(b->err, AURAL_ETRUNCATED,
                          "%s: the %d-grams' streams (%llu and %llu bytes, "
                          "%zu n-grams) do not fit in the file",
                          b->name, k, (unsigned long long)count_bytes,
                          (unsigned long long)word_bytes, n);
  const unsigned char *counts = bin_take(b, (size_t)count_bytes, "children");
  const unsigned char *words = bin_take(b, (size_t)word_bytes, "words");
  const unsigned char *ps = bin_take(b, n, "probabilities");
  const unsigned char *bs = backoffs ? bin_take(b, n, "backoffs") : NULL;
  /* The table is far larger than the caches: each n-gram's slot is
   * fetched while the ones before it go in (BIN_PENDING n-grams later). */
  struct {
    uint32_t g[AURAL__LM_MAX_ORDER], h;
    size_t at;
  } pend[BIN_PENDING];
  size_t n_pend = 0; /* pend[n_pend % BIN_PENDING] is the oldest, when full */
  size_t count_at = 0, word_at = 0, done = 0;
  for (size_t i = 0; i < n_ctx; i++) {
    uint32_t c, w = 0;
    if (!varint(counts, (size_t)count_bytes, &count_at, &c) || c > n - done)
      return aural__err_set(b->err, AURAL_EFORMAT,
                            "%s: the count of %d-grams after %d-gram %zu is "
                            "bad or more than the %zu announced",
                            b->name, k, k - 1, i, n);
    for (uint32_t j = 0; j < c; j++, done++) {
      uint32_t d;
      if (!varint(words, (size_t)word_bytes, &word_at, &d) ||
          (j > 0 && d == 0) || d >= n_words - (j > 0 ? w : 0))
        return aural__err_set(b->err, AURAL_EFORMAT,
                              "%s: %d-gram %zu: a bad word (ids must rise "
                              "within a context and stay below %zu)",
                              b->name, k, done, n_words);
      w = j > 0 ? w + d : d;
      const uint32_t *row = ctx != NULL ? ctx + i * (size_t)(k - 1) : NULL;
      uint32_t g[AURAL__LM_MAX_ORDER] = {0};
      bool known = true;
      for (int t = 0; t < k; t++) {
        uint32_t fw = t < k - 1 ? (row != NULL ? row[t] : (uint32_t)i) : w;
        g[t] = map[fw];
        known = known && g[t] != AURAL__LM_NONE;
        if (next != NULL) next[done * (size_t)k + (size_t)t] = fw;
      }
      if (!known) {
        lm->n_dropped++;
        continue;
      }
      size_t slot = n_pend % BIN_PENDING;
      if (n_pend >= BIN_PENDING) {
        rc = bin_insert(b, lm, k, lev[0], lev[1], ps, bs, pend[slot].g,
                        pend[slot].h, pend[slot].at);
        if (rc < 0) return rc;
      }
      uint32_t hash = hash_ngram(g, k);
      __builtin_prefetch(&lm->table[home_slot(lm, hash)], 1);
      memcpy(pend[slot].g, g, sizeof g);
      pend[slot].h = hash;
      pend[slot].at = done;
      n_pend++;
    }
  }
  size_t first = n_pend > BIN_PENDING ? n_pend - BIN_PENDING : 0;
  for (size_t t = first; t < n_pend; t++) {
    size_t slot = t % BIN_PENDING;
    rc = bin_insert(b, lm, k, lev[0], lev[1], ps, bs, pend[slot].g,
                    pend[slot].h, pend[slot].at);
    if (rc < 0) return rc;
  }
  if (done != n || count_at != count_bytes || word_at != word_bytes)
    return aural__err_set(b->err, AURAL_EFORMAT,
                          "%s: the %d-grams' streams hold %zu n-grams of "
                          "the %zu announced, or bytes past them",
                          b->name, k, done, n);
  return 0;
}

static int parse_binary(const unsigned char *p, size_t len, const char *name,
                        const aural_lexicon *lex, aural_lm **out,
                        aural_err *err) {
  bin b = {.p = p, .len = len, .at = sizeof BIN_MAGIC - 1, .name = name,
           .err = err};
  const unsigned char *q = bin_take(&b, 8, "header");
  if (q == NULL) return b.rc;
  uint32_t version = le32(q), order = le32(q + 4);
  if (version != BIN_VERSION)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: binary LM version %u (this library reads %u)",
                          name, version, BIN_VERSION);
  if (order < 1 || order > AURAL__LM_MAX_ORDER)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: order %u (1 to %d supported)", name, order,
                          AURAL__LM_MAX_ORDER);
  size_t count[AURAL__LM_MAX_ORDER], total = 0;
  if ((q = bin_take(&b, 8 * (size_t)order, "header")) == NULL)
    return b.rc;
  for (uint32_t k = 0; k < order; k++) {
    uint64_t c = le64(q + 8 * k);
    /* A 1-gram takes 10 bytes at least (its word, its NUL, two floats),
     * any other 2 (a word and a level): a file cannot make the table
     * larger than its own size warrants. */
    if (c > MAX_NGRAMS || c > len / (k == 0 ? 10 : 2) || (k == 0 && c == 0))
      return aural__err_set(err, AURAL_EFORMAT,
                            "%s: %llu %u-grams announced (at most %u, and "
                            "no more than its %zu bytes can hold)",
                            name, (unsigned long long)c, k + 1, MAX_NGRAMS,
                            len);
    count[k] = (size_t)c;
    total += count[k];
  }
  /* The least a file with these counts takes after its header: each
   * 1-gram 10 bytes; per order k >= 2 its levels, two stream sizes, a
   * child count per (k-1)-gram and a word and a level or two per k-gram.
   * Refused before anything is allocated for them. */
  uint64_t least = 8 + 10 * (uint64_t)count[0];
  for (uint32_t k = 2; k <= order; k++)
    least += 4 * BIN_LEVELS * (k < order ? 2u : 1u) + 16 + count[k - 2] +
             (k < order ? 3u : 2u) * (uint64_t)count[k - 1];
  if (least > len - b.at)
    return aural__err_set(err, AURAL_ETRUNCATED,
                          "%s: its counts (%zu 1-grams, ...) need %llu bytes "
                          "after the header, and %zu follow",
                          name, count[0], (unsigned long long)least,
                          len - b.at);
  aural_lm *lm = calloc(1, sizeof *lm);
  uint32_t *map = malloc(count[0] * sizeof *map);
  uint32_t *ctx = NULL, *next = NULL;
  int rc = lm && map ? 0 : aural__err_set(err, AURAL_ENOMEM, "out of memory");
  if (lm != NULL) {
    lm->n_lex = (uint32_t)lex->n_words;
    lm->order = (int)order;
  }
  if (rc == 0) rc = alloc_lm(lm, lex, total, err);
  if (rc == 0) rc = bin_vocabulary(&b, lex, lm->n_lex, count[0], map);
  if (rc == 0 && (q = bin_take(&b, 8 * count[0], "1-grams")) == NULL)
    rc = b.rc;
  for (size_t i = 0; rc == 0 && i < count[0]; i++) {
    float logp = lef32(q + 8 * i), bo = lef32(q + 8 * i + 4);
    uint32_t g[AURAL__LM_MAX_ORDER] = {map[i]};
    if (!good_logp(logp) || !isfinite(bo))
      rc = aural__err_set(err, AURAL_EFORMAT,
                          "%s: 1-gram %zu has log10 probability %g and "
                          "backoff %g",
                          name, i, (double)logp, (double)bo);
    else if (map[i] == AURAL__LM_NONE)
      lm->n_dropped++;
    else if (!add_ngram(lm, g, 1, logp, bo))
      rc = aural__err_set(err, AURAL_EFORMAT, "%s: 1-gram %zu is listed twice",
                          name, i);
  }
  for (uint32_t k = 2; rc == 0 && k <= order; k++) {
    if (k < order &&
        (next = malloc(count[k - 1] * (size_t)k * sizeof *next + 1)) == NULL) {
      rc = aural__err_set(err, AURAL_ENOMEM, "out of memory");
      break;
    }
    rc = bin_order(&b, lm, (int)k, ctx, count[k - 2], count[k - 1],
                   count[0], map, next);
    free(ctx);
    ctx = next;
    next = NULL;
  }
  free(ctx);
  free(map);
  if (rc == 0 && b.at != len)
    rc = aural__err_set(err, AURAL_EFORMAT, "%s: %zu bytes after the %d-grams",
                        name, len - b.at, (int)order);
  if (lm == NULL) return rc;
  return finish_lm(lm, lex, rc, name, out, err);
}

static int parse(const char *data, size_t len, const char *name,
                 const aural_lexicon *lex, aural_lm **out, aural_err *err) {
  *out = NULL;
  name = name ? name : "LM";
  if (data == NULL || lex == NULL)
    return aural__err_set(err, AURAL_EINVAL, "LM: no text or no lexicon");
  size_t blank = 0; /* as the lexicon and the other readers: EEMPTY */
  while (blank < len && strchr(" \t\r\n", data[blank]) != NULL &&
         data[blank] != '\0')
    blank++;
  if (blank == len)
    return aural__err_set(err, AURAL_EEMPTY, "%s: empty (no \\data\\ "
                          "section)", name);
  size_t magic = sizeof BIN_MAGIC - 1;
  if (len > 0 && memcmp(data, BIN_MAGIC, len < magic ? len : magic) == 0) {
    if (len <= magic)
      return aural__err_set(err, AURAL_ETRUNCATED,
                            "%s: the file ends in its header (a binary LM "
                            "cut short)",
                            name);
    return parse_binary((const unsigned char *)data, len, name, lex, out, err);
  }
  return parse_text(data, len, name, lex, out, err);
}

int aural_lm_load_buffer(const char *data, size_t len, const char *name,
                         const aural_lexicon *lex, aural_lm **out,
                         aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "LM: no out pointer");
  *out = NULL;
  unsigned char *plain;
  int rc = aural__plain_text(&data, &len, name ? name : "LM",
                             MAX_FILE_BYTES, &plain, err);
  if (rc == 0) rc = parse(data, len, name, lex, out, err);
  free(plain);
  return rc;
}

int aural_lm_load(const char *path, const aural_lexicon *lex, aural_lm **out,
                  aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "LM: no out pointer");
  *out = NULL;
  unsigned char *buf;
  size_t size;
  int rc = aural__read_file(path, "a language model (ARPA or binary)",
                            MAX_FILE_BYTES, &buf, &size, err);
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

const aural_lexicon *aural__lm_lexicon(const aural_lm *lm) { return lm->lex; }

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
