/*
 * A blocking client of aurald (proto/PROTOCOL.md): connect, handshake,
 * send messages, read whole messages.
 */
#define _GNU_SOURCE
#include "client.h"

#include <errno.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <aural.h>

/* Bound on the WELCOME payload, before the server has told its own. */
#define WELCOME_MAX_BYTES (64u << 20)

/* The user aurald.service runs as (User= in systemd/aurald.service.in). */
#define AURAL_SERVICE_USER "aural"

const char *client_default_socket(char *buf, size_t len) {
  const char *env = getenv("AURAL_SOCKET");
  if (aural_proto_default_socket(buf, len) < 0) buf[0] = '\0';
  /* A user without a daemon of their own reaches the system service. */
  if ((env == NULL || env[0] == '\0') && access(buf, F_OK) != 0 &&
      access(AURAL_PROTO_SYSTEM_SOCKET, F_OK) == 0)
    snprintf(buf, len, "%s", AURAL_PROTO_SYSTEM_SOCKET);
  return buf;
}

int64_t client_realtime_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* --- I/O ------------------------------------------------------------- */

int client_send(aural_client *c, const uint8_t *msg, size_t n, char *err,
                size_t err_len) {
  while (n > 0) {
    ssize_t k = send(c->fd, msg, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) return -EINTR;
    if (k < 0) {
      snprintf(err, err_len, "%s: send failed: %s%s", c->path,
               strerror(errno),
               errno == EPIPE || errno == ECONNRESET
                   ? " (aurald closed the connection)"
                   : "");
      return -1;
    }
    msg += k;
    n -= (size_t)k;
  }
  return 0;
}

int client_send_raw(aural_client *c, uint8_t type, uint32_t stream_id,
                    const void *payload, size_t n, char *err,
                    size_t err_len) {
  if (c->max_request_bytes != 0 && n > c->max_request_bytes) {
    snprintf(err, err_len, "%s message of %zu bytes is over the server's "
             "limit of %u", aural_msg_type_name(type), n,
             c->max_request_bytes);
    return -1;
  }
  uint8_t h[AURAL_PROTO_HEADER_BYTES];
  aural_msg_header mh = {.version = AURAL_PROTO_VERSION,
                         .type = type,
                         .stream_id = stream_id,
                         .payload_bytes = (uint32_t)n};
  aural_proto_put_header(h, &mh);
  int rc = client_send(c, h, sizeof h, err, err_len);
  if (rc == 0 && n > 0) rc = client_send(c, payload, n, err, err_len);
  return rc;
}

/* Reads exactly n bytes. Returns 0, 1 on end of file before the first byte,
 * -1 on error or end of file in the middle (err set), -EINTR. */
static int read_full(aural_client *c, uint8_t *p, size_t n, const char *what,
                     char *err, size_t err_len) {
  size_t got = 0;
  while (got < n) {
    if (c->timeout_ms >= 0) {
      struct pollfd pf = {.fd = c->fd, .events = POLLIN};
      int r = poll(&pf, 1, c->timeout_ms);
      if (r < 0 && errno == EINTR) return -EINTR;
      if (r == 0) {
        snprintf(err, err_len,
                 "%s: aurald sent nothing for %d s (is it stopped, or "
                 "stuck?)",
                 c->path, (c->timeout_ms + 999) / 1000);
        return -1;
      }
    }
    ssize_t k = recv(c->fd, p + got, n - got, 0);
    if (k < 0 && errno == EINTR) return -EINTR;
    if (k < 0) {
      snprintf(err, err_len, "%s: receive failed: %s", c->path,
               strerror(errno));
      return -1;
    }
    if (k == 0) {
      c->closed = true;
      if (got == 0 && what == NULL) return 1;
      snprintf(err, err_len,
               "%s: aurald closed the connection in the middle of %s "
               "(%zu of %zu bytes)",
               c->path, what ? what : "a message header", got, n);
      return -1;
    }
    got += (size_t)k;
  }
  return 0;
}

/* Decodes the payload of a server message into m->u. PONG and CHUNK are
 * left to the caller. */
