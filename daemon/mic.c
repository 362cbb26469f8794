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
 *
 * A lost device is tried again (a microphone plugged back in, a sound
 * server restarted): after 1 s, then at twice the wait each time up to
 * MIC_RETRY_MAX_S, once its old stream has closed. PortAudio lists
 * devices when it starts, so a try restarts it, on libuv's thread pool
 * (probing ALSA's devices can take a few hundred milliseconds); when the
 * device opens, the loop starts a new stream "mic", which subscriptions by
 * name receive as they would any new stream of theirs (PROTOCOL.md §4.6).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <portaudio.h>

#include "daemon.h"

#define MIC_STALL_S 2.0 /* no callback for this long: the device is gone */
#define MIC_RETRY_FIRST_S 1.0 /* a lost device: the first wait to try again */
#define MIC_RETRY_MAX_S 10.0  /* the longest wait between tries */
#define MIC_OVERRUN_LOG_S 60.0 /* overruns are logged at most this often */

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
  uint64_t overruns_said;   /* the stream's overruns the log has told */
  double overruns_said_at;  /* when it last told them; 0: never */
  uv_async_t async;
  bool async_open;
  bool started;             /* Pa_StartStream done */
  float *drain;             /* (MIC_RING_FRAMES) loop-side copy */
  char *device;             /* --mic's NAME or INDEX; NULL: the default */
  bool pa_up;               /* Pa_Initialize done (and not terminated) */
  /* A lost device, tried again (the loop's, except as the job says). */
  double retry_at;          /* when to try next; 0: not lost */
  double retry_s;           /* the last wait; the next is twice it */
  bool retry_said;          /* a failed try was logged as a warning */
  bool reopening;           /* the job below is running */
  bool stopping;            /* mic_stop came while it ran */
  uv_work_t reopen_req;     /* on the thread pool: the job's fields */
  PaStream *opened;         /* set by the job: the device, not started */
  double opened_rate;
  char opened_name[128];
  char why[256];            /* the job's failure */
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
  free(m->device);
  free(m);
}

/* --- what the audio libraries say ----------------------------------------
 *
 * PortAudio's start lists every device of every host API, and the
 * libraries under it complain on stderr as they probe: alsa-lib of each
 * card or plugin it cannot open ("ALSA lib confmisc.c:855:(parse_card)
 * cannot find card '0'"), libjack of a JACK server that does not run.
 * Some 60 lines on a machine without a sound card, at every start and
 * every try of a lost device, outside the log (no time, no level, and
 * written straight to stderr, where the log's writer thread alone may
 * wait). Both libraries take a function for their messages: they become
 * debug lines of the log. They are found at run time, as PortAudio loads
 * them (or not: a PortAudio built without JACK), so aurald links neither.
 * Set before each Pa_Initialize; setting them again is harmless. */

/* Any thread that calls into alsa-lib may get here: the loop, a worker
 * reopening the device, PortAudio's capture thread. Below the
 * debug level it returns before any formatting; at it, it costs what a
 * log line from a worker costs (one short lock). */
static void on_alsa_message(const char *file, int line, const char *function,
                            int err, const char *fmt, ...) {
  if (atomic_load(&aurald_log_level) < LOG_DEBUG) return;
  char msg[512] = "";
  if (fmt != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
  }
  log_debug("ALSA: %s:%d (%s) %s%s%s", file ? file : "?", line,
            function ? function : "?", msg, err ? ": " : "",
            err ? strerror(err < 0 ? -err : err) : "");
}

static void on_jack_message(const char *msg) {
  log_debug("JACK: %s", msg != NULL ? msg : "?");
}

