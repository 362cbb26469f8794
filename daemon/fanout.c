/*
 * Fan-out: one finished chunk to every subscriber of its stream.
 *
 * Each (output set, dtype) combination that some subscriber wants is
 * encoded once into a shared buffer, and so is the chunk's WORDS message;
 * every connection queues a reference to them. A subscriber whose queue would pass the hard limit does not get
 * the chunk: the loss is counted and reported by one GAP before the next
 * message of that stream that does fit. Nothing here waits on a client.
 *
 * It is also where streams meet subscribers: a stream's announcement to
 * the subscriptions that match it (deliveries), and its end, with the
 * results the workers hand back (server_on_done). Fan-out depends on the
 * registry (stream.c) and writes to connections; neither calls back.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

static void delivery_free(delivery *d);

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

/* Bytes a WORDS message of n words in k segments can take: a word is at
 * most AURAL_PROTO_WORD_MAX bytes, each of which may be escaped. */
static size_t words_bound(size_t n, size_t k) {
  return AURAL_PROTO_HEADER_BYTES + 128 + k * 4 +
         n * (6 * AURAL_PROTO_WORD_MAX + 128);
}

/* A chunk's WORDS message (PROTOCOL.md §4.16) of n_final words in
 * n_segments segments (segments[i] each) then the partial's, or NULL.
 * Frames of the words are offset by first_frame. */
static msgbuf *encode_words_of(const chunk_out *co, const aural_word *words,
                               const uint32_t *segments, size_t n_segments,
                               size_t n, uint64_t first_frame) {
  msgbuf *m = msgbuf_new(words_bound(n, n_segments));
  if (m == NULL) return NULL;
  aural_msg_words mw = {.seq = co->h.seq,
                        .final = (co->h.flags & AURAL_CHUNK_FINAL) != 0};
  aural_msg_writer w;
  aural_proto_words_begin(&w, m->data, m->len, co->s->id, &mw);
  size_t at = 0;
  for (size_t k = 0; k <= n_segments; k++) {
    size_t end = k < n_segments ? at + segments[k] : n;
    if (k < n_segments) aural_proto_words_segment(&w);
    else aural_proto_words_partial(&w);
    for (; at < end && at < n; at++)
      aural_proto_words_add(&w, words[at].text,
                            first_frame + words[at].start_frame,
                            first_frame + words[at].end_frame,
                            (double)words[at].confidence);
  }
  size_t len = aural_proto_words_end(&w);
  if (len == 0) {
    log_error("stream %u: chunk %llu's words do not encode", co->s->id,
              (unsigned long long)co->h.seq);
    msgbuf_unref(m);
    return NULL;
  }
  msgbuf_trim(m, len);
  return m;
}

/* The chunk's WORDS message from the stream's own decoder. */
static msgbuf *encode_words(const chunk_out *co) {
  return encode_words_of(co, co->words, co->segments, co->n_segments,
                         co->n_final_words + co->n_partial_words, 0);
}

/* A subscription's own decoder (custom words) over the chunk's logits:
 * its WORDS message, or NULL. Frames count from the decoder's first,
 * the first chunk this delivery received. */
static msgbuf *decode_for(server *srv, delivery *d, const chunk_out *co) {
  if (!d->dec_started) {
    d->dec_started = true;
    d->dec_first_frame = co->h.first_frame;
  }
  size_t n = co->h.n_frames, v = (size_t)srv->mc->vocab_size;
  size_t cap = srv->words_max, nw = 0, nseg = 0, k;
  bool final = (co->h.flags & AURAL_CHUNK_FINAL) != 0;
  for (size_t at = 0;;) {
    at += aural_decoder_push(d->dec, co->logits + at * v, n - at);
    if (at == n && final) aural_decoder_end(d->dec);
    if (aural_decoder_final(d->dec, d->words + nw, cap - nw, &k) == 1 &&
        nseg < srv->segments_max) {
      k = k < cap - nw ? k : cap - nw;
      d->segments[nseg++] = (uint32_t)k;
      nw += k;
    }
    if (at == n) break;
  }
  size_t np = aural_decoder_partial(d->dec, d->words + nw, cap - nw);
  nw += np < cap - nw ? np : cap - nw;
  return encode_words_of(co, d->words, d->segments, nseg, nw,
                         d->dec_first_frame);
}

msgbuf *chunk_variant(server *srv, chunk_out *co, uint32_t outputs,
                      uint8_t dtype) {
  msgbuf **slot = &co->variants[dtype][outputs];
  if (*slot == NULL) *slot = encode_variant(srv, co, outputs, dtype);
  return *slot;
}

msgbuf *chunk_words_message(chunk_out *co) {
  if (co->words_msg == NULL) co->words_msg = encode_words(co);
  return co->words_msg;
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
  d->s->srv->counters.gaps_sent++;
}

