/*
 * The microphone source, through PortAudio.
 *
 * The capture callback runs on PortAudio's thread and does only this:
 * copy the samples into a power-of-two single-producer single-consumer
 * ring, count an overrun when the ring is full, and call uv_async_send().
 * No locks, no allocation, no I/O. It touches the mic_source alone, never
 * the stream (which the loop ends and frees on its own schedule): overruns
 * are counted in the source and moved to the stream by the loop.
 *
 * Handoff at the end. The callback may still run while the device closes
 * (on a closer thread, since a hung device can block that for ever), so:
 * the loop sets `quiet` and waits out any callback in flight before it
 * closes the async handle, after which a callback touches nothing but the
 * source's atomics; and the source is freed by whichever of the loop (its
 * async handle closed) and the closer thread (the device closed, so no
 * callback can come) lets go of it last. The loop drains the ring on the async
 * (uv_async_send coalesces, so it drains everything each time) into the
 * stream. A device that stops delivering (unplugged, its server gone) is
 * noticed by mic_poll() from the loop's tick and ends the stream with
 * reason device_lost.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <portaudio.h>

#include "daemon.h"

#define MIC_STALL_S 2.0 /* no callback for this long: the device is gone */

struct mic_source {
  server *srv;
  PaStream *pa;
  PaStream *pa_closing;     /* the stream a closer thread closes */
  stream *s;
  float *ring;              /* (MIC_RING_FRAMES) mono samples */
  _Atomic size_t head;      /* written by the callback */
  _Atomic size_t tail;      /* written by the loop */
  _Atomic uint64_t n_callbacks;
  _Atomic uint64_t overruns; /* counted by the callback, moved by the loop */
  _Atomic int in_callback;  /* callbacks running now (0 or 1) */
  _Atomic bool quiet;       /* the async handle is closing: do not signal */
  _Atomic int refs;         /* the loop's, and a closer thread's */
  uint64_t seen_callbacks;
  double last_progress;
  uv_async_t async;
  bool async_open;
  bool started;             /* Pa_StartStream done */
  float *drain;             /* (MIC_RING_FRAMES) loop-side copy */
};

static int on_audio(const void *input, void *output, unsigned long n,
                    const PaStreamCallbackTimeInfo *time,
                    PaStreamCallbackFlags flags, void *user) {
  struct mic_source *m = user;
  (void)output;
  (void)time;
  atomic_fetch_add(&m->in_callback, 1);
  if (atomic_load(&m->quiet)) {
    atomic_fetch_sub(&m->in_callback, 1);
    return paContinue;
  }
  if (flags & paInputOverflow) atomic_fetch_add(&m->overruns, 1);
  if (input != NULL) {
    const float *in = input;
    size_t head = atomic_load_explicit(&m->head, memory_order_relaxed);
    size_t tail = atomic_load_explicit(&m->tail, memory_order_acquire);
    if (MIC_RING_FRAMES - (head - tail) < n) {
      atomic_fetch_add(&m->overruns, 1);
    } else {
      for (unsigned long i = 0; i < n; i++)
        m->ring[(head + i) & (MIC_RING_FRAMES - 1)] = in[i];
      atomic_store_explicit(&m->head, head + n, memory_order_release);
    }
  }
  atomic_fetch_add_explicit(&m->n_callbacks, 1, memory_order_relaxed);
  uv_async_send(&m->async);
  atomic_fetch_sub(&m->in_callback, 1);
  return paContinue;
}

static void on_mic_async(uv_async_t *a) {
  struct mic_source *m = a->data;
  uint64_t overruns = atomic_exchange(&m->overruns, 0);
  if (m->s == NULL) return;
  m->s->loop.overruns += overruns;
  size_t tail = atomic_load_explicit(&m->tail, memory_order_relaxed);
  size_t head = atomic_load_explicit(&m->head, memory_order_acquire);
  size_t n = head - tail;
  if (n == 0) return;
  for (size_t i = 0; i < n; i++)
    m->drain[i] = m->ring[(tail + i) & (MIC_RING_FRAMES - 1)];
  atomic_store_explicit(&m->tail, head, memory_order_release);
  if (stream_push(m->s, m->drain, n, aurald_now_us()) < n)
    m->s->loop.overruns++; /* the workers fell 2 s behind */
}

