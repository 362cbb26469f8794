/* Error codes: one X-macro list gives the enum, the text and the names. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "aural/error.h"
#include "internal.h"

const char *aural_strerror(int code) {
  switch (code) {
#define AURAL__ERR_TEXT(name, value, text) \
  case AURAL_E##name:                      \
    return text;
    AURAL_ERROR_MAP(AURAL__ERR_TEXT)
#undef AURAL__ERR_TEXT
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
