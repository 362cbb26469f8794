/*
 * Words resources as files (lib/gzip.c): gzipped lexicons, LMs and g2p
 * maps load as their plain text does, from a buffer and from a file; bad
 * gzip data (corrupt, cut short, trailing bytes, inflating past the limit)
 * is refused with the input's name; and the path of a resource beside a
 * model prefers the plain file, then the gzipped one (for the LM: binary,
 * then ARPA). The binary LM (tools/words/lmbin.py's tri.lm.bin, from
 * tri.lm.arpa) scores every sequence as its ARPA source does; every
 * prefix of it, and every damaged copy, is refused or loads, never worse;
 * each kind of damage gets a message that says what it is.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include <aural.h>
#include <aural/decoder.h>

#include "internal.h"
#include "helpers.h"

static aural_model *model; /* tokens t1..t4 */

static int setup(void **state) {
  (void)state;
  model = test_tiny_ctc_model(5);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  aural_model_free(model);
  return 0;
}

static const char lex_text[] = "a\tt1\n"
                               "b\tt2\n"
                               "b\tt2 t3\n"
                               "c\tt3\n"
                               "d\tt4 t1\n";

static const char arpa_text[] = "\\data\\\n"
                                "ngram 1=5\n"
                                "ngram 2=2\n"
                                "\n"
                                "\\1-grams:\n"
                                "-1.0\t<s>\t-0.5\n"
                                "-1.1\t</s>\n"
                                "-1.2\ta\t-0.25\n"
                                "-1.3\tb\n"
                                "-1.4\tc\n"
                                "\n"
                                "\\2-grams:\n"
                                "-0.3\t<s> a\n"
                                "-0.4\ta b\n"
                                "\n"
                                "\\end\\\n";

/* text as one gzip member, as `gzip` writes it (free it). */
static unsigned char *gz(const void *text, size_t len, size_t *out_len) {
  z_stream zs = {0};
  assert_int_equal(deflateInit2(&zs, 9, Z_DEFLATED, 16 + MAX_WBITS, 8,
                                Z_DEFAULT_STRATEGY),
                   Z_OK);
  size_t cap = deflateBound(&zs, (uLong)len);
  unsigned char *out = malloc(cap);
  assert_non_null(out);
  zs.next_in = (unsigned char *)text;
  zs.avail_in = (uInt)len;
  zs.next_out = out;
  zs.avail_out = (uInt)cap;
  assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
  *out_len = cap - zs.avail_out;
  deflateEnd(&zs);
  return out;
}

/* The lexicon and LM of lex_text and arpa_text, read as plain text. */
static void load_plain(aural_lexicon **lex, aural_lm **lm) {
  aural_err err;
  if (aural_lexicon_load_buffer(lex_text, strlen(lex_text), "l", model, lex,
                                &err) < 0 ||
      aural_lm_load_buffer(arpa_text, strlen(arpa_text), "m", *lex, lm,
                           &err) < 0)
    fail_msg("%s", err.msg);
}

/* The same sequences score the same under both LMs, over lexicons with
 * the same words. */
static void assert_same_lm(const aural_lexicon *lex1, const aural_lm *lm1,
                           const aural_lexicon *lex2, const aural_lm *lm2) {
  aural_lexicon_info li1, li2;
  aural_lexicon_get_info(lex1, &li1);
  aural_lexicon_get_info(lex2, &li2);
  assert_int_equal(li1.n_words, li2.n_words);
  assert_int_equal(li1.n_prons, li2.n_prons);
  aural_lm_info mi1, mi2;
  aural_lm_get_info(lm1, &mi1);
  aural_lm_get_info(lm2, &mi2);
  assert_int_equal(mi1.order, mi2.order);
  for (int k = 0; k < mi1.order; k++)
    assert_int_equal(mi1.n_grams[k], mi2.n_grams[k]);
  const char *words[] = {"a", "b", "c", "d"};
  for (int i = -1; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      int s1[2] = {i < 0 ? AURAL_LM_BOS : aural_lexicon_find(lex1, words[i]),
                   aural_lexicon_find(lex1, words[j])};
      int s2[2] = {i < 0 ? AURAL_LM_BOS : aural_lexicon_find(lex2, words[i]),
                   aural_lexicon_find(lex2, words[j])};
      assert_true(s1[1] >= 0 && s2[1] >= 0);
      double x = aural_lm_score(lm1, s1, 2), y = aural_lm_score(lm2, s2, 2);
      assert_true(x == y); /* -inf too, for d */
    }
}

