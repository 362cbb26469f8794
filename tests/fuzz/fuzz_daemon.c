/*
 * libFuzzer target: aurald's per-connection input handling fed arbitrary
 * bytes. One server (the committed tiny model, one worker thread) lives for
 * the whole run; each input is written into one end of a socketpair whose
 * other end the server serves as a client connection (conn_adopt), then
 * the writer shuts down. The loop runs until the connection and every
 * stream it opened are gone, reading and discarding what the server
 * sends. Inputs can therefore reach every request handler, the audio path
 * into the workers, the fan-out and the teardown of a client that leaves
 * in the middle of anything. ASan, UBSan and LeakSanitizer watch.
 *
 * The model comes from $AURAL_FUZZ_MODEL, else
 * tests/data/encoder/tiny.safetensors relative to the working directory
 * (tools/fuzz.sh runs from the repository's top).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../daemon/daemon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static server srv;
static aurald_options opt;
static uv_loop_t loop;

static void setup(void) {
  const char *model = getenv("AURAL_FUZZ_MODEL");
  opt = (aurald_options){
      .model_path = model ? model : "tests/data/encoder/tiny.safetensors",
      .socket_path = "(fuzz)",
      .chunk_ms = 500,
      .n_threads = 1,
      .max_request_bytes = 1u << 20,
      .max_message_bytes = 64u << 20,
      .max_clients = 16,
      .max_streams = 64,
      .sub_hard_bytes = 16u << 20,
      .sub_soft_bytes = 4u << 20,
      .sub_soft_s = 10.0,
      .hello_timeout_s = 10.0,
  };
  aurald_log_level = -1; /* quiet: inputs provoke errors on purpose */
  char why[640];
  if (uv_loop_init(&loop) < 0 ||
      server_setup(&srv, &opt, &loop, why, sizeof why) < 0 ||
      workers_start(&srv, 1, why, sizeof why) < 0) {
    fprintf(stderr, "fuzz_daemon: cannot start the server: %s\n", why);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int ready;
  if (!ready) {
    setup();
    ready = 1;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) abort();
  fcntl(sv[1], F_SETFL, fcntl(sv[1], F_GETFL) | O_NONBLOCK);
  if (conn_adopt(&srv, sv[0]) < 0) abort();

  size_t off = 0;
  int shut = 0, gone = 0;
  char sink[65536];
  for (long iter = 0;; iter++) {
    /* A half-closed client is served until it is owed nothing, and a
     * subscription is owed what comes for ever: once the server has read
     * all of the input and computes nothing for it, the client goes,
     * which the server finds out as its tick does (conn_check_limits). */
    if (shut && !gone && srv.conns != NULL && srv.conns->eof &&
        srv.n_streams == 0) {
      close(sv[1]);
      gone = 1;
      srv.conns->eof_polled_at = 0; /* looked at on the next check */
    }
    if (gone) {
      conn_check_limits(&srv);
      int active = uv_run(&loop, UV_RUN_NOWAIT);
      (void)active;
      if (srv.n_conns == 0 && srv.n_streams == 0) return 0;
      usleep(1000);
      continue;
    }
    if (off < size) {
      ssize_t k = write(sv[1], data + off, size - off);
      if (k > 0) off += (size_t)k;
      else if (k < 0 && errno != EAGAIN) off = size; /* server closed */
    } else if (!shut) {
      shutdown(sv[1], SHUT_WR);
      shut = 1;
    }
    while (read(sv[1], sink, sizeof sink) > 0) {
    }
    int active = uv_run(&loop, UV_RUN_NOWAIT);
    (void)active;
    if (shut && srv.n_conns == 0 && srv.n_streams == 0) break;
    if (iter > 2000000) {
      fprintf(stderr, "fuzz_daemon: the connection never finished\n");
      abort();
    }
    if (iter > 1000) usleep(50); /* the worker is computing */
  }
  close(sv[1]);
  return 0;
}
