/*
 * aural_audiofile against hostile and good files.
 *
 * The hostile files are written byte by byte into a fresh temporary
 * directory, so each test states exactly what its file holds. Every bad
 * file must fail with the expected code and a message that names the file
 * and the problem; no bad file may open and read as if it were fine.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <aural.h>

#include "helpers.h"
#include "wavgen.h"


#define PATH_BYTES 4096

/* Opens path and reads it to the end, chunk_frames at a time. Returns 0 or
 * the first error (with err filled). On success *info describes the file
 * and *samples (malloc'ed, interleaved) holds the *n_frames frames read. */
static int read_all(const char *path, size_t chunk_frames,
                    aural_audiofile_info *info, float **samples,
                    size_t *n_frames, aural_err *err) {
  /* A non-NULL sentinel: a failed open must set it to NULL. */
  aural_audiofile *af = (aural_audiofile *)&af;
  *samples = NULL;
  *n_frames = 0;
  int rc = aural_audiofile_open(path, &af, err);
  if (rc < 0) {
    assert_null(af);
    return rc;
  }
  assert_non_null(af);
  aural_audiofile_get_info(af, info);
  size_t n_ch = (size_t)info->n_channels;
  size_t cap = chunk_frames;
  float *all = malloc(cap * n_ch * sizeof *all);
  assert_non_null(all);
  for (;;) {
    if (*n_frames + chunk_frames > cap) {
      cap = 2 * (*n_frames + chunk_frames);
      float *p = realloc(all, cap * n_ch * sizeof *all);
      assert_non_null(p);
      all = p;
    }
    size_t n = 0;
    rc = aural_audiofile_read(af, all + *n_frames * n_ch, chunk_frames, &n,
                              err);
    if (rc < 0 || n == 0) break;
    assert_true(n <= chunk_frames);
    *n_frames += n;
  }
  aural_audiofile_close(af);
  if (rc < 0) {
    free(all);
    *n_frames = 0;
    return rc;
  }
  *samples = all;
  return 0;
}

/* Asserts that path fails to open or to read with code, or with alt_code
 * where two codes are acceptable (0: no alternative), and that the message
 * names path and mentions keyword (see assert_contains). Prints the
 * message, so a run shows what a user would see, and returns it (in a
 * static buffer) for further checks. */
static const char *assert_rejected(const char *path, int code, int alt_code,
                                   const char *keyword) {
  static aural_err err;
  memset(&err, 0, sizeof err);
  aural_audiofile_info info;
  float *samples = NULL;
  size_t n_frames = 0;
  int rc = read_all(path, 1024, &info, &samples, &n_frames, &err);
  free(samples);
  if (rc == 0)
    fail_msg("%s: accepted (%zu frames); expected %s", path, n_frames,
             aural_err_name(code));
  print_message("    %s -> %s\n", aural_err_name(rc), err.msg);
  if (rc != code && !(alt_code != 0 && rc == alt_code))
    fail_msg("%s: got %s, expected %s%s%s (%s)", path, aural_err_name(rc),
             aural_err_name(code), alt_code != 0 ? " or " : "",
             alt_code != 0 ? aural_err_name(alt_code) : "", err.msg);
  assert_int_equal(err.code, rc);
  assert_contains(err.msg, path);
  assert_contains(err.msg, keyword);
  return err.msg;
}

static int setup(void **state) {
  *state = test_tmpdir();
  return 0;
}

static int teardown(void **state) {
  test_rmtree(*state);
  free(*state);
  return 0;
}

/* dir/name into path. */
static void path_in(char *path, void **state, const char *name) {
  snprintf(path, PATH_BYTES, "%s/%s", (const char *)*state, name);
}

/* ---- Files that are not audio at all. ---- */

static void test_missing_file(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "no-such-file.wav");
  assert_rejected(path, -ENOENT, 0, "no such file");
}

static void test_directory(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "folder.wav");
  assert_int_equal(mkdir(path, 0700), 0);
  assert_rejected(path, -EISDIR, 0, "directory");
}

static void test_empty_file(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "empty.wav");
  test_write_file(path, "", 0);
  assert_rejected(path, AURAL_EEMPTY, 0, "empty");
}

static void test_text_renamed_wav(void **state) {
  static const char text[] = "This is a shopping list, not a recording.\n"
                             "- eggs\n- milk\n";
  char path[PATH_BYTES];
  path_in(path, state, "list.wav");
  test_write_file(path, text, sizeof text - 1);
  assert_rejected(path, AURAL_EFORMAT, 0, "not a readable audio file");
}

/* ---- Truncated WAV files. ---- */

static void test_cut_inside_header(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "cut30.wav");
  make_pcm16_wav(path, 1000, 2000);
  assert_int_equal(truncate(path, 30), 0); /* inside the fmt chunk */
  assert_rejected(path, AURAL_ETRUNCATED, AURAL_EFORMAT,
                  "truncated|'data' chunk");
}

static void test_header_without_data(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "header-only.wav");
  make_pcm16_wav(path, 1000, 2000);
  assert_int_equal(truncate(path, WAV_HEADER_BYTES), 0);
  assert_rejected(path, AURAL_ETRUNCATED, 0, "truncated");
}

/* The data chunk claims 4000 bytes but 2000 follow: a cut-off recording,
 * which must not pass as a complete, shorter one. */
static void test_truncated_data(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "trunc.wav");
  make_pcm16_wav(path, 1000, 4000);
  assert_rejected(path, AURAL_ETRUNCATED, 0, "truncated");
}

/* The same cut-off data chunk, behind 100 small chunks of an unknown kind
 * (legal: readers skip chunks they do not know). Where the data chunk sits
 * must not matter. */
static void test_truncated_data_after_many_chunks(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "trunc-chunks.wav");
  make_truncated_wav_after_chunks(path, 100, 1000);
  assert_rejected(path, AURAL_ETRUNCATED, 0, "truncated");
}

/* Cut-off AU, Wave64, RF64 and VOC files, whose headers declare their
 * sizes as WAV's does: libsndfile logs each in its own words ("Data Size
 * : X (should be Y)", "riff : X (should be Y)", "Riff size : X (should be
 * Y)", "Seems to be a truncated file.") and reads them as complete,
 * shorter recordings. The same files uncut read to their end. */
