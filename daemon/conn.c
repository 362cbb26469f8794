/*
 * Client connections: accepting them, reading and framing requests, and
 * answering them (through the write queue of out.c); the tick timer
 * disconnects clients that stay above the soft limit too long. A
 * connection is never freed inside its own callbacks: conn_kill() (out.c)
 * marks it, the `later` pass here reaps it and asks uv_close, and the
 * memory goes in on_close.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon.h"

#define READ_CHUNK 65536
#define FATAL_GRACE_S 1.0 /* a fatal error's queue must drain within this */

/* Queued bytes whose release is worth handing memory back for: the heap
 * keeps up to M_TRIM_THRESHOLD (main.c) of free memory for the steady
 * churn of chunks, and a slow subscriber's queue can leave more. */
#define CONN_TRIM_BYTES (1u << 20)

static void pronounce_job_let_go(struct pronounce_job *j);

static void on_close(uv_handle_t *h) {
  conn *c = h->data;
  server *srv = c->srv;
  if (c->pronouncing != NULL) pronounce_job_let_go(c->pronouncing);
  bool trim = c->q_bytes >= CONN_TRIM_BYTES;
  for (size_t i = 0; i < c->q_len; i++)
    msgbuf_unref(c->q[(c->q_head + i) % CONN_QUEUE_CAP]);
  free(c->q);
  free(c->rbuf);
  if (c->prev) c->prev->next = c->next;
  else srv->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  srv->n_conns--;
  free(c);
  if (trim) malloc_trim(0);
}

static void subscription_free(server *srv, subscription *sub) {
  if (sub->custom != NULL) srv->n_vocab_subs--;
  aural_lexicon_destroy(sub->custom);
  free(sub);
}

/* Takes c's subscriptions and streams from it and closes its handle. Runs
 * only where nobody up the stack holds c's subscriptions or deliveries:
 * the `later` pass, or the shutdown's last step. */
static void conn_reap(conn *c) {
  if (c->reaped) return;
  c->reaped = true;
  server *srv = c->srv;
  while (c->subs != NULL) {
    subscription *sub = c->subs;
    c->subs = sub->next;
    delivery_remove_sub(srv, sub);
    subscription_free(srv, sub);
  }
  c->n_subs = 0;
  if (c->n_streams > 0)
    for (stream *s = srv->streams; s != NULL; s = s->loop.next)
      if (s->loop.owner == c) {
        s->loop.owner = NULL;
        stream_end_input(s, END_DISCONNECTED, "its client disconnected");
      }
  log_debug("client %u: closed", c->id);
  if (c->tr != NULL) c->tr->detach(c);
  uv_close((uv_handle_t *)&c->pipe, on_close);
}

static void resume_input(conn *c);

/* The `later` pass, at the start of a loop iteration (out.c queues the
 * connections): dead ones are reaped, and those whose input was left for
 * later, or whose replies have drained, read on. */
void conn_on_later(uv_idle_t *h) {
  server *srv = h->data;
  conn *list = srv->later_head;
  srv->later_head = NULL;
  /* What a connection does here may queue it (or another one already
   * passed) again, on the new list, for the next iteration. */
  for (conn *c = list, *next; c != NULL; c = next) {
    next = c->later_next;
    c->in_later = false;
    if (c->closing) {
      conn_reap(c);
      continue;
    }
    if (c->yielded) {
      c->yielded = false;
      resume_input(c);
    }
    if (c->drained && !c->closing) {
      c->drained = false;
      conn_resume_if_drained(c);
    }
  }
  if (srv->later_head == NULL) uv_idle_stop(h);
}

void conn_reap_all(server *srv) {
  for (conn *c = srv->conns; c != NULL; c = c->next)
    if (c->closing) conn_reap(c);
  srv->later_head = NULL;
}

/* ---- reading ------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn *c = h->data;
  (void)suggested;
  if (c->rcap - c->rlen < READ_CHUNK / 4) {
    size_t cap = c->rcap * 2;
    size_t need = c->rlen + READ_CHUNK;
    if (cap < need) cap = need;
    uint8_t *p = realloc(c->rbuf, cap);
    if (p == NULL) {
      buf->base = NULL;
      buf->len = 0;
      return;
    }
    c->rbuf = p;
    c->rcap = cap;
  }
  buf->base = (char *)c->rbuf + c->rlen;
  buf->len = c->rcap - c->rlen;
}

static void pause_reading(conn *c) {
  c->paused = true;
  conn_read_stop(c);
}

static size_t handle_message(conn *c, const aural_msg_header *h,
                             const uint8_t *payload, size_t n);

static bool pronouncing(const conn *c);
static void pronounced_unused(conn *c);

/* What one connection may make the loop do in one turn: past this many
 * requests or bytes its input waits for the next iteration (the `later`
 * pass), so that a client pipelining thousands of requests delays the
 * others by one turn's worth, not by all of its requests (redis stops a
 * client's query buffer the same way). */
#define TURN_REQUESTS 32
#define TURN_BYTES (1u << 20)

/* Handles the complete messages in rbuf, stopping when the connection
 * closes, pauses for flow control, has used its turn or waits for a
 * request's custom words to be pronounced. A message can be
 * taken in parts: an AUDIO_DATA larger than its stream's free input room
 * is consumed up to it (c->rskip bytes of its payload so far) and the rest
 * waits, with reading paused, until the workers catch up. */
