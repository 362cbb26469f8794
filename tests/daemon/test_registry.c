/*
 * The registries of a real server: stream ids (daemon/stream.c) and
 * connection ids (daemon/conn.c) through the wrap of their 32-bit counts,
 * which a server meets after 2^32 - 1 streams or connections, and the
 * count of streams created that /metrics reports. Run under ASan as well.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* /metrics counts streams created in 64 bits: it printed the 32-bit id
 * count, which went back to 0 at the wrap. */
static void test_streams_created_counts_past_the_wrap(void **state) {
  fixture *f = *state;
  f->srv.next_stream_id = UINT32_MAX - 1;
  f->srv.streams_created = UINT32_MAX - 1;
  new_stream(f, "last-before-the-wrap");
  new_stream(f, "after-the-wrap");
  char *text = NULL;
  assert_true(metrics_render(&f->srv, &text) > 0);
  assert_non_null(strstr(text, "\naurald_streams_created_total 4294967296\n"));
  free(text);
}

/* A connection of the server on one end of a socket pair (the server
 * holds the other), as a client that has just connected. */
static conn *new_conn(fixture *f, int *client_fd) {
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  assert_int_equal(conn_adopt(&f->srv, sv[0]), 0);
  *client_fd = sv[1];
  return f->srv.conns; /* the newest is first */
}

/* Connection ids past the wrap skip 0 and those of live connections, as
 * stream ids do: WELCOME gives the id, and STATS lists subscriptions
 * under it. */
static void test_conn_ids_wrap_past_live_conns(void **state) {
  fixture *f = *state;
  int fd[4];
  conn *first = new_conn(f, &fd[0]);
  assert_int_equal(first->id, 1);
  f->srv.next_conn_id = UINT32_MAX - 1;
  assert_int_equal(new_conn(f, &fd[1])->id, UINT32_MAX);
  assert_int_equal(new_conn(f, &fd[2])->id, 2);
  assert_int_equal(new_conn(f, &fd[3])->id, 3);
  for (int i = 0; i < 4; i++) close(fd[i]);
  uv_run(&f->loop, UV_RUN_NOWAIT); /* the server sees them close */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_stream_ids_wrap_past_live_streams,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_streams_created_counts_past_the_wrap,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_conn_ids_wrap_past_live_conns,
                                      setup, teardown),
  };
  aurald_log_level = LOG_ERROR;
  return cmocka_run_group_tests(tests, NULL, NULL);
}
