/*
 * Cluster mode: streams taken from Redis, chunks published back to it
 * (docs/CLUSTER.md has the key layout and the guarantees).
 *
 * Two connections, both on the loop through hiredis' libuv adapter: `cmd`
 * for everything but the audio, and `rd`, whose only command is a blocking
 * XREAD of every owned stream's audio. Each owned stream is an ordinary
 * stream of the registry (a client stream with no connection), with hooks
 * (stream_loop.on_chunk, on_end) through which its chunks and its end come
 * here before its local subscribers get them.
 *
 * Ownership: an announcement entry pending in this node's name in the
 * consumer group is a stream this node owns. Every heartbeat re-claims
 * those entries (a script that touches only entries still ours, and says
 * which are not), which keeps their idle time low; an entry idle longer
 * than the heartbeat's expiry belongs to a node that stopped, and any node
 * with room claims it (XAUTOCLAIM) and resumes the stream from its
 * checkpoint: it recomputes the chunks that fill the encoder's windows
 * again and publishes from the checkpoint on.
 *
 * Nothing is published twice in Redis: a chunk's entry ID is its seq. A
 * stream whose input is cut (shutdown, a lost connection, a lost claim)
 * publishes nothing more: the frontend's flush at a cut is not the
 * stream's real continuation.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <aural/cluster.h>

#include "daemon.h"

#define POLL_MS 50        /* the cluster's timer */
#define BEAT_S 1.0        /* heartbeat period */
#define CLAIM_S 0.25      /* looking for orphaned streams */
#define CLAIM_MAX 4       /* orphans taken per look */
#define READ_BLOCK_MS 100 /* XREAD BLOCK: new streams wait this long */
#define READ_COUNT 2      /* entries per stream per XREAD */
#define BACKOFF_MIN_S 0.1
#define BACKOFF_MAX_S 5.0
#define TRIM_EVERY 20 /* chunks between trims of a stream's audio */
#define EVENTS_MAXLEN "10000"
#define RELEASED "released" /* consumer that holds streams handed back */

enum { CL_DOWN, CL_CONNECTING, CL_UP };

typedef struct cstream cstream;

typedef struct cluster {
  server *srv;
  aural_cluster_url url;
  char where[280]; /* the URL for logs */
  char password[AURAL_CLUSTER_PASSWORD_MAX + 1];
  bool has_password;
  char node[128];
  /* cmd: every command but these two; rd: the XREAD of the audio; ann:
   * the XREADGROUP of announcements. Both block, each on its own
   * connection: a node waiting on the announcements is served in turn
   * with the others, so new streams spread over the nodes. */
  redisAsyncContext *cmd, *rd, *ann;
  int state;
  int n_ready;              /* connections whose first PING was answered */
  bool stopping, closing;
  bool read_busy, claim_busy, ann_busy; /* XREAD, XAUTOCLAIM, XREADGROUP */
  bool group_busy;                      /* XGROUP CREATE */
  bool group_seen; /* the group answered since it was last found gone */
  double ann_at; /* after a refused XREADGROUP: not again before then */
  double read_at; /* after a refused XREAD: not again before then */
  double backoff_s, retry_at, down_since, connect_at;
  double next_beat, next_claim;
  double beat_sent; /* an unanswered heartbeat's time, or 0 */
  bool ever_up;
  uv_timer_t timer;
  cstream *streams;
  int n_streams, n_starting;
  uint64_t published, duplicates, disconnects;
  int64_t started_us;
} cluster;

/* One owned stream. */
struct cstream {
  cluster *cl;
  stream *s;
  cstream *next;
  char name[AURAL_PROTO_NAME_MAX + 1];
  char entry[64]; /* its announcement entry */
  char k_audio[AURAL_CLUSTER_KEY_MAX], k_out[AURAL_CLUSTER_KEY_MAX],
      k_ckpt[AURAL_CLUSTER_KEY_MAX], k_meta[AURAL_CLUSTER_KEY_MAX];
  uint8_t format;
  int channels;
  double rate;
  int64_t start_us;      /* the stream's start, kept across owners */
  char from_id[64];      /* XREAD the audio after this entry */
  uint64_t next_sample;  /* the audio frame the next entry starts at */
  uint64_t skip;         /* frames of the next entry already past */
  uint64_t publish_from; /* chunks before it were stored already */
  uint64_t pushed;       /* audio frames pushed to the stream */
  float *rest;           /* decoded frames the stream had no room for */
  size_t rest_at, rest_n, rest_cap;
  bool end_seen; /* the end entry was read */
  bool failed;   /* bad audio: the stream ended on it */
  bool cut;      /* input ended early: publish no more */
  double fed_at; /* when it last got audio, or did not wait for any */
  uint64_t since_trim;
};

/* A claimed announcement on its way to becoming a stream. */
typedef struct starting {
  cluster *cl;
  char entry[64];
  char name[AURAL_PROTO_NAME_MAX + 1];
  double rate;
  int channels;
  uint8_t format;
  bool resumed;
  uint64_t chunks; /* the checkpoint */
  int64_t start_us;
  uint64_t first_chunk;  /* where recomputing begins */
  uint64_t first_sample; /* its audio frame */
  aural_lexicon *custom; /* the announcement's vocabulary, or NULL */
  double boost;          /* its boost, or -1 for the default */
} starting;

static void go_down(cluster *cl, const char *why);
static void read_audio(cluster *cl);
static void update_stats(cluster *cl);
static void read_announcements(cluster *cl);

/* The three connections, for what is done to each alike. */
static redisAsyncContext **conns(cluster *cl, int i) {
  return i == 0 ? &cl->cmd : i == 1 ? &cl->rd : &cl->ann;
}
#define N_CONNS 3

/* ---- small helpers ------------------------------------------------------- */

static bool reply_ok(const redisReply *r) {
  return r != NULL && r->type != REDIS_REPLY_ERROR;
}

/* The value of field `name` in a flat [field, value, ...] array, or NULL. */
static const redisReply *field(const redisReply *arr, const char *name) {
  if (arr == NULL || arr->type != REDIS_REPLY_ARRAY) return NULL;
  for (size_t i = 0; i + 1 < arr->elements; i += 2) {
    const redisReply *k = arr->element[i];
    if (k->type == REDIS_REPLY_STRING && strlen(name) == k->len &&
        memcmp(k->str, name, k->len) == 0)
      return arr->element[i + 1];
  }
  return NULL;
}

/* Most fields an announcement or an audio entry has (6 and 1). */
#define MAX_FIELDS 16

/* What is wrong with an entry's fields, a flat [field, value, ...]
 * array, into why (true), or false: more than MAX_FIELDS of them, or a
 * field named twice (an entry written with XADD k * f 1 f 2, which Redis
 * keeps: readers that take the first and readers that take the last
 * would read two different entries). */
static bool bad_fields(const redisReply *arr, char *why, size_t why_len) {
  if (arr == NULL || arr->type != REDIS_REPLY_ARRAY) return false;
  if (arr->elements > 2 * MAX_FIELDS) {
    snprintf(why, why_len, "%zu fields, more than %d", arr->elements / 2,
             MAX_FIELDS);
    return true;
  }
  for (size_t i = 0; i + 1 < arr->elements; i += 2)
    for (size_t j = i + 2; j + 1 < arr->elements; j += 2) {
      const redisReply *a = arr->element[i], *b = arr->element[j];
      if (a->type == REDIS_REPLY_STRING && b->type == REDIS_REPLY_STRING &&
          a->len == b->len && memcmp(a->str, b->str, a->len) == 0) {
        snprintf(why, why_len, "the field \"%.32s\" is there twice",
                 a->str);
        return true;
      }
    }
  return false;
}

/* A string reply as a NUL-terminated copy in buf ("" when absent). */
static const char *str_of(const redisReply *r, char *buf, size_t cap) {
  buf[0] = '\0';
  if (r != NULL && r->type == REDIS_REPLY_STRING && r->len < cap) {
    memcpy(buf, r->str, r->len);
    buf[r->len] = '\0';
  }
  return buf;
}

static bool parse_u64(const char *s, uint64_t *out) {
  return aural_cluster_parse_uint(s, strlen(s), 0, UINT64_MAX, out) == 0;
}

/* An entry ID "A-B": A, when B is b. */
static bool parse_id(const char *id, uint64_t b, uint64_t *a) {
  const char *dash = strchr(id, '-');
  char head[32];
  uint64_t tail;
  if (dash == NULL || (size_t)(dash - id) >= sizeof head) return false;
  memcpy(head, id, (size_t)(dash - id));
  head[dash - id] = '\0';
  return parse_u64(head, a) && parse_u64(dash + 1, &tail) && tail == b;
}

static double now_s(void) { return aurald_mono_s(); }

/* Sends a command whose arguments are strings. */
static int command(redisAsyncContext *ac, redisCallbackFn *fn, void *priv,
                   int argc, const char **argv) {
  if (ac == NULL) return -1;
  return redisAsyncCommandArgv(ac, fn, priv, argc, argv, NULL) == REDIS_OK ? 0
                                                                           : -1;
}

/* Appends a JSON string of s to buf (only '"' and '\\' can occur in a
 * stream name; control bytes cannot). */
static void json_str(char *buf, size_t cap, const char *s) {
  size_t n = strlen(buf);
  if (n + 2 >= cap) return;
  buf[n++] = '"';
  for (; *s != '\0' && n + 3 < cap; s++) {
    if (*s == '"' || *s == '\\') buf[n++] = '\\';
    buf[n++] = *s;
  }
  buf[n++] = '"';
  buf[n] = '\0';
}

static void ignore_reply(redisAsyncContext *ac, void *r, void *priv) {
  (void)ac;
  (void)priv;
  const redisReply *rep = r;
  if (rep != NULL && rep->type == REDIS_REPLY_ERROR)
    log_warn("cluster: Redis said: %s", rep->str);
}

/* ---- the consumer group -------------------------------------------------- */

static void on_group(redisAsyncContext *ac, void *r, void *priv) {
  cluster *cl = priv;
  const redisReply *rep = r;
  (void)ac;
  if (rep == NULL) return; /* group_busy reset with the connections */
  cl->group_busy = false;
  if (rep->type == REDIS_REPLY_ERROR && strncmp(rep->str, "BUSYGROUP", 9) != 0)
    log_warn("cluster: creating the consumer group: %s", rep->str);
}

