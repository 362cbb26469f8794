/*
 * Compute workers: frontend, encoder and chunking for streams with work.
 *
 * A worker takes a share of the ready streams (all of them when it is the
 * only idle one, about 1/n_workers of them otherwise), turns each one's
 * pending audio into features, and encodes every stream's new frames in
 * one aural_encoder_forward_batch() call, so each weight matrix is read
 * once per layer for all of them while attention stays per stream.
 *
 * Batch size against latency. A chunk is sent when its last frame is
 * computed, so computing a stream's frames earlier than that buys no
 * latency; what matters is that the frames still pending when the chunk's
 * last audio arrives are few, and that the work is done in pieces large
 * enough to run near the machine's peak: many rows per round for the
 * matrix products (one frame per stream per round runs about five times
 * slower per frame than 25), and many rows per stream for its attention
 * and the rest of each layer's work per stream. So a worker waits until
 * one of these holds for the streams that have input:
 *   - a stream is urgent: its input completes its current chunk (or it
 *     has ended, or it is a file read as fast as possible);
 *   - the ready streams hold BATCH_ROWS frames between them;
 *   - the oldest input has waited BATCH_WAIT_S.
 * Then it takes the urgent streams and, while the round holds fewer than
 * ROUND_ROWS frames, others in queue order: the round that answers an
 * urgent stream also carries other streams' frames, but stays short.
 * Under load (workers computing more than half of the time over the last
 * second) BATCH_ROWS_BUSY and ROUND_ROWS_BUSY apply instead, and a stream
 * that is not urgent counts for neither rule nor joins a round until it
 * brings STREAM_ROWS_BUSY frames (or its waiting input fills half of its
 * flow-control window, stream_input_half_full(): a connection past the
 * window is not read, and a microphone overruns). Otherwise, at 140
 * streams pushed in 20 ms blocks on two cores, a round held about 42
 * streams of 3 frames each (README.md, Serving, has what that cost). A
 * stream that does bring them has waited longer than BATCH_WAIT_S, so it
 * makes a round due at once, as an urgent one does; rounds are then as
 * large as what arrived while the last ones ran. When the machine is
 * mostly idle nothing waits for more than BATCH_WAIT_S.
 * A round takes at most ROUND_S of audio per stream, so a file read as
 * fast as possible cannot hold a worker for long, and streams go back to
 * the end of the ready queue after each round: nobody starves.
 * A client's stream fed faster than real time (a recording pushed as fast
 * as it is taken) has a complete chunk at every round, but no listener
 * waits for it as for a live one: once its input is more than AHEAD_S
 * ahead of the clock it is not urgent, it joins only rounds that answer
 * no urgent stream, and a round takes at most AHEAD_ROWS frames of such
 * streams. Counted urgent, 16 of them pushed by one client made every
 * round hold 300 to 450 of their frames, and five live streams beside
 * them waited for those rounds: their chunk latency p99 went from 25 ms
 * to 142 ms (two shared cores, the bundled model). Now a live stream's
 * chunk waits for at most the round in progress, and streams fed faster
 * than real time use what the live ones leave of the workers.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

#define ROUND_S 0.5
#define ROUND_MAX_VALUES (1u << 18) /* floats of input per stream per round */
#define MAX_PER_ROUND 512           /* streams one worker takes at once */
#define BATCH_ROWS 64               /* pending frames worth a round */
#define ROUND_ROWS 128              /* non-urgent frames one round takes */
#define BATCH_WAIT_S 0.1            /* longest input waits (not under load) */
#define BATCH_ROWS_BUSY 256         /* the same under load */
#define ROUND_ROWS_BUSY 384
#define BUSY_LOAD 0.5               /* worker time share that is load */
#define STREAM_ROWS_BUSY 32         /* least frames a non-urgent stream
                                       brings to a round under load */
#define AHEAD_S 1.0                 /* input this far ahead of the clock:
                                       fed faster than real time */
