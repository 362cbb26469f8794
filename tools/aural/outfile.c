/*
 * The output file of -o (see outfile.h for the contract).
 *
 * Why each case is as it is:
 *   - A rename puts a new inode at PATH. That is right for a regular file
 *     (readers see the old or the new one, never half), and wrong for
 *     everything else: it would turn /dev/null (as root), a named pipe or
 *     /dev/stdout into a regular file, and `-o in.wav in.wav` would
 *     destroy the input before anyone noticed. So only regular files are
 *     replaced.
 *   - A symbolic link to a regular file is followed, and the file it
 *     points to is replaced atomically: someone who points -o at
 *     latest.npy -> runs/7.npy, or at /dev/stdout redirected to a file,
 *     means the file, as the shell's '>' does; replacing the link with a
 *     file would quietly break it.
 *   - The temporary file has no name (O_TMPFILE) until it is complete, so
 *     a kill -9 leaves nothing behind; it gets a name (linkat) just before
 *     the rename. Where the file system lacks O_TMPFILE, a named temporary
 *     file is the fallback, removed on every failure we live through.
 *   - A character device or FIFO cannot seek, and the .npy header (the row
 *     count) is known only at the end; and a reader must not get half an
 *     output either. So the output is spooled to an unnamed file in
 *     $TMPDIR and copied into the device or FIFO at the commit.
 */
#define _GNU_SOURCE
#include "outfile.h"

#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COPY_BYTES 65536
#define LINK_TRIES 100

/* Writes the message to err, closes o and returns -1. */
__attribute__((format(printf, 4, 5))) static int fail(outfile *o, char *err,
                                                      size_t err_len,
                                                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_len, fmt, ap);
  va_end(ap);
  outfile_discard(o);
  return -1;
}

/* The directory part of path, malloc'ed. */
static char *dir_of(const char *path) {
  char *copy = strdup(path);
  if (copy == NULL) return NULL;
  char *dir = strdup(dirname(copy));
  free(copy);
  return dir;
}

/* A seekable file without a name in dir, or -1 with errno set. */
static int open_unnamed(const char *dir, mode_t mode) {
  return open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, mode);
}

/* The file system has no O_TMPFILE (EOPNOTSUPP), or the kernel predates it
 * (it then sees O_DIRECTORY | O_RDWR: EISDIR). */
static int no_tmpfile(int e) {
  return e == EOPNOTSUPP || e == EISDIR || e == EINVAL;
}

/* The process's umask, read without setting it (umask() cannot read it
 * alone, and setting it for a moment races with the other jobs' threads
 * creating files): from /proc, else the common 022. */
static mode_t current_umask(void) {
  FILE *f = fopen("/proc/self/status", "re");
  unsigned mask = 022;
  char line[128];
  while (f != NULL && fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "Umask: %o", &mask) == 1) break;
  if (f != NULL) fclose(f);
  return (mode_t)(mask & 0777);
}

/* Opens o->f for a regular file replaced at the commit: unnamed in its
 * directory, or named where that cannot be. A file that is replaced keeps
 * its mode and, where we may, its group (as the shell's '>' keeps them):
 * a private output stays private. A new one gets 0666 less the umask. */
static int open_replacement(outfile *o, char *err, size_t err_len) {
  char *dir = dir_of(o->target);
  if (dir == NULL)
    return fail(o, err, err_len, "%s: out of memory", o->path);
  struct stat old;
  bool replacing = stat(o->target, &old) == 0 && S_ISREG(old.st_mode);
  /* A file its owner made read-only is kept, as '>' would fail on it; the
   * rename would replace it all the same. */
  if (replacing && faccessat(AT_FDCWD, o->target, W_OK, AT_EACCESS) != 0 &&
      (errno == EACCES || errno == EPERM || errno == EROFS)) {
    int e = errno;
    free(dir);
    return fail(o, err, err_len, "%s: cannot write over it: %s; not written",
                o->path, strerror(e));
  }
  int fd = open_unnamed(dir, replacing ? 0600 : 0666);
  if (fd >= 0) {
    /* linkat needs /proc to name the file later (or, as root, may use
     * AT_EMPTY_PATH); without either, fall back to a named file. */
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (access(proc, F_OK) != 0 && geteuid() != 0) {
      close(fd);
      fd = -1;
      errno = EOPNOTSUPP;
    }
  }
  if (fd < 0 && no_tmpfile(errno)) {
    if (asprintf(&o->tmp_path, "%s/.aural-XXXXXX", dir) < 0) {
      o->tmp_path = NULL;
      errno = ENOMEM;
    } else if ((fd = mkstemp(o->tmp_path)) >= 0 && !replacing) {
      fchmod(fd, 0666 & ~current_umask()); /* mkstemp makes 0600 */
    }
  }
  if (fd >= 0 && replacing) {
    if (fchown(fd, (uid_t)-1, old.st_gid) < 0) {
      /* Not a member of its group: it takes ours, as any new file. */
    }
    fchmod(fd, old.st_mode & 07777);
  }
  free(dir);
  if (fd < 0)
    return fail(o, err, err_len, "%s: cannot create output: %s", o->path,
                strerror(errno));
  o->f = fdopen(fd, "w+b");
  if (o->f == NULL) {
    close(fd);
    return fail(o, err, err_len, "%s: cannot create output: %s", o->path,
                strerror(errno));
  }
  return 0;
}

