/*
 * HTTP and WebSocket (--http ADDR:PORT, DESIGN.md §10), with
 * libwebsockets on the server's own libuv loop:
 *   /ws       the protocol of PROTOCOL.md, one message per binary frame;
 *             each WebSocket is a connection of conn.c (conn_open) whose
 *             transport is here, so requests, limits, the write queue and
 *             fan-out are the Unix socket's own;
 *   /         the live page (web/), /metrics (metrics.c), /healthz.
 * Every request and upgrade is checked first (admit): the Host header on
 * a loopback bind (against DNS rebinding), the bearer token when there is
 * one (required on any other bind), the Origin against the allow-list.
 * libwebsockets parses HTTP and WebSocket frames; what aurald checks
 * itself is in webguard.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libwebsockets.h>

#include "daemon.h"

#define HTTP_TIMEOUT_S 5      /* headers, keep-alive, a close: slowloris */
#define HTTP_HEADER_BYTES 4096 /* one request's headers */
#define HTTP_HEADER_POOL 64   /* connections whose headers are being read */
#define HTTP_GRACE_S 1.0      /* a connection's time to send its request
                                 before a newer one may close it */
#define WS_RX_BYTES 65536     /* what one receive callback may hand over */
#define WS_MAX_PARTS 65536    /* receive callbacks in one message */
/* A close frame written by hand: libwebsockets 4.1 hangs up without one
 * when a callback returns -1 after lws_close_reason(), and keeps the
 * opcode (its internal LWS_WRITE_CLOSE, 4) out of its public header. */
#define WS_WRITE_CLOSE ((enum lws_write_protocol)4)

/* An accepted connection that is not (yet) a WebSocket: listed, oldest
 * first, in its server's `waiting` (see keep_header_slots()). */
typedef struct http_peer {
  struct lws *wsi;
  double accepted_s;          /* aurald_mono_s() */
  struct http_peer *prev, *next;
  bool listed;
} http_peer;

typedef struct http_server {
  server *srv;
  struct lws_context *ctx;
  /* The context until libwebsockets has freed it wholly (its pcontext):
   * with a foreign loop the last of that waits for its handles' close
   * callbacks, and then for one more lws_context_destroy(). */
  struct lws_context *ctx_alive;
  char token[HTTP_TOKEN_MAX + 2]; /* "" when none is required; one byte
                                    more tells a longer file */
  char root[4096];            /* the page's files */
  char scheme[8];             /* "http" or "https" */
  int port;
  /* Origins of the server itself (on a loopback bind: its three names),
   * which a Host header must name; and those allowed to connect (these,
   * or --http-origin's). */
  char own_buf[3][HTTP_ORIGIN_MAX + 1];
  const char *own[3];
  int n_own;
  const char *allowed[HTTP_MAX_ORIGINS];
  int n_allowed;
  /* Also allowed: the origin of the Host a request names. On a bind to
   * another address than loopback, without --http-origin, the server is
   * whatever name the browser reached it by (0.0.0.0 is nobody's), and
   * the token, required there, keeps other sites out whatever their
   * origin (the cookie is SameSite=Strict). */
  bool host_is_own;
  /* Connections that are not WebSockets, oldest first. */
  http_peer *waiting_head, *waiting_tail;
  int n_waiting;
  uint64_t n_evicted;         /* closed by keep_header_slots() */
} http_server;

/* One libwebsockets connection: an HTTP request's pending body, or a
 * WebSocket's connection. */
typedef struct http_session {
  struct lws *wsi;
  uint8_t *body;              /* LWS_PRE bytes, then body_len */
  size_t body_len;
  conn *c;                    /* a WebSocket's, NULL once let go */
  ws_framer framer;
  int parts;                  /* receive callbacks of the message so far */
  int close_status;           /* the close frame's status, once known */
  uint8_t *wbuf;              /* LWS_PRE bytes, then a message */
  size_t wcap;
} http_session;

static http_server *server_of(struct lws *wsi) {
  return lws_context_user(lws_get_context(wsi));
}

/* ---- responses ------------------------------------------------------------- */

/* The same on every response: the page runs scripts from this server
 * only, and nothing is cached or framed. */
