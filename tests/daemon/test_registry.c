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

#include "daemon.h"

typedef struct fixture {
  uv_loop_t loop;
  aurald_options opt;
  server srv;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  const char *data = getenv("AURAL_TEST_DATA");
  static char model[512];
  snprintf(model, sizeof model, "%s/encoder/tiny.safetensors",
           data ? data : "tests/data");
  f->opt = (aurald_options){
      .model_path = model, .socket_path = "(test)", .chunk_ms = 500,
      .n_threads = 1, .max_request_bytes = 1u << 20,
      .max_message_bytes = 64u << 20, .max_clients = 4, .max_streams = 8,
      .sub_hard_bytes = 16u << 20, .sub_soft_bytes = 4u << 20,
      .sub_soft_s = 10.0, .hello_timeout_s = 10.0};
  char why[640] = "";
  assert_int_equal(uv_loop_init(&f->loop), 0);
  if (server_setup(&f->srv, &f->opt, &f->loop, why, sizeof why) < 0)
    fail_msg("cannot set the server up: %s", why);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  server_close_handles(&f->srv);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(server_teardown(&f->srv), 0); /* destroys the streams */
  assert_int_equal(uv_loop_close(&f->loop), 0);
  free(f);
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
