/*
 * The words decoder (aural/decoder.h): the lexicon and ARPA readers on good
 * and bad input, the LM's backoff arithmetic, the beam search against a
 * brute-force scorer on tiny lexicons and LMs, the endpoint rules on
 * synthetic posteriors, and outputs that do not depend on chunking.
 */
#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
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

#define V 5 /* blank t0 and tokens t1..t4 */

static aural_model *model;

static int setup(void **state) {
  (void)state;
  model = test_tiny_ctc_model(V);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  aural_model_free(model);
  return 0;
}

static aural_lexicon *lexicon(const char *text) {
  aural_lexicon *lex;
  aural_err err;
  if (aural_lexicon_load_buffer(text, strlen(text), "lex", model, &lex,
                                &err) < 0)
    fail_msg("lexicon: %s", err.msg);
  return lex;
}

static aural_lm *lm_of(const char *text, const aural_lexicon *lex) {
  aural_lm *lm;
  aural_err err;
  if (aural_lm_load_buffer(text, strlen(text), "lm", lex, &lm, &err) < 0)
    fail_msg("lm: %s", err.msg);
  return lm;
}

/* --- readers -------------------------------------------------------------- */

static void test_lexicon_tree(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon("# a comment\n"
                               "ab\tt1 t2\n"
                               "ab\tt1 t2\n" /* repeated: counted once */
                               "ab\tt1  t3\r\n"
                               "\n"
                               "b\tt2\n"
                               "ba\tt2\n" /* a homophone of b */
                               "\xc3\xa9t\xc3\xa9\tt4 t1\n");
  aural_lexicon_info info;
  aural_lexicon_get_info(lex, &info);
  assert_int_equal(info.n_words, 4);
  assert_int_equal(info.n_prons, 5);
  /* root, t1, t1 t2, t1 t3, t2, t4, t4 t1 */
  assert_int_equal(info.n_nodes, 7);
  assert_true(info.memory_bytes > 0);
  assert_int_equal(aural_lexicon_find(lex, "ba"), 2);
  assert_int_equal(aural_lexicon_find(lex, "zz"), -1);
  assert_string_equal(aural_lexicon_word(lex, 3), "\xc3\xa9t\xc3\xa9");
  assert_null(aural_lexicon_word(lex, 4));
  /* No word, or no lexicon: not found, as aural_model_token(NULL, id)
   * (strlen of NULL crashed). */
  assert_int_equal(aural_lexicon_find(lex, NULL), -1);
  assert_int_equal(aural_lexicon_find(NULL, "ba"), -1);
  assert_null(aural_lexicon_word(NULL, 0));
  aural_lexicon_destroy(lex);
}

typedef struct bad_case {
  const char *text;
  const char *want; /* a part of the message */
} bad_case;

static void test_lexicon_rejects(void **state) {
  (void)state;
  char many[64 * 8 + 64];
  size_t n = 0;
  for (int i = 0; i <= 64; i++)
    n += (size_t)snprintf(many + n, sizeof many - n, "w%d\tt1\n", i);
  const bad_case cases[] = {
      {"", "no pronunciations"},
      {"# only a comment\n", "no pronunciations"},
      {"ab t1 t2\n", "lex:1: no tab"},
      {"ab\tt1\nb\tt9\n", "lex:2: \"t9\" is not a token"},
      {"ab\tt0\n", "\"t0\" is not a token"}, /* the blank */
      {"ab\t\n", "has no tokens"},
      {"\tt1\n", "a word of 0 bytes"},
      {"a b\tt1\n", "byte 0x20"},
      {"a\xff\tt1\n", "byte 0xff"},
      {"a\x01\tt1\n", "byte 0x01"},
      {"a\xc2\x9b\tt1\n", "byte 0xc2 at 1"}, /* U+009B, a C1 control */
      {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\tt1\n",
       "a word of 65 bytes"},
      {"a\tt1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 "
       "t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 t1 "
       "t1 t1 t1 t1 t1 t1\n",
       "more than 48 tokens"},
      {many, "more than 64 words share"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aural_lexicon *lex = (aural_lexicon *)1;
    aural_err err = {0};
    int rc = aural_lexicon_load_buffer(cases[i].text, strlen(cases[i].text),
                                       "lex", model, &lex, &err);
    if (rc >= 0 || lex != NULL || strstr(err.msg, cases[i].want) == NULL)
      fail_msg("case %zu: rc %d, message \"%s\", wanted \"%s\"", i, rc,
               err.msg, cases[i].want);
  }
  /* A NUL inside the text. */
  aural_lexicon *lex;
  aural_err err;
  assert_true(aural_lexicon_load_buffer("a\tt1\0\n", 6, "lex", model, &lex,
                                        &err) < 0);
  assert_non_null(strstr(err.msg, "NUL"));
}

/* A model of more tokens than 16 bits count: each word keeps its own
 * tokens, and the decoder finds it. */
static void test_lexicon_large_vocabulary(void **state) {
  (void)state;
  enum { BIG = 70000 };
  aural_model *big = test_tiny_ctc_model(BIG);
  const char *text = "hi\tt65537\nlo\tt1\n";
  aural_lexicon *lex;
  aural_err err;
  assert_int_equal(aural_lexicon_load_buffer(text, strlen(text), "lex", big,
                                             &lex, &err),
                   0);
  aural_lexicon_info info;
  aural_lexicon_get_info(lex, &info);
  assert_int_equal(info.n_nodes, 3); /* root, t1, t65537 */
  aural_decoder *d;
  assert_int_equal(aural_decoder_create(NULL, big, lex, NULL, &d, &err), 0);
  float *logits = calloc(4 * (size_t)BIG, sizeof *logits);
  assert_non_null(logits);
  logits[0] = 8.0f;                  /* blank */
  logits[1 * (size_t)BIG + 65537] = 8.0f; /* t65537 */
  logits[2 * (size_t)BIG] = 8.0f;    /* blank */
  logits[3 * (size_t)BIG] = 8.0f;
  assert_int_equal(aural_decoder_push(d, logits, 4), 4);
  aural_decoder_end(d);
  aural_word w[2];
  size_t nw;
  assert_int_equal(aural_decoder_final(d, w, 2, &nw), 1);
  assert_int_equal(nw, 1);
  assert_string_equal(w[0].text, "hi");
  free(logits);
  aural_decoder_destroy(d);
  aural_lexicon_destroy(lex);
  aural_model_free(big);
}

static const char *const lex_abc = "a\tt1\n"
                                   "b\tt2\n"
                                   "c\tt3\n"
                                   "d\tt4 t1\n";

/* A 3-gram model whose numbers make each backoff step visible. */
static const char *const arpa3 = "\\data\\\n"
                                 "ngram 1=6\n"
                                 "ngram 2=3\n"
                                 "ngram 3=1\n"
                                 "\n"
                                 "\\1-grams:\n"
                                 "-1.0\t<s>\t-0.5\n"
                                 "-1.1\t</s>\n"
                                 "-1.2\ta\t-0.25\n"
                                 "-1.3\tb\t-0.125\n"
                                 "-1.4\tc\n"
                                 "-9.9\tzebra\t-0.1\n" /* not in the lexicon */
                                 "\n"
                                 "\\2-grams:\n"
                                 "-0.3\t<s> a\t-0.0625\n"
                                 "-0.4\ta b\n"
                                 "-0.6\tzebra a\n"
                                 "\\3-grams:\n"
                                 "-0.05\t<s> a b\n"
                                 "\\end\\\n";

static void test_lm_backoff(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex_abc);
  aural_lm *lm = lm_of(arpa3, lex);
  aural_lm_info info;
  aural_lm_get_info(lm, &info);
  assert_int_equal(info.order, 3);
  assert_int_equal(info.n_grams[0], 5);
  assert_int_equal(info.n_grams[1], 2);
  assert_int_equal(info.n_grams[2], 1);
  assert_int_equal(info.n_dropped, 2); /* zebra, zebra a */
  int a = aural_lexicon_find(lex, "a"), b = aural_lexicon_find(lex, "b"),
      c = aural_lexicon_find(lex, "c"), d = aural_lexicon_find(lex, "d");
  const double eps = 1e-6;
  /* Listed n-grams. */
  assert_float_equal(aural_lm_score(lm, (int[]){AURAL_LM_BOS, a}, 2), -0.3,
                     eps);
  assert_float_equal(aural_lm_score(lm, (int[]){AURAL_LM_BOS, a, b}, 3),
                     -0.05, eps);
  assert_float_equal(aural_lm_score(lm, (int[]){b}, 1), -1.3, eps);
  /* (a, c): no bigram: bow(a) + P(c). */
  assert_float_equal(aural_lm_score(lm, (int[]){a, c}, 2), -0.25 + -1.4, eps);
  /* (<s> a c): bow(<s> a) + bow(a) + P(c). */
  assert_float_equal(aural_lm_score(lm, (int[]){AURAL_LM_BOS, a, c}, 3),
                     -0.0625 + -0.25 + -1.4, eps);
  /* (b a b): no (b a), so no bow for it; then P(b | a) listed. */
  assert_float_equal(aural_lm_score(lm, (int[]){b, a, b}, 3), -0.4, eps);
  /* (c </s>): c has no backoff listed (0). */
  assert_float_equal(aural_lm_score(lm, (int[]){c, AURAL_LM_EOS}, 2), -1.1,
                     eps);
  /* Longer histories than the order use its last words. */
  assert_float_equal(aural_lm_score(lm, (int[]){c, c, AURAL_LM_BOS, a, b}, 5),
                     -0.05, eps);
  /* d is in the lexicon but not in the LM, which has no <unk>. */
  assert_true(isinf(aural_lm_score(lm, (int[]){a, d}, 2)));
  aural_lm_destroy(lm);
  aural_lexicon_destroy(lex);
}

