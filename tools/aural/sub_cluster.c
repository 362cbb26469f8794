/*
 * aural sub --cluster: follows one stream's chunks in the cluster's Redis
 * (docs/CLUSTER.md: aural:{NAME}:out) and feeds them to the handlers local
 * sub uses (sub.h), so the lines, the JSON events and -o are the same.
 *
 * Entry SEQ-1 holds chunk SEQ, so reading above SEQ-0 starts at chunk
 * SEQ: a consumer resumes from any chunk still retained. A seq that jumps
 * ahead means the node trimmed chunks (its retention) before they were
 * read; that is told as a gap, as aurald tells a subscriber's lost chunks.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "redis.h"
#include "sub.h"

/* The handlers' id for the one stream followed. */
#define STREAM_ID 1
/* Entries one XREAD returns at most, and how long it waits for one. */
#define READ_COUNT "64"
#define READ_BLOCK_MS "1000"
/* How often the meta hash is read while the stream has not started. */
#define META_POLL_MS 200

typedef struct cluster_sub {
  sub_job *job;
  cluster_conn redis;
  char out_key[AURAL_CLUSTER_KEY_MAX], meta_key[AURAL_CLUSTER_KEY_MAX];
  char after[48];    /* XREAD's ID: the entries above it come next */
  redisReply *meta;  /* the stream's meta hash, once its node wrote it */
  bool started;      /* the started event was told */
  uint64_t next_seq; /* the chunk expected next, once started */
} cluster_sub;

/* Whether an entry's fields mark the stream's final chunk. */
static bool final_field(const redisReply *fields) {
  const redisReply *f = cluster_field(fields, "final");
  return f != NULL && f->len == 1 && f->str[0] == '1';
}

/* The ID to read above at first: --from's chunk, the start, or the last
 * entry stored now (not "$", which a later XREAD would take anew, missing
 * what came in between). After a stream's final chunk nothing comes: --from
 * now, or a chunk past the final one, fails rather than wait for ever. */
static int first_id(cluster_sub *cs) {
  sub_job *job = cs->job;
  cluster_args a;
  cluster_args_list(&a, "XREVRANGE", cs->out_key, "+", "-", "COUNT", "1",
                    NULL);
  redisReply *r = cluster_run(&cs->redis, &a, job->err, sizeof job->err);
  if (r == NULL) return -1;
  redisReply *const *e;
  size_t n;
  uint64_t top = 0, one;
  int rc = cluster_entries(r, false, &e, &n);
  if (rc == 0 && n > 0 && cluster_parse_id(e[0]->element[0], &top, &one) < 0)
    rc = -1;
  if (rc < 0)
    snprintf(job->err, sizeof job->err, "%s: XREVRANGE %s: not a stream of "
             "chunks", cs->redis.url_text, cs->out_key);
  bool ended = rc == 0 && n > 0 && final_field(e[0]->element[1]);
  if (job->from == SUB_FROM_NOW)
    snprintf(cs->after, sizeof cs->after, "%llu-%llu",
             (unsigned long long)top, n > 0 ? 1ull : 0ull);
  else
    snprintf(cs->after, sizeof cs->after, "%llu-0",
             (unsigned long long)job->from_seq);
  freeReplyObject(r);
  if (rc == 0 && ended &&
      (job->from == SUB_FROM_NOW || job->from_seq > top)) {
    snprintf(job->err, sizeof job->err,
             "%s has ended: its final chunk is %llu (read it with --from "
             "start or --from 0..%llu)",
             job->stream, (unsigned long long)top, (unsigned long long)top);
    return -1;
  }
  return rc;
}

