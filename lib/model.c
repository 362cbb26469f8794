/*
 * Model loading: safetensors (8-byte little-endian header length, JSON
 * header, raw little-endian tensors) with the aural.config metadata.
 *
 * The file is untrusted. Checks, in order, before any tensor byte is read:
 *  1. header length: at most 100 MB and inside the file;
 *  2. header: a JSON object; __metadata__ with format "aural", version "1"
 *     and a valid aural.config;
 *  3. each entry: known dtype, shape of non-negative integers whose
 *     product times the element size does not overflow and equals the
 *     byte range, data_offsets inside the data area; no duplicate names;
 *  4. the byte ranges tile the data area exactly: sorted, they start at 0,
 *     each begins where the previous ends, the last ends at end of file;
 *  5. the set of tensors is exactly what the config implies, each with the
 *     shape the config implies.
 * Only then is memory for the weights allocated and the data converted.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aural/encoder.h"
#include "aural/model.h"
#include "internal.h"

#define MAX_HEADER_BYTES (100u * 1000u * 1000u)
#define MAX_DIM 65536
#define MAX_LAYERS 1024
#define MAX_WINDOW 1000000
#define MAX_LEAD_IN 1000 /* 10 s at 10 ms */
#define MAX_VOCAB 1000000
/* Bytes of one vocabulary token. Every buffer of CTC text (a stream's,
 * aurald's for each chunk) holds chunk_frames times the longest token, so
 * a token of a few megabytes in a small file would make each chunk of
 * each stream ask for hundreds of them. Real tokens (phones, BPE pieces)
 * are a few bytes. */
#define MAX_TOKEN_BYTES 1024
#define AURAL__MAX_KV_BYTES (1024.0 * 1048576) /* per stream */

void aural_model_load_config_default(aural_model_load_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->weights = AURAL_WEIGHTS_F32;
  cfg->max_memory_bytes = AURAL_MODEL_DEFAULT_MAX_MEMORY;
  cfg->batch_rows = AURAL_MODEL_DEFAULT_BATCH_ROWS;
}

static uint64_t max_memory_of(const aural_model_load_config *lc) {
  return lc->max_memory_bytes ? lc->max_memory_bytes
                              : AURAL_MODEL_DEFAULT_MAX_MEMORY;
}

/* How the matrices are held: bf16 under precision bf16 (or weights bf16),
 * else as weights says. */
static aural_weight_type held_type(const aural_model_load_config *lc) {
  return lc->precision == AURAL_PRECISION_BF16 ? AURAL_WEIGHTS_BF16
                                               : lc->weights;
}

static size_t batch_rows_of(const aural_model_load_config *lc) {
  return lc->batch_rows ? lc->batch_rows : AURAL_MODEL_DEFAULT_BATCH_ROWS;
}

/* ---- half precision ---------------------------------------------------- */

float aural__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13); /* inf or NaN */
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { /* subnormal: normalise */
    int e = -1;
    do {
      man <<= 1;
      e++;
    } while ((man & 0x400) == 0);
    bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t aural__f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t exp = (x >> 23) & 0xff, man = x & 0x7fffff;
  if (exp == 0xff) /* inf, or NaN kept quiet */
    return sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0);
  int e = (int)exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; /* overflow to inf */
  if (e <= 0) {                        /* subnormal half, or zero */
    if (e < -10) return sign;
    man |= 0x800000;
    int shift = 14 - e; /* 14..24 */
    uint32_t h = man >> shift, rest = man & ((1u << shift) - 1),
             half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) h++;
    return sign | (uint16_t)h;
  }
  uint32_t h = ((uint32_t)e << 10) | (man >> 13), rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++; /* may carry into exp */
  return sign | (uint16_t)h;
}


/* ---- strict JSON ------------------------------------------------------ */

