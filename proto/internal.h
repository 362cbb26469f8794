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

#include "aural/proto.h"

/* The payload parsed (with aural_json_parse_lists when lists), its root
 * checked to be an object; on failure why says so after "what: ". */
int aural__parse_object(aural_json *js, const uint8_t *payload, size_t n,
                        bool lists, const char *what, char *why,
                        size_t why_len);

/* Sets why to 'what: "field" must' and returns AURAL_PROTO_EBAD_PAYLOAD. */
int aural__field_error(char *why, size_t why_len, const char *what,
                       const char *field, const char *must);

/* Starts a JSON payload after the header room of out; false when even the
 * header does not fit. */
bool aural__start_json(aural_jw *w, uint8_t *out, size_t out_cap);

/* Completes a message whose JSON payload w wrote after the header room:
 * its total bytes, or 0 after an overflow. */
size_t aural__finish_json(uint8_t *out, const aural_jw *w, uint8_t type,
                          uint32_t stream_id);

/* A fixed-size char field, which need not be NUL-terminated, as a string. */
void aural__put_field(aural_jw *w, const char *s, size_t size);

/* An "outputs" array (token arr): its AURAL_OUT_* bits, or 0 when it is not
 * a non-empty array of distinct output names. */
uint32_t aural__get_outputs(const aural_json *js, int arr);

/* Writes AURAL_OUT_* bits as the array of their names. */
void aural__put_outputs(aural_jw *w, uint32_t outputs);

#endif
