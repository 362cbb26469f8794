/*
 * aurald internals shared by the daemon's files.
 *
 * Threads: the libuv loop runs on the main thread and owns every handle,
 * connection, subscription and the stream registry. Worker threads
 * (compute.c) own a stream's `work` only while its `sched.busy` flag is
 * set, and touch nothing else of the daemon except the input ring and
 * what is guarded by server.mu (struct stream says which part is whose).
 * Results come back to the loop through server.done and an uv_async_t;
 * the loop never waits for a worker.
 *
 * Files, each depending only on those below it (tools/check_daemon_deps.py
 * checks that no call goes up):
 *   main.c     options, signals, sources at start, the tick
 *   server.c   start-up, shutdown and teardown of the whole
 *   http.c     HTTP and WebSocket (--http): the page, /metrics, /healthz,
 *              and /ws clients served as connections of conn.c
 *   conn.c     accepting clients, reading and answering their requests,
 *              reaping dead connections (the `later` pass)
 *   mic.c      the microphone source
 *   cluster.c  cluster mode: streams from Redis, chunks back to it
 *              (docs/CLUSTER.md)
 *   compute.c  the workers: each round's input, aural_stream batches,
 *              chunks handed back
 *   fanout.c   streams meet subscribers: announcements, deliveries,
 *              chunks and ends sent to every receiver
 *   metrics.c  the Prometheus text of /metrics
 *   stats.c    STATS and STREAMS replies
 *   out.c      the write queue of every connection; marking one dead
 *   stream.c   the stream registry and each stream's input ring
 *   socket.c, config.c, log.c   the listening socket, the config file,
 *              logs, clocks and message buffers
 *   webguard.c what of HTTP and WebSocket aurald checks itself: addresses,
 *              tokens, origins, one message per frame (no I/O: fuzzed)
 */
#ifndef AURALD_DAEMON_H
#define AURALD_DAEMON_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include <aural.h>
#include <aural/proto.h>

#include "web.h"

/* ---- logging (log.c) ---------------------------------------------------- */

enum { LOG_ERROR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };
/* Read by every thread that logs, written by the loop thread (--log-level,
 * a reload). */
extern _Atomic int aurald_log_level;
void aurald_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define log_error(...) aurald_log(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) aurald_log(LOG_WARN, __VA_ARGS__)
#define log_info(...) aurald_log(LOG_INFO, __VA_ARGS__)
#define log_debug(...) aurald_log(LOG_DEBUG, __VA_ARGS__)
int aurald_log_level_parse(const char *s);
/* Whether stderr is the journal's stream (JOURNAL_STREAM, set by systemd):
 * then every line carries its priority as "<N>" and no clock. Called once
 * at start, before any thread. */
void aurald_log_setup(void);
/* Hands stderr to a writer thread: from then on no line waits for
 * stderr. Lines go through a bounded buffer; those that find it full are
 * counted and dropped, and the count is written when stderr takes lines
 * again. Before it, and when it fails, lines are written directly. */
void aurald_log_start(void);
/* Waits up to timeout_s for the buffered lines to be written and stops the
 * writer. Lines that come later are written directly, unless stderr was
 * still not taking them: then they are dropped, so that exit never waits
 * on stderr. */
void aurald_log_stop(double timeout_s);
/* "aurald: MESSAGE" on stderr, an error of the command line or the config
 * file (fmt ends with its newline). */
void aurald_usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* Microseconds since the Unix epoch (CLOCK_REALTIME), the protocol's time. */
int64_t aurald_now_us(void);
/* Seconds on CLOCK_MONOTONIC. */
double aurald_mono_s(void);

/* ---- shared message buffers -------------------------------------------- */

/* One encoded message, shared by every connection it is queued on.
 * Reference counts are touched on the loop thread only. */
typedef struct msgbuf {
  int refs;
  size_t len;
  uint8_t data[];
} msgbuf;

msgbuf *msgbuf_new(size_t len); /* refs = 1 */
/* A copy of an encoded message; NULL when len is 0 (the encoder found its
 * buffer too small) or out of memory. */
msgbuf *msgbuf_from(const void *data, size_t len);
extern size_t msgbuf_live_bytes;
void msgbuf_unref(msgbuf *m);
/* Shortens a message encoded into a buffer made larger than it needed
 * (len at most m->len). */
void msgbuf_trim(msgbuf *m, size_t len);

/* ---- options ------------------------------------------------------------- */

typedef struct file_opt {
  const char *path;
  bool realtime;
} file_opt;