size_t aural__utf8_len(const unsigned char *p, size_t n) {
  size_t len = p[0] < 0x80 ? 1 : (p[0] & 0xe0) == 0xc0 ? 2
               : (p[0] & 0xf0) == 0xe0 ? 3 : (p[0] & 0xf8) == 0xf0 ? 4 : 0;
  if (len == 0 || len > n || (len == 2 && p[0] < 0xc2)) return 0;
  for (size_t i = 1; i < len; i++)
    if ((p[i] & 0xc0) != 0x80) return 0;
  uint32_t cp = len == 1 ? p[0] : len == 2 ? (p[0] & 0x1fu) << 6 | (p[1] & 0x3fu)
              : len == 3 ? (p[0] & 0x0fu) << 12 | (p[1] & 0x3fu) << 6 | (p[2] & 0x3fu)
                         : (p[0] & 0x07u) << 18 | (p[1] & 0x3fu) << 12 |
                               (p[2] & 0x3fu) << 6 | (p[3] & 0x3fu);
  if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
      (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
    return 0; /* overlong, surrogate or out of range */
  return len;
}

/* Bytes a header must not hold, found before the JSON reader runs so that
 * the message can name the byte: what is not UTF-8, control characters
 * anywhere except whitespace between tokens, and the escape \u0000 (C
 * strings would end there; Python's would not). Returns the offset of the
 * first, or len. */
static size_t first_bad_byte(const unsigned char *p, size_t len) {
  int in_string = 0;
  for (size_t i = 0; i < len;) {
    unsigned char c = p[i];
    size_t n = aural__utf8_len(p + i, len - i);
    if (n == 0) return i;
    if (in_string) {
      if (c < 0x20) return i;
      if (c == '\\') {
        if (len - i >= 6 && memcmp(p + i, "\\u0000", 6) == 0) return i;
        n = 2; /* the escaped character cannot be a control byte either */
        if (i + 1 < len && p[i + 1] < 0x20) return i + 1;
      } else if (c == '"') {
        in_string = 0;
      }
    } else if (c == '"') {
      in_string = 1;
    } else if (c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      return i;
    }
    i += n;
  }
  return len;
}

/* Parses a JSON object that must fill [p, p + len) but for trailing
 * spaces (the padding safetensors writers add; the reader allows white
 * space after the value). NULL on failure, with *bad_at set to a byte the
 * pre-check refuses, or to len and why saying what the reader refused
 * (duplicate member names included: parsers disagree on which one wins,
 * so a file with one could mean different models here and in the
 * reference). */
static aural__json *parse_whole(const char *p, size_t len, size_t *bad_at,
                                int *rc, char *why, size_t why_len) {
  *rc = AURAL_EFORMAT;
  *bad_at = len;
  snprintf(why, why_len, "not a JSON object");
  if (len == 0 || p[0] != '{') return NULL; /* a byte order mark, or not an object */
  *bad_at = first_bad_byte((const unsigned char *)p, len);
  if (*bad_at < len) return NULL;
  aural__json *d;
  *rc = aural__json_parse(&d, p, len, why, why_len);
  return d;
}

/* ---- config ------------------------------------------------------------ */

typedef struct cfg_reader {
  const aural_json *js; /* its root (token 0) is the object */
  const char *where; /* file name for messages */
  aural_err *err;
  int rc;
} cfg_reader;

/* An integer field in [lo, hi]; required unless dflt is given (has_dflt). */
static int cfg_int(cfg_reader *r, const char *key, int lo, int hi,
                   int has_dflt, int dflt) {
  if (r->rc < 0) return 0;
  int it = aural_json_get(r->js, 0, key);
  if (it < 0) {
    if (has_dflt) return dflt;
    r->rc = aural__err_set(r->err, AURAL_ECONFIG,
                           "%s: aural.config lacks the field \"%s\"", r->where,
                           key);
    return 0;
  }
  double v;
  if (aural_json_double(r->js, it, &v) != 0) v = NAN;
  if (!(v >= lo && v <= hi) || v != floor(v)) {
    r->rc = aural__err_set(r->err, AURAL_ECONFIG,
                           "%s: aural.config field \"%s\" must be an integer "
                           "in %d..%d",
                           r->where, key, lo, hi);
    return 0;
  }
  return (int)v;
}

static double cfg_pos_number(cfg_reader *r, const char *key, double dflt) {
  if (r->rc < 0) return 0;
  int it = aural_json_get(r->js, 0, key);
  if (it < 0) return dflt;
  double v;
  if (aural_json_double(r->js, it, &v) != 0) v = NAN;
  if (!(v > 0 && isfinite(v))) {
    r->rc = aural__err_set(r->err, AURAL_ECONFIG,
                           "%s: aural.config field \"%s\" must be a positive "
                           "number",
                           r->where, key);
    return 0;
  }
  return v;
}

static bool cfg_bool(cfg_reader *r, const char *key, bool dflt) {
  if (r->rc < 0) return false;
  int it = aural_json_get(r->js, 0, key);
  if (it < 0) return dflt;
  bool v;
  if (aural_json_bool(r->js, it, &v) != 0) {
    r->rc = aural__err_set(r->err, AURAL_ECONFIG,
                           "%s: aural.config field \"%s\" must be true or "
                           "false",
                           r->where, key);
    return false;
  }
  return v;
}

/* A string field that must be one of names[0..n); returns its index. */
static int cfg_enum(cfg_reader *r, const char *key, const char *const *names,
                    int n, int dflt) {
  if (r->rc < 0) return 0;
  int it = aural_json_get(r->js, 0, key);
  if (it < 0) return dflt;
  for (int i = 0; i < n; i++)
    if (aural__json_string_is(r->js, it, names[i])) return i;
  char list[128] = "";
  for (int i = 0; i < n; i++) {
    strncat(list, names[i], sizeof list - strlen(list) - 1);
    if (i + 1 < n) strncat(list, ", ", sizeof list - strlen(list) - 1);
  }
  r->rc = aural__err_set(r->err, AURAL_ECONFIG,
                         "%s: aural.config field \"%s\" must be one of: %s",
                         r->where, key, list);
  return 0;
}

/* Whether the n tokens of v are all spelled differently: a lexicon names
 * a token by its spelling, and two ids for one spelling would make the
 * words it spells depend on which the search met first. Otherwise sets
 * *rc and err, naming the first id spelled again and that id (or
 * ENOMEM). Sorting (spelling, id) pairs keeps a hostile million-token
 * vocabulary at n log n. */
typedef struct spelled {
  const char *text;
  int id;
} spelled;

static int by_spelling(const void *a, const void *b) {
  const spelled *x = a, *y = b;
  int c = strcmp(x->text, y->text);
  return c != 0 ? c : (x->id > y->id) - (x->id < y->id);
}

static bool check_distinct(char **v, int n, const char *where, aural_err *err,
                           int *rc) {
  spelled *s = malloc((size_t)n * sizeof *s);
  if (s == NULL) {
    *rc = aural__err_set(err, AURAL_ENOMEM, "out of memory");
    return false;
  }
  for (int i = 0; i < n; i++) s[i] = (spelled){v[i], i};
  qsort(s, (size_t)n, sizeof *s, by_spelling);
  /* Of the spellings that repeat, the one whose second id comes first. */
  int first = -1, second = -1;
  for (int i = 1; i < n; i++)
    if (strcmp(s[i - 1].text, s[i].text) == 0 &&
        (i < 2 || strcmp(s[i - 2].text, s[i].text) != 0) &&
        (second < 0 || s[i].id < second))
      first = s[i - 1].id, second = s[i].id;
  free(s);
  if (second < 0) return true;
  *rc = aural__err_set(err, AURAL_ECONFIG,
                       "%s: aural.config vocab entries %d and %d are both "
                       "\"%s\"; tokens must differ",
                       where, first, second, v[first]);
  return false;
}

/* Parses aural.config into cfg and the vocabulary (malloc'ed strings). */
static int parse_config(const char *json, const char *where,
                        aural_model_config *cfg, char ***vocab_out,
                        aural_err *err) {
  static const char *const acts[] = {"relu", "gelu"};
  static const char *const poss[] = {"none", "sinusoidal", "rope"};
  *vocab_out = NULL;
  memset(cfg, 0, sizeof *cfg);
  size_t bad_at;
  int rc;
  char why[256];
  aural__json *doc = parse_whole(json, strlen(json), &bad_at, &rc, why,
                                 sizeof why);
  if (doc == NULL && bad_at == strlen(json) && rc == AURAL_EFORMAT &&
      strcmp(why, "not a JSON object") != 0)
    return aural__err_set(err, AURAL_ECONFIG, "%s: aural.config refused at %s",
                          where, why);
  if (doc == NULL || !aural__json_is(&doc->js, 0, AURAL_JSON_OBJECT)) {
    aural__json_free(doc);
    return rc == AURAL_ENOMEM
               ? aural__err_set(err, rc, "%s: aural.config: %s", where, why)
               : aural__err_set(err, AURAL_ECONFIG,
                                "%s: aural.config is not a JSON object",
                                where);
  }
  const aural_json *js = &doc->js;
  cfg_reader r = {.js = js, .where = where, .err = err};
  aural_fbank_opts_default(&cfg->fbank);
  aural_err ferr;
  if (aural_fbank_opts_from_json(&cfg->fbank, json, strlen(json), &ferr) < 0)
    r.rc = aural__err_set(err, AURAL_ECONFIG, "%s: %s", where, ferr.msg);
  cfg->d_model = cfg_int(&r, "d_model", 1, MAX_DIM, 0, 0);
  cfg->n_heads = cfg_int(&r, "n_heads", 1, MAX_DIM, 0, 0);
  cfg->n_layers = cfg_int(&r, "n_layers", 1, MAX_LAYERS, 0, 0);
  cfg->d_ff = cfg_int(&r, "d_ff", 1, 16 * MAX_DIM, 0, 0);
  cfg->window = cfg_int(&r, "window", 1, MAX_WINDOW, 0, 0);
  cfg->activation = (aural_activation)cfg_enum(&r, "activation", acts, 2, 0);
  cfg->norm_first = cfg_bool(&r, "norm_first", true);
  cfg->layer_norm_eps = cfg_pos_number(&r, "layer_norm_eps", 1e-5);
  cfg->pos_encoding =
      (aural_pos_encoding)cfg_enum(&r, "pos_encoding", poss, 3, 0);
  cfg->rope_theta = cfg_pos_number(&r, "rope_theta", 10000.0);
  cfg->final_norm = cfg_bool(&r, "final_norm", false);
  cfg->lead_in_frames = cfg_int(&r, "lead_in_frames", 0, MAX_LEAD_IN, 1, 0);
  if (r.rc == 0 && cfg->d_model % cfg->n_heads != 0)
    r.rc = aural__err_set(err, AURAL_ECONFIG,
                          "%s: aural.config: n_heads = %d does not divide "
                          "d_model = %d",
                          where, cfg->n_heads, cfg->d_model);
  if (r.rc == 0 && cfg->pos_encoding == AURAL_POS_ROPE &&
      (cfg->d_model / cfg->n_heads) % 2 != 0)
    r.rc = aural__err_set(err, AURAL_ECONFIG,
                          "%s: aural.config: rope needs an even head size, "
                          "d_model / n_heads = %d",
                          where, cfg->d_model / cfg->n_heads);
  if (r.rc == 0 && cfg->pos_encoding == AURAL_POS_SINUSOIDAL &&
      cfg->d_model % 2 != 0)
    r.rc = aural__err_set(err, AURAL_ECONFIG,
                          "%s: aural.config: sinusoidal positions need an "
                          "even d_model, not %d",
                          where, cfg->d_model);

  /* Each stream keeps keys and values of `window` frames per layer: a
   * small file must not make every stream reserve gigabytes. */
  if (r.rc == 0) {
    double kv = 8.0 * cfg->n_layers * (double)cfg->window * cfg->d_model;
    if (kv > AURAL__MAX_KV_BYTES)
      r.rc = aural__err_set(err, AURAL_ECONFIG,
                            "%s: aural.config: n_layers %d x window %d x "
                            "d_model %d needs %.1f MB of key/value ring per "
                            "stream (limit %.0f MB)",
                            where, cfg->n_layers, cfg->window, cfg->d_model,
                            kv / 1048576, AURAL__MAX_KV_BYTES / 1048576);
  }

  int vocab = aural_json_get(js, 0, "vocab");
  if (r.rc == 0 && vocab >= 0 && !aural__json_is(js, vocab, AURAL_JSON_NULL)) {
    const aural_json_token *t = aural_json_token_at(js, vocab);
    int n = t->kind == AURAL_JSON_ARRAY ? (int)t->n_items : -1;
    if (n < 2 || n > MAX_VOCAB) {
      r.rc = aural__err_set(err, AURAL_ECONFIG,
                            "%s: aural.config field \"vocab\" must be a list "
                            "of 2..%d token strings (index 0 = blank)",
                            where, MAX_VOCAB);
    } else {
      char **v = calloc((size_t)n, sizeof *v);
      int i = 0;
      int tok = vocab + 1;
      size_t long_len = 0; /* the length of a token over the limit */
      for (; v != NULL && i < n; i++, tok = aural__json_after(js, tok)) {
        if (!aural__json_is(js, tok, AURAL_JSON_STRING)) break;
        v[i] = aural__json_strdup(js, tok);
        if (v[i] == NULL) break;
        if (strlen(v[i]) > MAX_TOKEN_BYTES) {
          long_len = strlen(v[i]);
          free(v[i]);
          break;
        }
      }
      if (i < n) {
        /* A string that did not copy met the end of memory (\u0000 was
         * refused before: first_bad_byte). */
        r.rc = long_len > 0
                   ? aural__err_set(err, AURAL_ECONFIG,
                                    "%s: aural.config vocab entry %d is %zu "
                                    "bytes long; tokens of at most %d are "
                                    "supported",
                                    where, i, long_len, MAX_TOKEN_BYTES)
               : v == NULL || aural__json_is(js, tok, AURAL_JSON_STRING)
                   ? aural__err_set(err, AURAL_ENOMEM, "out of memory")
                   : aural__err_set(err, AURAL_ECONFIG,
                                    "%s: aural.config vocab entry %d is not "
                                    "a string",
                                    where, i);
        for (int k = 0; v != NULL && k < i; k++) free(v[k]);
        free(v);
      } else if (check_distinct(v, n, where, err, &r.rc)) {
        cfg->vocab_size = n;
        *vocab_out = v;
      } else {
        for (int k = 0; k < n; k++) free(v[k]);
        free(v);
      }
    }
  }
  aural__json_free(doc);
  return r.rc;
}

/* ---- safetensors header ------------------------------------------------ */

typedef enum { DT_F32, DT_F16, DT_BF16 } dtype;

typedef struct entry {
  const char *name; /* decoded, in the loader's names buffer */
  dtype type;
  int n_dims;
  uint64_t shape[8];
  uint64_t begin, end; /* byte range in the data area */
  int used;            /* claimed by an expected tensor */
} entry;

static int cmp_begin(const void *a, const void *b) {
  const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
  return (x->begin > y->begin) - (x->begin < y->begin);
}

/* An exact non-negative integer from JSON, below 2^53. */
static int json_u64(const aural_json *js, int tok, uint64_t *out) {
  double v;
  if (aural_json_double(js, tok, &v) != 0) return 0;
  if (!(v >= 0 && v <= 9007199254740992.0) || v != floor(v)) return 0;
  *out = (uint64_t)v;
  return 1;
}

/* The entry whose value is token it; e->name is already set. */
static int parse_entry(const aural_json *js, int it, uint64_t data_len,
                       entry *e, const char *where, aural_err *err) {
  const char *name = e->name;
  if (!aural__json_is(js, it, AURAL_JSON_OBJECT))
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: tensor \"%s\": header entry is not an object",
                          where, name);
  int dt = aural_json_get(js, it, "dtype");
  int shape = aural_json_get(js, it, "shape");
  int offs = aural_json_get(js, it, "data_offsets");
  size_t elem;
  char dts[24];
  if (aural_json_string(js, dt, dts, sizeof dts) < 0) {
    if (!aural__json_is(js, dt, AURAL_JSON_STRING))
      return aural__err_set(err, AURAL_EFORMAT,
                            "%s: tensor \"%s\": missing dtype", where, name);
    snprintf(dts, sizeof dts, "(long)");
  }
  if (strcmp(dts, "F32") == 0) {
    e->type = DT_F32;
    elem = 4;
  } else if (strcmp(dts, "F16") == 0) {
    e->type = DT_F16;
    elem = 2;
  } else if (strcmp(dts, "BF16") == 0) {
    e->type = DT_BF16;
    elem = 2;
  } else {
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: tensor \"%s\": dtype \"%.16s\" is not "
                          "supported (F32, F16, BF16)",
                          where, name, dts);
  }
  int n_dims = aural__json_is(js, shape, AURAL_JSON_ARRAY)
                   ? (int)aural_json_token_at(js, shape)->n_items
                   : -1;
  if (n_dims < 0 || n_dims > 8)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: tensor \"%s\": shape must be a list of at "
                          "most 8 integers",
                          where, name);
  e->n_dims = n_dims;
  uint64_t n_bytes = elem;
  for (int i = 0; i < n_dims; i++) {
    if (!json_u64(js, aural_json_item(js, shape, (uint32_t)i), &e->shape[i]))
      return aural__err_set(err, AURAL_EFORMAT,
                            "%s: tensor \"%s\": shape[%d] is not a "
                            "non-negative integer",
                            where, name, i);
    if (__builtin_mul_overflow(n_bytes, e->shape[i], &n_bytes))
      return aural__err_set(err, AURAL_EFORMAT,
                            "%s: tensor \"%s\": shape is too large (size "
                            "overflows)",
                            where, name);
  }
  if (!aural__json_is(js, offs, AURAL_JSON_ARRAY) ||
      aural_json_token_at(js, offs)->n_items != 2 ||
      !json_u64(js, aural_json_item(js, offs, 0), &e->begin) ||
      !json_u64(js, aural_json_item(js, offs, 1), &e->end))
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: tensor \"%s\": data_offsets must be two "
                          "non-negative integers",
                          where, name);
  if (e->begin > e->end)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: tensor \"%s\": data_offsets begin %llu is "
                          "after end %llu",
                          where, name, (unsigned long long)e->begin,
                          (unsigned long long)e->end);
  if (e->end > data_len)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: tensor \"%s\": data_offsets [%llu, %llu] lie "
                          "outside the %llu bytes of tensor data",
                          where, name, (unsigned long long)e->begin,
                          (unsigned long long)e->end,
                          (unsigned long long)data_len);
  if (e->end - e->begin != n_bytes)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: tensor \"%s\": shape and dtype need %llu "
                          "bytes but data_offsets span %llu",
                          where, name, (unsigned long long)n_bytes,
                          (unsigned long long)(e->end - e->begin));
  return 0;
}

