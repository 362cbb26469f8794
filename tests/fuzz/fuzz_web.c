/*
 * libFuzzer target for what aurald parses of HTTP and WebSocket peers
 * itself (daemon/webguard.c; libwebsockets parses the rest):
 *   - the input cut into WebSocket messages and their fragments, fed to
 *     ws_framer_feed() as a connection's receive callbacks would;
 *   - the input as an Authorization header, an Origin and a Host header
 *     against fixed tokens and allow-lists, and as an --http address.
 * The first byte of each 3-byte record says how many bytes the next
 * fragment has and whether it ends its message. Build and run with
 * tools/fuzz.sh 60 web.
 *
 * Beyond "no crash, no leak, no undefined behaviour", the target aborts
 * when a contract breaks:
 *   - the framer completes a message (1) exactly when the bytes of that
 *     WebSocket message are one whole protocol message whose header
 *     decodes within the limit, and refuses (a negative code) as soon as
 *     they cannot be; it never accepts more than 16 + max_payload bytes
 *     of one message;
 *   - a token is accepted only when the header is "Bearer " (any case)
 *     and spaces before exactly the token; an origin or a host only when
 *     it equals an allowed one (ignoring case);
 *   - a parsed address has a port 0..65535 and a host that is an address.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "web.h"

#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);


#define MAX_PAYLOAD 64

/* The framer's verdict on one whole WebSocket message, from scratch: 1
 * when it is exactly one protocol message, else a refusal. */
static int oracle(const uint8_t *msg, size_t n) {
  aural_msg_header h;
  if (n < AURAL_PROTO_HEADER_BYTES) return AURAL_PROTO_EFRAMING;
  int rc = aural_proto_decode_header(msg, n, MAX_PAYLOAD, &h);
  if (rc < 0) return rc;
  return n == AURAL_PROTO_HEADER_BYTES + h.payload_bytes ? 1
                                                        : AURAL_PROTO_EFRAMING;
}

/* Feeds the input as fragments; checks each message against the oracle. */
static void fuzz_framer(const uint8_t *data, size_t size) {
  ws_framer f = {.max_payload = MAX_PAYLOAD};
  uint8_t msg[AURAL_PROTO_HEADER_BYTES + MAX_PAYLOAD + 256];
  size_t have = 0, at = 0;
  char why[200];
  while (at + 1 <= size) {
    uint8_t ctl = data[at++];
    size_t n = ctl & 0x7f;
    bool final = (ctl & 0x80) != 0;
    if (n > size - at) n = size - at;
    int rc = ws_framer_feed(&f, data + at, n, final, why, sizeof why);
    size_t keep = n < sizeof msg - have ? n : sizeof msg - have;
    memcpy(msg + have, data + at, keep);
    have += keep;
    at += n;
    CHECK(have <= AURAL_PROTO_HEADER_BYTES + MAX_PAYLOAD + 128);
    if (rc < 0) {
      CHECK(why[0] != '\0');
      /* A refusal before the end must be certain: no continuation could
       * make these bytes one message. */
      if (have < sizeof msg) CHECK(oracle(msg, have) < 0);
      return; /* the connection ends here */
    }
    if (final) {
      CHECK(rc == 1);
      CHECK(oracle(msg, have) == 1);
      have = 0;
    } else {
      CHECK(rc == 0);
    }
  }
}

static bool spaces_then(const char *s, const char *token) {
  while (*s == ' ') s++;
  return strcmp(s, token) == 0;
}

/* The cookie check from scratch: the first "aural_token=" cookie of the
 * ';'-separated list (leading spaces and ';' skipped) holds the token. */
static bool cookie_holds(const char *s, const char *token) {
  while (*s != '\0') {
    while (*s == ' ' || *s == ';') s++;
    size_t n = strcspn(s, ";");
    if (n > 12 && strncmp(s, "aural_token=", 12) == 0)
      return n - 12 == strlen(token) && strncmp(s + 12, token, n - 12) == 0;
    s += n;
  }
  return false;
}

static void fuzz_headers(const char *s) {
  static const char token[] = "0123456789abcdefXYZ";
  bool ok = http_bearer_ok(s, token);
  CHECK(ok == (strncasecmp(s, "Bearer ", 7) == 0 && spaces_then(s + 7, token)));
  CHECK(http_cookie_ok(s, token) == cookie_holds(s, token));
  static const char *const allowed[] = {"http://127.0.0.1:8080",
                                        "https://App.example"};
  bool origin = http_origin_allowed(s, allowed, 2);
  CHECK(origin == (strcasecmp(s, allowed[0]) == 0 ||
                   strcasecmp(s, allowed[1]) == 0));
  bool host = http_host_allowed(s, allowed, 2);
  CHECK(host == (strcasecmp(s, "127.0.0.1:8080") == 0 ||
                 strcasecmp(s, "app.example") == 0));
  /* As the Host of its own request: the origins of that name and no
   * other. */
  char same[300];
  if (strlen(s) < sizeof same - 7) {
    snprintf(same, sizeof same, "HTTP://%s", s);
    CHECK(http_origin_is_host(same, "http", s) == (s[0] != '\0'));
    CHECK(!http_origin_is_host(same, "https", s));
  }
  CHECK(http_origin_is_host(allowed[0], "http", s) ==
        (strcasecmp(s, "127.0.0.1:8080") == 0));
  (void)http_token_valid(s);
  http_addr a;
  char why[256];
  if (http_parse_addr(s, &a, why, sizeof why) == 0) {
    CHECK(a.port >= 0 && a.port <= 65535);
    uint8_t buf[16];
    CHECK(inet_pton(a.v6 ? AF_INET6 : AF_INET, a.host, buf) == 1);
  } else {
    CHECK(strstr(why, "--http") != NULL);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_framer(data, size);
  char s[512];
  size_t n = size < sizeof s - 1 ? size : sizeof s - 1;
  memcpy(s, data, n);
  s[n] = '\0';
  fuzz_headers(s);
  return 0;
}
