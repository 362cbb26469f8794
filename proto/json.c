/*
 * JSON for the protocol's payloads: a strict RFC 8259 reader that makes
 * tokens over the caller's bytes, and a writer into a caller buffer.
 * Nothing is allocated (but by aural_json_parse_into, to check the names
 * of a large document's objects); the reader recurses at most 16 levels
 * deep.
 *
 * This is the project's one JSON implementation: the protocol codec must
 * need libc alone (a C client links nothing else), and what the library
 * reads from a model file (the safetensors header, aural.config and its
 * fbank options) wants the same strictness as a socket payload: UTF-8
 * checked, duplicate member names refused, bounded depth. So libaural
 * reads its JSON with this reader too (aural_json_parse_into, with token
 * storage sized to the document), rather than with a second parser.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aural/proto.h"
#include "internal.h"

#define JSON_MAX_DEPTH 16

/* --- UTF-8 ---------------------------------------------------------------- */

size_t aural__utf8_seq(const uint8_t *p, size_t avail, uint32_t *cp) {
  if (avail == 0) return 0;
  uint8_t b0 = p[0];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t n;
  uint32_t v;
  uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
    v = b0 & 0x1Fu;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    v = b0 & 0x0Fu;
    if (b0 == 0xE0) lo = 0xA0; /* overlong below U+0800 */
    if (b0 == 0xED) hi = 0x9F; /* U+D800..U+DFFF are surrogates */
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    v = b0 & 0x07u;
    if (b0 == 0xF0) lo = 0x90; /* overlong below U+10000 */
    if (b0 == 0xF4) hi = 0x8F; /* above U+10FFFF */
  } else {
    return 0; /* continuation byte, C0/C1 overlong lead, or F5..FF */
  }
  if (avail < n) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  v = v << 6 | (p[1] & 0x3Fu);
  for (size_t i = 2; i < n; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    v = v << 6 | (p[i] & 0x3Fu);
  }
  *cp = v;
  return n;
}

bool aural__utf8_valid(const uint8_t *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint32_t cp;
    size_t k = aural__utf8_seq(p + i, n - i, &cp);
    if (k == 0) return false;
    i += k;
  }
  return true;
}

size_t aural__utf8_put(uint8_t out[4], uint32_t cp) {
  if (cp < 0x80) {
    out[0] = (uint8_t)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (uint8_t)(0xC0 | cp >> 6);
    out[1] = (uint8_t)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (uint8_t)(0xE0 | cp >> 12);
    out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (uint8_t)(0xF0 | cp >> 18);
  out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
  out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
  out[3] = (uint8_t)(0x80 | (cp & 0x3F));
  return 4;
}

void aural__set_why(char *why, size_t why_len, const char *fmt, ...) {
  if (why == NULL || why_len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, why_len, fmt, ap);
  va_end(ap);
}

/* --- numbers -------------------------------------------------------------- */

/* Significant digits kept when converting: 767 suffice to round any decimal
 * correctly to a double; the digits dropped beyond them are folded into one
 * sticky digit, so the result stays correctly rounded. */
#define DOUBLE_MAX_DIGITS 770

/*
 * The number is rewritten as "[-]DIGITSeEXP", without a decimal point, and
 * handed to strtod: strtod alone would read the point of the current
 * LC_NUMERIC locale, which need not be '.'.
 */
int aural__parse_double(const char *s, size_t n, double *out) {
  char buf[DOUBLE_MAX_DIGITS + 32];
  size_t k = 0, i = 0, n_digits = 0;
  long long exp10 = 0;
  bool any = false, sticky = false, neg = false;
  if (i < n && s[i] == '-') {
    neg = true;
    buf[k++] = '-';
    i++;
  }
  for (int part = 0; part < 2; part++) {
    if (part == 1) {
      if (i >= n || s[i] != '.') break;
      i++;
      if (i >= n || s[i] < '0' || s[i] > '9') return -1;
    }
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
      any = true;
      if (n_digits == 0 && s[i] == '0') {
        if (part == 1) exp10--; /* a leading zero of the fraction */
        continue;
      }
      if (n_digits < DOUBLE_MAX_DIGITS) {
        buf[k++] = s[i];
        n_digits++;
        if (part == 1) exp10--;
      } else {
        if (part == 0) exp10++;
        if (s[i] != '0') sticky = true;
      }
    }
  }
  if (!any) return -1;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    bool eneg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) eneg = s[i++] == '-';
    if (i >= n || s[i] < '0' || s[i] > '9') return -1;
    long long e = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
      if (e < 1000000000) e = e * 10 + (s[i] - '0');
    exp10 += eneg ? -e : e;
  }
  if (i != n) return -1;
  if (n_digits == 0) {
    *out = neg ? -0.0 : 0.0;
    return 0;
  }
  if (sticky) {
    buf[k++] = '1';
    exp10--;
  }
  if (exp10 > 999999) exp10 = 999999;
  if (exp10 < -999999) exp10 = -999999;
  snprintf(buf + k, sizeof buf - k, "e%lld", exp10);
  char *end;
  double v = strtod(buf, &end);
  if (*end != '\0' || isinf(v)) return -1;
  *out = v;
  return 0;
}