/* ---- matching names ---------------------------------------------------- */

typedef struct named {
  const char *name;
  size_t index;
} named;

static int cmp_named(const void *a, const void *b) {
  return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* One sort of the header's names, then a binary search per wanted name:
 * a scan per name was O(wanted x entries), 10^10 comparisons for a 100 MB
 * header and 1024 layers. */
int aural__match_names(const char *const *have, size_t n_have,
                       const char *const *want, size_t n_want, size_t *found,
                       uint64_t *n_cmp) {
  named *by_name = malloc((n_have + 1) * sizeof *by_name);
  if (by_name == NULL) return AURAL_ENOMEM;
  for (size_t j = 0; j < n_have; j++) by_name[j] = (named){have[j], j};
  qsort(by_name, n_have, sizeof *by_name, cmp_named);
  uint64_t cmps = 0;
  for (size_t i = 0; i < n_want; i++) {
    found[i] = SIZE_MAX;
    size_t lo = 0, hi = n_have; /* the name, if present, is in [lo, hi) */
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      int c = strcmp(want[i], by_name[mid].name);
      cmps++;
      if (c == 0) {
        found[i] = by_name[mid].index;
        break;
      }
      if (c < 0)
        hi = mid;
      else
        lo = mid + 1;
    }
  }
  free(by_name);
  if (n_cmp != NULL) *n_cmp = cmps;
  return 0;
}

/* ---- expected tensors -------------------------------------------------- */

/* One tensor the config calls for, and where it goes. */
typedef struct want {
  char name[96];
  uint64_t rows, cols; /* cols == 0: a vector of `rows` */
  int is_matrix;       /* may be held as f16 */
  const float **vec;   /* destination of a vector */
  aural__mat *mat;     /* destination of a matrix */
  entry *found;
} want;

typedef struct want_list {
  want *w;
  size_t n, cap;
} want_list;

static int want_add(want_list *l, const char *name, uint64_t rows,
                    uint64_t cols, const float **vec, aural__mat *mat) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    want *p = realloc(l->w, cap * sizeof *p);
    if (p == NULL) return AURAL_ENOMEM;
    l->w = p;
    l->cap = cap;
  }
  want *w = &l->w[l->n++];
  memset(w, 0, sizeof *w);
  snprintf(w->name, sizeof w->name, "%s", name);
  w->rows = rows;
  w->cols = cols;
  w->is_matrix = mat != NULL;
  w->vec = vec;
  w->mat = mat;
  return 0;
}

