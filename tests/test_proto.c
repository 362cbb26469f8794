/*
 * The wire protocol codec (proto/PROTOCOL.md): every message type through
 * its encoder and decoder, the header's refusals, a table of malformed JSON
 * that the strict reader must refuse and valid JSON it must accept, the
 * field checks of each request with the message that names the field, the
 * CHUNK payload with each combination of outputs and dtypes and every
 * length that is one off, the f16 conversion against known values and a
 * nearest-value oracle, and the JSON writer's escaping and overflow.
 */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <aural/cluster.h>
#include <aural/proto.h>

#include "helpers.h"

#define BUF_BYTES 4096

/* --- framing -------------------------------------------------------------- */

static void test_header_round_trip_every_type(void **state) {
  (void)state;
  int n_types = 0;
  for (int type = 0; type < 256; type++) {
    if (aural_msg_type_name(type) == NULL) continue;
    n_types++;
    aural_msg_header h = {.version = AURAL_PROTO_VERSION,
                          .type = (uint8_t)type,
                          .flags = 0x8001,
                          .stream_id = 0xDEADBEEFu,
                          .payload_bytes = 1234};
    uint8_t b[AURAL_PROTO_HEADER_BYTES];
    aural_proto_put_header(b, &h);
    aural_msg_header g;
    assert_int_equal(aural_proto_decode_header(b, sizeof b, 1234, &g), 0);
    assert_int_equal(g.version, 1);
    assert_int_equal(g.type, type);
    assert_int_equal(g.flags, 0x8001);
    assert_int_equal(g.stream_id, 0xDEADBEEFu);
    assert_int_equal(g.payload_bytes, 1234);
  }
  assert_int_equal(n_types, 0x17);
  assert_string_equal(aural_msg_type_name(AURAL_MSG_CHUNK), "CHUNK");
  assert_string_equal(aural_msg_type_name(0x16), "STATS_REPLY");
  assert_string_equal(aural_msg_type_name(0x17), "WORDS");
  assert_null(aural_msg_type_name(0));
  assert_null(aural_msg_type_name(0x18));
  assert_null(aural_msg_type_name(-1));
}

/* The byte image of PROTOCOL.md §2, field by field. */
static void test_header_bytes(void **state) {
  (void)state;
  aural_msg_header h = {.version = 1,
                        .type = AURAL_MSG_GAP,
                        .flags = 0x0201,
                        .stream_id = 0x04030201u,
                        .payload_bytes = 0x0A090807u};
  uint8_t b[AURAL_PROTO_HEADER_BYTES];
  aural_proto_put_header(b, &h);
  const uint8_t want[16] = {'A', 'U',  'R',  'L',  1,    0x0F, 0x01, 0x02,
                            1,   2,    3,    4,    7,    8,    9,    10};
  assert_memory_equal(b, want, 16);
}

static void test_header_errors(void **state) {
  (void)state;
  aural_msg_header h = {.version = 1, .type = AURAL_MSG_PING,
                        .stream_id = 9, .payload_bytes = 100};
  uint8_t b[AURAL_PROTO_HEADER_BYTES];
  aural_msg_header g;

  aural_proto_put_header(b, &h);
  for (size_t len = 0; len < AURAL_PROTO_HEADER_BYTES; len++)
    assert_int_equal(aural_proto_decode_header(b, len, 1000, &g),
                     AURAL_PROTO_MORE);
  assert_int_equal(aural_proto_decode_header(b, 16, 100, &g), 0);
  assert_int_equal(aural_proto_decode_header(b, 16, 99, &g),
                   AURAL_PROTO_ETOO_LARGE);
  assert_int_equal(g.payload_bytes, 100);

  b[3] = 'X';
  assert_int_equal(aural_proto_decode_header(b, 16, 1000, &g),
                   AURAL_PROTO_EFRAMING);
  assert_int_equal(g.stream_id, 9); /* filled even on error */

  h.version = 2;
  aural_proto_put_header(b, &h);
  assert_int_equal(aural_proto_decode_header(b, 16, 1000, &g),
                   AURAL_PROTO_EVERSION);
  assert_int_equal(g.version, 2);
  h.version = 0;
  aural_proto_put_header(b, &h);
  assert_int_equal(aural_proto_decode_header(b, 16, 1000, &g),
                   AURAL_PROTO_EVERSION);

  h.version = 1;
  const uint8_t bad_types[] = {0, 0x18, 0xFF};
  for (size_t i = 0; i < sizeof bad_types; i++) {
    h.type = bad_types[i];
    aural_proto_put_header(b, &h);
    assert_int_equal(aural_proto_decode_header(b, 16, 1000, &g),
                     AURAL_PROTO_EUNKNOWN_TYPE);
    assert_int_equal(g.type, bad_types[i]);
  }
  h.type = AURAL_MSG_AUDIO_DATA;
  h.payload_bytes = UINT32_MAX;
  aural_proto_put_header(b, &h);
  assert_int_equal(aural_proto_decode_header(b, 16, UINT32_MAX - 1, &g),
                   AURAL_PROTO_ETOO_LARGE);
  assert_int_equal(aural_proto_decode_header(b, 16, UINT32_MAX, &g), 0);
}

/* aural/codes.h is one list: every code, the library's and the
 * protocol's, is distinct, below every errno value, and its wire value
 * (for the protocol's) comes back as the same code. */
static void test_one_code_list(void **state) {
  (void)state;
  static const int codes[] = {
#define LIB_CODE(name, value, text) AURAL_E##name,
      AURAL_ERROR_MAP(LIB_CODE)
#undef LIB_CODE
#define PROTO_CODE(name, value, text) AURAL_PROTO_E##name,
      AURAL_PROTO_ERROR_MAP(PROTO_CODE)
#undef PROTO_CODE
  };
  size_t n = sizeof codes / sizeof codes[0];
  for (size_t i = 0; i < n; i++) {
    assert_true(codes[i] < -4095); /* no errno value reaches -4096 */
    for (size_t j = 0; j < i; j++) assert_int_not_equal(codes[i], codes[j]);
    int wire = aural_proto_error_wire(codes[i]);
    if (wire == 0) continue; /* a library code */
    assert_in_range(wire, 1, 255);
    assert_int_equal(aural_proto_error_from_wire((uint32_t)wire), codes[i]);
    assert_non_null(aural_proto_error_name(codes[i]));
  }
  assert_int_equal(aural_proto_error_wire(AURAL_EFORMAT), 0);
  assert_null(aural_proto_error_name(AURAL_EFORMAT));
}

/* The server and its clients find the socket by one rule. An empty
 * $XDG_RUNTIME_DIR counts as unset: the client once made it "/aural.sock"
 * while aurald listened in /tmp/aural-UID. */
static void test_default_socket(void **state) {
  (void)state;
  char path[128], want[128];
  setenv("AURAL_SOCKET", "/x/y.sock", 1);
  assert_int_equal(aural_proto_default_socket(path, sizeof path), 0);
  assert_string_equal(path, "/x/y.sock");
  unsetenv("AURAL_SOCKET");
  setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
  assert_int_equal(aural_proto_default_socket(path, sizeof path), 0);
  assert_string_equal(path, "/run/user/7/aural.sock");
  assert_int_equal(aural_proto_default_socket(path, 10), -1);
  setenv("XDG_RUNTIME_DIR", "", 1);
  assert_int_equal(aural_proto_default_socket(path, sizeof path), 0);
  if (geteuid() == 0)
    snprintf(want, sizeof want, "%s", AURAL_PROTO_SYSTEM_SOCKET);
  else
    snprintf(want, sizeof want, "/tmp/aural-%u/aural.sock",
             (unsigned)geteuid());
  assert_string_equal(path, want);
  unsetenv("XDG_RUNTIME_DIR");
  char name[64];
  assert_string_equal(aural_proto_user_name(0, name, sizeof name), "root");
  assert_string_equal(aural_proto_user_name(4000000000u, name, sizeof name),
                      "no such user");
}

static void test_error_names(void **state) {
  (void)state;
  assert_string_equal(aural_proto_error_name(AURAL_PROTO_ETOO_LARGE),
                      "TOO_LARGE");
  assert_string_equal(aural_proto_error_name(3), "TOO_LARGE");
  assert_string_equal(aural_proto_error_name(16), "PERMISSION");
  assert_null(aural_proto_error_name(0));
  assert_string_equal(aural_proto_error_name(17), "NO_WORDS");
  assert_null(aural_proto_error_name(18));
  assert_null(aural_proto_error_name(INT_MIN));
  assert_string_equal(aural_proto_strerror(AURAL_PROTO_EBAD_PAYLOAD),
                      "malformed payload");
  assert_string_equal(aural_proto_strerror(99), "unknown error");
  /* Errno values are not protocol codes: -EPERM (-1) was FRAMING once. */
  assert_null(aural_proto_error_name(-1));
  assert_int_equal(aural_proto_error_wire(-1), 0);
  assert_string_equal(aural_dtype_name(AURAL_DTYPE_F16), "f16");
  assert_null(aural_dtype_name(2));
  assert_string_equal(aural_sample_format_name(AURAL_SAMPLE_S16), "s16");
  assert_null(aural_sample_format_name(-1));
  assert_string_equal(aural_output_name(AURAL_OUT_LOGITS), "logits");
  assert_null(aural_output_name(3));
}

static void test_valid_name(void **state) {
  (void)state;
  char name[AURAL_PROTO_NAME_MAX + 2];
  memset(name, 'a', sizeof name);
  name[AURAL_PROTO_NAME_MAX] = '\0';
  assert_true(aural_proto_valid_name(name));
  name[AURAL_PROTO_NAME_MAX] = 'a';
  name[AURAL_PROTO_NAME_MAX + 1] = '\0';
  assert_false(aural_proto_valid_name(name));
  assert_true(aural_proto_valid_name("mic"));
  assert_true(aural_proto_valid_name("speech.flac"));
  assert_true(aural_proto_valid_name("!~"));
  assert_false(aural_proto_valid_name(""));
  assert_false(aural_proto_valid_name(NULL));
  assert_false(aural_proto_valid_name("a/b"));
  assert_false(aural_proto_valid_name("a\\b"));
  assert_false(aural_proto_valid_name("a b"));
  assert_false(aural_proto_valid_name("a\x7f"));
  assert_false(aural_proto_valid_name("caf\xc3\xa9"));
}

/* --- message round trips --------------------------------------------------- */

/* Checks the header of the n-byte message at b and returns its payload. */
static const uint8_t *payload_of(const uint8_t *b, size_t n, int type,
                                 uint32_t stream_id, size_t *payload_bytes) {
  aural_msg_header h;
  assert_true(n >= AURAL_PROTO_HEADER_BYTES);
  assert_int_equal(aural_proto_decode_header(b, n, UINT32_MAX, &h), 0);
  assert_int_equal(h.type, type);
  assert_int_equal(h.stream_id, stream_id);
  assert_int_equal(h.flags, 0);
  assert_int_equal(h.payload_bytes, n - AURAL_PROTO_HEADER_BYTES);
  *payload_bytes = h.payload_bytes;
  return b + AURAL_PROTO_HEADER_BYTES;
}

static void test_hello_round_trip(void **state) {
  (void)state;
  const uint32_t versions[] = {1u << 1, 1u << 1 | 1u << 2 | 1u << 31,
                               0xFFFFFFFEu};
  const char *clients[] = {"", "my-tool 1.0",
                           "quote \" back\\slash \n tab\t caf\xc3\xa9 "
                           "\xf0\x9f\x98\x80",
                           "0123456789012345678901234567890123456789"
                           "012345678901234567890123"};
  for (size_t v = 0; v < 3; v++)
    for (size_t c = 0; c < 4; c++) {
      aural_msg_hello m = {.versions = versions[v]}, g;
      assert_true(strlen(clients[c]) <= AURAL_PROTO_NAME_MAX);
      strcpy(m.client, clients[c]);
      uint8_t b[BUF_BYTES];
      size_t n = aural_proto_encode_hello(b, sizeof b, &m), pn;
      const uint8_t *p = payload_of(b, n, AURAL_MSG_HELLO, 0, &pn);
      char why[128] = "";
      assert_int_equal(aural_proto_decode_hello(p, pn, &g, why, sizeof why), 0);
      assert_int_equal(g.versions, m.versions);
      assert_string_equal(g.client, m.client);
    }
}

static void test_subscribe_round_trip(void **state) {
  (void)state;
  int n_checked = 0;
  for (int all = 0; all < 2; all++)
    for (uint32_t outputs = 1; outputs <= AURAL_OUT_ALL; outputs++)
      for (uint8_t dtype = 0; dtype < 2; dtype++) {
        aural_msg_subscribe m = {.all = all, .outputs = outputs,
                                 .dtype = dtype}, g;
        if (!all) strcpy(m.stream, "call-17");
        uint8_t b[BUF_BYTES];
        size_t n = aural_proto_encode_subscribe(b, sizeof b, &m), pn;
        const uint8_t *p = payload_of(b, n, AURAL_MSG_SUBSCRIBE, 0, &pn);
        char why[128] = "";
        assert_int_equal(
            aural_proto_decode_subscribe(p, pn, &g, why, sizeof why), 0);
        assert_int_equal(g.all, m.all);
        assert_string_equal(g.stream, m.stream);
        assert_int_equal(g.outputs, outputs);
        assert_int_equal(g.dtype, dtype);
        n_checked++;
      }
  assert_int_equal(n_checked, 28);
  /* Custom words, with and without a boost, survive the trip; so does an
   * escaped or non-ASCII word. */
  aural_msg_subscribe m = {.outputs = AURAL_OUT_WORDS}, g;
  strcpy(m.stream, "mic");
  const char *words[] = {"Dashwood", "Kubernetes", "caf\xc3\xa9", "O\"Brien"};
  for (int k = 0; k < 4; k++) strcpy(m.vocabulary.words[k], words[k]);
  m.vocabulary.n_words = 4;
  for (int boost = 0; boost < 2; boost++) {
    m.vocabulary.has_boost = boost;
    m.vocabulary.boost = boost ? 7.25 : 0;
    uint8_t b[BUF_BYTES];
    size_t n = aural_proto_encode_subscribe(b, sizeof b, &m), pn;
    const uint8_t *p = payload_of(b, n, AURAL_MSG_SUBSCRIBE, 0, &pn);
    char why[128] = "";
    assert_int_equal(aural_proto_decode_subscribe(p, pn, &g, why, sizeof why),
                     0);
    assert_int_equal(g.vocabulary.n_words, 4);
    for (int k = 0; k < 4; k++)
      assert_string_equal(g.vocabulary.words[k], words[k]);
    assert_int_equal(g.vocabulary.has_boost, boost);
    assert_true(g.vocabulary.boost == m.vocabulary.boost);
  }
  aural_msg_audio_open ao = {.sample_rate = 16000, .channels = 1}, go;
  strcpy(ao.vocabulary.words[0], "Dashwood");
  ao.vocabulary.n_words = 1;
  uint8_t b[BUF_BYTES];
  size_t n = aural_proto_encode_audio_open(b, sizeof b, &ao), pn;
  const uint8_t *p = payload_of(b, n, AURAL_MSG_AUDIO_OPEN, 0, &pn);
  assert_int_equal(aural_proto_decode_audio_open(p, pn, &go, NULL, 0), 0);
  assert_int_equal(go.vocabulary.n_words, 1);
  assert_string_equal(go.vocabulary.words[0], "Dashwood");
  assert_false(go.vocabulary.has_boost);
}

static void test_unsubscribe_round_trip(void **state) {
  (void)state;
  const uint32_t ids[] = {1, 5, 1000000, UINT32_MAX};
  for (size_t i = 0; i < 4; i++) {
    uint8_t b[64];
    size_t n = aural_proto_encode_unsubscribe(b, sizeof b, ids[i]), pn;
    const uint8_t *p = payload_of(b, n, AURAL_MSG_UNSUBSCRIBE, 0, &pn);
    uint32_t got = 0;
    assert_int_equal(aural_proto_decode_unsubscribe(p, pn, &got, NULL, 0), 0);
    assert_int_equal(got, ids[i]);
  }
}

static void test_stats_round_trip(void **state) {
  (void)state;
  const aural_msg_stats cases[] = {
      {0, 0}, {17, 0}, {0, 3}, {1, UINT32_MAX}, {UINT32_MAX, 2}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t b[128];
    size_t n = aural_proto_encode_stats(b, sizeof b, &cases[i]), pn;
    const uint8_t *p = payload_of(b, n, AURAL_MSG_STATS, 0, &pn);
    /* The first page is asked with an empty payload, as version 1 did. */
    assert_int_equal(pn == 0, cases[i].streams_before == 0 &&
                                  cases[i].clients_before == 0);
    aural_msg_stats got = {9, 9};
    assert_int_equal(aural_proto_decode_stats(p, pn, &got, NULL, 0), 0);
    assert_int_equal(got.streams_before, cases[i].streams_before);
    assert_int_equal(got.clients_before, cases[i].clients_before);
  }
}

static void test_audio_open_round_trip(void **state) {
  (void)state;
  const char *names[] = {"", "call-17",
                         "!\"#$%&'()*+,-.0123456789:;<=>?@AZ[]^_`az{|}~"};
  const uint32_t rates[] = {4000, 8000, 768000};
  const uint32_t channels[] = {1, 2, 256};
  for (size_t i = 0; i < 3; i++)
    for (size_t j = 0; j < 3; j++)
      for (uint8_t format = 0; format < 2; format++) {
        aural_msg_audio_open m = {.sample_rate = rates[j],
                                  .channels = channels[(i + j) % 3],
                                  .format = format}, g;
        strcpy(m.name, names[i]);
        uint8_t b[BUF_BYTES];
        size_t n = aural_proto_encode_audio_open(b, sizeof b, &m), pn;
        const uint8_t *p = payload_of(b, n, AURAL_MSG_AUDIO_OPEN, 0, &pn);
        char why[128] = "";
        assert_int_equal(
            aural_proto_decode_audio_open(p, pn, &g, why, sizeof why), 0);
        assert_string_equal(g.name, m.name);
        assert_int_equal(g.sample_rate, m.sample_rate);
        assert_int_equal(g.channels, m.channels);
        assert_int_equal(g.format, m.format);
      }
}

static void test_error_round_trip(void **state) {
  (void)state;
  uint8_t b[BUF_BYTES];
  size_t n = aural_proto_encode_error(b, sizeof b, 42, AURAL_PROTO_ENO_STREAM,
                                      "no stream \"42\"\n", false), pn;
  const uint8_t *p = payload_of(b, n, AURAL_MSG_ERROR, 42, &pn);
  const char want[] = "{\"code\":7,\"name\":\"NO_STREAM\",\"message\":"
                      "\"no stream \\\"42\\\"\\u000a\",\"fatal\":false}";
  assert_int_equal(pn, strlen(want));
  assert_memory_equal(p, want, pn);

  /* The positive wire code works too, and the payload reads back. */
  n = aural_proto_encode_error(b, sizeof b, 0, 13, NULL, true);
  p = payload_of(b, n, AURAL_MSG_ERROR, 0, &pn);
  aural_json js;
  assert_int_equal(aural_json_parse(&js, (const char *)p, pn, NULL, 0), 0);
  int64_t code;
  bool fatal;
  char s[64];
  assert_int_equal(aural_json_int(&js, aural_json_get(&js, 0, "code"), 1, 16,
                                  &code), 0);
  assert_int_equal(code, 13);
  assert_int_equal(aural_json_string(&js, aural_json_get(&js, 0, "name"), s,
                                     sizeof s), 8);
  assert_string_equal(s, "SHUTDOWN");
  assert_int_equal(aural_json_string(&js, aural_json_get(&js, 0, "message"),
                                     s, sizeof s), 0);
  assert_int_equal(aural_json_bool(&js, aural_json_get(&js, 0, "fatal"),
                                   &fatal), 0);
  assert_true(fatal);
}

