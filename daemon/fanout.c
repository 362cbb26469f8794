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

static msgbuf *json_msg(uint8_t type, uint32_t stream_id, aural_jw *w) {
  long len = aural_jw_finish(w);
  if (len < 0) return NULL;
  msgbuf *m = msgbuf_new(AURAL_PROTO_HEADER_BYTES + (size_t)len);
  if (m != NULL)
    aural_proto_encode_raw(m->data, m->len, type, stream_id, w->buf,
                           (size_t)len);
  return m;
}

/* Sends the GAP a delivery owes, if any. */
static void flush_gap(delivery *d) {
  if (d->gap_n == 0) return;
  char json[160];
  aural_jw w;
  aural_jw_init(&w, json, sizeof json);
  aural_jw_begin_object(&w);
  aural_jw_key(&w, "first_chunk");
  aural_jw_uint(&w, d->gap_first);
  aural_jw_key(&w, "n_chunks");
  aural_jw_uint(&w, d->gap_n);
  aural_jw_key(&w, "reason");
  aural_jw_string(&w, "queue_full");
  aural_jw_end_object(&w);
  msgbuf *m = json_msg(AURAL_MSG_GAP, d->s->id, &w);
  conn_send(d->sub->c, m);
  msgbuf_unref(m);
  d->gap_n = 0;
}

