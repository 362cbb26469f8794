/*
 * Model loader tests (DESIGN.md §2): a corpus of broken model files, each
 * built at run time from a valid synth_model() file by one mutation (the
 * JSON header rewritten and its 8-byte length fixed, tensor bytes added or
 * removed), must be rejected by aural_model_load_buffer() and by
 * aural_model_load() on a temporary file, with a negative code, *out NULL
 * and a message that names the file and the tensor or field at fault. Then
 * the positive side: every committed model loads and runs, and the counts
 * of a base model (parameters, flops, weight bytes, encoder state) equal
 * values worked out by hand.
 *
 * Each rejection message is printed so that a reader of the test log can
 * judge it.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <aural.h>

#include "helpers.h"
#include "internal.h"
#include "synth_model.h"

/* ---- a model file taken apart ------------------------------------------ */

#define MAX_TENSORS 64

/* One header entry, kept as text where a mutation may put anything. */
typedef struct tensor {
  char name[128];
  char dtype[16];
  char shape[128]; /* inside of the list, e.g. "48,16" */
  uint64_t begin, end;
  char raw[256]; /* when set, the entry's JSON value verbatim */
} tensor;

typedef struct mfile {
  char *meta;  /* the JSON text of the __metadata__ value (malloc'ed) */
  tensor t[MAX_TENSORS];
  size_t n;
  unsigned char *data; /* (data_len) tensor bytes (malloc'ed) */
  size_t data_len;
  char suffix[32]; /* written after the header's closing brace */
} mfile;

static uint64_t get_le64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void put_le64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Splits a file in the compact layout synth_model() and the PyTorch
 * exporter write: {"__metadata__":{...},"name":{"dtype":..,"shape":[..],
 * "data_offsets":[b,e]},...} padded with spaces. */
static void mf_parse(mfile *mf, const unsigned char *buf, size_t size) {
  memset(mf, 0, sizeof *mf);
  assert_true(size >= 8);
  uint64_t hlen = get_le64(buf);
  assert_true(hlen <= size - 8);
  char *h = strndup((const char *)buf + 8, (size_t)hlen);
  assert_non_null(h);
  static const char prefix[] = "{\"__metadata__\":";
  assert_memory_equal(h, prefix, sizeof prefix - 1);
  const char *p = h + sizeof prefix - 1, *m0 = p;
  int depth = 0, in_str = 0;
  for (;; p++) {
    assert_true(*p != '\0');
    if (in_str) {
      if (*p == '\\') p++;
      else if (*p == '"') in_str = 0;
    } else if (*p == '"') {
      in_str = 1;
    } else if (*p == '{') {
      depth++;
    } else if (*p == '}' && --depth == 0) {
      p++;
      break;
    }
  }
  mf->meta = strndup(m0, (size_t)(p - m0));
  assert_non_null(mf->meta);
  while (*p == ',') {
    assert_true(mf->n < MAX_TENSORS);
    tensor *t = &mf->t[mf->n++];
    int used = 0;
    assert_int_equal(sscanf(p + 1,
                            "\"%127[^\"]\":{\"dtype\":\"%15[^\"]\",\"shape\":"
                            "[%127[^]]],\"data_offsets\":[%" SCNu64
                            ",%" SCNu64 "]}%n",
                            t->name, t->dtype, t->shape, &t->begin, &t->end,
                            &used),
                     5);
    p += 1 + used;
  }
  assert_int_equal(*p, '}');
  free(h);
  mf->data_len = size - 8 - (size_t)hlen;
  mf->data = malloc(mf->data_len + 1);
  assert_non_null(mf->data);
  memcpy(mf->data, buf + 8 + hlen, mf->data_len);
}

static void mf_free(mfile *mf) {
  free(mf->meta);
  free(mf->data);
}

/* The file: header padded with spaces to a multiple of 8, then the data. */
static unsigned char *mf_serialize(const mfile *mf, size_t *size) {
  char *h = NULL;
  size_t hlen = 0;
  FILE *f = open_memstream(&h, &hlen);
  assert_non_null(f);
  fprintf(f, "{");
  if (mf->meta != NULL) fprintf(f, "\"__metadata__\":%s", mf->meta);
  for (size_t i = 0; i < mf->n; i++) {
    const tensor *t = &mf->t[i];
    fprintf(f, "%s\"%s\":", i == 0 && mf->meta == NULL ? "" : ",", t->name);
    if (t->raw[0] != '\0')
      fprintf(f, "%s", t->raw);
    else
      fprintf(f,
              "{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":"
              "[%" PRIu64 ",%" PRIu64 "]}",
              t->dtype, t->shape, t->begin, t->end);
  }
  fprintf(f, "}%s", mf->suffix);
  while (ftell(f) % 8 != 0) fputc(' ', f);
  assert_int_equal(fclose(f), 0);
  *size = 8 + hlen + mf->data_len;
  unsigned char *buf = malloc(*size);
  assert_non_null(buf);
  put_le64(buf, hlen);
  memcpy(buf + 8, h, hlen);
  memcpy(buf + 8 + hlen, mf->data, mf->data_len);
  free(h);
  return buf;
}

/* The base of every mutation: a small model with every optional part
 * (final norm, CTC head of 5 tokens, CMVN), F32. */
#define BASE_D 16
#define BASE_FF 32
#define BASE_VOCAB 5
#define BASE_MELS 80

static void base_spec(synth_spec *s) {
  *s = (synth_spec){.d_model = BASE_D, .n_heads = 2, .n_layers = 2,
                    .d_ff = BASE_FF, .window = 8, .pos_encoding = "rope",
                    .activation = "gelu", .norm_first = 1, .final_norm = 1,
                    .vocab_size = BASE_VOCAB, .cmvn = 1, .seed = 7};
}

static void mf_base(mfile *mf) {
  synth_spec s;
  base_spec(&s);
  size_t size;
  unsigned char *buf = synth_model(&s, &size);
  assert_non_null(buf);
  mf_parse(mf, buf, size);
  free(buf);
}

static tensor *mf_find(mfile *mf, const char *name) {
  for (size_t i = 0; i < mf->n; i++)
    if (strcmp(mf->t[i].name, name) == 0) return &mf->t[i];
  fail_msg("no tensor \"%s\" in the base model", name);
  return NULL;
}

/* Replaces the one occurrence of `old` in *s by `new`. */
static void str_replace1(char **s, const char *old, const char *new_) {
  char *at = strstr(*s, old);
  if (at == NULL) fail_msg("\"%s\" not found in \"%s\"", old, *s);
  char *out;
  assert_true(asprintf(&out, "%.*s%s%s", (int)(at - *s), *s, new_,
                       at + strlen(old)) > 0);
  free(*s);
  *s = out;
}

/* Edits the __metadata__ JSON text. */
static void meta_edit(mfile *mf, const char *old, const char *new_) {
  str_replace1(&mf->meta, old, new_);
}

/* Edits aural.config, written here unescaped: `"d_model":16` matches
 * `\"d_model\":16` in the header. */
static char *json_escape(const char *s) {
  char *out = malloc(2 * strlen(s) + 1), *o = out;
  assert_non_null(out);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') *o++ = '\\';
    *o++ = *s;
  }
  *o = '\0';
  return out;
}

static void cfg_edit(mfile *mf, const char *old, const char *new_) {
  char *o = json_escape(old), *n = json_escape(new_);
  meta_edit(mf, o, n);
  free(o);
  free(n);
}

/* Inserts n bytes (copied from src, or zeros) at data offset `at`; tensors
 * starting at or after it move along. */
static void mf_insert(mfile *mf, uint64_t at, const void *src, size_t n) {
  unsigned char *d = realloc(mf->data, mf->data_len + n + 1);
  assert_non_null(d);
  memmove(d + at + n, d + at, mf->data_len - at);
  if (src != NULL) memcpy(d + at, src, n);
  else memset(d + at, 0, n);
  mf->data = d;
  mf->data_len += n;
  for (size_t i = 0; i < mf->n; i++)
    if (mf->t[i].begin >= at && mf->t[i].end > at) {
      mf->t[i].begin += n;
      mf->t[i].end += n;
    }
}

/* Removes a tensor and its bytes; later tensors move back. */
static void mf_drop(mfile *mf, const char *name) {
  tensor *t = mf_find(mf, name);
  uint64_t b = t->begin, e = t->end, n = e - b;
  memmove(mf->data + b, mf->data + e, mf->data_len - e);
  mf->data_len -= n;
  memmove(t, t + 1, (size_t)(mf->t + mf->n - (t + 1)) * sizeof *t);
  mf->n--;
  for (size_t i = 0; i < mf->n; i++)
    if (mf->t[i].begin >= e) {
      mf->t[i].begin -= n;
      mf->t[i].end -= n;
    }
}

