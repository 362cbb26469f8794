/* Helpers shared by the test binaries. */
#ifndef AURAL_TESTS_HELPERS_H
#define AURAL_TESTS_HELPERS_H

#include <stddef.h>

/* $AURAL_TEST_DATA/rel, in a static buffer (tests are single-threaded). */
const char *test_data_path(const char *rel);

/* Uniform in [-1, 1): a xorshift generator with a fixed seed, so each
 * test program draws the same sequence every run. */
float test_frand(void);

/* A fresh temporary directory (removed with everything in it by
 * test_rmtree); the returned string is malloc'ed. */
char *test_tmpdir(void);
void test_rmtree(const char *dir);

/* dir/name in a static buffer. */
const char *test_join(const char *dir, const char *name);

/* Fails the test unless text contains one of the '|'-separated
 * alternatives in parts, compared without regard to case. */
void assert_contains(const char *text, const char *parts);

/* Bytes this process has allocated now: the sanitizer's own count under
 * ASan, else glibc's (mallinfo2). */
size_t test_allocated_bytes(void);

/* Heap allocations (malloc, calloc, realloc, the aligned ones) this
 * thread has made since it started, whoever made them: compare two
 * readings around a call that should allocate nothing
 * (tests/alloc_calls.c). */
unsigned long test_alloc_calls(void);

/* Runs only the tests whose names match the cmocka pattern in
 * $AURAL_TEST_ONLY, when it is set (the thread tests alone, under
 * ThreadSanitizer). Call before cmocka_run_group_tests. */
void test_select_from_env(void);

/* Writes len bytes to path; fails the test on error. */
void test_write_file(const char *path, const void *data, size_t len);

/* The whole file at path (free it), with a NUL after its *len bytes;
 * fails the test on error. */
char *test_read_file(const char *path, size_t *len);

/* The bytes of test model prenorm_gelu_rope (free them) with its
 * input_scale 1e300: finite everywhere, but any sound overflows its
 * features, while digital silence stays finite. */
char *test_loud_model(size_t *len);

/* A one-layer model of random weights, d_model 8, with a CTC head of
 * vocab_size tokens (t0, the blank, then t1, t2, ...): enough for the
 * words resources and decoder. Fails the test on error; free it with
 * aural_model_free. */
struct aural_model;
struct aural_model *test_tiny_ctc_model(int vocab_size);

#endif
