/*
 * Custom words: espeak-ng's grapheme-to-phoneme conversion mapped into the
 * model's tokens by a map file (aural/decoder.h), and the lexicon of them.
 *
 * A word is translated by libespeak-ng in each of the map's dialects into
 * its mnemonics ('|' between them, as `espeak-ng -x --sep='|'` prints); the
 * stress and syllable marks are dropped, a mnemonic naming a pause ('_...')
 * too, each remaining one becomes the map's tokens for that dialect, and an
 * `after` rule drops a mnemonic right after one of the listed tokens. The
 * distinct results are the word's pronunciations.
 *
 * libespeak-ng keeps its state in globals, so one lock covers its every
 * use in this process. A request switches voices once per dialect, and
 * each switch is followed by an empty synthesis: libespeak-ng queues a
 * copy of the new voice (about 1.3 kB) for its synthesizer, which only
 * synthesis frees, so without it every switch would keep that memory for
 * good.
 */
#include <ctype.h>
#include <espeak-ng/speak_lib.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aural/decoder.h"
#include "internal.h"

#define MAX_FILE_BYTES (1u << 20)
#define MAX_DIALECTS 16
#define MAX_ENTRIES 1024      /* mnemonics of one dialect */
#define MAX_NAME 32           /* bytes of a mnemonic, dialect or token */
#define MAX_MAPPED 4          /* tokens one mnemonic becomes */
#define MAX_AFTER 8           /* tokens an after rule lists */
#define MAX_DROP 16           /* characters dropped from mnemonics */
#define MAX_WORDS 1024        /* custom words per lexicon */
#define PRON_TEXT 2048        /* one word's espeak-ng output, at most */

typedef struct entry {
  char name[MAX_NAME];
  int n_tokens, tokens[MAX_MAPPED];
  int n_after, after[MAX_AFTER]; /* dropped right after one of these */
} entry;

typedef struct dialect {
  char name[MAX_NAME];
  entry *entries;
  int n_entries;
} dialect;

struct aural_g2p {
  const aural_model *model;
  char drop[MAX_DROP + 1];
  dialect dialects[MAX_DIALECTS];
  int n_dialects;
};

static pthread_mutex_t espeak_lock = PTHREAD_MUTEX_INITIALIZER;
static int espeak_state; /* 0: not tried, 1: ready, -1: failed */

/* --- the map file --------------------------------------------------------- */

static int model_token(const aural_model *model, const char *s) {
  int v = aural_model_get_config(model)->vocab_size;
  for (int id = 1; id < v; id++)
    if (strcmp(aural_model_token(model, id), s) == 0) return id;
  return -1;
}

static entry *find_entry(const dialect *d, const char *name) {
  for (int i = 0; i < d->n_entries; i++)
    if (strcmp(d->entries[i].name, name) == 0) return &d->entries[i];
  return NULL;
}

/* Splits s at spaces and tabs into at most max words of < MAX_NAME bytes.
 * Returns how many, or -1 when there are more or one is too long.
 * strtok_r: strtok's hidden state is the caller's, and another thread's. */
static int split_words(char *s, char **out, int max) {
  int n = 0;
  char *save = NULL;
  for (char *t = strtok_r(s, " \t", &save); t != NULL;
       t = strtok_r(NULL, " \t", &save)) {
    if (n == max || strlen(t) >= MAX_NAME) return -1;
    out[n++] = t;
  }
  return n;
}