static int list_wanted(aural_model *m, int has_cmvn, want_list *l) {
  const aural_model_config *c = &m->cfg;
  uint64_t d = (uint64_t)c->d_model, ff = (uint64_t)c->d_ff,
           mels = (uint64_t)c->fbank.num_mel_bins;
  int rc = 0;
#define MAT(nm, r, k, dst) \
  if (rc == 0) rc = want_add(l, nm, r, k, NULL, dst)
#define VEC(nm, r, dst) \
  if (rc == 0) rc = want_add(l, nm, r, 0, dst, NULL)
  MAT("input_proj.weight", d, mels, &m->in_proj);
  VEC("input_proj.bias", d, &m->b_in);
  for (int i = 0; i < c->n_layers; i++) {
    aural__layer *L = &m->layers[i];
    char nm[96];
#define LNAME(suffix) \
  (snprintf(nm, sizeof nm, "encoder.layers.%d.%s", i, suffix), nm)
    MAT(LNAME("self_attn.in_proj_weight"), 3 * d, d, &L->qkv);
    VEC(LNAME("self_attn.in_proj_bias"), 3 * d, &L->b_qkv);
    MAT(LNAME("self_attn.out_proj.weight"), d, d, &L->out);
    VEC(LNAME("self_attn.out_proj.bias"), d, &L->b_out);
    MAT(LNAME("linear1.weight"), ff, d, &L->ff1);
    VEC(LNAME("linear1.bias"), ff, &L->b_ff1);
    MAT(LNAME("linear2.weight"), d, ff, &L->ff2);
    VEC(LNAME("linear2.bias"), d, &L->b_ff2);
    VEC(LNAME("norm1.weight"), d, &L->ln1_w);
    VEC(LNAME("norm1.bias"), d, &L->ln1_b);
    VEC(LNAME("norm2.weight"), d, &L->ln2_w);
    VEC(LNAME("norm2.bias"), d, &L->ln2_b);
#undef LNAME
  }
  if (c->final_norm) {
    VEC("encoder.norm.weight", d, &m->norm_w);
    VEC("encoder.norm.bias", d, &m->norm_b);
  }
  if (c->vocab_size > 0) {
    MAT("head.weight", (uint64_t)c->vocab_size, d, &m->head);
    VEC("head.bias", (uint64_t)c->vocab_size, &m->b_head);
  }
  if (has_cmvn) {
    VEC("frontend.cmvn.mean", mels, &m->cmvn_mean);
    VEC("frontend.cmvn.std", mels, &m->cmvn_std);
  }
#undef MAT
#undef VEC
  return rc;
}

/* Element i of src (little-endian, any alignment) as float. */
static float elem_f32(const unsigned char *src, dtype t, size_t i) {
  float f;
  uint16_t h;
  if (t == DT_F32) {
    memcpy(&f, src + 4 * i, 4);
    return f;
  }
  memcpy(&h, src + 2 * i, 2);
  return t == DT_F16 ? aural__f16_to_f32(h) : aural__bf16_to_f32(h);
}

/* Element i as IEEE half: F16 bits pass through unchanged. */
static uint16_t elem_f16(const unsigned char *src, dtype t, size_t i) {
  uint16_t h;
  if (t != DT_F16) return aural__f32_to_f16(elem_f32(src, t, i));
  memcpy(&h, src + 2 * i, 2);
  return h;
}

/* Converts a row-major (rows, cols) matrix into the packed panel layout
 * (internal.h) of dst, float or (half) IEEE half, zero-padding the last
 * panel. */
static void pack(const unsigned char *src, dtype t, size_t rows, size_t cols,
                 void *dst, bool half) {
  size_t padded = (rows + AURAL__PANEL - 1) / AURAL__PANEL * AURAL__PANEL;
  float *f32 = dst;
  uint16_t *f16 = dst;
  memset(dst, 0, aural__packed_size(rows, cols) * (half ? 2 : 4));
  for (size_t r = 0; r < padded; r++)
    for (size_t c = 0; c < cols; c++) {
      size_t at = aural__packed_at(r, c, cols);
      if (half) f16[at] = r < rows ? elem_f16(src, t, r * cols + c) : 0;
      else f32[at] = r < rows ? elem_f32(src, t, r * cols + c) : 0;
    }
}

/* The same into the bf16 layout (internal.h): each weight rounded to the
 * nearest bfloat16 (a denormal to zero, as the dot products take it). */
static void pack_bf16(const unsigned char *src, dtype t, size_t rows,
                      size_t cols, uint16_t *dst) {
  memset(dst, 0, aural__bf16_packed_size(rows, cols) * sizeof *dst);
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++)
      dst[aural__bf16_packed_at(r, c, cols)] =
          aural__f32_to_bf16(elem_f32(src, t, r * cols + c));
}

/* ---- memory ------------------------------------------------------------ */

/* Elements of the two weight arenas, counted as the loader fills them:
 * each tensor rounded up to 16 elements, matrices packed in panels. */
typedef struct arena_count {
  uint64_t f32, f16;
  aural_weight_type mats; /* matrices go to the f16 arena unless F32 */
  int ok;       /* no overflow so far */
} arena_count;

static void count_add(arena_count *a, uint64_t *acc, uint64_t n,
                      uint64_t times) {
  uint64_t total;
  if (__builtin_add_overflow(n, 15, &n) ||
      __builtin_mul_overflow(n / 16 * 16, times, &total) ||
      __builtin_add_overflow(*acc, total, acc))
    a->ok = 0;
}

static void count_mat(arena_count *a, uint64_t rows, uint64_t cols,
                      uint64_t times) {
  uint64_t panels = rows / AURAL__PANEL + (rows % AURAL__PANEL != 0), n;
  uint64_t stride = a->mats == AURAL_WEIGHTS_BF16
                        ? ((cols + 1) / 2 + 1) * 2 * AURAL__PANEL
                        : (cols + 1) * AURAL__PANEL;
  if (__builtin_mul_overflow(panels, stride, &n)) {
    a->ok = 0;
    return;
  }
  count_add(a, a->mats != AURAL_WEIGHTS_F32 ? &a->f16 : &a->f32, n, times);
}

static void count_vec(arena_count *a, uint64_t n, uint64_t times) {
  count_add(a, &a->f32, n, times);
}

int aural_model_memory_need(const aural_model_config *c,
                            aural_weight_type weights, size_t batch_rows,
                            aural_model_memory *out) {
  if (out == NULL) return AURAL_EINVAL;
  memset(out, 0, sizeof *out);
  if (c == NULL || batch_rows == 0 ||
      batch_rows > AURAL_ENCODER_MAX_BATCH_FRAMES || c->d_model < 1 ||
      c->n_heads < 1 || c->d_model % c->n_heads != 0 || c->n_layers < 1 ||
      c->d_ff < 1 || c->window < 1 || c->fbank.num_mel_bins < 1 ||
      c->vocab_size < 0)
    return AURAL_EINVAL;
  uint64_t d = (uint64_t)c->d_model, ff = (uint64_t)c->d_ff,
           mels = (uint64_t)c->fbank.num_mel_bins,
           v = (uint64_t)c->vocab_size, n_layers = (uint64_t)c->n_layers;
  /* The tensors list_wanted() calls for, in the same shapes. */
  if (weights != AURAL_WEIGHTS_F32 && weights != AURAL_WEIGHTS_F16 &&
      weights != AURAL_WEIGHTS_BF16)
    return AURAL_EINVAL;
  arena_count a = {.mats = weights, .ok = 1};
  count_mat(&a, d, mels, 1);
  count_vec(&a, d, 1);
  count_mat(&a, 3 * d, d, n_layers);
  count_vec(&a, 3 * d, n_layers);
  count_mat(&a, d, d, n_layers);
  count_mat(&a, ff, d, n_layers);
  count_vec(&a, ff, n_layers);
  count_mat(&a, d, ff, n_layers);
  count_vec(&a, d, 6 * n_layers); /* two biases, two norms of two */
  if (c->final_norm) count_vec(&a, d, 2);
  if (v > 0) {
    count_mat(&a, v, d, 1);
    count_vec(&a, v, 1);
  }
  if (c->has_cmvn) count_vec(&a, mels, 2);
  size_t stream = aural__encoder_bytes(c, AURAL__DEFAULT_BATCH),
         ring = aural__ring_bytes(c), batch = aural__batch_bytes(c, batch_rows);
  uint64_t w32, w16, w, total;
  if (!a.ok || stream == SIZE_MAX || ring == SIZE_MAX || batch == SIZE_MAX ||
      __builtin_mul_overflow(a.f32, 4, &w32) ||
      __builtin_mul_overflow(a.f16, 2, &w16) ||
      __builtin_add_overflow(w32, w16, &w) ||
      __builtin_add_overflow(w, (uint64_t)stream, &total) ||
      __builtin_add_overflow(total, (uint64_t)batch, &total))
    return AURAL_EINVAL;
  *out = (aural_model_memory){.weight_bytes = w, .stream_bytes = stream,
                              .ring_bytes = ring, .batch_bytes = batch,
                              .total_bytes = total};
  return 0;
}

