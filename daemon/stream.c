/*
 * Streams: the registry, their input buffers (filled by the loop, drained
 * by workers), and the hand-back of finished chunks to the loop.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

/* The daemon's source and end reason values are the protocol's, so that
 * they go into its messages as they are. */
#define SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(SAME(SRC_FILE, AURAL_SOURCE_FILE) &&
                   SAME(SRC_MIC, AURAL_SOURCE_MIC) &&
                   SAME(SRC_CLIENT, AURAL_SOURCE_CLIENT),
               "stream_source matches aural_stream_source");
_Static_assert(SAME(END_EOF, AURAL_END_EOF) &&
                   SAME(END_CLOSED, AURAL_END_CLOSED) &&
                   SAME(END_DISCONNECTED, AURAL_END_DISCONNECTED) &&
                   SAME(END_DEVICE_LOST, AURAL_END_DEVICE_LOST) &&
                   SAME(END_ERROR, AURAL_END_ERROR) &&
                   SAME(END_SHUTDOWN, AURAL_END_SHUTDOWN),
               "end_reason matches aural_end_reason");
#undef SAME

const char *end_reason_name(end_reason r) {
  return r == END_NONE ? "none" : aural_end_reason_name((int)r);
}

const char *source_name(stream_source s) {
  return aural_source_name((int)s);
}

/* Input waiting beyond this many seconds of audio (or bytes) stops the
 * connection that feeds it from being read: the flow-control window. A
 * round takes at most half a second of a stream's audio, so the workers
 * always find several rounds' worth. */
#define BACKLOG_S 2.0
#define BACKLOG_BYTES (1u << 20)

size_t pcm_decode(uint8_t format, const uint8_t *p, size_t n, float *x) {
  for (size_t i = 0; i < n; i++) {
    if (format == AURAL_SAMPLE_S16) {
      x[i] = (float)(int16_t)aural_get_u16(p + 2 * i) * (1.0f / 32768.0f);
      continue;
    }
    uint32_t u = aural_get_u32(p + 4 * i);
    memcpy(&x[i], &u, 4);
    if (!isfinite(x[i])) return i;
  }
  return n;
}

static size_t backlog_frames(const stream *s) {
  size_t by_time = (size_t)(s->rate_hz * BACKLOG_S);
  size_t by_bytes = BACKLOG_BYTES / (sizeof(float) * (size_t)s->channels);
  return by_time < by_bytes ? by_time : by_bytes;
}

/* Every stream's pipeline. With words on, every stream decodes them, so
 * that its finals do not depend on when a subscriber asked for them. */
static void stream_config(server *srv, stream_source src, double rate_hz,
                          int channels, const aural_lexicon *custom,
                          double boost, uint64_t first_chunk,
                          aural_stream_config *sc) {
  aural_stream_config_default(sc);
  sc->first_chunk = first_chunk;
  sc->input_rate_hz = rate_hz;
  sc->n_channels = channels;
  /* A microphone glitch must not end the stream; files and clients are
   * checked before their samples get here. */
  sc->nonfinite =
      src == SRC_MIC ? AURAL_NONFINITE_ZERO : AURAL_NONFINITE_REJECT;
  sc->chunk_frames = srv->chunk_frames;
  sc->max_pending_frames = STREAM_FEAT_CAP;
  sc->encoder_batch_frames = 1; /* workers compute streams in batches */
  if (srv->lexicon != NULL) {
    sc->outputs = AURAL_STREAM_EMBEDDINGS | AURAL_STREAM_LOGITS |
                  AURAL_STREAM_TEXT | AURAL_STREAM_WORDS;
    sc->lexicon = srv->lexicon;
    sc->lm = srv->lm;
    sc->decoder.boost_words = custom;
    if (boost >= 0) sc->decoder.boost = (float)boost;
  }
}

int stream_words_limits(server *srv, char *why, size_t why_len) {
  aural_stream_config sc;
  stream_config(srv, SRC_FILE, 0, 1, NULL, -1, 0, &sc);
  aural_stream *as = NULL;
  aural_err err = {0};
  if (aural_stream_create(srv->model, &sc, &as, &err) < 0) {
    snprintf(why, why_len, "%s", err.msg);
    return -1;
  }
  aural_stream_info info;
  aural_stream_get_info(as, &info);
  srv->words_max = info.words_max;
  srv->segments_max = info.segments_max;
  aural_stream_destroy(as);
  return 0;
}

/* A new stream's id: the next of the count, but never 0 (the protocol's
 * "no stream") nor one a live stream has. A long-lived server wraps past
 * 2^32 - 1 after as many streams (50 days of 1,000 pushed utterances a
 * second); it then gave out 0, and the ids of streams still live (the
 * microphone's, from the start), so that a client's AUDIO_DATA found the
 * other stream and subscribers could not tell two streams apart. */