static void quiet_audio_libraries(void) {
  typedef void (*alsa_handler)(const char *, int, const char *, int,
                               const char *, ...);
  typedef int (*alsa_set)(alsa_handler);
  typedef void (*jack_set)(void (*)(const char *));
  alsa_set set_alsa;
  jack_set set_jack_error, set_jack_info;
  /* dlsym returns an object pointer; POSIX lets it become a function's. */
  *(void **)&set_alsa = dlsym(RTLD_DEFAULT, "snd_lib_error_set_handler");
  *(void **)&set_jack_error = dlsym(RTLD_DEFAULT, "jack_set_error_function");
  *(void **)&set_jack_info = dlsym(RTLD_DEFAULT, "jack_set_info_function");
  if (set_alsa != NULL) set_alsa(on_alsa_message);
  if (set_jack_error != NULL) set_jack_error(on_jack_message);
  if (set_jack_info != NULL) set_jack_info(on_jack_message);
}

/* Finds an input device by index or by a substring of its name. */
static int find_device(const char *want, char *why, size_t why_len) {
  if (want == NULL) {
    PaDeviceIndex d = Pa_GetDefaultInputDevice();
    if (d == paNoDevice)
      snprintf(why, why_len, "no default input device (see --list-devices; "
               "--mic=NAME|INDEX picks one)");
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
  quiet_audio_libraries();
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

/* Opens the device m->device (not started: capture begins with the
 * stream's release) into m->opened at its native rate. PortAudio calls
 * only: run on the loop at start, on the thread pool when tried again. */
static int open_device(struct mic_source *m, char *why, size_t why_len) {
  m->opened = NULL;
  int dev = find_device(m->device, why, why_len);
  if (dev < 0) return -1;
  const PaDeviceInfo *info = Pa_GetDeviceInfo(dev);
  double rate = info->defaultSampleRate;
  PaStreamParameters in = {
      .device = dev,
      .channelCount = 1,
      .sampleFormat = paFloat32,
      .suggestedLatency = info->defaultLowInputLatency,
  };
  PaStream *pa = NULL;
  PaError e = Pa_OpenStream(&pa, &in, NULL, rate, (unsigned long)(rate / 100),
                            paClipOff, on_audio, m);
  if (e != paNoError) {
    snprintf(why, why_len, "cannot capture from \"%s\" at %.0f Hz: %s",
             info->name, rate, Pa_GetErrorText(e));
    if (pa != NULL) Pa_CloseStream(pa);
    return -1;
  }
  m->opened = pa;
  m->opened_rate = rate;
  snprintf(m->opened_name, sizeof m->opened_name, "%s (%d)", info->name, dev);
  return 0;
}

/* The stream "mic" for the device just opened, started (capture waits
 * for its release). On failure the device is closed and why says so. */
static int start_stream(struct mic_source *m, char *why, size_t why_len) {
  m->s = stream_create(m->srv, "mic", SRC_MIC, m->opened_rate, 1, NULL, -1, 0,
                       why, why_len);
  if (m->s == NULL) {
    Pa_CloseStream(m->opened); /* never started: nothing to wait for */
    m->opened = NULL;
    return -1;
  }
  m->pa = m->opened;
  m->opened = NULL;
  m->started = false;
  m->seen_callbacks = atomic_load(&m->n_callbacks);
  m->overruns_said = 0;
  m->overruns_said_at = 0;
  m->s->loop.on_release = on_release;
  log_info("stream %u \"mic\": device \"%s\" at %.0f Hz", m->s->id,
           m->opened_name, m->opened_rate);
  stream_start(m->s);
  return 0;
}

int mic_start(server *srv, const char *device, char *why, size_t why_len) {
  struct mic_source *m = calloc(1, sizeof *m);
  if (m == NULL) goto oom;
  srv->mic = m;
  m->srv = srv;
  atomic_store(&m->refs, 1);
  quiet_audio_libraries();
  PaError e = Pa_Initialize();
  if (e != paNoError) {
    snprintf(why, why_len, "PortAudio: %s", Pa_GetErrorText(e));
    goto fail;
  }
  m->pa_up = true;
  m->ring = malloc(MIC_RING_FRAMES * sizeof(float));
  m->drain = malloc(MIC_RING_FRAMES * sizeof(float));
  m->device = device != NULL ? strdup(device) : NULL;
  if (m->ring == NULL || m->drain == NULL || (device != NULL && !m->device))
    goto oom;
  uv_async_init(srv->loop, &m->async, on_mic_async);
  m->async.data = m;
  m->async_open = true;
  if (open_device(m, why, why_len) < 0 || start_stream(m, why, why_len) < 0)
    goto fail;
  return 0;
oom:
  snprintf(why, why_len, "out of memory for the microphone");
fail:
  mic_stop(srv);
  return -1;
}

/* The device is gone (its stream ended): tried again from now on. */
static void lost(struct mic_source *m, double now) {
  m->retry_s = MIC_RETRY_FIRST_S;
  m->retry_at = now + m->retry_s;
  m->retry_said = false;
}

int mic_begin(server *srv) {
  struct mic_source *m = srv->mic;
  if (m == NULL || m->pa == NULL) return -1;
  PaError e = Pa_StartStream(m->pa);
  if (e != paNoError) {
    /* The caller ends the stream (device_lost); the source lets go of
     * it now, as of a lost device, and tries the device again. */
    log_error("stream %u \"mic\": cannot start capturing: %s; trying the "
              "device again in %.0f s", m->s->id, Pa_GetErrorText(e),
              MIC_RETRY_FIRST_S);
    Pa_CloseStream(m->pa); /* not started: nothing to wait for */
    m->pa = NULL;
    m->s = NULL;
    lost(m, aurald_mono_s());
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

/* The job of trying a lost device again, on the thread pool: PortAudio
 * restarted (it lists devices when it starts), then the device opened.
 * Nothing else touches PortAudio meanwhile: the old device has closed
 * (closers_running was 0) and the loop waits for the job's end. */
static void reopen_work(uv_work_t *req) {
  struct mic_source *m = req->data;
  m->why[0] = '\0';
  if (m->pa_up) Pa_Terminate();
  quiet_audio_libraries();
  PaError e = Pa_Initialize();
  m->pa_up = e == paNoError;
  if (!m->pa_up) {
    snprintf(m->why, sizeof m->why, "PortAudio: %s", Pa_GetErrorText(e));
    return;
  }
  /* No callback of the old device can come: the ring starts empty. */
  atomic_store(&m->head, 0);
  atomic_store(&m->tail, 0);
  atomic_store(&m->overruns, 0);
  open_device(m, m->why, sizeof m->why);
}

static void shut_down_portaudio(struct mic_source *m);

/* The job's end, on the loop: the new stream, or the next try. */
static void reopen_done(uv_work_t *req, int status) {
  struct mic_source *m = req->data;
  (void)status;
  m->reopening = false;
  if (m->stopping) { /* mic_stop came meanwhile, and left this to us */
    if (m->opened != NULL) Pa_CloseStream(m->opened);
    m->opened = NULL;
    shut_down_portaudio(m);
    source_unref(m);
    return;
  }
  if (m->opened != NULL && start_stream(m, m->why, sizeof m->why) == 0) {
    log_info("stream %u \"mic\": the capture device is back", m->s->id);
    m->retry_at = 0;
  } else {
    /* Said once as a warning, then quietly: the device may be gone for
     * hours, and every try would be the same line. */
    if (!m->retry_said) log_warn("microphone: not back yet (%s); trying "
                                 "again, at most every %.0f s",
                                 m->why, MIC_RETRY_MAX_S);
    else log_debug("microphone: not back yet (%s)", m->why);
    m->retry_said = true;
    m->retry_s = m->retry_s * 2 < MIC_RETRY_MAX_S ? m->retry_s * 2
                                                  : MIC_RETRY_MAX_S;
    m->retry_at = aurald_mono_s() + m->retry_s;
  }
  source_unref(m); /* the job's */
}

/* Tries the lost device again when it is time, and its old stream has
 * closed (a hung device may never close: then it is never tried). */
static void maybe_reopen(struct mic_source *m, double now) {
  if (m->retry_at == 0 || m->reopening || now < m->retry_at ||
      atomic_load(&closers_running) > 0)
    return;
  m->reopening = true;
  atomic_fetch_add(&m->refs, 1);
  m->reopen_req.data = m;
  if (uv_queue_work(m->srv->loop, &m->reopen_req, reopen_work,
                    reopen_done) != 0) {
    m->reopening = false;
    atomic_fetch_sub(&m->refs, 1);
    m->retry_at = now + m->retry_s;
  }
}

/* Capture overruns lose audio: from then on the stream's time runs behind
 * the clock, and its text and words miss what was said. STATS counts
 * them; the log says so at the first, then at most every
 * MIC_OVERRUN_LOG_S with the count since the last line. */
static void say_overruns(struct mic_source *m, double now) {
  uint64_t all = m->s->loop.overruns, n = all - m->overruns_said;
  if (n == 0 || (m->overruns_said_at != 0 &&
                 now - m->overruns_said_at < MIC_OVERRUN_LOG_S))
    return;
  log_warn("stream %u \"mic\": %llu capture overrun%s (%llu in all): audio "
           "lost, the device delivered faster than aurald took it (next "
           "said within %.0f s)",
           m->s->id, (unsigned long long)n, n == 1 ? "" : "s",
           (unsigned long long)all, MIC_OVERRUN_LOG_S);
  m->overruns_said = all;
  m->overruns_said_at = now;
}

/* Ends the stream when the device has stopped: PortAudio reports the
 * stream inactive, or no callback came for MIC_STALL_S; and tries the
 * device again while it is lost. */
void mic_poll(server *srv) {
  struct mic_source *m = srv->mic;
  if (m == NULL) return;
  double now = aurald_mono_s();
  if (m->pa == NULL) {
    maybe_reopen(m, now);
    return;
  }
  if (!m->started) return;
  uint64_t n = atomic_load(&m->n_callbacks);
  if (n != m->seen_callbacks) {
    m->seen_callbacks = n;
    m->last_progress = now;
  }
  say_overruns(m, now);
  int active = Pa_IsStreamActive(m->pa);
  if (active == 1 && now - m->last_progress < MIC_STALL_S) return;
  char msg[160];
  if (active != 1)
    snprintf(msg, sizeof msg, "the capture device stopped (%s)",
             active < 0 ? Pa_GetErrorText(active) : "stream inactive");
  else
    snprintf(msg, sizeof msg, "no audio from the capture device for %.1f s",
             now - m->last_progress);
  log_warn("stream %u \"mic\": %s; ending it, and trying the device again "
           "in %.0f s", m->s->id, msg, MIC_RETRY_FIRST_S);
  close_device(m);
  on_mic_async(&m->async); /* what was captured before still counts */
  stream_end_input(m->s, END_DEVICE_LOST, msg);
  m->s = NULL; /* the stream goes its way; the loop frees it */
  m->started = false;
  lost(m, now);
}

static void on_async_closed(uv_handle_t *h) {
  source_unref(h->data);
}

/* Pa_Terminate, once every device has closed (a hung one is left to
 * the exit). */
static void shut_down_portaudio(struct mic_source *m) {
  if (!m->pa_up) return;
  /* Give a hung device a moment; past it, leave PortAudio to the exit. */
  for (int i = 0; i < 50 && atomic_load(&closers_running) > 0; i++)
    usleep(10000);
  if (atomic_load(&closers_running) == 0) Pa_Terminate();
  else log_warn("the capture device did not close; not waiting for it");
  m->pa_up = false;
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
  /* A try of a lost device in flight ends it all itself (reopen_done). */
  if (m->reopening) m->stopping = true;
  else shut_down_portaudio(m);
  if (m->async_open) {
    /* No callback signals the handle once it starts closing. */
    atomic_store(&m->quiet, true);
    while (atomic_load(&m->in_callback) > 0) sched_yield();
    uv_close((uv_handle_t *)&m->async, on_async_closed);
  } else {
    source_unref(m);
  }
}
