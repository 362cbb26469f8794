/*
 * The server's messages (PROTOCOL.md §4) and the requests without a JSON
 * payload.
 *
 * Each JSON message is described once, by a table of its members: name,
 * kind, where the value sits in the C struct, and its range. One function
 * writes a table's members in table order and one reads them back, so a
 * message's encoder and decoder cannot disagree about a field. Lists are
 * written entry by entry (aural_msg_writer) and read back through an
 * aural_json_list, so their length is bounded only by the message size.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "aural/proto.h"
#include "internal.h"

/* --- names ---------------------------------------------------------------- */

static const char *const source_names[] = {"file", "mic", "client", NULL};
static const char *const end_names[] = {"",      "eof",         "closed",
                                        "disconnected", "device_lost",
                                        "error", "shutdown",    NULL};
static const char *const gap_names[] = {"queue_full", NULL};
static const char *const dtype_names[] = {"f32", "f16", NULL};

static const char *name_of(const char *const *names, int v) {
  for (int i = 0; names[i] != NULL; i++)
    if (i == v) return names[i][0] != '\0' ? names[i] : NULL;
  return NULL;
}

const char *aural_source_name(int source) {
  return name_of(source_names, source);
}

const char *aural_end_reason_name(int reason) {
  return name_of(end_names, reason);
}

const char *aural_gap_reason_name(int reason) {
  return name_of(gap_names, reason);
}

/* --- field tables --------------------------------------------------------- */

typedef enum field_kind {
  F_U32,       /* uint32_t within lo..hi */
  F_U64,       /* uint64_t within 0..INT64_MAX */
  F_I64,       /* int64_t */
  F_DOUBLE,    /* double */
  F_BOOL,      /* bool */
  F_TEXT,      /* char[size], any string that fits */
  F_NAME,      /* char[AURAL_PROTO_NAME_MAX + 1], a stream name */
  F_NAME_NULL, /* the same, "" written as null (an "all" subscription) */
  F_ENUM,      /* uint8_t, written as names[value] */
  F_OUTPUTS,   /* uint32_t AURAL_OUT_* bits, an array of their names */
} field_kind;

#define F_OMIT_ZERO 0x1u /* optional: left out when 0, 0 when absent */

typedef struct field {
  const char *key;
  uint8_t kind;  /* field_kind */
  uint8_t flags; /* F_OMIT_ZERO */
  size_t off;    /* in the struct */
  size_t size;   /* F_TEXT: the array's bytes */
  int64_t lo, hi;
  const char *const *names; /* F_ENUM */
} field;