/* The model's dimensions from the meta hash, as the node wrote them. */
static int read_model(cluster_sub *cs) {
  client_model *m = &cs->job->cluster_model;
  int64_t d_model, vocab_size, chunk_frames;
  const char *bad = NULL;
  if (cluster_field_int(cs->meta, "d_model", 1, 1 << 20, &d_model) < 0)
    bad = "d_model";
  else if (cluster_field_int(cs->meta, "vocab_size", 0, 1 << 24,
                             &vocab_size) < 0)
    bad = "vocab_size";
  else if (cluster_field_int(cs->meta, "chunk_frames", 1, 1 << 24,
                             &chunk_frames) < 0)
    bad = "chunk_frames";
  else if (cluster_field_double(cs->meta, "frame_ms", 1e-3, 1e5,
                                &m->frame_ms) < 0)
    bad = "frame_ms";
  if (bad != NULL) {
    snprintf(cs->job->err, sizeof cs->job->err,
             "%s: %s has no valid \"%s\"", cs->redis.url_text, cs->meta_key,
             bad);
    return -1;
  }
  m->d_model = (uint32_t)d_model;
  m->vocab_size = (uint32_t)vocab_size;
  m->chunk_frames = (uint32_t)chunk_frames;
  cs->job->model = m;
  return 0;
}

/* Fails naming why when the meta hash says that no node will encode the
 * stream (its `error`: the announcement refused, or the stream could not
 * resume); nothing more comes then. */
static int check_error(cluster_sub *cs, const redisReply *meta) {
  const redisReply *e = cluster_field(meta, "error");
  char why[400];
  if (e == NULL) return 0;
  snprintf(cs->job->err, sizeof cs->job->err,
           "%s: no node will encode it: %s", cs->job->stream,
           cli_printable(e->str, e->len, why, sizeof why));
  return -1;
}

/* Waits until the stream's node has written the model into its meta hash
 * (a stream not yet started, or not yet taken up by a node). */
static int wait_meta(cluster_sub *cs) {
  sub_job *job = cs->job;
  cluster_args a;
  cluster_args_list(&a, "HGETALL", cs->meta_key, NULL);
  for (;;) {
    if (sub_interrupted) return -1;
    cs->meta = cluster_run(&cs->redis, &a, job->err, sizeof job->err);
    if (cs->meta == NULL) return -1;
    if (check_error(cs, cs->meta) < 0) return -1;
    if (cluster_field(cs->meta, "d_model") != NULL) return read_model(cs);
    freeReplyObject(cs->meta);
    cs->meta = NULL;
    struct timespec pause = {.tv_nsec = META_POLL_MS * 1000000L};
    nanosleep(&pause, NULL);
  }
}

/* The started event, at the first entry read (chunk seq): the stream
 * starts where --from asked, or at seq (--from start, now). */
static int tell_started(cluster_sub *cs, uint64_t seq) {
  sub_job *job = cs->job;
  int64_t rate = 0, channels = 0, start_us = 0;
  cluster_field_int(cs->meta, "rate", 0, INT32_MAX, &rate);
  cluster_field_int(cs->meta, "channels", 0, INT32_MAX, &channels);
  cluster_field_int(cs->meta, "start_us", INT64_MIN, INT64_MAX, &start_us);
  aural_msg_stream_started st = {
      .sample_rate = (uint32_t)rate,
      .channels = (uint32_t)channels,
      .start_us = start_us,
      .next_chunk = job->from == SUB_FROM_SEQ ? job->from_seq : seq};
  snprintf(st.name, sizeof st.name, "%s", job->stream);
  cs->started = true;
  cs->next_seq = st.next_chunk;
  return sub_on_started(job, STREAM_ID, &st, "cluster");
}

/* The chunk's sections that --output asks for; the text from the entry's
 * field when the payload has none. */
