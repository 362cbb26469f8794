/*
 * The pronunciation lexicon: words, their pronunciations in the model's
 * tokens, and the prefix tree of those pronunciations that the decoder
 * walks (one node per distinct token prefix; a node lists the words whose
 * pronunciation ends there).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aural/decoder.h"
#include "internal.h"

#define MAX_FILE_BYTES (256u << 20)
#define MAX_WORD_BYTES 64
#define MAX_PRONS (8u << 20)

/* One pronunciation while loading: a word and its tokens. */
typedef struct pron {
  uint32_t word;
  uint32_t at, n;      /* tokens[at .. at + n) of the loader's token list */
  const uint32_t *tok; /* the same, once the list no longer moves */
} pron;

/* A token of the model: its spelling and its id. */
typedef struct vocab_entry {
  const char *text;
  int id;
} vocab_entry;

typedef struct loader {
  const char *name;
  aural_err *err;
  const aural_model *model;
  vocab_entry *vocab; /* the model's tokens (not the blank), by spelling */
  int n_vocab;
  uint32_t *tokens; /* every pronunciation's tokens, one after another */
  size_t n_tokens, cap_tokens;
  pron *prons;
  size_t n_prons, cap_prons;
} loader;

static uint32_t hash_word(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
  return h;
}

static int cmp_vocab(const void *a, const void *b) {
  const vocab_entry *x = a, *y = b;
  int c = strcmp(x->text, y->text);
  return c != 0 ? c : (x->id > y->id) - (x->id < y->id);
}

