/*
 * aural load: a load generator for aurald. One process opens N pushed
 * streams, feeds each at 1x real time from a recording (looped), subscribes
 * to all of them on one more connection, and measures for every chunk the
 * time from the moment its last input sample was handed to the socket to
 * the moment the chunk arrived: the end-to-end latency a live client sees.
 * A third connection sends PING every 50 ms to measure how responsive the
 * server's loop stays. The daemon's CPU use comes from /proc of the peer
 * process (found with SO_PEERCRED).
 *
 * Single-threaded: poll() over non-blocking sockets, blocks sent when due
 * on a monotonic clock (no drift), streams staggered over one chunk so
 * they do not all push in the same instant.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <aural.h>

#include "cli.h"
#include "client.h"

/* Blocks timed in one run, over all its streams (about 540 MB at most). */
#define LOAD_MAX_BLOCKS ((uint64_t)1 << 25)

typedef struct load_stream {
  aural_client *c;
  uint32_t id;            /* server's stream id */
  double t0;              /* monotonic time of sample 0 */
  size_t sent;            /* input samples sent */
  size_t block;           /* blocks sent */
  double *sent_at;        /* (n_blocks) monotonic send time of each block */
  uint8_t *pending;       /* bytes not yet written */
  size_t pending_len, pending_cap;
  float *lat_ms;          /* (n_chunks_max) latency of each chunk */
  size_t n_lat;
  uint64_t chunks, lost, gaps;
  bool ended, closed_sent;
} load_stream;

typedef struct load_run {
  int n;
  double seconds, block_s, rate;
  size_t block_samples, n_blocks, chunk_frames;
  /* The server's frontend (WELCOME): its rate, and its analysis window
   * and frame shift in samples at that rate. */
  double model_rate, win, hop;
  const int16_t *pcm;     /* the recording, 16-bit, at rate */
  size_t pcm_len;
  load_stream *st;
  /* (n) the streams by their server's id, which may be any of 1..2^32-1:
   * sorted once all are open, searched for each message. */
  struct load_id {
    uint32_t id, index;
  } *by_id;
} load_run;

static int cmp_load_id(const void *a, const void *b) {
  uint32_t x = ((const struct load_id *)a)->id,
           y = ((const struct load_id *)b)->id;
  return x < y ? -1 : x > y;
}

/* The stream the server calls id, or NULL when it is none of ours. */
static load_stream *stream_of_id(const load_run *r, uint32_t id) {
  struct load_id key = {.id = id};
  const struct load_id *e =
      r->by_id == NULL ? NULL
                       : bsearch(&key, r->by_id, (size_t)r->n,
                                 sizeof *r->by_id, cmp_load_id);
  return e != NULL ? &r->st[e->index] : NULL;
}

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

static void usage(FILE *to) {
  fprintf(to,
"Usage: aural load [-s SOCKET] [-n N] [--seconds S] [--block-ms B] [--json]\n"
"                  [INPUT]\n"
"\n"
"Opens N streams to aurald, each fed at 1x real time from INPUT (looped;\n"
"default: the bundled recording), subscribes to all of them, and reports\n"
"chunk latency (from the moment a chunk's last sample was sent to its\n"
"arrival; the final partial chunk of each stream, which waits for the\n"
"stream's close, is not counted) p50/p99/max per stream and overall,\n"
"chunks lost, PING round trips, and the daemon's CPU use.\n"
"\n"
"Options:\n"
"  -s, --socket PATH   aurald's socket (default: as aurald)\n"
"  -n, --streams N     concurrent streams (default 10; 1..2000)\n"
"      --seconds S     how long each stream runs (default 30; 1..86400)\n"
"      --block-ms B    audio per AUDIO_DATA message (default 20; 5..1000);\n"
"                      N x S x 1000 / B is at most 33554432 (each block's\n"
"                      latency is kept for the report)\n"
"      --json          one JSON object on stdout\n"
"  -h, --help          show this help\n"
"\n"
"Example:\n"
"  aural load -n 20 --seconds 60 --json\n"
"\n"
"Ctrl-C ends the run early; the report covers what was measured.\n"
"\n"
"Exit status: 0 when every chunk arrived, 1 when aurald could not be\n"
"reached or refused a stream or INPUT could not be read, 2 for a bad\n"
"command line, 3 when chunks were lost or missing, 130 when interrupted\n"
"(after the report).\n");
}

