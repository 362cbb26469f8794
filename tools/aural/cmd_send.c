/*
 * aural send: pushes an audio file to a running aurald as a client stream
 * (AUDIO_OPEN, AUDIO_DATA blocks, AUDIO_CLOSE) and waits until the server
 * has encoded all of it.
 *
 * The file is sent at its own rate and channel count; the server converts.
 * With --realtime, block k leaves when its last sample would have been
 * captured by a live source: deadlines are computed from the start time and
 * the samples sent so far on the monotonic clock, so pacing does not drift
 * however long the file.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <aural.h>

#include "cli.h"
#include "client.h"
#include "words.h"

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

static void usage(FILE *to) {
  char sock[128];
  fprintf(to,
          "Usage: aural send [OPTIONS] INPUT\n"
          "\n"
          "Pushes INPUT (WAV, FLAC, Ogg/Vorbis, AIFF or anything else\n"
          "libsndfile opens) to a running aurald as a new stream, at the\n"
          "file's own sample rate and channel count, waits until the server\n"
          "has encoded all of it and prints a summary. Subscribers (see\n"
          "'aural sub') receive the stream's chunks under its name.\n"
          "\n"
          "Options:\n"
          "  -s, --socket PATH  aurald's socket (default: $AURAL_SOCKET,\n"
          "                     else $XDG_RUNTIME_DIR/aural.sock, else\n"
          "                     /run/aural/aural.sock for root, else\n"
          "                     /tmp/aural-UID/aural.sock; here %s)\n"
          "  -n, --name NAME    stream name: 1-64 printable ASCII characters,\n"
          "                     no spaces, '/' or '\\' (default: INPUT's base\n"
          "                     name, with other characters replaced by '_')\n"
          "      --realtime     send at the pace of a live source (1x real\n"
          "                     time) instead of as fast as aurald takes it\n"
          "      --format FMT   sample format on the wire: f32 (default;\n"
          "                     exactly what the file decodes to) or s16\n"
          "                     (half the bytes; exact for 16-bit files)\n"
          "      --block-ms N   milliseconds of audio per AUDIO_DATA message\n"
          "                     (1..10000, default 100)\n"
          "      --vocabulary W1,W2,...\n"
          "                     custom words (names, terms) the server's\n"
          "                     lexicon lacks, for the stream's words (every\n"
          "                     subscriber's): pronounced by espeak-ng; at\n"
          "                     most 64\n"
          "      --boost X      score added per custom word (default 5)\n"
          "  -q, --quiet        print nothing but errors\n"
          "  -h, --help         show this help\n"
          "\n"
          "Examples:\n"
          "  aural send speech.wav\n"
          "  aural send -s /tmp/x/aural.sock --name call-17 --realtime "
          "call.flac\n"
          "\n"
          "Exit status: 0 when the whole file was encoded, 1 on an error\n"
          "(unreadable file, aurald unreachable or refusing the audio), 2\n"
          "for a bad command line, 130 when interrupted.\n",
          client_default_socket(sock, sizeof sock));
}

typedef struct send_job {
  const char *in_path, *sock_path;
  char name[AURAL_PROTO_NAME_MAX + 1];
  int realtime, quiet;
  uint8_t format;      /* aural_sample_format */
  size_t block_ms;
  aural_msg_vocabulary vocabulary; /* --vocabulary, --boost */
  aural_client *cl;
  uint32_t stream_id;
  int stream_failed;   /* the server rejected our audio */
  char err[512];
} send_job;

/* After a failed write or a lost stream: the server may say why before
 * closing (a fatal ERROR such as SHUTDOWN). Reads what is left, briefly,
 * and puts the first fatal ERROR into job->err. */
static void explain_failure(send_job *job) {
  for (int i = 0; i < 100; i++) {
    struct pollfd p = {.fd = job->cl->fd, .events = POLLIN};
    if (poll(&p, 1, 200) <= 0) return;
    client_msg m;
    char e[400];
    if (client_read(job->cl, &m, e, sizeof e) != 0) return;
    bool fatal = false;
    if (m.h.type == AURAL_MSG_ERROR &&
        (client_error(&m, e, sizeof e, &fatal), fatal)) {
      snprintf(job->err, sizeof job->err, "aurald: %s", e);
      return;
    }
  }
}