/* Adds an entry whose bytes go at the end of the data. */
static void mf_append(mfile *mf, const char *name, const char *dtype,
                      const char *shape, const void *bytes, size_t n) {
  assert_true(mf->n < MAX_TENSORS);
  uint64_t at = mf->data_len;
  mf_insert(mf, at, bytes, n);
  tensor *t = &mf->t[mf->n++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
  snprintf(t->shape, sizeof t->shape, "%s", shape);
  t->begin = at;
  t->end = at + n;
}

static void set_f32(mfile *mf, const char *name, size_t i, float v) {
  tensor *t = mf_find(mf, name);
  assert_true(t->begin + 4 * (i + 1) <= t->end);
  memcpy(mf->data + t->begin + 4 * i, &v, 4);
}

static void set_shape(mfile *mf, const char *name, const char *shape) {
  tensor *t = mf_find(mf, name);
  snprintf(t->shape, sizeof t->shape, "%s", shape);
}

static void set_dtype(mfile *mf, const char *name, const char *dtype) {
  tensor *t = mf_find(mf, name);
  snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
}

/* The entry's value as given JSON text; %B and %E stand for its offsets. */
static void set_raw(mfile *mf, const char *name, const char *fmt) {
  tensor *t = mf_find(mf, name);
  char *o = t->raw, *end = t->raw + sizeof t->raw;
  for (const char *p = fmt; *p && o < end - 24; p++) {
    if (p[0] == '%' && (p[1] == 'B' || p[1] == 'E')) {
      o += sprintf(o, "%" PRIu64, p[1] == 'B' ? t->begin : t->end);
      p++;
    } else {
      *o++ = *p;
    }
  }
  *o = '\0';
}

/* ---- the corpus -------------------------------------------------------- */

/* Either `raw` builds the whole file, or `mutate` edits the base model. */
typedef struct bad_case {
  const char *name;
  void (*mutate)(mfile *mf);
  unsigned char *(*raw)(size_t *size);
  int code;
  const char *expect[3]; /* substrings of the message, besides the name */
} bad_case;

static unsigned char *raw_empty(size_t *size) {
  *size = 0;
  return malloc(1);
}

static unsigned char *raw_7_bytes(size_t *size) {
  *size = 7;
  unsigned char *b = calloc(1, 7);
  assert_non_null(b);
  b[0] = 8;
  return b;
}

/* A valid base file whose 8-byte header length is replaced by hlen. */
static unsigned char *base_with_hlen(size_t *size, uint64_t hlen) {
  mfile mf;
  mf_base(&mf);
  unsigned char *b = mf_serialize(&mf, size);
  mf_free(&mf);
  put_le64(b, hlen);
  return b;
}

static unsigned char *raw_hlen_past_end(size_t *size) {
  unsigned char *b = base_with_hlen(size, 0);
  put_le64(b, *size - 8 + 1);
  return b;
}

static unsigned char *raw_hlen_past_end_far(size_t *size) {
  return base_with_hlen(size, 99999999);
}

static unsigned char *raw_hlen_over_100mb(size_t *size) {
  return base_with_hlen(size, 100000001);
}

static unsigned char *raw_hlen_u64_max(size_t *size) {
  return base_with_hlen(size, UINT64_MAX);
}

/* A file of 8 + strlen(header) bytes, no tensor data. */
static unsigned char *raw_header(size_t *size, const char *header, size_t n) {
  *size = 8 + n;
  unsigned char *b = malloc(*size);
  assert_non_null(b);
  put_le64(b, n);
  memcpy(b + 8, header, n);
  return b;
}

static unsigned char *raw_not_json(size_t *size) {
  static const char h[] = "this is not JSON";
  return raw_header(size, h, sizeof h - 1);
}

static unsigned char *raw_json_array(size_t *size) {
  static const char h[] = "[{\"__metadata__\":{}}]   ";
  return raw_header(size, h, sizeof h - 1);
}

static unsigned char *raw_json_string(size_t *size) {
  static const char h[] = "\"__metadata__\"";
  return raw_header(size, h, sizeof h - 1);
}

static unsigned char *raw_zero_hlen(size_t *size) {
  return raw_header(size, "", 0);
}

/* The base model with a NUL byte between two tokens of the header. */
static unsigned char *raw_nul_in_header(size_t *size) {
  mfile mf;
  mf_base(&mf);
  meta_edit(&mf, "\"format\":\"aural\"", "\"format\":\x01\"aural\"");
  unsigned char *b = mf_serialize(&mf, size);
  mf_free(&mf);
  unsigned char *at = memchr(b + 8, '\x01', (size_t)get_le64(b));
  assert_non_null(at);
  *at = '\0';
  return b;
}

static unsigned char *raw_truncated_json(size_t *size) {
  /* The base header cut in the middle: the length field is honest. */
  mfile mf;
  mf_base(&mf);
  unsigned char *b = mf_serialize(&mf, size);
  mf_free(&mf);
  uint64_t hlen = get_le64(b) / 2;
  put_le64(b, hlen);
  *size = 8 + hlen;
  return b;
}

static void mut_header_trailing_garbage(mfile *mf) {
  snprintf(mf->suffix, sizeof mf->suffix, "garbage");
}

static void mut_header_control_char(mfile *mf) {
  meta_edit(mf, "\"format\":\"aural\"", "\"format\":\x01\x1f\"aural\"");
}

static void mut_duplicate_metadata(mfile *mf) {
  /* A parser that keeps the last duplicate (Python's json) sees no aural
   * model here; one that keeps the first sees a valid one. */
  char *out;
  assert_true(asprintf(&out, "%s,\"__metadata__\":{\"format\":\"pt\"}",
                       mf->meta) > 0);
  free(mf->meta);
  mf->meta = out;
}

static void mut_config_duplicate_key(mfile *mf) {
  /* d_model 16 (what the tensors say) first, then 32. */
  cfg_edit(mf, "\"d_model\":16,", "\"d_model\":16,\"d_model\":32,");
}

static void mut_entry_duplicate_field(mfile *mf) {
  set_raw(mf, "input_proj.bias",
          "{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[%B,%E],"
          "\"dtype\":\"F64\"}");
}

static void mut_no_metadata(mfile *mf) {
  free(mf->meta);
  mf->meta = NULL;
}

static void mut_metadata_string(mfile *mf) {
  free(mf->meta);
  mf->meta = strdup("\"aural\"");
}

static void mut_format(mfile *mf) {
  meta_edit(mf, "\"format\":\"aural\"", "\"format\":\"pt\"");
}

static void mut_format_missing(mfile *mf) {
  meta_edit(mf, "\"format\":\"aural\",", "");
}

static void mut_version(mfile *mf) {
  meta_edit(mf, "\"aural.version\":\"1\"", "\"aural.version\":\"2\"");
}

static void mut_version_number(mfile *mf) {
  meta_edit(mf, "\"aural.version\":\"1\"", "\"aural.version\":1");
}

/* Replaces the value of aural.config (the last metadata key) with `value`
 * (JSON text), or drops the key when value is NULL. */
static void meta_set_config(mfile *mf, const char *value) {
  char *cfg = strstr(mf->meta, ",\"aural.config\":");
  assert_non_null(cfg);
  *cfg = '\0';
  char *out;
  assert_true(asprintf(&out, "%s%s%s}", mf->meta,
                       value ? ",\"aural.config\":" : "",
                       value ? value : "") > 0);
  free(mf->meta);
  mf->meta = out;
}

static void mut_no_config(mfile *mf) { meta_set_config(mf, NULL); }

static void mut_config_not_json(mfile *mf) {
  cfg_edit(mf, "{\"d_model\"", "{d_model");
}

static void mut_config_object(mfile *mf) {
  /* aural.config as an object rather than a string holding JSON. */
  meta_set_config(mf, "{\"d_model\":16}");
}

static void mut_config_array(mfile *mf) {
  meta_set_config(mf, "\"[16, 2]\"");
}

static void mut_no_d_model(mfile *mf) { cfg_edit(mf, "\"d_model\":16,", ""); }

static void mut_d_model_fraction(mfile *mf) {
  cfg_edit(mf, "\"d_model\":16,", "\"d_model\":16.5,");
}

static void mut_d_model_string(mfile *mf) {
  cfg_edit(mf, "\"d_model\":16,", "\"d_model\":\"16\",");
}

static void mut_n_layers_zero(mfile *mf) {
  cfg_edit(mf, "\"n_layers\":2,", "\"n_layers\":0,");
}

static void mut_heads_not_dividing(mfile *mf) {
  cfg_edit(mf, "\"n_heads\":2,", "\"n_heads\":3,");
}

static void mut_rope_odd_head(mfile *mf) {
  cfg_edit(mf, "\"n_heads\":2,", "\"n_heads\":16,");
}

static void mut_sinusoidal_odd_d(mfile *mf) {
  cfg_edit(mf, "\"d_model\":16,\"n_heads\":2,",
           "\"d_model\":15,\"n_heads\":3,");
  cfg_edit(mf, "\"rope\"", "\"sinusoidal\"");
}

static void mut_activation(mfile *mf) {
  cfg_edit(mf, "\"gelu\"", "\"swish\"");
}

static void mut_pos_encoding(mfile *mf) {
  cfg_edit(mf, "\"rope\"", "\"alibi\"");
}

static void mut_window_zero(mfile *mf) {
  cfg_edit(mf, "\"window\":8,", "\"window\":0,");
}

static void mut_window_negative(mfile *mf) {
  cfg_edit(mf, "\"window\":8,", "\"window\":-5,");
}

static void mut_window_huge(mfile *mf) {
  cfg_edit(mf, "\"window\":8,", "\"window\":1000001,");
}

static void mut_lead_in_huge(mfile *mf) {
  cfg_edit(mf, "\"window\":8,", "\"window\":8,\"lead_in_frames\":1001,");
}

static void mut_lead_in_fraction(mfile *mf) {
  cfg_edit(mf, "\"window\":8,", "\"window\":8,\"lead_in_frames\":2.5,");
}

static void mut_norm_first_string(mfile *mf) {
  cfg_edit(mf, "\"norm_first\":true", "\"norm_first\":\"yes\"");
}

static void mut_eps_negative(mfile *mf) {
  cfg_edit(mf, "\"layer_norm_eps\":1e-5", "\"layer_norm_eps\":-1e-5");
}

static void mut_mel_bins_2(mfile *mf) {
  cfg_edit(mf, "{\"d_model\"", "{\"num_mel_bins\":2,\"d_model\"");
}

static void mut_mel_bins_40(mfile *mf) {
  /* A valid frontend option that the tensors do not match. */
  cfg_edit(mf, "{\"d_model\"", "{\"num_mel_bins\":40,\"d_model\"");
}

static void mut_overlap(mfile *mf) {
  /* Shift one tensor 4 bytes down: its span stays right, it overlaps. */
  tensor *t = mf_find(mf, "encoder.layers.0.linear1.bias");
  t->begin -= 4;
  t->end -= 4;
}

static void mut_gap(mfile *mf) {
  /* 4 bytes nobody claims, just before linear1.bias (which moves on). */
  mf_insert(mf, mf_find(mf, "encoder.layers.0.linear1.bias")->begin, NULL, 4);
}

static void mut_past_end(mfile *mf) {
  tensor *t = mf_find(mf, "frontend.cmvn.std"); /* the last tensor */
  assert_int_equal(t->end, mf->data_len);
  t->begin += 4;
  t->end += 4;
}

static void mut_begin_after_end(mfile *mf) {
  tensor *t = mf_find(mf, "input_proj.bias");
  uint64_t b = t->begin;
  t->begin = t->end;
  t->end = b;
}

static void mut_span_mismatch(mfile *mf) {
  set_shape(mf, "input_proj.bias", "15");
}

static void mut_dtype_span_mismatch(mfile *mf) {
  /* Claims half precision over the bytes of an F32 tensor. */
  set_dtype(mf, "input_proj.bias", "F16");
}

static void mut_shape_overflow(mfile *mf) {
  set_shape(mf, "input_proj.bias", "4294967296,4294967296");
}

static void mut_shape_overflow_big(mfile *mf) {
  /* Each entry a valid 2^53; the product needs 161 bits. */
  set_shape(mf, "input_proj.bias",
            "9007199254740992,9007199254740992,9007199254740992");
}

static void mut_shape_huge_entry(mfile *mf) {
  set_shape(mf, "input_proj.bias", "1e300");
}

static void mut_shape_negative(mfile *mf) {
  set_shape(mf, "input_proj.bias", "-16");
}

static void mut_shape_fraction(mfile *mf) {
  set_shape(mf, "input_proj.bias", "16.5");
}

static void mut_shape_string(mfile *mf) {
  set_shape(mf, "input_proj.bias", "\"16\"");
}

static void mut_shape_9_dims(mfile *mf) {
  set_shape(mf, "input_proj.bias", "1,1,1,1,1,1,1,1,16");
}

static void mut_offsets_three(mfile *mf) {
  set_raw(mf, "input_proj.bias",
          "{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[%B,%E,%E]}");
}

static void mut_offsets_strings(mfile *mf) {
  set_raw(mf, "input_proj.bias",
          "{\"dtype\":\"F32\",\"shape\":[16],"
          "\"data_offsets\":[\"%B\",\"%E\"]}");
}

static void mut_offsets_missing(mfile *mf) {
  set_raw(mf, "input_proj.bias", "{\"dtype\":\"F32\",\"shape\":[16]}");
}

static void mut_shape_missing(mfile *mf) {
  set_raw(mf, "input_proj.bias",
          "{\"dtype\":\"F32\",\"data_offsets\":[%B,%E]}");
}

static void mut_entry_not_object(mfile *mf) {
  set_raw(mf, "input_proj.bias", "[\"F32\",[16],[%B,%E]]");
}

static void mut_missing_dtype(mfile *mf) {
  set_raw(mf, "input_proj.bias", "{\"shape\":[16],\"data_offsets\":[%B,%E]}");
}

static void mut_dtype_number(mfile *mf) {
  set_raw(mf, "input_proj.bias",
          "{\"dtype\":4,\"shape\":[16],\"data_offsets\":[%B,%E]}");
}

static void mut_duplicate_name(mfile *mf) {
  /* A second "encoder.layers.0.norm1.bias", its bytes at the end, so that
   * the tensors still tile the data and only the duplicate is wrong. */
  const tensor *t = mf_find(mf, "encoder.layers.0.norm1.bias");
  size_t n = (size_t)(t->end - t->begin);
  unsigned char *copy = malloc(n);
  assert_non_null(copy);
  memcpy(copy, mf->data + t->begin, n);
  char shape[sizeof t->shape];
  snprintf(shape, sizeof shape, "%s", t->shape);
  mf_append(mf, "encoder.layers.0.norm1.bias", "F32", shape, copy, n);
  free(copy);
}

static void mut_duplicate_same_offsets(mfile *mf) {
  assert_true(mf->n < MAX_TENSORS);
  mf->t[mf->n++] = *mf_find(mf, "encoder.layers.1.norm2.weight");
}

static void mut_missing_tensor(mfile *mf) {
  mf_drop(mf, "encoder.layers.1.linear2.bias");
}

static void mut_extra_tensor(mfile *mf) {
  float v[4] = {0};
  mf_append(mf, "encoder.layers.2.linear1.bias", "F32", "4", v, sizeof v);
}

static void mut_extra_empty_tensor(mfile *mf) {
  mf_append(mf, "empty", "F32", "0", NULL, 0);
}

static void mut_transposed(mfile *mf) {
  set_shape(mf, "encoder.layers.1.linear1.weight", "16,32");
}

static void mut_vector_as_matrix(mfile *mf) {
  set_shape(mf, "encoder.norm.weight", "1,16");
}

static void mut_dtype_i8(mfile *mf) {
  set_dtype(mf, "input_proj.bias", "I8");
}

static void mut_dtype_f64(mfile *mf) {
  tensor *t = mf_find(mf, "input_proj.bias");
  snprintf(t->dtype, sizeof t->dtype, "F64");
  snprintf(t->shape, sizeof t->shape, "8"); /* 8 doubles: the span fits */
}

static void mut_dtype_lowercase(mfile *mf) {
  set_dtype(mf, "input_proj.bias", "f32");
}

static void mut_trailing_bytes(mfile *mf) {
  mf_insert(mf, mf->data_len, NULL, 8);
}

static void mut_vocab_numbers(mfile *mf) {
  cfg_edit(mf, "\"vocab\":[\"t0\",\"t1\",\"t2\",\"t3\",\"t4\"]",
           "\"vocab\":[\"t0\",\"t1\",2,\"t3\",\"t4\"]");
}

static void mut_vocab_string(mfile *mf) {
  cfg_edit(mf, "\"vocab\":[\"t0\",\"t1\",\"t2\",\"t3\",\"t4\"]",
           "\"vocab\":\"t0 t1 t2 t3 t4\"");
}

static void mut_vocab_one(mfile *mf) {
  cfg_edit(mf, "\"vocab\":[\"t0\",\"t1\",\"t2\",\"t3\",\"t4\"]",
           "\"vocab\":[\"t0\"]");
}

/* The vocabulary with token 2 made of len bytes of 'x'. */
static void vocab_token_of(mfile *mf, size_t len) {
  char token[1100];
  assert_true(len < sizeof token);
  memset(token, 'x', len);
  token[len] = '\0';
  char *with;
  assert_true(asprintf(&with, "\"vocab\":[\"t0\",\"t1\",\"%s\",\"t3\","
                              "\"t4\"]",
                       token) > 0);
  cfg_edit(mf, "\"vocab\":[\"t0\",\"t1\",\"t2\",\"t3\",\"t4\"]", with);
  free(with);
}

/* A token of 1025 bytes: over the limit, which keeps what every buffer
 * of CTC text holds (chunk_frames times the longest token) small. */
static void mut_vocab_token_long(mfile *mf) { vocab_token_of(mf, 1025); }

/* 1024 bytes, the limit itself, loads. */
static void mut_vocab_token_at_limit(mfile *mf) { vocab_token_of(mf, 1024); }

/* A token spelled twice: which id a lexicon's spelling meant is then
 * anybody's guess. */
static void mut_vocab_duplicate(mfile *mf) {
  cfg_edit(mf, "\"t3\",\"t4\"]", "\"t3\",\"t1\"]");
}

/* The blank's spelling among the other tokens, likewise. */
static void mut_vocab_blank_twice(mfile *mf) {
  cfg_edit(mf, "\"t3\",\"t4\"]", "\"t0\",\"t4\"]");
}

static void mut_vocab_size_mismatch(mfile *mf) {
  cfg_edit(mf, ",\"t4\"]", "]");
}

static void mut_head_without_vocab(mfile *mf) {
  cfg_edit(mf, ",\"vocab\":[\"t0\",\"t1\",\"t2\",\"t3\",\"t4\"]", "");
}

static void mut_vocab_without_head(mfile *mf) {
  mf_drop(mf, "head.weight");
  mf_drop(mf, "head.bias");
}

static void mut_cmvn_std_zero(mfile *mf) {
  set_f32(mf, "frontend.cmvn.std", 3, 0.0f);
}

static void mut_cmvn_std_negative(mfile *mf) {
  set_f32(mf, "frontend.cmvn.std", 79, -1.0f);
}

static void mut_cmvn_mean_nan(mfile *mf) {
  set_f32(mf, "frontend.cmvn.mean", 5, NAN);
}

static void mut_cmvn_std_inf(mfile *mf) {
  set_f32(mf, "frontend.cmvn.std", 0, INFINITY);
}

static void mut_cmvn_mean_only(mfile *mf) { mf_drop(mf, "frontend.cmvn.std"); }

static void mut_cmvn_std_only(mfile *mf) { mf_drop(mf, "frontend.cmvn.mean"); }

/* A model d 2, n_layers layers, window W, none positions, F16. */
static unsigned char *synth_narrow(size_t *size, int n_layers, int window) {
  synth_spec s = {.d_model = 2, .n_heads = 1, .n_layers = n_layers,
                  .d_ff = 1, .window = window, .pos_encoding = "none",
                  .activation = "relu", .norm_first = 1, .f16 = 1, .seed = 3};
  unsigned char *b = synth_model(&s, size);
  assert_non_null(b);
  return b;
}

/* A 1.2 MB file (d 2, 1024 layers, W 1000000) whose every encoder would
 * need 1024 * 1000000 * 2 * (k, v) * 4 bytes = 16.4 GB of KV ring. */
static unsigned char *raw_kv_ring_16gb(size_t *size) {
  return synth_narrow(size, 1024, 1000000);
}

/* The base model's header with a UTF-8 byte order mark before the "{". */
static unsigned char *raw_header_bom(size_t *size) {
  mfile mf;
  mf_base(&mf);
  size_t n;
  unsigned char *b = mf_serialize(&mf, &n);
  mf_free(&mf);
  uint64_t hlen = get_le64(b);
  *size = n + 8; /* the BOM and 5 spaces keep the length a multiple of 8 */
  unsigned char *out = malloc(*size);
  assert_non_null(out);
  put_le64(out, hlen + 8);
  memcpy(out + 8, "\xef\xbb\xbf", 3);
  memcpy(out + 11, b + 8, (size_t)hlen);
  memset(out + 11 + hlen, ' ', 5);
  memcpy(out + 16 + hlen, b + 8 + hlen, n - 8 - (size_t)hlen);
  free(b);
  return out;
}

static void mut_header_invalid_utf8(mfile *mf) {
  /* Token "t1" becomes the bytes 't', 0xff. */
  meta_edit(mf, "\\\"t1\\\"", "\\\"t\xff\\\"");
}

static void mut_config_nul_escape(mfile *mf) {
  /* aural.config is "{...}" followed by an escaped NUL and more text: the
   * C string stops at the NUL, Python's json.loads sees extra data. */
  meta_edit(mf, "]}\"}", "]}\\u0000garbage\"}");
}

/* Each case: the error code and substrings its message must hold. The
 * header cases include what a lenient JSON parser would let through but the
 * reference (tools/reference/export.py: header.decode("utf-8"), then
 * json.loads) refuses, so the two never disagree on what a file is. */
#define E(...) {__VA_ARGS__}
static bad_case bad_cases[] = {
    /* The file as a whole and the header length. */
    {"empty", NULL, raw_empty, AURAL_EEMPTY, E("0 bytes")},
    {"seven_bytes", NULL, raw_7_bytes, AURAL_ETRUNCATED, E("7 bytes")},
    {"hlen_past_end", NULL, raw_hlen_past_end, AURAL_ETRUNCATED,
     E("header length", "runs past the end")},
    {"hlen_past_end_far", NULL, raw_hlen_past_end_far, AURAL_ETRUNCATED,
     E("header length 99999999", "runs past the end")},
    {"hlen_over_100mb", NULL, raw_hlen_over_100mb, AURAL_EFORMAT,
     E("header length 100000001", "100 MB")},
    {"hlen_u64_max", NULL, raw_hlen_u64_max, AURAL_EFORMAT,
     E("header length 18446744073709551615", "100 MB")},
    /* The header as JSON. */
    {"header_not_json", NULL, raw_not_json, AURAL_EFORMAT,
     E("header is not a JSON object")},
    {"header_array", NULL, raw_json_array, AURAL_EFORMAT,
     E("header is not a JSON object")},
    {"header_string", NULL, raw_json_string, AURAL_EFORMAT,
     E("header is not a JSON object")},
    {"header_empty", NULL, raw_zero_hlen, AURAL_EFORMAT,
     E("header is not a JSON object")},
    {"header_nul_byte", NULL, raw_nul_in_header, AURAL_EFORMAT,
     E("header byte", "is 0x00: not allowed there")},
    {"header_control_chars", mut_header_control_char, NULL, AURAL_EFORMAT,
     E("header byte", "is 0x01: not allowed there")},
    {"header_trailing_garbage", mut_header_trailing_garbage, NULL,
     AURAL_EFORMAT,
     E("refused at byte", "unexpected bytes after the value")},
    {"header_invalid_utf8", mut_header_invalid_utf8, NULL, AURAL_EFORMAT,
     E("is 0xff", "invalid UTF-8")},
    {"header_utf8_bom", NULL, raw_header_bom, AURAL_EFORMAT,
     E("header is not a JSON object")},
    {"duplicate_metadata", mut_duplicate_metadata, NULL, AURAL_EFORMAT,
     E("duplicate member name \"__metadata__\"")},
    {"header_cut_short", NULL, raw_truncated_json, AURAL_EFORMAT,
     E("header's JSON is refused at byte", "unterminated")},
    /* __metadata__. */
    {"no_metadata", mut_no_metadata, NULL, AURAL_EFORMAT,
     E("no __metadata__")},
    {"metadata_string", mut_metadata_string, NULL, AURAL_EFORMAT,
     E("no __metadata__")},
    {"format_pt", mut_format, NULL, AURAL_EFORMAT,
     E("\"format\" is not \"aural\"")},
    {"format_missing", mut_format_missing, NULL, AURAL_EFORMAT,
     E("\"format\" is not \"aural\"")},
    {"version_2", mut_version, NULL, AURAL_EFORMAT,
     E("\"aural.version\" must be \"1\"")},
    {"version_number", mut_version_number, NULL, AURAL_EFORMAT,
     E("\"aural.version\" must be \"1\"")},
    {"no_config", mut_no_config, NULL, AURAL_ECONFIG,
     E("lacks \"aural.config\"")},
    {"config_object", mut_config_object, NULL, AURAL_ECONFIG,
     E("lacks \"aural.config\" (a JSON string)")},
    /* aural.config. */
    {"config_not_json", mut_config_not_json, NULL, AURAL_ECONFIG,
     E("aural.config refused at byte 1")},
    {"config_array", mut_config_array, NULL, AURAL_ECONFIG,
     E("aural.config is not a JSON object")},
    {"no_d_model", mut_no_d_model, NULL, AURAL_ECONFIG,
     E("aural.config lacks the field \"d_model\"")},
    {"d_model_fraction", mut_d_model_fraction, NULL, AURAL_ECONFIG,
     E("\"d_model\" must be an integer")},
    {"d_model_string", mut_d_model_string, NULL, AURAL_ECONFIG,
     E("\"d_model\" must be an integer")},
    {"n_layers_zero", mut_n_layers_zero, NULL, AURAL_ECONFIG,
     E("\"n_layers\" must be an integer in 1..")},
    {"heads_not_dividing", mut_heads_not_dividing, NULL, AURAL_ECONFIG,
     E("n_heads = 3 does not divide d_model = 16")},
    {"rope_odd_head_size", mut_rope_odd_head, NULL, AURAL_ECONFIG,
     E("rope needs an even head size", "= 1")},
    {"sinusoidal_odd_d_model", mut_sinusoidal_odd_d, NULL, AURAL_ECONFIG,
     E("sinusoidal", "even d_model, not 15")},
    {"config_duplicate_key", mut_config_duplicate_key, NULL, AURAL_ECONFIG,
     E("aural.config refused at", "duplicate member name \"d_model\"")},
    {"config_nul_escape", mut_config_nul_escape, NULL, AURAL_EFORMAT,
     E("header byte", "\\u0000")},
    {"activation_swish", mut_activation, NULL, AURAL_ECONFIG,
     E("\"activation\" must be one of: relu, gelu")},
    {"pos_encoding_alibi", mut_pos_encoding, NULL, AURAL_ECONFIG,
     E("\"pos_encoding\" must be one of: none, sinusoidal, rope")},
    {"window_zero", mut_window_zero, NULL, AURAL_ECONFIG,
     E("\"window\" must be an integer in 1..1000000")},
    {"window_negative", mut_window_negative, NULL, AURAL_ECONFIG,
     E("\"window\" must be an integer in 1..1000000")},
    {"window_too_big", mut_window_huge, NULL, AURAL_ECONFIG,
     E("\"window\" must be an integer in 1..1000000")},
    {"lead_in_too_long", mut_lead_in_huge, NULL, AURAL_ECONFIG,
     E("\"lead_in_frames\" must be an integer in 0..1000")},
    {"lead_in_fraction", mut_lead_in_fraction, NULL, AURAL_ECONFIG,
     E("\"lead_in_frames\" must be an integer in 0..1000")},
    {"norm_first_string", mut_norm_first_string, NULL, AURAL_ECONFIG,
     E("\"norm_first\" must be true or false")},
    {"eps_negative", mut_eps_negative, NULL, AURAL_ECONFIG,
     E("\"layer_norm_eps\" must be a positive number")},
    {"mel_bins_2", mut_mel_bins_2, NULL, AURAL_ECONFIG,
     E("num_mel_bins = 2")},
    {"mel_bins_40", mut_mel_bins_40, NULL, AURAL_EFORMAT,
     E("\"input_proj.weight\"", "[16, 80]", "[16, 40]")},
    /* Entries, one by one. */
    {"dtype_i8", mut_dtype_i8, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "dtype \"I8\" is not supported")},
    {"dtype_f64", mut_dtype_f64, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "dtype \"F64\" is not supported")},
    {"dtype_lowercase", mut_dtype_lowercase, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "dtype \"f32\" is not supported")},
    {"missing_dtype", mut_missing_dtype, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "missing dtype")},
    {"dtype_number", mut_dtype_number, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "missing dtype")},
    {"entry_not_object", mut_entry_not_object, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "not an object")},
    {"shape_missing", mut_shape_missing, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "shape must be a list")},
    {"entry_duplicate_field", mut_entry_duplicate_field, NULL, AURAL_EFORMAT,
     E("(in \"input_proj.bias\")", "duplicate member name \"dtype\"")},
    {"shape_negative", mut_shape_negative, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "shape[0] is not a non-negative integer")},
    {"shape_fraction", mut_shape_fraction, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "shape[0] is not a non-negative integer")},
    {"shape_string", mut_shape_string, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "shape[0] is not a non-negative integer")},
    {"shape_1e300", mut_shape_huge_entry, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "shape[0] is not a non-negative integer")},
    {"shape_9_dims", mut_shape_9_dims, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "at most 8")},
    {"shape_overflow", mut_shape_overflow, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "overflows")},
    {"shape_overflow_2e53", mut_shape_overflow_big, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "overflows")},
    {"span_mismatch", mut_span_mismatch, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "need 60 bytes but data_offsets span 64")},
    {"dtype_span_mismatch", mut_dtype_span_mismatch, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "need 32 bytes but data_offsets span 64")},
    {"offsets_three", mut_offsets_three, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "data_offsets must be two")},
    {"offsets_strings", mut_offsets_strings, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "data_offsets must be two")},
    {"offsets_missing", mut_offsets_missing, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "data_offsets must be two")},
    {"offsets_past_end", mut_past_end, NULL, AURAL_EFORMAT,
     E("\"frontend.cmvn.std\"", "outside the")},
    {"offsets_begin_after_end", mut_begin_after_end, NULL, AURAL_EFORMAT,
     E("\"input_proj.bias\"", "begin 5184 is after end 5120")},
    /* The entries together: tiling, names, the set the config implies. */
    {"offsets_overlap", mut_overlap, NULL, AURAL_EFORMAT,
     E("\"encoder.layers.0.linear1.bias\"", "overlap")},
    {"offsets_gap", mut_gap, NULL, AURAL_EFORMAT,
     E("\"encoder.layers.0.linear1.bias\"", "(gap)")},
    {"trailing_bytes", mut_trailing_bytes, NULL, AURAL_EFORMAT,
     E("8 bytes follow the last tensor")},
    {"duplicate_name", mut_duplicate_name, NULL, AURAL_EFORMAT,
     E("duplicate member name \"encoder.layers.0.norm1.bias\"")},
    {"duplicate_same_offsets", mut_duplicate_same_offsets, NULL, AURAL_EFORMAT,
     E("duplicate member name \"encoder.layers.1.norm2.weight\"")},
    {"missing_tensor", mut_missing_tensor, NULL, AURAL_EFORMAT,
     E("tensor \"encoder.layers.1.linear2.bias\" is missing")},
    {"extra_tensor", mut_extra_tensor, NULL, AURAL_EFORMAT,
     E("unexpected tensor \"encoder.layers.2.linear1.bias\"")},
    {"extra_empty_tensor", mut_extra_empty_tensor, NULL, AURAL_EFORMAT,
     E("unexpected tensor \"empty\"")},
    {"linear1_transposed", mut_transposed, NULL, AURAL_EFORMAT,
     E("\"encoder.layers.1.linear1.weight\" has shape [16, 32]",
       "implies [32, 16]")},
    {"vector_as_matrix", mut_vector_as_matrix, NULL, AURAL_EFORMAT,
     E("\"encoder.norm.weight\" has shape [1, 16]", "implies [16]")},
    /* Vocabulary and head. */
    {"vocab_numbers", mut_vocab_numbers, NULL, AURAL_ECONFIG,
     E("vocab entry 2 is not a string")},
    {"vocab_string", mut_vocab_string, NULL, AURAL_ECONFIG,
     E("\"vocab\" must be a list")},
    {"vocab_one_token", mut_vocab_one, NULL, AURAL_ECONFIG,
     E("\"vocab\" must be a list of 2..")},
    {"vocab_token_long", mut_vocab_token_long, NULL, AURAL_ECONFIG,
     E("vocab entry 2 is 1025 bytes long", "at most 1024")},
    {"vocab_duplicate", mut_vocab_duplicate, NULL, AURAL_ECONFIG,
     E("vocab entries 1 and 4 are both \"t1\"", "must differ")},
    {"vocab_blank_twice", mut_vocab_blank_twice, NULL, AURAL_ECONFIG,
     E("vocab entries 0 and 3 are both \"t0\"")},
    {"vocab_size_mismatch", mut_vocab_size_mismatch, NULL, AURAL_EFORMAT,
     E("\"head.weight\" has shape [5, 16]", "implies [4, 16]")},
    {"head_without_vocab", mut_head_without_vocab, NULL, AURAL_EFORMAT,
     E("unexpected tensor \"head.")},
    {"vocab_without_head", mut_vocab_without_head, NULL, AURAL_EFORMAT,
     E("tensor \"head.weight\" is missing")},
    /* CMVN. */
    {"cmvn_std_zero", mut_cmvn_std_zero, NULL, AURAL_EFORMAT,
     E("\"frontend.cmvn.std\" bin 3 is 0", "positive")},
    {"cmvn_std_negative", mut_cmvn_std_negative, NULL, AURAL_EFORMAT,
     E("\"frontend.cmvn.std\"", "bin 79")},
    {"cmvn_std_inf", mut_cmvn_std_inf, NULL, AURAL_EFORMAT,
     E("\"frontend.cmvn.std\"", "bin 0")},
    {"cmvn_mean_nan", mut_cmvn_mean_nan, NULL, AURAL_EFORMAT,
     E("\"frontend.cmvn.mean\" bin 5 is nan", "must be finite")},
    {"cmvn_mean_only", mut_cmvn_mean_only, NULL, AURAL_EFORMAT,
     E("tensor \"frontend.cmvn.std\" is missing")},
    {"cmvn_std_only", mut_cmvn_std_only, NULL, AURAL_EFORMAT,
     E("unexpected tensor \"frontend.cmvn.std\"")},
    /* Resources. */
    {"kv_ring_16gb", NULL, raw_kv_ring_16gb, AURAL_ECONFIG,
     E("n_layers 1024 x window 1000000 x d_model 2", "key/value ring",
       "limit 1024 MB")},
};
#define N_BAD_CASES (sizeof bad_cases / sizeof bad_cases[0])

