/*
 * The write side of connections: the bounded queue every message to a
 * client goes through, and the marking of a connection dead.
 *
 * A connection never blocks anything else. Its outgoing messages are
 * references to shared buffers in a fixed ring (CONN_QUEUE_CAP entries);
 * one uv_write with up to CONN_WRITE_BATCH buffers is in flight at a time.
 * Fan-out (fanout.c) decides whether a chunk fits under the limits before
 * queueing it. Nothing here calls the read side (conn.c): a connection
 * that dies, or whose replies have drained while its reading waits, is put
 * on the server's `later` list, which conn.c drains at the start of the
 * next loop iteration.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

static void kick_write(conn *c);

void conn_write_done(conn *c, int status) {
  for (size_t i = 0; i < c->n_inflight; i++) {
    msgbuf *m = c->q[c->q_head];
    c->q_bytes -= m->len;
    msgbuf_unref(m);
    c->q[c->q_head] = NULL;
    c->q_head = (c->q_head + 1) % CONN_QUEUE_CAP;
    c->q_len--;
  }
  c->n_inflight = 0;
  if (c->closing) return;
  if (status < 0) {
    log_debug("client %u: write failed: %s", c->id, uv_strerror(status));
    conn_kill(c);
    return;
  }
  if (c->q_len == 0 && c->fatal_sent) {
    conn_kill(c);
    return;
  }
  conn_close_if_finished(c);
  if (c->closing) return;
  kick_write(c);
  if (c->paused) { /* the reader waits for room: wake it next turn */
    c->drained = true;
    conn_later(c);
  }
}

static void on_write(uv_write_t *req, int status) {
  conn_write_done(req->data, status);
}

static void kick_write(conn *c) {
  if (c->closing || c->n_inflight > 0 || c->q_len == 0) return;
  if (c->tr != NULL) {
    c->tr->write(c);
    return;
  }
  size_t n = c->q_len < CONN_WRITE_BATCH ? c->q_len : CONN_WRITE_BATCH;
  for (size_t i = 0; i < n; i++) {
    msgbuf *m = c->q[(c->q_head + i) % CONN_QUEUE_CAP];
    c->wbufs[i] = uv_buf_init((char *)m->data, (unsigned)m->len);
  }
  c->n_inflight = n;
  c->wreq.data = c;
  int rc = uv_write(&c->wreq, (uv_stream_t *)&c->pipe, c->wbufs,
                    (unsigned)n, on_write);
  if (rc < 0) {
    c->n_inflight = 0;
    log_debug("client %u: write: %s", c->id, uv_strerror(rc));
    conn_kill(c);
  }
}

void conn_send(conn *c, msgbuf *m) {
  if (c->closing || c->fatal_sent || m == NULL) return;
  if (c->q_len == CONN_QUEUE_CAP) {
    /* Only control replies get here unchecked; a client that lets 4096
     * messages pile up is not reading at all. */
    char who[32];
    log_warn("client %u%s: %d messages queued; disconnecting", c->id,
             conn_peer(c, who, sizeof who), CONN_QUEUE_CAP);
    conn_kill(c);
    return;
  }
  m->refs++;
  c->q[(c->q_head + c->q_len) % CONN_QUEUE_CAP] = m;
  c->q_len++;
  c->q_bytes += m->len;
  kick_write(c);
}

void conn_send_bytes(conn *c, const void *data, size_t len) {
  if (len == 0) {
    conn_send_error(c, 0, AURAL_PROTO_EINTERNAL, false, "reply too large");
    return;
  }
  msgbuf *m = msgbuf_from(data, len);
  if (m == NULL) {
    conn_kill(c);
    return;
  }
  conn_send(c, m);
  msgbuf_unref(m);
}

size_t conn_error_message(conn *c, uint8_t *buf, size_t cap,
                          uint32_t stream_id, int code, bool fatal,
                          const char *fmt, va_list ap) {
  char text[400];
  vsnprintf(text, sizeof text, fmt, ap);
  log_debug("client %u: %s %s: %s", c->id, fatal ? "fatal" : "error",
            aural_proto_error_name(code), text);
  return aural_proto_encode_error(buf, cap, stream_id, code, text, fatal);
}

void conn_send_error(conn *c, uint32_t stream_id, int code, bool fatal,
                     const char *fmt, ...) {
  uint8_t buf[1024];
  va_list ap;
  va_start(ap, fmt);
  size_t n = conn_error_message(c, buf, sizeof buf, stream_id, code, fatal,
                                fmt, ap);
  va_end(ap);
  if (n > 0) conn_send_bytes(c, buf, n);
  if (fatal) {
    c->fatal_sent = true;
    c->fatal_code = code;
    c->fatal_at = aurald_mono_s();
    conn_read_stop(c);
    if (c->q_len == 0) conn_kill(c);
  }
}

void conn_later(conn *c) {
  server *srv = c->srv;
  if (c->in_later) return;
  c->in_later = true;
  c->later_next = srv->later_head;
  srv->later_head = c;
  if (!uv_is_closing((uv_handle_t *)&srv->later))
    uv_idle_start(&srv->later, srv->on_later);
}

void conn_read_stop(conn *c) {
  if (!c->reading) return;
  if (c->tr != NULL) c->tr->read_stop(c);
  else uv_read_stop((uv_stream_t *)&c->pipe);
  c->reading = false;
}

void conn_close_if_finished(conn *c) {
  if (c->eof && c->n_streams == 0 && c->n_subs == 0 &&
      c->pronouncing == NULL && c->q_len == 0)
    conn_kill(c);
}

const char *conn_peer(const conn *c, char *buf, size_t n) {
  if (c->tr != NULL)
    snprintf(buf, n, " (WebSocket)");
  else
    snprintf(buf, n, " (pid %ld, uid %u)", (long)c->pid, (unsigned)c->uid);
  return buf;
}

void conn_kill(conn *c) {
  if (c->closing) return;
  c->closing = true;
  conn_read_stop(c);
  conn_later(c);
}