static void test_gzip_buffers(void **state) {
  (void)state;
  aural_err err;
  aural_lexicon *lex1, *lex2;
  aural_lm *lm1, *lm2;
  load_plain(&lex1, &lm1);
  size_t nl, nm;
  unsigned char *zl = gz(lex_text, strlen(lex_text), &nl);
  unsigned char *zm = gz(arpa_text, strlen(arpa_text), &nm);
  if (aural_lexicon_load_buffer((const char *)zl, nl, "l.gz", model, &lex2,
                                &err) < 0 ||
      aural_lm_load_buffer((const char *)zm, nm, "m.gz", lex2, &lm2, &err) < 0)
    fail_msg("%s", err.msg);
  assert_same_lm(lex1, lm1, lex2, lm2);
  aural_lm_destroy(lm2);
  aural_lexicon_destroy(lex2);

  /* Two members one after another (what `cat a.gz b.gz` makes) are the
   * two texts one after another. */
  size_t half = strlen(lex_text) / 2, n1, n2;
  unsigned char *z1 = gz(lex_text, half, &n1);
  unsigned char *z2 = gz(lex_text + half, strlen(lex_text) - half, &n2);
  unsigned char *both = malloc(n1 + n2);
  assert_non_null(both);
  memcpy(both, z1, n1);
  memcpy(both + n1, z2, n2);
  if (aural_lexicon_load_buffer((const char *)both, n1 + n2, "l2.gz", model,
                                &lex2, &err) < 0 ||
      aural_lm_load_buffer((const char *)zm, nm, "m.gz", lex2, &lm2, &err) < 0)
    fail_msg("%s", err.msg);
  assert_same_lm(lex1, lm1, lex2, lm2);
  aural_lm_destroy(lm2);
  aural_lexicon_destroy(lex2);

  /* The g2p map's reader inflates too: the same map, plain and gzipped,
   * loads (or fails) the same way. */
  const char *map = "dialect en-us\nmap a t1\nmap b t2 t3\n";
  size_t ng;
  unsigned char *zg = gz(map, strlen(map), &ng);
  aural_g2p *g1, *g2;
  assert_int_equal(aural_g2p_load_buffer(map, strlen(map), "g", model, &g1,
                                         &err),
                   0);
  assert_int_equal(aural_g2p_load_buffer((const char *)zg, ng, "g.gz", model,
                                         &g2, &err),
                   0);
  aural_g2p_destroy(g1);
  aural_g2p_destroy(g2);
  free(zg);
  const char *bad = "dialect en-us\nmap a t9\n";
  zg = gz(bad, strlen(bad), &ng);
  assert_true(aural_g2p_load_buffer((const char *)zg, ng, "g.gz", model, &g2,
                                    &err) < 0);
  assert_null(g2);
  assert_non_null(strstr(err.msg, "g.gz:2"));
  free(zg);
  free(both);
  free(z1);
  free(z2);
  free(zl);
  free(zm);
  aural_lm_destroy(lm1);
  aural_lexicon_destroy(lex1);
}

typedef struct bad_case {
  const char *what;
  size_t cut;        /* bytes cut from the end */
  long flip;         /* a byte to invert (-1: none; from the end if < -1) */
  const char *tail;  /* bytes appended */
  const char *want;  /* a part of the message */
} bad_case;