static char *tmp_dir;

static int group_setup(void **state) {
  (void)state;
  tmp_dir = test_tmpdir();
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  test_rmtree(tmp_dir);
  free(tmp_dir);
  return 0;
}

/* Case-sensitive, no alternatives: the loader's messages are exact. */
static void assert_substring(const char *msg, const char *part) {
  if (strstr(msg, part) == NULL)
    fail_msg("message \"%s\" lacks \"%s\"", msg, part);
}

/* One rejection: code, *out, err.code, and the message's parts. */
static void check_rejected(int rc, const aural_model *m, const aural_err *err,
                           int code, const char *where,
                           const char *const expect[3]) {
  if (code == 0) { /* any negative code */
    assert_true(rc < 0);
    code = rc;
  }
  if (rc != code)
    fail_msg("%s: rc %d (%s), expected %d (%s): %s", where, rc,
             aural_err_name(rc), code, aural_err_name(code), err->msg);
  assert_true(rc < 0);
  assert_null(m);
  assert_int_equal(err->code, rc);
  assert_substring(err->msg, where);
  for (int i = 0; i < 3 && expect[i] != NULL; i++)
    assert_substring(err->msg, expect[i]);
}

static unsigned char *build_case(const bad_case *c, size_t *size) {
  if (c->raw != NULL) return c->raw(size);
  mfile mf;
  mf_base(&mf);
  c->mutate(&mf);
  unsigned char *b = mf_serialize(&mf, size);
  mf_free(&mf);
  return b;
}