static void test_raw_round_trip(void **state) {
  (void)state;
  uint8_t ping[AURAL_PROTO_PING_MAX], b[AURAL_PROTO_HEADER_BYTES + 256];
  for (int i = 0; i < 256; i++) ping[i] = (uint8_t)(i * 7);
  size_t n = aural_proto_encode_raw(b, sizeof b, AURAL_MSG_PING, 0, ping,
                                    sizeof ping), pn;
  assert_int_equal(n, sizeof b);
  const uint8_t *p = payload_of(b, n, AURAL_MSG_PING, 0, &pn);
  assert_memory_equal(p, ping, sizeof ping);
  assert_int_equal(aural_proto_encode_raw(b, sizeof b - 1, AURAL_MSG_PING, 0,
                                          ping, sizeof ping), 0);

  n = aural_proto_encode_raw(b, sizeof b, AURAL_MSG_AUDIO_CLOSE, 77, NULL, 0);
  assert_int_equal(n, AURAL_PROTO_HEADER_BYTES);
  payload_of(b, n, AURAL_MSG_AUDIO_CLOSE, 77, &pn);
  assert_int_equal(pn, 0);
  assert_int_equal(aural_proto_encode_raw(b, 15, AURAL_MSG_STATS, 0, NULL, 0),
                   0);

  /* A payload already in place after the header room. */
  memcpy(b + AURAL_PROTO_HEADER_BYTES, "abc", 3);
  n = aural_proto_encode_raw(b, sizeof b, AURAL_MSG_AUDIO_DATA, 3,
                             b + AURAL_PROTO_HEADER_BYTES, 3);
  p = payload_of(b, n, AURAL_MSG_AUDIO_DATA, 3, &pn);
  assert_memory_equal(p, "abc", 3);
}

/* Every encoder refuses each buffer one byte too small, leaving no byte
 * past the capacity touched, and fits exactly. */
static void test_encoders_short_buffer(void **state) {
  (void)state;
  aural_msg_hello hello = {.versions = 2};
  strcpy(hello.client, "x");
  aural_msg_subscribe sub = {.all = true, .outputs = AURAL_OUT_ALL};
  aural_msg_audio_open open = {.sample_rate = 8000, .channels = 1};
  for (int which = 0; which < 5; which++) {
    uint8_t b[256];
    size_t full = 0;
    for (size_t cap = 0; cap <= sizeof b - 1; cap++) {
      memset(b, 0xAA, sizeof b);
      size_t n = 0;
      switch (which) {
      case 0: n = aural_proto_encode_hello(b, cap, &hello); break;
      case 1: n = aural_proto_encode_subscribe(b, cap, &sub); break;
      case 2: n = aural_proto_encode_unsubscribe(b, cap, 7); break;
      case 3: n = aural_proto_encode_audio_open(b, cap, &open); break;
      default:
        n = aural_proto_encode_error(b, cap, 1, 5, "bad \"x\"", false);
      }
      for (size_t i = cap; i < sizeof b; i++) assert_int_equal(b[i], 0xAA);
      if (n != 0) {
        assert_int_equal(n, cap);
        full = n;
        break;
      }
    }
    assert_true(full > AURAL_PROTO_HEADER_BYTES);
  }
}

static void test_request_defaults_and_unknown_members(void **state) {
  (void)state;
  char why[128];
  aural_msg_subscribe s;
  const char *sub = "{\"stream\":\"mic\",\"future\":{\"x\":[1,2,{}]},"
                    "\"all\":false}";
  assert_int_equal(aural_proto_decode_subscribe((const uint8_t *)sub,
                                                strlen(sub), &s, why,
                                                sizeof why), 0);
  assert_false(s.all);
  assert_string_equal(s.stream, "mic");
  assert_int_equal(s.outputs, AURAL_OUT_EMBEDDINGS);
  assert_int_equal(s.dtype, AURAL_DTYPE_F32);

  const char *sub2 = " {\"all\" : true , \"outputs\":[\"text\",\"logits\"],"
                     "\"dtype\":\"f16\"} \n";
  assert_int_equal(aural_proto_decode_subscribe((const uint8_t *)sub2,
                                                strlen(sub2), &s, why,
                                                sizeof why), 0);
  assert_true(s.all);
  assert_string_equal(s.stream, "");
  assert_int_equal(s.outputs, AURAL_OUT_TEXT | AURAL_OUT_LOGITS);
  assert_int_equal(s.dtype, AURAL_DTYPE_F16);

  /* Escapes in member names and values are decoded before comparing. */
  const char *open = "{\"sample\\u005frate\":8000,\"channels\":1,"
                     "\"format\":\"\\u0073\\u00316\",\"n\\/a\":null}";
  aural_msg_audio_open o;
  assert_int_equal(aural_proto_decode_audio_open((const uint8_t *)open,
                                                 strlen(open), &o, why,
                                                 sizeof why), 0);
  assert_string_equal(o.name, "");
  assert_int_equal(o.sample_rate, 8000);
  assert_int_equal(o.format, AURAL_SAMPLE_S16);

  const char *hello = "{\"versions\":[3,1,1],\"client\":\"\"}";
  aural_msg_hello h;
  assert_int_equal(aural_proto_decode_hello((const uint8_t *)hello,
                                            strlen(hello), &h, why,
                                            sizeof why), 0);
  assert_int_equal(h.versions, 1u << 1 | 1u << 3);
}

/* --- JSON reader ------------------------------------------------------------ */

typedef struct json_case {
  const char *text;
  size_t len; /* 0: strlen(text) */
  const char *what;
} json_case;

static char deep17[64], deep16[64], tokens513[2048], tokens512[2048];

static void make_generated_cases(void) {
  for (int i = 0; i < 17; i++) {
    deep17[i] = '[';
    deep17[17 + i] = ']';
  }
  for (int i = 0; i < 16; i++) {
    deep16[i] = '[';
    deep16[16 + i] = ']';
  }
  /* One array and 512 (resp. 511) numbers. */
  size_t n = 0;
  tokens513[n++] = '[';
  for (int i = 0; i < 512; i++) {
    if (i) tokens513[n++] = ',';
    tokens513[n++] = '0';
  }
  tokens513[n++] = ']';
  n = 0;
  tokens512[n++] = '[';
  for (int i = 0; i < 511; i++) {
    if (i) tokens512[n++] = ',';
    tokens512[n++] = '0';
  }
  tokens512[n++] = ']';
}

static const json_case malformed[] = {
    {"", 0, "empty"},
    {" \n\t", 0, "only whitespace"},
    {"{", 0, "truncated object"},
    {"{\"a\":1", 0, "truncated after a member"},
    {"{\"a\":", 0, "truncated before a value"},
    {"[\"abc", 0, "unterminated string"},
    {"{\"a\":1,}", 0, "trailing comma in object"},
    {"[1,2,]", 0, "trailing comma in array"},
    {"[1,,2]", 0, "empty element"},
    {"{,}", 0, "lone comma"},
    {"{\"a\":1,\"a\":2}", 0, "duplicate key"},
    {"{\"a\":1,\"\\u0061\":2}", 0, "duplicate key through an escape"},
    {"{\"k\":{\"x\":1,\"y\":2,\"x\":3}}", 0, "duplicate key, nested"},
    {"[\"\\ud800\"]", 0, "lone high surrogate"},
    {"[\"\\udc00\"]", 0, "lone low surrogate"},
    {"[\"\\ud800\\u0041\"]", 0, "high surrogate then not a low one"},
    {"[\"\\ud800\\ud800\"]", 0, "two high surrogates"},
    {"[\"\xc0\xaf\"]", 0, "overlong 2-byte UTF-8"},
    {"[\"\xe0\x80\xaf\"]", 0, "overlong 3-byte UTF-8"},
    {"[\"\xf0\x80\x80\xaf\"]", 0, "overlong 4-byte UTF-8"},
    {"[\"\xed\xa0\x80\"]", 0, "surrogate encoded in UTF-8"},
    {"[\"\xf4\x90\x80\x80\"]", 0, "UTF-8 above U+10FFFF"},
    {"[\"\xff\"]", 0, "byte 0xFF"},
    {"[\"\x80\"]", 0, "lone continuation byte"},
    {"[\"\xe2\x82\"]", 0, "truncated UTF-8 sequence"},
    {"[\"\xe2\x82", 0, "truncated UTF-8 at the end"},
    {"[\"a\x01\"]", 0, "control character in string"},
    {"[\"a\tb\"]", 0, "raw tab in string"},
    {"[\"a\0b\"]", 7, "NUL in string"},
    {"[01]", 0, "leading zero"},
    {"[-01]", 0, "leading zero after minus"},
    {"[1.]", 0, "no digit after the point"},
    {"[.5]", 0, "no digit before the point"},
    {"[1e]", 0, "empty exponent"},
    {"[1.5e+]", 0, "empty signed exponent"},
    {"[-]", 0, "lone minus"},
    {"[+1]", 0, "plus sign"},
    {"[0x10]", 0, "hexadecimal"},
    {"[NaN]", 0, "NaN"},
    {"[-Infinity]", 0, "infinity"},
    {"[\"\\x41\"]", 0, "bad escape"},
    {"[\"\\u12G4\"]", 0, "bad hex digit"},
    {"[\"\\u12\"]", 0, "short \\u escape"},
    {"[\"\\", 0, "truncated escape"},
    {"{\"a\" 1}", 0, "missing colon"},
    {"{a:1}", 0, "unquoted key"},
    {"{1:1}", 0, "number as key"},
    {"{\"a\":1 \"b\":2}", 0, "missing comma"},
    {"{\"a\":1}x", 0, "trailing garbage"},
    {"{} {}", 0, "two values"},
    {"{\"a\":1}\0", 8, "trailing NUL"},
    {"[tru]", 0, "truncated literal"},
    {"[True]", 0, "capitalised literal"},
    {"[nul]", 0, "truncated null"},
    {"['a']", 0, "single quotes"},
    {"\xef\xbb\xbf{}", 0, "byte-order mark"},
    {"/* c */ {}", 0, "comment"},
    {"\v{}", 0, "vertical tab as whitespace"},
    {"{\"a\":1]", 0, "mismatched bracket"},
    {deep17, 34, "17 levels of nesting"},
    {tokens513, 0, "513 tokens"},
};

static void test_json_malformed(void **state) {
  (void)state;
  make_generated_cases();
  size_t n_cases = sizeof malformed / sizeof malformed[0];
  assert_true(n_cases >= 25);
  for (size_t i = 0; i < n_cases; i++) {
    const json_case *c = &malformed[i];
    size_t len = c->len ? c->len : strlen(c->text);
    aural_json js;
    char why[128] = "";
    int rc = aural_json_parse(&js, c->text, len, why, sizeof why);
    if (rc != AURAL_PROTO_EBAD_PAYLOAD)
      fail_msg("accepted: %s", c->what);
    assert_int_equal(js.n_tokens, 0);
    assert_memory_equal(why, "byte ", 5);
    /* A request carrying it is refused as malformed JSON. */
    aural_msg_hello h;
    assert_int_equal(aural_proto_decode_hello((const uint8_t *)c->text, len,
                                              &h, why, sizeof why),
                     AURAL_PROTO_EBAD_PAYLOAD);
    assert_non_null(strstr(why, "hello: malformed JSON: byte "));
  }
}

static void test_json_valid(void **state) {
  (void)state;
  make_generated_cases();
  const json_case valid[] = {
      {"{}", 0, "empty object"},
      {"[]", 0, "empty array"},
      {" \t\r\n{ } \r\n", 0, "whitespace"},
      {"0", 0, "top-level number"},
      {"\"x\"", 0, "top-level string"},
      {"[0,-0,0.5,-1.25e+10,1E-5,1e5,123456789012345678901234567890]", 0,
       "numbers"},
      {"[true,false,null]", 0, "literals"},
      {"[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"]", 0, "escapes"},
      {"[\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\x7f\"]", 0,
       "UTF-8 up to U+10FFFF, DEL"},
      {"{\"a\":{\"a\":1},\"b\":[{\"a\":2}]}", 0, "same key on other levels"},
      {"{\"\":1,\"A\":2,\"a\":3}", 0, "empty key, case differs"},
      {deep16, 32, "16 levels of nesting"},
      {tokens512, 0, "512 tokens"},
  };
  for (size_t i = 0; i < sizeof valid / sizeof valid[0]; i++) {
    const json_case *c = &valid[i];
    aural_json js;
    char why[128] = "";
    if (aural_json_parse(&js, c->text, c->len ? c->len : strlen(c->text), why,
                         sizeof why) != 0)
      fail_msg("refused %s: %s", c->what, why);
  }
  aural_json js;
  assert_int_equal(aural_json_parse(&js, tokens512, strlen(tokens512), NULL,
                                    0), 0);
  assert_int_equal(js.n_tokens, 512);
  assert_int_equal(js.tokens[0].n_items, 511);
  assert_int_equal(js.tokens[0].next, 512);
}

static void test_json_tokens_and_accessors(void **state) {
  (void)state;
  const char *text =
      "{\"s\":\"a\\u00e9\\ud83d\\ude00\\n\",\"arr\":[10,[1,2],{\"x\":3},-4],"
      "\"big\":9223372036854775807,\"small\":-9223372036854775808,"
      "\"over\":9223372036854775808,\"under\":-9223372036854775809,"
      "\"huge\":99999999999999999999999,\"frac\":1.0,\"exp\":1e2,"
      "\"negzero\":-0,\"d\":-1.5e-3,\"inf\":1e400,\"t\":true,\"f\":false,"
      "\"n\":null,\"nul\":\"a\\u0000b\",\"esc\\\"key\":1}";
  aural_json js;
  char why[128] = "";
  assert_int_equal(aural_json_parse(&js, text, strlen(text), why, sizeof why),
                   0);
  assert_int_equal(js.tokens[0].kind, AURAL_JSON_OBJECT);
  assert_int_equal(js.tokens[0].n_items, 17);
  assert_int_equal(js.tokens[0].next, js.n_tokens);

  char s[16];
  int t = aural_json_get(&js, 0, "s");
  assert_int_equal(js.tokens[t].kind, AURAL_JSON_STRING);
  assert_int_equal(aural_json_string(&js, t, s, sizeof s), 8);
  assert_string_equal(s, "a\xc3\xa9\xf0\x9f\x98\x80\n");
  assert_int_equal(aural_json_string(&js, t, s, 9), 8); /* exactly fits */
  assert_int_equal(aural_json_string(&js, t, s, 8), -1);
  assert_int_equal(aural_json_string(&js, t, s, 0), -1);
  assert_int_equal(aural_json_string(&js, aural_json_get(&js, 0, "nul"), s,
                                     sizeof s), -1);
  assert_int_equal(aural_json_string(&js, aural_json_get(&js, 0, "t"), s,
                                     sizeof s), -1);

  int arr = aural_json_get(&js, 0, "arr");
  int64_t v;
  assert_int_equal(js.tokens[arr].n_items, 4);
  assert_int_equal(aural_json_int(&js, aural_json_item(&js, arr, 0), 0, 100,
                                  &v), 0);
  assert_int_equal(v, 10);
  assert_int_equal(js.tokens[aural_json_item(&js, arr, 1)].kind,
                   AURAL_JSON_ARRAY);
  int obj = aural_json_item(&js, arr, 2);
  assert_int_equal(aural_json_int(&js, aural_json_get(&js, obj, "x"), 3, 3,
                                  &v), 0);
  assert_int_equal(aural_json_int(&js, aural_json_item(&js, arr, 3), -4, -4,
                                  &v), 0);
  assert_int_equal(v, -4);
  assert_int_equal(aural_json_item(&js, arr, 4), -1);
  assert_int_equal(aural_json_item(&js, 0, 0), -1);
  assert_int_equal(aural_json_get(&js, arr, "x"), -1);
  assert_int_equal(aural_json_get(&js, 0, "x"), -1); /* not at this level */
  assert_int_equal(aural_json_get(&js, 0, "esc\"key"),
                   (int)js.n_tokens - 1);
  assert_int_equal(aural_json_get(&js, 0, NULL), -1);

  assert_int_equal(aural_json_int(&js, aural_json_get(&js, 0, "big"),
                                  INT64_MIN, INT64_MAX, &v), 0);
  assert_true(v == INT64_MAX);
  assert_int_equal(aural_json_int(&js, aural_json_get(&js, 0, "small"),
                                  INT64_MIN, INT64_MAX, &v), 0);
  assert_true(v == INT64_MIN);
  const char *refused[] = {"over", "under", "huge", "frac", "exp", "t", "s"};
  for (size_t i = 0; i < 7; i++)
    assert_int_equal(aural_json_int(&js, aural_json_get(&js, 0, refused[i]),
                                    INT64_MIN, INT64_MAX, &v), -1);
  assert_int_equal(aural_json_int(&js, aural_json_get(&js, 0, "negzero"), 0,
                                  0, &v), 0);
  assert_int_equal(aural_json_int(&js, aural_json_get(&js, 0, "big"), 0,
                                  INT64_MAX - 1, &v), -1);

  double d;
  assert_int_equal(aural_json_double(&js, aural_json_get(&js, 0, "d"), &d), 0);
  assert_true(d == -1.5e-3);
  assert_int_equal(aural_json_double(&js, aural_json_get(&js, 0, "exp"), &d),
                   0);
  assert_true(d == 100.0);
  assert_int_equal(aural_json_double(&js, aural_json_get(&js, 0, "huge"), &d),
                   0);
  assert_true(d == 1e23);
  assert_int_equal(aural_json_double(&js, aural_json_get(&js, 0, "negzero"),
                                     &d), 0);
  assert_true(d == 0 && signbit(d));
  assert_int_equal(aural_json_double(&js, aural_json_get(&js, 0, "inf"), &d),
                   -1);
  assert_int_equal(aural_json_double(&js, aural_json_get(&js, 0, "n"), &d),
                   -1);

  bool b;
  assert_int_equal(aural_json_bool(&js, aural_json_get(&js, 0, "t"), &b), 0);
  assert_true(b);
  assert_int_equal(aural_json_bool(&js, aural_json_get(&js, 0, "f"), &b), 0);
  assert_false(b);
  assert_int_equal(aural_json_bool(&js, aural_json_get(&js, 0, "n"), &b), -1);

  /* Out-of-range token indices are refused by every accessor. */
  const int bad[] = {-1, (int)js.n_tokens, INT_MAX};
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(aural_json_get(&js, bad[i], "s"), -1);
    assert_int_equal(aural_json_item(&js, bad[i], 0), -1);
    assert_int_equal(aural_json_string(&js, bad[i], s, sizeof s), -1);
    assert_int_equal(aural_json_int(&js, bad[i], 0, 1, &v), -1);
    assert_int_equal(aural_json_double(&js, bad[i], &d), -1);
    assert_int_equal(aural_json_bool(&js, bad[i], &b), -1);
  }
}