static void test_lm_unk(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex_abc);
  aural_lm *lm = lm_of("\\data\\\nngram 1=4\n\n\\1-grams:\n-1\t<s>\n-1\t</s>\n"
                       "-2\t<unk>\n-0.5\ta\n\n\\end\\\n",
                       lex);
  int d = aural_lexicon_find(lex, "d"), a = aural_lexicon_find(lex, "a");
  assert_float_equal(aural_lm_score(lm, (int[]){a, d}, 2), -2.0, 1e-6);
  assert_float_equal(aural_lm_score(lm, (int[]){d, a}, 2), -0.5, 1e-6);
  aural_lm_destroy(lm);
  aural_lexicon_destroy(lex);
}

static void test_lm_rejects(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex_abc);
  const char *ok1 = "-1\t<s>\n-1\t</s>\n";
  char buf[6][256];
  snprintf(buf[0], sizeof buf[0],
           "\\data\\\nngram 1=3\n\n\\1-grams:\n%s\n\\end\\\n", ok1);
  snprintf(buf[1], sizeof buf[1],
           "\\data\\\nngram 1=2\n\n\\1-grams:\n%s-1\ta\n\n\\end\\\n", ok1);
  snprintf(buf[2], sizeof buf[2],
           "\\data\\\nngram 1=3\n\n\\1-grams:\n%s0.5\ta\n\n\\end\\\n", ok1);
  snprintf(buf[3], sizeof buf[3],
           "\\data\\\nngram 1=4\n\n\\1-grams:\n%s-1\ta\n-2\ta\n\n\\end\\\n",
           ok1);
  snprintf(buf[4], sizeof buf[4],
           "\\data\\\nngram 1=3\n\n\\1-grams:\n%s-1x\ta\n\n\\end\\\n", ok1);
  snprintf(buf[5], sizeof buf[5],
           "\\data\\\nngram 1=2\n\n\\1-grams:\n%s\n", ok1);
  const bad_case cases[] = {
      {"", "lm: empty (no \\data\\ section)"},
      {" \n\r\n\t", "lm: empty"},
      {"ngram 1=2\n", "not an ARPA file"},
      {"\\data\\\nngram 2=1\n\n", "ngram 2 out of order"},
      {"\\data\\\nngram 1=1\nngram 2=1\nngram 3=1\nngram 4=1\nngram 5=1\n",
       "out of order"},
      {"\\data\\\nngram 1=x\n", "\"ngram N=COUNT\" expected"},
      {"\\data\\\nngram 1=999999999999\n", "more than"},
      {"\\data\\\nngram 1=100000\n\n\\1-grams:\n-1\t<s>\n\n\\end\\\n",
       "announces 100000 n-grams, more than its"},
      {"\\data\\\nngram 1=2\n\n\\2-grams:\n", "\"\\1-grams:\" expected"},
      {buf[0], "2 1-grams, but \\data\\ announced 3"},
      {buf[1], "more 1-grams than the 2"},
      {buf[2], "is not a log10 probability"},
      {buf[3], "listed twice"},
      {buf[4], "\"-1x\" is not a log10 probability"},
      {buf[5], "lm: the file ends: \"\\end\\\" expected"},
      /* A section of an order \data\ did not announce, and another line
       * where a section starts: named (both said '"\end\" expected'). */
      {"\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<s>\n-1\t</s>\n\n"
       "\\2-grams:\n-1\t<s> </s>\n\n\\end\\\n",
       "lm:8: a section of 2-grams, which \\data\\ does not announce (its "
       "orders are 1 to 1): \"\\end\\\" expected"},
      {"\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<s>\n-1\t</s>\n\n"
       "\\end\n",
       "lm:8: \"\\end\" where \"\\end\\\" expected"},
      {"\\data\\\nngram 1=1\n\n\\1-grams:\n-1\ta\n\n\\end\\\n",
       "<s> and </s> must be 1-grams"},
      {"\\data\\\nngram 1=1\n\n\\1-grams:\n-1\ta b c\n\n\\end\\\n",
       "has 4 fields"},
      /* Its words spelled otherwise than the lexicon's: nothing to say. */
      {"\\data\\\nngram 1=4\n\n\\1-grams:\n-1\t<s>\n-1\t</s>\n-1\tA\n"
       "-1\tB\n\n\\end\\\n",
       "none of its words is in the lexicon (2 n-grams dropped)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aural_lm *lm = (aural_lm *)1;
    aural_err err = {0};
    int rc = aural_lm_load_buffer(cases[i].text, strlen(cases[i].text), "lm",
                                  lex, &lm, &err);
    if (rc >= 0 || lm != NULL || strstr(err.msg, cases[i].want) == NULL)
      fail_msg("case %zu: rc %d, message \"%s\", wanted \"%s\"", i, rc,
               err.msg, cases[i].want);
    /* Nothing at all is EEMPTY, as for the other readers. */
    if ((rc == AURAL_EEMPTY) != (strstr(cases[i].want, "empty") != NULL))
      fail_msg("case %zu: rc %d (%s)", i, rc, aural_err_name(rc));
  }
  aural_lexicon_destroy(lex);
}