/* Opens the device or FIFO at o->path for writing, and a spool file for
 * o->f. st is what stat() said path was. */
static int open_device(outfile *o, const char *prog, const struct stat *st,
                       char *err, size_t err_len) {
  int flags = O_WRONLY | O_NOCTTY | O_CLOEXEC;
  int fd = open(o->path, flags | (S_ISFIFO(st->st_mode) ? O_NONBLOCK : 0));
  if (fd < 0 && errno == ENXIO && S_ISFIFO(st->st_mode)) {
    /* No reader yet: the open waits for one. Say so rather than hang. */
    cli_notice("%s: waiting for a reader on FIFO %s", prog, o->path);
    fd = open(o->path, flags);
  }
  if (fd < 0)
    return fail(o, err, err_len, "%s: cannot open output: %s", o->path,
                strerror(errno));
  o->dest_fd = fd;
  o->has_dest = 1;
  /* Whatever is at PATH now must be what was checked: never write into
   * the start of a regular file that replaced the FIFO meanwhile. */
  struct stat now;
  if (fstat(fd, &now) != 0 || now.st_dev != st->st_dev ||
      now.st_ino != st->st_ino)
    return fail(o, err, err_len,
                "%s: changed while it was being opened; not written",
                o->path);
  if (S_ISFIFO(st->st_mode) && fcntl(fd, F_SETFL, 0) != 0)
    return fail(o, err, err_len, "%s: cannot open output: %s", o->path,
                strerror(errno));

  const char *tmp = getenv("TMPDIR");
  if (tmp == NULL || tmp[0] == '\0') tmp = "/tmp";
  int sfd = open_unnamed(tmp, 0600);
  if (sfd >= 0) {
    o->f = fdopen(sfd, "w+b");
    if (o->f == NULL) close(sfd);
  } else {
    o->f = tmpfile(); /* in P_tmpdir */
    tmp = P_tmpdir;
  }
  o->spool_dir = strdup(tmp);
  if (o->f == NULL || o->spool_dir == NULL)
    return fail(o, err, err_len, "%s: cannot create a spool file: %s",
                o->path, strerror(errno));
  return 0;
}

const char *outfile_path(const char *arg) {
  return strcmp(arg, "-") == 0 ? "/dev/stdout" : arg;
}

int outfile_open(outfile *o, const char *prog, const char *path,
                 const char *input, char *err, size_t err_len) {
  memset(o, 0, sizeof *o);
  if (path[0] == '\0')
    return fail(o, err, err_len, "-o: the output path is empty");
  if (cli_stdout_closed && strcmp(path, "/dev/stdout") == 0)
    return fail(o, err, err_len,
                "-o: standard output is closed; nothing written");
  o->path = strdup(path);
  if (o->path == NULL)
    return fail(o, err, err_len, "%s: out of memory", path);
  struct stat lst, st;
  if (lstat(path, &lst) != 0) {
    if (errno != ENOENT)
      return fail(o, err, err_len, "%s: cannot create output: %s", path,
                  strerror(errno));
    /* Nothing there yet: a new regular file. */
    o->target = strdup(path);
    if (o->target == NULL)
      return fail(o, err, err_len, "%s: out of memory", path);
    return open_replacement(o, err, err_len);
  }
  if (stat(path, &st) != 0) {
    if (errno == ENOENT && S_ISLNK(lst.st_mode))
      return fail(o, err, err_len,
                  "%s: is a symbolic link to nothing; not written", path);
    return fail(o, err, err_len, "%s: cannot create output: %s", path,
                strerror(errno));
  }
  struct stat out_st;
  o->is_stdout = fstat(STDOUT_FILENO, &out_st) == 0 &&
                 out_st.st_dev == st.st_dev && out_st.st_ino == st.st_ino;
  struct stat in_st;
  if (input != NULL && stat(input, &in_st) == 0 &&
      in_st.st_dev == st.st_dev && in_st.st_ino == st.st_ino) {
    return fail(o, err, err_len,
                "%s: is the input %s; refusing to write over it (choose "
                "another output)",
                path, input);
  }
  if (S_ISDIR(st.st_mode))
    return fail(o, err, err_len, "%s: is a directory%s; not written", path,
                S_ISLNK(lst.st_mode) ? " (through a symbolic link)" : "");
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))
    return open_device(o, prog, &st, err, err_len);
  if (!S_ISREG(st.st_mode))
    return fail(o, err, err_len,
                "%s: is not a regular file, a character device or a FIFO; "
                "not written",
                path);
  if (!S_ISLNK(lst.st_mode)) {
    o->target = strdup(path);
  } else {
    /* The file the link leads to, checked to be the one stat() saw: a
     * name from /proc/self/fd may be stale ("... (deleted)"). */
    o->target = realpath(path, NULL);
    struct stat tst;
    if (o->target != NULL &&
        (stat(o->target, &tst) != 0 || tst.st_dev != st.st_dev ||
         tst.st_ino != st.st_ino))
      return fail(o, err, err_len,
                  "%s: leads to a file that has no name of its own; not "
                  "written",
                  path);
  }
  if (o->target == NULL)
    return fail(o, err, err_len, "%s: cannot create output: %s", path,
                strerror(errno));
  return open_replacement(o, err, err_len);
}

