/*
 * Custom words' pronunciations (aural_g2p, lib/g2p.c) on the bundled model
 * and its g2p map: the lexicon they make, the lock around libespeak-ng,
 * and memory that stays flat however many requests a daemon serves.
 * (tests/words/test_g2p.py checks the pronunciations themselves against
 * the training recipe's labels.)
 */
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <aural.h>
#include <aural/decoder.h>

#include "helpers.h"

static aural_model *model;
static aural_g2p *g2p;

static int setup(void **state) {
  (void)state;
  /* The bundled model (meson's test environment), its map beside it. */
  const char *path = getenv("AURAL_DEFAULT_MODEL");
  if (path == NULL) fail_msg("AURAL_DEFAULT_MODEL is not set");
  char map[4096];
  size_t n = strlen(path), ext = strlen(".safetensors");
  snprintf(map, sizeof map, "%.*s.g2p.txt", (int)(n > ext ? n - ext : n), path);
  aural_err err;
  if (aural_model_load(path, NULL, &model, &err) < 0 ||
      aural_g2p_load(map, model, &g2p, &err) < 0)
    fail_msg("%s", err.msg);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  aural_g2p_destroy(g2p);
  aural_model_free(model);
  return 0;
}

static const char *const names[] = {"Dashwood", "Kubernetes", "Reykjavik",
                                    "Siobhan"};

/* The lexicon of custom words holds each word as given, with at least one
 * pronunciation, and nothing else. */
static void test_lexicon_of_words(void **state) {
  (void)state;
  aural_lexicon *lex;
  aural_err err;
  assert_int_equal(aural_g2p_lexicon(g2p, names, 4, &lex, &err), 0);
  aural_lexicon_info li;
  aural_lexicon_get_info(lex, &li);
  assert_int_equal(li.n_words, 4);
  assert_true(li.n_prons >= 4);
  for (int i = 0; i < 4; i++) assert_true(aural_lexicon_find(lex, names[i]) >= 0);
  assert_int_equal(aural_lexicon_find(lex, "dashwood"), -1); /* as given */
  aural_lexicon_destroy(lex);
  assert_int_equal(aural_g2p_check_word(NULL, &err), AURAL_EINVAL);
  assert_contains(err.msg, "no word given");
  /* No C1 control character (U+009B is a terminal's CSI), as no C0 one;
   * the character after them (U+00A0, U+00E9) is fine. */
  assert_int_equal(aural_g2p_check_word("Fox\xc2\x9b" "2J", &err),
                   AURAL_EINVAL);
  assert_contains(err.msg, "byte 0xc2 at 3");
  assert_int_equal(aural_g2p_check_word("a\xc2\x85", &err), AURAL_EINVAL);
  assert_int_equal(aural_g2p_check_word("a\xc2\xa0" "caf\xc3\xa9", &err), 0);
  /* None, too many, or a bad one: refused by name, nothing made. */
  lex = (aural_lexicon *)1;
  assert_int_equal(aural_g2p_lexicon(g2p, names, 0, &lex, &err), AURAL_EEMPTY);
  assert_null(lex);
  const char *bad[] = {"fine", "not fine"};
  assert_int_equal(aural_g2p_lexicon(g2p, bad, 2, &lex, &err), AURAL_EINVAL);
  assert_null(lex);
  assert_non_null(strstr(err.msg, "not fine"));
  /* A word that would read as a comment in the lexicon is refused, not
   * dropped: no lexicon without it. */
  const char *hash[] = {"#hashtag", "Dashwood"};
  assert_int_equal(aural_g2p_lexicon(g2p, hash, 2, &lex, &err), AURAL_EINVAL);
  assert_null(lex);
  assert_non_null(strstr(err.msg, "#hashtag"));
  /* So is one that starts with a byte order mark: first in the lexicon's
   * text, the reader skipped it as a file's, and the lexicon held the
   * word without it (fuzz_vocab). */
  const char *bom[] = {"\xef\xbb\xbf" "Dashwood", "Siobhan"};
  assert_int_equal(aural_g2p_lexicon(g2p, bom, 2, &lex, &err), AURAL_EINVAL);
  assert_null(lex);
  assert_contains(err.msg, "byte order mark");
  assert_int_equal(aural_g2p_check_word("Dash\xef\xbb\xbfwood", &err), 0);
  aural_g2p *g2p_b;
  /* Loading a map leaves the caller's strtok() where it was. */
  char list[] = "one two";
  assert_string_equal(strtok(list, " "), "one");
  static const char map[] = "dialect en-us\nmap A AA\n";
  assert_int_equal(aural_g2p_load_buffer(map, sizeof map - 1, "map", model,
                                         &g2p_b, &err),
                   0);
  aural_g2p_destroy(g2p_b);
  const char *next = strtok(NULL, " ");
  assert_non_null(next);
  assert_string_equal(next, "two");
  /* A map that starts with a UTF-8 byte order mark reads as without. */
  static const char bom_map[] = "\xef\xbb\xbf" "dialect en-us\nmap A AA\n";
  aural_g2p *g;
  assert_int_equal(aural_g2p_load_buffer(bom_map, sizeof bom_map - 1, "map",
                                         model, &g, &err),
                   0);
  aural_g2p_destroy(g);
}