void send_stream_started(delivery *d) {
  stream *s = d->s;
  char json[512];
  aural_jw w;
  aural_jw_init(&w, json, sizeof json);
  aural_jw_begin_object(&w);
  aural_jw_key(&w, "name");
  aural_jw_string(&w, s->name);
  aural_jw_key(&w, "source");
  aural_jw_string(&w, source_name(s->source));
  aural_jw_key(&w, "sample_rate");
  aural_jw_double(&w, s->rate_hz);
  aural_jw_key(&w, "channels");
  aural_jw_int(&w, s->channels);
  aural_jw_key(&w, "start_us");
  aural_jw_int(&w, s->start_us);
  aural_jw_key(&w, "next_chunk");
  aural_jw_uint(&w, s->chunks_emitted);
  aural_jw_end_object(&w);
  msgbuf *m = json_msg(AURAL_MSG_STREAM_STARTED, s->id, &w);
  conn_send(d->sub->c, m);
  msgbuf_unref(m);
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
  char json[4096]; /* the message may need escaping: 6 bytes a byte */
  aural_jw w;
  aural_jw_init(&w, json, sizeof json);
  aural_jw_begin_object(&w);
  aural_jw_key(&w, "name");
  aural_jw_string(&w, s->name);
  aural_jw_key(&w, "reason");
  aural_jw_string(&w, end_reason_name(s->reason));
  aural_jw_key(&w, "message");
  aural_jw_string(&w, s->message);
  aural_jw_key(&w, "frames");
  aural_jw_uint(&w, s->next_frame);
  aural_jw_key(&w, "chunks");
  aural_jw_uint(&w, s->chunks_emitted);
  aural_jw_end_object(&w);
  msgbuf *m = json_msg(AURAL_MSG_STREAM_ENDED, s->id, &w);
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

static void stream_fields(aural_jw *w, const stream *s) {
  aural_jw_key(w, "id");
  aural_jw_uint(w, s->id);
  aural_jw_key(w, "name");
  aural_jw_string(w, s->name);
  aural_jw_key(w, "source");
  aural_jw_string(w, source_name(s->source));
  aural_jw_key(w, "sample_rate");
  aural_jw_double(w, s->rate_hz);
  aural_jw_key(w, "channels");
  aural_jw_int(w, s->channels);
  /* A held stream has not started: no start time yet. */
  aural_jw_key(w, "held");
  aural_jw_bool(w, s->held);
  aural_jw_key(w, "start_us");
  aural_jw_int(w, s->held ? 0 : s->start_us);
}

void build_stream_list(server *srv, aural_jw *w) {
  aural_jw_begin_object(w);
  aural_jw_key(w, "streams");
  aural_jw_begin_array(w);
  for (stream *s = srv->streams; s != NULL; s = s->next) {
    pthread_mutex_lock(&srv->mu);
    uint64_t frames = s->stat_frames;
    pthread_mutex_unlock(&srv->mu);
    aural_jw_begin_object(w);
    stream_fields(w, s);
    aural_jw_key(w, "frames");
    aural_jw_uint(w, frames);
    aural_jw_key(w, "chunks");
    aural_jw_uint(w, s->chunks_emitted);
    aural_jw_end_object(w);
  }
  aural_jw_end_array(w);
  aural_jw_end_object(w);
}

/* STATS: linear in the streams and subscriptions it lists, and at most a
 * page of each (AURAL_STATS_PAGE_*), newest first from the request's
 * cursors; "next_streams_before" and "next_clients_before" say where the
 * next page starts when this one is cut. */
void build_stats(server *srv, aural_jw *w, const aural_msg_stats *req) {
  int n_subs = 0;
  for (conn *c = srv->conns; c != NULL; c = c->next) n_subs += c->n_subs;
  aural_jw_begin_object(w);
  aural_jw_key(w, "uptime_s");
  aural_jw_double(w, aurald_mono_s() - srv->t_start);
  aural_jw_key(w, "clients");
  aural_jw_int(w, srv->n_conns);
  aural_jw_key(w, "workers");
  aural_jw_int(w, srv->n_workers);
  aural_jw_key(w, "message_bytes");
  aural_jw_uint(w, msgbuf_live_bytes);
  aural_jw_key(w, "streams_total");
  aural_jw_int(w, srv->n_streams);
  aural_jw_key(w, "subscribers_total");
  aural_jw_int(w, n_subs);

  aural_jw_key(w, "streams");
  aural_jw_begin_array(w);
  int listed = 0;
  const stream *cut = NULL;
  for (stream *s = srv->streams; s != NULL; s = s->next) {
    if (req->streams_before != 0 && s->id >= req->streams_before) continue;
    if (listed == AURAL_STATS_PAGE_STREAMS) {
      cut = s;
      break;
    }
    listed++;
    pthread_mutex_lock(&srv->mu);
    uint64_t frames = s->stat_frames;
    double compute = s->stat_compute_s, audio = s->stat_audio_s;
    pthread_mutex_unlock(&srv->mu);
    double p50, p99;
    latency_pcts(s, &p50, &p99);
    aural_jw_begin_object(w);
    stream_fields(w, s);
    aural_jw_key(w, "frames");
    aural_jw_uint(w, frames);
    aural_jw_key(w, "chunks");
    aural_jw_uint(w, s->chunks_emitted);
    aural_jw_key(w, "audio_s");
    aural_jw_double(w, audio);
    aural_jw_key(w, "compute_s");
    aural_jw_double(w, compute);
    aural_jw_key(w, "latency_ms_p50");
    aural_jw_double(w, p50);
    aural_jw_key(w, "latency_ms_p99");
    aural_jw_double(w, p99);
    aural_jw_key(w, "overruns");
    aural_jw_uint(w, atomic_load(&s->overruns));
    aural_jw_end_object(w);
  }
  aural_jw_end_array(w);
  /* The ids of the streams listed so far are all above the cut one's. */
  uint32_t next_streams = cut != NULL ? cut->id + 1 : 0;

  aural_jw_key(w, "subscribers");
  aural_jw_begin_array(w);
  listed = 0;
  uint32_t next_clients = 0;
  for (conn *c = srv->conns; c != NULL; c = c->next) {
    if (req->clients_before != 0 && c->id >= req->clients_before) continue;
    if (c->n_subs == 0) continue;
    if (listed + c->n_subs > AURAL_STATS_PAGE_SUBSCRIBERS) {
      next_clients = c->id + 1;
      break;
    }
    listed += c->n_subs;
    for (subscription *sub = c->subs; sub != NULL; sub = sub->next) {
      aural_jw_begin_object(w);
      aural_jw_key(w, "client");
      aural_jw_uint(w, c->id);
      aural_jw_key(w, "subscription");
      aural_jw_uint(w, sub->id);
      aural_jw_key(w, "stream");
      if (sub->all) aural_jw_null(w);
      else aural_jw_string(w, sub->name);
      aural_jw_key(w, "all");
      aural_jw_bool(w, sub->all);
      aural_jw_key(w, "queue_bytes");
      aural_jw_uint(w, c->q_bytes);
      aural_jw_key(w, "chunks_sent");
      aural_jw_uint(w, sub->sent);
      aural_jw_key(w, "chunks_dropped");
      aural_jw_uint(w, sub->dropped);
      aural_jw_end_object(w);
    }
  }
  aural_jw_end_array(w);
  if (next_streams != 0) {
    aural_jw_key(w, "next_streams_before");
    aural_jw_uint(w, next_streams);
  }
  if (next_clients != 0) {
    aural_jw_key(w, "next_clients_before");
    aural_jw_uint(w, next_clients);
  }
  aural_jw_end_object(w);
}