typedef struct aurald_options {
  const char *model_path;
  const char *lexicon_path; /* --lexicon, --lm: NULL for the files beside */
  const char *lm_path;      /* the model, when both are there */
  const char *socket_path; /* resolved */
  int chunk_ms;            /* --chunk-ms: whole frames of the model's */
  bool mic;
  const char *mic_device; /* NULL: default input */
  file_opt *files;
  int n_files;
  int n_threads;
  size_t max_request_bytes;
  size_t max_message_bytes;
  int max_clients;
  int max_streams;
  size_t sub_hard_bytes;
  size_t sub_soft_bytes;
  double sub_soft_s;
  double hello_timeout_s; /* a connection must say HELLO within this */
  const char *group; /* peers in this group are accepted too */
  gid_t group_gid;
  bool exit_when_done; /* stop once every --file stream has ended */
  bool hold;           /* sources wait for their first subscriber */
  bool f16_weights;
  aural_precision precision; /* --precision: f32 (default) or bf16 */
  size_t max_model_bytes; /* --max-model-memory: weights, one stream and
                             one compute thread's batch together */
  /* Cluster mode (cluster.c); cluster_url NULL: off. */
  const char *cluster_url;
  const char *cluster_password_file;
  const char *cluster_node;   /* NULL: HOST-PID */
  bool cluster_optional;      /* serve locally while Redis is unreachable */
  int cluster_capacity;       /* streams this node takes from the cluster */
  long cluster_retention;     /* chunks kept per output stream (MAXLEN ~) */
  double cluster_ttl_s;       /* heartbeat expiry: a silent node's streams
                                 are taken over this long after it stops */
  double cluster_timeout_s;   /* no reply for this long: reconnect */
  double cluster_expire_s;    /* an ended stream's keys live this long */
  double cluster_idle_s;      /* no audio added for this long: the stream
                                 ends (0: never) */
  uint32_t cluster_outputs;   /* AURAL_OUT_* of the published chunks */
  uint8_t cluster_dtype;
  http_options http;      /* --http and its companions */
} aurald_options;

/* Rows of the batch each compute thread makes (aural_batch_create); the
 * model's memory limit is checked for a batch of this size. */
#define AURALD_BATCH_ROWS 1024

/* ---- streams ------------------------------------------------------------- */

typedef enum stream_source {
  SRC_FILE = 0,
  SRC_MIC,
  SRC_CLIENT,
} stream_source;

typedef enum end_reason {
  END_NONE = 0,
  END_EOF,
  END_CLOSED,
  END_DISCONNECTED,
  END_DEVICE_LOST,
  END_ERROR,
  END_SHUTDOWN,
} end_reason;

const char *end_reason_name(end_reason r);
const char *source_name(stream_source s);

struct server;
struct conn;
struct delivery;

/* A finished chunk (or the end of a stream), handed from a worker to the
 * loop. */
typedef struct chunk_out {
  struct stream *s;
  struct chunk_out *next;
  bool is_end;
  aural_chunk_header h;   /* outputs/dtype/text_bytes unset */
  float *emb;             /* (n_frames, d_model) */
  float *logits;          /* (n_frames, vocab) or NULL */
  char *text;             /* (text_cap) NUL-terminated, tokens separated by
                             spaces; NULL without a CTC head */
  size_t text_cap, text_len;
  /* Words (server.lexicon set): the finals of n_segments segments
   * (segments[i] words each), then n_partial_words of the partial. One
   * block with the chunk's words, or NULL when it has none. */
  aural_word *words;      /* (n_final_words + n_partial_words) */
  uint32_t *segments;     /* (n_segments) */
  size_t n_segments, n_final_words, n_partial_words;
  msgbuf *variants[2][8]; /* [dtype][CHUNK outputs] encoded messages */
  msgbuf *words_msg;      /* its WORDS message, encoded once */
} chunk_out;

#define LATENCY_RING 1024
#define STREAM_FEAT_CAP 256     /* feature rows a stream holds per round */
/* Audio a client's stream may be behind the clock and still catch up
 * without counting as fed faster than real time (stream.input_due). */
#define CATCH_UP_S 5.0
/* Microphone ring, a power of two: 5.9 s at 44.1 kHz, so that the loop
 * can fall seconds behind a device before samples are lost (its stream's
 * input buffer holds one drain of it too). */
#define MIC_RING_FRAMES (1u << 18)
#define STREAM_ID_BUCKETS 1024  /* power of two */