static void test_truncated_other_formats(void **state) {
  char path[PATH_BYTES];
  aural_audiofile_info info;
  float *samples;
  size_t n;
  aural_err err = {0};

  path_in(path, state, "cut.au");
  make_au(path, 16000, 1, 4000);
  assert_int_equal(read_all(path, 256, &info, &samples, &n, &err), 0);
  assert_int_equal(n, 2000);
  free(samples);
  assert_int_equal(truncate(path, 24 + 1000), 0);
  assert_rejected(path, AURAL_ETRUNCATED, 0,
                  "declares 4000 bytes of audio data but the file holds "
                  "only 1000");

  path_in(path, state, "cut.w64");
  make_w64(path, 1000, 2000);
  assert_int_equal(read_all(path, 256, &info, &samples, &n, &err), 0);
  assert_int_equal(n, 1000);
  free(samples);
  make_w64(path, 1000, 4000);
  assert_rejected(path, AURAL_ETRUNCATED, 0, "truncated");

  path_in(path, state, "cut.rf64");
  make_rf64(path, 1000, 2000);
  assert_int_equal(read_all(path, 256, &info, &samples, &n, &err), 0);
  assert_int_equal(n, 1000);
  free(samples);
  make_rf64(path, 1000, 4000);
  assert_rejected(path, AURAL_ETRUNCATED, 0,
                  "declares 4072 bytes in all but the file holds only 2072");

  path_in(path, state, "cut.voc");
  make_voc(path, 1000, 2000);
  assert_int_equal(read_all(path, 256, &info, &samples, &n, &err), 0);
  assert_int_equal(n, 1000);
  free(samples);
  make_voc(path, 1000, 4000);
  assert_rejected(path, AURAL_ETRUNCATED, 0, "truncated");
}

/* A cut-off NIST SPHERE file (TIMIT's format): libsndfile logs nothing and
 * reads what is there; its sample_count says how much should be. */
static void test_truncated_nist_sphere(void **state) {
  char path[PATH_BYTES];
  aural_audiofile_info info;
  float *samples;
  size_t n;
  aural_err err = {0};
  path_in(path, state, "cut.sph");
  make_nist(path, 1000, 1000);
  assert_int_equal(read_all(path, 256, &info, &samples, &n, &err), 0);
  assert_int_equal(n, 1000);
  assert_int_equal(info.n_frames, 1000);
  free(samples);
  make_nist(path, 1000, 2000);
  assert_rejected(path, AURAL_ETRUNCATED, 0,
                  "declares 2000 samples (sample_count) but the file holds "
                  "only 1000");
}

/* ---- Non-finite float samples. ---- */

/* A float WAV (32 or 64 bits) of n_frames x n_channels small ramp values,
 * with value bad at (bad_frame, bad_channel). */
static void make_float_wav(const char *path, uint16_t bits,
                           uint16_t n_channels, size_t n_frames,
                           size_t bad_frame, size_t bad_channel, double bad) {
  size_t n = n_frames * n_channels, width = bits / 8;
  uint8_t *payload = malloc(n * width);
  assert_non_null(payload);
  for (size_t i = 0; i < n; i++) {
    double v = (double)(i % 200) / 400.0 - 0.25;
    if (i == bad_frame * n_channels + bad_channel) v = bad;
    uint64_t u;
    if (bits == 64) {
      memcpy(&u, &v, 8);
    } else {
      float vf = (float)v;
      uint32_t u32;
      memcpy(&u32, &vf, 4);
      u = u32;
    }
    put_le(payload + i * width, u, (int)width);
  }
  make_wav(path, WAV_FLOAT, n_channels, 16000, bits,
           (uint32_t)(n * width), payload, n * width);
  free(payload);
}

/* The NaN sits in the fifth 256-frame read, so the reported frame must
 * count the frames of earlier reads. */
static void test_nan_names_frame_and_channel(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "nan.wav");
  make_float_wav(path, 32, 2, 2000, 1234, 1, (double)NAN);

  aural_audiofile_info info;
  float *samples;
  size_t n_frames;
  aural_err err = {0};
  int rc = read_all(path, 256, &info, &samples, &n_frames, &err);
  print_message("    %s -> %s\n", aural_err_name(rc), err.msg);
  assert_int_equal(rc, AURAL_ENONFINITE);
  assert_null(samples);
  assert_contains(err.msg, path);
  assert_contains(err.msg, "NaN");
  assert_contains(err.msg, "frame 1234");
  assert_contains(err.msg, "channel 1");
  assert_contains(err.msg, "non-finite samples are rejected");
}

/* A count beyond what the file holds reads what it holds, however large
 * (SIZE_MAX once reached libsndfile as a negative length). */
static void test_read_huge_count(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "huge_count.wav");
  make_float_wav(path, 32, 2, 2000, 0, 0, 0.0); /* all finite */
  aural_audiofile *af;
  aural_err err = {0};
  assert_int_equal(aural_audiofile_open(path, &af, &err), 0);
  float *buf = malloc(2000 * 2 * sizeof *buf);
  size_t n;
  if (aural_audiofile_read(af, buf, SIZE_MAX, &n, &err) != 0)
    fail_msg("%s", err.msg);
  assert_int_equal(n, 2000);
  assert_int_equal(aural_audiofile_read(af, buf, SIZE_MAX, &n, &err), 0);
  assert_int_equal(n, 0);
  free(buf);
  aural_audiofile_close(af);
}

/* The refused block is consumed: reading on gives the frames after it and
 * a clean end, not a file "truncated" where the block was. */
static void test_read_goes_on_after_nan(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "nan_then_more.wav");
  make_float_wav(path, 32, 2, 2000, 1234, 1, (double)NAN);
  aural_audiofile *af;
  aural_err err = {0};
  assert_int_equal(aural_audiofile_open(path, &af, &err), 0);
  float buf[256 * 2];
  size_t n, total = 0;
  int rc;
  while ((rc = aural_audiofile_read(af, buf, 256, &n, &err)) == 0 && n > 0)
    total += n;
  assert_int_equal(rc, AURAL_ENONFINITE);
  assert_int_equal(total, 1024); /* frames 1024..1279 hold the NaN */
  while ((rc = aural_audiofile_read(af, buf, 256, &n, &err)) == 0 && n > 0)
    total += n;
  if (rc != 0) fail_msg("after the NaN: %s", err.msg);
  assert_int_equal(total, 2000 - 256);
  aural_audiofile_close(af);
}

static void test_positive_infinity(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "inf.wav");
  make_float_wav(path, 32, 1, 1000, 10, 0, (double)INFINITY);
  const char *msg = assert_rejected(path, AURAL_ENONFINITE, 0, "infinite|inf ");
  assert_contains(msg, "frame 10,");
  assert_contains(msg, "non-finite samples are rejected");
}

static void test_negative_infinity_float64(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "neginf64.wav");
  make_float_wav(path, 64, 1, 1000, 0, 0, -(double)INFINITY);
  const char *msg = assert_rejected(path, AURAL_ENONFINITE, 0, "infinite|inf ");
  assert_contains(msg, "frame 0,");
}