static void process_input(conn *c) {
  server *srv = c->srv;
  size_t at = 0, turn_bytes = 0;
  int turn_requests = 0;
  while (!c->closing && !c->fatal_sent && !c->paused && !pronouncing(c)) {
    if (c->q_len >= CONN_QUEUE_CAP / 2 ||
        c->q_bytes >= srv->opt->sub_soft_bytes) {
      /* Requests come faster than their replies are read: stop reading
       * until the queue drains, as with audio backlog. Bytes count as
       * well as messages: a stream list or a STATS page can be most of a
       * megabyte, and the replies of half the queue a gigabyte. */
      pause_reading(c);
      break;
    }
    aural_msg_header h;
    int rc = aural_proto_decode_header(c->rbuf + at, c->rlen - at,
                                       srv->opt->max_request_bytes, &h);
    if (rc == AURAL_PROTO_MORE) break;
    if (rc < 0) {
      conn_send_error(c, 0, rc, true, "%s at byte %zu of the connection",
                      aural_proto_strerror(rc), at);
      break;
    }
    size_t total = AURAL_PROTO_HEADER_BYTES + (size_t)h.payload_bytes;
    if (c->rlen - at < total) break;
    if (turn_requests >= TURN_REQUESTS || turn_bytes >= TURN_BYTES) {
      c->yielded = true;
      conn_read_stop(c);
      conn_later(c);
      break;
    }
    const uint8_t *payload = c->rbuf + at + AURAL_PROTO_HEADER_BYTES;
    size_t n = h.payload_bytes - c->rskip;
    size_t used = handle_message(c, &h, payload + c->rskip, n);
    turn_requests++;
    turn_bytes += used + (c->rskip == 0 ? AURAL_PROTO_HEADER_BYTES : 0);
    if (used < n) {
      c->rskip += used;
      break;
    }
    c->rskip = 0;
    at += total;
    pronounced_unused(c);
  }
  if (c->closing || at == 0) return;
  memmove(c->rbuf, c->rbuf + at, c->rlen - at);
  c->rlen -= at;
  /* Keep a large buffer only while a large message is arriving. */
  if (c->rlen == 0 && c->rcap > 4 * READ_CHUNK) {
    free(c->rbuf);
    c->rbuf = NULL;
    c->rcap = 0;
  }
}

/* Whether c's client has closed its socket, not only shut its side: a
 * Unix socket whose peer is gone polls as hung up. */
static bool peer_closed(conn *c) {
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0) return true;
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  return poll(&p, 1, 0) != 1 || (p.revents & (POLLHUP | POLLERR)) != 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf) {
  conn *c = st->data;
  (void)buf;
  if (nread == UV_ENOBUFS) {
    log_error("client %u: out of memory for input", c->id);
    conn_kill(c);
    return;
  }
  if (nread == UV_EOF && c->tr == NULL && !peer_closed(c)) {
    /* A half-close (shutdown(SHUT_WR), `nc -N`): the client sends nothing
     * more but still reads, so what it asked for (its streams' ends, its
     * subscriptions' chunks) goes on until it is owed nothing. */
    log_debug("client %u: shut its side", c->id);
    c->eof = true;
    conn_read_stop(c);
    /* A stream it left open can have no more audio: it ends as when its
     * client goes away, and the connection is owed its end. */
    if (c->n_streams > 0)
      for (stream *s = c->srv->streams; s != NULL; s = s->loop.next)
        if (s->loop.owner == c && !s->loop.closed_by_client)
          stream_end_input(s, END_DISCONNECTED,
                           "its client shut its side without AUDIO_CLOSE");
    conn_close_if_finished(c);
    return;
  }
  if (nread < 0) {
    if (nread != UV_EOF)
      log_debug("client %u: read: %s", c->id, uv_strerror((int)nread));
    conn_kill(c);
    return;
  }
  c->rlen += (size_t)nread;
  process_input(c);
}

static void start_reading(conn *c) {
  if (c->reading || c->closing || c->fatal_sent || c->paused || c->yielded ||
      c->eof || pronouncing(c))
    return;
  if (c->tr != NULL) {
    c->tr->read_start(c);
    c->reading = true;
    return;
  }
  if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) == 0)
    c->reading = true;
}

/* Handles what input is buffered, then reads on unless that paused or
 * yielded again. Never once the server stops: it reads no more requests
 * (server_stop), and a connection whose input waited (for room, for its
 * turn, for its custom words) was read again when that ended, so that
 * a pusher's stream opened or fed after SIGTERM held the shutdown. */
static void resume_input(conn *c) {
  if (c->srv->stopping) return;
  process_input(c);
  start_reading(c);
}

/* Flow control: a client feeding a stream with a backlog, or whose replies
 * pile up unread, is not read until the workers or the client have caught
 * up. */
void conn_resume_if_drained(conn *c) {
  if (!c->paused || c->closing || c->srv->stopping ||
      c->q_len >= CONN_QUEUE_CAP / 4 ||
      c->q_bytes >= c->srv->opt->sub_soft_bytes / 2)
    return;
  if (c->n_streams > 0)
    for (stream *s = c->srv->streams; s != NULL; s = s->loop.next)
      if (s->loop.owner == c && stream_backlogged(s)) return;
  c->paused = false;
  resume_input(c);
}

/* ---- requests ------------------------------------------------------------ */

/* A member of --group (any user but aurald's own and root) holds at most
 * half of the server's connections, half of its streams and half of its
 * subscriptions with custom words (AURALD_VOCAB_SUBS): otherwise
 * one such user could take every place and lock the others out (LIMIT
 * for everyone else). A daemon's own user and root are not counted:
 * without --group every client is one of them. The WebSocket clients of
 * an --http without --http-token-file are any local user's (TCP carries
 * no credentials): they share one such half among them all; with a token
 * they are the token holder's, and not counted. */
