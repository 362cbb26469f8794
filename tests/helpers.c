#define _GNU_SOURCE
#include "helpers.h"

#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <aural.h>

#include "synth_model.h"

const char *test_data_path(const char *rel) {
  static char buf[4096];
  const char *root = getenv("AURAL_TEST_DATA");
  snprintf(buf, sizeof buf, "%s/%s", root ? root : "tests/data", rel);
  return buf;
}

void assert_contains(const char *text, const char *parts) {
  char *alts = strdup(parts);
  assert_non_null(alts);
  char *save = NULL;
  for (char *p = strtok_r(alts, "|", &save); p != NULL;
       p = strtok_r(NULL, "|", &save)) {
    if (strcasestr(text, p) != NULL) {
      free(alts);
      return;
    }
  }
  free(alts);
  fail_msg("\"%s\" does not mention \"%s\"", text, parts);
}

char *test_tmpdir(void) {
  char *dir = strdup("/tmp/aural-test-XXXXXX");
  assert_non_null(dir);
  assert_non_null(mkdtemp(dir));
  return dir;
}

void test_rmtree(const char *dir) {
  char *cmd;
  assert_true(asprintf(&cmd, "rm -rf '%s'", dir) > 0);
  assert_int_equal(system(cmd), 0);
  free(cmd);
}

const char *test_join(const char *dir, const char *name) {
  static char buf[4096];
  snprintf(buf, sizeof buf, "%s/%s", dir, name);
  return buf;
}

void test_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

char *test_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n >= 0);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  *len = (size_t)n;
  return buf;
}

char *test_loud_model(size_t *len) {
  char *bytes = test_read_file(
      test_data_path("encoder/prenorm_gelu_rope.safetensors"), len);
  /* The config is a JSON string in the header's JSON: its quotes are
   * escaped. */
  const char *from = "input_scale\\\":32768.0",
             *to = "input_scale\\\":1e300  ";
  size_t at = 0, k = strlen(from);
  while (at + k <= *len && memcmp(bytes + at, from, k) != 0) at++;
  assert_true(at + k <= *len);
  memcpy(bytes + at, to, k);
  return bytes;
}

float test_frand(void) {
  static uint32_t rng = 2463534242u;
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return (float)((double)rng / 4294967296.0 * 2.0 - 1.0);
}

struct aural_model *test_tiny_ctc_model(int vocab_size) {
  synth_spec s;
  synth_spec_base(&s);
  s.d_model = 8;
  s.n_heads = 1;
  s.n_layers = 1;
  s.d_ff = 8;
  s.window = 4;
  s.vocab_size = vocab_size;
  size_t n;
  unsigned char *bytes = synth_model(&s, &n);
  assert_non_null(bytes);
  aural_model *m;
  aural_err err;
  int rc = aural_model_load_buffer(bytes, n, "tiny", NULL, &m, &err);
  free(bytes);
  if (rc < 0) fail_msg("%s", err.msg);
  return m;
}

void test_select_from_env(void) {
  const char *pattern = getenv("AURAL_TEST_ONLY");
  if (pattern != NULL && *pattern != '\0') cmocka_set_test_filter(pattern);
}

extern size_t __sanitizer_get_current_allocated_bytes(void)
    __attribute__((weak));

size_t test_allocated_bytes(void) {
  if (__sanitizer_get_current_allocated_bytes != NULL)
    return __sanitizer_get_current_allocated_bytes();
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}