/* Reads the recording once and converts it to 16-bit mono at its rate. */
static int load_pcm(const char *path, load_run *r) {
  aural_audiofile *af;
  aural_err err = {0};
  if (aural_audiofile_open(path, &af, &err) < 0) {
    fprintf(stderr, "aural load: %s\n", err.msg);
    return -1;
  }
  aural_audiofile_info info;
  aural_audiofile_get_info(af, &info);
  size_t ch = (size_t)info.n_channels, cap = 0, len = 0;
  int16_t *pcm = NULL;
  float buf[4096];
  size_t n;
  while (aural_audiofile_read(af, buf, 4096 / ch, &n, &err) == 0 && n > 0) {
    if (len + n > cap) {
      cap = (len + n) * 2;
      int16_t *p = realloc(pcm, cap * sizeof *p);
      if (p == NULL) break;
      pcm = p;
    }
    for (size_t i = 0; i < n; i++) {
      float acc = 0;
      for (size_t c = 0; c < ch; c++) acc += buf[i * ch + c];
      float v = acc / (float)ch * 32767.0f;
      pcm[len++] = (int16_t)(v > 32767 ? 32767 : v < -32768 ? -32768 : v);
    }
  }
  aural_audiofile_close(af);
  if (err.msg[0] != '\0' || len == 0) {
    fprintf(stderr, "aural load: %s: %s\n", path,
            err.msg[0] ? err.msg : "no audio");
    free(pcm);
    return -1;
  }
  r->pcm = pcm;
  r->pcm_len = len;
  r->rate = info.rate_hz;
  return 0;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static double pct(float *v, size_t n, double p) {
  if (n == 0) return NAN;
  qsort(v, n, sizeof *v, cmp_float);
  size_t k = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
  return v[k];
}

/* Queues one encoded message on a stream's pending bytes. */
static int queue_bytes(load_stream *s, const uint8_t *p, size_t n) {
  if (s->pending_len + n > s->pending_cap) {
    size_t cap = (s->pending_len + n) * 2;
    uint8_t *q = realloc(s->pending, cap);
    if (q == NULL) return -1;
    s->pending = q;
    s->pending_cap = cap;
  }
  memcpy(s->pending + s->pending_len, p, n);
  s->pending_len += n;
  return 0;
}

static int flush_pending(load_stream *s) {
  while (s->pending_len > 0) {
    ssize_t k = send(s->c->fd, s->pending, s->pending_len, MSG_NOSIGNAL);
    if (k < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
    memmove(s->pending, s->pending + k, s->pending_len - (size_t)k);
    s->pending_len -= (size_t)k;
  }
  return 0;
}

/* Sends the next block of stream s (the recording, looped). */
static int send_block(load_run *r, load_stream *s, uint8_t *msg) {
  size_t n = r->block_samples;
  uint8_t *p = msg + AURAL_PROTO_HEADER_BYTES;
  for (size_t i = 0; i < n; i++)
    aural_put_u16(p + 2 * i,
                  (uint16_t)r->pcm[(s->sent + i) % r->pcm_len]);
  aural_msg_header h = {AURAL_PROTO_VERSION, AURAL_MSG_AUDIO_DATA, 0, s->id,
                        (uint32_t)(2 * n)};
  aural_proto_put_header(msg, &h);
  if (queue_bytes(s, msg, AURAL_PROTO_HEADER_BYTES + 2 * n) < 0) return -1;
  s->sent_at[s->block++] = cli_now_s();
  s->sent += n;
  return flush_pending(s);
}

/* The frames the server makes of n samples sent at r->rate (PROTOCOL.md
 * §4.2). */
static size_t frames_of(const load_run *r, double n) {
  double at_model = floor(n * r->model_rate / r->rate);
  return at_model >= r->win ? 1 + (size_t)((at_model - r->win) / r->hop) : 0;
}

/* A chunk's latency: from the send of the block holding the last input
 * sample its frames needed, to now. */
static void on_chunk(load_run *r, load_stream *s, const uint8_t *payload,
                     size_t n, double now) {
  aural_chunk_header h;
  if (aural_chunk_decode(payload, n, &h, NULL, NULL, NULL) < 0) return;
  s->chunks++;
  /* The final chunk waits for AUDIO_CLOSE, which goes out a block after
   * the last audio: its delay is the generator's, not the server's. */
  if (h.n_frames == 0 || (h.flags & AURAL_CHUNK_FINAL)) return;
  uint64_t last = h.first_frame + h.n_frames - 1;
  double need_model = r->hop * (double)last + r->win; /* at the model rate */
  size_t need = (size_t)ceil(need_model * r->rate / r->model_rate);
  size_t block = (need - 1) / r->block_samples;
  if (block < s->block && s->n_lat < r->n_blocks)
    s->lat_ms[s->n_lat++] = (float)((now - s->sent_at[block]) * 1e3);
}

/* Parses whole messages out of buf; returns bytes consumed. */
static size_t on_sub_bytes(load_run *r, const uint8_t *buf, size_t len,
                           uint32_t max_payload, double now, bool *fatal) {
  size_t at = 0;
  while (len - at >= AURAL_PROTO_HEADER_BYTES) {
    aural_msg_header h;
    if (aural_proto_decode_header(buf + at, len - at, max_payload, &h) < 0) {
      *fatal = true;
      return at;
    }
    size_t total = AURAL_PROTO_HEADER_BYTES + h.payload_bytes;
    if (len - at < total) break;
    const uint8_t *p = buf + at + AURAL_PROTO_HEADER_BYTES;
    load_stream *s = stream_of_id(r, h.stream_id);
    if (s != NULL) {
      if (h.type == AURAL_MSG_CHUNK) on_chunk(r, s, p, h.payload_bytes, now);
      else if (h.type == AURAL_MSG_GAP) {
        aural_msg_gap g;
        if (aural_proto_decode_gap(p, h.payload_bytes, &g, NULL, 0) == 0)
          s->lost += g.n_chunks;
        s->gaps++;
      } else if (h.type == AURAL_MSG_STREAM_ENDED) {
        s->ended = true;
      }
    } else if (h.type == AURAL_MSG_ERROR) {
      aural_msg_error e;
      if (aural_proto_decode_error(p, h.payload_bytes, &e, NULL, 0) == 0)
        fprintf(stderr, "aural load: server error: %s: %s\n", e.name,
                e.message);
      else
        fprintf(stderr, "aural load: malformed server error: %.*s\n",
                (int)h.payload_bytes, p);
      *fatal = true;
    }
    at += total;
  }
  return at;
}

static double proc_cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return NAN;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  unsigned long ut, st;
  if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u "
                                 "%*u %lu %lu", &ut, &st) != 2)
    return NAN;
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* What a run measured beside the chunks' latencies. */
typedef struct load_result {
  float *ping_ms; /* (n_pings) round trips of the pinger, sorted later */
  size_t n_pings;
  double wall_s, cpu_s; /* the daemon's CPU over the audio's wall time */
} load_result;

