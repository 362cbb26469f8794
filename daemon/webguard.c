/*
 * What aurald checks of HTTP and WebSocket peers itself, apart from
 * libwebsockets' own parsing: the --http address, bearer tokens, Origin
 * and Host headers against the allow-list, and that every WebSocket
 * message carries exactly one protocol message. Pure functions over the
 * caller's bytes (no I/O, no logging), so that tests/fuzz/fuzz_web.c can
 * drive them with any input.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "web.h"

/* ---- --http ADDR:PORT ---------------------------------------------------- */

static bool is_loopback(const char *host, bool v6) {
  if (strcmp(host, "localhost") == 0) return true;
  if (v6) {
    struct in6_addr a;
    return inet_pton(AF_INET6, host, &a) == 1 && IN6_IS_ADDR_LOOPBACK(&a);
  }
  struct in_addr a;
  return inet_pton(AF_INET, host, &a) == 1 &&
         (ntohl(a.s_addr) >> 24) == 127;
}

/* The host part of ADDR:PORT (brackets taken off an IPv6 address) into a,
 * and where the port starts. NULL with why when the form is wrong. */
static const char *split_host(const char *s, http_addr *a, char *why,
                              size_t why_len) {
  const char *colon;
  size_t n;
  if (s[0] == '[') {
    const char *end = strchr(s, ']');
    if (end == NULL || end[1] != ':') {
      snprintf(why, why_len, "--http \"%s\": an IPv6 address is written "
               "[ADDR]:PORT", s);
      return NULL;
    }
    n = (size_t)(end - s - 1);
    colon = end + 1;
    a->v6 = true;
    s++;
  } else {
    colon = strrchr(s, ':');
    if (colon == NULL) {
      snprintf(why, why_len, "--http \"%s\": give ADDR:PORT, e.g. "
               "127.0.0.1:8080", s);
      return NULL;
    }
    n = (size_t)(colon - s);
  }
  if (n == 0 || n >= sizeof a->host) {
    snprintf(why, why_len, "--http: the address before the port is %s",
             n == 0 ? "empty" : "too long");
    return NULL;
  }
  memcpy(a->host, s, n);
  a->host[n] = '\0';
  return colon + 1;
}

int http_parse_addr(const char *s, http_addr *a, char *why, size_t why_len) {
  memset(a, 0, sizeof *a);
  const char *port = split_host(s, a, why, why_len);
  if (port == NULL) return -1;
  char *end;
  errno = 0;
  long p = strtol(port, &end, 10);
  if (errno || end == port || *end != '\0' || p < 0 || p > 65535) {
    snprintf(why, why_len, "--http: port \"%s\" is not 0 to 65535", port);
    return -1;
  }
  a->port = (int)p;
  uint8_t buf[sizeof(struct in6_addr)];
  bool numeric = inet_pton(a->v6 ? AF_INET6 : AF_INET, a->host, buf) == 1;
  if (!numeric && strcmp(a->host, "localhost") != 0) {
    snprintf(why, why_len, "--http: \"%s\" is not a numeric IP%s address "
             "or localhost", a->host, a->v6 ? "v6" : "v4");
    return -1;
  }
  a->loopback = is_loopback(a->host, a->v6);
  if (strcmp(a->host, "localhost") == 0) { /* also written [localhost] */
    strcpy(a->host, "127.0.0.1");
    a->v6 = false;
  }
  return 0;
}

/* ---- tokens ---------------------------------------------------------------- */

bool http_token_valid(const char *t) {
  size_t n = strlen(t);
  if (n < 16 || n > HTTP_TOKEN_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if (t[i] < 0x21 || t[i] > 0x7e) return false;
  return true;
}

/* Compares every byte of the longer string whatever the earlier ones were,
 * so that the time taken tells nothing of how much of a guess was right. */
static bool same_secret(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b), n = na > nb ? na : nb;
  unsigned diff = na != nb;
  for (size_t i = 0; i < n; i++) {
    unsigned char x = i < na ? (unsigned char)a[i] : 0;
    unsigned char y = i < nb ? (unsigned char)b[i] : 0;
    diff |= (unsigned)(x ^ y);
  }
  return diff == 0;
}

bool http_token_same(const char *s, const char *token) {
  return s != NULL && token != NULL && same_secret(s, token);
}

