/* See server_fixture.h. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "server_fixture.h"

fixture *server_fixture_new(int max_streams, bool workers) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  const char *data = getenv("AURAL_TEST_DATA");
  static char model[512];
  snprintf(model, sizeof model, "%s/encoder/tiny.safetensors",
           data ? data : "tests/data");
  f->opt = (aurald_options){
      .model_path = model, .socket_path = "(test)", .chunk_ms = 500,
      .n_threads = 1, .max_request_bytes = 1u << 20,
      .max_message_bytes = 64u << 20, .max_clients = 4,
      .max_streams = max_streams, .sub_hard_bytes = 16u << 20,
      .sub_soft_bytes = 4u << 20, .sub_soft_s = 10.0,
      .hello_timeout_s = 10.0};
  char why[640] = "";
  assert_int_equal(uv_loop_init(&f->loop), 0);
  if (server_setup(&f->srv, &f->opt, &f->loop, why, sizeof why) < 0 ||
      (workers && workers_start(&f->srv, 1, why, sizeof why) < 0))
    fail_msg("cannot start the server: %s", why);
  return f;
}

void server_fixture_free(fixture *f) {
  server_close_handles(&f->srv);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  assert_int_equal(server_teardown(&f->srv), 0); /* destroys the streams */
  assert_int_equal(uv_loop_close(&f->loop), 0);
  free(f);
}