/* Creates the announcements' consumer group (and the stream), unless it
 * exists (BUSYGROUP) or a creation is under way. */
static void create_group(cluster *cl) {
  if (cl->group_busy) return;
  const char *argv[] = {"XGROUP", "CREATE",  AURAL_CLUSTER_ANNOUNCE,
                        AURAL_CLUSTER_GROUP, "0", "MKSTREAM"};
  if (command(cl->cmd, on_group, cl, 6, argv) == 0) cl->group_busy = true;
}

/* Whether an error says that the consumer group is gone: the key
 * aural:announce deleted (FLUSHALL, DEL, an eviction) or the group
 * destroyed while the node was connected. It is created again, as at
 * connection, from the oldest entry left; a node would otherwise never
 * take a new stream again. */
static bool group_gone(cluster *cl, const redisReply *rep) {
  if (strstr(rep->str, "NOGROUP") == NULL) return false;
  /* Each connection may say so once: the loss is told once. */
  if (cl->group_seen)
    log_warn("cluster: the consumer group \"%s\" of %s is gone; creating "
             "it again", AURAL_CLUSTER_GROUP, AURAL_CLUSTER_ANNOUNCE);
  cl->group_seen = false;
  create_group(cl);
  return true;
}

/* ---- events and the end of a stream's ownership -------------------------- */

static void send_event(cluster *cl, const char *type, const cstream *cs,
                       const char *name, uint64_t chunks, const char *reason,
                       const char *message) {
  char ch[32];
  snprintf(ch, sizeof ch, "%" PRIu64, chunks);
  const char *argv[] = {"XADD",        AURAL_CLUSTER_EVENTS,
                        "MAXLEN",      "~",
                        EVENTS_MAXLEN, "*",
                        "type",        type,
                        "stream",      cs != NULL ? cs->name : name,
                        "node",        cl->node,
                        "chunks",      ch,
                        "reason",      reason,
                        "message",     message};
  command(cl->cmd, ignore_reply, NULL, 18, argv);
}

/* Hands an announcement back: pending in no live node's name and idle for
 * an hour, so that the next node with room takes it at once. */
static void release_entry(cluster *cl, const char *entry) {
  const char *argv[] = {"XCLAIM",
                        AURAL_CLUSTER_ANNOUNCE,
                        AURAL_CLUSTER_GROUP,
                        RELEASED,
                        "0",
                        entry,
                        "IDLE",
                        "3600000",
                        "JUSTID"};
  command(cl->cmd, ignore_reply, NULL, 9, argv);
}

/* Done with the announcement entry: acknowledged and deleted, so that
 * no node takes it again. */
static void drop_announcement(cluster *cl, const char *entry) {
  const char *ack[] = {"XACK", AURAL_CLUSTER_ANNOUNCE, AURAL_CLUSTER_GROUP,
                       entry};
  command(cl->cmd, ignore_reply, NULL, 4, ack);
  const char *del[] = {"XDEL", AURAL_CLUSTER_ANNOUNCE, entry};
  command(cl->cmd, ignore_reply, NULL, 3, del);
}

/* A stream that has ended for good: its event, its announcement acked and
 * deleted, its audio gone, its outputs kept for --cluster-expire. */
static void finish_entry(cluster *cl, cstream *cs, uint64_t n_chunks) {
  stream *s = cs->s;
  send_event(cl, "ended", cs, NULL, n_chunks,
             end_reason_name(s->sched.reason), s->sched.message);
  drop_announcement(cl, cs->entry);
  const char *del_audio[] = {"DEL", cs->k_audio};
  command(cl->cmd, ignore_reply, NULL, 2, del_audio);
  char ms[32];
  snprintf(ms, sizeof ms, "%lld",
           (long long)(cl->srv->opt->cluster_expire_s * 1000));
  const char *keys[] = {cs->k_out, cs->k_ckpt, cs->k_meta};
  for (int i = 0; i < 3; i++) {
    const char *exp[] = {"PEXPIRE", keys[i], ms};
    command(cl->cmd, ignore_reply, NULL, 3, exp);
  }
}

/* Whether the stream's input ended on an error: bad audio or a producer
 * gone silent (cs->failed), or its computation failing (compute.c's
 * fail_stream()). Its final chunk then carries the message. */
static bool ended_on_error(const cstream *cs) {
  if (cs->failed) return true;
  server *srv = cs->cl->srv;
  pthread_mutex_lock(&srv->mu);
  bool error = cs->s->sched.reason == END_ERROR;
  pthread_mutex_unlock(&srv->mu);
  return error;
}

/* Ends a stream's input early: nothing more of it is published, and the
 * stream resumes from its checkpoint, here or elsewhere. */
static void cut(cstream *cs, const char *why) {
  if (cs->cut) return;
  cs->cut = true;
  stream_end_input(cs->s, END_ERROR, why);
}

/* A stream no node will encode (its announcement refused, or it cannot
 * resume): its meta hash says why in `error`, where consumers waiting for
 * it look (CLUSTER.md §1), its audio is deleted and its other keys expire
 * as an ended stream's do. Nothing is touched when the stream has its
 * final chunk already, nor, for a refused announcement (owned 0), when a
 * node has started the stream: a second announcement of a live stream's
 * name must not end the first. */
static const char RETIRE[] =
    "local function is(k, t)\n"
    "  local got = redis.call('TYPE', k).ok\n"
    "  return got == t or got == 'none'\n"
    "end\n"
    "local top = {}\n"
    "if is(KEYS[4], 'stream') then\n"
    "  top = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)\n"
    "end\n"
    "if #top == 1 then\n"
    "  local f = top[1][2]\n"
    "  for i = 1, #f, 2 do\n"
    "    if f[i] == 'final' then return 0 end\n"
    "  end\n"
    "end\n"
    "local hash = is(KEYS[1], 'hash')\n"
    "if ARGV[3] == '0' and hash and\n"
    "   (redis.call('HEXISTS', KEYS[1], 'node') == 1 or\n"
    "    redis.call('HEXISTS', KEYS[1], 'entry') == 1) then\n"
    "  return 0\n"
    "end\n"
    "if hash then redis.call('HSET', KEYS[1], 'error', ARGV[2]) end\n"
    "redis.call('DEL', KEYS[2])\n"
    "for _, i in ipairs({1, 3, 4}) do\n"
    "  redis.call('PEXPIRE', KEYS[i], ARGV[1])\n"
    "end\n"
    "return 1\n";

static void retire(cluster *cl, const char *name, const char *why,
                   bool owned) {
  char meta[AURAL_CLUSTER_KEY_MAX], audio[AURAL_CLUSTER_KEY_MAX],
      ckpt[AURAL_CLUSTER_KEY_MAX], out[AURAL_CLUSTER_KEY_MAX], ms[32];
  if (aural_cluster_key(meta, sizeof meta, name, AURAL_CLUSTER_META) == 0)
    return; /* a name with no keys */
  aural_cluster_key(audio, sizeof audio, name, AURAL_CLUSTER_AUDIO);
  aural_cluster_key(ckpt, sizeof ckpt, name, AURAL_CLUSTER_CKPT);
  aural_cluster_key(out, sizeof out, name, AURAL_CLUSTER_OUT);
  snprintf(ms, sizeof ms, "%lld",
           (long long)(cl->srv->opt->cluster_expire_s * 1000));
  const char *argv[] = {"EVAL", RETIRE, "4",  meta, audio,
                        ckpt,   out,    ms,   why,  owned ? "1" : "0"};
  command(cl->cmd, ignore_reply, NULL, 10, argv);
}

/* ---- audio in ------------------------------------------------------------ */

/* Pushes what the stream has room for of the frames waiting; ends its
 * input once the end has been read and everything is in. */
static void push_rest(cstream *cs) {
  if (cs->cut || cs->failed || stream_input_ended(cs->s)) return;
  if (cs->rest_n > 0) {
    size_t took =
        stream_push(cs->s, cs->rest + cs->rest_at * (size_t)cs->channels,
                    cs->rest_n, aurald_now_us());
    cs->rest_at += took;
    cs->rest_n -= took;
    cs->pushed += took;
    if (cs->rest_n == 0) cs->rest_at = 0;
  }
  if (cs->rest_n == 0 && cs->end_seen) stream_end_input(cs->s, END_EOF, "");
}

static void audio_error(cstream *cs, const char *id, const char *what) {
  char msg[256];
  snprintf(msg, sizeof msg, "audio entry %s: %s", id, what);
  log_warn("cluster stream \"%s\": %s; the stream ends", cs->name, msg);
  cs->failed = true;
  stream_end_input(cs->s, END_ERROR, msg);
}

/* Decodes n frames of PCM into the waiting frames, from frame `from`. */
static bool take_pcm(cstream *cs, const uint8_t *p, size_t n, size_t from) {
  size_t ch = (size_t)cs->channels, want = (cs->rest_at + cs->rest_n + n) * ch;
  if (want > cs->rest_cap) {
    float *grown = realloc(cs->rest, want * sizeof *grown);
    if (grown == NULL) return false;
    cs->rest = grown;
    cs->rest_cap = want;
  }
  float *x = cs->rest + (cs->rest_at + cs->rest_n) * ch;
  size_t bytes = cs->format == AURAL_SAMPLE_S16 ? 2 : 4;
  if (pcm_decode(cs->format, p + from * ch * bytes, n * ch, x) < n * ch)
    return false;
  cs->rest_n += n;
  return true;
}