static void source_unref(struct mic_source *m) {
  if (atomic_fetch_sub(&m->refs, 1) != 1) return;
  free(m->ring);
  free(m->drain);
  free(m);
}

/* Finds an input device by index or by a substring of its name. */
static int find_device(const char *want, char *why, size_t why_len) {
  if (want == NULL) {
    PaDeviceIndex d = Pa_GetDefaultInputDevice();
    if (d == paNoDevice) snprintf(why, why_len, "no default input device");
    return d;
  }
  char *end;
  long idx = strtol(want, &end, 10);
  int n = Pa_GetDeviceCount();
  if (*want != '\0' && *end == '\0') {
    if (idx < 0 || idx >= n || Pa_GetDeviceInfo((int)idx)->maxInputChannels < 1) {
      snprintf(why, why_len, "no input device with index %ld (see --list-devices)",
               idx);
      return -1;
    }
    return (int)idx;
  }
  for (int i = 0; i < n; i++) {
    const PaDeviceInfo *info = Pa_GetDeviceInfo(i);
    if (info->maxInputChannels > 0 && strcmp(info->name, want) == 0) return i;
  }
  for (int i = 0; i < n; i++) {
    const PaDeviceInfo *info = Pa_GetDeviceInfo(i);
    if (info->maxInputChannels > 0 && strstr(info->name, want) != NULL)
      return i;
  }
  snprintf(why, why_len, "no input device named \"%s\" (see --list-devices)",
           want);
  return -1;
}

int mic_list_devices(void) {
  PaError e = Pa_Initialize();
  if (e != paNoError) {
    fprintf(stderr, "aurald: PortAudio: %s\n", Pa_GetErrorText(e));
    return 1;
  }
  int n = Pa_GetDeviceCount();
  PaDeviceIndex def = Pa_GetDefaultInputDevice();
  printf("Input devices (use --mic=INDEX or --mic=NAME):\n");
  int shown = 0;
  for (int i = 0; i < n; i++) {
    const PaDeviceInfo *info = Pa_GetDeviceInfo(i);
    if (info->maxInputChannels < 1) continue;
    printf("  %3d  %-40s %2d ch  %6.0f Hz%s\n", i, info->name,
           info->maxInputChannels, info->defaultSampleRate,
           i == def ? "  (default)" : "");
    shown++;
  }
  if (shown == 0) printf("  (none)\n");
  Pa_Terminate();
  return 0;
}

/* The microphone stream's release hook: capture starts with it. */
static int on_release(stream *s) { return mic_begin(s->srv); }

int mic_start(server *srv, const char *device, char *why, size_t why_len) {
  PaError e = Pa_Initialize();
  if (e != paNoError) {
    snprintf(why, why_len, "PortAudio: %s", Pa_GetErrorText(e));
    return -1;
  }
  struct mic_source *m = calloc(1, sizeof *m);
  if (m == NULL) goto oom;
  srv->mic = m;
  m->srv = srv;
  atomic_store(&m->refs, 1);
  m->ring = malloc(MIC_RING_FRAMES * sizeof(float));
  m->drain = malloc(MIC_RING_FRAMES * sizeof(float));
  if (m->ring == NULL || m->drain == NULL) goto oom;
  int dev = find_device(device, why, why_len);
  if (dev < 0) goto fail;
  const PaDeviceInfo *info = Pa_GetDeviceInfo(dev);
  double rate = info->defaultSampleRate;
  m->s = stream_create(srv, "mic", SRC_MIC, rate, 1, NULL, -1, 0, why,
                       why_len);
  if (m->s == NULL) goto fail;
  m->s->loop.on_release = on_release;
  uv_async_init(srv->loop, &m->async, on_mic_async);
  m->async.data = m;
  m->async_open = true;

  PaStreamParameters in = {
      .device = dev,
      .channelCount = 1,
      .sampleFormat = paFloat32,
      .suggestedLatency = info->defaultLowInputLatency,
  };
  e = Pa_OpenStream(&m->pa, &in, NULL, rate, (unsigned long)(rate / 100),
                    paClipOff, on_audio, m);
  if (e != paNoError) {
    snprintf(why, why_len, "cannot capture from \"%s\" at %.0f Hz: %s",
             info->name, rate, Pa_GetErrorText(e));
    if (m->pa) Pa_CloseStream(m->pa);
    m->pa = NULL;
    goto fail;
  }
  log_info("stream %u \"mic\": device \"%s\" (%d) at %.0f Hz", m->s->id,
           info->name, dev, rate);
  stream_start(m->s);
  return 0;
oom:
  snprintf(why, why_len, "out of memory for the microphone");
fail:
  mic_stop(srv);
  return -1;
}