/* A 64-bit float sample beyond float's range is finite: libsndfile's
 * conversion made it infinite, and the file was refused with "sample
 * infinite" where a 32-bit file's 1e30 is read (and clamped by the
 * frontend). It is read as the largest float of its sign, in every
 * channel and read size. */
static void test_huge_float64_is_finite(void **state) {
  const double values[] = {1e300, -1e300, DBL_MAX};
  for (size_t k = 0; k < sizeof values / sizeof values[0]; k++) {
    char path[PATH_BYTES];
    path_in(path, state, "huge64.wav");
    make_float_wav(path, 64, 3, 3000, 1234, 2, values[k]);
    aural_audiofile_info info;
    float *samples;
    size_t n_frames;
    aural_err err = {0};
    int rc = read_all(path, 256, &info, &samples, &n_frames, &err);
    if (rc != 0) fail_msg("%g: %s", values[k], err.msg);
    assert_int_equal(n_frames, 3000);
    for (size_t i = 0; i < 3000 * 3; i++) {
      float want = i == 1234 * 3 + 2
                       ? (values[k] < 0 ? -FLT_MAX : FLT_MAX)
                       : (float)((double)(i % 200) / 400.0 - 0.25);
      assert_true(samples[i] == want);
    }
    free(samples);
  }
}

/* ---- Absurd headers. ---- */

static void test_rate_zero(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "rate0.wav");
  uint8_t payload[2000] = {0};
  make_wav(path, WAV_PCM, 1, 0, 16, sizeof payload, payload, sizeof payload);
  /* libsndfile refuses such a header itself; either way the user must
   * learn that the sample rate is the problem. */
  assert_rejected(path, AURAL_ERATE, AURAL_EFORMAT, "0 Hz|sample rate");
}

static void test_rate_one(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "rate1.wav");
  uint8_t payload[2000] = {0};
  make_wav(path, WAV_PCM, 1, 1, 16, sizeof payload, payload, sizeof payload);
  assert_rejected(path, AURAL_ERATE, 0, " 1 Hz");
}

static void test_rate_ten_million(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "rate10M.wav");
  uint8_t payload[2000] = {0};
  make_wav(path, WAV_PCM, 1, 10000000, 16, sizeof payload, payload,
           sizeof payload);
  assert_rejected(path, AURAL_ERATE, 0, "10000000 Hz");
}

static void test_zero_channels(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "ch0.wav");
  uint8_t payload[2000] = {0};
  make_wav(path, WAV_PCM, 0, 16000, 16, sizeof payload, payload,
           sizeof payload);
  /* libsndfile refuses this header itself (AURAL_EFORMAT). */
  assert_rejected(path, AURAL_ECHANNELS, AURAL_EFORMAT, "channel");
}

static void test_thousand_channels(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "ch1000.wav");
  uint8_t payload[4000] = {0};
  make_wav(path, WAV_PCM, 1000, 16000, 16, sizeof payload, payload,
           sizeof payload);
  assert_rejected(path, AURAL_ECHANNELS, 0, "1000 channels");
}

static void test_hundred_thousand_channels(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "ch100k.au");
  make_au(path, 16000, 100000, 4000);
  /* libsndfile refuses this header itself (AURAL_EFORMAT). */
  assert_rejected(path, AURAL_ECHANNELS, AURAL_EFORMAT, "channel");
}

/* ---- Unusual but valid files. ---- */

/* Streaming writers that cannot seek back leave 0xFFFFFFFF (or 0x7FFFFFFF)
 * in the data size: the length is unknown, not wrong. libsndfile then takes
 * the data to run to the end of the file; so must we, without error. */
static void test_unknown_data_size(void **state) {
  static const uint32_t sizes[] = {0xFFFFFFFFu, 0x7FFFFFFFu};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    char path[PATH_BYTES];
    path_in(path, state, "stream.wav");
    make_pcm16_wav(path, 1000, sizes[k]);

    aural_audiofile_info info;
    float *samples;
    size_t n_frames;
    aural_err err = {0};
    int rc = read_all(path, 300, &info, &samples, &n_frames, &err);
    if (rc < 0) fail_msg("data size 0x%08x: %s", sizes[k], err.msg);
    assert_int_equal(info.n_frames, 1000);
    assert_int_equal(n_frames, 1000);
    for (size_t i = 0; i < n_frames; i++)
      assert_true(samples[i] == (float)((int)i * 30 - 15000) / 32768.0f);
    free(samples);
  }
}

/* SoX, writing a WAV where it cannot seek back (a pipe), declares the
 * largest whole number of frames below 0x7FFFF000 bytes: 2147479552 for
 * 16-bit mono, 2147479551 for 24-bit mono. That is its "unknown length",
 * as 0xFFFFFFFF is others': the file is read to its end, not refused as
 * cut off. */
static void test_sox_unknown_data_size(void **state) {
  static const struct {
    uint16_t bits;
    uint32_t size;
  } cases[] = {{16, 2147479552u}, {24, 2147479551u}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char path[PATH_BYTES];
    path_in(path, state, "sox.wav");
    size_t bytes = 1000 * (size_t)(cases[k].bits / 8);
    uint8_t *payload = calloc(1, bytes);
    assert_non_null(payload);
    make_wav(path, WAV_PCM, 1, 16000, cases[k].bits, cases[k].size, payload,
             bytes);
    free(payload);
    aural_audiofile_info info;
    float *samples;
    size_t n_frames;
    aural_err err = {0};
    int rc = read_all(path, 300, &info, &samples, &n_frames, &err);
    if (rc < 0) fail_msg("%u-bit, data size %u: %s", cases[k].bits,
                         cases[k].size, err.msg);
    assert_int_equal(n_frames, 1000);
    free(samples);
  }
}

/* A data size of 0 followed by samples is the other thing streaming
 * writers leave behind. Reading it as an empty file would drop the audio
 * without a word: it must read the samples or say why not. */
static void test_zero_data_size_with_samples(void **state) {
  char path[PATH_BYTES];
  path_in(path, state, "zero-size.wav");
  make_pcm16_wav(path, 1000, 0);

  aural_audiofile_info info;
  float *samples;
  size_t n_frames;
  aural_err err = {0};
  int rc = read_all(path, 1024, &info, &samples, &n_frames, &err);
  free(samples);
  if (rc < 0) {
    print_message("    %s -> %s\n", aural_err_name(rc), err.msg);
    assert_contains(err.msg, path);
  } else if (n_frames != 1000) {
    fail_msg("%s: 2000 bytes of samples follow the header, but it read as "
             "%zu frames without an error",
             path, n_frames);
  }
}

