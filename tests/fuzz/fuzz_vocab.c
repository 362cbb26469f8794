/*
 * libFuzzer target for custom words (DESIGN.md §8): the words a client
 * sends in AUDIO_OPEN's "vocabulary" or a producer writes in a cluster
 * announcement, pronounced through the bundled model's g2p map by
 * libespeak-ng (aural_g2p_lexicon) and searched by a decoder. The input is
 * the words, one a line (a newline at the end ends the last; at most 8:
 * each costs libespeak-ng milliseconds in each of the map's dialects).
 * Build and run with tools/fuzz.sh 60 vocab from the repository root (it
 * loads models/default.safetensors and models/default.g2p.txt).
 *
 * Beyond "no crash, no leak, no undefined behaviour", the target aborts
 * when a contract breaks:
 *   - aural_g2p_check_word accepts a word exactly when it is 1..64 bytes
 *     of UTF-8 (no overlong form, surrogate or code point above U+10FFFF)
 *     without C0 or C1 controls, DEL, space or comma, not starting with
 *     '#' or U+FEFF;
 *   - a list with a word it refuses is refused by aural_g2p_lexicon with
 *     AURAL_EINVAL;
 *   - a failure returns a negative code, leaves *out NULL and says
 *     "custom words";
 *   - a lexicon that is made holds every word, and a decoder runs over it.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <aural.h>
#include <aural/decoder.h>

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_WORDS 8

static aural_model *model;
static aural_g2p *g2p;
static aural_lexicon *fixed_lex;
static int vocab_size;

static void init(void) {
  aural_err err;
  if (aural_model_load("models/default.safetensors", NULL, &model, &err) < 0 ||
      aural_g2p_load("models/default.g2p.txt", model, &g2p, &err) < 0) {
    fprintf(stderr, "fuzz_vocab: %s (run from the repository root)\n",
            err.msg);
    abort();
  }
  vocab_size = aural_model_get_config(model)->vocab_size;
  CHECK(vocab_size > 1);
  const char *lex = "the\tDH AH\nsee\tS IY\n";
  CHECK(aural_lexicon_load_buffer(lex, strlen(lex), "fixed", model,
                                  &fixed_lex, &err) == 0);
}

/* The length of the UTF-8 sequence at p (n bytes left) when it is one
 * whole, shortest-form encoding of a scalar value, else 0. */
static size_t utf8_char(const uint8_t *p, size_t n) {
  uint32_t cp;
  size_t len;
  if (p[0] < 0x80) return 1;
  if (p[0] >= 0xc2 && p[0] <= 0xdf) {
    len = 2;
    cp = p[0] & 0x1fu;
  } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
    len = 3;
    cp = p[0] & 0x0fu;
  } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
    len = 4;
    cp = p[0] & 0x07u;
  } else {
    return 0;
  }
  if (len > n) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (p[i] & 0x3fu);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
      (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
    return 0;
  return len;
}

/* aural_g2p_check_word's contract, from scratch. */
static bool word_ok(const char *w) {
  size_t n = strlen(w);
  if (n == 0 || n > 64 || w[0] == '#' || strncmp(w, "\xef\xbb\xbf", 3) == 0)
    return false;
  for (size_t i = 0; i < n;) {
    const uint8_t *p = (const uint8_t *)w + i;
    size_t k = utf8_char(p, n - i);
    if (k == 0 || p[0] <= ' ' || p[0] == 0x7f || p[0] == ',' ||
        (k == 2 && p[0] == 0xc2 && p[1] < 0xa0))
      return false;
    i += k;
  }
  return true;
}

/* A few frames through a decoder with the custom words. */
static void decode(const aural_lexicon *custom) {
  aural_decoder *d;
  aural_err err;
  aural_decoder_config dc;
  aural_decoder_config_default(&dc);
  dc.boost_words = custom;
  CHECK(aural_decoder_create(&dc, model, fixed_lex, NULL, &d, &err) == 0);
  enum { T = 24 };
  float *logits = malloc((size_t)T * (size_t)vocab_size * sizeof *logits);
  CHECK(logits != NULL);
  for (int t = 0; t < T; t++)
    for (int k = 0; k < vocab_size; k++)
      logits[t * vocab_size + k] = (float)((t * 7 + k * 3) % 11);
  aural_word w[64];
  size_t n;
  for (size_t at = 0; at < T;) {
    at += aural_decoder_push(d, logits + at * (size_t)vocab_size, T - at);
    aural_decoder_final(d, w, 64, &n);
  }
  aural_decoder_partial(d, w, 64);
  aural_decoder_end(d);
  aural_decoder_final(d, w, 64, &n);
  aural_decoder_destroy(d);
  free(logits);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (model == NULL) init();
  char *text = malloc(size + 1);
  CHECK(text != NULL);
  memcpy(text, data, size);
  text[size] = '\0';
  const char *words[MAX_WORDS];
  size_t n = 0;
  bool all_ok = true;
  for (char *p = text; n < MAX_WORDS;) {
    char *nl = memchr(p, '\n', (size_t)(text + size - p));
    if (nl != NULL) *nl = '\0';
    /* A NUL inside a line ends the word there, as in C strings. */
    words[n] = p;
    bool ok = word_ok(p);
    aural_err err = {0};
    int rc = aural_g2p_check_word(p, &err);
    CHECK((rc == 0) == ok);
    CHECK(ok || (rc == AURAL_EINVAL && strstr(err.msg, "custom words")));
    all_ok &= ok;
    n++;
    if (nl == NULL || nl + 1 == text + size) break; /* a last newline */
    p = nl + 1;
  }
  aural_err err = {0};
  aural_lexicon *lex = (aural_lexicon *)1;
  int rc = aural_g2p_lexicon(g2p, words, n, &lex, &err);
  if (rc < 0) {
    CHECK(lex == NULL && strstr(err.msg, "custom words") != NULL);
    CHECK(all_ok || rc == AURAL_EINVAL);
  } else {
    CHECK(all_ok && lex != NULL);
    aural_lexicon_info li;
    aural_lexicon_get_info(lex, &li);
    CHECK(li.n_words >= 1 && li.n_words <= n && li.n_prons >= li.n_words);
    for (size_t i = 0; i < n; i++)
      CHECK(aural_lexicon_find(lex, words[i]) >= 0);
    decode(lex);
    aural_lexicon_destroy(lex);
  }
  free(text);
  return 0;
}
