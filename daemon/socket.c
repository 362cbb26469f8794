/*
 * The listening socket: where it lives, who may connect, and how a second
 * instance or a crashed one is told apart from a live one (DESIGN.md §4).
 *
 * Order at start-up: check the path length, check (or create) the
 * socket's directory (ensure_dir: nobody else may be able to replace the
 * socket), take an exclusive flock on PATH.lock (a second aurald fails
 * here, naming the pid of the first), then look at PATH: nothing is fine;
 * a socket that answers a connect() is somebody's live socket (that of
 * aurald.socket, whose daemon takes no lock) and is left alone with an
 * error; one that does not is a leftover of a crashed instance and is
 * removed; anything else is left alone with an error. The socket is bound
 * under umask 0117 so that it is born with mode 0660, with no window in
 * which it is more open, and with --group it gets that group before
 * listen().
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
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

/* The socket's directory decides who can replace the socket, so it is
 * checked before anything is created in it (DESIGN.md §4).
 *
 * Our own defaults, /tmp/aural-UID and /run/aural, must be a real
 * directory (not a symbolic link), owned by the user running aurald and
 * writable by nobody else. Another local user can create /tmp/aural-UID
 * before we do (mode 777, or a link to a directory of theirs) and would
 * then be able to put their own socket where our clients look; tmux and
 * ssh-agent refuse such directories for the same reason. Read and search
 * bits for group and others are accepted: they let nobody replace the
 * socket (the socket's mode and the credential check decide who
 * connects), and systemd makes /run/aural mode 0755 for aurald.socket.
 *
 * A directory given with -s, $AURAL_SOCKET or $XDG_RUNTIME_DIR is the
 * user's choice; it must still not be a symbolic link, and not writable by
 * others without the sticky bit (anybody could replace the socket there).
 *
 * A directory we create is mode 0700; with --group G it gets group G and
 * mode 0710, since members need to search it to reach the socket but have
 * no need to list it. Returns 0, or -1 with why set. */
static bool is_default_dir(const char *dir) {
  char tmp[64];
  snprintf(tmp, sizeof tmp, "/tmp/aural-%u", (unsigned)geteuid());
  return strcmp(dir, tmp) == 0 ||
         (geteuid() == 0 && strcmp(dir, "/run/aural") == 0);
}