static int parse_map_line(aural_g2p *g, char *line, const char *name,
                          size_t ln, aural_err *err) {
  char *w[2 + MAX_AFTER + MAX_MAPPED];
  int n = split_words(line, w, (int)(sizeof w / sizeof *w));
  if (n < 0)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s:%zu: too many fields, or one of %d bytes or more",
                          name, ln, MAX_NAME);
  if (n == 0) return 0;
  dialect *d = g->n_dialects > 0 ? &g->dialects[g->n_dialects - 1] : NULL;
  if (strcmp(w[0], "drop") == 0) {
    if (n != 2 || strlen(w[1]) > MAX_DROP)
      return aural__err_set(err, AURAL_EFORMAT,
                            "%s:%zu: \"drop\" takes one word of at most %d "
                            "characters",
                            name, ln, MAX_DROP);
    snprintf(g->drop, sizeof g->drop, "%s", w[1]);
    return 0;
  }
  if (strcmp(w[0], "dialect") == 0) {
    if (n != 2)
      return aural__err_set(err, AURAL_EFORMAT,
                            "%s:%zu: \"dialect\" takes one name", name, ln);
    if (g->n_dialects == MAX_DIALECTS)
      return aural__err_set(err, AURAL_EFORMAT, "%s:%zu: more than %d dialects",
                            name, ln, MAX_DIALECTS);
    for (const char *c = w[1]; *c; c++)
      if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_')
        return aural__err_set(err, AURAL_EFORMAT,
                              "%s:%zu: a dialect name of letters, digits, '-' "
                              "and '_' only",
                              name, ln);
    d = &g->dialects[g->n_dialects++];
    snprintf(d->name, sizeof d->name, "%s", w[1]);
    d->entries = calloc(MAX_ENTRIES, sizeof *d->entries);
    if (d->entries == NULL)
      return aural__err_set(err, AURAL_ENOMEM, "out of memory");
    return 0;
  }
  bool is_map = strcmp(w[0], "map") == 0, is_after = strcmp(w[0], "after") == 0;
  if (!is_map && !is_after)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s:%zu: \"%s\" is not drop, dialect, map or after",
                          name, ln, w[0]);
  if (d == NULL)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s:%zu: \"%s\" before any \"dialect\"", name, ln, w[0]);
  if (n < 2 || (is_map && n - 2 > MAX_MAPPED) ||
      (is_after && (n < 3 || n - 2 > MAX_AFTER)))
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s:%zu: \"map MNEMONIC [TOKEN ...]\" (at most %d "
                          "tokens) or \"after MNEMONIC TOKEN ...\" (1 to %d "
                          "tokens)",
                          name, ln, MAX_MAPPED, MAX_AFTER);
  entry *e = find_entry(d, w[1]);
  if (is_map && e != NULL)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s:%zu: \"%s\" is mapped twice in %s", name, ln, w[1],
                          d->name);
  if (is_after && e == NULL)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s:%zu: \"after %s\" before its \"map\"", name, ln,
                          w[1]);
  if (is_map) {
    if (d->n_entries == MAX_ENTRIES)
      return aural__err_set(err, AURAL_EFORMAT,
                            "%s:%zu: more than %d mnemonics in %s", name, ln,
                            MAX_ENTRIES, d->name);
    e = &d->entries[d->n_entries++];
    snprintf(e->name, sizeof e->name, "%s", w[1]);
  }
  int *ids = is_map ? e->tokens : e->after;
  for (int i = 2; i < n; i++) {
    int id = model_token(g->model, w[i]);
    if (id <= 0)
      return aural__err_set(err, AURAL_EFORMAT,
                            "%s:%zu: \"%s\" is not a token of the model", name,
                            ln, w[i]);
    ids[i - 2] = id;
  }
  if (is_map)
    e->n_tokens = n - 2;
  else
    e->n_after = n - 2;
  return 0;
}

