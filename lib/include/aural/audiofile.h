/*
 * aural/audiofile.h — reading audio files (anything libsndfile opens: WAV,
 * FLAC, Ogg/Vorbis, AIFF, ...) as interleaved float PCM.
 *
 *   aural_audiofile *af;
 *   aural_err err;
 *   if (aural_audiofile_open(path, &af, &err) < 0) { puts(err.msg); ... }
 *   aural_audiofile_info info;
 *   aural_audiofile_get_info(af, &info);
 *   float buf[4096 * 2];
 *   size_t n;
 *   while (aural_audiofile_read(af, buf, 4096 / info.n_channels, &n, &err)
 *          == 0 && n > 0) ...
 *   aural_audiofile_close(af);
 *
 * Files are untrusted: the rate, channel count and declared length are
 * checked at open, truncated data is an error rather than silence, and
 * NaN or infinite samples are rejected with their position. Integer
 * formats are normalised to ±1 (16-bit: divided by 32768).
 */
#ifndef AURAL_AUDIOFILE_H
#define AURAL_AUDIOFILE_H

#include <stddef.h>
#include <stdint.h>

#include "aural/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aural_audiofile aural_audiofile;

typedef struct aural_audiofile_info {
  double rate_hz;     /* within AURAL_RATE_MIN_HZ..AURAL_RATE_MAX_HZ */
  int n_channels;     /* 1..AURAL_MAX_CHANNELS */
  int64_t n_frames;   /* frames (samples per channel) the file holds,
                         or -1 when the format cannot tell (some Ogg
                         files; from a pipe, a header whose size marks
                         the length as unknown) */
  char format[96];    /* e.g. "WAV (Microsoft), Signed 16 bit PCM" */
} aural_audiofile_info;

/* Opens and validates path. Errors (with err naming path and problem):
 * -ENOENT and other -errno, AURAL_EEMPTY, AURAL_EFORMAT, AURAL_ETRUNCATED,
 * AURAL_ERATE, AURAL_ECHANNELS, AURAL_EINVAL (path or out NULL). A FIFO is read as it comes: the open
 * waits for its writer. Thread-safe for distinct files: the library's
 * opens of regular files and buffers are serialized, for libsndfile
 * reports a refused file process-wide (a FIFO's refusal, not serialized,
 * lacks libsndfile's reason). Not real-time-safe (allocates). */
int aural_audiofile_open(const char *path, aural_audiofile **out,
                         aural_err *err);

/* Opens and validates the size bytes at data, an audio file held in memory,
 * with the same checks as aural_audiofile_open; name stands for the input
 * in messages. data must stay valid and unchanged until close (it is read
 * in place, not copied). Errors as above, with AURAL_EINVAL for NULL data.
 * Thread-safe for distinct buffers; not real-time-safe (allocates). */
int aural_audiofile_open_memory(const void *data, size_t size,
                                const char *name, aural_audiofile **out,
                                aural_err *err);

void aural_audiofile_get_info(const aural_audiofile *af,
                              aural_audiofile_info *info);

/* Reads up to max_frames frames into buf (max_frames * n_channels floats);
 * *n_read is 0 at the end. Returns 0, AURAL_ENONFINITE (err gives the frame
 * and channel; the refused frames are consumed, and a further read goes on
 * after them), AURAL_EIO / AURAL_ETRUNCATED, or AURAL_EINVAL (n_read
 * NULL, or buf NULL with max_frames > 0). A 64-bit float sample
 * beyond float's range is finite, and read as the largest float of its
 * sign. */
int aural_audiofile_read(aural_audiofile *af, float *buf, size_t max_frames,
                         size_t *n_read, aural_err *err);

/* NULL-safe. */
void aural_audiofile_close(aural_audiofile *af);

#ifdef __cplusplus
}
#endif

#endif
