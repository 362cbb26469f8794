/*
 * A stand-in for PortAudio with one input device, for testing the
 * daemon's capture source (daemon/mic.c) without a sound card. Started, a
 * stream calls its callback from its own thread every millisecond with 160
 * samples, each call flagged paInputOverflow, so that every callback takes
 * the path that counts an overrun. While fake_pa_hold is set,
 * Pa_AbortStream lets the callbacks go on (as a slow device does) until
 * the test clears it. Pa_OpenStream and Pa_StartStream fail (device
 * unavailable) while fake_pa_open_fails or fake_pa_start_fails is set, as
 * an unplugged device does.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <portaudio.h>

#include "fake_portaudio.h"

_Atomic int fake_pa_hold;
_Atomic int fake_pa_active = 1;
_Atomic long fake_pa_callbacks;
_Atomic int fake_pa_open_streams;
_Atomic int fake_pa_open_fails;
_Atomic int fake_pa_start_fails;
_Atomic int fake_pa_initialized;
_Atomic int fake_pa_inits;

typedef struct fake_stream {
  PaStreamCallback *cb;
  void *user;
  pthread_t thread;
  bool started;
  _Atomic bool stop;
} fake_stream;

static fake_stream the_stream;

static const PaDeviceInfo device = {
    .structVersion = 2,
    .name = "fake input",
    .maxInputChannels = 1,
    .defaultLowInputLatency = 0.01,
    .defaultSampleRate = 16000.0,
};

PaError Pa_Initialize(void) {
  atomic_fetch_add(&fake_pa_inits, 1);
  atomic_fetch_add(&fake_pa_initialized, 1);
  return paNoError;
}
PaError Pa_Terminate(void) {
  if (atomic_load(&fake_pa_initialized) <= 0) return paNotInitialized;
  atomic_fetch_sub(&fake_pa_initialized, 1);
  return paNoError;
}
PaDeviceIndex Pa_GetDeviceCount(void) { return 1; }
PaDeviceIndex Pa_GetDefaultInputDevice(void) { return 0; }
const PaDeviceInfo *Pa_GetDeviceInfo(PaDeviceIndex d) {
  return d == 0 ? &device : NULL;
}
const char *Pa_GetErrorText(PaError e) {
  return e == paNoError ? "no error" : "fake error";
}

PaError Pa_OpenStream(PaStream **out, const PaStreamParameters *in,
                      const PaStreamParameters *out_params, double rate,
                      unsigned long frames, PaStreamFlags flags,
                      PaStreamCallback *cb, void *user) {
  (void)in, (void)out_params, (void)rate, (void)frames, (void)flags;
  if (atomic_load(&fake_pa_open_fails)) return paDeviceUnavailable;
  memset(&the_stream, 0, sizeof the_stream);
  the_stream.cb = cb;
  the_stream.user = user;
  atomic_fetch_add(&fake_pa_open_streams, 1);
  *out = &the_stream;
  return paNoError;
}

static void *capture_main(void *arg) {
  fake_stream *st = arg;
  float pcm[160] = {0};
  while (!atomic_load(&st->stop)) {
    st->cb(pcm, NULL, 160, NULL, paInputOverflow, st->user);
    atomic_fetch_add(&fake_pa_callbacks, 1);
    usleep(1000);
  }
  return NULL;
}

PaError Pa_StartStream(PaStream *s) {
  fake_stream *st = s;
  if (atomic_load(&fake_pa_start_fails)) return paDeviceUnavailable;
  if (pthread_create(&st->thread, NULL, capture_main, st) != 0)
    return paInternalError;
  st->started = true;
  return paNoError;
}

PaError Pa_IsStreamActive(PaStream *s) {
  (void)s;
  return atomic_load(&fake_pa_active);
}

PaError Pa_AbortStream(PaStream *s) {
  fake_stream *st = s;
  while (atomic_load(&fake_pa_hold)) usleep(1000);
  atomic_store(&st->stop, true);
  if (st->started) pthread_join(st->thread, NULL);
  st->started = false;
  return paNoError;
}

PaError Pa_CloseStream(PaStream *s) {
  (void)s;
  atomic_fetch_sub(&fake_pa_open_streams, 1);
  return paNoError;
}