static bool user_capped(uid_t uid) {
  return uid != geteuid() && uid != 0;
}

/* Whether the WebSocket clients are counted: without a token to say
 * whose they are. */
static bool web_capped(const server *srv) {
  return srv->opt->http.token_file == NULL;
}

static bool conn_capped(const conn *c) {
  return c->tr != NULL ? web_capped(c->srv) : user_capped(c->uid);
}

/* Whether a's places count against the same share as b's. */
static bool same_holder(const conn *a, const conn *b) {
  return (a->tr == NULL) == (b->tr == NULL) &&
         (a->tr != NULL || a->uid == b->uid);
}

static int user_share(int limit) {
  return limit / 2 + limit % 2;
}

/* Live connections of c's holder other than c. */
static int holder_conns(const conn *c) {
  int n = 0;
  for (conn *o = c->srv->conns; o != NULL; o = o->next)
    if (o != c && !o->closing && same_holder(o, c)) n++;
  return n;
}

/* Streams fed by connections of c's holder. */
static int holder_streams(const conn *c) {
  int n = 0;
  for (conn *o = c->srv->conns; o != NULL; o = o->next)
    if (same_holder(o, c)) n += o->n_streams;
  return n;
}

/* Subscriptions with custom words of connections of c's holder. */
static int holder_vocab_subs(const conn *c) {
  int n = 0;
  for (conn *o = c->srv->conns; o != NULL; o = o->next)
    if (same_holder(o, c))
      for (subscription *sub = o->subs; sub != NULL; sub = sub->next)
        n += sub->custom != NULL;
  return n;
}

/* Whose share c's places count against, for an ERROR: "uid 1001" (in
 * buf), or the WebSocket clients. */
static const char *holder_name(const conn *c, char *buf, size_t n) {
  if (c->tr != NULL) return "the WebSocket clients without a token together";
  snprintf(buf, n, "uid %u", (unsigned)c->uid);
  return buf;
}

bool conn_web_share_full(server *srv, int *share) {
  *share = user_share(srv->opt->max_clients);
  if (!web_capped(srv)) return false;
  int n = 0;
  for (conn *o = srv->conns; o != NULL; o = o->next)
    n += !o->closing && o->tr != NULL;
  return n >= *share;
}

/* The WELCOME with the connection's own id as "client": the id STATS
 * lists its subscriptions under. srv->welcome is the same message without
 * it, so this one is at most a few bytes longer. */
static void send_welcome(conn *c) {
  server *srv = c->srv;
  msgbuf *m = msgbuf_new(srv->welcome->len + 32);
  if (m == NULL) {
    conn_kill(c);
    return;
  }
  aural_msg_welcome w = srv->welcome_msg;
  w.client = c->id;
  size_t n = aural_proto_encode_welcome(m->data, m->len, &w, srv->vocab);
  msgbuf_live_bytes -= m->len - n;
  m->len = n;
  if (n > 0) conn_send(c, m);
  msgbuf_unref(m);
}

/* A request's payload, decoded (the ones that have a payload to decode). */
typedef union request {
  aural_msg_hello hello;
  aural_msg_subscribe subscribe;
  uint32_t unsubscribe; /* the subscription's id */
  aural_msg_audio_open audio_open;
  aural_msg_stats stats;
} request;

/* Decodes the payload of a request of type `type` into r, when that type
 * has one to decode. A payload that does not decode is answered with
 * BAD_PAYLOAD saying why (fatal for a HELLO). Returns whether the request
 * is to be handled. */
static bool decode_request(conn *c, uint8_t type, const uint8_t *p,
                           size_t n, request *r) {
  char why[200];
  int rc;
#define DECODE(t, what)                                                      \
  case t:                                                                    \
    rc = aural_proto_decode_##what(p, n, &r->what, why, sizeof why);         \
    break
  switch (type) {
    DECODE(AURAL_MSG_HELLO, hello);
    DECODE(AURAL_MSG_SUBSCRIBE, subscribe);
    DECODE(AURAL_MSG_UNSUBSCRIBE, unsubscribe);
    DECODE(AURAL_MSG_AUDIO_OPEN, audio_open);
    DECODE(AURAL_MSG_STATS, stats);
#undef DECODE
  default:
    return true;
  }
  if (rc >= 0) return true;
  conn_send_error(c, 0, AURAL_PROTO_EBAD_PAYLOAD, type == AURAL_MSG_HELLO,
                  "%s", why);
  return false;
}

static void do_hello(conn *c, const aural_msg_hello *m) {
  if (!(m->versions & (1u << AURAL_PROTO_VERSION))) {
    conn_send_error(c, 0, AURAL_PROTO_EVERSION, true,
                    "this server speaks protocol version %d only",
                    AURAL_PROTO_VERSION);
    return;
  }
  c->hello_done = true;
  log_debug("client %u: hello from \"%s\" (uid %u, pid %ld)", c->id,
            m->client, (unsigned)c->uid, (long)c->pid);
  send_welcome(c);
}

/* ---- custom words ---------------------------------------------------------
 *
 * espeak-ng takes 5-20 ms to pronounce a request's words, so they are
 * pronounced on libuv's thread pool (aural_g2p_lexicon is thread-safe):
 * on the loop, a client pipelining such requests held up every other
 * client for seconds. Meanwhile the request stays at the head of its
 * connection's input, which is neither read nor handled; once the words
 * are done the request is handled again from the start (the server may
 * have changed in between) and takes the lexicon or the error. */