/* Judges the directory as described above; st is its lstat or fstat. */
static int judge_dir(const char *dir, const struct stat *st, bool strict,
                     char *why, size_t why_len) {
  char owner[64];
  unsigned mode = (unsigned)(st->st_mode & 07777);
  if (S_ISLNK(st->st_mode)) {
    snprintf(why, why_len,
             "socket directory %s is a symbolic link (owned by uid %u, %s); "
             "refusing to follow it: remove it, or choose a path with -s",
             dir, (unsigned)st->st_uid,
             aural_proto_user_name(st->st_uid, owner, sizeof owner));
    return -1;
  }
  if (!S_ISDIR(st->st_mode)) {
    snprintf(why, why_len, "%s is not a directory", dir);
    return -1;
  }
  if (strict && st->st_uid != geteuid()) {
    snprintf(why, why_len,
             "socket directory %s is owned by uid %u (%s), mode %04o, not by "
             "uid %u who runs aurald; refusing to use it (another user could "
             "replace the socket): remove it, or choose a path with -s",
             dir, (unsigned)st->st_uid,
             aural_proto_user_name(st->st_uid, owner, sizeof owner), mode,
             (unsigned)geteuid());
    return -1;
  }
  if (strict && (st->st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    snprintf(why, why_len,
             "socket directory %s (owned by uid %u, mode %04o) is writable by "
             "group or others, who could replace the socket; refusing to use "
             "it: remove it, or 'chmod go-w %s'",
             dir, (unsigned)st->st_uid, mode, dir);
    return -1;
  }
  if ((st->st_mode & S_IWOTH) != 0 && (st->st_mode & S_ISVTX) == 0) {
    snprintf(why, why_len,
             "socket directory %s (owned by uid %u, mode %04o) is writable by "
             "others and not sticky: anybody could replace the socket; choose "
             "another directory",
             dir, (unsigned)st->st_uid, mode);
    return -1;
  }
  return 0;
}

/* With --group, members must be able to search the directory. A directory
 * we made, or our own default, is given the group and g+x; anyone else's
 * is left as it is, with a warning when members cannot reach the socket.
 * Changing the group needs membership unless we are root; without it the
 * group stays out and we say so (the daemon still serves its own user). */
static void dir_group(server *srv, int fd, const char *dir,
                      const struct stat *st, bool ours) {
  const char *g = srv->opt->group;
  gid_t gid = srv->opt->group_gid;
  if (g == NULL) return;
  bool reach = (st->st_mode & S_IXOTH) ||
               (st->st_gid == gid && (st->st_mode & S_IXGRP));
  if (reach) return;
  if (!ours) {
    log_warn("members of group %s cannot search %s (group %u, mode %04o), "
             "so they cannot reach the socket",
             g, dir, (unsigned)st->st_gid, (unsigned)(st->st_mode & 07777));
    return;
  }
  if (fchown(fd, (uid_t)-1, gid) < 0 ||
      fchmod(fd, (st->st_mode & 07777) | S_IXGRP) < 0)
    log_warn("cannot give %s to group %s: %s; its members cannot reach the "
             "socket", dir, g, strerror(errno));
}

static int ensure_dir(server *srv, const char *path, char *why,
                      size_t why_len) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == NULL || slash == dir) return 0;
  *slash = '\0';
  bool strict = is_default_dir(dir);
  bool made = false;
  struct stat st;
  if (lstat(dir, &st) < 0) {
    if (errno != ENOENT || mkdir(dir, 0700) < 0) {
      snprintf(why, why_len, "cannot create %s: %s", dir, strerror(errno));
      return -1;
    }
    made = true;
  } else if (judge_dir(dir, &st, strict, why, why_len) < 0) {
    return -1;
  }
  /* The name could have been swapped since lstat (not in a sticky /tmp by
   * anyone but us, but cheaply excluded): judge what we opened. */
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR)
      snprintf(why, why_len, "socket directory %s is not a directory (a "
               "symbolic link?); refusing to use it", dir);
    else
      snprintf(why, why_len, "cannot open %s: %s", dir, strerror(errno));
    return -1;
  }
  struct stat fst;
  int rc = fstat(fd, &fst);
  if (rc < 0)
    snprintf(why, why_len, "cannot inspect %s: %s", dir, strerror(errno));
  else
    rc = judge_dir(dir, &fst, strict || made, why, why_len);
  if (rc == 0 && made && srv->opt->group != NULL) {
    if (fchown(fd, (uid_t)-1, srv->opt->group_gid) < 0 ||
        fchmod(fd, 0710) < 0)
      log_warn("cannot give %s to group %s: %s; its members cannot reach "
               "the socket", dir, srv->opt->group, strerror(errno));
  } else if (rc == 0 && !made) {
    dir_group(srv, fd, dir, &fst, strict && fst.st_uid == geteuid());
  }
  close(fd);
  return rc;
}

/* Whether something accepts connections at path (aurald.socket's socket,
 * or a daemon that does not lock): 1 yes, 0 no (nobody listens: a leftover),
 * -1 cannot tell (errno set). A full backlog (EAGAIN) is somebody alive. */
