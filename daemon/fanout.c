/*
 * Fan-out: one finished chunk to every subscriber of its stream.
 *
 * Each (output set, dtype) combination that some subscriber wants is
 * encoded once into a shared buffer; every connection queues a reference
 * to it. A subscriber whose queue would pass the hard limit does not get
 * the chunk: the loss is counted and reported by one GAP before the next
 * message of that stream that does fit. Nothing here waits on a client.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

static msgbuf *encode_variant(server *srv, chunk_out *co, uint32_t outputs,
                              uint8_t dtype) {
  aural_chunk_header h = co->h;
  h.outputs = (uint16_t)outputs;
  h.dtype = dtype;
  h.text_bytes = (outputs & AURAL_OUT_TEXT) ? (uint32_t)co->text_len : 0;
  size_t payload = aural_chunk_payload_bytes(&h);
  msgbuf *m = payload ? msgbuf_new(AURAL_PROTO_HEADER_BYTES + payload) : NULL;
  if (m == NULL) return NULL;
  aural_msg_header mh = {AURAL_PROTO_VERSION, AURAL_MSG_CHUNK, 0, co->s->id,
                         (uint32_t)payload};
  aural_proto_put_header(m->data, &mh);
  uint8_t *p = m->data + AURAL_PROTO_HEADER_BYTES;
  aural_chunk_put_header(p, &h);
  p += AURAL_PROTO_CHUNK_HEADER_BYTES;
  size_t n = h.n_frames;
  const float *sec[2] = {co->emb, co->logits};
  size_t width[2] = {(size_t)srv->mc->d_model, (size_t)srv->mc->vocab_size};
  for (int k = 0; k < 2; k++) {
    if (!(outputs & (1u << k))) continue;
    size_t count = n * width[k];
    if (dtype == AURAL_DTYPE_F32) {
      /* Little-endian host: the floats go out as they are. */
      memcpy(p, sec[k], count * 4);
      p += count * 4;
    } else {
      for (size_t i = 0; i < count; i++, p += 2)
        aural_put_u16(p, aural_f32_to_f16(sec[k][i]));
    }
  }
  if (outputs & AURAL_OUT_TEXT) memcpy(p, co->text, co->text_len);
  return m;
}

/* Sends the GAP a delivery owes, if any. */
static void flush_gap(delivery *d) {
  if (d->gap_n == 0) return;
  uint8_t buf[AURAL_PROTO_HEADER_BYTES + 160];
  aural_msg_gap g = {.first_chunk = d->gap_first,
                     .n_chunks = d->gap_n,
                     .reason = AURAL_GAP_QUEUE_FULL};
  conn_send_bytes(d->sub->c, buf,
                  aural_proto_encode_gap(buf, sizeof buf, d->s->id, &g));
  d->gap_n = 0;
}

void send_stream_started(delivery *d) {
  stream *s = d->s;
  aural_msg_stream_started m = {.source = (uint8_t)s->source,
                                .sample_rate = s->rate_hz,
                                .channels = (uint32_t)s->channels,
                                .start_us = s->start_us,
                                .next_chunk = s->chunks_emitted};
  memcpy(m.name, s->name, sizeof m.name);
  uint8_t buf[AURAL_PROTO_HEADER_BYTES + 512];
  conn_send_bytes(d->sub->c, buf,
                  aural_proto_encode_stream_started(buf, sizeof buf, s->id,
                                                    &m));
}

static void record_latency(stream *s, int64_t ready_us, int64_t emitted_us) {
  if (ready_us <= 0) return;
  s->latency_ms[s->n_latency % LATENCY_RING] =
      (float)((double)(emitted_us - ready_us) * 1e-3);
  s->n_latency++;
}

void fanout_chunk(server *srv, chunk_out *co) {
  stream *s = co->s;
  co->h.emitted_us = aurald_now_us();
  record_latency(s, co->h.ready_us, co->h.emitted_us);
  for (delivery *d = s->deliveries; d != NULL; d = d->next_in_stream) {
    conn *c = d->sub->c;
    if (c->closing || c->fatal_sent) continue;
    uint8_t dt = d->sub->dtype;
    uint32_t out = d->sub->outputs;
    msgbuf **slot = &co->variants[dt][out];
    if (*slot == NULL) *slot = encode_variant(srv, co, out, dt);
    msgbuf *m = *slot;
    bool fits = m != NULL && c->q_len + 2 <= CONN_CHUNK_CAP &&
                c->q_bytes + m->len <= srv->opt->sub_hard_bytes;
    if (!fits) {
      if (d->gap_n == 0) d->gap_first = co->h.seq;
      d->gap_n++;
      d->sub->dropped++;
      continue;
    }
    flush_gap(d);
    conn_send(c, m);
    d->sub->sent++;
  }
  s->chunks_emitted++;
}