/* One audio entry: checked against where the stream is, then queued. */
static void feed_entry(cstream *cs, const redisReply *entry) {
  char id[64];
  uint64_t first;
  if (entry->type != REDIS_REPLY_ARRAY || entry->elements != 2) return;
  str_of(entry->element[0], id, sizeof id);
  snprintf(cs->from_id, sizeof cs->from_id, "%s", id);
  if (cs->failed || cs->end_seen) return;
  if (!parse_id(id, 1, &first)) {
    audio_error(cs, id, "the ID is not FIRST_SAMPLE-1");
    return;
  }
  char what[128];
  if (bad_fields(entry->element[1], what, sizeof what)) {
    audio_error(cs, id, what);
    return;
  }
  uint64_t at = cs->next_sample + cs->skip;
  const redisReply *pcm = field(entry->element[1], "pcm");
  if (pcm == NULL) {
    if (field(entry->element[1], "end") == NULL) {
      audio_error(cs, id, "neither pcm nor end");
      return;
    }
    if (first != at) {
      audio_error(cs, id, "the end is not where the audio ends");
      return;
    }
    cs->end_seen = true;
    cs->fed_at = now_s();
    push_rest(cs);
    return;
  }
  size_t frame_bytes =
      (cs->format == AURAL_SAMPLE_S16 ? 2 : 4) * (size_t)cs->channels;
  size_t n = pcm->type == REDIS_REPLY_STRING ? pcm->len / frame_bytes : 0;
  if (n == 0 || pcm->len % frame_bytes != 0 ||
      n > (size_t)cs->rate * AURAL_CLUSTER_ENTRY_MAX_S) {
    audio_error(cs, id, "pcm is not 1 frame to 1 s of whole frames");
    return;
  }
  if (first > at || first + n <= at) {
    snprintf(what, sizeof what, "expected audio from frame %" PRIu64, at);
    audio_error(cs, id, what);
    return;
  }
  size_t from = (size_t)(at - first);
  if (!take_pcm(cs, (const uint8_t *)pcm->str, n - from, from)) {
    audio_error(cs, id, "a non-finite sample (or out of memory)");
    return;
  }
  cs->next_sample = first + n;
  cs->skip = 0;
  cs->fed_at = now_s();
  push_rest(cs);
}

static cstream *find_audio_key(cluster *cl, const redisReply *key) {
  for (cstream *cs = cl->streams; cs != NULL; cs = cs->next)
    if (key->type == REDIS_REPLY_STRING && strlen(cs->k_audio) == key->len &&
        memcmp(cs->k_audio, key->str, key->len) == 0)
      return cs;
  return NULL;
}

/* A TYPE of one owned stream's audio key, asked after the XREAD of
 * every stream's audio was refused with WRONGTYPE, which does not say
 * whose key it was. */
typedef struct type_check {
  cluster *cl;
  char name[AURAL_PROTO_NAME_MAX + 1];
  bool last; /* the XREAD waits for this answer */
} type_check;

/* Ends the stream whose audio key is of another type than a stream (a
 * string where another program wrote one): its own error, not every
 * stream's. The XREAD goes on, without it, after the last answer. */
static void on_audio_type(redisAsyncContext *ac, void *r, void *priv) {
  type_check *tc = priv;
  const redisReply *rep = r;
  (void)ac;
  cluster *cl = tc->cl;
  if (rep != NULL && cl->state == CL_UP) { /* else read_busy reset there */
    cstream *cs = cl->streams;
    while (cs != NULL && strcmp(cs->name, tc->name) != 0) cs = cs->next;
    if (cs != NULL && !cs->failed && !cs->end_seen &&
        rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "stream") != 0 &&
        strcmp(rep->str, "none") != 0) {
      char msg[AURAL_CLUSTER_KEY_MAX + 64];
      snprintf(msg, sizeof msg, "%s is a %.16s, not a stream", cs->k_audio,
               rep->str);
      log_warn("cluster stream \"%s\": %s; the stream ends", cs->name, msg);
      cs->failed = true;
      stream_end_input(cs->s, END_ERROR, msg);
    }
    if (tc->last) {
      cl->read_busy = false;
      read_audio(cl);
    }
  }
  free(tc);
}

/* Asks the type of every owned stream's audio key; -1 when none was
 * asked (the XREAD is then tried again after a beat). */
static int check_audio_types(cluster *cl) {
  type_check *prev = NULL;
  for (cstream *cs = cl->streams; cs != NULL; cs = cs->next) {
    type_check *tc = calloc(1, sizeof *tc);
    if (tc == NULL) break;
    tc->cl = cl;
    snprintf(tc->name, sizeof tc->name, "%s", cs->name);
    const char *argv[] = {"TYPE", cs->k_audio};
    if (command(cl->rd, on_audio_type, tc, 2, argv) < 0) {
      free(tc);
      break;
    }
    prev = tc;
  }
  /* The answers come in order: the last one asked lets the XREAD go. */
  if (prev == NULL) return -1;
  prev->last = true;
  return 0;
}

static void on_audio(redisAsyncContext *ac, void *r, void *priv) {
  cluster *cl = priv;
  const redisReply *rep = r;
  (void)ac;
  if (rep == NULL || cl->state != CL_UP) return; /* read_busy reset there */
  if (rep->type == REDIS_REPLY_ERROR &&
      strncmp(rep->str, "WRONGTYPE", 9) == 0 && check_audio_types(cl) == 0)
    return; /* read_busy until the last type is known */
  cl->read_busy = false;
  if (rep->type == REDIS_REPLY_ERROR) {
    /* Asked again after a beat: an error that stays is not logged (and
     * asked) as fast as Redis answers. */
    log_warn("cluster: reading audio: %s", rep->str);
    cl->read_at = now_s() + BEAT_S;
    return;
  }
  if (rep->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < rep->elements; i++) {
      const redisReply *kv = rep->element[i];
      if (kv->type != REDIS_REPLY_ARRAY || kv->elements != 2) continue;
      cstream *cs = find_audio_key(cl, kv->element[0]);
      const redisReply *entries = kv->element[1];
      for (size_t k = 0; cs != NULL && k < entries->elements; k++)
        feed_entry(cs, entries->element[k]);
    }
  }
  read_audio(cl);
}

/* Whether the stream wants more audio now: room for a whole read, or
 * for half its input buffer when that is smaller (many channels at a high
 * rate); what does not fit waits in `rest`. */
static bool wants_audio(const cstream *cs) {
  if (cs->cut || cs->failed || cs->end_seen || cs->rest_n > 0) return false;
  size_t need = (size_t)cs->rate * AURAL_CLUSTER_ENTRY_MAX_S * READ_COUNT;
  if (need > cs->s->in.cap_frames / 2) need = cs->s->in.cap_frames / 2;
  return stream_room(cs->s) >= need;
}

/* A stream that waits for audio its producer does not add ends after
 * --cluster-idle: a producer that died before its end entry would else
 * hold the stream, a slot of this node and its name for ever (nothing
 * but that entry ends a cluster stream). The time counts only while the
 * stream wants audio, never while its node is behind. */
static void check_idle(cstream *cs, double now) {
  double idle_s = cs->cl->srv->opt->cluster_idle_s;
  if (!wants_audio(cs)) {
    cs->fed_at = now;
    return;
  }
  if (idle_s <= 0 || now - cs->fed_at < idle_s) return;
  char msg[160];
  snprintf(msg, sizeof msg,
           "no audio added for %g s after frame %" PRIu64
           " (its producer stopped without the end entry?)",
           idle_s, cs->next_sample);
  log_warn("cluster stream \"%s\": %s; the stream ends", cs->name, msg);
  cs->failed = true;
  stream_end_input(cs->s, END_ERROR, msg);
}

/* One blocking XREAD of every stream that has room, unless one is out. */
static void read_audio(cluster *cl) {
  if (cl->state != CL_UP || cl->read_busy || cl->stopping ||
      now_s() < cl->read_at)
    return;
  /* Which streams want audio is decided once: their room grows as the
   * workers take input, so asking twice could give two answers. */
  const char **argv = malloc((size_t)(6 + 2 * cl->n_streams) * sizeof *argv);
  cstream **want = malloc((size_t)cl->n_streams * sizeof *want + 1);
  int n = 0;
  for (cstream *cs = cl->streams; want != NULL && cs != NULL; cs = cs->next)
    if (wants_audio(cs)) want[n++] = cs;
  char count[16], block[16];
  snprintf(count, sizeof count, "%d", READ_COUNT);
  snprintf(block, sizeof block, "%d", READ_BLOCK_MS);
  int k = 0;
  if (argv != NULL && n > 0) {
    argv[k++] = "XREAD";
    argv[k++] = "COUNT";
    argv[k++] = count;
    argv[k++] = "BLOCK";
    argv[k++] = block;
    argv[k++] = "STREAMS";
    for (int i = 0; i < n; i++) argv[k++] = want[i]->k_audio;
    for (int i = 0; i < n; i++) argv[k++] = want[i]->from_id;
    if (command(cl->rd, on_audio, cl, k, argv) == 0) cl->read_busy = true;
  }
  free(want);
  free(argv);
}

/* ---- chunks out ---------------------------------------------------------- */

static void on_published(redisAsyncContext *ac, void *r, void *priv) {
  cluster *cl = priv;
  const redisReply *rep = r;
  (void)ac;
  if (rep == NULL) return;
  if (rep->type != REDIS_REPLY_ERROR) {
    cl->published++;
  } else if (strstr(rep->str, "equal or smaller") != NULL) {
    cl->duplicates++; /* stored before: Redis keeps one */
  } else {
    log_warn("cluster: publishing a chunk: %s", rep->str);
  }
  update_stats(cl);
}

/* The audio frame (at rate) where frame f starts. */
static uint64_t frame_sample(const server *srv, double rate, uint64_t f) {
  const aural_fbank_opts *fb = &srv->mc->fbank;
  double hop = fb->sample_rate_hz * fb->frame_shift_ms / 1000.0;
  return (uint64_t)llround((double)f * hop * rate / fb->sample_rate_hz);
}

/* The chunk to recompute from so that chunk k comes out as in an
 * uninterrupted run: every layer's window refilled (n_layers * (W - 1)
 * frames), some frames for the resampler's history, and a start on a
 * whole audio frame. */
static uint64_t resume_chunk(const server *srv, double rate, uint64_t k) {
  const aural_model_config *mc = srv->mc;
  uint64_t C = srv->chunk_frames;
  uint64_t frames = (uint64_t)mc->n_layers * (uint64_t)(mc->window - 1);
  if (rate != mc->fbank.sample_rate_hz) frames += 16;
  uint64_t back = (frames + C - 1) / C;
  uint64_t k0 = k > back ? k - back : 0;
  double hop = mc->fbank.sample_rate_hz * mc->fbank.frame_shift_ms / 1000.0;
  for (; k0 > 0; k0--) {
    double x = (double)(k0 * C) * hop * rate / mc->fbank.sample_rate_hz;
    if (fabs(x - round(x)) < 1e-6) break;
  }
  return k0;
}

