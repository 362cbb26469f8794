/*
 * aural wire protocol: framing, message structs, encode/decode over caller
 * buffers. No global state, and no I/O or allocation but where a function
 * says so (aural_json_parse_into allocates once; aural_proto_user_name
 * asks the system's user database, which may read files or the network):
 * every function is thread-safe, and all but those two are
 * real-time-safe. proto/PROTOCOL.md is the normative spec; this header is
 * its C form.
 *
 *   uint8_t buf[AURAL_PROTO_HEADER_BYTES + 256];
 *   size_t n = aural_proto_encode_ping(buf, sizeof buf, "abc", 3);
 *   ...write n bytes...
 *
 *   aural_msg_header h;
 *   int rc = aural_proto_decode_header(in, in_len, max_payload, &h);
 *   if (rc == AURAL_PROTO_MORE) { read more }
 *   else if (rc < 0) { send ERROR with aural_proto_error_name(rc), close }
 *   else { payload = in + AURAL_PROTO_HEADER_BYTES, h.payload_bytes long }
 *
 *   aural_msg_stats_reply r;         (each server message has its decoder)
 *   char why[256];
 *   if (aural_proto_decode_stats_reply(payload, h.payload_bytes, &r, why,
 *                                      sizeof why) == 0) {
 *     aural_stats_stream s;          (lists are read one entry at a time)
 *     while (aural_proto_stats_stream_next(&r.streams, &s, NULL, 0) == 1)
 *       printf("%s %llu frames\n", s.info.name,
 *              (unsigned long long)s.info.frames);
 *   }
 */
#ifndef AURAL_PROTO_H
#define AURAL_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aural/codes.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AURAL_PROTO_MAGIC 0x4C525541u /* bytes 'A' 'U' 'R' 'L' */
#define AURAL_PROTO_VERSION 1
#define AURAL_PROTO_HEADER_BYTES 16
#define AURAL_PROTO_CHUNK_HEADER_BYTES 72
#define AURAL_PROTO_NAME_MAX 64      /* stream name bytes, without NUL */
#define AURAL_PROTO_PING_MAX 256     /* PING payload bytes */
#define AURAL_PROTO_JSON_TOKENS 512  /* most tokens one JSON payload may hold */

/* Message types (PROTOCOL.md §4). */
#define AURAL_MSG_TYPE_MAP(X)                                                 \
  X(HELLO, 0x01)                                                              \
  X(WELCOME, 0x02)                                                            \
  X(ERROR, 0x03)                                                              \
  X(PING, 0x04)                                                               \
  X(PONG, 0x05)                                                               \
  X(LIST_STREAMS, 0x06)                                                       \
  X(STREAMS, 0x07)                                                            \
  X(SUBSCRIBE, 0x08)                                                          \
  X(SUBSCRIBED, 0x09)                                                         \
  X(UNSUBSCRIBE, 0x0A)                                                        \
  X(UNSUBSCRIBED, 0x0B)                                                       \
  X(STREAM_STARTED, 0x0C)                                                     \
  X(STREAM_ENDED, 0x0D)                                                       \
  X(CHUNK, 0x0E)                                                              \
  X(GAP, 0x0F)                                                                \
  X(AUDIO_OPEN, 0x10)                                                         \
  X(AUDIO_OPENED, 0x11)                                                       \
  X(AUDIO_DATA, 0x12)                                                         \
  X(AUDIO_CLOSE, 0x13)                                                        \
  X(AUDIO_CLOSED, 0x14)                                                       \
  X(STATS, 0x15)                                                              \
  X(STATS_REPLY, 0x16)                                                        \
  X(WORDS, 0x17)

typedef enum aural_msg_type {
#define AURAL__MSG_ENUM(name, value) AURAL_MSG_##name = value,
  AURAL_MSG_TYPE_MAP(AURAL__MSG_ENUM)
#undef AURAL__MSG_ENUM
} aural_msg_type;

/* Name of a message type ("CHUNK"), or NULL when unknown. */
const char *aural_msg_type_name(int type);

/* Error codes: the decoders return AURAL_PROTO_E* codes (aural/codes.h,
 * the project's one list); ERROR messages carry their wire values. */
enum {
  AURAL_PROTO_MORE = 1, /* not an error: the buffer holds too few bytes */
};

/* The wire value of a protocol code (AURAL_PROTO_ETOO_LARGE gives 3), or
 * 0 when code is not one. A wire value given is returned as it is. */
int aural_proto_error_wire(int code);
/* The code of a wire value (3 gives AURAL_PROTO_ETOO_LARGE); a value this
 * version does not know still gives a distinct negative code, whose name
 * is NULL. */
int aural_proto_error_from_wire(uint32_t wire);

/* "TOO_LARGE" for AURAL_PROTO_ETOO_LARGE (or its wire value 3); NULL when
 * unknown. */