static int decode_payload(client_msg *m, char *why, size_t why_len) {
  const uint8_t *p = m->payload;
  size_t n = m->h.payload_bytes;
  switch (m->h.type) {
  case AURAL_MSG_WELCOME:
    return aural_proto_decode_welcome(p, n, &m->u.welcome, why, why_len);
  case AURAL_MSG_ERROR:
    return aural_proto_decode_error(p, n, &m->u.error, why, why_len);
  case AURAL_MSG_PONG:
    return aural_proto_decode_pong(p, n, why, why_len);
  case AURAL_MSG_STREAMS:
    return aural_proto_decode_streams(p, n, &m->u.streams, why, why_len);
  case AURAL_MSG_SUBSCRIBED:
    return aural_proto_decode_subscribed(p, n, &m->u.subscribed, why,
                                         why_len);
  case AURAL_MSG_UNSUBSCRIBED:
    return aural_proto_decode_unsubscribed(p, n, &m->u.unsubscribed, why,
                                           why_len);
  case AURAL_MSG_STREAM_STARTED:
    return aural_proto_decode_stream_started(p, n, &m->u.started, why,
                                             why_len);
  case AURAL_MSG_STREAM_ENDED:
    return aural_proto_decode_stream_ended(p, n, &m->u.ended, why, why_len);
  case AURAL_MSG_GAP:
    return aural_proto_decode_gap(p, n, &m->u.gap, why, why_len);
  case AURAL_MSG_AUDIO_OPENED:
    return aural_proto_decode_audio_opened(p, n, &m->u.opened, why, why_len);
  case AURAL_MSG_AUDIO_CLOSED:
    return aural_proto_decode_audio_closed(p, n, &m->u.closed, why, why_len);
  case AURAL_MSG_STATS_REPLY:
    return aural_proto_decode_stats_reply(p, n, &m->u.stats, why, why_len);
  case AURAL_MSG_WORDS:
    return aural_proto_decode_words(p, n, &m->u.words, why, why_len);
  default:
    return 0;
  }
}

static bool is_server_type(int type) {
  switch (type) {
  case AURAL_MSG_HELLO:
  case AURAL_MSG_PING:
  case AURAL_MSG_LIST_STREAMS:
  case AURAL_MSG_SUBSCRIBE:
  case AURAL_MSG_UNSUBSCRIBE:
  case AURAL_MSG_AUDIO_OPEN:
  case AURAL_MSG_AUDIO_DATA:
  case AURAL_MSG_AUDIO_CLOSE:
  case AURAL_MSG_STATS:
    return false;
  default:
    return true;
  }
}

int client_read(aural_client *c, client_msg *m, char *err, size_t err_len) {
  memset(m, 0, sizeof *m);

  uint8_t hb[AURAL_PROTO_HEADER_BYTES];
  int rc = read_full(c, hb, sizeof hb, NULL, err, err_len);
  if (rc != 0) return rc;
  uint32_t limit = c->max_message_bytes ? c->max_message_bytes
                                        : WELCOME_MAX_BYTES;
  rc = aural_proto_decode_header(hb, sizeof hb, limit, &m->h);
  if (rc == AURAL_PROTO_ETOO_LARGE) {
    snprintf(err, err_len,
             "%s: aurald sent a %s of %u bytes, over its announced maximum "
             "of %u",
             c->path, aural_msg_type_name(m->h.type) ? aural_msg_type_name(
                                                          m->h.type)
                                                    : "message",
             m->h.payload_bytes, limit);
    return -1;
  }
  if (rc < 0) {
    snprintf(err, err_len,
             "%s: not an aurald message header (%s; magic %02x %02x %02x "
             "%02x, version %u, type 0x%02x)",
             c->path, aural_proto_strerror(rc), hb[0], hb[1], hb[2], hb[3],
             hb[4], hb[5]);
    return -1;
  }
  if (!is_server_type(m->h.type)) {
    snprintf(err, err_len, "%s: aurald sent %s, a client-to-server message",
             c->path, aural_msg_type_name(m->h.type));
    return -1;
  }

  size_t n = m->h.payload_bytes;
  if (n + 1 > c->cap) { /* +1: room for a NUL after the payload */
    size_t cap = c->cap ? c->cap : 4096;
    while (cap < n + 1) cap *= 2;
    uint8_t *p = realloc(c->buf, cap);
    if (p == NULL) {
      snprintf(err, err_len, "out of memory for a %zu-byte message", n);
      return -1;
    }
    c->buf = p;
    c->cap = cap;
  }
  char what[64];
  snprintf(what, sizeof what, "a %s message", aural_msg_type_name(m->h.type));
  rc = read_full(c, c->buf, n, what, err, err_len);
  if (rc != 0) return rc == 1 ? -1 : rc;
  c->buf[n] = 0;
  m->payload = c->buf;

  char why[256];
  if (decode_payload(m, why, sizeof why) != 0) {
    snprintf(err, err_len, "%s: aurald sent a malformed %s: %s", c->path,
             aural_msg_type_name(m->h.type), why);
    return -1;
  }
  return 0;
}