static void test_rejects(void **state) {
  const bad_case *c = *state;
  size_t size;
  unsigned char *buf = build_case(c, &size);
  char name[128];
  snprintf(name, sizeof name, "%s.safetensors", c->name);

  int code = c->code;

  /* From memory, with both in-memory weight types. */
  aural_model_load_config lc;
  aural_model_load_config_default(&lc);
  for (int wt = 0; wt < 2; wt++) {
    lc.weights = wt ? AURAL_WEIGHTS_F16 : AURAL_WEIGHTS_F32;
    aural_model *m = (aural_model *)&lc; /* must be overwritten with NULL */
    aural_err err = {0};
    int rc = aural_model_load_buffer(buf, size, name, &lc, &m, &err);
    if (wt == 0)
      printf("  %-24s %-16s %s\n", c->name, aural_err_name(rc), err.msg);
    check_rejected(rc, m, &err, code, name, c->expect);
  }

  /* From a file. */
  char *path;
  assert_true(asprintf(&path, "%s/%s", tmp_dir, name) > 0);
  test_write_file(path, buf, size);
  aural_model *m = (aural_model *)&lc;
  aural_err err = {0};
  int rc = aural_model_load(path, NULL, &m, &err);
  check_rejected(rc, m, &err, code, path, c->expect);
  assert_int_equal(unlink(path), 0);
  free(path);
  free(buf);
}