static void test_gzip_rejects(void **state) {
  (void)state;
  size_t n;
  unsigned char *z = gz(arpa_text, strlen(arpa_text), &n);
  const bad_case cases[] = {
      {"cut in the data", 20, -1, "", "cut short"},
      {"cut in the trailer", 3, -1, "", "cut short"},
      {"header alone", n - 10, -1, "", "cut short"},
      {"a flipped data byte", 0, 14, "", "corrupt gzip data"},
      {"a flipped CRC byte", 0, -6, "", "corrupt gzip data"},
      {"a flipped length byte", 0, -2, "", "corrupt gzip data"},
      {"a bad method", 0, 2, "", "corrupt gzip data"},
      {"trailing text", 0, -1, "junk", "4 bytes after the end"},
      {"a trailing magic alone", 0, -1, "\x1f\x8b", "cut short"},
  };
  unsigned char buf[4096];
  assert_true(n + 8 < sizeof buf);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const bad_case *c = &cases[i];
    size_t len = n - c->cut;
    memcpy(buf, z, len);
    if (c->flip >= 0) buf[c->flip] ^= 0xff;
    if (c->flip < -1) buf[(long)len + c->flip + 1] ^= 0xff;
    memcpy(buf + len, c->tail, strlen(c->tail));
    len += strlen(c->tail);
    aural_lexicon *lex = NULL;
    aural_lm *lm = (aural_lm *)1;
    aural_err err = {0};
    assert_int_equal(aural_lexicon_load_buffer(lex_text, strlen(lex_text),
                                               "l", model, &lex, &err),
                     0);
    int rc = aural_lm_load_buffer((const char *)buf, len, "x.lm.arpa.gz", lex,
                                  &lm, &err);
    if (rc >= 0 || lm != NULL || strstr(err.msg, c->want) == NULL ||
        strstr(err.msg, "x.lm.arpa.gz") == NULL)
      fail_msg("%s: rc %d, message \"%s\", wanted \"%s\"", c->what, rc,
               err.msg, c->want);
    assert_int_equal(rc, AURAL_EFORMAT);
    /* The lexicon's reader says the same. */
    aural_lexicon *lex2 = (aural_lexicon *)1;
    rc = aural_lexicon_load_buffer((const char *)buf, len, "x.lexicon.txt.gz",
                                   model, &lex2, &err);
    if (rc >= 0 || lex2 != NULL || strstr(err.msg, c->want) == NULL)
      fail_msg("%s (lexicon): rc %d, message \"%s\"", c->what, rc, err.msg);
    aural_lexicon_destroy(lex);
  }
  free(z);
}

/* A gzip "bomb": little data that inflates past the limit is refused
 * without inflating the rest; at the limit exactly it loads. */
static void test_gzip_limit(void **state) {
  (void)state;
  size_t big = 64u << 20;
  char *zeros = calloc(big, 1);
  assert_non_null(zeros);
  size_t n;
  unsigned char *z = gz(zeros, big, &n);
  free(zeros);
  assert_true(n < big / 500);
  unsigned char *out = (unsigned char *)1;
  size_t out_len = 1;
  aural_err err = {0};
  int rc = aural__gunzip(z, n, "bomb.gz", 1u << 20, &out, &out_len, &err);
  assert_int_equal(rc, AURAL_EFORMAT);
  assert_null(out);
  assert_int_equal(out_len, 0);
  assert_non_null(strstr(err.msg, "bomb.gz: inflates to more than 1048576"));
  free(z);

  const char *text = "0123456789";
  z = gz(text, 10, &n);
  assert_int_equal(aural__gunzip(z, n, "ten", 9, &out, &out_len, &err),
                   AURAL_EFORMAT);
  assert_int_equal(aural__gunzip(z, n, "ten", 10, &out, &out_len, &err), 0);
  assert_int_equal(out_len, 10);
  assert_memory_equal(out, text, 10);
  free(out);
  /* Empty text inflates to nothing; the reader then says what is missing. */
  free(z);
  z = gz("", 0, &n);
  assert_int_equal(aural__gunzip(z, n, "empty", 10, &out, &out_len, &err), 0);
  assert_int_equal(out_len, 0);
  free(out);
  aural_lexicon *lex;
  assert_int_equal(aural_lexicon_load_buffer((const char *)z, n, "e.gz",
                                             model, &lex, &err),
                   AURAL_EEMPTY);
  assert_non_null(strstr(err.msg, "e.gz: no pronunciations"));
  free(z);
}

