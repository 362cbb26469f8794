/*
 * JSON documents of any size (a model file's header, its aural.config),
 * read with the protocol's reader: proto/json.c is the project's one JSON
 * implementation (its header comment says why). This file only sizes the
 * token storage to the document and decodes strings into new memory.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Documents with more tokens than this are refused before any storage is
 * reserved for them (24 bytes each: 96 MiB). */
#define MAX_TOKENS (4u << 20)

/* An upper bound on the tokens of text: every value after the first
 * follows a '[', '{', ',' or ':' outside a string, and so does every
 * member name. The reader checks the text itself. */
static size_t token_bound(const char *text, size_t len) {
  size_t n = 1;
  bool in_string = false;
  for (size_t i = 0; i < len; i++) {
    char c = text[i];
    if (in_string) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{' || c == ',' || c == ':') {
      n++;
    }
  }
  return n;
}

int aural__json_parse(aural__json **out, const char *text, size_t len,
                      char *why, size_t why_len) {
  *out = NULL;
  size_t cap = token_bound(text, len);
  if (cap > MAX_TOKENS) {
    snprintf(why, why_len, "more than %u JSON tokens", MAX_TOKENS);
    return AURAL_EFORMAT;
  }
  aural__json *d = calloc(1, sizeof *d);
  if (d != NULL) d->tokens = malloc(cap * sizeof *d->tokens);
  if (d == NULL || d->tokens == NULL) {
    aural__json_free(d);
    snprintf(why, why_len, "out of memory for %zu JSON tokens", cap);
    return AURAL_ENOMEM;
  }
  if (aural_json_parse_into(&d->js, d->tokens, (uint32_t)cap, text, len, why,
                            why_len) != 0) {
    aural__json_free(d);
    return AURAL_EFORMAT;
  }
  *out = d;
  return 0;
}

void aural__json_free(aural__json *d) {
  if (d == NULL) return;
  free(d->tokens);
  free(d);
}

char *aural__json_strdup(const aural_json *js, int tok) {
  const aural_json_token *t = aural_json_token_at(js, tok);
  if (t == NULL || t->kind != AURAL_JSON_STRING) return NULL;
  /* Decoded, a string is never longer than its escaped form. */
  char *s = malloc((size_t)t->len + 1);
  if (s != NULL && aural_json_string(js, tok, s, (size_t)t->len + 1) < 0) {
    free(s);
    return NULL;
  }
  return s;
}

bool aural__json_is(const aural_json *js, int tok, aural_json_kind kind) {
  const aural_json_token *t = aural_json_token_at(js, tok);
  return t != NULL && t->kind == kind;
}

int aural__json_after(const aural_json *js, int tok) {
  const aural_json_token *t = aural_json_token_at(js, tok);
  return t != NULL ? (int)t->next : -1;
}

bool aural__json_string_is(const aural_json *js, int tok, const char *want) {
  char buf[64];
  return strlen(want) < sizeof buf &&
         aural_json_string(js, tok, buf, sizeof buf) >= 0 &&
         strcmp(buf, want) == 0;
}