/* A stream's fields, by owner. Each part below has one owner, and says
 * who else may read it and when. Handoffs between them: the input ring
 * (loop to worker), server.ready (a worker takes the stream, setting
 * sched.busy) and server.done (chunks and the end event back to the loop),
 * the last two under server.mu. */

/* Loop thread only: the registry, subscribers and what STATS reports of
 * delivered chunks. No worker reads these. */
typedef struct stream_loop {
  struct stream *next;    /* registry list */
  struct stream *id_next; /* the registry's id bucket */
  struct conn *owner;     /* the client feeding it (SRC_CLIENT) */
  uint8_t format;         /* aural_sample_format of its AUDIO_DATA */
  bool closed_by_client;  /* AUDIO_CLOSE (or bad data) seen */
  uint64_t frames_received; /* input frames accepted from the client */
  struct delivery *deliveries; /* subscribers receiving it */
  /* A source's start when the stream is released (the microphone's
   * capture), or NULL; a negative return ends the stream (device_lost). */
  int (*on_release)(struct stream *s);
  /* A cluster stream's (cluster.c), or NULL: each chunk before its
   * subscribers get it (false: they do not), and the stream's end before
   * they hear of it. ext is cluster.c's own state of the stream. */
  bool (*on_chunk)(struct stream *s, struct chunk_out *co);
  void (*on_end)(struct stream *s);
  void *ext;
  uint64_t overruns;      /* input lost: the microphone's, moved here by
                             the loop, and its pushes that found no room */
  uint64_t chunks_emitted;
  float latency_ms[LATENCY_RING];
  uint64_t n_latency;
  float lat_p50, lat_p99; /* percentiles for STATS, as of lat_seen chunks */
  uint64_t lat_seen;
} stream_loop;

/* Pending input: a single-producer (the loop) single-consumer (the worker
 * holding the stream) ring of cap_frames interleaved frames, a power of
 * two; pcm and cap_frames are fixed at creation. Samples move without a
 * lock: the loop alone writes head (frames written) and the samples ahead
 * of it, the worker alone writes tail (frames taken). How many frames the
 * scheduler may take is sched.in_frames, under server.mu. */
typedef struct stream_ring {
  float *pcm;             /* (cap_frames, channels); NULL for a file */
  size_t cap_frames;
  _Atomic uint64_t head, tail;
} stream_ring;

/* Guarded by server.mu: the scheduler's view, written by the loop (input
 * arriving or ending) and by workers (taking input, ending on an error,
 * handing a stream back). held is written by the loop alone, which may
 * read it without the lock. A stream is `ended` only with input_done set,
 * after which reason and message no longer change: the loop reads them
 * without the lock once it has taken the end event from server.done. */
typedef struct stream_sched {
  size_t in_frames;       /* written to the ring and not yet counted out */
  int64_t in_first_us;    /* arrival of the oldest pending input */
  int64_t in_last_us;     /* arrival of the newest pending input */
  uint64_t in_total;      /* input frames received (or, for a real-time
                             file, released by the pacing) */
  double pending_since;   /* monotonic s of the oldest untaken input */
  /* Monotonic s when the input received so far is due at the stream's
   * rate, counted from when it arrived and never from more than
   * CATCH_UP_S before the clock: far past now, the stream is fed faster
   * than real time (compute.c). */
  double input_due;
  bool input_done;        /* no more input will come */
  end_reason reason;      /* why input is done */
  char message[512];      /* details for STREAM_ENDED (an aural_err) */
  bool held;              /* waiting for a subscriber (--hold) */
  bool queued;            /* in server.ready */
  bool busy;              /* a worker holds the stream (its `work`) */
  bool ended;             /* the worker emitted its final chunk */
  struct stream *ready_next;
  /* Copies of work's counters for STATS and the scheduler, made by the
   * worker at the end of each round. */
  uint64_t stat_frames;
  uint64_t stat_rounds;
  double stat_compute_s, stat_audio_s;
} stream_sched;

/* Owned by the worker that holds the stream (sched.busy set), one at a
 * time; the handoff is server.ready under server.mu. The loop's before the
 * stream is first queued (it opens the file) and again once its end event
 * comes back through server.done, when no worker can take it again (it
 * reports next_frame and frees the rest). */