/* A UTF-8 byte order mark, as some editors write first, is not part of
 * the lexicon's first word, nor does it hide the LM's header. */
static void test_readers_skip_byte_order_mark(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon("\xef\xbb\xbf" "a\tt1\r\nb\tt2\r\n");
  assert_int_equal(aural_lexicon_find(lex, "a"), 0);
  assert_int_equal(aural_lexicon_find(lex, "b"), 1);
  aural_lm *lm = lm_of("\xef\xbb\xbf\\data\\\nngram 1=3\n\n\\1-grams:\n"
                       "-1\t<s>\n-1\t</s>\n-0.5\ta\n\n\\end\\\n",
                       lex);
  assert_float_equal(aural_lm_score(lm, (int[]){0}, 1), -0.5, 1e-6);
  aural_lm_destroy(lm);
  aural_lexicon_destroy(lex);
}

/* Tokens apart by tabs as well as spaces, as the LM's fields are: a
 * lexicon written "word<TAB>tok<TAB>tok" was refused with '"t1<TAB>t2" is
 * not a token of the model', the tab shown as if it were a space. */
static void test_lexicon_tokens_apart_by_tabs(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon("ab\tt1\tt2\nb\t\tt2 \t\r\nab\tt1 t2\n");
  aural_lexicon_info info;
  aural_lexicon_get_info(lex, &info);
  assert_int_equal(info.n_words, 2);
  assert_int_equal(info.n_prons, 2); /* ab's twice, the same */
  assert_int_equal(info.n_nodes, 4); /* root, t1, t1 t2, t2 */
  aural_lexicon_destroy(lex);
}

/* No blank line after the counts, as none is needed between sections;
 * spaces and tabs that end lines (a header's were refused: "\data\ " was
 * "not an ARPA file", "ngram 1=3 " not a count). */
static void test_lm_header_without_blank_line(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex_abc);
  aural_lm *lm = lm_of("\\data\\\nngram 1=3\n\\1-grams:\n-1\t<s>\n-1\t</s>\n"
                       "-0.5\ta\n\\end\\\n",
                       lex);
  assert_float_equal(aural_lm_score(lm, (int[]){0}, 1), -0.5, 1e-6);
  aural_lm_destroy(lm);
  lm = lm_of("\\data\\ \t\r\nngram 1=3 \r\n\r\n\\1-grams:\t\r\n-1\t<s>\r\n"
             "-1\t</s> \r\n-0.5\ta\t\r\n\r\n\\end\\  \r\n",
             lex);
  assert_float_equal(aural_lm_score(lm, (int[]){0}, 1), -0.5, 1e-6);
  aural_lm_destroy(lm);
  aural_lexicon_destroy(lex);
}

/* --- the search against brute force ---------------------------------------- */

static uint32_t rng_state;
static double uniform(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return (double)(rng_state >> 8) / (double)(1u << 24);
}

static double log_max(double a, double b) { return a > b ? a : b; }

static double log_add(double a, double b) {
  if (a == -INFINITY) return b;
  if (b == -INFINITY) return a;
  return a > b ? a + log1p(exp(b - a)) : b + log1p(exp(a - b));
}

/* The CTC forward recursion over lp (T, V) for tokens y, its paths
 * combined by combine: log_max gives the best alignment's
 * log-probability (Viterbi), log_add the sum over every alignment. */
static double ctc_forward(const double *lp, int T, const int *y, int L,
                          double (*combine)(double, double)) {
  int S = 2 * L + 1;
  double a[2 * 16 + 1], b[2 * 16 + 1];
  for (int s = 0; s < S; s++) a[s] = -INFINITY;
  a[0] = lp[0];
  if (L > 0) a[1] = lp[y[0]];
  for (int t = 1; t < T; t++) {
    for (int s = 0; s < S; s++) {
      int lab = s % 2 == 0 ? 0 : y[s / 2];
      double m = a[s];
      if (s >= 1) m = combine(m, a[s - 1]);
      if (s >= 2 && lab != 0 && lab != y[s / 2 - 1]) m = combine(m, a[s - 2]);
      b[s] = m + lp[t * V + lab];
    }
    memcpy(a, b, sizeof a);
  }
  return S >= 2 ? combine(a[S - 1], a[S - 2]) : a[S - 1];
}

static double ctc_best(const double *lp, int T, const int *y, int L) {
  return ctc_forward(lp, T, y, L, log_max);
}

static double ctc_sum(const double *lp, int T, const int *y, int L) {
  return ctc_forward(lp, T, y, L, log_add);
}

typedef struct word_def {
  const char *name;
  int prons[2][4]; /* token lists ending with 0 */
} word_def;

static const word_def words4[] = {
    {"a", {{1, 0}, {1, 2, 0}}},
    {"b", {{2, 0}, {0}}},
    {"c", {{3, 1, 0}, {0}}},
    {"d", {{4, 0}, {3, 0}}}, /* t3 alone: a prefix of c */
};

static const char *const lex4 = "a\tt1\na\tt1 t2\nb\tt2\nc\tt3 t1\nd\tt4\n"
                                "d\tt3\n";
static const char *const arpa4 = "\\data\\\n"
                                 "ngram 1=6\n"
                                 "ngram 2=4\n"
                                 "\n"
                                 "\\1-grams:\n"
                                 "-1.0\t<s>\t-0.2\n"
                                 "-0.9\t</s>\n"
                                 "-0.7\ta\t-0.1\n"
                                 "-0.8\tb\t-0.3\n"
                                 "-0.6\tc\n"
                                 "-0.75\td\t-0.05\n"
                                 "\n"
                                 "\\2-grams:\n"
                                 "-0.2\t<s> b\n"
                                 "-0.1\ta b\n"
                                 "-0.4\tb </s>\n"
                                 "-0.3\td d\n"
                                 "\n"
                                 "\\end\\\n";

/* The exhaustive search: every word sequence that fits in T frames, every
 * choice of pronunciations, each scored by its best alignment. */
typedef struct search {
  const double *lp;
  int T;
  const aural_lexicon *lex;
  const aural_lm *lm;
  double lm_weight, penalty;
  const word_def *custom; /* custom words (boosted), or NULL */
  int n_custom;
  double boost, boost_sum;
  int hist[20]; /* <s>, then the words so far */
  int y[20], L; /* their tokens */
  double lm_sum;
  double best_score;
  int best[20], best_n;
  const char *names[20], *best_names[20]; /* the words so far, as output */
  const word_def *defs[20];               /* ... and as defined */
  int def_at[20];  /* ... and as their index in words4, then custom */
  unsigned trial;  /* which trial's posteriors: for pron_sum_of() */
  /* The summed score: every alignment of every choice of pronunciations
   * of the words. The best words by it, and the score of target's. */
  double best_sum;
  const char *best_sum_names[20];
  int best_sum_n;
  const char *const *target;
  int target_n;
  double target_sum;
  double target_best; /* target's best alignment */
} search;

/* log of the summed probability of every alignment of every choice of
 * pronunciations of the words defs[i..n), after the tokens y[0..L). */
static double pron_sum(const search *s, int i, int n, int *y, int L) {
  if (i == n) return ctc_sum(s->lp, s->T, y, L);
  double total = -INFINITY;
  for (int k = 0; k < 2; k++) {
    const int *p = s->defs[i]->prons[k];
    int len = 0;
    while (p[len] != 0) len++;
    if (len == 0 || L + len > s->T) continue;
    memcpy(y + L, p, (size_t)len * sizeof *p);
    total = log_add(total, pron_sum(s, i + 1, n, y, L + len));
  }
  return total;
}

