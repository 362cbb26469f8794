/*
 * The capture source's handoff between PortAudio's thread and the loop
 * (daemon/mic.c) against a fake PortAudio whose callbacks go on while the
 * device closes: the device lost with callbacks still coming (they used to
 * read the stream pointer the loop had just cleared), and a shutdown whose
 * device takes longer to close than the daemon waits (the source used to be
 * freed under the running callback). Run under ASan and TSan as well.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "server_fixture.h"
#include "fake_portaudio.h"

static int setup(void **state) {
  fixture *f = server_fixture_new(4, true);
  atomic_store(&fake_pa_active, 1);
  atomic_store(&fake_pa_hold, 0);
  atomic_store(&fake_pa_open_fails, 0);
  atomic_store(&fake_pa_start_fails, 0);
  *state = f;
  return 0;
}

/* Runs the loop for about ms milliseconds. */
static void spin(fixture *f, int ms) {
  for (int i = 0; i < ms; i++) {
    uv_run(&f->loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
}

static void wait_callbacks(long n) {
  long until = atomic_load(&fake_pa_callbacks) + n;
  for (int i = 0; i < 5000 && atomic_load(&fake_pa_callbacks) < until; i++)
    usleep(1000);
  assert_true(atomic_load(&fake_pa_callbacks) >= until);
}

static int teardown(void **state) {
  server_fixture_free(*state);
  /* The closer thread lets go of the source once the device has closed. */
  atomic_store(&fake_pa_hold, 0);
  for (int i = 0; i < 10000 && mic_closers_running() > 0; i++) usleep(1000);
  assert_int_equal(mic_closers_running(), 0);
  assert_int_equal(atomic_load(&fake_pa_open_streams), 0);
  return 0;
}

/* The device stops while its callbacks go on (until the test lets it
 * close): the stream ends (device_lost) and is freed meanwhile, and the
 * callbacks, each with an overrun to count, touch only the source. */
static void test_device_lost_while_callbacks_go_on(void **state) {
  fixture *f = *state;
  char why[640] = "";
  if (mic_start(&f->srv, NULL, why, sizeof why) < 0) fail_msg("%s", why);
  wait_callbacks(20);
  spin(f, 20);
  assert_int_equal(f->srv.n_streams, 1);
  atomic_store(&fake_pa_hold, 1);
  atomic_store(&fake_pa_active, 0);
  mic_poll(&f->srv); /* ends the stream; the device closes on a thread */
  for (int i = 0; i < 2000 && f->srv.n_streams > 0; i++) spin(f, 1);
  assert_int_equal(f->srv.n_streams, 0);
  wait_callbacks(50); /* still coming, with nobody's stream to count in */
  atomic_store(&fake_pa_hold, 0);
  mic_stop(&f->srv);
}

/* Shutdown with a device that does not close while the daemon waits for
 * it (0.5 s): the loop closes its handle and goes, and the callbacks that
 * keep coming neither signal the closed handle nor touch freed memory. */
static void test_shutdown_outlasts_a_slow_device(void **state) {
  fixture *f = *state;
  char why[640] = "";
  if (mic_start(&f->srv, NULL, why, sizeof why) < 0) fail_msg("%s", why);
  wait_callbacks(20);
  spin(f, 20);
  atomic_store(&fake_pa_hold, 1);
  mic_stop(&f->srv);
  spin(f, 50);
  wait_callbacks(50);
  atomic_store(&fake_pa_hold, 0); /* teardown waits for the closer */
}

/* Calls mic_poll, as the loop's tick does, and runs the loop, until the
 * server has n streams or ms milliseconds have passed. */
static void poll_until_streams(fixture *f, int n, int ms) {
  for (int i = 0; i < ms && f->srv.n_streams != n; i += 10) {
    mic_poll(&f->srv);
    spin(f, 10);
  }
}

/* A lost device is tried again until it opens (after 1 s, then 2, ...),
 * with PortAudio restarted for each try so that a device plugged back in
 * is listed; then a new stream "mic" captures from it. */
static void test_lost_device_is_tried_again(void **state) {
  fixture *f = *state;
  char why[640] = "";
  int up = atomic_load(&fake_pa_initialized); /* a hung device's, before */
  if (mic_start(&f->srv, NULL, why, sizeof why) < 0) fail_msg("%s", why);
  wait_callbacks(20);
  spin(f, 20);
  assert_int_equal(f->srv.n_streams, 1);
  uint32_t first_id = f->srv.streams->id;
  atomic_store(&fake_pa_open_fails, 1); /* unplugged */
  atomic_store(&fake_pa_active, 0);
  poll_until_streams(f, 0, 2000);
  assert_int_equal(f->srv.n_streams, 0);
  int inits = atomic_load(&fake_pa_inits);
  /* The first try fails (1 s after the loss), the next waits 2 s more. */
  poll_until_streams(f, 1, 2000);
  assert_int_equal(f->srv.n_streams, 0);
  assert_true(atomic_load(&fake_pa_inits) > inits);
  atomic_store(&fake_pa_open_fails, 0); /* plugged back in */
  atomic_store(&fake_pa_active, 1);
  poll_until_streams(f, 1, 5000);
  assert_int_equal(f->srv.n_streams, 1);
  assert_string_equal(f->srv.streams->name, "mic");
  assert_true(f->srv.streams->id != first_id);
  long before = atomic_load(&fake_pa_callbacks);
  wait_callbacks(20); /* capturing again */
  assert_true(atomic_load(&fake_pa_callbacks) >= before + 20);
  assert_int_equal(atomic_load(&fake_pa_initialized), up + 1);
  mic_stop(&f->srv);
  assert_int_equal(atomic_load(&fake_pa_initialized), up);
}

/* A device that opens but does not start: its stream ends at once
 * (device_lost), the source keeps nothing of it (it used to keep the
 * stream, which the loop frees, and end it again at shutdown), and the
 * device is tried again until it starts. */
static void test_device_that_does_not_start(void **state) {
  fixture *f = *state;
  char why[640] = "";
  atomic_store(&fake_pa_start_fails, 1);
  if (mic_start(&f->srv, NULL, why, sizeof why) < 0) fail_msg("%s", why);
  poll_until_streams(f, 0, 2000);
  assert_int_equal(f->srv.n_streams, 0);
  atomic_store(&fake_pa_start_fails, 0);
  poll_until_streams(f, 1, 5000);
  assert_int_equal(f->srv.n_streams, 1);
  wait_callbacks(20);
  mic_stop(&f->srv);
  spin(f, 50);
  assert_int_equal(f->srv.n_streams, 0);
}

/* Shutdown while a try of the lost device is under way: the try ends it
 * all (the device it opened closed, PortAudio terminated) when it is
 * done. */
static void test_shutdown_during_a_try(void **state) {
  fixture *f = *state;
  char why[640] = "";
  int up = atomic_load(&fake_pa_initialized);
  if (mic_start(&f->srv, NULL, why, sizeof why) < 0) fail_msg("%s", why);
  wait_callbacks(20);
  spin(f, 20);
  atomic_store(&fake_pa_active, 0);
  poll_until_streams(f, 0, 2000);
  atomic_store(&fake_pa_active, 1);
  int inits = atomic_load(&fake_pa_inits);
  for (int i = 0; i < 3000 && atomic_load(&fake_pa_inits) == inits; i++) {
    mic_poll(&f->srv); /* the try starts on the thread pool */
    usleep(1000);
  }
  assert_true(atomic_load(&fake_pa_inits) > inits);
  mic_stop(&f->srv); /* before the loop has seen the try's end */
  spin(f, 50);
  assert_int_equal(f->srv.n_streams, 0);
  assert_int_equal(atomic_load(&fake_pa_initialized), up);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_device_lost_while_callbacks_go_on,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_shutdown_outlasts_a_slow_device,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_lost_device_is_tried_again,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_shutdown_during_a_try, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_device_that_does_not_start,
                                      setup, teardown),
  };
  aurald_log_level = LOG_ERROR;
  return cmocka_run_group_tests(tests, NULL, NULL);
}