/* 16-bit PCM is divided by 32768, so -32768 maps to exactly -1. */
static void test_pcm16_scaling(void **state) {
  static const int16_t in[] = {-32768, -16384, -1, 0, 1, 16384, 32767};
  enum { N = sizeof in / sizeof in[0] };
  uint8_t payload[2 * N];
  for (size_t i = 0; i < N; i++) put_le(payload + 2 * i, (uint16_t)in[i], 2);
  char path[PATH_BYTES];
  path_in(path, state, "scale.wav");
  make_wav(path, WAV_PCM, 1, 8000, 16, sizeof payload, payload,
           sizeof payload);

  aural_audiofile_info info;
  float *samples;
  size_t n_frames;
  aural_err err = {0};
  assert_int_equal(read_all(path, 4, &info, &samples, &n_frames, &err), 0);
  assert_true(info.rate_hz == 8000.0);
  assert_int_equal(info.n_channels, 1);
  assert_int_equal(info.n_frames, N);
  assert_int_equal(n_frames, N);
  assert_contains(info.format, "16 bit");
  for (size_t i = 0; i < N; i++)
    assert_true(samples[i] == (float)in[i] / 32768.0f);
  free(samples);
}

/* ---- The golden inputs. ---- */

static void check_good_file(const char *name, double rate_hz, int n_channels,
                            int64_t n_frames_expected) {
  const char *path = test_data_path(name);
  aural_audiofile_info info;
  float *samples;
  size_t n_frames;
  aural_err err = {0};
  int rc = read_all(path, 4096, &info, &samples, &n_frames, &err);
  if (rc < 0) fail_msg("%s: %s", path, err.msg);
  assert_true(info.rate_hz == rate_hz);
  assert_int_equal(info.n_channels, n_channels);
  assert_int_equal(info.n_frames, n_frames_expected);
  assert_int_equal(n_frames, n_frames_expected);
  assert_contains(info.format, "WAV");
  float peak = 0;
  for (size_t i = 0; i < n_frames * (size_t)n_channels; i++) {
    if (!(samples[i] >= -1.0f && samples[i] < 1.0f))
      fail_msg("%s: sample %zu = %g is outside [-1, 1)", name, i,
               (double)samples[i]);
    peak = fmaxf(peak, fabsf(samples[i]));
  }
  assert_true(peak > 0.01f); /* real audio, not zeros */
  free(samples);
}

static void test_good_speech(void **state) {
  (void)state;
  check_good_file("fbank/speech.wav", 16000, 1, 17600);
}

static void test_good_stereo_44k(void **state) {
  (void)state;
  check_good_file("fbank/stereo44k.wav", 44100, 2, 48510); /* 1.1 s */
}

static void test_close_null(void **state) {
  (void)state;
  aural_audiofile_close(NULL);
}

/* ---- Opening from memory. ---- */

