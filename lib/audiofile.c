/*
 * Audio files through libsndfile, with the checks libsndfile leaves to its
 * caller: directories and empty files, rates and channel counts outside
 * what the frontend accepts, data chunks that claim more bytes than the file
 * has (libsndfile quietly shortens them; a cut-off recording should not
 * pass as complete), reads that end early, and non-finite float samples.
 * Files (through their descriptor) and buffers in memory (through
 * libsndfile's virtual I/O) take the same path from the first check on.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
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

/* Where the bytes come from: a file descriptor (libsndfile reads it
 * itself) or a caller's buffer (read through libsndfile's virtual I/O). */
typedef struct source {
  int fd;                     /* -1 for a buffer */
  const unsigned char *data;  /* (size) the buffer, when fd is -1 */
  uint64_t size;              /* bytes, when known (buffers, regular files) */
  int size_known;
  const char *kind;           /* what it is, when not a regular file or a
                                 buffer: "a pipe", "a device", ... */
  sf_count_t pos;             /* libsndfile's position in the buffer */
} source;

struct aural_audiofile {
  SNDFILE *sf;
  source src;     /* the virtual I/O callbacks point here */
  aural_audiofile_info info;
  int64_t n_done; /* frames read so far */
  bool is_double; /* 64-bit float samples, read as doubles */
  char path[256]; /* for messages; shortened if needed */
};

/* Reads n bytes at offset at into buf. Returns 1 when all n were there,
 * 0 otherwise (short file, read error: either way the caller stops). */
static int source_read_at(const source *src, void *buf, size_t n,
                          uint64_t at) {
  if (src->fd >= 0) {
    if (at > (uint64_t)INT64_MAX) return 0;
    return pread(src->fd, buf, n, (off_t)at) == (ssize_t)n;
  }
  if (at > src->size || n > src->size - at) return 0;
  memcpy(buf, src->data + at, n);
  return 1;
}

/* libsndfile's virtual I/O over a buffer: seekable, read-only. */
static sf_count_t vio_get_filelen(void *user) {
  return (sf_count_t)((source *)user)->size;
}

static sf_count_t vio_seek(sf_count_t offset, int whence, void *user) {
  source *src = user;
  sf_count_t base = whence == SEEK_SET   ? 0
                    : whence == SEEK_CUR ? src->pos
                    : whence == SEEK_END ? (sf_count_t)src->size
                                         : -1;
  sf_count_t to;
  if (base < 0 || __builtin_add_overflow(base, offset, &to) || to < 0)
    return -1;
  src->pos = to; /* past the end is allowed, as with files: reads give 0 */
  return to;
}

static sf_count_t vio_read(void *ptr, sf_count_t count, void *user) {
  source *src = user;
  if (count <= 0 || (uint64_t)src->pos >= src->size) return 0;
  uint64_t n = src->size - (uint64_t)src->pos;
  if ((uint64_t)count < n) n = (uint64_t)count;
  memcpy(ptr, src->data + src->pos, (size_t)n);
  src->pos += (sf_count_t)n;
  return (sf_count_t)n;
}

static sf_count_t vio_write(const void *ptr, sf_count_t count, void *user) {
  (void)ptr;
  (void)count;
  (void)user;
  return 0; /* opened for reading only */
}

static sf_count_t vio_tell(void *user) { return ((source *)user)->pos; }

/* The log lines of libsndfile's that give a size declared in the header,
 * and what the bytes are. */
static const struct {
  const char *tag, *what;
} size_tags[] = {
    {"data", " of audio data"},      {"SSND", " of audio data"},
    {"Data Size", " of audio data"}, {"Data Length", " of audio data"},
    {"riff", " in all"},             {"Riff size", " in all"},
};

/* If line is one of size_tags' ("tag : value..."), returns its index with
 * *after at the " : "; else -1. */