int client_error(const client_msg *m, char *out, size_t len, bool *fatal) {
  const aural_msg_error *e = &m->u.error;
  const char *name = e->name[0] ? e->name : aural_proto_error_name((int)e->code);
  const char *msg =
      e->message[0] ? e->message : aural_proto_strerror((int)e->code);
  snprintf(out, len, "%s: %s", name ? name : "ERROR", msg);
  if (fatal != NULL) *fatal = e->fatal;
  return aural_proto_error_from_wire(e->code);
}

/* --- connect and handshake -------------------------------------------- */

/* A model dimension from WELCOME within lo..hi (and a whole number). */
static bool model_dim(double v, double lo, double hi, uint32_t *out) {
  if (!(v >= lo && v <= hi) || v != (double)(uint32_t)v) return false;
  *out = (uint32_t)v;
  return true;
}

static int parse_welcome(aural_client *c, aural_msg_welcome *w, char *err,
                         size_t err_len) {
  const aural_msg_model *mm = &w->model;
  client_model *cm = &c->model;
  const char *bad = NULL;
  c->version = w->version;
  snprintf(c->server, sizeof c->server, "%.*s", (int)sizeof c->server - 1,
           w->server);
  c->max_request_bytes = w->max_request_bytes;
  c->max_message_bytes = w->max_message_bytes;
  if (w->version != AURAL_PROTO_VERSION) bad = "version";
  else if (w->max_request_bytes < 16) bad = "max_request_bytes";
  else if (w->max_message_bytes < 1024) bad = "max_message_bytes";
  else if (!model_dim(mm->sample_rate, 1, 10000000, &cm->sample_rate))
    bad = "model.sample_rate";
  else if (!model_dim(mm->n_mels, 1, 100000, &cm->n_mels)) bad = "model.n_mels";
  else if (!(mm->frame_ms > 0 && mm->frame_ms <= 100000))
    bad = "model.frame_ms";
  else if (!(mm->frame_length_ms >= 0 && mm->frame_length_ms <= 100000))
    bad = "model.frame_length_ms";
  else if (!model_dim(mm->d_model, 1, 1 << 20, &cm->d_model))
    bad = "model.d_model";
  else if (!model_dim(mm->n_layers, 0, 100000, &cm->n_layers))
    bad = "model.n_layers";
  else if (!model_dim(mm->window, 1, 1 << 24, &cm->window)) bad = "model.window";
  else if (!model_dim(mm->chunk_frames, 1, 1 << 24, &cm->chunk_frames))
    bad = "model.chunk_frames";
  else if (!model_dim(mm->vocab_size, 0, 1 << 24, &cm->vocab_size))
    bad = "model.vocab_size";
  if (bad) {
    snprintf(err, err_len, "%s: WELCOME from aurald has no valid %s", c->path,
             bad);
    return -1;
  }
  cm->frame_ms = mm->frame_ms;
  cm->words = mm->words;
  snprintf(cm->precision, sizeof cm->precision, "%s", mm->precision);
  cm->frame_length_ms = mm->frame_length_ms;
  if (cm->vocab_size > 0) {
    cm->vocab = calloc(cm->vocab_size, sizeof *cm->vocab);
    if (cm->vocab == NULL) {
      snprintf(err, err_len, "out of memory for the vocabulary");
      return -1;
    }
  }
  /* The decoder checked every token; they are copied one by one. */
  char tok[AURAL_PROTO_TEXT_MAX + 1];
  aural_json_list l = w->model.vocab;
  for (uint32_t i = 0; i < cm->vocab_size; i++)
    if (aural_proto_vocab_next(&l, tok, sizeof tok) != 1 ||
        (cm->vocab[i] = strdup(tok)) == NULL) {
      snprintf(err, err_len, "out of memory for the vocabulary");
      return -1;
    }
  return 0;
}

/* --- whom we talk to ------------------------------------------------- */

