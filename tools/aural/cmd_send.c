/*
 * aural send: pushes an audio file to a running aurald as a client stream
 * (AUDIO_OPEN, AUDIO_DATA blocks, AUDIO_CLOSE) and waits until the server
 * has encoded all of it; or, with --cluster, writes it to Redis as a new
 * cluster stream (docs/CLUSTER.md): the stream's meta hash, an
 * announcement, audio entries whose IDs are their first frame, and an end
 * entry, which one node encodes.
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
#include <unistd.h>

#include <aural.h>

#include "cli.h"
#include "client.h"
#include "redis.h"
#include "words.h"

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) {
  interrupted = sig;
  cli_stop_now_on_next();
}

static void usage(FILE *to) {
  char sock[128];
  fprintf(to,
          "Usage: aural send [OPTIONS] INPUT\n"
          "       aural send --cluster URL [OPTIONS] INPUT\n"
          "\n"
          "Pushes INPUT (WAV, FLAC, Ogg/Vorbis, AIFF or anything else\n"
          "libsndfile opens; '-' reads the whole of standard input first)\n"
          "to a running aurald as a new stream, at the file's own sample\n"
          "rate and channel count, waits until the server has encoded all\n"
          "of it and prints a summary. Subscribers (see 'aural sub') receive\n"
          "the stream's chunks under its name. With --cluster, INPUT is\n"
          "written to Redis as a new cluster stream instead, which one of\n"
          "the cluster's aurald nodes encodes; the command ends when all of\n"
          "the audio is stored.\n"
          "\n"
          "Options:\n"
          "  -s, --socket PATH  aurald's socket (default: $AURAL_SOCKET,\n"
          "                     else $XDG_RUNTIME_DIR/aural.sock, else\n"
          "                     /run/aural/aural.sock for root, else\n"
          "                     /tmp/aural-UID/aural.sock;\n"
          "                     here %s)\n"
          CLUSTER_HELP
          "  -n, --name NAME    stream name: 1-64 printable ASCII characters,\n"
          "                     no spaces, '/' or '\\' (in a cluster, no '{'\n"
          "                     or '}' either; a name already in the cluster\n"
          "                     is refused) (default: INPUT's base name,\n"
          "                     with other characters replaced by '_', cut\n"
          "                     to 64; 'stdin' for '-')\n"
          "      --realtime     send at the pace of a live source (1x real\n"
          "                     time) instead of as fast as aurald takes it\n"
          "      --format FMT   sample format on the wire: f32 (default;\n"
          "                     exactly what the file decodes to) or s16\n"
          "                     (half the bytes; exact for 16-bit files)\n"
          "      --block-ms N   milliseconds of audio per AUDIO_DATA message\n"
          "                     or audio entry (1..10000, default 100; at\n"
          "                     most 1000 with --cluster)\n"
          "      --vocabulary W1,W2,...\n"
          "                     custom words (names, terms) the server's\n"
          "                     lexicon lacks, for the stream's words (every\n"
          "                     subscriber's): pronounced by espeak-ng; at\n"
          "                     most 64\n"
          "      --boost X      score added per custom word (default 7)\n"
          "      --native       with --cluster: send the audio at its own\n"
          "                     rate and channels; by default it goes as\n"
          "                     mono at the model's rate (from a live node),\n"
          "                     converted as aurald would, so that a stream\n"
          "                     another node resumes is bit-identical\n"
          "  -q, --quiet        print nothing but errors\n"
          "  -h, --help         show this help\n"
          "\n"
          "Examples:\n"
          "  aural send speech.wav\n"
          "  aural send -s /tmp/x/aural.sock --name call-17 --realtime "
          "call.flac\n"
          "  aural send --cluster redis://10.0.0.5/0 --name call-17 call.flac\n"
          "\n"
          "Ctrl-C ends the stream with the audio sent so far; a second\n"
          "Ctrl-C ends the command at once (as while it waits on a FIFO).\n"
          "\n"
          "Exit status: 0 when the whole file was encoded (with --cluster:\n"
          "stored), 1 on an error (unreadable file, aurald or Redis\n"
          "unreachable or refusing the audio, a cluster stream of that name\n"
          "already there), 2 for a bad command line, 130 when interrupted\n"
          "(a cluster stream then ends where it was).\n",
          client_default_socket(sock, sizeof sock));
}

/* The audio to send: INPUT decoded to float, then converted block by
 * block into the wire format. */