/* The mutation tools themselves: the base model round-trips and loads, so
 * every rejection above is the mutation's doing. */
static void test_base_round_trips(void **state) {
  (void)state;
  synth_spec s;
  base_spec(&s);
  size_t size, size2;
  unsigned char *orig = synth_model(&s, &size);
  assert_non_null(orig);
  mfile mf;
  mf_parse(&mf, orig, size);
  assert_int_equal(mf.n, 2 + 12 * 2 + 2 + 2 + 2);
  unsigned char *again = mf_serialize(&mf, &size2);
  assert_int_equal(size2, size);
  assert_memory_equal(again, orig, size);

  /* Drop a tensor and put it back at the end: still valid. */
  tensor t = *mf_find(&mf, "encoder.layers.1.linear2.bias");
  unsigned char bytes[BASE_D * 4];
  assert_int_equal(t.end - t.begin, sizeof bytes);
  memcpy(bytes, mf.data + t.begin, sizeof bytes);
  mf_drop(&mf, t.name);
  mf_append(&mf, t.name, t.dtype, t.shape, bytes, sizeof bytes);
  unsigned char *moved = mf_serialize(&mf, &size2);
  assert_int_equal(size2, size);

  const unsigned char *files[] = {orig, moved};
  for (int i = 0; i < 2; i++) {
    aural_model *m;
    aural_err err = {0};
    if (aural_model_load_buffer(files[i], size, "base", NULL, &m, &err) != 0)
      fail_msg("%s", err.msg);
    const aural_model_config *c = aural_model_get_config(m);
    assert_int_equal(c->d_model, BASE_D);
    assert_int_equal(c->vocab_size, BASE_VOCAB);
    assert_true(c->has_cmvn);
    assert_string_equal(aural_model_token(m, 4), "t4");
    aural_model_free(m);
  }

  /* A token as long as the limit loads (vocab_token_long is one byte
   * more). */
  mut_vocab_token_at_limit(&mf);
  unsigned char *long_token = mf_serialize(&mf, &size2);
  aural_model *m;
  aural_err err = {0};
  if (aural_model_load_buffer(long_token, size2, "base", NULL, &m, &err) != 0)
    fail_msg("%s", err.msg);
  assert_int_equal(strlen(aural_model_token(m, 2)), 1024);
  aural_model_free(m);
  free(long_token);
  free(moved);
  free(again);
  free(orig);
  mf_free(&mf);
}

/* ---- paths that are not model files ------------------------------------ */