/* Decimal conversion is correctly rounded, in long and short forms. */
static void test_json_double_conversion(void **state) {
  (void)state;
  static const struct {
    const char *text;
    double want;
  } cases[] = {
      {"0.1", 0.1},
      {"2.2250738585072014e-308", 2.2250738585072014e-308},
      {"4.9406564584124654e-324", 4.9406564584124654e-324},
      {"1.7976931348623157e308", 1.7976931348623157e308},
      {"0.000000000000000000000000000001", 1e-30},
      {"100000000000000000000000000000000000000000", 1e41},
      {"9007199254740993", 9007199254740992.0}, /* tie, to even */
      {"9007199254740993.0000000000000000000000000000000001",
       9007199254740994.0},
      {"1e-400", 0.0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aural_json js;
    assert_int_equal(aural_json_parse(&js, cases[i].text,
                                      strlen(cases[i].text), NULL, 0), 0);
    double d;
    assert_int_equal(aural_json_double(&js, 0, &d), 0);
    if (d != cases[i].want) fail_msg("%s read as %.17g", cases[i].text, d);
  }
  /* 900 significant digits: the digits past those kept still round up. */
  static char longnum[1024];
  memset(longnum, '0', sizeof longnum - 1);
  memcpy(longnum, "9007199254740993", 16);
  longnum[900] = '1';
  longnum[901] = '\0';
  memcpy(longnum + 901, "e-885", 6);
  aural_json js;
  assert_int_equal(aural_json_parse(&js, longnum, strlen(longnum), NULL, 0),
                   0);
  double d;
  assert_int_equal(aural_json_double(&js, 0, &d), 0);
  assert_true(d == 9007199254740994.0);
}

/* --- request field checks ---------------------------------------------------- */

enum { HELLO, SUBSCRIBE, UNSUBSCRIBE, AUDIO_OPEN, STATS };

static int decode_request(int which, const char *text, char *why,
                          size_t why_len) {
  const uint8_t *p = (const uint8_t *)text;
  size_t n = strlen(text);
  aural_msg_hello h;
  aural_msg_subscribe s;
  uint32_t id;
  aural_msg_audio_open o;
  aural_msg_stats st;
  switch (which) {
  case HELLO:
    return aural_proto_decode_hello(p, n, &h, why, why_len);
  case SUBSCRIBE:
    return aural_proto_decode_subscribe(p, n, &s, why, why_len);
  case UNSUBSCRIBE:
    return aural_proto_decode_unsubscribe(p, n, &id, why, why_len);
  case STATS:
    return aural_proto_decode_stats(p, n, &st, why, why_len);
  default:
    return aural_proto_decode_audio_open(p, n, &o, why, why_len);
  }
}

#define NAME65 "01234567890123456789012345678901234567890123456789012345678901234"
#define NAME64 "0123456789012345678901234567890123456789012345678901234567890123"
#define OPEN(members) "{" members "}"
#define WORDS_SUB(vocab) \
  "{\"stream\":\"mic\",\"outputs\":[\"words\"],\"vocabulary\":" vocab "}"
#define WORDS65 "[\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\",\"w\"]"

static void test_request_field_errors(void **state) {
  (void)state;
  static const struct {
    int which;
    const char *text;
    const char *why; /* the whole message, or a part of it */
  } cases[] = {
      {HELLO, "[1]", "hello: the payload must be a JSON object"},
      {HELLO, "{\"versions\":[1]", "hello: malformed JSON: byte 15"},
      {HELLO, "{}", "hello: \"versions\" is missing"},
      {HELLO, "{\"versions\":1}", "hello: \"versions\" must be"},
      {HELLO, "{\"versions\":[]}", "hello: \"versions\" must be"},
      {HELLO, "{\"versions\":[0]}", "hello: \"versions\" must be"},
      {HELLO, "{\"versions\":[32]}", "hello: \"versions\" must be"},
      {HELLO, "{\"versions\":[1.0]}", "hello: \"versions\" must be"},
      {HELLO, "{\"versions\":[\"1\"]}", "hello: \"versions\" must be"},
      {HELLO, "{\"versions\":[1],\"client\":5}", "hello: \"client\""},
      {HELLO, "{\"versions\":[1],\"client\":\"" NAME65 "\"}",
       "hello: \"client\" must be a string of at most 64 bytes"},
      {HELLO, "{\"versions\":[1],\"client\":\"a\\u0000\"}", "\"client\""},
      {SUBSCRIBE, "{}", "subscribe: \"stream\" or \"all\": true is missing"},
      {SUBSCRIBE, "{\"all\":false}", "\"stream\" or \"all\": true is missing"},
      {SUBSCRIBE, "{\"stream\":\"mic\",\"all\":true}",
       "subscribe: give \"stream\" or \"all\": true, not both"},
      {SUBSCRIBE, "{\"stream\":5}", "subscribe: \"stream\" must be 1 to 64"},
      {SUBSCRIBE, "{\"stream\":null}", "subscribe: \"stream\" must be"},
      {SUBSCRIBE, "{\"stream\":\"\"}", "subscribe: \"stream\" must be"},
      {SUBSCRIBE, "{\"stream\":\"a/b\"}", "subscribe: \"stream\" must be"},
      {SUBSCRIBE, "{\"stream\":\"a\\\\b\"}", "subscribe: \"stream\" must be"},
      {SUBSCRIBE, "{\"stream\":\"a b\"}", "subscribe: \"stream\" must be"},
      {SUBSCRIBE, "{\"stream\":\"" NAME65 "\"}", "subscribe: \"stream\""},
      {SUBSCRIBE, "{\"all\":1}", "subscribe: \"all\" must be true or false"},
      {SUBSCRIBE, "{\"all\":\"true\"}", "subscribe: \"all\" must be"},
      {SUBSCRIBE, "{\"all\":true,\"outputs\":[]}", "subscribe: \"outputs\""},
      {SUBSCRIBE, "{\"all\":true,\"outputs\":\"text\"}", "\"outputs\""},
      {SUBSCRIBE, "{\"all\":true,\"outputs\":[\"word\"]}", "\"outputs\""},
      {SUBSCRIBE, "{\"all\":true,\"outputs\":[\"words\",\"words\"]}",
       "\"outputs\""},
      {SUBSCRIBE, "{\"all\":true,\"outputs\":[\"text\",\"text\"]}",
       "subscribe: \"outputs\" must be a non-empty array of distinct"},
      {SUBSCRIBE, "{\"all\":true,\"outputs\":[1]}", "\"outputs\""},
      {SUBSCRIBE, "{\"all\":true,\"outputs\":[\"Text\"]}", "\"outputs\""},
      {SUBSCRIBE, "{\"all\":true,\"dtype\":\"f64\"}",
       "subscribe: \"dtype\" must be \"f32\" or \"f16\""},
      {SUBSCRIBE, "{\"all\":true,\"dtype\":16}", "subscribe: \"dtype\""},
      {SUBSCRIBE, "{\"all\":true,\"dtype\":\"F32\"}", "subscribe: \"dtype\""},
      {SUBSCRIBE, "{\"all\":true,\"vocabulary\":[\"a\"]}",
       "subscribe: \"vocabulary\" needs \"words\" among the outputs"},
      {SUBSCRIBE, WORDS_SUB("[]"), "subscribe: \"vocabulary\" must be an array"},
      {SUBSCRIBE, WORDS_SUB("\"a\""), "\"vocabulary\" must be an array"},
      {SUBSCRIBE, WORDS_SUB("[\"\"]"), "\"vocabulary\" must be an array"},
      {SUBSCRIBE, WORDS_SUB("[\"a b\"]"), "\"vocabulary\" must be an array"},
      {SUBSCRIBE, WORDS_SUB("[\"a,b\"]"), "\"vocabulary\" must be an array"},
      {SUBSCRIBE, WORDS_SUB("[\"a\\tb\"]"), "\"vocabulary\" must be"},
      {SUBSCRIBE, WORDS_SUB("[\"a\\u007f\"]"), "\"vocabulary\" must be"},
      /* C1 controls too: U+009B is CSI (it went through to every
       * subscriber's terminal as a word). */
      {SUBSCRIBE, WORDS_SUB("[\"a\\u009b2J\"]"), "\"vocabulary\" must be"},
      {SUBSCRIBE, WORDS_SUB("[\"a\xc2\x85\"]"), "\"vocabulary\" must be"},
      {SUBSCRIBE, WORDS_SUB("[\"" NAME65 "\"]"), "\"vocabulary\" must be"},
      {SUBSCRIBE, WORDS_SUB("[5]"), "\"vocabulary\" must be an array"},
      {SUBSCRIBE, WORDS_SUB(WORDS65), "\"vocabulary\" must be an array"},
      {SUBSCRIBE, "{\"all\":true,\"outputs\":[\"words\"],\"boost\":1}",
       "subscribe: \"boost\" needs a \"vocabulary\""},
      {SUBSCRIBE, WORDS_SUB("[\"a\"],\"boost\":-1"),
       "subscribe: \"boost\" must be a number from 0 to 100"},
      {SUBSCRIBE, WORDS_SUB("[\"a\"],\"boost\":101"), "\"boost\" must be"},
      {SUBSCRIBE, WORDS_SUB("[\"a\"],\"boost\":\"5\""), "\"boost\" must be"},
      {AUDIO_OPEN,
       OPEN("\"sample_rate\":8000,\"channels\":1,\"format\":\"s16\","
            "\"vocabulary\":[\"\"]"),
       "audio_open: \"vocabulary\" must be an array"},
      {STATS, "[]", "stats: the payload must be a JSON object"},
      {STATS, "{\"streams_before\":-1}",
       "stats: \"streams_before\" must be an integer 0..4294967295"},
      {STATS, "{\"clients_before\":\"4\"}",
       "stats: \"clients_before\" must be an integer 0..4294967295"},
      {STATS, "{\"streams_before\":4294967296}", "\"streams_before\""},
      {UNSUBSCRIBE, "{}", "unsubscribe: \"subscription\" is missing"},
      {UNSUBSCRIBE, "{\"subscription\":0}",
       "unsubscribe: \"subscription\" must be an integer 1..4294967295"},
      {UNSUBSCRIBE, "{\"subscription\":4294967296}", "\"subscription\""},
      {UNSUBSCRIBE, "{\"subscription\":-1}", "\"subscription\""},
      {UNSUBSCRIBE, "{\"subscription\":1.5}", "\"subscription\""},
      {UNSUBSCRIBE, "{\"subscription\":1e0}", "\"subscription\""},
      {UNSUBSCRIBE, "{\"subscription\":\"5\"}", "\"subscription\""},
      {UNSUBSCRIBE, "{\"subscription\":null}", "\"subscription\""},
      {AUDIO_OPEN, "{}", "audio_open: \"sample_rate\" is missing"},
      {AUDIO_OPEN, OPEN("\"sample_rate\":3999,\"channels\":1,\"format\":\"s16\""),
       "audio_open: \"sample_rate\" must be an integer 4000..768000"},
      {AUDIO_OPEN,
       OPEN("\"sample_rate\":768001,\"channels\":1,\"format\":\"s16\""),
       "audio_open: \"sample_rate\" must be an integer 4000..768000"},
      {AUDIO_OPEN,
       OPEN("\"sample_rate\":8000.0,\"channels\":1,\"format\":\"s16\""),
       "\"sample_rate\""},
      {AUDIO_OPEN,
       OPEN("\"sample_rate\":\"8000\",\"channels\":1,\"format\":\"s16\""),
       "\"sample_rate\""},
      {AUDIO_OPEN, OPEN("\"sample_rate\":8000,\"channels\":0,\"format\":\"s16\""),
       "audio_open: \"channels\" must be an integer 1..256"},
      {AUDIO_OPEN,
       OPEN("\"sample_rate\":8000,\"channels\":257,\"format\":\"s16\""),
       "audio_open: \"channels\" must be an integer 1..256"},
      {AUDIO_OPEN, OPEN("\"sample_rate\":8000,\"format\":\"s16\""),
       "audio_open: \"channels\" is missing"},
      {AUDIO_OPEN, OPEN("\"sample_rate\":8000,\"channels\":1,\"format\":\"u8\""),
       "audio_open: \"format\" must be \"s16\" or \"f32\""},
      {AUDIO_OPEN, OPEN("\"sample_rate\":8000,\"channels\":1,\"format\":16"),
       "audio_open: \"format\" must be"},
      {AUDIO_OPEN, OPEN("\"sample_rate\":8000,\"channels\":1"),
       "audio_open: \"format\" is missing"},
      {AUDIO_OPEN, OPEN("\"name\":\"a/b\",\"sample_rate\":8000,\"channels\":1,"
                        "\"format\":\"s16\""),
       "audio_open: \"name\" must be 1 to 64 bytes"},
      {AUDIO_OPEN, OPEN("\"name\":\"" NAME65 "\",\"sample_rate\":8000,"
                        "\"channels\":1,\"format\":\"s16\""),
       "audio_open: \"name\""},
      {AUDIO_OPEN, OPEN("\"name\":\"\",\"sample_rate\":8000,\"channels\":1,"
                        "\"format\":\"s16\""),
       "audio_open: \"name\""},
      {AUDIO_OPEN, OPEN("\"name\":7,\"sample_rate\":8000,\"channels\":1,"
                        "\"format\":\"s16\""),
       "audio_open: \"name\""},
      {AUDIO_OPEN, OPEN("\"name\":\"caf\\u00e9\",\"sample_rate\":8000,"
                        "\"channels\":1,\"format\":\"s16\""),
       "audio_open: \"name\""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char why[256] = "";
    int rc = decode_request(cases[i].which, cases[i].text, why, sizeof why);
    if (rc != AURAL_PROTO_EBAD_PAYLOAD)
      fail_msg("accepted: %s", cases[i].text);
    if (strstr(why, cases[i].why) == NULL)
      fail_msg("%s: why is \"%s\", expected \"%s\"", cases[i].text, why,
               cases[i].why);
  }
  /* why may be NULL or short; it is always terminated. */
  assert_int_equal(decode_request(SUBSCRIBE, "{}", NULL, 0),
                   AURAL_PROTO_EBAD_PAYLOAD);
  char why[8];
  memset(why, 'x', sizeof why);
  assert_int_equal(decode_request(SUBSCRIBE, "{}", why, sizeof why),
                   AURAL_PROTO_EBAD_PAYLOAD);
  assert_string_equal(why, "subscri");
  memset(why, 'x', sizeof why);
  assert_int_equal(decode_request(SUBSCRIBE, "{}", why, 0),
                   AURAL_PROTO_EBAD_PAYLOAD);
  assert_int_equal(why[0], 'x');
}

static void test_request_limits_accepted(void **state) {
  (void)state;
  const char *ok[][2] = {
      {"1", "{\"versions\":[31],\"client\":\"" NAME64 "\"}"},
      {"2", "{\"stream\":\"" NAME64 "\",\"outputs\":[\"text\",\"embeddings\","
            "\"logits\"]}"},
      {"3", "{\"subscription\":4294967295}"},
      {"4", OPEN("\"name\":\"" NAME64 "\",\"sample_rate\":4000,"
                 "\"channels\":256,\"format\":\"f32\"")},
      {"4", OPEN("\"sample_rate\":768000,\"channels\":1,\"format\":\"s16\"")},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    char why[256] = "";
    if (decode_request(ok[i][0][0] - '1', ok[i][1], why, sizeof why) != 0)
      fail_msg("refused %s: %s", ok[i][1], why);
  }
}

/* --- CHUNK ------------------------------------------------------------------- */

static const char chunk_text[] = "h\xc3\xa9llo w\xc3\xb6rld";

static aural_chunk_header chunk_header(uint16_t outputs, uint8_t dtype) {
  return (aural_chunk_header){
      .seq = 0x0102030405060708u,
      .first_frame = 50ull * 0x0102030405060708u,
      .n_frames = 3,
      .flags = AURAL_CHUNK_FINAL,
      .start_us = -5,
      .capture_us = INT64_MIN,
      .ready_us = INT64_MAX,
      .emitted_us = 1795000000000000,
      .d_model = 4,
      .vocab_size = 5,
      .outputs = outputs,
      .dtype = dtype,
      .text_bytes = outputs & AURAL_OUT_TEXT ? sizeof chunk_text - 1 : 0,
  };
}

/* Writes the payload of a chunk with header c into b (BUF_BYTES): its
 * sections hold the bytes 0, 1, 2, ... and then the text. */
static size_t build_chunk(uint8_t *b, const aural_chunk_header *c) {
  size_t n = aural_chunk_payload_bytes(c);
  assert_true(n >= AURAL_PROTO_CHUNK_HEADER_BYTES && n <= BUF_BYTES);
  aural_chunk_put_header(b, c);
  for (size_t i = AURAL_PROTO_CHUNK_HEADER_BYTES; i < n; i++)
    b[i] = (uint8_t)i;
  if (c->outputs & AURAL_OUT_TEXT)
    memcpy(b + n - c->text_bytes, chunk_text, c->text_bytes);
  return n;
}

static void test_chunk_round_trip(void **state) {
  (void)state;
  for (uint16_t outputs = 0; outputs <= AURAL_OUT_ALL; outputs++)
    for (uint8_t dtype = 0; dtype < 2; dtype++) {
      aural_chunk_header c = chunk_header(outputs, dtype), g;
      uint8_t b[BUF_BYTES];
      size_t n = build_chunk(b, &c);
      size_t elem = dtype ? 2 : 4;
      size_t emb_bytes = outputs & AURAL_OUT_EMBEDDINGS ? 3 * 4 * elem : 0;
      size_t logit_bytes = outputs & AURAL_OUT_LOGITS ? 3 * 5 * elem : 0;
      assert_int_equal(n, 72 + emb_bytes + logit_bytes + c.text_bytes);

      const uint8_t *emb, *logits;
      const char *text;
      assert_int_equal(aural_chunk_decode(b, n, &g, &emb, &logits, &text), 0);
      assert_true(g.seq == c.seq && g.first_frame == c.first_frame);
      assert_int_equal(g.n_frames, 3);
      assert_int_equal(g.flags, AURAL_CHUNK_FINAL);
      assert_true(g.start_us == -5 && g.capture_us == INT64_MIN &&
                  g.ready_us == INT64_MAX &&
                  g.emitted_us == 1795000000000000);
      assert_int_equal(g.d_model, 4);
      assert_int_equal(g.vocab_size, 5);
      assert_int_equal(g.outputs, outputs);
      assert_int_equal(g.dtype, dtype);
      assert_int_equal(g.text_bytes, c.text_bytes);
      assert_true(emb == (emb_bytes ? b + 72 : NULL));
      assert_true(logits == (logit_bytes ? b + 72 + emb_bytes : NULL));
      if (outputs & AURAL_OUT_TEXT) {
        assert_true((const uint8_t *)text == b + 72 + emb_bytes + logit_bytes);
        assert_memory_equal(text, chunk_text, g.text_bytes);
      } else {
        assert_null(text);
      }
      /* The output pointers are optional. */
      assert_int_equal(aural_chunk_decode(b, n, &g, NULL, NULL, NULL), 0);
    }
}

/* The fixed part's byte layout of PROTOCOL.md §5. */
static void test_chunk_header_bytes(void **state) {
  (void)state;
  aural_chunk_header c = chunk_header(AURAL_OUT_ALL, AURAL_DTYPE_F16);
  uint8_t b[72];
  aural_chunk_put_header(b, &c);
  assert_int_equal(aural_get_u64(b + 0), 0x0102030405060708u);
  assert_int_equal(b[0], 0x08);
  assert_int_equal(aural_get_u32(b + 16), 3);
  assert_int_equal(aural_get_u32(b + 20), 1);
  assert_int_equal(aural_get_u64(b + 24), (uint64_t)-5);
  assert_int_equal(aural_get_u64(b + 32), 0x8000000000000000u);
  assert_int_equal(aural_get_u32(b + 56), 4);
  assert_int_equal(aural_get_u32(b + 60), 5);
  assert_int_equal(aural_get_u16(b + 64), 7);
  assert_int_equal(b[66], 1);
  assert_int_equal(b[67], 0);
  assert_int_equal(aural_get_u32(b + 68), sizeof chunk_text - 1);
}

static void expect_bad_chunk(const uint8_t *b, size_t n) {
  aural_chunk_header g;
  const uint8_t *emb = b, *logits = b;
  const char *text = "";
  assert_int_equal(aural_chunk_decode(b, n, &g, &emb, &logits, &text),
                   AURAL_PROTO_EBAD_PAYLOAD);
  assert_null(emb);
  assert_null(logits);
  assert_null(text);
}

static void test_chunk_wrong_lengths(void **state) {
  (void)state;
  for (uint16_t outputs = 0; outputs <= AURAL_OUT_ALL; outputs++)
    for (uint8_t dtype = 0; dtype < 2; dtype++) {
      aural_chunk_header c = chunk_header(outputs, dtype);
      uint8_t b[BUF_BYTES];
      size_t n = build_chunk(b, &c);
      /* The payload one byte short or long. */
      expect_bad_chunk(b, n - 1);
      expect_bad_chunk(b, n + 1);
      /* Each section's size in the header one unit off. */
      for (int delta = -1; delta <= 1; delta += 2) {
        aural_chunk_header h = c;
        h.d_model = (uint32_t)((int)h.d_model + delta);
        aural_chunk_put_header(b, &h);
        if (outputs & AURAL_OUT_EMBEDDINGS) expect_bad_chunk(b, n);
        h = c;
        h.vocab_size = (uint32_t)((int)h.vocab_size + delta);
        aural_chunk_put_header(b, &h);
        if (outputs & AURAL_OUT_LOGITS) expect_bad_chunk(b, n);
        h = c;
        h.text_bytes = (uint32_t)((int)h.text_bytes + delta);
        aural_chunk_put_header(b, &h);
        if (outputs & AURAL_OUT_TEXT) expect_bad_chunk(b, n);
        h = c;
        h.n_frames = (uint32_t)((int)h.n_frames + delta);
        aural_chunk_put_header(b, &h);
        if (outputs & (AURAL_OUT_EMBEDDINGS | AURAL_OUT_LOGITS))
          expect_bad_chunk(b, n);
      }
      aural_chunk_put_header(b, &c);
    }
  /* Truncated below the fixed part. */
  aural_chunk_header c = chunk_header(0, 0);
  uint8_t b[BUF_BYTES];
  size_t n = build_chunk(b, &c);
  assert_int_equal(n, 72);
  for (size_t len = 0; len < 72; len++) expect_bad_chunk(b, len);
  expect_bad_chunk(NULL, 0);
}

static void test_chunk_bad_fields(void **state) {
  (void)state;
  uint8_t b[BUF_BYTES];
  aural_chunk_header c = chunk_header(AURAL_OUT_ALL, AURAL_DTYPE_F32);
  size_t n = build_chunk(b, &c);
  aural_chunk_header g;
  assert_int_equal(aural_chunk_decode(b, n, &g, NULL, NULL, NULL), 0);

  b[67] = 1; /* reserved */
  expect_bad_chunk(b, n);
  b[67] = 0;
  b[66] = 2; /* dtype */
  expect_bad_chunk(b, n);
  b[66] = 0;
  aural_put_u16(b + 64, 0x0F); /* an unknown output bit */
  expect_bad_chunk(b, n);
  aural_put_u16(b + 64, 0x8007);
  expect_bad_chunk(b, n);
  aural_put_u16(b + 64, 7);
  aural_put_u32(b + 16, 0); /* n_frames */
  expect_bad_chunk(b, n);
  aural_put_u32(b + 16, 3);
  {
    /* An empty chunk is valid only as the FINAL end marker. */
    aural_chunk_header e = {.seq = 4, .first_frame = 200, .n_frames = 0,
                            .d_model = 8, .vocab_size = 3,
                            .outputs = AURAL_OUT_EMBEDDINGS,
                            .flags = AURAL_CHUNK_FINAL};
    uint8_t eb[AURAL_PROTO_CHUNK_HEADER_BYTES];
    assert_int_equal(aural_chunk_payload_bytes(&e), sizeof eb);
    aural_chunk_put_header(eb, &e);
    aural_chunk_header eg;
    assert_int_equal(aural_chunk_decode(eb, sizeof eb, &eg, NULL, NULL, NULL),
                     0);
    assert_int_equal(eg.n_frames, 0);
    e.flags = 0;
    aural_chunk_put_header(eb, &e);
    expect_bad_chunk(eb, sizeof eb);
  }
  b[n - 1] = 0xFF; /* the text is not UTF-8 */
  expect_bad_chunk(b, n);
  b[n - 1] = 0xC3; /* a truncated sequence at the end */
  expect_bad_chunk(b, n);
  b[n - 1] = 'd';
  assert_int_equal(aural_chunk_decode(b, n, &g, NULL, NULL, NULL), 0);

  /* text_bytes without the text bit. */
  c = chunk_header(AURAL_OUT_EMBEDDINGS, AURAL_DTYPE_F32);
  n = build_chunk(b, &c);
  aural_put_u32(b + 68, 1);
  expect_bad_chunk(b, n + 1);
  /* An empty text section. */
  c = chunk_header(AURAL_OUT_TEXT, AURAL_DTYPE_F16);
  c.text_bytes = 0;
  n = build_chunk(b, &c);
  const char *text = NULL;
  assert_int_equal(aural_chunk_decode(b, n, &g, NULL, NULL, &text), 0);
  assert_true((const uint8_t *)text == b + 72);
}

/* Sizes past 32 bits are refused, including those that would wrap to a
 * small length in 32- or 64-bit arithmetic. */
static void test_chunk_overflow(void **state) {
  (void)state;
  static const struct {
    uint32_t n_frames, d_model, vocab_size, text_bytes;
    uint16_t outputs;
    uint8_t dtype;
  } cases[] = {
      {0xFFFFFFFFu, 0xFFFFFFFFu, 0, 0, AURAL_OUT_EMBEDDINGS, 0},
      {1, 0xFFFFFFFFu, 0, 0, AURAL_OUT_EMBEDDINGS, 0},
      {1, 0x40000000u, 0, 0, AURAL_OUT_EMBEDDINGS, 0},
      {0x10000u, 0x10000u, 0, 0, AURAL_OUT_EMBEDDINGS, 0}, /* 2^34: wraps */
      {0x10000u, 0x10000u, 0, 0, AURAL_OUT_EMBEDDINGS, 1},
      {0x40000000u, 4, 0, 0, AURAL_OUT_EMBEDDINGS, 0},
      {0xFFFFFFFFu, 0, 0xFFFFFFFFu, 0, AURAL_OUT_LOGITS, 1},
      {1, 0x20000000u, 0x20000000u, 0, 3, 0}, /* 2^31 + 2^31 */
      {1, 0, 0, 0xFFFFFFFFu, AURAL_OUT_TEXT, 0},
      {1, 0x3FFFFFF0u, 0, 0x80, AURAL_OUT_EMBEDDINGS | AURAL_OUT_TEXT, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aural_chunk_header c = chunk_header(cases[i].outputs, cases[i].dtype);
    c.n_frames = cases[i].n_frames;
    c.d_model = cases[i].d_model;
    c.vocab_size = cases[i].vocab_size;
    c.text_bytes = cases[i].text_bytes;
    assert_int_equal(aural_chunk_payload_bytes(&c), 0);
    uint8_t b[256];
    memset(b, 0, sizeof b);
    aural_chunk_put_header(b, &c);
    for (size_t n = 72; n <= sizeof b; n += 8) expect_bad_chunk(b, n);
  }
  /* The largest that fits is still counted. */
  aural_chunk_header c = chunk_header(AURAL_OUT_EMBEDDINGS, 0);
  c.n_frames = 1;
  c.d_model = (UINT32_MAX - 72) / 4;
  assert_int_equal(aural_chunk_payload_bytes(&c), 72 + (size_t)c.d_model * 4);
  c.dtype = 2;
  assert_int_equal(aural_chunk_payload_bytes(&c), 0);
}

/* --- f16 ----------------------------------------------------------------------- */

static float bits_f32(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static void test_f16_known_values(void **state) {
  (void)state;
  static const struct {
    float f;
    uint16_t h;
  } cases[] = {
      {1.0f, 0x3C00},
      {-2.0f, 0xC000},
      {0.5f, 0x3800},
      {65504.0f, 0x7BFF},
      {65519.99f, 0x7BFF},
      {65520.0f, 0x7C00}, /* rounds to infinity */
      {1e10f, 0x7C00},
      {-1e10f, 0xFC00},
      {0x1p-14f, 0x0400},          /* smallest normal */
      {0x1p-24f, 0x0001},          /* smallest subnormal */
      {0x1p-25f, 0x0000},          /* tie between 0 and 2^-24: even */
      {0x1.000002p-25f, 0x0001},   /* just above the tie */
      {0x1.8p-24f, 0x0002},        /* tie between 1 and 2 units: even */
      {0x1.4p-23f, 0x0002},        /* 2.5 units: tie, even */
      {0x1.cp-23f, 0x0004},        /* 3.5 units: tie, even */
      {0x1.ff8p-15f, 0x03FF},      /* largest subnormal */
      {0x1.ffcp-15f, 0x0400},      /* its tie rounds up to the smallest normal */
      {1.0f + 0x1p-11f, 0x3C00},   /* tie: stays on the even 1.0 */
      {1.0f + 0x3p-11f, 0x3C02},   /* tie: up to the even one */
      {1.0f + 0x1.004p-11f, 0x3C01},     /* just above the tie */
      {0x1p-30f, 0x0000},
      {-0x1p-30f, 0x8000},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {0.1f, 0x2E66},
      {3.140625f, 0x4248},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint16_t h = aural_f32_to_f16(cases[i].f);
    if (h != cases[i].h)
      fail_msg("%a -> 0x%04x, want 0x%04x", (double)cases[i].f, h,
               cases[i].h);
  }
  assert_int_equal(aural_f32_to_f16(INFINITY), 0x7C00);
  assert_int_equal(aural_f32_to_f16(-INFINITY), 0xFC00);
  assert_true(aural_f16_to_f32(0x3C00) == 1.0f);
  assert_true(aural_f16_to_f32(0x7BFF) == 65504.0f);
  assert_true(aural_f16_to_f32(0x0001) == 0x1p-24f);
  assert_true(aural_f16_to_f32(0x03FF) == 0x1.ff8p-15f);
  assert_true(isinf(aural_f16_to_f32(0xFC00)) &&
              aural_f16_to_f32(0xFC00) < 0);
  float nz = aural_f16_to_f32(0x8000);
  assert_true(nz == 0.0f && signbit(nz));

  /* NaN stays NaN both ways, including one whose payload is in the low
   * bits only, and keeps its sign. */
  const uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFFC00000u,
                           0x7FBFFFFFu};
  for (size_t i = 0; i < 4; i++) {
    uint16_t h = aural_f32_to_f16(bits_f32(nans[i]));
    assert_int_equal(h & 0x7C00, 0x7C00);
    assert_int_not_equal(h & 0x03FF, 0);
    assert_int_equal(h >> 15, nans[i] >> 31);
    assert_true(isnan(aural_f16_to_f32(h)));
  }
  assert_true(isnan(aural_f16_to_f32(0x7C01)));
  assert_true(isnan(aural_f16_to_f32(0xFE00)));
}

/* Every half survives half -> float -> half (NaNs stay NaNs). */
static void test_f16_every_half_round_trips(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = aural_f16_to_f32((uint16_t)h);
    uint16_t back = aural_f32_to_f16(f);
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0) {
      assert_true(isnan(f));
      assert_int_equal(back & 0x7C00, 0x7C00);
      assert_int_not_equal(back & 0x3FF, 0);
    } else if (back != h) {
      fail_msg("0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
  }
}

/* Against an oracle: the nearest half in double arithmetic, ties to the
 * even one, for random finite floats across the whole range. */
static void test_f16_nearest_oracle(void **state) {
  (void)state;
  uint32_t rng = 2463534242u;
  for (int i = 0; i < 200000; i++) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    /* Exponents around the half range more often than not. */
    uint32_t x = rng;
    if (i % 2) x = (x & 0x807FFFFFu) | ((100u + (x >> 23) % 45u) << 23);
    float f = bits_f32(x);
    if (!isfinite(f)) continue;
    uint16_t h = aural_f32_to_f16(f);
    double a = fabs((double)f), got = fabs((double)aural_f16_to_f32(h));
    assert_int_equal(h >> 15, x >> 31);
    if (a >= 65520.0) {
      assert_int_equal(h & 0x7FFF, 0x7C00);
      continue;
    }
    /* Neither neighbour of the result is nearer, and a tie went even. */
    uint16_t m = h & 0x7FFF;
    double err = fabs(got - a);
    if (m > 0) {
      double lo = (double)aural_f16_to_f32((uint16_t)(m - 1));
      assert_true(fabs(lo - a) > err || (fabs(lo - a) == err && !(m & 1)));
    }
    if (m < 0x7BFF) {
      double hi = (double)aural_f16_to_f32((uint16_t)(m + 1));
      assert_true(fabs(hi - a) > err || (fabs(hi - a) == err && !(m & 1)));
    }
  }
}

/* --- JSON writer ---------------------------------------------------------------- */

static void test_jw_structure_and_escaping(void **state) {
  (void)state;
  char buf[512];
  aural_jw w;
  aural_jw_init(&w, buf, sizeof buf);
  aural_jw_begin_object(&w);
  aural_jw_key(&w, "s");
  aural_jw_string(&w, "q\" b\\ n\n t\t \x01\x1f \x7f caf\xc3\xa9 bad\xff"
                      "\xc0\xaf end");
  aural_jw_key(&w, "k\"ey");
  aural_jw_begin_array(&w);
  aural_jw_int(&w, INT64_MIN);
  aural_jw_int(&w, INT64_MAX);
  aural_jw_uint(&w, UINT64_MAX);
  aural_jw_bool(&w, true);
  aural_jw_bool(&w, false);
  aural_jw_null(&w);
  aural_jw_begin_object(&w);
  aural_jw_end_object(&w);
  aural_jw_begin_array(&w);
  aural_jw_end_array(&w);
  aural_jw_string_n(&w, "ab\0c", 4);
  aural_jw_string(&w, NULL);
  aural_jw_end_array(&w);
  aural_jw_key(&w, "d");
  aural_jw_begin_array(&w);
  aural_jw_double(&w, 0.1);
  aural_jw_double(&w, 1.0);
  aural_jw_double(&w, -0.0);
  aural_jw_double(&w, 12.5);
  aural_jw_double(&w, 1e300);
  aural_jw_double(&w, NAN);
  aural_jw_double(&w, -INFINITY);
  aural_jw_end_array(&w);
  aural_jw_end_object(&w);
  long n = aural_jw_finish(&w);
  const char want[] =
      "{\"s\":\"q\\\" b\\\\ n\\u000a t\\u0009 \\u0001\\u001f \x7f caf\xc3\xa9"
      " bad\\ufffd\\ufffd\\ufffd end\",\"k\\\"ey\":[-9223372036854775808,"
      "9223372036854775807,18446744073709551615,true,false,null,{},[],"
      "\"ab\\u0000c\",\"\"],\"d\":[0.1,1,-0,12.5,1e+300,null,null]}";
  assert_int_equal(n, (long)strlen(want));
  assert_memory_equal(buf, want, (size_t)n);
  aural_json js;
  char why[128] = "";
  assert_int_equal(aural_json_parse(&js, buf, (size_t)n, why, sizeof why), 0);
}

/* Random doubles come back bit for bit through the writer and reader. */
static void test_jw_double_round_trip(void **state) {
  (void)state;
  uint64_t rng = 88172645463325252u;
  for (int i = 0; i < 20000; i++) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    double v;
    memcpy(&v, &rng, sizeof v);
    if (!isfinite(v)) continue;
    char buf[64];
    aural_jw w;
    aural_jw_init(&w, buf, sizeof buf);
    aural_jw_double(&w, v);
    long n = aural_jw_finish(&w);
    assert_true(n > 0 && n <= 24);
    aural_json js;
    assert_int_equal(aural_json_parse(&js, buf, (size_t)n, NULL, 0), 0);
    double back;
    assert_int_equal(aural_json_double(&js, 0, &back), 0);
    assert_memory_equal(&back, &v, sizeof v);
  }
}

/* Each capacity short of the whole leaves a sticky overflow and writes
 * nothing past the capacity. */
static void test_jw_overflow(void **state) {
  (void)state;
  char full[128];
  size_t need = 0;
  for (size_t cap = 0; cap <= sizeof full; cap++) {
    char buf[sizeof full + 8];
    memset(buf, '#', sizeof buf);
    aural_jw w;
    aural_jw_init(&w, buf, cap);
    aural_jw_begin_object(&w);
    aural_jw_key(&w, "name");
    aural_jw_string(&w, "a\"b\n");
    aural_jw_key(&w, "n");
    aural_jw_int(&w, -12345);
    aural_jw_key(&w, "x");
    aural_jw_double(&w, 0.25);
    aural_jw_end_object(&w);
    long n = aural_jw_finish(&w);
    for (size_t i = cap; i < sizeof buf; i++) assert_int_equal(buf[i], '#');
    if (n >= 0) {
      need = cap;
      assert_int_equal((size_t)n, cap);
      memcpy(full, buf, cap);
      break;
    }
    assert_true(w.overflow);
    /* Sticky: a short value that would fit changes nothing. */
    size_t len = w.len;
    aural_jw_null(&w);
    assert_int_equal(w.len, len);
    assert_int_equal(aural_jw_finish(&w), -1);
  }
  const char want[] = "{\"name\":\"a\\\"b\\u000a\",\"n\":-12345,\"x\":0.25}";
  assert_int_equal(need, strlen(want));
  assert_memory_equal(full, want, need);

  aural_jw w;
  aural_jw_init(&w, NULL, 100);
  aural_jw_int(&w, 1);
  assert_int_equal(aural_jw_finish(&w), -1);
  aural_jw_init(&w, NULL, 0);
  assert_int_equal(aural_jw_finish(&w), 0);
}

/* --- server messages ---------------------------------------------------------- */

/* The JSON payload of an encoded message as a NUL-terminated string. */
static const char *payload_text(const uint8_t *b, size_t n, int type,
                                uint32_t stream_id) {
  static char text[BUF_BYTES];
  size_t pn;
  const uint8_t *p = payload_of(b, n, type, stream_id, &pn);
  assert_true(pn < sizeof text);
  memcpy(text, p, pn);
  text[pn] = '\0';
  return text;
}

/* The bytes aurald wrote for each message before the codec built them:
 * the encoders keep them, member order included. */
static void test_server_message_bytes(void **state) {
  (void)state;
  uint8_t b[BUF_BYTES];
  aural_msg_subscribed sd = {.subscription = 5,
                             .stream = "mic",
                             .outputs = AURAL_OUT_EMBEDDINGS | AURAL_OUT_TEXT};
  size_t n = aural_proto_encode_subscribed(b, sizeof b, &sd);
  assert_string_equal(payload_text(b, n, AURAL_MSG_SUBSCRIBED, 0),
                      "{\"subscription\":5,\"stream\":\"mic\",\"all\":false,"
                      "\"outputs\":[\"embeddings\",\"text\"],\"dtype\":\"f32\"}");
  sd = (aural_msg_subscribed){.subscription = 1, .all = true,
                              .stream = "ignored", .outputs = AURAL_OUT_LOGITS,
                              .dtype = AURAL_DTYPE_F16};
  n = aural_proto_encode_subscribed(b, sizeof b, &sd);
  assert_string_equal(payload_text(b, n, AURAL_MSG_SUBSCRIBED, 0),
                      "{\"subscription\":1,\"stream\":null,\"all\":true,"
                      "\"outputs\":[\"logits\"],\"dtype\":\"f16\"}");
  n = aural_proto_encode_unsubscribed(b, sizeof b, 5);
  assert_string_equal(payload_text(b, n, AURAL_MSG_UNSUBSCRIBED, 0),
                      "{\"subscription\":5}");
  aural_msg_stream_started ss = {.name = "mic", .source = AURAL_SOURCE_MIC,
                                 .sample_rate = 48000, .channels = 1,
                                 .start_us = 1795000000000000,
                                 .next_chunk = 0};
  n = aural_proto_encode_stream_started(b, sizeof b, 3, &ss);
  assert_string_equal(payload_text(b, n, AURAL_MSG_STREAM_STARTED, 3),
                      "{\"name\":\"mic\",\"source\":\"mic\",\"sample_rate\":"
                      "48000,\"channels\":1,\"start_us\":1795000000000000,"
                      "\"next_chunk\":0}");
  aural_msg_stream_ended se = {.name = "mic", .reason = AURAL_END_EOF,
                               .frames = 740, .chunks = 15};
  n = aural_proto_encode_stream_ended(b, sizeof b, 3, &se);
  assert_string_equal(payload_text(b, n, AURAL_MSG_STREAM_ENDED, 3),
                      "{\"name\":\"mic\",\"reason\":\"eof\",\"message\":\"\","
                      "\"frames\":740,\"chunks\":15}");
  aural_msg_gap g = {.first_chunk = 40, .n_chunks = 12};
  n = aural_proto_encode_gap(b, sizeof b, 9, &g);
  assert_string_equal(payload_text(b, n, AURAL_MSG_GAP, 9),
                      "{\"first_chunk\":40,\"n_chunks\":12,\"reason\":"
                      "\"queue_full\"}");
  aural_msg_audio_opened ao = {.stream = 9, .name = "call-17"};
  n = aural_proto_encode_audio_opened(b, sizeof b, &ao);
  assert_string_equal(payload_text(b, n, AURAL_MSG_AUDIO_OPENED, 9),
                      "{\"stream\":9,\"name\":\"call-17\"}");
  aural_msg_audio_closed ac = {.frames = 740, .chunks = 15};
  n = aural_proto_encode_audio_closed(b, sizeof b, 9, &ac);
  assert_string_equal(payload_text(b, n, AURAL_MSG_AUDIO_CLOSED, 9),
                      "{\"frames\":740,\"chunks\":15}");
  aural_msg_welcome w = {.version = 1, .server = "aurald 0.1.0",
                         .max_request_bytes = 1048576,
                         .max_message_bytes = 67108864,
                         .model = {.sample_rate = 16000, .n_mels = 80,
                                   .frame_ms = 10, .d_model = 256,
                                   .n_layers = 6, .window = 50,
                                   .vocab_size = 2, .chunk_frames = 50},
                         .client = 7};
  const char *const vocab[] = {"<b>", "a\"b"};
  n = aural_proto_encode_welcome(b, sizeof b, &w, vocab);
  assert_string_equal(
      payload_text(b, n, AURAL_MSG_WELCOME, 0),
      "{\"version\":1,\"server\":\"aurald 0.1.0\",\"max_request_bytes\":"
      "1048576,\"max_message_bytes\":67108864,\"model\":{\"sample_rate\":"
      "16000,\"n_mels\":80,\"frame_ms\":10,\"d_model\":256,\"n_layers\":6,"
      "\"window\":50,\"vocab_size\":2,\"vocab\":[\"<b>\",\"a\\\"b\"],"
      "\"chunk_frames\":50},\"client\":7}");
  /* Without a client id the member is left out. */
  w.client = 0;
  n = aural_proto_encode_welcome(b, sizeof b, &w, vocab);
  const char *t = payload_text(b, n, AURAL_MSG_WELCOME, 0);
  assert_null(strstr(t, "client"));
  assert_int_equal(t[strlen(t) - 2], '}');
}

static void test_welcome_round_trip(void **state) {
  (void)state;
  /* More tokens than one JSON payload may hold: the vocabulary is a list. */
  enum { V = 3000 };
  static char tokens[V][16];
  static const char *vocab[V];
  for (int i = 0; i < V; i++) {
    snprintf(tokens[i], sizeof tokens[i], i % 3 ? "t%d" : "\xc3\xa9\"%d\\",
             i);
    vocab[i] = tokens[i];
  }
  size_t cap = 64 * V + 1024;
  uint8_t *b = malloc(cap);
  assert_non_null(b);
  aural_msg_welcome w = {.version = 31, .server = "s\n\xe2\x82\xac",
                         .max_request_bytes = UINT32_MAX,
                         .max_message_bytes = 0,
                         .model = {.sample_rate = 22050.5, .n_mels = 1,
                                   .frame_ms = 12.5, .frame_length_ms = 31.25,
                                   .d_model = UINT32_MAX,
                                   .n_layers = 0, .window = 1,
                                   .vocab_size = V, .chunk_frames = 7,
                                   .words = true, .precision = "bf16"},
                         .client = UINT32_MAX};
  size_t n = aural_proto_encode_welcome(b, cap, &w, vocab), pn;
  const uint8_t *p = payload_of(b, n, AURAL_MSG_WELCOME, 0, &pn);
  aural_msg_welcome d;
  char why[200];
  assert_int_equal(aural_proto_decode_welcome(p, pn, &d, why, sizeof why), 0);
  assert_int_equal(d.version, 31);
  assert_string_equal(d.server, w.server);
  assert_int_equal(d.max_request_bytes, UINT32_MAX);
  assert_int_equal(d.max_message_bytes, 0);
  assert_true(d.model.sample_rate == 22050.5);
  assert_int_equal(d.model.n_mels, 1);
  assert_true(d.model.frame_ms == 12.5);
  assert_true(d.model.frame_length_ms == 31.25);
  assert_int_equal(d.model.d_model, UINT32_MAX);
  assert_int_equal(d.model.n_layers, 0);
  assert_int_equal(d.model.window, 1);
  assert_int_equal(d.model.vocab_size, V);
  assert_int_equal(d.model.chunk_frames, 7);
  assert_true(d.model.words);
  assert_string_equal(d.model.precision, "bf16");
  assert_int_equal(d.client, UINT32_MAX);
  assert_int_equal(d.model.vocab.n_items, V);
  char tok[AURAL_PROTO_TEXT_MAX + 1];
  for (int i = 0; i < V; i++) {
    assert_int_equal(aural_proto_vocab_next(&d.model.vocab, tok, sizeof tok),
                     1);
    assert_string_equal(tok, tokens[i]);
  }
  assert_int_equal(aural_proto_vocab_next(&d.model.vocab, tok, sizeof tok), 0);

  /* No head, no client, no frame length: an empty list, client 0, and
   * frame_length_ms left out (0 when read back). */
  w.model.vocab_size = 0;
  w.client = 0;
  w.model.frame_length_ms = 0;
  w.model.words = false;
  w.model.precision[0] = '\0';
  n = aural_proto_encode_welcome(b, cap, &w, NULL);
  p = payload_of(b, n, AURAL_MSG_WELCOME, 0, &pn);
  char text[1024];
  assert_true(pn < sizeof text);
  memcpy(text, p, pn);
  text[pn] = '\0';
  assert_null(strstr(text, "frame_length_ms"));
  assert_null(strstr(text, "words"));
  assert_null(strstr(text, "precision")); /* f32: left out, as before */
  assert_int_equal(aural_proto_decode_welcome(p, pn, &d, why, sizeof why), 0);
  assert_string_equal(d.model.precision, "");
  assert_int_equal(d.client, 0);
  assert_true(d.model.frame_length_ms == 0);
  assert_int_equal(d.model.vocab.n_items, 0);
  assert_int_equal(aural_proto_vocab_next(&d.model.vocab, tok, sizeof tok), 0);
  /* A token longer than the caller's buffer is an error, not a cut. */
  w.model.vocab_size = 1;
  n = aural_proto_encode_welcome(b, cap, &w, vocab);
  p = payload_of(b, n, AURAL_MSG_WELCOME, 0, &pn);
  assert_int_equal(aural_proto_decode_welcome(p, pn, &d, why, sizeof why), 0);
  assert_true(aural_proto_vocab_next(&d.model.vocab, tok, 3) < 0);
  free(b);
}

static void test_error_decode(void **state) {
  (void)state;
  uint8_t b[BUF_BYTES];
  char msg[AURAL_PROTO_TEXT_MAX + 1];
  memset(msg, 'x', AURAL_PROTO_TEXT_MAX);
  msg[AURAL_PROTO_TEXT_MAX] = '\0';
  msg[0] = '"';
  for (int code = 1; code <= 16; code++) {
    size_t n = aural_proto_encode_error(b, sizeof b, (uint32_t)code,
                                        aural_proto_error_from_wire(code),
                                        msg, code & 1), pn;
    const uint8_t *p = payload_of(b, n, AURAL_MSG_ERROR, (uint32_t)code, &pn);
    aural_msg_error e;
    char why[128];
    assert_int_equal(aural_proto_decode_error(p, pn, &e, why, sizeof why), 0);
    assert_int_equal(e.code, code);
    assert_int_equal(aural_proto_error_from_wire(e.code),
                     aural_proto_error_from_wire(code));
    assert_string_equal(e.name, aural_proto_error_name(code));
    assert_string_equal(e.message, msg);
    assert_int_equal(e.fatal, code & 1);
  }
}

static void test_ping_pong_and_empty_requests(void **state) {
  (void)state;
  uint8_t data[AURAL_PROTO_PING_MAX + 1], b[AURAL_PROTO_HEADER_BYTES + 512];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 13);
  size_t n = aural_proto_encode_ping(b, sizeof b, data, 256), pn;
  const uint8_t *p = payload_of(b, n, AURAL_MSG_PING, 0, &pn);
  assert_memory_equal(p, data, 256);
  assert_int_equal(aural_proto_decode_ping(p, pn, NULL, 0), 0);
  assert_int_equal(aural_proto_encode_ping(b, sizeof b, data, 257), 0);
  n = aural_proto_encode_pong(b, sizeof b, 12, data, 0);
  payload_of(b, n, AURAL_MSG_PONG, 12, &pn);
  assert_int_equal(pn, 0);
  assert_int_equal(aural_proto_encode_pong(b, sizeof b, 0, data, 257), 0);
  char why[128];
  assert_int_equal(aural_proto_decode_pong(data, 257, why, sizeof why),
                   AURAL_PROTO_EBAD_PAYLOAD);
  assert_non_null(strstr(why, "pong: payload of 257 bytes"));
  assert_int_equal(aural_proto_decode_ping(data, 257, why, sizeof why),
                   AURAL_PROTO_EBAD_PAYLOAD);

  n = aural_proto_encode_list_streams(b, sizeof b);
  payload_of(b, n, AURAL_MSG_LIST_STREAMS, 0, &pn);
  assert_int_equal(pn, 0);
  n = aural_proto_encode_audio_close(b, sizeof b, 4);
  payload_of(b, n, AURAL_MSG_AUDIO_CLOSE, 4, &pn);
  assert_int_equal(pn, 0);
  n = aural_proto_encode_audio_data(b, sizeof b, 4, data, 12);
  p = payload_of(b, n, AURAL_MSG_AUDIO_DATA, 4, &pn);
  assert_memory_equal(p, data, 12);
  size_t frames;
  assert_int_equal(aural_proto_decode_audio_data(p, pn, AURAL_SAMPLE_S16, 2,
                                                 &frames, why, sizeof why), 0);
  assert_int_equal(frames, 3);
  assert_int_equal(aural_proto_decode_audio_data(p, pn, AURAL_SAMPLE_F32, 3,
                                                 &frames, why, sizeof why), 0);
  assert_int_equal(frames, 1);
  assert_int_equal(aural_proto_decode_audio_data(p, pn, AURAL_SAMPLE_F32, 2,
                                                 &frames, why, sizeof why),
                   AURAL_PROTO_EBAD_PAYLOAD);
  assert_non_null(strstr(why, "not a whole number of 8-byte frames"));
  assert_int_equal(aural_proto_decode_audio_data(p, 0, AURAL_SAMPLE_S16, 256,
                                                 &frames, why, sizeof why), 0);
  assert_int_equal(frames, 0);
  assert_int_equal(aural_proto_decode_audio_data(p, pn, 2, 1, &frames, why,
                                                 sizeof why),
                   AURAL_PROTO_EBAD_PAYLOAD);
  assert_int_equal(aural_proto_decode_audio_data(p, pn, AURAL_SAMPLE_S16, 0,
                                                 &frames, why, sizeof why),
                   AURAL_PROTO_EBAD_PAYLOAD);
}