/* Handles one message that arrived while sending: the only ones expected
 * are ERRORs about our AUDIO_DATA. Returns -1 when sending must stop. */
static int on_message(send_job *job, const client_msg *m) {
  if (m->h.type != AURAL_MSG_ERROR) return 0;
  bool fatal;
  char e[400];
  int code = client_error(m, e, sizeof e, &fatal);
  snprintf(job->err, sizeof job->err, "aurald: %s", e);
  if (code == AURAL_PROTO_ENO_STREAM) {
    /* Our stream is gone without our AUDIO_CLOSE: the server may be
     * stopping, and then a fatal SHUTDOWN follows that says so. */
    explain_failure(job);
    return -1;
  }
  if (fatal || code == AURAL_PROTO_EAUDIO) return -1;
  fprintf(stderr, "aural send: %s\n", job->err);
  return 0;
}

/* Reads every message already waiting, without blocking for new ones. */
static int drain(send_job *job) {
  for (;;) {
    struct pollfd p = {.fd = job->cl->fd, .events = POLLIN};
    int n = poll(&p, 1, 0);
    if (n < 0 && errno == EINTR) return -1;
    if (n <= 0) return 0;
    client_msg m;
    int rc = client_read(job->cl, &m, job->err, sizeof job->err);
    if (rc == 1)
      snprintf(job->err, sizeof job->err, "aurald closed the connection");
    if (rc != 0) return -1;
    if (on_message(job, &m) < 0) return -1;
  }
}

/* Waits for the reply of the given type to our stream; *m is it. */
static int wait_reply(send_job *job, uint8_t type, client_msg *m) {
  for (;;) {
    int rc = client_read(job->cl, m, job->err, sizeof job->err);
    if (rc == 1)
      snprintf(job->err, sizeof job->err,
               "aurald closed the connection before %s",
               aural_msg_type_name(type));
    if (rc != 0) return -1;
    if (m->h.type == type) return 0;
    if (m->h.type == AURAL_MSG_ERROR) {
      char e[400];
      client_error(m, e, sizeof e, NULL);
      snprintf(job->err, sizeof job->err, "aurald: %s", e);
      return -1;
    }
  }
}