const char *aural_proto_error_name(int code);
/* One-line description; "unknown error" when unknown. */
const char *aural_proto_strerror(int code);

/* --- the Unix socket ---------------------------------------------------- */

/* Where the system service (aurald.socket) listens. */
#define AURAL_PROTO_SYSTEM_SOCKET "/run/aural/aural.sock"

/* The socket path used when none is given, by the server and its clients
 * alike: $AURAL_SOCKET, else $XDG_RUNTIME_DIR/aural.sock, else
 * AURAL_PROTO_SYSTEM_SOCKET for root, else /tmp/aural-UID/aural.sock (an
 * empty variable counts as unset). Returns 0, or -1 when it does not fit
 * in cap bytes. */
int aural_proto_default_socket(char *out, size_t cap);

/* The login name of uid into buf, or "no such user"; returns buf. For
 * messages about who owns a socket's directory or serves it. Thread-safe
 * (getpwuid_r); not real-time-safe: the user database may read files,
 * allocate or ask the network. */
const char *aural_proto_user_name(unsigned uid, char *buf, size_t len);

/* --- framing ------------------------------------------------------------ */

typedef struct aural_msg_header {
  uint8_t version;        /* AURAL_PROTO_VERSION */
  uint8_t type;           /* aural_msg_type */
  uint16_t flags;         /* 0; receivers ignore bits they do not know */
  uint32_t stream_id;     /* 0 when the message concerns no stream */
  uint32_t payload_bytes; /* bytes after the header */
} aural_msg_header;

/* Writes the 16-byte header. */
void aural_proto_put_header(uint8_t out[AURAL_PROTO_HEADER_BYTES],
                            const aural_msg_header *h);

/* Reads the header at the start of buf. Returns 0 when it is complete and
 * valid, AURAL_PROTO_MORE when len < 16, or AURAL_PROTO_EFRAMING (magic),
 * EVERSION, EUNKNOWN_TYPE, or ETOO_LARGE (payload_bytes > max_payload).
 * h is filled whenever 16 bytes are there, even on error. Whether the
 * payload has fully arrived is the caller's check. */
int aural_proto_decode_header(const uint8_t *buf, size_t len,
                              uint32_t max_payload, aural_msg_header *h);

/* --- JSON payloads ------------------------------------------------------ */

/* A strict RFC 8259 reader over the caller's bytes: tokens point into the
 * payload, nothing is copied or allocated. */
typedef enum aural_json_kind {
  AURAL_JSON_OBJECT = 1,
  AURAL_JSON_ARRAY,
  AURAL_JSON_STRING, /* start/len exclude the quotes; escapes undecoded */
  AURAL_JSON_NUMBER,
  AURAL_JSON_TRUE,
  AURAL_JSON_FALSE,
  AURAL_JSON_NULL,
} aural_json_kind;

typedef struct aural_json_token {
  uint8_t kind;      /* aural_json_kind */
  uint32_t start;    /* byte offset in the payload */
  uint32_t len;      /* bytes */
  uint32_t n_items;  /* object: members; array: elements */
  uint32_t next;     /* index of the token after this value and its children */
  uint32_t hash;     /* member names: of the decoded name (duplicate check) */
} aural_json_token;

typedef struct aural_json {
  const char *text;
  size_t text_len;
  aural_json_token tokens[AURAL_PROTO_JSON_TOKENS];
  uint32_t n_tokens;
  aural_json_token *big; /* the caller's tokens (aural_json_parse_into) */
} aural_json;

/* Parses text (UTF-8, no NUL) as one JSON value of at most
 * AURAL_PROTO_JSON_TOKENS tokens and 16 levels of nesting. Returns 0 or
 * AURAL_PROTO_EBAD_PAYLOAD with why (may be NULL) naming the byte offset. */
int aural_json_parse(aural_json *js, const char *text, size_t len, char *why,
                     size_t why_len);

/* As aural_json_parse, for documents larger than a protocol payload (a
 * model file's header): the tokens go to the caller's array of cap tokens
 * instead of js->tokens, and are read through the accessors below (or
 * aural_json_token_at), which know where they are. Duplicate member
 * names are found by sorting each object's names once it is read (the
 * one allocation of the reader, freed before it returns), so a document
 * of n names costs n log n. */
int aural_json_parse_into(aural_json *js, aural_json_token *tokens,
                          uint32_t cap, const char *text, size_t len,
                          char *why, size_t why_len);

/* Token tok, or NULL when out of range. */
const aural_json_token *aural_json_token_at(const aural_json *js, int tok);

/* Token index of member key of the object at token obj, or -1. */
int aural_json_get(const aural_json *js, int obj, const char *key);

/* Decodes the string at token tok (escapes resolved, \u0000 refused) into
 * out (NUL-terminated). Returns its byte length, or -1 when tok is not a
 * string or it does not fit in out_size - 1 bytes. */