static void test_subscribed_round_trip(void **state) {
  (void)state;
  uint8_t b[BUF_BYTES];
  char why[128];
  for (uint32_t outputs = 1; outputs <= AURAL_OUT_ALL; outputs++)
    for (int all = 0; all < 2; all++) {
      aural_msg_subscribed m;
      memset(&m, 0, sizeof m); /* padding too: compared as bytes */
      m.subscription = all ? UINT32_MAX : 1;
      m.all = all;
      m.outputs = outputs;
      m.dtype = (uint8_t)(outputs & 1);
      strcpy(m.stream, all ? "" : NAME64);
      size_t n = aural_proto_encode_subscribed(b, sizeof b, &m), pn;
      const uint8_t *p = payload_of(b, n, AURAL_MSG_SUBSCRIBED, 0, &pn);
      aural_msg_subscribed d;
      assert_int_equal(
          aural_proto_decode_subscribed(p, pn, &d, why, sizeof why), 0);
      assert_memory_equal(&d, &m, sizeof m);
    }
  uint32_t id;
  size_t n = aural_proto_encode_unsubscribed(b, sizeof b, UINT32_MAX), pn;
  const uint8_t *p = payload_of(b, n, AURAL_MSG_UNSUBSCRIBED, 0, &pn);
  assert_int_equal(aural_proto_decode_unsubscribed(p, pn, &id, why, sizeof why),
                   0);
  assert_int_equal(id, UINT32_MAX);
}

