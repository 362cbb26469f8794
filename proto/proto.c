/*
 * Framing, names, and the JSON requests of PROTOCOL.md §2 and §4.
 */
#include <limits.h>
#include <string.h>

#include "aural/proto.h"
#include "internal.h"

/* --- names ---------------------------------------------------------------- */

/* The wire value of a protocol code given as a code or as a wire value;
 * 0 when it is neither. */
static int wire_code(int code) {
  if (code >= 1 && code <= 255) return code;
  if (code < -AURAL_PROTO_ERROR_BASE && code >= -AURAL_PROTO_ERROR_BASE - 255)
    return -code - AURAL_PROTO_ERROR_BASE;
  return 0;
}

int aural_proto_error_wire(int code) { return wire_code(code); }

int aural_proto_error_from_wire(uint32_t wire) {
  if (wire == 0 || wire > 255) return AURAL_PROTO_EINTERNAL;
  return -AURAL_PROTO_ERROR_BASE - (int)wire;
}

const char *aural_msg_type_name(int type) {
  switch (type) {
#define AURAL__MSG_CASE(name, value)                                          \
  case value:                                                                 \
    return #name;
    AURAL_MSG_TYPE_MAP(AURAL__MSG_CASE)
#undef AURAL__MSG_CASE
  default:
    return NULL;
  }
}

const char *aural_proto_error_name(int code) {
  switch (wire_code(code)) {
#define AURAL__PERR_CASE(name, value, desc)                                   \
  case value:                                                                 \
    return #name;
    AURAL_PROTO_ERROR_MAP(AURAL__PERR_CASE)
#undef AURAL__PERR_CASE
  default:
    return NULL;
  }
}

const char *aural_proto_strerror(int code) {
  switch (wire_code(code)) {
#define AURAL__PERR_DESC(name, value, desc)                                   \
  case value:                                                                 \
    return desc;
    AURAL_PROTO_ERROR_MAP(AURAL__PERR_DESC)
#undef AURAL__PERR_DESC
  default:
    return "unknown error";
  }
}

const char *aural_dtype_name(int dtype) {
  switch (dtype) {
  case AURAL_DTYPE_F32:
    return "f32";
  case AURAL_DTYPE_F16:
    return "f16";
  default:
    return NULL;
  }
}

const char *aural_sample_format_name(int format) {
  switch (format) {
  case AURAL_SAMPLE_S16:
    return "s16";
  case AURAL_SAMPLE_F32:
    return "f32";
  default:
    return NULL;
  }
}

const char *aural_output_name(uint32_t bit) {
  switch (bit) {
  case AURAL_OUT_EMBEDDINGS:
    return "embeddings";
  case AURAL_OUT_LOGITS:
    return "logits";
  case AURAL_OUT_TEXT:
    return "text";
  case AURAL_OUT_WORDS:
    return "words";
  default:
    return NULL;
  }
}

bool aural_proto_valid_name(const char *s) {
  if (s == NULL) return false;
  size_t n = 0;
  for (; s[n] != '\0'; n++) {
    if (n >= AURAL_PROTO_NAME_MAX) return false;
    unsigned char c = (unsigned char)s[n];
    if (c < 0x21 || c > 0x7E || c == '/' || c == '\\') return false;
  }
  return n >= 1;
}

/* --- framing -------------------------------------------------------------- */

void aural_proto_put_header(uint8_t out[AURAL_PROTO_HEADER_BYTES],
                            const aural_msg_header *h) {
  aural_put_u32(out, AURAL_PROTO_MAGIC);
  out[4] = h->version;
  out[5] = h->type;
  aural_put_u16(out + 6, h->flags);
  aural_put_u32(out + 8, h->stream_id);
  aural_put_u32(out + 12, h->payload_bytes);
}

