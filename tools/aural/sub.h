/*
 * sub.h — the inside of aural sub, shared by its two sources: aurald
 * (cmd_sub.c) and a cluster's Redis (sub_cluster.c). Either source turns
 * what it receives into the events below, which print, collect text and
 * words, and write -o, the same way for both.
 */
#ifndef AURAL_TOOLS_SUB_H
#define AURAL_TOOLS_SUB_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <aural/proto.h>

#include "client.h"
#include "outfile.h"

/* Where --cluster starts reading a stream's chunks. */
typedef enum sub_from {
  SUB_FROM_START, /* its first chunk still retained (the default) */
  SUB_FROM_NOW,   /* the chunks stored after the command started */
  SUB_FROM_SEQ,   /* chunk from_seq */
} sub_from;

/* A growing string. */
typedef struct strbuf {
  char *p;
  size_t len, cap;
} strbuf;

typedef struct sub_stream {
  uint32_t id;
  char name[AURAL_PROTO_NAME_MAX + 1];
  int ended;
  uint64_t next_seq;       /* the seq expected next */
  uint64_t first_chunk;    /* next_chunk of its STREAM_STARTED */
  uint64_t n_chunks;       /* chunks received */
  uint64_t n_lost;         /* chunks reported lost by GAPs */
  strbuf text;             /* the whole text so far */
  strbuf words;            /* the final words so far, space-separated
                              (kept only for --json, --quiet and -o) */
} sub_stream;

typedef struct sub_job {
  const char *sock_path, *stream, *out_path;
  int all, until_end, json, quiet;
  int reconnect;    /* --reconnect: connect again when aurald goes away */
  int lost;         /* the last session ended with the connection */
  int sessions;     /* connections subscribed so far */
  uint32_t outputs; /* AURAL_OUT_* */
  uint8_t dtype;
  aural_msg_vocabulary vocabulary; /* --vocabulary, --boost */
  aural_client *cl;
  const client_model *model; /* aurald's (WELCOME), or the cluster's */
  sub_stream *streams;
  size_t n_streams, cap_streams;

  /* -o */
  uint32_t out_kind;  /* AURAL_OUT_EMBEDDINGS, _LOGITS or _WORDS */
  uint32_t out_stream; /* the stream being written, 0 before its start */
  outfile of;          /* opened before connecting */
  size_t out_rows, out_dim; /* out_dim is 0 until the header is written */
  float *row_buf;
  size_t row_cap;
  int written;

  uint64_t n_gaps, n_lost;
  int tty;          /* stdout is a terminal: the partial is rewritten */
  int partial_shown; /* a partial caption is on the current line */
  strbuf caption;    /* the partial's words, for the terminal */
  char *line; /* JSON output buffer */
  size_t line_cap;

  /* --cluster */
  const char *cluster_url, *password_file;
  sub_from from;        /* --from */
  uint64_t from_seq;    /* --from SEQ */
  client_model cluster_model; /* from the stream's meta hash */
  int64_t last_seq;     /* the last chunk received, -1 before the first */
  char err[1024];
} sub_job;

/* Set by SIGINT or SIGTERM. */
extern volatile sig_atomic_t sub_interrupted;

/* The events, for stream id (created on first sight). Each returns 0, or
 * -1 with job->err set; sub_on_ended returns 1 when the command is done.
 * Each takes a partial caption off the terminal's line first (a line
 * printed after it would be glued to it).
 * source: how the stream is fed, for the started line ("file", ...). */
int sub_on_started(sub_job *job, uint32_t id,
                   const aural_msg_stream_started *st, const char *source);
/* A decoded CHUNK payload (aural_chunk_decode) and its sections. */
int sub_on_chunk(sub_job *job, uint32_t id, const aural_chunk_header *ch,
                 const uint8_t *emb, const uint8_t *logits, const char *text);
/* payload_bytes: the size of the WORDS payload mw was decoded from. */
int sub_on_words(sub_job *job, uint32_t id, const aural_msg_words *mw,
                 size_t payload_bytes);
/* Chunks first_chunk .. first_chunk + n_chunks - 1 will never come. */
int sub_on_gap(sub_job *job, uint32_t id, uint64_t first_chunk,
               uint64_t n_chunks, const char *reason);
int sub_on_ended(sub_job *job, uint32_t id, const aural_msg_stream_ended *e);

/* Takes a partial caption off the terminal's line before other output. */
void sub_clear_partial(sub_job *job);

/* --cluster: follows job->stream in the cluster's Redis until its final
 * chunk (sub_cluster.c). Returns an EXIT_* code; job->err tells a
 * failure. */
int sub_cluster_run(sub_job *job);

#endif