/* An "after" rule lists at most 8 tokens (MAX_AFTER): one of 12 was
 * read, its ids written past the entry's array, into the next entry's
 * name (past the dialect's entries for the last one, where ASan saw a
 * heap-buffer-overflow). It is refused by line, as a "map" of too many
 * tokens is. */
static void test_map_after_of_too_many_tokens(void **state) {
  (void)state;
  static char map[16384];
  size_t n = (size_t)snprintf(map, sizeof map, "dialect en-us\n");
  for (int i = 0; i < 1024; i++)
    n += (size_t)snprintf(map + n, sizeof map - n, "map m%d AA\n", i);
  snprintf(map + n, sizeof map - n,
           "after m1023 AA AE AH AO AW AY EH ER EY IH IY OW\n");
  aural_g2p *g = (aural_g2p *)1;
  aural_err err = {0};
  assert_int_equal(aural_g2p_load_buffer(map, strlen(map), "map", model, &g,
                                         &err),
                   AURAL_EFORMAT);
  assert_null(g);
  assert_contains(err.msg, "map:1026:");
  assert_contains(err.msg, "(1 to 8 tokens)");
  /* Eight are fine. */
  snprintf(map, sizeof map,
           "dialect en-us\nmap r R\nafter r AA AE AH AO AW AY EH ER\n");
  assert_int_equal(aural_g2p_load_buffer(map, strlen(map), "map", model, &g,
                                         &err),
                   0);
  aural_g2p_destroy(g);
}

/* Nowhere to put the map, lexicon or text: AURAL_EINVAL naming the call
 * (they crashed). */
static void test_null_out_pointers(void **state) {
  (void)state;
  aural_err err = {0};
  static const char map[] = "dialect en-us\nmap A AA\n";
  assert_int_equal(aural_g2p_load_buffer(map, sizeof map - 1, "map", model,
                                         NULL, &err),
                   AURAL_EINVAL);
  assert_contains(err.msg, "g2p map: no out pointer");
  err = (aural_err){0};
  assert_int_equal(aural_g2p_load("no-such.g2p.txt", model, NULL, &err),
                   AURAL_EINVAL);
  assert_contains(err.msg, "g2p map: no out pointer");
  err = (aural_err){0};
  assert_int_equal(aural_g2p_lexicon(g2p, names, 1, NULL, &err),
                   AURAL_EINVAL);
  assert_contains(err.msg, "custom words: no out pointer");
  err = (aural_err){0};
  assert_int_equal(aural_g2p_text(g2p, names, 1, NULL, &err), AURAL_EINVAL);
  assert_contains(err.msg, "custom words: no out pointer");
}

/* Regression: libespeak-ng queues a copy of each new voice for its
 * synthesizer, so switching voices without synthesizing kept about 1.3 kB
 * per switch for good (a daemon pronouncing requests grew without bound:
 * 16 MB after 2,000 requests). Memory in use must not grow with the
 * number of requests. */
static void test_memory_is_flat(void **state) {
  (void)state;
  aural_err err;
  char *text;
  for (int i = 0; i < 10; i++) { /* warm-up: voices, dictionaries */
    assert_int_equal(aural_g2p_text(g2p, names, 1, &text, &err), 0);
    free(text);
  }
  size_t before = mallinfo2().uordblks;
  for (int i = 0; i < 400; i++) {
    assert_int_equal(aural_g2p_text(g2p, names + i % 4, 1, &text, &err), 0);
    free(text);
  }
  size_t after = mallinfo2().uordblks;
  if (after > before + 64 * 1024)
    fail_msg("400 requests grew memory in use by %zu bytes",
             after - before);
}

/* Threads pronouncing at once get what one thread gets. */
typedef struct job {
  const char *word;
  char *text;
  int rc;
} job;

static void *pronounce_many(void *arg) {
  job *j = arg;
  aural_err err;
  for (int i = 0; i < 20 && j->rc == 0; i++) {
    char *t;
    j->rc = aural_g2p_text(g2p, &j->word, 1, &t, &err);
    if (j->rc == 0 && j->text != NULL && strcmp(t, j->text) != 0) j->rc = -1;
    if (j->text == NULL) j->text = t;
    else free(t);
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  job jobs[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    jobs[i] = (job){.word = names[i]};
    assert_int_equal(pthread_create(&th[i], NULL, pronounce_many, &jobs[i]), 0);
  }
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(jobs[i].rc, 0);
    char *alone;
    aural_err err;
    assert_int_equal(aural_g2p_text(g2p, &names[i], 1, &alone, &err), 0);
    assert_string_equal(jobs[i].text, alone);
    free(alone);
    free(jobs[i].text);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lexicon_of_words),
      cmocka_unit_test(test_map_after_of_too_many_tokens),
      cmocka_unit_test(test_null_out_pointers),
      cmocka_unit_test(test_memory_is_flat),
      cmocka_unit_test(test_threads),
  };
  test_select_from_env();
  return cmocka_run_group_tests(tests, setup, teardown);
}
