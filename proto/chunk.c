/*
 * The CHUNK payload (PROTOCOL.md §5) and the IEEE half conversions its f16
 * sections use.
 */
#include <string.h>

#include "aural/proto.h"
#include "internal.h"

/* Bytes of one section of rows x cols values of elem_bytes each, or
 * UINT64_MAX when it alone exceeds 32 bits. */
static uint64_t section_bytes(uint32_t rows, uint32_t cols, uint32_t elem_bytes) {
  uint64_t n = (uint64_t)rows * cols; /* < 2^64: no overflow */
  if (n > UINT32_MAX) return UINT64_MAX;
  return n * elem_bytes;
}

size_t aural_chunk_payload_bytes(const aural_chunk_header *c) {
  if (c->dtype > AURAL_DTYPE_F16 || (c->outputs & ~AURAL_OUT_ALL) != 0)
    return 0;
  uint32_t elem = c->dtype == AURAL_DTYPE_F16 ? 2 : 4;
  /* Each term is below 2^34, so the sum cannot wrap. */
  uint64_t total = AURAL_PROTO_CHUNK_HEADER_BYTES;
  if (c->outputs & AURAL_OUT_EMBEDDINGS) {
    uint64_t s = section_bytes(c->n_frames, c->d_model, elem);
    if (s == UINT64_MAX) return 0;
    total += s;
  }
  if (c->outputs & AURAL_OUT_LOGITS) {
    uint64_t s = section_bytes(c->n_frames, c->vocab_size, elem);
    if (s == UINT64_MAX) return 0;
    total += s;
  }
  if (c->outputs & AURAL_OUT_TEXT) total += c->text_bytes;
  if (total > UINT32_MAX) return 0;
  return (size_t)total;
}

void aural_chunk_put_header(uint8_t out[AURAL_PROTO_CHUNK_HEADER_BYTES],
                            const aural_chunk_header *c) {
  aural_put_u64(out + 0, c->seq);
  aural_put_u64(out + 8, c->first_frame);
  aural_put_u32(out + 16, c->n_frames);
  aural_put_u32(out + 20, c->flags);
  aural_put_u64(out + 24, (uint64_t)c->start_us);
  aural_put_u64(out + 32, (uint64_t)c->capture_us);
  aural_put_u64(out + 40, (uint64_t)c->ready_us);
  aural_put_u64(out + 48, (uint64_t)c->emitted_us);
  aural_put_u32(out + 56, c->d_model);
  aural_put_u32(out + 60, c->vocab_size);
  aural_put_u16(out + 64, c->outputs);
  out[66] = c->dtype;
  out[67] = 0;
  aural_put_u32(out + 68, c->text_bytes);
}

/* Two's complement reading of a wire u64, without implementation-defined
 * conversion. */
static int64_t to_i64(uint64_t v) {
  if (v <= (uint64_t)INT64_MAX) return (int64_t)v;
  return -(int64_t)(~v) - 1;
}

