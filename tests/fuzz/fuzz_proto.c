/*
 * libFuzzer target for the wire protocol codec (proto/PROTOCOL.md): the
 * bytes are what a peer sent. The first 16 go to the header decoder; the
 * rest (the whole input when it is shorter) is the payload handed to every
 * payload decoder: the JSON reader with every accessor over every token,
 * the request decoders, every server message's decoder (lists read entry
 * by entry), the CHUNK decoder. Build and run with
 * tools/fuzz.sh.
 *
 * Beyond "no crash, no leak, no undefined behaviour", the target aborts (a
 * libFuzzer crash) when a contract breaks:
 *   - the header decoder returns only documented codes, and the fields it
 *     filled write back to the same bytes;
 *   - parsed tokens nest consistently (next, n_items, offsets in bounds),
 *     aural_json_get finds every member by its decoded name, and writing
 *     the tree back with aural_jw gives JSON that parses to the same tree;
 *   - a request that decodes obeys PROTOCOL.md §4's ranges, and encoding
 *     and decoding it again gives the same struct; a refusal names the
 *     request in why;
 *   - a server message that decodes encodes again to bytes that decode and
 *     encode to the same bytes; lists read back every entry they counted;
 *     a refusal names the message in why;
 *   - a CHUNK that decodes has exactly the length its header implies, its
 *     sections inside the payload, and its fixed part writes back the same;
 *   - any bytes written as a JSON string with aural_jw, or as the message
 *     of an ERROR, read back as valid JSON (and as the same bytes when they
 *     were valid UTF-8 without NUL); a raw message carries them unchanged;
 *   - f16 conversions round trip.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <aural/proto.h>

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


/* Bytes for decoded strings and written JSON: large enough for any input
 * libFuzzer is given here (-max_len=65536) with its worst-case growth. */
#define SCRATCH_BYTES (6 * 65536 + 64)
static char scratch_a[SCRATCH_BYTES], scratch_b[SCRATCH_BYTES];
static aural_json js_a, js_b;

