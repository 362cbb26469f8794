/*
 * libFuzzer target for the audio file path: the bytes are a whole audio
 * file (WAV, FLAC, Ogg, AIFF, anything libsndfile opens), untrusted. They
 * are opened from memory (aural_audiofile_open_memory: the same checks as
 * a file on disk, then libsndfile through virtual I/O), read to the end,
 * and pushed into a frontend made for the file's rate and channel count,
 * which is then finished. Build and run with tools/fuzz.sh.
 *
 * Beyond "no crash, no leak, no undefined behaviour", the target aborts
 * (a libFuzzer crash) when a contract breaks:
 *  - a failed open returns a documented code, leaves *out NULL, fills
 *    err.code and names the input in the message;
 *  - an opened file has a rate and channel count the frontend accepts
 *    (creating the frontend must succeed), and a read fails only with a
 *    documented code and a message naming the input;
 *  - reads never return more frames than asked for, nor more than the
 *    declared length, and a file read to its end without error delivered
 *    exactly its declared length;
 *  - samples are finite (non-finite ones are read errors), pushes succeed,
 *    and every feature is finite.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <aural.h>

/* Work per input is capped so that executions stay fast: compressed
 * formats (FLAC, Ogg, ADPCM) can declare hours of audio in a few bytes,
 * and at up to 768 kHz one second is 768000 frames through the resampler.
 * Files declaring more than MAX_SECONDS, or more than MAX_CHANNELS
 * channels, are opened and closed but not read; files of unknown length
 * are read up to MAX_FRAMES. The caps concern the fuzzer's speed only:
 * the library accepts far longer files and up to AURAL_MAX_CHANNELS. */
#define MAX_SECONDS 10.0
#define MAX_CHANNELS 8
#define MAX_FRAMES ((int64_t)480000) /* 10 s at 48 kHz */
#define BLOCK_FRAMES 1024

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(int rc, const aural_err *err, const char *what) {
  if (err->code != rc) {
    fprintf(stderr, "%s: returned %d but err.code is %d\n", what, rc,
            err->code);
    abort();
  }
  if (rc != AURAL_ENOMEM && strncmp(err->msg, "fuzz.wav: ", 10) != 0) {
    fprintf(stderr, "%s: message does not name the input: %s\n", what,
            err->msg);
    abort();
  }
}

static void check_open_failure(int rc, const aural_audiofile *af,
                               const aural_err *err) {
  if (af != NULL) abort();
  check_err(rc, err, "open");
  if (rc != AURAL_EEMPTY && rc != AURAL_EFORMAT && rc != AURAL_ETRUNCATED &&
      rc != AURAL_ERATE && rc != AURAL_ECHANNELS && rc != AURAL_ENOMEM) {
    fprintf(stderr, "open: undocumented code %s: %s\n", aural_err_name(rc),
            err->msg);
    abort();
  }
}

/* Every feature frame must be finite, whatever the samples were. */
static int on_frames(void *user, const float *frames, size_t n_frames,
                     uint64_t first_frame) {
  size_t dim = *(const size_t *)user;
  for (size_t i = 0; i < n_frames * dim; i++)
    if (!isfinite(frames[i])) {
      fprintf(stderr, "feature frame %llu, bin %zu is %g\n",
              (unsigned long long)(first_frame + i / dim), i % dim,
              (double)frames[i]);
      abort();
    }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A non-NULL sentinel: a failed open must set it to NULL. */
  aural_audiofile *af = (aural_audiofile *)&af;
  aural_err err = {0};
  int rc = aural_audiofile_open_memory(data, size, "fuzz.wav", &af, &err);
  if (rc != 0) {
    check_open_failure(rc, af, &err);
    return 0;
  }
  if (af == NULL) abort();
  aural_audiofile_info info;
  aural_audiofile_get_info(af, &info);
  if (!(info.rate_hz >= AURAL_RATE_MIN_HZ && info.rate_hz <= AURAL_RATE_MAX_HZ)
      || info.n_channels < 1 || info.n_channels > AURAL_MAX_CHANNELS ||
      info.n_frames < -1 || memchr(info.format, 0, sizeof info.format) == NULL)
    abort();
  if (info.n_channels > MAX_CHANNELS ||
      (double)info.n_frames > MAX_SECONDS * info.rate_hz) {
    aural_audiofile_close(af);
    return 0;
  }

  aural_frontend_config cfg;
  aural_frontend_config_default(&cfg);
  cfg.input_rate_hz = info.rate_hz;
  cfg.n_channels = info.n_channels;
  aural_frontend *fe;
  if (aural_frontend_create(&cfg, &fe, &err) != 0) {
    fprintf(stderr, "frontend refused an opened file: %s\n", err.msg);
    abort();
  }
  size_t dim = (size_t)aural_frontend_dim(fe);
  float *pcm = malloc(BLOCK_FRAMES * MAX_CHANNELS * sizeof *pcm);
  if (pcm == NULL) abort();

  int64_t n_total = 0;
  for (;;) {
    size_t n = 0;
    memset(&err, 0, sizeof err);
    rc = aural_audiofile_read(af, pcm, BLOCK_FRAMES, &n, &err);
    if (rc != 0) {
      check_err(rc, &err, "read");
      if (n != 0 || (rc != AURAL_ENONFINITE && rc != AURAL_EIO &&
                     rc != AURAL_ETRUNCATED)) {
        fprintf(stderr, "read: %s with %zu frames: %s\n", aural_err_name(rc),
                n, err.msg);
        abort();
      }
      break;
    }
    if (n == 0) {
      /* A clean end delivers the declared length, no less. */
      if (info.n_frames >= 0 && n_total != info.n_frames) {
        fprintf(stderr, "clean end after %lld of %lld frames\n",
                (long long)n_total, (long long)info.n_frames);
        abort();
      }
      break;
    }
    if (n > BLOCK_FRAMES) abort();
    n_total += (int64_t)n;
    if (info.n_frames >= 0 && n_total > info.n_frames) {
      fprintf(stderr, "read %lld frames of %lld declared\n",
              (long long)n_total, (long long)info.n_frames);
      abort();
    }
    for (size_t i = 0; i < n * (size_t)info.n_channels; i++)
      if (!isfinite(pcm[i])) abort();
    if (aural_frontend_push(fe, pcm, n, on_frames, &dim) != 0) abort();
    if (n_total >= MAX_FRAMES) break;
  }
  if (aural_frontend_finish(fe, on_frames, &dim) != 0) abort();
  aural_frontend_stats st;
  aural_frontend_get_stats(fe, &st);
  if (st.n_input_frames != (uint64_t)n_total) abort();

  free(pcm);
  aural_frontend_destroy(fe);
  aural_audiofile_close(af);
  return 0;
}