int aural_json_string(const aural_json *js, int tok, char *out,
                      size_t out_size);

/* The integer at token tok, when it is a number with no fraction or
 * exponent within [lo, hi]. Returns 0 or -1. */
int aural_json_int(const aural_json *js, int tok, int64_t lo, int64_t hi,
                   int64_t *out);

/* The number at token tok as a double. Returns 0 or -1. */
int aural_json_double(const aural_json *js, int tok, double *out);

/* The boolean at token tok. Returns 0 or -1. */
int aural_json_bool(const aural_json *js, int tok, bool *out);

/* The i-th element of the array at token arr, or -1. */
int aural_json_item(const aural_json *js, int arr, uint32_t i);

/* Like aural_json_parse, for payloads whose arrays may be long (a WELCOME's
 * vocabulary, a STATS_REPLY's streams): every array is checked whole but
 * keeps only its own token, and is read element by element with an
 * aural_json_list. The token limit applies to the outer object without its
 * arrays' contents, and to each element on its own. */
int aural_json_parse_lists(aural_json *js, const char *text, size_t len,
                           char *why, size_t why_len);

/* A cursor over the elements of an array in the caller's text. It points
 * into the text the array was parsed from, which must outlive it. */
typedef struct aural_json_list {
  const char *text; /* the array's bytes, '[' to ']' */
  uint32_t len;
  uint32_t n_items; /* elements in the array */
  uint32_t index;   /* elements read so far */
  uint32_t pos;     /* byte offset of the next one */
} aural_json_list;

/* Points l at the array at token tok (parsed by either parser). Returns 0,
 * or -1 (l empty) when tok is not an array. */
int aural_json_list_init(const aural_json *js, int tok, aural_json_list *l);

/* Parses the next element into item (as aural_json_parse_lists; its root
 * is token 0). Returns 1, 0 after the last element, or
 * AURAL_PROTO_EBAD_PAYLOAD with why naming the element. */
int aural_json_list_next(aural_json_list *l, aural_json *item, char *why,
                         size_t why_len);

/* A JSON writer into a caller buffer. Overflow is sticky: every call after
 * it does nothing and aural_jw_finish() returns -1. */
typedef struct aural_jw {
  char *buf;
  size_t cap;
  size_t len;
  bool overflow;
  bool need_comma;
} aural_jw;

void aural_jw_init(aural_jw *w, char *buf, size_t cap);
void aural_jw_begin_object(aural_jw *w);
void aural_jw_end_object(aural_jw *w);
void aural_jw_begin_array(aural_jw *w);
void aural_jw_end_array(aural_jw *w);
void aural_jw_key(aural_jw *w, const char *key); /* key, then one value */
void aural_jw_string(aural_jw *w, const char *s); /* escapes as needed */
void aural_jw_string_n(aural_jw *w, const char *s, size_t n);
void aural_jw_int(aural_jw *w, int64_t v);
void aural_jw_uint(aural_jw *w, uint64_t v);
void aural_jw_double(aural_jw *w, double v); /* non-finite written as null */
void aural_jw_bool(aural_jw *w, bool v);
void aural_jw_null(aural_jw *w);
/* Returns the bytes written, or -1 after an overflow. */
long aural_jw_finish(const aural_jw *w);

/* --- messages ------------------------------------------------------------ */

/* Output kinds a subscriber asks for, as bits. */
#define AURAL_OUT_EMBEDDINGS 0x1u
#define AURAL_OUT_LOGITS 0x2u
#define AURAL_OUT_TEXT 0x4u
#define AURAL_OUT_ALL 0x7u   /* every section a CHUNK can carry */
#define AURAL_OUT_WORDS 0x8u /* WORDS messages, not a CHUNK section */
#define AURAL_OUT_ANY 0xFu   /* every output a SUBSCRIBE may name */

typedef enum aural_dtype {
  AURAL_DTYPE_F32 = 0,
  AURAL_DTYPE_F16 = 1,
} aural_dtype;

typedef enum aural_sample_format {
  AURAL_SAMPLE_S16 = 0, /* signed 16-bit little-endian */
  AURAL_SAMPLE_F32 = 1, /* IEEE float32 little-endian, full scale ±1 */
} aural_sample_format;

/* HELLO (client -> server). */
typedef struct aural_msg_hello {
  uint32_t versions;  /* bit v set: version v supported (bit 1 for v1) */
  char client[AURAL_PROTO_NAME_MAX + 1]; /* free-form, may be empty */
} aural_msg_hello;

/* SUBSCRIBE (client -> server). */
/* Custom words a request names (SUBSCRIBE, AUDIO_OPEN: "vocabulary" and
 * "boost"): each 1..AURAL_PROTO_VOCAB_WORD_MAX bytes of UTF-8 without
 * spaces, commas or control characters. */
