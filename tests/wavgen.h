/* Hand-made audio files for the bad-input tests: every header field as
 * given, however absurd. */
#ifndef AURAL_TESTS_WAVGEN_H
#define AURAL_TESTS_WAVGEN_H

#include <stddef.h>
#include <stdint.h>

#define WAV_HEADER_BYTES 44
enum { WAV_PCM = 1, WAV_FLOAT = 3 };

void put_le(uint8_t *p, uint64_t v, int n_bytes);
void put_be(uint8_t *p, uint32_t v);

/* The 44 bytes of a canonical RIFF/WAVE header: a 16-byte fmt chunk with
 * the given fields, then a data chunk header declaring data_bytes. */
void wav_header(uint8_t h[WAV_HEADER_BYTES], uint16_t format_tag,
                uint16_t n_channels, uint32_t rate_hz, uint16_t bits,
                uint32_t data_bytes);

/* A WAV file: that header, then the payload_len bytes present. */
void make_wav(const char *path, uint16_t format_tag, uint16_t n_channels,
              uint32_t rate_hz, uint16_t bits, uint32_t data_bytes,
              const void *payload, size_t payload_len);

/* n_frames of a little-endian 16-bit mono ramp, value(i) = (i % 1000) * 30
 * - 15000. */
void fill_pcm16(uint8_t *payload, size_t n_frames);

/* A 16-bit mono 16 kHz WAV of n_frames ramp samples, declaring
 * data_bytes. */
void make_pcm16_wav(const char *path, size_t n_frames, uint32_t data_bytes);

/* A 16-bit mono 16 kHz WAV whose data chunk, behind n_chunks small
 * unknown chunks, declares twice the n_frames of ramp samples present: a
 * cut-off recording that libsndfile's log no longer reveals. */
void make_truncated_wav_after_chunks(const char *path, size_t n_chunks,
                                     size_t n_frames);

/* A Sun .au file (16-bit PCM) header declaring rate and channels, then
 * payload_len zero bytes: the one common format whose channel count can
 * exceed 65535. */
void make_au(const char *path, uint32_t rate_hz, uint32_t n_channels,
             size_t payload_len);

/* A Sony Wave64 file, 16-bit mono 16 kHz, of n_frames ramp samples, its
 * riff size (the whole file's) and data size declaring data_bytes of
 * audio. */
void make_w64(const char *path, size_t n_frames, uint64_t data_bytes);

/* An RF64 file (a WAV whose sizes are in its ds64 chunk), 16-bit mono
 * 16 kHz, of n_frames ramp samples, ds64 declaring data_bytes of audio
 * and a riff size to match. */
void make_rf64(const char *path, size_t n_frames, uint64_t data_bytes);

/* A Creative Voice File (one sound data block of type 9, 16-bit mono
 * 16 kHz, then the terminator) of n_frames ramp samples, the block
 * declaring data_bytes of audio. */
void make_voc(const char *path, size_t n_frames, uint32_t data_bytes);

/* A NIST SPHERE file (1024-byte text header, 16-bit little-endian mono
 * 16 kHz) of n_frames ramp samples, its sample_count declaring
 * declared_frames. */
void make_nist(const char *path, size_t n_frames, size_t declared_frames);

#endif