static void test_bad_paths(void **state) {
  (void)state;
  struct {
    const char *path;
    int code;
    const char *expect;
  } cases[] = {
      {tmp_dir, -EISDIR, "is a directory"},
      {"/nonexistent/aural/model.safetensors", -ENOENT,
       "No such file or directory"},
      {"/dev/null", AURAL_EFORMAT, "not a regular file"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aural_model *m = (aural_model *)&m;
    aural_err err = {0};
    int rc = aural_model_load(cases[i].path, NULL, &m, &err);
    printf("  %-40s %-16s %s\n", cases[i].path, aural_err_name(rc), err.msg);
    const char *const expect[3] = {cases[i].expect, NULL, NULL};
    check_rejected(rc, m, &err, cases[i].code, cases[i].path, expect);
  }
  /* A NULL buffer of some bytes is refused, as the other loaders do. */
  aural_model *m = (aural_model *)&m;
  aural_err err = {0};
  int rc = aural_model_load_buffer(NULL, 100, "buf", NULL, &m, &err);
  const char *const expect[3] = {"100 bytes at a NULL address", NULL, NULL};
  check_rejected(rc, m, &err, AURAL_EINVAL, "buf", expect);
  /* Without a name, messages say "(memory)" (printf of a NULL %s is
   * undefined). */
  rc = aural_model_load_buffer("aural", 5, NULL, NULL, &m, &err);
  const char *const short_buf[3] = {"too short", NULL, NULL};
  check_rejected(rc, m, &err, AURAL_ETRUNCATED, "(memory)", short_buf);
  /* Nowhere to put the model: refused by name (it crashed), before the
   * file is read. */
  const char *const no_out[3] = {"no out pointer", NULL, NULL};
  m = NULL;
  rc = aural_model_load(test_data_path("encoder/tiny.safetensors"), NULL,
                        NULL, &err);
  check_rejected(rc, m, &err, AURAL_EINVAL, "model", no_out);
  rc = aural_model_load_buffer("aural", 5, "buf", NULL, NULL, &err);
  check_rejected(rc, m, &err, AURAL_EINVAL, "model", no_out);
  assert_null(aural_model_token(NULL, 0));
}

/* A FIFO with no writer: a blocking open(O_RDONLY) would wait for one
 * forever; the loader must refuse it at once. Tried in a child process
 * that a 2 s alarm ends if it does block. */
static void test_fifo(void **state) {
  (void)state;
  char *path;
  assert_true(asprintf(&path, "%s/fifo.safetensors", tmp_dir) > 0);
  assert_int_equal(mkfifo(path, 0600), 0);
  fflush(stdout);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(2);
    aural_model *m = (aural_model *)&m;
    aural_err err = {0};
    int rc = aural_model_load(path, NULL, &m, &err);
    printf("  %-40s %-16s %s\n", "FIFO", aural_err_name(rc), err.msg);
    fflush(stdout);
    _exit(rc == AURAL_EFORMAT && m == NULL && strstr(err.msg, path) != NULL &&
                  strstr(err.msg, "not a regular file") != NULL
              ? 0
              : 1);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_int_equal(unlink(path), 0);
  free(path);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
    fail_msg("aural_model_load() on a FIFO still blocked after 2 s");
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- a model file that shrinks while it loads -------------------------- */

typedef struct shrinker {
  const char *path;
  const unsigned char *bytes;
  size_t size, keep; /* the whole file, and what a truncation leaves */
  volatile int stop;
} shrinker;

/* Over and over: the whole file written back, then cut to its header. */
static void *shrink_loop(void *arg) {
  shrinker *s = arg;
  int fd = open(s->path, O_WRONLY);
  if (fd < 0) return NULL;
  while (!s->stop) {
    if (pwrite(fd, s->bytes, s->size, 0) != (ssize_t)s->size) break;
    if (ftruncate(fd, (off_t)s->keep) != 0) break;
  }
  close(fd);
  return NULL;
}

/* A model file truncated by another process while aural_model_load()
 * reads it must give a model or an error, never a crash (a mapped file
 * that shrinks under its mapping raises SIGBUS). The loads run in a child,
 * so that a signal is reported as a failure, not the end of the test
 * binary. Each load either sees the whole file, or one cut short: most of
 * them overlap a truncation. */
static void test_file_truncated_while_loading(void **state) {
  (void)state;
  synth_spec sp = {.d_model = 64, .n_heads = 4, .n_layers = 4, .d_ff = 256,
                   .window = 16, .pos_encoding = "rope",
                   .activation = "gelu", .norm_first = 1, .seed = 11};
  size_t size;
  unsigned char *bytes = synth_model(&sp, &size);
  assert_non_null(bytes);
  char *path;
  assert_true(asprintf(&path, "%s/shrinking.safetensors", tmp_dir) > 0);
  test_write_file(path, bytes, size);
  fflush(stdout);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* cmocka's handlers would carry on with the next test in the child. */
    signal(SIGBUS, SIG_DFL);
    signal(SIGSEGV, SIG_DFL);
    alarm(20);
    shrinker sh = {.path = path, .bytes = bytes, .size = size,
                   .keep = 8 + (size_t)get_le64(bytes)};
    pthread_t th;
    if (pthread_create(&th, NULL, shrink_loop, &sh) != 0) _exit(3);
    int n_ok = 0, n_err = 0, bad = 0;
    for (int i = 0; i < 300; i++) {
      aural_model *m = (aural_model *)&m;
      aural_err err = {0};
      int rc = aural_model_load(path, NULL, &m, &err);
      if (rc == 0 && m != NULL) {
        n_ok++;
      } else if (rc < 0 && m == NULL && err.code == rc &&
                 strstr(err.msg, path) != NULL) {
        if (n_err++ == 0) printf("  e.g. %s: %s\n", aural_err_name(rc),
                                 err.msg);
      } else {
        printf("  load %d: rc %d, model %p, message \"%s\"\n", i, rc,
               (void *)m, err.msg);
        bad = 1;
      }
      if (rc == 0) aural_model_free(m);
    }
    sh.stop = 1;
    pthread_join(th, NULL);
    printf("  300 loads of a file cut short and restored meanwhile: %d "
           "loaded, %d refused\n", n_ok, n_err);
    fflush(stdout);
    _exit(bad ? 1 : 0);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_int_equal(unlink(path), 0);
  free(path);
  free(bytes);
  if (WIFSIGNALED(status))
    fail_msg("the loads died of signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* Header padding: spaces as writers put them, and any JSON whitespace,
 * is accepted after the header object. */
static void test_header_whitespace_padding(void **state) {
  (void)state;
  static const char *const pads[] = {"", " ", "\n", "\t\r\n   "};
  for (size_t i = 0; i < sizeof pads / sizeof pads[0]; i++) {
    mfile mf;
    mf_base(&mf);
    snprintf(mf.suffix, sizeof mf.suffix, "%s", pads[i]);
    size_t size;
    unsigned char *b = mf_serialize(&mf, &size);
    aural_model *m;
    aural_err err = {0};
    if (aural_model_load_buffer(b, size, "padded", NULL, &m, &err) != 0)
      fail_msg("padding %zu: %s", i, err.msg);
    aural_model_free(m);
    free(b);
    mf_free(&mf);
  }
}

/* The per-stream key/value ring limit is 1 GiB, inclusive: d 2 and 1024
 * layers allow a window of exactly 2^30 / (8 * 2 * 1024) = 65536. */
static void test_kv_ring_limit(void **state) {
  (void)state;
  for (int over = 0; over < 2; over++) {
    size_t size;
    unsigned char *b = synth_narrow(&size, 1024, 65536 + over);
    aural_model *m;
    aural_err err = {0};
    int rc = aural_model_load_buffer(b, size, "kv_limit", NULL, &m, &err);
    if (over) {
      printf("  window 65537: %s\n", err.msg);
      const char *const expect[3] = {"window 65537", "limit 1024 MB", NULL};
      check_rejected(rc, m, &err, AURAL_ECONFIG, "kv_limit", expect);
    } else {
      if (rc != 0) fail_msg("window 65536 (1 GiB of ring): %s", err.msg);
      size_t ring = (size_t)1 << 30;
      assert_true(aural_encoder_state_bytes(m, NULL) >= ring);
      printf("  window 65536 loads; state_bytes %zu\n",
             aural_encoder_state_bytes(m, NULL));
      aural_model_free(m);
    }
    free(b);
  }
}

/* ---- memory a model's dimensions demand -------------------------------- */

/* A 4 MB file (d_model 1, one layer, d_ff 2^20, F16) whose every compute
 * thread of aurald would need 4 GiB of scratch for its batch of 1024 rows
 * (d_ff floats a row), and every stream 256 MiB for its own 64 rows. The
 * default limit refuses it before anything is allocated for it, and the
 * message names d_ff. */
static unsigned char *synth_wide_ff(size_t *size) {
  synth_spec s = {.d_model = 1, .n_heads = 1, .n_layers = 1,
                  .d_ff = 1 << 20, .window = 4, .pos_encoding = "none",
                  .activation = "relu", .norm_first = 1, .f16 = 1, .seed = 5};
  unsigned char *b = synth_model(&s, size);
  assert_non_null(b);
  return b;
}

static void test_memory_limit_d_ff(void **state) {
  (void)state;
  size_t size;
  unsigned char *b = synth_wide_ff(&size);
  char *path;
  assert_true(asprintf(&path, "%s/wide_ff.safetensors", tmp_dir) > 0);
  test_write_file(path, b, size);
  for (int from_file = 0; from_file < 2; from_file++) {
    aural_model *m = (aural_model *)&m;
    aural_err err = {0};
    const char *where = from_file ? path : "wide_ff";
    int rc = from_file ? aural_model_load(path, NULL, &m, &err)
                       : aural_model_load_buffer(b, size, where, NULL, &m,
                                                 &err);
    printf("  %zu-byte file: %s\n", size, err.msg);
    const char *const expect[3] = {"d_ff 1048576",
                                   "4.0 GiB of scratch per worker at 1024 "
                                   "rows",
                                   "the limit is 2.0 GiB"};
    check_rejected(rc, m, &err, AURAL_ECONFIG, where, expect);
  }
  assert_int_equal(unlink(path), 0);
  free(path);
  free(b);
}

/* The limit and the rows it assumes come from the load config; the
 * memory a config needs is what the loader and the encoder really take. */
static void test_memory_limit_config(void **state) {
  (void)state;
  size_t size;
  unsigned char *b = synth_wide_ff(&size);
  aural_model_load_config lc;
  aural_model *m;
  aural_err err = {0};

  /* Fewer rows per batch, or a higher limit: the same file loads. */
  aural_model_load_config_default(&lc);
  lc.batch_rows = 64;
  if (aural_model_load_buffer(b, size, "wide_ff", &lc, &m, &err) != 0)
    fail_msg("batches of 64 rows: %s", err.msg);
  aural_model_memory mm;
  assert_int_equal(aural_model_memory_need(aural_model_get_config(m),
                                           AURAL_WEIGHTS_F32, 1024, &mm),
                   0);
  assert_true(mm.batch_bytes > ((uint64_t)4 << 30));
  assert_int_equal(mm.weight_bytes, aural_model_weight_bytes(m));
  assert_int_equal(mm.stream_bytes, aural_encoder_state_bytes(m, NULL));
  assert_int_equal(mm.total_bytes,
                   mm.weight_bytes + mm.stream_bytes + mm.batch_bytes);
  aural_model_free(m);
  aural_model_load_config_default(&lc);
  lc.max_memory_bytes = (uint64_t)5 << 30;
  if (aural_model_load_buffer(b, size, "wide_ff", &lc, &m, &err) != 0)
    fail_msg("a limit of 5 GiB: %s", err.msg);
  aural_model_free(m);
  free(b);

  /* The base model against its own numbers, for both weight types; one
   * byte less than it needs is refused, naming what dominates. */
  synth_spec sp;
  base_spec(&sp);
  b = synth_model(&sp, &size);
  assert_non_null(b);
  const aural_weight_type wts[] = {AURAL_WEIGHTS_F32, AURAL_WEIGHTS_F16,
                                   AURAL_WEIGHTS_BF16};
  for (int wt = 0; wt < 3; wt++) {
    aural_model_load_config_default(&lc);
    lc.weights = wts[wt];
    assert_int_equal(aural_model_load_buffer(b, size, "base", &lc, &m, &err),
                     0);
    assert_int_equal(aural_model_memory_need(aural_model_get_config(m),
                                             lc.weights, 1024, &mm),
                     0);
    assert_int_equal(mm.weight_bytes, aural_model_weight_bytes(m));
    assert_int_equal(mm.stream_bytes, aural_encoder_state_bytes(m, NULL));
    aural_batch *bt;
    assert_int_equal(aural_batch_create(m, 1024, &bt, &err), 0);
    aural_batch_destroy(bt);
    aural_model_free(m);

    lc.max_memory_bytes = mm.total_bytes;
    assert_int_equal(aural_model_load_buffer(b, size, "base", &lc, &m, &err),
                     0);
    aural_model_free(m);
    lc.max_memory_bytes = mm.total_bytes - 1;
    m = (aural_model *)&m;
    int rc = aural_model_load_buffer(b, size, "base", &lc, &m, &err);
    if (wt == 0) printf("  limit one byte short: %s\n", err.msg);
    const char *const expect[3] = {"per worker at 1024 rows",
                                   "max_memory_bytes", NULL};
    check_rejected(rc, m, &err, AURAL_ECONFIG, "base", expect);
  }

  /* A file larger than any model within the limit (a full header and
   * twice the limit) is refused before it is read: here a sparse file of
   * 200 MB. */
  char *path;
  assert_true(asprintf(&path, "%s/sparse_200mb.safetensors", tmp_dir) > 0);
  test_write_file(path, b, size);
  assert_int_equal(truncate(path, 200000000), 0);
  aural_model_load_config_default(&lc);
  lc.max_memory_bytes = 1000;
  m = (aural_model *)&m;
  int rc = aural_model_load(path, &lc, &m, &err);
  printf("  limit 1000 bytes: %s\n", err.msg);
  const char *const expect[3] = {"the file is 190.7 MiB",
                                 "memory limit of 1000 bytes", NULL};
  check_rejected(rc, m, &err, AURAL_ECONFIG, path, expect);
  assert_int_equal(unlink(path), 0);
  free(path);

  /* Not a config the library could make. */
  aural_model_config bad = {.d_model = 16, .n_heads = 3, .n_layers = 1,
                            .d_ff = 8, .window = 4};
  bad.fbank.num_mel_bins = 80;
  assert_int_equal(aural_model_memory_need(&bad, AURAL_WEIGHTS_F32, 64, &mm),
                   AURAL_EINVAL);
  bad.n_heads = 2;
  assert_int_equal(aural_model_memory_need(&bad, AURAL_WEIGHTS_F32, 0, &mm),
                   AURAL_EINVAL);
  assert_int_equal(aural_model_memory_need(&bad, AURAL_WEIGHTS_F32, 64, &mm),
                   0);
  /* No config or nowhere to put the answer: AURAL_EINVAL, not a crash. */
  assert_int_equal(aural_model_memory_need(NULL, AURAL_WEIGHTS_F32, 64, &mm),
                   AURAL_EINVAL);
  assert_int_equal(mm.total_bytes, 0);
  assert_int_equal(aural_model_memory_need(&bad, AURAL_WEIGHTS_F32, 64, NULL),
                   AURAL_EINVAL);
  free(b);
}

/* This process's peak resident memory (VmHWM) in kB, or -1. */
static long peak_rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  long kb = -1;
  while (fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) break;
  fclose(f);
  return kb;
}

/* A file is refused from its header before its tensor data is read or
 * memory is taken for it: here a 300 MB (sparse) file whose __metadata__
 * is not aural's, as another program's checkpoint's would be. Read whole
 * first, it took 300 MB of memory to be told so. */
static void test_refused_before_data_read(void **state) {
  (void)state;
  synth_spec s;
  base_spec(&s);
  size_t size;
  unsigned char *orig = synth_model(&s, &size);
  assert_non_null(orig);
  mfile mf;
  mf_parse(&mf, orig, size);
  mut_format(&mf);
  unsigned char *b = mf_serialize(&mf, &size);
  char *path;
  assert_true(asprintf(&path, "%s/checkpoint_300mb.safetensors", tmp_dir) >
              0);
  test_write_file(path, b, size);
  assert_int_equal(truncate(path, 300000000), 0);

  /* Peak memory from here on: resetting it needs Linux's clear_refs. */
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (f == NULL || fputs("5", f) < 0 || fclose(f) != 0 ||
      peak_rss_kb() < 0) {
    unlink(path);
    free(path);
    free(b);
    free(orig);
    mf_free(&mf);
    skip();
  }
  long before = peak_rss_kb();
  aural_model *m = (aural_model *)&m;
  aural_err err = {0};
  int rc = aural_model_load(path, NULL, &m, &err);
  long grown_kb = peak_rss_kb() - before;
  printf("  300 MB file: %s (peak memory grew by %ld kB)\n", err.msg,
         grown_kb);
  const char *const expect[3] = {"\"format\" is not \"aural\"", NULL, NULL};
  check_rejected(rc, m, &err, AURAL_EFORMAT, path, expect);
  assert_true(grown_kb < 50 * 1024);
  assert_int_equal(unlink(path), 0);
  free(path);
  free(b);
  free(orig);
  mf_free(&mf);
}

/* ---- headers with very many entries ------------------------------------ */

/* Matching the tensors a config calls for against a header's entries
 * costs O(log n) comparisons per name, not one per entry: a 100 MB header
 * holds millions of entries and a config 12,000 tensors (1024 layers), so
 * a scan per wanted name would be 10^10 comparisons at load. */
static void test_match_names_comparisons(void **state) {
  (void)state;
  const size_t n_have = 200000, n_want = 12290;
  char **have = malloc(n_have * sizeof *have);
  char **want = malloc(n_want * sizeof *want);
  size_t *found = malloc(n_want * sizeof *found);
  assert_non_null(have);
  assert_non_null(want);
  assert_non_null(found);
  /* Entries in a scrambled order; every other wanted name is present. */
  for (size_t j = 0; j < n_have; j++)
    assert_true(asprintf(&have[j], "t.%zu", (j * 7919) % n_have) > 0);
  for (size_t i = 0; i < n_want; i++)
    assert_true(asprintf(&want[i], i % 2 ? "t.%zu" : "missing.%zu",
                         i * 13) > 0);
  uint64_t n_cmp = 0;
  assert_int_equal(aural__match_names((const char *const *)have, n_have,
                                      (const char *const *)want, n_want,
                                      found, &n_cmp),
                   0);
  for (size_t i = 0; i < n_want; i++) {
    if (i % 2 == 0) {
      assert_true(found[i] == SIZE_MAX);
    } else {
      assert_true(found[i] < n_have);
      assert_string_equal(have[found[i]], want[i]);
    }
  }
  /* A binary search over 200,000 names: at most 18 comparisons each. */
  uint64_t bound = (uint64_t)n_want * 18;
  printf("  %zu names against %zu entries: %" PRIu64 " comparisons (bound "
         "%" PRIu64 ")\n", n_want, n_have, n_cmp, bound);
  if (n_cmp > bound)
    fail_msg("%" PRIu64 " comparisons to match %zu names against %zu "
             "entries; a binary search needs at most %" PRIu64,
             n_cmp, n_want, n_have, bound);
  for (size_t j = 0; j < n_have; j++) free(have[j]);
  for (size_t i = 0; i < n_want; i++) free(want[i]);
  free(have);
  free(want);
  free(found);
}

/* A model of 1024 layers whose header also holds 100,000 zero-length
 * tensors the config does not call for: loads fail at once, naming the
 * first of them; without them the same file loads. */
static void test_many_header_entries(void **state) {
  (void)state;
  size_t size;
  unsigned char *b = synth_narrow(&size, 1024, 8);
  uint64_t hlen = get_le64(b);
  size_t data_len = size - 8 - (size_t)hlen;
  const char *h = (const char *)b + 8;
  size_t close_at = (size_t)hlen;
  while (close_at > 0 && h[close_at - 1] != '}') close_at--;
  assert_true(close_at > 0);
  close_at--; /* the header's closing brace */

  const size_t n_extra = 100000;
  size_t cap = (size_t)hlen + n_extra * 96 + 64;
  char *nh = malloc(cap);
  assert_non_null(nh);
  memcpy(nh, h, close_at);
  size_t at = close_at;
  for (size_t j = 0; j < n_extra; j++)
    at += (size_t)snprintf(nh + at, cap - at,
                           ",\"extra.%zu\":{\"dtype\":\"F32\",\"shape\":[0],"
                           "\"data_offsets\":[%zu,%zu]}",
                           j, data_len, data_len);
  nh[at++] = '}';
  size_t nsize = 8 + at + data_len;
  unsigned char *nb = malloc(nsize);
  assert_non_null(nb);
  put_le64(nb, at);
  memcpy(nb + 8, nh, at);
  memcpy(nb + 8 + at, b + 8 + hlen, data_len);

  aural_model *m = (aural_model *)&m;
  aural_err err = {0};
  int rc = aural_model_load_buffer(nb, nsize, "many_entries", NULL, &m, &err);
  printf("  %zu-byte header, %zu extra entries: %s\n", at, n_extra, err.msg);
  const char *const expect[3] = {"unexpected tensor \"extra.", NULL, NULL};
  check_rejected(rc, m, &err, AURAL_EFORMAT, "many_entries", expect);

  rc = aural_model_load_buffer(b, size, "narrow", NULL, &m, &err);
  if (rc != 0) fail_msg("the same model without the extras: %s", err.msg);
  assert_int_equal(aural_model_get_config(m)->n_layers, 1024);
  aural_model_free(m);
  free(nh);
  free(nb);
  free(b);
}

/* ---- the 100 MB header limit, with files that really are that large ---- */

static void test_header_limit_real(void **state) {
  (void)state;
  mfile mf;
  mf_base(&mf);
  size_t small;
  unsigned char *base = mf_serialize(&mf, &small);
  uint64_t hlen0 = get_le64(base);
  size_t data_len = small - 8 - (size_t)hlen0;
  char *path;
  assert_true(asprintf(&path, "%s/big_header.safetensors", tmp_dir) > 0);

  /* The same model with its header padded by spaces to exactly 100 MB
   * (the limit: loads), then to one byte more (rejected). */
  const uint64_t limit = 100000000;
  size_t size = 8 + (size_t)limit + 1 + data_len;
  unsigned char *big = malloc(size);
  assert_non_null(big);
  for (int over = 0; over < 2; over++) {
    uint64_t hlen = limit + (uint64_t)over;
    size = 8 + (size_t)hlen + data_len;
    put_le64(big, hlen);
    memcpy(big + 8, base + 8, (size_t)hlen0);
    memset(big + 8 + hlen0, ' ', (size_t)(hlen - hlen0));
    memcpy(big + 8 + hlen, base + 8 + hlen0, data_len);
    test_write_file(path, big, size);
    for (int from_file = 0; from_file < 2; from_file++) {
      aural_model *m = (aural_model *)&m;
      aural_err err = {0};
      const char *where = from_file ? path : "big_header.safetensors";
      int rc = from_file ? aural_model_load(path, NULL, &m, &err)
                         : aural_model_load_buffer(big, size, where, NULL, &m,
                                                   &err);
      if (over) {
        printf("  header of %" PRIu64 " bytes, %zu-byte file: %s\n", hlen,
               size, err.msg);
        const char *const expect[3] = {"header length 100000001", "100 MB",
                                       NULL};
        check_rejected(rc, m, &err, AURAL_EFORMAT, where, expect);
      } else {
        if (rc != 0) fail_msg("a header of exactly 100 MB: %s", err.msg);
        assert_int_equal(aural_model_get_config(m)->d_model, BASE_D);
        aural_model_free(m);
      }
    }
  }
  assert_int_equal(unlink(path), 0);
  free(path);
  free(big);
  free(base);
  mf_free(&mf);
}

/* ---- non-finite weights ------------------------------------------------ */

/* NaN or infinity in a weight matrix or bias used to load: the encoder's
 * outputs were then NaN, and the bundled model with one NaN weight
 * printed nothing as text and one nonsense word over and over with
 * confidence 1 as words, with exit status 0. Such a model is refused,
 * naming the tensor and element; so is a float weight beyond half
 * precision's range when the matrices are held as f16 (it became
 * infinite) or bf16, while it loads as f32. */
static void test_nonfinite_weights(void **state) {
  (void)state;
  const struct {
    const char *tensor;
    size_t index;
    float value;
    aural_weight_type held;
    const char *want;
  } cases[] = {
      {"encoder.layers.0.linear1.weight", 17, NAN, AURAL_WEIGHTS_F32,
       "\"encoder.layers.0.linear1.weight\" element [1, 1] is NaN"},
      {"input_proj.bias", 0, INFINITY, AURAL_WEIGHTS_F32,
       "\"input_proj.bias\" element [0] is infinite"},
      {"head.weight", 3, -INFINITY, AURAL_WEIGHTS_F16,
       "\"head.weight\" element [0, 3] is infinite"},
      {"encoder.norm.bias", 2, NAN, AURAL_WEIGHTS_BF16,
       "\"encoder.norm.bias\" element [2] is NaN"},
      {"encoder.layers.1.linear2.weight", 40, 1e5f, AURAL_WEIGHTS_F16,
       "\"encoder.layers.1.linear2.weight\" element [1, 8] is 100000, "
       "beyond the range of f16"},
      {"head.weight", 0, 3.4e38f, AURAL_WEIGHTS_BF16,
       "\"head.weight\" element [0, 0] is 3.4e+38, beyond the range of "
       "bf16"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    mfile mf;
    mf_base(&mf);
    set_f32(&mf, cases[i].tensor, cases[i].index, cases[i].value);
    size_t size;
    unsigned char *buf = mf_serialize(&mf, &size);
    aural_model_load_config lc;
    aural_model_load_config_default(&lc);
    if (cases[i].held == AURAL_WEIGHTS_BF16)
      lc.precision = AURAL_PRECISION_BF16;
    else
      lc.weights = cases[i].held;
    aural_model *m = NULL;
    aural_err err = {0};
    int rc = aural_model_load_buffer(buf, size, "nonfinite", &lc, &m, &err);
    printf("  %s\n", err.msg);
    assert_int_equal(rc, AURAL_EFORMAT);
    assert_null(m);
    assert_non_null(strstr(err.msg, cases[i].want));
    /* A finite value that fits f32 loads when held as f32. */
    if (isfinite(cases[i].value)) {
      aural_model_load_config_default(&lc);
      assert_int_equal(
          aural_model_load_buffer(buf, size, "nonfinite", &lc, &m, &err), 0);
      aural_model_free(m);
    }
    free(buf);
    mf_free(&mf);
  }
}

/* ---- positive tests ---------------------------------------------------- */

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static void test_committed_models_load(void **state) {
  (void)state;
  const char *dir = test_data_path("encoder");
  char *dir_copy = strdup(dir);
  assert_non_null(dir_copy);
  DIR *d = opendir(dir_copy);
  assert_non_null(d);
  int n_models = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!ends_with(de->d_name, ".safetensors")) continue;
    for (int wt = 0; wt < 2; wt++) {
      aural_model_load_config lc;
      aural_model_load_config_default(&lc);
      lc.weights = wt ? AURAL_WEIGHTS_F16 : AURAL_WEIGHTS_F32;
      aural_model *m;
      aural_err err = {0};
      if (aural_model_load(test_join(dir_copy, de->d_name), &lc, &m, &err))
        fail_msg("%s", err.msg);
      const aural_model_config *c = aural_model_get_config(m);
      assert_true(c->d_model > 0 && c->d_model % c->n_heads == 0);
      assert_true(aural_model_n_params(m) > 0);
      size_t mels = (size_t)c->fbank.num_mel_bins, dm = (size_t)c->d_model,
             v = (size_t)c->vocab_size;
      float *feats = calloc(4 * mels, sizeof *feats);
      float *emb = malloc(4 * dm * sizeof *emb);
      float *logits = v ? malloc(4 * v * sizeof *logits) : NULL;
      assert_non_null(feats);
      assert_non_null(emb);
      for (size_t i = 0; i < 4 * mels; i++) feats[i] = (float)(i % 7);
      aural_encoder *e;
      assert_int_equal(aural_encoder_create(m, NULL, &e, &err), 0);
      assert_int_equal(aural_encoder_forward(e, feats, 4, emb, logits), 0);
      for (size_t i = 0; i < 4 * dm; i++) assert_true(isfinite(emb[i]));
      for (size_t i = 0; i < 4 * v; i++) assert_true(isfinite(logits[i]));
      if (wt == 0)
        printf("  %-32s d %d, %d layers, W %d, V %d: %" PRIu64
               " params, %" PRIu64 " flops/frame, weights %" PRIu64
               " B (f32) ",
               de->d_name, c->d_model, c->n_layers, c->window, c->vocab_size,
               aural_model_n_params(m), aural_model_flops_per_frame(m),
               aural_model_weight_bytes(m));
      else
        printf("%" PRIu64 " B (f16)\n", aural_model_weight_bytes(m));
      aural_encoder_destroy(e);
      free(logits);
      free(emb);
      free(feats);
      aural_model_free(m);
    }
    n_models++;
  }
  closedir(d);
  free(dir_copy);
  assert_true(n_models >= 8);
}

/* Load configs that ask for what cannot be: precision bf16 with f16
 * weights, a precision or a weight type this library does not know. */
static void test_precision_config_refused(void **state) {
  (void)state;
  synth_spec s;
  synth_spec_base(&s);
  s.n_layers = 1;
  size_t size;
  unsigned char *buf = synth_model(&s, &size);
  assert_non_null(buf);
  aural_model_load_config lc;
  aural_model *m = NULL;
  aural_err err = {0};
  aural_model_load_config_default(&lc);
  lc.precision = AURAL_PRECISION_BF16;
  lc.weights = AURAL_WEIGHTS_F16;
  assert_int_equal(aural_model_load_buffer(buf, size, "m", &lc, &m, &err),
                   AURAL_EINVAL);
  assert_contains(err.msg, "weights f16 does not go with it");
  aural_model_load_config_default(&lc);
  lc.precision = (aural_precision)7;
  assert_int_equal(aural_model_load_buffer(buf, size, "m", &lc, &m, &err),
                   AURAL_EINVAL);
  assert_contains(err.msg, "precision (7)");
  aural_model_load_config_default(&lc);
  lc.weights = (aural_weight_type)9;
  assert_int_equal(aural_model_load_buffer(buf, size, "m", &lc, &m, &err),
                   AURAL_EINVAL);
  /* The names of precisions, and what is not one. */
  aural_precision pr = AURAL_PRECISION_BF16;
  assert_int_equal(aural_model_precision_parse("f32", &pr), 0);
  assert_int_equal(pr, AURAL_PRECISION_F32);
  assert_int_equal(aural_model_precision_parse("f16", &pr), AURAL_EINVAL);
  assert_int_equal(aural_model_precision_parse(NULL, &pr), AURAL_EINVAL);
  assert_int_equal(aural_model_precision_parse("bf16", NULL), AURAL_EINVAL);
  assert_int_equal(pr, AURAL_PRECISION_F32);
  /* The load config is the caller's: checked before the file is read, so
   * that a broken or missing file does not hide its fault. */
  aural_model_load_config_default(&lc);
  lc.batch_rows = AURAL_ENCODER_MAX_BATCH_FRAMES + 1;
  assert_int_equal(aural_model_load_buffer(buf, 20, "m", &lc, &m, &err),
                   AURAL_EINVAL);
  assert_contains(err.msg, "load config: batch_rows");
  assert_int_equal(aural_model_load("/nonexistent/m.safetensors", &lc, &m,
                                    &err),
                   AURAL_EINVAL);
  assert_contains(err.msg, "load config: batch_rows");
  assert_null(m);
  aural_model_memory mm;
  assert_int_equal(aural_model_memory_need(&(aural_model_config){.d_model = 4,
                       .n_heads = 1, .n_layers = 1, .d_ff = 4, .window = 2,
                       .fbank = {.num_mel_bins = 4}},
                                           (aural_weight_type)9, 1, &mm),
                   AURAL_EINVAL);
  /* And precision bf16 alone loads, named so. */
  aural_model_load_config_default(&lc);
  lc.precision = AURAL_PRECISION_BF16;
  assert_int_equal(aural_model_load_buffer(buf, size, "m", &lc, &m, &err), 0);
  assert_string_equal(aural_model_precision_name(aural_model_precision(m)),
                      "bf16");
  aural_model_free(m);
  free(buf);
}

static aural_model *load_base(aural_weight_type wt) {
  synth_spec s;
  synth_spec_base(&s);
  size_t size;
  unsigned char *buf = synth_model(&s, &size);
  assert_non_null(buf);
  aural_model_load_config lc;
  aural_model_load_config_default(&lc);
  lc.weights = wt;
  aural_model *m;
  aural_err err = {0};
  if (aural_model_load_buffer(buf, size, "base", &lc, &m, &err) != 0)
    fail_msg("%s", err.msg);
  free(buf);
  return m;
}

/* synth_spec_base(): d 256, 4 heads, d_ff 1024, 6 layers, W 50, 80 mels,
 * final norm, no head, no CMVN. */
static void test_base_counts(void **state) {
  (void)state;
  aural_model *m = load_base(AURAL_WEIGHTS_F32);
  aural_model *h = load_base(AURAL_WEIGHTS_F16);

  /* Parameters: input projection 256*80 + 256 = 20736; per layer
   * in_proj 3*256*256 + 768 = 197376, out_proj 256*256 + 256 = 65792,
   * linear1 1024*256 + 1024 = 263168, linear2 256*1024 + 256 = 262400,
   * two norms 4*256 = 1024: 789760, times 6 = 4738560; final norm 512.
   * Total 20736 + 4738560 + 512 = 4759808. */
  const uint64_t params = 4759808;
  assert_int_equal(aural_model_n_params(m), params);
  assert_int_equal(aural_model_n_params(h), params);

  /* Flops, a multiply and an add apart (2 per weight of a product):
   * input projection 2*256*80 = 40960; per layer q, k, v 2*768*256 =
   * 393216, scores and weighted sum over 50 frames 2*2*50*256 = 51200,
   * output projection 2*256*256 = 131072, feed-forward 2*2*1024*256 =
   * 1048576: 1624064, times 6 = 9744384. Total 9785344. */
  assert_int_equal(aural_model_flops_per_frame(m), 9785344);
  assert_int_equal(aural_model_flops_per_frame(h), 9785344);

  /* Weight bytes: every dimension is a multiple of 16, so packing pads
   * only the one 16-element line between panels of 16 rows (internal.h):
   * 256 + 6 * (768 + 256 + 1024 + 256) = 14080 elements for the matrices'
   * 16 + 6 * 144 panels. f32: 4 * (4759808 + 14080) = 19095552. f16: the
   * matrices (4739072 values + 14080) at 2 bytes and the vectors (256 +
   * 6*3328 + 512 = 20736) at 4: 9589248. */
  const uint64_t vec = 256 + 6 * (768 + 256 + 1024 + 256 + 4 * 256) + 512;
  const uint64_t pad = 256 + 6 * (768 + 256 + 1024 + 256);
  assert_int_equal(vec, 20736);
  assert_int_equal(aural_model_weight_bytes(m), 4 * (params + pad));
  assert_int_equal(aural_model_weight_bytes(h),
                   2 * (params - vec + pad) + 4 * vec);
  assert_int_equal(aural_model_weight_bytes(h), 9589248);
  /* bf16: the matrices at 2 bytes with k in pairs, a panel being
   * (cols / 2 + 1) lines of 32: two lines of padding per panel. */
  aural_model *bf = load_base(AURAL_WEIGHTS_BF16);
  assert_int_equal(aural_model_precision(bf), AURAL_PRECISION_BF16);
  assert_int_equal(aural_model_weight_bytes(bf),
                   2 * (params - vec + 2 * pad) + 4 * vec);
  assert_int_equal(aural_model_n_params(bf), params);
  aural_model_free(bf);
  double ratio = (double)aural_model_weight_bytes(h) /
                 (double)aural_model_weight_bytes(m);
  printf("  base: %" PRIu64 " params, %" PRIu64 " flops/frame, weights %" PRIu64
         " B in f32, %" PRIu64 " B in f16 (%.3f)\n",
         aural_model_n_params(m), aural_model_flops_per_frame(m),
         aural_model_weight_bytes(m), aural_model_weight_bytes(h), ratio);
  assert_true(ratio > 0.49 && ratio < 0.51);
  aural_model_free(h);
  aural_model_free(m);
}

static void test_encoder_state_bytes(void **state) {
  (void)state;
  aural_model *m = load_base(AURAL_WEIGHTS_F32);
  aural_encoder_config ec;
  aural_encoder_config_default(&ec);
  size_t bytes = aural_encoder_state_bytes(m, &ec);
  assert_int_equal(aural_encoder_state_bytes(m, NULL), bytes);
  /* The KV rings alone: 6 layers * 50 frames * 256 * (k, v) * 4 bytes. */
  const size_t rings = 6 * 50 * 256 * 2 * 4;
  assert_true(bytes >= rings);

  /* What create allocates: within a little allocator overhead. */
  size_t before = test_allocated_bytes();
  aural_encoder *e;
  aural_err err = {0};
  assert_int_equal(aural_encoder_create(m, &ec, &e, &err), 0);
  size_t after = test_allocated_bytes();
  size_t got = after - before;

  /* Encoding allocates nothing, however long the stream. */
  enum { STEP = 37 };
  float *feats = malloc(STEP * BASE_MELS * sizeof *feats);
  float *emb = malloc(STEP * 256 * sizeof *emb);
  assert_non_null(feats);
  assert_non_null(emb);
  for (size_t i = 0; i < STEP * BASE_MELS; i++)
    feats[i] = (float)((i * 7919) % 1000) / 100.0f;
  size_t steady = test_allocated_bytes();
  for (int k = 0; k < 8; k++) /* 296 frames: the ring wraps 5 times */
    assert_int_equal(aural_encoder_forward(e, feats, STEP, emb, NULL), 0);
  size_t later = test_allocated_bytes();
  assert_int_equal(aural_encoder_next_frame(e), 8 * STEP);
  for (size_t i = 0; i < STEP * 256; i++) assert_true(isfinite(emb[i]));
  assert_int_equal(aural_encoder_state_bytes(m, &ec), bytes);

  /* A stream starting an hour in needs the same. */
  ec.first_frame = 360000;
  assert_int_equal(aural_encoder_state_bytes(m, &ec), bytes);
  /* A smaller batch needs less scratch, never fewer than the rings. */
  ec.max_batch_frames = 1;
  size_t bytes1 = aural_encoder_state_bytes(m, &ec);
  assert_true(bytes1 >= rings && bytes1 < bytes);
  /* A config create refuses, or no model: SIZE_MAX, as for a size that
   * overflows (it gave the bytes of an encoder that cannot be made, or
   * crashed). */
  ec.max_batch_frames = AURAL_ENCODER_MAX_BATCH_FRAMES + 1;
  assert_true(aural_encoder_state_bytes(m, &ec) == SIZE_MAX);
  assert_true(aural_encoder_state_bytes(NULL, NULL) == SIZE_MAX);
  ec.max_batch_frames = 1;

  printf("  base encoder: state_bytes %zu (KV rings %zu, batch-1 state %zu); "
         "create allocated %zu; %zd bytes more after %d frames\n",
         bytes, rings, bytes1, got, (ssize_t)(later - steady), 8 * STEP);
  assert_true(got >= bytes && got <= bytes + 4096);
  assert_int_equal(later, steady);
  free(emb);
  free(feats);
  aural_encoder_destroy(e);
  aural_model_free(m);
}

int main(void) {
  struct CMUnitTest tests[N_BAD_CASES + 32];
  size_t n = 0;
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_base_round_trips);
  for (size_t i = 0; i < N_BAD_CASES; i++)
    tests[n++] = (struct CMUnitTest){.name = bad_cases[i].name,
                                     .test_func = test_rejects,
                                     .initial_state = &bad_cases[i]};
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_bad_paths);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_fifo);
  tests[n++] =
      (struct CMUnitTest)cmocka_unit_test(test_file_truncated_while_loading);
  tests[n++] =
      (struct CMUnitTest)cmocka_unit_test(test_header_whitespace_padding);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_kv_ring_limit);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_memory_limit_d_ff);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_memory_limit_config);
  tests[n++] =
      (struct CMUnitTest)cmocka_unit_test(test_refused_before_data_read);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_header_limit_real);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_match_names_comparisons);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_many_header_entries);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_nonfinite_weights);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_committed_models_load);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_base_counts);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_precision_config_refused);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_encoder_state_bytes);
  assert(n <= sizeof tests / sizeof tests[0]);
  return _cmocka_run_group_tests("model", tests, n, group_setup,
                                 group_teardown);
}