typedef struct pronounce_job {
  uv_work_t req;
  conn *c; /* NULL once the connection is gone */
  const aural_g2p *g2p;
  aural_msg_vocabulary words;
  bool done;
  aural_lexicon *lex; /* the words' lexicon, or NULL and err */
  aural_err err;
} pronounce_job;

static bool pronouncing(const conn *c) {
  return c->pronouncing != NULL && !c->pronouncing->done;
}

static void pronounce_job_free(pronounce_job *j) {
  aural_lexicon_destroy(j->lex);
  free(j);
}

/* The connection is going: a job still on the pool frees itself when
 * done. */
static void pronounce_job_let_go(pronounce_job *j) {
  if (j->done) pronounce_job_free(j);
  else j->c = NULL;
}

/* A request handled to its end that did not take its pronounced words
 * (refused for another reason when handled again). */
static void pronounced_unused(conn *c) {
  if (c->pronouncing == NULL || !c->pronouncing->done) return;
  pronounce_job_free(c->pronouncing);
  c->pronouncing = NULL;
}

static void pronounce_work(uv_work_t *req) {
  pronounce_job *j = req->data;
  const char *words[AURAL_PROTO_VOCAB_MAX];
  for (uint32_t i = 0; i < j->words.n_words; i++) words[i] = j->words.words[i];
  if (aural_g2p_lexicon(j->g2p, words, j->words.n_words, &j->lex, &j->err) <
      0)
    j->lex = NULL;
}

static void pronounce_done(uv_work_t *req, int status) {
  pronounce_job *j = req->data;
  j->done = true;
  if (status != 0 && j->lex == NULL && j->err.msg[0] == '\0')
    snprintf(j->err.msg, sizeof j->err.msg, "custom words: %s",
             uv_strerror(status));
  if (j->c == NULL) {
    pronounce_job_free(j);
    return;
  }
  if (!j->c->closing) resume_input(j->c);
}

/* Starts pronouncing v for c's request, or sends the error that it
 * cannot. */
static void pronounce_start(conn *c, const aural_msg_vocabulary *v) {
  pronounce_job *j = calloc(1, sizeof *j);
  if (j != NULL) {
    j->req.data = j;
    j->c = c;
    j->g2p = c->srv->g2p;
    j->words = *v;
    if (uv_queue_work(c->srv->loop, &j->req, pronounce_work,
                      pronounce_done) == 0) {
      c->pronouncing = j;
      conn_read_stop(c);
      return;
    }
    free(j);
  }
  conn_send_error(c, 0, AURAL_PROTO_EINTERNAL, false,
                  "cannot pronounce custom words now (out of memory)");
}

/* The lexicon of a request's custom words, or NULL with the error sent
 * (and NULL, no error, when it names none). *failed says which; it is
 * also set while the words are being pronounced (pronouncing(c)), and the
 * request is handled again when they are. */
static aural_lexicon *custom_words(conn *c, const aural_msg_vocabulary *v,
                                   bool *failed) {
  server *srv = c->srv;
  *failed = false;
  if (v->n_words == 0) return NULL;
  *failed = true;
  if (srv->lexicon == NULL || srv->g2p == NULL) {
    conn_send_error(c, 0, AURAL_PROTO_ENO_WORDS, false,
                    "this server has no %s: no custom words",
                    srv->lexicon == NULL ? "lexicon" : "g2p map beside its model");
    return NULL;
  }
  pronounce_job *j = c->pronouncing;
  if (j == NULL) {
    pronounce_start(c, v);
    return NULL;
  }
  c->pronouncing = NULL;
  aural_lexicon *lex = j->lex;
  j->lex = NULL;
  if (lex == NULL)
    conn_send_error(c, 0, AURAL_PROTO_EBAD_PAYLOAD, false, "%s", j->err.msg);
  pronounce_job_free(j);
  *failed = lex == NULL;
  return lex;
}

/* A new subscription's id: the next of the connection's count, but never
 * 0, which UNSUBSCRIBE cannot name, nor the id of one the connection
 * still holds. A client that subscribes and unsubscribes 2^32 times on one
 * connection wraps the count; it then got 0, and after it the ids of its
 * live subscriptions, so that UNSUBSCRIBE removed the older one. */
static uint32_t new_sub_id(conn *c) {
  for (;;) {
    uint32_t id = ++c->next_sub_id;
    bool used = id == 0;
    for (subscription *o = c->subs; o != NULL && !used; o = o->next)
      used = o->id == id;
    if (!used) return id;
  }
}