/* The whole of path, malloc'ed, in *data and *size. */
static void slurp(const char *path, unsigned char **data, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) fail_msg("%s: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  unsigned char *b = malloc(cap);
  assert_non_null(b);
  for (size_t got; (got = fread(b + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      cap *= 2;
      b = realloc(b, cap);
      assert_non_null(b);
    }
  }
  fclose(f);
  *data = b;
  *size = n;
}

/* read_all for a buffer: opens the size bytes at data from memory under
 * the name name. */
static int read_all_memory(const void *data, size_t size, const char *name,
                           aural_audiofile_info *info, float **samples,
                           size_t *n_frames, aural_err *err) {
  aural_audiofile *af = (aural_audiofile *)&af;
  *samples = NULL;
  *n_frames = 0;
  int rc = aural_audiofile_open_memory(data, size, name, &af, err);
  if (rc < 0) {
    assert_null(af);
    return rc;
  }
  aural_audiofile_get_info(af, info);
  size_t n_ch = (size_t)info->n_channels, cap = 1000;
  float *all = malloc(cap * n_ch * sizeof *all);
  assert_non_null(all);
  for (;;) {
    if (*n_frames + 333 > cap) {
      cap = 2 * (*n_frames + 333);
      all = realloc(all, cap * n_ch * sizeof *all);
      assert_non_null(all);
    }
    size_t n = 0;
    rc = aural_audiofile_read(af, all + *n_frames * n_ch, 333, &n, err);
    if (rc < 0 || n == 0) break;
    *n_frames += n;
  }
  aural_audiofile_close(af);
  if (rc < 0) {
    free(all);
    *n_frames = 0;
    return rc;
  }
  *samples = all;
  return 0;
}

/* Opens path from disk and from memory (named by the same path) and
 * asserts the same outcome: the same info and bit-identical samples, or
 * the same code and message. Returns the code. */
static int assert_memory_matches_path(const char *path) {
  unsigned char *data;
  size_t size;
  slurp(path, &data, &size);
  aural_audiofile_info want_info, got_info;
  memset(&want_info, 0, sizeof want_info);
  memset(&got_info, 0, sizeof got_info);
  float *want = NULL, *got = NULL;
  size_t want_n, got_n;
  aural_err want_err = {0}, got_err = {0};
  int want_rc =
      read_all(path, 1024, &want_info, &want, &want_n, &want_err);
  int got_rc = read_all_memory(data, size, path, &got_info, &got, &got_n,
                               &got_err);
  free(data);
  if (got_rc != want_rc)
    fail_msg("%s: from memory %s (%s), from the file %s (%s)", path,
             aural_err_name(got_rc), got_err.msg, aural_err_name(want_rc),
             want_err.msg);
  if (want_rc < 0) {
    print_message("    %s -> %s\n", aural_err_name(got_rc), got_err.msg);
    assert_int_equal(got_err.code, want_rc);
    assert_string_equal(got_err.msg, want_err.msg);
    return want_rc;
  }
  assert_true(got_info.rate_hz == want_info.rate_hz);
  assert_int_equal(got_info.n_channels, want_info.n_channels);
  assert_int_equal(got_info.n_frames, want_info.n_frames);
  assert_string_equal(got_info.format, want_info.format);
  assert_int_equal(got_n, want_n);
  assert_true(got_n > 0);
  assert_memory_equal(got, want,
                      got_n * (size_t)got_info.n_channels * sizeof *got);
  free(want);
  free(got);
  return 0;
}

static void test_memory_good_files_match_path(void **state) {
  static const char *names[] = {"fbank/speech.wav", "fbank/stereo44k.wav",
                                "fbank/float32.wav", "fbank/mono8k.wav",
                                "fbank/one_frame.wav"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    assert_int_equal(assert_memory_matches_path(test_data_path(names[i])), 0);
  /* Hand-made ones: an unknown data size, and the 16-bit scaling. */
  char path[PATH_BYTES];
  path_in(path, state, "stream.wav");
  make_pcm16_wav(path, 1000, 0xFFFFFFFFu);
  assert_int_equal(assert_memory_matches_path(path), 0);
  path_in(path, state, "au16.au");
  make_au(path, 16000, 2, 4000);
  assert_int_equal(assert_memory_matches_path(path), 0);
}

/* Every bad file of the tests above fails the same way from memory: the
 * same code and, with the path as the name, the same message. */
static void test_memory_bad_files_same_errors(void **state) {
  char path[PATH_BYTES];
  uint8_t zeros[4000] = {0};

  path_in(path, state, "list.wav");
  test_write_file(path, "not a recording\n", 16);
  assert_int_equal(assert_memory_matches_path(path), AURAL_EFORMAT);

  path_in(path, state, "cut30.wav");
  make_pcm16_wav(path, 1000, 2000);
  assert_int_equal(truncate(path, 30), 0);
  assert_true(assert_memory_matches_path(path) < 0);

  path_in(path, state, "header-only.wav");
  make_pcm16_wav(path, 1000, 2000);
  assert_int_equal(truncate(path, WAV_HEADER_BYTES), 0);
  assert_int_equal(assert_memory_matches_path(path), AURAL_ETRUNCATED);

  path_in(path, state, "trunc.wav");
  make_pcm16_wav(path, 1000, 4000);
  assert_int_equal(assert_memory_matches_path(path), AURAL_ETRUNCATED);

  path_in(path, state, "trunc-chunks.wav");
  make_truncated_wav_after_chunks(path, 100, 1000);
  assert_int_equal(assert_memory_matches_path(path), AURAL_ETRUNCATED);

  path_in(path, state, "zero-size.wav");
  make_pcm16_wav(path, 1000, 0);
  assert_int_equal(assert_memory_matches_path(path), AURAL_EFORMAT);

  path_in(path, state, "nan.wav");
  make_float_wav(path, 32, 2, 2000, 1234, 1, (double)NAN);
  assert_int_equal(assert_memory_matches_path(path), AURAL_ENONFINITE);

  path_in(path, state, "rate0.wav");
  make_wav(path, WAV_PCM, 1, 0, 16, 2000, zeros, 2000);
  assert_int_equal(assert_memory_matches_path(path), AURAL_ERATE);

  path_in(path, state, "rate1.wav");
  make_wav(path, WAV_PCM, 1, 1, 16, 2000, zeros, 2000);
  assert_int_equal(assert_memory_matches_path(path), AURAL_ERATE);

  path_in(path, state, "ch0.wav");
  make_wav(path, WAV_PCM, 0, 16000, 16, 2000, zeros, 2000);
  assert_int_equal(assert_memory_matches_path(path), AURAL_ECHANNELS);

  path_in(path, state, "ch1000.wav");
  make_wav(path, WAV_PCM, 1000, 16000, 16, 4000, zeros, 4000);
  assert_int_equal(assert_memory_matches_path(path), AURAL_ECHANNELS);

  path_in(path, state, "ch100k.au");
  make_au(path, 16000, 100000, 4000);
  assert_true(assert_memory_matches_path(path) < 0);
}

static void test_memory_empty_and_null(void **state) {
  (void)state;
  aural_audiofile *af = (aural_audiofile *)&af;
  aural_err err = {0};
  static const char byte = 0;
  assert_int_equal(aural_audiofile_open_memory(&byte, 0, "clip.wav", &af,
                                               &err),
                   AURAL_EEMPTY);
  assert_null(af);
  assert_contains(err.msg, "clip.wav");
  assert_contains(err.msg, "empty");
  af = (aural_audiofile *)&af;
  assert_int_equal(aural_audiofile_open_memory(NULL, 100, "clip.wav", &af,
                                               &err),
                   AURAL_EINVAL);
  assert_null(af);
  assert_contains(err.msg, "clip.wav");
}

/* NULL where a pointer is needed is AURAL_EINVAL with err filled, never
 * a crash; a refused read consumes nothing. */
static void test_null_arguments(void **state) {
  (void)state;
  aural_err err = {0};
  const char *path = test_data_path("fbank/speech.wav");
  assert_int_equal(aural_audiofile_open(path, NULL, &err), AURAL_EINVAL);
  assert_contains(err.msg, "no out pointer");
  aural_audiofile *af = (aural_audiofile *)&af;
  err = (aural_err){0};
  assert_int_equal(aural_audiofile_open(NULL, &af, &err), AURAL_EINVAL);
  assert_null(af);
  assert_contains(err.msg, "no path");
  static const char byte = 0;
  assert_int_equal(aural_audiofile_open_memory(&byte, 1, "x", NULL, &err),
                   AURAL_EINVAL);
  assert_int_equal(aural_audiofile_open(path, &af, &err), 0);
  float buf[100];
  size_t n = 99;
  assert_int_equal(aural_audiofile_read(af, NULL, 100, &n, &err),
                   AURAL_EINVAL);
  assert_contains(err.msg, "speech.wav: read: no buffer");
  assert_int_equal(aural_audiofile_read(af, buf, 100, NULL, &err),
                   AURAL_EINVAL);
  assert_contains(err.msg, "no n_read");
  assert_int_equal(aural_audiofile_read(af, buf, 100, &n, &err), 0);
  assert_int_equal(n, 100);
  aural_audiofile_close(af);
}

/* An Ogg Vorbis file cut anywhere inside its three header packets, or with
 * a byte of them changed, is refused before libsndfile reads it (which
 * would leak libvorbis's state; ASan builds check that nothing leaks). */
static void test_memory_ogg_vorbis_headers(void **state) {
  (void)state;
  unsigned char *data;
  size_t size;
  slurp(test_data_path("../fuzz/corpus/audiofile/mono.ogg"), &data, &size);
  aural_audiofile_info info;
  float *samples;
  size_t n_frames;
  aural_err err = {0};
  assert_int_equal(read_all_memory(data, size, "v.ogg", &info, &samples,
                                   &n_frames, &err),
                   0);
  assert_int_equal(n_frames, 800);
  free(samples);
  /* The headers end where the first audio page starts; all three are
   * longer than 3000 bytes together for this encoder. */
  for (size_t cut = 1; cut < 3000 && cut < size; cut += 97) {
    int rc = read_all_memory(data, cut, "v.ogg", &info, &samples, &n_frames,
                             &err);
    free(samples);
    if (rc == 0) fail_msg("cut at %zu bytes: accepted", cut);
    assert_contains(err.msg, "v.ogg");
  }
  for (size_t at = 40; at < 3000 && at < size; at += 211) {
    data[at] ^= 0x5a;
    int rc = read_all_memory(data, size, "v.ogg", &info, &samples,
                             &n_frames, &err);
    free(samples);
    data[at] ^= 0x5a;
    if (rc == 0) fail_msg("byte %zu changed: accepted", at);
    assert_contains(err.msg, "v.ogg");
  }
  print_message("    %s\n", err.msg);
  /* Cut after the headers, in its audio pages, or at the end of the
   * header pages: refused as truncated (it was read as a shorter file).
   * Bytes after the page that ends the stream are not a cut. */
  for (size_t cut = 3000; cut < size; cut += 13) {
    int rc = read_all_memory(data, cut, "v.ogg", &info, &samples, &n_frames,
                             &err);
    free(samples);
    if (rc == 0) fail_msg("cut at %zu of %zu bytes: accepted", cut, size);
    assert_int_equal(rc, AURAL_ETRUNCATED);
    assert_contains(err.msg, "v.ogg");
  }
  print_message("    %s\n", err.msg);
  /* Cut where the last page begins: every page whole, none ends it. */
  size_t last = size - 4;
  while (last > 0 && memcmp(data + last, "OggS", 4) != 0) last--;
  assert_int_equal(read_all_memory(data, last, "v.ogg", &info, &samples,
                                   &n_frames, &err),
                   AURAL_ETRUNCATED);
  free(samples);
  assert_contains(err.msg, "does not end the stream");
  unsigned char *tagged = calloc(size + 128, 1);
  memcpy(tagged, data, size);
  assert_int_equal(read_all_memory(tagged, size + 128, "v.ogg", &info,
                                   &samples, &n_frames, &err),
                   0);
  assert_int_equal(n_frames, 800);
  free(samples);
  free(tagged);
  free(data);
}

/* A FIFO: WAV is read as it comes; FLAC, which libsndfile reads only
 * where it can seek, is refused with a message that says so. */
static void test_fifo_input(void **state) {
  char wav[PATH_BYTES], fifo[PATH_BYTES];
  path_in(wav, state, "tone.wav");
  make_pcm16_wav(wav, 8000, 16000);
  const char *names[] = {wav, test_data_path("../../models/sample.flac")};
  for (int i = 0; i < 2; i++) {
    path_in(fifo, state, "in.fifo");
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    size_t size;
    char *bytes = test_read_file(names[i], &size);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* the writer */
      int fd = open(fifo, O_WRONLY);
      size_t at = 0;
      while (fd >= 0 && at < size) {
        ssize_t k = write(fd, bytes + at, size - at);
        if (k <= 0) break;
        at += (size_t)k;
      }
      _exit(0);
    }
    aural_audiofile *af = NULL;
    aural_err err = {0};
    int rc = aural_audiofile_open(fifo, &af, &err);
    if (i == 0) {
      assert_int_equal(rc, 0);
      aural_audiofile_close(af);
    } else {
      assert_int_equal(rc, AURAL_EFORMAT);
      assert_contains(err.msg, "pipe");
      assert_contains(err.msg, "FLAC");
      print_message("    %s\n", err.msg);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    free(bytes);
    unlink(fifo);
  }
}

/* What read_all_through_fifo() read: read_all()'s return, and its
 * outputs but the samples. */
typedef struct fifo_read {
  int rc;
  size_t n_frames;
  aural_audiofile_info info;
  aural_err err;
} fifo_read;

/* Opens path, a FIFO, while a child writes the size bytes of data into
 * it, and reads it to its end. */
static fifo_read read_all_through_fifo(const char *fifo, const void *data,
                                       size_t size) {
  fifo_read r = {0};
  float *samples = NULL;
  unlink(fifo);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) { /* the writer */
    int fd = open(fifo, O_WRONLY);
    size_t at = 0;
    while (fd >= 0 && at < size) {
      ssize_t k = write(fd, (const char *)data + at, size - at);
      if (k <= 0) break;
      at += (size_t)k;
    }
    _exit(0);
  }
  r.rc = read_all(fifo, 300, &r.info, &samples, &r.n_frames, &r.err);
  free(samples);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  unlink(fifo);
  return r;
}

/* A recorder writing into a pipe cannot know the length: its WAV
 * declares 0xFFFFFFFF (ffmpeg), 0x7FFFFFFF or SoX's 0x7FFFF000 bytes of
 * data, its Sun .au 0xFFFFFFFF. From a pipe libsndfile takes such a size
 * at its word (2^31 - 1 frames, or 2^62 for .au), and the end of the
 * audio read as a cut-off recording. Such an input is of unknown length
 * (n_frames -1) and is read to its end. A size that is no such mark is
 * still checked: a cut-off file through a pipe is refused. */
static void test_fifo_unknown_data_size(void **state) {
  char fifo[PATH_BYTES], wav[PATH_BYTES];
  path_in(fifo, state, "rec.fifo");
  path_in(wav, state, "rec.wav");
  static const uint32_t sizes[] = {0xFFFFFFFFu, 0x7FFFFFFFu, 2147479552u,
                                   4000};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    make_pcm16_wav(wav, 1000, sizes[k]);
    size_t size;
    char *bytes = test_read_file(wav, &size);
    fifo_read r = read_all_through_fifo(fifo, bytes, size);
    free(bytes);
    if (sizes[k] == 4000) { /* twice what follows: cut off */
      assert_int_equal(r.rc, AURAL_ETRUNCATED);
      assert_contains(r.err.msg, "truncated");
      continue;
    }
    if (r.rc < 0) fail_msg("data size 0x%08x: %s", sizes[k], r.err.msg);
    assert_int_equal(r.n_frames, 1000);
    assert_int_equal(r.info.n_frames, -1);
  }
  /* A .au of 1000 16-bit frames whose data size is 0xFFFFFFFF. */
  uint8_t au[24 + 2000] = ".snd";
  put_be(au + 4, 24);
  put_be(au + 8, 0xFFFFFFFFu);
  put_be(au + 12, 3);
  put_be(au + 16, 16000);
  put_be(au + 20, 1);
  fifo_read r = read_all_through_fifo(fifo, au, sizeof au);
  if (r.rc < 0) fail_msg(".au of unknown size: %s", r.err.msg);
  assert_int_equal(r.n_frames, 1000);
  assert_int_equal(r.info.n_frames, -1);
}

