/*
 * libFuzzer target for the model loader: the bytes are a whole
 * safetensors file, untrusted (DESIGN.md §2). A file that loads must also
 * give a working encoder: one is created and run for 3 frames of zeros.
 * Build and run with tools/fuzz.sh.
 *
 * Beyond "no crash, no leak, no undefined behaviour", the target checks the
 * loader's contract and aborts (a libFuzzer crash) when it breaks: a
 * failure returns a documented negative code, leaves *out NULL, fills
 * err.code with the code, and names the file in the message; a file that
 * loads with f32 weights loads with f16 ones too, unless a weight is
 * beyond half precision's range (refused with AURAL_EFORMAT saying so) or
 * memory runs out.
 *
 * A custom mutator keeps most mutants past the first check: it mutates the
 * JSON header alone and rewrites the 8-byte length to match, or writes
 * special floats (NaN, infinities, zero, huge, subnormal) into the tensor
 * data; one mutation in eight is libFuzzer's own over the whole file, so
 * the length field is fuzzed too.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <aural.h>

/* Encoders whose state would exceed this are not created, so that each
 * run stays fast: the loader bounds the key/value ring at 1 GB per stream,
 * and a few such inputs would make the fuzzer crawl (and, before that
 * bound existed, stop at libFuzzer's 2 GB malloc limit: see
 * regressions/model/). */
#ifndef MAX_STATE_BYTES
#define MAX_STATE_BYTES ((size_t)256 << 20)
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
                               unsigned int seed);

static uint64_t get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
                               unsigned int seed) {
  if (seed % 8 == 0 || size < 8 || get_le64(data) > size - 8)
    return LLVMFuzzerMutate(data, size, max_size);
  uint64_t hlen = get_le64(data);
  size_t data_len = size - 8 - (size_t)hlen;
  if (max_size - 8 - data_len == 0)
    return LLVMFuzzerMutate(data, size, max_size);
  if (seed % 8 == 1 && data_len >= 4) {
    /* A special value over an aligned float or half in the data. */
    static const uint32_t f32[] = {0x7fc00000u, 0x7f800000u, 0xff800000u,
                                   0x00000000u, 0x7f7fffffu, 0x00000001u};
    static const uint16_t f16[] = {0x7e00, 0x7c00, 0xfc00, 0x0000, 0x7bff,
                                   0x0001};
    unsigned int r = seed / 8;
    uint8_t *at = data + 8 + hlen + (r / 12) % (data_len / 2) * 2;
    if ((r / 6) % 2 == 0 && at + 4 <= data + size)
      memcpy(at, &f32[r % 6], 4);
    else
      memcpy(at, &f16[r % 6], 2);
    return size;
  }
  /* The header alone, its length kept right. */
  uint8_t *tail = malloc(data_len + 1);
  if (tail == NULL) return size;
  memcpy(tail, data + 8 + hlen, data_len);
  size_t new_hlen =
      LLVMFuzzerMutate(data + 8, (size_t)hlen, max_size - 8 - data_len);
  memcpy(data + 8 + new_hlen, tail, data_len);
  free(tail);
  put_le64(data, new_hlen);
  return 8 + new_hlen + data_len;
}

static void check_failure(int rc, const aural_model *m, const aural_err *err) {
  if (m != NULL || err->code != rc) abort();
  if (rc != AURAL_EEMPTY && rc != AURAL_ETRUNCATED && rc != AURAL_EFORMAT &&
      rc != AURAL_ECONFIG && rc != AURAL_ENOMEM) {
    fprintf(stderr, "undocumented code %d: %s\n", rc, err->msg);
    abort();
  }
  if (rc != AURAL_ENOMEM && strncmp(err->msg, "fuzz: ", 6) != 0) {
    fprintf(stderr, "message does not name the file: %s\n", err->msg);
    abort();
  }
}

/* Runs 3 frames of zeros through a fresh encoder over m. */
static void run_encoder(const aural_model *m) {
  const aural_model_config *c = aural_model_get_config(m);
  aural_encoder_config ec;
  aural_encoder_config_default(&ec);
  if (aural_encoder_state_bytes(m, &ec) > MAX_STATE_BYTES) return;
  aural_encoder *e;
  aural_err err;
  if (aural_encoder_create(m, &ec, &e, &err) != 0) abort();
  size_t mels = (size_t)c->fbank.num_mel_bins, d = (size_t)c->d_model,
         v = (size_t)c->vocab_size;
  float *feats = calloc(3 * mels, sizeof *feats);
  float *emb = malloc(3 * d * sizeof *emb);
  float *logits = v ? malloc(3 * v * sizeof *logits) : NULL;
  if (feats == NULL || emb == NULL || (v && logits == NULL)) abort();
  if (aural_encoder_forward(e, feats, 3, emb, logits) != 0) abort();
  if (aural_encoder_next_frame(e) != 3) abort();
  free(logits);
  free(emb);
  free(feats);
  aural_encoder_destroy(e);
}

/* Reads everything the model exposes. */
static void inspect(const aural_model *m) {
  const aural_model_config *c = aural_model_get_config(m);
  volatile uint64_t sink = aural_model_n_params(m) +
                           aural_model_weight_bytes(m) +
                           aural_model_flops_per_frame(m);
  for (int i = 0; i < c->vocab_size; i++)
    if (aural_model_token(m, i) == NULL) abort();
  if (aural_model_token(m, c->vocab_size) != NULL) abort();
  const float *mean = aural_model_cmvn_mean(m), *std = aural_model_cmvn_std(m);
  if ((mean != NULL) != c->has_cmvn || (std != NULL) != c->has_cmvn) abort();
  for (int i = 0; std != NULL && i < c->fbank.num_mel_bins; i++)
    if (!(std[i] > 0)) abort();
  (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  aural_model_load_config lc;
  aural_model_load_config_default(&lc);
  for (int wt = 0; wt < 2; wt++) {
    lc.weights = wt ? AURAL_WEIGHTS_F16 : AURAL_WEIGHTS_F32;
    aural_model *m = (aural_model *)&lc; /* must come back NULL on failure */
    aural_err err = {0};
    int rc = aural_model_load_buffer(data, size, "fuzz", &lc, &m, &err);
    if (rc != 0) {
      check_failure(rc, m, &err);
      /* The F32 load of the same bytes succeeded: the F16 one may fail
       * only for memory, or for a weight beyond half precision's range
       * (the loader refuses it rather than hold it as infinite). */
      if (wt == 1 && rc != AURAL_ENOMEM &&
          !(rc == AURAL_EFORMAT &&
            strstr(err.msg, "beyond the range of f16") != NULL))
        abort();
      return 0;
    }
    if (m == NULL) abort();
    inspect(m);
    run_encoder(m);
    aural_model_free(m);
  }
  return 0;
}