typedef struct send_audio {
  aural_audiofile *af;
  void *stdin_bytes;     /* INPUT "-": standard input, read whole, for af */
  uint32_t rate;         /* Hz */
  size_t channels;
  size_t bytes_per_frame; /* on the wire */
  size_t block;          /* frames per block */
  float *pcm;            /* (block, channels) */
  uint8_t *wire;         /* block * bytes_per_frame */
} send_audio;

/* Audio converted as aurald's frontend would (downmix, then resampling)
 * to mono at the cluster's model rate, so that the node runs neither and
 * a stream it resumes is bit-identical to one never interrupted
 * (docs/CLUSTER.md §3). */
typedef struct send_convert {
  bool on;
  uint32_t rate;         /* the model's */
  aural_resampler *rs;   /* NULL when the rate is already the model's */
  float *mono;           /* (block) */
  float *out;            /* converted samples not yet stored */
  size_t n, cap;
  uint8_t *wire;         /* (cap) samples in the wire format */
} send_convert;

typedef struct send_job {
  const char *in_path, *sock_path;
  const char *cluster_url, *password_file; /* --cluster */
  char name[AURAL_PROTO_NAME_MAX + 1];
  int realtime, quiet;
  uint8_t format;      /* aural_sample_format */
  size_t block_ms;
  aural_msg_vocabulary vocabulary; /* --vocabulary, --boost */
  int native;          /* --native: no conversion to the model's rate */
  send_audio audio;
  send_convert conv;   /* --cluster: to mono at the model's rate */
  aural_client *cl;    /* aurald, or ... */
  cluster_conn redis;  /* ... the cluster's Redis */
  uint32_t stream_id;
  bool opened;         /* the server opened our stream */
  uint64_t sent;       /* frames sent in AUDIO_DATA */
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

/* INPUT for messages. */
static const char *input_name(const send_job *job) {
  return strcmp(job->in_path, "-") == 0 ? "standard input" : job->in_path;
}

/* --- the audio -------------------------------------------------------------- */

/* Opens INPUT (a file, or "-" for standard input) and checks that its
 * rate can be sent. */
static int audio_open(send_job *job) {
  send_audio *a = &job->audio;
  aural_err aerr = {0};
  int rc;
  if (strcmp(job->in_path, "-") == 0) {
    size_t n;
    if (cli_read_stdin(&a->stdin_bytes, &n, &interrupted, job->err,
                       sizeof job->err) < 0)
      return -1;
    rc = aural_audiofile_open_memory(a->stdin_bytes, n, "standard input",
                                     &a->af, &aerr);
  } else {
    rc = aural_audiofile_open(job->in_path, &a->af, &aerr);
  }
  if (rc < 0) {
    snprintf(job->err, sizeof job->err, "%s", aerr.msg);
    return -1;
  }
  aural_audiofile_info info;
  aural_audiofile_get_info(a->af, &info);
  a->rate = (uint32_t)info.rate_hz;
  if ((double)a->rate != info.rate_hz || a->rate < 4000 || a->rate > 768000) {
    snprintf(job->err, sizeof job->err,
             "%s: sample rate %g Hz cannot be sent (the protocol takes "
             "whole rates of 4000..768000 Hz)",
             input_name(job), info.rate_hz);
    return -1;
  }
  a->channels = (size_t)info.n_channels;
  a->bytes_per_frame =
      a->channels * (job->format == AURAL_SAMPLE_F32 ? 4 : 2);
  return 0;
}

/* Sizes the blocks: block_ms of audio, but never over max_bytes. */
static int audio_blocks(send_job *job, size_t max_bytes, const char *limit) {
  send_audio *a = &job->audio;
  a->block = (size_t)a->rate * job->block_ms / 1000;
  if (a->block == 0) a->block = 1;
  if (a->block * a->bytes_per_frame > max_bytes)
    a->block = max_bytes / a->bytes_per_frame;
  if (a->block == 0) {
    snprintf(job->err, sizeof job->err,
             "one frame of %zu channels is over %s", a->channels, limit);
    return -1;
  }
  a->pcm = malloc(a->block * a->channels * sizeof *a->pcm);
  a->wire = malloc(a->block * a->bytes_per_frame);
  if (a->pcm == NULL || a->wire == NULL) {
    snprintf(job->err, sizeof job->err, "out of memory");
    return -1;
  }
  return 0;
}

/* Reads the next block into a->wire; *got frames, 0 at the end. */
static int audio_next(send_job *job, size_t *got) {
  send_audio *a = &job->audio;
  aural_err aerr = {0};
  *got = 0;
  while (*got < a->block) {
    size_t k = 0;
    if (aural_audiofile_read(a->af, a->pcm + *got * a->channels,
                             a->block - *got, &k, &aerr) < 0) {
      snprintf(job->err, sizeof job->err, "%s", aerr.msg);
      return -1;
    }
    if (k == 0) break;
    *got += k;
  }
  convert(a->pcm, *got * a->channels, job->format, a->wire);
  return 0;
}

static void audio_close(send_audio *a) {
  aural_audiofile_close(a->af);
  free(a->stdin_bytes);
  free(a->pcm);
  free(a->wire);
  *a = (send_audio){0};
}

/* --- aurald --------------------------------------------------------------- */

/* Opens the stream with AUDIO_OPEN; job->stream_id and name as the server
 * says. */
static int open_stream(send_job *job) {
  aural_msg_audio_open ao = {.sample_rate = job->audio.rate,
                             .channels = (uint32_t)job->audio.channels,
                             .format = job->format,
                             .vocabulary = job->vocabulary};
  snprintf(ao.name, sizeof ao.name, "%s", job->name);
  uint8_t msg[AURAL_PROTO_HEADER_BYTES + 32768];
  size_t n = aural_proto_encode_audio_open(msg, sizeof msg, &ao);
  if (n == 0) {
    snprintf(job->err, sizeof job->err, "cannot encode AUDIO_OPEN");
    return -1;
  }
  client_msg m;
  if (client_send(job->cl, msg, n, job->err, sizeof job->err) < 0 ||
      wait_reply(job, AURAL_MSG_AUDIO_OPENED, &m) < 0) {
    char e[512];
    snprintf(e, sizeof e, "%s", job->err);
    snprintf(job->err, sizeof job->err, "cannot open stream '%s': %.400s",
             job->name, e);
    return -1;
  }
  job->stream_id = m.h.stream_id;
  job->opened = true;
  snprintf(job->name, sizeof job->name, "%s", m.u.opened.name);
  /* From here the server may rightly be slow to read (flow control) and
   * AUDIO_CLOSED comes once the stream is computed: no time limit. */
  job->cl->timeout_ms = -1;
  return 0;
}

static int run_local(send_job *job) {
  if (client_connect(job->sock_path, "aural send", &job->cl, job->err,
                     sizeof job->err) < 0 ||
      audio_blocks(job, job->cl->max_request_bytes,
                   "aurald's request limit") < 0 ||
      open_stream(job) < 0)
    return -1;
  aural_client *cl = job->cl;
  send_audio *a = &job->audio;

  double t0 = cli_now_s();
  uint64_t sent = 0;
  job->sent = 0;
  for (;;) {
    size_t got;
    if (audio_next(job, &got) < 0) return -1;
    if (got == 0) break;
    if (job->realtime) sleep_until(t0 + (double)(sent + got) / a->rate);
    if (interrupted) return -1;
    int r = client_send_raw(cl, AURAL_MSG_AUDIO_DATA, job->stream_id, a->wire,
                            got * a->bytes_per_frame, job->err,
                            sizeof job->err);
    if (r < 0 && !interrupted) explain_failure(job);
    if (r < 0 || interrupted) return -1;
    sent += got;
    job->sent = sent;
    if (drain(job) < 0) return -1;
  }

  if (client_send_raw(cl, AURAL_MSG_AUDIO_CLOSE, job->stream_id, NULL, 0,
                      job->err, sizeof job->err) < 0) {
    if (!interrupted) explain_failure(job);
    return -1;
  }
  client_msg m;
  for (;;) {
    if (wait_reply(job, AURAL_MSG_AUDIO_CLOSED, &m) < 0) return -1;
    if (m.h.stream_id == job->stream_id) break;
  }
  int64_t frames = (int64_t)m.u.closed.frames,
          chunks = (int64_t)m.u.closed.chunks;
  double wall = cli_now_s() - t0, secs = (double)sent / a->rate;
  if (!job->quiet)
    printf("%s: %.2f s of %u Hz, %zu channel%s as %s -> stream %u '%s'\n"
           "  %lld frames, %lld chunks in %.2f s (%.1fx real time)\n",
           input_name(job), secs, a->rate, a->channels,
           a->channels == 1 ? "" : "s",
           aural_sample_format_name(job->format), job->stream_id, job->name,
           (long long)frames, (long long)chunks, wall,
           wall > 0 ? secs / wall : 0.0);
  return 0;
}

/* --- the cluster ------------------------------------------------------------ */

/* Most bytes of one audio entry (which holds at most a second besides). */
#define ENTRY_MAX_BYTES ((size_t)8 << 20)

/* The model's sample rate from a live node's heartbeat, or 0 when no
 * node is alive (or none says). The heartbeat is read as JSON, its rate
 * as a whole number of Hz: a heartbeat another program wrote (a rate of
 * 16000.5, a "sample_rate" inside another field) is passed over, never
 * a rate to resample to. */
static double cluster_model_rate(send_job *job) {
  aural_json *js = malloc(sizeof *js);
  if (js == NULL) return 0;
  cluster_args a;
  cluster_args_init(&a, "ZRANGE");
  cluster_arg(&a, AURAL_CLUSTER_NODES);
  cluster_arg(&a, "0");
  cluster_arg(&a, "-1");
  redisReply *ids = cluster_run(&job->redis, &a, job->err, sizeof job->err);
  double rate = 0;
  for (size_t i = 0; ids != NULL && ids->type == REDIS_REPLY_ARRAY &&
                     i < ids->elements && rate == 0;
       i++) {
    cluster_args_init(&a, "GET");
    cluster_arg_fmt(&a, "%s%s", AURAL_CLUSTER_NODE_PREFIX,
                    ids->element[i]->str);
    redisReply *beat =
        cluster_run(&job->redis, &a, job->err, sizeof job->err);
    char why[160];
    int64_t hz;
    if (beat != NULL && beat->type == REDIS_REPLY_STRING &&
        aural_json_parse_lists(js, beat->str, beat->len, why, sizeof why) ==
            0 &&
        aural_json_int(js, aural_json_get(js, 0, "sample_rate"), 4000,
                       768000, &hz) == 0)
      rate = (double)hz;
    freeReplyObject(beat);
  }
  freeReplyObject(ids);
  free(js);
  job->err[0] = '\0';
  return rate >= 4000 && rate <= 768000 ? rate : 0;
}

/* Converts when a node says the model's rate and the audio is not mono at
 * it already (unless --native). */
static int convert_setup(send_job *job) {
  send_convert *cv = &job->conv;
  const send_audio *a = &job->audio;
  double rate = job->native ? 0 : cluster_model_rate(job);
  if (rate == 0 || (rate == a->rate && a->channels == 1)) return 0;
  aural_err aerr = {0};
  if (rate != a->rate &&
      aural_resampler_create(a->rate, rate, &cv->rs, &aerr) < 0) {
    snprintf(job->err, sizeof job->err, "%s", aerr.msg);
    return -1;
  }
  cv->on = true;
  cv->rate = (uint32_t)rate;
  cv->mono = malloc(a->block * sizeof *cv->mono);
  if (cv->mono == NULL) {
    snprintf(job->err, sizeof job->err, "out of memory");
    return -1;
  }
  return 0;
}

static int keep_samples(void *user, const float *x, size_t n) {
  send_convert *cv = user;
  if (cv->n + n > cv->cap) {
    size_t cap = 2 * (cv->n + n);
    float *out = realloc(cv->out, cap * sizeof *out);
    uint8_t *wire = realloc(cv->wire, cap * 4);
    if (out != NULL) cv->out = out;
    if (wire != NULL) cv->wire = wire;
    if (out == NULL || wire == NULL) return AURAL_ENOMEM;
    cv->cap = cap;
  }
  memcpy(cv->out + cv->n, x, n * sizeof *x);
  cv->n += n;
  return 0;
}

/* got frames of a->pcm through the downmix and the resampler (none: the
 * resampler's tail) into conv.out. */
static int convert_block(send_job *job, size_t got, bool last) {
  send_convert *cv = &job->conv;
  const send_audio *a = &job->audio;
  int rc = 0;
  if (got > 0) {
    aural_frontend_downmix(a->pcm, got, (int)a->channels, cv->mono, NULL,
                           NULL);
    rc = cv->rs != NULL
             ? aural_resampler_push(cv->rs, cv->mono, got, keep_samples, cv)
             : keep_samples(cv, cv->mono, got);
  }
  if (rc == 0 && last && cv->rs != NULL)
    rc = aural_resampler_finish(cv->rs, keep_samples, cv);
  if (rc < 0) snprintf(job->err, sizeof job->err, "converting: %s",
                       aural_strerror(rc));
  return rc;
}

static void convert_free(send_convert *cv) {
  aural_resampler_destroy(cv->rs);
  free(cv->mono);
  free(cv->out);
  free(cv->wire);
  *cv = (send_convert){0};
}

/* Claims NAME by creating its meta hash; refused when it exists. */
static int claim_stream(send_job *job, const char *meta) {
  cluster_args a;
  cluster_args_init(&a, "HSETNX");
  cluster_arg(&a, meta);
  cluster_arg(&a, "created_us");
  cluster_arg_fmt(&a, "%lld", (long long)client_realtime_us());
  redisReply *r = cluster_run(&job->redis, &a, job->err, sizeof job->err);
  if (r == NULL) return -1;
  bool taken = r->type == REDIS_REPLY_INTEGER && r->integer == 0;
  freeReplyObject(r);
  if (taken)
    snprintf(job->err, sizeof job->err,
             "stream %s already exists in the cluster (%s)", job->name,
             job->redis.url_text);
  return taken ? -1 : 0;
}

/* Appends the fields rate, channels and format. */
static void format_fields(const send_job *job, cluster_args *a) {
  const send_convert *cv = &job->conv;
  cluster_arg(a, "rate");
  cluster_arg_fmt(a, "%u", cv->on ? cv->rate : job->audio.rate);
  cluster_arg(a, "channels");
  cluster_arg_fmt(a, "%zu", cv->on ? (size_t)1 : job->audio.channels);
  cluster_arg(a, "format");
  cluster_arg(a, aural_sample_format_name(job->format));
}

/* The stream's format in its meta hash, then its announcement, which one
 * node takes up. words: room for the comma-separated vocabulary. */
static int announce(send_job *job, const char *meta) {
  cluster_args a;
  cluster_args_init(&a, "HSET");
  cluster_arg(&a, meta);
  format_fields(job, &a);
  if (cluster_do(&job->redis, &a, job->err, sizeof job->err) < 0) return -1;

  cluster_args_init(&a, "XADD");
  cluster_arg(&a, AURAL_CLUSTER_ANNOUNCE);
  cluster_arg(&a, "*");
  cluster_arg(&a, "name");
  cluster_arg(&a, job->name);
  format_fields(job, &a);
  const aural_msg_vocabulary *v = &job->vocabulary;
  char words[AURAL_PROTO_VOCAB_MAX * (AURAL_PROTO_VOCAB_WORD_MAX + 1) + 1];
  size_t at = 0;
  for (uint32_t i = 0; i < v->n_words; i++)
    at += (size_t)snprintf(words + at, sizeof words - at, "%s%s",
                           i > 0 ? "," : "", v->words[i]);
  if (v->n_words > 0) {
    cluster_arg(&a, "vocabulary");
    cluster_arg(&a, words);
  }
  /* Here, not in the block below: the arguments are pointers that
   * cluster_do reads. */
  char boost[32];
  if (v->has_boost) {
    /* Plain decimals, which nodes read (aural_cluster_parse_real): %g
     * would write 1e-05. */
    int n = snprintf(boost, sizeof boost, "%.6f", v->boost);
    while (boost[n - 1] == '0') boost[--n] = '\0';
    if (boost[n - 1] == '.') boost[--n] = '\0';
    cluster_arg(&a, "boost");
    cluster_arg(&a, boost);
  }
  return cluster_do(&job->redis, &a, job->err, sizeof job->err);
}

/* Stores one entry of the audio stream with ID first-1. Lost replies are
 * retried; an ID Redis finds taken was stored by an earlier try
 * (CLUSTER.md, "Why these IDs"). */
static int add_audio(send_job *job, const char *key, uint64_t first,
                     const char *field, const void *p, size_t n) {
  cluster_args a;
  cluster_args_init(&a, "XADD");
  cluster_arg(&a, key);
  cluster_arg_fmt(&a, "%llu-1", (unsigned long long)first);
  cluster_arg(&a, field);
  cluster_arg_bin(&a, p, n);
  redisReply *r =
      cluster_run_again(&job->redis, &a, 3, job->err, sizeof job->err);
  if (r == NULL && !cluster_said_id_taken(&job->redis)) return -1;
  freeReplyObject(r);
  return 0;
}

/* The converted samples waiting, stored in entries of at most a second
 * (the node refuses longer ones). *stored: frames stored. */
static int store_converted(send_job *job, const char *key, uint64_t *stored,
                           uint64_t *entries) {
  send_convert *cv = &job->conv;
  size_t bytes = job->format == AURAL_SAMPLE_F32 ? 4 : 2;
  for (size_t at = 0, k; at < cv->n; at += k) {
    k = cv->n - at < cv->rate ? cv->n - at : cv->rate;
    convert(cv->out + at, k, job->format, cv->wire);
    if (add_audio(job, key, *stored, "pcm", cv->wire, k * bytes) < 0)
      return -1;
    *stored += k;
    (*entries)++;
  }
  cv->n = 0;
  return 0;
}

/* One block of got frames (0: the end of the file), as it is or
 * converted. */
static int store_block(send_job *job, const char *key, size_t got,
                       uint64_t *stored, uint64_t *entries) {
  if (job->conv.on)
    return convert_block(job, got, got == 0) < 0
               ? -1
               : store_converted(job, key, stored, entries);
  if (got == 0) return 0;
  if (add_audio(job, key, *stored, "pcm", job->audio.wire,
                got * job->audio.bytes_per_frame) < 0)
    return -1;
  *stored += got;
  (*entries)++;
  return 0;
}

/* The rate of the audio stored. */
static double stored_rate(const send_job *job) {
  return job->conv.on ? job->conv.rate : job->audio.rate;
}

/* Writes the audio as entries of at most a second, then the end entry.
 * An interruption or a file that turns out bad ends the stream where it
 * is (its node then finishes it), and fails. *stored: frames stored. */
static int store_audio(send_job *job, const char *key, uint64_t *stored,
                       uint64_t *entries) {
  send_audio *a = &job->audio;
  double t0 = cli_now_s();
  uint64_t read = 0;
  size_t got;
  int rc;
  while ((rc = audio_next(job, &got)) == 0 && got > 0) {
    read += got;
    if (job->realtime) sleep_until(t0 + (double)read / a->rate);
    if (interrupted) {
      rc = -1;
      break;
    }
    if (store_block(job, key, got, stored, entries) < 0) goto lost;
  }
  if (rc == 0 && store_block(job, key, 0, stored, entries) < 0) goto lost;
  char why[sizeof job->err];
  snprintf(why, sizeof why, "%s", job->err);
  if (add_audio(job, key, *stored, "end", "1", 1) < 0) goto lost;
  if (rc < 0) {
    fprintf(stderr, "aural send: stream '%s' ended after %.2f s of audio\n",
            job->name, (double)*stored / stored_rate(job));
    snprintf(job->err, sizeof job->err, "%s", why);
  }
  return rc;
lost:;
  size_t n = strlen(job->err);
  snprintf(job->err + n, sizeof job->err - n,
           "; stream '%s' holds %.2f s of audio and no end", job->name,
           (double)*stored / stored_rate(job));
  return -1;
}

static int run_cluster(send_job *job) {
  char meta[AURAL_CLUSTER_KEY_MAX], audio[AURAL_CLUSTER_KEY_MAX];
  aural_cluster_key(meta, sizeof meta, job->name, AURAL_CLUSTER_META);
  aural_cluster_key(audio, sizeof audio, job->name, AURAL_CLUSTER_AUDIO);
  if (cluster_connect(&job->redis, job->cluster_url, job->password_file,
                      job->err, sizeof job->err) < 0 ||
      audio_blocks(job, ENTRY_MAX_BYTES, "the largest audio entry") < 0 ||
      convert_setup(job) < 0 || claim_stream(job, meta) < 0 ||
      announce(job, meta) < 0)
    return -1;
  const send_audio *a = &job->audio;
  double t0 = cli_now_s();
  uint64_t stored = 0, entries = 0;
  int rc = store_audio(job, audio, &stored, &entries);
  double wall = cli_now_s() - t0, secs = (double)stored / stored_rate(job);
  if (rc == 0 && !job->quiet)
    printf("%s: %.2f s of %u Hz, %zu channel%s as %s%s -> cluster stream "
           "'%s' at %s\n"
           "  %llu audio entries in %.2f s (%.1fx real time)\n",
           input_name(job), secs, a->rate, a->channels,
           a->channels == 1 ? "" : "s",
           aural_sample_format_name(job->format),
           job->conv.on ? " (mono at the model's rate)" : "", job->name,
           job->redis.url_text, (unsigned long long)entries, wall,
           wall > 0 ? secs / wall : 0.0);
  return rc;
}

/* --- the command ---------------------------------------------------------- */

static int run(send_job *job) {
  int rc = audio_open(job);
  if (rc == 0) rc = job->cluster_url ? run_cluster(job) : run_local(job);
  if (interrupted) snprintf(job->err, sizeof job->err, "interrupted");
  if (rc < 0) fprintf(stderr, "aural send: %s\n", job->err);
  /* A stream that ended early (interrupted, aurald stopping or gone)
   * holds the audio sent so far: how much, as --cluster says. */
  if (rc < 0 && job->opened)
    fprintf(stderr, "aural send: stream '%s' ended after %.2f s of audio "
                    "sent\n",
            job->name, (double)job->sent / job->audio.rate);
  client_close(job->cl);
  cluster_close(&job->redis);
  audio_close(&job->audio);
  convert_free(&job->conv);
  return rc;
}

/* The default stream name: INPUT's base name ("stdin" for "-"), with the
 * characters a name may not hold replaced by '_' (and the braces a
 * cluster name may not hold), cut to the longest name. */
static void default_name(const char *path, bool cluster, char *out,
                         size_t len) {
  char *copy = strdup(path);
  const char *base = copy ? basename(copy) : path;
  snprintf(out, len, "%s", strcmp(path, "-") == 0 ? "stdin" : base);
  for (char *p = out; *p; p++)
    if (*p < 0x21 || *p > 0x7e || *p == '/' || *p == '\\' ||
        (cluster && (*p == '{' || *p == '}')))
      *p = '_';
  if (out[0] == '\0') snprintf(out, len, "audio");
  free(copy);
}

/* What is wrong with the command line beyond each option's own value, or
 * NULL; fills in the name. why: room for a message. */
static const char *check_options(send_job *job, const char *name, char *why,
                                 size_t why_len) {
  bool cluster = job->cluster_url != NULL;
  const char *bad = cluster_options(job->cluster_url, job->password_file,
                                    job->sock_path, why, why_len);
  if (bad != NULL) return bad;
  if (!cluster && job->native) return "--native goes with --cluster";
  if (cluster && job->block_ms > 1000 * AURAL_CLUSTER_ENTRY_MAX_S)
    return "--block-ms: at most 1000 with --cluster (an audio entry holds "
           "at most a second)";
  if (name == NULL) {
    default_name(job->in_path, cluster, job->name, sizeof job->name);
    return NULL;
  }
  if (!(cluster ? aural_cluster_valid_name(name)
                : aural_proto_valid_name(name))) {
    snprintf(why, why_len,
             "--name '%s': a stream name is 1-64 printable ASCII characters "
             "without spaces, '/' or '\\'%s",
             name, cluster ? " (or, in a cluster, '{' or '}')" : "");
    return why;
  }
  snprintf(job->name, sizeof job->name, "%s", name);
  return NULL;
}

int cmd_send(int argc, char **argv) {
  static const struct option opts[] = {
      {"socket", required_argument, NULL, 's'},
      {"cluster", required_argument, NULL, 'C'},
      {"cluster-password-file", required_argument, NULL, 'P'},
      {"name", required_argument, NULL, 'n'},
      {"realtime", no_argument, NULL, 'R'},
      {"format", required_argument, NULL, 'F'},
      {"block-ms", required_argument, NULL, 'B'},
      {"quiet", no_argument, NULL, 'q'},
      {"vocabulary", required_argument, NULL, 'V'},
      {"boost", required_argument, NULL, 'X'},
      {"native", no_argument, NULL, 'N'},
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
    case 'C': job.cluster_url = optarg; break;
    case 'P': job.password_file = optarg; break;
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
    case 'N': job.native = 1; break;
    case 'h': usage(stdout); return EXIT_OK;
    default:
      fprintf(stderr, "(see 'aural send --help')\n");
      return EXIT_USAGE;
    }
  }
  char why[600];
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
  const char *bad = check_options(&job, name, why, sizeof why);
  if (bad != NULL) {
    fprintf(stderr, "aural send: %s\n(see 'aural send --help')\n", bad);
    return EXIT_USAGE;
  }

  /* The first Ctrl-C (or SIGTERM) stops where it can: the stream ends
   * with the audio sent so far. The second ends the process at once:
   * libsndfile reads again when a signal interrupts its read, so a FIFO
   * input whose writer is idle would otherwise hold the command for as
   * long as no audio comes. */
  cli_catch_stop(on_signal);

  /* Its stdout holds reports alone: the audio went to aurald. */
  if (cli_stdout_reports_only() < 0) {
    fprintf(stderr, "aural send: /dev/null: %s\n", strerror(errno));
    return EXIT_FAIL;
  }
  int rc = run(&job);
  if (interrupted) return EXIT_SIGNAL;
  return rc < 0 ? EXIT_FAIL : EXIT_OK;
}