static void do_subscribe(conn *c, const aural_msg_subscribe *m) {
  server *srv = c->srv;
  if ((m->outputs & (AURAL_OUT_LOGITS | AURAL_OUT_TEXT)) &&
      srv->mc->vocab_size == 0) {
    conn_send_error(c, 0, AURAL_PROTO_ENO_HEAD, false,
                    "the model has no CTC head: only embeddings");
    return;
  }
  if ((m->outputs & AURAL_OUT_WORDS) && srv->lexicon == NULL) {
    conn_send_error(c, 0, AURAL_PROTO_ENO_WORDS, false,
                    "this server has no lexicon: no words (aurald "
                    "--lexicon and --lm)");
    return;
  }
  for (subscription *o = c->subs; o != NULL; o = o->next)
    if (o->all || m->all || strcmp(o->name, m->stream) == 0) {
      conn_send_error(c, 0, AURAL_PROTO_ESTATE, false,
                      "overlaps subscription %u (%s); unsubscribe first",
                      o->id, o->all ? "all streams" : o->name);
      return;
    }
  if (c->n_subs >= CONN_MAX_SUBS) {
    conn_send_error(c, 0, AURAL_PROTO_ELIMIT, false,
                    "at most %d subscriptions per connection",
                    CONN_MAX_SUBS);
    return;
  }
  if (m->vocabulary.n_words > 0 && m->all) {
    conn_send_error(c, 0, AURAL_PROTO_EBAD_PAYLOAD, false,
                    "subscribe: custom words need a named stream, not "
                    "\"all\"");
    return;
  }
  if (m->vocabulary.n_words > 0 && srv->n_vocab_subs >= AURALD_VOCAB_SUBS) {
    conn_send_error(c, 0, AURAL_PROTO_ELIMIT, false,
                    "at most %d subscriptions with custom words at once",
                    AURALD_VOCAB_SUBS);
    return;
  }
  char who[32];
  if (m->vocabulary.n_words > 0 && conn_capped(c) &&
      holder_vocab_subs(c) >= user_share(AURALD_VOCAB_SUBS)) {
    conn_send_error(c, 0, AURAL_PROTO_ELIMIT, false,
                    "the share of subscriptions with custom words of %s "
                    "is reached: %d, half of the server's %d",
                    holder_name(c, who, sizeof who),
                    user_share(AURALD_VOCAB_SUBS), AURALD_VOCAB_SUBS);
    return;
  }
  bool failed;
  aural_lexicon *custom = custom_words(c, &m->vocabulary, &failed);
  if (failed) return;
  subscription *sub = calloc(1, sizeof *sub);
  if (sub == NULL) {
    aural_lexicon_destroy(custom);
    conn_send_error(c, 0, AURAL_PROTO_EINTERNAL, false, "out of memory");
    return;
  }
  if (custom != NULL) {
    aural_decoder_config dc;
    aural_decoder_config_default(&dc);
    sub->custom = custom;
    sub->boost = m->vocabulary.has_boost ? (float)m->vocabulary.boost : dc.boost;
    srv->n_vocab_subs++;
  }
  sub->c = c;
  sub->id = new_sub_id(c);
  sub->all = m->all;
  memcpy(sub->name, m->stream, sizeof sub->name);
  sub->outputs = m->outputs;
  sub->dtype = m->dtype;
  sub->next = c->subs;
  c->subs = sub;
  c->n_subs++;

  aural_msg_subscribed reply = {.subscription = sub->id,
                                .all = sub->all,
                                .outputs = sub->outputs,
                                .dtype = sub->dtype};
  memcpy(reply.stream, sub->name, sizeof reply.stream);
  uint8_t buf[AURAL_PROTO_HEADER_BYTES + 512];
  conn_send_bytes(c, buf,
                  aural_proto_encode_subscribed(buf, sizeof buf, &reply));

  for (stream *s = srv->streams; s != NULL; s = s->loop.next)
    if (sub->all || strcmp(sub->name, s->name) == 0)
      deliveries_attach(srv, sub, s);
}

static void do_unsubscribe(conn *c, uint32_t id) {
  for (subscription **pp = &c->subs; *pp != NULL; pp = &(*pp)->next) {
    subscription *sub = *pp;
    if (sub->id != id) continue;
    *pp = sub->next;
    c->n_subs--;
    delivery_remove_sub(c->srv, sub);
    subscription_free(c->srv, sub);
    uint8_t buf[AURAL_PROTO_HEADER_BYTES + 64];
    conn_send_bytes(c, buf,
                    aural_proto_encode_unsubscribed(buf, sizeof buf, id));
    return;
  }
  conn_send_error(c, 0, AURAL_PROTO_ENO_SUBSCRIPTION, false,
                  "no subscription %u on this connection", id);
}

static void do_audio_open(conn *c, const aural_msg_audio_open *req) {
  server *srv = c->srv;
  aural_msg_audio_open m = *req; /* an unnamed stream is named here */
  char why[200];
  if (c->n_streams >= CONN_MAX_STREAMS) {
    conn_send_error(c, 0, AURAL_PROTO_ELIMIT, false,
                    "at most %d open streams per connection",
                    CONN_MAX_STREAMS);
    return;
  }
  if (srv->n_streams >= srv->opt->max_streams) {
    conn_send_error(c, 0, AURAL_PROTO_ELIMIT, false,
                    "the server's limit of %d streams is reached",
                    srv->opt->max_streams);
    return;
  }
  char who[32];
  if (conn_capped(c) &&
      holder_streams(c) >= user_share(srv->opt->max_streams)) {
    conn_send_error(c, 0, AURAL_PROTO_ELIMIT, false,
                    "the share of streams of %s is reached: %d, half of "
                    "the server's %d",
                    holder_name(c, who, sizeof who),
                    user_share(srv->opt->max_streams), srv->opt->max_streams);
    return;
  }
  /* An unnamed stream is "client-N" for the first N from its id on that no
   * live stream is called (a client may have taken the name): at most
   * max_streams tries. */
  for (uint32_t k = srv->next_stream_id + 1; m.name[0] == '\0'; k++) {
    snprintf(m.name, sizeof m.name, "client-%u", k);
    if (stream_find(srv, m.name) != NULL) m.name[0] = '\0';
  }
  if (stream_find(srv, m.name) != NULL) {
    conn_send_error(c, 0, AURAL_PROTO_ENAME_IN_USE, false,
                    "a live stream is already named \"%s\"", m.name);
    return;
  }
  bool failed;
  aural_lexicon *custom = custom_words(c, &m.vocabulary, &failed);
  if (failed) return;
  stream *s = stream_create(srv, m.name, SRC_CLIENT, m.sample_rate,
                            (int)m.channels, custom,
                            m.vocabulary.has_boost ? m.vocabulary.boost : -1,
                            0, why, sizeof why);
  if (s == NULL) {
    conn_send_error(c, 0, AURAL_PROTO_EAUDIO, false, "%s", why);
    return;
  }
  s->loop.owner = c;
  s->loop.format = m.format;
  c->n_streams++;
  aural_msg_audio_opened reply = {.stream = s->id};
  memcpy(reply.name, s->name, sizeof reply.name);
  uint8_t buf[AURAL_PROTO_HEADER_BYTES + 160];
  conn_send_bytes(c, buf,
                  aural_proto_encode_audio_opened(buf, sizeof buf, &reply));
  log_info("stream %u \"%s\": opened by client %u (%u Hz, %u ch, %s)", s->id,
           s->name, c->id, m.sample_rate, m.channels,
           aural_sample_format_name(m.format));
  stream_start(s);
}