#define N_FIELDS(t) (sizeof(t) / sizeof((t)[0]))
#define FIELD(st, k, kind, flags, size, lo, hi, names)                        \
  {#k, kind, flags, offsetof(st, k), size, lo, hi, names}
#define U32(st, k, l, h) FIELD(st, k, F_U32, 0, 0, l, h, NULL)
#define U32_OPT(st, k) FIELD(st, k, F_U32, F_OMIT_ZERO, 0, 0, UINT32_MAX, NULL)
#define U64(st, k) FIELD(st, k, F_U64, 0, 0, 0, INT64_MAX, NULL)
#define U64_OPT(st, k) FIELD(st, k, F_U64, F_OMIT_ZERO, 0, 0, INT64_MAX, NULL)
#define I64(st, k) FIELD(st, k, F_I64, 0, 0, INT64_MIN, INT64_MAX, NULL)
#define DBL(st, k) FIELD(st, k, F_DOUBLE, 0, 0, 0, 0, NULL)
#define DBL_OPT(st, k) FIELD(st, k, F_DOUBLE, F_OMIT_ZERO, 0, 0, 0, NULL)
#define BOOL(st, k) FIELD(st, k, F_BOOL, 0, 0, 0, 0, NULL)
#define BOOL_OPT(st, k) FIELD(st, k, F_BOOL, F_OMIT_ZERO, 0, 0, 0, NULL)
#define TEXT(st, k) FIELD(st, k, F_TEXT, 0, sizeof(((st *)0)->k), 0, 0, NULL)
#define NAME(st, k) FIELD(st, k, F_NAME, 0, 0, 0, 0, NULL)
#define TEXT_OPT(st, k)                                                        \
  FIELD(st, k, F_TEXT, F_OMIT_ZERO, sizeof(((st *)0)->k), 0, 0, NULL)
#define NAME_NULL(st, k) FIELD(st, k, F_NAME_NULL, 0, 0, 0, 0, NULL)
#define ENUM(st, k, names) FIELD(st, k, F_ENUM, 0, 0, 0, 0, names)
#define OUTPUTS(st, k) FIELD(st, k, F_OUTPUTS, 0, 0, 0, 0, NULL)

void aural__put_outputs(aural_jw *w, uint32_t outputs) {
  aural_jw_begin_array(w);
  for (uint32_t b = 1; b <= AURAL_OUT_WORDS; b <<= 1)
    if (outputs & b) aural_jw_string(w, aural_output_name(b));
  aural_jw_end_array(w);
}

/* A text member of a size-byte field as its decoder reads it back: every
 * byte that is not part of well-formed UTF-8 becomes U+FFFD (as aural_jw
 * would write it), and the text is cut between characters to size - 1
 * bytes. Written as it was, a message of stray bytes (a Latin-1 path)
 * would read back three times as long and be refused. */
static void put_text(aural_jw *w, const char *s, size_t size) {
  char out[AURAL_PROTO_TEXT_MAX + 1];
  size_t cap = (size < sizeof out ? size : sizeof out) - 1, n = 0, i = 0;
  while (i < size && s[i] != '\0') {
    uint32_t cp;
    size_t k = aural__utf8_seq((const uint8_t *)s + i, size - i, &cp);
    const char *from = k > 0 ? s + i : "\xEF\xBF\xBD";
    size_t len = k > 0 ? k : 3;
    if (len > cap - n) break;
    memcpy(out + n, from, len);
    n += len;
    i += k > 0 ? k : 1;
  }
  aural_jw_string_n(w, out, n);
}

/* Whether the member at v, of kind f, holds its zero value. Each kind is
 * read at its own width: a uint64_t read as its first 32 bits would call
 * 2^32 zero. */
static bool is_zero(const field *f, const void *v) {
  switch (f->kind) {
  case F_U64:
    return *(const uint64_t *)v == 0;
  case F_I64:
    return *(const int64_t *)v == 0;
  case F_DOUBLE:
    return *(const double *)v == 0;
  case F_BOOL:
    return !*(const bool *)v;
  case F_TEXT:
  case F_NAME:
  case F_NAME_NULL:
    return *(const char *)v == '\0';
  case F_ENUM:
    return *(const uint8_t *)v == 0;
  default: /* F_U32, F_OUTPUTS */
    return *(const uint32_t *)v == 0;
  }
}

/* Writes the members of table f from the struct at p. */
static void put_fields(aural_jw *w, const field *f, size_t n, const void *p) {
  const char *base = p;
  for (size_t i = 0; i < n; i++) {
    const void *v = base + f[i].off;
    if ((f[i].flags & F_OMIT_ZERO) && is_zero(&f[i], v)) continue;
    aural_jw_key(w, f[i].key);
    switch (f[i].kind) {
    case F_U32:
      aural_jw_uint(w, *(const uint32_t *)v);
      break;
    case F_U64:
      aural_jw_uint(w, *(const uint64_t *)v);
      break;
    case F_I64:
      aural_jw_int(w, *(const int64_t *)v);
      break;
    case F_DOUBLE:
      aural_jw_double(w, *(const double *)v);
      break;
    case F_BOOL:
      aural_jw_bool(w, *(const bool *)v);
      break;
    case F_TEXT:
      put_text(w, v, f[i].size);
      break;
    case F_NAME_NULL:
      if (*(const char *)v == '\0') {
        aural_jw_null(w);
        break;
      }
      /* fall through */
    case F_NAME:
      aural__put_field(w, v, AURAL_PROTO_NAME_MAX + 1);
      break;
    case F_ENUM: {
      /* A value with no name has no wire form: the message is not made. */
      const char *name = name_of(f[i].names, *(const uint8_t *)v);
      if (name == NULL) w->overflow = true;
      aural_jw_string(w, name);
      break;
    }
    case F_OUTPUTS:
      aural__put_outputs(w, *(const uint32_t *)v);
      break;
    }
  }
}

uint32_t aural__get_outputs(const aural_json *js, int arr) {
  aural_json_list l;
  aural_json item;
  uint32_t bits = 0;
  if (aural_json_list_init(js, arr, &l) != 0 || l.n_items == 0) return 0;
  while (aural_json_list_next(&l, &item, NULL, 0) == 1) {
    char s[16];
    uint32_t bit = 0;
    if (aural_json_string(&item, 0, s, sizeof s) >= 0)
      for (uint32_t b = 1; b <= AURAL_OUT_WORDS; b <<= 1)
        if (strcmp(s, aural_output_name(b)) == 0) bit = b;
    if (bit == 0 || (bits & bit)) return 0;
    bits |= bit;
  }
  return bits;
}

static int get_enum(const aural_json *js, int t, const char *const *names) {
  char s[32];
  if (aural_json_string(js, t, s, sizeof s) < 0) return -1;
  for (int i = 0; names[i] != NULL; i++)
    if (names[i][0] != '\0' && strcmp(s, names[i]) == 0) return i;
  return -1;
}

/* Reads member t of kind f into v. Returns 0, or -1 with must set to what
 * the value should have been. */
static int get_value(const aural_json *js, int t, const field *f, void *v,
                     const char **must) {
  int64_t x;
  switch (f->kind) {
  case F_U32:
  case F_U64:
  case F_I64:
    *must = "must be an integer in range";
    if (aural_json_int(js, t, f->lo, f->hi, &x) != 0) return -1;
    if (f->kind == F_U32) *(uint32_t *)v = (uint32_t)x;
    else if (f->kind == F_U64) *(uint64_t *)v = (uint64_t)x;
    else *(int64_t *)v = x;
    return 0;
  case F_DOUBLE:
    *must = "must be a number";
    return aural_json_double(js, t, v);
  case F_BOOL:
    *must = "must be true or false";
    return aural_json_bool(js, t, v);
  case F_TEXT:
    *must = "must be a string that fits its field";
    return aural_json_string(js, t, v, f->size) < 0 ? -1 : 0;
  case F_NAME_NULL:
    if (js->tokens[t].kind == AURAL_JSON_NULL) {
      *(char *)v = '\0';
      return 0;
    }
    /* fall through */
  case F_NAME:
    *must = f->kind == F_NAME ? "must be a stream name"
                              : "must be a stream name or null";
    if (aural_json_string(js, t, v, AURAL_PROTO_NAME_MAX + 1) < 0 ||
        !aural_proto_valid_name(v)) {
      *(char *)v = '\0';
      return -1;
    }
    return 0;
  case F_ENUM:
    *must = "has a value this version does not define";
    if ((x = get_enum(js, t, f->names)) < 0) return -1;
    *(uint8_t *)v = (uint8_t)x;
    return 0;
  default: /* F_OUTPUTS */
    *must = "must be a non-empty array of distinct output names";
    *(uint32_t *)v = aural__get_outputs(js, t);
    return *(uint32_t *)v != 0 ? 0 : -1;
  }
}

/* Reads the members of table f from the object at token obj into the
 * struct at p. A refusal reads 'what: "PREFIXkey" must ...'. */
static int get_fields(const aural_json *js, int obj, const field *f, size_t n,
                      void *p, const char *what, const char *prefix,
                      char *why, size_t why_len) {
  char *base = p;
  for (size_t i = 0; i < n; i++) {
    int t = aural_json_get(js, obj, f[i].key);
    const char *must = "is missing";
    if (t < 0 && (f[i].flags & F_OMIT_ZERO)) continue;
    if (t >= 0 && get_value(js, t, &f[i], base + f[i].off, &must) == 0)
      continue;
    aural__set_why(why, why_len, "%s: \"%s%s\" %s", what, prefix, f[i].key,
                   must);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  return 0;
}

/* A message of one flat table: encoder and decoder. */
static size_t encode_table(uint8_t *out, size_t out_cap, uint8_t type,
                           uint32_t stream_id, const field *f, size_t n,
                           const void *m) {
  aural_jw w;
  if (!aural__start_json(&w, out, out_cap)) return 0;
  aural_jw_begin_object(&w);
  put_fields(&w, f, n, m);
  aural_jw_end_object(&w);
  return aural__finish_json(out, &w, type, stream_id);
}

static int decode_table(const uint8_t *payload, size_t n, const field *f,
                        size_t n_fields, void *m, size_t m_size,
                        const char *what, char *why, size_t why_len) {
  aural_json js;
  memset(m, 0, m_size);
  /* Lists mode: an array a later version adds costs one token. */
  int rc = aural__parse_object(&js, payload, n, true, what, why, why_len);
  if (rc == 0)
    rc = get_fields(&js, 0, f, n_fields, m, what, "", why, why_len);
  if (rc != 0) memset(m, 0, m_size);
  return rc;
}

/* The encoder of a message that concerns a stream, and the decoder of a
 * message, each made of one table. */
#define TABLE_ENCODER(fn, T, type, table)                                     \
  size_t fn(uint8_t *out, size_t out_cap, uint32_t stream_id, const T *m) {  \
    return encode_table(out, out_cap, type, stream_id, table,                 \
                        N_FIELDS(table), m);                                  \
  }
#define TABLE_DECODER(fn, T, table, what)                                     \
  int fn(const uint8_t *payload, size_t n, T *m, char *why, size_t why_len) { \
    return decode_table(payload, n, table, N_FIELDS(table), m, sizeof *m,     \
                        what, why, why_len);                                  \
  }

/* --- the messages of one flat table --------------------------------------- */

static const field subscribed_fields[] = {
    U32(aural_msg_subscribed, subscription, 1, UINT32_MAX),
    NAME_NULL(aural_msg_subscribed, stream),
    BOOL(aural_msg_subscribed, all),
    OUTPUTS(aural_msg_subscribed, outputs),
    ENUM(aural_msg_subscribed, dtype, dtype_names),
};

size_t aural_proto_encode_subscribed(uint8_t *out, size_t out_cap,
                                     const aural_msg_subscribed *m) {
  aural_msg_subscribed c = *m;
  if (c.all) c.stream[0] = '\0';
  return encode_table(out, out_cap, AURAL_MSG_SUBSCRIBED, 0,
                      subscribed_fields, N_FIELDS(subscribed_fields), &c);
}

int aural_proto_decode_subscribed(const uint8_t *payload, size_t n,
                                  aural_msg_subscribed *m, char *why,
                                  size_t why_len) {
  int rc = decode_table(payload, n, subscribed_fields,
                        N_FIELDS(subscribed_fields), m, sizeof *m,
                        "subscribed", why, why_len);
  if (rc == 0 && m->all != (m->stream[0] == '\0')) {
    memset(m, 0, sizeof *m);
    return aural__field_error(why, why_len, "subscribed", "stream",
                              "must be null exactly when \"all\" is true");
  }
  return rc;
}

typedef struct subscription_only {
  uint32_t subscription;
} subscription_only;

static const field unsubscribed_fields[] = {
    U32(subscription_only, subscription, 1, UINT32_MAX),
};

size_t aural_proto_encode_unsubscribed(uint8_t *out, size_t out_cap,
                                       uint32_t subscription) {
  subscription_only m = {subscription};
  return encode_table(out, out_cap, AURAL_MSG_UNSUBSCRIBED, 0,
                      unsubscribed_fields, N_FIELDS(unsubscribed_fields), &m);
}

int aural_proto_decode_unsubscribed(const uint8_t *payload, size_t n,
                                    uint32_t *subscription, char *why,
                                    size_t why_len) {
  subscription_only m;
  int rc = decode_table(payload, n, unsubscribed_fields,
                        N_FIELDS(unsubscribed_fields), &m, sizeof m,
                        "unsubscribed", why, why_len);
  *subscription = m.subscription;
  return rc;
}

static const field stream_started_fields[] = {
    NAME(aural_msg_stream_started, name),
    ENUM(aural_msg_stream_started, source, source_names),
    DBL(aural_msg_stream_started, sample_rate),
    U32(aural_msg_stream_started, channels, 0, UINT32_MAX),
    I64(aural_msg_stream_started, start_us),
    U64(aural_msg_stream_started, next_chunk),
};

TABLE_ENCODER(aural_proto_encode_stream_started, aural_msg_stream_started,
              AURAL_MSG_STREAM_STARTED, stream_started_fields)

TABLE_DECODER(aural_proto_decode_stream_started, aural_msg_stream_started,
              stream_started_fields, "stream_started")

static const field stream_ended_fields[] = {
    NAME(aural_msg_stream_ended, name),
    ENUM(aural_msg_stream_ended, reason, end_names),
    TEXT(aural_msg_stream_ended, message),
    U64(aural_msg_stream_ended, frames),
    U64(aural_msg_stream_ended, chunks),
};

TABLE_ENCODER(aural_proto_encode_stream_ended, aural_msg_stream_ended,
              AURAL_MSG_STREAM_ENDED, stream_ended_fields)

TABLE_DECODER(aural_proto_decode_stream_ended, aural_msg_stream_ended,
              stream_ended_fields, "stream_ended")

static const field gap_fields[] = {
    U64(aural_msg_gap, first_chunk),
    U64(aural_msg_gap, n_chunks),
    ENUM(aural_msg_gap, reason, gap_names),
};

TABLE_ENCODER(aural_proto_encode_gap, aural_msg_gap, AURAL_MSG_GAP, gap_fields)

/* A GAP names at least one chunk, and its last, first_chunk + n_chunks -
 * 1, is a chunk number (0..INT64_MAX) like any other: a client adds the
 * two without overflow. */
int aural_proto_decode_gap(const uint8_t *payload, size_t n, aural_msg_gap *m,
                           char *why, size_t why_len) {
  int rc = decode_table(payload, n, gap_fields, N_FIELDS(gap_fields), m,
                        sizeof *m, "gap", why, why_len);
  if (rc == 0 && (m->n_chunks == 0 ||
                  m->n_chunks - 1 > (uint64_t)INT64_MAX - m->first_chunk)) {
    memset(m, 0, sizeof *m);
    return aural__field_error(why, why_len, "gap", "n_chunks",
                              "must be 1 or more, and first_chunk + "
                              "n_chunks - 1 at most 9223372036854775807");
  }
  return rc;
}

static const field audio_opened_fields[] = {
    U32(aural_msg_audio_opened, stream, 1, UINT32_MAX),
    NAME(aural_msg_audio_opened, name),
};

size_t aural_proto_encode_audio_opened(uint8_t *out, size_t out_cap,
                                       const aural_msg_audio_opened *m) {
  return encode_table(out, out_cap, AURAL_MSG_AUDIO_OPENED, m->stream,
                      audio_opened_fields, N_FIELDS(audio_opened_fields), m);
}

TABLE_DECODER(aural_proto_decode_audio_opened, aural_msg_audio_opened,
              audio_opened_fields, "audio_opened")

static const field audio_closed_fields[] = {
    U64(aural_msg_audio_closed, frames),
    U64(aural_msg_audio_closed, chunks),
};

TABLE_ENCODER(aural_proto_encode_audio_closed, aural_msg_audio_closed,
              AURAL_MSG_AUDIO_CLOSED, audio_closed_fields)

TABLE_DECODER(aural_proto_decode_audio_closed, aural_msg_audio_closed,
              audio_closed_fields, "audio_closed")

static const field error_fields[] = {
    U32(aural_msg_error, code, 0, UINT32_MAX),
    TEXT(aural_msg_error, name),
    TEXT(aural_msg_error, message),
    BOOL(aural_msg_error, fatal),
};

TABLE_DECODER(aural_proto_decode_error, aural_msg_error, error_fields, "error")

/* --- WELCOME -------------------------------------------------------------- */

static const field welcome_fields[] = {
    U32(aural_msg_welcome, version, 1, 31),
    TEXT(aural_msg_welcome, server),
    U32(aural_msg_welcome, max_request_bytes, 0, UINT32_MAX),
    U32(aural_msg_welcome, max_message_bytes, 0, UINT32_MAX),
};

/* The model's members before and after its vocabulary. */
static const field model_fields[] = {
    DBL(aural_msg_model, sample_rate),
    U32(aural_msg_model, n_mels, 0, UINT32_MAX),
    DBL(aural_msg_model, frame_ms),
    DBL_OPT(aural_msg_model, frame_length_ms),
    U32(aural_msg_model, d_model, 0, UINT32_MAX),
    U32(aural_msg_model, n_layers, 0, UINT32_MAX),
    U32(aural_msg_model, window, 0, UINT32_MAX),
    U32(aural_msg_model, vocab_size, 0, UINT32_MAX),
};

static const field model_tail_fields[] = {
    U32(aural_msg_model, chunk_frames, 0, UINT32_MAX),
    BOOL_OPT(aural_msg_model, words),
    TEXT_OPT(aural_msg_model, precision),
};

static const field welcome_tail_fields[] = {
    U32_OPT(aural_msg_welcome, client),
};

size_t aural_proto_encode_welcome(uint8_t *out, size_t out_cap,
                                  const aural_msg_welcome *m,
                                  const char *const *vocab) {
  aural_jw w;
  if (!aural__start_json(&w, out, out_cap)) return 0;
  if (m->model.vocab_size > 0 && vocab == NULL) return 0;
  aural_jw_begin_object(&w);
  put_fields(&w, welcome_fields, N_FIELDS(welcome_fields), m);
  aural_jw_key(&w, "model");
  aural_jw_begin_object(&w);
  put_fields(&w, model_fields, N_FIELDS(model_fields), &m->model);
  aural_jw_key(&w, "vocab");
  aural_jw_begin_array(&w);
  for (uint32_t i = 0; i < m->model.vocab_size && !w.overflow; i++)
    aural_jw_string(&w, vocab[i]);
  aural_jw_end_array(&w);
  put_fields(&w, model_tail_fields, N_FIELDS(model_tail_fields), &m->model);
  aural_jw_end_object(&w);
  put_fields(&w, welcome_tail_fields, N_FIELDS(welcome_tail_fields), m);
  aural_jw_end_object(&w);
  return aural__finish_json(out, &w, AURAL_MSG_WELCOME, 0);
}

int aural_proto_vocab_next(aural_json_list *vocab, char *out,
                           size_t out_size) {
  aural_json item;
  int rc = aural_json_list_next(vocab, &item, NULL, 0);
  if (rc != 1) return rc;
  return aural_json_string(&item, 0, out, out_size) < 0
             ? AURAL_PROTO_EBAD_PAYLOAD
             : 1;
}

/* Every element of the list at token t: a string of at most
 * AURAL_PROTO_TEXT_MAX bytes, n of them. */
static int check_vocab(const aural_json *js, int t, uint32_t n,
                       aural_json_list *l, char *why, size_t why_len) {
  static const char what[] = "welcome";
  if (aural_json_list_init(js, t, l) != 0 || l->n_items != n)
    return aural__field_error(why, why_len, what, "model.vocab",
                              "must be an array of vocab_size strings");
  aural_json_list check = *l;
  char tok[AURAL_PROTO_TEXT_MAX + 1];
  int rc;
  while ((rc = aural_proto_vocab_next(&check, tok, sizeof tok)) == 1)
    continue;
  if (rc == 0) return 0;
  aural__set_why(why, why_len,
                 "%s: \"model.vocab\" item %u must be a string of at most "
                 "%d bytes",
                 what, check.index - 1, AURAL_PROTO_TEXT_MAX);
  return AURAL_PROTO_EBAD_PAYLOAD;
}

int aural_proto_decode_welcome(const uint8_t *payload, size_t n,
                               aural_msg_welcome *m, char *why,
                               size_t why_len) {
  static const char what[] = "welcome";
  aural_json js;
  memset(m, 0, sizeof *m);
  int rc = aural__parse_object(&js, payload, n, true, what, why, why_len);
  if (rc == 0)
    rc = get_fields(&js, 0, welcome_fields, N_FIELDS(welcome_fields), m, what,
                    "", why, why_len);
  if (rc == 0)
    rc = get_fields(&js, 0, welcome_tail_fields,
                    N_FIELDS(welcome_tail_fields), m, what, "", why, why_len);
  int model = rc == 0 ? aural_json_get(&js, 0, "model") : -1;
  if (rc == 0 && (model < 0 || js.tokens[model].kind != AURAL_JSON_OBJECT))
    rc = aural__field_error(why, why_len, what, "model",
                            "must be an object");
  if (rc == 0)
    rc = get_fields(&js, model, model_fields, N_FIELDS(model_fields),
                    &m->model, what, "model.", why, why_len);
  if (rc == 0)
    rc = get_fields(&js, model, model_tail_fields,
                    N_FIELDS(model_tail_fields), &m->model, what, "model.",
                    why, why_len);
  if (rc == 0)
    rc = check_vocab(&js, aural_json_get(&js, model, "vocab"),
                     m->model.vocab_size, &m->model.vocab, why, why_len);
  if (rc != 0) memset(m, 0, sizeof *m);
  return rc;
}

/* --- lists: STREAMS and STATS_REPLY --------------------------------------- */

static const field stream_info_fields[] = {
    U32(aural_msg_stream_info, id, 1, UINT32_MAX),
    NAME(aural_msg_stream_info, name),
    ENUM(aural_msg_stream_info, source, source_names),
    DBL(aural_msg_stream_info, sample_rate),
    U32(aural_msg_stream_info, channels, 0, UINT32_MAX),
    BOOL(aural_msg_stream_info, held),
    I64(aural_msg_stream_info, start_us),
    U64(aural_msg_stream_info, frames),
    U64(aural_msg_stream_info, chunks),
};

static const field stats_stream_fields[] = {
    DBL(aural_stats_stream, audio_s),
    DBL(aural_stats_stream, compute_s),
    DBL(aural_stats_stream, latency_ms_p50),
    DBL(aural_stats_stream, latency_ms_p99),
    U64(aural_stats_stream, overruns),
    U64_OPT(aural_stats_stream, rounds),
};

static const field subscriber_fields[] = {
    U32(aural_stats_subscriber, client, 1, UINT32_MAX),
    U32(aural_stats_subscriber, subscription, 1, UINT32_MAX),
    NAME_NULL(aural_stats_subscriber, stream),
    BOOL(aural_stats_subscriber, all),
    U64(aural_stats_subscriber, queue_bytes),
    U64(aural_stats_subscriber, chunks_sent),
    U64(aural_stats_subscriber, chunks_dropped),
};

static const field stats_reply_fields[] = {
    DBL(aural_msg_stats_reply, uptime_s),
    U32(aural_msg_stats_reply, clients, 0, UINT32_MAX),
    U32(aural_msg_stats_reply, workers, 0, UINT32_MAX),
    U64(aural_msg_stats_reply, message_bytes),
    U64_OPT(aural_msg_stats_reply, heap_bytes),
    U32(aural_msg_stats_reply, streams_total, 0, UINT32_MAX),
    U32(aural_msg_stats_reply, subscribers_total, 0, UINT32_MAX),
};

static const field stats_reply_tail_fields[] = {
    U32_OPT(aural_msg_stats_reply, next_streams_before),
    U32_OPT(aural_msg_stats_reply, next_clients_before),
};

/* Which list a writer has open. */
enum {
  LIST_NONE,
  LIST_STREAMS,
  LIST_SUBSCRIBERS,
  LIST_SEGMENTS, /* WORDS: the finals, no segment open */
  LIST_SEGMENT,  /* ... one segment open inside them */
  LIST_PARTIAL,
};

/* Starts a message whose object is written entry by entry; when even the
 * header does not fit, the writer starts in overflow. */
static void writer_begin(aural_msg_writer *mw, uint8_t *out, size_t out_cap,
                         uint8_t type) {
  memset(mw, 0, sizeof *mw);
  mw->out = out;
  mw->type = type;
  if (!aural__start_json(&mw->w, out, out_cap)) mw->w.overflow = true;
  aural_jw_begin_object(&mw->w);
}

static size_t writer_end(aural_msg_writer *mw) {
  aural_jw_end_object(&mw->w);
  if (mw->w.buf == NULL) return 0;
  return aural__finish_json(mw->out, &mw->w, mw->type, mw->stream_id);
}

/* Opens the named list, closing the one before it. */
static void writer_list(aural_msg_writer *mw, uint8_t list, const char *key) {
  if (mw->list == list) return;
  if (mw->list != LIST_NONE) aural_jw_end_array(&mw->w);
  mw->list = list;
  aural_jw_key(&mw->w, key);
  aural_jw_begin_array(&mw->w);
}

static void add_entry(aural_msg_writer *mw, const field *f, size_t n,
                      const void *e) {
  aural_jw_begin_object(&mw->w);
  put_fields(&mw->w, f, n, e);
  aural_jw_end_object(&mw->w);
}

void aural_proto_streams_begin(aural_msg_writer *mw, uint8_t *out,
                               size_t out_cap) {
  writer_begin(mw, out, out_cap, AURAL_MSG_STREAMS);
  writer_list(mw, LIST_STREAMS, "streams");
}

void aural_proto_streams_add(aural_msg_writer *mw,
                             const aural_msg_stream_info *e) {
  add_entry(mw, stream_info_fields, N_FIELDS(stream_info_fields), e);
}

size_t aural_proto_streams_end(aural_msg_writer *mw) {
  aural_jw_end_array(&mw->w);
  return writer_end(mw);
}

void aural_proto_stats_reply_begin(aural_msg_writer *mw, uint8_t *out,
                                   size_t out_cap,
                                   const aural_msg_stats_reply *m) {
  writer_begin(mw, out, out_cap, AURAL_MSG_STATS_REPLY);
  put_fields(&mw->w, stats_reply_fields, N_FIELDS(stats_reply_fields), m);
  writer_list(mw, LIST_STREAMS, "streams");
}

void aural_proto_stats_reply_add_stream(aural_msg_writer *mw,
                                        const aural_stats_stream *e) {
  aural_jw_begin_object(&mw->w);
  put_fields(&mw->w, stream_info_fields, N_FIELDS(stream_info_fields),
             &e->info);
  put_fields(&mw->w, stats_stream_fields, N_FIELDS(stats_stream_fields), e);
  aural_jw_end_object(&mw->w);
}

void aural_proto_stats_reply_add_subscriber(aural_msg_writer *mw,
                                            const aural_stats_subscriber *e) {
  writer_list(mw, LIST_SUBSCRIBERS, "subscribers");
  aural_stats_subscriber c = *e;
  if (c.all) c.stream[0] = '\0';
  add_entry(mw, subscriber_fields, N_FIELDS(subscriber_fields), &c);
}

size_t aural_proto_stats_reply_end(aural_msg_writer *mw,
                                   const aural_msg_stats_reply *m) {
  writer_list(mw, LIST_SUBSCRIBERS, "subscribers");
  aural_jw_end_array(&mw->w);
  put_fields(&mw->w, stats_reply_tail_fields,
             N_FIELDS(stats_reply_tail_fields), m);
  return writer_end(mw);
}

/* The next element of a list as an object of table f (and f2, when not
 * NULL, over the same struct): 1, 0 at the end, or a refusal naming
 * 'what: "key[i].field"'. */
static int next_entry(aural_json_list *l, const char *what, const char *key,
                      const field *f, size_t n, void *e, size_t e_size,
                      const field *f2, size_t n2, void *e2, char *why,
                      size_t why_len) {
  aural_json item;
  char prefix[48], detail[128];
  uint32_t i = l->index;
  snprintf(prefix, sizeof prefix, "%s[%u].", key, i);
  memset(e, 0, e_size);
  int rc = aural_json_list_next(l, &item, detail, sizeof detail);
  if (rc == 1 && item.tokens[0].kind != AURAL_JSON_OBJECT) {
    aural__set_why(why, why_len, "%s: \"%s[%u]\" must be an object", what,
                   key, i);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  if (rc < 0)
    aural__set_why(why, why_len, "%s: \"%s\": %s", what, key, detail);
  if (rc != 1) return rc;
  rc = get_fields(&item, 0, f, n, e, what, prefix, why, why_len);
  if (rc == 0 && f2 != NULL)
    rc = get_fields(&item, 0, f2, n2, e2, what, prefix, why, why_len);
  return rc == 0 ? 1 : rc;
}

int aural_proto_streams_next(aural_json_list *streams, aural_msg_stream_info *e,
                             char *why, size_t why_len) {
  return next_entry(streams, "streams", "streams", stream_info_fields,
                    N_FIELDS(stream_info_fields), e, sizeof *e, NULL, 0, NULL,
                    why, why_len);
}

int aural_proto_stats_stream_next(aural_json_list *streams,
                                  aural_stats_stream *e, char *why,
                                  size_t why_len) {
  memset(e, 0, sizeof *e);
  return next_entry(streams, "stats_reply", "streams", stream_info_fields,
                    N_FIELDS(stream_info_fields), &e->info, sizeof e->info,
                    stats_stream_fields, N_FIELDS(stats_stream_fields), e,
                    why, why_len);
}

int aural_proto_stats_subscriber_next(aural_json_list *subscribers,
                                      aural_stats_subscriber *e, char *why,
                                      size_t why_len) {
  int rc = next_entry(subscribers, "stats_reply", "subscribers",
                      subscriber_fields, N_FIELDS(subscriber_fields), e,
                      sizeof *e, NULL, 0, NULL, why, why_len);
  if (rc == 1 && e->all != (e->stream[0] == '\0')) {
    aural__set_why(why, why_len,
                   "stats_reply: \"subscribers[%u].stream\" must be null "
                   "exactly when \"all\" is true",
                   subscribers->index - 1);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  return rc;
}

/* The list member key of the object: checked whole by next, left in *l at
 * its start. */
typedef int (*next_fn)(aural_json_list *l, void *e, char *why,
                       size_t why_len);

static int get_list(const aural_json *js, const char *what, const char *key,
                    next_fn next, void *scratch, aural_json_list *l,
                    char *why, size_t why_len) {
  if (aural_json_list_init(js, aural_json_get(js, 0, key), l) != 0)
    return aural__field_error(why, why_len, what, key, "must be an array");
  aural_json_list check = *l;
  int rc;
  while ((rc = next(&check, scratch, why, why_len)) == 1) continue;
  return rc;
}

static int next_stream_info(aural_json_list *l, void *e, char *why,
                            size_t why_len) {
  return aural_proto_streams_next(l, e, why, why_len);
}

static int next_stats_stream(aural_json_list *l, void *e, char *why,
                             size_t why_len) {
  return aural_proto_stats_stream_next(l, e, why, why_len);
}

static int next_subscriber(aural_json_list *l, void *e, char *why,
                           size_t why_len) {
  return aural_proto_stats_subscriber_next(l, e, why, why_len);
}

int aural_proto_decode_streams(const uint8_t *payload, size_t n,
                               aural_msg_streams *m, char *why,
                               size_t why_len) {
  aural_json js;
  aural_msg_stream_info e;
  memset(m, 0, sizeof *m);
  int rc =
      aural__parse_object(&js, payload, n, true, "streams", why, why_len);
  if (rc == 0)
    rc = get_list(&js, "streams", "streams", next_stream_info, &e,
                  &m->streams, why, why_len);
  if (rc != 0) memset(m, 0, sizeof *m);
  return rc;
}

int aural_proto_decode_stats_reply(const uint8_t *payload, size_t n,
                                   aural_msg_stats_reply *m, char *why,
                                   size_t why_len) {
  static const char what[] = "stats_reply";
  aural_json js;
  union {
    aural_stats_stream s;
    aural_stats_subscriber c;
  } e;
  memset(m, 0, sizeof *m);
  int rc = aural__parse_object(&js, payload, n, true, what, why, why_len);
  if (rc == 0)
    rc = get_fields(&js, 0, stats_reply_fields, N_FIELDS(stats_reply_fields),
                    m, what, "", why, why_len);
  if (rc == 0)
    rc = get_fields(&js, 0, stats_reply_tail_fields,
                    N_FIELDS(stats_reply_tail_fields), m, what, "", why,
                    why_len);
  if (rc == 0)
    rc = get_list(&js, what, "streams", next_stats_stream, &e, &m->streams,
                  why, why_len);
  if (rc == 0)
    rc = get_list(&js, what, "subscribers", next_subscriber, &e,
                  &m->subscribers, why, why_len);
  if (rc != 0) memset(m, 0, sizeof *m);
  return rc;
}

/* --- WORDS ---------------------------------------------------------------- */

static const field words_fields[] = {
    U64(aural_msg_words, seq),
    BOOL(aural_msg_words, final),
};

static const field word_fields[] = {
    TEXT(aural_msg_word, word),
    U64(aural_msg_word, start),
    U64(aural_msg_word, end),
    DBL(aural_msg_word, confidence),
};

/* What §4.16 asks of a word beyond its members' types; NULL when it holds. */
static const char *word_wrong(const aural_msg_word *w) {
  if (w->word[0] == '\0') return "word";
  if (w->end < w->start) return "end";
  if (!(w->confidence >= 0 && w->confidence <= 1)) return "confidence";
  return NULL;
}

void aural_proto_words_begin(aural_msg_writer *mw, uint8_t *out,
                             size_t out_cap, uint32_t stream_id,
                             const aural_msg_words *m) {
  writer_begin(mw, out, out_cap, AURAL_MSG_WORDS);
  mw->stream_id = stream_id;
  put_fields(&mw->w, words_fields, N_FIELDS(words_fields), m);
  writer_list(mw, LIST_SEGMENTS, "segments");
}

void aural_proto_words_segment(aural_msg_writer *mw) {
  if (mw->list == LIST_SEGMENT) aural_jw_end_array(&mw->w);
  else if (mw->list != LIST_SEGMENTS) mw->w.overflow = true; /* misuse */
  aural_jw_begin_array(&mw->w);
  mw->list = LIST_SEGMENT;
}

void aural_proto_words_partial(aural_msg_writer *mw) {
  if (mw->list == LIST_SEGMENT) {
    aural_jw_end_array(&mw->w);
    mw->list = LIST_SEGMENTS;
  }
  writer_list(mw, LIST_PARTIAL, "partial");
}

void aural_proto_words_add(aural_msg_writer *mw, const char *word,
                           uint64_t start, uint64_t end, double confidence) {
  aural_msg_word w = {.start = start, .end = end, .confidence = confidence};
  size_t n = word != NULL ? strlen(word) : 0;
  /* A word the decoder could not read back has no wire form. */
  if (n > AURAL_PROTO_WORD_MAX || start > INT64_MAX || end > INT64_MAX ||
      (mw->list != LIST_SEGMENT && mw->list != LIST_PARTIAL))
    mw->w.overflow = true;
  else if (n > 0) memcpy(w.word, word, n);
  if (word_wrong(&w) != NULL) mw->w.overflow = true;
  add_entry(mw, word_fields, N_FIELDS(word_fields), &w);
}

size_t aural_proto_words_end(aural_msg_writer *mw) {
  if (mw->list != LIST_PARTIAL) aural_proto_words_partial(mw);
  aural_jw_end_array(&mw->w);
  return writer_end(mw);
}

int aural_proto_words_word_next(aural_json_list *words, aural_msg_word *w,
                                char *why, size_t why_len) {
  uint32_t i = words->index;
  int rc = next_entry(words, "words", "words", word_fields,
                      N_FIELDS(word_fields), w, sizeof *w, NULL, 0, NULL, why,
                      why_len);
  const char *wrong = rc == 1 ? word_wrong(w) : NULL;
  if (wrong == NULL) return rc;
  aural__set_why(why, why_len,
                 "words: \"words[%u].%s\" must be %s", i, wrong,
                 wrong[0] == 'w'   ? "a non-empty string"
                 : wrong[0] == 'e' ? "at least \"start\""
                                   : "a number from 0 to 1");
  memset(w, 0, sizeof *w);
  return AURAL_PROTO_EBAD_PAYLOAD;
}

int aural_proto_words_segment_next(aural_json_list *segments,
                                   aural_json_list *words, char *why,
                                   size_t why_len) {
  aural_json item;
  char detail[128];
  uint32_t i = segments->index;
  memset(words, 0, sizeof *words);
  int rc = aural_json_list_next(segments, &item, detail, sizeof detail);
  if (rc < 0)
    aural__set_why(why, why_len, "words: \"segments\": %s", detail);
  if (rc != 1) return rc;
  if (aural_json_list_init(&item, 0, words) != 0) {
    aural__set_why(why, why_len, "words: \"segments[%u]\" must be an array",
                   i);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  return 1;
}

/* Every word of a list. */
static int check_words(aural_json_list words, char *why, size_t why_len) {
  aural_msg_word w;
  int rc;
  while ((rc = aural_proto_words_word_next(&words, &w, why, why_len)) == 1)
    continue;
  return rc;
}

int aural_proto_decode_words(const uint8_t *payload, size_t n,
                             aural_msg_words *m, char *why, size_t why_len) {
  static const char what[] = "words";
  aural_json js;
  memset(m, 0, sizeof *m);
  int rc = aural__parse_object(&js, payload, n, true, what, why, why_len);
  if (rc == 0)
    rc = get_fields(&js, 0, words_fields, N_FIELDS(words_fields), m, what,
                    "", why, why_len);
  if (rc == 0 &&
      aural_json_list_init(&js, aural_json_get(&js, 0, "segments"),
                           &m->segments) != 0)
    rc = aural__field_error(why, why_len, what, "segments",
                            "must be an array");
  if (rc == 0 &&
      aural_json_list_init(&js, aural_json_get(&js, 0, "partial"),
                           &m->partial) != 0)
    rc = aural__field_error(why, why_len, what, "partial",
                            "must be an array");
  aural_json_list segments = m->segments, words;
  while (rc == 0 &&
         (rc = aural_proto_words_segment_next(&segments, &words, why,
                                              why_len)) == 1)
    rc = check_words(words, why, why_len);
  if (rc == 0) rc = check_words(m->partial, why, why_len);
  if (rc != 0) memset(m, 0, sizeof *m);
  return rc;
}

/* --- requests without JSON, and PONG -------------------------------------- */

size_t aural_proto_encode_ping(uint8_t *out, size_t out_cap, const void *data,
                               size_t n) {
  if (n > AURAL_PROTO_PING_MAX) return 0;
  return aural_proto_encode_raw(out, out_cap, AURAL_MSG_PING, 0, data, n);
}

size_t aural_proto_encode_pong(uint8_t *out, size_t out_cap,
                               uint32_t stream_id, const void *data,
                               size_t n) {
  if (n > AURAL_PROTO_PING_MAX) return 0;
  return aural_proto_encode_raw(out, out_cap, AURAL_MSG_PONG, stream_id, data,
                                n);
}

size_t aural_proto_encode_list_streams(uint8_t *out, size_t out_cap) {
  return aural_proto_encode_raw(out, out_cap, AURAL_MSG_LIST_STREAMS, 0, NULL,
                                0);
}

size_t aural_proto_encode_audio_data(uint8_t *out, size_t out_cap,
                                     uint32_t stream_id, const void *samples,
                                     size_t n_bytes) {
  return aural_proto_encode_raw(out, out_cap, AURAL_MSG_AUDIO_DATA, stream_id,
                                samples, n_bytes);
}

size_t aural_proto_encode_audio_close(uint8_t *out, size_t out_cap,
                                      uint32_t stream_id) {
  return aural_proto_encode_raw(out, out_cap, AURAL_MSG_AUDIO_CLOSE,
                                stream_id, NULL, 0);
}

static int check_ping(size_t n, const char *what, char *why, size_t why_len) {
  if (n <= AURAL_PROTO_PING_MAX) return 0;
  aural__set_why(why, why_len, "%s: payload of %zu bytes (at most %d)", what,
                 n, AURAL_PROTO_PING_MAX);
  return AURAL_PROTO_EBAD_PAYLOAD;
}

int aural_proto_decode_ping(const uint8_t *payload, size_t n, char *why,
                            size_t why_len) {
  (void)payload;
  return check_ping(n, "ping", why, why_len);
}

int aural_proto_decode_pong(const uint8_t *payload, size_t n, char *why,
                            size_t why_len) {
  (void)payload;
  return check_ping(n, "pong", why, why_len);
}

int aural_proto_decode_audio_data(const uint8_t *payload, size_t n,
                                  uint8_t format, uint32_t channels,
                                  size_t *n_frames, char *why,
                                  size_t why_len) {
  (void)payload;
  *n_frames = 0;
  size_t bytes = format == AURAL_SAMPLE_S16   ? 2
                 : format == AURAL_SAMPLE_F32 ? 4
                                              : 0;
  if (bytes == 0 || channels < 1 || channels > 256) {
    aural__set_why(why, why_len, "audio_data: no such format or channels");
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  size_t frame_bytes = bytes * channels;
  if (n % frame_bytes != 0) {
    aural__set_why(why, why_len,
                   "AUDIO_DATA of %zu bytes is not a whole number of "
                   "%zu-byte frames",
                   n, frame_bytes);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  *n_frames = n / frame_bytes;
  return 0;
}
