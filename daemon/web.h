/*
 * What aurald checks of HTTP and WebSocket peers itself (webguard.c),
 * and the --http options: pure functions over the caller's bytes, apart
 * from the rest of the daemon so that tests/fuzz/fuzz_web.c builds with
 * them and the protocol codec alone. daemon.h includes this.
 */
#ifndef AURALD_WEB_H
#define AURALD_WEB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <aural/proto.h>

/* ---- HTTP and WebSocket checks (webguard.c) ------------------------------ */

#define HTTP_MAX_ORIGINS 16
#define HTTP_ORIGIN_MAX 255
/* File descriptors libwebsockets may hold beyond --max-clients (the
 * WebSocket clients count in those): plain HTTP requests, its listening
 * socket and its own. Past its limit it stops accepting until one
 * closes, rather than failing accept() on an exhausted process over and
 * over. */
#define HTTP_EXTRA_FDS 64

/* --http ADDR:PORT, parsed: a numeric IPv4 or IPv6 address ("[::1]:8080")
 * or "localhost"; port 0 picks a free one. */
typedef struct http_addr {
  char host[64];    /* as lws binds it: "127.0.0.1", "::1" */
  int port;
  bool v6;
  bool loopback;    /* 127.0.0.0/8, ::1 or localhost */
} http_addr;

typedef struct http_options {
  bool on;                 /* --http given */
  http_addr addr;
  const char *token_file;  /* --http-token-file */
  const char *cert, *key;  /* --http-cert, --http-key: TLS */
  const char *root;        /* --http-root: the page's files, or NULL */
  const char *origins[HTTP_MAX_ORIGINS]; /* --http-origin, repeatable */
  int n_origins;
} http_options;

/* Parses ADDR:PORT into a. Returns 0, or -1 with why naming what is
 * wrong. */
int http_parse_addr(const char *s, http_addr *a, char *why, size_t why_len);
/* Whether the --http options go together: a non-loopback address needs a
 * token file, and a certificate needs its key (and the key a
 * certificate). 0 when they do or --http is off, else -1 with why. */
int http_check_options(const http_options *o, char *why, size_t why_len);
/* Whether an Authorization header value is "Bearer TOKEN" for this token,
 * compared in time independent of where they differ. */
bool http_bearer_ok(const char *header, const char *token);
/* Whether s is the token, compared in the same way. */
bool http_token_same(const char *s, const char *token);
/* The cookie a browser keeps the token in (a browser's WebSocket cannot
 * send an Authorization header): set by GET /login?token=TOKEN. */
#define HTTP_COOKIE "aural_token"
/* A token's longest: with the rest of a browser's request it must fit in
 * the 4,096 bytes of headers libwebsockets keeps (http.c), as a cookie
 * and as a bearer header. */
#define HTTP_TOKEN_MAX 1024
/* Whether a Cookie header value holds HTTP_COOKIE=TOKEN for this token
 * (the first such cookie counts), compared as http_bearer_ok does. */
bool http_cookie_ok(const char *header, const char *token);
/* Whether s (an Origin, case-insensitive in scheme and host) is one of
 * the n allowed origins. "null" and empty never are. */
bool http_origin_allowed(const char *s, const char *const *allowed, int n);
/* Whether origin is scheme://host (case-insensitive), host a request's
 * Host header: the page that made the request came from the name and
 * port the request itself was sent to. An empty host never matches. */
bool http_origin_is_host(const char *origin, const char *scheme,
                         const char *host);
/* Whether a Host header names the authority of one of the allowed
 * origins (what they are with the scheme taken off). */
bool http_host_allowed(const char *host, const char *const *allowed, int n);
/* Whether a token read from a file is usable: 16 to HTTP_TOKEN_MAX
 * printable ASCII bytes. */
bool http_token_valid(const char *t);

/* One protocol message per WebSocket message: checks the bytes of each
 * message as its fragments arrive. */
typedef struct ws_framer {
  uint8_t head[16];        /* AURAL_PROTO_HEADER_BYTES */
  size_t have;             /* bytes of the current message so far */
  size_t want;             /* its protocol message's length, once known */
  uint32_t max_payload;    /* max_request_bytes */
} ws_framer;

/* Takes the next n bytes of a WebSocket message (final: they end it).
 * Returns 1 when they complete one protocol message, 0 when more must
 * come, or a negative AURAL_PROTO_E* code with why: the header's own
 * (FRAMING, VERSION, UNKNOWN_TYPE, TOO_LARGE) or FRAMING when the message
 * holds less or more than one protocol message. */
int ws_framer_feed(ws_framer *f, const uint8_t *p, size_t n, bool final,
                   char *why, size_t why_len);

#endif
