/*
 * The cluster layout's names and the cluster URL (aural/cluster.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aural/cluster.h"
#include "aural/proto.h"
#include "internal.h"

static int fail(char *why, size_t why_len, const char *url, const char *what) {
  snprintf(why, why_len, "cluster URL '%s': %s", url, what);
  return -1;
}

/* A decimal integer in [lo, hi] spanning s[0..n). */
static int parse_int(const char *s, size_t n, long lo, long hi, int *out) {
  if (n == 0 || n > 9) return -1;
  long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  if (v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

int aural_cluster_url_parse(const char *url, aural_cluster_url *u, char *why,
                            size_t why_len) {
  memset(u, 0, sizeof *u);
  u->port = 6379;
  if (strncmp(url, "unix:", 5) == 0) {
    const char *p = url + 5;
    if (strncmp(p, "//", 2) == 0) p += 2; /* unix://PATH too */
    if (*p != '/')
      return fail(why, why_len, url, "expected unix:/absolute/path");
    if (strlen(p) >= sizeof u->path)
      return fail(why, why_len, url, "the socket path is too long");
    u->is_unix = true;
    snprintf(u->path, sizeof u->path, "%s", p);
    return 0;
  }
  if (strncmp(url, "redis://", 8) != 0)
    return fail(why, why_len, url,
                "expected redis://[USER@]HOST[:PORT][/DB] or unix:PATH");
  const char *p = url + 8;
  const char *at = strchr(p, '@');
  const char *slash = strchr(p, '/');
  if (at != NULL && (slash == NULL || at < slash)) {
    size_t n = (size_t)(at - p);
    const char *colon = memchr(p, ':', n);
    if (colon != NULL) {
      /* The message must not show the password it refuses. */
      snprintf(why, why_len,
               "cluster URL 'redis://%.*s:***@%s': a password in the URL is "
               "refused (it shows in ps and logs): use "
               "--cluster-password-file or $AURAL_REDIS_PASSWORD",
               (int)(colon - p), p, at + 1);
      return -1;
    }
    if (n == 0 || n >= sizeof u->user)
      return fail(why, why_len, url, "bad user name");
    memcpy(u->user, p, n);
    p = at + 1;
  }
  const char *end = p + strlen(p);
  if (slash != NULL && slash >= p) {
    if (parse_int(slash + 1, (size_t)(end - slash - 1), 0, 1 << 20, &u->db))
      return fail(why, why_len, url, "the database after '/' is not a number");
    end = slash;
  }
  const char *host = p, *host_end = end;
  if (*p == '[') { /* [IPv6]:port */
    const char *close = memchr(p, ']', (size_t)(end - p));
    if (close == NULL) return fail(why, why_len, url, "unclosed '['");
    host = p + 1;
    host_end = close;
    p = close + 1;
  } else {
    const char *colon = memchr(p, ':', (size_t)(end - p));
    host_end = colon != NULL ? colon : end;
    p = host_end;
  }
  if (p < end) {
    if (*p != ':' ||
        parse_int(p + 1, (size_t)(end - p - 1), 1, 65535, &u->port))
      return fail(why, why_len, url, "the port is not a number in 1..65535");
  }
  size_t hn = (size_t)(host_end - host);
  if (hn == 0) return fail(why, why_len, url, "no host");
  if (hn >= sizeof u->host) return fail(why, why_len, url, "host too long");
  memcpy(u->host, host, hn);
  return 0;
}

void aural_cluster_url_format(const aural_cluster_url *u, char *buf,
                              size_t cap) {
  if (u->is_unix) {
    snprintf(buf, cap, "unix:%s", u->path);
    return;
  }
  bool v6 = strchr(u->host, ':') != NULL;
  snprintf(buf, cap, "redis://%s%s%s%s%s:%d/%d", u->user,
           u->user[0] ? "@" : "", v6 ? "[" : "", u->host, v6 ? "]" : "",
           u->port, u->db);
}

int aural_cluster_password(const char *file, char *out, size_t cap,
                           char *why, size_t why_len) {
  out[0] = '\0';
  if (file == NULL) {
    const char *env = getenv("AURAL_REDIS_PASSWORD");
    if (env == NULL || env[0] == '\0') return 0;
    if (strlen(env) >= cap || strlen(env) > AURAL_CLUSTER_PASSWORD_MAX) {
      snprintf(why, why_len, "$AURAL_REDIS_PASSWORD is too long");
      return -1;
    }
    snprintf(out, cap, "%s", env);
    return 1;
  }
  /* O_NONBLOCK: a FIFO must not hold the open; it is refused below. */
  int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    snprintf(why, why_len, "password file %s: %s", file, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode) || (st.st_mode & 0077) != 0) {
    snprintf(why, why_len,
             "password file %s: %s", file,
             S_ISREG(st.st_mode)
                 ? "others may read or write it (chmod 600 it)"
                 : "not a regular file");
    close(fd);
    return -1;
  }
  char buf[AURAL_CLUSTER_PASSWORD_MAX + 2];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0) {
    snprintf(why, why_len, "password file %s: %s", file, strerror(errno));
    return -1;
  }
  buf[n] = '\0';
  buf[strcspn(buf, "\r\n")] = '\0';
  size_t len = strlen(buf);
  if (len == 0 || len >= cap || len > AURAL_CLUSTER_PASSWORD_MAX) {
    snprintf(why, why_len, "password file %s: %s", file,
             len == 0 ? "empty first line" : "the password is too long");
    return -1;
  }
  memcpy(out, buf, len + 1);
  return 1;
}

bool aural_cluster_valid_name(const char *name) {
  return aural_proto_valid_name(name) && strpbrk(name, "{}") == NULL;
}

size_t aural_cluster_key(char *buf, size_t cap, const char *name,
                         const char *part) {
  if (!aural_cluster_valid_name(name)) return 0;
  int n = snprintf(buf, cap, "aural:{%s}:%s", name, part);
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

/* ---- numbers read back from Redis --------------------------------------- */

int aural_cluster_parse_uint(const char *s, size_t len, uint64_t lo,
                             uint64_t hi, uint64_t *out) {
  if (s == NULL || len == 0 || len > 20) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  if (v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int aural_cluster_parse_int(const char *s, size_t len, int64_t lo,
                            int64_t hi, int64_t *out) {
  if (s == NULL || len == 0) return -1;
  bool neg = s[0] == '-';
  uint64_t m;
  if (aural_cluster_parse_uint(s + neg, len - neg, 0,
                               neg ? (uint64_t)INT64_MAX + 1 : INT64_MAX,
                               &m) < 0)
    return -1;
  /* -(INT64_MAX + 1) without overflowing a signed value. */
  int64_t v = neg ? (m == 0 ? 0 : -(int64_t)(m - 1) - 1) : (int64_t)m;
  if (v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int aural_cluster_parse_real(const char *s, size_t len, double lo,
                             double hi, double *out) {
  if (s == NULL || len == 0 || len > 40) return -1;
  size_t i = s[0] == '-', digits = 0;
  for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) digits++;
  if (digits == 0) return -1;
  if (i < len && s[i] == '.') {
    size_t frac = 0;
    for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++) frac++;
    if (frac == 0) return -1;
  }
  if (i != len) return -1;
  double v;
  if (aural__parse_double(s, len, &v) != 0 || !(v >= lo && v <= hi))
    return -1;
  *out = v;
  return 0;
}
