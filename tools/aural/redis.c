/*
 * A synchronous connection to the cluster's Redis (redis.h).
 */
#define _GNU_SOURCE
#include "redis.h"

#include <ctype.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static struct timeval ms_to_tv(int ms) {
  return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
}

/* --- arguments -------------------------------------------------------- */

void cluster_args_init(cluster_args *a, const char *command) {
  a->n = 0;
  cluster_arg(a, command);
}

void cluster_args_list(cluster_args *a, const char *command, ...) {
  va_list ap;
  va_start(ap, command);
  cluster_args_init(a, command);
  for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
    cluster_arg(a, s);
  va_end(ap);
}

static void add(cluster_args *a, const void *p, size_t n, bool secret) {
  /* More arguments than any command here sends is a bug of this file's
   * callers, not something input can cause. */
  if (a->n >= CLUSTER_ARGS_MAX) abort();
  a->v[a->n] = p;
  a->len[a->n] = n;
  a->secret[a->n] = secret;
  a->n++;
}

void cluster_arg(cluster_args *a, const char *s) {
  add(a, s, strlen(s), false);
}

void cluster_arg_bin(cluster_args *a, const void *p, size_t n) {
  add(a, p, n, false);
}

void cluster_arg_secret(cluster_args *a, const char *s) {
  add(a, s, strlen(s), true);
}

void cluster_arg_fmt(cluster_args *a, const char *fmt, ...) {
  if (a->n >= CLUSTER_ARGS_MAX) abort();
  char *buf = a->num[a->n];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof a->num[0], fmt, ap);
  va_end(ap);
  add(a, buf, strlen(buf), false);
}

/* The command for messages: each argument as it is when it is short and
 * printable, else its size ("<3200 bytes>"); secrets as "***". */
static void describe(const cluster_args *a, char *out, size_t cap) {
  size_t at = 0;
  out[0] = '\0';
  for (int i = 0; i < a->n && at + 1 < cap; i++) {
    bool plain = !a->secret[i] && a->len[i] <= 64;
    for (size_t k = 0; plain && k < a->len[i]; k++)
      plain = isgraph((unsigned char)a->v[i][k]) != 0;
    const char *sep = i > 0 ? " " : "";
    int n = a->secret[i] ? snprintf(out + at, cap - at, "%s***", sep)
            : plain ? snprintf(out + at, cap - at, "%s%.*s", sep,
                               (int)a->len[i], a->v[i])
                    : snprintf(out + at, cap - at, "%s<%zu bytes>", sep,
                               a->len[i]);
    if (n < 0) break;
    at += (size_t)n;
  }
}

/* --- commands ---------------------------------------------------------- */

redisReply *cluster_run(cluster_conn *c, const cluster_args *a, char *err,
                        size_t err_len) {
  char cmd[300];
  c->said[0] = '\0';
  if (c->ctx == NULL || c->ctx->err != 0) {
    describe(a, cmd, sizeof cmd);
    snprintf(err, err_len, "Redis at %s: %s: not connected", c->url_text,
             cmd);
    return NULL;
  }
  /* hiredis 0.14 declares argv without its second const; it only reads. */
  redisReply *r = redisCommandArgv(c->ctx, a->n, (const char **)a->v, a->len);
  if (r != NULL && r->type != REDIS_REPLY_ERROR) return r;
  describe(a, cmd, sizeof cmd);
  if (r == NULL) {
    /* hiredis words a timeout as EAGAIN's text. */
    bool timeout = strstr(c->ctx->errstr, "temporarily unavailable") != NULL;
    if (timeout)
      snprintf(err, err_len, "Redis at %s: %s: no reply within %d ms",
               c->url_text, cmd, CLUSTER_COMMAND_TIMEOUT_MS);
    else
      snprintf(err, err_len, "Redis at %s: %s: %s", c->url_text, cmd,
               c->ctx->errstr);
    return NULL;
  }
  snprintf(c->said, sizeof c->said, "%.*s", (int)r->len, r->str);
  snprintf(err, err_len, "Redis at %s: %s: %s", c->url_text, cmd, c->said);
  freeReplyObject(r);
  return NULL;
}