static const char *const security_headers[][2] = {
    {"content-security-policy:",
     "default-src 'none'; script-src 'self'; style-src 'self'; "
     "connect-src 'self'; img-src 'self' data:; media-src 'self'; "
     "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
    {"x-content-type-options:", "nosniff"},
    {"referrer-policy:", "no-referrer"},
    {"cache-control:", "no-store"},
    {"permissions-policy:", "microphone=(self)"},
};

static int add_security_headers(struct lws *wsi, uint8_t **p, uint8_t *end) {
  size_t n = sizeof security_headers / sizeof security_headers[0];
  for (size_t i = 0; i < n; i++) {
    const char *v = security_headers[i][1];
    if (lws_add_http_header_by_name(
            wsi, (const uint8_t *)security_headers[i][0], (const uint8_t *)v,
            (int)strlen(v), p, end))
      return -1;
  }
  return 0;
}

/* The status line and headers of a response: the security headers, and
 * how to authenticate for a 401. Returns 0 or -1. */
static int write_head(struct lws *wsi, unsigned code, const char *type,
                      size_t len) {
  uint8_t buf[LWS_PRE + 2048], *start = buf + LWS_PRE, *p = start;
  uint8_t *end = buf + sizeof buf - 1;
  if (lws_add_http_common_headers(wsi, code, type, len, &p, end) ||
      add_security_headers(wsi, &p, end))
    return -1;
  static const char auth[] = "Bearer realm=\"aurald\"";
  if (code == HTTP_STATUS_UNAUTHORIZED &&
      lws_add_http_header_by_name(wsi, (const uint8_t *)"www-authenticate:",
                                  (const uint8_t *)auth, sizeof auth - 1, &p,
                                  end))
    return -1;
  return lws_finalize_write_http_header(wsi, start, &p, end) ? -1 : 0;
}

/* Answers with code and a body (its len bytes are copied), written when
 * the connection is writable. Returns what the callback returns. */
static int respond(struct lws *wsi, http_session *ps, unsigned code,
                   const char *type, const char *body, size_t len) {
  free(ps->body);
  ps->body = malloc(LWS_PRE + len + 1);
  if (ps->body == NULL) return -1;
  memcpy(ps->body + LWS_PRE, body, len);
  ps->body_len = len;
  if (write_head(wsi, code, type, len) < 0) return -1;
  lws_callback_on_writable(wsi);
  return 0;
}

static int write_body(struct lws *wsi, http_session *ps) {
  if (ps->body == NULL) return 0;
  int n = lws_write(wsi, ps->body + LWS_PRE, ps->body_len,
                    LWS_WRITE_HTTP_FINAL);
  free(ps->body);
  ps->body = NULL;
  if (n < 0) return -1;
  return lws_http_transaction_completed(wsi) ? -1 : 0;
}

#define REFUSAL_TYPE "text/plain; charset=utf-8"

/* A refusal: a short plain-text body saying why. */
static int refuse(struct lws *wsi, http_session *ps, unsigned code,
                  const char *why) {
  char body[256];
  int n = snprintf(body, sizeof body, "%u: %s\n", code, why);
  return respond(wsi, ps, code, REFUSAL_TYPE, body, (size_t)n);
}

/* The same, written at once (an upgrade: no session memory yet). */
static int refuse_now(struct lws *wsi, unsigned code, const char *why) {
  char body[LWS_PRE + 256];
  int n = snprintf(body + LWS_PRE, sizeof body - LWS_PRE, "%u: %s\n", code,
                   why);
  if (write_head(wsi, code, REFUSAL_TYPE, (size_t)n) < 0) return -1;
  return lws_write(wsi, (uint8_t *)body + LWS_PRE, (size_t)n,
                   LWS_WRITE_HTTP_FINAL) < 0 ? -1 : 0;
}

/* ---- admission --------------------------------------------------------------- */

/* A header's value into buf ("" when absent or too long). */
static const char *header(struct lws *wsi, enum lws_token_indexes h,
                          char *buf, int cap) {
  buf[0] = '\0';
  if (lws_hdr_total_length(wsi, h) >= cap || lws_hdr_copy(wsi, buf, cap, h) < 0)
    buf[0] = '\0';
  return buf;
}

/* Whether a request's Host and Origin are this server's: 0, or the HTTP
 * status that refuses it with why. */
static unsigned admit_host_origin(http_server *hs, struct lws *wsi,
                                  const char **why) {
  char v[HTTP_HEADER_BYTES];
  if (hs->n_own > 0 &&
      !http_host_allowed(header(wsi, WSI_TOKEN_HOST, v, sizeof v), hs->own,
                         hs->n_own)) {
    *why = "the Host header does not name this server";
    return HTTP_STATUS_FORBIDDEN;
  }
  if (lws_hdr_total_length(wsi, WSI_TOKEN_ORIGIN) > 0) {
    char host[HTTP_HEADER_BYTES];
    const char *origin = header(wsi, WSI_TOKEN_ORIGIN, v, sizeof v);
    if (!http_origin_allowed(origin, hs->allowed, hs->n_allowed) &&
        !(hs->host_is_own &&
          http_origin_is_host(origin, hs->scheme,
                              header(wsi, WSI_TOKEN_HOST, host, sizeof host)))) {
      *why = "the Origin is not allowed (aurald --http-origin)";
      return HTTP_STATUS_FORBIDDEN;
    }
  }
  return 0;
}

/* Whether a request (or upgrade) may go on: its Host and Origin, and
 * the token when one is required. 0, or the refusal's status and why. */
static unsigned admit(http_server *hs, struct lws *wsi, const char **why) {
  char v[HTTP_HEADER_BYTES];
  unsigned code = admit_host_origin(hs, wsi, why);
  if (code == 0 && hs->token[0] != '\0' &&
      !http_bearer_ok(header(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, v, sizeof v),
                      hs->token) &&
      !http_cookie_ok(header(wsi, WSI_TOKEN_HTTP_COOKIE, v, sizeof v),
                      hs->token)) {
    *why = "a bearer token is required (Authorization: Bearer TOKEN, or "
           "the cookie of GET /login?token=TOKEN)";
    return HTTP_STATUS_UNAUTHORIZED;
  }
  return code;
}

/* The upgrade to a WebSocket: /ws only, admitted, within the limits. A
 * refusal is answered at once, as libwebsockets expects there. */
static int confirm_upgrade(http_server *hs, struct lws *wsi) {
  server *srv = hs->srv;
  char uri[256];
  const char *why = NULL;
  char share_why[160];
  int share;
  unsigned code = admit(hs, wsi, &why);
  if (code == 0 && strcmp(header(wsi, WSI_TOKEN_GET_URI, uri, sizeof uri),
                          "/ws") != 0) {
    code = HTTP_STATUS_NOT_FOUND;
    why = "WebSockets are served at /ws";
  } else if (code == 0 && srv->stopping) {
    code = HTTP_STATUS_SERVICE_UNAVAILABLE;
    why = "the server is shutting down";
  } else if (code == 0 && srv->n_conns >= srv->opt->max_clients) {
    code = HTTP_STATUS_SERVICE_UNAVAILABLE;
    why = "the server's connection limit is reached";
  } else if (code == 0 && conn_web_share_full(srv, &share)) {
    code = HTTP_STATUS_SERVICE_UNAVAILABLE;
    snprintf(share_why, sizeof share_why,
             "the WebSocket clients hold %d connections, their share "
             "without --http-token-file (half of the server's %d)",
             share, srv->opt->max_clients);
    why = share_why;
  }
  if (code == 0) return 0;
  log_info("http: WebSocket upgrade refused (%u): %s", code, why);
  return refuse_now(wsi, code, why) < 0 ? -1 : 1;
}

/* ---- files and routes ---------------------------------------------------------- */

static const struct {
  const char *path, *file, *type;
} page_files[] = {
    {"/", "index.html", "text/html; charset=utf-8"},
    {"/index.html", "index.html", "text/html; charset=utf-8"},
    {"/app.js", "app.js", "text/javascript; charset=utf-8"},
    {"/aural-client.js", "aural-client.js", "text/javascript; charset=utf-8"},
    {"/worklet.js", "worklet.js", "text/javascript; charset=utf-8"},
    {"/style.css", "style.css", "text/css; charset=utf-8"},
};

static int serve_file(http_server *hs, struct lws *wsi, http_session *ps,
                      const char *file, const char *type) {
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", hs->root, file);
  if (access(path, R_OK) != 0) {
    log_warn("http: the page's file %s: %s", path, strerror(errno));
    return refuse(wsi, ps, HTTP_STATUS_NOT_FOUND, "the page is not installed");
  }
  uint8_t hdr[2048], *p = hdr, *end = hdr + sizeof hdr;
  if (add_security_headers(wsi, &p, end) < 0) return -1;
  int n = lws_serve_http_file(wsi, path, type, (const char *)hdr,
                              (int)(p - hdr));
  if (n < 0 || (n > 0 && lws_http_transaction_completed(wsi))) return -1;
  return 0;
}

static int serve_metrics(http_server *hs, struct lws *wsi, http_session *ps) {
  char *text;
  size_t n = metrics_render(hs->srv, &text);
  if (text == NULL)
    return refuse(wsi, ps, HTTP_STATUS_INTERNAL_SERVER_ERROR, "out of memory");
  int rc = respond(wsi, ps, HTTP_STATUS_OK, "text/plain; version=0.0.4",
                   text, n);
  free(text);
  return rc;
}

/* GET /login?token=TOKEN: a browser, which cannot add an Authorization
 * header to the page's requests or its WebSocket, gets the token as an
 * HttpOnly, SameSite=Strict cookie and is sent to the page. */
static int login(http_server *hs, struct lws *wsi, http_session *ps) {
  char arg[HTTP_TOKEN_MAX + 16];
  const char *t = lws_get_urlarg_by_name(wsi, "token=", arg, sizeof arg);
  if (hs->token[0] != '\0' &&
      (t == NULL || !http_token_same(t, hs->token))) {
    log_info("http: login refused: %s", t ? "a wrong token" : "no token");
    return refuse(wsi, ps, HTTP_STATUS_UNAUTHORIZED, "not this token");
  }
  char cookie[HTTP_TOKEN_MAX + 128];
  snprintf(cookie, sizeof cookie, "%s=%s; Path=/; HttpOnly; SameSite=Strict%s",
           HTTP_COOKIE, hs->token, strcmp(hs->scheme, "https") == 0
                                        ? "; Secure" : "");
  uint8_t buf[LWS_PRE + HTTP_TOKEN_MAX + 2048], *start = buf + LWS_PRE;
  uint8_t *p = start, *end = buf + sizeof buf - 1;
  if (lws_add_http_common_headers(wsi, HTTP_STATUS_SEE_OTHER, REFUSAL_TYPE, 0,
                                  &p, end) ||
      add_security_headers(wsi, &p, end) ||
      (hs->token[0] != '\0' &&
       lws_add_http_header_by_name(wsi, (const uint8_t *)"set-cookie:",
                                   (const uint8_t *)cookie,
                                   (int)strlen(cookie), &p, end)) ||
      lws_add_http_header_by_name(wsi, (const uint8_t *)"location:",
                                  (const uint8_t *)"/", 1, &p, end) ||
      lws_finalize_write_http_header(wsi, start, &p, end))
    return -1;
  return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static int http_request(http_server *hs, struct lws *wsi, http_session *ps) {
  const char *why = NULL;
  char path[256];
  if (strcmp(header(wsi, WSI_TOKEN_GET_URI, path, sizeof path), "/login") ==
      0) {
    unsigned refused = admit_host_origin(hs, wsi, &why);
    if (refused != 0) return refuse(wsi, ps, refused, why);
    return login(hs, wsi, ps);
  }
  unsigned code = admit(hs, wsi, &why);
  if (code != 0) {
    log_info("http: request refused (%u): %s", code, why);
    return refuse(wsi, ps, code, why);
  }
  if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) <= 0)
    return refuse(wsi, ps, HTTP_STATUS_METHOD_NOT_ALLOWED, "GET only");
  char uri[256];
  header(wsi, WSI_TOKEN_GET_URI, uri, sizeof uri);
  if (strcmp(uri, "/healthz") == 0) {
    bool up = !hs->srv->stopping;
    return respond(wsi, ps,
                   up ? HTTP_STATUS_OK : HTTP_STATUS_SERVICE_UNAVAILABLE,
                   "text/plain", up ? "ok\n" : "stopping\n", up ? 3 : 9);
  }
  if (strcmp(uri, "/metrics") == 0) return serve_metrics(hs, wsi, ps);
  for (size_t i = 0; i < sizeof page_files / sizeof page_files[0]; i++)
    if (strcmp(uri, page_files[i].path) == 0)
      return serve_file(hs, wsi, ps, page_files[i].file, page_files[i].type);
  return refuse(wsi, ps, HTTP_STATUS_NOT_FOUND, "no such page");
}