/* The model's id of the token spelled s[0..n), or -1. */
static int token_id(const loader *ld, const char *s, size_t n) {
  int lo = 0, hi = ld->n_vocab - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    const char *v = ld->vocab[mid].text;
    int c = strncmp(v, s, n);
    if (c == 0) c = v[n] == '\0' ? 0 : 1;
    if (c == 0) return ld->vocab[mid].id;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

/* Adds word (n bytes) to the table, or finds it; returns its id or -1. */
static int intern_word(aural_lexicon *lex, const char *w, size_t n) {
  uint32_t mask = (uint32_t)lex->hash_cap - 1;
  for (uint32_t i = hash_word(w, n) & mask;; i = (i + 1) & mask) {
    uint32_t id = lex->hash[i];
    if (id == 0) {
      id = (uint32_t)lex->n_words++;
      lex->word_at[id] = (uint32_t)lex->text_len;
      memcpy(lex->text + lex->text_len, w, n);
      lex->text[lex->text_len + n] = '\0';
      lex->text_len += n + 1;
      lex->hash[i] = id + 1;
      return (int)id;
    }
    const char *have = lex->text + lex->word_at[id - 1];
    if (strncmp(have, w, n) == 0 && have[n] == '\0') return (int)id - 1;
  }
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t c = *cap ? *cap * 2 : 1024;
  while (c < need) c *= 2;
  void *q = realloc(*p, c * elem);
  if (q == NULL) return false;
  *p = q;
  *cap = c;
  return true;
}

/* One line "word<TAB>tok tok ...". */
static int parse_line(loader *ld, aural_lexicon *lex, const char *s,
                      size_t len, size_t line) {
  const char *tab = memchr(s, '\t', len);
  if (tab == NULL)
    return aural__err_set(ld->err, AURAL_EFORMAT,
                          "%s:%zu: no tab between the word and its tokens",
                          ld->name, line);
  size_t wn = (size_t)(tab - s);
  if (wn == 0 || wn > MAX_WORD_BYTES)
    return aural__err_set(ld->err, AURAL_EFORMAT,
                          "%s:%zu: a word of %zu bytes (1..%d)", ld->name,
                          line, wn, MAX_WORD_BYTES);
  for (size_t i = 0; i < wn;) {
    size_t k = aural__utf8_len((const unsigned char *)s + i, wn - i);
    if (k == 0 || (unsigned char)s[i] <= ' ' || s[i] == 0x7f ||
        aural__utf8_c1((const unsigned char *)s + i, k))
      return aural__err_set(ld->err, AURAL_EFORMAT,
                            "%s:%zu: the word has a byte 0x%02x at %zu (a "
                            "space, control character or invalid UTF-8)",
                            ld->name, line, (unsigned char)s[i], i);
    i += k;
  }
  if (!grow((void **)&ld->prons, &ld->cap_prons, ld->n_prons + 1,
            sizeof *ld->prons))
    return aural__err_set(ld->err, AURAL_ENOMEM, "out of memory");
  pron *p = &ld->prons[ld->n_prons];
  p->at = (uint32_t)ld->n_tokens;
  p->n = 0;
  const char *end = s + len;
  for (const char *t = tab + 1; t < end;) {
    while (t < end && (*t == ' ' || *t == '\t')) t++;
    const char *e = t;
    while (e < end && *e != ' ' && *e != '\t') e++;
    if (e == t) break;
    int id = token_id(ld, t, (size_t)(e - t));
    if (id <= 0)
      return aural__err_set(ld->err, AURAL_EFORMAT,
                            "%s:%zu: \"%.*s\" is not a token of the model", ld->name,
                            line, (int)(e - t > 32 ? 32 : e - t), t);
    if (p->n >= AURAL_LEXICON_MAX_TOKENS)
      return aural__err_set(ld->err, AURAL_EFORMAT,
                            "%s:%zu: a pronunciation of more than %d tokens",
                            ld->name, line, AURAL_LEXICON_MAX_TOKENS);
    if (!grow((void **)&ld->tokens, &ld->cap_tokens, ld->n_tokens + 1,
              sizeof *ld->tokens))
      return aural__err_set(ld->err, AURAL_ENOMEM, "out of memory");
    ld->tokens[ld->n_tokens++] = (uint32_t)id;
    p->n++;
    t = e;
  }
  if (p->n == 0)
    return aural__err_set(ld->err, AURAL_EFORMAT,
                          "%s:%zu: the word \"%.*s\" has no tokens", ld->name,
                          line, (int)wn, s);
  if (ld->n_prons >= MAX_PRONS)
    return aural__err_set(ld->err, AURAL_EFORMAT,
                          "%s: more than %u pronunciations", ld->name,
                          MAX_PRONS);
  p->word = (uint32_t)intern_word(lex, s, wn);
  ld->n_prons++;
  return 0;
}

/* Pronunciations in token order, then by word: the tree is then built in
 * one pass, and a repeated (word, pronunciation) sits next to its twin. */
static int cmp_pron(const void *a, const void *b) {
  const pron *x = a, *y = b;
  const uint32_t *tx = x->tok, *ty = y->tok;
  for (uint32_t i = 0; i < x->n && i < y->n; i++)
    if (tx[i] != ty[i]) return tx[i] < ty[i] ? -1 : 1;
  if (x->n != y->n) return x->n < y->n ? -1 : 1;
  return (x->word > y->word) - (x->word < y->word);
}

/* The prefix tree of the sorted pronunciations. Node 0 is the root; a
 * node's children are created in token order, so counting them out by
 * parent keeps each node's edges sorted. */
static int build_tree(loader *ld, aural_lexicon *lex) {
  size_t max_nodes = ld->n_tokens + 1;
  uint32_t *parent = malloc(max_nodes * sizeof *parent);
  uint32_t *via = malloc(max_nodes * sizeof *via);
  uint32_t *end_node = malloc((ld->n_prons + 1) * sizeof *end_node);
  uint32_t stack[AURAL_LEXICON_MAX_TOKENS + 1];
  lex->nodes = calloc(max_nodes, sizeof *lex->nodes);
  if (!parent || !via || !end_node || !lex->nodes) {
    free(parent);
    free(via);
    free(end_node);
    return aural__err_set(ld->err, AURAL_ENOMEM, "out of memory");
  }
  size_t n_nodes = 1, n_end = 0;
  stack[0] = 0;
  const pron *prev = NULL;
  for (size_t i = 0; i < ld->n_prons; i++) {
    const pron *p = &ld->prons[i];
    const uint32_t *t = p->tok;
    uint32_t common = 0;
    if (prev != NULL)
      while (common < p->n && common < prev->n &&
             prev->tok[common] == t[common])
        common++;
    if (prev != NULL && common == p->n && prev->n == p->n &&
        prev->word == p->word) {
      prev = p;
      continue; /* the same word and pronunciation again */
    }
    for (uint32_t d = common; d < p->n; d++) {
      parent[n_nodes] = stack[d];
      via[n_nodes] = t[d];
      stack[d + 1] = (uint32_t)n_nodes++;
    }
    end_node[n_end] = stack[p->n];
    ld->prons[n_end++] = *p;
    prev = p;
  }
  lex->n_nodes = n_nodes;
  lex->n_prons = n_end;
  /* Edges: counted per parent, then placed in creation order. */
  lex->edges = malloc((n_nodes > 1 ? n_nodes - 1 : 1) * sizeof *lex->edges);
  lex->node_words = malloc((n_end > 0 ? n_end : 1) * sizeof *lex->node_words);
  if (lex->edges == NULL || lex->node_words == NULL) {
    free(parent);
    free(via);
    free(end_node);
    return aural__err_set(ld->err, AURAL_ENOMEM, "out of memory");
  }
  for (size_t n = 1; n < n_nodes; n++) lex->nodes[parent[n]].n_edges++;
  for (size_t i = 0; i < n_end; i++)
    if (++lex->nodes[end_node[i]].n_words > AURAL_LEXICON_MAX_HOMOPHONES) {
      free(parent);
      free(via);
      free(end_node);
      return aural__err_set(ld->err, AURAL_EFORMAT,
                            "%s: more than %d words share the pronunciation "
                            "of \"%s\"",
                            ld->name, AURAL_LEXICON_MAX_HOMOPHONES,
                            lex->text + lex->word_at[ld->prons[i].word]);
    }
  uint32_t e = 0, w = 0;
  for (size_t n = 0; n < n_nodes; n++) {
    lex->nodes[n].first_edge = e;
    lex->nodes[n].first_word = w;
    e += lex->nodes[n].n_edges;
    w += lex->nodes[n].n_words;
    if (lex->nodes[n].n_words > lex->max_node_words)
      lex->max_node_words = lex->nodes[n].n_words;
    lex->nodes[n].n_edges = 0;
    lex->nodes[n].n_words = 0;
  }
  for (size_t n = 1; n < n_nodes; n++) {
    aural__lex_node *pn = &lex->nodes[parent[n]];
    lex->edges[pn->first_edge + pn->n_edges++] =
        (aural__lex_edge){.token = via[n], .child = (uint32_t)n};
  }
  for (size_t i = 0; i < n_end; i++) {
    aural__lex_node *nd = &lex->nodes[end_node[i]];
    lex->node_words[nd->first_word + nd->n_words++] = ld->prons[i].word;
  }
  free(parent);
  free(via);
  free(end_node);
  return 0;
}

/* The model's tokens sorted by spelling, each with its id (a model may
 * have many: up to the model loader's limit, well past 16 bits). */
static int setup_vocab(loader *ld) {
  const aural_model_config *mc = aural_model_get_config(ld->model);
  if (mc->vocab_size < 2)
    return aural__err_set(ld->err, AURAL_EINVAL,
                          "%s: the model has no CTC head (no tokens to "
                          "spell words with)",
                          ld->name);
  ld->n_vocab = mc->vocab_size - 1;
  ld->vocab = malloc((size_t)ld->n_vocab * sizeof *ld->vocab);
  if (ld->vocab == NULL)
    return aural__err_set(ld->err, AURAL_ENOMEM, "out of memory");
  for (int i = 0; i < ld->n_vocab; i++)
    ld->vocab[i] = (vocab_entry){aural_model_token(ld->model, i + 1), i + 1};
  qsort(ld->vocab, (size_t)ld->n_vocab, sizeof *ld->vocab, cmp_vocab);
  return 0;
}

static int parse_all(loader *ld, aural_lexicon *lex, const char *text,
                     size_t len) {
  size_t line = 0;
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t n = nl != NULL ? (size_t)(nl - (text + at)) : len - at;
    line++;
    const char *s = text + at;
    at += n + 1;
    if (n > 0 && s[n - 1] == '\r') n--;
    if (n == 0 || s[0] == '#') continue;
    if (memchr(s, '\0', n) != NULL)
      return aural__err_set(ld->err, AURAL_EFORMAT,
                            "%s:%zu: a NUL byte", ld->name, line);
    int rc = parse_line(ld, lex, s, n, line);
    if (rc < 0) return rc;
  }
  if (ld->n_prons == 0)
    return aural__err_set(ld->err, AURAL_EEMPTY,
                          "%s: no pronunciations", ld->name);
  return 0;
}

