/*
 * Audio files through libsndfile, with the checks libsndfile leaves to its
 * caller: directories and empty files, rates and channel counts outside
 * what the frontend accepts, data chunks that claim more bytes than the file
 * has (libsndfile quietly shortens them; a cut-off recording should not
 * pass as complete), reads that end early, and non-finite float samples.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aural/audiofile.h"
#include "aural/frontend.h"
#include "aural/resampler.h"
#include "internal.h"

struct aural_audiofile {
  SNDFILE *sf;
  aural_audiofile_info info;
  int64_t n_done; /* frames read so far */
  char path[256]; /* for messages; shortened if needed */
};

/* libsndfile writes "data : 53928 (should be 26942)" in its log when the
 * data chunk (SSND in AIFF) claims more than the file holds. Its log is
 * bounded, so this is a second line of defence behind check_wav(). */
static int declared_too_long(SNDFILE *sf, long long *declared,
                             long long *present) {
  char log[4096];
  sf_command(sf, SFC_GET_LOG_INFO, log, sizeof log);
  char *save = NULL;
  for (char *line = strtok_r(log, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    char tag[8];
    if (sscanf(line, " %7s : %lld (should be %lld)", tag, declared,
               present) == 3 &&
        (strcmp(tag, "data") == 0 || strcmp(tag, "SSND") == 0) &&
        *present < *declared)
      return 1;
  }
  return 0;
}

/* Streaming writers put 0xFFFFFFFF (or 0x7FFFFFFF) in a data size they
 * cannot know; such files are not truncated, just of unknown length. */
static int is_unknown_length(long long declared) {
  return declared == 0xFFFFFFFFLL || declared == 0x7FFFFFFFLL;
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

/* Walks the chunks of a RIFF/WAVE file up to its data chunk and checks
 * what libsndfile either rejects with an unhelpful message or quietly
 * accepts: a zero sample rate or channel count, a data chunk that claims
 * more bytes than the file holds (cut-off recordings), and a data size of
 * 0 with samples after it (libsndfile would read nothing). Other formats,
 * and WAVs whose chunks cannot be walked, are left to libsndfile. */
static int check_wav(int fd, off_t file_size, const char *path,
                     aural_err *err) {
  unsigned char h[24];
  if (pread(fd, h, 12, 0) != 12 || memcmp(h, "RIFF", 4) != 0 ||
      memcmp(h + 8, "WAVE", 4) != 0)
    return 0;
  off_t at = 12;
  for (int n_chunks = 0; n_chunks < 100000; n_chunks++) {
    if (pread(fd, h, 8, at) != 8) return 0;
    uint32_t size = le32(h + 4);
    off_t body = at + 8;
    if (memcmp(h, "fmt ", 4) == 0 && size >= 16) {
      if (pread(fd, h + 8, 16, body) != 16) return 0;
      unsigned channels = (unsigned)h[10] | (unsigned)h[11] << 8;
      uint32_t rate = le32(h + 12);
      if (rate == 0)
        return aural__err_set(err, AURAL_ERATE,
                              "%s: sample rate 0 Hz is outside the supported "
                              "%.0f..%.0f Hz",
                              path, AURAL_RATE_MIN_HZ, AURAL_RATE_MAX_HZ);
      if (channels == 0)
        return aural__err_set(err, AURAL_ECHANNELS,
                              "%s: 0 channels is outside the supported 1..%d",
                              path, AURAL_MAX_CHANNELS);
    } else if (memcmp(h, "data", 4) == 0) {
      long long present = (long long)(file_size - body);
      if (is_unknown_length(size)) return 0;
      if (size == 0 && present > 0)
        return aural__err_set(err, AURAL_EFORMAT,
                              "%s: the data chunk declares 0 bytes but %lld "
                              "follow (a recording that was never "
                              "finalised? 'sox --ignore-length' repairs it)",
                              path, present);
      if ((long long)size > present)
        return aural__err_set(err, AURAL_ETRUNCATED,
                              "%s: truncated: the header declares %u bytes "
                              "of audio data but the file holds only %lld",
                              path, size, present < 0 ? 0 : present);
      return 0;
    }
    at = body + (off_t)size + (size & 1);
    if (at >= file_size) return 0;
  }
  return 0;
}

int aural_audiofile_open(const char *path, aural_audiofile **out,
                         aural_err *err) {
  *out = NULL;
  struct stat st;
  int rc, fd = aural__open_input(path, 0, 0, "an audio file", &st, err);
  if (fd < 0) return fd;

  if (S_ISREG(st.st_mode) &&
      (rc = check_wav(fd, st.st_size, path, err)) < 0) {
    close(fd);
    return rc;
  }

  SF_INFO sfi;
  memset(&sfi, 0, sizeof sfi);
  SNDFILE *sf = sf_open_fd(fd, SFM_READ, &sfi, 1); /* closes fd on failure */
  if (sf == NULL)
    return aural__err_set(err, AURAL_EFORMAT,
                          "%s: not a readable audio file (libsndfile: %s)",
                          path, sf_strerror(NULL));
  long long declared, present;
  if (sfi.samplerate < AURAL_RATE_MIN_HZ || sfi.samplerate > AURAL_RATE_MAX_HZ)
    rc = aural__err_set(err, AURAL_ERATE,
                        "%s: sample rate %d Hz is outside the supported "
                        "%.0f..%.0f Hz",
                        path, sfi.samplerate, AURAL_RATE_MIN_HZ,
                        AURAL_RATE_MAX_HZ);
  else if (sfi.channels < 1 || sfi.channels > AURAL_MAX_CHANNELS)
    rc = aural__err_set(err, AURAL_ECHANNELS,
                        "%s: %d channels is outside the supported 1..%d",
                        path, sfi.channels, AURAL_MAX_CHANNELS);
  else if (sfi.frames < 0)
    rc = aural__err_set(err, AURAL_EFORMAT,
                        "%s: the file declares a negative length", path);
  else if (declared_too_long(sf, &declared, &present) &&
           !is_unknown_length(declared) && declared != 0)
    rc = aural__err_set(err, AURAL_ETRUNCATED,
                        "%s: truncated: the header declares %lld bytes of "
                        "audio data but the file holds only %lld",
                        path, declared, present);
  if (rc < 0) {
    sf_close(sf);
    return rc;
  }

  aural_audiofile *af = calloc(1, sizeof *af);
  if (af == NULL) {
    sf_close(sf);
    return aural__err_set(err, AURAL_ENOMEM, "%s: out of memory", path);
  }
  af->sf = sf;
  af->info.rate_hz = sfi.samplerate;
  af->info.n_channels = sfi.channels;
  /* Formats whose length libsndfile cannot tell (some Ogg files) report
   * the largest count; they are read to their end instead. */
  af->info.n_frames = sfi.frames == SF_COUNT_MAX ? -1 : sfi.frames;
  snprintf(af->path, sizeof af->path, "%s", path);

  SF_FORMAT_INFO major = {.format = sfi.format & SF_FORMAT_TYPEMASK};
  SF_FORMAT_INFO sub = {.format = sfi.format & SF_FORMAT_SUBMASK};
  sf_command(NULL, SFC_GET_FORMAT_INFO, &major, sizeof major);
  sf_command(NULL, SFC_GET_FORMAT_INFO, &sub, sizeof sub);
  snprintf(af->info.format, sizeof af->info.format, "%s, %s",
           major.name ? major.name : "unknown", sub.name ? sub.name : "unknown");
  *out = af;
  return 0;
}

void aural_audiofile_get_info(const aural_audiofile *af,
                              aural_audiofile_info *info) {
  *info = af->info;
}

int aural_audiofile_read(aural_audiofile *af, float *buf, size_t max_frames,
                         size_t *n_read, aural_err *err) {
  *n_read = 0;
  int64_t left = af->info.n_frames - af->n_done;
  if (af->info.n_frames >= 0 && (int64_t)max_frames > left)
    max_frames = (size_t)left;
  if (max_frames == 0) return 0;
  sf_count_t got = sf_readf_float(af->sf, buf, (sf_count_t)max_frames);
  if (got <= 0) {
    int e = sf_error(af->sf);
    if (e != SF_ERR_NO_ERROR)
      return aural__err_set(err, AURAL_EIO, "%s: read error at frame %" PRId64
                            ": %s", af->path, af->n_done, sf_strerror(af->sf));
    if (af->info.n_frames < 0) return 0; /* the end of a stream */
    return aural__err_set(err, AURAL_ETRUNCATED,
                          "%s: truncated: audio ends at frame %" PRId64
                          " of the %" PRId64 " declared",
                          af->path, af->n_done, af->info.n_frames);
  }
  size_t n_ch = (size_t)af->info.n_channels;
  for (size_t i = 0; i < (size_t)got * n_ch; i++) {
    if (!isfinite(buf[i]))
      return aural__err_set(err, AURAL_ENONFINITE,
                            "%s: sample %s at frame %" PRId64 ", channel %zu "
                            "(%.3f s): non-finite samples are rejected",
                            af->path, isnan(buf[i]) ? "NaN" : "infinite",
                            af->n_done + (int64_t)(i / n_ch), i % n_ch,
                            (double)(af->n_done + (int64_t)(i / n_ch)) /
                                af->info.rate_hz);
  }
  af->n_done += got;
  *n_read = (size_t)got;
  return 0;
}

void aural_audiofile_close(aural_audiofile *af) {
  if (af == NULL) return;
  sf_close(af->sf);
  free(af);
}