/* "1.5 GiB", "12.0 MiB", "4096 bytes". */
static const char *fmt_bytes(char *buf, size_t n, uint64_t bytes) {
  double b = (double)bytes;
  if (bytes >= (uint64_t)1 << 30)
    snprintf(buf, n, "%.1f GiB", b / 1073741824.0);
  else if (bytes >= (uint64_t)1 << 20)
    snprintf(buf, n, "%.1f MiB", b / 1048576.0);
  else
    snprintf(buf, n, "%llu bytes", (unsigned long long)bytes);
  return buf;
}

/* The dimension behind most of a row of scratch: d_ff, the vocabulary,
 * d_model (six rows of it and a head's rotations) or the mel bins. */
static const char *row_dimension(const aural_model_config *c, char *buf,
                                 size_t n) {
  double ff = c->d_ff, v = c->vocab_size, d = 7.0 * c->d_model,
         mels = c->fbank.num_mel_bins;
  if (ff >= v && ff >= d && ff >= mels)
    snprintf(buf, n, "d_ff %d", c->d_ff);
  else if (v >= d && v >= mels)
    snprintf(buf, n, "vocab size %d", c->vocab_size);
  else if (d >= mels)
    snprintf(buf, n, "d_model %d", c->d_model);
  else
    snprintf(buf, n, "num_mel_bins %d", c->fbank.num_mel_bins);
  return buf;
}

/* Refuses a model over the memory limit, naming the dimension behind the
 * largest of its weights, one stream and one worker's batch. Each stream
 * and each compute thread multiplies its part, so a few kilobytes of
 * header must not be able to ask for gigabytes of either. */
/* The caller's load config, checked before any file is opened or read:
 * its faults are the caller's, not the file's. */
static int check_load_config(const aural_model_load_config *lc,
                             aural_err *err) {
  size_t rows = batch_rows_of(lc);
  if (rows > AURAL_ENCODER_MAX_BATCH_FRAMES)
    return aural__err_set(err, AURAL_EINVAL,
                          "model load config: batch_rows %zu is above %d",
                          rows, AURAL_ENCODER_MAX_BATCH_FRAMES);
  if ((lc->precision != AURAL_PRECISION_F32 &&
       lc->precision != AURAL_PRECISION_BF16) ||
      (unsigned)lc->weights > AURAL_WEIGHTS_BF16)
    return aural__err_set(err, AURAL_EINVAL,
                          "model load config: precision (%d) or weights (%d) "
                          "is not one this library knows",
                          (int)lc->precision, (int)lc->weights);
  if (lc->precision == AURAL_PRECISION_BF16 &&
      lc->weights == AURAL_WEIGHTS_F16)
    return aural__err_set(err, AURAL_EINVAL,
                          "model load config: precision bf16 holds its "
                          "weights as bfloat16; weights f16 does not go with "
                          "it");
  return 0;
}

static int check_memory(const aural_model_config *c,
                        const aural_model_load_config *lc, const char *where,
                        aural_err *err) {
  uint64_t limit = max_memory_of(lc);
  size_t rows = batch_rows_of(lc);
  aural_model_memory mm;
  char lim[32], a[32], b[32], e[32], s[32], dim[48], what[160];
  if (aural_model_memory_need(c, held_type(lc), rows, &mm) < 0)
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s: aural.config: the memory the model needs "
                          "overflows (d_model %d, d_ff %d, n_layers %d)",
                          where, c->d_model, c->d_ff, c->n_layers);
  if (mm.total_bytes <= limit) return 0;
  if (mm.batch_bytes >= mm.stream_bytes && mm.batch_bytes >= mm.weight_bytes) {
    snprintf(what, sizeof what, "%s needs %s of scratch per worker at %zu "
             "rows",
             row_dimension(c, dim, sizeof dim),
             fmt_bytes(a, sizeof a, mm.batch_bytes), rows);
  } else if (mm.stream_bytes >= mm.weight_bytes &&
             mm.ring_bytes >= mm.stream_bytes / 2) {
    snprintf(what, sizeof what, "n_layers %d x window %d x d_model %d need "
             "%s of key/value ring per stream",
             c->n_layers, c->window, c->d_model,
             fmt_bytes(a, sizeof a, mm.ring_bytes));
  } else if (mm.stream_bytes >= mm.weight_bytes) {
    snprintf(what, sizeof what, "%s needs %s of state per stream at %d rows",
             row_dimension(c, dim, sizeof dim),
             fmt_bytes(a, sizeof a, mm.stream_bytes), AURAL__DEFAULT_BATCH);
  } else {
    double ffw = 2.0 * c->d_ff * c->d_model * c->n_layers,
           dw = 4.0 * c->d_model * c->d_model * c->n_layers,
           vw = (double)c->vocab_size * c->d_model;
    if (ffw >= dw && ffw >= vw)
      snprintf(dim, sizeof dim, "n_layers %d x d_ff %d x d_model %d",
               c->n_layers, c->d_ff, c->d_model);
    else if (dw >= vw)
      snprintf(dim, sizeof dim, "n_layers %d x d_model %d", c->n_layers,
               c->d_model);
    else
      snprintf(dim, sizeof dim, "vocab size %d x d_model %d", c->vocab_size,
               c->d_model);
    snprintf(what, sizeof what, "%s need %s of weights", dim,
             fmt_bytes(a, sizeof a, mm.weight_bytes));
  }
  return aural__err_set(err, AURAL_ECONFIG,
                        "%s: aural.config: %s; the limit is %s for the "
                        "weights (%s), one stream (%s) and one worker's "
                        "batch (%s) together (max_memory_bytes)",
                        where, what, fmt_bytes(lim, sizeof lim, limit),
                        fmt_bytes(e, sizeof e, mm.weight_bytes),
                        fmt_bytes(s, sizeof s, mm.stream_bytes),
                        fmt_bytes(b, sizeof b, mm.batch_bytes));
}

/* ---- loading ----------------------------------------------------------- */

/* Every tensor starts on a 64-byte boundary in the arenas. */
static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

static uint64_t read_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* Checks the metadata strings and returns aural.config (decoded, to be
 * freed). */
static int read_metadata(const aural_json *js, const char *where,
                         char **config, aural_err *err) {
  *config = NULL;
  int meta = aural_json_get(js, 0, "__metadata__");
  if (!aural__json_is(js, meta, AURAL_JSON_OBJECT))
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: no __metadata__ (not an aural model file)",
                          where);
  if (!aural__json_string_is(js, aural_json_get(js, meta, "format"), "aural"))
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: __metadata__ \"format\" is not \"aural\"",
                          where);
  if (!aural__json_string_is(js, aural_json_get(js, meta, "aural.version"),
                             "1"))
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: __metadata__ \"aural.version\" must be \"1\"",
                          where);
  int cfg = aural_json_get(js, meta, "aural.config");
  if (!aural__json_is(js, cfg, AURAL_JSON_STRING))
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s: __metadata__ lacks \"aural.config\" (a JSON "
                          "string)",
                          where);
  *config = aural__json_strdup(js, cfg);
  if (*config == NULL)
    return aural__err_set(err, AURAL_ENOMEM, "out of memory");
  return 0;
}

/* The entry found for w has the shape the config implies. */
static int check_shape(const want *w, const entry *e, const char *where,
                       aural_err *err) {
  int dims = w->cols ? 2 : 1;
  if (e->n_dims == dims && e->shape[0] == w->rows &&
      (dims == 1 || e->shape[1] == w->cols))
    return 0;
  char got[96] = "", exp[48];
  for (int d = 0; d < e->n_dims; d++)
    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%llu",
             d ? ", " : "", (unsigned long long)e->shape[d]);
  if (dims == 2)
    snprintf(exp, sizeof exp, "[%llu, %llu]", (unsigned long long)w->rows,
             (unsigned long long)w->cols);
  else
    snprintf(exp, sizeof exp, "[%llu]", (unsigned long long)w->rows);
  return aural__err_set(err, AURAL_EFORMAT,
                        "%s: tensor \"%s\" has shape [%s]; the config "
                        "implies %s",
                        where, w->name, got, exp);
}