static int parse_text(const char *text, size_t len, const char *name,
                      const aural_model *model, aural_g2p **out,
                      aural_err *err) {
  *out = NULL;
  if (text == NULL || model == NULL)
    return aural__err_set(err, AURAL_EINVAL, "g2p map: no text or no model");
  name = name != NULL ? name : "g2p map";
  if (aural_model_get_config(model)->vocab_size < 2)
    return aural__err_set(err, AURAL_EINVAL,
                          "%s: the model has no CTC head (no tokens to spell "
                          "words with)",
                          name);
  aural_g2p *g = calloc(1, sizeof *g);
  if (g == NULL) return aural__err_set(err, AURAL_ENOMEM, "out of memory");
  g->model = model;
  int rc = 0;
  size_t ln = 0;
  char line[512];
  for (size_t at = 0; at < len && rc == 0;) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t n = nl != NULL ? (size_t)(nl - (text + at)) : len - at;
    const char *s = text + at;
    at += n + 1;
    ln++;
    if (n > 0 && s[n - 1] == '\r') n--;
    if (n == 0 || s[0] == '#') continue;
    if (n >= sizeof line)
      rc = aural__err_set(err, AURAL_EFORMAT, "%s:%zu: a line of %zu bytes "
                          "(at most %zu)", name, ln, n, sizeof line - 1);
    else if (memchr(s, '\0', n) != NULL)
      rc = aural__err_set(err, AURAL_EFORMAT, "%s:%zu: a NUL byte", name, ln);
    if (rc < 0) break;
    memcpy(line, s, n);
    line[n] = '\0';
    rc = parse_map_line(g, line, name, ln, err);
  }
  if (rc == 0 && g->n_dialects == 0)
    rc = aural__err_set(err, AURAL_EEMPTY, "%s: no dialect", name);
  for (int i = 0; rc == 0 && i < g->n_dialects; i++)
    if (g->dialects[i].n_entries == 0)
      rc = aural__err_set(err, AURAL_EEMPTY, "%s: dialect %s maps nothing",
                          name, g->dialects[i].name);
  if (rc < 0) {
    aural_g2p_destroy(g);
    return rc;
  }
  *out = g;
  return 0;
}

int aural_g2p_load_buffer(const char *text, size_t len, const char *name,
                          const aural_model *model, aural_g2p **out,
                          aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "g2p map: no out pointer");
  *out = NULL;
  unsigned char *plain;
  int rc = aural__plain_text(&text, &len, name ? name : "g2p map",
                             MAX_FILE_BYTES, &plain, err);
  if (rc == 0) rc = parse_text(text, len, name, model, out, err);
  free(plain);
  return rc;
}

int aural_g2p_load(const char *path, const aural_model *model, aural_g2p **out,
                   aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "g2p map: no out pointer");
  *out = NULL;
  unsigned char *buf;
  size_t size;
  int rc = aural__read_file(path, "a g2p map", MAX_FILE_BYTES, &buf, &size,
                            err);
  if (rc < 0) return rc;
  rc = aural_g2p_load_buffer((const char *)buf, size, path, model, out, err);
  free(buf);
  return rc;
}

void aural_g2p_destroy(aural_g2p *g) {
  if (g == NULL) return;
  for (int i = 0; i < g->n_dialects; i++) free(g->dialects[i].entries);
  free(g);
}

/* --- pronouncing ---------------------------------------------------------- */

static int discard_audio(short *wav, int n, espeak_EVENT *events) {
  (void)wav;
  (void)n;
  (void)events;
  return 0;
}

/* Makes voice libespeak-ng's current one. Called with espeak_lock held. */
static int espeak_voice(const char *voice, aural_err *err) {
  if (espeak_state == 0) {
    int rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, NULL,
                                 espeakINITIALIZE_DONT_EXIT);
    espeak_state = rate > 0 ? 1 : -1;
    if (rate > 0) espeak_SetSynthCallback(discard_audio);
  }
  if (espeak_state < 0)
    return aural__err_set(err, AURAL_EIO,
                          "custom words: libespeak-ng did not start (is "
                          "espeak-ng-data installed?)");
  /* As espeak-ng's own command does: a voice by name, else by language. */
  espeak_VOICE by_language = {.languages = voice};
  if (espeak_SetVoiceByName(voice) != EE_OK &&
      espeak_SetVoiceByProperties(&by_language) != EE_OK)
    return aural__err_set(err, AURAL_ECONFIG,
                          "custom words: espeak-ng has no voice \"%s\"", voice);
  /* The queued copy of the voice is freed by synthesis (see the top). */
  espeak_Synth("", 1, 0, POS_CHARACTER, 0, espeakCHARS_UTF8, NULL, NULL);
  return 0;
}

/* espeak-ng's mnemonics for word in the current voice, '|' between them
 * and spaces between words, into out. Called with espeak_lock held. */
static int espeak_word(const char *word, char *out, size_t cap,
                       aural_err *err) {
  size_t n = 0;
  const void *p = word;
  while (p != NULL) {
    const char *s = espeak_TextToPhonemes(&p, espeakCHARS_UTF8, '|' << 8);
    size_t k = s != NULL ? strlen(s) : 0;
    if (n + k + 2 > cap)
      return aural__err_set(err, AURAL_EINVAL,
                            "custom words: \"%s\" is too long to pronounce",
                            word);
    if (k > 0) {
      if (n > 0) out[n++] = ' ';
      memcpy(out + n, s, k);
      n += k;
    }
  }
  out[n] = '\0';
  return 0;
}