typedef struct stream_work {
  aural_stream *as;       /* the pipeline: frontend, encoder, chunks, text */
  aural_audiofile *af;    /* a file source, read a round at a time */
  uint64_t read_frames;   /* input frames read from it so far */
  bool aborted;           /* ended on an error: pulled, never computed */
  int64_t open_capture_us; /* capture time of the chunk being filled */
  uint64_t next_frame;    /* frames computed so far (by this node: a
                             resumed stream's start at its first chunk) */
  double compute_s;
  uint64_t rounds;        /* rounds that computed frames of it */
  chunk_out end_event;    /* handed to the loop when the stream ends */
} stream_work;

/* A stream: what does not change once it has started, and its parts by
 * owner. Any thread may read the fields here: they are set by the loop in
 * stream_create() or before stream_start() (a file's realtime and
 * file_frames), except start_us and t0_mono, which the loop sets when the
 * stream is released, before any worker can take it, and nobody changes
 * after. */
typedef struct stream {
  struct server *srv;
  uint32_t id;
  char name[AURAL_PROTO_NAME_MAX + 1];
  stream_source source;
  double rate_hz;
  int channels;
  bool realtime;          /* a file paced at its own rate */
  int64_t file_frames;    /* a file's declared length, or -1 when unknown */
  int64_t start_us;       /* released at (realtime clock) */
  double t0_mono;         /* released at (monotonic s): a file's pacing */
  aural_lexicon *custom;  /* custom words of its decoder (AUDIO_OPEN's
                             vocabulary), or NULL; freed with the stream */

  stream_loop loop;
  stream_ring in;
  stream_sched sched;
  stream_work work;
} stream;

/* ---- connections and subscriptions ------------------------------------- */

typedef struct subscription {
  struct conn *c;
  uint32_t id;
  bool all;
  char name[AURAL_PROTO_NAME_MAX + 1];
  uint32_t outputs;
  uint8_t dtype;
  uint64_t sent, dropped;    /* chunks, over every stream it received */
  /* Custom words (SUBSCRIBE's vocabulary; a named stream's words only):
   * its deliveries decode the stream's logits themselves, on the loop,
   * from the first chunk they receive. NULL: the stream's own words. */
  aural_lexicon *custom;
  float boost;
  struct subscription *next; /* in conn */
} subscription;

/* One subscription receiving one stream. */
typedef struct delivery {
  subscription *sub;
  stream *s;
  struct delivery *next_in_stream;
  uint64_t gap_first, gap_n; /* chunks lost, not yet reported */
  /* The subscription's own decoder (sub->custom set), its first frame in
   * the stream, and room for one chunk's words (server.words_max, in
   * server.segments_max segments). */
  aural_decoder *dec;
  uint64_t dec_first_frame;
  bool dec_started;
  aural_word *words;
  uint32_t *segments;
} delivery;

#define CONN_QUEUE_CAP 4096 /* messages queued on one connection */
/* Chunks stop being queued (and are reported by GAP) once this many
 * messages wait, leaving the rest of the ring to control messages. */
#define CONN_CHUNK_CAP (CONN_QUEUE_CAP - 256)
/* More messages than this waiting counts against the soft limit, as
 * sub_soft_bytes does: a subscriber of small text chunks that never reads
 * is disconnected after sub_soft_s like any other. */
#define CONN_SOFT_MSGS (CONN_QUEUE_CAP / 4)
#define CONN_WRITE_BATCH 64 /* buffers per uv_write */
#define CONN_MAX_SUBS 64
#define CONN_MAX_STREAMS 16
/* Subscriptions with custom words, server-wide: each decodes on the loop
 * thread, about a fifth of an encoder's work per stream. */
#define AURALD_VOCAB_SUBS 16

/* How a connection's bytes move when it is not a Unix socket (a WebSocket
 * of http.c): conn.c and out.c call these where they would read, stop
 * reading or write the pipe. */
typedef struct conn_transport {
  void (*read_start)(struct conn *c);
  void (*read_stop)(struct conn *c);
  /* Messages are queued and none is in flight: write some, then call
   * conn_write_done() with how many went (n_inflight). */
  void (*write)(struct conn *c);
  /* The connection is reaped: the transport lets go of it (and closes
   * its end); the memory goes in the pipe's close callback. */
  void (*detach)(struct conn *c);
} conn_transport;

/* A connection's life: live, then marked dead by conn_kill() wherever it
 * fails (closing: nothing more is read, queued or attached to it, but its
 * subscriptions, deliveries and memory stay valid), then reaped by the
 * `later` pass at the start of a loop iteration, where no caller can hold
 * any of them (its subscriptions go and uv_close is asked), then freed in
 * the close callback. */