int cluster_do(cluster_conn *c, const cluster_args *a, char *err,
               size_t err_len) {
  redisReply *r = cluster_run(c, a, err, err_len);
  if (r == NULL) return -1;
  freeReplyObject(r);
  return 0;
}

redisReply *cluster_run_again(cluster_conn *c, const cluster_args *a,
                              int tries, char *err, size_t err_len) {
  for (int i = 1;; i++) {
    redisReply *r = cluster_run(c, a, err, err_len);
    if (r != NULL || c->said[0] != '\0' || i >= tries) return r;
    struct timespec pause = {.tv_nsec = 500 * 1000 * 1000};
    nanosleep(&pause, NULL);
    /* A failed reconnection is told by the next try ("not connected"),
     * or here when it was the last chance. */
    if (cluster_reconnect(c, err, err_len) < 0 && i + 1 >= tries) return NULL;
  }
}

bool cluster_said_id_taken(const cluster_conn *c) {
  return strstr(c->said, "equal or smaller than the target stream top item") !=
         NULL;
}

/* --- connecting -------------------------------------------------------- */

const char *cluster_options(const char *url, const char *password_file,
                            const char *socket, char *why, size_t why_len) {
  aural_cluster_url u;
  if (password_file != NULL && url == NULL)
    return "--cluster-password-file needs --cluster";
  if (url != NULL && socket != NULL)
    return "--socket and --cluster exclude each other";
  if (url != NULL && aural_cluster_url_parse(url, &u, why, why_len) < 0)
    return why;
  return NULL;
}

/* AUTH and SELECT, as the URL and the password ask. */
static int handshake(cluster_conn *c, char *err, size_t err_len) {
  cluster_args a;
  if (c->url.user[0] != '\0' && c->password[0] == '\0') {
    snprintf(err, err_len,
             "Redis at %s: user '%s' needs a password "
             "(--cluster-password-file or $AURAL_REDIS_PASSWORD)",
             c->url_text, c->url.user);
    return -1;
  }
  if (c->password[0] != '\0') {
    cluster_args_init(&a, "AUTH");
    if (c->url.user[0] != '\0') cluster_arg(&a, c->url.user);
    cluster_arg_secret(&a, c->password);
    redisReply *r = cluster_run(c, &a, err, err_len);
    if (r == NULL) return -1;
    freeReplyObject(r);
  }
  if (c->url.db != 0) {
    cluster_args_init(&a, "SELECT");
    cluster_arg_fmt(&a, "%d", c->url.db);
    redisReply *r = cluster_run(c, &a, err, err_len);
    if (r == NULL) return -1;
    freeReplyObject(r);
  }
  return 0;
}

int cluster_reconnect(cluster_conn *c, char *err, size_t err_len) {
  if (c->ctx != NULL) redisFree(c->ctx);
  struct timeval tv = ms_to_tv(CLUSTER_CONNECT_TIMEOUT_MS);
  c->ctx = c->url.is_unix
               ? redisConnectUnixWithTimeout(c->url.path, tv)
               : redisConnectWithTimeout(c->url.host, c->url.port, tv);
  if (c->ctx == NULL) {
    snprintf(err, err_len, "cannot connect to Redis at %s: out of memory",
             c->url_text);
    return -1;
  }
  if (c->ctx->err != 0) {
    snprintf(err, err_len, "cannot connect to Redis at %s: %s", c->url_text,
             c->ctx->errstr);
    return -1;
  }
  if (redisSetTimeout(c->ctx, ms_to_tv(CLUSTER_COMMAND_TIMEOUT_MS)) !=
      REDIS_OK) {
    snprintf(err, err_len, "Redis at %s: cannot set a timeout: %s",
             c->url_text, c->ctx->errstr);
    return -1;
  }
  return handshake(c, err, err_len);
}