static void test_resource_path(void **state) {
  (void)state;
  char *dir = test_tmpdir();
  char model_path[256], lex_plain[256], lex_gz[256], lm_gz[256], got[256];
  snprintf(model_path, sizeof model_path, "%s/m.safetensors", dir);
  snprintf(lex_plain, sizeof lex_plain, "%s/m.lexicon.txt", dir);
  snprintf(lex_gz, sizeof lex_gz, "%s/m.lexicon.txt.gz", dir);
  snprintf(lm_gz, sizeof lm_gz, "%s/m.lm.arpa.gz", dir);

  /* Neither: the plain name, for the loader's "no such file". */
  assert_int_equal(aural_decoder_resource_path(model_path, ".lexicon.txt",
                                               got, sizeof got),
                   0);
  assert_string_equal(got, lex_plain);
  aural_lexicon *lex;
  aural_err err;
  assert_true(aural_lexicon_load(got, model, &lex, &err) < 0);
  assert_non_null(strstr(err.msg, lex_plain));

  /* Gzipped alone: that one, and it loads from the file. */
  size_t nl, nm;
  unsigned char *zl = gz(lex_text, strlen(lex_text), &nl);
  unsigned char *zm = gz(arpa_text, strlen(arpa_text), &nm);
  test_write_file(lex_gz, zl, nl);
  test_write_file(lm_gz, zm, nm);
  assert_int_equal(aural_decoder_resource_path(model_path, ".lexicon.txt",
                                               got, sizeof got),
                   0);
  assert_string_equal(got, lex_gz);
  aural_lm *lm;
  assert_int_equal(aural_lexicon_load(got, model, &lex, &err), 0);
  assert_int_equal(aural_decoder_resource_path(model_path, ".lm.arpa", got,
                                               sizeof got),
                   0);
  assert_string_equal(got, lm_gz);
  assert_int_equal(aural_lm_load(got, lex, &lm, &err), 0);
  aural_lm *lm1;
  aural_lexicon *lex1;
  load_plain(&lex1, &lm1);
  assert_same_lm(lex1, lm1, lex, lm);
  aural_lm_destroy(lm);
  aural_lexicon_destroy(lex);
  aural_lm_destroy(lm1);
  aural_lexicon_destroy(lex1);

  /* ".lm": the ARPA file while there is no binary one, then the binary
   * (gzipped here); with neither, the binary's plain name. */
  assert_int_equal(aural_decoder_resource_path(model_path, ".lm", got,
                                               sizeof got),
                   0);
  assert_string_equal(got, lm_gz);
  char bin_gz[256];
  snprintf(bin_gz, sizeof bin_gz, "%s/m.lm.bin.gz", dir);
  test_write_file(bin_gz, zm, nm);
  assert_int_equal(aural_decoder_resource_path(model_path, ".lm", got,
                                               sizeof got),
                   0);
  assert_string_equal(got, bin_gz);
  assert_int_equal(aural_decoder_resource_path("x/none.safetensors", ".lm",
                                               got, sizeof got),
                   0);
  assert_string_equal(got, "x/none.lm.bin");
  /* The binary form wins over an unpacked ARPA file; its plain form over
   * its gzipped one. */
  char arpa_plain[256], bin_plain[256];
  snprintf(arpa_plain, sizeof arpa_plain, "%s/m.lm.arpa", dir);
  snprintf(bin_plain, sizeof bin_plain, "%s/m.lm.bin", dir);
  test_write_file(arpa_plain, arpa_text, strlen(arpa_text));
  assert_int_equal(aural_decoder_resource_path(model_path, ".lm", got,
                                               sizeof got),
                   0);
  assert_string_equal(got, bin_gz);
  test_write_file(bin_plain, zm, nm);
  assert_int_equal(aural_decoder_resource_path(model_path, ".lm", got,
                                               sizeof got),
                   0);
  assert_string_equal(got, bin_plain);

  /* Both: the plain one (one a user unpacked to edit). */
  test_write_file(lex_plain, lex_text, strlen(lex_text));
  assert_int_equal(aural_decoder_resource_path(model_path, ".lexicon.txt",
                                               got, sizeof got),
                   0);
  assert_string_equal(got, lex_plain);

  /* A model named otherwise keeps its whole name. */
  assert_int_equal(aural_decoder_resource_path("x/model.bin", ".lm.arpa", got,
                                               sizeof got),
                   0);
  assert_string_equal(got, "x/model.bin.lm.arpa");
  /* Too long for out (the gzipped name must fit too). */
  assert_int_equal(aural_decoder_resource_path("x/m.safetensors",
                                               ".lexicon.txt", got, 18),
                   -ENAMETOOLONG);
  assert_int_equal(aural_decoder_resource_path("x/m.safetensors", ".lm", got,
                                               12),
                   -ENAMETOOLONG);
  assert_int_equal(aural_decoder_resource_path("x/m.safetensors",
                                               ".lexicon.txt", got, 19),
                   0); /* "x/m.lexicon.txt.gz" and its NUL: 19 bytes */
  assert_string_equal(got, "x/m.lexicon.txt");
  /* A NULL argument is refused, not followed. */
  assert_int_equal(aural_decoder_resource_path(NULL, ".lm", got, sizeof got),
                   AURAL_EINVAL);
  assert_int_equal(aural_decoder_resource_path("x/m.safetensors", NULL, got,
                                               sizeof got),
                   AURAL_EINVAL);
  assert_int_equal(aural_decoder_resource_path("x/m.safetensors", ".lm", NULL,
                                               sizeof got),
                   AURAL_EINVAL);
  test_rmtree(dir);
  free(dir);
  free(zl);
  free(zm);
}