/* pron_sum() of the words so far, remembered per trial: the search
 * reaches the same words once per choice of their pronunciations, and
 * their summed score is the same at each. Keyed by the words' indices
 * (1 to 6) as the digits of a number in base 7. */
enum { SUM_WORDS_MAX = 6, SUM_KEYS = 117649 /* 7^6 */ };
static double sum_memo[SUM_KEYS];
static unsigned sum_memo_trial[SUM_KEYS]; /* 0: never */

static double pron_sum_of(const search *s, int n) {
  assert_true(n <= SUM_WORDS_MAX);
  size_t key = 0;
  for (int i = 0; i < n; i++) key = key * 7 + (size_t)s->def_at[i] + 1;
  assert_true(key < SUM_KEYS);
  if (sum_memo_trial[key] != s->trial) {
    int y[20];
    sum_memo[key] = pron_sum(s, 0, n, y, 0);
    sum_memo_trial[key] = s->trial;
  }
  return sum_memo[key];
}

static bool same_names(const char *const *a, const char *const *b, int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(a[i], b[i]) != 0) return false;
  return true;
}

static void extend(search *s, int n) {
  /* This sequence, ended with </s>. */
  s->hist[n + 1] = AURAL_LM_EOS;
  size_t from = n + 2 > 4 ? (size_t)n + 2 - 4 : 0; /* at most a 4-gram */
  double end = aural_lm_score(s->lm, s->hist + from, (size_t)n + 2 - from);
  double score = ctc_best(s->lp, s->T, s->y, s->L) +
                 s->lm_weight * log(10.0) * (s->lm_sum + end) +
                 s->penalty * n + s->boost_sum;
  if (score > s->best_score) {
    s->best_score = score;
    s->best_n = n;
    memcpy(s->best, s->hist + 1, (size_t)n * sizeof *s->best);
    memcpy(s->best_names, s->names, (size_t)n * sizeof *s->names);
  }
  /* The summed score (the same at each choice of pronunciations). */
  double sum = pron_sum_of(s, n) +
               s->lm_weight * log(10.0) * (s->lm_sum + end) +
               s->penalty * n + s->boost_sum;
  if (sum > s->best_sum) {
    s->best_sum = sum;
    s->best_sum_n = n;
    memcpy(s->best_sum_names, s->names, (size_t)n * sizeof *s->names);
  }
  if (n == s->target_n && same_names(s->names, s->target, n)) {
    s->target_sum = sum;
    if (score > s->target_best) s->target_best = score;
  }
  int n_defs = 4 + s->n_custom;
  assert_true(n_defs <= 6); /* pron_sum_of()'s digits */
  for (int k = 0; k < 2 * n_defs; k++) {
    bool custom = k % n_defs >= 4;
    const word_def *wd = custom ? &s->custom[k % n_defs - 4] : &words4[k % n_defs];
    const int *p = wd->prons[k / n_defs];
    int len = 0;
    while (p[len] != 0) len++;
    if (len == 0 || s->L + len > s->T) continue;
    /* A custom word is scored as the lexicon's word of its name in lower
     * case, else as <unk> (any id past the lexicon's). */
    char low[16];
    size_t i = 0;
    for (; wd->name[i] != '\0'; i++) low[i] = (char)tolower(wd->name[i]);
    low[i] = '\0';
    int w = aural_lexicon_find(s->lex, low);
    s->hist[n + 1] = w >= 0 ? w : 1000;
    s->names[n] = wd->name;
    s->defs[n] = wd;
    s->def_at[n] = k % n_defs;
    size_t f = n + 2 > 4 ? (size_t)n + 2 - 4 : 0;
    double lw = aural_lm_score(s->lm, s->hist + f, (size_t)n + 2 - f);
    double bonus = custom ? s->boost : 0;
    memcpy(s->y + s->L, p, (size_t)len * sizeof *p);
    s->L += len;
    s->lm_sum += lw;
    s->boost_sum += bonus;
    extend(s, n + 1);
    s->lm_sum -= lw;
    s->boost_sum -= bonus;
    s->L -= len;
  }
}

static void put_frames(float *logits, size_t *at, int k, int n);

/* Random peaky posteriors of T frames: logits and their log-softmax. */
static void random_frames(int T, float *logits, double *lp) {
  for (int t = 0; t < T; t++) {
    int hot = (int)(uniform() * V);
    for (int k = 0; k < V; k++)
      logits[t * V + k] = (float)(3.0 * uniform() + (k == hot ? 3.0 : 0.0));
    double mx = -INFINITY, sum = 0;
    for (int k = 0; k < V; k++)
      if (logits[t * V + k] > mx) mx = logits[t * V + k];
    for (int k = 0; k < V; k++) sum += exp(logits[t * V + k] - mx);
    for (int k = 0; k < V; k++)
      lp[t * V + k] = logits[t * V + k] - mx - log(sum);
  }
}

/* Custom words: "e" the lexicon lacks (scored as <unk>), and "B", which
 * is the lexicon's "b" (scored as b) with a pronunciation b lacks. */
static const word_def custom2[] = {
    {"e", {{2, 4, 0}, {0}}},
    {"B", {{2, 0}, {4, 1, 0}}},
};
static const char *const lex_custom2 = "e\tt2 t4\nB\tt2\nB\tt4 t1\n";

typedef struct trials {
  int nonempty;      /* trials whose best words are some */
  int custom_found;  /* custom words among them */
  int sum_differs;   /* trials where the summed score's best words are
                      * not the best alignment's */
  int sum_found;     /* ... and the decoder found the summed score's */
} trials;

/* 200 trials of random 6-frame posteriors and decoder settings, the
 * decoder with an exhaustive beam (and custom words xlex, spelled as
 * custom[], when given). Keeping the better of merged hypotheses
 * (!sum_alignments), it must find the words of the best alignment.
 * Summing alignments of the same words, it may find others, but those
 * words' summed probability (every alignment of every choice of their
 * pronunciations) is at least the best single alignment's: what it keeps
 * in a state is at least as good as any one path into it. */