static int parse_text(const char *text, size_t len, const char *name,
                      const aural_model *model, aural_lexicon **out,
                      aural_err *err) {
  *out = NULL;
  if (text == NULL || model == NULL)
    return aural__err_set(err, AURAL_EINVAL, "lexicon: no text or no model");
  loader ld = {.name = name ? name : "lexicon", .err = err, .model = model};
  aural_lexicon *lex = calloc(1, sizeof *lex);
  int rc = lex == NULL ? aural__err_set(err, AURAL_ENOMEM, "out of memory")
                       : setup_vocab(&ld);
  if (rc == 0) {
    /* At most one word per pronunciation, so per tab (and no more than
     * MAX_PRONS): the table and its text fit in these, whatever else the
     * file holds. */
    size_t lines = 1;
    for (size_t i = 0; i < len && lines <= MAX_PRONS; i++)
      lines += text[i] == '\t';
    lex->hash_cap = 16;
    while (lex->hash_cap < 2 * lines) lex->hash_cap *= 2;
    lex->hash = calloc(lex->hash_cap, sizeof *lex->hash);
    lex->word_at = malloc(lines * sizeof *lex->word_at);
    lex->text = malloc(len + 1);
    if (!lex->hash || !lex->word_at || !lex->text)
      rc = aural__err_set(err, AURAL_ENOMEM, "out of memory");
  }
  if (rc == 0) rc = parse_all(&ld, lex, text, len);
  if (rc == 0) {
    for (size_t i = 0; i < ld.n_prons; i++)
      ld.prons[i].tok = ld.tokens + ld.prons[i].at;
    qsort(ld.prons, ld.n_prons, sizeof *ld.prons, cmp_pron);
    rc = build_tree(&ld, lex);
  }
  free(ld.vocab);
  free(ld.tokens);
  free(ld.prons);
  if (rc < 0) {
    aural_lexicon_destroy(lex);
    return rc;
  }
  lex->vocab_size = aural_model_get_config(model)->vocab_size;
  *out = lex;
  return 0;
}