void fanout_ended(server *srv, stream *s) {
  (void)srv;
  aural_msg_stream_ended e = {.reason = (uint8_t)s->reason,
                              .frames = s->next_frame,
                              .chunks = s->chunks_emitted};
  memcpy(e.name, s->name, sizeof e.name);
  snprintf(e.message, sizeof e.message, "%s", s->message);
  /* The message may need escaping: 6 bytes a byte. */
  uint8_t buf[AURAL_PROTO_HEADER_BYTES + 4096];
  msgbuf *m = msgbuf_from(
      buf, aural_proto_encode_stream_ended(buf, sizeof buf, s->id, &e));
  while (s->deliveries != NULL) {
    delivery *d = s->deliveries;
    s->deliveries = d->next_in_stream;
    if (!d->sub->c->closing) {
      flush_gap(d);
      conn_send(d->sub->c, m);
    }
    free(d);
  }
  msgbuf_unref(m);
}

/* ---- STATS and STREAMS -------------------------------------------------- */

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* The 50th and 99th percentiles of the stream's recent chunk latencies,
 * sorted again only when chunks came since the last STATS: a flood of
 * STATS costs one sort per stream per chunk at most. */
static void latency_pcts(stream *s, double *p50, double *p99) {
  size_t n = s->n_latency < LATENCY_RING ? (size_t)s->n_latency : LATENCY_RING;
  if (s->lat_seen != s->n_latency && n > 0) {
    float tmp[LATENCY_RING];
    memcpy(tmp, s->latency_ms, n * sizeof(float));
    qsort(tmp, n, sizeof(float), cmp_float);
    s->lat_p50 = tmp[(size_t)(0.50 * (double)(n - 1) + 0.5)];
    s->lat_p99 = tmp[(size_t)(0.99 * (double)(n - 1) + 0.5)];
    s->lat_seen = s->n_latency;
  }
  *p50 = n > 0 ? s->lat_p50 : 0.0;
  *p99 = n > 0 ? s->lat_p99 : 0.0;
}

/* What STREAMS and STATS list of every stream. A held stream has not
 * started: no start time yet. */
static aural_msg_stream_info stream_info(server *srv, const stream *s) {
  aural_msg_stream_info e = {.id = s->id,
                         .source = (uint8_t)s->source,
                         .sample_rate = s->rate_hz,
                         .channels = (uint32_t)s->channels,
                         .held = s->held,
                         .start_us = s->held ? 0 : s->start_us,
                         .chunks = s->chunks_emitted};
  memcpy(e.name, s->name, sizeof e.name);
  pthread_mutex_lock(&srv->mu);
  e.frames = s->stat_frames;
  pthread_mutex_unlock(&srv->mu);
  return e;
}

size_t build_stream_list(server *srv, uint8_t *out, size_t cap) {
  aural_msg_writer mw;
  aural_proto_streams_begin(&mw, out, cap);
  for (stream *s = srv->streams; s != NULL; s = s->next) {
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
                             .streams_total = (uint32_t)srv->n_streams,
                             .subscribers_total = (uint32_t)n_subs};
  aural_msg_writer mw;
  aural_proto_stats_reply_begin(&mw, out, cap, &r);
  int listed = 0;
  for (stream *s = srv->streams; s != NULL; s = s->next) {
    if (req->streams_before != 0 && s->id >= req->streams_before) continue;
    if (listed == AURAL_STATS_PAGE_STREAMS) {
      /* The ids of the streams listed so far are all above this one's. */
      r.next_streams_before = s->id + 1;
      break;
    }
    listed++;
    aural_stats_stream e = {.info = stream_info(srv, s),
                            .overruns = atomic_load(&s->overruns)};
    pthread_mutex_lock(&srv->mu);
    e.compute_s = s->stat_compute_s;
    e.audio_s = s->stat_audio_s;
    pthread_mutex_unlock(&srv->mu);
    latency_pcts(s, &e.latency_ms_p50, &e.latency_ms_p99);
    aural_proto_stats_reply_add_stream(&mw, &e);
  }
  r.next_clients_before = list_subscribers(srv, &mw, req->clients_before);
  return aural_proto_stats_reply_end(&mw, &r);
}