/* An arena of `bytes` for weights. One of 8 MB or more starts on a 2 MB
 * boundary and asks Linux for transparent huge pages (where the system
 * leaves them to madvise, as Debian does): every chunk streams all the
 * weights past the kernels, and with 4 KB pages frame mode ran about 7%
 * slower on an AMD Zen 4 with either vector set, the AVX2 matrix products
 * a few percent slower too (`base` model, 19 MB of weights; README,
 * "Performance"); smaller arenas stay within the translation cache's reach
 * of 4 KB pages. The alignment costs up to 2 MB of address space that is
 * never touched (not resident, but counted by malloc's statistics, so by
 * STATS heap_bytes). Where huge pages are off it is an ordinary
 * allocation. Freed with free(). */
static void *weight_arena(size_t bytes) {
  const size_t huge = (size_t)2 << 20;
  if (bytes < 4 * huge) return aligned_alloc(64, (bytes + 63) / 64 * 64);
  void *p = NULL;
  if (posix_memalign(&p, huge, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
  (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: failure changes nothing */
#endif
  return p;
}

/* Checks every value of the wanted tensors, as stored and as it will be
 * held. A NaN or infinite weight makes every output it reaches NaN, and
 * a model that loads and then says nothing (or nonsense, with full
 * confidence) is worse than one refused naming the tensor and element;
 * so is a float weight beyond half precision's range when the matrices
 * are held as f16 or bf16, where it would become infinite. */
static int check_values(const want_list *wl, const unsigned char *tensor_data,
                        aural_weight_type held, const char *where,
                        aural_err *err) {
  for (size_t i = 0; i < wl->n; i++) {
    const want *w = &wl->w[i];
    if (strncmp(w->name, "frontend.cmvn.", 14) == 0)
      continue; /* check_cmvn() names the bin and its own rule */
    const unsigned char *src = tensor_data + w->found->begin;
    size_t cols = w->cols ? (size_t)w->cols : 1;
    size_t n = (size_t)w->rows * cols;
    for (size_t j = 0; j < n; j++) {
      float v = elem_f32(src, w->found->type, j);
      float as_held = v;
      if (w->is_matrix && held == AURAL_WEIGHTS_F16)
        as_held = aural__f16_to_f32(aural__f32_to_f16(v));
      else if (w->is_matrix && held == AURAL_WEIGHTS_BF16)
        as_held = aural__bf16_to_f32(aural__f32_to_bf16(v));
      if (isfinite(as_held)) continue;
      char at[48];
      if (w->cols) snprintf(at, sizeof at, "[%zu, %zu]", j / cols, j % cols);
      else snprintf(at, sizeof at, "[%zu]", j);
      if (!isfinite(v))
        return aural__err_set(err, AURAL_EFORMAT,
                              "%s: tensor \"%s\" element %s is %s: weights "
                              "must be finite",
                              where, w->name, at, isnan(v) ? "NaN" : "infinite");
      return aural__err_set(err, AURAL_EFORMAT,
                            "%s: tensor \"%s\" element %s is %g, beyond "
                            "the range of %s, in which the matrices are "
                            "held (it loads with f32 weights and precision f32)",
                            where, w->name, at, (double)v,
                            held == AURAL_WEIGHTS_F16 ? "f16" : "bf16");
    }
  }
  return 0;
}

/* Everything is known to fit; allocates the arenas and converts every
 * wanted tensor into them. The arenas are bounded by the file's tensor
 * bytes, times two for half to float, times the padding of matrix rows to
 * panels of 16 and of tensors to 16 elements (at worst 32x, for tiny
 * tensors). */
static int convert_weights(aural_model *m, const want_list *wl,
                           const unsigned char *tensor_data,
                           const aural_model_load_config *lcfg, uint64_t n_f32,
                           uint64_t n_f16, const char *where, aural_err *err) {
  m->f32 = weight_arena((size_t)n_f32 * sizeof *m->f32 + 64);
  m->f16 = weight_arena((size_t)n_f16 * sizeof *m->f16 + 64);
  if (m->f32 == NULL || m->f16 == NULL)
    return aural__err_set(err, AURAL_ENOMEM, "%s: out of memory for weights",
                          where);
  size_t o32 = 0, o16 = 0;
  for (size_t i = 0; i < wl->n; i++) {
    const want *w = &wl->w[i];
    const entry *e = w->found;
    const unsigned char *src = tensor_data + e->begin;
    if (w->is_matrix && held_type(lcfg) == AURAL_WEIGHTS_BF16) {
      pack_bf16(src, e->type, w->rows, w->cols, m->f16 + o16);
      *w->mat = (aural__mat){.bf16 = m->f16 + o16, .rows = (int)w->rows,
                             .cols = (int)w->cols};
      o16 += round16(aural__bf16_packed_size(w->rows, w->cols));
    } else if (w->is_matrix && held_type(lcfg) == AURAL_WEIGHTS_F16) {
      pack(src, e->type, w->rows, w->cols, m->f16 + o16, true);
      *w->mat = (aural__mat){.f16 = m->f16 + o16, .rows = (int)w->rows,
                             .cols = (int)w->cols};
      o16 += round16(aural__packed_size(w->rows, w->cols));
    } else if (w->is_matrix) {
      pack(src, e->type, w->rows, w->cols, m->f32 + o32, false);
      *w->mat = (aural__mat){.f32 = m->f32 + o32, .rows = (int)w->rows,
                             .cols = (int)w->cols};
      o32 += round16(aural__packed_size(w->rows, w->cols));
    } else {
      for (size_t j = 0; j < w->rows; j++)
        m->f32[o32 + j] = elem_f32(src, e->type, j);
      *w->vec = m->f32 + o32;
      o32 += round16(w->rows);
    }
  }
  return 0;
}

/* The header's JSON (hlen bytes after the length), checked to be an
 * object: *doc, or a code with err naming the byte or what is wrong. */
static int read_header(const unsigned char *bytes, uint64_t hlen,
                       const char *where, aural__json **doc, aural_err *err) {
  size_t bad_at;
  int prc;
  char why[256];
  *doc = parse_whole((const char *)bytes + 8, hlen, &bad_at, &prc, why,
                     sizeof why);
  if (*doc == NULL && bad_at < hlen)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: header byte %zu (file offset %zu) is 0x%02x: "
                          "not allowed there (control character, invalid "
                          "UTF-8 or \\u0000)",
                          where, bad_at, bad_at + 8,
                          (unsigned)bytes[8 + bad_at]);
  if (*doc == NULL && prc == AURAL_ENOMEM)
    return aural__err_set(err, prc, "%s: header: %s", where, why);
  if (*doc == NULL && strcmp(why, "not a JSON object") != 0)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: the header's JSON is refused at %s", where,
                          why);
  if (*doc == NULL || !aural__json_is(&(*doc)->js, 0, AURAL_JSON_OBJECT)) {
    aural__json_free(*doc);
    *doc = NULL;
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: the header is not a JSON object", where);
  }
  return 0;
}

/* The header's tensor entries (all but __metadata__), each checked, and
 * their byte ranges checked to tile the data area exactly. The reader has
 * refused duplicate names. Decoded, every name fits in the header's
 * length: *names holds them. */
static int read_entries(const aural_json *js, uint64_t hlen, uint64_t data_len,
                        const char *where, entry **out, size_t *n_out,
                        char **names, aural_err *err) {
  uint32_t n_members = aural_json_token_at(js, 0)->n_items;
  size_t n_entries = n_members - (aural_json_get(js, 0, "__metadata__") >= 0);
  entry *entries = calloc(n_entries + 1, sizeof *entries);
  entry **sorted = calloc(n_entries + 1, sizeof *sorted);
  *out = entries;
  *n_out = n_entries;
  *names = malloc(hlen + 1);
  int rc = 0;
  if (entries == NULL || sorted == NULL || *names == NULL)
    rc = aural__err_set(err, AURAL_ENOMEM, "out of memory");
  size_t k = 0, names_used = 0;
  int key = 1;
  for (uint32_t i = 0; rc == 0 && i < n_members;
       i++, key = aural__json_after(js, key + 1)) {
    if (aural__json_string_is(js, key, "__metadata__")) continue;
    int len = aural_json_string(js, key, *names + names_used,
                                hlen + 1 - names_used);
    if (len < 0) {
      rc = aural__err_set(err, AURAL_EFORMAT,
                          "%s: a tensor name in the header does not decode",
                          where);
      break;
    }
    entries[k].name = *names + names_used;
    names_used += (size_t)len + 1;
    rc = parse_entry(js, key + 1, data_len, &entries[k], where, err);
    sorted[k] = &entries[k];
    k++;
  }
  if (rc == 0) qsort(sorted, n_entries, sizeof *sorted, cmp_begin);
  uint64_t at = 0;
  for (size_t i = 0; rc == 0 && i < n_entries; i++) {
    entry *e = sorted[i];
    if (e->begin != at)
      rc = aural__err_set(err, AURAL_EFORMAT,
                          "%s: tensor \"%s\": data_offsets begin at %llu but "
                          "the previous tensor ends at %llu (%s)",
                          where, e->name, (unsigned long long)e->begin,
                          (unsigned long long)at,
                          e->begin < at ? "overlap" : "gap");
    at = e->end;
  }
  if (rc == 0 && at != data_len)
    rc = aural__err_set(err, AURAL_EFORMAT,
                        "%s: %llu bytes follow the last tensor (tensor data "
                        "must end at end of file)",
                        where, (unsigned long long)(data_len - at));
  free(sorted);
  return rc;
}

/* Values the encoder divides by must be usable. */
/* The rows the lead-in runs again and again: what the frontend gives for
 * a window of zeros, the log floor (ln FLT_EPSILON) in every bin, or 0
 * without use_log_fbank. */
static int make_lead_feats(aural_model *m, const char *where,
                           aural_err *err) {
  const aural_model_config *c = &m->cfg;
  if (c->lead_in_frames == 0) return 0;
  size_t rows = c->lead_in_frames < AURAL__LEAD_ROWS
                    ? (size_t)c->lead_in_frames
                    : AURAL__LEAD_ROWS;
  size_t n = rows * (size_t)c->fbank.num_mel_bins;
  m->lead_feats = malloc(n * sizeof *m->lead_feats);
  if (m->lead_feats == NULL)
    return aural__err_set(err, AURAL_ENOMEM,
                          "%s: out of memory for the lead-in's features",
                          where);
  float level = c->fbank.use_log_fbank ? (float)log((double)FLT_EPSILON) : 0;
  for (size_t i = 0; i < n; i++) m->lead_feats[i] = level;
  return 0;
}

static int check_cmvn(const aural_model *m, const char *where,
                      aural_err *err) {
  for (int i = 0; m->cmvn_std != NULL && i < m->cfg.fbank.num_mel_bins; i++) {
    int bad_std = !(m->cmvn_std[i] > 0) || !isfinite(m->cmvn_std[i]);
    if (bad_std || !isfinite(m->cmvn_mean[i]))
      return aural__err_set(err, AURAL_EFORMAT,
                            "%s: tensor \"frontend.cmvn.%s\" bin %d is %g (%s)",
                            where, bad_std ? "std" : "mean", i,
                            (double)(bad_std ? m->cmvn_std[i]
                                             : m->cmvn_mean[i]),
                            bad_std ? "std must be positive and finite"
                                    : "mean must be finite");
  }
  return 0;
}

/* The header length in the first 8 bytes of a file of size bytes, checked
 * against the 100 MB limit and the file's length. */
static int header_length(const unsigned char *first8, uint64_t size,
                         const char *where, uint64_t *hlen, aural_err *err) {
  if (size < 8)
    return aural__err_set(err, size == 0 ? AURAL_EEMPTY : AURAL_ETRUNCATED,
                          "%s: %llu bytes: too short for a safetensors file",
                          where, (unsigned long long)size);
  *hlen = read_le64(first8);
  if (*hlen > MAX_HEADER_BYTES)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: header length %llu exceeds the 100 MB limit",
                          where, (unsigned long long)*hlen);
  if (*hlen > size - 8)
    return aural__err_set(err, AURAL_ETRUNCATED,
                          "%s: header length %llu runs past the end of the "
                          "%llu-byte file",
                          where, (unsigned long long)*hlen,
                          (unsigned long long)size);
  return 0;
}

