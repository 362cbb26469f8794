/*
 * The listening socket: where it lives, who may connect, and how a second
 * instance or a crashed one is told apart from a live one (DESIGN.md §4).
 *
 * Order at start-up: check the path length, take an exclusive flock on
 * PATH.lock (a second aurald fails here, naming the pid of the first),
 * then look at PATH: nothing is fine, a socket is a leftover of a crashed
 * instance (we hold the lock, so nobody serves it) and is removed, and
 * anything else is left alone with an error. The socket is bound under
 * umask 0117 so that it is born with mode 0660, with no window in which it
 * is more open.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <stddef.h>
#include <unistd.h>

#include "daemon.h"

int socket_default_path(char *out, size_t cap) {
  const char *env = getenv("AURAL_SOCKET");
  int n;
  if (env != NULL && env[0] != '\0')
    n = snprintf(out, cap, "%s", env);
  else if (getenv("XDG_RUNTIME_DIR") != NULL &&
           getenv("XDG_RUNTIME_DIR")[0] != '\0')
    n = snprintf(out, cap, "%s/aural.sock", getenv("XDG_RUNTIME_DIR"));
  else if (geteuid() == 0)
    n = snprintf(out, cap, "/run/aural/aural.sock");
  else
    n = snprintf(out, cap, "/tmp/aural-%u/aural.sock", (unsigned)geteuid());
  return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* Creates the socket's directory when it is our own default (/run/aural or
 * /tmp/aural-UID), private to us. */
static int ensure_dir(const char *path, char *why, size_t why_len) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == NULL || slash == dir) return 0;
  *slash = '\0';
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      snprintf(why, why_len, "%s is not a directory", dir);
      return -1;
    }
    return 0;
  }
  if (errno == ENOENT && mkdir(dir, 0750) == 0) return 0;
  snprintf(why, why_len, "cannot create %s: %s", dir, strerror(errno));
  return -1;
}

int socket_prepare(server *srv, char *why, size_t why_len) {
  const char *path = srv->opt->socket_path;
  struct sockaddr_un sa;
  if (strlen(path) >= sizeof sa.sun_path) {
    snprintf(why, why_len,
             "socket path is %zu bytes long; the limit is %zu: %s",
             strlen(path), sizeof sa.sun_path - 1, path);
    return -1;
  }
  if (ensure_dir(path, why, why_len) < 0) return -1;

  int n = snprintf(srv->lock_path, sizeof srv->lock_path, "%s.lock", path);
  if (n < 0 || (size_t)n >= sizeof srv->lock_path) {
    snprintf(why, why_len, "lock path too long for %s", path);
    return -1;
  }
  int fd = open(srv->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                0600);
  if (fd < 0) {
    snprintf(why, why_len, "cannot open lock file %s: %s", srv->lock_path,
             strerror(errno));
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    char pid[32] = "";
    ssize_t k = pread(fd, pid, sizeof pid - 1, 0);
    if (k > 0) pid[k] = '\0';
    pid[strcspn(pid, "\n")] = '\0';
    snprintf(why, why_len,
             "another aurald (pid %s) is already serving %s (lock %s held)",
             pid[0] ? pid : "unknown", path, srv->lock_path);
    close(fd);
    return -1;
  }
  char pid[32];
  int plen = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)plen, 0) != plen)
    log_warn("cannot write pid to %s: %s", srv->lock_path, strerror(errno));
  srv->lock_fd = fd;

  struct stat st;
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      snprintf(why, why_len,
               "%s exists and is not a socket; not removing it (move it "
               "away or choose another path with -s)",
               path);
      return -1;
    }
    if (unlink(path) < 0) {
      snprintf(why, why_len, "cannot remove stale socket %s: %s", path,
               strerror(errno));
      return -1;
    }
    log_info("removed stale socket %s left by an earlier instance", path);
  } else if (errno != ENOENT) {
    snprintf(why, why_len, "cannot inspect %s: %s", path, strerror(errno));
    return -1;
  }

  int rc = uv_pipe_init(srv->loop, &srv->listener, 0);
  if (rc == 0) {
    mode_t old = umask(0117);
    rc = uv_pipe_bind(&srv->listener, path);
    umask(old);
    if (rc < 0) uv_close((uv_handle_t *)&srv->listener, NULL);
  }
  if (rc < 0) {
    snprintf(why, why_len, "cannot bind %s: %s", path, uv_strerror(rc));
    return -1;
  }
  srv->listener.data = srv;
  rc = uv_listen((uv_stream_t *)&srv->listener, 128, on_connection);
  if (rc < 0) {
    snprintf(why, why_len, "cannot listen on %s: %s", path, uv_strerror(rc));
    uv_close((uv_handle_t *)&srv->listener, NULL);
    unlink(path);
    return -1;
  }
  srv->listening = true;
  return 0;
}

/* Same user, root, or a member of --group: by the peer's primary group or,
 * through SO_PEERGROUPS, any of its supplementary groups (a user added to
 * the group with usermod -aG). */
bool peer_allowed(server *srv, int fd, uid_t uid, gid_t gid) {
  if (uid == geteuid() || uid == 0) return true;
  if (srv->opt->group == NULL) return false;
  gid_t want = srv->opt->group_gid;
  if (gid == want) return true;
  gid_t groups[256];
  socklen_t len = sizeof groups;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
    return false; /* too many groups, or an old kernel: primary only */
  for (size_t i = 0; i < len / sizeof groups[0]; i++)
    if (groups[i] == want) return true;
  return false;
}

/* Socket activation: the service manager bound the socket (its path, mode
 * and owner are in the .socket unit) and keeps it across restarts; we only
 * listen on it, and neither lock nor remove it. */
int socket_adopt(server *srv, int fd, char *why, size_t why_len) {
  static char path[sizeof ((struct sockaddr_un *)0)->sun_path + 1];
  struct sockaddr_un sa;
  socklen_t len = sizeof sa;
  if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0 &&
      len > offsetof(struct sockaddr_un, sun_path) && sa.sun_path[0] != '\0') {
    snprintf(path, sizeof path, "%.*s",
             (int)(len - offsetof(struct sockaddr_un, sun_path)),
             sa.sun_path);
    srv->opt->socket_path = path;
  }
  int rc = uv_pipe_init(srv->loop, &srv->listener, 0);
  if (rc == 0) rc = uv_pipe_open(&srv->listener, fd);
  if (rc == 0) {
    srv->listener.data = srv;
    rc = uv_listen((uv_stream_t *)&srv->listener, 128, on_connection);
  }
  if (rc < 0) {
    snprintf(why, why_len, "cannot use the activated socket: %s",
             uv_strerror(rc));
    return -1;
  }
  srv->listening = true;
  srv->activated = true;
  log_info("using the socket passed by the service manager (%s)",
           srv->opt->socket_path);
  return 0;
}