#define AURAL_PROTO_VOCAB_MAX 64
#define AURAL_PROTO_VOCAB_WORD_MAX 64
typedef struct aural_msg_vocabulary {
  uint32_t n_words;                   /* 0: none */
  char words[AURAL_PROTO_VOCAB_MAX][AURAL_PROTO_VOCAB_WORD_MAX + 1];
  bool has_boost;                     /* false: the server's default */
  double boost;                       /* 0..100 */
} aural_msg_vocabulary;

typedef struct aural_msg_subscribe {
  bool all;                               /* every stream */
  char stream[AURAL_PROTO_NAME_MAX + 1];  /* stream name when !all */
  uint32_t outputs;                       /* AURAL_OUT_* bits, not 0 */
  uint8_t dtype;                          /* aural_dtype */
  aural_msg_vocabulary vocabulary;        /* for this subscription's words */
} aural_msg_subscribe;

/* AUDIO_OPEN (client -> server). */
typedef struct aural_msg_audio_open {
  char name[AURAL_PROTO_NAME_MAX + 1]; /* empty: the server picks one */
  uint32_t sample_rate;                /* 4000..768000 */
  uint32_t channels;                   /* 1..256 */
  uint8_t format;                      /* aural_sample_format */
  aural_msg_vocabulary vocabulary;     /* for the stream's words */
} aural_msg_audio_open;

/* STATS (client -> server): which page of the reply. Streams and clients
 * are listed newest first (descending id); a reply holds at most
 * AURAL_STATS_PAGE_STREAMS streams and the subscriptions of whole clients
 * up to AURAL_STATS_PAGE_SUBSCRIBERS, and names where the next page starts
 * when it is cut. An empty payload asks for the first page. */
#define AURAL_STATS_PAGE_STREAMS 256
#define AURAL_STATS_PAGE_SUBSCRIBERS 1024
typedef struct aural_msg_stats {
  uint32_t streams_before; /* only streams with a smaller id; 0: all */
  uint32_t clients_before; /* only clients with a smaller id; 0: all */
} aural_msg_stats;

/* Request decoders: payload is the message's payload. Each returns 0 or
 * AURAL_PROTO_EBAD_PAYLOAD with why naming the field. */
int aural_proto_decode_hello(const uint8_t *payload, size_t n,
                             aural_msg_hello *m, char *why, size_t why_len);
int aural_proto_decode_subscribe(const uint8_t *payload, size_t n,
                                 aural_msg_subscribe *m, char *why,
                                 size_t why_len);
int aural_proto_decode_unsubscribe(const uint8_t *payload, size_t n,
                                   uint32_t *subscription, char *why,
                                   size_t why_len);
int aural_proto_decode_audio_open(const uint8_t *payload, size_t n,
                                  aural_msg_audio_open *m, char *why,
                                  size_t why_len);
int aural_proto_decode_stats(const uint8_t *payload, size_t n,
                             aural_msg_stats *m, char *why, size_t why_len);

/* A stream name is 1..AURAL_PROTO_NAME_MAX bytes of printable ASCII other
 * than '/' and '\\'. Returns true when s is one. */
bool aural_proto_valid_name(const char *s);

/* Whole-message encoders: each writes header + payload into out and
 * returns the total bytes, or 0 when out_cap is too small. */
size_t aural_proto_encode_hello(uint8_t *out, size_t out_cap,
                                const aural_msg_hello *m);
size_t aural_proto_encode_subscribe(uint8_t *out, size_t out_cap,
                                    const aural_msg_subscribe *m);
size_t aural_proto_encode_unsubscribe(uint8_t *out, size_t out_cap,
                                      uint32_t subscription);
size_t aural_proto_encode_audio_open(uint8_t *out, size_t out_cap,
                                     const aural_msg_audio_open *m);
/* STATS: an empty payload when both cursors are 0. */
size_t aural_proto_encode_stats(uint8_t *out, size_t out_cap,
                                const aural_msg_stats *m);
/* A message whose payload is given bytes (JSON built with aural_jw,
 * AUDIO_DATA samples, PING data, or empty). */
size_t aural_proto_encode_raw(uint8_t *out, size_t out_cap, uint8_t type,
                              uint32_t stream_id, const void *payload,
                              size_t payload_bytes);
/* ERROR: {"code":N,"name":"...","message":"...","fatal":B}. */
size_t aural_proto_encode_error(uint8_t *out, size_t out_cap,
                                uint32_t stream_id, int code,
                                const char *message, bool fatal);

/* Strings for the JSON fields. */
const char *aural_dtype_name(int dtype);          /* "f32", "f16" */
const char *aural_sample_format_name(int format); /* "s16", "f32" */
const char *aural_output_name(uint32_t bit);      /* "embeddings", ... */

/* --- requests without a JSON payload ------------------------------------ */