/* ---- the WebSocket transport of a connection ------------------------------------ */

static void ws_read_start(conn *c) {
  http_session *ps = c->tr_data;
  if (ps != NULL) lws_rx_flow_control(ps->wsi, 1);
}

static void ws_read_stop(conn *c) {
  http_session *ps = c->tr_data;
  if (ps != NULL) lws_rx_flow_control(ps->wsi, 0);
}

static void ws_write(conn *c) {
  http_session *ps = c->tr_data;
  if (ps != NULL) lws_callback_on_writable(ps->wsi);
}

/* The close frame's status for the fatal error that ended a connection
 * (RFC 6455 7.4.1). */
static int close_status_of(int code) {
  switch (code) {
  case 0: return LWS_CLOSE_STATUS_NORMAL;
  case AURAL_PROTO_ETOO_LARGE: return LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE;
  case AURAL_PROTO_ESHUTDOWN: return LWS_CLOSE_STATUS_GOINGAWAY;
  case AURAL_PROTO_ESLOW_CONSUMER:
  case AURAL_PROTO_ELIMIT:
  case AURAL_PROTO_EPERMISSION: return LWS_CLOSE_STATUS_POLICY_VIOLATION;
  default: return LWS_CLOSE_STATUS_PROTOCOL_ERR;
  }
}