typedef struct conn {
  uv_pipe_t pipe;      /* a WebSocket's is initialised, never opened */
  const conn_transport *tr; /* NULL: the pipe */
  void *tr_data;       /* the transport's own, for its functions */
  int fatal_code;      /* the code of the fatal ERROR, once fatal_sent */
  struct server *srv;
  uint32_t id;
  bool hello_done;
  double connected_at; /* monotonic s, for the HELLO deadline */
  bool closing;        /* marked dead */
  bool reaped;         /* subscriptions gone, uv_close requested */
  bool yielded;        /* input left for the next iteration (work budget) */
  bool drained;        /* replies drained while reading waited */
  bool in_later;       /* on server.later_head */
  struct conn *later_next;
  bool fatal_sent;     /* close once the queue drains */
  double fatal_at;     /* monotonic s when it was queued */
  bool reading;
  bool paused;         /* reading stopped for flow control */
  bool eof;            /* the client shut its side: nothing more to read */
  double eof_polled_at; /* monotonic s, when its socket was last looked at */
  uid_t uid;
  pid_t pid;
  /* The custom words of the request at the head of rbuf, pronounced off
   * the loop: while not done, that request and the input after it wait. */
  struct pronounce_job *pronouncing;
  uint8_t *rbuf;       /* partial incoming message */
  size_t rskip;        /* payload bytes of the first message already taken */
  size_t rlen, rcap;
  msgbuf **q;          /* ring of CONN_QUEUE_CAP queued messages */
  size_t q_head, q_len;
  size_t q_bytes;      /* bytes queued and not yet written */
  uv_write_t wreq;
  uv_buf_t wbufs[CONN_WRITE_BATCH];
  size_t n_inflight;   /* messages in the current uv_write */
  double over_soft_since; /* monotonic s, 0 when under the soft limit */
  subscription *subs;
  int n_subs;
  int n_streams;       /* streams it feeds */
  uint32_t next_sub_id;
  struct conn *next, *prev;
} conn;

/* ---- the server ---------------------------------------------------------- */

/* What /metrics counts that STATS does not keep (metrics.c): chunk
 * latencies in buckets, chunks lost to slow subscribers and GAPs sent. */
#define METRICS_LATENCY_BUCKETS 12
typedef struct metrics_counters {
  uint64_t latency_n[METRICS_LATENCY_BUCKETS + 1]; /* per bucket, +Inf */
  uint64_t latency_count;
  double latency_sum_s;
  uint64_t chunks_dropped;
  uint64_t gaps_sent;
} metrics_counters;

/* What /metrics reports of cluster mode (server.cluster_stats, kept up
 * to date by cluster.c on the loop). */
typedef struct cluster_stats {
  bool up;                 /* connected to Redis */
  int streams;             /* cluster streams owned */
  uint64_t published;      /* chunks stored */
  uint64_t duplicates;     /* chunks Redis had already (after a resume) */
  uint64_t disconnects;    /* times the connection to Redis was lost */
} cluster_stats;

typedef struct worker worker;