/* Formats whose length libsndfile takes as unknown from a pipe (it
 * counts to the largest file it can address: 4.6e18 frames): NIST SPHERE,
 * Wave64, IRCAM. Whole files read through a FIFO as they do from a file;
 * they were refused as "truncated: audio ends at frame 1000 of the
 * 4611686018427387391 declared". */
static void test_fifo_formats_of_unknown_length(void **state) {
  char fifo[PATH_BYTES], path[PATH_BYTES];
  path_in(fifo, state, "rec.fifo");
  path_in(path, state, "rec");
  for (int k = 0; k < 3; k++) {
    size_t size, want = 1000;
    char *bytes;
    if (k == 0) {
      make_nist(path, 1000, 1000);
      bytes = test_read_file(path, &size);
    } else if (k == 1) {
      make_w64(path, 1000, 2000);
      bytes = test_read_file(path, &size);
    } else {
      bytes = test_read_file(
          test_data_path("../fuzz/corpus/audiofile/mono.sf"), &size);
      want = 800;
    }
    fifo_read r = read_all_through_fifo(fifo, bytes, size);
    free(bytes);
    if (r.rc < 0) fail_msg("format %d: %s", k, r.err.msg);
    assert_int_equal(r.n_frames, want);
    assert_int_equal(r.info.n_frames, -1);
  }
}

