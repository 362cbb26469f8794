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

/* Writes len bytes to path; fails the test on error. */
void test_write_file(const char *path, const void *data, size_t len);

#endif