static int socket_in_use(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  int rc;
  do
    rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
  while (rc < 0 && errno == EINTR);
  int e = errno;
  close(fd);
  if (rc == 0 || e == EAGAIN || e == EINPROGRESS) return 1;
  if (e == ECONNREFUSED || e == ENOENT) return 0;
  errno = e;
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
  if (ensure_dir(srv, path, why, why_len) < 0) return -1;

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
    int live = socket_in_use(path);
    if (live != 0) {
      /* Not ours to remove: somebody serves it, or we cannot tell. The
       * lock file is ours (we hold its lock), so it does not stay behind
       * next to, say, aurald.socket's socket. */
      int e = errno;
      unlink(srv->lock_path);
      errno = e;
      if (live > 0)
        snprintf(why, why_len,
                 "socket %s is in use (something accepts connections on "
                 "it, e.g. aurald.socket); not removing it (stop it first, "
                 "or choose another path with -s)",
                 path);
      else
        snprintf(why, why_len,
                 "cannot tell whether socket %s is in use: %s; not "
                 "removing it",
                 path, strerror(errno));
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

  /* Bound here, not by uv_pipe_bind: libuv removes the path of a pipe it
   * bound when the handle closes, whatever is there by then. */
  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(why, why_len, "cannot create a socket for %s: %s", path,
             strerror(errno));
    return -1;
  }
  struct sockaddr_un sa_bind = {.sun_family = AF_UNIX};
  memcpy(sa_bind.sun_path, path, strlen(path) + 1); /* length checked */
  mode_t old = umask(0117);
  int rc = bind(fd, (struct sockaddr *)&sa_bind, sizeof sa_bind);
  umask(old);
  if (rc < 0) {
    snprintf(why, why_len, "cannot bind %s: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  /* What we bound, so that the exit removes this file and no other. */
  struct stat bound;
  if (lstat(path, &bound) == 0) {
    srv->sock_dev = bound.st_dev;
    srv->sock_ino = bound.st_ino;
  }
  /* --group: members must pass the socket's mode (0660) before the
   * credential check sees them, so the socket gets the group before
   * anybody can connect. Without membership (a user's own daemon with the
   * system's config file) the group stays out, as the warning says. */
  if (srv->opt->group != NULL &&
      lchown(path, (uid_t)-1, srv->opt->group_gid) < 0) {
    if (errno != EPERM) {
      snprintf(why, why_len, "cannot give socket %s to group %s: %s", path,
               srv->opt->group, strerror(errno));
      close(fd);
      socket_remove(srv);
      return -1;
    }
    log_warn("cannot give socket %s to group %s: %s; its members cannot "
             "connect", path, srv->opt->group, strerror(errno));
  }
  rc = uv_pipe_init(srv->loop, &srv->listener, 0);
  if (rc == 0) {
    srv->listener.data = srv;
    rc = uv_pipe_open(&srv->listener, fd); /* then the handle owns fd */
    if (rc < 0) close(fd);
    else rc = uv_listen((uv_stream_t *)&srv->listener, 128, on_connection);
    if (rc < 0) uv_close((uv_handle_t *)&srv->listener, NULL);
  } else {
    close(fd);
  }
  if (rc < 0) {
    snprintf(why, why_len, "cannot listen on %s: %s", path, uv_strerror(rc));
    socket_remove(srv);
    return -1;
  }
  srv->listening = true;
  return 0;
}

/* Removes the socket file we bound, if it is still the one at the path.
 * The path can have been taken over while we served: the file removed
 * (by hand, or by a cleaner of /tmp that ages files, with the lock file
 * beside it) and a second aurald started there, whose socket must outlive
 * us. A socket passed by the service manager is its own, never ours. */
void socket_remove(server *srv) {
  if (srv->activated || srv->sock_ino == 0) return;
  const char *path = srv->opt->socket_path;
  struct stat st;
  if (lstat(path, &st) == 0 && st.st_dev == srv->sock_dev &&
      st.st_ino == srv->sock_ino) {
    if (unlink(path) < 0)
      log_warn("cannot remove socket %s: %s", path, strerror(errno));
  } else {
    log_warn("socket %s is no longer the one this aurald bound (removed or "
             "replaced while it served); leaving the path alone",
             path);
  }
  srv->sock_dev = 0;
  srv->sock_ino = 0;
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