static void test_stream_events_round_trip(void **state) {
  (void)state;
  uint8_t b[BUF_BYTES];
  char why[128];
  size_t n, pn;
  const uint8_t *p;
  for (int src = 0; src <= AURAL_SOURCE_CLIENT; src++) {
    aural_msg_stream_started m, d;
    memset(&m, 0, sizeof m); /* padding too: compared as bytes */
    m.source = (uint8_t)src;
    m.sample_rate = src ? 8000 : 44100.25;
    m.channels = src ? 256 : 1;
    m.start_us = src == 1 ? INT64_MIN : INT64_MAX;
    m.next_chunk = src ? INT64_MAX : 0;
    strcpy(m.name, src ? "a" : NAME64);
    n = aural_proto_encode_stream_started(b, sizeof b, UINT32_MAX, &m);
    p = payload_of(b, n, AURAL_MSG_STREAM_STARTED, UINT32_MAX, &pn);
    assert_int_equal(
        aural_proto_decode_stream_started(p, pn, &d, why, sizeof why), 0);
    assert_memory_equal(&d, &m, sizeof m);
  }
  for (int r = AURAL_END_EOF; r <= AURAL_END_SHUTDOWN; r++) {
    aural_msg_stream_ended m, d;
    memset(&m, 0, sizeof m);
    strcpy(m.name, "talk.wav#2");
    m.reason = (uint8_t)r;
    m.frames = r == 1 ? INT64_MAX : 0;
    m.chunks = (uint64_t)r;
    snprintf(m.message, sizeof m.message, "why \"%s\"\t\xc3\xa9",
             aural_end_reason_name(r));
    n = aural_proto_encode_stream_ended(b, sizeof b, 2, &m);
    p = payload_of(b, n, AURAL_MSG_STREAM_ENDED, 2, &pn);
    assert_int_equal(
        aural_proto_decode_stream_ended(p, pn, &d, why, sizeof why), 0);
    assert_memory_equal(&d, &m, sizeof m);
  }
  aural_msg_stream_ended bad = {.name = "x", .reason = 0};
  assert_int_equal(aural_proto_encode_stream_ended(b, sizeof b, 2, &bad), 0);
  assert_null(aural_end_reason_name(0));
  assert_null(aural_end_reason_name(7));
  assert_null(aural_source_name(3));
  assert_string_equal(aural_source_name(AURAL_SOURCE_CLIENT), "client");

  aural_msg_gap g, gd;
  memset(&g, 0, sizeof g);
  g.first_chunk = INT64_MAX;
  g.n_chunks = 1;
  n = aural_proto_encode_gap(b, sizeof b, 1, &g);
  p = payload_of(b, n, AURAL_MSG_GAP, 1, &pn);
  assert_int_equal(aural_proto_decode_gap(p, pn, &gd, why, sizeof why), 0);
  assert_memory_equal(&gd, &g, sizeof g);
  g.reason = 1;
  assert_int_equal(aural_proto_encode_gap(b, sizeof b, 1, &g), 0);

  aural_msg_audio_opened o, od;
  memset(&o, 0, sizeof o);
  o.stream = UINT32_MAX;
  strcpy(o.name, NAME64);
  n = aural_proto_encode_audio_opened(b, sizeof b, &o);
  p = payload_of(b, n, AURAL_MSG_AUDIO_OPENED, UINT32_MAX, &pn);
  assert_int_equal(aural_proto_decode_audio_opened(p, pn, &od, why, sizeof why),
                   0);
  assert_memory_equal(&od, &o, sizeof o);

  aural_msg_audio_closed c = {.frames = INT64_MAX, .chunks = 0}, cd;
  n = aural_proto_encode_audio_closed(b, sizeof b, 8, &c);
  p = payload_of(b, n, AURAL_MSG_AUDIO_CLOSED, 8, &pn);
  assert_int_equal(aural_proto_decode_audio_closed(p, pn, &cd, why, sizeof why),
                   0);
  assert_memory_equal(&cd, &c, sizeof c);
}

/* Entries with every field set from i, padding zero: compared as bytes. */
static aural_msg_stream_info stream_info_of(uint32_t i) {
  aural_msg_stream_info e;
  memset(&e, 0, sizeof e);
  e.id = UINT32_MAX - i;
  e.source = (uint8_t)(i % 3);
  e.sample_rate = 8000.0 + i * 0.5;
  e.channels = i % 257;
  e.held = i % 2;
  e.start_us = i % 2 ? 0 : -(int64_t)i * 1000;
  e.frames = i == 0 ? INT64_MAX : i * 3;
  e.chunks = i;
  snprintf(e.name, sizeof e.name, "stream-%u", i);
  return e;
}

static void test_streams_round_trip(void **state) {
  (void)state;
  enum { N = 700 }; /* past the token limit of one payload */
  size_t cap = N * 256 + 64;
  uint8_t *b = malloc(cap);
  assert_non_null(b);
  aural_msg_writer mw;
  for (int count = 0; count <= N; count += N) {
    aural_proto_streams_begin(&mw, b, cap);
    for (uint32_t i = 0; i < (uint32_t)count; i++) {
      aural_msg_stream_info e = stream_info_of(i);
      aural_proto_streams_add(&mw, &e);
    }
    size_t n = aural_proto_streams_end(&mw), pn;
    const uint8_t *p = payload_of(b, n, AURAL_MSG_STREAMS, 0, &pn);
    aural_msg_streams m;
    char why[128];
    assert_int_equal(aural_proto_decode_streams(p, pn, &m, why, sizeof why),
                     0);
    assert_int_equal(m.streams.n_items, count);
    aural_msg_stream_info d;
    for (uint32_t i = 0; i < (uint32_t)count; i++) {
      aural_msg_stream_info e = stream_info_of(i);
      assert_int_equal(
          aural_proto_streams_next(&m.streams, &d, why, sizeof why), 1);
      assert_memory_equal(&d, &e, sizeof e);
    }
    assert_int_equal(aural_proto_streams_next(&m.streams, &d, why, sizeof why),
                     0);
  }
  aural_proto_streams_begin(&mw, b, cap);
  assert_string_equal(payload_text(b, aural_proto_streams_end(&mw),
                                   AURAL_MSG_STREAMS, 0),
                      "{\"streams\":[]}");
  /* Too small a buffer, at every size up to the right one. */
  aural_msg_stream_info e = stream_info_of(1);
  size_t full = 0;
  for (size_t c = 0; full == 0; c++) {
    aural_proto_streams_begin(&mw, b, c);
    aural_proto_streams_add(&mw, &e);
    full = aural_proto_streams_end(&mw);
    if (full != 0) assert_int_equal(full, c);
  }
  free(b);
}