/* PING (opaque data, at most AURAL_PROTO_PING_MAX bytes), LIST_STREAMS
 * (empty), AUDIO_DATA (interleaved samples of an opened stream) and
 * AUDIO_CLOSE (empty). Each returns the total bytes, or 0 when out_cap is
 * too small or the data is too long. */
size_t aural_proto_encode_ping(uint8_t *out, size_t out_cap, const void *data,
                               size_t n);
size_t aural_proto_encode_list_streams(uint8_t *out, size_t out_cap);
size_t aural_proto_encode_audio_data(uint8_t *out, size_t out_cap,
                                     uint32_t stream_id, const void *samples,
                                     size_t n_bytes);
size_t aural_proto_encode_audio_close(uint8_t *out, size_t out_cap,
                                      uint32_t stream_id);

/* PING or PONG payload: 0, or AURAL_PROTO_EBAD_PAYLOAD when longer than
 * AURAL_PROTO_PING_MAX. The data is the payload itself. */
int aural_proto_decode_ping(const uint8_t *payload, size_t n, char *why,
                            size_t why_len);
int aural_proto_decode_pong(const uint8_t *payload, size_t n, char *why,
                            size_t why_len);

/* AUDIO_DATA of a stream opened with this format and channel count: the
 * whole sample frames it holds in *n_frames. Returns 0, or
 * AURAL_PROTO_EBAD_PAYLOAD when n is not a whole number of frames. */
int aural_proto_decode_audio_data(const uint8_t *payload, size_t n,
                                  uint8_t format, uint32_t channels,
                                  size_t *n_frames, char *why,
                                  size_t why_len);

/* --- server messages ------------------------------------------------------ *
 *
 * Each has a struct, an encoder writing the whole message into out
 * (returning its bytes, or 0 when out_cap is too small or a field holds a
 * value with no wire name, such as an unknown reason), and a decoder of
 * its payload (returning 0, or AURAL_PROTO_EBAD_PAYLOAD with why naming
 * the field, e.g. "stream_ended: \"frames\" must be an integer ...").
 * Decoders allocate nothing; members they do not know are ignored
 * (PROTOCOL.md §2). Lists (a vocabulary, STREAMS, STATS_REPLY) are not
 * copied: the decoder checks every element and leaves an aural_json_list
 * pointing into the payload, read with the *_next function of its kind.
 * Integers wider than 32 bits decode within 0..INT64_MAX (times: signed). */

#define AURAL_PROTO_TEXT_MAX 1024 /* bytes of a free-text field, no NUL */
#define AURAL_PROTO_ERROR_NAME_MAX 31

typedef enum aural_stream_source {
  AURAL_SOURCE_FILE = 0,
  AURAL_SOURCE_MIC = 1,
  AURAL_SOURCE_CLIENT = 2,
} aural_stream_source;

typedef enum aural_end_reason {
  AURAL_END_EOF = 1,
  AURAL_END_CLOSED = 2,
  AURAL_END_DISCONNECTED = 3,
  AURAL_END_DEVICE_LOST = 4,
  AURAL_END_ERROR = 5,
  AURAL_END_SHUTDOWN = 6,
} aural_end_reason;

typedef enum aural_gap_reason {
  AURAL_GAP_QUEUE_FULL = 0,
} aural_gap_reason;

/* "file", "eof", "queue_full"...; NULL when unknown. */
const char *aural_source_name(int source);
const char *aural_end_reason_name(int reason);
const char *aural_gap_reason_name(int reason);

/* WELCOME's "model" object. */
typedef struct aural_msg_model {
  double sample_rate;    /* Hz */
  uint32_t n_mels;
  double frame_ms;       /* frame shift */
  double frame_length_ms; /* analysis window; 0: not given (omitted) */
  uint32_t d_model;      /* embedding width */
  uint32_t n_layers;
  uint32_t window;       /* attention window, frames */
  uint32_t vocab_size;   /* 0 without a CTC head */
  uint32_t chunk_frames; /* frames per chunk */
  bool words;            /* WORDS can be subscribed; false: omitted */
  char precision[16];    /* "bf16" (approximate: the server's
                            --precision); "": omitted, meaning f32 */
  aural_json_list vocab; /* decoded: the tokens, aural_proto_vocab_next() */
} aural_msg_model;

/* WELCOME (server -> client). */
typedef struct aural_msg_welcome {
  uint32_t version;
  char server[AURAL_PROTO_TEXT_MAX + 1];
  uint32_t max_request_bytes;
  uint32_t max_message_bytes;
  aural_msg_model model;
  uint32_t client; /* this connection's id; 0: not given (omitted) */
} aural_msg_welcome;

/* vocab: model.vocab_size token strings (m->model.vocab is not read). */
size_t aural_proto_encode_welcome(uint8_t *out, size_t out_cap,
                                  const aural_msg_welcome *m,
                                  const char *const *vocab);