/* --- reader --------------------------------------------------------------- */

/* The tokens: the caller's after aural_json_parse_into, else the inline
 * array. */
static const aural_json_token *toks(const aural_json *js) {
  return js->big != NULL ? js->big : js->tokens;
}

const aural_json_token *aural_json_token_at(const aural_json *js, int tok) {
  if (js == NULL || tok < 0 || (uint32_t)tok >= js->n_tokens) return NULL;
  return &toks(js)[tok];
}

typedef struct parser {
  aural_json *js;
  const uint8_t *s;
  size_t len;
  size_t pos;
  char *why;
  size_t why_len;
  bool lists; /* arrays keep only their own token (aural_json_parse_lists) */
  aural_json_token *tok; /* js->tokens, or the caller's (parse_into) */
  uint32_t cap;
  bool sort_names; /* duplicate names found by check_names_sorted */
  /* The member names leading to the value being read, for messages. */
  int path[JSON_MAX_DEPTH];
  int path_n;
} parser;

/* Writes why as "byte N (in "a"."b"): what". Returns -1. */
static int fail(parser *p, const char *fmt, ...) {
  if (p->why == NULL || p->why_len == 0) return -1;
  char where[192] = "";
  size_t n = 0;
  for (int i = 0; i < p->path_n && n < sizeof where; i++) {
    const aural_json_token *k = &p->tok[p->path[i]];
    int len = k->len > 48 ? 48 : (int)k->len;
    n += (size_t)snprintf(where + n, sizeof where - n, "%s\"%.*s%s\"",
                          i == 0 ? " (in " : ".", len, p->js->text + k->start,
                          k->len > 48 ? "..." : "");
  }
  if (p->path_n > 0 && n < sizeof where)
    snprintf(where + n, sizeof where - n, ")");
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  aural__set_why(p->why, p->why_len, "byte %zu%s: %s", p->pos, where, what);
  return -1;
}