static uint32_t new_stream_id(server *srv) {
  uint32_t id;
  do
    id = ++srv->next_stream_id;
  while (id == 0 || stream_find_id(srv, id) != NULL);
  return id;
}

stream *stream_create(server *srv, const char *name, stream_source src,
                      double rate_hz, int channels, aural_lexicon *custom,
                      double boost, uint64_t first_chunk, char *why,
                      size_t why_len) {
  stream *s = calloc(1, sizeof *s);
  if (s == NULL) {
    aural_lexicon_destroy(custom);
    goto oom;
  }
  s->custom = custom;
  s->srv = srv;
  s->id = new_stream_id(srv);
  snprintf(s->name, sizeof s->name, "%s", name);
  s->source = src;
  s->rate_hz = rate_hz;
  s->channels = channels;
  s->start_us = aurald_now_us();

  aural_stream_config sc;
  stream_config(srv, src, rate_hz, channels, custom, boost, first_chunk, &sc);
  aural_err err = {0};
  if (aural_stream_create(srv->model, &sc, &s->work.as, &err) < 0) {
    snprintf(why, why_len, "%s", err.msg);
    stream_destroy(s);
    return NULL;
  }
  if (src != SRC_FILE) {
    /* A client's stream: twice the flow-control window. Its connection
     * stops being read above the window, and an AUDIO_DATA larger than
     * the room left is taken in parts (conn.c), so the size follows from
     * the stream's rate and channels alone, never from the request size.
     * The microphone's also holds one drain of its capture ring. */
    size_t want = 2 * backlog_frames(s);
    if (src == SRC_MIC) want += MIC_RING_FRAMES;
    s->in.cap_frames = 1;
    while (s->in.cap_frames < want) s->in.cap_frames *= 2;
    s->in.pcm = malloc(s->in.cap_frames * (size_t)channels * sizeof(float));
    if (s->in.pcm == NULL) goto oom;
  }
  s->loop.next = srv->streams;
  srv->streams = s;
  stream **bucket = &srv->by_id[s->id % STREAM_ID_BUCKETS];
  s->loop.id_next = *bucket;
  *bucket = s;
  srv->n_streams++;
  srv->streams_created++;
  return s;
oom:
  snprintf(why, why_len, "out of memory for a new stream");
  stream_destroy(s);
  return NULL;
}

void stream_release(stream *s) {
  server *srv = s->srv;
  pthread_mutex_lock(&srv->mu);
  s->sched.held = false;
  pthread_mutex_unlock(&srv->mu);
  s->start_us = aurald_now_us();
  s->t0_mono = aurald_mono_s();
  if (s->loop.on_release != NULL && s->loop.on_release(s) < 0) {
    stream_end_input(s, END_DEVICE_LOST, "the capture device did not start");
    return;
  }
  pthread_mutex_lock(&srv->mu);
  server_mark_ready(srv, s);
  pthread_mutex_unlock(&srv->mu);
}

void server_mark_ready(server *srv, stream *s) {
  if (s->sched.queued) {
    /* Already waiting: the new input may make a round due now. */
    pthread_cond_signal(&srv->cv);
    return;
  }
  if (s->sched.busy || s->sched.ended || s->sched.held) return;
  s->sched.queued = true;
  s->sched.ready_next = NULL;
  if (srv->ready_tail) srv->ready_tail->sched.ready_next = s;
  else srv->ready_head = s;
  srv->ready_tail = s;
  srv->n_ready++;
  pthread_cond_signal(&srv->cv);
}

/* Copies n frames between interleaved pcm and the ring at frame position
 * pos, wrapping at its end. */
static void ring_copy(stream *s, uint64_t pos, float *pcm, size_t n,
                      bool into_ring) {
  size_t ch = (size_t)s->channels, cap = s->in.cap_frames;
  size_t at = (size_t)(pos & (cap - 1));
  size_t first = n < cap - at ? n : cap - at;
  float *ring = s->in.pcm + at * ch;
  if (into_ring) {
    memcpy(ring, pcm, first * ch * sizeof(float));
    memcpy(s->in.pcm, pcm + first * ch, (n - first) * ch * sizeof(float));
  } else {
    memcpy(pcm, ring, first * ch * sizeof(float));
    memcpy(pcm + first * ch, s->in.pcm, (n - first) * ch * sizeof(float));
  }
}

/* Producer side (the loop). The samples go into the ring without the
 * server's lock; only the count that publishes them takes it. */