void send_stream_started(delivery *d) {
  stream *s = d->s;
  aural_msg_stream_started m = {.source = (uint8_t)s->source,
                                .sample_rate = s->rate_hz,
                                .channels = (uint32_t)s->channels,
                                .start_us = s->start_us,
                                .next_chunk = s->loop.chunks_emitted};
  memcpy(m.name, s->name, sizeof m.name);
  uint8_t buf[AURAL_PROTO_HEADER_BYTES + 512];
  conn_send_bytes(d->sub->c, buf,
                  aural_proto_encode_stream_started(buf, sizeof buf, s->id,
                                                    &m));
}

static void record_latency(stream *s, int64_t ready_us, int64_t emitted_us) {
  if (ready_us <= 0) return;
  s->loop.latency_ms[s->loop.n_latency % LATENCY_RING] =
      (float)((double)(emitted_us - ready_us) * 1e-3);
  s->loop.n_latency++;
  metrics_observe_latency(s->srv, (double)(emitted_us - ready_us) * 1e-6);
}

void fanout_chunk(server *srv, chunk_out *co) {
  stream *s = co->s;
  record_latency(s, co->h.ready_us, co->h.emitted_us);
  for (delivery *d = s->loop.deliveries; d != NULL; d = d->next_in_stream) {
    conn *c = d->sub->c;
    if (c->closing || c->fatal_sent) continue;
    uint8_t dt = d->sub->dtype;
    uint32_t out = d->sub->outputs & AURAL_OUT_ALL;
    bool want_words = (d->sub->outputs & AURAL_OUT_WORDS) != 0;
    /* The chunk's messages for this subscriber, CHUNK then WORDS (either
     * may be absent), queued together or lost together. */
    msgbuf *m[2] = {NULL, NULL}, *own = NULL;
    size_t n_msgs = 0, bytes = 0;
    bool made = true;
    /* A decoder of its own runs on every chunk, delivered or not, so that
     * its hypothesis stays whole. */
    if (d->dec != NULL && co->logits != NULL) own = decode_for(srv, d, co);
    if (out != 0) m[n_msgs++] = chunk_variant(srv, co, out, dt);
    if (want_words && d->dec != NULL) {
      m[n_msgs++] = own;
    } else if (want_words) {
      m[n_msgs++] = chunk_words_message(co);
    }
    for (size_t i = 0; i < n_msgs; i++) {
      made = made && m[i] != NULL;
      bytes += m[i] != NULL ? m[i]->len : 0;
    }
    bool fits = made && c->q_len + n_msgs + 1 <= CONN_CHUNK_CAP &&
                c->q_bytes + bytes <= srv->opt->sub_hard_bytes;
    if (!fits) {
      if (d->gap_n == 0) d->gap_first = co->h.seq;
      d->gap_n++;
      d->sub->dropped++;
      srv->counters.chunks_dropped++;
      msgbuf_unref(own);
      continue;
    }
    flush_gap(d);
    for (size_t i = 0; i < n_msgs; i++) conn_send(c, m[i]);
    msgbuf_unref(own);
    d->sub->sent++;
  }
  s->loop.chunks_emitted++;
}

void fanout_ended(server *srv, stream *s) {
  (void)srv;
  aural_msg_stream_ended e = {.reason = (uint8_t)s->sched.reason,
                              .frames = s->work.next_frame,
                              .chunks = s->loop.chunks_emitted};
  memcpy(e.name, s->name, sizeof e.name);
  snprintf(e.message, sizeof e.message, "%s", s->sched.message);
  /* The message may need escaping: 6 bytes a byte. */
  uint8_t buf[AURAL_PROTO_HEADER_BYTES + 4096];
  msgbuf *m = msgbuf_from(
      buf, aural_proto_encode_stream_ended(buf, sizeof buf, s->id, &e));
  while (s->loop.deliveries != NULL) {
    delivery *d = s->loop.deliveries;
    s->loop.deliveries = d->next_in_stream;
    if (!d->sub->c->closing) {
      flush_gap(d);
      conn_send(d->sub->c, m);
    }
    delivery_free(d);
  }
  msgbuf_unref(m);
}

/* ---- announcing, and the end of streams -------------------------------- */

/* Announces the stream to matching subscriptions and lets workers at it.
 * With --hold, a file or microphone stream nobody receives yet waits for
 * its first subscriber (deliveries_attach releases it), so that no audio
 * is processed before someone listens. */
int stream_start(stream *s) {
  server *srv = s->srv;
  bool hold = srv->opt->hold && s->source != SRC_CLIENT;
  pthread_mutex_lock(&srv->mu);
  s->sched.held = hold;
  pthread_mutex_unlock(&srv->mu);
  /* Released before it is announced, so that STREAM_STARTED carries the
   * start_us every later message gives (a held one is released by its
   * first match, before that match's announcement). */
  if (!hold) stream_release(s);
  for (conn *c = srv->conns; c != NULL; c = c->next) {
    if (c->closing) continue;
    for (subscription *sub = c->subs; sub != NULL; sub = sub->next)
      if (sub->all || strcmp(sub->name, s->name) == 0)
        deliveries_attach(srv, sub, s);
  }
  return 0;
}