static void skip_ws(parser *p) {
  while (p->pos < p->len) {
    uint8_t c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int new_token(parser *p, aural_json_kind kind) {
  aural_json *js = p->js;
  if (js->n_tokens >= p->cap) return fail(p, "more than %u JSON tokens", p->cap);
  int t = (int)js->n_tokens++;
  p->tok[t] = (aural_json_token){.kind = (uint8_t)kind,
                                     .start = (uint32_t)p->pos,
                                     .len = 0,
                                     .n_items = 0,
                                     .next = (uint32_t)t + 1};
  return t;
}

static int hex_digit(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* The 4 hex digits at s (caller checked 4 bytes are there), or -1. */
static int32_t hex4(const uint8_t *s) {
  int32_t v = 0;
  for (int i = 0; i < 4; i++) {
    int d = hex_digit(s[i]);
    if (d < 0) return -1;
    v = v << 4 | d;
  }
  return v;
}

/* p->pos is at the opening quote. Checks escapes, UTF-8 and that \u
 * surrogates come in pairs. */
static int parse_string(parser *p) {
  int t = new_token(p, AURAL_JSON_STRING);
  if (t < 0) return -1;
  p->pos++;
  size_t start = p->pos;
  for (;;) {
    if (p->pos >= p->len) return fail(p, "unterminated string");
    uint8_t c = p->s[p->pos];
    if (c == '"') break;
    if (c < 0x20) return fail(p, "control character in string");
    if (c == '\\') {
      if (p->pos + 1 >= p->len) return fail(p, "unterminated string");
      uint8_t e = p->s[p->pos + 1];
      if (e != 'u') {
        if (strchr("\"\\/bfnrt", e) == NULL || e == '\0')
          return fail(p, "invalid escape in string");
        p->pos += 2;
        continue;
      }
      if (p->len - p->pos < 6) return fail(p, "truncated \\u escape");
      int32_t u = hex4(p->s + p->pos + 2);
      if (u < 0) return fail(p, "invalid \\u escape");
      if (u >= 0xDC00 && u <= 0xDFFF)
        return fail(p, "lone low surrogate in \\u escape");
      if (u >= 0xD800 && u <= 0xDBFF) {
        const uint8_t *q = p->s + p->pos + 6;
        if (p->len - p->pos < 12 || q[0] != '\\' || q[1] != 'u')
          return fail(p, "lone high surrogate in \\u escape");
        int32_t lo = hex4(q + 2);
        if (lo < 0xDC00 || lo > 0xDFFF)
          return fail(p, "lone high surrogate in \\u escape");
        p->pos += 12;
      } else {
        p->pos += 6;
      }
      continue;
    }
    uint32_t cp;
    size_t k = aural__utf8_seq(p->s + p->pos, p->len - p->pos, &cp);
    if (k == 0) return fail(p, "invalid UTF-8 in string");
    p->pos += k;
  }
  p->tok[t].start = (uint32_t)start;
  p->tok[t].len = (uint32_t)(p->pos - start);
  p->pos++;
  return t;
}

static bool at_digit(const parser *p) {
  return p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9';
}

/* number = [ minus ] int [ frac ] [ exp ] (RFC 8259 §6). */
static int parse_number(parser *p) {
  int t = new_token(p, AURAL_JSON_NUMBER);
  if (t < 0) return -1;
  size_t start = p->pos;
  if (p->s[p->pos] == '-') p->pos++;
  if (!at_digit(p)) return fail(p, "digit expected in number");
  if (p->s[p->pos] == '0') {
    p->pos++;
    if (at_digit(p)) return fail(p, "leading zero in number");
  } else {
    while (at_digit(p)) p->pos++;
  }
  if (p->pos < p->len && p->s[p->pos] == '.') {
    p->pos++;
    if (!at_digit(p)) return fail(p, "digit expected after '.'");
    while (at_digit(p)) p->pos++;
  }
  if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
    p->pos++;
    if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
      p->pos++;
    if (!at_digit(p)) return fail(p, "digit expected in exponent");
    while (at_digit(p)) p->pos++;
  }
  p->tok[t].start = (uint32_t)start;
  p->tok[t].len = (uint32_t)(p->pos - start);
  return t;
}

static int parse_literal(parser *p, const char *word, aural_json_kind kind) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
    return fail(p, "invalid literal");
  int t = new_token(p, kind);
  if (t < 0) return -1;
  p->tok[t].len = (uint32_t)n;
  p->pos += n;
  return t;
}

static bool same_string(const aural_json *js, int a, int b);
static uint32_t string_hash(const aural_json *js, int t);

static int parse_value(parser *p, int depth);

/* Fails on the member name at token key, which an earlier one repeats. */
static int fail_duplicate(parser *p, int key) {
  const aural_json_token *k = &p->tok[key];
  p->pos = k->start;
  int len = k->len > 64 ? 64 : (int)k->len;
  return fail(p, "duplicate member name \"%.*s\"", len,
              p->js->text + k->start);
}

typedef struct name_ref {
  uint32_t hash;
  uint32_t tok;
} name_ref;

static int cmp_name_ref(const void *a, const void *b) {
  const name_ref *x = a, *y = b;
  if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
  return x->tok < y->tok ? -1 : x->tok > y->tok;
}

/* The duplicate check of a large document's object at token t, once it is
 * complete: its names sorted by hash, so that it costs n log n rather
 * than the n^2 of comparing each name with those before it. The one
 * allocation of the reader, and only with aural_json_parse_into. */
static int check_names_sorted(parser *p, int t) {
  uint32_t n = p->tok[t].n_items;
  if (n < 2) return 0;
  name_ref *refs = malloc(n * sizeof *refs);
  if (refs == NULL) return fail(p, "out of memory checking member names");
  uint32_t k = (uint32_t)t + 1;
  for (uint32_t i = 0; i < n; i++) {
    refs[i] = (name_ref){.hash = p->tok[k].hash, .tok = k};
    k = p->tok[k + 1].next;
  }
  qsort(refs, n, sizeof *refs, cmp_name_ref);
  int dup = -1; /* the later of the first pair found, in text order */
  for (uint32_t i = 0; i < n && dup < 0; i++)
    for (uint32_t j = i + 1; j < n && refs[j].hash == refs[i].hash; j++)
      if (same_string(p->js, (int)refs[i].tok, (int)refs[j].tok)) {
        dup = (int)refs[j].tok;
        break;
      }
  free(refs);
  return dup < 0 ? 0 : fail_duplicate(p, dup);
}

/* p->pos is at '{' or '['. depth counts the enclosing containers. */
static int parse_container(parser *p, int depth, bool object) {
  if (depth >= JSON_MAX_DEPTH) return fail(p, "nesting deeper than 16");
  int t = new_token(p, object ? AURAL_JSON_OBJECT : AURAL_JSON_ARRAY);
  if (t < 0) return -1;
  aural_json *js = p->js;
  aural_json_token *tok = p->tok;
  uint8_t close = object ? '}' : ']';
  p->pos++;
  skip_ws(p);
  if (p->pos < p->len && p->s[p->pos] == close) {
    p->pos++;
  } else {
    for (;;) {
      if (object) {
        if (p->pos >= p->len || p->s[p->pos] != '"')
          return fail(p, "member name expected");
        int key = parse_string(p);
        if (key < 0) return -1;
        /* A duplicate name: which value counts would be up to the reader,
         * so the text is malformed. Names are compared decoded, and only
         * when their hashes agree, so that a large object of long names
         * costs little more than reading it. */
        uint32_t h = string_hash(js, key);
        tok[key].hash = h;
        int k = t + 1;
        for (uint32_t i = 0; i < tok[t].n_items && !p->sort_names; i++) {
          if (tok[k].hash == h && same_string(js, k, key))
            return fail_duplicate(p, key);
          k = (int)tok[k + 1].next;
        }
        skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != ':')
          return fail(p, "':' expected after member name");
        p->pos++;
        skip_ws(p);
        p->path[p->path_n++] = key;
      }
      int v = parse_value(p, depth + 1);
      if (v < 0) return -1;
      if (object) p->path_n--;
      tok[t].n_items++;
      /* A list's elements are checked, then their tokens are given back:
       * aural_json_list_next() reads them again one at a time. */
      if (p->lists && !object) js->n_tokens = (uint32_t)t + 1;
      skip_ws(p);
      if (p->pos >= p->len)
        return fail(p, object ? "unterminated object" : "unterminated array");
      uint8_t c = p->s[p->pos];
      if (c == close) {
        p->pos++;
        break;
      }
      if (c != ',')
        return fail(p, object ? "',' or '}' expected" : "',' or ']' expected");
      p->pos++;
      skip_ws(p);
      if (p->pos < p->len && p->s[p->pos] == close)
        return fail(p, "trailing comma");
    }
  }
  tok[t].len = (uint32_t)(p->pos - tok[t].start);
  tok[t].next = js->n_tokens;
  if (object && p->sort_names && check_names_sorted(p, t) < 0) return -1;
  return t;
}