size_t stream_push(stream *s, const float *pcm, size_t n_frames,
                   int64_t arrival_us) {
  server *srv = s->srv;
  size_t room = stream_room(s);
  size_t n = n_frames < room ? n_frames : room;
  if (n == 0) return 0;
  uint64_t head = atomic_load_explicit(&s->in.head, memory_order_relaxed);
  ring_copy(s, head, (float *)pcm, n, true);
  pthread_mutex_lock(&srv->mu);
  atomic_store_explicit(&s->in.head, head + n, memory_order_release);
  if (s->sched.in_frames == 0) s->sched.in_first_us = arrival_us;
  double now = aurald_mono_s();
  if (s->sched.pending_since == 0) s->sched.pending_since = now;
  /* A live client that stalled and then sends what it holds is not
   * ahead of the clock: input due up to CATCH_UP_S ago is credited. */
  if (s->sched.input_due < now - CATCH_UP_S)
    s->sched.input_due = now - CATCH_UP_S;
  s->sched.input_due += (double)n / s->rate_hz;
  s->sched.in_frames += n;
  s->sched.in_total += n;
  s->sched.in_last_us = arrival_us;
  server_mark_ready(srv, s);
  pthread_mutex_unlock(&srv->mu);
  return n;
}

/* Consumer side (the worker that owns the stream): the n frames it has
 * counted out of in_frames under the lock, copied out of the ring without
 * it, then handed back as room. */
void stream_take(stream *s, float *pcm, size_t n) {
  uint64_t tail = atomic_load_explicit(&s->in.tail, memory_order_relaxed);
  ring_copy(s, tail, pcm, n, false);
  atomic_store_explicit(&s->in.tail, tail + n, memory_order_release);
}

size_t stream_room(stream *s) {
  if (stream_input_ended(s)) return 0;
  uint64_t head = atomic_load_explicit(&s->in.head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&s->in.tail, memory_order_acquire);
  return s->in.cap_frames - (size_t)(head - tail);
}

bool stream_input_ended(stream *s) {
  pthread_mutex_lock(&s->srv->mu);
  bool done = s->sched.input_done;
  pthread_mutex_unlock(&s->srv->mu);
  return done;
}

size_t stream_pending_frames(stream *s) {
  pthread_mutex_lock(&s->srv->mu);
  size_t n = s->sched.in_frames;
  pthread_mutex_unlock(&s->srv->mu);
  return n;
}

bool stream_input_half_full(const stream *s) {
  return s->in.pcm != NULL && 2 * s->sched.in_frames >= backlog_frames(s);
}

bool stream_backlogged(stream *s) {
  return s->in.pcm != NULL && stream_pending_frames(s) > backlog_frames(s);
}

void stream_end_input(stream *s, end_reason r, const char *message) {
  server *srv = s->srv;
  pthread_mutex_lock(&srv->mu);
  if (!s->sched.input_done) {
    s->sched.input_done = true;
    s->sched.reason = r;
    snprintf(s->sched.message, sizeof s->sched.message, "%s",
             message ? message : "");
    /* A held stream (--hold, nobody subscribed yet) waits for nothing any
     * more: it ends unstarted, with no frames and no chunk. Left held, it
     * was never scheduled, so it never ended, and a shutdown waited for it
     * until its deadline and closed every client without SHUTDOWN. */
    s->sched.held = false;
    server_mark_ready(srv, s);
  }
  pthread_mutex_unlock(&srv->mu);
}

void stream_destroy(stream *s) {
  if (s == NULL) return;
  aural_stream_destroy(s->work.as);
  aural_lexicon_destroy(s->custom);
  if (s->work.af) aural_audiofile_close(s->work.af);
  free(s->in.pcm);
  free(s);
}

/* Loop thread. A stream is live here until the loop has handled its end
 * (finish_stream unlinks it); `sched.ended` is the workers'. */
stream *stream_find(server *srv, const char *name) {
  for (stream *s = srv->streams; s != NULL; s = s->loop.next)
    if (strcmp(s->name, name) == 0) return s;
  return NULL;
}

stream *stream_find_id(server *srv, uint32_t id) {
  for (stream *s = srv->by_id[id % STREAM_ID_BUCKETS]; s != NULL;
       s = s->loop.id_next)
    if (s->id == id) return s;
  return NULL;
}

/* Takes an ended stream out of the registry (the caller destroys it). */
void stream_unlink(server *srv, stream *s) {
  for (stream **pp = &srv->by_id[s->id % STREAM_ID_BUCKETS]; *pp != NULL;
       pp = &(*pp)->loop.id_next)
    if (*pp == s) {
      *pp = s->loop.id_next;
      break;
    }
  for (stream **pp = &srv->streams; *pp != NULL; pp = &(*pp)->loop.next)
    if (*pp == s) {
      *pp = s->loop.next;
      srv->n_streams--;
      return;
    }
}

