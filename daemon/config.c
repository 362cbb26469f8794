/*
 * The configuration file and the service manager: aurald.conf is read
 * into command-line words (so one parser checks both), sockets passed by
 * systemd socket activation are adopted, and readiness is reported on
 * $NOTIFY_SOCKET. Both systemd protocols are small and documented
 * (sd_listen_fds(3), sd_notify(3)); they are spoken here directly rather
 * than through libsystemd, so the daemon also runs where it is absent.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"

#define CONF_MAX_BYTES (1 << 20)

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  return s;
}

/* Appends one word, made by fmt, that came from the file's line. */
__attribute__((format(printf, 3, 4))) static int
add_word(config_words *cw, int line, const char *fmt, ...) {
  if (cw->n + 1 >= cw->cap) {
    size_t cap = cw->cap ? cw->cap * 2 : 16;
    char **p = realloc(cw->words, cap * sizeof *p);
    if (p == NULL) return -1;
    cw->words = p;
    int *l = realloc(cw->lines, cap * sizeof *l);
    if (l == NULL) return -1;
    cw->lines = l;
    cw->cap = cap;
  }
  char *w = NULL;
  va_list ap;
  va_start(ap, fmt);
  int rc = vasprintf(&w, fmt, ap);
  va_end(ap);
  if (rc < 0) return -1;
  cw->lines[cw->n] = line;
  cw->words[cw->n++] = w;
  cw->words[cw->n] = NULL;
  return 0;
}

/* The whole file into *text (NUL-terminated after its *len bytes, which
 * may hold NUL bytes of their own). Read, not sized by fstat(), so that
 * a pipe or a file that grows is held to the same bound. */
static int read_all(const char *path, char **text, size_t *len, char *why,
                    size_t why_len) {
  FILE *f = fopen(path, "re");
  if (f == NULL) {
    snprintf(why, why_len, "cannot read config %s: %s", path,
             strerror(errno));
    return -1;
  }
  char *buf = malloc(CONF_MAX_BYTES + 2);
  if (buf == NULL) {
    fclose(f);
    snprintf(why, why_len, "out of memory reading %s", path);
    return -1;
  }
  size_t n = fread(buf, 1, CONF_MAX_BYTES + 1, f);
  /* A directory opens and then fails to read (EISDIR): it must not pass
   * for an empty config. */
  int failed = ferror(f) ? errno : 0;
  fclose(f);
  if (failed != 0 || n > CONF_MAX_BYTES) {
    if (failed != 0)
      snprintf(why, why_len, "cannot read config %s: %s", path,
               strerror(failed));
    else
      snprintf(why, why_len, "config %s is larger than %d bytes", path,
               CONF_MAX_BYTES);
    free(buf);
    return -1;
  }
  buf[n] = '\0';
  *text = buf;
  *len = n;
  return 0;
}

static const config_key *find_key(const config_key *keys, size_t n_keys,
                                  const char *name) {
  for (size_t i = 0; i < n_keys; i++)
    if (strcmp(keys[i].name, name) == 0) return &keys[i];
  return NULL;
}

/* One "key = value" line (comment and blanks removed) as words. The
 * words of an option take the form "--key=value", so that getopt cannot
 * take a value for an option or an option for a value. Returns 0, -1 with
 * why, or -2 when out of memory. */
static int line_words(const char *path, int lineno, char *s,
                      const config_key *keys, size_t n_keys, int *set_on,
                      const char *dir, config_words *cw, char *why,
                      size_t why_len) {
  char *eq = strchr(s, '=');
  if (eq == NULL) {
    snprintf(why, why_len, "%s:%d: expected \"key = value\", got \"%.60s\"",
             path, lineno, s);
    return -1;
  }
  *eq = '\0';
  char *key = trim(s), *value = trim(eq + 1);
  /* "file-realtime = PATH" is "--file=PATH --realtime". */
  bool realtime = strcmp(key, "file-realtime") == 0;
  const config_key *k = find_key(keys, n_keys, realtime ? "file" : key);
  if (k == NULL) {
    snprintf(why, why_len,
             "%s:%d: unknown key \"%.60s\" (keys are aurald's long option "
             "names, see aurald --help)",
             path, lineno, key);
    return -1;
  }
  if (k->flags & CONFIG_NEVER) {
    snprintf(why, why_len, "%s:%d: \"%s\" cannot be set in a config file",
             path, lineno, key);
    return -1;
  }
  int *first = &set_on[k - keys];
  if (!(k->flags & CONFIG_REPEAT) && *first != 0) {
    snprintf(why, why_len, "%s:%d: %s is already set on line %d", path,
             lineno, key, *first);
    return -1;
  }
  *first = lineno;
  /* "mic = 1" is device 1, not a yes. */
  bool numbers = k->has_arg == no_argument;
  bool yes = strcmp(value, "yes") == 0 || strcmp(value, "true") == 0 ||
             (numbers && strcmp(value, "1") == 0);
  bool no = strcmp(value, "no") == 0 || strcmp(value, "false") == 0 ||
            (numbers && strcmp(value, "0") == 0);
  int rc = 0;
  if (k->has_arg == no_argument) {
    if (!yes && !no) {
      snprintf(why, why_len, "%s:%d: %s must be yes or no", path, lineno,
               key);
      return -1;
    }
    if (yes) rc = add_word(cw, lineno, "--%s", key);
  } else if (k->has_arg == optional_argument && (yes || no)) {
    if (yes) rc = add_word(cw, lineno, "--%s", key);
  } else if (*value == '\0') {
    if (k->has_arg == optional_argument)
      snprintf(why, why_len, "%s:%d: %s must be yes, no or a device", path,
               lineno, key);
    else
      snprintf(why, why_len, "%s:%d: %s needs a value", path, lineno, key);
    return -1;
  } else {
    /* A relative path is the file's neighbour, wherever aurald runs; so
     * is a unix: URL's (an empty one stays empty, to be refused as such
     * rather than taken for the file's directory). */
    const char *scheme = "", *rest = value;
    if ((k->flags & CONFIG_URL) && strncmp(value, "unix:", 5) == 0)
      scheme = "unix:", rest = value + 5;
    bool relative = ((k->flags & CONFIG_PATH) || *scheme) &&
                    rest[0] != '/' && rest[0] != '\0';
    rc = add_word(cw, lineno, "--%s=%s%s%s", k->name, scheme,
                  relative ? dir : "", rest);
    if (rc == 0 && realtime) rc = add_word(cw, lineno, "--realtime");
  }
  return rc < 0 ? -2 : 0;
}

