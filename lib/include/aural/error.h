/*
 * aural/error.h — error codes and detailed error messages.
 *
 *   aural_audiofile *af;
 *   aural_err err;
 *   int rc = aural_audiofile_open("in.wav", &af, &err);
 *   if (rc < 0) fprintf(stderr, "%s\n", err.msg);   // names the file and problem
 *
 * Every fallible function returns 0 or a negative code: either one of the
 * AURAL_E* codes of aural/codes.h (the project's one list of codes) or a
 * negated errno value passed through from the system. Functions that read untrusted input also fill an optional
 * aural_err with a message that names the file, field or offset at fault.
 */
#ifndef AURAL_ERROR_H
#define AURAL_ERROR_H

#include <stddef.h>

#include "aural/codes.h" /* the codes: AURAL_E* (and AURAL_PROTO_E*) */

#ifdef __cplusplus
extern "C" {
#endif

/* A caller-owned error report: the code and a message naming what failed. */
typedef struct aural_err {
  int code;
  char msg[512];
} aural_err;

/* Describes any code of aural/codes.h or -errno. Static
 * string; thread-safe. */
const char *aural_strerror(int code);

/* The symbolic name of a code ("AURAL_EFORMAT", "ENOENT", ...). Static
 * string; thread-safe. */
const char *aural_err_name(int code);

#ifdef __cplusplus
}
#endif

#endif
