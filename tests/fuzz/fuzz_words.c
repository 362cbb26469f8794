/*
 * libFuzzer target for the words resources (DESIGN.md §8: untrusted input
 * like model files): the lexicon reader, the LM reader (ARPA text and the
 * binary form) and, for inputs that load, a decoder run over a few
 * frames. The first byte picks what the rest is: 2, a g2p map (custom
 * words' pronunciations; when it loads, a few words are pronounced through
 * it and decoded as custom words); else even, a lexicon (an LM of its
 * words' unigrams then loads over it); odd, an LM (ARPA or binary) over a
 * fixed lexicon. Build and run with tools/fuzz.sh (the seeds are
 * tests/fuzz/corpus/words/).
 *
 * The model is tests/data/encoder/prenorm_gelu_rope.safetensors (run from
 * the repository root): its tokens are a e i o u s t and two more.
 *
 * Beyond "no crash, no leak, no undefined behaviour", a failure must
 * return a negative code, leave *out NULL and name the input.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <aural.h>
#include <aural/decoder.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static aural_model *model;
static aural_lexicon *fixed_lex;

#include "fuzz_check.h"

static void init(void) {
  aural_err err;
  if (aural_model_load("tests/data/encoder/prenorm_gelu_rope.safetensors",
                       NULL, &model, &err) < 0) {
    fprintf(stderr, "fuzz_words: %s (run from the repository root)\n",
            err.msg);
    abort();
  }
  const char *lex = "a\ta\nat\ta t\ntea\tt e a\nsea\ts e a\nsee\ts e\n";
  CHECK(aural_lexicon_load_buffer(lex, strlen(lex), "fixed", model,
                                  &fixed_lex, &err) == 0);
}

/* A few frames through a decoder over the resources (and custom words,
 * when xlex is given). */
static void decode(const aural_lexicon *lex, const aural_lm *lm,
                   const aural_lexicon *xlex) {
  aural_decoder *d;
  aural_err err;
  aural_decoder_config dc;
  aural_decoder_config_default(&dc);
  dc.boost_words = xlex;
  CHECK(aural_decoder_create(&dc, model, lex, lm, &d, &err) == 0);
  float logits[40 * 10];
  for (int t = 0; t < 40; t++)
    for (int k = 0; k < 10; k++)
      logits[t * 10 + k] = (float)((t * 7 + k * 3) % 10);
  aural_word w[64];
  size_t n;
  for (size_t at = 0; at < 40;) {
    at += aural_decoder_push(d, logits + at * 10, 40 - at);
    aural_decoder_final(d, w, 64, &n);
  }
  aural_decoder_partial(d, w, 64);
  aural_decoder_end(d);
  aural_decoder_final(d, w, 64, &n);
  aural_decoder_destroy(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (model == NULL) init();
  if (size < 1) return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  aural_err err = {0};
  if (data[0] == 2) {
    aural_g2p *g = (aural_g2p *)1;
    int rc = aural_g2p_load_buffer(text, len, "in.g2p", model, &g, &err);
    if (rc < 0) {
      CHECK(g == NULL && strstr(err.msg, "in.g2p") != NULL);
      return 0;
    }
    static const char *const words[] = {"tea", "seat", "eats"};
    aural_lexicon *xlex = (aural_lexicon *)1;
    rc = aural_g2p_lexicon(g, words, 3, &xlex, &err);
    if (rc < 0) {
      CHECK(xlex == NULL && strstr(err.msg, "custom words") != NULL);
    } else {
      decode(fixed_lex, NULL, xlex);
      aural_lexicon_destroy(xlex);
    }
    aural_g2p_destroy(g);
  } else if (data[0] % 2 == 0) {
    aural_lexicon *lex = (aural_lexicon *)1;
    int rc = aural_lexicon_load_buffer(text, len, "in.lex", model, &lex, &err);
    if (rc < 0) {
      CHECK(lex == NULL && strstr(err.msg, "in.lex") != NULL);
      return 0;
    }
    aural_lexicon_info li;
    aural_lexicon_get_info(lex, &li);
    CHECK(li.n_words > 0 && li.n_prons >= li.n_words);
    decode(lex, NULL, NULL);
    aural_lexicon_destroy(lex);
  } else {
    aural_lm *lm = (aural_lm *)1;
    int rc = aural_lm_load_buffer(text, len, "in.arpa", fixed_lex, &lm, &err);
    if (rc < 0) {
      CHECK(lm == NULL && strstr(err.msg, "in.arpa") != NULL);
      return 0;
    }
    decode(fixed_lex, lm, NULL);
    aural_lm_destroy(lm);
  }
  return 0;
}
