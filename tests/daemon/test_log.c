/*
 * aurald's log level across threads: every thread that logs reads it (the
 * compute workers among them), and the loop thread writes it at start and
 * at each reload, without a lock. The test is for the ThreadSanitizer
 * build (tools/test.sh), which reports the race when the level is a plain
 * variable and then fails the test; elsewhere it shows that lines below
 * the level are dropped on every thread.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "daemon.h"

enum { ROUNDS = 2000 };

static void *log_debug_lines(void *arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) log_debug("worker line %d", i);
  return NULL;
}

static void test_level_set_while_workers_log(void **state) {
  (void)state;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, log_debug_lines, NULL), 0);
  for (int i = 0; i < ROUNDS; i++)
    aurald_log_level = i % 2 ? LOG_ERROR : LOG_WARN; /* as a reload does */
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(aurald_log_level, LOG_ERROR);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_level_set_while_workers_log),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