#define AHEAD_ROWS 128              /* frames of such streams a round
                                       takes (one more stream's past it) */

struct worker {
  server *srv;
  pthread_t thread;
  int index;
  aural_batch *batch;
  float *pcm;                       /* (ROUND_MAX_VALUES) input scratch */
  stream *taken[MAX_PER_ROUND];
  bool ahead[MAX_PER_ROUND];        /* taken[i] was fed faster than real
                                       time when taken */
  int n_urgent;                     /* the first n_urgent taken were */
  aural_stream *batch_streams[MAX_PER_ROUND]; /* this round's to compute */
  /* One pull's words (server.lexicon set): what aural_stream_pull may
   * write; a chunk keeps a copy of the few it has. */
  aural_word *words;   /* (server.words_max) */
  uint32_t *segments;  /* (server.segments_max) */
};

static void push_event(server *srv, chunk_out *co) {
  co->next = NULL;
  if (srv->done_tail) srv->done_tail->next = co;
  else srv->done_head = co;
  srv->done_tail = co;
}

/* Ends a stream's pipeline at once (an error): what it computed before
 * still comes out, and it is computed no more. */
static void abort_stream(stream *s) {
  if (s->work.aborted) return;
  s->work.aborted = true;
  aural_stream_stats st;
  aural_stream_get_stats(s->work.as, &st);
  if (!st.ended) aural_stream_abort(s->work.as);
}

static void fail_stream(stream *s, const char *what, int rc) {
  pthread_mutex_lock(&s->srv->mu);
  s->sched.input_done = true;
  s->sched.reason = END_ERROR;
  snprintf(s->sched.message, sizeof s->sched.message, "%s: %s", what,
           aural_strerror(rc));
  pthread_mutex_unlock(&s->srv->mu);
  log_warn("stream %u \"%s\": %s: %s", s->id, s->name, what,
           aural_strerror(rc));
}

/* Takes this round's input of one stream and runs the frontend on it.
 * Returns true when the stream's input is now exhausted for good. */
static bool take_input(worker *w, stream *s, int64_t *ready_us,
                       int64_t *capture_us) {
  server *srv = w->srv;
  size_t ch = (size_t)s->channels;
  size_t max_frames = (size_t)(s->rate_hz * ROUND_S);
  if (max_frames > ROUND_MAX_VALUES / ch) max_frames = ROUND_MAX_VALUES / ch;
  if (max_frames == 0) max_frames = 1;
  /* No more than the stream's features have room for this round. */
  size_t room = aural_stream_input_room(s->work.as);
  if (max_frames > room) max_frames = room;
  size_t n = 0;
  bool done = false;
  aural_err err = {0};

  if (s->source == SRC_FILE) {
    size_t want = max_frames;
    if (s->realtime) {
      double allowed = (aurald_mono_s() - s->t0_mono) * s->rate_hz;
      double left = allowed - (double)s->work.read_frames;
      want = left <= 0 ? 0 : left < (double)want ? (size_t)left : want;
    }
    pthread_mutex_lock(&srv->mu);
    done = s->sched.input_done; /* shutdown */
    pthread_mutex_unlock(&srv->mu);
    if (!done && want > 0) {
      int rc = aural_audiofile_read(s->work.af, w->pcm, want, &n, &err);
      if (rc < 0) {
        pthread_mutex_lock(&srv->mu);
        s->sched.input_done = true;
        s->sched.reason = END_ERROR;
        snprintf(s->sched.message, sizeof s->sched.message, "%s", err.msg);
        pthread_mutex_unlock(&srv->mu);
        log_warn("stream %u \"%s\": %s", s->id, s->name, err.msg);
        abort_stream(s);
        return true;
      }
      if (n == 0) {
        pthread_mutex_lock(&srv->mu);
        s->sched.input_done = true;
        s->sched.reason = END_EOF;
        pthread_mutex_unlock(&srv->mu);
        done = true;
      }
      s->work.read_frames += n;
      if (!done && s->file_frames >= 0 &&
          s->work.read_frames >= (uint64_t)s->file_frames) {
        /* Its declared length is reached: end now rather than after one
         * more (paced) read finds nothing, so the final chunk is not late. */
        pthread_mutex_lock(&srv->mu);
        s->sched.input_done = true;
        s->sched.reason = END_EOF;
        pthread_mutex_unlock(&srv->mu);
        done = true;
      }
      /* A paced file's audio is available once its pace reaches it: that
       * moment on the monotonic clock, given in the protocol's clock as
       * how long ago it was. Counted from the stream's start_us instead,
       * every later chunk's latency was off by any step of the system
       * clock since (an hour for the rest of the stream, after NTP or a
       * resumed VM set it). */
      int64_t t = aurald_now_us();
      if (s->realtime) {
        double due = s->t0_mono + (double)s->work.read_frames / s->rate_hz;
        t -= (int64_t)((aurald_mono_s() - due) * 1e6);
      }
      *ready_us = t;
      if (*capture_us == 0) *capture_us = t;
    }
  } else {
    /* Counted out under the lock, copied out of the ring without it. */
    pthread_mutex_lock(&srv->mu);
    n = s->sched.in_frames < max_frames ? s->sched.in_frames : max_frames;
    s->sched.in_frames -= n;
    if (n > 0) {
      *ready_us = s->sched.in_last_us;
      if (*capture_us == 0) *capture_us = s->sched.in_first_us;
    }
    done = s->sched.input_done && s->sched.in_frames == 0;
    if (s->sched.in_frames == 0) s->sched.pending_since = 0;
    pthread_mutex_unlock(&srv->mu);
    stream_take(s, w->pcm, n);
  }
  if (n > 0) {
    size_t taken = 0;
    int rc = aural_stream_push(s->work.as, w->pcm, n, &taken);
    if (rc == 0 && taken < n) rc = AURAL_ESTATE; /* room was checked */
    if (rc < 0) {
      fail_stream(s, "frontend", rc);
      abort_stream(s);
      return true;
    }
  }
  if (done) {
    aural_stream_stats st;
    aural_stream_get_stats(s->work.as, &st);
    /* The frontend flushes: a failure there (the resampler's) is the
     * stream's alone, as a push's is. */
    int rc = st.ended ? 0 : aural_stream_end(s->work.as);
    if (rc < 0) {
      fail_stream(s, "frontend", rc);
      abort_stream(s);
    }
  }
  return done;
}

static chunk_out *new_chunk(server *srv, stream *s, size_t n) {
  size_t d = (size_t)srv->mc->d_model, v = (size_t)srv->mc->vocab_size;
  size_t text_cap = v > 0 ? n * (srv->max_token_bytes + 1) + 1 : 0;
  size_t bytes = sizeof(chunk_out) + n * (d + v) * sizeof(float) + text_cap;
  chunk_out *co = calloc(1, bytes);
  if (co == NULL) return NULL;
  co->s = s;
  co->emb = (float *)(co + 1);
  co->logits = v > 0 ? co->emb + n * d : NULL;
  co->text = v > 0 ? (char *)(co->emb + n * (d + v)) : NULL;
  co->text_cap = text_cap;
  return co;
}

/* The words of chunk ch (pulled into w's scratch) into a block of co's
 * own. Returns 0, or -1 out of memory. */
static int keep_words(chunk_out *co, const aural_chunk *ch) {
  size_t n = ch->n_final_words + ch->n_partial_words;
  co->n_segments = ch->n_segments;
  co->n_final_words = ch->n_final_words;
  co->n_partial_words = ch->n_partial_words;
  if (n == 0 && ch->n_segments == 0) return 0;
  co->words = malloc(n * sizeof *co->words +
                     ch->n_segments * sizeof *co->segments);
  if (co->words == NULL) return -1;
  memcpy(co->words, ch->words, n * sizeof *co->words);
  co->segments = (uint32_t *)(co->words + n);
  memcpy(co->segments, ch->segments, ch->n_segments * sizeof *co->segments);
  return 0;
}

/* Pulls every chunk the stream has completed into events (newest first).
 * A chunk whose first frame was computed this round (frames from
 * computed_before on) has this round's capture time; one begun in an
 * earlier round keeps that round's. */
static void pull_chunks(worker *w, stream *s, uint64_t computed_before,
                        int64_t ready_us, int64_t capture_us,
                        chunk_out **events) {
  server *srv = w->srv;
  size_t n;
  bool final;
  while (aural_stream_ready(s->work.as, &n, &final) == 1) {
    chunk_out *co = new_chunk(srv, s, n);
    aural_chunk ch = {.max_frames = n};
    if (co != NULL) {
      ch.emb = co->emb;
      ch.logits = co->logits;
      ch.text = co->text;
      ch.text_cap = co->text_cap;
    }
    if (w->words != NULL) {
      ch.words = w->words;
      ch.words_cap = srv->words_max;
      ch.segments = w->segments;
      ch.segments_cap = srv->segments_max;
    }
    if (aural_stream_pull(s->work.as, &ch) != 1) {
      free(co);
      break; /* cannot happen: the buffers fit the chunk ready */
    }
    if (co != NULL && keep_words(co, &ch) < 0) {
      free(co);
      co = NULL;
    }
    if (co == NULL) {
      log_error("stream %u: out of memory for a chunk; it is lost", s->id);
      continue;
    }
    int64_t capture = ch.first_frame >= computed_before
                          ? capture_us
                          : s->work.open_capture_us;
    co->text_len = ch.text_len;
    co->h.seq = ch.seq;
    co->h.first_frame = ch.first_frame;
    co->h.n_frames = (uint32_t)ch.n_frames;
    co->h.flags = ch.final ? AURAL_CHUNK_FINAL : 0;
    co->h.start_us = s->start_us;
    co->h.capture_us = capture;
    co->h.ready_us = ready_us;
    co->h.d_model = (uint32_t)srv->mc->d_model;
    co->h.vocab_size = (uint32_t)srv->mc->vocab_size;
    co->next = *events;
    *events = co;
  }
  /* The chunk being filled now: begun this round, or earlier. */
  aural_stream_stats st;
  aural_stream_get_stats(s->work.as, &st);
  uint64_t C = srv->chunk_frames, done = st.first_frame + st.n_encoded_frames;
  if (done % C != 0 && done / C * C >= computed_before)
    s->work.open_capture_us = capture_us;
  s->work.next_frame = st.n_encoded_frames;
}

/* Fault injection for the tests: AURALD_FAIL_ENCODER_CALL=N makes the
 * N-th encoder call (counted over all workers, from 1) fail as if out of
 * memory, to check that only the streams of that round end, with an
 * error, and the daemon goes on. */
static bool inject_failure(server *srv) {
  return srv->fail_call > 0 &&
         atomic_fetch_add(&srv->n_calls, 1) + 1 == srv->fail_call;
}

/* With server.mu held: adds a round's compute time to the load window
 * and, once the window spans a second, makes it the current load. */
static void update_load(server *srv, double busy_s) {
  double now = aurald_mono_s();
  if (srv->load_since == 0) srv->load_since = now - busy_s;
  srv->load_busy_s += busy_s;
  double span = now - srv->load_since;
  if (span >= 1.0) {
    srv->load = srv->assume_load > 0
                    ? srv->assume_load
                    : srv->load_busy_s / (span * (double)srv->n_workers);
    srv->load_since = now;
    srv->load_busy_s = 0;
  }
}

static void run_round(worker *w, int n_taken) {
  server *srv = w->srv;
  int64_t ready[MAX_PER_ROUND], capture[MAX_PER_ROUND];
  uint64_t before[MAX_PER_ROUND];
  size_t pending[MAX_PER_ROUND];
  bool ending[MAX_PER_ROUND], finished[MAX_PER_ROUND];
  double t0 = aurald_mono_s();
  size_t n_batch = 0, total_rows = 0;
  for (int i = 0; i < n_taken; i++) {
    stream *s = w->taken[i];
    ready[i] = 0;
    capture[i] = 0;
    ending[i] = take_input(w, s, &ready[i], &capture[i]);
    aural_stream_stats st;
    aural_stream_get_stats(s->work.as, &st);
    before[i] = st.first_frame + st.n_encoded_frames;
    pending[i] = st.n_pending_frames;
    total_rows += pending[i];
    /* An aborted stream is not computed: what it has comes out as it is. */
    if (!s->work.aborted && (pending[i] > 0 || st.ended))
      w->batch_streams[n_batch++] = s->work.as;
  }
  if (n_batch > 0) {
    int rc = inject_failure(srv)
                 ? AURAL_ENOMEM
                 : aural_stream_compute_batch(w->batch, w->batch_streams,
                                              n_batch);
    if (rc < 0) {
      /* The batch is all or nothing: every stream in it ends, with what
       * was computed before this round. */
      for (int i = 0; i < n_taken; i++) {
        stream *s = w->taken[i];
        aural_stream_stats st;
        aural_stream_get_stats(s->work.as, &st);
        if (s->work.aborted || (pending[i] == 0 && !st.ended)) continue;
        fail_stream(s, "encoder", rc);
        abort_stream(s);
        ending[i] = true;
      }
    } else {
      /* A stream whose outputs overflowed failed alone (aural/stream.h):
       * it ends with the frames before, the others of the round go on. */
      for (int i = 0; i < n_taken; i++) {
        stream *s = w->taken[i];
        aural_stream_stats st;
        aural_stream_get_stats(s->work.as, &st);
        if (s->work.aborted || st.error == 0) continue;
        char what[64];
        snprintf(what, sizeof what, "encoder, frame %llu",
                 (unsigned long long)(st.first_frame + st.n_encoded_frames));
        fail_stream(s, what, st.error);
        abort_stream(s);
        ending[i] = true;
      }
    }
  }
  double dt = aurald_mono_s() - t0;
  if (aurald_log_level >= LOG_DEBUG) {
    size_t ahead_rows = 0;
    for (int i = 0; i < n_taken; i++)
      if (w->ahead[i]) ahead_rows += pending[i];
    log_debug("worker %d: round of %d streams (%d urgent), %zu frames (%zu "
              "of streams fed faster than real time), %.1f ms",
              w->index, n_taken, w->n_urgent, total_rows, ahead_rows,
              dt * 1e3);
  }

  chunk_out *events[MAX_PER_ROUND];
  for (int i = 0; i < n_taken; i++) {
    stream *s = w->taken[i];
    events[i] = NULL;
    if (ready[i] == 0) ready[i] = aurald_now_us();
    pull_chunks(w, s, before[i], ready[i], capture[i], &events[i]);
    /* Compute time is shared out by rows. */
    if (total_rows > 0)
      s->work.compute_s += dt * (double)pending[i] / (double)total_rows;
    /* Computed this round (a failed round aborted every stream in it). */
    if (pending[i] > 0 && !s->work.aborted) s->work.rounds++;
    aural_stream_stats st;
    aural_stream_get_stats(s->work.as, &st);
    finished[i] = ending[i] && st.done;
  }

  pthread_mutex_lock(&srv->mu);
  update_load(srv, dt);
  for (int i = 0; i < n_taken; i++) {
    stream *s = w->taken[i];
    /* events[i] is newest first. */
    chunk_out *rev = NULL;
    while (events[i] != NULL) {
      chunk_out *co = events[i];
      events[i] = co->next;
      co->next = rev;
      rev = co;
    }
    while (rev != NULL) {
      chunk_out *co = rev;
      rev = co->next;
      push_event(srv, co);
    }
    aural_stream_stats st;
    aural_stream_get_stats(s->work.as, &st);
    s->sched.stat_frames = s->work.next_frame;
    /* A file has read what it may. */
    if (s->source == SRC_FILE) s->sched.pending_since = 0;
    s->sched.stat_compute_s = s->work.compute_s;
    s->sched.stat_rounds = s->work.rounds;
    s->sched.stat_audio_s = (double)st.n_input_frames / s->rate_hz;
    s->sched.busy = false;
    if (finished[i]) {
      s->sched.ended = true;
      /* The end event lives in the stream: handing it back cannot fail. */
      s->work.end_event.s = s;
      s->work.end_event.is_end = true;
      push_event(srv, &s->work.end_event);
    } else if (s->sched.input_done || s->sched.in_frames > 0 || ending[i] ||
               (s->source == SRC_FILE && !s->realtime)) {
      server_mark_ready(srv, s);
    }
  }
  pthread_mutex_unlock(&srv->mu);
  uv_async_send(&srv->wake);
}

/* Workers run a few nice levels below the loop thread: on a machine whose
 * cores are all computing, the loop (which uses little CPU but must answer
 * within milliseconds) still gets a core as soon as it wakes. */
#define WORKER_NICE 5

/* Frames a stream of in_total input frames at rate_hz yields, by the
 * model's frontend (exactly at its own rate; resampled input lags by the
 * resampler's delay). */
static uint64_t frames_for_input(const server *srv, uint64_t in_total,
                                 double rate_hz) {
  const aural_fbank_opts *fb = &srv->mc->fbank;
  double n = (double)in_total * fb->sample_rate_hz / rate_hz;
  return aural_fbank_n_frames(fb, n >= (double)SIZE_MAX ? SIZE_MAX
                                                       : (size_t)n);
}

/* With server.mu held: whether a client feeds s faster than real time,
 * more than AHEAD_S of its input ahead of the clock, and it goes on (at
 * its end its last chunk is urgent like any other). */
static bool ahead(const stream *s, double now) {
  return s->source == SRC_CLIENT && !s->sched.input_done &&
         s->sched.input_due - now > AHEAD_S;
}

/* With server.mu held. */
static bool urgent(const server *srv, const stream *s, double now) {
  if (s->sched.input_done || (s->source == SRC_FILE && !s->realtime))
    return true;
  if (ahead(s, now)) return false;
  /* A paced file whose last sample is due: its final chunk is complete. */
  if (s->source == SRC_FILE && s->file_frames >= 0 &&
      s->sched.in_total >= (uint64_t)s->file_frames)
    return true;
  uint64_t C = srv->chunk_frames;
  return frames_for_input(srv, s->sched.in_total, s->rate_hz) >=
         (s->sched.stat_frames / C + 1) * C;
}

/* With server.mu held: frames of s whose input is in but not computed. */
static uint64_t pending_rows(const server *srv, const stream *s) {
  uint64_t f = frames_for_input(srv, s->sched.in_total, s->rate_hz);
  return f > s->sched.stat_frames ? f - s->sched.stat_frames : 0;
}

/* With server.mu held: whether s, unless it is urgent, waits for more
 * frames. Under load it waits until it brings STREAM_ROWS_BUSY: its
 * frames are due only when its chunk completes, and a stream computed a
 * few frames at a time costs more per frame (attention, and everything
 * done once per stream and layer). */
static bool too_few_rows(const server *srv, const stream *s, bool busy) {
  return busy && pending_rows(srv, s) < STREAM_ROWS_BUSY &&
         !stream_input_half_full(s);
}

/* With server.mu held: whether a round is worth starting now; if not,
 * *wait_s is how long until it will be, unless more input comes. */
static bool round_due(server *srv, double *wait_s) {
  double now = aurald_mono_s(), oldest = now;
  update_load(srv, 0.0); /* the load falls while no round runs */
  bool busy = srv->load > BUSY_LOAD;
  uint64_t rows = 0;
  for (stream *s = srv->ready_head; s != NULL; s = s->sched.ready_next) {
    if (urgent(srv, s, now)) return true;
    if (too_few_rows(srv, s, busy)) continue;
    rows += pending_rows(srv, s);
    if (s->sched.pending_since > 0 && s->sched.pending_since < oldest)
      oldest = s->sched.pending_since;
  }
  if (rows >= (busy ? BATCH_ROWS_BUSY : BATCH_ROWS) ||
      now - oldest >= BATCH_WAIT_S)
    return true;
  *wait_s = oldest + BATCH_WAIT_S - now;
  return false;
}

/* Frames ROUND_S of a stream's audio makes, at most. */
static uint64_t round_rows(const server *srv) {
  return (uint64_t)(ROUND_S * 1000.0 / srv->mc->fbank.frame_shift_ms) + 1;
}

/* With server.mu held: moves this worker's streams for one round from the
 * ready queue to w->taken. Urgent streams first (their chunks are waiting),
 * then others in queue order while the round holds fewer than ROUND_ROWS
 * frames, so that the round, and with it the urgent streams' latency,
 * stays short; streams fed faster than real time only in a round without
 * urgent ones, AHEAD_ROWS of their frames at most. At most a 1/n_workers
 * share of the queue, so that an idle worker finds work too. Returns the
 * count. */
static int take_streams(server *srv, worker *w) {
  int share = (srv->n_ready + srv->n_workers - 1) / srv->n_workers;
  if (share < 1) share = 1;
  if (share > MAX_PER_ROUND) share = MAX_PER_ROUND;
  int n = 0;
  bool busy = srv->load > BUSY_LOAD;
  double now = aurald_mono_s();
  uint64_t rows = 0, max_rows = busy ? ROUND_ROWS_BUSY : ROUND_ROWS;
  uint64_t ahead_rows = 0;
  int n_urgent = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) n_urgent = n;
    stream **pp = &srv->ready_head, *prev = NULL;
    while (*pp != NULL && n < share) {
      stream *s = *pp;
      if (pass == 1 && rows >= max_rows) break;
      bool is_ahead = ahead(s, now);
      if (pass == 0 ? !urgent(srv, s, now)
                    : (too_few_rows(srv, s, busy) && !urgent(srv, s, now)) ||
                          (is_ahead &&
                           (n_urgent > 0 || ahead_rows >= AHEAD_ROWS))) {
        prev = s;
        pp = &s->sched.ready_next;
        continue;
      }
      *pp = s->sched.ready_next;
      if (srv->ready_tail == s) srv->ready_tail = prev;
      srv->n_ready--;
      s->sched.queued = false;
      s->sched.busy = true;
      /* What the round takes of it: at most ROUND_S of its audio. */
      uint64_t r = pending_rows(srv, s), most = round_rows(srv);
      if (r > most) r = most;
      rows += r;
      if (is_ahead) ahead_rows += r;
      w->ahead[n] = is_ahead;
      w->taken[n++] = s;
    }
  }
  w->n_urgent = n_urgent;
  return n;
}