static trials compare_with_brute_force(const aural_lexicon *lex,
                                       const aural_lm *lm,
                                       const aural_lexicon *xlex,
                                       const word_def *custom, int n_custom,
                                       bool sum_alignments, uint32_t seed) {
  aural_decoder_config dc;
  aural_decoder_config_default(&dc);
  dc.beam = 4096;
  dc.beam_threshold = 1e9f;
  dc.max_tokens = V - 1;
  dc.token_threshold = 1e9f;
  dc.endpoint_silence_s = 1000;
  dc.endpoint_idle_s = 1000;
  dc.endpoint_max_s = 600;
  dc.boost_words = xlex;
  dc.sum_alignments = sum_alignments;
  rng_state = seed;
  trials out = {0};
  static unsigned trials_run; /* every trial's own pron_sum_of() memo */
  for (int trial = 0; trial < 200; trial++) {
    enum { T = 6 };
    float logits[T * V];
    double lp[T * V];
    random_frames(T, logits, lp);
    dc.lm_weight = (float)(trial % 3 == 0 ? 0.0 : 0.5 + uniform());
    dc.word_penalty = (float)(2.0 * uniform() - 1.0);
    if (xlex != NULL) dc.boost = (float)(trial % 5 == 0 ? 0.0 : 3.0 * uniform());
    /* The search's posteriors: the blank's lowered by the penalty. */
    dc.blank_penalty = (float)(trial % 4 == 0 ? 0.0 : 2.0 * uniform());
    for (int t = 0; t < T; t++) lp[t * V] -= dc.blank_penalty;
    aural_decoder *d;
    aural_err err;
    assert_int_equal(aural_decoder_create(&dc, model, lex, lm, &d, &err), 0);
    assert_int_equal(aural_decoder_push(d, logits, T), T);
    aural_decoder_end(d);
    aural_word got[8];
    size_t n_got = 0;
    int has = aural_decoder_final(d, got, 8, &n_got);
    assert_int_equal(has, n_got > 0);
    const char *got_names[8];
    for (size_t i = 0; i < n_got; i++) got_names[i] = got[i].text;
    search s = {.lp = lp, .T = T, .lex = lex, .lm = lm,
                .lm_weight = dc.lm_weight, .penalty = dc.word_penalty,
                .custom = custom, .n_custom = n_custom, .boost = dc.boost,
                .hist = {AURAL_LM_BOS}, .best_score = -INFINITY,
                .best_n = -1, .best_sum = -INFINITY, .best_sum_n = -1,
                .target = got_names, .target_n = (int)n_got,
                .target_sum = -INFINITY, .target_best = -INFINITY,
                .trial = ++trials_run};
    extend(&s, 0);
    char a[64] = "", b[64] = "";
    for (int i = 0; i < s.best_n; i++) strcat(strcat(a, s.best_names[i]), " ");
    for (size_t i = 0; i < n_got; i++) strcat(strcat(b, got[i].text), " ");
    bool same = (int)n_got == s.best_n &&
                same_names(got_names, s.best_names, s.best_n);
    /* Words that tie with the best (the same tokens, the LM not used, as
     * many words) are as good. */
    if (!sum_alignments && !same && !(s.target_best >= s.best_score - 1e-6))
      fail_msg("trial %d: brute force \"%s\" (%.9f), decoder \"%s\" "
               "(%.9f)",
               trial, a, s.best_score, b, s.target_best);
    if (sum_alignments && !(s.target_sum >= s.best_score - 1e-6))
      fail_msg("trial %d: the decoder's \"%s\" sums to %.9f, below the "
               "best alignment's (\"%s\") %.9f",
               trial, b, s.target_sum, a, s.best_score);
    if (s.best_sum_n != s.best_n ||
        !same_names(s.best_sum_names, s.best_names, s.best_n)) {
      out.sum_differs++;
      out.sum_found += (int)n_got == s.best_sum_n &&
                       same_names(got_names, s.best_sum_names, s.best_sum_n);
    }
    for (size_t i = 0; i < n_got; i++) {
      assert_true(got[i].start_frame < got[i].end_frame);
      assert_true(got[i].end_frame <= T);
      assert_true(i == 0 || got[i].start_frame >= got[i - 1].end_frame);
      assert_true(got[i].confidence > 0 && got[i].confidence <= 1);
    }
    for (size_t i = 0; i < n_got; i++)
      for (int k = 0; k < n_custom; k++)
        out.custom_found += strcmp(got[i].text, custom[k].name) == 0;
    out.nonempty += n_got > 0;
    aural_decoder_destroy(d);
  }
  return out;
}

static void test_search_matches_brute_force(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex4);
  aural_lm *lm = lm_of(arpa4, lex);
  /* The trials mostly find words. */
  trials best = compare_with_brute_force(lex, lm, NULL, NULL, 0, false, 12345);
  assert_true(best.nonempty > 100);
  /* The same posteriors, alignments summed: where the summed score prefers
   * other words than the best alignment, the decoder finds them, often. */
  trials sum = compare_with_brute_force(lex, lm, NULL, NULL, 0, true, 12345);
  print_message("alignments summed: %d of %d trials where the best words "
                "differ found the summed best\n", sum.sum_found,
                sum.sum_differs);
  assert_true(sum.sum_found > 0);
  aural_lm_destroy(lm);
  aural_lexicon_destroy(lex);
}

static void test_custom_words_match_brute_force(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex4);
  aural_lexicon *xlex = lexicon(lex_custom2);
  /* arpa4 with an <unk>. */
  char arpa[1024];
  const char *at = strstr(arpa4, "-0.9\t</s>");
  snprintf(arpa, sizeof arpa, "%.*s-1.7\t<unk>\n%s", (int)(at - arpa4), arpa4,
           at);
  memcpy(strstr(arpa, "ngram 1=6"), "ngram 1=7", 9);
  aural_lm *lm = lm_of(arpa, lex);
  for (int sum = 0; sum < 2; sum++) {
    trials t = compare_with_brute_force(lex, lm, xlex, custom2, 2, sum, 777);
    assert_true(t.custom_found > 20); /* the custom words do win, often */
  }
  aural_lm_destroy(lm);
  aural_lexicon_destroy(xlex);
  aural_lexicon_destroy(lex);
}

/* Without <unk>, a custom word the LM lacks scores its lowest unigram; a
 * boost makes a clear custom word win, and the lexicon's own words still
 * decode around it. */
static void test_custom_words_without_unk(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex4);
  aural_lexicon *xlex = lexicon("zed\tt2 t4 t2\n");
  aural_lm *lm = lm_of(arpa4, lex);
  float logits[12 * V];
  size_t n = 0;
  put_frames(logits, &n, 3, 2); /* c: t3 t1 */
  put_frames(logits, &n, 1, 2);
  put_frames(logits, &n, 0, 1);
  put_frames(logits, &n, 2, 2); /* zed: t2 t4 t2 */
  put_frames(logits, &n, 4, 2);
  put_frames(logits, &n, 2, 2);
  put_frames(logits, &n, 0, 1);
  for (int with = 0; with < 2; with++) {
    aural_decoder_config dc;
    aural_decoder_config_default(&dc);
    dc.boost_words = with ? xlex : NULL;
    aural_decoder *d;
    aural_err err;
    assert_int_equal(aural_decoder_create(&dc, model, lex, lm, &d, &err), 0);
    assert_int_equal(aural_decoder_push(d, logits, n), n);
    aural_decoder_end(d);
    aural_word got[8];
    size_t n_got = 0;
    assert_int_equal(aural_decoder_final(d, got, 8, &n_got), 1);
    if (with) {
      assert_int_equal(n_got, 2);
      assert_string_equal(got[0].text, "c");
      assert_string_equal(got[1].text, "zed");
    } else { /* the lexicon's words alone, more of them */
      assert_true(n_got >= 3);
      for (size_t i = 0; i < n_got; i++) assert_string_not_equal(got[i].text, "zed");
    }
    aural_decoder_destroy(d);
  }
  /* A boost out of range is refused, by name. */
  aural_decoder_config dc;
  aural_decoder_config_default(&dc);
  dc.boost_words = xlex;
  dc.boost = -1;
  aural_decoder *d;
  aural_err err;
  assert_int_equal(aural_decoder_create(&dc, model, lex, lm, &d, &err),
                   AURAL_ECONFIG);
  assert_non_null(strstr(err.msg, "boost"));
  aural_lm_destroy(lm);
  aural_lexicon_destroy(xlex);
  aural_lexicon_destroy(lex);
}

/* --- endpoints and streaming ------------------------------------------------ */