/* Gives the unnamed file fd a temporary name in dir, then renames it over
 * target. Returns 0 or an errno. */
static int link_and_rename(int fd, const char *dir, const char *target) {
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  char *tmp = NULL;
  int e = EEXIST;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  unsigned seed = (unsigned)ts.tv_nsec ^ (unsigned)getpid();
  for (int i = 0; i < LINK_TRIES && e == EEXIST; i++) {
    free(tmp);
    if (asprintf(&tmp, "%s/.aural-%08x", dir, rand_r(&seed)) < 0) {
      tmp = NULL;
      return ENOMEM;
    }
    e = 0;
    if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) != 0) {
      e = errno;
      /* Without /proc, root may link the descriptor itself. */
      if (e != EEXIST && linkat(fd, "", AT_FDCWD, tmp, AT_EMPTY_PATH) == 0)
        e = 0;
    }
  }
  if (e == 0 && rename(tmp, target) != 0) {
    e = errno;
    unlink(tmp);
  }
  free(tmp);
  return e;
}

/* Writes all of o->f into o->dest_fd. Returns 0 or an errno. */
static int copy_out(outfile *o) {
  if (fseek(o->f, 0, SEEK_SET) != 0) return errno;
  char *buf = malloc(COPY_BYTES);
  if (buf == NULL) return ENOMEM;
  int e = 0;
  size_t n;
  while (e == 0 && (n = fread(buf, 1, COPY_BYTES, o->f)) > 0) {
    for (size_t done = 0; done < n;) {
      ssize_t k = write(o->dest_fd, buf + done, n - done);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        e = k < 0 ? errno : EIO;
        break;
      }
      done += (size_t)k;
    }
  }
  if (e == 0 && ferror(o->f)) e = EIO;
  free(buf);
  return e;
}

void outfile_write_error(const outfile *o, int e, char *err,
                         size_t err_len) {
  if (o->spool_dir == NULL)
    snprintf(err, err_len, "%s: write failed: %s", o->path, strerror(e));
  else
    snprintf(err, err_len,
             "%s: write failed: %s, in its spool file in %s (the output "
             "waits there until the end; TMPDIR chooses the place)",
             o->path, strerror(e), o->spool_dir);
}

int outfile_commit(outfile *o, char *err, size_t err_len) {
  int e = 0;
  if (fflush(o->f) != 0 || ferror(o->f)) {
    e = errno ? errno : EIO;
    outfile_write_error(o, e, err, err_len);
    outfile_discard(o);
    return -1;
  }
  if (o->has_dest) {
    e = copy_out(o);
    int fd = o->dest_fd;
    o->has_dest = 0;
    if (close(fd) != 0 && e == 0 && errno != EINTR) e = errno;
  } else {
    /* The data reaches the disk before the name does. */
    if (fsync(fileno(o->f)) != 0) e = errno;
    if (e == 0 && o->tmp_path != NULL) {
      if (rename(o->tmp_path, o->target) != 0) e = errno;
    } else if (e == 0) {
      char *dir = dir_of(o->target);
      e = dir == NULL ? ENOMEM : link_and_rename(fileno(o->f), dir,
                                                 o->target);
      free(dir);
    }
    if (e == 0) {
      free(o->tmp_path); /* renamed: nothing to remove */
      o->tmp_path = NULL;
    }
  }
  if (e != 0) {
    snprintf(err, err_len, "%s: write failed: %s", o->path, strerror(e));
    outfile_discard(o);
    return -1;
  }
  outfile_discard(o);
  return 0;
}

void outfile_discard(outfile *o) {
  if (o->f != NULL) fclose(o->f);
  if (o->has_dest) close(o->dest_fd);
  if (o->tmp_path != NULL) unlink(o->tmp_path);
  free(o->tmp_path);
  free(o->spool_dir);
  free(o->target);
  free(o->path);
  memset(o, 0, sizeof *o);
}