static void trim_audio(cstream *cs, uint64_t next_chunk) {
  server *srv = cs->cl->srv;
  uint64_t k0 = resume_chunk(srv, cs->rate, next_chunk);
  uint64_t keep = frame_sample(srv, cs->rate, k0 * srv->chunk_frames);
  uint64_t entry_max = (uint64_t)cs->rate * AURAL_CLUSTER_ENTRY_MAX_S;
  if (keep <= entry_max) return;
  char min[48];
  snprintf(min, sizeof min, "%" PRIu64 "-0", keep - entry_max);
  const char *argv[] = {"XTRIM", cs->k_audio, "MINID", "~", min};
  command(cs->cl->cmd, ignore_reply, NULL, 5, argv);
}

/* The chunk's entry and, only when Redis stored it, the checkpoint that
 * says so, in one script (atomic like a transaction, which would run the
 * HSET even after the XADD failed). A chunk refused as stored already
 * comes from a node that went on after another one took its stream over
 * and went further: writing the checkpoint then would move it back to
 * audio the new owner may have trimmed. KEYS: out, ckpt; ARGV: the
 * retention, the number m of XADD arguments after it (ID, fields and
 * values), those, then the checkpoint's fields and values. */
static const char PUBLISH[] =
    "local m = tonumber(ARGV[2])\n"
    "local id = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1],\n"
    "                       unpack(ARGV, 3, 2 + m))\n"
    "if type(id) == 'table' and id.err then return id end\n"
    "redis.call('HSET', KEYS[2], unpack(ARGV, 3 + m))\n"
    "return id\n";

static void publish(cstream *cs, chunk_out *co) {
  cluster *cl = cs->cl;
  server *srv = cl->srv;
  uint32_t outputs = srv->opt->cluster_outputs;
  if (co->logits == NULL) outputs &= AURAL_OUT_EMBEDDINGS;
  msgbuf *m = chunk_variant(srv, co, outputs, srv->opt->cluster_dtype);
  msgbuf *w = srv->lexicon != NULL ? chunk_words_message(co) : NULL;
  if (m == NULL) { /* out of memory: resumed from its checkpoint */
    log_error("cluster stream \"%s\": chunk %" PRIu64 " did not encode",
              cs->name, co->h.seq);
    cut(cs, "out of memory publishing a chunk");
    return;
  }
  char id[32], retention[32], chunks[32], frames[32], samples[32], now[32],
      n_xadd[16] = "";
  snprintf(id, sizeof id, "%" PRIu64 "-1", co->h.seq);
  snprintf(retention, sizeof retention, "%ld", srv->opt->cluster_retention);
  const char *argv[32];
  size_t lens[32];
  int k = 0;
#define ARG(p, n) (argv[k] = (const char *)(p), lens[k++] = (n))
#define STR(p) ARG(p, strlen(p))
  STR("EVAL"), STR(PUBLISH), STR("2"), STR(cs->k_out), STR(cs->k_ckpt);
  STR(retention), STR(n_xadd);
  int xadd_at = k;
  STR(id), STR("chunk");
  ARG(m->data + AURAL_PROTO_HEADER_BYTES, m->len - AURAL_PROTO_HEADER_BYTES);
  if (co->text != NULL) STR("text"), ARG(co->text, co->text_len);
  if (w != NULL)
    STR("words"), ARG(w->data + AURAL_PROTO_HEADER_BYTES,
                      w->len - AURAL_PROTO_HEADER_BYTES);
  if (co->h.flags & AURAL_CHUNK_FINAL) {
    STR("final"), STR("1");
    /* Cut short (bad audio, a producer gone silent): a consumer must not
     * take what it has for the whole stream. */
    if (ended_on_error(cs)) STR("error"), STR(cs->s->sched.message);
  }
  snprintf(n_xadd, sizeof n_xadd, "%d", k - xadd_at);
  lens[xadd_at - 1] = strlen(n_xadd); /* counted now that it is known */
  snprintf(chunks, sizeof chunks, "%" PRIu64, co->h.seq + 1);
  snprintf(frames, sizeof frames, "%" PRIu64,
           co->h.first_frame + co->h.n_frames);
  snprintf(samples, sizeof samples, "%" PRIu64, cs->pushed);
  snprintf(now, sizeof now, "%" PRId64, aurald_now_us());
  STR("chunks"), STR(chunks), STR("frames"), STR(frames);
  STR("samples"), STR(samples), STR("node"), STR(cl->node);
  STR("updated_us"), STR(now);
  redisAsyncCommandArgv(cl->cmd, on_published, cl, k, argv, lens);
#undef ARG
#undef STR
  if (++cs->since_trim >= TRIM_EVERY) {
    cs->since_trim = 0;
    trim_audio(cs, co->h.seq + 1);
  }
}

/* stream_loop.on_chunk: every chunk of an owned stream, on the loop. The
 * ones recomputed to refill the windows go nowhere; a final chunk is the
 * stream's end only when its audio ended (or was bad). */
static bool on_chunk(stream *s, chunk_out *co) {
  cstream *cs = s->loop.ext;
  cluster *cl = cs->cl;
  push_rest(cs);
  read_audio(cl);
  if (co->h.seq < cs->publish_from) return false;
  bool final = (co->h.flags & AURAL_CHUNK_FINAL) != 0;
  if (cs->cut || cl->state != CL_UP ||
      (final && !cs->end_seen && !ended_on_error(cs)))
    return true;
  publish(cs, co);
  return true;
}

static void cstream_free(cstream *cs) {
  cluster *cl = cs->cl;
  for (cstream **pp = &cl->streams; *pp != NULL; pp = &(*pp)->next)
    if (*pp == cs) {
      *pp = cs->next;
      break;
    }
  cl->n_streams--;
  free(cs->rest);
  free(cs);
}

/* A stream that ends without a frame (no audio, or bad audio in its first
 * entry) has no chunk (aural_stream_ready), so none is its final one, and
 * consumers, who stop at the entry marked final, waited for ever. Its end
 * goes out as an empty final chunk 0, as a stream of whole chunks ends
 * with an empty one. */
static void publish_empty_end(cstream *cs, stream *s) {
  server *srv = cs->cl->srv;
  float none[1] = {0};
  char no_text[1] = "";
  chunk_out co = {.s = s, .emb = none};
  if (srv->mc->vocab_size > 0) { /* a CTC head: logits and text */
    co.logits = none;
    co.text = no_text;
  }
  co.h.flags = AURAL_CHUNK_FINAL;
  co.h.start_us = s->start_us;
  co.h.ready_us = aurald_now_us();
  co.h.d_model = (uint32_t)srv->mc->d_model;
  co.h.vocab_size = (uint32_t)srv->mc->vocab_size;
  publish(cs, &co); /* the command holds copies of the messages' bytes */
  for (int t = 0; t < 2; t++)
    for (int o = 0; o < 8; o++) msgbuf_unref(co.variants[t][o]);
  msgbuf_unref(co.words_msg);
}

/* stream_loop.on_end: the stream's end, before its subscribers hear. */
static void on_end(stream *s) {
  cstream *cs = s->loop.ext;
  cluster *cl = cs->cl;
  s->loop.ext = NULL;
  s->loop.on_chunk = NULL;
  uint64_t n_chunks = s->loop.chunks_emitted;
  if (cl->state == CL_UP && !cs->cut && n_chunks == 0 &&
      cs->publish_from == 0) {
    publish_empty_end(cs, s); /* out of memory cuts it: resumed elsewhere */
    n_chunks = 1;
  }
  if (cl->state == CL_UP && !cs->cut) {
    finish_entry(cl, cs, n_chunks);
    log_info("cluster stream \"%s\": done", cs->name);
  } else if (cl->state == CL_UP && cl->stopping) {
    release_entry(cl, cs->entry);
    log_info("cluster stream \"%s\": handed back at chunk %" PRIu64, cs->name,
             s->loop.chunks_emitted);
  }
  cstream_free(cs);
}

/* stream_loop.on_release: a resumed stream keeps its first start time. */
static int on_release(stream *s) {
  cstream *cs = s->loop.ext;
  if (cs != NULL && cs->start_us != 0) s->start_us = cs->start_us;
  return 0;
}

/* ---- taking streams ------------------------------------------------------ */

static void starting_done(starting *st) {
  st->cl->n_starting--;
  aural_lexicon_destroy(st->custom);
  free(st);
}

/* The model's facts a consumer needs, the first start time, the owner. */
static void write_meta(cluster *cl, cstream *cs) {
  server *srv = cl->srv;
  const aural_model_config *mc = srv->mc;
  size_t cap = 64;
  for (int i = 0; i < mc->vocab_size; i++) cap += 2 * strlen(srv->vocab[i]) + 4;
  char *vocab = malloc(cap);
  if (vocab == NULL) return;
  snprintf(vocab, cap, "[");
  for (int i = 0; i < mc->vocab_size; i++) {
    if (i > 0) strcat(vocab, ",");
    json_str(vocab, cap, srv->vocab[i]);
  }
  strcat(vocab, "]");
  char d[16], v[16], c[16], fms[32], out[16], dt[8], st[32];
  snprintf(d, sizeof d, "%d", mc->d_model);
  snprintf(v, sizeof v, "%d", mc->vocab_size);
  snprintf(c, sizeof c, "%zu", srv->chunk_frames);
  snprintf(fms, sizeof fms, "%g", mc->fbank.frame_shift_ms);
  snprintf(out, sizeof out, "%u", srv->opt->cluster_outputs);
  snprintf(dt, sizeof dt, "%s", srv->opt->cluster_dtype ? "f16" : "f32");
  snprintf(st, sizeof st, "%" PRId64, cs->start_us);
  const char *argv[] = {"HSET",       cs->k_meta, "d_model",      d,
                        "vocab_size", v,          "chunk_frames", c,
                        "frame_ms",   fms,        "outputs",      out,
                        "dtype",      dt,         "vocab",        vocab,
                        "node",       cl->node,   "start_us",     st};
  command(cl->cmd, ignore_reply, NULL, 20, argv);
  free(vocab);
}