/* Word i of the WORDS tests: escapes, multi-byte UTF-8, the longest text. */
static aural_msg_word word_of(uint32_t i) {
  aural_msg_word w;
  memset(&w, 0, sizeof w);
  if (i % 5 == 0)
    memset(w.word, 'a' + (int)(i % 26), AURAL_PROTO_WORD_MAX);
  else
    snprintf(w.word, sizeof w.word, i % 5 == 1 ? "w\"%u\\" : "\xc3\xa9%u", i);
  w.start = i == 1 ? INT64_MAX : (uint64_t)i * 3;
  w.end = i == 1 ? INT64_MAX : w.start + i % 4;
  w.confidence = (double)(i % 11) / 10.0;
  return w;
}

/* Writes a WORDS message of segments with seg[k] words each (word i
 * numbered in order), then n_partial words. */
static size_t write_words(uint8_t *b, size_t cap, const aural_msg_words *m,
                          const uint32_t *seg, size_t n_seg,
                          uint32_t n_partial) {
  aural_msg_writer mw;
  aural_proto_words_begin(&mw, b, cap, 9, m);
  uint32_t i = 0;
  for (size_t k = 0; k < n_seg; k++) {
    aural_proto_words_segment(&mw);
    for (uint32_t j = 0; j < seg[k]; j++, i++) {
      aural_msg_word w = word_of(i);
      aural_proto_words_add(&mw, w.word, w.start, w.end, w.confidence);
    }
  }
  aural_proto_words_partial(&mw);
  for (uint32_t j = 0; j < n_partial; j++, i++) {
    aural_msg_word w = word_of(i);
    aural_proto_words_add(&mw, w.word, w.start, w.end, w.confidence);
  }
  return aural_proto_words_end(&mw);
}

/* Reads back what write_words wrote: every word, in order. */
static void check_words(const uint8_t *p, size_t pn, const aural_msg_words *m,
                        const uint32_t *seg, size_t n_seg,
                        uint32_t n_partial) {
  aural_msg_words d;
  char why[200] = "";
  if (aural_proto_decode_words(p, pn, &d, why, sizeof why) != 0)
    fail_msg("%s", why);
  assert_int_equal(d.seq, m->seq);
  assert_int_equal(d.final, m->final);
  assert_int_equal(d.segments.n_items, n_seg);
  assert_int_equal(d.partial.n_items, n_partial);
  uint32_t i = 0;
  aural_json_list words;
  aural_msg_word w;
  for (size_t k = 0; k < n_seg; k++) {
    assert_int_equal(aural_proto_words_segment_next(&d.segments, &words, why,
                                                    sizeof why),
                     1);
    assert_int_equal(words.n_items, seg[k]);
    for (uint32_t j = 0; j < seg[k]; j++, i++) {
      aural_msg_word e = word_of(i);
      assert_int_equal(
          aural_proto_words_word_next(&words, &w, why, sizeof why), 1);
      assert_memory_equal(&w, &e, sizeof e);
    }
    assert_int_equal(aural_proto_words_word_next(&words, &w, why, sizeof why),
                     0);
  }
  assert_int_equal(aural_proto_words_segment_next(&d.segments, &words, why,
                                                  sizeof why),
                   0);
  for (uint32_t j = 0; j < n_partial; j++, i++) {
    aural_msg_word e = word_of(i);
    assert_int_equal(
        aural_proto_words_word_next(&d.partial, &w, why, sizeof why), 1);
    assert_memory_equal(&w, &e, sizeof e);
  }
  assert_int_equal(aural_proto_words_word_next(&d.partial, &w, why,
                                               sizeof why),
                   0);
}

static void test_words_round_trip(void **state) {
  (void)state;
  size_t cap = 1u << 20;
  uint8_t *b = malloc(cap);
  assert_non_null(b);
  /* Past the token limit of one payload, in one segment and in many; an
   * empty segment; no words at all. */
  const uint32_t seg_a[] = {700, 0, 3, 1};
  const uint32_t seg_b[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  aural_msg_words m = {.seq = INT64_MAX, .final = true};
  size_t n = write_words(b, cap, &m, seg_a, 4, 600), pn;
  const uint8_t *p = payload_of(b, n, AURAL_MSG_WORDS, 9, &pn);
  check_words(p, pn, &m, seg_a, 4, 600);
  m = (aural_msg_words){.seq = 0, .final = false};
  n = write_words(b, cap, &m, seg_b, 10, 0);
  p = payload_of(b, n, AURAL_MSG_WORDS, 9, &pn);
  check_words(p, pn, &m, seg_b, 10, 0);
  n = write_words(b, cap, &m, NULL, 0, 0);
  assert_string_equal(payload_text(b, n, AURAL_MSG_WORDS, 9),
                      "{\"seq\":0,\"final\":false,\"segments\":[],"
                      "\"partial\":[]}");
  /* The example of PROTOCOL.md §4.16, byte for byte. */
  aural_msg_writer mw;
  m.seq = 3;
  aural_proto_words_begin(&mw, b, cap, 9, &m);
  aural_proto_words_segment(&mw);
  aural_proto_words_add(&mw, "the", 12, 20, 0.5);
  aural_proto_words_add(&mw, "quick", 20, 41, 1);
  aural_proto_words_partial(&mw);
  aural_proto_words_add(&mw, "brown", 55, 70, 0.25);
  assert_string_equal(
      payload_text(b, aural_proto_words_end(&mw), AURAL_MSG_WORDS, 9),
      "{\"seq\":3,\"final\":false,\"segments\":[[{\"word\":\"the\","
      "\"start\":12,\"end\":20,\"confidence\":0.5},{\"word\":\"quick\","
      "\"start\":20,\"end\":41,\"confidence\":1}]],\"partial\":[{"
      "\"word\":\"brown\",\"start\":55,\"end\":70,\"confidence\":0.25}]}");
  /* Too small a buffer, at every size up to the right one. */
  size_t full = 0;
  for (size_t c = 0; full == 0; c++) {
    full = write_words(b, c, &m, seg_a + 2, 2, 2);
    if (full != 0) assert_int_equal(full, c);
  }
  /* Words with no wire form are refused, not written. */
  char long_word[AURAL_PROTO_WORD_MAX + 2];
  memset(long_word, 'x', sizeof long_word - 1);
  long_word[sizeof long_word - 1] = '\0';
  const struct {
    const char *word;
    uint64_t start, end;
    double confidence;
  } bad[] = {{long_word, 0, 1, 0.5}, {"", 0, 1, 0.5}, {NULL, 0, 1, 0.5},
             {"a", 5, 4, 0.5},       {"a", 0, 1, -0.1}, {"a", 0, 1, 1.01},
             {"a", 0, 1, NAN},       {"a", 0, (uint64_t)INT64_MAX + 1, 0}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    aural_proto_words_begin(&mw, b, cap, 9, &m);
    aural_proto_words_partial(&mw);
    aural_proto_words_add(&mw, bad[i].word, bad[i].start, bad[i].end,
                          bad[i].confidence);
    assert_int_equal(aural_proto_words_end(&mw), 0);
  }
  /* A word before any segment or the partial is misuse. */
  aural_proto_words_begin(&mw, b, cap, 9, &m);
  aural_proto_words_add(&mw, "a", 0, 1, 0.5);
  assert_int_equal(aural_proto_words_end(&mw), 0);
  free(b);
}

static void test_words_malformed(void **state) {
  (void)state;
#define W(s) "{\"word\":\"" s "\",\"start\":1,\"end\":2,\"confidence\":0.5}"
  char w65[AURAL_PROTO_WORD_MAX + 2];
  memset(w65, 'x', sizeof w65 - 1);
  w65[sizeof w65 - 1] = '\0';
  char long_text[256];
  snprintf(long_text, sizeof long_text,
           "{\"seq\":1,\"final\":false,\"segments\":[],\"partial\":[{"
           "\"word\":\"%s\",\"start\":1,\"end\":2,\"confidence\":0.5}]}",
           w65);
  const struct {
    const char *text;
    const char *why;
  } cases[] = {
      {"", "words"},
      {"[]", "words"},
      {"{\"final\":false,\"segments\":[],\"partial\":[]}", "\"seq\""},
      {"{\"seq\":-1,\"final\":false,\"segments\":[],\"partial\":[]}",
       "\"seq\""},
      {"{\"seq\":1,\"segments\":[],\"partial\":[]}", "\"final\""},
      {"{\"seq\":1,\"final\":false,\"partial\":[]}", "\"segments\""},
      {"{\"seq\":1,\"final\":false,\"segments\":{},\"partial\":[]}",
       "\"segments\""},
      {"{\"seq\":1,\"final\":false,\"segments\":[]}", "\"partial\""},
      {"{\"seq\":1,\"final\":false,\"segments\":[" W("a") "],"
       "\"partial\":[]}",
       "\"segments[0]\" must be an array"},
      {"{\"seq\":1,\"final\":false,\"segments\":[[" W("a") ",7]],"
       "\"partial\":[]}",
       "\"words[1]\" must be an object"},
      {"{\"seq\":1,\"final\":false,\"segments\":[],\"partial\":[{"
       "\"start\":1,\"end\":2,\"confidence\":0.5}]}",
       "\"words[0].word\" is missing"},
      {"{\"seq\":1,\"final\":false,\"segments\":[],\"partial\":[" W("")
       "]}",
       "\"words[0].word\" must be a non-empty string"},
      {long_text, "\"words[0].word\""},
      {"{\"seq\":1,\"final\":false,\"segments\":[],\"partial\":[{"
       "\"word\":\"a\",\"start\":3,\"end\":2,\"confidence\":0.5}]}",
       "\"words[0].end\" must be at least \"start\""},
      {"{\"seq\":1,\"final\":false,\"segments\":[],\"partial\":[{"
       "\"word\":\"a\",\"start\":1.5,\"end\":2,\"confidence\":0.5}]}",
       "\"words[0].start\""},
      {"{\"seq\":1,\"final\":false,\"segments\":[],\"partial\":[{"
       "\"word\":\"a\",\"start\":1,\"end\":2,\"confidence\":1.5}]}",
       "\"words[0].confidence\" must be a number from 0 to 1"},
      {"{\"seq\":1,\"final\":false,\"segments\":[],\"partial\":[{"
       "\"word\":\"a\",\"start\":1,\"end\":2,\"confidence\":null}]}",
       "\"words[0].confidence\""},
      {"{\"seq\":1,\"final\":false,\"segments\":[[" W("a") "],[" W("b")
       ",]],\"partial\":[]}",
       "words"},
  };
#undef W
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aural_msg_words m;
    char why[256] = "";
    int rc = aural_proto_decode_words((const uint8_t *)cases[i].text,
                                      strlen(cases[i].text), &m, why,
                                      sizeof why);
    if (rc != AURAL_PROTO_EBAD_PAYLOAD)
      fail_msg("accepted: %s", cases[i].text);
    if (strstr(why, cases[i].why) == NULL)
      fail_msg("%s: why is \"%s\", expected \"%s\"", cases[i].text, why,
               cases[i].why);
    assert_int_equal(m.segments.n_items, 0);
  }
  /* Unknown members are ignored. */
  const char *later = "{\"seq\":1,\"final\":true,\"x\":[1,{}],\"segments\":"
                      "[[{\"word\":\"a\",\"start\":1,\"end\":1,"
                      "\"confidence\":0,\"y\":2}]],\"partial\":[]}";
  aural_msg_words m;
  assert_int_equal(aural_proto_decode_words((const uint8_t *)later,
                                            strlen(later), &m, NULL, 0),
                   0);
  assert_int_equal(m.segments.n_items, 1);
}

static aural_stats_subscriber subscriber_of(uint32_t i) {
  aural_stats_subscriber s;
  memset(&s, 0, sizeof s);
  s.client = i + 1;
  s.subscription = UINT32_MAX - i;
  s.all = i % 2;
  s.queue_bytes = i == 0 ? INT64_MAX : i;
  s.chunks_sent = i * 7;
  s.chunks_dropped = i;
  if (!s.all) snprintf(s.stream, sizeof s.stream, "s%u", i);
  return s;
}

static void test_stats_reply_round_trip(void **state) {
  (void)state;
  enum { NS = 256, NC = 1024 }; /* a full page */
  size_t cap = NS * 512 + NC * 256 + 1024;
  uint8_t *b = malloc(cap);
  assert_non_null(b);
  char why[160];
  for (int full = 0; full < 2; full++) {
    aural_msg_stats_reply m = {.uptime_s = 12.5, .clients = 3,
                               .workers = UINT32_MAX,
                               .message_bytes = INT64_MAX,
                               .heap_bytes = full ? 9437184 : 0,
                               .streams_total = full ? 1000 : 0,
                               .subscribers_total = full ? 5000 : 0};
    aural_msg_writer mw;
    aural_proto_stats_reply_begin(&mw, b, cap, &m);
    uint32_t ns = full ? NS : 0, nc = full ? NC : 0;
    for (uint32_t i = 0; i < ns; i++) {
      aural_stats_stream e = {.info = stream_info_of(i), .audio_s = i * 0.1,
                              .compute_s = 1e-9, .latency_ms_p50 = 4.1,
                              .latency_ms_p99 = 9.8, .overruns = i,
                              .rounds = 3 * (uint64_t)i};
      aural_proto_stats_reply_add_stream(&mw, &e);
    }
    for (uint32_t i = 0; i < nc; i++) {
      aural_stats_subscriber s = subscriber_of(i);
      aural_proto_stats_reply_add_subscriber(&mw, &s);
    }
    /* The cursors are known only once the page is listed. */
    m.next_streams_before = full ? 745 : 0;
    m.next_clients_before = full ? UINT32_MAX : 0;
    size_t n = aural_proto_stats_reply_end(&mw, &m), pn;
    const uint8_t *p = payload_of(b, n, AURAL_MSG_STATS_REPLY, 0, &pn);
    if (!full) {
      assert_non_null(strstr((const char *)p, "\"streams\":[],"
                                              "\"subscribers\":[]}"));
      assert_null(strstr((const char *)p, "heap_bytes")); /* 0: left out */
    }
    aural_msg_stats_reply d;
    assert_int_equal(
        aural_proto_decode_stats_reply(p, pn, &d, why, sizeof why), 0);
    assert_true(d.uptime_s == 12.5);
    assert_int_equal(d.clients, 3);
    assert_int_equal(d.workers, UINT32_MAX);
    assert_int_equal(d.message_bytes, INT64_MAX);
    assert_int_equal(d.heap_bytes, m.heap_bytes);
    assert_int_equal(d.streams_total, m.streams_total);
    assert_int_equal(d.subscribers_total, m.subscribers_total);
    assert_int_equal(d.next_streams_before, m.next_streams_before);
    assert_int_equal(d.next_clients_before, m.next_clients_before);
    assert_int_equal(d.streams.n_items, ns);
    assert_int_equal(d.subscribers.n_items, nc);
    aural_stats_stream se;
    for (uint32_t i = 0; i < ns; i++) {
      assert_int_equal(
          aural_proto_stats_stream_next(&d.streams, &se, why, sizeof why), 1);
      aural_msg_stream_info want = stream_info_of(i);
      assert_memory_equal(&se.info, &want, sizeof want);
      assert_true(se.audio_s == i * 0.1 && se.compute_s == 1e-9);
      assert_true(se.latency_ms_p50 == 4.1 && se.latency_ms_p99 == 9.8);
      assert_int_equal(se.overruns, i);
      assert_int_equal(se.rounds, 3 * (uint64_t)i); /* 0: left out */
    }
    assert_int_equal(
        aural_proto_stats_stream_next(&d.streams, &se, why, sizeof why), 0);
    aural_stats_subscriber sd;
    for (uint32_t i = 0; i < nc; i++) {
      aural_stats_subscriber want = subscriber_of(i);
      assert_int_equal(aural_proto_stats_subscriber_next(&d.subscribers, &sd,
                                                         why, sizeof why),
                       1);
      assert_memory_equal(&sd, &want, sizeof want);
    }
    assert_int_equal(aural_proto_stats_subscriber_next(&d.subscribers, &sd,
                                                       why, sizeof why),
                     0);
  }
  free(b);
}

/* A text field's bytes need not be UTF-8 (a file's error message may
 * quote a Latin-1 path). The writer turns each stray byte into U+FFFD,
 * three bytes once read back: the field must still fit the decoder's
 * 1,024 bytes, cut between characters, or a server's STREAM_ENDED is
 * refused by its own clients. */
static void test_text_field_of_stray_bytes_round_trips(void **state) {
  (void)state;
  uint8_t b[8192];
  char why[160];
  for (int kind = 0; kind < 3; kind++) {
    aural_msg_stream_ended m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "x");
    m.reason = AURAL_END_ERROR;
    size_t len = kind == 0 ? 511 : AURAL_PROTO_TEXT_MAX;
    memset(m.message, kind == 2 ? 'a' : 0xE9, len); /* 'é' in Latin-1 */
    if (kind == 1) memcpy(m.message, "\xC3\xA9", 2); /* one real 'é' */
    size_t n = aural_proto_encode_stream_ended(b, sizeof b, 3, &m), pn;
    const uint8_t *p = payload_of(b, n, AURAL_MSG_STREAM_ENDED, 3, &pn);
    aural_msg_stream_ended d;
    assert_int_equal(
        aural_proto_decode_stream_ended(p, pn, &d, why, sizeof why), 0);
    size_t dn = strlen(d.message);
    assert_true(dn <= AURAL_PROTO_TEXT_MAX);
    if (kind == 2) {
      assert_memory_equal(d.message, m.message, len + 1);
      continue;
    }
    /* Whole U+FFFD characters (after the real 'é'), as many as fit. */
    size_t at = kind == 1 ? 2 : 0;
    if (kind == 1) assert_memory_equal(d.message, "\xC3\xA9", 2);
    assert_int_equal((dn - at) % 3, 0);
    assert_true(dn + 3 > AURAL_PROTO_TEXT_MAX || (dn - at) / 3 == len - at);
    for (size_t i = at; i < dn; i += 3)
      assert_memory_equal(d.message + i, "\xEF\xBF\xBD", 3);
  }
}

/* Optional 64-bit counters are left out only when they are 0, not when
 * their low 32 bits happen to be: 4 GiB of heap and 2^32 compute rounds
 * must survive the trip. */
static void test_optional_u64_high_bits_round_trip(void **state) {
  (void)state;
  static const uint64_t values[] = {(uint64_t)1 << 32, (uint64_t)3 << 32,
                                    INT64_MAX & ~(uint64_t)UINT32_MAX, 1};
  uint8_t b[4096];
  char why[160];
  for (size_t k = 0; k < sizeof values / sizeof values[0]; k++) {
    aural_msg_stats_reply m = {.heap_bytes = values[k]};
    aural_msg_writer mw;
    aural_proto_stats_reply_begin(&mw, b, sizeof b, &m);
    aural_stats_stream e = {.info = stream_info_of(1), .rounds = values[k]};
    aural_proto_stats_reply_add_stream(&mw, &e);
    size_t n = aural_proto_stats_reply_end(&mw, &m), pn;
    const uint8_t *p = payload_of(b, n, AURAL_MSG_STATS_REPLY, 0, &pn);
    aural_msg_stats_reply d;
    assert_int_equal(
        aural_proto_decode_stats_reply(p, pn, &d, why, sizeof why), 0);
    assert_true(d.heap_bytes == values[k]);
    aural_stats_stream se;
    assert_int_equal(
        aural_proto_stats_stream_next(&d.streams, &se, why, sizeof why), 1);
    assert_true(se.rounds == values[k]);
  }
}

enum {
  S_WELCOME, S_ERROR, S_STREAMS, S_SUBSCRIBED, S_UNSUBSCRIBED, S_STARTED,
  S_ENDED, S_GAP, S_OPENED, S_CLOSED, S_STATS
};