/* --- the binary LM -------------------------------------------------------- */

/* tri.lm.arpa's words, each with a pronunciation in the tiny model's
 * tokens ("zebra" left out: its n-grams are dropped). */
static const char *const tri_words[] = {"the", "quick", "brown", "fox",
                                        "jumps", "over", "lazy", "dog",
                                        "a", "stream", "cat"};
#define N_TRI (sizeof tri_words / sizeof *tri_words)

static aural_lexicon *tri_lexicon(void) {
  char text[1024];
  size_t at = 0;
  for (size_t i = 0; i < N_TRI; i++)
    at += (size_t)snprintf(text + at, sizeof text - at, "%s\tt%zu t%zu\n",
                           tri_words[i], 1 + i % 4, 1 + (i / 4) % 4);
  aural_lexicon *lex;
  aural_err err;
  if (aural_lexicon_load_buffer(text, at, "tri.lex", model, &lex, &err) < 0)
    fail_msg("%s", err.msg);
  return lex;
}

/* Every sequence of 1 to 3 of <s>, </s> and the words scores the same
 * under both LMs (within the decimal digits' rounding). */
static void assert_same_scores(const aural_lm *a, const aural_lm *b) {
  int ids[N_TRI + 2];
  for (size_t i = 0; i < N_TRI; i++) ids[i] = (int)i; /* the lexicon's order */
  ids[N_TRI] = AURAL_LM_BOS;
  ids[N_TRI + 1] = AURAL_LM_EOS;
  size_t n = N_TRI + 2, checked = 0;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < n; j++)
      for (size_t k = 0; k < n; k++) {
        int seq[3] = {ids[i], ids[j], ids[k]};
        for (size_t len = 1; len <= 3; len++) {
          double x = aural_lm_score(a, seq + 3 - len, len);
          double y = aural_lm_score(b, seq + 3 - len, len);
          if (isinf(x) || isinf(y)) {
            assert_true(x == y);
          } else if (fabs(x - y) > 1e-6) {
            fail_msg("sequence %d %d %d (last %zu): %.7f against %.7f",
                     seq[0], seq[1], seq[2], len, x, y);
          }
          checked++;
        }
      }
  assert_int_equal(checked, 3 * n * n * n);
}

/* tri (every order more than the loader's queue of 16 n-grams) and tiny
 * (fewer): the binary form scores as its ARPA source, gzipped too. */
