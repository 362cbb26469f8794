/* Writes a safetensors model file in memory with seeded random weights,
 * laid out as DESIGN.md §2 and the PyTorch exporter lay it out. */
#include "synth_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void synth_spec_base(synth_spec *s) {
  *s = (synth_spec){.d_model = 256, .n_heads = 4, .n_layers = 6,
                    .d_ff = 1024, .window = 50, .pos_encoding = "rope",
                    .activation = "gelu", .norm_first = 1, .final_norm = 1,
                    .seed = 1};
}

typedef struct tensor {
  char name[96];
  size_t rows, cols; /* cols 0: a vector */
  int kind;          /* 0 weight, 1 bias, 2 norm gain, 3 cmvn std */
} tensor;

static size_t add(tensor *t, size_t n, const char *name, size_t rows,
                  size_t cols, int kind) {
  snprintf(t[n].name, sizeof t[n].name, "%s", name);
  t[n].rows = rows;
  t[n].cols = cols;
  t[n].kind = kind;
  return n + 1;
}

static uint16_t to_half(float f) {
  /* Round to nearest even through the exponent bits; the values here are
   * small and normal, which is all this needs. */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int e = (int)((x >> 23) & 0xff) - 127 + 15;
  if (e <= 0) return (uint16_t)sign;
  uint32_t man = x & 0x7fffff, h = ((uint32_t)e << 10) | (man >> 13);
  uint32_t rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

uint64_t synth_model_tensor_bytes(const synth_spec *s) {
  /* As synth_model lays them out; every dimension is an int, so the
   * products fit in 64 bits. */
  uint64_t d = (uint64_t)s->d_model, ff = (uint64_t)s->d_ff, mels = 80;
  uint64_t v = (uint64_t)s->vocab_size;
  uint64_t layer = 4 * d * d + 2 * d * ff + 3 * d + d + ff + d + 4 * d;
  uint64_t n = d * mels + d + (uint64_t)s->n_layers * layer +
               (s->final_norm ? 2 * d : 0) + (v > 0 ? v * d + v : 0) +
               (s->cmvn ? 2 * mels : 0);
  return n * (s->f16 ? 2 : 4);
}

unsigned char *synth_model(const synth_spec *s, size_t *size) {
  size_t d = (size_t)s->d_model, ff = (size_t)s->d_ff, mels = 80;
  size_t cap = 16 + 12 * (size_t)s->n_layers;
  tensor *t = calloc(cap, sizeof *t);
  if (t == NULL) return NULL;
  size_t n = 0;
  char nm[96];
  n = add(t, n, "input_proj.weight", d, mels, 0);
  n = add(t, n, "input_proj.bias", d, 0, 1);
  for (int i = 0; i < s->n_layers; i++) {
#define L(x) (snprintf(nm, sizeof nm, "encoder.layers.%d.%s", i, x), nm)
    n = add(t, n, L("self_attn.in_proj_weight"), 3 * d, d, 0);
    n = add(t, n, L("self_attn.in_proj_bias"), 3 * d, 0, 1);
    n = add(t, n, L("self_attn.out_proj.weight"), d, d, 0);
    n = add(t, n, L("self_attn.out_proj.bias"), d, 0, 1);
    n = add(t, n, L("linear1.weight"), ff, d, 0);
    n = add(t, n, L("linear1.bias"), ff, 0, 1);
    n = add(t, n, L("linear2.weight"), d, ff, 0);
    n = add(t, n, L("linear2.bias"), d, 0, 1);
    n = add(t, n, L("norm1.weight"), d, 0, 2);
    n = add(t, n, L("norm1.bias"), d, 0, 1);
    n = add(t, n, L("norm2.weight"), d, 0, 2);
    n = add(t, n, L("norm2.bias"), d, 0, 1);
#undef L
  }
  if (s->final_norm) {
    n = add(t, n, "encoder.norm.weight", d, 0, 2);
    n = add(t, n, "encoder.norm.bias", d, 0, 1);
  }
  if (s->vocab_size > 0) {
    n = add(t, n, "head.weight", (size_t)s->vocab_size, d, 0);
    n = add(t, n, "head.bias", (size_t)s->vocab_size, 0, 1);
  }
  if (s->cmvn) {
    n = add(t, n, "frontend.cmvn.mean", mels, 0, 1);
    n = add(t, n, "frontend.cmvn.std", mels, 0, 3);
  }

  /* Header: metadata, then each tensor's entry with contiguous offsets. */
  size_t esize = s->f16 ? 2 : 4, hcap = 4096 + n * 160 +
                                         (size_t)s->vocab_size * 16;
  char *hdr = malloc(hcap);
  if (hdr == NULL) {
    free(t);
    return NULL;
  }
  size_t h = 0, off = 0;
  h += (size_t)snprintf(
      hdr + h, hcap - h,
      "{\"__metadata__\":{\"format\":\"aural\",\"aural.version\":\"1\","
      "\"aural.config\":\"{\\\"d_model\\\":%d,\\\"n_heads\\\":%d,"
      "\\\"n_layers\\\":%d,\\\"d_ff\\\":%d,\\\"window\\\":%d,"
      "\\\"pos_encoding\\\":\\\"%s\\\",\\\"activation\\\":\\\"%s\\\","
      "\\\"norm_first\\\":%s,\\\"final_norm\\\":%s,"
      "\\\"layer_norm_eps\\\":1e-5",
      s->d_model, s->n_heads, s->n_layers, s->d_ff, s->window,
      s->pos_encoding, s->activation, s->norm_first ? "true" : "false",
      s->final_norm ? "true" : "false");
  if (s->lead_in_frames != 0)
    h += (size_t)snprintf(hdr + h, hcap - h, ",\\\"lead_in_frames\\\":%d",
                          s->lead_in_frames);
  if (s->vocab_size > 0) {
    h += (size_t)snprintf(hdr + h, hcap - h, ",\\\"vocab\\\":[");
    for (int v = 0; v < s->vocab_size; v++)
      h += (size_t)snprintf(hdr + h, hcap - h, "%s\\\"t%d\\\"", v ? "," : "",
                            v);
    h += (size_t)snprintf(hdr + h, hcap - h, "]");
  }
  h += (size_t)snprintf(hdr + h, hcap - h, "}\"}");
  for (size_t i = 0; i < n; i++) {
    size_t count = t[i].rows * (t[i].cols ? t[i].cols : 1);
    if (t[i].cols)
      h += (size_t)snprintf(hdr + h, hcap - h,
                            ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu,%zu],"
                            "\"data_offsets\":[%zu,%zu]}",
                            t[i].name, s->f16 ? "F16" : "F32", t[i].rows,
                            t[i].cols, off, off + count * esize);
    else
      h += (size_t)snprintf(hdr + h, hcap - h,
                            ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%zu],"
                            "\"data_offsets\":[%zu,%zu]}",
                            t[i].name, s->f16 ? "F16" : "F32", t[i].rows, off,
                            off + count * esize);
    off += count * esize;
  }
  h += (size_t)snprintf(hdr + h, hcap - h, "}");
  while (h % 8 != 0) hdr[h++] = ' ';

  *size = 8 + h + off;
  unsigned char *buf = malloc(*size);
  if (buf == NULL) {
    free(hdr);
    free(t);
    return NULL;
  }
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
  memcpy(buf + 8, hdr, h);
  unsigned char *p = buf + 8 + h;
  uint32_t r = s->seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    size_t count = t[i].rows * (t[i].cols ? t[i].cols : 1);
    double scale = t[i].cols ? 1.0 / sqrt((double)t[i].cols) : 0.1;
    for (size_t j = 0; j < count; j++) {
      r ^= r << 13;
      r ^= r >> 17;
      r ^= r << 5;
      double u = (double)r / 4294967296.0 * 2.0 - 1.0;
      float v = (float)(u * scale);
      if (t[i].kind == 2) v += 1.0f;
      if (t[i].kind == 3) v = 1.0f + (float)fabs(u);
      if (s->f16) {
        uint16_t hv = to_half(v);
        memcpy(p, &hv, 2);
      } else {
        memcpy(p, &v, 4);
      }
      p += esize;
    }
  }
  free(hdr);
  free(t);
  return buf;
}
