/*
 * Helpers shared by the protocol's source files; not installed.
 */
#ifndef AURAL_PROTO_INTERNAL_H
#define AURAL_PROTO_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define AURAL__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define AURAL__PRINTF(f, a)
#endif

/* Length (1..4) of the well-formed UTF-8 sequence at p (RFC 3629: no
 * overlongs, no surrogates, nothing above U+10FFFF), reading at most avail
 * bytes; its code point in *cp. Returns 0 when the bytes are not one. */
size_t aural__utf8_seq(const uint8_t *p, size_t avail, uint32_t *cp);

/* True when the n bytes at p are well-formed UTF-8. */
bool aural__utf8_valid(const uint8_t *p, size_t n);

/* Writes the UTF-8 form of code point cp (a scalar value) into out (4
 * bytes) and returns its length. */
size_t aural__utf8_put(uint8_t out[4], uint32_t cp);

/* Converts the n bytes at s, a number in the JSON grammar, to the nearest
 * double, whatever the C locale. Returns 0, or -1 when s is not such a
 * number or its magnitude is too large for a double. */
int aural__parse_double(const char *s, size_t n, double *out);

/* snprintf into why when it is not NULL. */
void aural__set_why(char *why, size_t why_len, const char *fmt, ...)
    AURAL__PRINTF(3, 4);

#endif
