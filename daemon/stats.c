/*
 * STATS and STREAMS: what the daemon reports of its streams and
 * subscriptions. Read-only over the registry and the connections, linear
 * in what one reply lists, and a page at a time (PROTOCOL.md 4.15).
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/* The sanitizers' allocator's own count (GCC ships no header for it). */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* The 50th and 99th percentiles of the stream's recent chunk latencies,
 * sorted again only when chunks came since the last STATS: a flood of
 * STATS costs one sort per stream per chunk at most. */
void stream_latency_pcts(stream *s, double *p50, double *p99) {
  size_t n = s->loop.n_latency < LATENCY_RING ? (size_t)s->loop.n_latency
                                              : LATENCY_RING;
  if (s->loop.lat_seen != s->loop.n_latency && n > 0) {
    float tmp[LATENCY_RING];
    memcpy(tmp, s->loop.latency_ms, n * sizeof(float));
    qsort(tmp, n, sizeof(float), cmp_float);
    s->loop.lat_p50 = tmp[(size_t)(0.50 * (double)(n - 1) + 0.5)];
    s->loop.lat_p99 = tmp[(size_t)(0.99 * (double)(n - 1) + 0.5)];
    s->loop.lat_seen = s->loop.n_latency;
  }
  *p50 = n > 0 ? s->loop.lat_p50 : 0.0;
  *p99 = n > 0 ? s->loop.lat_p99 : 0.0;
}

/* What STREAMS and STATS list of every stream. A held stream has not
 * started: no start time yet. */
static aural_msg_stream_info stream_info(server *srv, const stream *s) {
  aural_msg_stream_info e = {.id = s->id,
                         .source = (uint8_t)s->source,
                         .sample_rate = s->rate_hz,
                         .channels = (uint32_t)s->channels,
                         .held = s->sched.held,
                         .start_us = s->sched.held ? 0 : s->start_us,
                         .chunks = s->loop.chunks_emitted};
  memcpy(e.name, s->name, sizeof e.name);
  pthread_mutex_lock(&srv->mu);
  e.frames = s->sched.stat_frames;
  pthread_mutex_unlock(&srv->mu);
  return e;
}

size_t build_stream_list(server *srv, uint8_t *out, size_t cap) {
  aural_msg_writer mw;
  aural_proto_streams_begin(&mw, out, cap);
  for (stream *s = srv->streams; s != NULL; s = s->loop.next) {
    aural_msg_stream_info e = stream_info(srv, s);
    aural_proto_streams_add(&mw, &e);
  }
  return aural_proto_streams_end(&mw);
}

/* The subscriptions of whole clients, newest first from the cursor, up to
 * a page: returns the next page's cursor, or 0 when none is left. */
static uint32_t list_subscribers(server *srv, aural_msg_writer *mw,
                                 uint32_t clients_before) {
  int listed = 0;
  for (conn *c = srv->conns; c != NULL; c = c->next) {
    if (clients_before != 0 && c->id >= clients_before) continue;
    if (c->n_subs == 0) continue;
    if (listed + c->n_subs > AURAL_STATS_PAGE_SUBSCRIBERS) return c->id + 1;
    listed += c->n_subs;
    for (subscription *sub = c->subs; sub != NULL; sub = sub->next) {
      aural_stats_subscriber e = {.client = c->id,
                                  .subscription = sub->id,
                                  .all = sub->all,
                                  .queue_bytes = c->q_bytes,
                                  .chunks_sent = sub->sent,
                                  .chunks_dropped = sub->dropped};
      if (!sub->all) memcpy(e.stream, sub->name, sizeof e.stream);
      aural_proto_stats_reply_add_subscriber(mw, &e);
    }
  }
  return 0;
}

size_t heap_bytes(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return __sanitizer_get_current_allocated_bytes(); /* their allocator */
#elif defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
#else
  return 0;
#endif
}

/* glibc's count walks every free block of every arena, each under its
 * arena's lock (which the workers' mallocs then wait for): 6 to 21 ms
 * with a thousand streams open. Taken once per STATS, a client
 * pipelining STATS held the loop that long per request, 32 requests a
 * turn, and a PING of another client waited 20 ms at the median and up to
 * 176 ms. Replies built in the same millisecond of the loop's clock (one
 * turn's) now share one measurement. */
size_t server_heap_bytes(server *srv) {
  uint64_t now = uv_now(srv->loop) + 1; /* never 0 */
  if (srv->heap_at_ms != now) {
    srv->heap_cached = heap_bytes();
    srv->heap_at_ms = now;
  }
  return srv->heap_cached;
}

/* STATS: linear in the streams and subscriptions it lists, and at most a
 * page of each (AURAL_STATS_PAGE_*), newest first from the request's
 * cursors; "next_streams_before" and "next_clients_before" say where the
 * next page starts when this one is cut. */
size_t build_stats(server *srv, uint8_t *out, size_t cap,
                   const aural_msg_stats *req) {
  int n_subs = 0;
  for (conn *c = srv->conns; c != NULL; c = c->next) n_subs += c->n_subs;
  aural_msg_stats_reply r = {.uptime_s = aurald_mono_s() - srv->t_start,
                             .clients = (uint32_t)srv->n_conns,
                             .workers = (uint32_t)srv->n_workers,
                             .message_bytes = msgbuf_live_bytes,
                             .heap_bytes = server_heap_bytes(srv),
                             .streams_total = (uint32_t)srv->n_streams,
                             .subscribers_total = (uint32_t)n_subs};
  aural_msg_writer mw;
  aural_proto_stats_reply_begin(&mw, out, cap, &r);
  int listed = 0;
  for (stream *s = srv->streams; s != NULL; s = s->loop.next) {
    if (req->streams_before != 0 && s->id >= req->streams_before) continue;
    if (listed == AURAL_STATS_PAGE_STREAMS) {
      /* The ids of the streams listed so far are all above this one's. */
      r.next_streams_before = s->id + 1;
      break;
    }
    listed++;
    aural_stats_stream e = {.info = stream_info(srv, s),
                            .overruns = s->loop.overruns};
    pthread_mutex_lock(&srv->mu);
    e.compute_s = s->sched.stat_compute_s;
    e.rounds = s->sched.stat_rounds;
    e.audio_s = s->sched.stat_audio_s;
    pthread_mutex_unlock(&srv->mu);
    stream_latency_pcts(s, &e.latency_ms_p50, &e.latency_ms_p99);
    aural_proto_stats_reply_add_stream(&mw, &e);
  }
  r.next_clients_before = list_subscribers(srv, &mw, req->clients_before);
  return aural_proto_stats_reply_end(&mw, &r);
}
