/* Error codes: one X-macro list gives the enum, the text and the names. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aural/error.h"
#include "internal.h"

const char *aural_strerror(int code) {
  switch (code) {
#define AURAL__ERR_TEXT(name, value, text) \
  case AURAL_E##name:                      \
    return text;
    AURAL_ERROR_MAP(AURAL__ERR_TEXT)
#undef AURAL__ERR_TEXT
#define AURAL__PERR_TEXT(name, value, text) \
  case AURAL_PROTO_E##name:                 \
    return text;
    AURAL_PROTO_ERROR_MAP(AURAL__PERR_TEXT)
#undef AURAL__PERR_TEXT
  case 0:
    return "success";
  default:
    break;
  }
  if (code < 0 && code > -4096) {
    const char *s = strerrordesc_np(-code);
    if (s != NULL) return s;
  }
  return "unknown error";
}

const char *aural_err_name(int code) {
  switch (code) {
#define AURAL__ERR_NAME(name, value, text) \
  case AURAL_E##name:                      \
    return "AURAL_E" #name;
    AURAL_ERROR_MAP(AURAL__ERR_NAME)
#undef AURAL__ERR_NAME
#define AURAL__PERR_NAME(name, value, text) \
  case AURAL_PROTO_E##name:                 \
    return "AURAL_PROTO_E" #name;
    AURAL_PROTO_ERROR_MAP(AURAL__PERR_NAME)
#undef AURAL__PERR_NAME
  case 0:
    return "OK";
  default:
    break;
  }
  if (code < 0 && code > -4096) {
    const char *s = strerrorname_np(-code);
    if (s != NULL) return s;
  }
  return "UNKNOWN";
}

int aural__err_set(aural_err *err, int code, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

int aural__open_input(const char *path, int flags, int regular_only,
                      const char *what, struct stat *st, aural_err *err) {
  /* open(NULL) fails with EFAULT, and the message would print NULL. */
  if (path == NULL)
    return aural__err_set(err, AURAL_EINVAL, "no path given for %s", what);
  int fd = open(path, O_RDONLY | O_CLOEXEC | flags);
  if (fd < 0)
    return aural__err_set(err, -errno, "%s: %s", path, strerror(errno));
  int rc = 0;
  if (fstat(fd, st) != 0)
    rc = aural__err_set(err, -errno, "%s: %s", path, strerror(errno));
  else if (S_ISDIR(st->st_mode))
    rc = aural__err_set(err, -EISDIR, "%s: is a directory, not %s", path,
                        what);
  else if (regular_only && !S_ISREG(st->st_mode))
    rc = aural__err_set(err, AURAL_EFORMAT, "%s: not a regular file", path);
  else if (S_ISREG(st->st_mode) && st->st_size == 0)
    rc = aural__err_set(err, AURAL_EEMPTY, "%s: file is empty (0 bytes)",
                        path);
  if (rc < 0) {
    close(fd);
    return rc;
  }
  return fd;
}

/* The whole of fd, whose size at open was st_size, into a buffer of
 * that size. The file is read, not mapped: a mapped file that another
 * process truncates raises SIGBUS at the first access past its new end,
 * while read() just returns less. A file that shrank or grew while it was
 * read is refused (its bytes may be half old, half new). */
int aural__read_all(int fd, const char *path, size_t size,
                    unsigned char **out, aural_err *err) {
  *out = NULL;
  unsigned char *buf = malloc(size > 0 ? size : 1);
  if (buf == NULL)
    return aural__err_set(err, AURAL_ENOMEM,
                          "%s: out of memory for the file's %zu bytes", path,
                          size);
  size_t got = 0;
  while (got < size) {
    ssize_t n = read(fd, buf + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      free(buf);
      return aural__err_set(err, -e, "%s: read failed at byte %zu: %s", path,
                            got, strerror(e));
    }
    if (n == 0) break;
    got += (size_t)n;
  }
  if (got < size) {
    free(buf);
    return aural__err_set(err, AURAL_ETRUNCATED,
                          "%s: the file shrank from %zu to %zu bytes while it "
                          "was read",
                          path, size, got);
  }
  unsigned char extra;
  ssize_t n;
  do n = read(fd, &extra, 1);
  while (n < 0 && errno == EINTR);
  if (n > 0) {
    free(buf);
    return aural__err_set(err, AURAL_EIO,
                          "%s: the file grew past its %zu bytes while it was "
                          "read",
                          path, size);
  }
  *out = buf;
  return 0;
}

int aural__read_file(const char *path, const char *what, size_t max_bytes,
                     unsigned char **out, size_t *size, aural_err *err) {
  *out = NULL;
  *size = 0;
  struct stat st;
  int fd = aural__open_input(path, O_NONBLOCK, 1, what, &st, err);
  if (fd < 0) return fd;
  if ((uint64_t)st.st_size > max_bytes) {
    close(fd);
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: %lld bytes, more than %zu for %s", path,
                          (long long)st.st_size, max_bytes, what);
  }
  int rc = aural__read_all(fd, path, (size_t)st.st_size, out, err);
  close(fd);
  if (rc == 0) *size = (size_t)st.st_size;
  return rc;
}