typedef struct server {
  uv_loop_t *loop;
  aurald_options *opt;
  aural_model *model;
  const aural_model_config *mc;
  size_t chunk_frames;
  size_t max_token_bytes;  /* longest vocabulary string */
  msgbuf *welcome;         /* the WELCOME every client gets, less its id */
  aural_msg_welcome welcome_msg; /* its fields, client 0 */
  const char **vocab;      /* (vocab_size) the model's token strings */
  /* Words, when on: loaded once, read by every stream's decoder. Every
   * stream then decodes words, and a chunk has at most words_max words
   * in segments_max final segments (the same for every stream). */
  aural_lexicon *lexicon;
  aural_lm *lm;
  size_t words_max, segments_max;
  /* Custom words (a request's vocabulary), when words are on and the
   * model's g2p map is there: pronounced on libuv's thread pool (conn.c),
   * at most AURALD_VOCAB_SUBS subscriptions with their own decoders at
   * once. */
  aural_g2p *g2p;
  int n_vocab_subs;
  /* heap_bytes() as last measured (server_heap_bytes), at loop time
   * heap_at_ms (uv_now); heap_at_ms 0: never. */
  size_t heap_cached;
  uint64_t heap_at_ms;
  float *scratch;          /* loop thread: one request's samples */
  uv_pipe_t listener;
  bool listening;
  int lock_fd;
  char lock_path[256];
  /* The socket file aurald bound (0, 0 when none): only that file is
   * removed at exit, never one that has since replaced it at the path. */
  dev_t sock_dev;
  ino_t sock_ino;
  uv_signal_t sigint, sigterm, sighup;
  bool activated;          /* the socket came from the service manager */
  int argc;                /* the command line, for reloads */
  char **argv;
  const char *config_path; /* NULL: none */
  uv_async_t wake;         /* workers -> loop */
  uv_timer_t tick;         /* pacing, limits, device checks */
  uv_timer_t deadline;     /* shutdown deadline */
  bool stopping;
  bool stopped;
  bool handles_ready;      /* server_setup initialised mu, cv and handles */
  double t_start;

  conn *conns;
  int n_conns;
  /* Connections to reap or to read on at the next iteration, run by an
   * idle handle that is active only while the list is not empty. */
  uv_idle_t later;
  uv_idle_cb on_later;     /* conn_on_later */
  conn *later_head;
  uint32_t next_conn_id;
  bool conn_ids_wrapped;    /* ids are no longer unique by the count */
  stream *streams;
  /* The same streams by id (bucket id % STREAM_ID_BUCKETS): every
   * AUDIO_DATA names its stream, and at hundreds of streams a walk of
   * the list per message took a sixth of the loop thread. */
  stream *by_id[STREAM_ID_BUCKETS];
  int n_streams;
  int n_file_streams_left;
  bool files_done;         /* the last --file stream has ended */
  uint32_t next_stream_id;
  uint64_t streams_created; /* aurald_streams_created_total */

  /* Shared with workers. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  stream *ready_head, *ready_tail;
  int n_ready;
  chunk_out *done_head, *done_tail;
  double load;             /* share of worker time spent in rounds lately */
  double load_since, load_busy_s; /* the window being measured */
  bool quit_workers;
  worker *workers;
  int n_workers;

  struct mic_source *mic;
  struct cluster *cluster; /* cluster mode, or NULL */
  cluster_stats cluster_stats;
  struct http_server *http; /* --http (http.c), or NULL */
  metrics_counters counters;
  uint64_t fail_call;          /* test hook: this encoder call fails */
  uint32_t sub_id_base;        /* test hook: subscription ids start after */
  double assume_load;          /* test hook: the load, when > 0 */
  _Atomic uint64_t n_calls;    /* encoder calls so far (with fail_call) */
  int exit_code;
} server;

/* server.c */
/* Loads the model and sets up the shared state and the loop's handles
 * (not the listener, sources or signals). Returns 0, or -1 with why, or
 * -2 with why when an option does not fit the model (a bad command line
 * or config, exit 2). */
int server_setup(server *srv, aurald_options *o, uv_loop_t *loop, char *why,
                 size_t why_len);
/* Frees what server_setup made once the loop has run down; returns 0, or
 * UV_EBUSY when handles are still active. */
int server_teardown(server *srv);
void server_stop(server *srv, const char *why);
void server_close_handles(server *srv);

/* http.c */
/* Listens on --http (srv->opt->http) on the server's loop. Returns 0 or
 * -1 with why. */
int http_start(server *srv, char *why, size_t why_len);
/* Closes the listener and every HTTP connection; their handles close as
 * the loop runs on. */
void http_stop(server *srv);
/* Frees what http_start made, once the loop has run down. */
void http_free(server *srv);

/* stream.c */
/* custom: the stream's custom words (the stream owns them from here on,
 * even when it fails), or NULL; boost: theirs, or < 0 for the default.
 * first_chunk: 0, or where a stream resumed from the middle begins
 * (aural_stream_config.first_chunk). */
stream *stream_create(server *srv, const char *name, stream_source src,
                      double rate_hz, int channels, aural_lexicon *custom,
                      double boost, uint64_t first_chunk, char *why,
                      size_t why_len);
/* Sets server.words_max and segments_max from a stream of words (one made
 * and freed at start-up). Returns 0 or -1 with why. */
int stream_words_limits(server *srv, char *why, size_t why_len);
void stream_release(stream *s); /* start processing a held stream */
/* Appends up to n_frames interleaved frames (loop thread), as many as
 * its input buffer has room for; returns how many it took. */
size_t stream_push(stream *s, const float *pcm, size_t n_frames,
                   int64_t arrival_us);
/* Decodes n little-endian samples of an aural_sample_format (s16 scaled
 * to +-1, f32 as they are) into x; returns n, or the index of the first
 * non-finite f32 sample (decoding stops there). */