int aural_proto_decode_welcome(const uint8_t *payload, size_t n,
                               aural_msg_welcome *m, char *why,
                               size_t why_len);
/* The next vocabulary token into out (NUL-terminated, at most
 * AURAL_PROTO_TEXT_MAX bytes): 1, 0 after the last, or a negative code when
 * it does not fit out_size. */
int aural_proto_vocab_next(aural_json_list *vocab, char *out,
                           size_t out_size);

/* ERROR (server -> client); aural_proto_encode_error() writes it. */
typedef struct aural_msg_error {
  uint32_t code; /* positive wire value, §6 */
  char name[AURAL_PROTO_ERROR_NAME_MAX + 1];
  char message[AURAL_PROTO_TEXT_MAX + 1];
  bool fatal;
} aural_msg_error;

int aural_proto_decode_error(const uint8_t *payload, size_t n,
                             aural_msg_error *m, char *why, size_t why_len);

/* PONG echoes a PING's data and stream_id. */
size_t aural_proto_encode_pong(uint8_t *out, size_t out_cap,
                               uint32_t stream_id, const void *data,
                               size_t n);

/* One stream, as STREAMS lists it and STATS_REPLY begins its entries. */
typedef struct aural_msg_stream_info {
  uint32_t id;
  char name[AURAL_PROTO_NAME_MAX + 1];
  uint8_t source;     /* aural_stream_source */
  double sample_rate; /* the source's rate, Hz */
  uint32_t channels;
  bool held;          /* waiting for a subscriber (aurald --hold) */
  int64_t start_us;   /* 0 while held */
  uint64_t frames;
  uint64_t chunks;
} aural_msg_stream_info;

/* STREAMS (server -> client), written entry by entry with an
 * aural_msg_writer. */
typedef struct aural_msg_writer {
  aural_jw w;
  uint8_t *out;
  uint8_t type;
  uint8_t list;       /* which list is open */
  uint32_t stream_id; /* of the header */
} aural_msg_writer;

void aural_proto_streams_begin(aural_msg_writer *mw, uint8_t *out,
                               size_t out_cap);
void aural_proto_streams_add(aural_msg_writer *mw, const aural_msg_stream_info *e);
/* Returns the message's total bytes, or 0 when it did not fit. */
size_t aural_proto_streams_end(aural_msg_writer *mw);

typedef struct aural_msg_streams {
  aural_json_list streams; /* aural_proto_streams_next */
} aural_msg_streams;

int aural_proto_decode_streams(const uint8_t *payload, size_t n,
                               aural_msg_streams *m, char *why,
                               size_t why_len);
/* The next entry: 1, 0 after the last, or AURAL_PROTO_EBAD_PAYLOAD. */
int aural_proto_streams_next(aural_json_list *streams, aural_msg_stream_info *e,
                             char *why, size_t why_len);

/* SUBSCRIBED (server -> client). */
typedef struct aural_msg_subscribed {
  uint32_t subscription;
  bool all;                              /* then stream is "" (null) */
  char stream[AURAL_PROTO_NAME_MAX + 1];
  uint32_t outputs;                      /* AURAL_OUT_* bits */
  uint8_t dtype;                         /* aural_dtype */
} aural_msg_subscribed;

size_t aural_proto_encode_subscribed(uint8_t *out, size_t out_cap,
                                     const aural_msg_subscribed *m);
int aural_proto_decode_subscribed(const uint8_t *payload, size_t n,
                                  aural_msg_subscribed *m, char *why,
                                  size_t why_len);

/* UNSUBSCRIBED (server -> client): {"subscription": N}. */
size_t aural_proto_encode_unsubscribed(uint8_t *out, size_t out_cap,
                                       uint32_t subscription);
int aural_proto_decode_unsubscribed(const uint8_t *payload, size_t n,
                                    uint32_t *subscription, char *why,
                                    size_t why_len);

/* STREAM_STARTED (server -> client, stream_id: the stream). */
typedef struct aural_msg_stream_started {
  char name[AURAL_PROTO_NAME_MAX + 1];
  uint8_t source; /* aural_stream_source */
  double sample_rate;
  uint32_t channels;
  int64_t start_us;
  uint64_t next_chunk; /* seq of the first chunk this client gets */
} aural_msg_stream_started;

size_t aural_proto_encode_stream_started(uint8_t *out, size_t out_cap,
                                         uint32_t stream_id,
                                         const aural_msg_stream_started *m);
int aural_proto_decode_stream_started(const uint8_t *payload, size_t n,
                                      aural_msg_stream_started *m, char *why,
                                      size_t why_len);

/* STREAM_ENDED (server -> client, stream_id: the stream). */
typedef struct aural_msg_stream_ended {
  char name[AURAL_PROTO_NAME_MAX + 1];
  uint8_t reason; /* aural_end_reason */
  char message[AURAL_PROTO_TEXT_MAX + 1];
  uint64_t frames;
  uint64_t chunks;
} aural_msg_stream_ended;