/* Frames whose posterior peaks on token k. */
static void put_frames(float *logits, size_t *at, int k, int n) {
  for (int i = 0; i < n; i++, (*at)++)
    for (int j = 0; j < V; j++) logits[*at * V + j] = j == k ? 8.0f : 0.0f;
}

/* Token 2 for two frames, then two of blanks: the word "b" of the small
 * lexicons, into d. */
static void push_word_b(aural_decoder *d) {
  float logits[4 * V] = {0};
  size_t n = 0;
  put_frames(logits, &n, 2, 2);
  put_frames(logits, &n, 0, 2);
  assert_int_equal(aural_decoder_push(d, logits, 4), 4);
}

static aural_decoder *endpoint_decoder(const aural_lexicon *lex,
                                       const aural_lm *lm) {
  aural_decoder_config dc;
  aural_decoder_config_default(&dc);
  dc.endpoint_silence_s = 0.10f; /* 10 frames */
  dc.endpoint_idle_s = 0.20f;    /* 20 frames */
  dc.endpoint_max_s = 0.30f;     /* 30 frames */
  aural_decoder *d;
  aural_err err;
  assert_int_equal(aural_decoder_create(&dc, model, lex, lm, &d, &err), 0);
  return d;
}

static void test_endpoints(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex4);
  aural_lm *lm = lm_of(arpa4, lex);
  aural_decoder *d = endpoint_decoder(lex, lm);
  float logits[200 * V];
  size_t n = 0;
  put_frames(logits, &n, 0, 3);
  put_frames(logits, &n, 2, 2); /* b: frames 3, 4 */
  put_frames(logits, &n, 0, 40);
  aural_word w[4];
  size_t nw;
  /* Speech, then 10 frames of non-speech: the final comes at frame 15. */
  assert_int_equal(aural_decoder_push(d, logits, n), 15);
  assert_int_equal(aural_decoder_final(d, w, 4, &nw), 1);
  assert_int_equal(nw, 1);
  assert_string_equal(w[0].text, "b");
  assert_int_equal(w[0].start_frame, 3);
  assert_int_equal(w[0].end_frame, 4);
  /* A final waiting blocks the push until it is read. */
  assert_int_equal(aural_decoder_final(d, w, 4, &nw), 0);
  /* Nothing decoded: 20 frames of non-speech start afresh, no final. */
  assert_int_equal(aural_decoder_push(d, logits + 15 * V, n - 15), n - 15);
  assert_int_equal(aural_decoder_final(d, w, 4, &nw), 0);
  aural_decoder_info info;
  aural_decoder_get_info(d, &info);
  assert_int_equal(info.frames, n);
  assert_int_equal(info.segments, 1);
  /* Speech that goes on: cut at 30 frames, with the words so far. */
  n = 0;
  for (int i = 0; i < 20; i++) {
    put_frames(logits, &n, 4, 1); /* d d d ... */
    put_frames(logits, &n, 0, 1);
  }
  size_t took = aural_decoder_push(d, logits, n);
  assert_true(took <= 30);
  assert_int_equal(aural_decoder_final(d, w, 4, &nw), 1);
  assert_true(nw >= 4);
  for (size_t i = 0; i < 4; i++) assert_string_equal(w[i].text, "d");
  /* The end of the stream finals what is open. */
  assert_int_equal(aural_decoder_push(d, logits + took * V, n - took),
                   n - took);
  size_t partial = aural_decoder_partial(d, w, 4);
  assert_true(partial > 0);
  aural_decoder_end(d);
  assert_int_equal(aural_decoder_final(d, w, 4, &nw), 1);
  assert_int_equal(nw, partial);
  assert_int_equal(aural_decoder_push(d, logits, n), 0);
  aural_decoder_destroy(d);
  aural_lm_destroy(lm);
  aural_lexicon_destroy(lex);
}

/* Speech without a pause longer than endpoint_max_s: the segment is cut
 * where no word is in progress, not in the middle of one (whose parts
 * would become other words). Here "c" (t3 t1) over and over, the 30th
 * frame on the first of a word's two t1 frames: cut there, the second
 * t1 would start a new segment as the word "a". */
static void test_longest_segment_cuts_between_words(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon("a\tt1\nc\tt3 t1\n");
  aural_decoder *d = endpoint_decoder(lex, NULL);
  float logits[60 * V];
  size_t n = 0;
  put_frames(logits, &n, 0, 2);
  for (int i = 0; i < 10; i++) {
    put_frames(logits, &n, 3, 2);
    put_frames(logits, &n, 1, 2);
    put_frames(logits, &n, 0, 1);
  }
  aural_word w[16];
  size_t nw, n_c = 0, n_finals = 0;
  for (size_t at = 0; at < n;) {
    size_t took = aural_decoder_push(d, logits + at * V, n - at);
    at += took;
    if (at == n) aural_decoder_end(d);
    if (aural_decoder_final(d, w, 16, &nw) == 1) {
      n_finals++;
      assert_true(nw <= 16);
      for (size_t i = 0; i < nw; i++) {
        assert_string_equal(w[i].text, "c");
        n_c++;
      }
    }
  }
  assert_int_equal(n_finals, 2);
  assert_int_equal(n_c, 10);
  aural_decoder_destroy(d);
  aural_lexicon_destroy(lex);
}

/* A segment cut at endpoint_max_s on the frame that ends a word with its
 * last token below the blank (so the frame is non-speech), that token
 * going on in the next frame: one token to CTC, so no new word. The new
 * segment started from the blank, and read the token's next frame as the
 * word "a" (t1), as if t1 had come twice. */
static void test_token_going_on_past_a_cut_is_no_new_word(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon("a\tt1\nc\tt3 t1\n");
  aural_decoder *d = endpoint_decoder(lex, NULL); /* the longest 30 frames */
  float logits[60 * V];
  size_t n = 0;
  put_frames(logits, &n, 0, 2);
  for (int i = 0; i < 15; i++) { /* "c" after "c", no pause */
    put_frames(logits, &n, 3, 1);
    put_frames(logits, &n, 1, 1);
  }
  /* Frame 31, the 15th c's t1: just below the blank, and on at 32. */
  for (int k = 0; k < V; k++)
    logits[(n - 1) * V + k] = k == 0 ? 1.0f : k == 1 ? 0.95f : -5.0f;
  put_frames(logits, &n, 1, 1);
  put_frames(logits, &n, 0, 20);
  aural_word w[32];
  size_t nw, n_finals = 0, n_c = 0;
  for (size_t at = 0; at < n;) {
    at += aural_decoder_push(d, logits + at * V, n - at);
    if (at == n) aural_decoder_end(d);
    if (aural_decoder_final(d, w, 32, &nw) == 1) {
      n_finals++;
      for (size_t i = 0; i < nw; i++) {
        if (strcmp(w[i].text, "c") != 0)
          fail_msg("final %zu: word %zu is \"%s\" [%llu, %llu)", n_finals, i,
                   w[i].text, (unsigned long long)w[i].start_frame,
                   (unsigned long long)w[i].end_frame);
        n_c++;
      }
    }
  }
  assert_int_equal(n_finals, 1); /* cut at frame 31 */
  assert_int_equal(n_c, 15);
  aural_decoder_destroy(d);
  aural_lexicon_destroy(lex);
}

/* Everything the decoder says for logits pushed `step` frames at a time:
 * each final's words and the partial after every push, as text. */