/* The uid of a user name or number; -1 when there is no such user. */
static long lookup_uid(const char *name) {
  struct passwd pw, *res = NULL;
  char buf[1024];
  if (getpwnam_r(name, &pw, buf, sizeof buf, &res) == 0 && res != NULL)
    return (long)pw.pw_uid;
  char *end;
  errno = 0;
  unsigned long v = strtoul(name, &end, 10);
  if (name[0] >= '0' && name[0] <= '9' && *end == '\0' && errno == 0 &&
      v < (unsigned long)(uid_t)-1)
    return (long)v;
  return -1;
}

/* The directories of the default paths, /tmp/aural-UID and /run/aural,
 * are checked before connecting as aurald checks them before binding:
 * another local user can make /tmp/aural-UID first and serve a socket of
 * their own there. The directory must be a real directory, owned by us or
 * root, writable by nobody else. A missing one is left to connect() to
 * report. Returns 0, or -1 with err set. */
static int check_default_dir(const char *path, char *err, size_t err_len) {
  char dir[sizeof ((aural_client *)0)->path];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == NULL || slash == dir) return 0;
  *slash = '\0';
  char tmp[64];
  snprintf(tmp, sizeof tmp, "/tmp/aural-%u", (unsigned)getuid());
  if (strcmp(dir, tmp) != 0 && strcmp(dir, "/run/aural") != 0) return 0;
  struct stat st;
  if (lstat(dir, &st) < 0) return 0;
  char owner[64];
  aural_proto_user_name(st.st_uid, owner, sizeof owner);
  const char *bad = NULL;
  if (S_ISLNK(st.st_mode))
    bad = "is a symbolic link";
  else if (!S_ISDIR(st.st_mode))
    bad = "is not a directory";
  else if (st.st_uid != getuid() && st.st_uid != 0)
    bad = "belongs to another user";
  else if (st.st_mode & (S_IWGRP | S_IWOTH))
    bad = "is writable by group or others";
  if (bad == NULL) return 0;
  snprintf(err, err_len,
           "%s %s (owned by uid %u, %s, mode %04o): another user could have "
           "put a socket there; not connecting (remove it, or give the "
           "socket with -s)",
           dir, bad, (unsigned)st.st_uid, owner,
           (unsigned)(st.st_mode & 07777));
  return -1;
}

/* Before anything is sent, the server must be run by us, root (also
 * systemd holding aurald.socket's socket), the service's user, or the
 * user named in $AURAL_SERVER_USER. Anyone else could have put the socket
 * there to receive our audio. Returns 0, or -1 with err set. */
static int check_server(aural_client *c, const char *path, char *err,
                        size_t err_len) {
  struct ucred cr;
  socklen_t len = sizeof cr;
  if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
    snprintf(err, err_len, "%s: cannot learn who serves it: %s", path,
             strerror(errno));
    return -1;
  }
  if (cr.uid == getuid() || cr.uid == geteuid() || cr.uid == 0) return 0;
  if (lookup_uid(AURAL_SERVICE_USER) == (long)cr.uid) return 0;
  const char *extra = getenv("AURAL_SERVER_USER");
  if (extra != NULL && extra[0] != '\0' && lookup_uid(extra) == (long)cr.uid)
    return 0;
  char owner[64];
  aural_proto_user_name(cr.uid, owner, sizeof owner);
  snprintf(err, err_len,
           "%s: served by uid %u (%s, pid %ld), not by you (uid %u), root or "
           "user %s; not talking to it (AURAL_SERVER_USER=%s trusts that "
           "user)",
           path, (unsigned)cr.uid, owner, (long)cr.pid, (unsigned)getuid(),
           AURAL_SERVICE_USER, owner);
  return -1;
}

