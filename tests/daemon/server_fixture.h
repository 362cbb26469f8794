/*
 * A real aurald server on its own loop, without a socket, for the
 * daemon's unit tests (tests/daemon/): the committed tiny model, one
 * worker when asked, limits small enough for a test.
 */
#ifndef AURAL_TEST_SERVER_FIXTURE_H
#define AURAL_TEST_SERVER_FIXTURE_H

#include <stdbool.h>

#include "daemon.h"

typedef struct fixture {
  uv_loop_t loop;
  aurald_options opt;
  server srv;
} fixture;

/* A server taking at most max_streams streams (with one worker thread
 * when workers is true); fails the test if it cannot start. */
fixture *server_fixture_new(int max_streams, bool workers);

/* Closes the server's handles, runs the loop dry, and checks that the
 * server and the loop close cleanly. */
void server_fixture_free(fixture *f);

#endif