static char *transcript(const aural_lexicon *lex, const aural_lm *lm,
                        const float *logits, size_t n, size_t step) {
  aural_decoder_config dc;
  aural_decoder_config_default(&dc);
  aural_decoder *d;
  aural_err err;
  assert_int_equal(aural_decoder_create(&dc, model, lex, lm, &d, &err), 0);
  size_t cap = 1 << 20, len = 0;
  char *out = malloc(cap);
  aural_word w[256];
  size_t nw;
  for (size_t at = 0; at < n;) {
    size_t k = n - at < step ? n - at : step;
    size_t took = aural_decoder_push(d, logits + at * V, k);
    at += took;
    if (aural_decoder_final(d, w, 256, &nw) == 1)
      for (size_t i = 0; i < nw && i < 256; i++)
        len += (size_t)snprintf(out + len, cap - len, "F %s %llu %llu %a\n",
                                w[i].text,
                                (unsigned long long)w[i].start_frame,
                                (unsigned long long)w[i].end_frame,
                                (double)w[i].confidence);
    else
      assert_int_equal(took, k);
  }
  aural_decoder_end(d);
  if (aural_decoder_final(d, w, 256, &nw) == 1)
    for (size_t i = 0; i < nw && i < 256; i++)
      len += (size_t)snprintf(out + len, cap - len, "E %s %llu %llu\n",
                              w[i].text, (unsigned long long)w[i].start_frame,
                              (unsigned long long)w[i].end_frame);
  aural_decoder_destroy(d);
  return out;
}

static void test_chunking_does_not_matter(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex4);
  aural_lm *lm = lm_of(arpa4, lex);
  enum { N = 3000 };
  float *logits = malloc(N * V * sizeof *logits);
  rng_state = 777;
  /* Bursts of noisy speech between pauses of 0.2 to 1.5 s. */
  for (size_t t = 0; t < N;) {
    size_t speech = 20 + (size_t)(uniform() * 200);
    size_t pause = 20 + (size_t)(uniform() * 130);
    for (size_t i = 0; i < speech && t < N; i++, t++) {
      int hot = uniform() < 0.5 ? 0 : 1 + (int)(uniform() * (V - 1));
      for (int k = 0; k < V; k++)
        logits[t * V + k] = (float)(2.0 * uniform() + (k == hot ? 5 : 0));
    }
    for (size_t i = 0; i < pause && t < N; i++, t++)
      for (int k = 0; k < V; k++)
        logits[t * V + k] = (float)(uniform() + (k == 0 ? 6 : 0));
  }
  char *want = transcript(lex, lm, logits, N, N);
  assert_true(strlen(want) > 100);
  assert_non_null(strstr(want, "F ")); /* endpoints, not just the end */
  const size_t steps[] = {1, 7, 50, 333};
  for (size_t i = 0; i < 4; i++) {
    char *got = transcript(lex, lm, logits, N, steps[i]);
    if (strcmp(got, want) != 0)
      fail_msg("pushing %zu frames at a time changes the words", steps[i]);
    free(got);
  }
  free(want);
  free(logits);
  aural_lm_destroy(lm);
  aural_lexicon_destroy(lex);
}

/* Where in n frames of logits the decoder's finals come (frames pushed
 * before each, counted from the first), with silence_s of trailing
 * non-speech and a beam of `beam`; returns how many, at most cap. */
static size_t final_frames(const aural_lexicon *lex, const float *logits,
                           size_t n, float silence_s, int beam, size_t *at,
                           size_t cap, uint64_t *min_gap) {
  aural_decoder_config dc;
  aural_decoder_config_default(&dc);
  dc.endpoint_silence_s = silence_s;
  dc.beam = beam;
  aural_decoder *d;
  aural_err err;
  assert_int_equal(aural_decoder_create(&dc, model, lex, NULL, &d, &err), 0);
  aural_decoder_info info;
  aural_decoder_get_info(d, &info);
  *min_gap = info.min_segment_frames;
  size_t n_finals = 0;
  for (size_t t = 0; t < n;) {
    t += aural_decoder_push(d, logits + t * V, n - t);
    size_t nw;
    if (aural_decoder_final(d, NULL, 0, &nw) == 1 && n_finals < cap)
      at[n_finals++] = t;
  }
  aural_decoder_destroy(d);
  return n_finals;
}

/* Finals end at least min_segment_frames apart, as the stream sizes its
 * chunks' segment lists by it: also where the word that ends a segment
 * comes in a frame whose most likely token is the blank (a token just
 * below it, every frame), so that the frame counts as non-speech, and
 * where a word every frame fills the pool of links first. */
static void test_finals_are_min_segment_frames_apart(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon("a\tt1\nb\tt2\n");
  /* Past the longest segment (20 s) and the silence (at most 0.8 s) that
   * may follow it before it is cut: every case has a final. */
  enum { N = 2100 };
  float *logits = malloc(N * V * sizeof *logits);
  size_t *at = malloc(N * sizeof *at);
  rng_state = 4242;
  for (int pattern = 0; pattern < 3; pattern++) {
    for (size_t t = 0; t < N; t++)
      for (int k = 0; k < V; k++)
        logits[t * V + k] =
            pattern == 0   ? (k == 0 ? 1.0f : k == 1 ? 0.9f : 0.0f)
            : pattern == 1 ? (float)(3.0 * uniform() + (k == 0 ? 1.5 : 0))
                           : (k == 1 + (int)(t % 2) ? 8.0f : 0.0f);
    const float silences[] = {0.01f, 0.02f, 0.1f, 0.8f};
    const int beams[] = {1, 4, 64};
    for (size_t si = 0; si < 4; si++)
      for (size_t bi = 0; bi < 3; bi++) {
        uint64_t gap;
        size_t n_finals = final_frames(lex, logits, N, silences[si],
                                       beams[bi], at, N, &gap);
        assert_true(n_finals > 0);
        for (size_t i = 0; i < n_finals; i++) {
          size_t since = i == 0 ? at[0] : at[i] - at[i - 1];
          if (since < gap)
            fail_msg("pattern %d, silence %.2f s, beam %d: final %zu came "
                     "%zu frames after the last, min_segment_frames %llu",
                     pattern, (double)silences[si], beams[bi], i, since,
                     (unsigned long long)gap);
        }
      }
  }
  free(at);
  free(logits);
  aural_lexicon_destroy(lex);
}

/* "t1", then non-speech: the best hypothesis is inside "a" (t1 t2), so
 * the silence rule, which wants words in it, waits; the idle rule ends
 * the segment, with the "b" (t1) of a hypothesis between words. With
 * endpoint_idle_s below endpoint_silence_s such finals came 8 frames
 * apart, where min_segment_frames promised 80 (a stream sizes its
 * chunks' segment lists by it). */
static void test_idle_finals_are_min_segment_frames_apart(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon("a\tt1 t2\nb\tt1\n");
  aural_decoder_config dc;
  aural_decoder_config_default(&dc);
  dc.endpoint_idle_s = 0.05f; /* 5 frames; the silence 80 */
  aural_decoder *d;
  aural_err err;
  assert_int_equal(aural_decoder_create(&dc, model, lex, NULL, &d, &err), 0);
  aural_decoder_info info;
  aural_decoder_get_info(d, &info);
  float logits[80 * V];
  size_t n = 0;
  for (int i = 0; i < 10; i++) {
    put_frames(logits, &n, 1, 1);
    put_frames(logits, &n, 0, 7);
  }
  size_t n_finals = 0, last = 0;
  for (size_t t = 0; t < n;) {
    t += aural_decoder_push(d, logits + t * V, n - t);
    aural_word w[2];
    size_t nw;
    if (aural_decoder_final(d, w, 2, &nw) == 1) {
      assert_int_equal(nw, 1);
      assert_string_equal(w[0].text, "b");
      if (t - last < info.min_segment_frames)
        fail_msg("a final %zu frames after the last, min_segment_frames "
                 "%llu",
                 t - last, (unsigned long long)info.min_segment_frames);
      last = t;
      n_finals++;
    }
  }
  assert_int_equal(n_finals, 10);
  aural_decoder_destroy(d);
  aural_lexicon_destroy(lex);
}

