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
 * data chunk (SSND in AIFF) claims more than the file holds. Returns 1 and
 * the two sizes when that happened. */
static int declared_too_long(SNDFILE *sf, long long *declared,
                             long long *present) {
  char log[4096];
  sf_command(sf, SFC_GET_LOG_INFO, log, sizeof log);
  for (char *line = strtok(log, "\n"); line != NULL;
       line = strtok(NULL, "\n")) {
    char tag[8];
    if (sscanf(line, " %7s : %lld (should be %lld)", tag, declared,
               present) == 3 &&
        (strcmp(tag, "data") == 0 || strcmp(tag, "SSND") == 0) &&
        *present < *declared)
      return 1;
  }
  return 0;
}

/* Streaming writers put 0 or 0xFFFFFFFF in a data size they cannot know;
 * such files are not truncated, just of unknown length. */
static int is_unknown_length(long long declared) {
  return declared == 0 || declared == 0xFFFFFFFFLL || declared == 0x7FFFFFFFLL;
}

int aural_audiofile_open(const char *path, aural_audiofile **out,
                         aural_err *err) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return aural__err_set(err, -errno, "%s: %s", path, strerror(errno));
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st) != 0)
    rc = aural__err_set(err, -errno, "%s: %s", path, strerror(errno));
  else if (S_ISDIR(st.st_mode))
    rc = aural__err_set(err, -EISDIR, "%s: is a directory, not an audio file",
                        path);
  else if (S_ISREG(st.st_mode) && st.st_size == 0)
    rc = aural__err_set(err, AURAL_EEMPTY, "%s: file is empty (0 bytes)",
                        path);
  if (rc < 0) {
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
           !is_unknown_length(declared))
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
  af->info.n_frames = sfi.frames;
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
  if ((int64_t)max_frames > left) max_frames = (size_t)left;
  if (max_frames == 0) return 0;
  sf_count_t got = sf_readf_float(af->sf, buf, (sf_count_t)max_frames);
  if (got <= 0) {
    int e = sf_error(af->sf);
    if (e != SF_ERR_NO_ERROR)
      return aural__err_set(err, AURAL_EIO, "%s: read error at frame %" PRId64
                            ": %s", af->path, af->n_done, sf_strerror(af->sf));
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