static int decode_server(int which, const char *text, char *why,
                         size_t why_len) {
  const uint8_t *p = (const uint8_t *)text;
  size_t n = strlen(text);
  union {
    aural_msg_welcome w;
    aural_msg_error e;
    aural_msg_streams s;
    aural_msg_subscribed sd;
    uint32_t id;
    aural_msg_stream_started ss;
    aural_msg_stream_ended se;
    aural_msg_gap g;
    aural_msg_audio_opened ao;
    aural_msg_audio_closed ac;
    aural_msg_stats_reply r;
  } m;
  switch (which) {
  case S_WELCOME: return aural_proto_decode_welcome(p, n, &m.w, why, why_len);
  case S_ERROR: return aural_proto_decode_error(p, n, &m.e, why, why_len);
  case S_STREAMS: return aural_proto_decode_streams(p, n, &m.s, why, why_len);
  case S_SUBSCRIBED:
    return aural_proto_decode_subscribed(p, n, &m.sd, why, why_len);
  case S_UNSUBSCRIBED:
    return aural_proto_decode_unsubscribed(p, n, &m.id, why, why_len);
  case S_STARTED:
    return aural_proto_decode_stream_started(p, n, &m.ss, why, why_len);
  case S_ENDED:
    return aural_proto_decode_stream_ended(p, n, &m.se, why, why_len);
  case S_GAP: return aural_proto_decode_gap(p, n, &m.g, why, why_len);
  case S_OPENED:
    return aural_proto_decode_audio_opened(p, n, &m.ao, why, why_len);
  case S_CLOSED:
    return aural_proto_decode_audio_closed(p, n, &m.ac, why, why_len);
  default: return aural_proto_decode_stats_reply(p, n, &m.r, why, why_len);
  }
}

#define MODEL_OK                                                              \
  "\"sample_rate\":16000,\"n_mels\":80,\"frame_ms\":10,\"d_model\":8,"       \
  "\"n_layers\":1,\"window\":4,\"chunk_frames\":50"
#define WELCOME_HEAD                                                          \
  "{\"version\":1,\"server\":\"s\",\"max_request_bytes\":1,"                  \
  "\"max_message_bytes\":1,"
#define STREAM_OK                                                             \
  "\"id\":1,\"name\":\"a\",\"source\":\"file\",\"sample_rate\":1,"           \
  "\"channels\":1,\"held\":false,\"start_us\":0,\"frames\":0,\"chunks\":0"
#define STATS_HEAD                                                            \
  "{\"uptime_s\":1,\"clients\":0,\"workers\":0,\"message_bytes\":0,"         \
  "\"streams_total\":0,\"subscribers_total\":0,"
#define SUB_OK                                                                \
  "\"client\":1,\"subscription\":1,\"stream\":null,\"all\":true,"           \
  "\"queue_bytes\":0,\"chunks_sent\":0,\"chunks_dropped\":0"
#define STATS_STREAM_OK                                                       \
  STREAM_OK ",\"audio_s\":0,\"compute_s\":0,\"latency_ms_p50\":0,"           \
            "\"latency_ms_p99\":0,\"overruns\":0"

/* Each server message's decoder refuses what PROTOCOL.md does not allow,
 * and says which field; the good forms next to them decode. */