/* Loads a model from bytes, which hold the 8-byte length and the hlen
 * bytes of header, followed by the data_len bytes of tensor data at
 * tensor_data. With tensor_data NULL it only validates: everything the
 * header and the config decide, against data_len (the length in the
 * file), without the tensor bytes; out is then not set. */
static int load(const unsigned char *bytes, uint64_t hlen, uint64_t data_len,
                const unsigned char *tensor_data, const char *where,
                const aural_model_load_config *lcfg, aural_model **out,
                aural_err *err) {
  aural__json *doc;
  int rc = read_header(bytes, hlen, where, &doc, err);
  if (rc < 0) return rc;
  const aural_json *js = &doc->js;

  aural_model *m = calloc(1, sizeof *m);
  entry *entries = NULL;
  const char **have_names = NULL, **want_names = NULL;
  size_t *found = NULL;
  char *names = NULL, *config = NULL;
  want_list wl = {0};
  if (m == NULL) {
    rc = aural__err_set(err, AURAL_ENOMEM, "out of memory");
    goto done;
  }
  rc = read_metadata(js, where, &config, err);
  if (rc == 0) rc = parse_config(config, where, &m->cfg, &m->vocab, err);
  if (rc < 0) goto done;

  size_t n_entries;
  rc = read_entries(js, hlen, data_len, where, &entries, &n_entries, &names,
                    err);
  if (rc < 0) goto done;

  /* The tensors the config calls for. */
  const entry *cmvn = NULL;
  for (size_t i = 0; i < n_entries; i++)
    if (strcmp(entries[i].name, "frontend.cmvn.mean") == 0) cmvn = &entries[i];
  m->cfg.has_cmvn = cmvn != NULL;
  rc = check_memory(&m->cfg, lcfg, where, err);
  if (rc < 0) goto done;
  m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
  if (m->layers == NULL || list_wanted(m, m->cfg.has_cmvn, &wl) < 0) {
    rc = aural__err_set(err, AURAL_ENOMEM, "out of memory");
    goto done;
  }
  uint64_t n_f32 = 0, n_f16 = 0;
  have_names = malloc((n_entries + 1) * sizeof *have_names);
  want_names = malloc((wl.n + 1) * sizeof *want_names);
  found = malloc((wl.n + 1) * sizeof *found);
  if (have_names == NULL || want_names == NULL || found == NULL) {
    rc = aural__err_set(err, AURAL_ENOMEM, "out of memory");
    goto done;
  }
  for (size_t j = 0; j < n_entries; j++) have_names[j] = entries[j].name;
  for (size_t i = 0; i < wl.n; i++) want_names[i] = wl.w[i].name;
  if (aural__match_names(have_names, n_entries, want_names, wl.n, found,
                         NULL) < 0) {
    rc = aural__err_set(err, AURAL_ENOMEM, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < wl.n; i++) {
    want *w = &wl.w[i];
    if (found[i] != SIZE_MAX) {
      w->found = &entries[found[i]];
      entries[found[i]].used = 1;
    }
    const entry *e = w->found;
    if (e == NULL) {
      rc = aural__err_set(err, AURAL_EFORMAT,
                          "%s: tensor \"%s\" is missing (the config calls "
                          "for it)",
                          where, w->name);
      goto done;
    }
    rc = check_shape(w, e, where, err);
    if (rc < 0) goto done;
    aural_weight_type held = held_type(lcfg);
    uint64_t n = round16(
        !w->is_matrix                ? w->rows
        : held == AURAL_WEIGHTS_BF16 ? aural__bf16_packed_size(w->rows, w->cols)
                                     : aural__packed_size(w->rows, w->cols));
    if (w->is_matrix && held != AURAL_WEIGHTS_F32)
      n_f16 += n;
    else
      n_f32 += n;
    m->n_params += w->rows * (w->cols ? w->cols : 1);
  }
  for (size_t j = 0; j < n_entries; j++) {
    if (!entries[j].used) {
      rc = aural__err_set(err, AURAL_EFORMAT,
                          "%s: unexpected tensor \"%s\" (not part of a model "
                          "with this config)",
                          where, entries[j].name);
      goto done;
    }
  }

  if (tensor_data == NULL) goto done; /* validated */
  rc = check_values(&wl, tensor_data, held_type(lcfg), where, err);
  if (rc < 0) goto done;
  rc = convert_weights(m, &wl, tensor_data, lcfg, n_f32, n_f16, where, err);
  if (rc < 0) goto done;
  if (m->cfg.has_cmvn) m->n_params -= 2u * (uint64_t)m->cfg.fbank.num_mel_bins;
  m->weight_bytes = n_f32 * 4 + n_f16 * 2;
  aural_model_memory mm;
  m->precision = held_type(lcfg) == AURAL_WEIGHTS_BF16 ? AURAL_PRECISION_BF16
                                                       : AURAL_PRECISION_F32;
  assert(aural_model_memory_need(&m->cfg, held_type(lcfg), batch_rows_of(lcfg),
                                 &mm) == 0 &&
         mm.weight_bytes == m->weight_bytes);

  rc = check_cmvn(m, where, err);
  if (rc == 0) rc = make_lead_feats(m, where, err);

done:
  free(have_names);
  free(want_names);
  free(found);
  free(wl.w);
  free(entries);
  free(names);
  free(config);
  aural__json_free(doc);
  if (rc < 0 || tensor_data == NULL) {
    aural_model_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

int aural_model_load_buffer(const void *data, size_t size, const char *where,
                            const aural_model_load_config *lcfg,
                            aural_model **out, aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "model: no out pointer");
  *out = NULL;
  aural_model_load_config dflt;
  if (lcfg == NULL) {
    aural_model_load_config_default(&dflt);
    lcfg = &dflt;
  }
  int rc = check_load_config(lcfg, err);
  if (rc < 0) return rc;
  if (where == NULL) where = "(memory)"; /* as aural_audiofile_open_memory */
  if (data == NULL && size > 0)
    return aural__err_set(err, AURAL_EINVAL, "%s: %zu bytes at a NULL address",
                          where, size);
  const unsigned char *bytes = data;
  uint64_t hlen = 0;
  rc = header_length(bytes, size, where, &hlen, err);
  if (rc < 0) return rc;
  return load(bytes, hlen, size - 8 - hlen, bytes + 8 + hlen, where, lcfg,
              out, err);
}

/* Reads n bytes at offset 0 of fd into a new buffer: 0, or an error with
 * err naming path (a file that is now shorter is AURAL_ETRUNCATED). */
static int read_head(int fd, const char *path, size_t n, unsigned char **out,
                     aural_err *err) {
  *out = malloc(n > 0 ? n : 1);
  if (*out == NULL)
    return aural__err_set(err, AURAL_ENOMEM,
                          "%s: out of memory for the header's %zu bytes",
                          path, n);
  for (size_t got = 0; got < n;) {
    ssize_t k = pread(fd, *out + got, n - got, (off_t)got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      int e = k < 0 ? errno : 0;
      free(*out);
      *out = NULL;
      return e != 0 ? aural__err_set(err, -e, "%s: read failed at byte %zu: "
                                     "%s", path, got, strerror(e))
                    : aural__err_set(err, AURAL_ETRUNCATED,
                                     "%s: the file shrank to %zu bytes while "
                                     "it was read",
                                     path, got);
    }
    got += (size_t)k;
  }
  return 0;
}

/* A file is validated from its header before its tensor data is read:
 * reading first would allocate and fill a buffer of the whole file (up to
 * twice the memory limit) for a file that a few bytes of its header
 * refuse, another model's checkpoint say. */
static int validate_header(int fd, const char *path, uint64_t size,
                           const aural_model_load_config *lcfg,
                           aural_err *err) {
  unsigned char *head;
  uint64_t hlen = 0;
  int rc = read_head(fd, path, size < 8 ? (size_t)size : 8, &head, err);
  if (rc < 0) return rc;
  rc = header_length(head, size, path, &hlen, err);
  free(head);
  if (rc < 0) return rc;
  rc = read_head(fd, path, (size_t)(8 + hlen), &head, err);
  if (rc < 0) return rc;
  rc = load(head, hlen, size - 8 - hlen, NULL, path, lcfg, NULL, err);
  free(head);
  return rc;
}

int aural_model_load(const char *path, const aural_model_load_config *cfg,
                     aural_model **out, aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "model: no out pointer");
  *out = NULL;
  aural_model_load_config dflt;
  if (cfg == NULL) {
    aural_model_load_config_default(&dflt);
    cfg = &dflt;
  }
  int rc = check_load_config(cfg, err);
  if (rc < 0) return rc;
  /* Non-blocking, so that a FIFO without a writer cannot stall the open;
   * anything but a regular file is refused. */
  struct stat st;
  int fd = aural__open_input(path, O_NONBLOCK, 1, "a model file", &st, err);
  if (fd < 0) return fd;
  size_t size = (size_t)st.st_size;
  /* Every tensor byte in the file is a weight the model holds, in at
   * least 2 bytes for 4 in the file: a file past twice the memory limit
   * and a full header cannot be a model within it. */
  uint64_t limit = max_memory_of(cfg), most;
  if (__builtin_mul_overflow(limit, 2, &most) ||
      __builtin_add_overflow(most, 8 + MAX_HEADER_BYTES, &most))
    most = UINT64_MAX;
  if ((uint64_t)size > most) {
    char a[32], b[32], c[32];
    close(fd);
    return aural__err_set(err, AURAL_ECONFIG,
                          "%s: the file is %s; a model within the memory "
                          "limit of %s (max_memory_bytes) is at most %s",
                          path, fmt_bytes(a, sizeof a, size),
                          fmt_bytes(b, sizeof b, limit),
                          fmt_bytes(c, sizeof c, most));
  }
  rc = validate_header(fd, path, size, cfg, err);
  if (rc < 0) {
    close(fd);
    return rc;
  }
  unsigned char *bytes;
  rc = aural__read_all(fd, path, size, &bytes, err);
  close(fd);
  if (rc < 0) return rc;
  rc = aural_model_load_buffer(bytes, size, path, cfg, out, err);
  free(bytes);
  return rc;
}

void aural_model_free(aural_model *m) {
  if (m == NULL) return;
  for (int i = 0; m->vocab != NULL && i < m->cfg.vocab_size; i++)
    free(m->vocab[i]);
  free(m->vocab);
  free(m->layers);
  free(m->f32);
  free(m->f16);
  free(m->lead_feats);
  free(m);
}

const aural_model_config *aural_model_get_config(const aural_model *m) {
  return &m->cfg;
}

const char *aural_model_token(const aural_model *m, int id) {
  if (m == NULL || m->vocab == NULL || id < 0 || id >= m->cfg.vocab_size)
    return NULL;
  return m->vocab[id];
}

uint64_t aural_model_n_params(const aural_model *m) { return m->n_params; }

uint64_t aural_model_weight_bytes(const aural_model *m) {
  return m->weight_bytes;
}

aural_precision aural_model_precision(const aural_model *m) {
  return m->precision;
}

int aural_model_precision_parse(const char *name, aural_precision *out) {
  if (name == NULL || out == NULL)
    return AURAL_EINVAL;
  if (strcmp(name, "f32") == 0)
    *out = AURAL_PRECISION_F32;
  else if (strcmp(name, "bf16") == 0)
    *out = AURAL_PRECISION_BF16;
  else
    return AURAL_EINVAL;
  return 0;
}

const char *aural_model_precision_name(aural_precision p) {
  return p == AURAL_PRECISION_BF16 ? "bf16" : p == AURAL_PRECISION_F32 ? "f32"
                                                                       : "?";
}

uint64_t aural_model_flops_per_frame(const aural_model *m) {
  const aural_model_config *c = &m->cfg;
  uint64_t d = (uint64_t)c->d_model, ff = (uint64_t)c->d_ff,
           w = (uint64_t)c->window;
  uint64_t per_layer = 2 * d * 3 * d   /* q, k, v */
                       + 2 * w * d * 2 /* scores and weighted sum */
                       + 2 * d * d     /* output projection */
                       + 2 * d * ff * 2; /* feed-forward */
  return 2 * d * (uint64_t)c->fbank.num_mel_bins +
         per_layer * (uint64_t)c->n_layers +
         2 * d * (uint64_t)c->vocab_size;
}

const float *aural_model_cmvn_mean(const aural_model *m) {
  return m->cmvn_mean;
}

const float *aural_model_cmvn_std(const aural_model *m) { return m->cmvn_std; }