static stream *owned_stream(conn *c, uint32_t id) {
  stream *s = stream_find_id(c->srv, id);
  if (s == NULL || s->loop.owner != c || s->loop.closed_by_client) {
    conn_send_error(c, id, AURAL_PROTO_ENO_STREAM, false,
                    "stream %u is not open on this connection", id);
    return NULL;
  }
  return s;
}

/* Takes what of an AUDIO_DATA payload (the rest of one, when an earlier
 * call took a part) the stream has room for, and returns the bytes taken:
 * all of them, unless the stream's input is full, when reading pauses until
 * the workers have caught up and the rest is offered again. */
static size_t do_audio_data(conn *c, uint32_t id, const uint8_t *p,
                            size_t n) {
  server *srv = c->srv;
  stream *s = owned_stream(c, id);
  if (s == NULL) return n;
  size_t bytes = s->loop.format == AURAL_SAMPLE_S16 ? 2 : 4;
  size_t frame_bytes = bytes * (size_t)s->channels;
  if (n % frame_bytes != 0) {
    conn_send_error(c, id, AURAL_PROTO_EBAD_PAYLOAD, false,
                    "AUDIO_DATA of %zu bytes is not a whole number of "
                    "%zu-byte frames",
                    n, frame_bytes);
    return n;
  }
  size_t n_frames = n / frame_bytes, room = stream_room(s);
  if (room == 0 && stream_input_ended(s)) {
    /* Ended under the client (an encoder error): the data has nowhere to
     * go, and waiting for room would stall the connection. */
    conn_send_error(c, id, AURAL_PROTO_ENO_STREAM, false,
                    "stream %u has ended; %zu frames are not taken", id,
                    n_frames);
    return n;
  }
  if (n_frames > room) n_frames = room;
  size_t n_values = n_frames * (size_t)s->channels;
  float *x = srv->scratch;
  size_t good = pcm_decode(s->loop.format, p, n_values, x);
  if (good < n_values) {
    size_t frame = (size_t)s->loop.frames_received + good / (size_t)s->channels;
    conn_send_error(c, id, AURAL_PROTO_EAUDIO, false,
                    "non-finite sample at frame %zu, channel %zu; the "
                    "stream ends",
                    frame, good % (size_t)s->channels);
    stream_end_input(s, END_ERROR, "non-finite sample in client audio");
    s->loop.closed_by_client = true;
    return n;
  }
  /* The loop is the only producer: the room seen above is still there. */
  size_t took = stream_push(s, x, n_frames, aurald_now_us());
  s->loop.frames_received += took;
  if (took < n / frame_bytes || stream_backlogged(s)) pause_reading(c);
  return took * frame_bytes;
}

static void do_audio_close(conn *c, uint32_t id) {
  stream *s = owned_stream(c, id);
  if (s == NULL) return;
  s->loop.closed_by_client = true;
  stream_end_input(s, END_CLOSED, "");
}

/* Answers one request (payload: its n bytes not yet taken) and returns
 * how many of them it took: n, or fewer for an AUDIO_DATA that waits for
 * room (do_audio_data), or none for a request whose custom words are
 * being pronounced. */
static size_t handle_message(conn *c, const aural_msg_header *h,
                             const uint8_t *payload, size_t n) {
  server *srv = c->srv;
  if (!c->hello_done && h->type != AURAL_MSG_HELLO) {
    conn_send_error(c, 0, AURAL_PROTO_ESTATE, true,
                    "the first message must be HELLO, not %s",
                    aural_msg_type_name(h->type));
    return n;
  }
  if (h->type == AURAL_MSG_HELLO && c->hello_done) {
    conn_send_error(c, 0, AURAL_PROTO_ESTATE, false, "HELLO sent twice");
    return n;
  }
  request r;
  if (!decode_request(c, h->type, payload, n, &r)) return n;
  switch (h->type) {
  case AURAL_MSG_HELLO:
    do_hello(c, &r.hello);
    break;
  case AURAL_MSG_PING:
    if (n > AURAL_PROTO_PING_MAX) {
      conn_send_error(c, 0, AURAL_PROTO_EBAD_PAYLOAD, false,
                      "PING payload of %zu bytes (at most %d)", n,
                      AURAL_PROTO_PING_MAX);
      break;
    }
    {
      uint8_t buf[AURAL_PROTO_HEADER_BYTES + AURAL_PROTO_PING_MAX];
      conn_send_bytes(c, buf,
                      aural_proto_encode_pong(buf, sizeof buf, h->stream_id,
                                              payload, n));
    }
    break;
  case AURAL_MSG_LIST_STREAMS:
  case AURAL_MSG_STATS: {
    /* A page of STATS (stats.c), or every stream's one line. */
    size_t cap = h->type == AURAL_MSG_STATS
                     ? 4096 + AURAL_STATS_PAGE_STREAMS * 1024 +
                           (AURAL_STATS_PAGE_SUBSCRIBERS + CONN_MAX_SUBS) *
                               640
                     : 4096 + (size_t)(srv->n_streams + 1) * 768;
    uint8_t *buf = malloc(cap);
    if (buf == NULL) {
      conn_send_error(c, 0, AURAL_PROTO_EINTERNAL, false, "out of memory");
      break;
    }
    conn_send_bytes(c, buf,
                    h->type == AURAL_MSG_STATS
                        ? build_stats(srv, buf, cap, &r.stats)
                        : build_stream_list(srv, buf, cap));
    free(buf);
    break;
  }
  case AURAL_MSG_SUBSCRIBE:
    do_subscribe(c, &r.subscribe);
    if (pronouncing(c)) return 0; /* handled again when its words are */
    break;
  case AURAL_MSG_UNSUBSCRIBE:
    do_unsubscribe(c, r.unsubscribe);
    break;
  case AURAL_MSG_AUDIO_OPEN:
    do_audio_open(c, &r.audio_open);
    if (pronouncing(c)) return 0;
    break;
  case AURAL_MSG_AUDIO_DATA:
    return do_audio_data(c, h->stream_id, payload, n);
  case AURAL_MSG_AUDIO_CLOSE:
    do_audio_close(c, h->stream_id);
    break;
  default:
    conn_send_error(c, h->stream_id, AURAL_PROTO_EUNKNOWN_TYPE, true,
                    "%s is not a request a client may send",
                    aural_msg_type_name(h->type));
    break;
  }
  return n;
}