static void test_server_field_errors(void **state) {
  (void)state;
  static const struct {
    int which;
    const char *text;
    const char *why; /* NULL: decodes */
  } cases[] = {
      {S_WELCOME, WELCOME_HEAD "\"model\":{" MODEL_OK
                  ",\"vocab_size\":1,\"vocab\":[\"a\"]},\"x\":[[]]}", NULL},
      {S_WELCOME, "[]", "welcome: the payload must be a JSON object"},
      {S_WELCOME, "{\"version\":0}", "welcome: \"version\" must be"},
      {S_WELCOME, "{\"version\":1}", "welcome: \"server\" is missing"},
      {S_WELCOME, WELCOME_HEAD "\"model\":[]}",
       "welcome: \"model\" must be an object"},
      {S_WELCOME, WELCOME_HEAD "\"client\":-1,\"model\":{}}",
       "welcome: \"client\" must be an integer"},
      {S_WELCOME, WELCOME_HEAD "\"model\":{\"sample_rate\":\"x\"}}",
       "welcome: \"model.sample_rate\" must be a number"},
      {S_WELCOME, WELCOME_HEAD "\"model\":{" MODEL_OK ",\"vocab_size\":1.5}}",
       "welcome: \"model.vocab_size\" must be an integer"},
      {S_WELCOME, WELCOME_HEAD "\"model\":{" MODEL_OK ",\"vocab_size\":2,"
                  "\"vocab\":[\"a\"]}}",
       "welcome: \"model.vocab\" must be an array of vocab_size strings"},
      {S_WELCOME, WELCOME_HEAD "\"model\":{" MODEL_OK ",\"vocab_size\":2,"
                  "\"vocab\":[\"a\",3]}}",
       "welcome: \"model.vocab\" item 1 must be a string"},
      {S_WELCOME, WELCOME_HEAD "\"model\":{" MODEL_OK ",\"vocab_size\":1,"
                  "\"vocab\":[\"a\\u0000\"]}}",
       "\"model.vocab\" item 0"},
      {S_WELCOME, WELCOME_HEAD "\"model\":{" MODEL_OK ",\"vocab_size\":0,"
                  "\"vocab\":[1,]}}",
       "welcome: malformed JSON: byte"},
      {S_ERROR, "{\"code\":7,\"name\":\"NO_STREAM\",\"message\":\"\","
                "\"fatal\":false}", NULL},
      {S_ERROR, "{\"code\":7,\"name\":\"01234567890123456789012345678901\","
                "\"message\":\"\",\"fatal\":false}",
       "error: \"name\" must be a string that fits"},
      {S_ERROR, "{\"code\":7,\"name\":\"x\",\"message\":\"\",\"fatal\":0}",
       "error: \"fatal\" must be true or false"},
      {S_ERROR, "{\"code\":-7}", "error: \"code\" must be an integer"},
      {S_STREAMS, "{\"streams\":[{" STREAM_OK "}]}", NULL},
      {S_STREAMS, "{}", "streams: \"streams\" must be an array"},
      {S_STREAMS, "{\"streams\":{}}", "streams: \"streams\" must be an array"},
      {S_STREAMS, "{\"streams\":[{" STREAM_OK "},1]}",
       "streams: \"streams[1]\" must be an object"},
      {S_STREAMS, "{\"streams\":[{" STREAM_OK ",\"id\":2}]}",
       "duplicate member name"},
      {S_STREAMS, "{\"streams\":[{" STREAM_OK "},{\"id\":0}]}",
       "streams: \"streams[1].id\" must be an integer"},
      {S_STREAMS, "{\"streams\":[{\"id\":1,\"name\":\"a/b\"}]}",
       "streams: \"streams[0].name\" must be a stream name"},
      {S_STREAMS, "{\"streams\":[{\"id\":1,\"name\":\"a\",\"source\":\"usb\"}]}",
       "streams: \"streams[0].source\" has a value"},
      {S_SUBSCRIBED, "{\"subscription\":1,\"stream\":null,\"all\":true,"
                     "\"outputs\":[\"text\"],\"dtype\":\"f16\"}", NULL},
      {S_SUBSCRIBED, "{\"subscription\":0}",
       "subscribed: \"subscription\" must be an integer"},
      {S_SUBSCRIBED, "{\"subscription\":1,\"stream\":null,\"all\":false,"
                     "\"outputs\":[\"text\"],\"dtype\":\"f16\"}",
       "subscribed: \"stream\" must be null exactly when"},
      {S_SUBSCRIBED, "{\"subscription\":1,\"stream\":\"a\",\"all\":true,"
                     "\"outputs\":[\"text\"],\"dtype\":\"f16\"}",
       "subscribed: \"stream\" must be null exactly when"},
      {S_SUBSCRIBED, "{\"subscription\":1,\"stream\":\"a\",\"all\":false,"
                     "\"outputs\":[\"text\",\"text\"]}",
       "subscribed: \"outputs\" must be a non-empty array"},
      {S_SUBSCRIBED, "{\"subscription\":1,\"stream\":\"a\",\"all\":false,"
                     "\"outputs\":[],\"dtype\":\"f16\"}",
       "subscribed: \"outputs\""},
      {S_SUBSCRIBED, "{\"subscription\":1,\"stream\":\"a\",\"all\":false,"
                     "\"outputs\":[\"text\"],\"dtype\":\"f64\"}",
       "subscribed: \"dtype\" has a value"},
      {S_UNSUBSCRIBED, "{\"subscription\":4294967296}",
       "unsubscribed: \"subscription\" must be an integer"},
      {S_UNSUBSCRIBED, "{}", "unsubscribed: \"subscription\" is missing"},
      {S_STARTED, "{\"name\":\"a\",\"source\":\"mic\",\"sample_rate\":1e3,"
                  "\"channels\":2,\"start_us\":-1,\"next_chunk\":0}", NULL},
      {S_STARTED, "{\"name\":\"a\",\"source\":\"mic\",\"sample_rate\":1e3,"
                  "\"channels\":2,\"start_us\":1.5,\"next_chunk\":0}",
       "stream_started: \"start_us\" must be an integer"},
      {S_STARTED, "{\"name\":\"a\",\"source\":\"mic\",\"sample_rate\":1e3,"
                  "\"channels\":2,\"start_us\":1,\"next_chunk\":-1}",
       "stream_started: \"next_chunk\" must be an integer"},
      {S_ENDED, "{\"name\":\"a\",\"reason\":\"device_lost\",\"message\":\"\","
                "\"frames\":0,\"chunks\":0}", NULL},
      {S_ENDED, "{\"name\":\"a\",\"reason\":\"none\"}",
       "stream_ended: \"reason\" has a value"},
      {S_ENDED, "{\"name\":\"a\",\"reason\":\"\"}",
       "stream_ended: \"reason\" has a value"},
      {S_ENDED, "{\"name\":\"a\",\"reason\":\"eof\",\"message\":null}",
       "stream_ended: \"message\" must be a string"},
      {S_GAP, "{\"first_chunk\":0,\"n_chunks\":9223372036854775807,"
              "\"reason\":\"queue_full\"}", NULL},
      {S_GAP, "{\"first_chunk\":9223372036854775807,\"n_chunks\":1,"
              "\"reason\":\"queue_full\"}", NULL},
      {S_GAP, "{\"first_chunk\":5,\"n_chunks\":0,"
              "\"reason\":\"queue_full\"}",
       "gap: \"n_chunks\" must be 1 or more"},
      {S_GAP, "{\"first_chunk\":2,\"n_chunks\":9223372036854775807,"
              "\"reason\":\"queue_full\"}",
       "gap: \"n_chunks\" must be 1 or more"},
      {S_GAP, "{\"first_chunk\":9223372036854775807,"
              "\"n_chunks\":9223372036854775807,\"reason\":\"queue_full\"}",
       "gap: \"n_chunks\" must be 1 or more"},
      {S_GAP, "{\"first_chunk\":0,\"n_chunks\":9223372036854775808,"
              "\"reason\":\"queue_full\"}",
       "gap: \"n_chunks\" must be an integer"},
      {S_GAP, "{\"first_chunk\":0,\"n_chunks\":1,\"reason\":\"slow\"}",
       "gap: \"reason\" has a value"},
      {S_OPENED, "{\"stream\":1,\"name\":\"" NAME65 "\"}",
       "audio_opened: \"name\" must be a stream name"},
      {S_OPENED, "{\"name\":\"a\"}", "audio_opened: \"stream\" is missing"},
      {S_CLOSED, "{\"frames\":1,\"chunks\":true}",
       "audio_closed: \"chunks\" must be an integer"},
      {S_STATS, STATS_HEAD "\"streams\":[{" STATS_STREAM_OK "}],"
                "\"subscribers\":[{" SUB_OK "}],\"next_clients_before\":3}",
       NULL},
      {S_STATS, STATS_HEAD "\"streams\":[],\"subscribers\":[],"
                "\"next_streams_before\":-3}",
       "stats_reply: \"next_streams_before\" must be an integer"},
      {S_STATS, STATS_HEAD "\"streams\":[]}",
       "stats_reply: \"subscribers\" must be an array"},
      {S_STATS, STATS_HEAD "\"streams\":[{" STREAM_OK "}],"
                "\"subscribers\":[]}",
       "stats_reply: \"streams[0].audio_s\" is missing"},
      {S_STATS, STATS_HEAD "\"streams\":[],\"subscribers\":[{" SUB_OK
                "},{\"client\":0}]}",
       "stats_reply: \"subscribers[1].client\" must be an integer"},
      {S_STATS, STATS_HEAD "\"streams\":[],\"subscribers\":[{"
                "\"client\":1,\"subscription\":1,\"stream\":\"a\","
                "\"all\":true,\"queue_bytes\":0,\"chunks_sent\":0,"
                "\"chunks_dropped\":0}]}",
       "stats_reply: \"subscribers[0].stream\" must be null exactly"},
      {S_STATS, "{\"uptime_s\":null}",
       "stats_reply: \"uptime_s\" must be a number"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char why[256] = "";
    int rc = decode_server(cases[i].which, cases[i].text, why, sizeof why);
    if (cases[i].why == NULL) {
      if (rc != 0) fail_msg("case %zu: %s: %s", i, cases[i].text, why);
      continue;
    }
    if (rc != AURAL_PROTO_EBAD_PAYLOAD || strstr(why, cases[i].why) == NULL)
      fail_msg("case %zu: %s: rc %d, why \"%s\", wanted \"%s\"", i,
               cases[i].text, rc, why, cases[i].why);
  }
}

/* Every server encoder refuses each buffer too small, touching no byte past
 * the capacity, and fits exactly. */
static void test_server_encoders_short_buffer(void **state) {
  (void)state;
  aural_msg_welcome w = {.version = 1, .server = "s",
                         .model = {.vocab_size = 2}, .client = 3};
  const char *const vocab[] = {"a", "\"b"};
  aural_msg_subscribed sd = {.subscription = 1, .stream = "x",
                             .outputs = AURAL_OUT_ALL};
  aural_msg_stream_started ss = {.name = "x"};
  aural_msg_stream_ended se = {.name = "x", .reason = AURAL_END_ERROR,
                               .message = "\"m\""};
  aural_msg_gap g = {.n_chunks = 1};
  aural_msg_audio_opened ao = {.stream = 1, .name = "x"};
  aural_msg_audio_closed ac = {.frames = 1};
  aural_msg_stats_reply r = {.next_streams_before = 1};
  aural_stats_stream st = {.info = {.id = 1, .name = "x"}};
  aural_stats_subscriber sub = {.client = 1, .subscription = 1, .all = true};
  for (int which = 0; which < 9; which++) {
    uint8_t b[512];
    size_t full = 0;
    for (size_t cap = 0; cap < sizeof b && full == 0; cap++) {
      memset(b, 0xAA, sizeof b);
      aural_msg_writer mw;
      switch (which) {
      case 0: full = aural_proto_encode_welcome(b, cap, &w, vocab); break;
      case 1: full = aural_proto_encode_subscribed(b, cap, &sd); break;
      case 2: full = aural_proto_encode_unsubscribed(b, cap, 9); break;
      case 3: full = aural_proto_encode_stream_started(b, cap, 1, &ss); break;
      case 4: full = aural_proto_encode_stream_ended(b, cap, 1, &se); break;
      case 5: full = aural_proto_encode_gap(b, cap, 1, &g); break;
      case 6: full = aural_proto_encode_audio_opened(b, cap, &ao); break;
      case 7: full = aural_proto_encode_audio_closed(b, cap, 1, &ac); break;
      default:
        aural_proto_stats_reply_begin(&mw, b, cap, &r);
        aural_proto_stats_reply_add_stream(&mw, &st);
        aural_proto_stats_reply_add_subscriber(&mw, &sub);
        full = aural_proto_stats_reply_end(&mw, &r);
      }
      for (size_t i = cap; i < sizeof b; i++) assert_int_equal(b[i], 0xAA);
      if (full != 0) assert_int_equal(full, cap);
    }
    assert_true(full > AURAL_PROTO_HEADER_BYTES);
  }
}

/* The list reader: arrays keep one token, elements are read one by one,
 * and nested lists inside an element are lists again. */
static void test_json_lists(void **state) {
  (void)state;
  const char *text = "{\"a\":[1, {\"b\":[[2],[3,4]]} ,\"x\"],\"c\":true}";
  aural_json js, item, inner;
  assert_int_equal(aural_json_parse_lists(&js, text, strlen(text), NULL, 0),
                   0);
  assert_int_equal(js.n_tokens, 5); /* object, "a", [..], "c", true */
  int a = aural_json_get(&js, 0, "a");
  assert_int_equal(js.tokens[a].n_items, 3);
  assert_int_equal(aural_json_get(&js, 0, "c"), 4);
  aural_json_list l, l2;
  assert_int_equal(aural_json_list_init(&js, a, &l), 0);
  assert_int_equal(aural_json_list_next(&l, &item, NULL, 0), 1);
  int64_t v;
  assert_int_equal(aural_json_int(&item, 0, 0, 9, &v), 0);
  assert_int_equal(v, 1);
  assert_int_equal(aural_json_list_next(&l, &item, NULL, 0), 1);
  assert_int_equal(aural_json_list_init(&item, aural_json_get(&item, 0, "b"),
                                        &l2), 0);
  assert_int_equal(l2.n_items, 2);
  assert_int_equal(aural_json_list_next(&l2, &inner, NULL, 0), 1);
  assert_int_equal(aural_json_list_next(&l2, &inner, NULL, 0), 1);
  assert_int_equal(inner.tokens[0].n_items, 2);
  assert_int_equal(aural_json_list_next(&l2, &inner, NULL, 0), 0);
  assert_int_equal(aural_json_list_next(&l, &item, NULL, 0), 1);
  assert_int_equal(item.tokens[0].kind, AURAL_JSON_STRING);
  assert_int_equal(aural_json_list_next(&l, &item, NULL, 0), 0);
  assert_int_equal(aural_json_list_init(&js, 0, &l), -1);
  assert_int_equal(aural_json_list_next(&l, &item, NULL, 0), 0);

  /* The plain reader's arrays are lists too. */
  assert_int_equal(aural_json_parse(&js, "[5,6]", 5, NULL, 0), 0);
  assert_int_equal(aural_json_list_init(&js, 0, &l), 0);
  assert_int_equal(aural_json_list_next(&l, &item, NULL, 0), 1);
  assert_int_equal(aural_json_list_next(&l, &item, NULL, 0), 1);
  assert_int_equal(aural_json_int(&item, 0, 0, 9, &v), 0);
  assert_int_equal(v, 6);

  /* The token limit counts each element on its own. */
  size_t big = 2 + 600 * 2;
  char *arr = malloc(big + 1);
  assert_non_null(arr);
  size_t k = 0;
  arr[k++] = '[';
  for (int i = 0; i < 600; i++) {
    arr[k++] = '0';
    arr[k++] = i < 599 ? ',' : ']';
  }
  arr[k] = '\0';
  char why[96];
  assert_int_equal(aural_json_parse(&js, arr, k, why, sizeof why),
                   AURAL_PROTO_EBAD_PAYLOAD);
  assert_int_equal(aural_json_parse_lists(&js, arr, k, why, sizeof why), 0);
  assert_int_equal(js.tokens[0].n_items, 600);
  free(arr);
  /* Still strict: a malformed element anywhere refuses the whole text. */
  assert_int_equal(aural_json_parse_lists(&js, "[[1,],2]", 8, why, sizeof why),
                   AURAL_PROTO_EBAD_PAYLOAD);
  assert_non_null(strstr(why, "trailing comma"));
}

/* --- the cluster layout (aural/cluster.h) ------------------------------- */

static void test_cluster_url_accepted(void **state) {
  (void)state;
  static const struct {
    const char *url;
    bool is_unix;
    const char *path, *host, *user;
    int port, db;
    const char *formatted; /* aural_cluster_url_format */
  } cases[] = {
      {"unix:/run/redis.sock", true, "/run/redis.sock", "", "", 6379, 0,
       "unix:/run/redis.sock"},
      {"unix:///tmp/r.sock", true, "/tmp/r.sock", "", "", 6379, 0,
       "unix:/tmp/r.sock"},
      {"redis://cache", false, "", "cache", "", 6379, 0,
       "redis://cache:6379/0"},
      {"redis://aural@10.0.0.5:6380/2", false, "", "10.0.0.5", "aural", 6380,
       2, "redis://aural@10.0.0.5:6380/2"},
      {"redis://[::1]:7000/15", false, "", "::1", "", 7000, 15,
       "redis://[::1]:7000/15"},
      {"redis://[fe80::1]", false, "", "fe80::1", "", 6379, 0,
       "redis://[fe80::1]:6379/0"},
      {"redis://h:65535/1048576", false, "", "h", "", 65535, 1048576,
       "redis://h:65535/1048576"},
      {"redis://h:1/0", false, "", "h", "", 1, 0, "redis://h:1/0"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aural_cluster_url u;
    char why[256] = "", text[512];
    assert_int_equal(aural_cluster_url_parse(cases[i].url, &u, why,
                                             sizeof why), 0);
    assert_int_equal(u.is_unix, cases[i].is_unix);
    assert_string_equal(u.path, cases[i].path);
    assert_string_equal(u.host, cases[i].host);
    assert_string_equal(u.user, cases[i].user);
    assert_int_equal(u.port, cases[i].port);
    assert_int_equal(u.db, cases[i].db);
    aural_cluster_url_format(&u, text, sizeof text);
    assert_string_equal(text, cases[i].formatted);
  }
}

#define PATH108                                                              \
  "/0123456789012345678901234567890123456789012345678901234567890123456789" \
  "0123456789012345678901234567890123456"

static void test_cluster_url_refused(void **state) {
  (void)state;
  static const struct {
    const char *url;
    const char *why; /* a part of the message */
  } cases[] = {
      {"redis://aural:hunter2@h", "a password in the URL is refused"},
      {"redis://:hunter2@h:6379/1", "a password in the URL is refused"},
      {"redis://aural:@h", "a password in the URL is refused"},
      {"redis://@h", "bad user name"},
      {"redis://h:0", "the port is not a number in 1..65535"},
      {"redis://h:65536", "the port is not a number"},
      {"redis://h:x", "the port is not a number"},
      {"redis://h:", "the port is not a number"},
      {"redis://h:6379:1", "the port is not a number"},
      {"redis://[::1]x", "the port is not a number"},
      {"redis://[::1", "unclosed '['"},
      {"redis://h/x", "the database after '/' is not a number"},
      {"redis://h/", "the database after '/' is not a number"},
      {"redis://h/1048577", "the database after '/' is not a number"},
      {"redis://h/-1", "the database after '/' is not a number"},
      {"redis://", "no host"},
      {"redis://:6379", "no host"},
      {"redis:///0", "no host"},
      {"unix:relative.sock", "expected unix:/absolute/path"},
      {"unix:", "expected unix:/absolute/path"},
      {"unix:" PATH108, "the socket path is too long"},
      {"http://h", "expected redis://[USER@]HOST[:PORT][/DB] or unix:PATH"},
      {"REDIS://h", "expected redis://"},
      {"", "expected redis://"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aural_cluster_url u;
    char why[256] = "";
    assert_int_equal(aural_cluster_url_parse(cases[i].url, &u, why,
                                             sizeof why), -1);
    if (strstr(why, cases[i].why) == NULL)
      fail_msg("%s: \"%s\" lacks \"%s\"", cases[i].url, why, cases[i].why);
    /* The message names the URL, but never shows a password. */
    assert_non_null(strstr(why, "cluster URL '"));
    assert_null(strstr(why, "hunter2"));
  }
}

static void test_cluster_valid_name(void **state) {
  (void)state;
  static const char *const good[] = {"call-17", "a", NAME64, "mic",
                                     "x.wav#2", "~!@$%^&*()_+=[]|;:'\",.<>?"};
  static const char *const bad[] = {"",    NAME65, "a{b", "}",   "{x}",
                                    "a b", "a/b",  "a\\b", "\x7f", "caf\xc3\xa9",
                                    "tab\t"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
    if (!aural_cluster_valid_name(good[i])) fail_msg("refused '%s'", good[i]);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (aural_cluster_valid_name(bad[i])) fail_msg("accepted '%s'", bad[i]);
  /* A protocol name with a brace is still one, just not a cluster's. */
  assert_true(aural_proto_valid_name("a{b"));
}

/* Numbers read back from Redis: decimal digits only, whole or with a
 * fraction where asked, in range, without overflow. */
static void test_cluster_numbers(void **state) {
  (void)state;
  uint64_t u = 7;
  int64_t i = 7;
  double d = 7;
#define U(s, lo, hi) aural_cluster_parse_uint(s, strlen(s), lo, hi, &u)
#define I(s, lo, hi) aural_cluster_parse_int(s, strlen(s), lo, hi, &i)
#define R(s, lo, hi) aural_cluster_parse_real(s, strlen(s), lo, hi, &d)
  assert_int_equal(U("16000", 1000, 768000), 0);
  assert_int_equal(u, 16000);
  assert_int_equal(U("18446744073709551615", 0, UINT64_MAX), 0);
  assert_true(u == UINT64_MAX);
  const char *bad_u[] = {"", " 16000", "16000 ", "+16000", "-1", "1.6e4",
                         "0x3e80", "16000.5", "16000.0", "1e3",
                         "18446744073709551616", "99999999999999999999",
                         "000000000000000000001"};
  for (size_t k = 0; k < sizeof bad_u / sizeof *bad_u; k++)
    if (U(bad_u[k], 0, UINT64_MAX) == 0) fail_msg("accepted '%s'", bad_u[k]);
  assert_int_equal(U("999", 1000, 768000), -1);
  assert_int_equal(U("768001", 1000, 768000), -1);
  assert_int_equal(aural_cluster_parse_uint("12\0003", 4, 0, 99, &u), -1);
  assert_int_equal(aural_cluster_parse_uint("123", 2, 0, 99, &u), 0);
  assert_int_equal(u, 12);

  assert_int_equal(I("-9223372036854775808", INT64_MIN, INT64_MAX), 0);
  assert_true(i == INT64_MIN);
  assert_int_equal(I("9223372036854775807", INT64_MIN, INT64_MAX), 0);
  assert_true(i == INT64_MAX);
  assert_int_equal(I("-0", -5, 5), 0);
  assert_int_equal(i, 0);
  const char *bad_i[] = {"9223372036854775808", "-9223372036854775809",
                         "+1", "--1", "-", " -1", "- 1", "1-"};
  for (size_t k = 0; k < sizeof bad_i / sizeof *bad_i; k++)
    if (I(bad_i[k], INT64_MIN, INT64_MAX) == 0)
      fail_msg("accepted '%s'", bad_i[k]);
  assert_int_equal(I("-1", 0, 5), -1);

  assert_int_equal(R("2.5", 0, 100), 0);
  assert_true(d == 2.5);
  assert_int_equal(R("0.00001", 0, 100), 0);
  assert_true(d == 0.00001);
  assert_int_equal(R("-0.25", -1, 1), 0);
  assert_true(d == -0.25);
  const char *bad_r[] = {"", " 1", "1 ", "+1", "1.", ".5", "1e1", "1E1",
                         "0x10", "inf", "nan", "1,5", "1..5", "101", "-1"};
  for (size_t k = 0; k < sizeof bad_r / sizeof *bad_r; k++)
    if (R(bad_r[k], 0, 100) == 0) fail_msg("accepted '%s'", bad_r[k]);
#undef U
#undef I
#undef R
}

static void test_cluster_key(void **state) {
  (void)state;
  char key[AURAL_CLUSTER_KEY_MAX];
  assert_int_equal(aural_cluster_key(key, sizeof key, "call-17",
                                     AURAL_CLUSTER_OUT),
                   strlen("aural:{call-17}:out"));
  assert_string_equal(key, "aural:{call-17}:out");
  aural_cluster_key(key, sizeof key, "m", AURAL_CLUSTER_META);
  assert_string_equal(key, "aural:{m}:meta");
  aural_cluster_key(key, sizeof key, "m", AURAL_CLUSTER_AUDIO);
  assert_string_equal(key, "aural:{m}:audio");
  aural_cluster_key(key, sizeof key, "m", AURAL_CLUSTER_CKPT);
  assert_string_equal(key, "aural:{m}:ckpt");

  /* The longest name and part fit AURAL_CLUSTER_KEY_MAX. */
  size_t n = aural_cluster_key(key, sizeof key, NAME64, AURAL_CLUSTER_AUDIO);
  assert_int_equal(n, strlen("aural:{" NAME64 "}:audio"));
  assert_string_equal(key, "aural:{" NAME64 "}:audio");

  /* Names that are not a cluster's, and a buffer one byte short. */
  assert_int_equal(aural_cluster_key(key, sizeof key, "a{b", "out"), 0);
  assert_int_equal(aural_cluster_key(key, sizeof key, "", "out"), 0);
  assert_int_equal(aural_cluster_key(key, sizeof key, NAME65, "out"), 0);
  char small[sizeof "aural:{ab}:out" - 1];
  assert_int_equal(aural_cluster_key(small, sizeof small, "ab", "out"), 0);
  char exact[sizeof "aural:{ab}:out"];
  assert_int_equal(aural_cluster_key(exact, sizeof exact, "ab", "out"),
                   strlen("aural:{ab}:out"));
}

/* Writes text into a new file of the given mode in /tmp; its path into
 * path. */
static void password_file(char *path, size_t cap, const char *text,
                          mode_t mode) {
  static int n;
  snprintf(path, cap, "/tmp/aural-test-pw-%d-%d", (int)getpid(), n++);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(path, mode), 0);
}

static void test_cluster_password(void **state) {
  (void)state;
  char path[128], pw[AURAL_CLUSTER_PASSWORD_MAX + 1], why[256];
  char long_line[AURAL_CLUSTER_PASSWORD_MAX + 3];
  memset(long_line, 'x', sizeof long_line - 2);
  long_line[sizeof long_line - 2] = '\n';
  long_line[sizeof long_line - 1] = '\0';
  char comment[1200];
  memset(comment, '#', sizeof comment - 1);
  comment[sizeof comment - 1] = '\0';
  char short_then_long[1300];
  snprintf(short_then_long, sizeof short_then_long, "s3cret\n%s\n", comment);
  static const struct {
    int text; /* 0: texts[] below */
    mode_t mode;
    int rc;
    const char *want; /* the password, or a part of why */
  } cases[] = {
      {0, 0600, 1, "s3cret"}, {1, 0400, 1, "pass word"},
      {2, 0600, 1, "s3cret"}, {0, 0644, -1, "others may read or write it"},
      {0, 0640, -1, "others may read"}, {0, 0602, -1, "others may"},
      {3, 0600, -1, "empty first line"}, {4, 0600, -1, "too long"},
  };
  const char *texts[] = {"s3cret\n", "pass word\r\nnext", short_then_long,
                         "\nlater", long_line};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    password_file(path, sizeof path, texts[cases[i].text], cases[i].mode);
    why[0] = '\0';
    int rc = aural_cluster_password(path, pw, sizeof pw, why, sizeof why);
    unlink(path);
    if (rc != cases[i].rc) fail_msg("case %zu: rc %d (%s)", i, rc, why);
    if (rc == 1) {
      assert_string_equal(pw, cases[i].want);
    } else {
      if (strstr(why, cases[i].want) == NULL)
        fail_msg("case %zu: \"%s\" lacks \"%s\"", i, why, cases[i].want);
      assert_non_null(strstr(why, path));
    }
  }
  /* A missing file is named; without a file, the environment decides. */
  assert_int_equal(aural_cluster_password("/nonexistent/pw", pw, sizeof pw,
                                          why, sizeof why), -1);
  assert_non_null(strstr(why, "/nonexistent/pw"));
  assert_int_equal(setenv("AURAL_REDIS_PASSWORD", "from-env", 1), 0);
  assert_int_equal(aural_cluster_password(NULL, pw, sizeof pw, why,
                                          sizeof why), 1);
  assert_string_equal(pw, "from-env");
  assert_int_equal(setenv("AURAL_REDIS_PASSWORD", "", 1), 0);
  assert_int_equal(aural_cluster_password(NULL, pw, sizeof pw, why,
                                          sizeof why), 0);
  assert_string_equal(pw, "");
  assert_int_equal(unsetenv("AURAL_REDIS_PASSWORD"), 0);
  assert_int_equal(aural_cluster_password(NULL, pw, sizeof pw, why,
                                          sizeof why), 0);
}

/* The codec allocates nothing (aural/proto.h; aural_json_parse_into's
 * duplicate check aside, which none of these reach): each test above whose
 * own code allocates nothing (not the password file's, which writes
 * files) runs again here, its heap allocations counted
 * (tests/alloc_calls.c). */
static void test_codec_allocates_nothing(void **state) {
  static const struct {
    const char *name;
    void (*fn)(void **);
  } runs[] = {
      {"test_header_round_trip_every_type", test_header_round_trip_every_type},
      {"test_header_bytes", test_header_bytes},
      {"test_header_errors", test_header_errors},
      {"test_one_code_list", test_one_code_list},
      {"test_error_names", test_error_names},
      {"test_valid_name", test_valid_name},
      {"test_hello_round_trip", test_hello_round_trip},
      {"test_subscribe_round_trip", test_subscribe_round_trip},
      {"test_unsubscribe_round_trip", test_unsubscribe_round_trip},
      {"test_stats_round_trip", test_stats_round_trip},
      {"test_audio_open_round_trip", test_audio_open_round_trip},
      {"test_error_round_trip", test_error_round_trip},
      {"test_raw_round_trip", test_raw_round_trip},
      {"test_encoders_short_buffer", test_encoders_short_buffer},
      {"test_request_defaults_and_unknown_members", test_request_defaults_and_unknown_members},
      {"test_json_malformed", test_json_malformed},
      {"test_json_valid", test_json_valid},
      {"test_json_tokens_and_accessors", test_json_tokens_and_accessors},
      {"test_json_double_conversion", test_json_double_conversion},
      {"test_request_field_errors", test_request_field_errors},
      {"test_request_limits_accepted", test_request_limits_accepted},
      {"test_chunk_round_trip", test_chunk_round_trip},
      {"test_chunk_header_bytes", test_chunk_header_bytes},
      {"test_chunk_wrong_lengths", test_chunk_wrong_lengths},
      {"test_chunk_bad_fields", test_chunk_bad_fields},
      {"test_chunk_overflow", test_chunk_overflow},
      {"test_f16_known_values", test_f16_known_values},
      {"test_f16_every_half_round_trips", test_f16_every_half_round_trips},
      {"test_f16_nearest_oracle", test_f16_nearest_oracle},
      {"test_jw_structure_and_escaping", test_jw_structure_and_escaping},
      {"test_jw_double_round_trip", test_jw_double_round_trip},
      {"test_jw_overflow", test_jw_overflow},
      {"test_server_message_bytes", test_server_message_bytes},
      {"test_error_decode", test_error_decode},
      {"test_ping_pong_and_empty_requests", test_ping_pong_and_empty_requests},
      {"test_subscribed_round_trip", test_subscribed_round_trip},
      {"test_stream_events_round_trip", test_stream_events_round_trip},
      {"test_words_malformed", test_words_malformed},
      {"test_text_field_of_stray_bytes_round_trips", test_text_field_of_stray_bytes_round_trips},
      {"test_optional_u64_high_bits_round_trip", test_optional_u64_high_bits_round_trip},
      {"test_server_field_errors", test_server_field_errors},
      {"test_server_encoders_short_buffer", test_server_encoders_short_buffer},
      {"test_cluster_url_accepted", test_cluster_url_accepted},
      {"test_cluster_url_refused", test_cluster_url_refused},
      {"test_cluster_valid_name", test_cluster_valid_name},
      {"test_cluster_key", test_cluster_key},
  };
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    unsigned long before = test_alloc_calls();
    runs[i].fn(state);
    unsigned long n = test_alloc_calls() - before;
    if (n != 0) fail_msg("%s made %lu heap allocations", runs[i].name, n);
  }
  /* The default socket path too (test_default_socket sets variables,
   * which allocates). */
  char path[128];
  unsigned long before = test_alloc_calls();
  assert_int_equal(aural_proto_default_socket(path, sizeof path), 0);
  assert_int_equal(test_alloc_calls(), before);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_header_round_trip_every_type),
      cmocka_unit_test(test_header_bytes),
      cmocka_unit_test(test_header_errors),
      cmocka_unit_test(test_one_code_list),
      cmocka_unit_test(test_default_socket),
      cmocka_unit_test(test_error_names),
      cmocka_unit_test(test_valid_name),
      cmocka_unit_test(test_hello_round_trip),
      cmocka_unit_test(test_subscribe_round_trip),
      cmocka_unit_test(test_unsubscribe_round_trip),
      cmocka_unit_test(test_stats_round_trip),
      cmocka_unit_test(test_audio_open_round_trip),
      cmocka_unit_test(test_error_round_trip),
      cmocka_unit_test(test_raw_round_trip),
      cmocka_unit_test(test_encoders_short_buffer),
      cmocka_unit_test(test_request_defaults_and_unknown_members),
      cmocka_unit_test(test_json_malformed),
      cmocka_unit_test(test_json_valid),
      cmocka_unit_test(test_json_tokens_and_accessors),
      cmocka_unit_test(test_json_double_conversion),
      cmocka_unit_test(test_request_field_errors),
      cmocka_unit_test(test_request_limits_accepted),
      cmocka_unit_test(test_chunk_round_trip),
      cmocka_unit_test(test_chunk_header_bytes),
      cmocka_unit_test(test_chunk_wrong_lengths),
      cmocka_unit_test(test_chunk_bad_fields),
      cmocka_unit_test(test_chunk_overflow),
      cmocka_unit_test(test_f16_known_values),
      cmocka_unit_test(test_f16_every_half_round_trips),
      cmocka_unit_test(test_f16_nearest_oracle),
      cmocka_unit_test(test_jw_structure_and_escaping),
      cmocka_unit_test(test_jw_double_round_trip),
      cmocka_unit_test(test_jw_overflow),
      cmocka_unit_test(test_server_message_bytes),
      cmocka_unit_test(test_welcome_round_trip),
      cmocka_unit_test(test_error_decode),
      cmocka_unit_test(test_ping_pong_and_empty_requests),
      cmocka_unit_test(test_subscribed_round_trip),
      cmocka_unit_test(test_stream_events_round_trip),
      cmocka_unit_test(test_streams_round_trip),
      cmocka_unit_test(test_stats_reply_round_trip),
      cmocka_unit_test(test_optional_u64_high_bits_round_trip),
      cmocka_unit_test(test_text_field_of_stray_bytes_round_trips),
      cmocka_unit_test(test_words_round_trip),
      cmocka_unit_test(test_words_malformed),
      cmocka_unit_test(test_server_field_errors),
      cmocka_unit_test(test_server_encoders_short_buffer),
      cmocka_unit_test(test_json_lists),
      cmocka_unit_test(test_cluster_url_accepted),
      cmocka_unit_test(test_cluster_url_refused),
      cmocka_unit_test(test_cluster_valid_name),
      cmocka_unit_test(test_cluster_key),
      cmocka_unit_test(test_cluster_numbers),
      cmocka_unit_test(test_cluster_password),
      cmocka_unit_test(test_codec_allocates_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