/* Converts n interleaved float samples to the wire format in out. */
static void convert(const float *in, size_t n, uint8_t format, uint8_t *out) {
  if (format == AURAL_SAMPLE_F32) {
    for (size_t i = 0; i < n; i++) {
      uint32_t bits;
      memcpy(&bits, &in[i], 4);
      aural_put_u32(out + 4 * i, bits);
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    float v = in[i] * 32768.0f;
    long s = lrintf(v < -32768.0f ? -32768.0f : v > 32767.0f ? 32767.0f : v);
    aural_put_u16(out + 2 * i, (uint16_t)(int16_t)s);
  }
}

static void sleep_until(double t_s) {
  struct timespec ts = {.tv_sec = (time_t)t_s,
                        .tv_nsec = (long)((t_s - floor(t_s)) * 1e9)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR &&
         !interrupted) {
  }
}

static int run(send_job *job) {
  aural_err aerr = {0};
  aural_audiofile *af = NULL;
  float *pcm = NULL;
  uint8_t *wire = NULL;
  int rc = -1;

  if (aural_audiofile_open(job->in_path, &af, &aerr) < 0) {
    snprintf(job->err, sizeof job->err, "%s", aerr.msg);
    goto done;
  }
  aural_audiofile_info info;
  aural_audiofile_get_info(af, &info);
  uint32_t rate = (uint32_t)info.rate_hz;
  if ((double)rate != info.rate_hz || rate < 4000 || rate > 768000) {
    snprintf(job->err, sizeof job->err,
             "%s: sample rate %g Hz cannot be sent (the protocol takes "
             "whole rates of 4000..768000 Hz)",
             job->in_path, info.rate_hz);
    goto done;
  }

  if (client_connect(job->sock_path, "aural send", &job->cl, job->err,
                     sizeof job->err) < 0)
    goto done;
  aural_client *cl = job->cl;

  /* The block: block_ms of audio, but never over the request limit. */
  size_t channels = (size_t)info.n_channels;
  size_t bytes_per_frame = channels * (job->format == AURAL_SAMPLE_F32 ? 4 : 2);
  size_t block = (size_t)rate * job->block_ms / 1000;
  if (block == 0) block = 1;
  if (block * bytes_per_frame > cl->max_request_bytes)
    block = cl->max_request_bytes / bytes_per_frame;
  if (block == 0) {
    snprintf(job->err, sizeof job->err,
             "one frame of %zu channels is over aurald's request limit",
             channels);
    goto done;
  }
  pcm = malloc(block * channels * sizeof *pcm);
  wire = malloc(block * bytes_per_frame);
  if (pcm == NULL || wire == NULL) {
    snprintf(job->err, sizeof job->err, "out of memory");
    goto done;
  }

  aural_msg_audio_open ao = {.sample_rate = rate,
                             .channels = (uint32_t)channels,
                             .format = job->format,
                             .vocabulary = job->vocabulary};
  snprintf(ao.name, sizeof ao.name, "%s", job->name);
  uint8_t msg[AURAL_PROTO_HEADER_BYTES + 32768];
  size_t n = aural_proto_encode_audio_open(msg, sizeof msg, &ao);
  if (n == 0) {
    snprintf(job->err, sizeof job->err, "cannot encode AUDIO_OPEN");
    goto done;
  }
  client_msg m;
  if (client_send(cl, msg, n, job->err, sizeof job->err) < 0 ||
      wait_reply(job, AURAL_MSG_AUDIO_OPENED, &m) < 0) {
    char e[512];
    snprintf(e, sizeof e, "%s", job->err);
    snprintf(job->err, sizeof job->err, "cannot open stream '%s': %.400s",
             job->name, e);
    goto done;
  }
  job->stream_id = m.h.stream_id;
  snprintf(job->name, sizeof job->name, "%s", m.u.opened.name);

  double t0 = cli_now_s();
  uint64_t sent = 0;
  for (;;) {
    size_t got = 0;
    while (got < block) {
      size_t k = 0;
      if (aural_audiofile_read(af, pcm + got * channels, block - got, &k,
                               &aerr) < 0) {
        snprintf(job->err, sizeof job->err, "%s", aerr.msg);
        goto done;
      }
      if (k == 0) break;
      got += k;
    }
    if (got == 0) break;
    if (job->realtime) sleep_until(t0 + (double)(sent + got) / rate);
    if (interrupted) goto done;
    convert(pcm, got * channels, job->format, wire);
    int r = client_send_raw(cl, AURAL_MSG_AUDIO_DATA, job->stream_id, wire,
                            got * bytes_per_frame, job->err,
                            sizeof job->err);
    if (r < 0 && !interrupted) explain_failure(job);
    if (r < 0 || interrupted) goto done;
    sent += got;
    if (drain(job) < 0) goto done;
  }

  if (client_send_raw(cl, AURAL_MSG_AUDIO_CLOSE, job->stream_id, NULL, 0,
                      job->err, sizeof job->err) < 0) {
    if (!interrupted) explain_failure(job);
    goto done;
  }
  for (;;) {
    if (wait_reply(job, AURAL_MSG_AUDIO_CLOSED, &m) < 0) goto done;
    if (m.h.stream_id == job->stream_id) break;
  }
  int64_t frames = (int64_t)m.u.closed.frames,
          chunks = (int64_t)m.u.closed.chunks;
  double wall = cli_now_s() - t0, secs = (double)sent / rate;
  if (!job->quiet)
    printf("%s: %.2f s of %u Hz, %zu channel%s as %s -> stream %u '%s'\n"
           "  %lld frames, %lld chunks in %.2f s (%.1fx real time)\n",
           job->in_path, secs, rate, channels, channels == 1 ? "" : "s",
           aural_sample_format_name(job->format), job->stream_id, job->name,
           (long long)frames, (long long)chunks, wall,
           wall > 0 ? secs / wall : 0.0);
  rc = 0;
done:
  if (interrupted) snprintf(job->err, sizeof job->err, "interrupted");
  if (rc < 0) fprintf(stderr, "aural send: %s\n", job->err);
  client_close(job->cl);
  free(pcm);
  free(wire);
  aural_audiofile_close(af);
  return rc;
}

/* The default stream name: INPUT's base name, with the characters a name
 * may not hold replaced by '_', cut to the longest name. */
static void default_name(const char *path, char *out, size_t len) {
  char *copy = strdup(path);
  const char *base = copy ? basename(copy) : path;
  snprintf(out, len, "%s", base);
  for (char *p = out; *p; p++)
    if (*p < 0x21 || *p > 0x7e || *p == '/' || *p == '\\') *p = '_';
  if (out[0] == '\0') snprintf(out, len, "audio");
  free(copy);
}

int cmd_send(int argc, char **argv) {
  static const struct option opts[] = {
      {"socket", required_argument, NULL, 's'},
      {"name", required_argument, NULL, 'n'},
      {"realtime", no_argument, NULL, 'R'},
      {"format", required_argument, NULL, 'F'},
      {"block-ms", required_argument, NULL, 'B'},
      {"quiet", no_argument, NULL, 'q'},
      {"vocabulary", required_argument, NULL, 'V'},
      {"boost", required_argument, NULL, 'X'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  send_job job = {.format = AURAL_SAMPLE_F32, .block_ms = 100};
  const char *name = NULL, *vocabulary = NULL, *boost = NULL;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "s:n:qh", opts, NULL)) != -1) {
    switch (c) {
    case 's': job.sock_path = optarg; break;
    case 'n': name = optarg; break;
    case 'R': job.realtime = 1; break;
    case 'F':
      if (strcmp(optarg, "f32") == 0) {
        job.format = AURAL_SAMPLE_F32;
      } else if (strcmp(optarg, "s16") == 0) {
        job.format = AURAL_SAMPLE_S16;
      } else {
        fprintf(stderr, "aural send: --format %s: expected f32 or s16\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'B':
      if (cli_parse_size(optarg, 1, 10000, &job.block_ms) < 0) {
        fprintf(stderr, "aural send: --block-ms %s: expected an integer in "
                        "1..10000\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'q': job.quiet = 1; break;
    case 'V': vocabulary = optarg; break;
    case 'X': boost = optarg; break;
    case 'h': usage(stdout); return EXIT_OK;
    default:
      fprintf(stderr, "(see 'aural send --help')\n");
      return EXIT_USAGE;
    }
  }
  char why[200];
  if (boost != NULL && vocabulary == NULL) {
    fprintf(stderr, "aural send: --boost needs --vocabulary\n");
    return EXIT_USAGE;
  }
  if (vocabulary != NULL &&
      words_request(vocabulary, boost, &job.vocabulary, why, sizeof why) < 0) {
    fprintf(stderr, "aural send: %s\n", why);
    return EXIT_USAGE;
  }
  if (optind != argc - 1) {
    fprintf(stderr, "aural send: exactly one INPUT file is required\n"
                    "(see 'aural send --help')\n");
    return EXIT_USAGE;
  }
  job.in_path = argv[optind];
  if (name != NULL) {
    if (!aural_proto_valid_name(name)) {
      fprintf(stderr,
              "aural send: --name '%s': a stream name is 1-64 printable "
              "ASCII characters without spaces, '/' or '\\'\n",
              name);
      return EXIT_USAGE;
    }
    snprintf(job.name, sizeof job.name, "%s", name);
  } else {
    default_name(job.in_path, job.name, sizeof job.name);
  }

  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  int rc = run(&job);
  if (interrupted) return EXIT_SIGNAL;
  return rc < 0 ? EXIT_FAIL : EXIT_OK;
}
