/*
 * aural sub: subscribes to one stream of a running aurald (or all of them)
 * and prints what arrives: one line per chunk, or one JSON object per event,
 * or collects one stream's frames into a .npy file.
 *
 * The .npy appears only complete, through outfile.h: OUT is checked before
 * connecting, rows are streamed to a file without a name, which replaces
 * OUT (or is copied into OUT when that is a device or a FIFO) after the
 * stream's STREAM_ENDED, and is dropped on any failure, lost chunk or
 * interruption.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "npy.h"
#include "outfile.h"
#include "redis.h"
#include "sub.h"
#include "words.h"

#define RECONNECT_FIRST_S 1.0 /* --reconnect: the first wait, doubled ... */
#define RECONNECT_MAX_S 10.0  /* ... after each failed try up to this */
#define KEEPALIVE_MS 5000     /* --reconnect: quiet this long, a PING; no
                                 answer in as long again, aurald is gone */

volatile sig_atomic_t sub_interrupted;
static void on_signal(int sig) {
  sub_interrupted = sig;
  cli_stop_now_on_next();
}

static void usage(FILE *to) {
  char sock[128];
  fprintf(to,
          "Usage: aural sub [OPTIONS]\n"
          "       aural sub --cluster URL --stream NAME [--from SEQ|start|now]\n"
          "                 [OPTIONS]\n"
          "\n"
          "Subscribes to a stream of a running aurald (or to every stream)\n"
          "and prints one line per 500 ms chunk as it arrives: stream name,\n"
          "chunk number, frames, end-to-end latency (audio available at the\n"
          "server -> received here) and the mean L2 norm of the frames'\n"
          "embeddings or logits, or the chunk's text. Events without chunks\n"
          "(stream started, ended) get a line too; chunks the server had to\n"
          "drop because this subscriber fell behind are reported on stderr.\n"
          "With --cluster, reads one stream's chunks from the cluster's\n"
          "Redis instead, from any chunk it still retains, until the\n"
          "stream's final chunk; chunks the stream's node trimmed before\n"
          "they were read are reported on stderr as lost, and when\n"
          "interrupted the command tells the --from that resumes.\n"
          "\n"
          "Options:\n"
          "  -s, --socket PATH  aurald's socket (default: $AURAL_SOCKET,\n"
          "                     else $XDG_RUNTIME_DIR/aural.sock, else\n"
          "                     /run/aural/aural.sock for root, else\n"
          "                     /tmp/aural-UID/aural.sock;\n"
          "                     here %s)\n"
          CLUSTER_HELP
          "      --from WHERE   with --cluster (which needs --stream and\n"
          "                     implies --until-end), the first chunk: SEQ\n"
          "                     (that chunk; lost if no longer retained),\n"
          "                     start (the first one retained; the default)\n"
          "                     or now (the chunks stored from now on)\n",
          client_default_socket(sock, sizeof sock));
  fprintf(to,
          "      --stream NAME  the stream to follow, by name (a file's base\n"
          "                     name, 'mic', or the name given to 'aural\n"
          "                     send'); it need not have started yet\n"
          "      --all          every stream, live now or started later\n"
          "                     (the default when --stream is not given)\n"
          "      --output KINDS what to receive, comma-separated:\n"
          "                       embeddings  encoder output (default)\n"
          "                       logits      CTC head output before\n"
          "                                   log-softmax\n"
          "                       text        greedy CTC tokens per chunk,\n"
          "                                   and each stream's whole text\n"
          "                                   at its end\n"
          "                       words       words from the server's\n"
          "                                   lexicon and language model: a\n"
          "                                   live caption (on a terminal the\n"
          "                                   partial is rewritten in place),\n"
          "                                   a line per final segment with\n"
          "                                   its time span\n"
          "                     (logits and text need a model with a head,\n"
          "                     words a server with a lexicon)\n"
          "      --dtype TYPE   f32 (default) or f16 on the wire, of\n"
          "                     embeddings and logits (--output has one);\n"
          "                     -o always writes float32 (not with\n"
          "                     --cluster: the stream's node chose the\n"
          "                     dtype)\n"
          "  -o, --out PATH     write the stream's embeddings (or logits) as\n"
          "                     a float32 .npy [n_frames, dim] when it ends\n"
          "                     (with --output words alone: its transcript,\n"
          "                     the final words on one line);\n"
          "                     needs a single stream (--stream, or --all\n"
          "                     with exactly one stream appearing) and\n"
          "                     implies --until-end; nothing is written if a\n"
          "                     chunk was lost, the command is interrupted\n"
          "                     or the stream was cut short (an error, or\n"
          "                     aurald stopped before its end, as it ends a\n"
          "                     microphone's stream);\n"
          "                     a regular file is replaced atomically (not\n"
          "                     a read-only one), a device or FIFO written\n"
          "                     into, never replaced;\n"
          "                     - is stdout (what sub prints goes to stderr)\n"
          "      --until-end    exit after the stream's end (with --all: once\n"
          "                     every stream seen so far has ended)\n"
          "      --reconnect    when aurald goes away (stopped, restarted,\n"
          "                     not answering a PING sent after 5 s of\n"
          "                     quiet, or this subscriber dropped as too\n"
          "                     slow),\n"
          "                     connect and subscribe again after 1, 2, 4, 8,\n"
          "                     then every 10 s, until interrupted; the new\n"
          "                     connection's streams are new streams (not\n"
          "                     with -o, --until-end or --cluster)\n"
          "      --json         one JSON object per line per event instead:\n"
          "                     {\"event\": \"started\"|\"chunk\"|\"words\"|"
          "\"gap\"|\"ended\",\n"
          "                     \"stream\": id, \"name\": ..., ...}; started\n"
          "                     carries source, sample_rate, channels,\n"
          "                     start_us, next_chunk and frame_ms (frame t\n"
          "                     starts t * frame_ms ms into the stream);\n"
          "                     chunks carry seq, first_frame, n_frames,\n"
          "                     final, latency_ms and text (with --output\n"
          "                     text); \"words\" events carry seq, final,\n"
          "                     segments and partial, words with start and\n"
          "                     end frames and confidence\n");
  fprintf(to,
          "      --vocabulary W1,W2,...\n"
          "                     custom words (names, terms) the server's\n"
          "                     lexicon lacks, for this subscription's words:\n"
          "                     pronounced by espeak-ng, decoded by the\n"
          "                     server from the next chunk on (needs\n"
          "                     --stream and --output words; at most 64;\n"
          "                     not with --cluster: give them to 'aural\n"
          "                     send --cluster')\n"
          "      --boost X      score added per custom word (default 7)\n"
          "  -q, --quiet        no per-chunk or event lines (with --output\n"
          "                     text or words, each stream's whole text or\n"
          "                     transcript is still printed); no effect\n"
          "                     with --json\n"
          "  -h, --help         show this help\n"
          "\n"
          "Examples:\n"
          "  aural sub --stream mic --output text\n"
          "  aural sub --stream mic --output words\n"
          "  aural sub --stream mic --output words --vocabulary "
          "Dashwood,Kubernetes\n"
          "  aural sub -s /tmp/x/aural.sock --all --json\n"
          "  aural sub --stream speech.wav --dtype f16 -o speech-emb.npy\n"
          "  aural sub --cluster redis://10.0.0.5 --stream call-17 --from 40\n"
          "\n"
          "Ctrl-C stops the command, and -o writes nothing; a second\n"
          "Ctrl-C ends it at once (as while a -o FIFO is not read).\n"
          "\n"
          "Exit status: 0 after the end of the stream(s) with --until-end or\n"
          "-o (with --cluster, after the final chunk); 1 on an error (aurald\n"
          "or Redis unreachable, refused subscription, lost chunks with -o);\n"
          "2 for a bad command line; 3 when aurald disconnected this\n"
          "subscriber (it fell too far behind, or the server shut down or\n"
          "went away; not with --reconnect); 130 when interrupted.\n");
}