static void ws_detach(conn *c) {
  http_session *ps = c->tr_data;
  c->tr_data = NULL;
  if (ps == NULL) return; /* the WebSocket closed first */
  ps->c = NULL;
  if (ps->close_status == 0) ps->close_status = close_status_of(c->fatal_code);
  lws_rx_flow_control(ps->wsi, 1); /* to read the peer's close */
  lws_callback_on_writable(ps->wsi); /* which sends the close frame */
  /* A peer that never lets it be written is dropped (a timeout of the
   * close's own kind would make libwebsockets hang up without one). */
  lws_set_timeout(ps->wsi, PENDING_TIMEOUT_USER_OK, HTTP_TIMEOUT_S);
}

static const conn_transport ws_transport = {
    .read_start = ws_read_start,
    .read_stop = ws_read_stop,
    .write = ws_write,
    .detach = ws_detach,
};

/* A fatal error found here, with the close status to send after it. */
static void ws_fail(http_session *ps, int code, int status, const char *why) {
  ps->close_status = status;
  conn_send_error(ps->c, 0, code, true, "%s", why);
}

static void ws_receive(http_session *ps, struct lws *wsi, const uint8_t *in,
                       size_t len) {
  conn *c = ps->c;
  if (c == NULL || c->closing || c->fatal_sent) return;
  if (!lws_frame_is_binary(wsi)) {
    ws_fail(ps, AURAL_PROTO_EFRAMING, LWS_CLOSE_STATUS_UNACCEPTABLE_OPCODE,
            "a text WebSocket message; the protocol's messages go one per "
            "binary message");
    return;
  }
  if (++ps->parts > WS_MAX_PARTS) {
    ws_fail(ps, AURAL_PROTO_EFRAMING, LWS_CLOSE_STATUS_POLICY_VIOLATION,
            "a WebSocket message in more than 65536 fragments");
    return;
  }
  bool last = lws_is_final_fragment(wsi) &&
              lws_remaining_packet_payload(wsi) == 0;
  char why[200];
  int rc = ws_framer_feed(&ps->framer, in, len, last, why, sizeof why);
  if (rc < 0) {
    ws_fail(ps, rc, close_status_of(rc), why);
    return;
  }
  if (rc == 1) ps->parts = 0;
  conn_input(c, in, len, rc == 1);
}