/* The directory of the file at path, with its final '/', made absolute
 * when path is relative: a cluster's unix:PATH must be absolute, and a
 * relative path logged or reported names where it was looked for. The
 * current directory left unknown (removed), it stays relative. NULL when
 * out of memory. */
static char *file_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  int len = slash != NULL ? (int)(slash - path) + 1 : 0;
  char *cwd = NULL, *dir = NULL;
  if (path[0] != '/') {
    while (len >= 2 && strncmp(path, "./", 2) == 0) path += 2, len -= 2;
    cwd = getcwd(NULL, 0);
  }
  if (cwd != NULL && strcmp(cwd, "/") == 0) cwd[0] = '\0';
  if (asprintf(&dir, "%s%s%.*s", cwd != NULL ? cwd : "",
               cwd != NULL ? "/" : "", len, path) < 0)
    dir = NULL;
  free(cwd);
  return dir;
}

int config_read(const char *path, const config_key *keys, size_t n_keys,
                config_words *cw, char *why, size_t why_len) {
  memset(cw, 0, sizeof *cw);
  char *text = NULL;
  size_t len = 0;
  if (read_all(path, &text, &len, why, why_len) < 0) return -1;
  /* (n_keys) the line that set each key, 0 while none has. */
  int *set_on = calloc(n_keys + 1, sizeof *set_on);
  char *dir = file_dir(path);
  int rc = set_on != NULL && dir != NULL && add_word(cw, 0, "aurald") == 0
               ? 0
               : -2;
  int lineno = 0;
  for (char *line = text; rc == 0 && line < text + len;) {
    char *end = memchr(line, '\n', (size_t)(text + len - line));
    if (end == NULL) end = text + len;
    lineno++;
    if (memchr(line, '\0', (size_t)(end - line)) != NULL) {
      snprintf(why, why_len, "%s:%d: a NUL byte (not a text file?)", path,
               lineno);
      rc = -1;
      break;
    }
    *end = '\0';
    char *hash = strchr(line, '#');
    if (hash != NULL) *hash = '\0';
    char *s = trim(line);
    if (*s != '\0')
      rc = line_words(path, lineno, s, keys, n_keys, set_on, dir, cw, why,
                      why_len);
    line = end + 1;
  }
  if (rc == -2) snprintf(why, why_len, "out of memory reading %s", path);
  free(set_on);
  free(dir);
  free(text);
  if (rc != 0) config_words_free(cw);
  return rc == 0 ? 0 : -1;
}

void config_words_free(config_words *cw) {
  for (size_t i = 0; i < cw->n; i++) free(cw->words[i]);
  free(cw->words);
  free(cw->lines);
  memset(cw, 0, sizeof *cw);
}

/* sd_listen_fds(3): LISTEN_PID is ours and LISTEN_FDS sockets start at
 * fd 3. We take exactly one listening AF_UNIX stream socket. Returns the
 * fd, -1 when not socket-activated, or -2 on an unusable passed socket. */
int activation_fd(char *why, size_t why_len) {
  const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
  if (pid == NULL || fds == NULL) return -1;
  long p = strtol(pid, NULL, 10), n = strtol(fds, NULL, 10);
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  unsetenv("LISTEN_FDNAMES");
  if (p != (long)getpid()) return -1;
  if (n != 1) {
    snprintf(why, why_len,
             "socket activation passed %ld sockets; aurald takes exactly one",
             n);
    return -2;
  }
  int fd = 3, type = 0, listening = 0;
  socklen_t len = sizeof type;
  struct sockaddr_un sa;
  socklen_t salen = sizeof sa;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
      getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening,
                 &(socklen_t){sizeof listening}) < 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &salen) < 0 ||
      sa.sun_family != AF_UNIX || type != SOCK_STREAM || !listening) {
    snprintf(why, why_len,
             "the socket passed by the service manager is not a listening "
             "Unix stream socket");
    return -2;
  }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

/* sd_notify(3): one datagram of "KEY=value" lines to $NOTIFY_SOCKET (a
 * path, or an abstract name when it starts with '@'). Best effort. */
void notify(const char *state) {
  const char *path = getenv("NOTIFY_SOCKET");
  if (path == NULL || path[0] == '\0') return;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n = strlen(path);
  if (n >= sizeof sa.sun_path) return;
  memcpy(sa.sun_path, path, n);
  if (sa.sun_path[0] == '@') sa.sun_path[0] = '\0';
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) < 0)
    log_debug("notify %s: %s", path, strerror(errno));
  close(fd);
}