int aural_lexicon_load_buffer(const char *text, size_t len, const char *name,
                              const aural_model *model, aural_lexicon **out,
                              aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "lexicon: no out pointer");
  *out = NULL;
  unsigned char *plain;
  int rc = aural__plain_text(&text, &len, name ? name : "lexicon",
                             MAX_FILE_BYTES, &plain, err);
  if (rc == 0) rc = parse_text(text, len, name, model, out, err);
  free(plain);
  return rc;
}

int aural_lexicon_load(const char *path, const aural_model *model,
                       aural_lexicon **out, aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "lexicon: no out pointer");
  *out = NULL;
  unsigned char *buf;
  size_t size;
  int rc = aural__read_file(path, "a lexicon", MAX_FILE_BYTES, &buf, &size,
                            err);
  if (rc < 0) return rc;
  rc = aural_lexicon_load_buffer((const char *)buf, size, path, model, out,
                                 err);
  free(buf);
  return rc;
}

void aural_lexicon_destroy(aural_lexicon *lex) {
  if (lex == NULL) return;
  free(lex->text);
  free(lex->word_at);
  free(lex->hash);
  free(lex->nodes);
  free(lex->edges);
  free(lex->node_words);
  free(lex);
}

void aural_lexicon_get_info(const aural_lexicon *lex,
                            aural_lexicon_info *info) {
  *info = (aural_lexicon_info){
      .n_words = lex->n_words,
      .n_prons = lex->n_prons,
      .n_nodes = lex->n_nodes,
      .memory_bytes = sizeof *lex + lex->text_len +
                      lex->n_words * sizeof *lex->word_at +
                      lex->hash_cap * sizeof *lex->hash +
                      lex->n_nodes * (sizeof *lex->nodes + sizeof *lex->edges) +
                      lex->n_prons * sizeof *lex->node_words};
}

int aural_lexicon_find(const aural_lexicon *lex, const char *word) {
  if (lex == NULL || word == NULL) return -1;
  size_t n = strlen(word);
  uint32_t mask = (uint32_t)lex->hash_cap - 1;
  for (uint32_t i = hash_word(word, n) & mask;; i = (i + 1) & mask) {
    uint32_t id = lex->hash[i];
    if (id == 0) return -1;
    if (strcmp(lex->text + lex->word_at[id - 1], word) == 0) return (int)id - 1;
  }
}

const char *aural_lexicon_word(const aural_lexicon *lex, int id) {
  if (lex == NULL || id < 0 || (size_t)id >= lex->n_words) return NULL;
  return lex->text + lex->word_at[id];
}

uint32_t aural__lex_child(const aural_lexicon *lex, uint32_t node, int token) {
  uint32_t tok = (uint32_t)token;
  const aural__lex_node *nd = &lex->nodes[node];
  const aural__lex_edge *e = lex->edges + nd->first_edge;
  uint32_t lo = 0, hi = nd->n_edges;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (e[mid].token < tok)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < nd->n_edges && e[lo].token == tok ? e[lo].child : 0;
}