static int tell_chunk(cluster_sub *cs, const redisReply *fields,
                      aural_chunk_header *ch, const uint8_t *emb,
                      const uint8_t *logits, const char *text) {
  uint32_t out = cs->job->outputs;
  const redisReply *text_field = cluster_field(fields, "text");
  if (text == NULL && text_field != NULL) {
    text = text_field->str;
    ch->text_bytes = (uint32_t)text_field->len;
  }
  if (!(out & AURAL_OUT_TEXT)) {
    text = NULL;
    ch->text_bytes = 0;
  }
  if (!(out & (AURAL_OUT_EMBEDDINGS | AURAL_OUT_LOGITS | AURAL_OUT_TEXT)))
    return 0; /* words alone: counted by the words */
  return sub_on_chunk(cs->job, STREAM_ID, ch,
                      out & AURAL_OUT_EMBEDDINGS ? emb : NULL,
                      out & AURAL_OUT_LOGITS ? logits : NULL, text);
}

/* The entry's words (PROTOCOL.md §4.16), when --output asks for them. */
static int tell_words(cluster_sub *cs, const redisReply *fields,
                      uint64_t seq) {
  sub_job *job = cs->job;
  if (!(job->outputs & AURAL_OUT_WORDS)) return 0;
  const redisReply *w = cluster_field(fields, "words");
  char why[200];
  aural_msg_words mw;
  if (w == NULL) {
    snprintf(job->err, sizeof job->err,
             "%s: chunk %llu has no words (its node has no lexicon)",
             job->stream, (unsigned long long)seq);
    return -1;
  }
  if (aural_proto_decode_words((const uint8_t *)w->str, w->len, &mw, why,
                               sizeof why) < 0) {
    snprintf(job->err, sizeof job->err, "%s: chunk %llu: malformed words: %s",
             job->stream, (unsigned long long)seq, why);
    return -1;
  }
  return sub_on_words(job, STREAM_ID, &mw, w->len);
}

/* After the final chunk: the stream's end. Returns sub_on_ended's 1. */
static int tell_ended(cluster_sub *cs, const aural_chunk_header *ch,
                      const redisReply *fields) {
  aural_msg_stream_ended e = {.reason = AURAL_END_EOF,
                              .frames = ch->first_frame + ch->n_frames,
                              .chunks = ch->seq + 1};
  snprintf(e.name, sizeof e.name, "%s", cs->job->stream);
  /* A stream cut short says why on its final entry. */
  const redisReply *error = cluster_field(fields, "error");
  if (error != NULL && error->type == REDIS_REPLY_STRING) {
    e.reason = AURAL_END_ERROR;
    snprintf(e.message, sizeof e.message, "%.*s", (int)error->len,
             error->str);
  }
  return sub_on_ended(cs->job, STREAM_ID, &e);
}

/* One entry [ID, fields]: its chunk, after the chunks trimmed before it
 * (a gap) and before its words. Returns 1 after the final chunk, 0, or
 * -1. */
static int on_entry(cluster_sub *cs, const redisReply *entry) {
  sub_job *job = cs->job;
  const redisReply *fields = entry->element[1];
  const redisReply *payload = cluster_field(fields, "chunk");
  uint64_t seq, one;
  aural_chunk_header ch;
  const uint8_t *emb, *logits;
  const char *text;
  if (cluster_parse_id(entry->element[0], &seq, &one) < 0 || one != 1 ||
      payload == NULL ||
      aural_chunk_decode((const uint8_t *)payload->str, payload->len, &ch,
                         &emb, &logits, &text) < 0 ||
      ch.seq != seq) {
    snprintf(job->err, sizeof job->err,
             "%s: entry %.40s of %s is not a chunk SEQ-1 with a valid "
             "\"chunk\" of that seq (PROTOCOL.md section 5)",
             cs->redis.url_text, entry->element[0]->str, cs->out_key);
    return -1;
  }
  if (!cs->started && tell_started(cs, seq) < 0) return -1;
  if (seq > cs->next_seq) {
    if (sub_on_gap(job, STREAM_ID, cs->next_seq, seq - cs->next_seq,
                   "trimmed before being read") < 0)
      return -1;
  }
  cs->next_seq = seq + 1;
  if (tell_chunk(cs, fields, &ch, emb, logits, text) < 0 ||
      tell_words(cs, fields, seq) < 0)
    return -1;
  job->last_seq = (int64_t)seq;
  if ((ch.flags & AURAL_CHUNK_FINAL) || final_field(fields))
    return tell_ended(cs, &ch, fields);
  return 0;
}