static void test_binary_lm_equals_arpa(void **state) {
  (void)state;
  aural_lexicon *lex = tri_lexicon();
  static const char *const stems[] = {"words/tri", "words/tiny"};
  for (int f = 0; f < 2; f++) {
    char arpa_path[64], bin_path[64];
    snprintf(arpa_path, sizeof arpa_path, "%s.lm.arpa", stems[f]);
    snprintf(bin_path, sizeof bin_path, "%s.lm.bin", stems[f]);
    aural_lm *arpa, *bin, *bin_gz;
    aural_err err;
    if (aural_lm_load(test_data_path(arpa_path), lex, &arpa, &err) < 0 ||
        aural_lm_load(test_data_path(bin_path), lex, &bin, &err) < 0)
      fail_msg("%s", err.msg);
    aural_lm_info ia, ib;
    aural_lm_get_info(arpa, &ia);
    aural_lm_get_info(bin, &ib);
    assert_int_equal(ia.order, 3);
    assert_int_equal(ib.order, 3);
    for (int k = 0; k < 3; k++)
      assert_int_equal(ia.n_grams[k], ib.n_grams[k]);
    assert_true(ia.n_dropped > 0); /* zebra's */
    assert_int_equal(ia.n_dropped, ib.n_dropped);
    assert_same_scores(arpa, bin);

    size_t len, zlen;
    unsigned char *raw =
        (unsigned char *)test_read_file(test_data_path(bin_path), &len);
    assert_true(len > 0);
    unsigned char *z = gz(raw, len, &zlen);
    if (aural_lm_load_buffer((const char *)z, zlen, "x.lm.bin.gz", lex,
                             &bin_gz, &err) < 0)
      fail_msg("%s", err.msg);
    assert_same_scores(bin, bin_gz);
    aural_lm_destroy(bin_gz);
    free(z);
    free(raw);
    aural_lm_destroy(arpa);
    aural_lm_destroy(bin);
  }
  aural_lexicon_destroy(lex);
}

/* A load that must fail: a code, nothing out, the name in the message. */
static void assert_refused(const aural_lexicon *lex, const unsigned char *p,
                           size_t len, const char *want) {
  aural_lm *lm = (aural_lm *)1;
  aural_err err = {0};
  int rc = aural_lm_load_buffer((const char *)p, len, "bad.lm.bin", lex, &lm,
                                &err);
  if (rc >= 0) fail_msg("loaded; expected \"%s\"", want ? want : "a failure");
  assert_null(lm);
  assert_true(rc == AURAL_EFORMAT || rc == AURAL_ETRUNCATED);
  assert_non_null(strstr(err.msg, "bad.lm.bin"));
  if (want != NULL && strstr(err.msg, want) == NULL)
    fail_msg("\"%s\" lacks \"%s\"", err.msg, want);
}

/* tri.lm.bin's bytes (raw), a scratch copy of them (p, one byte longer)
 * and the lexicon of its words. */
typedef struct tri_bin {
  aural_lexicon *lex;
  unsigned char *raw, *p;
  size_t len;
} tri_bin;

static tri_bin tri_bin_open(void) {
  tri_bin t = {.lex = tri_lexicon()};
  t.raw = (unsigned char *)test_read_file(test_data_path("words/tri.lm.bin"),
                                          &t.len);
  assert_true(t.len > 0);
  t.p = malloc(t.len + 1);
  assert_non_null(t.p);
  return t;
}

static void tri_bin_close(tri_bin *t) {
  free(t->p);
  free(t->raw);
  aural_lexicon_destroy(t->lex);
}