/* Writes queued messages while the socket takes them, one WebSocket
 * message each, then hands them back to the queue. */
static int ws_writeable(http_session *ps, struct lws *wsi) {
  conn *c = ps->c;
  if (c == NULL) {
    static const char bye[] = "aurald closed the connection";
    uint8_t frame[LWS_PRE + 2 + sizeof bye];
    frame[LWS_PRE] = (uint8_t)(ps->close_status >> 8);
    frame[LWS_PRE + 1] = (uint8_t)ps->close_status;
    memcpy(frame + LWS_PRE + 2, bye, sizeof bye - 1);
    lws_write(wsi, frame + LWS_PRE, 2 + sizeof bye - 1, WS_WRITE_CLOSE);
    return -1;
  }
  if (c->closing || c->n_inflight > 0) return 0;
  size_t n = 0;
  while (n < c->q_len && n < CONN_WRITE_BATCH) {
    msgbuf *m = c->q[(c->q_head + n) % CONN_QUEUE_CAP];
    if (ps->wcap < LWS_PRE + m->len) {
      uint8_t *b = realloc(ps->wbuf, LWS_PRE + m->len);
      if (b == NULL) return -1;
      ps->wbuf = b;
      ps->wcap = LWS_PRE + m->len;
    }
    memcpy(ps->wbuf + LWS_PRE, m->data, m->len);
    n++;
    if (lws_write(wsi, ps->wbuf + LWS_PRE, m->len, LWS_WRITE_BINARY) <
        (int)m->len) {
      c->n_inflight = n;
      conn_write_done(c, UV_EPIPE);
      return -1;
    }
    if (lws_send_pipe_choked(wsi)) break;
  }
  c->n_inflight = n;
  conn_write_done(c, 0); /* asks for the next round when more wait */
  return 0;
}