/* Options; returns -1 to go on, or the exit status. */
static int parse_load_options(int argc, char **argv, const char **sock,
                              size_t *n_streams, size_t *seconds,
                              size_t *block_ms, bool *json) {
  static const struct option longs[] = {
      {"socket", required_argument, NULL, 's'},
      {"streams", required_argument, NULL, 'n'},
      {"seconds", required_argument, NULL, 'S'},
      {"block-ms", required_argument, NULL, 'B'},
      {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int opt;
  while ((opt = getopt_long(argc, argv, "s:n:h", longs, NULL)) != -1) {
    switch (opt) {
    case 's': *sock = optarg; break;
    case 'n':
      if (cli_parse_size(optarg, 1, 2000, n_streams) < 0) {
        fprintf(stderr, "aural load: -n/--streams %s: expected 1..2000\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'S':
      if (cli_parse_size(optarg, 1, 86400, seconds) < 0) {
        fprintf(stderr, "aural load: --seconds %s: expected 1..86400\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'B':
      if (cli_parse_size(optarg, 5, 1000, block_ms) < 0) {
        fprintf(stderr, "aural load: --block-ms %s: expected 5..1000\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'j': *json = true; break;
    case 'h': usage(stdout); return 0;
    default:
      fprintf(stderr, "(see 'aural load --help')\n");
      return EXIT_USAGE;
    }
  }
  if (argc - optind > 1) {
    fprintf(stderr, "aural load: unexpected argument '%s' (one INPUT at "
                    "most)\n(see 'aural load --help')\n", argv[optind + 1]);
    return EXIT_USAGE;
  }
  /* Each block of each stream keeps its send time and a latency (12
   * bytes, and 4 more for the report): the options' largest values asked
   * for 2000 x 17.3 million blocks, 414 GB. */
  uint64_t blocks = (uint64_t)*n_streams * (*seconds * 1000 / *block_ms);
  if (blocks > LOAD_MAX_BLOCKS) {
    fprintf(stderr, "aural load: %zu streams of %zu s in blocks of %zu ms "
                    "are %llu blocks to time; at most %llu (fewer streams "
                    "or seconds, or a longer --block-ms)\n",
            *n_streams, *seconds, *block_ms, (unsigned long long)blocks,
            (unsigned long long)LOAD_MAX_BLOCKS);
    return EXIT_USAGE;
  }
  return -1;
}

/* Subscribes sub to every stream (embeddings), then opens r->n pushed
 * streams, one connection each, non-blocking. Returns 0 or -1 (said). */
static int open_load_streams(load_run *r, const char *sock,
                             aural_client *sub) {
  char err[512] = "";
  uint8_t req[512];
  aural_msg_subscribe ms = {.all = true, .outputs = AURAL_OUT_EMBEDDINGS,
                            .dtype = AURAL_DTYPE_F32};
  size_t k = aural_proto_encode_subscribe(req, sizeof req, &ms);
  client_msg m;
  if (client_send(sub, req, k, err, sizeof err) < 0 ||
      client_read(sub, &m, err, sizeof err) != 0 ||
      m.h.type != AURAL_MSG_SUBSCRIBED) {
    fprintf(stderr, "aural load: subscribing failed%s%s\n", err[0] ? ": " : "",
            err);
    return -1;
  }
  size_t n_streams = (size_t)r->n;
  r->st = calloc(n_streams, sizeof *r->st);
  r->by_id = calloc(n_streams, sizeof *r->by_id); /* cmd_load frees them */
  if (r->st == NULL || r->by_id == NULL) goto oom;
  for (size_t i = 0; i < n_streams; i++) {
    load_stream *s = &r->st[i];
    s->sent_at = calloc(r->n_blocks + 1, sizeof *s->sent_at);
    s->lat_ms = calloc(r->n_blocks + 1, sizeof *s->lat_ms);
    if (s->sent_at == NULL || s->lat_ms == NULL) goto oom;
    if (client_connect(sock, "aural load", &s->c, err, sizeof err) < 0) {
      fprintf(stderr, "aural load: stream %zu: %s\n", i, err);
      return -1;
    }
    aural_msg_audio_open ao = {.sample_rate = (uint32_t)r->rate,
                               .channels = 1, .format = AURAL_SAMPLE_S16};
    snprintf(ao.name, sizeof ao.name, "load-%zu-%ld", i, (long)getpid());
    k = aural_proto_encode_audio_open(req, sizeof req, &ao);
    if (client_send(s->c, req, k, err, sizeof err) < 0 ||
        client_read(s->c, &m, err, sizeof err) != 0 ||
        m.h.type != AURAL_MSG_AUDIO_OPENED) {
      fprintf(stderr, "aural load: opening stream %zu failed%s%s\n", i,
              err[0] ? ": " : "", err);
      return -1;
    }
    s->id = m.h.stream_id;
    r->by_id[i] = (struct load_id){.id = s->id, .index = (uint32_t)i};
    if (fcntl(s->c->fd, F_SETFL, fcntl(s->c->fd, F_GETFL) | O_NONBLOCK) < 0)
      goto oom;
  }
  qsort(r->by_id, n_streams, sizeof *r->by_id, cmp_load_id);
  return 0;
oom:
  fprintf(stderr, "aural load: out of memory\n");
  return -1;
}

/* Sends each stream's blocks when due (and AUDIO_CLOSE after the last),
 * returning the earliest time something is due next. */
static double send_due(load_run *r, uint8_t *msg, double now,
                       pid_t daemon_pid, load_result *res, bool *fatal) {
  double wake = now + 0.05;
  for (size_t i = 0; i < (size_t)r->n; i++) {
    load_stream *s = &r->st[i];
    if (s->closed_sent) continue;
    double due = s->t0 + (double)(s->block + 1) * r->block_s;
    if (due > s->t0 + r->seconds) {
      if (isnan(res->cpu_s)) { /* the first stream's audio is all out */
        res->cpu_s = daemon_pid ? proc_cpu_s(daemon_pid) : NAN;
        res->wall_s = now;
      }
      uint8_t close_msg[AURAL_PROTO_HEADER_BYTES];
      aural_proto_encode_raw(close_msg, sizeof close_msg,
                             AURAL_MSG_AUDIO_CLOSE, s->id, NULL, 0);
      queue_bytes(s, close_msg, sizeof close_msg);
      flush_pending(s);
      s->closed_sent = true;
      continue;
    }
    if (due <= now) {
      if (send_block(r, s, msg) < 0) {
        fprintf(stderr, "aural load: stream %zu: send failed\n", i);
        *fatal = true;
      }
      due = s->t0 + (double)(s->block + 1) * r->block_s;
    }
    if (due < wake) wake = due;
  }
  return wake;
}

/* The run: blocks out on time, chunks in on the subscriber, a PING every
 * 50 ms, until every stream has ended (or 30 s past its audio). Returns 0,
 * or -1 when out of memory. */
static int run_load(load_run *r, aural_client *sub, aural_client *pinger,
                    pid_t daemon_pid, load_result *res) {
  size_t n_streams = (size_t)r->n, rcap = 1 << 22, rlen = 0;
  uint8_t *rbuf = malloc(rcap);
  uint8_t *msg = malloc(AURAL_PROTO_HEADER_BYTES + 2 * r->block_samples);
  size_t n_pings_cap = (size_t)(r->seconds * 20) + 64;
  res->ping_ms = calloc(n_pings_cap, sizeof *res->ping_ms);
  struct pollfd *pf = calloc(n_streams + 2, sizeof *pf);
  int rc = rbuf && msg && res->ping_ms && pf ? 0 : -1;
  double t_start = r->st[0].t0, next_ping = t_start, ping_sent = 0;
  double cpu0 = daemon_pid ? proc_cpu_s(daemon_pid) : NAN;
  bool ping_out = false, fatal = false;
  size_t ended = 0;
  double t_end_audio = t_start + r->seconds, deadline = t_end_audio + 30;
  res->cpu_s = NAN;
  while (rc == 0 && !interrupted && !fatal && ended < n_streams) {
    double now = cli_now_s();
    if (now > deadline) {
      fprintf(stderr, "aural load: %zu streams did not end in time\n",
              n_streams - ended);
      break;
    }
    double wake = send_due(r, msg, now, daemon_pid, res, &fatal);
    if (!ping_out && now >= next_ping && now < t_end_audio) {
      uint8_t pm[AURAL_PROTO_HEADER_BYTES];
      aural_proto_encode_raw(pm, sizeof pm, AURAL_MSG_PING, 0, NULL, 0);
      if (send(pinger->fd, pm, sizeof pm, MSG_NOSIGNAL) == (ssize_t)sizeof pm) {
        ping_out = true;
        ping_sent = now;
      }
      next_ping = now + 0.05;
    }
    size_t np = 0;
    pf[np++] = (struct pollfd){.fd = sub->fd, .events = POLLIN};
    pf[np++] = (struct pollfd){.fd = pinger->fd, .events = POLLIN};
    for (size_t i = 0; i < n_streams; i++)
      if (r->st[i].pending_len > 0)
        pf[np++] = (struct pollfd){.fd = r->st[i].c->fd, .events = POLLOUT};
    int timeout_ms = (int)ceil((wake - cli_now_s()) * 1000.0);
    if (timeout_ms < 0) timeout_ms = 0;
    if (poll(pf, (nfds_t)np, timeout_ms) < 0 && errno != EINTR) break;
    now = cli_now_s();
    if (pf[0].revents & (POLLIN | POLLHUP)) {
      if (rlen == rcap) {
        /* The buffer holds part of one message longer than it (its header
         * checked against the server's max_message_bytes): room for all
         * of it. */
        aural_msg_header h;
        size_t want = 0;
        if (aural_proto_decode_header(rbuf, rlen, sub->max_message_bytes,
                                      &h) == 0)
          want = AURAL_PROTO_HEADER_BYTES + (size_t)h.payload_bytes;
        uint8_t *p = want > rcap ? realloc(rbuf, want) : NULL;
        if (p == NULL) {
          fprintf(stderr, "aural load: no room for a message of %zu bytes\n",
                  want);
          break;
        }
        rbuf = p;
        rcap = want;
      }
      ssize_t got = recv(sub->fd, rbuf + rlen, rcap - rlen, MSG_DONTWAIT);
      if (got == 0) {
        fprintf(stderr, "aural load: the server closed the connection\n");
        break;
      }
      if (got > 0) {
        rlen += (size_t)got;
        size_t used =
            on_sub_bytes(r, rbuf, rlen, sub->max_message_bytes, now, &fatal);
        memmove(rbuf, rbuf + used, rlen - used);
        rlen -= used;
      }
    }
    if (pf[1].revents & (POLLIN | POLLHUP)) {
      client_msg m;
      char err[256];
      if (client_read(pinger, &m, err, sizeof err) == 0 &&
          m.h.type == AURAL_MSG_PONG && ping_out) {
        if (res->n_pings < n_pings_cap)
          res->ping_ms[res->n_pings++] = (float)((now - ping_sent) * 1e3);
        ping_out = false;
      }
    }
    for (size_t i = 2; i < np; i++)
      if (pf[i].revents & POLLOUT)
        for (size_t j = 0; j < n_streams; j++)
          if (r->st[j].c->fd == pf[i].fd) flush_pending(&r->st[j]);
    ended = 0;
    for (size_t i = 0; i < n_streams; i++) ended += r->st[i].ended;
  }
  if (isnan(res->cpu_s)) {
    /* Ended before a stream's audio was all out (Ctrl-C, aurald gone):
     * the CPU time up to now, if the daemon is still there to read. */
    res->cpu_s = daemon_pid ? proc_cpu_s(daemon_pid) : NAN;
    res->wall_s = cli_now_s();
  }
  res->wall_s -= t_start;
  res->cpu_s -= cpu0;
  free(rbuf);
  free(msg);
  free(pf);
  return rc;
}

/* v as a JSON number of prec decimals in buf, or null when it is not
 * finite: no chunk gave a latency (every one was a FINAL chunk), no PONG
 * came, or the daemon's CPU time could not be read. */
static const char *json_num(char buf[48], double v, int prec) {
  if (!isfinite(v)) return "null";
  snprintf(buf, 48, "%.*f", prec, v);
  return buf;
}

/* Prints the run's figures (a table, or one JSON object) and returns the
 * exit status: 0 when every chunk came and none was lost. */
static int report_load(load_run *r, const load_result *res, size_t block_ms,
                       bool json) {
  size_t n_streams = (size_t)r->n, total_lat = 0;
  uint64_t chunks = 0, lost = 0, expected = 0;
  for (size_t i = 0; i < n_streams; i++) {
    total_lat += r->st[i].n_lat;
    chunks += r->st[i].chunks;
    lost += r->st[i].lost;
    /* frames of the audio sent, then chunks of those (+1 for the FINAL
     * marker when they fill whole chunks). */
    expected += frames_of(r, (double)r->st[i].sent) / r->chunk_frames + 1;
  }
  float *all = malloc((total_lat + 1) * sizeof *all);
  double *per = malloc((n_streams + 1) * 3 * sizeof *per); /* p50 p99 max */
  if (all == NULL || per == NULL) {
    free(all);
    free(per);
    fprintf(stderr, "aural load: out of memory\n");
    return 1;
  }
  float worst_p99 = 0, worst_p50 = 0;
  size_t at = 0;
  for (size_t i = 0; i < n_streams; i++) {
    load_stream *s = &r->st[i];
    memcpy(all + at, s->lat_ms, s->n_lat * sizeof *all);
    at += s->n_lat;
    double p50 = pct(s->lat_ms, s->n_lat, 50), p99 = pct(s->lat_ms, s->n_lat, 99);
    per[3 * i] = p50;
    per[3 * i + 1] = p99;
    per[3 * i + 2] = s->n_lat ? s->lat_ms[s->n_lat - 1] : NAN;
    if (p99 > worst_p99) worst_p99 = (float)p99;
    if (p50 > worst_p50) worst_p50 = (float)p50;
  }
  double p50 = pct(all, total_lat, 50), p99 = pct(all, total_lat, 99);
  double pmax = total_lat ? all[total_lat - 1] : NAN;
  double g50 = pct(res->ping_ms, res->n_pings, 50),
         g99 = pct(res->ping_ms, res->n_pings, 99);
  double gmax = res->n_pings ? res->ping_ms[res->n_pings - 1] : NAN;
  double cpu_pct = 100.0 * res->cpu_s / res->wall_s;
  if (json) {
    char b[10][48];
    printf("{\"streams\":%zu,\"seconds\":%.0f,\"block_ms\":%zu,"
           "\"input_rate\":%.0f,\"chunks_expected\":%llu,"
           "\"chunks_received\":%llu,\"chunks_lost\":%llu,"
           "\"latency_ms\":{\"p50\":%s,\"p99\":%s,\"max\":%s,"
           "\"worst_stream_p50\":%.3f,\"worst_stream_p99\":%.3f},"
           "\"ping_ms\":{\"p50\":%s,\"p99\":%s,\"max\":%s,\"n\":%zu},"
           "\"daemon_cpu_percent\":%s,\"cpu_percent_per_stream\":%s,"
           "\"interrupted\":%s,\"per_stream\":[",
           n_streams, r->seconds, block_ms, r->rate,
           (unsigned long long)expected, (unsigned long long)chunks,
           (unsigned long long)lost, json_num(b[0], p50, 3),
           json_num(b[1], p99, 3), json_num(b[2], pmax, 3), worst_p50,
           worst_p99, json_num(b[3], g50, 3), json_num(b[4], g99, 3),
           json_num(b[5], gmax, 3), res->n_pings, json_num(b[6], cpu_pct, 2),
           json_num(b[7], cpu_pct / (double)n_streams, 4),
           interrupted ? "true" : "false");
    for (size_t i = 0; i < n_streams; i++) {
      printf("%s{\"chunks\":%llu,\"lost\":%llu", i ? "," : "",
             (unsigned long long)r->st[i].chunks,
             (unsigned long long)r->st[i].lost);
      static const char *const keys[] = {"p50_ms", "p99_ms", "max_ms"};
      for (int q = 0; q < 3; q++) {
        double v = per[3 * i + (size_t)q];
        if (isfinite(v)) printf(",\"%s\":%.3f", keys[q], v);
        else printf(",\"%s\":null", keys[q]); /* no chunk had frames */
      }
      printf("}");
    }
    printf("]}\n");
  } else {
    printf("%zu streams x %.0f s at 1x (%.0f Hz input, %zu ms blocks)\n",
           n_streams, r->seconds, r->rate, block_ms);
    printf("chunks      %llu received of %llu, %llu lost\n",
           (unsigned long long)chunks, (unsigned long long)expected,
           (unsigned long long)lost);
    /* What was not measured is said so, not printed as "nan" (as the
     * JSON gives null). */
    if (total_lat > 0)
      printf("latency     p50 %.1f ms  p99 %.1f ms  max %.1f ms  (worst "
             "stream p99 %.1f ms)\n", p50, p99, pmax, worst_p99);
    else
      printf("latency     none measured (no chunk with frames arrived)\n");
    if (res->n_pings > 0)
      printf("ping        p50 %.2f ms  p99 %.2f ms  max %.2f ms\n", g50, g99,
             gmax);
    else
      printf("ping        none answered\n");
    if (isfinite(cpu_pct))
      printf("daemon cpu  %.1f%% of one core (%.3f%% per stream)\n", cpu_pct,
             cpu_pct / (double)n_streams);
    else
      printf("daemon cpu  unknown (aurald's CPU time could not be read)\n");
  }
  free(all);
  free(per);
  if (interrupted) return EXIT_SIGNAL;
  return chunks == expected && lost == 0 ? EXIT_OK : 3;
}

int cmd_load(int argc, char **argv) {
  const char *sock = NULL;
  size_t n_streams = 10, block_ms = 20, seconds = 30;
  bool json = false;
  int status = parse_load_options(argc, argv, &sock, &n_streams, &seconds,
                                  &block_ms, &json);
  if (status >= 0) return status;
  load_run r = {.n = (int)n_streams, .seconds = (double)seconds,
                .block_s = (double)block_ms / 1000.0};
  const char *input = optind < argc ? argv[optind] : cli_default_sample();
  if (load_pcm(input, &r) < 0) return 1;
  r.block_samples = (size_t)lround(r.rate * r.block_s);
  r.n_blocks = (size_t)ceil(r.seconds / r.block_s) + 1;

  char err[512];
  aural_client *sub = NULL, *pinger = NULL;
  load_result res = {0};
  int rc = 1;
  if (client_connect(sock, "aural load", &sub, err, sizeof err) < 0 ||
      client_connect(sock, "aural load ping", &pinger, err, sizeof err) < 0) {
    fprintf(stderr, "aural load: %s\n", err);
    goto out;
  }
  r.chunk_frames = sub->model.chunk_frames;
  r.model_rate = sub->model.sample_rate;
  /* Truncated, as the frontend does (aural_fbank_window_samples). */
  r.win = floor(r.model_rate * sub->model.frame_length_ms * 0.001);
  r.hop = floor(r.model_rate * sub->model.frame_ms * 0.001);
  if (!(r.win >= 1 && r.hop >= 1)) {
    fprintf(stderr, "aural load: %s: the server's WELCOME gives no frame "
                    "length (an older aurald?): cannot count its frames\n",
            sock);
    goto out;
  }
  if (open_load_streams(&r, sock, sub) < 0) goto out;
  struct ucred cred;
  socklen_t cl = sizeof cred;
  pid_t daemon_pid = getsockopt(sub->fd, SOL_SOCKET, SO_PEERCRED, &cred,
                                &cl) == 0 ? cred.pid : 0;
  signal(SIGINT, on_sigint);
  /* Streams staggered over one chunk, so they do not all push at once. */
  double t_start = cli_now_s();
  double stagger = (double)r.chunk_frames * sub->model.frame_ms * 1e-3 /
                   (double)n_streams;
  for (size_t i = 0; i < n_streams; i++)
    r.st[i].t0 = t_start + stagger * (double)i;
  if (run_load(&r, sub, pinger, daemon_pid, &res) < 0) {
    fprintf(stderr, "aural load: out of memory\n");
    goto out;
  }
  rc = report_load(&r, &res, block_ms, json);
out:
  for (size_t i = 0; r.st != NULL && i < n_streams; i++) {
    client_close(r.st[i].c);
    free(r.st[i].sent_at);
    free(r.st[i].lat_ms);
    free(r.st[i].pending);
  }
  free(r.st);
  free(r.by_id);
  free((void *)r.pcm);
  free(res.ping_ms);
  client_close(sub);
  client_close(pinger);
  return rc;
}