static void delivery_free(delivery *d) {
  aural_decoder_destroy(d->dec);
  free(d->words);
  free(d->segments);
  free(d);
}

/* The decoder of a subscription's custom words for one delivery. */
static int delivery_decoder(server *srv, delivery *d, const subscription *sub) {
  aural_decoder_config dc;
  aural_decoder_config_default(&dc);
  dc.boost_words = sub->custom;
  dc.boost = sub->boost;
  aural_err err = {0};
  d->words = malloc(srv->words_max * sizeof *d->words);
  d->segments = malloc(srv->segments_max * sizeof *d->segments);
  if (d->words == NULL || d->segments == NULL ||
      aural_decoder_create(&dc, srv->model, srv->lexicon, srv->lm, &d->dec,
                           &err) < 0) {
    log_warn("custom words: %s", err.msg[0] ? err.msg : "out of memory");
    aural_decoder_destroy(d->dec);
    free(d->words);
    free(d->segments);
    return -1;
  }
  return 0;
}

void deliveries_attach(server *srv, subscription *sub, stream *s) {
  if (sub->c->closing) return; /* reaped soon: its deliveries go then */
  for (delivery *d = s->loop.deliveries; d != NULL; d = d->next_in_stream)
    if (d->sub == sub) return;
  delivery *d = calloc(1, sizeof *d);
  if (d == NULL || (sub->custom != NULL && delivery_decoder(srv, d, sub) < 0)) {
    free(d);
    conn_send_error(sub->c, s->id, AURAL_PROTO_EINTERNAL, false,
                    "out of memory subscribing to %s", s->name);
    return;
  }
  d->sub = sub;
  d->s = s;
  d->next_in_stream = s->loop.deliveries;
  s->loop.deliveries = d;
  if (s->sched.held) stream_release(s);
  send_stream_started(d);
}

void delivery_remove_sub(server *srv, subscription *sub) {
  for (stream *s = srv->streams; s != NULL; s = s->loop.next)
    for (delivery **pp = &s->loop.deliveries; *pp != NULL;) {
      delivery *d = *pp;
      if (d->sub == sub) {
        *pp = d->next_in_stream;
        delivery_free(d);
      } else {
        pp = &d->next_in_stream;
      }
    }
}

static void free_chunk(chunk_out *co) {
  for (int t = 0; t < 2; t++)
    for (int o = 0; o < 8; o++) msgbuf_unref(co->variants[t][o]);
  msgbuf_unref(co->words_msg);
  free(co->words);
  free(co);
}

/* The end of a stream, on the loop: subscribers get STREAM_ENDED, the
 * client that closed it AUDIO_CLOSED, and the stream goes. The worker
 * cleared `sched.busy` before queueing this event, and an ended stream is
 * never queued again, so nobody else holds it. */
static void finish_stream(server *srv, stream *s) {
  if (s->loop.on_end != NULL) s->loop.on_end(s);
  log_info("stream %u \"%s\": ended (%s%s%s), %llu frames, %llu chunks",
           s->id, s->name, end_reason_name(s->sched.reason),
           s->sched.message[0] ? ": " : "", s->sched.message,
           (unsigned long long)s->work.next_frame,
           (unsigned long long)s->loop.chunks_emitted);
  fanout_ended(srv, s);
  if (s->loop.owner != NULL) {
    conn *c = s->loop.owner;
    c->n_streams--;
    if (s->sched.reason == END_CLOSED) {
      aural_msg_audio_closed m = {.frames = s->work.next_frame,
                                  .chunks = s->loop.chunks_emitted};
      uint8_t buf[AURAL_PROTO_HEADER_BYTES + 96];
      conn_send_bytes(c, buf,
                      aural_proto_encode_audio_closed(buf, sizeof buf, s->id,
                                                      &m));
    }
    conn_close_if_finished(c);
  }
  bool was_file = s->source == SRC_FILE;
  stream_unlink(srv, s);
  stream_destroy(s);
  /* The tick stops the server for --exit-when-done (main.c). */
  if (was_file && --srv->n_file_streams_left == 0) srv->files_done = true;
}

void server_on_done(uv_async_t *a) {
  server *srv = a->data;
  pthread_mutex_lock(&srv->mu);
  chunk_out *list = srv->done_head;
  srv->done_head = srv->done_tail = NULL;
  pthread_mutex_unlock(&srv->mu);
  while (list != NULL) {
    chunk_out *co = list;
    list = co->next;
    stream *s = co->s;
    if (co->is_end) { /* s->work.end_event, freed with the stream */
      finish_stream(srv, s);
      continue;
    }
    co->h.emitted_us = aurald_now_us();
    if (s->loop.on_chunk == NULL || s->loop.on_chunk(s, co))
      fanout_chunk(srv, co);
    free_chunk(co);
    /* Its client may be waiting for the backlog to drain: it reads on at
     * the next iteration's `later` pass (conn.c). */
    conn *owner = s->loop.owner;
    if (owner != NULL && owner->paused && !owner->closing) {
      owner->drained = true;
      conn_later(owner);
    }
  }
}