/* The model's tokens for espeak-ng's text in dialect d, into tok (room
 * for AURAL_LEXICON_MAX_TOKENS). Returns how many, or < 0 with err set. */
static int map_pron(const aural_g2p *g, const dialect *d, const char *word,
                    char *text, int *tok, aural_err *err) {
  int n = 0;
  for (char *piece = text; *piece != '\0';) {
    size_t len = strcspn(piece, "| ");
    char name[MAX_NAME];
    size_t k = 0;
    for (size_t i = 0; i < len; i++)
      if (strchr(g->drop, piece[i]) == NULL && k + 1 < sizeof name)
        name[k++] = piece[i];
    name[k] = '\0';
    piece += len + (piece[len] != '\0');
    if (k == 0 || name[0] == '_') continue;
    const entry *e = find_entry(d, name);
    if (e == NULL)
      return aural__err_set(err, AURAL_EFORMAT,
                            "custom words: \"%s\" has espeak-ng's phoneme "
                            "\"%s\" (%s), which the g2p map does not map",
                            word, name, d->name);
    bool skip = false;
    for (int i = 0; i < e->n_after && n > 0; i++)
      skip |= tok[n - 1] == e->after[i];
    if (skip) continue;
    if (n + e->n_tokens > AURAL_LEXICON_MAX_TOKENS)
      return aural__err_set(err, AURAL_EINVAL,
                            "custom words: \"%s\" has more than %d tokens",
                            word, AURAL_LEXICON_MAX_TOKENS);
    for (int i = 0; i < e->n_tokens; i++) tok[n++] = e->tokens[i];
  }
  return n;
}

/* A word as given: 1..64 bytes of UTF-8 with no space, comma or control
 * byte, and not starting with '#' or a byte order mark (U+FEFF): in the
 * lexicon text the word becomes, the first is a comment (the word would
 * vanish without a word said) and the second, at the start of the text,
 * is skipped as a file's (the decoder would say the word without it). */
int aural_g2p_check_word(const char *w, aural_err *err) {
  if (w == NULL)
    return aural__err_set(err, AURAL_EINVAL, "custom words: no word given");
  size_t n = strlen(w);
  if (n == 0 || n > 64)
    return aural__err_set(err, AURAL_EINVAL,
                          "custom words: a word of %zu bytes (1..64)", n);
  if (w[0] == '#')
    return aural__err_set(err, AURAL_EINVAL,
                          "custom words: \"%.64s\" starts with '#' (a "
                          "lexicon's comments do)",
                          w);
  if (n >= 3 && memcmp(w, "\xef\xbb\xbf", 3) == 0)
    return aural__err_set(err, AURAL_EINVAL,
                          "custom words: \"%.64s\" starts with a byte order "
                          "mark (U+FEFF)",
                          w);
  for (size_t i = 0; i < n;) {
    size_t k = aural__utf8_len((const unsigned char *)w + i, n - i);
    if (k == 0 || (unsigned char)w[i] <= ' ' || w[i] == 0x7f || w[i] == ',' ||
        aural__utf8_c1((const unsigned char *)w + i, k))
      return aural__err_set(err, AURAL_EINVAL,
                            "custom words: \"%.64s\" has a byte 0x%02x at %zu "
                            "(a space, comma, control character or invalid "
                            "UTF-8)",
                            w, (unsigned char)w[i], i);
    i += k;
  }
  return 0;
}

/* Appends s to the growing text *buf. */
static int append(char **buf, size_t *len, size_t *cap, const char *s,
                  size_t n) {
  if (*len + n + 1 > *cap) {
    size_t c = *cap ? *cap * 2 : 4096;
    while (c < *len + n + 1) c *= 2;
    char *b = realloc(*buf, c);
    if (b == NULL) return -1;
    *buf = b;
    *cap = c;
  }
  memcpy(*buf + *len, s, n);
  *len += n;
  (*buf)[*len] = '\0';
  return 0;
}