static void ws_closed(http_session *ps) {
  conn *c = ps->c;
  free(ps->wbuf);
  ps->wbuf = NULL;
  if (c == NULL) return;
  ps->c = NULL;
  c->tr_data = NULL;
  c->n_inflight = 0;
  conn_kill(c);
}

/* ---- header slots --------------------------------------------------------------- */

static void unlist(http_server *hs, http_peer *p) {
  if (!p->listed) return;
  if (p->prev) p->prev->next = p->next;
  else hs->waiting_head = p->next;
  if (p->next) p->next->prev = p->prev;
  else hs->waiting_tail = p->prev;
  p->prev = p->next = NULL;
  p->listed = false;
  hs->n_waiting--;
}

/* libwebsockets reads a request's headers into one of HTTP_HEADER_POOL
 * slots; a connection that finds none waits, and is reset when the
 * header timeout ends. So connections that send their headers slowly, or
 * never (slowloris), renewed every few seconds, kept everyone else out.
 * Every connection that is not a WebSocket is listed, and when there are
 * more than the slots, a new one closes the oldest that have had
 * HTTP_GRACE_S to send a request, as many as it takes: a request sent at
 * once gets a slot, and only a flood of new connections every second
 * could keep one out. Closed: a slow sender, an idle keep-alive
 * connection (a browser opens another), a response still being read
 * slowly. */