static void stream_keys(cstream *cs) {
  aural_cluster_key(cs->k_audio, sizeof cs->k_audio, cs->name,
                    AURAL_CLUSTER_AUDIO);
  aural_cluster_key(cs->k_out, sizeof cs->k_out, cs->name, AURAL_CLUSTER_OUT);
  aural_cluster_key(cs->k_ckpt, sizeof cs->k_ckpt, cs->name,
                    AURAL_CLUSTER_CKPT);
  aural_cluster_key(cs->k_meta, sizeof cs->k_meta, cs->name,
                    AURAL_CLUSTER_META);
}

/* The stream itself, its audio read from entry `from` on (skip frames of
 * which are before its first chunk). */
static void create_stream(starting *st, uint64_t from, uint64_t skip) {
  cluster *cl = st->cl;
  server *srv = cl->srv;
  char why[256];
  cstream *cs = calloc(1, sizeof *cs);
  stream *s = NULL;
  if (cs != NULL)
    s = stream_create(srv, st->name, SRC_CLIENT, st->rate, st->channels,
                      st->custom, st->boost, st->first_chunk, why, sizeof why);
  st->custom = NULL; /* the stream's now, even when it failed */
  if (s == NULL) {
    log_warn("cluster stream \"%s\": %s; handed back", st->name,
             cs != NULL ? why : "out of memory");
    free(cs);
    release_entry(cl, st->entry);
    starting_done(st);
    return;
  }
  cs->cl = cl;
  cs->s = s;
  snprintf(cs->name, sizeof cs->name, "%s", st->name);
  snprintf(cs->entry, sizeof cs->entry, "%s", st->entry);
  stream_keys(cs);
  cs->format = st->format;
  cs->channels = st->channels;
  cs->rate = st->rate;
  cs->start_us = st->start_us != 0 ? st->start_us : aurald_now_us();
  cs->publish_from = st->chunks;
  cs->next_sample = from;
  cs->skip = skip;
  cs->pushed = from + skip;
  cs->fed_at = now_s();
  snprintf(cs->from_id, sizeof cs->from_id, "%" PRIu64 "-0", from);
  s->loop.format = st->format;
  s->loop.ext = cs;
  s->loop.on_chunk = on_chunk;
  s->loop.on_end = on_end;
  s->loop.on_release = on_release;
  s->loop.chunks_emitted = st->chunks;
  cs->next = cl->streams;
  cl->streams = cs;
  cl->n_streams++;
  write_meta(cl, cs);
  send_event(cl, st->resumed ? "resumed" : "started", cs, NULL, st->chunks, "",
             "");
  if (st->resumed)
    log_info("cluster stream \"%s\": resumed at chunk %" PRIu64
             " (recomputing from chunk %" PRIu64 ")",
             cs->name, st->chunks, st->first_chunk);
  else
    log_info("cluster stream \"%s\": started (%g Hz, %d ch, %s)", cs->name,
             cs->rate, cs->channels, aural_sample_format_name(cs->format));
  starting_done(st);
  stream_start(s);
  read_audio(cl);
}

/* A stream that cannot resume, on this node or any other: a `lost` event
 * naming why, and its announcement acked, so that no node takes it up
 * again (handing it back would pass it from node to node for ever). */
static void lose(starting *st, const char *why) {
  log_error("cluster stream \"%s\": %s; it cannot resume", st->name, why);
  send_event(st->cl, "lost", NULL, st->name, st->chunks, "error", why);
  retire(st->cl, st->name, why, true);
  drop_announcement(st->cl, st->entry);
  starting_done(st);
}

/* XREVRANGE's answer: the entry holding the first frame to recompute. */
static void on_resume_entry(redisAsyncContext *ac, void *r, void *priv) {
  starting *st = priv;
  const redisReply *rep = r;
  (void)ac;
  if (rep == NULL || st->cl->state != CL_UP) {
    starting_done(st);
    return;
  }
  uint64_t first;
  char id[64] = "";
  if (reply_ok(rep) && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
      rep->element[0]->type == REDIS_REPLY_ARRAY &&
      rep->element[0]->elements == 2)
    str_of(rep->element[0]->element[0], id, sizeof id);
  if (id[0] == '\0' || !parse_id(id, 1, &first) || first > st->first_sample) {
    char why[96];
    snprintf(why, sizeof why, "the audio before chunk %" PRIu64 " is gone",
             st->chunks);
    lose(st, why);
    return;
  }
  create_stream(st, first, st->first_sample - first);
}

/* The checkpoint and the first start time: where the stream resumes. */
static void on_checkpoint(redisAsyncContext *ac, void *r, void *priv) {
  starting *st = priv;
  cluster *cl = st->cl;
  const redisReply *rep = r;
  (void)ac;
  if (rep == NULL || cl->state != CL_UP) {
    starting_done(st);
    return;
  }
  char buf[64];
  uint64_t v;
  if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 4) {
    /* A key of another type: refused as a bad announcement is. */
    char why[AURAL_CLUSTER_KEY_MAX + 64];
    str_of(rep->element[3], why, sizeof why);
    log_warn("cluster: announcement %s refused: %s", st->entry, why);
    send_event(cl, "ended", NULL, st->name, 0, "error", why);
    retire(cl, st->name, why, false);
    drop_announcement(cl, st->entry);
    starting_done(st);
    return;
  }
  if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3) {
    /* Another announcement of this name was taken first: this one
     * repeats it (a producer's bug, or a hostile writer). Taking it too
     * would run two owners of one stream, and the first to end would
     * delete the other's audio. */
    char why[200];
    snprintf(why, sizeof why,
             "announcement %s names a stream that announcement %s "
             "announced first",
             st->entry, str_of(rep->element[2], buf, sizeof buf));
    log_warn("cluster stream \"%s\": %s; refused", st->name, why);
    send_event(cl, "refused", NULL, st->name, 0, "error", why);
    drop_announcement(cl, st->entry);
    starting_done(st);
    return;
  }
  if (stream_find(cl->srv, st->name) != NULL) {
    /* A local stream of that name (or this node's last run of it, still
     * ending): another node, or this one later, takes it. */
    log_info("cluster stream \"%s\": a live stream here has that name; "
             "handed back",
             st->name);
    release_entry(cl, st->entry);
    starting_done(st);
    return;
  }
  if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2) {
    /* Anyone who can write to Redis can write the checkpoint: a count
     * that is not a number, or one no stream can start at, would fail
     * the same way on every node. */
    const redisReply *ck = rep->element[0];
    if (ck->type != REDIS_REPLY_NIL) {
      if (!parse_u64(str_of(ck, buf, sizeof buf), &v) ||
          v > AURAL_STREAM_MAX_FIRST_CHUNK) {
        char why[160];
        snprintf(why, sizeof why,
                 "its checkpoint's chunks \"%.40s\" is not a count of "
                 "chunks in 0..%llu",
                 ck->type == REDIS_REPLY_STRING ? buf : "(not a string)",
                 (unsigned long long)AURAL_STREAM_MAX_FIRST_CHUNK);
        lose(st, why);
        return;
      }
      st->chunks = v;
    }
    /* The first owner's start, kept across owners; one that is not a
     * time (or beyond int64, which read as a count became negative) is
     * replaced by this node's. */
    const redisReply *at = rep->element[1];
    int64_t us;
    if (at->type == REDIS_REPLY_STRING &&
        aural_cluster_parse_int(at->str, at->len, 1, INT64_MAX, &us) == 0)
      st->start_us = us;
    else if (at->type != REDIS_REPLY_NIL)
      log_warn("cluster stream \"%s\": its meta's start_us \"%.40s\" is "
               "not a time in microseconds; the stream starts now",
               st->name, str_of(at, buf, sizeof buf));
  }
  if (st->chunks == 0) {
    create_stream(st, 0, 0);
    return;
  }
  st->resumed = true;
  st->first_chunk = resume_chunk(cl->srv, st->rate, st->chunks);
  st->first_sample = frame_sample(cl->srv, st->rate,
                                  st->first_chunk * cl->srv->chunk_frames);
  char key[AURAL_CLUSTER_KEY_MAX], end[48];
  aural_cluster_key(key, sizeof key, st->name, AURAL_CLUSTER_AUDIO);
  snprintf(end, sizeof end, "%" PRIu64 "-1", st->first_sample);
  const char *argv[] = {"XREVRANGE", key, end, "-", "COUNT", "1"};
  if (command(cl->cmd, on_resume_entry, st, 6, argv) < 0) starting_done(st);
}

/* An announcement's field `name` into buf, NUL-terminated ("" when the
 * announcement has none); false (with why) when its value is no string
 * of fewer than cap bytes without a NUL byte. Read as absent, such a
 * value would be ignored (a vocabulary) or named as "" (a rate), and one
 * cut at a NUL byte would be another value ("s16\0junk", a stream name
 * whose keys are not the producer's). */
static bool field_text(const redisReply *fields, const char *name, char *buf,
                       size_t cap, char *why, size_t why_len) {
  const redisReply *v = field(fields, name);
  buf[0] = '\0';
  if (v == NULL) return true;
  if (v->type != REDIS_REPLY_STRING || v->len >= cap ||
      memchr(v->str, '\0', v->len) != NULL) {
    snprintf(why, why_len,
             "%s is not text of at most %zu bytes without a NUL byte", name,
             cap - 1);
    return false;
  }
  memcpy(buf, v->str, v->len);
  buf[v->len] = '\0';
  return true;
}

