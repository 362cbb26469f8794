/*
 * aural/error.h — error codes and detailed error messages.
 *
 *   aural_audiofile *af;
 *   aural_err err;
 *   int rc = aural_audiofile_open("in.wav", &af, &err);
 *   if (rc < 0) fprintf(stderr, "%s\n", err.msg);   // names the file and problem
 *
 * Every fallible function returns 0 or a negative code: either one of the
 * AURAL_E* codes below or a negated errno value passed through from the
 * system. Functions that read untrusted input also fill an optional
 * aural_err with a message that names the file, field or offset at fault.
 */
#ifndef AURAL_ERROR_H
#define AURAL_ERROR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, description). Values sit far below any -errno. */
#define AURAL_ERROR_MAP(X)                                                   \
  X(INVAL, -10001, "invalid argument")                                       \
  X(NOMEM, -10002, "out of memory")                                          \
  X(IO, -10003, "input/output error")                                        \
  X(FORMAT, -10004, "unsupported or malformed file format")                  \
  X(TRUNCATED, -10005, "file is truncated")                                  \
  X(RATE, -10006, "sample rate out of range")                                \
  X(CHANNELS, -10007, "channel count out of range")                          \
  X(NONFINITE, -10008, "non-finite sample (NaN or infinity)")                \
  X(CONFIG, -10009, "invalid configuration")                                 \
  X(RESAMPLE, -10010, "resampler failure")                                   \
  X(FFT, -10011, "FFT setup failure")                                        \
  X(STATE, -10012, "call not valid in the current state")                    \
  X(EMPTY, -10013, "input is empty")

typedef enum aural_error {
#define AURAL__ERR_ENUM(name, value, text) AURAL_E##name = (value),
  AURAL_ERROR_MAP(AURAL__ERR_ENUM)
#undef AURAL__ERR_ENUM
} aural_error;

/* A caller-owned error report: the code and a message naming what failed. */
typedef struct aural_err {
  int code;
  char msg[512];
} aural_err;

/* Describes any code this library returns (AURAL_E* or -errno). Static
 * string; thread-safe. */
const char *aural_strerror(int code);

/* The symbolic name of a code ("AURAL_EFORMAT", "ENOENT", ...). Static
 * string; thread-safe. */
const char *aural_err_name(int code);

#ifdef __cplusplus
}
#endif

#endif