bool http_bearer_ok(const char *header, const char *token) {
  if (header == NULL || token == NULL) return false;
  if (strncasecmp(header, "Bearer ", 7) != 0) return false;
  const char *t = header + 7;
  while (*t == ' ') t++;
  return same_secret(t, token);
}

bool http_cookie_ok(const char *header, const char *token) {
  if (header == NULL || token == NULL) return false;
  const size_t name = strlen(HTTP_COOKIE "=");
  for (const char *p = header; *p != '\0';) {
    while (*p == ' ' || *p == ';') p++;
    size_t n = strcspn(p, ";");
    if (n > name && strncmp(p, HTTP_COOKIE "=", name) == 0) {
      char value[HTTP_TOKEN_MAX + 1];
      size_t k = n - name;
      if (k > HTTP_TOKEN_MAX) return false;
      memcpy(value, p + name, k);
      value[k] = '\0';
      return same_secret(value, token);
    }
    p += n;
  }
  return false;
}

/* ---- origins and hosts ------------------------------------------------------ */

bool http_origin_allowed(const char *s, const char *const *allowed, int n) {
  if (s == NULL || s[0] == '\0' || strcmp(s, "null") == 0) return false;
  for (int i = 0; i < n; i++)
    if (strcasecmp(s, allowed[i]) == 0) return true;
  return false;
}

bool http_origin_is_host(const char *origin, const char *scheme,
                         const char *host) {
  size_t n = strlen(scheme);
  if (origin == NULL || host == NULL || host[0] == '\0') return false;
  return strncasecmp(origin, scheme, n) == 0 &&
         strncmp(origin + n, "://", 3) == 0 &&
         strcasecmp(origin + n + 3, host) == 0;
}

bool http_host_allowed(const char *host, const char *const *allowed, int n) {
  if (host == NULL || host[0] == '\0') return false;
  for (int i = 0; i < n; i++) {
    const char *auth = strstr(allowed[i], "://");
    if (auth != NULL && strcasecmp(host, auth + 3) == 0) return true;
  }
  return false;
}

/* ---- one protocol message per WebSocket message ----------------------------- */

int ws_framer_feed(ws_framer *f, const uint8_t *p, size_t n, bool final,
                   char *why, size_t why_len) {
  /* The header first: its length says where the message must end. */
  size_t take = 0;
  if (f->have < AURAL_PROTO_HEADER_BYTES) {
    take = AURAL_PROTO_HEADER_BYTES - f->have;
    if (take > n) take = n;
    memcpy(f->head + f->have, p, take);
    if (f->have + take == AURAL_PROTO_HEADER_BYTES) {
      aural_msg_header h;
      int rc = aural_proto_decode_header(f->head, AURAL_PROTO_HEADER_BYTES,
                                         f->max_payload, &h);
      if (rc < 0) {
        snprintf(why, why_len, "%s in the header of a WebSocket message",
                 aural_proto_strerror(rc));
        return rc;
      }
      f->want = AURAL_PROTO_HEADER_BYTES + (size_t)h.payload_bytes;
    }
  }
  size_t have = f->have + n;
  if (f->want != 0 && have > f->want) {
    snprintf(why, why_len, "a WebSocket message carries more than one "
             "protocol message (%zu bytes where the header says %zu)",
             have, f->want);
    return AURAL_PROTO_EFRAMING;
  }
  f->have = have;
  if (!final) return 0;
  if (f->want == 0 || have < f->want) {
    snprintf(why, why_len, "a WebSocket message ends inside its protocol "
             "message (%zu of %zu bytes; one message per binary frame)",
             have, f->want != 0 ? f->want : (size_t)AURAL_PROTO_HEADER_BYTES);
    return AURAL_PROTO_EFRAMING;
  }
  f->have = 0;
  f->want = 0;
  return 1;
}

/* Options that only make sense together: main.c refuses them with the
 * rest of the command line (exit 2), http_start() again. */
int http_check_options(const http_options *o, char *why, size_t why_len) {
  if (!o->on) return 0;
  if (!o->addr.loopback && o->token_file == NULL) {
    snprintf(why, why_len, "--http %s:%d is not a loopback address: give "
             "--http-token-file too", o->addr.host, o->addr.port);
    return -1;
  }
  if ((o->cert == NULL) != (o->key == NULL)) {
    snprintf(why, why_len, "TLS needs both --http-cert and --http-key");
    return -1;
  }
  return 0;
}