/* Reads an announcement's fields; false (with why) when they are bad. */
static bool parse_announcement(const redisReply *fields, starting *st,
                               char *why, size_t why_len) {
  char buf[64];
  char bad[96];
  bool dup = bad_fields(fields, bad, sizeof bad);
  if (!field_text(fields, "name", st->name, sizeof st->name, why, why_len))
    return false;
  if (!aural_cluster_valid_name(st->name)) {
    snprintf(why, why_len, "bad stream name \"%s\"", st->name);
    return false;
  }
  if (dup) {
    snprintf(why, why_len, "%s", bad);
    return false;
  }
  uint64_t rate, ch;
  if (!field_text(fields, "rate", buf, sizeof buf, why, why_len))
    return false;
  if (aural_cluster_parse_uint(buf, strlen(buf), 1000, 768000, &rate) < 0) {
    snprintf(why, why_len, "rate \"%s\" is not a whole 1000..768000 Hz",
             buf);
    return false;
  }
  st->rate = (double)rate;
  if (!field_text(fields, "channels", buf, sizeof buf, why, why_len))
    return false;
  if (aural_cluster_parse_uint(buf, strlen(buf), 1, AURAL_MAX_CHANNELS,
                               &ch) < 0) {
    snprintf(why, why_len, "channels \"%s\" is not 1..%d", buf,
             AURAL_MAX_CHANNELS);
    return false;
  }
  st->channels = (int)ch;
  if (!field_text(fields, "format", buf, sizeof buf, why, why_len))
    return false;
  if (strcmp(buf, "s16") != 0 && strcmp(buf, "f32") != 0) {
    snprintf(why, why_len, "format \"%s\" is not s16 or f32", buf);
    return false;
  }
  st->format = buf[0] == 's' ? AURAL_SAMPLE_S16 : AURAL_SAMPLE_F32;
  return true;
}

/* The announcement's custom words (`vocabulary`, comma-separated, and
 * `boost`), pronounced as a client's AUDIO_OPEN's are; false (with why)
 * when they are bad. Without words on this node they are ignored. */
static bool parse_vocabulary(server *srv, const redisReply *fields,
                             starting *st, char *why, size_t why_len) {
  char list[AURAL_PROTO_VOCAB_MAX * (AURAL_PROTO_VOCAB_WORD_MAX + 1) + 1];
  char buf[64];
  st->boost = -1;
  if (!field_text(fields, "vocabulary", list, sizeof list, why, why_len) ||
      !field_text(fields, "boost", buf, sizeof buf, why, why_len))
    return false;
  if (list[0] == '\0') return true;
  if (srv->lexicon == NULL || srv->g2p == NULL) {
    log_warn("cluster stream \"%s\": custom words ignored: this node has "
             "no %s", st->name, srv->lexicon == NULL ? "lexicon" : "g2p map");
    return true;
  }
  if (buf[0] != '\0') {
    if (aural_cluster_parse_real(buf, strlen(buf), 0, 100, &st->boost) <
        0) {
      snprintf(why, why_len, "boost \"%s\" is not 0..100", buf);
      return false;
    }
  }
  /* Each word between commas, none empty (as a client's: "a,,b" or ","
   * is a mistake, not fewer words). */
  const char *words[AURAL_PROTO_VOCAB_MAX];
  size_t n = 0;
  for (char *w = list, *comma = list; comma != NULL; w = comma + 1) {
    comma = strchr(w, ',');
    if (comma != NULL) *comma = '\0';
    if (*w == '\0') {
      snprintf(why, why_len, "an empty custom word in the vocabulary");
      return false;
    }
    if (n == AURAL_PROTO_VOCAB_MAX) {
      snprintf(why, why_len, "more than %d custom words",
               AURAL_PROTO_VOCAB_MAX);
      return false;
    }
    words[n++] = w;
  }
  aural_err err = {0};
  if (aural_g2p_lexicon(srv->g2p, words, n, &st->custom, &err) < 0) {
    snprintf(why, why_len, "%s", err.msg);
    return false;
  }
  return true;
}

/* The checkpoint and the first start time in one answer (the keys share
 * a slot: one hash tag), once the meta hash names this announcement as
 * the stream's: the first node to take an announcement of a name writes
 * its ID as `entry`, and an announcement with another ID is answered
 * with that one as a third element instead. A key of the stream that
 * another program made of another type (a string where a hash or a
 * stream goes) is answered as a fourth element naming it: every command
 * on it would fail with WRONGTYPE. KEYS: ckpt, meta, audio, out; ARGV:
 * the announcement's ID. */
static const char TAKE[] =
    "local want = {'hash', 'hash', 'stream', 'stream'}\n"
    "for i, k in ipairs(KEYS) do\n"
    "  local t = redis.call('TYPE', k).ok\n"
    "  if t ~= want[i] and t ~= 'none' then\n"
    "    return {false, false, false, k .. ' is a ' .. t .. ', not a ' ..\n"
    "            want[i]}\n"
    "  end\n"
    "end\n"
    "local e = redis.call('HGET', KEYS[2], 'entry')\n"
    "if e and e ~= ARGV[1] then return {false, false, e} end\n"
    "if not e then redis.call('HSET', KEYS[2], 'entry', ARGV[1]) end\n"
    "return {redis.call('HGET', KEYS[1], 'chunks'),\n"
    "        redis.call('HGET', KEYS[2], 'start_us')}\n";

/* One claimed announcement entry [id, fields]: a stream to start or
 * resume. */
static void take_entry(cluster *cl, const redisReply *entry) {
  if (entry->type != REDIS_REPLY_ARRAY || entry->elements != 2) return;
  starting *st = calloc(1, sizeof *st);
  if (st == NULL) return;
  st->cl = cl;
  cl->n_starting++;
  str_of(entry->element[0], st->entry, sizeof st->entry);
  const redisReply *fields = entry->element[1];
  char why[600];
  if (fields->type != REDIS_REPLY_ARRAY) {
    starting_done(st);
    return;
  } /* gone */
  if (!parse_announcement(fields, st, why, sizeof why) ||
      !parse_vocabulary(cl->srv, fields, st, why, sizeof why)) {
    log_warn("cluster: announcement %s refused: %s", st->entry, why);
    if (aural_cluster_valid_name(st->name)) {
      send_event(cl, "ended", NULL, st->name, 0, "error", why);
      retire(cl, st->name, why, false);
    }
    drop_announcement(cl, st->entry);
    starting_done(st);
    return;
  }
  char ckpt[AURAL_CLUSTER_KEY_MAX], meta[AURAL_CLUSTER_KEY_MAX],
      audio[AURAL_CLUSTER_KEY_MAX], out[AURAL_CLUSTER_KEY_MAX];
  aural_cluster_key(ckpt, sizeof ckpt, st->name, AURAL_CLUSTER_CKPT);
  aural_cluster_key(meta, sizeof meta, st->name, AURAL_CLUSTER_META);
  aural_cluster_key(audio, sizeof audio, st->name, AURAL_CLUSTER_AUDIO);
  aural_cluster_key(out, sizeof out, st->name, AURAL_CLUSTER_OUT);
  /* A local stream of that name is looked for once the script has said
   * whether this announcement is the stream's own (on_checkpoint). */
  const char *argv[] = {"EVAL", TAKE,  "4", ckpt, meta,
                        audio,  out,   st->entry};
  if (command(cl->cmd, on_checkpoint, st, 8, argv) < 0) starting_done(st);
}

static int room(const cluster *cl) {
  if (cl->stopping || cl->state != CL_UP) return 0;
  int free_slots =
      cl->srv->opt->cluster_capacity - cl->n_streams - cl->n_starting;
  int by_server =
      cl->srv->opt->max_streams - cl->srv->n_streams - cl->n_starting;
  return free_slots < by_server ? free_slots : by_server;
}

static void take_entries(cluster *cl, const redisReply *entries) {
  if (entries == NULL || entries->type != REDIS_REPLY_ARRAY) return;
  for (size_t i = 0; i < entries->elements; i++)
    take_entry(cl, entries->element[i]);
}

static void on_new(redisAsyncContext *ac, void *r, void *priv) {
  cluster *cl = priv;
  const redisReply *rep = r;
  (void)ac;
  if (rep == NULL || cl->state != CL_UP) return;
  cl->ann_busy = false;
  if (rep->type == REDIS_REPLY_ERROR) {
    /* Asked again once the group is back, or after a beat: an error that
     * stays (an ACL without XREADGROUP) is logged once a second, not at
     * every tick of the timer. */
    if (!group_gone(cl, rep)) {
      log_warn("cluster: reading announcements: %s", rep->str);
      cl->ann_at = now_s() + BEAT_S;
    }
    return;
  }
  cl->group_seen = true;
  /* [[key, entries]], or nil when the wait timed out */
  if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
      rep->element[0]->elements == 2)
    take_entries(cl, rep->element[0]->element[1]);
  read_announcements(cl);
}

/* Waits for one new announcement while there is room. */
static void read_announcements(cluster *cl) {
  if (cl->ann_busy || cl->group_busy || now_s() < cl->ann_at ||
      room(cl) <= 0)
    return;
  const char *argv[] = {"XREADGROUP", "GROUP", AURAL_CLUSTER_GROUP, cl->node,
                        "COUNT", "1", "BLOCK", "1000", "STREAMS",
                        AURAL_CLUSTER_ANNOUNCE, ">"};
  if (command(cl->ann, on_new, cl, 11, argv) == 0) cl->ann_busy = true;
}

static void on_orphans(redisAsyncContext *ac, void *r, void *priv) {
  cluster *cl = priv;
  const redisReply *rep = r;
  (void)ac;
  if (rep == NULL || cl->state != CL_UP) return;
  if (rep->type == REDIS_REPLY_ERROR && !group_gone(cl, rep))
    log_warn("cluster: claiming streams: %s", rep->str);
  else if (rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2) {
    cl->group_seen = true;
    take_entries(cl, rep->element[1]); /* [cursor, entries, deleted] */
  }
  cl->claim_busy = false;
}

/* Streams of nodes that stopped (idle past the heartbeat's expiry), a
 * few at a time so that the others can take some too. */
static void claim(cluster *cl) {
  int n = room(cl) < CLAIM_MAX ? room(cl) : CLAIM_MAX;
  if (cl->claim_busy || n <= 0) return;
  char idle[32], count[16];
  snprintf(idle, sizeof idle, "%lld",
           (long long)(cl->srv->opt->cluster_ttl_s * 1000));
  snprintf(count, sizeof count, "%d", n);
  const char *argv[] = {"XAUTOCLAIM",
                        AURAL_CLUSTER_ANNOUNCE,
                        AURAL_CLUSTER_GROUP,
                        cl->node,
                        idle,
                        "0-0",
                        "COUNT",
                        count};
  if (command(cl->cmd, on_orphans, cl, 8, argv) == 0) cl->claim_busy = true;
}

/* ---- the heartbeat ------------------------------------------------------- */

/* Re-claims the given entries that are still pending in this node's name
 * (which resets their idle time) and returns those that are not, each
 * with the consumer it is pending in the name of ("" for none: acked, or
 * the group was created anew). */