static int size_tag_of(char *line, char **after) {
  line += strspn(line, " ");
  char *colon = strstr(line, " : ");
  if (colon == NULL) return -1;
  size_t tag_len = (size_t)(colon - line);
  while (tag_len > 0 && line[tag_len - 1] == ' ') tag_len--;
  for (size_t i = 0; i < sizeof size_tags / sizeof size_tags[0]; i++)
    if (strlen(size_tags[i].tag) == tag_len &&
        memcmp(line, size_tags[i].tag, tag_len) == 0) {
      *after = colon;
      return (int)i;
    }
  return -1;
}

/* What libsndfile's log says of a file shorter than its header declares.
 * libsndfile shortens such files quietly, logging one of
 *   "data : 53928 (should be 26942)"           WAV and RIFX, the data chunk
 *   " SSND : 53928 (should be 26950)"          AIFF
 *   "  Data Size   : 35200 (should be 23452)"  AU
 *   "  Data Length : 35200 (should be 23452)"  DWD
 *   "riff : 35304 (should be 23536)"           W64, the whole file
 *   "  Riff size : 4072 (should be 2072)"      RF64, the whole file
 *   "Seems to be a truncated file."            VOC, without sizes.
 * Returns 1 with *declared and *present in bytes (both -1 for VOC) and
 * *what saying what the bytes are (" of audio data", " in all"), or 0.
 * Its log is bounded, so for WAV this is a second line of defence behind
 * check_wav(). */
static int declared_too_long(SNDFILE *sf, long long *declared,
                             long long *present, const char **what) {
  char log[4096];
  sf_command(sf, SFC_GET_LOG_INFO, log, sizeof log);
  char *save = NULL;
  for (char *line = strtok_r(log, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    char *colon;
    int i;
    if (strcmp(line + strspn(line, " "), "Seems to be a truncated file.") ==
        0) {
      *declared = *present = -1;
      *what = " of audio data";
      return 1;
    }
    if ((i = size_tag_of(line, &colon)) >= 0 &&
        sscanf(colon, " : %lld (should be %lld)", declared, present) == 2 &&
        *present < *declared) {
      *what = size_tags[i].what;
      return 1;
    }
  }
  return 0;
}

/* Writers that cannot seek back to fix a size they do not know yet (they
 * write into a pipe) put a mark there instead: 0xFFFFFFFF (ffmpeg, and
 * .au's "unknown"), 0x7FFFFFFF, or SoX's 0x7FFFF000, each possibly
 * rounded down to whole frames of frame_bytes (SoX: 2147479551 for 24-bit
 * mono). Such a file is not truncated, just of unknown length. */
static int is_unknown_length(long long declared, long long frame_bytes) {
  static const long long marks[] = {0xFFFFFFFFLL, 0x7FFFFFFFLL, 0x7FFFF000LL};
  if (frame_bytes < 1) frame_bytes = 1;
  for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++)
    if (declared <= marks[i] && marks[i] - declared < frame_bytes) return 1;
  return 0;
}

/* Whether libsndfile's log gives a size that is such a mark (or -1, as it
 * prints .au's 0xFFFFFFFF). From a pipe libsndfile believes the mark, and
 * the audio would seem to end early. */
