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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"

#define CONF_MAX_BYTES (1 << 20)

/* Keys that are switches: "key = yes" adds --key, "no" nothing. */
static const char *const switches[] = {"realtime", "exit-when-done", "hold",
                                       "f16"};

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *e = s + strlen(s);
  while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
  return s;
}

static int add_word(config_words *cw, const char *fmt, const char *a,
                    const char *b) {
  if (cw->n + 1 >= cw->cap) {
    size_t cap = cw->cap ? cw->cap * 2 : 16;
    char **p = realloc(cw->words, cap * sizeof *p);
    if (p == NULL) return -1;
    cw->words = p;
    cw->cap = cap;
  }
  char *w = NULL;
  if (asprintf(&w, fmt, a, b) < 0) return -1;
  cw->words[cw->n++] = w;
  cw->words[cw->n] = NULL;
  return 0;
}

int config_read(const char *path, config_words *cw, char *why,
                size_t why_len) {
  memset(cw, 0, sizeof *cw);
  if (add_word(cw, "%s%s", "aurald", "") < 0) goto oom;
  FILE *f = fopen(path, "re");
  if (f == NULL) {
    snprintf(why, why_len, "cannot read config %s: %s", path,
             strerror(errno));
    config_words_free(cw);
    return -1;
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && st.st_size > CONF_MAX_BYTES) {
    snprintf(why, why_len, "config %s is larger than %d bytes", path,
             CONF_MAX_BYTES);
    goto fail;
  }
  char line[4096];
  int lineno = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    lineno++;
    if (strchr(line, '\n') == NULL && !feof(f)) {
      snprintf(why, why_len, "%s:%d: line longer than %zu bytes", path,
               lineno, sizeof line - 2);
      goto fail;
    }
    char *hash = strchr(line, '#');
    if (hash != NULL) *hash = '\0';
    char *s = trim(line);
    if (*s == '\0') continue;
    char *eq = strchr(s, '=');
    if (eq == NULL) {
      snprintf(why, why_len, "%s:%d: expected \"key = value\", got \"%.60s\"",
               path, lineno, s);
      goto fail;
    }
    *eq = '\0';
    char *key = trim(s), *value = trim(eq + 1);
    if (*key == '\0' || strspn(key, "abcdefghijklmnopqrstuvwxyz-") !=
                            strlen(key)) {
      snprintf(why, why_len, "%s:%d: bad key \"%.60s\"", path, lineno, key);
      goto fail;
    }
    if (strcmp(key, "config") == 0 || strcmp(key, "no-config") == 0 ||
        strcmp(key, "list-devices") == 0 || strcmp(key, "help") == 0 ||
        strcmp(key, "version") == 0) {
      snprintf(why, why_len, "%s:%d: \"%s\" cannot be set in a config file",
               path, lineno, key);
      goto fail;
    }
    bool is_switch = false;
    for (size_t i = 0; i < sizeof switches / sizeof switches[0]; i++)
      is_switch |= strcmp(key, switches[i]) == 0;
    int rc = 0;
    if (strcmp(key, "file-realtime") == 0) {
      rc = add_word(cw, "--file=%s%s", value, "");
      if (rc == 0) rc = add_word(cw, "--realtime%s%s", "", "");
    } else if (is_switch || strcmp(key, "mic") == 0) {
      bool yes = strcmp(value, "yes") == 0 || strcmp(value, "true") == 0 ||
                 strcmp(value, "1") == 0;
      bool no = strcmp(value, "no") == 0 || strcmp(value, "false") == 0 ||
                strcmp(value, "0") == 0;
      if (strcmp(key, "mic") == 0 && !yes && !no && *value != '\0') {
        rc = add_word(cw, "--mic=%s%s", value, ""); /* a device */
      } else if (yes) {
        rc = add_word(cw, "--%s%s", key, "");
      } else if (!no) {
        snprintf(why, why_len, "%s:%d: %s must be yes or no", path, lineno,
                 key);
        goto fail;
      }
    } else {
      rc = add_word(cw, "--%s=%s", key, value);
    }
    if (rc < 0) {
      fclose(f);
      goto oom;
    }
  }
  /* fgets() ends on an error as on the end of the file: a directory opens
   * and then fails to read (EISDIR), and must not pass for an empty
   * config. */
  if (ferror(f)) {
    snprintf(why, why_len, "cannot read config %s: %s", path,
             strerror(errno));
    goto fail;
  }
  fclose(f);
  return 0;
fail:
  fclose(f);
  config_words_free(cw);
  return -1;
oom:
  snprintf(why, why_len, "out of memory reading %s", path);
  config_words_free(cw);
  return -1;
}

void config_words_free(config_words *cw) {
  for (size_t i = 0; i < cw->n; i++) free(cw->words[i]);
  free(cw->words);
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