static const char REFRESH[] = "local lost = {}\n"
                              "for i = 3, #ARGV do\n"
                              "  local p = redis.call('XPENDING', KEYS[1], "
                              "ARGV[1], ARGV[i], ARGV[i], 1)\n"
                              "  if #p == 1 and p[1][2] == ARGV[2] then\n"
                              "    redis.call('XCLAIM', KEYS[1], ARGV[1], "
                              "ARGV[2], 0, ARGV[i], 'JUSTID')\n"
                              "  else\n"
                              "    lost[#lost + 1] = ARGV[i]\n"
                              "    lost[#lost + 1] = #p == 1 and p[1][2] "
                              "or ''\n"
                              "  end\n"
                              "end\n"
                              "return lost\n";

/* Deletes the group's consumers that hold no pending entry and have been
 * idle for longer than ARGV[2] ms. XREADGROUP makes a consumer of every
 * node name that takes a stream, and Redis never removes one: a node
 * named HOST-PID (the default) would leave one behind at every start. A
 * consumer with pending entries (a stopped node's streams not yet taken
 * over) stays; one deleted while its node lives is made again by its next
 * XREADGROUP or claim. An error (no group yet, an ACL without these
 * commands) deletes nothing. */
static const char PRUNE[] =
    "local cs = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])\n"
    "if cs.err then return 0 end\n"
    "local n = 0\n"
    "for _, c in ipairs(cs) do\n"
    "  local f = {}\n"
    "  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end\n"
    "  if f.pending == 0 and f.idle > tonumber(ARGV[2]) then\n"
    "    redis.pcall('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f.name)\n"
    "    n = n + 1\n"
    "  end\n"
    "end\n"
    "return n\n";

static void on_refresh(redisAsyncContext *ac, void *r, void *priv) {
  cluster *cl = priv;
  const redisReply *rep = r;
  (void)ac;
  if (rep == NULL || cl->state != CL_UP) return;
  cl->beat_sent = 0;
  if (rep->type == REDIS_REPLY_ERROR) {
    if (!group_gone(cl, rep)) log_warn("cluster: heartbeat: %s", rep->str);
    return;
  }
  for (size_t i = 0; rep->type == REDIS_REPLY_ARRAY && i + 1 < rep->elements;
       i += 2) {
    char id[64], holder[128];
    str_of(rep->element[i], id, sizeof id);
    str_of(rep->element[i + 1], holder, sizeof holder);
    for (cstream *cs = cl->streams; cs != NULL; cs = cs->next) {
      if (strcmp(cs->entry, id) != 0 || cs->cut) continue;
      if (holder[0] != '\0') {
        log_warn("cluster stream \"%s\": node \"%s\" took it over",
                 cs->name, holder);
        cut(cs, "another cluster node took the stream over");
      } else {
        log_warn("cluster stream \"%s\": its announcement %s is pending in "
                 "no node's name (acked, deleted, or the consumer group was "
                 "created anew); it stops here",
                 cs->name, id);
        cut(cs, "its announcement is no longer pending in this node's name");
      }
    }
  }
}

static void heartbeat(cluster *cl) {
  server *srv = cl->srv;
  /* Names are at most 64 bytes, each of which may be escaped. */
  size_t cap = 1024 + (size_t)cl->n_streams * (2 * AURAL_PROTO_NAME_MAX + 4);
  char *json = malloc(cap);
  if (json == NULL) return;
  snprintf(json, cap, "{\"id\":");
  json_str(json, cap, cl->node);
  size_t n = strlen(json);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  snprintf(json + n, cap - n, ",\"host\":");
  json_str(json, cap, host);
  n = strlen(json);
  pthread_mutex_lock(&srv->mu); /* the workers write it */
  double load = srv->load;
  pthread_mutex_unlock(&srv->mu);
  snprintf(json + n, cap - n,
           ",\"pid\":%d,\"capacity\":%d,\"load\":%.3f,\"started_us\":%" PRId64
           ",\"published\":%" PRIu64 ",\"sample_rate\":%g,\"streams\":[",
           (int)getpid(), srv->opt->cluster_capacity, load, cl->started_us,
           cl->published, srv->mc->fbank.sample_rate_hz);
  bool first = true;
  for (cstream *cs = cl->streams; cs != NULL; cs = cs->next) {
    if (cs->cut) continue;
    if (!first) strncat(json, ",", cap - strlen(json) - 1);
    json_str(json, cap, cs->name);
    first = false;
  }
  strncat(json, "]}", cap - strlen(json) - 1);
  char key[256], ttl[32], ms[32];
  snprintf(key, sizeof key, "%s%s", AURAL_CLUSTER_NODE_PREFIX, cl->node);
  snprintf(ttl, sizeof ttl, "%lld",
           (long long)(srv->opt->cluster_ttl_s * 1000));
  snprintf(ms, sizeof ms, "%" PRId64, aurald_now_us() / 1000);
  const char *set[] = {"SET", key, json, "PX", ttl};
  command(cl->cmd, ignore_reply, NULL, 5, set);
  free(json);
  const char *zadd[] = {"ZADD", AURAL_CLUSTER_NODES, ms, cl->node};
  command(cl->cmd, ignore_reply, NULL, 4, zadd);
  /* Nodes silent for --cluster-expire leave the list: a node named
   * HOST-PID (the default) adds one at every start, and one that did not
   * stop cleanly never removes itself. */
  char old[40];
  snprintf(old, sizeof old, "(%" PRId64,
           aurald_now_us() / 1000 -
               (int64_t)(srv->opt->cluster_expire_s * 1000));
  const char *prune[] = {"ZREMRANGEBYSCORE", AURAL_CLUSTER_NODES, "-inf",
                         old};
  command(cl->cmd, ignore_reply, NULL, 4, prune);
  /* Their consumers in the group go the same way. */
  char idle[32];
  snprintf(idle, sizeof idle, "%lld",
           (long long)(srv->opt->cluster_expire_s * 1000));
  const char *consumers[] = {"EVAL", PRUNE, "1", AURAL_CLUSTER_ANNOUNCE,
                             AURAL_CLUSTER_GROUP, idle};
  command(cl->cmd, ignore_reply, NULL, 6, consumers);
  int k = 0;
  const char **argv = malloc((size_t)(6 + cl->n_streams) * sizeof *argv);
  if (argv == NULL) return;
  argv[k++] = "EVAL";
  argv[k++] = REFRESH;
  argv[k++] = "1";
  argv[k++] = AURAL_CLUSTER_ANNOUNCE;
  argv[k++] = AURAL_CLUSTER_GROUP;
  argv[k++] = cl->node;
  for (cstream *cs = cl->streams; cs != NULL; cs = cs->next)
    if (!cs->cut) argv[k++] = cs->entry;
  if (command(cl->cmd, on_refresh, cl, k, argv) == 0 && cl->beat_sent == 0)
    cl->beat_sent = now_s();
  free(argv);
}

/* ---- connections --------------------------------------------------------- */

static void became_up(cluster *cl) {
  cl->state = CL_UP;
  cl->backoff_s = BACKOFF_MIN_S;
  cl->beat_sent = 0;
  if (cl->ever_up)
    log_info("cluster: reconnected to %s after %.1f s", cl->where,
             now_s() - cl->down_since);
  else
    log_info("cluster: node \"%s\" joined %s", cl->node, cl->where);
  cl->ever_up = true;
  cl->ann_at = 0;
  cl->group_seen = true;
  create_group(cl);
  heartbeat(cl);
  cl->next_beat = now_s() + BEAT_S;
  cl->next_claim = 0;
}

static void on_ping(redisAsyncContext *ac, void *r, void *priv) {
  cluster *cl = priv;
  const redisReply *rep = r;
  (void)ac;
  if (rep == NULL || cl->state != CL_CONNECTING) return;
  if (!reply_ok(rep)) {
    char why[300];
    snprintf(why, sizeof why, "Redis refused the node: %s", rep->str);
    go_down(cl, why);
    return;
  }
  if (++cl->n_ready == N_CONNS) became_up(cl);
}

static void on_timer_closed(uv_handle_t *h) {
  cluster *cl = h->data;
  free(cl);
}

static void on_disconnect(const redisAsyncContext *ac, int status) {
  cluster *cl = ac->data;
  bool ours = false, left = false;
  for (int i = 0; i < N_CONNS; i++) {
    if (*conns(cl, i) == ac) {
      *conns(cl, i) = NULL;
      ours = true;
    }
    left = left || *conns(cl, i) != NULL;
  }
  if (cl->closing && !left) {
    uv_timer_stop(&cl->timer);
    if (!uv_is_closing((uv_handle_t *)&cl->timer))
      uv_close((uv_handle_t *)&cl->timer, on_timer_closed);
    return;
  }
  if (!ours || cl->closing) return;
  char why[300];
  snprintf(why, sizeof why, "connection lost%s%s",
           status != REDIS_OK ? ": " : "",
           status != REDIS_OK ? ac->errstr : "");
  go_down(cl, why);
}

static void on_connect(const redisAsyncContext *ac, int status) {
  cluster *cl = ac->data;
  if (status == REDIS_OK) return;
  /* hiredis frees the context after this callback. */
  for (int i = 0; i < N_CONNS; i++)
    if (*conns(cl, i) == ac) *conns(cl, i) = NULL;
  char why[300];
  snprintf(why, sizeof why, "cannot connect: %s", ac->errstr);
  go_down(cl, why);
}

/* One connection, its AUTH, SELECT and first PING queued. */
static redisAsyncContext *connect_one(cluster *cl, char *why, size_t why_len) {
  redisAsyncContext *ac = cl->url.is_unix
                              ? redisAsyncConnectUnix(cl->url.path)
                              : redisAsyncConnect(cl->url.host, cl->url.port);
  if (ac == NULL || ac->err) {
    snprintf(why, why_len, "cannot connect: %s",
             ac != NULL ? ac->errstr : "out of memory");
    if (ac != NULL) redisAsyncFree(ac);
    return NULL;
  }
  ac->data = cl;
  if (redisLibuvAttach(ac, cl->srv->loop) != REDIS_OK) {
    snprintf(why, why_len, "cannot watch the connection");
    redisAsyncFree(ac);
    return NULL;
  }
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  if (cl->has_password) {
    const char *a2[] = {"AUTH", cl->url.user, cl->password};
    const char *a1[] = {"AUTH", cl->password};
    if (cl->url.user[0])
      command(ac, NULL, NULL, 3, a2);
    else
      command(ac, NULL, NULL, 2, a1);
  }
  if (cl->url.db != 0) {
    char db[16];
    snprintf(db, sizeof db, "%d", cl->url.db);
    const char *sel[] = {"SELECT", db};
    command(ac, NULL, NULL, 2, sel);
  }
  const char *ping[] = {"PING"};
  command(ac, on_ping, cl, 1, ping);
  return ac;
}