/* ---- accepting ----------------------------------------------------------- */

/* A new connection's id: the next of the count, but never 0 (the
 * WELCOME's "no client") nor one a live connection has. The count wraps
 * after 2^32 - 1 connections (50 days of 1,000 a second), and from then
 * on STATS could list two clients under one id; the walk of the list is
 * only needed from then on. */
static uint32_t new_conn_id(server *srv) {
  for (;;) {
    uint32_t id = ++srv->next_conn_id;
    if (id == 0) {
      srv->conn_ids_wrapped = true;
      continue;
    }
    bool taken = false;
    for (conn *c = srv->conns; srv->conn_ids_wrapped && c != NULL && !taken;
         c = c->next)
      taken = c->id == id;
    if (!taken) return id;
  }
}

/* A new connection in the server's list, its pipe initialised but not
 * yet connected. NULL when out of memory. */
static conn *conn_new(server *srv) {
  conn *c = calloc(1, sizeof *c);
  msgbuf **q = calloc(CONN_QUEUE_CAP, sizeof *q);
  if (c == NULL || q == NULL || uv_pipe_init(srv->loop, &c->pipe, 0) < 0) {
    log_error("out of memory for a new connection");
    free(c);
    free(q);
    return NULL;
  }
  c->q = q;
  c->srv = srv;
  c->id = new_conn_id(srv);
  c->next_sub_id = srv->sub_id_base;
  c->connected_at = aurald_mono_s();
  c->pipe.data = c;
  c->next = srv->conns;
  if (srv->conns) srv->conns->prev = c;
  srv->conns = c;
  srv->n_conns++;
  return c;
}

/* Refuses a connection just accepted: the fatal ERROR goes straight to
 * the socket (a new socket's buffer has room for it) and the descriptor is
 * closed at once, so that a burst of refused clients never holds
 * descriptors (and pushes the daemon to its file limit, where clients are
 * reset). Nothing holds the connection yet: it was never read, and has no
 * subscriptions or streams. */
