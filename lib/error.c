/* Error codes: one X-macro list gives the enum, the text and the names. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
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