/* A CAF file (which libsndfile must seek in to find its audio) through a
 * FIFO is refused as a format that needs a regular file, as FLAC is; it
 * was refused as "truncated: audio ends at frame 0 of the 800 declared",
 * which it is not. */
static void test_fifo_caf_needs_a_file(void **state) {
  char fifo[PATH_BYTES];
  path_in(fifo, state, "rec.fifo");
  size_t size;
  char *bytes = test_read_file(
      test_data_path("../fuzz/corpus/audiofile/mono.caf"), &size);
  fifo_read r = read_all_through_fifo(fifo, bytes, size);
  free(bytes);
  print_message("    %s\n", r.err.msg);
  assert_int_equal(r.rc, AURAL_EFORMAT);
  assert_contains(r.err.msg, fifo);
  assert_contains(r.err.msg, "regular file");
}

/* A WAV whose data chunk declares 0 bytes with samples after it (never
 * finalised), through a FIFO: libsndfile reads nothing of it, so it read
 * as an empty recording. It is refused, as the same file is; one that
 * really holds nothing still opens and reads as empty. */
static void test_fifo_zero_data_size_with_samples(void **state) {
  char fifo[PATH_BYTES], wav[PATH_BYTES];
  path_in(fifo, state, "rec.fifo");
  path_in(wav, state, "rec.wav");
  const size_t lengths[] = {1000, 0};
  for (size_t k = 0; k < 2; k++) {
    make_pcm16_wav(wav, lengths[k], 0);
    size_t size;
    char *bytes = test_read_file(wav, &size);
    fifo_read r = read_all_through_fifo(fifo, bytes, size);
    free(bytes);
    if (lengths[k] == 0) {
      if (r.rc < 0) fail_msg("an empty WAV: %s", r.err.msg);
      assert_int_equal(r.n_frames, 0);
      continue;
    }
    if (r.rc == 0)
      fail_msg("data size 0 and 2000 bytes after it: read as %zu frames",
               r.n_frames);
    print_message("    %s\n", r.err.msg);
    assert_int_equal(r.rc, AURAL_EFORMAT);
    assert_contains(r.err.msg, fifo);
    assert_contains(r.err.msg, "declares 0 bytes");
  }
}

/* An Ogg Vorbis recording cut off, read through a FIFO: the checks of the
 * whole file cannot run, but its end is seen as it comes. Cut where its
 * last page begins (no page ends the stream) or inside that page, it is
 * refused as truncated, as the same bytes in a file are; it was read as a
 * shorter recording. The whole file reads as it does from a file. */
static void test_fifo_ogg_cut_off(void **state) {
  char fifo[PATH_BYTES];
  path_in(fifo, state, "rec.fifo");
  size_t size;
  char *data = test_read_file(
      test_data_path("../fuzz/corpus/audiofile/mono.ogg"), &size);
  size_t last = size - 4;
  while (last > 0 && memcmp(data + last, "OggS", 4) != 0) last--;
  assert_true(last > 0);
  /* Whole, and with bytes after it (a tag some tools append). */
  data = realloc(data, size + 128);
  assert_non_null(data);
  memset(data + size, 0, 128);
  const size_t cuts[] = {last, last + 40, size, size + 128};
  for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
    fifo_read r = read_all_through_fifo(fifo, data, cuts[k]);
    if (cuts[k] >= size) {
      if (r.rc < 0) fail_msg("the whole file: %s", r.err.msg);
      assert_int_equal(r.n_frames, 800);
      continue;
    }
    if (r.rc == 0)
      fail_msg("cut at %zu of %zu bytes: read as %zu frames", cuts[k], size,
               r.n_frames);
    print_message("    %s\n", r.err.msg);
    assert_int_equal(r.rc, AURAL_ETRUNCATED);
    assert_contains(r.err.msg, fifo);
  }
  free(data);
}

/* A character device (here /dev/null, which reads as empty) is named as
 * one: the message said "read from a pipe" for anything not a regular
 * file. */
static void test_device_input_named(void **state) {
  (void)state;
  aural_audiofile *af = NULL;
  aural_err err = {0};
  assert_int_equal(aural_audiofile_open("/dev/null", &af, &err),
                   AURAL_EFORMAT);
  assert_null(af);
  assert_contains(err.msg, "/dev/null");
  assert_contains(err.msg, "a character device");
  assert_null(strstr(err.msg, "pipe"));
}

/* Opens on several threads at once each give their own outcome: libsndfile
 * keeps the reason of a failed open in one variable for the process, which
 * each open writes. */
enum { OPEN_THREADS = 4, OPEN_ROUNDS = 10000 };

typedef struct open_job {
  const char *path;          /* opened by path, or */
  const unsigned char *data; /* from memory */
  size_t size;
  int want_rc;
  char want[sizeof ((aural_err *)0)->msg];
  int n_wrong;
  char wrong[sizeof ((aural_err *)0)->msg];
} open_job;

static int open_once(const open_job *j, aural_err *err) {
  aural_audiofile *af;
  memset(err, 0, sizeof *err);
  int rc = j->path != NULL
               ? aural_audiofile_open(j->path, &af, err)
               : aural_audiofile_open_memory(j->data, j->size, "buffer", &af,
                                             err);
  if (rc == 0) aural_audiofile_close(af);
  return rc;
}

