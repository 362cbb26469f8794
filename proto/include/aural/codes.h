/*
 * aural/codes.h — the one list of error codes, for libaural and for the
 * protocol codec alike.
 *
 * A fallible function returns 0 or a negative code: one of the codes
 * below, or (libaural, where the system failed) a negated errno value.
 * Every code here sits below -10000, so none of them can be mistaken for
 * an errno value. The protocol's codes are also the wire values of
 * PROTOCOL.md §6: an ERROR message carries aural_proto_error_wire(code),
 * a small positive number, and aural_proto_error_from_wire() gives the
 * code back.
 *
 *   int rc = aural_proto_decode_hello(payload, n, &hello, why, sizeof why);
 *   if (rc == AURAL_PROTO_EBAD_PAYLOAD) ...
 *
 * This header needs nothing but the compiler: aural/proto.h (libc only)
 * and aural/error.h both include it.
 */
#ifndef AURAL_CODES_H
#define AURAL_CODES_H

/* libaural's codes. X(name, value, description). */
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
  X(EMPTY, -10013, "input is empty")                                         \
  X(OVERFLOW, -10014, "the model's outputs are not finite (it overflows)")

/* The protocol's codes, by wire value (PROTOCOL.md §6); the code a
 * function returns is -(AURAL_PROTO_ERROR_BASE + wire value).
 * X(name, wire value, description). */
#define AURAL_PROTO_ERROR_BASE 10100
#define AURAL_PROTO_ERROR_MAP(X)                                              \
  X(FRAMING, 1, "malformed message header (bad magic)")                       \
  X(VERSION, 2, "unsupported protocol version")                               \
  X(TOO_LARGE, 3, "payload larger than the announced maximum")               \
  X(UNKNOWN_TYPE, 4, "unknown message type")                                  \
  X(BAD_PAYLOAD, 5, "malformed payload")                                      \
  X(STATE, 6, "message not valid at this point of the session")              \
  X(NO_STREAM, 7, "no such stream")                                           \
  X(NAME_IN_USE, 8, "a live stream already has this name")                    \
  X(LIMIT, 9, "a server limit was reached")                                   \
  X(NO_HEAD, 10, "the model has no CTC head (no logits or text)")             \
  X(AUDIO, 11, "audio data rejected")                                         \
  X(SLOW_CONSUMER, 12, "subscriber too slow; disconnected")                   \
  X(SHUTDOWN, 13, "server shutting down")                                     \
  X(INTERNAL, 14, "internal server error")                                    \
  X(NO_SUBSCRIPTION, 15, "no such subscription")                             \
  X(PERMISSION, 16, "peer credentials refused")                              \
  X(NO_WORDS, 17, "the server has no lexicon (no words)")

typedef enum aural_error {
#define AURAL__ERR_ENUM(name, value, text) AURAL_E##name = (value),
  AURAL_ERROR_MAP(AURAL__ERR_ENUM)
#undef AURAL__ERR_ENUM
#define AURAL__PERR_ENUM(name, value, text)                                   \
  AURAL_PROTO_E##name = -(AURAL_PROTO_ERROR_BASE + (value)),
  AURAL_PROTO_ERROR_MAP(AURAL__PERR_ENUM)
#undef AURAL__PERR_ENUM
} aural_error;

#endif