static void conn_refuse(conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void conn_refuse(conn *c, int code, const char *fmt, ...) {
  uint8_t buf[1024];
  va_list ap;
  va_start(ap, fmt);
  size_t n = conn_error_message(c, buf, sizeof buf, 0, code, true, fmt, ap);
  va_end(ap);
  uv_os_fd_t fd;
  if (n > 0 && uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
      send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
    log_debug("client %u: refusal not sent: %s", c->id, strerror(errno));
  c->closing = true;
  c->reaped = true;
  uv_close((uv_handle_t *)&c->pipe, on_close);
}

/* Admits a connected client (peer credentials, limits) and reads it. */
static void conn_admit(conn *c) {
  server *srv = c->srv;
  uv_os_fd_t fd;
  struct ucred cred = {0};
  socklen_t len = sizeof cred;
  if (uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0 ||
      getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
    log_warn("client %u: cannot read peer credentials; refused", c->id);
    conn_kill(c);
    return;
  }
  c->uid = cred.uid;
  c->pid = cred.pid;
  if (!peer_allowed(srv, fd, cred.uid, cred.gid)) {
    log_warn("client %u: uid %u gid %u (pid %ld) is not allowed; refused",
             c->id, (unsigned)cred.uid, (unsigned)cred.gid, (long)cred.pid);
    conn_refuse(c, AURAL_PROTO_EPERMISSION,
                "uid %u may not use this server (same user, root or group "
                "members only)",
                (unsigned)cred.uid);
    return;
  }
  if (srv->n_conns > srv->opt->max_clients) {
    log_warn("client %u: connection limit %d reached; refused", c->id,
             srv->opt->max_clients);
    conn_refuse(c, AURAL_PROTO_ELIMIT,
                "the server's limit of %d connections is reached",
                srv->opt->max_clients);
    return;
  }
  if (user_capped(cred.uid) &&
      holder_conns(c) >= user_share(srv->opt->max_clients)) {
    log_warn("client %u: uid %u holds %d connections, its share of %d; "
             "refused",
             c->id, (unsigned)cred.uid, user_share(srv->opt->max_clients),
             srv->opt->max_clients);
    conn_refuse(c, AURAL_PROTO_ELIMIT,
                "uid %u holds %d connections, the most one group member "
                "may hold (half of the server's %d)",
                (unsigned)cred.uid, user_share(srv->opt->max_clients),
                srv->opt->max_clients);
    return;
  }
  if (srv->stopping) {
    conn_refuse(c, AURAL_PROTO_ESHUTDOWN, "the server is shutting down");
    return;
  }
  log_debug("client %u: connected (uid %u, pid %ld)", c->id,
            (unsigned)cred.uid, (long)cred.pid);
  start_reading(c);
}

void on_connection(uv_stream_t *listener, int status) {
  server *srv = listener->data;
  if (status < 0) {
    /* Out of descriptors: libuv accepts and closes the waiting
     * connections (its reserve descriptor), and --max-clients was fitted
     * to the limit at start, so this is rare; said once a minute. */
    static double last_said = -1e9;
    double now = aurald_mono_s();
    if (now - last_said >= 60.0) {
      last_said = now;
      log_warn("cannot accept a connection: %s (%d clients); connections "
               "are refused until some close",
               uv_strerror(status), srv->n_conns);
    }
    return;
  }
  conn *c = conn_new(srv);
  if (c == NULL) return;
  if (uv_accept(listener, (uv_stream_t *)&c->pipe) < 0) {
    conn_kill(c);
    return;
  }
  conn_admit(c);
}

int conn_adopt(server *srv, int fd) {
  conn *c = conn_new(srv);
  if (c == NULL) return -1;
  if (uv_pipe_open(&c->pipe, fd) < 0) {
    conn_kill(c);
    return -1;
  }
  conn_admit(c);
  return 0;
}

conn *conn_open(server *srv, const conn_transport *tr, void *data) {
  conn *c = conn_new(srv);
  if (c == NULL) return NULL;
  c->tr = tr;
  c->tr_data = data;
  c->reading = true; /* the transport reads from the start */
  log_debug("client %u: connected over a WebSocket", c->id);
  return c;
}

/* Input of another transport: appended as a Unix socket's reads are, and
 * handled once a whole message of the transport is in (a WebSocket
 * message is one protocol message). */
void conn_input(conn *c, const void *p, size_t n, bool message_end) {
  if (c->closing || c->fatal_sent) return;
  if (c->rcap - c->rlen < n) {
    size_t cap = c->rlen + n > READ_CHUNK ? c->rlen + n : READ_CHUNK;
    uint8_t *q = realloc(c->rbuf, cap);
    if (q == NULL) {
      log_error("client %u: out of memory for input", c->id);
      conn_kill(c);
      return;
    }
    c->rbuf = q;
    c->rcap = cap;
  }
  memcpy(c->rbuf + c->rlen, p, n);
  c->rlen += n;
  if (message_end && c->reading) process_input(c);
}

/* Runs from the tick timer: disconnects clients that never said HELLO in
 * time, those whose queue stayed above the soft limit (in bytes or in
 * messages) for longer than allowed, and those that shut their side and
 * have since closed their socket (nothing is read from them, so only a
 * look at the socket, four times a second, tells). */
void conn_check_limits(server *srv) {
  double now = aurald_mono_s();
  for (conn *c = srv->conns; c != NULL; c = c->next) {
    if (c->closing) continue;
    if (c->eof && now - c->eof_polled_at >= 0.25) {
      c->eof_polled_at = now;
      if (peer_closed(c)) {
        log_debug("client %u: closed its socket", c->id);
        conn_kill(c);
        continue;
      }
    }
    if (!c->hello_done && !c->fatal_sent &&
        now - c->connected_at >= srv->opt->hello_timeout_s) {
      log_warn("client %u: no HELLO within %.1f s; disconnecting", c->id,
               srv->opt->hello_timeout_s);
      conn_send_error(c, 0, AURAL_PROTO_ESTATE, true,
                      "no HELLO within %.1f s of connecting",
                      srv->opt->hello_timeout_s);
      continue;
    }
    bool over = c->q_bytes > srv->opt->sub_soft_bytes ||
                c->q_len > CONN_SOFT_MSGS;
    if (!over && !c->fatal_sent) {
      c->over_soft_since = 0;
      continue;
    }
    if (c->over_soft_since == 0) {
      c->over_soft_since = now;
      continue;
    }
    if (c->fatal_sent) {
      /* The SLOW_CONSUMER error (or another fatal one) is queued behind
       * what the client does not read; it had its chance. */
      if (now - c->fatal_at >= FATAL_GRACE_S) conn_kill(c);
      continue;
    }
    if (now - c->over_soft_since >= srv->opt->sub_soft_s) {
      char who[32];
      log_warn("client %u%s: %zu messages (%zu bytes) queued for %.1f s "
               "(soft limit %d messages or %zu bytes for %.1f s); "
               "disconnecting a slow consumer",
               c->id, conn_peer(c, who, sizeof who), c->q_len, c->q_bytes,
               now - c->over_soft_since, CONN_SOFT_MSGS,
               srv->opt->sub_soft_bytes, srv->opt->sub_soft_s);
      conn_send_error(c, 0, AURAL_PROTO_ESLOW_CONSUMER, true,
                      "%zu messages (%zu bytes) were queued for more than "
                      "%.1f s (soft limit %d messages or %zu bytes)",
                      c->q_len, c->q_bytes, srv->opt->sub_soft_s,
                      CONN_SOFT_MSGS, srv->opt->sub_soft_bytes);
    }
  }
}