static void test_binary_lm_prefixes_and_damage(void **state) {
  (void)state;
  tri_bin t = tri_bin_open();
  aural_lexicon *lex = t.lex;
  unsigned char *raw = t.raw, *p = t.p;
  size_t len = t.len;
  /* Each prefix (the magic's own too). */
  for (size_t n = 1; n < len; n++) {
    memcpy(p, raw, n);
    assert_refused(lex, p, n, n <= 8 ? "ends in its header" : NULL);
  }
  /* Each byte flipped three ways: refused as above, or loaded. */
  static const unsigned char flips[] = {0x01, 0x80, 0xff};
  size_t loaded = 0, refused = 0;
  for (size_t i = 0; i < len; i++)
    for (size_t f = 0; f < sizeof flips; f++) {
      memcpy(p, raw, len);
      p[i] ^= flips[f];
      aural_lm *lm = (aural_lm *)1;
      aural_err err = {0};
      if (aural_lm_load_buffer((const char *)p, len, "bad.lm.bin", lex, &lm,
                               &err) == 0) {
        int seq[3] = {AURAL_LM_BOS, 0, 3};
        double s = aural_lm_score(lm, seq, 3);
        assert_false(isnan(s));
        aural_lm_destroy(lm);
        loaded++;
      } else {
        assert_true(err.code < 0);
        assert_null(lm);
        assert_non_null(strstr(err.msg, "bad.lm.bin"));
        refused++;
      }
    }
  assert_true(loaded > 0 && refused > 0);
  tri_bin_close(&t);
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static void test_binary_lm_refusals(void **state) {
  (void)state;
  tri_bin t = tri_bin_open();
  aural_lexicon *lex = t.lex;
  unsigned char *raw = t.raw, *p = t.p;
  size_t len = t.len;
  /* The layout: magic, version, order, 3 counts, the vocabulary's size and
   * words, 15 unigrams, then the 2-grams' levels. */
  const size_t vocab_at = 8 + 4 + 4 + 3 * 8;
  uint64_t vocab_bytes = 0;
  memcpy(&vocab_bytes, raw + vocab_at, 8);
  const size_t words_at = vocab_at + 8, uni_at = words_at + vocab_bytes;
  const size_t levels_at = uni_at + 15 * 8;
  float nan = NAN, one = 1.0f;

#define EDIT(stmt, want)                                                      \
  do {                                                                        \
    memcpy(p, raw, len);                                                      \
    stmt;                                                                     \
    assert_refused(lex, p, len, want);                                        \
  } while (0)
  EDIT(put32(p + 8, 2), "version 2");
  EDIT(put32(p + 12, 5), "order 5");
  EDIT(put32(p + 12, 0), "order 0");
  EDIT(put32(p + 16 + 8, 0x7fffffff), "2-grams announced");
  /* Within the per-order bound, beyond what the file's bytes hold. */
  EDIT(put32(p + 16 + 8, (uint32_t)(len / 2)), "need");
  EDIT(put32(p + 16, 0), "1-grams announced");
  EDIT(p[vocab_at + 6] = 1, "vocabulary of");
  EDIT(p[words_at] = '\0', "empty");
  EDIT(memcpy(p + uni_at + 8 * 3, &one, 4), "1-gram 3");
  EDIT(memcpy(p + uni_at + 8 * 3 + 4, &nan, 4), "1-gram 3");
  EDIT(memcpy(p + levels_at, &nan, 4), "probability level 0");
  EDIT(memcpy(p + levels_at + 4 * 5, &one, 4), "probability level 5");
  EDIT(memcpy(p + levels_at + 4 * 256, &nan, 4), "backoff level 0");
  EDIT(p[vocab_at] += 1, "bytes after the vocabulary");
  /* The 2-grams' streams: child counts (one per 1-gram), then words. */
  const size_t sizes_at = levels_at + 2 * 4 * 256;
  uint64_t n_count_bytes = 0;
  memcpy(&n_count_bytes, raw + sizes_at, 8);
  const size_t counts_at = sizes_at + 16, words2_at = counts_at + n_count_bytes;
  assert_true(raw[counts_at] >= 2 && raw[words2_at + 1] >= 1); /* <s>'s */
  EDIT(p[counts_at] = 0x7f, "count of 2-grams after 1-gram 0");
  EDIT(p[words2_at] = 15, "a bad word"); /* id 15 of 15 words */
  EDIT(p[words2_at + 1] = 0, "a bad word"); /* no rise */
  EDIT(memset(p + words2_at, 0xff, 5), "a bad word"); /* past 32 bits */
  EDIT(p[sizes_at] -= 1, "2-gram"); /* the streams no longer line up */
  /* The last word, "cat", renamed "the": the same word twice. */
  assert_memory_equal(raw + uni_at - 4, "cat", 4);
  EDIT(memcpy(p + uni_at - 4, "the", 3), "listed twice");
  memcpy(p, raw, len);
  p[len] = 0;
  assert_refused(lex, p, len + 1, "bytes after");
  /* The error report is optional. */
  aural_lm *lm = (aural_lm *)1;
  assert_int_equal(aural_lm_load_buffer((const char *)raw, 20, "x", lex, &lm,
                                        NULL),
                   AURAL_ETRUNCATED);
  assert_null(lm);
#undef EDIT
  tri_bin_close(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gzip_buffers),
      cmocka_unit_test(test_gzip_rejects),
      cmocka_unit_test(test_gzip_limit),
      cmocka_unit_test(test_resource_path),
      cmocka_unit_test(test_binary_lm_equals_arpa),
      cmocka_unit_test(test_binary_lm_prefixes_and_damage),
      cmocka_unit_test(test_binary_lm_refusals),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
