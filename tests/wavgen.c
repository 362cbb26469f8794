#include "wavgen.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helpers.h"

void put_le(uint8_t *p, uint64_t v, int n_bytes) {
  for (int i = 0; i < n_bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void put_be(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}

void wav_header(uint8_t h[WAV_HEADER_BYTES], uint16_t format_tag,
                uint16_t n_channels, uint32_t rate_hz, uint16_t bits,
                uint32_t data_bytes) {
  uint32_t block_bytes = (uint32_t)n_channels * bits / 8;
  memcpy(h, "RIFF", 4);
  put_le(h + 4, data_bytes > 0xFFFFFFFFu - 36 ? 0xFFFFFFFFu : 36 + data_bytes,
         4);
  memcpy(h + 8, "WAVEfmt ", 8);
  put_le(h + 16, 16, 4);
  put_le(h + 20, format_tag, 2);
  put_le(h + 22, n_channels, 2);
  put_le(h + 24, rate_hz, 4);
  put_le(h + 28, (uint64_t)rate_hz * block_bytes, 4);
  put_le(h + 32, block_bytes, 2);
  put_le(h + 34, bits, 2);
  memcpy(h + 36, "data", 4);
  put_le(h + 40, data_bytes, 4);
}

void make_wav(const char *path, uint16_t format_tag, uint16_t n_channels,
              uint32_t rate_hz, uint16_t bits, uint32_t data_bytes,
              const void *payload, size_t payload_len) {
  uint8_t *b = malloc(WAV_HEADER_BYTES + payload_len);
  assert_non_null(b);
  wav_header(b, format_tag, n_channels, rate_hz, bits, data_bytes);
  if (payload_len > 0) memcpy(b + WAV_HEADER_BYTES, payload, payload_len);
  test_write_file(path, b, WAV_HEADER_BYTES + payload_len);
  free(b);
}

void fill_pcm16(uint8_t *payload, size_t n_frames) {
  for (size_t i = 0; i < n_frames; i++)
    put_le(payload + 2 * i, (uint16_t)(int16_t)((int)(i % 1000) * 30 - 15000),
           2);
}

void make_pcm16_wav(const char *path, size_t n_frames, uint32_t data_bytes) {
  uint8_t *payload = malloc(2 * n_frames + 1);
  assert_non_null(payload);
  fill_pcm16(payload, n_frames);
  make_wav(path, WAV_PCM, 1, 16000, 16, data_bytes, payload, 2 * n_frames);
  free(payload);
}

void make_truncated_wav_after_chunks(const char *path, size_t n_chunks,
                                     size_t n_frames) {
  size_t len = 36 + n_chunks * 10 + 8 + 2 * n_frames;
  uint8_t *b = calloc(1, len);
  assert_non_null(b);
  wav_header(b, WAV_PCM, 1, 16000, 16, 0); /* its first 36 bytes */
  put_le(b + 4, len - 8 + 2 * n_frames, 4); /* RIFF size, also too long */
  uint8_t *p = b + 36;
  for (size_t i = 0; i < n_chunks; i++, p += 10) {
    memcpy(p, "abcd", 4);
    put_le(p + 4, 2, 4);
  }
  memcpy(p, "data", 4);
  put_le(p + 4, 4 * n_frames, 4); /* twice what follows */
  fill_pcm16(p + 8, n_frames);
  test_write_file(path, b, len);
  free(b);
}

void make_au(const char *path, uint32_t rate_hz, uint32_t n_channels,
             size_t payload_len) {
  uint8_t *b = calloc(1, 24 + payload_len);
  assert_non_null(b);
  memcpy(b, ".snd", 4);
  put_be(b + 4, 24);                    /* data offset */
  put_be(b + 8, (uint32_t)payload_len); /* data size */
  put_be(b + 12, 3);                    /* 16-bit linear PCM */
  put_be(b + 16, rate_hz);
  put_be(b + 20, n_channels);
  test_write_file(path, b, 24 + payload_len);
  free(b);
}

/* Wave64 chunks are named by GUIDs: "riff" and then "wave", "fmt ",
 * "data", which share a tail. */
static const uint8_t w64_riff[16] = {'r',  'i',  'f',  'f',  0x2e, 0x91,
                                     0xcf, 0x11, 0xa5, 0xd6, 0x28, 0xdb,
                                     0x04, 0xc1, 0x00, 0x00};
static const uint8_t w64_tail[12] = {0xf3, 0xac, 0xd3, 0x11, 0x8c, 0xd1,
                                     0x00, 0xc0, 0x4f, 0x8e, 0xdb, 0x8a};

static void w64_guid(uint8_t *p, const char name[4]) {
  memcpy(p, name, 4);
  memcpy(p + 4, w64_tail, sizeof w64_tail);
}

void make_w64(const char *path, size_t n_frames, uint64_t data_bytes) {
  size_t len = 104 + 2 * n_frames;
  uint8_t *b = calloc(1, len);
  assert_non_null(b);
  memcpy(b, w64_riff, 16);
  put_le(b + 16, 104 + data_bytes, 8);
  w64_guid(b + 24, "wave");
  w64_guid(b + 40, "fmt ");
  put_le(b + 56, 24 + 16, 8);
  put_le(b + 64, WAV_PCM, 2);
  put_le(b + 66, 1, 2);      /* channels */
  put_le(b + 68, 16000, 4);  /* rate */
  put_le(b + 72, 32000, 4);  /* bytes per second */
  put_le(b + 76, 2, 2);      /* block align */
  put_le(b + 78, 16, 2);     /* bits */
  w64_guid(b + 80, "data");
  put_le(b + 96, 24 + data_bytes, 8);
  fill_pcm16(b + 104, n_frames);
  test_write_file(path, b, len);
  free(b);
}

void make_voc(const char *path, size_t n_frames, uint32_t data_bytes) {
  size_t len = 26 + 16 + 2 * n_frames + 1;
  uint8_t *b = calloc(1, len);
  assert_non_null(b);
  memcpy(b, "Creative Voice File\x1a", 20);
  put_le(b + 20, 26, 2);                    /* header size */
  put_le(b + 22, 0x010a, 2);                /* version */
  put_le(b + 24, ~0x010au + 0x1234, 2);     /* its check value */
  b[26] = 9;                                /* sound data, new format */
  put_le(b + 27, 12 + data_bytes, 3);       /* block size */
  put_le(b + 30, 16000, 4);
  b[34] = 16;                               /* bits */
  b[35] = 1;                                /* channels */
  put_le(b + 36, 4, 2);                     /* 16-bit signed PCM */
  fill_pcm16(b + 42, n_frames);
  b[len - 1] = 0;                           /* terminator */
  test_write_file(path, b, len);
  free(b);
}

void make_nist(const char *path, size_t n_frames, size_t declared_frames) {
  size_t len = 1024 + 2 * n_frames;
  uint8_t *b = malloc(len);
  assert_non_null(b);
  memset(b, ' ', 1024);
  int n = snprintf((char *)b, 1024,
                   "NIST_1A\n   1024\n"
                   "sample_count -i %zu\n"
                   "channel_count -i 1\n"
                   "sample_rate -i 16000\n"
                   "sample_n_bytes -i 2\n"
                   "sample_byte_format -s2 01\n"
                   "sample_coding -s3 pcm\n"
                   "end_head\n",
                   declared_frames);
  assert_true(n > 0 && n < 1024);
  b[n] = ' '; /* snprintf's NUL */
  fill_pcm16(b + 1024, n_frames);
  test_write_file(path, b, len);
  free(b);
}

void make_rf64(const char *path, size_t n_frames, uint64_t data_bytes) {
  size_t len = 80 + 2 * n_frames;
  uint8_t *b = calloc(1, len);
  assert_non_null(b);
  memcpy(b, "RF64", 4);
  put_le(b + 4, 0xffffffffu, 4);
  memcpy(b + 8, "WAVEds64", 8);
  put_le(b + 16, 28, 4);
  put_le(b + 20, 72 + data_bytes, 8); /* riff size */
  put_le(b + 28, data_bytes, 8);
  put_le(b + 36, data_bytes / 2, 8);  /* frames */
  put_le(b + 44, 0, 4);               /* table length */
  memcpy(b + 48, "fmt ", 4);
  put_le(b + 52, 16, 4);
  put_le(b + 56, WAV_PCM, 2);
  put_le(b + 58, 1, 2);
  put_le(b + 60, 16000, 4);
  put_le(b + 64, 32000, 4);
  put_le(b + 68, 2, 2);
  put_le(b + 70, 16, 2);
  memcpy(b + 72, "data", 4);
  put_le(b + 76, 0xffffffffu, 4);
  fill_pcm16(b + 80, n_frames);
  test_write_file(path, b, len);
  free(b);
}
