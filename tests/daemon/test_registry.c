/*
 * The stream registry (daemon/stream.c) of a real server: stream ids
 * through the wrap of their 32-bit count, which a server meets after
 * 2^32 - 1 streams. Run under ASan as well.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "server_fixture.h"

static int setup(void **state) {
  *state = server_fixture_new(8, false);
  return 0;
}

static int teardown(void **state) {
  server_fixture_free(*state);
  return 0;
}

static stream *new_stream(fixture *f, const char *name) {
  char why[256] = "";
  stream *s = stream_create(&f->srv, name, SRC_CLIENT, 16000, 1, NULL, -1, 0,
                            why, sizeof why);
  if (s == NULL) fail_msg("stream_create: %s", why);
  return s;
}

/* Ids past the wrap skip 0 and those of streams still live: a stream
 * from the server's start keeps id 1, and the first ids after the wrap
 * would have been 0 and 1. */
static void test_stream_ids_wrap_past_live_streams(void **state) {
  fixture *f = *state;
  stream *first = new_stream(f, "from-the-start");
  assert_int_equal(first->id, 1);
  f->srv.next_stream_id = UINT32_MAX - 1;
  stream *last = new_stream(f, "last-before-the-wrap");
  stream *after = new_stream(f, "after-the-wrap");
  stream *next = new_stream(f, "next");
  assert_int_equal(last->id, UINT32_MAX);
  assert_int_equal(after->id, 2);
  assert_int_equal(next->id, 3);
  assert_ptr_equal(stream_find_id(&f->srv, 1), first);
  assert_ptr_equal(stream_find_id(&f->srv, 2), after);
  /* An id is free again once its stream has gone. */
  stream_unlink(&f->srv, after);
  stream_destroy(after);
  f->srv.next_stream_id = 1;
  stream *again = new_stream(f, "again");
  assert_int_equal(again->id, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_stream_ids_wrap_past_live_streams,
                                      setup, teardown),
  };
  aurald_log_level = LOG_ERROR;
  return cmocka_run_group_tests(tests, NULL, NULL);
}