/* --- streams ------------------------------------------------------------ */

static sub_stream *find_stream(sub_job *job, uint32_t id) {
  for (size_t i = 0; i < job->n_streams; i++)
    if (job->streams[i].id == id) return &job->streams[i];
  return NULL;
}

/* The entry for stream id, created (nameless) when it is new. */
static sub_stream *get_stream(sub_job *job, uint32_t id) {
  sub_stream *s = find_stream(job, id);
  if (s != NULL) return s;
  if (job->n_streams == job->cap_streams) {
    size_t cap = job->cap_streams ? job->cap_streams * 2 : 8;
    sub_stream *p = realloc(job->streams, cap * sizeof *p);
    if (p == NULL) return NULL;
    job->streams = p;
    job->cap_streams = cap;
  }
  s = &job->streams[job->n_streams++];
  memset(s, 0, sizeof *s);
  s->id = id;
  snprintf(s->name, sizeof s->name, "stream-%u", id);
  return s;
}

/* Appends n bytes of t to b, after a space when b is not empty. */
static int text_append(strbuf *b, const char *t, size_t n) {
  if (n == 0) return 0;
  size_t need = b->len + n + 2;
  if (need > b->cap) {
    size_t cap = need * 2;
    char *p = realloc(b->p, cap);
    if (p == NULL) return -1;
    b->p = p;
    b->cap = cap;
  }
  if (b->len > 0) b->p[b->len++] = ' ';
  memcpy(b->p + b->len, t, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

/* --- JSON lines ---------------------------------------------------------- */

/* Starts a JSON event line with room for extra bytes of strings. */
static int jw_start(sub_job *job, aural_jw *w, size_t extra, const char *ev,
                    const sub_stream *s) {
  size_t cap = 1024 + 6 * extra;
  if (cap > job->line_cap) {
    char *p = realloc(job->line, cap);
    if (p == NULL) return -1;
    job->line = p;
    job->line_cap = cap;
  }
  aural_jw_init(w, job->line, job->line_cap);
  aural_jw_begin_object(w);
  aural_jw_key(w, "event");
  aural_jw_string(w, ev);
  aural_jw_key(w, "stream");
  aural_jw_uint(w, s->id);
  aural_jw_key(w, "name");
  aural_jw_string(w, s->name);
  return 0;
}

static int jw_print(sub_job *job, aural_jw *w) {
  aural_jw_end_object(w);
  long n = aural_jw_finish(w);
  if (n < 0) return 0;
  fwrite(w->buf, 1, (size_t)n, stdout);
  putchar('\n');
  return cli_stdout_flush(job->err, sizeof job->err);
}

/* --- the output file ------------------------------------------------------ */

/* Writes the .npy header for rows of dim values (the row count follows
 * at the end). */
static int begin_output(sub_job *job, size_t dim) {
  job->out_dim = dim;
  if (npy_write_begin(job->of.f, dim) < 0) {
    outfile_write_error(&job->of, errno ? errno : EIO, job->err,
                        sizeof job->err);
    return -1;
  }
  return 0;
}

static int finish_output(sub_job *job) {
  if (job->out_dim == 0) {
    /* The stream ended without a single chunk: an empty array. */
    size_t dim = job->out_kind == AURAL_OUT_EMBEDDINGS
                     ? job->model->d_model
                     : job->model->vocab_size;
    if (begin_output(job, dim) < 0) return -1;
  }
  if (npy_write_end(job->of.f, job->out_rows, job->out_dim) < 0) {
    outfile_write_error(&job->of, errno ? errno : EIO, job->err,
                        sizeof job->err);
    return -1;
  }
  if (outfile_commit(&job->of, job->err, sizeof job->err) < 0) return -1;
  job->written = 1;
  return 0;
}

/* Converts n values of dtype at p to float32 in job->row_buf (allocated
 * also for n = 0: an empty first chunk, the end of a cluster stream
 * without frames, is no failure). */
static float *to_f32(sub_job *job, const uint8_t *p, size_t n, uint8_t dtype) {
  if (n > job->row_cap || job->row_buf == NULL) {
    size_t cap = n > 0 ? n : 1;
    float *b = realloc(job->row_buf, cap * sizeof *b);
    if (b == NULL) return NULL;
    job->row_buf = b;
    job->row_cap = cap;
  }
  for (size_t i = 0; i < n; i++) {
    if (dtype == AURAL_DTYPE_F16) {
      job->row_buf[i] = aural_f16_to_f32(aural_get_u16(p + 2 * i));
    } else {
      uint32_t bits = aural_get_u32(p + 4 * i);
      memcpy(&job->row_buf[i], &bits, 4);
    }
  }
  return job->row_buf;
}

/* Mean over frames of the L2 norm of each row. */
static double mean_norm(const float *x, size_t rows, size_t dim) {
  double sum = 0;
  for (size_t r = 0; r < rows; r++) {
    double s = 0;
    for (size_t j = 0; j < dim; j++) s += (double)x[r * dim + j] * x[r * dim + j];
    sum += sqrt(s);
  }
  return rows ? sum / (double)rows : 0;
}

/* --- events --------------------------------------------------------------- */

int sub_on_started(sub_job *job, uint32_t id,
                   const aural_msg_stream_started *st, const char *source) {
  sub_stream *s = get_stream(job, id);
  if (s == NULL) goto oom;
  sub_clear_partial(job);
  snprintf(s->name, sizeof s->name, "%s", st->name);
  /* The server's numbers as they came: a sample rate is any finite
   * double (converting one past int64_t to it is undefined), a chunk
   * number any of 0..INT64_MAX. */
  int64_t next = (int64_t)st->next_chunk, channels = st->channels,
          start_us = st->start_us;
  double rate = st->sample_rate;
  s->ended = 0;
  s->next_seq = s->first_chunk = (uint64_t)next;
  s->n_chunks = s->n_lost = 0;
  s->text.len = 0;
  s->words.len = 0;

  if (job->out_path != NULL) {
    if (job->out_stream != 0 && job->out_stream != s->id) {
      snprintf(job->err, sizeof job->err,
               "-o needs a single stream, but '%s' started as well; "
               "%s not written (use --stream NAME)",
               s->name, job->out_path);
      return -1;
    }
    job->out_stream = s->id;
    if (next > 0)
      fprintf(stderr,
              "aural sub: joined '%s' at chunk %lld: %s starts at frame "
              "%.0f, not 0\n",
              s->name, (long long)next, job->out_path,
              (double)next * job->model->chunk_frames);
  }

  if (job->json) {
    aural_jw w;
    if (jw_start(job, &w, 256, "started", s) < 0) goto oom;
    aural_jw_key(&w, "source");
    aural_jw_string(&w, source ? source : "");
    aural_jw_key(&w, "sample_rate");
    aural_jw_double(&w, rate);
    aural_jw_key(&w, "channels");
    aural_jw_int(&w, channels);
    aural_jw_key(&w, "start_us");
    aural_jw_int(&w, start_us);
    aural_jw_key(&w, "next_chunk");
    aural_jw_int(&w, next);
    /* The unit of every frame number that follows (first_frame, a
     * word's start and end): frame t starts t * frame_ms after start. */
    aural_jw_key(&w, "frame_ms");
    aural_jw_double(&w, job->model->frame_ms);
    if (jw_print(job, &w) < 0) return -1;
  } else if (!job->quiet) {
    printf("%s  started: stream %u, %s, %.15g Hz, %lld channel%s, from chunk "
           "%lld\n",
           s->name, s->id, source ? source : "?", rate,
           (long long)channels, channels == 1 ? "" : "s", (long long)next);
    if (cli_stdout_flush(job->err, sizeof job->err) < 0) return -1;
  }
  return 0;
oom:
  snprintf(job->err, sizeof job->err, "out of memory");
  return -1;
}

int sub_on_gap(sub_job *job, uint32_t id, uint64_t first_chunk,
               uint64_t n_chunks, const char *reason) {
  sub_stream *s = get_stream(job, id);
  if (s == NULL) return -1;
  /* The decoder saw to n >= 1 and first + n - 1 <= INT64_MAX; unsigned,
   * first + n cannot overflow. */
  uint64_t first = first_chunk, n = n_chunks;
  sub_clear_partial(job);
  job->n_gaps++;
  job->n_lost += n;
  s->n_lost += n;
  s->next_seq = first + n;
  fprintf(stderr, "aural sub: %s: lost chunks %llu-%llu (%s; %llu lost so "
          "far)\n", s->name, (unsigned long long)first,
          (unsigned long long)(first + n - 1), reason ? reason : "?",
          (unsigned long long)job->n_lost);
  if (job->json) {
    aural_jw w;
    if (jw_start(job, &w, 64, "gap", s) < 0) return -1;
    aural_jw_key(&w, "first_chunk");
    aural_jw_uint(&w, first);
    aural_jw_key(&w, "n_chunks");
    aural_jw_uint(&w, n);
    aural_jw_key(&w, "reason");
    aural_jw_string(&w, reason ? reason : "");
    if (jw_print(job, &w) < 0) return -1;
  }
  if (job->out_path != NULL && s->id == job->out_stream) {
    snprintf(job->err, sizeof job->err,
             "%s: chunks were lost; %s not written", s->name, job->out_path);
    return -1;
  }
  return 0;
}

int sub_on_chunk(sub_job *job, uint32_t id, const aural_chunk_header *ch,
                 const uint8_t *emb, const uint8_t *logits, const char *text) {
  int64_t now_us = client_realtime_us();
  sub_stream *s = get_stream(job, id);
  if (s == NULL) return -1;
  sub_clear_partial(job);
  if ((job->outputs & AURAL_OUT_EMBEDDINGS && emb == NULL) ||
      (job->outputs & AURAL_OUT_LOGITS && logits == NULL) ||
      (job->outputs & AURAL_OUT_TEXT && text == NULL)) {
    snprintf(job->err, sizeof job->err,
             "%s: chunk %llu lacks an output that was subscribed to",
             s->name, (unsigned long long)ch->seq);
    return -1;
  }
  if (ch->seq != s->next_seq)
    fprintf(stderr, "aural sub: %s: chunk %llu arrived where %llu was "
            "expected\n", s->name, (unsigned long long)ch->seq,
            (unsigned long long)s->next_seq);
  s->next_seq = ch->seq + 1;
  s->n_chunks++;
  double latency_ms = (double)(now_us - ch->ready_us) / 1e3;
  int final = (ch->flags & AURAL_CHUNK_FINAL) != 0;
  if (text != NULL && text_append(&s->text, text, ch->text_bytes) < 0)
    goto oom;

  double emb_norm = 0, logit_norm = 0;
  if (emb != NULL) {
    const float *x = to_f32(job, emb, (size_t)ch->n_frames * ch->d_model,
                            ch->dtype);
    if (x == NULL) goto oom;
    emb_norm = mean_norm(x, ch->n_frames, ch->d_model);
    if (job->out_stream == s->id && job->out_kind == AURAL_OUT_EMBEDDINGS) {
      if (job->out_dim == 0 && begin_output(job, ch->d_model) < 0) return -1;
      if (ch->d_model != job->out_dim) goto width;
      if (fwrite(x, sizeof *x * ch->d_model, ch->n_frames, job->of.f) !=
          ch->n_frames)
        goto write_fail;
      job->out_rows += ch->n_frames;
    }
  }
  if (logits != NULL) {
    const float *x = to_f32(job, logits, (size_t)ch->n_frames * ch->vocab_size,
                            ch->dtype);
    if (x == NULL) goto oom;
    logit_norm = mean_norm(x, ch->n_frames, ch->vocab_size);
    if (job->out_stream == s->id && job->out_kind == AURAL_OUT_LOGITS) {
      if (job->out_dim == 0 && begin_output(job, ch->vocab_size) < 0) return -1;
      if (ch->vocab_size != job->out_dim) goto width;
      if (fwrite(x, sizeof *x * ch->vocab_size, ch->n_frames, job->of.f) !=
          ch->n_frames)
        goto write_fail;
      job->out_rows += ch->n_frames;
    }
  }

  if (job->json) {
    aural_jw w;
    if (jw_start(job, &w, ch->text_bytes, "chunk", s) < 0) goto oom;
    aural_jw_key(&w, "seq");
    aural_jw_uint(&w, ch->seq);
    aural_jw_key(&w, "first_frame");
    aural_jw_uint(&w, ch->first_frame);
    aural_jw_key(&w, "n_frames");
    aural_jw_uint(&w, ch->n_frames);
    aural_jw_key(&w, "final");
    aural_jw_bool(&w, final);
    aural_jw_key(&w, "latency_ms");
    aural_jw_double(&w, round(latency_ms * 1000) / 1000);
    if (text != NULL) {
      aural_jw_key(&w, "text");
      aural_jw_string_n(&w, text, ch->text_bytes);
    }
    if (jw_print(job, &w) < 0) return -1;
  } else if (!job->quiet) {
    printf("%s  #%llu  ", s->name, (unsigned long long)ch->seq);
    if (ch->n_frames > 0) /* an empty FINAL chunk only ends the stream */
      printf("frames %llu-%llu", (unsigned long long)ch->first_frame,
             (unsigned long long)(ch->first_frame + ch->n_frames - 1));
    else
      printf("no frames");
    printf("  latency %.1f ms", latency_ms);
    if (emb != NULL && ch->n_frames > 0) printf("  |emb| %.2f", emb_norm);
    if (logits != NULL && ch->n_frames > 0)
      printf("  |logits| %.2f", logit_norm);
    if (final) printf("  final");
    if (text != NULL && ch->text_bytes > 0)
      printf("  %.*s", (int)ch->text_bytes, text);
    putchar('\n');
    if (cli_stdout_flush(job->err, sizeof job->err) < 0) return -1;
  }
  return 0;
width:
  snprintf(job->err, sizeof job->err,
           "%s: chunk %llu has rows of another width than the ones before",
           s->name, (unsigned long long)ch->seq);
  return -1;
write_fail:
  outfile_write_error(&job->of, errno ? errno : EIO, job->err,
                      sizeof job->err);
  return -1;
oom:
  snprintf(job->err, sizeof job->err, "out of memory");
  return -1;
}

/* Takes the partial caption off the terminal's current line, at once: a
 * message to stderr may follow. A failed write is told by the next
 * cli_stdout_flush (main's at the latest), which remembers it. */
void sub_clear_partial(sub_job *job) {
  if (!job->partial_shown) return;
  fputs("\r\033[K", stdout);
  fflush(stdout);
  job->partial_shown = 0;
}

/* Writes a list of words as a JSON array of objects. */
static int put_words_json(aural_jw *w, aural_json_list words, char *why,
                          size_t why_len) {
  aural_msg_word x;
  int rc;
  aural_jw_begin_array(w);
  while ((rc = aural_proto_words_word_next(&words, &x, why, why_len)) == 1) {
    aural_jw_begin_object(w);
    aural_jw_key(w, "word");
    aural_jw_string(w, x.word);
    aural_jw_key(w, "start");
    aural_jw_uint(w, x.start);
    aural_jw_key(w, "end");
    aural_jw_uint(w, x.end);
    aural_jw_key(w, "confidence");
    aural_jw_double(w, x.confidence);
    aural_jw_end_object(w);
  }
  aural_jw_end_array(w);
  return rc;
}

static int words_json(sub_job *job, sub_stream *s, const aural_msg_words *mw,
                      size_t payload_bytes) {
  aural_jw w;
  if (jw_start(job, &w, payload_bytes, "words", s) < 0) return -1;
  aural_jw_key(&w, "seq");
  aural_jw_uint(&w, mw->seq);
  aural_jw_key(&w, "final");
  aural_jw_bool(&w, mw->final);
  aural_jw_key(&w, "segments");
  aural_jw_begin_array(&w);
  aural_json_list segs = mw->segments, words;
  while (aural_proto_words_segment_next(&segs, &words, NULL, 0) == 1)
    put_words_json(&w, words, NULL, 0);
  aural_jw_end_array(&w);
  aural_jw_key(&w, "partial");
  put_words_json(&w, mw->partial, NULL, 0);
  return jw_print(job, &w);
}

/* The partial caption on the current line, its latest words when it is
 * wider than the terminal (a line that wrapped could not be rewritten). */
static void show_partial(sub_job *job, const sub_stream *s) {
  struct winsize ws;
  size_t cols = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0
                    ? ws.ws_col
                    : 80;
  size_t prefix = strlen(s->name) + 6; /* "NAME  ... " */
  const char *t = job->caption.p;
  size_t n = job->caption.len;
  size_t room = cols > prefix + 1 ? cols - prefix - 1 : 0;
  if (n > room) {
    /* The tail that fits, from a word's start (UTF-8 stays whole). */
    t += n - room;
    n = room;
    while (n > 0 && *t != ' ') t++, n--;
    while (n > 0 && *t == ' ') t++, n--;
  }
  printf("%s  ... %.*s", s->name, (int)n, t);
  job->partial_shown = 1;
}

/* A WORDS event: the finals become lines of the caption and of the
 * transcript, the partial is shown in place on a terminal. */
int sub_on_words(sub_job *job, uint32_t id, const aural_msg_words *mw,
                 size_t payload_bytes) {
  sub_stream *s = get_stream(job, id);
  if (s == NULL) goto oom;
  if ((job->outputs & AURAL_OUT_ALL) == 0) {
    /* Words alone: no CHUNK arrives, WORDS counts the chunks. */
    s->next_seq = mw->seq + 1;
    s->n_chunks++;
  }
  aural_json_list segs = mw->segments, words;
  aural_msg_word x;
  /* The final words are kept only for what prints them at the stream's
   * end (--json's ended line, --quiet's transcript, -o): a live caption
   * running for weeks holds none. */
  int keep = job->json || job->quiet ||
             (job->out_path != NULL && job->out_kind == AURAL_OUT_WORDS);
  while (keep && aural_proto_words_segment_next(&segs, &words, NULL, 0) == 1) {
    aural_json_list w = words;
    while (aural_proto_words_word_next(&w, &x, NULL, 0) == 1)
      if (text_append(&s->words, x.word, strlen(x.word)) < 0) goto oom;
  }
  if (job->json) return words_json(job, s, mw, payload_bytes) < 0 ? -1 : 0;
  if (job->quiet) return 0;
  sub_clear_partial(job);
  segs = mw->segments;
  while (aural_proto_words_segment_next(&segs, &words, NULL, 0) == 1) {
    double frame_s = job->model->frame_ms / 1000.0;
    aural_json_list w = words;
    uint64_t start = 0, end = 0;
    size_t n = 0;
    while (aural_proto_words_word_next(&w, &x, NULL, 0) == 1) {
      if (n++ == 0) start = x.start;
      end = x.end;
    }
    if (n == 0) continue;
    printf("%s  [%7.2f - %7.2f s]", s->name, (double)start * frame_s,
           (double)end * frame_s);
    w = words;
    while (aural_proto_words_word_next(&w, &x, NULL, 0) == 1)
      printf(" %s", x.word);
    putchar('\n');
  }
  if (job->tty && mw->partial.n_items > 0) {
    job->caption.len = 0;
    aural_json_list w = mw->partial;
    while (aural_proto_words_word_next(&w, &x, NULL, 0) == 1)
      if (text_append(&job->caption, x.word, strlen(x.word)) < 0) goto oom;
    show_partial(job, s);
  }
  if (cli_stdout_flush(job->err, sizeof job->err) < 0) return -1;
  return 0;
oom:
  snprintf(job->err, sizeof job->err, "out of memory");
  return -1;
}

/* -o with --output words: the stream's final words on one line. */
static int finish_transcript(sub_job *job, const sub_stream *s) {
  if (fprintf(job->of.f, "%s\n", s->words.p ? s->words.p : "") < 0 ||
      fflush(job->of.f) != 0) {
    outfile_write_error(&job->of, errno ? errno : EIO, job->err,
                        sizeof job->err);
    return -1;
  }
  if (outfile_commit(&job->of, job->err, sizeof job->err) < 0) return -1;
  job->written = 1;
  return 0;
}

/* Returns 1 when the command is done (--until-end), 0 to go on, -1. */
int sub_on_ended(sub_job *job, uint32_t id, const aural_msg_stream_ended *e) {
  sub_stream *s = get_stream(job, id);
  if (s == NULL) return -1;
  snprintf(s->name, sizeof s->name, "%s", e->name);
  const char *reason = aural_end_reason_name(e->reason);
  const char *message = e->message;
  int64_t frames = (int64_t)e->frames, chunks = (int64_t)e->chunks;
  s->ended = 1;
  int want_text = (job->outputs & AURAL_OUT_TEXT) != 0;
  int want_words = (job->outputs & AURAL_OUT_WORDS) != 0;
  sub_clear_partial(job);

  /* Every chunk from the first one we were promised to the last must have
   * been received or reported lost (PROTOCOL.md 4.9). */
  if (chunks >= 0 &&
      s->first_chunk + s->n_chunks + s->n_lost != (uint64_t)chunks &&
      !(chunks == 0 && s->n_chunks == 0))
    fprintf(stderr,
            "aural sub: %s: the stream had %lld chunks; from chunk %llu on "
            "%llu arrived and %llu were reported lost\n",
            s->name, (long long)chunks, (unsigned long long)s->first_chunk,
            (unsigned long long)s->n_chunks, (unsigned long long)s->n_lost);

  if (job->json) {
    aural_jw w;
    size_t extra =
        s->text.len + s->words.len + (message ? strlen(message) : 0) + 64;
    if (jw_start(job, &w, extra, "ended", s) < 0) goto oom;
    aural_jw_key(&w, "reason");
    aural_jw_string(&w, reason ? reason : "");
    aural_jw_key(&w, "message");
    aural_jw_string(&w, message ? message : "");
    aural_jw_key(&w, "frames");
    aural_jw_int(&w, frames);
    aural_jw_key(&w, "chunks");
    aural_jw_int(&w, chunks);
    aural_jw_key(&w, "chunks_received");
    aural_jw_uint(&w, s->n_chunks);
    aural_jw_key(&w, "chunks_lost");
    aural_jw_uint(&w, s->n_lost);
    if (want_text) {
      aural_jw_key(&w, "text");
      aural_jw_string_n(&w, s->text.p ? s->text.p : "", s->text.len);
    }
    if (want_words) {
      aural_jw_key(&w, "words");
      aural_jw_string_n(&w, s->words.p ? s->words.p : "", s->words.len);
    }
    if (jw_print(job, &w) < 0) return -1;
  } else {
    if (!job->quiet)
      printf("%s  ended: %s%s%s, %lld frames, %lld chunks\n", s->name,
             reason ? reason : "?", message && message[0] ? ": " : "",
             message ? message : "", (long long)frames, (long long)chunks);
    if (want_text)
      printf(job->quiet ? "%s\n" : "%s  text: %s\n",
             job->quiet ? (s->text.p ? s->text.p : "") : s->name,
             s->text.p ? s->text.p : "");
    if (want_words && job->quiet)
      printf("%s\n", s->words.p ? s->words.p : "");
    if (cli_stdout_flush(job->err, sizeof job->err) < 0) return -1;
  }

  /* A stream cut short by the server's shutdown or by an error is not
   * what -o promises; the fatal SHUTDOWN error follows the former. */
  int cut = reason != NULL &&
            (strcmp(reason, "shutdown") == 0 || strcmp(reason, "error") == 0);
  if (job->out_path != NULL && s->id == job->out_stream) {
    if (cut && strcmp(reason, "shutdown") == 0) {
      fprintf(stderr, "aural sub: %s was cut short by the server's "
              "shutdown\n", s->name);
      return 0;
    }
    if (cut) {
      snprintf(job->err, sizeof job->err,
               "%s ended with an error%s%s; %s not written", s->name,
               message && message[0] ? ": " : "", message ? message : "",
               job->out_path);
      return -1;
    }
    if (job->out_kind == AURAL_OUT_WORDS) {
      if (finish_transcript(job, s) < 0) return -1;
      if (!job->quiet && !job->json)
        printf("%s: transcript written to %s\n", s->name, job->out_path);
      return 1;
    }
    if (finish_output(job) < 0) return -1;
    if (!job->quiet && !job->json)
      printf("%s: %zu frames x %zu written to %s\n", s->name, job->out_rows,
             job->out_dim, job->out_path);
    return 1;
  }
  if (!job->until_end) {
    /* Nothing more comes for it: a subscriber that runs for days keeps
     * the live streams alone (each message looks its stream up). */
    free(s->text.p);
    free(s->words.p);
    *s = job->streams[--job->n_streams];
    return 0;
  }
  if (cut && strcmp(reason, "shutdown") == 0) return 0;
  for (size_t i = 0; i < job->n_streams; i++)
    if (!job->streams[i].ended) return 0;
  return 1;
oom:
  snprintf(job->err, sizeof job->err, "out of memory");
  return -1;
}

/* A CHUNK from aurald. */
static int on_chunk(sub_job *job, const client_msg *m) {
  aural_chunk_header ch;
  const uint8_t *emb, *logits;
  const char *text;
  if (aural_chunk_decode(m->payload, m->h.payload_bytes, &ch, &emb, &logits,
                         &text) < 0) {
    sub_stream *s = get_stream(job, m->h.stream_id);
    snprintf(job->err, sizeof job->err,
             "%s: malformed CHUNK from aurald (%u bytes)",
             s ? s->name : "?", m->h.payload_bytes);
    return -1;
  }
  return sub_on_chunk(job, m->h.stream_id, &ch, emb, logits, text);
}

/* --- the session ----------------------------------------------------------- */

static int subscribe(sub_job *job) {
  aural_msg_subscribe req = {.all = job->all != 0,
                             .outputs = job->outputs,
                             .dtype = job->dtype,
                             .vocabulary = job->vocabulary};
  if (!job->all) snprintf(req.stream, sizeof req.stream, "%s", job->stream);
  uint8_t msg[AURAL_PROTO_HEADER_BYTES + 32768];
  size_t n = aural_proto_encode_subscribe(msg, sizeof msg, &req);
  if (n == 0) {
    snprintf(job->err, sizeof job->err, "cannot encode SUBSCRIBE");
    return -1;
  }
  return client_send(job->cl, msg, n, job->err, sizeof job->err);
}

/* --reconnect: whether aurald is still there while nothing comes (a
 * stopped or stuck daemon keeps the connection open and sends nothing,
 * which a quiet feed also does). Waits for the next message; after
 * KEEPALIVE_MS of quiet sends a PING, and when nothing at all comes in
 * KEEPALIVE_MS more, the connection counts as lost. Returns 0 when there
 * is something to read, -1 (job->err set) when lost, -EINTR. */
static int keep_alive(sub_job *job) {
  bool pinged = false;
  for (;;) {
    struct pollfd pf = {.fd = job->cl->fd, .events = POLLIN};
    int r = poll(&pf, 1, KEEPALIVE_MS);
    if (r < 0 && errno == EINTR && sub_interrupted) return -EINTR;
    if (r < 0 && errno == EINTR) continue;
    if (r != 0) return 0; /* a message, or an error client_read reports */
    if (pinged) {
      snprintf(job->err, sizeof job->err,
               "aurald did not answer a PING in %d s (%s: stopped, or "
               "stuck?)", KEEPALIVE_MS / 1000, job->cl->path);
      return -1;
    }
    if (client_send_raw(job->cl, AURAL_MSG_PING, 0, NULL, 0, job->err,
                        sizeof job->err) < 0)
      return -1;
    pinged = true;
  }
}

/* rc, from a session that ended by what came, not with its connection. */
static int kept(sub_job *job, int rc) {
  job->lost = 0;
  return rc;
}

/* One connection: subscribes and handles what comes until the end.
 * job->lost tells whether it ended with the connection (aurald could not
 * be reached, went away or dropped us) rather than by what came. */
static int run(sub_job *job) {
  job->lost = 1;
  if (client_connect(job->sock_path, "aural sub", &job->cl, job->err,
                     sizeof job->err) < 0)
    return EXIT_FAIL;
  job->model = &job->cl->model;
  if (job->model->precision[0] != '\0' && !job->quiet)
    fprintf(stderr, "aural sub: the server computes in precision %s "
                    "(approximate; see aurald --precision)\n",
            job->model->precision);
  if (subscribe(job) < 0) return sub_interrupted ? EXIT_SIGNAL : EXIT_FAIL;
  int subscribed = 0;
  for (;;) {
    client_msg m;
    int rc = subscribed && job->reconnect ? keep_alive(job) : 0;
    if (rc == 0) rc = client_read(job->cl, &m, job->err, sizeof job->err);
    if (sub_interrupted) return EXIT_SIGNAL;
    if (rc == 1)
      snprintf(job->err, sizeof job->err,
               "aurald closed the connection (%s)", job->cl->path);
    if (rc == 1 || (rc != 0 && job->cl->closed)) {
      /* Without a SHUTDOWN or SLOW_CONSUMER error first: aurald was
       * killed, or dropped us with no room left to say so (a subscriber
       * suspended or stuck fills its socket, PROTOCOL.md section 7). */
      if (subscribed) {
        size_t n = strlen(job->err);
        snprintf(job->err + n, sizeof job->err - n,
                 "; either aurald died, or it dropped this subscriber as too "
                 "slow (aurald's log says which)");
      }
      return EXIT_DISCONNECTED;
    }
    if (rc != 0) return EXIT_FAIL;
    switch (m.h.type) {
    case AURAL_MSG_SUBSCRIBED:
      subscribed = 1;
      job->cl->timeout_ms = -1; /* streams may be silent for hours */
      if (job->sessions++ > 0)
        fprintf(stderr, "aural sub: connected again to %s\n", job->cl->path);
      break;
    case AURAL_MSG_ERROR: {
      bool fatal;
      char e[400];
      int code = client_error(&m, e, sizeof e, &fatal);
      if (!subscribed) {
        snprintf(job->err, sizeof job->err, "subscription refused: %s", e);
        return code == AURAL_PROTO_ESHUTDOWN ? EXIT_FAIL
                                             : kept(job, EXIT_FAIL);
      }
      snprintf(job->err, sizeof job->err, "aurald: %s", e);
      if (code == AURAL_PROTO_ESLOW_CONSUMER ||
          code == AURAL_PROTO_ESHUTDOWN)
        return EXIT_DISCONNECTED;
      if (fatal) return kept(job, EXIT_FAIL);
      sub_clear_partial(job);
      fprintf(stderr, "aural sub: %s\n", job->err);
      job->err[0] = '\0';
      break;
    }
    case AURAL_MSG_STREAM_STARTED:
      if (sub_on_started(job, m.h.stream_id, &m.u.started,
                         aural_source_name(m.u.started.source)) < 0)
        return kept(job, EXIT_FAIL);
      break;
    case AURAL_MSG_CHUNK:
      if (on_chunk(job, &m) < 0) return kept(job, EXIT_FAIL);
      break;
    case AURAL_MSG_WORDS:
      if (sub_on_words(job, m.h.stream_id, &m.u.words, m.h.payload_bytes) <
          0)
        return kept(job, EXIT_FAIL);
      break;
    case AURAL_MSG_GAP:
      if (sub_on_gap(job, m.h.stream_id, m.u.gap.first_chunk,
                     m.u.gap.n_chunks,
                     aural_gap_reason_name(m.u.gap.reason)) < 0)
        return kept(job, EXIT_FAIL);
      break;
    case AURAL_MSG_STREAM_ENDED:
      rc = sub_on_ended(job, m.h.stream_id, &m.u.ended);
      if (rc < 0) return kept(job, EXIT_FAIL);
      if (rc == 1) return kept(job, EXIT_OK);
      break;
    default:
      break;
    }
  }
}

/* Forgets the streams of a connection that is gone: the next one's
 * stream ids are its own. */
static void forget_streams(sub_job *job) {
  sub_clear_partial(job);
  for (size_t i = 0; i < job->n_streams; i++) {
    free(job->streams[i].text.p);
    free(job->streams[i].words.p);
  }
  job->n_streams = 0;
}

/* Sleeps s seconds, or less when interrupted by a signal. */
static void sleep_s(double s) {
  struct timespec ts = {.tv_sec = (time_t)s,
                        .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* --reconnect: sessions one after another while aurald comes and goes,
 * the waits between tries 1, 2, 4, 8, then 10 s (from 1 again after a
 * session that subscribed). */
static int run_reconnecting(sub_job *job) {
  double wait_s = 0;
  for (;;) {
    int before = job->sessions;
    int rc = run(job);
    client_close(job->cl);
    job->cl = NULL;
    job->model = NULL; /* it was the connection's */
    if (sub_interrupted) return EXIT_SIGNAL;
    if (!job->lost) return rc;
    wait_s = job->sessions > before || wait_s == 0 ? RECONNECT_FIRST_S
             : wait_s * 2 < RECONNECT_MAX_S     ? wait_s * 2
                                                : RECONNECT_MAX_S;
    forget_streams(job);
    fprintf(stderr, "aural sub: %s; connecting again in %.0f s\n", job->err,
            wait_s);
    if (cli_stdout_flush(job->err, sizeof job->err) < 0) return EXIT_FAIL;
    job->err[0] = '\0';
    sleep_s(wait_s);
    if (sub_interrupted) return EXIT_SIGNAL;
  }
}

/* What is wrong with the --cluster options, or NULL; sets job->from. */
static const char *check_cluster(sub_job *job, const char *from,
                                 bool dtype, bool vocabulary, char *why,
                                 size_t why_len) {
  const char *bad = cluster_options(job->cluster_url, job->password_file,
                                    job->sock_path, why, why_len);
  if (bad != NULL) return bad;
  if (job->cluster_url == NULL)
    return from != NULL ? "--from needs --cluster" : NULL;
  if (job->stream == NULL || job->all)
    return "--cluster needs --stream NAME (one stream, not --all)";
  if (!aural_cluster_valid_name(job->stream))
    return "--stream: a cluster stream's name holds no '{' or '}'";
  if (dtype)
    return "--dtype: not with --cluster (the stream's node chose it)";
  if (vocabulary)
    return "--vocabulary: not with --cluster (a node decodes a stream's "
           "words once, for every consumer: give them to 'aural send "
           "--cluster')";
  size_t seq;
  if (from == NULL || strcmp(from, "start") == 0) {
    job->from = SUB_FROM_START;
  } else if (strcmp(from, "now") == 0) {
    job->from = SUB_FROM_NOW;
  } else if (cli_parse_size(from, 0, (size_t)INT64_MAX, &seq) == 0) {
    job->from = SUB_FROM_SEQ;
    job->from_seq = seq;
  } else {
    snprintf(why, why_len, "--from %s: expected a chunk number, start or now",
             from);
    return why;
  }
  return NULL;
}

/* Parses a comma-separated list of output kinds into AURAL_OUT_* bits. */
static int parse_outputs(const char *s, uint32_t *out) {
  static const char *const names[] = {"embeddings", "logits", "text",
                                      "words"};
  uint32_t bits = 0;
  while (*s) {
    size_t n = strcspn(s, ",");
    size_t k = 0;
    while (k < 4 && !(strlen(names[k]) == n && strncmp(s, names[k], n) == 0))
      k++;
    if (k == 4) return -1;
    bits |= 1u << k;
    s += n;
    if (*s == ',') s++;
  }
  if (bits == 0) return -1;
  *out = bits;
  return 0;
}

int cmd_sub(int argc, char **argv) {
  static const struct option opts[] = {
      {"socket", required_argument, NULL, 's'},
      {"cluster", required_argument, NULL, 'C'},
      {"cluster-password-file", required_argument, NULL, 'P'},
      {"from", required_argument, NULL, 'F'},
      {"stream", required_argument, NULL, 'S'},
      {"all", no_argument, NULL, 'A'},
      {"output", required_argument, NULL, 'O'},
      {"dtype", required_argument, NULL, 'D'},
      {"out", required_argument, NULL, 'o'},
      {"until-end", no_argument, NULL, 'U'},
      {"reconnect", no_argument, NULL, 'R'},
      {"json", no_argument, NULL, 'J'},
      {"quiet", no_argument, NULL, 'q'},
      {"vocabulary", required_argument, NULL, 'V'},
      {"boost", required_argument, NULL, 'X'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  sub_job job = {.outputs = AURAL_OUT_EMBEDDINGS, .dtype = AURAL_DTYPE_F32};
  const char *vocabulary = NULL, *boost = NULL, *from = NULL, *dtype = NULL;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "s:o:qh", opts, NULL)) != -1) {
    switch (c) {
    case 's': job.sock_path = optarg; break;
    case 'C': job.cluster_url = optarg; break;
    case 'P': job.password_file = optarg; break;
    case 'F': from = optarg; break;
    case 'S': job.stream = optarg; break;
    case 'A': job.all = 1; break;
    case 'O':
      if (parse_outputs(optarg, &job.outputs) < 0) {
        fprintf(stderr, "aural sub: --output %s: expected embeddings, logits, "
                        "text or words, or several of them separated by "
                        "commas\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'D':
      dtype = optarg;
      if (strcmp(optarg, "f32") == 0) {
        job.dtype = AURAL_DTYPE_F32;
      } else if (strcmp(optarg, "f16") == 0) {
        job.dtype = AURAL_DTYPE_F16;
      } else {
        fprintf(stderr, "aural sub: --dtype %s: expected f32 or f16\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'o': job.out_path = outfile_path(optarg); break;
    case 'U': job.until_end = 1; break;
    case 'R': job.reconnect = 1; break;
    case 'J': job.json = 1; break;
    case 'q': job.quiet = 1; break;
    case 'V': vocabulary = optarg; break;
    case 'X': boost = optarg; break;
    case 'h': usage(stdout); return EXIT_OK;
    default:
      fprintf(stderr, "(see 'aural sub --help')\n");
      return EXIT_USAGE;
    }
  }
  const char *bad = NULL;
  char why[600];
  if (vocabulary != NULL &&
      words_request(vocabulary, boost, &job.vocabulary, why, sizeof why) < 0)
    bad = why;
  else if (boost != NULL && vocabulary == NULL)
    bad = "--boost needs --vocabulary";
  else if (vocabulary != NULL && !(job.outputs & AURAL_OUT_WORDS))
    bad = "--vocabulary needs --output words";
  else if (vocabulary != NULL && job.stream == NULL)
    bad = "--vocabulary needs --stream NAME (custom words are decoded for "
          "one stream)";
  else if (optind != argc)
    bad = "unexpected argument (the stream is given with --stream NAME)";
  else if (job.stream != NULL && job.all)
    bad = "--stream and --all exclude each other";
  else if (job.reconnect && (job.out_path != NULL || job.until_end))
    bad = "--reconnect follows streams across restarts of aurald; -o and "
          "--until-end are about one stream's end: not with it";
  else if (job.reconnect && job.cluster_url != NULL)
    bad = "--reconnect is for aurald's socket; --cluster reads Redis, which "
          "keeps the chunks (--from resumes)";
  else if (dtype != NULL &&
           !(job.outputs & (AURAL_OUT_EMBEDDINGS | AURAL_OUT_LOGITS)))
    bad = "--dtype is how embeddings and logits travel; --output asks for "
          "neither";
  else if (job.stream != NULL && !aural_proto_valid_name(job.stream))
    bad = "--stream: a stream name is 1-64 printable ASCII characters "
          "without spaces, '/' or '\\'";
  if (bad == NULL)
    bad = check_cluster(&job, from, dtype != NULL, vocabulary != NULL, why,
                        sizeof why);
  if (bad == NULL && job.out_path != NULL) {
    uint32_t arrays = job.outputs & (AURAL_OUT_EMBEDDINGS | AURAL_OUT_LOGITS);
    if (arrays == 0 && job.outputs == AURAL_OUT_WORDS)
      arrays = AURAL_OUT_WORDS; /* the transcript */
    else if (arrays == 0)
      bad = "-o writes embeddings or logits, or with --output words alone "
            "the transcript; add one to --output";
    else if (arrays == (AURAL_OUT_EMBEDDINGS | AURAL_OUT_LOGITS))
      bad = "-o writes one array; --output may hold embeddings or logits, "
            "not both";
    job.out_kind = arrays;
    job.until_end = 1;
  }
  if (bad != NULL) {
    fprintf(stderr, "aural sub: %s\n(see 'aural sub --help')\n", bad);
    return EXIT_USAGE;
  }
  if (job.stream == NULL) job.all = 1;
  /* With -o FILE, stdout holds reports alone. */
  if (job.out_path != NULL && strcmp(job.out_path, "/dev/stdout") != 0 &&
      cli_stdout_reports_only() < 0) {
    fprintf(stderr, "aural sub: /dev/null: %s\n", strerror(errno));
    return EXIT_FAIL;
  }
  job.tty = isatty(STDOUT_FILENO);

  /* The first Ctrl-C (or SIGTERM) stops where it can and writes no -o.
   * The second ends the process at once: a write to a -o FIFO or device
   * whose reader does not read is made again when a signal interrupts
   * it, and would hold the command for as long. */
  cli_catch_stop(on_signal);

  /* A bad -o is told now, not after a whole stream was received. */
  int rc = EXIT_OK;
  if (job.out_path != NULL &&
      outfile_open(&job.of, "aural sub", job.out_path, NULL, job.err,
                   sizeof job.err) < 0)
    rc = EXIT_FAIL;
  /* With the result on standard output (-o -), what the command says
   * goes to standard error, or it would be mixed into the .npy: the
   * outfile has its own descriptor, so fd 1 can be stderr from here on. */
  if (rc == EXIT_OK && job.of.is_stdout) {
    fflush(stdout);
    if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      snprintf(job.err, sizeof job.err, "standard output: %s",
               strerror(errno));
      rc = EXIT_FAIL;
    }
    job.tty = isatty(STDOUT_FILENO);
  }
  if (rc == EXIT_OK)
    rc = job.cluster_url != NULL ? sub_cluster_run(&job)
         : job.reconnect         ? run_reconnecting(&job)
                                 : run(&job);
  if (sub_interrupted) rc = EXIT_SIGNAL;
  sub_clear_partial(&job);
  if (rc != EXIT_OK) {
    if (rc == EXIT_SIGNAL)
      fprintf(stderr, "aural sub: interrupted%s%s%s\n",
              job.out_path ? "; " : "", job.out_path ? job.out_path : "",
              job.out_path ? " not written" : "");
    else if (job.err[0] != '\0')
      fprintf(stderr, "aural sub: %s\n", job.err);
    if (rc == EXIT_DISCONNECTED && job.out_path != NULL && !job.written)
      fprintf(stderr, "aural sub: %s not written\n", job.out_path);
  }
  if (job.n_gaps > 0)
    fprintf(stderr, "aural sub: %llu gap%s, %llu chunk%s lost in all\n",
            (unsigned long long)job.n_gaps, job.n_gaps == 1 ? "" : "s",
            (unsigned long long)job.n_lost, job.n_lost == 1 ? "" : "s");
  outfile_discard(&job.of);
  free(job.caption.p);
  for (size_t i = 0; i < job.n_streams; i++) {
    free(job.streams[i].text.p);
    free(job.streams[i].words.p);
  }
  free(job.streams);
  free(job.row_buf);
  free(job.line);
  client_close(job.cl);
  return rc;
}