int mic_begin(server *srv) {
  struct mic_source *m = srv->mic;
  if (m == NULL || m->pa == NULL) return -1;
  PaError e = Pa_StartStream(m->pa);
  if (e != paNoError) {
    log_error("stream %u \"mic\": cannot start capturing: %s", m->s->id,
              Pa_GetErrorText(e));
    return -1;
  }
  m->started = true;
  m->last_progress = aurald_mono_s();
  log_info("stream %u \"mic\": capturing", m->s->id);
  return 0;
}

/* Closing a stream joins PortAudio's capture thread, which a hung device
 * (or a driver blocked in read) may never release: it is done on a
 * detached thread so the loop never waits for it. */
static _Atomic int closers_running;

static void *closer_main(void *arg) {
  struct mic_source *m = arg;
  Pa_AbortStream(m->pa_closing);
  Pa_CloseStream(m->pa_closing);
  source_unref(m); /* no callback can come now */
  atomic_fetch_sub(&closers_running, 1);
  return NULL;
}

int mic_closers_running(void) { return atomic_load(&closers_running); }

static void close_device(struct mic_source *m) {
  m->pa_closing = m->pa;
  m->pa = NULL;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  atomic_fetch_add(&closers_running, 1);
  atomic_fetch_add(&m->refs, 1);
  if (pthread_create(&t, &attr, closer_main, m) != 0) {
    atomic_fetch_sub(&closers_running, 1);
    atomic_fetch_sub(&m->refs, 1);
    Pa_AbortStream(m->pa_closing);
    Pa_CloseStream(m->pa_closing);
  }
  pthread_attr_destroy(&attr);
}

/* Ends the stream when the device has stopped: PortAudio reports the
 * stream inactive, or no callback came for MIC_STALL_S. */
void mic_poll(server *srv) {
  struct mic_source *m = srv->mic;
  if (m == NULL || m->pa == NULL || !m->started) return;
  double now = aurald_mono_s();
  uint64_t n = atomic_load(&m->n_callbacks);
  if (n != m->seen_callbacks) {
    m->seen_callbacks = n;
    m->last_progress = now;
  }
  int active = Pa_IsStreamActive(m->pa);
  if (active == 1 && now - m->last_progress < MIC_STALL_S) return;
  char msg[160];
  if (active != 1)
    snprintf(msg, sizeof msg, "the capture device stopped (%s)",
             active < 0 ? Pa_GetErrorText(active) : "stream inactive");
  else
    snprintf(msg, sizeof msg, "no audio from the capture device for %.1f s",
             now - m->last_progress);
  log_warn("stream %u \"mic\": %s; ending it", m->s->id, msg);
  close_device(m);
  on_mic_async(&m->async); /* what was captured before still counts */
  stream_end_input(m->s, END_DEVICE_LOST, msg);
  m->s = NULL; /* the stream goes its way; the loop frees it */
}

static void on_async_closed(uv_handle_t *h) {
  source_unref(h->data);
}

void mic_stop(server *srv) {
  struct mic_source *m = srv->mic;
  if (m == NULL) return;
  srv->mic = NULL;
  if (m->pa != NULL) {
    close_device(m);
    on_mic_async(&m->async);
  }
  if (m->s != NULL) stream_end_input(m->s, END_SHUTDOWN, "");
  m->s = NULL;
  /* Give a hung device a moment; past it, leave PortAudio to the exit. */
  for (int i = 0; i < 50 && atomic_load(&closers_running) > 0; i++)
    usleep(10000);
  if (atomic_load(&closers_running) == 0) Pa_Terminate();
  else log_warn("the capture device did not close; not waiting for it");
  if (m->async_open) {
    /* No callback signals the handle once it starts closing. */
    atomic_store(&m->quiet, true);
    while (atomic_load(&m->in_callback) > 0) sched_yield();
    uv_close((uv_handle_t *)&m->async, on_async_closed);
  } else {
    source_unref(m);
  }
}