size_t pcm_decode(uint8_t format, const uint8_t *p, size_t n, float *x);
/* Frames stream_push would take now (0 once input is done). */
size_t stream_room(stream *s);
/* Worker: copies out the n frames just counted out of in_frames. */
void stream_take(stream *s, float *pcm, size_t n);
/* True once no more input will be taken (ended, closed or failed). */
bool stream_input_ended(stream *s);
/* True when the pending input is above the flow-control mark. */
bool stream_backlogged(stream *s);
/* With mu held: true when the pending input has reached half of that
 * mark (the workers then take it whatever else they wait for: past the
 * mark its connection is no longer read, and a microphone overruns). */
bool stream_input_half_full(const stream *s);
void stream_end_input(stream *s, end_reason r, const char *message);
void stream_destroy(stream *s);
stream *stream_find(server *srv, const char *name);
stream *stream_find_id(server *srv, uint32_t id);
void stream_unlink(server *srv, stream *s); /* an ended one, before destroy */
void server_mark_ready(server *srv, stream *s); /* with mu held */
size_t stream_pending_frames(stream *s);

/* compute.c */
int workers_start(server *srv, int n, char *why, size_t why_len);
void workers_stop(server *srv);

/* out.c */
void conn_send(conn *c, msgbuf *m);    /* takes a reference */
/* Queues a copy of an encoded message. len 0 (an encoder ran out of room)
 * sends a non-fatal INTERNAL error instead. */