static void timed_wait(server *srv, double wait_s) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  double t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + wait_s;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  server *srv = w->srv;
  if (setpriority(PRIO_PROCESS, (id_t)gettid(), WORKER_NICE) < 0)
    log_debug("worker %d: cannot lower its priority", w->index);
  pthread_mutex_lock(&srv->mu);
  for (;;) {
    while (srv->ready_head == NULL && !srv->quit_workers)
      pthread_cond_wait(&srv->cv, &srv->mu);
    if (srv->quit_workers) break;
    double wait_s;
    int n;
    if (!round_due(srv, &wait_s)) {
      timed_wait(srv, wait_s);
      continue;
    }
    n = take_streams(srv, w);
    pthread_mutex_unlock(&srv->mu);
    run_round(w, n);
    pthread_mutex_lock(&srv->mu);
  }
  pthread_mutex_unlock(&srv->mu);
  return NULL;
}

int workers_start(server *srv, int n, char *why, size_t why_len) {
  const char *fail = getenv("AURALD_FAIL_ENCODER_CALL");
  if (fail != NULL) srv->fail_call = strtoull(fail, NULL, 10);
  /* Test hook: AURALD_ASSUME_LOAD=X (0 < X <= 1) makes the scheduler take
   * the workers' load for X from the start, so that a test can see what
   * it does under load without loading the machine. */
  const char *load = getenv("AURALD_ASSUME_LOAD");
  if (load != NULL) {
    double x = strtod(load, NULL);
    if (x > 0 && x <= 1) srv->assume_load = srv->load = x;
  }
  srv->workers = calloc((size_t)n, sizeof *srv->workers);
  if (srv->workers == NULL) {
    snprintf(why, why_len, "out of memory for %d workers", n);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    worker *w = &srv->workers[i];
    w->srv = srv;
    w->index = i;
    aural_err err = {0};
    w->pcm = malloc(ROUND_MAX_VALUES * sizeof(float));
    if (srv->words_max > 0) {
      w->words = malloc(srv->words_max * sizeof *w->words);
      w->segments = malloc(srv->segments_max * sizeof *w->segments);
    }
    if (w->pcm == NULL ||
        (srv->words_max > 0 && (w->words == NULL || w->segments == NULL)) ||
        aural_batch_create(srv->model, AURALD_BATCH_ROWS, &w->batch, &err) < 0 ||
        pthread_create(&w->thread, NULL, worker_main, w) != 0) {
      snprintf(why, why_len, "cannot start worker %d: %s", i,
               err.msg[0] ? err.msg : "out of memory or threads");
      free(w->pcm);
      free(w->words);
      free(w->segments);
      aural_batch_destroy(w->batch);
      w->pcm = NULL;
      w->batch = NULL;
      srv->n_workers = i;
      workers_stop(srv);
      return -1;
    }
    srv->n_workers = i + 1;
  }
  return 0;
}

void workers_stop(server *srv) {
  pthread_mutex_lock(&srv->mu);
  srv->quit_workers = true;
  pthread_cond_broadcast(&srv->cv);
  pthread_mutex_unlock(&srv->mu);
  for (int i = 0; i < srv->n_workers; i++) {
    worker *w = &srv->workers[i];
    pthread_join(w->thread, NULL);
    aural_batch_destroy(w->batch);
    free(w->pcm);
    free(w->words);
    free(w->segments);
  }
  free(srv->workers);
  srv->workers = NULL;
  srv->n_workers = 0;
}