static void try_connect(cluster *cl) {
  char why[300];
  cl->state = CL_CONNECTING;
  cl->connect_at = now_s();
  cl->n_ready = 0;
  for (int i = 0; i < N_CONNS; i++) {
    *conns(cl, i) = connect_one(cl, why, sizeof why);
    if (*conns(cl, i) == NULL) {
      go_down(cl, why);
      return;
    }
  }
}

/* Frees whichever connections are left (their waiting callbacks see no
 * reply) and forgets them. */
static void drop_connections(cluster *cl) {
  redisAsyncContext *c[N_CONNS];
  for (int i = 0; i < N_CONNS; i++) {
    c[i] = *conns(cl, i);
    *conns(cl, i) = NULL;
  }
  for (int i = 0; i < N_CONNS; i++)
    if (c[i] != NULL) redisAsyncFree(c[i]);
  cl->read_busy = cl->claim_busy = cl->ann_busy = cl->group_busy = false;
  cl->beat_sent = 0;
}

static void go_down(cluster *cl, const char *why) {
  int was = cl->state;
  cl->state = CL_DOWN;
  if (was == CL_UP) {
    cl->disconnects++;
    cl->down_since = now_s();
    log_warn("cluster: %s: %s; local streams go on, cluster streams resume "
             "from their checkpoints once it is back",
             cl->where, why);
    for (cstream *cs = cl->streams; cs != NULL; cs = cs->next)
      cut(cs, "the cluster connection was lost");
  } else {
    log_debug("cluster: %s: %s", cl->where, why);
  }
  drop_connections(cl);
  cl->retry_at = now_s() + cl->backoff_s;
  cl->backoff_s = fmin(cl->backoff_s * 2, BACKOFF_MAX_S);
}

/* server.cluster_stats from the cluster's state. */
static void update_stats(cluster *cl) {
  cluster_stats *st = &cl->srv->cluster_stats;
  st->up = cl->state == CL_UP;
  st->streams = cl->n_streams;
  st->published = cl->published;
  st->duplicates = cl->duplicates;
  st->disconnects = cl->disconnects;
}

static void on_timer(uv_timer_t *t) {
  cluster *cl = t->data;
  double now = now_s();
  if (cl->closing) return;
  update_stats(cl);
  if (cl->state == CL_DOWN) {
    if (now >= cl->retry_at && !cl->stopping) try_connect(cl);
    return;
  }
  if (cl->state == CL_CONNECTING &&
      now - cl->connect_at > cl->srv->opt->cluster_timeout_s) {
    go_down(cl, "no answer to the connection's first PING");
    return;
  }
  if (cl->state != CL_UP) return;
  if (cl->beat_sent != 0 &&
      now - cl->beat_sent > cl->srv->opt->cluster_timeout_s) {
    char why[96];
    snprintf(why, sizeof why, "no answer for %.0f s", now - cl->beat_sent);
    go_down(cl, why);
    return;
  }
  if (now >= cl->next_beat) {
    heartbeat(cl);
    cl->next_beat = now + BEAT_S;
  }
  if (now >= cl->next_claim) {
    claim(cl);
    cl->next_claim = now + CLAIM_S;
  }
  for (cstream *cs = cl->streams; cs != NULL; cs = cs->next) {
    push_rest(cs);
    check_idle(cs, now);
  }
  read_audio(cl);
  read_announcements(cl);
}

/* ---- start and stop ------------------------------------------------------ */

/* Whether Redis answers now, as the node would talk to it. */
static int check_reachable(cluster *cl, char *why, size_t why_len) {
  struct timeval tv = {2, 0};
  redisContext *c =
      cl->url.is_unix ? redisConnectUnixWithTimeout(cl->url.path, tv)
                      : redisConnectWithTimeout(cl->url.host, cl->url.port, tv);
  if (c == NULL || c->err) {
    snprintf(why, why_len, "cluster %s: cannot connect: %s", cl->where,
             c != NULL ? c->errstr : "out of memory");
    if (c != NULL) redisFree(c);
    return -1;
  }
  redisSetTimeout(c, tv);
  redisReply *r = NULL;
  if (cl->has_password)
    r = cl->url.user[0]
            ? redisCommand(c, "AUTH %s %s", cl->url.user, cl->password)
            : redisCommand(c, "AUTH %s", cl->password);
  if (r == NULL || r->type != REDIS_REPLY_ERROR) {
    freeReplyObject(r);
    r = redisCommand(c, "SELECT %d", cl->url.db);
  }
  if (r != NULL && r->type != REDIS_REPLY_ERROR) {
    freeReplyObject(r);
    r = redisCommand(c, "XINFO STREAM %s", "aural:no-such-key");
    /* "no such key" is an answer: the server speaks streams. An old
     * server says "unknown command". */
    if (r != NULL && r->type == REDIS_REPLY_ERROR &&
        strstr(r->str, "no such key") != NULL) {
      freeReplyObject(r);
      redisFree(c);
      return 0;
    }
  }
  snprintf(why, why_len, "cluster %s: %s", cl->where,
           r == NULL                      ? c->errstr
           : r->type == REDIS_REPLY_ERROR ? r->str
                                          : "unexpected answer");
  freeReplyObject(r);
  redisFree(c);
  return -1;
}

/* The cluster's settings from the options; -1 with why. */
static int configure(cluster *cl, const aurald_options *o, char *why,
                     size_t why_len) {
  if (aural_cluster_url_parse(o->cluster_url, &cl->url, why, why_len) < 0)
    return -1;
  aural_cluster_url_format(&cl->url, cl->where, sizeof cl->where);
  int pw = aural_cluster_password(o->cluster_password_file, cl->password,
                                  sizeof cl->password, why, why_len);
  if (pw < 0) return -1;
  cl->has_password = pw == 1;
  if (o->cluster_node != NULL) {
    snprintf(cl->node, sizeof cl->node, "%s", o->cluster_node);
  } else {
    char host[64] = "node";
    gethostname(host, sizeof host - 1);
    snprintf(cl->node, sizeof cl->node, "%s-%d", host, (int)getpid());
  }
  return 0;
}

int cluster_start(server *srv, char *why, size_t why_len) {
  const aurald_options *o = srv->opt;
  cluster *cl = calloc(1, sizeof *cl);
  if (cl == NULL) {
    snprintf(why, why_len, "out of memory");
    return -1;
  }
  cl->srv = srv;
  char err[700];
  if (configure(cl, o, why, why_len) < 0) {
    free(cl);
    return -1;
  }
  bool reachable = check_reachable(cl, err, sizeof err) == 0;
  if (!reachable) {
    if (!o->cluster_optional) {
      snprintf(why, why_len, "%s", err);
      free(cl);
      return -1;
    }
    log_warn("%s; serving locally, and retrying", err);
    cl->state = CL_DOWN;
    cl->ever_up = true; /* its reconnection is news */
    cl->down_since = now_s();
  }
  cl->started_us = aurald_now_us();
  cl->backoff_s = BACKOFF_MIN_S;
  uv_timer_init(srv->loop, &cl->timer);
  cl->timer.data = cl;
  srv->cluster = cl;
  if (reachable) try_connect(cl);
  uv_timer_start(&cl->timer, on_timer, POLL_MS, POLL_MS);
  return 0;
}

void cluster_stop(server *srv) {
  cluster *cl = srv->cluster;
  if (cl == NULL || cl->stopping) return;
  cl->stopping = true;
  for (cstream *cs = cl->streams; cs != NULL; cs = cs->next) cs->cut = true;
}

/* The last replies had their second: whatever is left is dropped. */
static void on_close_deadline(uv_timer_t *t) {
  cluster *cl = t->data;
  drop_connections(cl);
  if (!uv_is_closing((uv_handle_t *)&cl->timer))
    uv_close((uv_handle_t *)&cl->timer, on_timer_closed);
}

void cluster_close(server *srv) {
  cluster *cl = srv->cluster;
  if (cl == NULL || cl->closing) return;
  cl->closing = true;
  srv->cluster = NULL;
  /* Cluster streams were freed as they ended; any left (a deadline) are
   * the registry's to free and must not call back. */
  for (cstream *cs = cl->streams; cs != NULL;) {
    cstream *next = cs->next;
    cs->s->loop.ext = NULL;
    cs->s->loop.on_chunk = NULL;
    cs->s->loop.on_end = NULL;
    cs->s->loop.on_release = NULL;
    free(cs->rest);
    free(cs);
    cs = next;
  }
  cl->streams = NULL;
  if (cl->state == CL_UP) {
    char key[256];
    snprintf(key, sizeof key, "%s%s", AURAL_CLUSTER_NODE_PREFIX, cl->node);
    const char *del[] = {"DEL", key};
    command(cl->cmd, NULL, NULL, 2, del);
    const char *zrem[] = {"ZREM", AURAL_CLUSTER_NODES, cl->node};
    command(cl->cmd, NULL, NULL, 3, zrem);
  }
  uv_timer_stop(&cl->timer);
  if (cl->cmd == NULL && cl->rd == NULL && cl->ann == NULL) {
    uv_close((uv_handle_t *)&cl->timer, on_timer_closed);
    return;
  }
  uv_timer_start(&cl->timer, on_close_deadline, 1000, 0);
  /* Each calls on_disconnect once its last reply is in (at once when
   * nothing is waiting), which closes the timer after the second. */
  redisAsyncContext *c[N_CONNS];
  for (int i = 0; i < N_CONNS; i++) c[i] = *conns(cl, i);
  for (int i = 0; i < N_CONNS; i++)
    if (c[i] != NULL) redisAsyncDisconnect(c[i]);
}