void conn_send_bytes(conn *c, const void *data, size_t len);
void conn_send_error(conn *c, uint32_t stream_id, int code, bool fatal,
                     const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An ERROR message for c (logged at debug level) encoded into buf: its
 * bytes, or 0 when cap is too small. */
size_t conn_error_message(conn *c, uint8_t *buf, size_t cap,
                          uint32_t stream_id, int code, bool fatal,
                          const char *fmt, va_list ap)
    __attribute__((format(printf, 7, 0)));
/* Marks c dead: it is reaped at the next loop iteration and freed in its
 * close callback, so every caller up the stack may go on using c, its
 * subscriptions and their deliveries. */
void conn_kill(conn *c);
/* Who c is, for a log line about it: " (pid P, uid U)" for a peer of the
 * Unix socket, " (WebSocket)" for one of /ws; written into buf (32 bytes
 * hold either), which it returns. */
const char *conn_peer(const conn *c, char *buf, size_t n);
/* Closes c if its client has shut its side (c->eof) and is owed nothing
 * more: no stream of its own, no subscription, no request in progress,
 * nothing queued. */
void conn_close_if_finished(conn *c);
/* Puts c on the `later` list, which conn.c drains at the start of the
 * next loop iteration (to reap it, or read on). */
void conn_later(conn *c);
/* Stops reading c (flow control, a fatal error, shutdown). */
void conn_read_stop(conn *c);
/* The n_inflight messages at the head of c's queue were written (status
 * 0) or failed (a libuv error): they leave the queue, and what waits on
 * that (the next write, a paused reader, a fatal close) goes on. */
void conn_write_done(conn *c, int status);

/* conn.c */
/* Reaps every dead connection now; only where nothing up the stack holds
 * one (the shutdown's last step). */
void conn_reap_all(server *srv);
/* The `later` pass (server.later's callback): reaps the dead connections
 * on the list and lets the others read on. */
void conn_on_later(uv_idle_t *h);
void conn_resume_if_drained(conn *c);
void on_connection(uv_stream_t *listener, int status);
/* Serves an already connected Unix stream socket (the fuzz harness uses a
 * socketpair). Returns 0 or -1. */
int conn_adopt(server *srv, int fd);
void conn_check_limits(server *srv);
/* A connection over another transport (tr, with its data), reading;
 * NULL when out of memory. It is subject to --max-clients like any. */
conn *conn_open(server *srv, const conn_transport *tr, void *data);
/* Whether the WebSocket clients hold their share of the connections (half
 * of --max-clients, in *share), which they share among them all when no
 * --http-token-file says whose they are (conn.c). */
bool conn_web_share_full(server *srv, int *share);
/* Bytes that arrived for c; message_end: they end a whole message of the
 * transport, which is then handled (unless reading has stopped). */
void conn_input(conn *c, const void *p, size_t n, bool message_end);

/* fanout.c */
int stream_start(stream *s); /* announce to subscribers */
void server_on_done(uv_async_t *a); /* drains finished chunks */
void deliveries_attach(server *srv, subscription *sub, stream *s);
void delivery_remove_sub(server *srv, subscription *sub);
/* One chunk (its emitted_us set) to every subscriber of its stream. */
void fanout_chunk(server *srv, chunk_out *co);
/* The chunk's CHUNK message with these outputs and dtype, and its WORDS
 * message (words on), each encoded once per chunk and owned by it; NULL
 * when out of memory. */
msgbuf *chunk_variant(server *srv, chunk_out *co, uint32_t outputs,
                      uint8_t dtype);
msgbuf *chunk_words_message(chunk_out *co);
void fanout_ended(server *srv, stream *s);
void send_stream_started(delivery *d);

/* stats.c */
/* Bytes the process holds allocated from malloc, in use (not the free
 * memory the heap keeps, which RSS counts); 0 where the C library cannot
 * say. Walks every arena: for STATS and /metrics, not a hot path. */
size_t heap_bytes(void);
/* heap_bytes() as STATS and /metrics report it: measured once per
 * millisecond of the loop's clock, shared by every reply built in it. */
size_t server_heap_bytes(server *srv);
/* A STATS_REPLY page and a STREAMS message encoded into out: their bytes,
 * or 0 when cap is too small. */
size_t build_stats(server *srv, uint8_t *out, size_t cap,
                   const aural_msg_stats *req);
size_t build_stream_list(server *srv, uint8_t *out, size_t cap);
/* The 50th and 99th percentiles of a stream's recent chunk latencies in
 * ms (0 before its first chunk), as STATS reports them. */
void stream_latency_pcts(stream *s, double *p50, double *p99);

/* metrics.c */
/* Counts one chunk's latency (ready to emitted) in the histogram. */
void metrics_observe_latency(server *srv, double seconds);
/* The Prometheus text exposition of the server's state, in a buffer the
 * caller frees: its length, or 0 (*out NULL) when out of memory. Linear
 * in the streams and subscriptions. */
size_t metrics_render(server *srv, char **out);

/* mic.c */
int mic_list_devices(void);
int mic_start(server *srv, const char *device, char *why, size_t why_len);
int mic_begin(server *srv); /* starts capturing (at the stream's release) */
void mic_poll(server *srv);
void mic_stop(server *srv);
/* Devices still closing on their own threads (each lets go of its source
 * before it is counted out). */
int mic_closers_running(void);

/* cluster.c */
/* Connects to the cluster (--cluster) and starts taking streams from it.
 * Returns 0, or -1 with why when Redis cannot be reached (unless
 * --cluster-optional, when it retries in the background). */
int cluster_start(server *srv, char *why, size_t why_len);
/* The shutdown's start: takes no more streams, publishes nothing more of
 * the ones it has, and hands them back as they end. */
void cluster_stop(server *srv);
/* The shutdown's end: the connections close (their last replies awaited
 * for at most a second). */
void cluster_close(server *srv);


/* config.c */
/* A key the config file may hold: an option's long name and whether it
 * takes a value (no_argument: a switch, "yes" or "no"; optional_argument:
 * a switch or a value), with CONFIG_* flags. */
enum {
  CONFIG_ONCE = 0,   /* a value as written, on one line */
  CONFIG_PATH = 1,   /* a relative value is taken from the file's directory */
  CONFIG_REPEAT = 2, /* may be given on several lines */
  CONFIG_NEVER = 4,  /* command line only (--config, --help, ...) */
  CONFIG_URL = 8,    /* a relative unix:PATH is taken as CONFIG_PATH's */
};
typedef struct config_key {
  const char *name;
  int has_arg;
  unsigned flags;
} config_key;
typedef struct config_words {
  char **words; /* argv-style: "aurald", "--key=value", ..., NULL */
  int *lines;   /* (n) the file's line of each word; 0 for "aurald" */
  size_t n, cap;
} config_words;
/* Reads the config file at path into words, each key checked against the
 * n_keys keys (whole names, each once unless CONFIG_REPEAT). Returns 0, or
 * -1 with why naming the file and line. */
int config_read(const char *path, const config_key *keys, size_t n_keys,
                config_words *cw, char *why, size_t why_len);
void config_words_free(config_words *cw);
int activation_fd(char *why, size_t why_len);
void notify(const char *state);

/* socket.c */
int socket_prepare(server *srv, char *why, size_t why_len);
int socket_adopt(server *srv, int fd, char *why, size_t why_len);
void socket_remove(server *srv);
bool peer_allowed(server *srv, int fd, uid_t uid, gid_t gid);

#endif