static bool utf8_ok(const uint8_t *p, size_t n) {
  /* A second, independent check of well-formed UTF-8 (RFC 3629 table 3-7
   * style), for the reader's strings. */
  size_t i = 0;
  while (i < n) {
    uint8_t c = p[i];
    size_t k;
    uint32_t min;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      k = 2;
      min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      k = 3;
      min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      k = 4;
      min = 0x10000;
    } else {
      return false;
    }
    if (n - i < k) return false;
    uint32_t cp = c & (0x7Fu >> k);
    for (size_t j = 1; j < k; j++) {
      if ((p[i + j] & 0xC0) != 0x80) return false;
      cp = cp << 6 | (p[i + j] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += k;
  }
  return true;
}

/* --- header ------------------------------------------------------------------ */

static void check_header(const uint8_t *data, size_t size) {
  aural_msg_header h;
  int rc = aural_proto_decode_header(data, size, 1u << 20, &h);
  if (size < AURAL_PROTO_HEADER_BYTES) {
    CHECK(rc == AURAL_PROTO_MORE);
    return;
  }
  CHECK(rc == 0 || rc == AURAL_PROTO_EFRAMING || rc == AURAL_PROTO_EVERSION ||
        rc == AURAL_PROTO_EUNKNOWN_TYPE || rc == AURAL_PROTO_ETOO_LARGE);
  CHECK(rc == 0 || aural_proto_error_name(rc) != NULL);
  uint8_t back[AURAL_PROTO_HEADER_BYTES];
  aural_proto_put_header(back, &h);
  CHECK(memcmp(back + 4, data + 4, 12) == 0);
  CHECK((memcmp(back, data, 4) == 0) == (rc != AURAL_PROTO_EFRAMING));
  if (rc == 0) {
    CHECK(h.version == AURAL_PROTO_VERSION);
    CHECK(aural_msg_type_name(h.type) != NULL);
    CHECK(h.payload_bytes <= 1u << 20);
  }
}

/* --- JSON -------------------------------------------------------------------- */

/* Checks the token at t and its children; returns the index after them. */
static uint32_t check_tree(const aural_json *js, uint32_t t) {
  CHECK(t < js->n_tokens);
  const aural_json_token *k = &js->tokens[t];
  CHECK((uint64_t)k->start + k->len <= js->text_len);
  CHECK(k->next > t && k->next <= js->n_tokens);
  CHECK(k->kind >= AURAL_JSON_OBJECT && k->kind <= AURAL_JSON_NULL);
  if (k->kind != AURAL_JSON_OBJECT && k->kind != AURAL_JSON_ARRAY) {
    CHECK(k->next == t + 1 && k->n_items == 0);
    return t + 1;
  }
  uint32_t c = t + 1;
  for (uint32_t i = 0; i < k->n_items; i++) {
    if (k->kind == AURAL_JSON_OBJECT) {
      CHECK(js->tokens[c].kind == AURAL_JSON_STRING);
      CHECK(check_tree(js, c) == c + 1);
      c++;
    }
    CHECK(aural_json_item(js, (int)t, i) ==
          (k->kind == AURAL_JSON_ARRAY ? (int)c : -1));
    c = check_tree(js, c);
  }
  CHECK(aural_json_item(js, (int)t, k->n_items) == -1);
  CHECK(c == k->next);
  return c;
}

/* Every accessor over every token; members found by their decoded names. */
static void check_accessors(const aural_json *js) {
  for (uint32_t t = 0; t < js->n_tokens; t++) {
    const aural_json_token *k = &js->tokens[t];
    int64_t v;
    double d;
    bool b;
    int rs = aural_json_string(js, (int)t, scratch_a, sizeof scratch_a);
    int ri = aural_json_int(js, (int)t, INT64_MIN, INT64_MAX, &v);
    int rd = aural_json_double(js, (int)t, &d);
    int rb = aural_json_bool(js, (int)t, &b);
    CHECK(rs == -1 || k->kind == AURAL_JSON_STRING);
    CHECK(ri == -1 || k->kind == AURAL_JSON_NUMBER);
    CHECK(rd == -1 || (k->kind == AURAL_JSON_NUMBER && isfinite(d)));
    CHECK(rb == -1 || k->kind == AURAL_JSON_TRUE ||
          k->kind == AURAL_JSON_FALSE);
    if (k->kind == AURAL_JSON_STRING && rs >= 0) {
      CHECK((size_t)rs <= k->len && strlen(scratch_a) == (size_t)rs);
      CHECK(utf8_ok((const uint8_t *)scratch_a, (size_t)rs));
      if (rs > 0)
        CHECK(aural_json_string(js, (int)t, scratch_b, (size_t)rs) == -1);
    }
    if (ri == 0) {
      CHECK(rd == 0);
      CHECK(aural_json_int(js, (int)t, v, v, NULL) == 0);
      if (v != INT64_MAX) CHECK(aural_json_int(js, (int)t, v + 1, INT64_MAX,
                                               NULL) == -1);
    }
    if (k->kind == AURAL_JSON_OBJECT) {
      uint32_t key = t + 1;
      for (uint32_t i = 0; i < k->n_items; i++) {
        if (aural_json_string(js, (int)key, scratch_a, sizeof scratch_a) >= 0)
          CHECK(aural_json_get(js, (int)t, scratch_a) == (int)key + 1);
        key = js->tokens[key + 1].next;
      }
    } else {
      CHECK(aural_json_get(js, (int)t, "") == -1);
    }
  }
}

/* Writes the value at t back as JSON; false when it cannot be (a string
 * with \u0000, a number out of double range). */
static bool rewrite(const aural_json *js, uint32_t t, aural_jw *w) {
  const aural_json_token *k = &js->tokens[t];
  int64_t v;
  double d;
  switch (k->kind) {
  case AURAL_JSON_OBJECT:
  case AURAL_JSON_ARRAY: {
    bool object = k->kind == AURAL_JSON_OBJECT;
    if (object)
      aural_jw_begin_object(w);
    else
      aural_jw_begin_array(w);
    uint32_t c = t + 1;
    for (uint32_t i = 0; i < k->n_items; i++) {
      if (object) {
        if (aural_json_string(js, (int)c, scratch_a, sizeof scratch_a) < 0)
          return false;
        aural_jw_key(w, scratch_a);
        c++;
      }
      if (!rewrite(js, c, w)) return false;
      c = js->tokens[c].next;
    }
    if (object)
      aural_jw_end_object(w);
    else
      aural_jw_end_array(w);
    return true;
  }
  case AURAL_JSON_STRING: {
    int n = aural_json_string(js, (int)t, scratch_a, sizeof scratch_a);
    if (n < 0) return false;
    aural_jw_string_n(w, scratch_a, (size_t)n);
    return true;
  }
  case AURAL_JSON_NUMBER:
    if (aural_json_int(js, (int)t, INT64_MIN, INT64_MAX, &v) == 0) {
      aural_jw_int(w, v);
      return true;
    }
    if (aural_json_double(js, (int)t, &d) != 0) return false;
    aural_jw_double(w, d);
    return true;
  case AURAL_JSON_TRUE:
  case AURAL_JSON_FALSE:
    aural_jw_bool(w, k->kind == AURAL_JSON_TRUE);
    return true;
  default:
    aural_jw_null(w);
    return true;
  }
}

/* The two parsed trees hold the same values. */
static void check_same_tree(const aural_json *a, const aural_json *b) {
  CHECK(a->n_tokens == b->n_tokens);
  for (uint32_t t = 0; t < a->n_tokens; t++) {
    const aural_json_token *x = &a->tokens[t], *y = &b->tokens[t];
    CHECK(x->kind == y->kind && x->n_items == y->n_items && x->next == y->next);
    if (x->kind == AURAL_JSON_STRING) {
      int n = aural_json_string(a, (int)t, scratch_a, sizeof scratch_a);
      CHECK(n >= 0);
      CHECK(aural_json_string(b, (int)t, scratch_b, sizeof scratch_b) == n);
      CHECK(memcmp(scratch_a, scratch_b, (size_t)n) == 0);
    } else if (x->kind == AURAL_JSON_NUMBER) {
      int64_t i, j;
      double d, e;
      if (aural_json_int(a, (int)t, INT64_MIN, INT64_MAX, &i) == 0) {
        CHECK(aural_json_int(b, (int)t, INT64_MIN, INT64_MAX, &j) == 0);
        CHECK(i == j);
      } else {
        CHECK(aural_json_double(a, (int)t, &d) == 0);
        CHECK(aural_json_double(b, (int)t, &e) == 0);
        CHECK(memcmp(&d, &e, sizeof d) == 0);
      }
    }
  }
}

static void check_json(const uint8_t *p, size_t n) {
  char why[128];
  why[0] = '\0';
  if (aural_json_parse(&js_a, (const char *)p, n, why, sizeof why) != 0) {
    CHECK(js_a.n_tokens == 0);
    CHECK(strncmp(why, "byte ", 5) == 0);
    return;
  }
  CHECK(js_a.n_tokens >= 1 && js_a.n_tokens <= AURAL_PROTO_JSON_TOKENS);
  CHECK(check_tree(&js_a, 0) == js_a.n_tokens);
  check_accessors(&js_a);

  static char out[SCRATCH_BYTES];
  aural_jw w;
  aural_jw_init(&w, out, sizeof out);
  if (!rewrite(&js_a, 0, &w)) return;
  long len = aural_jw_finish(&w);
  CHECK(len > 0);
  if (aural_json_parse(&js_b, out, (size_t)len, why, sizeof why) != 0) {
    fprintf(stderr, "rewritten JSON refused: %s\n%.*s\n", why, (int)len, out);
    abort();
  }
  check_same_tree(&js_a, &js_b);
}

/* Any bytes written as a string are valid JSON, and the same bytes when
 * they are valid UTF-8 without NUL. */
static void check_writer(const uint8_t *p, size_t n) {
  static char out[SCRATCH_BYTES];
  aural_jw w;
  aural_jw_init(&w, out, sizeof out);
  aural_jw_begin_array(&w);
  aural_jw_string_n(&w, (const char *)p, n);
  aural_jw_end_array(&w);
  long len = aural_jw_finish(&w);
  CHECK(len >= 4);
  CHECK(aural_json_parse(&js_b, out, (size_t)len, NULL, 0) == 0);
  int s = aural_json_string(&js_b, 1, scratch_b, sizeof scratch_b);
  if (memchr(p, 0, n) == NULL && utf8_ok(p, n)) {
    CHECK(s >= 0 && (size_t)s == n && memcmp(scratch_b, p, n) == 0);
  }
  /* A short buffer overflows without writing past it. */
  if (len > 1) {
    aural_jw_init(&w, out, (size_t)len - 1);
    aural_jw_begin_array(&w);
    aural_jw_string_n(&w, (const char *)p, n);
    aural_jw_end_array(&w);
    CHECK(aural_jw_finish(&w) == -1);
  }
}

/* The payload as PING data and as an ERROR message's text: the header is
 * right, the bytes come back, and the ERROR is JSON whose message is the
 * text when that was valid UTF-8 (up to its first NUL). */
static void check_raw_and_error(const uint8_t *p, size_t n) {
  static uint8_t msg[SCRATCH_BYTES];
  aural_msg_header h;
  size_t m = aural_proto_encode_raw(msg, sizeof msg, AURAL_MSG_PING, 1, p, n);
  CHECK(m == AURAL_PROTO_HEADER_BYTES + n);
  CHECK(aural_proto_decode_header(msg, m, UINT32_MAX, &h) == 0);
  CHECK(h.type == AURAL_MSG_PING && h.stream_id == 1 && h.payload_bytes == n);
  CHECK(n == 0 || memcmp(msg + AURAL_PROTO_HEADER_BYTES, p, n) == 0);
  CHECK(aural_proto_encode_raw(msg, m - 1, AURAL_MSG_PING, 1, p, n) == 0);

  size_t text_len = n < 4096 ? n : 4096;
  char *text = scratch_b;
  memcpy(text, p, text_len);
  text[text_len] = '\0';
  text_len = strlen(text);
  /* A negative first byte stands for a code, a positive one for a wire
   * value given as it is. */
  int v = n > 0 ? (int)(int8_t)p[0] : 0;
  int code = v < 0 ? aural_proto_error_from_wire((uint32_t)-v) : v;
  m = aural_proto_encode_error(msg, sizeof msg, 2, code, text, n % 2);
  CHECK(m > AURAL_PROTO_HEADER_BYTES);
  CHECK(aural_proto_decode_header(msg, m, UINT32_MAX, &h) == 0);
  CHECK(h.type == AURAL_MSG_ERROR && h.stream_id == 2);
  CHECK(aural_json_parse(&js_b, (const char *)msg + AURAL_PROTO_HEADER_BYTES,
                         h.payload_bytes, NULL, 0) == 0);
  int64_t wire;
  bool fatal;
  CHECK(aural_json_int(&js_b, aural_json_get(&js_b, 0, "code"), 0, 128,
                       &wire) == 0);
  CHECK(wire == (v < 0 ? -v : v));
  CHECK(aural_json_bool(&js_b, aural_json_get(&js_b, 0, "fatal"), &fatal) ==
        0 && fatal == (n % 2 == 1));
  int got = aural_json_string(&js_b, aural_json_get(&js_b, 0, "message"),
                              scratch_a, sizeof scratch_a);
  CHECK(got >= 0);
  if (utf8_ok((const uint8_t *)text, text_len))
    CHECK((size_t)got == text_len && memcmp(scratch_a, text, text_len) == 0);
}

/* --- requests ---------------------------------------------------------------- */

static void check_why(const char *why, const char *what) {
  CHECK(strlen(why) < 256);
  CHECK(strncmp(why, what, strlen(what)) == 0);
}

/* Decodes the message at b (n bytes) as the given type's payload. */
static const uint8_t *reencoded(const uint8_t *b, size_t n, int type,
                                size_t *pn) {
  aural_msg_header h;
  CHECK(n > AURAL_PROTO_HEADER_BYTES);
  CHECK(aural_proto_decode_header(b, n, UINT32_MAX, &h) == 0);
  CHECK(h.type == type && h.payload_bytes == n - AURAL_PROTO_HEADER_BYTES);
  *pn = h.payload_bytes;
  return b + AURAL_PROTO_HEADER_BYTES;
}

static void check_requests(const uint8_t *p, size_t n) {
  static uint8_t msg[1024];
  char why[256];
  size_t pn;
  const uint8_t *q;

  aural_msg_hello hello, hello2;
  why[0] = '\0';
  if (aural_proto_decode_hello(p, n, &hello, why, sizeof why) == 0) {
    CHECK(hello.versions != 0 && (hello.versions & 1u) == 0);
    CHECK(strlen(hello.client) <= AURAL_PROTO_NAME_MAX);
    q = reencoded(msg, aural_proto_encode_hello(msg, sizeof msg, &hello),
                  AURAL_MSG_HELLO, &pn);
    CHECK(aural_proto_decode_hello(q, pn, &hello2, why, sizeof why) == 0);
    CHECK(hello2.versions == hello.versions);
    CHECK(strcmp(hello2.client, hello.client) == 0);
  } else {
    check_why(why, "hello: ");
  }

  aural_msg_subscribe sub, sub2;
  why[0] = '\0';
  if (aural_proto_decode_subscribe(p, n, &sub, why, sizeof why) == 0) {
    CHECK(sub.outputs != 0 && (sub.outputs & ~AURAL_OUT_ANY) == 0);
    CHECK(sub.dtype == AURAL_DTYPE_F32 || sub.dtype == AURAL_DTYPE_F16);
    CHECK(sub.all ? sub.stream[0] == '\0' : aural_proto_valid_name(sub.stream));
    q = reencoded(msg, aural_proto_encode_subscribe(msg, sizeof msg, &sub),
                  AURAL_MSG_SUBSCRIBE, &pn);
    CHECK(aural_proto_decode_subscribe(q, pn, &sub2, why, sizeof why) == 0);
    CHECK(sub2.all == sub.all && sub2.outputs == sub.outputs &&
          sub2.dtype == sub.dtype && strcmp(sub2.stream, sub.stream) == 0);
  } else {
    check_why(why, "subscribe: ");
  }

  uint32_t id, id2;
  why[0] = '\0';
  if (aural_proto_decode_unsubscribe(p, n, &id, why, sizeof why) == 0) {
    CHECK(id >= 1);
    q = reencoded(msg, aural_proto_encode_unsubscribe(msg, sizeof msg, id),
                  AURAL_MSG_UNSUBSCRIBE, &pn);
    CHECK(aural_proto_decode_unsubscribe(q, pn, &id2, why, sizeof why) == 0);
    CHECK(id2 == id);
  } else {
    check_why(why, "unsubscribe: ");
  }

  aural_msg_audio_open open, open2;
  why[0] = '\0';
  if (aural_proto_decode_audio_open(p, n, &open, why, sizeof why) == 0) {
    CHECK(open.sample_rate >= 4000 && open.sample_rate <= 768000);
    CHECK(open.channels >= 1 && open.channels <= 256);
    CHECK(open.format == AURAL_SAMPLE_S16 || open.format == AURAL_SAMPLE_F32);
    CHECK(open.name[0] == '\0' || aural_proto_valid_name(open.name));
    q = reencoded(msg, aural_proto_encode_audio_open(msg, sizeof msg, &open),
                  AURAL_MSG_AUDIO_OPEN, &pn);
    CHECK(aural_proto_decode_audio_open(q, pn, &open2, why, sizeof why) == 0);
    CHECK(open2.sample_rate == open.sample_rate &&
          open2.channels == open.channels && open2.format == open.format &&
          strcmp(open2.name, open.name) == 0);
  } else {
    check_why(why, "audio_open: ");
  }
}

/* --- server messages ------------------------------------------------------- */

/* Encodes a decoded struct again, decodes that, and encodes the result: the
 * two encodings must be the same bytes. */
#define ROUND_TRIP(T, what, decode, encode_args)                              \
  do {                                                                        \
    T m_, m2_;                                                                \
    why[0] = '\0';                                                            \
    if (decode(p, n, &m_, why, sizeof why) != 0) {                            \
      check_why(why, what);                                                   \
      break;                                                                  \
    }                                                                         \
    T *m = &m_;                                                               \
    size_t k = encode_args;                                                   \
    CHECK(k > AURAL_PROTO_HEADER_BYTES && k <= sizeof msg);                   \
    memcpy(msg2, msg, k);                                                     \
    CHECK(decode(msg2 + AURAL_PROTO_HEADER_BYTES,                             \
                 k - AURAL_PROTO_HEADER_BYTES, &m2_, why, sizeof why) == 0);  \
    m = &m2_;                                                                 \
    CHECK((encode_args) == k && memcmp(msg, msg2, k) == 0);                   \
  } while (0)

static uint8_t msg[1 << 20], msg2[1 << 20];

static void check_simple_server_messages(const uint8_t *p, size_t n) {
  char why[256];
  ROUND_TRIP(aural_msg_subscribed, "subscribed: ", aural_proto_decode_subscribed,
             aural_proto_encode_subscribed(msg, sizeof msg, m));
  ROUND_TRIP(aural_msg_stream_started, "stream_started: ",
             aural_proto_decode_stream_started,
             aural_proto_encode_stream_started(msg, sizeof msg, 1, m));
  ROUND_TRIP(aural_msg_stream_ended, "stream_ended: ",
             aural_proto_decode_stream_ended,
             aural_proto_encode_stream_ended(msg, sizeof msg, 1, m));
  ROUND_TRIP(aural_msg_gap, "gap: ", aural_proto_decode_gap,
             aural_proto_encode_gap(msg, sizeof msg, 1, m));
  ROUND_TRIP(aural_msg_audio_opened, "audio_opened: ",
             aural_proto_decode_audio_opened,
             aural_proto_encode_audio_opened(msg, sizeof msg, m));
  ROUND_TRIP(aural_msg_audio_closed, "audio_closed: ",
             aural_proto_decode_audio_closed,
             aural_proto_encode_audio_closed(msg, sizeof msg, 1, m));
  ROUND_TRIP(aural_msg_error, "error: ", aural_proto_decode_error,
             aural_proto_encode_error(msg, sizeof msg, 0, (int)m->code,
                                      m->message, m->fatal));
  uint32_t id;
  why[0] = '\0';
  if (aural_proto_decode_unsubscribed(p, n, &id, why, sizeof why) == 0)
    CHECK(id >= 1);
  else
    check_why(why, "unsubscribed: ");
}

/* A WELCOME: its vocabulary reads back token by token, and written again
 * with those tokens it decodes to the same. */
static void check_welcome(const uint8_t *p, size_t n) {
  static const char *vocab[65536];
  char why[256];
  aural_msg_welcome w, w2;
  why[0] = '\0';
  if (aural_proto_decode_welcome(p, n, &w, why, sizeof why) != 0) {
    check_why(why, "welcome: ");
    return;
  }
  CHECK(w.model.vocab.n_items == w.model.vocab_size);
  size_t at = 0;
  aural_json_list l = w.model.vocab;
  for (uint32_t i = 0; i < w.model.vocab_size; i++) {
    CHECK(aural_proto_vocab_next(&l, scratch_a + at, sizeof scratch_a - at) ==
          1);
    vocab[i] = scratch_a + at;
    at += strlen(scratch_a + at) + 1;
  }
  CHECK(aural_proto_vocab_next(&l, scratch_a, sizeof scratch_a) == 0);
  size_t k = aural_proto_encode_welcome(msg, sizeof msg, &w, vocab);
  CHECK(k > AURAL_PROTO_HEADER_BYTES);
  CHECK(aural_proto_decode_welcome(msg + AURAL_PROTO_HEADER_BYTES,
                                   k - AURAL_PROTO_HEADER_BYTES, &w2, why,
                                   sizeof why) == 0);
  CHECK(w2.model.vocab_size == w.model.vocab_size && w2.client == w.client &&
        strcmp(w2.server, w.server) == 0);
}

/* STREAMS and STATS_REPLY: every entry reads back, and the lists written
 * again from the entries decode to the same number of them. */
static void check_lists(const uint8_t *p, size_t n) {
  char why[256];
  aural_msg_writer mw;
  aural_msg_streams s, s2;
  why[0] = '\0';
  if (aural_proto_decode_streams(p, n, &s, why, sizeof why) == 0) {
    aural_msg_stream_info e;
    aural_proto_streams_begin(&mw, msg, sizeof msg);
    while (aural_proto_streams_next(&s.streams, &e, why, sizeof why) == 1) {
      CHECK(aural_proto_valid_name(e.name));
      aural_proto_streams_add(&mw, &e);
    }
    size_t k = aural_proto_streams_end(&mw);
    CHECK(k > AURAL_PROTO_HEADER_BYTES);
    CHECK(aural_proto_decode_streams(msg + AURAL_PROTO_HEADER_BYTES,
                                     k - AURAL_PROTO_HEADER_BYTES, &s2, why,
                                     sizeof why) == 0);
    CHECK(s2.streams.n_items == s.streams.index);
  } else {
    check_why(why, "streams: ");
  }
  aural_msg_stats_reply r, r2;
  why[0] = '\0';
  if (aural_proto_decode_stats_reply(p, n, &r, why, sizeof why) != 0) {
    check_why(why, "stats_reply: ");
    return;
  }
  aural_proto_stats_reply_begin(&mw, msg, sizeof msg, &r);
  aural_stats_stream st;
  aural_stats_subscriber sub;
  while (aural_proto_stats_stream_next(&r.streams, &st, why, sizeof why) == 1)
    aural_proto_stats_reply_add_stream(&mw, &st);
  while (aural_proto_stats_subscriber_next(&r.subscribers, &sub, why,
                                           sizeof why) == 1) {
    CHECK(sub.all == (sub.stream[0] == '\0'));
    aural_proto_stats_reply_add_subscriber(&mw, &sub);
  }
  size_t k = aural_proto_stats_reply_end(&mw, &r);
  CHECK(k > AURAL_PROTO_HEADER_BYTES);
  CHECK(aural_proto_decode_stats_reply(msg + AURAL_PROTO_HEADER_BYTES,
                                       k - AURAL_PROTO_HEADER_BYTES, &r2, why,
                                       sizeof why) == 0);
  CHECK(r2.streams.n_items == r.streams.n_items &&
        r2.subscribers.n_items == r.subscribers.n_items &&
        r2.next_streams_before == r.next_streams_before &&
        r2.next_clients_before == r.next_clients_before);
}

/* A WORDS payload that decodes is written again word by word and reads
 * back with the same counts. */
static void check_words(const uint8_t *p, size_t n) {
  char why[256];
  aural_msg_words m, m2;
  why[0] = '\0';
  if (aural_proto_decode_words(p, n, &m, why, sizeof why) != 0) {
    check_why(why, "words: ");
    return;
  }
  aural_msg_writer mw;
  aural_json_list segs = m.segments, words;
  aural_msg_word w;
  aural_proto_words_begin(&mw, msg, sizeof msg, 1, &m);
  while (aural_proto_words_segment_next(&segs, &words, why, sizeof why) == 1) {
    aural_proto_words_segment(&mw);
    while (aural_proto_words_word_next(&words, &w, why, sizeof why) == 1) {
      CHECK(w.word[0] != '\0' && w.start <= w.end);
      CHECK(w.confidence >= 0 && w.confidence <= 1);
      aural_proto_words_add(&mw, w.word, w.start, w.end, w.confidence);
    }
  }
  aural_proto_words_partial(&mw);
  while (aural_proto_words_word_next(&m.partial, &w, why, sizeof why) == 1)
    aural_proto_words_add(&mw, w.word, w.start, w.end, w.confidence);
  size_t k = aural_proto_words_end(&mw);
  if (k == 0) return; /* escapes made it longer than msg */
  CHECK(aural_proto_decode_words(msg + AURAL_PROTO_HEADER_BYTES,
                                 k - AURAL_PROTO_HEADER_BYTES, &m2, why,
                                 sizeof why) == 0);
  CHECK(m2.seq == m.seq && m2.final == m.final &&
        m2.segments.n_items == m.segments.n_items &&
        m2.partial.n_items == m.partial.n_items);
}

/* --- CHUNK and f16 ------------------------------------------------------------ */

static void check_chunk(const uint8_t *p, size_t n) {
  aural_chunk_header c;
  const uint8_t *emb = p, *logits = p;
  const char *text = "";
  if (aural_chunk_decode(p, n, &c, &emb, &logits, &text) != 0) {
    CHECK(emb == NULL && logits == NULL && text == NULL);
    return;
  }
  CHECK(aural_chunk_payload_bytes(&c) == n);
  CHECK(c.n_frames >= 1 && c.dtype <= 1 && (c.outputs & ~AURAL_OUT_ALL) == 0);
  size_t elem = c.dtype ? 2 : 4, at = AURAL_PROTO_CHUNK_HEADER_BYTES;
  if (c.outputs & AURAL_OUT_EMBEDDINGS) {
    CHECK(emb == p + at);
    at += (size_t)c.n_frames * c.d_model * elem;
  } else {
    CHECK(emb == NULL);
  }
  if (c.outputs & AURAL_OUT_LOGITS) {
    CHECK(logits == p + at);
    at += (size_t)c.n_frames * c.vocab_size * elem;
  } else {
    CHECK(logits == NULL);
  }
  if (c.outputs & AURAL_OUT_TEXT) {
    CHECK((const uint8_t *)text == p + at);
    CHECK(utf8_ok((const uint8_t *)text, c.text_bytes));
    at += c.text_bytes;
  } else {
    CHECK(text == NULL && c.text_bytes == 0);
  }
  CHECK(at == n);
  uint8_t back[AURAL_PROTO_CHUNK_HEADER_BYTES];
  aural_chunk_put_header(back, &c);
  CHECK(memcmp(back, p, sizeof back) == 0);
}

static void check_f16(const uint8_t *p, size_t n) {
  for (size_t i = 0; i + 4 <= n && i < 64; i += 4) {
    float f;
    memcpy(&f, p + i, sizeof f);
    uint16_t h = aural_f32_to_f16(f);
    float g = aural_f16_to_f32(h);
    CHECK(!!isnan(f) == !!isnan(g));
    if (!isnan(f)) {
      CHECK(aural_f32_to_f16(g) == h);
      CHECK(!!signbit(f) == !!signbit(g));
      /* The nearest half: within half a unit of it. */
      if (isfinite(g) && fabsf(f) < 65504.0f) {
        float up = aural_f16_to_f32((uint16_t)(h + 1));
        CHECK(fabs((double)f - g) <= fabs((double)up - g) / 2 + 1e-300);
      }
    }
    uint16_t h2;
    memcpy(&h2, p + i, sizeof h2);
    float g2 = aural_f16_to_f32(h2);
    if (isnan(g2))
      CHECK(isnan(aural_f16_to_f32(aural_f32_to_f16(g2))));
    else
      CHECK(aural_f32_to_f16(g2) == h2);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_header(data, size);
  const uint8_t *p = data;
  size_t n = size;
  if (size >= AURAL_PROTO_HEADER_BYTES) {
    p += AURAL_PROTO_HEADER_BYTES;
    n -= AURAL_PROTO_HEADER_BYTES;
  }
  if (n > 65536) return 0; /* beyond the scratch space */
  check_json(p, n);
  check_requests(p, n);
  check_simple_server_messages(p, n);
  check_welcome(p, n);
  check_lists(p, n);
  check_words(p, n);
  check_chunk(p, n);
  check_writer(p, n);
  check_raw_and_error(p, n);
  check_f16(p, n);
  return 0;
}