static int declared_unknown(SNDFILE *sf, long long frame_bytes) {
  char log[4096];
  sf_command(sf, SFC_GET_LOG_INFO, log, sizeof log);
  char *save = NULL;
  for (char *line = strtok_r(log, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    char *colon;
    long long v;
    if (size_tag_of(line, &colon) >= 0 && sscanf(colon, " : %lld", &v) == 1 &&
        (v == -1 || is_unknown_length(v, frame_bytes)))
      return 1;
  }
  return 0;
}

/* Whether libsndfile's log says that the Ogg stream it read ended without
 * its end-of-stream page: a recording cut off. check_ogg_end() sees that
 * in a file before it is read; from a pipe it shows only at the end. (In
 * a file, where libsndfile seeks, bytes after the last page make it say
 * so too: there check_ogg_end() decides.) */
static int ogg_ended_early(SNDFILE *sf) {
  char log[4096];
  sf_command(sf, SFC_GET_LOG_INFO, log, sizeof log);
  return strstr(log, "ended unexpectedly without an End-Of-Stream") != NULL;
}

/* Whether libsndfile's log says that it had to seek in the pipe it reads
 * (CAF, to find its audio after the header): it reads nothing then, and
 * the input needs a regular file. */
static int pipe_seek_failed(SNDFILE *sf) {
  char log[4096];
  sf_command(sf, SFC_GET_LOG_INFO, log, sizeof log);
  return strstr(log, "pipe seek to value other than pipeoffset") != NULL;
}

/* A frame count from a pipe this large (2^52: 186 years at 768 kHz) is
 * libsndfile's "as far as the pipe goes", not a length from the header. */
#define PIPE_UNKNOWN_FRAMES ((sf_count_t)1 << 52)

/* Bytes per frame of a file of fixed-width samples; 1 where libsndfile's
 * subformat has none (compressed, block-based). */
static long long frame_bytes_of(const SF_INFO *sfi) {
  long long per;
  switch (sfi->format & SF_FORMAT_SUBMASK) {
  case SF_FORMAT_PCM_S8: case SF_FORMAT_PCM_U8: case SF_FORMAT_ULAW:
  case SF_FORMAT_ALAW: per = 1; break;
  case SF_FORMAT_PCM_16: per = 2; break;
  case SF_FORMAT_PCM_24: per = 3; break;
  case SF_FORMAT_PCM_32: case SF_FORMAT_FLOAT: per = 4; break;
  case SF_FORMAT_DOUBLE: per = 8; break;
  default: return 1;
  }
  return per * sfi->channels;
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
static int check_wav(const source *src, const char *path, aural_err *err) {
  unsigned char h[24];
  uint64_t file_size = src->size;
  if (!source_read_at(src, h, 12, 0) || memcmp(h, "RIFF", 4) != 0 ||
      memcmp(h + 8, "WAVE", 4) != 0)
    return 0;
  uint64_t at = 12;
  long long block_align = 1; /* bytes per frame, from the fmt chunk */
  for (int n_chunks = 0; n_chunks < 100000; n_chunks++) {
    if (!source_read_at(src, h, 8, at)) return 0;
    uint32_t size = le32(h + 4);
    uint64_t body = at + 8;
    if (memcmp(h, "fmt ", 4) == 0 && size >= 16) {
      if (!source_read_at(src, h + 8, 16, body)) return 0;
      unsigned channels = (unsigned)h[10] | (unsigned)h[11] << 8;
      uint32_t rate = le32(h + 12);
      block_align = (long long)((unsigned)h[20] | (unsigned)h[21] << 8);
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
      if (is_unknown_length(size, block_align)) return 0;
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
    at = body + size + (size & 1);
    if (at >= file_size) return 0;
  }
  return 0;
}

/* Ogg's CRC-32: polynomial 0x04c11db7, most significant bit first,
 * initial value 0, no final xor. */
static uint32_t ogg_crc(uint32_t crc, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    crc ^= (uint32_t)p[i] << 24;
    for (int b = 0; b < 8; b++)
      crc = crc & 0x80000000u ? crc << 1 ^ 0x04c11db7u : crc << 1;
  }
  return crc;
}

/* The three Vorbis header packets of an Ogg file must be complete and
 * well-formed before libsndfile sees them: when it fails to read them
 * (libsndfile 1.2.0, ogg_vorbis_open), it returns before registering its
 * clean-up and leaks libvorbis's codec setup, 5 to 6 kB per attempt, which
 * a daemon opening hostile files would accumulate. The check is that of
 * the Vorbis I specification, conservative where libsndfile would be
 * lenient: the identification header alone on the first page (flagged as
 * the stream's beginning), with version 0, at least one channel, a nonzero
 * rate, block sizes 64 <= short <= long <= 8192 and its framing bit; then
 * the comment and setup headers in the following pages of the same
 * stream, numbered without gaps, with valid checksums. Other Ogg streams
 * (FLAC, Opus) are left to libsndfile. Returns 0 or a negative code with
 * err naming path and problem. */
static int check_ogg_vorbis(const source *src, const char *path,
                            aural_err *err) {
  unsigned char h[27 + 255];
  if (!source_read_at(src, h, 27, 0) || memcmp(h, "OggS", 4) != 0) return 0;
  unsigned char *body = malloc(255 * 255);
  if (body == NULL)
    return aural__err_set(err, AURAL_ENOMEM, "%s: out of memory", path);
  uint64_t at = 0;
  uint32_t serial = 0, seq = 0;
  int n_packets = 0, rc = 0;
  size_t in_packet = 0;    /* bytes so far of the packet being assembled */
  unsigned char head[7];   /* its first bytes */
  const char *why = NULL;
  for (int page = 0; n_packets < 3 && why == NULL; page++) {
    if (!source_read_at(src, h, 27, at) ||
        !source_read_at(src, h + 27, h[26], at + 27)) {
      rc = page == 0 ? 0 : AURAL_ETRUNCATED;
      why = "the file ends inside the Vorbis headers";
      break;
    }
    size_t n_seg = h[26], body_len = 0;
    for (size_t k = 0; k < n_seg; k++) body_len += h[27 + k];
    uint32_t crc = le32(h + 22);
    memset(h + 22, 0, 4);
    if (memcmp(h, "OggS", 4) != 0 || h[4] != 0) {
      why = "a page does not start with 'OggS' version 0";
      break;
    }
    if (!source_read_at(src, body, body_len, at + 27 + n_seg)) {
      rc = AURAL_ETRUNCATED;
      why = "the file ends inside the Vorbis headers";
      break;
    }
    if (ogg_crc(ogg_crc(0, h, 27 + n_seg), body, body_len) != crc) {
      why = "a header page fails its checksum";
      break;
    }
    if (page == 0) {
      /* Identify the stream: anything but Vorbis is libsndfile's. */
      if (body_len < 7 || memcmp(body, "\x01vorbis", 7) != 0) break;
      serial = le32(h + 14);
      seq = le32(h + 18);
      if ((h[5] & 0x03) != 0x02 || n_seg == 0 || h[27 + n_seg - 1] == 255)
        why = "the identification header is not alone on the first page";
      for (size_t k = 0; k + 1 < n_seg && why == NULL; k++)
        if (h[27 + k] != 255)
          why = "the identification header is not alone on the first page";
      if (why != NULL) break;
      /* Block sizes are powers of two, their exponents in v[28]. */
      const unsigned char *v = body;
      if (body_len < 30 || le32(v + 7) != 0 || v[11] == 0 ||
          le32(v + 12) == 0 || (v[28] & 15u) < 6 ||
          (v[28] >> 4) < (v[28] & 15u) || (v[28] >> 4) > 13 || !(v[29] & 1))
        why = "bad identification header (version, channels, rate, block "
              "sizes or framing)";
      n_packets = 1;
    } else {
      if (le32(h + 14) != serial || le32(h + 18) != ++seq ||
          (h[5] & 0x02) != 0 || ((h[5] & 0x01) != 0) != (in_packet > 0)) {
        why = "the header pages are not one continuous stream";
        break;
      }
      size_t off = 0;
      for (size_t k = 0; k < n_seg && n_packets < 3; k++) {
        size_t len = h[27 + k];
        for (size_t j = 0; j < len && in_packet + j < sizeof head; j++)
          head[in_packet + j] = body[off + j];
        in_packet += len;
        off += len;
        if (len == 255) continue;
        /* A packet ends: the comment header, then the setup header. */
        if (in_packet < sizeof head ||
            memcmp(head, n_packets == 1 ? "\x03vorbis" : "\x05vorbis", 7) !=
                0) {
          why = "the comment or setup header is missing";
          break;
        }
        n_packets++;
        in_packet = 0;
      }
    }
    at += 27 + n_seg + body_len;
  }
  free(body);
  if (why == NULL) return 0;
  return aural__err_set(err, rc < 0 ? rc : AURAL_EFORMAT,
                        "%s: malformed Ogg Vorbis stream: %s", path, why);
}

/* An Ogg file (of known size) must end with its stream: every page whole,
 * the last one marked end-of-stream. libsndfile reads a file cut short as
 * far as it goes and calls that its length, so a truncated recording
 * would otherwise pass for a shorter one. Bytes after a page that ends
 * the stream are left to libsndfile (a tag some tools append). Returns 0
 * or AURAL_ETRUNCATED with err naming path and where it ends. */
static int check_ogg_end(const source *src, const char *path,
                         aural_err *err) {
  unsigned char h[27 + 255];
  if (!source_read_at(src, h, 4, 0) || memcmp(h, "OggS", 4) != 0) return 0;
  uint64_t at = 0;
  bool ended = false;
  for (int64_t page = 0;; page++) {
    if (at == src->size || !source_read_at(src, h, 27, at) ||
        memcmp(h, "OggS", 4) != 0) {
      if (ended) return 0;
      if (at == src->size)
        return aural__err_set(err, AURAL_ETRUNCATED,
                              "%s: truncated: the Ogg stream's last page "
                              "(%" PRId64 ", ending at byte %" PRIu64
                              ") does not end the stream",
                              path, page - 1, at);
      return aural__err_set(err, AURAL_ETRUNCATED,
                            "%s: truncated: the Ogg stream ends inside page "
                            "%" PRId64 " at byte %" PRIu64 " of %" PRIu64,
                            path, page, at, src->size);
    }
    uint64_t next = at + 27 + h[26];
    if (source_read_at(src, h + 27, h[26], at + 27))
      for (size_t k = 0; k < h[26]; k++) next += h[27 + k];
    else
      next = UINT64_MAX; /* the lacing values are cut */
    if (next > src->size)
      return aural__err_set(err, AURAL_ETRUNCATED,
                            "%s: truncated: the Ogg stream ends inside page "
                            "%" PRId64 " (bytes %" PRIu64 "..%" PRIu64
                            " of %" PRIu64 ")",
                            path, page, at, next, src->size);
    ended = (h[5] & 0x04) != 0;
    at = next;
  }
}

/* A NIST SPHERE file (TIMIT's format) declares its length as the
 * sample_count of its text header. libsndfile reads a file that holds
 * less as far as it goes, with nothing in its log, so a cut-off recording
 * would pass for a shorter one: the count is read here (as libsndfile
 * reads it, in the first 1024 bytes up to "end_head") and compared with
 * the n_frames libsndfile found. Returns 0 or AURAL_ETRUNCATED with err
 * naming path and both counts. */
static int check_nist_length(const source *src, int64_t n_frames,
                             const char *path, aural_err *err) {
  char h[1024 + 1];
  size_t n = src->size < 1024 ? (size_t)src->size : 1024;
  if (!source_read_at(src, h, n, 0)) return 0;
  h[n] = '\0';
  char *end = strstr(h, "end_head");
  if (end != NULL) *end = '\0';
  const char *key = "sample_count -i ", *at = strstr(h, key);
  if (at == NULL) return 0;
  at += strlen(key);
  char *after;
  errno = 0;
  long long declared = strtoll(at, &after, 10);
  if (after == at || errno != 0 || declared <= n_frames) return 0;
  return aural__err_set(err, AURAL_ETRUNCATED,
                        "%s: truncated: the header declares %lld samples "
                        "(sample_count) but the file holds only %" PRId64,
                        path, declared, n_frames);
}

/* Whether a byte comes from the pipe fd after the header libsndfile read:
 * a header that declares no audio, with samples after it, is a recording
 * that was never finalised (check_wav() finds it in a file), and
 * libsndfile would read nothing of it. Waits for the writer's next write
 * or its end, as reading the pipe would. The byte is lost: the input is
 * refused when one comes. */
static int bytes_follow(int fd) {
  char c;
  return read(fd, &c, 1) == 1;
}

/* libsndfile's name of the major format of format ("CAF (Apple Core
 * Audio File)"). */
static const char *format_name(int format) {
  SF_FORMAT_INFO major = {.format = format & SF_FORMAT_TYPEMASK};
  sf_command(NULL, SFC_GET_FORMAT_INFO, &major, sizeof major);
  return major.name ? major.name : "unknown";
}

/* libsndfile keeps the reason its last failed open gave in one variable
 * for the whole process (sf_strerror(NULL)), which every open, failed or
 * not, writes: two threads opening at once could each report the other's
 * reason, or "No Error.". So the library's opens of what can be read
 * without waiting (a buffer, a regular file) are serialized, with the
 * reason read before the lock is let go. A pipe's open waits for its
 * writer, and the lock must not wait with it: a pipe that libsndfile
 * refuses is reported without libsndfile's reason. Opens by others in the
 * process can still overwrite it. */
static pthread_mutex_t sndfile_open_lock = PTHREAD_MUTEX_INITIALIZER;

/* Both opens end here. af is allocated, with af->src and af->path set;
 * af->src.fd (if any) is owned by af from now on. path names the input in
 * messages (in full: af->path may be shortened). Runs the checks before
 * and after libsndfile's own, and either fills *out or frees everything. */
static int open_source(aural_audiofile *af, const char *path,
                       aural_audiofile **out, aural_err *err) {
  int rc = 0;
  if (af->src.size_known &&
      ((rc = check_wav(&af->src, path, err)) < 0 ||
       (rc = check_ogg_vorbis(&af->src, path, err)) < 0 ||
       (rc = check_ogg_end(&af->src, path, err)) < 0)) {
    if (af->src.fd >= 0) close(af->src.fd);
    free(af);
    return rc;
  }

  SF_INFO sfi;
  memset(&sfi, 0, sizeof sfi);
  SNDFILE *sf;
  bool serialized = af->src.size_known;
  char why[256] = "";
  if (serialized) pthread_mutex_lock(&sndfile_open_lock);
  if (af->src.fd >= 0) {
    /* sf_open_fd closes the descriptor when it fails. */
    sf = sf_open_fd(af->src.fd, SFM_READ, &sfi, 1);
  } else {
    SF_VIRTUAL_IO vio = {vio_get_filelen, vio_seek, vio_read, vio_write,
                         vio_tell};
    sf = sf_open_virtual(&vio, SFM_READ, &sfi, &af->src);
  }
  if (sf == NULL && serialized)
    snprintf(why, sizeof why, " (libsndfile: %s)", sf_strerror(NULL));
  if (serialized) pthread_mutex_unlock(&sndfile_open_lock);
  if (sf == NULL) {
    /* libsndfile reads FLAC (and a few others) only where it can seek. */
    rc = aural__err_set(err, AURAL_EFORMAT,
                        "%s: not a readable audio file%s%s%s%s", path, why,
                        serialized ? "" : "; read from ",
                        serialized ? "" : af->src.kind,
                        serialized ? ""
                                   : ": FLAC and some other formats need a "
                                     "regular file");
    free(af);
    return rc;
  }
  long long declared, present;
  const char *what = NULL;
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
  else if (declared_too_long(sf, &declared, &present, &what) &&
           !is_unknown_length(declared, frame_bytes_of(&sfi)) &&
           declared != 0)
    rc = declared < 0
             ? aural__err_set(err, AURAL_ETRUNCATED,
                              "%s: truncated: the header declares more "
                              "bytes%s than the file holds",
                              path, what)
             : aural__err_set(err, AURAL_ETRUNCATED,
                              "%s: truncated: the header declares %lld "
                              "bytes%s but the file holds only %lld",
                              path, declared, what, present);
  else if ((sfi.format & SF_FORMAT_TYPEMASK) == SF_FORMAT_NIST &&
           af->src.size_known)
    rc = check_nist_length(&af->src, sfi.frames, path, err);
  else if (!af->src.size_known && pipe_seek_failed(sf))
    rc = aural__err_set(err, AURAL_EFORMAT,
                        "%s: not readable from %s: libsndfile must seek in "
                        "this format (%s); it needs a regular file",
                        path, af->src.kind, format_name(sfi.format));
  else if (sfi.frames == 0 && !af->src.size_known && af->src.fd >= 0 &&
           bytes_follow(af->src.fd))
    rc = aural__err_set(err, AURAL_EFORMAT,
                        "%s: the header declares 0 bytes of audio but more "
                        "follow (a recording that was never finalised? 'sox "
                        "--ignore-length' repairs it)",
                        path);
  if (rc < 0) {
    sf_close(sf);
    free(af);
    return rc;
  }

  af->sf = sf;
  af->info.rate_hz = sfi.samplerate;
  af->info.n_channels = sfi.channels;
  /* Formats whose length libsndfile cannot tell (some Ogg files) report
   * the largest count; from a pipe, others (NIST, Wave64, IRCAM, .au of
   * unknown size) count the frames of the largest file it can address
   * (about 2^62 bytes), and a header's mark of an unknown length reads as
   * a length. Such inputs are read to their end instead. */
  af->info.n_frames =
      sfi.frames == SF_COUNT_MAX ||
              (!af->src.size_known &&
               (sfi.frames >= PIPE_UNKNOWN_FRAMES ||
                declared_unknown(sf, frame_bytes_of(&sfi))))
          ? -1
          : sfi.frames;
  af->is_double = (sfi.format & SF_FORMAT_SUBMASK) == SF_FORMAT_DOUBLE;

  SF_FORMAT_INFO sub = {.format = sfi.format & SF_FORMAT_SUBMASK};
  sf_command(NULL, SFC_GET_FORMAT_INFO, &sub, sizeof sub);
  snprintf(af->info.format, sizeof af->info.format, "%s, %s",
           format_name(sfi.format), sub.name ? sub.name : "unknown");
  *out = af;
  return 0;
}

int aural_audiofile_open(const char *path, aural_audiofile **out,
                         aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "audio file: no out pointer");
  *out = NULL;
  struct stat st;
  /* A FIFO is a live input (a recorder writing into it): the open waits
   * for its writer, as any reader of a FIFO does. Callers that must not
   * wait (the daemon at start-up) accept only regular files. */
  int fd = aural__open_input(path, 0, 0, "an audio file", &st, err);
  if (fd < 0) return fd;
  aural_audiofile *af = calloc(1, sizeof *af);
  if (af == NULL) {
    close(fd);
    return aural__err_set(err, AURAL_ENOMEM, "%s: out of memory", path);
  }
  af->src.fd = fd;
  /* Pipes and devices have no size: the chunk walk is skipped for them. */
  af->src.size_known = S_ISREG(st.st_mode);
  af->src.kind = S_ISFIFO(st.st_mode)  ? "a pipe"
                 : S_ISCHR(st.st_mode) ? "a character device"
                 : S_ISBLK(st.st_mode) ? "a block device"
                 : S_ISSOCK(st.st_mode) ? "a socket"
                                        : "something other than a file";
  af->src.size = af->src.size_known ? (uint64_t)st.st_size : 0;
  snprintf(af->path, sizeof af->path, "%s", path);
  return open_source(af, path, out, err);
}

int aural_audiofile_open_memory(const void *data, size_t size,
                                const char *name, aural_audiofile **out,
                                aural_err *err) {
  if (out == NULL)
    return aural__err_set(err, AURAL_EINVAL, "audio file: no out pointer");
  *out = NULL;
  if (name == NULL) name = "(memory)";
  if (size == 0)
    return aural__err_set(err, AURAL_EEMPTY, "%s: file is empty (0 bytes)",
                          name);
  if (data == NULL)
    return aural__err_set(err, AURAL_EINVAL,
                          "%s: %zu bytes at a NULL address", name, size);
  if ((uint64_t)size > (uint64_t)SF_COUNT_MAX)
    return aural__err_set(err, AURAL_EINVAL,
                          "%s: %zu bytes is more than libsndfile can address",
                          name, size);
  aural_audiofile *af = calloc(1, sizeof *af);
  if (af == NULL)
    return aural__err_set(err, AURAL_ENOMEM, "%s: out of memory", name);
  af->src.fd = -1;
  af->src.data = data;
  af->src.size = size;
  af->src.size_known = 1;
  snprintf(af->path, sizeof af->path, "%s", name);
  return open_source(af, name, out, err);
}

void aural_audiofile_get_info(const aural_audiofile *af,
                              aural_audiofile_info *info) {
  *info = af->info;
}

/* Reads up to n frames into buf as floats. libsndfile converts a double
 * beyond float's range to infinity, which the check below would refuse as
 * an infinite sample although the file holds a finite one: doubles are
 * read as such and such a value is clamped to the largest float, as the
 * frontend clamps any value far beyond full scale (aural/frontend.h). */
static sf_count_t read_floats(aural_audiofile *af, float *buf, sf_count_t n) {
  if (!af->is_double) return sf_readf_float(af->sf, buf, n);
  double tmp[1024]; /* libsndfile opens at most 1,024 channels: per >= 1 */
  sf_count_t n_ch = af->info.n_channels, per = 1024 / n_ch, done = 0;
  while (done < n) {
    sf_count_t want = n - done < per ? n - done : per;
    sf_count_t got = sf_readf_double(af->sf, tmp, want);
    if (got <= 0) return done > 0 ? done : got;
    for (sf_count_t i = 0; i < got * n_ch; i++) {
      double v = tmp[i];
      buf[done * n_ch + i] =
          isfinite(v) && fabs(v) > FLT_MAX ? (v < 0 ? -FLT_MAX : FLT_MAX)
                                           : (float)v;
    }
    done += got;
    if (got < want) break;
  }
  return done;
}

int aural_audiofile_read(aural_audiofile *af, float *buf, size_t max_frames,
                         size_t *n_read, aural_err *err) {
  if (n_read == NULL || (buf == NULL && max_frames > 0))
    return aural__err_set(err, AURAL_EINVAL, "%s: read: no %s", af->path,
                          n_read == NULL ? "n_read" : "buffer");
  *n_read = 0;
  /* Compared unsigned: a count past INT64_MAX, cast, would turn negative
   * and reach libsndfile as a negative length. */
  if ((uint64_t)max_frames > (uint64_t)SF_COUNT_MAX)
    max_frames = (size_t)SF_COUNT_MAX;
  int64_t left = af->info.n_frames - af->n_done;
  if (af->info.n_frames >= 0 && (uint64_t)max_frames > (uint64_t)left)
    max_frames = (size_t)left;
  if (max_frames == 0) return 0;
  sf_count_t got = read_floats(af, buf, (sf_count_t)max_frames);
  if (got <= 0) {
    int e = sf_error(af->sf);
    if (e != SF_ERR_NO_ERROR)
      return aural__err_set(err, AURAL_EIO, "%s: read error at frame %" PRId64
                            ": %s", af->path, af->n_done, sf_strerror(af->sf));
    if (af->info.n_frames < 0 && !af->src.size_known &&
        ogg_ended_early(af->sf))
      return aural__err_set(err, AURAL_ETRUNCATED,
                            "%s: truncated: the Ogg stream ends at frame "
                            "%" PRId64 " without its end-of-stream page",
                            af->path, af->n_done);
    if (af->info.n_frames < 0) return 0; /* the end of a stream */
    return aural__err_set(err, AURAL_ETRUNCATED,
                          "%s: truncated: audio ends at frame %" PRId64
                          " of the %" PRId64 " declared",
                          af->path, af->n_done, af->info.n_frames);
  }
  /* The frames are read from the file whether or not they are refused:
   * counted as done, so that a later read knows where it is. */
  int64_t first = af->n_done;
  af->n_done += got;
  size_t n_ch = (size_t)af->info.n_channels;
  for (size_t i = 0; i < (size_t)got * n_ch; i++) {
    if (!isfinite(buf[i]))
      return aural__err_set(err, AURAL_ENONFINITE,
                            "%s: sample %s at frame %" PRId64 ", channel %zu "
                            "(%.3f s): non-finite samples are rejected",
                            af->path, isnan(buf[i]) ? "NaN" : "infinite",
                            first + (int64_t)(i / n_ch), i % n_ch,
                            (double)(first + (int64_t)(i / n_ch)) /
                                af->info.rate_hz);
  }
  *n_read = (size_t)got;
  return 0;
}

void aural_audiofile_close(aural_audiofile *af) {
  if (af == NULL) return;
  sf_close(af->sf);
  free(af);
}