size_t aural_proto_encode_stream_ended(uint8_t *out, size_t out_cap,
                                       uint32_t stream_id,
                                       const aural_msg_stream_ended *m);
int aural_proto_decode_stream_ended(const uint8_t *payload, size_t n,
                                    aural_msg_stream_ended *m, char *why,
                                    size_t why_len);

/* GAP (server -> client, stream_id: the stream). */
typedef struct aural_msg_gap {
  uint64_t first_chunk;
  uint64_t n_chunks;
  uint8_t reason; /* aural_gap_reason */
} aural_msg_gap;

size_t aural_proto_encode_gap(uint8_t *out, size_t out_cap,
                              uint32_t stream_id, const aural_msg_gap *m);
int aural_proto_decode_gap(const uint8_t *payload, size_t n, aural_msg_gap *m,
                           char *why, size_t why_len);

/* AUDIO_OPENED (server -> client, stream_id: the new stream). */
typedef struct aural_msg_audio_opened {
  uint32_t stream;
  char name[AURAL_PROTO_NAME_MAX + 1];
} aural_msg_audio_opened;

size_t aural_proto_encode_audio_opened(uint8_t *out, size_t out_cap,
                                       const aural_msg_audio_opened *m);
int aural_proto_decode_audio_opened(const uint8_t *payload, size_t n,
                                    aural_msg_audio_opened *m, char *why,
                                    size_t why_len);

/* AUDIO_CLOSED (server -> client, stream_id: the stream). */
typedef struct aural_msg_audio_closed {
  uint64_t frames;
  uint64_t chunks;
} aural_msg_audio_closed;

size_t aural_proto_encode_audio_closed(uint8_t *out, size_t out_cap,
                                       uint32_t stream_id,
                                       const aural_msg_audio_closed *m);
int aural_proto_decode_audio_closed(const uint8_t *payload, size_t n,
                                    aural_msg_audio_closed *m, char *why,
                                    size_t why_len);

/* STATS_REPLY (server -> client): one page (§4.15). */
typedef struct aural_msg_stats_reply {
  double uptime_s;
  uint32_t clients;
  uint32_t workers;
  uint64_t message_bytes;
  uint64_t heap_bytes; /* 0: not known (omitted) */
  uint32_t streams_total;
  uint32_t subscribers_total;
  uint32_t next_streams_before; /* 0: no more streams (omitted) */
  uint32_t next_clients_before; /* 0: no more clients (omitted) */
  aural_json_list streams;      /* decoded: aural_proto_stats_stream_next */
  aural_json_list subscribers;  /* aural_proto_stats_subscriber_next */
} aural_msg_stats_reply;

typedef struct aural_stats_stream {
  aural_msg_stream_info info;
  double audio_s;
  double compute_s;
  double latency_ms_p50;
  double latency_ms_p99;
  uint64_t overruns;
  uint64_t rounds; /* compute rounds that took frames of it (0: omitted) */
} aural_stats_stream;

typedef struct aural_stats_subscriber {
  uint32_t client;
  uint32_t subscription;
  bool all;                              /* then stream is "" (null) */
  char stream[AURAL_PROTO_NAME_MAX + 1];
  uint64_t queue_bytes;
  uint64_t chunks_sent;
  uint64_t chunks_dropped;
} aural_stats_subscriber;

/* begin writes m's counts and opens the stream list; add_stream entries
 * come first, then add_subscriber entries; end writes m's next_* cursors
 * (which the caller may set after listing) and returns the total bytes,
 * or 0 when the message did not fit. */
void aural_proto_stats_reply_begin(aural_msg_writer *mw, uint8_t *out,
                                   size_t out_cap,
                                   const aural_msg_stats_reply *m);
void aural_proto_stats_reply_add_stream(aural_msg_writer *mw,
                                        const aural_stats_stream *e);
void aural_proto_stats_reply_add_subscriber(aural_msg_writer *mw,
                                            const aural_stats_subscriber *e);
size_t aural_proto_stats_reply_end(aural_msg_writer *mw,
                                   const aural_msg_stats_reply *m);

int aural_proto_decode_stats_reply(const uint8_t *payload, size_t n,
                                   aural_msg_stats_reply *m, char *why,
                                   size_t why_len);
/* The next entry of a decoded reply's lists: 1, 0 after the last, or
 * AURAL_PROTO_EBAD_PAYLOAD. */
int aural_proto_stats_stream_next(aural_json_list *streams,
                                  aural_stats_stream *e, char *why,
                                  size_t why_len);
int aural_proto_stats_subscriber_next(aural_json_list *subscribers,
                                      aural_stats_subscriber *e, char *why,
                                      size_t why_len);

/* WORDS (server -> client, stream_id: the stream): one chunk's words,
 * sent after its CHUNK to subscriptions with AURAL_OUT_WORDS (§4.16).
 * Frames count from the stream's first; a word spans [start, end). */