/* Each word's tokens in each dialect: tok[(w * n_dialects + d) * ROW],
 * the count first. One voice switch per dialect. */
#define ROW (AURAL_LEXICON_MAX_TOKENS + 1)
static int pronounce_all(const aural_g2p *g, const char *const *words,
                         size_t n, int *tok, aural_err *err) {
  char text[PRON_TEXT];
  int rc = 0;
  pthread_mutex_lock(&espeak_lock);
  for (int di = 0; di < g->n_dialects && rc == 0; di++) {
    const dialect *d = &g->dialects[di];
    rc = espeak_voice(d->name, err);
    for (size_t w = 0; w < n && rc == 0; w++) {
      int *row = tok + (w * (size_t)g->n_dialects + (size_t)di) * ROW;
      rc = espeak_word(words[w], text, sizeof text, err);
      if (rc == 0) row[0] = map_pron(g, d, words[w], text, row + 1, err);
      if (rc == 0 && row[0] < 0) rc = row[0];
      if (rc == 0 && row[0] == 0)
        rc = aural__err_set(err, AURAL_EINVAL,
                            "custom words: espeak-ng says nothing for \"%s\"",
                            words[w]);
    }
  }
  pthread_mutex_unlock(&espeak_lock);
  return rc;
}

/* A word's distinct pronunciations (rows of pronounce_all) as lexicon
 * lines appended to *buf. */
static int append_word(const aural_g2p *g, const char *word, const int *rows,
                       char **buf, size_t *len, size_t *cap, aural_err *err) {
  for (int di = 0; di < g->n_dialects; di++) {
    const int *row = rows + (size_t)di * ROW;
    bool seen = false;
    for (int j = 0; j < di && !seen; j++)
      seen = memcmp(rows + (size_t)j * ROW, row,
                    (size_t)(row[0] + 1) * sizeof *row) == 0;
    if (seen) continue;
    bool ok = append(buf, len, cap, word, strlen(word)) == 0;
    for (int i = 0; ok && i < row[0]; i++) {
      const char *t = aural_model_token(g->model, row[1 + i]);
      ok = append(buf, len, cap, i == 0 ? "\t" : " ", 1) == 0 &&
           append(buf, len, cap, t, strlen(t)) == 0;
    }
    if (!ok || append(buf, len, cap, "\n", 1) < 0)
      return aural__err_set(err, AURAL_ENOMEM, "out of memory");
  }
  return 0;
}

int aural_g2p_text(const aural_g2p *g, const char *const *words, size_t n,
                   char **out, aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "custom words: no out pointer");
  *out = NULL;
  if (g == NULL || (words == NULL && n > 0))
    return aural__err_set(err, AURAL_EINVAL, "custom words: no map or words");
  if (n == 0)
    return aural__err_set(err, AURAL_EEMPTY, "custom words: none given");
  if (n > MAX_WORDS)
    return aural__err_set(err, AURAL_EINVAL,
                          "custom words: %zu of them (at most %d)", n,
                          MAX_WORDS);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) rc = aural_g2p_check_word(words[i], err);
  if (rc < 0) return rc;
  int *tok = calloc(n * (size_t)g->n_dialects * ROW, sizeof *tok);
  if (tok == NULL) return aural__err_set(err, AURAL_ENOMEM, "out of memory");
  rc = pronounce_all(g, words, n, tok, err);
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (size_t w = 0; w < n && rc == 0; w++)
    rc = append_word(g, words[w], tok + w * (size_t)g->n_dialects * ROW, &buf,
                     &len, &cap, err);
  free(tok);
  if (rc < 0) {
    free(buf);
    return rc;
  }
  *out = buf;
  return 0;
}

int aural_g2p_lexicon(const aural_g2p *g, const char *const *words, size_t n,
                      aural_lexicon **out, aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "custom words: no out pointer");
  *out = NULL;
  char *text;
  int rc = aural_g2p_text(g, words, n, &text, err);
  if (rc < 0) return rc;
  rc = aural_lexicon_load_buffer(text, strlen(text), "custom words", g->model,
                                 out, err);
  free(text);
  return rc;
}