static void *open_many(void *arg) {
  open_job *j = arg;
  for (int i = 0; i < OPEN_ROUNDS; i++) {
    aural_err err;
    int rc = open_once(j, &err);
    if ((rc != j->want_rc || strcmp(err.msg, j->want) != 0) &&
        j->n_wrong++ == 0)
      snprintf(j->wrong, sizeof j->wrong, "%s", err.msg);
  }
  return NULL;
}

static void test_threads_open_at_once(void **state) {
  /* Two of libsndfile's reasons, and a success, from memory; a text
   * file by path. */
  unsigned char au[24] = ".snd";
  const uint32_t au_fields[] = {24, 4000, 3, 16000, 100000};
  for (int i = 0; i < 5; i++)
    for (int b = 0; b < 4; b++)
      au[4 + i * 4 + b] = (unsigned char)(au_fields[i] >> (24 - 8 * b));
  static const char text[] = "this is not a recording, only text\n";
  char path[PATH_BYTES];
  path_in(path, state, "notes.wav");
  test_write_file(path, "some notes, saved with the wrong name\n", 38);
  size_t good_size;
  unsigned char *good = (unsigned char *)test_read_file(
      test_data_path("fbank/speech.wav"), &good_size);
  open_job jobs[OPEN_THREADS] = {
      {.data = au, .size = sizeof au},
      {.data = (const unsigned char *)text, .size = sizeof text - 1},
      {.path = path},
      {.data = good, .size = good_size},
  };
  for (int t = 0; t < OPEN_THREADS; t++) {
    aural_err err;
    jobs[t].want_rc = open_once(&jobs[t], &err);
    snprintf(jobs[t].want, sizeof jobs[t].want, "%s", err.msg);
    print_message("    alone: %s\n", t == 3 ? "(opened)" : err.msg);
  }
  assert_int_equal(jobs[0].want_rc, AURAL_EFORMAT);
  assert_contains(jobs[0].want, "channels");
  assert_int_equal(jobs[1].want_rc, AURAL_EFORMAT);
  assert_int_equal(jobs[2].want_rc, AURAL_EFORMAT);
  assert_string_not_equal(jobs[0].want, jobs[1].want);
  assert_int_equal(jobs[3].want_rc, 0);
  pthread_t th[OPEN_THREADS];
  for (int t = 0; t < OPEN_THREADS; t++)
    assert_int_equal(pthread_create(&th[t], NULL, open_many, &jobs[t]), 0);
  for (int t = 0; t < OPEN_THREADS; t++)
    assert_int_equal(pthread_join(th[t], NULL), 0);
  for (int t = 0; t < OPEN_THREADS; t++)
    if (jobs[t].n_wrong > 0)
      fail_msg("input %d: %d of %d opens beside others said \"%s\", "
               "alone \"%s\"",
               t, jobs[t].n_wrong, OPEN_ROUNDS, jobs[t].wrong, jobs[t].want);
  free(good);
}

/* ---- Error codes. ---- */

static void test_error_strings(void **state) {
  (void)state;
  assert_string_equal(aural_err_name(-ENOENT), "ENOENT");
  assert_contains(aural_strerror(-ENOENT), "no such file");
  assert_string_equal(aural_err_name(-EISDIR), "EISDIR");
  assert_string_equal(aural_err_name(AURAL_ENONFINITE), "AURAL_ENONFINITE");
  assert_contains(aural_strerror(AURAL_ENONFINITE), "non-finite");
  assert_string_equal(aural_err_name(AURAL_ETRUNCATED), "AURAL_ETRUNCATED");
  assert_contains(aural_strerror(AURAL_ETRUNCATED), "truncated");
  assert_contains(aural_strerror(AURAL_ERATE), "sample rate");
  assert_string_equal(aural_err_name(0), "OK");
  assert_string_equal(aural_strerror(-99999), "unknown error");
  assert_string_equal(aural_err_name(-99999), "UNKNOWN");
  /* The protocol's codes are in the same list (aural/codes.h). */
  assert_string_equal(aural_err_name(AURAL_PROTO_ENO_STREAM),
                      "AURAL_PROTO_ENO_STREAM");
  assert_string_equal(aural_strerror(AURAL_PROTO_ENO_STREAM),
                      "no such stream");

  /* Every code has its own name and a description. */
  static const int codes[] = {
#define CODE(name, value, text) AURAL_E##name,
      AURAL_ERROR_MAP(CODE)
#undef CODE
  };
  enum { N = sizeof codes / sizeof codes[0] };
  for (size_t i = 0; i < N; i++) {
    assert_true(codes[i] < -4096); /* never an -errno */
    assert_true(strncmp(aural_err_name(codes[i]), "AURAL_E", 7) == 0);
    assert_string_not_equal(aural_strerror(codes[i]), "unknown error");
    for (size_t j = 0; j < i; j++) {
      assert_int_not_equal(codes[i], codes[j]);
      assert_string_not_equal(aural_err_name(codes[i]),
                              aural_err_name(codes[j]));
    }
  }
}

int main(void) {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_missing_file),
      T(test_directory),
      T(test_empty_file),
      T(test_text_renamed_wav),
      T(test_cut_inside_header),
      T(test_header_without_data),
      T(test_truncated_data),
      T(test_truncated_data_after_many_chunks),
      T(test_truncated_other_formats),
      T(test_truncated_nist_sphere),
      T(test_nan_names_frame_and_channel),
      T(test_read_goes_on_after_nan),
      T(test_read_huge_count),
      T(test_positive_infinity),
      T(test_negative_infinity_float64),
      T(test_huge_float64_is_finite),
      T(test_rate_zero),
      T(test_rate_one),
      T(test_rate_ten_million),
      T(test_zero_channels),
      T(test_thousand_channels),
      T(test_hundred_thousand_channels),
      T(test_unknown_data_size),
      T(test_sox_unknown_data_size),
      T(test_zero_data_size_with_samples),
      T(test_pcm16_scaling),
      T(test_memory_good_files_match_path),
      T(test_memory_bad_files_same_errors),
      cmocka_unit_test(test_memory_empty_and_null),
      cmocka_unit_test(test_null_arguments),
      cmocka_unit_test(test_memory_ogg_vorbis_headers),
      T(test_fifo_input),
      T(test_fifo_unknown_data_size),
      T(test_fifo_ogg_cut_off),
      T(test_fifo_zero_data_size_with_samples),
      T(test_fifo_formats_of_unknown_length),
      T(test_fifo_caf_needs_a_file),
      T(test_device_input_named),
      T(test_threads_open_at_once),
      cmocka_unit_test(test_good_speech),
      cmocka_unit_test(test_good_stereo_44k),
      cmocka_unit_test(test_close_null),
      cmocka_unit_test(test_error_strings),
  };
#undef T
  test_select_from_env();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