static void keep_header_slots(http_server *hs, struct lws *wsi) {
  http_peer *p = calloc(1, sizeof *p);
  if (p == NULL) return; /* unlisted: never closed early */
  p->wsi = wsi;
  p->accepted_s = aurald_mono_s();
  lws_set_opaque_user_data(wsi, p);
  p->prev = hs->waiting_tail;
  if (hs->waiting_tail) hs->waiting_tail->next = p;
  else hs->waiting_head = p;
  hs->waiting_tail = p;
  p->listed = true;
  hs->n_waiting++;
  while (hs->n_waiting > HTTP_HEADER_POOL &&
         p->accepted_s - hs->waiting_head->accepted_s >= HTTP_GRACE_S) {
    http_peer *old = hs->waiting_head;
    unlist(hs, old);
    lws_set_timeout(old->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
    if (hs->n_evicted++ == 0)
      log_warn("http: more than %d connections without a request; closing "
               "the oldest as new ones come (slow or idle clients, or a "
               "flood)", HTTP_HEADER_POOL);
  }
}

static void forget_peer(http_server *hs, struct lws *wsi) {
  http_peer *p = lws_get_opaque_user_data(wsi);
  if (p == NULL) return;
  lws_set_opaque_user_data(wsi, NULL);
  unlist(hs, p);
  free(p);
}

/* ---- the callback ------------------------------------------------------------- */

static int on_event(struct lws *wsi, enum lws_callback_reasons reason,
                    void *user, void *in, size_t len) {
  http_session *ps = user;
  http_server *hs = server_of(wsi);
  if (reason == LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED) {
    keep_header_slots(hs, wsi);
    return 0;
  }
  if (reason == LWS_CALLBACK_WSI_DESTROY) {
    forget_peer(hs, wsi);
    return 0;
  }
  /* Session memory comes with the protocol's binding: none yet for a
   * connection closed while its headers were read. */
  if (ps == NULL && reason != LWS_CALLBACK_HTTP_CONFIRM_UPGRADE)
    return reason == LWS_CALLBACK_HTTP ? -1 : 0;
  switch (reason) {
  case LWS_CALLBACK_HTTP:
    return http_request(hs, wsi, ps);
  case LWS_CALLBACK_HTTP_WRITEABLE:
    return write_body(wsi, ps);
  case LWS_CALLBACK_HTTP_FILE_COMPLETION:
    return lws_http_transaction_completed(wsi) ? -1 : 0;
  case LWS_CALLBACK_CLOSED_HTTP:
    free(ps->body);
    ps->body = NULL;
    return 0;
  case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
    return confirm_upgrade(hs, wsi);
  case LWS_CALLBACK_ESTABLISHED:
    forget_peer(hs, wsi); /* a WebSocket holds no header slot */
    memset(ps, 0, sizeof *ps);
    ps->wsi = wsi;
    ps->framer.max_payload = (uint32_t)hs->srv->opt->max_request_bytes;
    ps->c = conn_open(hs->srv, &ws_transport, ps);
    return ps->c != NULL ? 0 : -1;
  case LWS_CALLBACK_RECEIVE:
    ws_receive(ps, wsi, in, len);
    return 0;
  case LWS_CALLBACK_SERVER_WRITEABLE:
    return ws_writeable(ps, wsi);
  case LWS_CALLBACK_CLOSED:
    ws_closed(ps);
    return 0;
  default:
    return 0;
  }
}

static const struct lws_protocols protocols[] = {
    {"aural", on_event, sizeof(http_session), WS_RX_BYTES, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- start and stop ------------------------------------------------------------- */

/* libwebsockets' messages, at most LWS_LOG_PER_S a second: a peer can
 * make it say something per connection (an accept that fails, a header
 * too long), and the log is not for it to fill. What is held back is
 * counted in the next line that gets through. */
#define LWS_LOG_PER_S 10
static void lws_log_line(int level, const char *line) {
  static double window_s;
  static unsigned in_window, held;
  double now = aurald_mono_s();
  if (now - window_s >= 1.0) {
    window_s = now;
    in_window = 0;
  }
  if (++in_window > LWS_LOG_PER_S) {
    held++;
    return;
  }
  size_t n = strlen(line);
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
  if (held > 0)
    aurald_log(LOG_WARN, "http: %u libwebsockets messages held back (more "
               "than %d a second)", held, LWS_LOG_PER_S);
  held = 0;
  aurald_log(level == LLL_ERR ? LOG_WARN : LOG_DEBUG, "http: %.*s", (int)n,
             line);
}

/* The token file: one line, 16 to HTTP_TOKEN_MAX printable bytes. */
static int read_token(http_server *hs, const char *path, char *why,
                      size_t why_len) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(why, why_len, "--http-token-file %s: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && (st.st_mode & 0077) != 0)
    log_warn("--http-token-file %s: readable by others (mode %03o)", path,
             (unsigned)(st.st_mode & 0777));
  size_t n = fread(hs->token, 1, sizeof hs->token - 1, f);
  fclose(f);
  hs->token[n] = '\0';
  while (n > 0 && (hs->token[n - 1] == '\n' || hs->token[n - 1] == '\r'))
    hs->token[--n] = '\0';
  if (!http_token_valid(hs->token)) {
    snprintf(why, why_len, "--http-token-file %s: the token must be one line "
             "of 16 to %d printable characters", path, HTTP_TOKEN_MAX);
    return -1;
  }
  return 0;
}

/* The origins of the server itself, once its port is known, and the
 * allow-list (--http-origin, or those). */
static void set_origins(http_server *hs) {
  const http_options *o = &hs->srv->opt->http;
  if (o->addr.loopback) {
    static const char *const names[3] = {"127.0.0.1", "localhost", "[::1]"};
    for (int i = 0; i < 3; i++)
      snprintf(hs->own_buf[i], sizeof hs->own_buf[i], "%s://%s:%d",
               hs->scheme, names[i], hs->port);
    hs->n_own = 3;
  } else {
    snprintf(hs->own_buf[0], sizeof hs->own_buf[0],
             o->addr.v6 ? "%s://[%s]:%d" : "%s://%s:%d", hs->scheme,
             o->addr.host, hs->port);
  }
  for (int i = 0; i < 3; i++) hs->own[i] = hs->own_buf[i];
  hs->n_allowed = o->n_origins > 0 ? o->n_origins : (hs->n_own ? 3 : 1);
  hs->host_is_own = !o->addr.loopback && o->n_origins == 0;
  for (int i = 0; i < hs->n_allowed; i++)
    hs->allowed[i] = o->n_origins > 0 ? o->origins[i] : hs->own[i];
}

/* The page's directory: --http-root, else the installed one when it is
 * there, else the source tree's. */
static void find_root(http_server *hs) {
  const char *root = hs->srv->opt->http.root;
  if (root == NULL)
    root = access(AURAL_INSTALLED_WEB "/index.html", R_OK) == 0
               ? AURAL_INSTALLED_WEB
               : AURAL_SOURCE_WEB;
  snprintf(hs->root, sizeof hs->root, "%s", root);
}

static struct lws_context *create_context(http_server *hs) {
  const http_options *o = &hs->srv->opt->http;
  void *loops[1] = {hs->srv->loop};
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.options = LWS_SERVER_OPTION_LIBUV;
  if (!o->addr.v6) info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
  if (o->cert != NULL) {
    info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.ssl_cert_filepath = o->cert;
    info.ssl_private_key_filepath = o->key;
    /* HTTP/1.1 only: a browser offered HTTP/2 would send its host as
     * :authority, which the Host check (admit_host_origin) does not
     * read, and be refused every request. */
    info.alpn = "http/1.1";
  }
  info.foreign_loops = loops;
  info.port = o->addr.port;
  info.iface = o->addr.host;
  info.vhost_name = "aurald";
  info.protocols = protocols;
  info.user = hs;
  info.pcontext = &hs->ctx_alive;
  info.timeout_secs = HTTP_TIMEOUT_S;
  info.keepalive_timeout = HTTP_TIMEOUT_S;
  info.max_http_header_data = HTTP_HEADER_BYTES;
  info.max_http_header_pool = HTTP_HEADER_POOL;
  info.fd_limit_per_thread =
      (unsigned)hs->srv->opt->max_clients + HTTP_EXTRA_FDS;
  info.server_string = "aurald";
  return lws_create_context(&info);
}

int http_start(server *srv, char *why, size_t why_len) {
  const http_options *o = &srv->opt->http;
  if (!o->on) return 0;
  if (http_check_options(o, why, why_len) < 0) return -1;
  http_server *hs = calloc(1, sizeof *hs);
  if (hs == NULL) {
    snprintf(why, why_len, "out of memory for --http");
    return -1;
  }
  hs->srv = srv;
  srv->http = hs;
  snprintf(hs->scheme, sizeof hs->scheme, "%s", o->cert ? "https" : "http");
  if (o->token_file != NULL && read_token(hs, o->token_file, why, why_len) < 0)
    return -1;
  find_root(hs);
  int level = LLL_ERR | (aurald_log_level >= LOG_DEBUG ? LLL_WARN : 0);
  lws_set_log_level(level, lws_log_line);
  hs->ctx = hs->ctx_alive = create_context(hs);
  if (hs->ctx == NULL) {
    snprintf(why, why_len, "--http %s:%d: cannot listen (in use, or a TLS "
             "file unreadable?)", o->addr.host, o->addr.port);
    return -1;
  }
  hs->port = lws_get_vhost_listen_port(lws_get_vhost_by_name(hs->ctx,
                                                             "aurald"));
  set_origins(hs);
  if (hs->token[0] == '\0')
    log_warn("http: no token: every local user and process can use /ws "
             "(the Unix socket's user and group check cannot apply over "
             "TCP); give --http-token-file on a shared machine");
  log_info("http: listening on %s://%s%s%s:%d/ (page from %s%s)", hs->scheme,
           o->addr.v6 ? "[" : "", o->addr.host, o->addr.v6 ? "]" : "",
           hs->port, hs->root, hs->token[0] ? "; bearer token required" : "");
  return 0;
}

void http_stop(server *srv) {
  http_server *hs = srv->http;
  if (hs == NULL || hs->ctx == NULL) return;
  /* Its handles close as the loop runs on; callbacks until then find
   * their connections let go of (conn_reap_all ran before this). */
  lws_context_destroy(hs->ctx);
  hs->ctx = NULL;
}

void http_free(server *srv) {
  http_server *hs = srv->http;
  if (hs != NULL && hs->ctx_alive != NULL) lws_context_destroy(hs->ctx_alive);
  free(srv->http);
  srv->http = NULL;
}