static int parse_value(parser *p, int depth) {
  if (p->pos >= p->len) return fail(p, "value expected");
  switch (p->s[p->pos]) {
  case '{':
    return parse_container(p, depth, true);
  case '[':
    return parse_container(p, depth, false);
  case '"':
    return parse_string(p);
  case 't':
    return parse_literal(p, "true", AURAL_JSON_TRUE);
  case 'f':
    return parse_literal(p, "false", AURAL_JSON_FALSE);
  case 'n':
    return parse_literal(p, "null", AURAL_JSON_NULL);
  default:
    if (p->s[p->pos] == '-' || (p->s[p->pos] >= '0' && p->s[p->pos] <= '9'))
      return parse_number(p);
    return fail(p, "value expected");
  }
}

/* Parses one value at the start of text. With prefix, bytes after it are
 * left for the caller and *used says how many were read; without, only
 * white space may follow. */
static int parse_text(aural_json *js, aural_json_token *tokens, uint32_t cap,
                      const char *text, size_t len, bool lists, size_t *used,
                      char *why, size_t why_len) {
  js->text = text;
  js->text_len = len;
  js->n_tokens = 0;
  js->big = tokens == js->tokens ? NULL : tokens;
  parser p = {.js = js,
              .tok = tokens,
              .cap = cap,
              .sort_names = tokens != js->tokens,
              .s = (const uint8_t *)text,
              .len = text == NULL ? 0 : len,
              .pos = 0,
              .why = why,
              .why_len = why_len,
              .lists = lists};
  if (len > UINT32_MAX) {
    aural__set_why(why, why_len, "JSON text of %zu bytes is too long", len);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  skip_ws(&p);
  if (parse_value(&p, 0) < 0) {
    js->n_tokens = 0;
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  if (used != NULL) {
    *used = p.pos;
    return 0;
  }
  skip_ws(&p);
  if (p.pos != p.len) {
    fail(&p, "unexpected bytes after the value");
    js->n_tokens = 0;
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  return 0;
}

int aural_json_parse(aural_json *js, const char *text, size_t len, char *why,
                     size_t why_len) {
  return parse_text(js, js->tokens, AURAL_PROTO_JSON_TOKENS, text, len, false,
                    NULL, why, why_len);
}

int aural_json_parse_into(aural_json *js, aural_json_token *tokens,
                          uint32_t cap, const char *text, size_t len,
                          char *why, size_t why_len) {
  if (tokens == NULL || cap == 0) {
    js->n_tokens = 0;
    aural__set_why(why, why_len, "no room for JSON tokens");
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  return parse_text(js, tokens, cap, text, len, false, NULL, why, why_len);
}

int aural_json_parse_lists(aural_json *js, const char *text, size_t len,
                           char *why, size_t why_len) {
  return parse_text(js, js->tokens, AURAL_PROTO_JSON_TOKENS, text, len, true,
                    NULL, why, why_len);
}

int aural_json_list_init(const aural_json *js, int tok, aural_json_list *l) {
  memset(l, 0, sizeof *l);
  if (js == NULL || tok < 0 || (uint32_t)tok >= js->n_tokens ||
      toks(js)[tok].kind != AURAL_JSON_ARRAY)
    return -1;
  l->text = js->text + toks(js)[tok].start;
  l->len = toks(js)[tok].len;
  l->n_items = toks(js)[tok].n_items;
  l->pos = 1; /* after the '[' */
  return 0;
}

static size_t skip_ws_at(const char *s, size_t len, size_t i) {
  while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' ||
                     s[i] == '\r'))
    i++;
  return i;
}

int aural_json_list_next(aural_json_list *l, aural_json *item, char *why,
                         size_t why_len) {
  if (l == NULL || l->text == NULL || l->index >= l->n_items) return 0;
  size_t i = skip_ws_at(l->text, l->len, l->pos);
  if (l->index > 0) {
    if (i >= l->len || l->text[i] != ',') {
      aural__set_why(why, why_len, "list item %u: ',' expected", l->index);
      return AURAL_PROTO_EBAD_PAYLOAD;
    }
    i = skip_ws_at(l->text, l->len, i + 1);
  }
  size_t used = 0;
  char detail[96] = "";
  if (i > l->len ||
      parse_text(item, item->tokens, AURAL_PROTO_JSON_TOKENS, l->text + i,
                 l->len - i, true, &used, detail, sizeof detail) != 0) {
    aural__set_why(why, why_len, "list item %u: %s", l->index, detail);
    return AURAL_PROTO_EBAD_PAYLOAD;
  }
  l->pos = (uint32_t)(i + used);
  l->index++;
  return 1;
}

/* --- accessors ------------------------------------------------------------ */

static const aural_json_token *token(const aural_json *js, int tok,
                                     aural_json_kind kind) {
  const aural_json_token *t = aural_json_token_at(js, tok);
  return t != NULL && t->kind == kind ? t : NULL;
}

/* The next code point of a string token that the parser accepted, from
 * raw offset *i (advanced). */
static uint32_t next_code_point(const uint8_t *s, size_t len, size_t *i) {
  if (s[*i] != '\\') {
    uint32_t cp = 0xFFFD;
    size_t k = aural__utf8_seq(s + *i, len - *i, &cp);
    *i += k ? k : 1;
    return cp;
  }
  uint8_t e = s[*i + 1];
  *i += 2;
  switch (e) {
  case 'b':
    return '\b';
  case 'f':
    return '\f';
  case 'n':
    return '\n';
  case 'r':
    return '\r';
  case 't':
    return '\t';
  case 'u':
    break;
  default:
    return e; /* '"', '\\' or '/' */
  }
  uint32_t u = (uint32_t)hex4(s + *i);
  *i += 4;
  if (u >= 0xD800 && u <= 0xDBFF) {
    uint32_t lo = (uint32_t)hex4(s + *i + 2);
    *i += 6;
    return 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
  }
  return u;
}

static bool has_backslash(const aural_json *js, const aural_json_token *t) {
  return memchr(js->text + t->start, '\\', t->len) != NULL;
}

/* FNV-1a over the decoded code points of string token t. */
static uint32_t string_hash(const aural_json *js, int t) {
  const aural_json_token *k = &toks(js)[t];
  const uint8_t *s = (const uint8_t *)js->text + k->start;
  uint32_t h = 2166136261u;
  size_t i = 0;
  while (i < k->len) {
    h ^= next_code_point(s, k->len, &i);
    h *= 16777619u;
  }
  return h;
}

/* Whether string tokens a and b hold the same text once decoded. */
static bool same_string(const aural_json *js, int a, int b) {
  const aural_json_token *ta = &toks(js)[a], *tb = &toks(js)[b];
  const uint8_t *sa = (const uint8_t *)js->text + ta->start,
                *sb = (const uint8_t *)js->text + tb->start;
  if (!has_backslash(js, ta) && !has_backslash(js, tb))
    return ta->len == tb->len && memcmp(sa, sb, ta->len) == 0;
  size_t i = 0, j = 0;
  while (i < ta->len && j < tb->len)
    if (next_code_point(sa, ta->len, &i) != next_code_point(sb, tb->len, &j))
      return false;
  return i == ta->len && j == tb->len;
}

/* Whether string token t decodes to the NUL-terminated key. */
static bool string_equals(const aural_json *js, const aural_json_token *t,
                          const char *key) {
  const uint8_t *s = (const uint8_t *)js->text + t->start;
  size_t key_len = strlen(key);
  if (!has_backslash(js, t))
    return t->len == key_len && memcmp(s, key, key_len) == 0;
  size_t i = 0, j = 0;
  while (i < t->len) {
    uint8_t u[4];
    size_t k = aural__utf8_put(u, next_code_point(s, t->len, &i));
    if (key_len - j < k || memcmp(key + j, u, k) != 0) return false;
    j += k;
  }
  return j == key_len;
}

int aural_json_get(const aural_json *js, int obj, const char *key) {
  const aural_json_token *t = token(js, obj, AURAL_JSON_OBJECT);
  if (t == NULL || key == NULL) return -1;
  uint32_t k = (uint32_t)obj + 1;
  for (uint32_t i = 0; i < t->n_items; i++) {
    if (string_equals(js, &toks(js)[k], key)) return (int)k + 1;
    k = toks(js)[k + 1].next;
  }
  return -1;
}

int aural_json_item(const aural_json *js, int arr, uint32_t i) {
  const aural_json_token *t = token(js, arr, AURAL_JSON_ARRAY);
  if (t == NULL || i >= t->n_items) return -1;
  uint32_t k = (uint32_t)arr + 1;
  while (i-- > 0) k = toks(js)[k].next;
  return (int)k;
}

int aural_json_string(const aural_json *js, int tok, char *out,
                      size_t out_size) {
  const aural_json_token *t = token(js, tok, AURAL_JSON_STRING);
  if (t == NULL || out == NULL || out_size == 0) return -1;
  const uint8_t *s = (const uint8_t *)js->text + t->start;
  size_t i = 0, n = 0;
  while (i < t->len) {
    uint32_t cp = next_code_point(s, t->len, &i);
    if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return -1;
    uint8_t u[4];
    size_t k = aural__utf8_put(u, cp);
    if (out_size - 1 - n < k) return -1;
    memcpy(out + n, u, k);
    n += k;
  }
  if (n > INT32_MAX) return -1;
  out[n] = '\0';
  return (int)n;
}

int aural_json_int(const aural_json *js, int tok, int64_t lo, int64_t hi,
                   int64_t *out) {
  const aural_json_token *t = token(js, tok, AURAL_JSON_NUMBER);
  if (t == NULL) return -1;
  const char *s = js->text + t->start;
  size_t i = 0;
  bool neg = false;
  if (i < t->len && s[i] == '-') {
    neg = true;
    i++;
  }
  if (i == t->len) return -1;
  uint64_t mag = 0;
  for (; i < t->len; i++) {
    if (s[i] < '0' || s[i] > '9') return -1; /* fraction or exponent */
    uint64_t d = (uint64_t)(s[i] - '0');
    if (mag > (UINT64_MAX - d) / 10) return -1;
    mag = mag * 10 + d;
  }
  int64_t v;
  if (neg) {
    if (mag > (uint64_t)INT64_MAX + 1) return -1;
    v = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
  } else {
    if (mag > (uint64_t)INT64_MAX) return -1;
    v = (int64_t)mag;
  }
  if (v < lo || v > hi) return -1;
  if (out != NULL) *out = v;
  return 0;
}

int aural_json_double(const aural_json *js, int tok, double *out) {
  const aural_json_token *t = token(js, tok, AURAL_JSON_NUMBER);
  if (t == NULL) return -1;
  double v;
  if (aural__parse_double(js->text + t->start, t->len, &v) != 0) return -1;
  if (out != NULL) *out = v;
  return 0;
}

int aural_json_bool(const aural_json *js, int tok, bool *out) {
  if (js == NULL || tok < 0 || (uint32_t)tok >= js->n_tokens) return -1;
  uint8_t kind = toks(js)[tok].kind;
  if (kind != AURAL_JSON_TRUE && kind != AURAL_JSON_FALSE) return -1;
  if (out != NULL) *out = kind == AURAL_JSON_TRUE;
  return 0;
}

/* --- writer --------------------------------------------------------------- */

void aural_jw_init(aural_jw *w, char *buf, size_t cap) {
  *w = (aural_jw){.buf = buf, .cap = buf == NULL ? 0 : cap};
}

static void put(aural_jw *w, const char *s, size_t n) {
  if (w->overflow || n == 0) return;
  if (n > w->cap - w->len) {
    w->overflow = true;
    return;
  }
  memcpy(w->buf + w->len, s, n);
  w->len += n;
}

/* The comma before a value or key, when one precedes it at this level. */
static void separate(aural_jw *w) {
  if (w->need_comma) put(w, ",", 1);
  w->need_comma = false;
}

void aural_jw_begin_object(aural_jw *w) {
  separate(w);
  put(w, "{", 1);
}

void aural_jw_end_object(aural_jw *w) {
  put(w, "}", 1);
  w->need_comma = true;
}

void aural_jw_begin_array(aural_jw *w) {
  separate(w);
  put(w, "[", 1);
}

void aural_jw_end_array(aural_jw *w) {
  put(w, "]", 1);
  w->need_comma = true;
}

/* The quoted, escaped form of the n bytes at s. Control characters become
 * \u00XX; bytes that are not well-formed UTF-8 become U+FFFD, so that the
 * output is always valid JSON. */
static void put_string(aural_jw *w, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  if (s == NULL) s = "";
  put(w, "\"", 1);
  size_t run = 0; /* start of the bytes not yet written */
  size_t i = 0;
  while (i < n) {
    uint8_t c = (uint8_t)s[i];
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      i++;
      continue;
    }
    uint32_t cp;
    size_t k = c < 0x80 ? 1 : aural__utf8_seq((const uint8_t *)s + i, n - i, &cp);
    if (k > 1) {
      i += k;
      continue;
    }
    put(w, s + run, i - run);
    if (c == '"') {
      put(w, "\\\"", 2);
    } else if (c == '\\') {
      put(w, "\\\\", 2);
    } else if (c < 0x20) {
      char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      put(w, e, 6);
    } else {
      put(w, "\\ufffd", 6);
    }
    i++;
    run = i;
  }
  put(w, s + run, n - run);
  put(w, "\"", 1);
}

void aural_jw_key(aural_jw *w, const char *key) {
  separate(w);
  put_string(w, key, key == NULL ? 0 : strlen(key));
  put(w, ":", 1);
  w->need_comma = false;
}

void aural_jw_string_n(aural_jw *w, const char *s, size_t n) {
  separate(w);
  put_string(w, s, s == NULL ? 0 : n);
  w->need_comma = true;
}

void aural_jw_string(aural_jw *w, const char *s) {
  aural_jw_string_n(w, s, s == NULL ? 0 : strlen(s));
}

static void put_value(aural_jw *w, const char *s, size_t n) {
  separate(w);
  put(w, s, n);
  w->need_comma = true;
}

void aural_jw_int(aural_jw *w, int64_t v) {
  char b[24];
  int n = snprintf(b, sizeof b, "%lld", (long long)v);
  put_value(w, b, (size_t)n);
}

void aural_jw_uint(aural_jw *w, uint64_t v) {
  char b[24];
  int n = snprintf(b, sizeof b, "%llu", (unsigned long long)v);
  put_value(w, b, (size_t)n);
}

/*
 * The shortest of %.15g, %.16g and %.17g that reads back as v (%.17g always
 * does). printf writes the decimal point of the LC_NUMERIC locale, so any
 * run of bytes that is not a digit, sign or exponent mark is turned into '.'.
 */
void aural_jw_double(aural_jw *w, double v) {
  if (!isfinite(v)) {
    put_value(w, "null", 4);
    return;
  }
  char b[48], json[48];
  size_t n = 0;
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(b, sizeof b, "%.*g", prec, v);
    n = 0;
    for (size_t i = 0; b[i] != '\0'; i++) {
      char c = b[i];
      if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == 'e') {
        json[n++] = c;
      } else if (n == 0 || json[n - 1] != '.') {
        json[n++] = '.';
      }
    }
    double back;
    if (aural__parse_double(json, n, &back) == 0 && back == v) break;
  }
  put_value(w, json, n);
}

void aural_jw_bool(aural_jw *w, bool v) {
  put_value(w, v ? "true" : "false", v ? 4 : 5);
}

void aural_jw_null(aural_jw *w) { put_value(w, "null", 4); }

long aural_jw_finish(const aural_jw *w) {
  if (w->overflow || w->len > (size_t)LONG_MAX) return -1;
  return (long)w->len;
}