static int open_socket(aural_client *c, const char *path, char *err,
                       size_t err_len) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t len = strlen(path);
  if (len == 0) {
    snprintf(err, err_len, "empty socket path");
    return -1;
  }
  if (len >= sizeof sa.sun_path) {
    snprintf(err, err_len,
             "%s: socket path too long (%zu bytes; a Unix socket path has "
             "at most %zu)",
             path, len, sizeof sa.sun_path - 1);
    return -1;
  }
  memcpy(sa.sun_path, path, len + 1);
  c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0) {
    snprintf(err, err_len, "socket: %s", strerror(errno));
    return -1;
  }
  /* A server that takes no connections (stopped, or stuck with its
   * listen queue full) holds a blocking connect for ever: SO_SNDTIMEO
   * bounds the wait of a Unix socket's connect to c->timeout_ms, as the
   * reads are bounded, and a signal ends it (the command's Ctrl-C). The
   * sends after it wait as long as they must. */
  struct timeval tv = {.tv_sec = c->timeout_ms / 1000,
                       .tv_usec = (c->timeout_ms % 1000) * 1000};
  if (c->timeout_ms >= 0)
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int rc = connect(c->fd, (struct sockaddr *)&sa, sizeof sa);
  int e = errno;
  struct timeval none = {0};
  setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
  if (rc == 0) return check_server(c, path, err, err_len);
  struct stat st;
  if ((e == ECONNREFUSED || e == ENOTSOCK) && stat(path, &st) == 0 &&
      !S_ISSOCK(st.st_mode))
    e = ENOTSOCK;
  switch (e) {
  case EINTR:
    snprintf(err, err_len, "interrupted");
    break;
  case EAGAIN:
    snprintf(err, err_len,
             "%s: aurald took no connection in %d s (is it stopped, or "
             "stuck?)",
             path, (c->timeout_ms + 999) / 1000);
    break;
  case ENOENT:
    snprintf(err, err_len, "aurald not running? no socket at %s", path);
    break;
  case ECONNREFUSED:
    snprintf(err, err_len,
             "aurald not running? %s exists but nothing listens on it",
             path);
    break;
  case EACCES:
  case EPERM:
    snprintf(err, err_len,
             "%s: permission denied (the socket or a directory above it is "
             "not accessible to uid %u)",
             path, (unsigned)getuid());
    break;
  case ENOTSOCK:
    snprintf(err, err_len, "%s: not a socket (is -s the right path?)", path);
    break;
  case ENOTDIR:
    snprintf(err, err_len, "%s: a component of the path is not a directory",
             path);
    break;
  default:
    snprintf(err, err_len, "%s: cannot connect: %s", path, strerror(e));
  }
  return -1;
}

int client_connect(const char *path, const char *name, aural_client **out,
                   char *err, size_t err_len) {
  char def[sizeof ((aural_client *)0)->path];
  *out = NULL;
  if (path == NULL) {
    path = client_default_socket(def, sizeof def);
    const char *env = getenv("AURAL_SOCKET");
    if ((env == NULL || env[0] == '\0') &&
        check_default_dir(path, err, err_len) < 0)
      return -1;
  }
  aural_client *c = calloc(1, sizeof *c);
  if (c == NULL) {
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  c->fd = -1;
  c->timeout_ms = CLIENT_TIMEOUT_MS;
  snprintf(c->path, sizeof c->path, "%s", path);
  if (open_socket(c, path, err, err_len) < 0) goto fail;

  aural_msg_hello hello = {.versions = 1u << AURAL_PROTO_VERSION};
  snprintf(hello.client, sizeof hello.client, "%s %s", name, AURAL_VERSION);
  uint8_t msg[AURAL_PROTO_HEADER_BYTES + 256];
  size_t n = aural_proto_encode_hello(msg, sizeof msg, &hello);
  if (n == 0) {
    snprintf(err, err_len, "cannot encode HELLO");
    goto fail;
  }
  int rc = client_send(c, msg, n, err, err_len);
  if (rc == -EINTR) snprintf(err, err_len, "interrupted");
  if (rc < 0) goto fail;

  client_msg m;
  rc = client_read(c, &m, err, err_len);
  if (rc == 1)
    snprintf(err, err_len, "%s: aurald closed the connection before "
             "answering HELLO", path);
  if (rc == -EINTR) snprintf(err, err_len, "interrupted");
  if (rc != 0) goto fail;
  if (m.h.type == AURAL_MSG_ERROR) {
    char e[200];
    client_error(&m, e, sizeof e, NULL);
    snprintf(err, err_len, "%s: aurald refused the connection: %s", path, e);
    goto fail;
  }
  if (m.h.type != AURAL_MSG_WELCOME) {
    snprintf(err, err_len, "%s: aurald answered HELLO with %s, not WELCOME",
             path, aural_msg_type_name(m.h.type));
    goto fail;
  }
  if (parse_welcome(c, &m.u.welcome, err, err_len) < 0) goto fail;
  *out = c;
  return 0;
fail:
  client_close(c);
  return -1;
}

void client_close(aural_client *c) {
  if (c == NULL) return;
  if (c->fd >= 0) close(c->fd);
  if (c->model.vocab != NULL)
    for (uint32_t i = 0; i < c->model.vocab_size; i++)
      free(c->model.vocab[i]);
  free(c->model.vocab);
  free(c->buf);
  free(c);
}