int aural_proto_decode_header(const uint8_t *buf, size_t len,
                              uint32_t max_payload, aural_msg_header *h) {
  if (buf == NULL || len < AURAL_PROTO_HEADER_BYTES) return AURAL_PROTO_MORE;
  h->version = buf[4];
  h->type = buf[5];
  h->flags = aural_get_u16(buf + 6);
  h->stream_id = aural_get_u32(buf + 8);
  h->payload_bytes = aural_get_u32(buf + 12);
  if (aural_get_u32(buf) != AURAL_PROTO_MAGIC) return AURAL_PROTO_EFRAMING;
  if (h->version != AURAL_PROTO_VERSION) return AURAL_PROTO_EVERSION;
  if (aural_msg_type_name(h->type) == NULL) return AURAL_PROTO_EUNKNOWN_TYPE;
  if (h->payload_bytes > max_payload) return AURAL_PROTO_ETOO_LARGE;
  return 0;
}

/* --- request decoders ----------------------------------------------------- */

/* The payload parsed, its root checked to be an object; on failure why
 * says so after "what: ". */
int aural__parse_object(aural_json *js, const uint8_t *payload, size_t n,
                        bool lists, const char *what, char *why,
                        size_t why_len) {
  char detail[96];
  int rc = lists ? aural_json_parse_lists(js, (const char *)payload, n,
                                          detail, sizeof detail)
                 : aural_json_parse(js, (const char *)payload, n, detail,
                                    sizeof detail);
  if (rc != 0) {
    aural__set_why(why, why_len, "%s: malformed JSON: %s", what, detail);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  if (js->tokens[0].kind != AURAL_JSON_OBJECT) {
    aural__set_why(why, why_len, "%s: the payload must be a JSON object",
                   what);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  return 0;
}

int aural__field_error(char *why, size_t why_len, const char *what,
                       const char *field, const char *must) {
  aural__set_why(why, why_len, "%s: \"%s\" %s", what, field, must);
  return AURAL_PROTO_EBAD_PAYLOAD;
}

/* A stream name member: absent leaves out untouched and returns 0. */
static int get_name(const aural_json *js, const char *key, char *out,
                    const char *what, char *why, size_t why_len) {
  int t = aural_json_get(js, 0, key);
  if (t < 0) return 0;
  char name[AURAL_PROTO_NAME_MAX + 1];
  if (aural_json_string(js, t, name, sizeof name) < 0 ||
      !aural_proto_valid_name(name))
    return aural__field_error(why, why_len, what, key,
                       "must be 1 to 64 bytes of printable ASCII other "
                       "than '/' and '\\'");
  memcpy(out, name, sizeof name);
  return 0;
}

/* The optional "vocabulary" (an array of words) and "boost" members. */
static int get_vocabulary(const aural_json *js, aural_msg_vocabulary *v,
                          const char *what, char *why, size_t why_len) {
  static const char must[] =
      "must be an array of 1 to 64 words, each 1 to 64 bytes without "
      "spaces, commas or control characters";
  int arr = aural_json_get(js, 0, "vocabulary");
  if (arr >= 0) {
    const aural_json_token *t = aural_json_token_at(js, arr);
    if (t->kind != AURAL_JSON_ARRAY || t->n_items == 0 ||
        t->n_items > AURAL_PROTO_VOCAB_MAX)
      return aural__field_error(why, why_len, what, "vocabulary", must);
    for (uint32_t i = 0; i < t->n_items; i++) {
      char *w = v->words[i];
      int len = aural_json_string(js, aural_json_item(js, arr, i), w,
                                  sizeof v->words[i]);
      bool ok = len > 0;
      /* No C0 or C1 control character (U+0080..U+009F is 0xc2 0x80..0x9f:
       * a terminal may act on U+009B as on ESC [). */
      for (int k = 0; ok && k < len; k++)
        ok = (uint8_t)w[k] > ' ' && w[k] != 0x7f && w[k] != ',' &&
             !((uint8_t)w[k] == 0xc2 && (uint8_t)w[k + 1] < 0xa0);
      if (!ok) {
        memset(v, 0, sizeof *v);
        return aural__field_error(why, why_len, what, "vocabulary", must);
      }
    }
    v->n_words = t->n_items;
  }
  int b = aural_json_get(js, 0, "boost");
  if (b >= 0) {
    if (v->n_words == 0)
      return aural__field_error(why, why_len, what, "boost",
                                "needs a \"vocabulary\"");
    if (aural_json_double(js, b, &v->boost) != 0 || !(v->boost >= 0) ||
        v->boost > 100)
      return aural__field_error(why, why_len, what, "boost",
                                "must be a number from 0 to 100");
    v->has_boost = true;
  }
  return 0;
}

static void put_vocabulary(aural_jw *w, const aural_msg_vocabulary *v) {
  if (v->n_words == 0) return;
  aural_jw_key(w, "vocabulary");
  aural_jw_begin_array(w);
  for (uint32_t i = 0; i < v->n_words && i < AURAL_PROTO_VOCAB_MAX; i++)
    aural__put_field(w, v->words[i], sizeof v->words[i]);
  aural_jw_end_array(w);
  if (v->has_boost) {
    aural_jw_key(w, "boost");
    aural_jw_double(w, v->boost);
  }
}

int aural_proto_decode_hello(const uint8_t *payload, size_t n,
                             aural_msg_hello *m, char *why, size_t why_len) {
  static const char what[] = "hello";
  aural_json js;
  memset(m, 0, sizeof *m);
  int rc = aural__parse_object(&js, payload, n, false, what, why, why_len);
  if (rc != 0) return rc;
  int arr = aural_json_get(&js, 0, "versions");
  if (arr < 0)
    return aural__field_error(why, why_len, what, "versions", "is missing");
  if (js.tokens[arr].kind != AURAL_JSON_ARRAY || js.tokens[arr].n_items == 0)
    return aural__field_error(why, why_len, what, "versions",
                       "must be a non-empty array of integers 1..31");
  for (uint32_t i = 0; i < js.tokens[arr].n_items; i++) {
    int64_t v;
    if (aural_json_int(&js, aural_json_item(&js, arr, i), 1, 31, &v) != 0)
      return aural__field_error(why, why_len, what, "versions",
                         "must be a non-empty array of integers 1..31");
    m->versions |= 1u << v;
  }
  int t = aural_json_get(&js, 0, "client");
  if (t >= 0 && aural_json_string(&js, t, m->client, sizeof m->client) < 0) {
    memset(m->client, 0, sizeof m->client);
    return aural__field_error(why, why_len, what, "client",
                       "must be a string of at most 64 bytes");
  }
  return 0;
}

int aural_proto_decode_subscribe(const uint8_t *payload, size_t n,
                                 aural_msg_subscribe *m, char *why,
                                 size_t why_len) {
  static const char what[] = "subscribe";
  aural_json js;
  memset(m, 0, sizeof *m);
  int rc = aural__parse_object(&js, payload, n, false, what, why, why_len);
  if (rc != 0) return rc;
  int has_stream = aural_json_get(&js, 0, "stream") >= 0;
  if ((rc = get_name(&js, "stream", m->stream, what, why, why_len)) != 0)
    return rc;
  int t = aural_json_get(&js, 0, "all");
  if (t >= 0 && aural_json_bool(&js, t, &m->all) != 0)
    return aural__field_error(why, why_len, what, "all",
                              "must be true or false");
  if (has_stream && m->all) {
    aural__set_why(why, why_len,
                   "%s: give \"stream\" or \"all\": true, not both", what);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  if (!has_stream && !m->all) {
    aural__set_why(why, why_len, "%s: \"stream\" or \"all\": true is missing",
                   what);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }

  int arr = aural_json_get(&js, 0, "outputs");
  m->outputs = arr < 0 ? AURAL_OUT_EMBEDDINGS : aural__get_outputs(&js, arr);
  if (m->outputs == 0)
    return aural__field_error(why, why_len, what, "outputs",
                              "must be a non-empty array of distinct "
                              "\"embeddings\", \"logits\", \"text\", "
                              "\"words\"");

  t = aural_json_get(&js, 0, "dtype");
  m->dtype = AURAL_DTYPE_F32;
  if (t >= 0) {
    char s[8];
    if (aural_json_string(&js, t, s, sizeof s) < 0) s[0] = '\0';
    if (strcmp(s, "f16") == 0)
      m->dtype = AURAL_DTYPE_F16;
    else if (strcmp(s, "f32") != 0)
      return aural__field_error(why, why_len, what, "dtype",
                         "must be \"f32\" or \"f16\"");
  }
  rc = get_vocabulary(&js, &m->vocabulary, what, why, why_len);
  if (rc == 0 && m->vocabulary.n_words > 0 &&
      !(m->outputs & AURAL_OUT_WORDS))
    return aural__field_error(why, why_len, what, "vocabulary",
                              "needs \"words\" among the outputs");
  return rc;
}

int aural_proto_decode_unsubscribe(const uint8_t *payload, size_t n,
                                   uint32_t *subscription, char *why,
                                   size_t why_len) {
  static const char what[] = "unsubscribe";
  aural_json js;
  *subscription = 0;
  int rc = aural__parse_object(&js, payload, n, false, what, why, why_len);
  if (rc != 0) return rc;
  int t = aural_json_get(&js, 0, "subscription");
  if (t < 0)
    return aural__field_error(why, why_len, what, "subscription", "is missing");
  int64_t v;
  if (aural_json_int(&js, t, 1, UINT32_MAX, &v) != 0)
    return aural__field_error(why, why_len, what, "subscription",
                       "must be an integer 1..4294967295");
  *subscription = (uint32_t)v;
  return 0;
}

/* A required integer member within [lo, hi]. */
static int get_uint(const aural_json *js, const char *key, int64_t lo,
                    int64_t hi, uint32_t *out, const char *what, char *why,
                    size_t why_len) {
  int t = aural_json_get(js, 0, key);
  if (t < 0) return aural__field_error(why, why_len, what, key, "is missing");
  int64_t v;
  if (aural_json_int(js, t, lo, hi, &v) != 0) {
    aural__set_why(why, why_len, "%s: \"%s\" must be an integer %lld..%lld",
                   what, key, (long long)lo, (long long)hi);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  *out = (uint32_t)v;
  return 0;
}

/* An optional integer member within [lo, hi]: absent leaves out as it is. */
static int get_optional_uint(const aural_json *js, const char *key,
                             int64_t lo, int64_t hi, uint32_t *out,
                             const char *what, char *why, size_t why_len) {
  if (aural_json_get(js, 0, key) < 0) return 0;
  return get_uint(js, key, lo, hi, out, what, why, why_len);
}

int aural_proto_decode_stats(const uint8_t *payload, size_t n,
                             aural_msg_stats *m, char *why, size_t why_len) {
  static const char what[] = "stats";
  memset(m, 0, sizeof *m);
  if (n == 0) return 0;
  aural_json js;
  int rc = aural__parse_object(&js, payload, n, false, what, why, why_len);
  if (rc == 0)
    rc = get_optional_uint(&js, "streams_before", 0, UINT32_MAX,
                           &m->streams_before, what, why, why_len);
  if (rc == 0)
    rc = get_optional_uint(&js, "clients_before", 0, UINT32_MAX,
                           &m->clients_before, what, why, why_len);
  return rc;
}

int aural_proto_decode_audio_open(const uint8_t *payload, size_t n,
                                  aural_msg_audio_open *m, char *why,
                                  size_t why_len) {
  static const char what[] = "audio_open";
  aural_json js;
  memset(m, 0, sizeof *m);
  int rc = aural__parse_object(&js, payload, n, false, what, why, why_len);
  if (rc != 0) return rc;
  if ((rc = get_name(&js, "name", m->name, what, why, why_len)) != 0 ||
      (rc = get_uint(&js, "sample_rate", 4000, 768000, &m->sample_rate, what,
                     why, why_len)) != 0 ||
      (rc = get_uint(&js, "channels", 1, 256, &m->channels, what, why,
                     why_len)) != 0)
    return rc;
  int t = aural_json_get(&js, 0, "format");
  if (t < 0)
    return aural__field_error(why, why_len, what, "format", "is missing");
  char s[8];
  if (aural_json_string(&js, t, s, sizeof s) < 0) s[0] = '\0';
  if (strcmp(s, "s16") == 0) {
    m->format = AURAL_SAMPLE_S16;
  } else if (strcmp(s, "f32") == 0) {
    m->format = AURAL_SAMPLE_F32;
  } else {
    return aural__field_error(why, why_len, what, "format",
                       "must be \"s16\" or \"f32\"");
  }
  return get_vocabulary(&js, &m->vocabulary, what, why, why_len);
}

/* --- encoders ------------------------------------------------------------- */

/* Completes a message whose JSON payload w wrote after the header room. */
size_t aural__finish_json(uint8_t *out, const aural_jw *w, uint8_t type,
                          uint32_t stream_id) {
  long n = aural_jw_finish(w);
  if (n < 0 || (unsigned long)n > UINT32_MAX) return 0;
  aural_msg_header h = {.version = AURAL_PROTO_VERSION,
                        .type = type,
                        .stream_id = stream_id,
                        .payload_bytes = (uint32_t)n};
  aural_proto_put_header(out, &h);
  return AURAL_PROTO_HEADER_BYTES + (size_t)n;
}

/* Starts a JSON payload after the header room; false when even the header
 * does not fit. */
bool aural__start_json(aural_jw *w, uint8_t *out, size_t out_cap) {
  if (out == NULL || out_cap < AURAL_PROTO_HEADER_BYTES) return false;
  aural_jw_init(w, (char *)out + AURAL_PROTO_HEADER_BYTES,
                out_cap - AURAL_PROTO_HEADER_BYTES);
  return true;
}

/* A fixed-size char field, which need not be NUL-terminated. */
void aural__put_field(aural_jw *w, const char *s, size_t size) {
  size_t n = 0;
  while (n < size && s[n] != '\0') n++;
  aural_jw_string_n(w, s, n);
}

size_t aural_proto_encode_hello(uint8_t *out, size_t out_cap,
                                const aural_msg_hello *m) {
  aural_jw w;
  if (!aural__start_json(&w, out, out_cap)) return 0;
  aural_jw_begin_object(&w);
  aural_jw_key(&w, "versions");
  aural_jw_begin_array(&w);
  for (int v = 1; v <= 31; v++)
    if (m->versions & (1u << v)) aural_jw_int(&w, v);
  aural_jw_end_array(&w);
  if (m->client[0] != '\0') {
    aural_jw_key(&w, "client");
    aural__put_field(&w, m->client, sizeof m->client);
  }
  aural_jw_end_object(&w);
  return aural__finish_json(out, &w, AURAL_MSG_HELLO, 0);
}

size_t aural_proto_encode_subscribe(uint8_t *out, size_t out_cap,
                                    const aural_msg_subscribe *m) {
  aural_jw w;
  if (!aural__start_json(&w, out, out_cap)) return 0;
  aural_jw_begin_object(&w);
  if (m->all) {
    aural_jw_key(&w, "all");
    aural_jw_bool(&w, true);
  } else {
    aural_jw_key(&w, "stream");
    aural__put_field(&w, m->stream, sizeof m->stream);
  }
  aural_jw_key(&w, "outputs");
  aural__put_outputs(&w, m->outputs);
  aural_jw_key(&w, "dtype");
  aural_jw_string(&w, m->dtype == AURAL_DTYPE_F16 ? "f16" : "f32");
  put_vocabulary(&w, &m->vocabulary);
  aural_jw_end_object(&w);
  return aural__finish_json(out, &w, AURAL_MSG_SUBSCRIBE, 0);
}

size_t aural_proto_encode_unsubscribe(uint8_t *out, size_t out_cap,
                                      uint32_t subscription) {
  aural_jw w;
  if (!aural__start_json(&w, out, out_cap)) return 0;
  aural_jw_begin_object(&w);
  aural_jw_key(&w, "subscription");
  aural_jw_uint(&w, subscription);
  aural_jw_end_object(&w);
  return aural__finish_json(out, &w, AURAL_MSG_UNSUBSCRIBE, 0);
}

size_t aural_proto_encode_audio_open(uint8_t *out, size_t out_cap,
                                     const aural_msg_audio_open *m) {
  aural_jw w;
  if (!aural__start_json(&w, out, out_cap)) return 0;
  aural_jw_begin_object(&w);
  if (m->name[0] != '\0') {
    aural_jw_key(&w, "name");
    aural__put_field(&w, m->name, sizeof m->name);
  }
  aural_jw_key(&w, "sample_rate");
  aural_jw_uint(&w, m->sample_rate);
  aural_jw_key(&w, "channels");
  aural_jw_uint(&w, m->channels);
  aural_jw_key(&w, "format");
  aural_jw_string(&w, m->format == AURAL_SAMPLE_F32 ? "f32" : "s16");
  put_vocabulary(&w, &m->vocabulary);
  aural_jw_end_object(&w);
  return aural__finish_json(out, &w, AURAL_MSG_AUDIO_OPEN, 0);
}

size_t aural_proto_encode_stats(uint8_t *out, size_t out_cap,
                                const aural_msg_stats *m) {
  if (m->streams_before == 0 && m->clients_before == 0)
    return aural_proto_encode_raw(out, out_cap, AURAL_MSG_STATS, 0, NULL, 0);
  aural_jw w;
  if (!aural__start_json(&w, out, out_cap)) return 0;
  aural_jw_begin_object(&w);
  aural_jw_key(&w, "streams_before");
  aural_jw_uint(&w, m->streams_before);
  aural_jw_key(&w, "clients_before");
  aural_jw_uint(&w, m->clients_before);
  aural_jw_end_object(&w);
  return aural__finish_json(out, &w, AURAL_MSG_STATS, 0);
}

size_t aural_proto_encode_raw(uint8_t *out, size_t out_cap, uint8_t type,
                              uint32_t stream_id, const void *payload,
                              size_t payload_bytes) {
  if (out == NULL || payload_bytes > UINT32_MAX ||
      out_cap < AURAL_PROTO_HEADER_BYTES ||
      payload_bytes > out_cap - AURAL_PROTO_HEADER_BYTES ||
      (payload == NULL && payload_bytes != 0))
    return 0;
  /* memmove: the payload may already sit in out, after the header room. */
  if (payload_bytes != 0)
    memmove(out + AURAL_PROTO_HEADER_BYTES, payload, payload_bytes);
  aural_msg_header h = {.version = AURAL_PROTO_VERSION,
                        .type = type,
                        .stream_id = stream_id,
                        .payload_bytes = (uint32_t)payload_bytes};
  aural_proto_put_header(out, &h);
  return AURAL_PROTO_HEADER_BYTES + payload_bytes;
}

size_t aural_proto_encode_error(uint8_t *out, size_t out_cap,
                                uint32_t stream_id, int code,
                                const char *message, bool fatal) {
  aural_jw w;
  if (!aural__start_json(&w, out, out_cap)) return 0;
  int wire = wire_code(code);
  const char *name = aural_proto_error_name(wire);
  aural_jw_begin_object(&w);
  aural_jw_key(&w, "code");
  aural_jw_int(&w, wire);
  aural_jw_key(&w, "name");
  aural_jw_string(&w, name != NULL ? name : "UNKNOWN");
  aural_jw_key(&w, "message");
  aural_jw_string(&w, message != NULL ? message : "");
  aural_jw_key(&w, "fatal");
  aural_jw_bool(&w, fatal);
  aural_jw_end_object(&w);
  return aural__finish_json(out, &w, AURAL_MSG_ERROR, stream_id);
}