#define AURAL_PROTO_WORD_MAX 64 /* bytes of a word's UTF-8 text */

typedef struct aural_msg_words {
  uint64_t seq;             /* the chunk's */
  bool final;               /* the stream's last chunk */
  aural_json_list segments; /* decoded: aural_proto_words_segment_next */
  aural_json_list partial;  /* decoded: aural_proto_words_word_next */
} aural_msg_words;

typedef struct aural_msg_word {
  char word[AURAL_PROTO_WORD_MAX + 1];
  uint64_t start, end; /* frames, start <= end */
  double confidence;   /* 0..1 */
} aural_msg_word;

/* begin writes seq and final and opens the finals; each segment() starts
 * the next final segment, add() appends a word to it (or, after
 * partial(), to the partial); end returns the message's total bytes, or 0
 * when it did not fit or a word was empty, longer than
 * AURAL_PROTO_WORD_MAX bytes, or had end < start or a confidence outside
 * 0..1. */
void aural_proto_words_begin(aural_msg_writer *mw, uint8_t *out,
                             size_t out_cap, uint32_t stream_id,
                             const aural_msg_words *m);
void aural_proto_words_segment(aural_msg_writer *mw);
void aural_proto_words_partial(aural_msg_writer *mw);
void aural_proto_words_add(aural_msg_writer *mw, const char *word,
                           uint64_t start, uint64_t end, double confidence);
size_t aural_proto_words_end(aural_msg_writer *mw);

/* Checks every segment and word; m's lists point into payload. */
int aural_proto_decode_words(const uint8_t *payload, size_t n,
                             aural_msg_words *m, char *why, size_t why_len);
/* The next final segment of a decoded WORDS as a list of words: 1, 0 after
 * the last, or AURAL_PROTO_EBAD_PAYLOAD. */
int aural_proto_words_segment_next(aural_json_list *segments,
                                   aural_json_list *words, char *why,
                                   size_t why_len);
/* The next word of a segment or of the partial: 1, 0 after the last, or
 * AURAL_PROTO_EBAD_PAYLOAD. */
int aural_proto_words_word_next(aural_json_list *words, aural_msg_word *w,
                                char *why, size_t why_len);

/* --- CHUNK --------------------------------------------------------------- */

#define AURAL_CHUNK_FINAL 0x1u

/* The fixed part of a CHUNK payload (PROTOCOL.md §5). Times are
 * microseconds since the Unix epoch (CLOCK_REALTIME); 0 = unknown. */
typedef struct aural_chunk_header {
  uint64_t seq;          /* chunk number in the stream, from 0 */
  uint64_t first_frame;  /* absolute index of its first frame */
  uint32_t n_frames;     /* frames in this chunk */
  uint32_t flags;        /* AURAL_CHUNK_FINAL */
  int64_t start_us;      /* when the stream started */
  int64_t capture_us;    /* when the audio of its first frame arrived */
  int64_t ready_us;      /* when the audio completing it arrived */
  int64_t emitted_us;    /* when the server queued it for sending */
  uint32_t d_model;      /* embedding width */
  uint32_t vocab_size;   /* logits width (0 without a head) */
  uint16_t outputs;      /* AURAL_OUT_* sections present, in bit order */
  uint8_t dtype;         /* aural_dtype of embeddings and logits */
  uint32_t text_bytes;   /* UTF-8 bytes of the text section */
} aural_chunk_header;

/* Payload bytes of a chunk with this header: 72 + sections. Returns 0 on
 * overflow of 32 bits, and when dtype or outputs has a value §5 does not
 * define. */
size_t aural_chunk_payload_bytes(const aural_chunk_header *c);

/* Writes the 72-byte fixed part. */
void aural_chunk_put_header(uint8_t out[AURAL_PROTO_CHUNK_HEADER_BYTES],
                            const aural_chunk_header *c);

/* Decodes a CHUNK payload: fills c and points emb / logits / text at their
 * sections inside payload (NULL when absent). Checks that the sizes add up
 * to exactly n. Returns 0 or AURAL_PROTO_EBAD_PAYLOAD. */
int aural_chunk_decode(const uint8_t *payload, size_t n,
                       aural_chunk_header *c, const uint8_t **emb,
                       const uint8_t **logits, const char **text);

/* IEEE half <-> float, round to nearest even. */
uint16_t aural_f32_to_f16(float f);
float aural_f16_to_f32(uint16_t h);

/* Little-endian helpers. */
static inline void aural_put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void aural_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void aural_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t aural_get_u16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t aural_get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}
static inline uint64_t aural_get_u64(const uint8_t *p) {
  return (uint64_t)aural_get_u32(p) | (uint64_t)aural_get_u32(p + 4) << 32;
}

#ifdef __cplusplus
}
#endif
#endif