static void test_config_rejects(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex4);
  aural_decoder_config dc;
  aural_decoder *d;
  aural_err err;
  aural_decoder_config_default(&dc);
  dc.beam = 0;
  assert_int_equal(aural_decoder_create(&dc, model, lex, NULL, &d, &err),
                   AURAL_ECONFIG);
  assert_non_null(strstr(err.msg, "beam"));
  aural_decoder_config_default(&dc);
  dc.endpoint_max_s = NAN;
  assert_int_equal(aural_decoder_create(&dc, model, lex, NULL, &d, &err),
                   AURAL_ECONFIG);
  /* An LM read over another lexicon: its tables follow that lexicon's
   * words and tree, which this one outgrows. */
  aural_decoder_config_default(&dc);
  aural_lexicon *small = lexicon(lex_abc);
  aural_lm *other = lm_of(arpa3, small);
  d = (aural_decoder *)1;
  assert_int_equal(aural_decoder_create(&dc, model, lex, other, &d, &err),
                   AURAL_ECONFIG);
  assert_null(d);
  assert_non_null(strstr(err.msg, "another lexicon"));
  assert_int_equal(aural_decoder_create(&dc, model, small, other, &d, &err),
                   0);
  aural_decoder_destroy(d);
  aural_lm_destroy(other);
  aural_lexicon_destroy(small);
  /* No LM: words by the acoustics and the penalty alone. */
  assert_int_equal(aural_decoder_create(&dc, model, lex, NULL, &d, &err), 0);
  push_word_b(d);
  aural_word w[2];
  assert_int_equal(aural_decoder_partial(d, w, 2), 1);
  assert_string_equal(w[0].text, "b");
  aural_decoder_destroy(d);
  aural_lexicon_destroy(lex);
}

/* Nowhere to put the object: AURAL_EINVAL naming the reader, before
 * anything is read (they crashed). */
static void test_null_out_pointers(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex4);
  aural_err err = {0};
  assert_int_equal(aural_lexicon_load_buffer(lex4, strlen(lex4), "lex",
                                             model, NULL, &err),
                   AURAL_EINVAL);
  assert_non_null(strstr(err.msg, "lexicon: no out pointer"));
  err = (aural_err){0};
  assert_int_equal(aural_lexicon_load("no-such.lexicon.txt", model, NULL,
                                      &err),
                   AURAL_EINVAL);
  assert_non_null(strstr(err.msg, "lexicon: no out pointer"));
  err = (aural_err){0};
  assert_int_equal(aural_lm_load_buffer(arpa3, strlen(arpa3), "lm", lex,
                                        NULL, &err),
                   AURAL_EINVAL);
  assert_non_null(strstr(err.msg, "LM: no out pointer"));
  err = (aural_err){0};
  assert_int_equal(aural_lm_load("no-such.lm.arpa", lex, NULL, &err),
                   AURAL_EINVAL);
  assert_non_null(strstr(err.msg, "LM: no out pointer"));
  err = (aural_err){0};
  assert_int_equal(aural_decoder_create(NULL, model, lex, NULL, NULL, &err),
                   AURAL_EINVAL);
  assert_non_null(strstr(err.msg, "decoder: no out pointer"));
  aural_lexicon_destroy(lex);
}

/* The partial with no buffer counts its words, as the final does (it
 * wrote through the NULL pointer when cap was not 0). */
static void test_partial_without_buffer(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex4);
  aural_decoder *d;
  aural_err err;
  assert_int_equal(aural_decoder_create(NULL, model, lex, NULL, &d, &err), 0);
  push_word_b(d);
  assert_int_equal(aural_decoder_partial(d, NULL, 2), 1);
  assert_int_equal(aural_decoder_partial(d, NULL, 0), 1);
  aural_word w[2];
  assert_int_equal(aural_decoder_partial(d, w, 2), 1);
  assert_string_equal(w[0].text, "b");
  aural_decoder_destroy(d);
  aural_lexicon_destroy(lex);
}

/* A NULL decoder, or NULL logits with frames to give, is a decoder
 * that takes and gives nothing (push dereferenced both). */
static void test_null_decoder_calls(void **state) {
  (void)state;
  aural_lexicon *lex = lexicon(lex4);
  aural_decoder *d;
  aural_err err;
  assert_int_equal(aural_decoder_create(NULL, model, lex, NULL, &d, &err), 0);
  assert_int_equal(aural_decoder_push(d, NULL, 3), 0);
  assert_int_equal(aural_decoder_push(d, NULL, 0), 0);
  aural_decoder_info info;
  aural_decoder_get_info(d, &info);
  assert_int_equal(info.frames, 0);
  aural_decoder_get_info(d, NULL);
  aural_decoder_destroy(d);

  float lg[4 * 16] = {0};
  assert_int_equal(aural_decoder_push(NULL, lg, 4), 0);
  aural_decoder_end(NULL);
  aural_decoder_reset(NULL);
  aural_word w[2];
  size_t n = 7;
  assert_int_equal(aural_decoder_final(NULL, w, 2, &n), 0);
  assert_int_equal(n, 0);
  assert_int_equal(aural_decoder_partial(NULL, w, 2), 0);
  info.frames = 5;
  info.max_words = 5;
  aural_decoder_get_info(NULL, &info);
  assert_int_equal(info.frames, 0);
  assert_int_equal(info.max_words, 0);
  aural_lexicon_destroy(lex);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_lexicon_tree),
      cmocka_unit_test(test_lexicon_rejects),
      cmocka_unit_test(test_lexicon_large_vocabulary),
      cmocka_unit_test(test_lm_backoff),
      cmocka_unit_test(test_lm_unk),
      cmocka_unit_test(test_lm_rejects),
      cmocka_unit_test(test_readers_skip_byte_order_mark),
      cmocka_unit_test(test_lexicon_tokens_apart_by_tabs),
      cmocka_unit_test(test_lm_header_without_blank_line),
      cmocka_unit_test(test_search_matches_brute_force),
      cmocka_unit_test(test_custom_words_match_brute_force),
      cmocka_unit_test(test_custom_words_without_unk),
      cmocka_unit_test(test_endpoints),
      cmocka_unit_test(test_longest_segment_cuts_between_words),
      cmocka_unit_test(test_token_going_on_past_a_cut_is_no_new_word),
      cmocka_unit_test(test_chunking_does_not_matter),
      cmocka_unit_test(test_finals_are_min_segment_frames_apart),
      cmocka_unit_test(test_idle_finals_are_min_segment_frames_apart),
      cmocka_unit_test(test_config_rejects),
      cmocka_unit_test(test_null_out_pointers),
      cmocka_unit_test(test_partial_without_buffer),
      cmocka_unit_test(test_null_decoder_calls),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