/* After a wait that brought nothing: whether the stream has stopped for
 * good (its meta hash's `error`). 0 or -1. */
static int still_going(cluster_sub *cs) {
  cluster_args a;
  cluster_args_list(&a, "HGETALL", cs->meta_key, NULL);
  redisReply *meta =
      cluster_run(&cs->redis, &a, cs->job->err, sizeof cs->job->err);
  if (meta == NULL) return -1;
  int rc = check_error(cs, meta);
  freeReplyObject(meta);
  return rc;
}

/* One XREAD: the entries stored above cs->after, or none within a second.
 * Returns 1 after the final chunk, 0, or -1. */
static int read_some(cluster_sub *cs) {
  cluster_args a;
  cluster_args_list(&a, "XREAD", "COUNT", READ_COUNT, "BLOCK", READ_BLOCK_MS,
                    "STREAMS", cs->out_key, cs->after, NULL);
  redisReply *r =
      cluster_run(&cs->redis, &a, cs->job->err, sizeof cs->job->err);
  if (r == NULL) return -1;
  redisReply *const *e;
  size_t n;
  int rc = cluster_entries(r, true, &e, &n);
  if (rc < 0)
    snprintf(cs->job->err, sizeof cs->job->err,
             "%s: XREAD %s: a reply of another shape than a stream's",
             cs->redis.url_text, cs->out_key);
  for (size_t i = 0; i < n && rc == 0; i++) {
    rc = on_entry(cs, e[i]);
    snprintf(cs->after, sizeof cs->after, "%.40s", e[i]->element[0]->str);
  }
  freeReplyObject(r);
  if (rc == 0 && n == 0) rc = still_going(cs);
  return rc;
}

/* After an interruption: the last chunk received and the --from that
 * resumes after it, from the ID the next XREAD would have read above
 * (SEQ-1 after chunk SEQ; N-0 before chunk N). */
static void tell_resume(const cluster_sub *cs) {
  const char *name = cs->job->stream;
  unsigned long long id, one;
  if (sscanf(cs->after, "%llu-%llu", &id, &one) != 2) return;
  sub_clear_partial(cs->job); /* the line is the caption's until now */
  unsigned long long from = one == 1 ? id + 1 : id;
  if (cs->job->last_seq >= 0)
    fprintf(stderr, "aural sub: %s: last chunk received %lld; resume after "
            "it with --from %llu\n",
            name, (long long)cs->job->last_seq, from);
  else if (cs->job->from == SUB_FROM_START)
    fprintf(stderr, "aural sub: %s: no chunk received; resume with --from "
            "start\n", name);
  else
    fprintf(stderr, "aural sub: %s: no chunk received; resume with --from "
            "%llu\n", name, from);
}

int sub_cluster_run(sub_job *job) {
  cluster_sub cs = {.job = job};
  job->last_seq = -1;
  job->until_end = 1; /* a cluster stream's name is never used again */
  aural_cluster_key(cs.out_key, sizeof cs.out_key, job->stream,
                    AURAL_CLUSTER_OUT);
  aural_cluster_key(cs.meta_key, sizeof cs.meta_key, job->stream,
                    AURAL_CLUSTER_META);
  int rc = cluster_connect(&cs.redis, job->cluster_url, job->password_file,
                           job->err, sizeof job->err);
  if (rc == 0) rc = first_id(&cs);
  if (rc == 0) rc = wait_meta(&cs);
  while (rc == 0 && !sub_interrupted) rc = read_some(&cs);
  if (sub_interrupted) tell_resume(&cs);
  freeReplyObject(cs.meta);
  cluster_close(&cs.redis);
  return sub_interrupted ? EXIT_SIGNAL : rc < 0 ? EXIT_FAIL : EXIT_OK;
}