int cluster_connect(cluster_conn *c, const char *url, const char *password_file,
                    char *err, size_t err_len) {
  memset(c, 0, sizeof *c);
  char why[600];
  if (aural_cluster_url_parse(url, &c->url, why, sizeof why) < 0 ||
      aural_cluster_password(password_file, c->password, sizeof c->password,
                             why, sizeof why) < 0) {
    snprintf(err, err_len, "%s", why);
    cluster_close(c);
    return -1;
  }
  aural_cluster_url_format(&c->url, c->url_text, sizeof c->url_text);
  signal(SIGPIPE, SIG_IGN);
  if (cluster_reconnect(c, err, err_len) < 0) {
    cluster_close(c);
    return -1;
  }
  return 0;
}

void cluster_close(cluster_conn *c) {
  if (c->ctx != NULL) redisFree(c->ctx);
  c->ctx = NULL;
  explicit_bzero(c->password, sizeof c->password);
}

/* --- replies ------------------------------------------------------------ */

const redisReply *cluster_field(const redisReply *flat, const char *name) {
  if (flat == NULL || flat->type != REDIS_REPLY_ARRAY) return NULL;
  size_t n = strlen(name);
  const redisReply *found = NULL;
  for (size_t i = 0; i + 1 < flat->elements; i += 2) {
    const redisReply *k = flat->element[i], *v = flat->element[i + 1];
    if (k->type == REDIS_REPLY_STRING && k->len == n &&
        memcmp(k->str, name, n) == 0) {
      if (found != NULL) return NULL; /* twice: which one is meant? */
      found = v;
    }
  }
  return found != NULL && found->type == REDIS_REPLY_STRING ? found : NULL;
}

int cluster_field_int(const redisReply *flat, const char *name, int64_t lo,
                      int64_t hi, int64_t *out) {
  const redisReply *v = cluster_field(flat, name);
  return v == NULL ? -1 : aural_cluster_parse_int(v->str, v->len, lo, hi, out);
}

int cluster_field_double(const redisReply *flat, const char *name, double lo,
                         double hi, double *out) {
  const redisReply *v = cluster_field(flat, name);
  return v == NULL ? -1
                   : aural_cluster_parse_real(v->str, v->len, lo, hi, out);
}

int cluster_parse_id(const redisReply *r, uint64_t *ms, uint64_t *seq) {
  if (r == NULL || r->type != REDIS_REPLY_STRING) return -1;
  const char *dash = memchr(r->str, '-', r->len);
  if (dash == NULL) return -1;
  size_t head = (size_t)(dash - r->str);
  return aural_cluster_parse_uint(r->str, head, 0, UINT64_MAX, ms) == 0 &&
                 aural_cluster_parse_uint(dash + 1, r->len - head - 1, 0,
                                          UINT64_MAX, seq) == 0
             ? 0
             : -1;
}

/* An entry: [ID, [field, value, ...]] with an even number of fields. */
static bool is_entry(const redisReply *e) {
  return e->type == REDIS_REPLY_ARRAY && e->elements == 2 &&
         e->element[0]->type == REDIS_REPLY_STRING &&
         e->element[1]->type == REDIS_REPLY_ARRAY &&
         e->element[1]->elements % 2 == 0;
}

int cluster_entries(const redisReply *r, bool xread,
                    redisReply *const **entries, size_t *n) {
  *entries = NULL;
  *n = 0;
  if (xread && r->type == REDIS_REPLY_NIL) return 0;
  if (xread) {
    /* [[key, entries]]: one stream was asked for. */
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1 ||
        r->element[0]->type != REDIS_REPLY_ARRAY ||
        r->element[0]->elements != 2)
      return -1;
    r = r->element[0]->element[1];
  }
  if (r->type != REDIS_REPLY_ARRAY) return -1;
  for (size_t i = 0; i < r->elements; i++)
    if (!is_entry(r->element[i])) return -1;
  *entries = r->element;
  *n = r->elements;
  return 0;
}