int aural_chunk_decode(const uint8_t *payload, size_t n,
                       aural_chunk_header *c, const uint8_t **emb,
                       const uint8_t **logits, const char **text) {
  if (emb != NULL) *emb = NULL;
  if (logits != NULL) *logits = NULL;
  if (text != NULL) *text = NULL;
  memset(c, 0, sizeof *c);
  if (payload == NULL || n < AURAL_PROTO_CHUNK_HEADER_BYTES)
    return AURAL_PROTO_EBAD_PAYLOAD;
  const uint8_t *p = payload;
  c->seq = aural_get_u64(p + 0);
  c->first_frame = aural_get_u64(p + 8);
  c->n_frames = aural_get_u32(p + 16);
  c->flags = aural_get_u32(p + 20);
  c->start_us = to_i64(aural_get_u64(p + 24));
  c->capture_us = to_i64(aural_get_u64(p + 32));
  c->ready_us = to_i64(aural_get_u64(p + 40));
  c->emitted_us = to_i64(aural_get_u64(p + 48));
  c->d_model = aural_get_u32(p + 56);
  c->vocab_size = aural_get_u32(p + 60);
  c->outputs = aural_get_u16(p + 64);
  c->dtype = p[66];
  c->text_bytes = aural_get_u32(p + 68);
  /* Only a FINAL chunk may be empty: it marks the end of a stream whose
   * frames filled whole chunks. */
  if ((c->n_frames == 0 && !(c->flags & AURAL_CHUNK_FINAL)) || p[67] != 0 || c->dtype > AURAL_DTYPE_F16 ||
      (c->outputs & ~AURAL_OUT_ALL) != 0 ||
      (c->text_bytes != 0 && !(c->outputs & AURAL_OUT_TEXT)))
    return AURAL_PROTO_EBAD_PAYLOAD;
  size_t total = aural_chunk_payload_bytes(c);
  if (total == 0 || total != n) return AURAL_PROTO_EBAD_PAYLOAD;

  size_t elem = c->dtype == AURAL_DTYPE_F16 ? 2 : 4, at = 72;
  const uint8_t *emb_at = NULL, *logits_at = NULL;
  const char *text_at = NULL;
  if (c->outputs & AURAL_OUT_EMBEDDINGS) {
    emb_at = p + at;
    at += (size_t)c->n_frames * c->d_model * elem;
  }
  if (c->outputs & AURAL_OUT_LOGITS) {
    logits_at = p + at;
    at += (size_t)c->n_frames * c->vocab_size * elem;
  }
  if (c->outputs & AURAL_OUT_TEXT) {
    text_at = (const char *)p + at;
    if (!aural__utf8_valid(p + at, c->text_bytes))
      return AURAL_PROTO_EBAD_PAYLOAD;
  }
  if (emb != NULL) *emb = emb_at;
  if (logits != NULL) *logits = logits_at;
  if (text != NULL) *text = text_at;
  return 0;
}

/* --- IEEE half ------------------------------------------------------------ */

/*
 * Rounds to nearest, ties to even, on the bits: the dropped bits are
 * compared with half a unit in the last kept place. A carry out of the
 * mantissa moves into the exponent, which is how 65520 becomes infinity and
 * the largest subnormal rounds up to the smallest normal.
 */
uint16_t aural_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint16_t sign = (uint16_t)(x >> 16 & 0x8000u);
  uint32_t exp = x >> 23 & 0xFFu, mant = x & 0x7FFFFFu;
  if (exp == 0xFF) {
    if (mant == 0) return sign | 0x7C00u;
    /* A quiet NaN that keeps the top payload bits. */
    return (uint16_t)(sign | 0x7E00u | mant >> 13);
  }
  int e = (int)exp - 127;
  if (e > 15) return sign | 0x7C00u;
  uint32_t m, shift;
  uint16_t h;
  if (e >= -14) {
    /* Normal half: keep 10 of the 23 mantissa bits. */
    m = mant;
    shift = 13;
    h = (uint16_t)((uint32_t)(e + 15) << 10 | m >> shift);
  } else {
    /* Subnormal half, in units of 2^-24: the value is m * 2^(e - 23)
     * with the implicit bit, so shift by -e - 1 (14..24). */
    if (e < -25) return sign;
    m = mant | 0x800000u;
    shift = (uint32_t)(-e - 1);
    h = (uint16_t)(m >> shift);
  }
  uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) h++;
  return sign | h;
}

float aural_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = h >> 10 & 0x1Fu, mant = h & 0x3FFu, x;
  if (exp == 0x1F) {
    x = sign | 0x7F800000u | mant << 13;
  } else if (exp != 0) {
    x = sign | (exp + 112) << 23 | mant << 13;
  } else if (mant == 0) {
    x = sign;
  } else {
    /* Subnormal: shift the leading 1 up to the implicit bit. */
    uint32_t e = 113;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      e--;
    }
    x = sign | e << 23 | (mant & 0x3FFu) << 13;
  }
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}
