/*
 * aural encode: an audio file in, a .npy of per-frame outputs out.
 *
 * The output appears only when everything succeeded, through outfile.h:
 * rows are streamed to a file without a name, which replaces OUT at the
 * end (or is copied into OUT when that is a device or a FIFO) and is
 * dropped on any failure or interruption.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <dirent.h>
#include <getopt.h>
#include <pthread.h>
#include <strings.h>
#include <sys/stat.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <aural.h>

#include "cli.h"
#include "npy.h"
#include "outfile.h"
#include "words.h"

#define READ_FRAMES 4096
/* How long the open of a FIFO input may wait before the command says that
 * it is waiting for a writer. */
#define FIFO_NOTICE_MS 250

static volatile sig_atomic_t interrupted;
/* The first SIGINT or SIGTERM asks the work to stop; either one after it
 * ends the process (cli_catch_stop). */
static void on_signal(int sig) {
  interrupted = sig;
  cli_stop_now_on_next();
}

/* SIGUSR1, which the batch's main thread sends its workers after a
 * Ctrl-C: it only interrupts what a worker waits in (the open of a FIFO
 * without a writer, a read of one), which then sees `interrupted`. */
static void on_wake(int sig) { (void)sig; }

static void usage(FILE *to) {
  fprintf(to,
          "Usage: aural encode [OPTIONS] -o OUT.npy INPUT\n"
          "       aural encode [OPTIONS] [-j N] -o OUT_DIR INPUT|DIR...\n"
          "\n"
          "Reads INPUT (WAV, FLAC, Ogg/Vorbis, AIFF or anything else\n"
          "libsndfile opens; any sample rate and channel count; - is\n"
          "standard input, read whole, up to 1 GiB), converts it\n"
          "to the model's rate and runs the frontend and the encoder over it,\n"
          "as a stream. Writes one row per 10 ms frame to OUT.npy as a\n"
          "float32 NumPy array [n_frames, dim].\n"
          "\n"
          "Options:\n"
          "  -m, --model PATH     model file (default: the bundled model,\n"
          "                       %s)\n"
          "  -o, --out PATH       output file; written only when the whole\n"
          "                       input was processed (optional for text\n"
          "                       and words: without it the result goes to\n"
          "                       stdout and every report to stderr):\n"
          "                       a regular file is replaced atomically (a\n"
          "                       symlink's target; not a read-only one),\n"
          "                       a device or FIFO is written into; never\n"
          "                       the input itself;\n"
          "                       - is stdout (reports then go to stderr)\n"
          "      --output KIND    what each row holds:\n"
          "                         embeddings  encoder output [n, d_model]\n"
          "                                     (default)\n"
          "                         logits      CTC head output before\n"
          "                                     log-softmax [n, vocab]\n"
          "                         features    log-mel fbank before CMVN\n"
          "                                     [n, num_mel_bins]\n"
          "                         text        greedy CTC transcript (tokens\n"
          "                                     separated by spaces), one\n"
          "                                     line per chunk as a report,\n"
          "                                     then the whole\n"
          "                         words       words from the CTC head with a\n"
          "                                     lexicon and language model\n"
          "                                     (beam search; a line per final\n"
          "                                     segment, then the transcript)\n"
          "      --chunk-frames N frames per encoder call (default 50); only\n"
          "                       changes how work is grouped, not results\n"
          "      --precision P    f32 (default: exact) or bf16 (opt-in and\n"
          "                       approximate: bfloat16 matrix products,\n"
          "                       faster only on CPUs with AVX512-BF16;\n"
          "                       README, \"Precision bf16\")\n"
          "      --show           print a coarse text picture of the result\n"
          "                       (embeddings, logits or features)\n"
          "  -q, --quiet          print no reports: only errors and the result\n"
          "  -j, --jobs N         with several inputs: files encoded at once\n"
          "                       (default: one per CPU it may run on)\n",
          cli_default_model());
  fprintf(to,
          "With --output words:\n"
          "      --lexicon PATH   pronunciations, plain or gzipped (default:\n"
          "                       beside the model, MODEL.lexicon.txt[.gz])\n"
          "      --lm PATH        n-gram model, ARPA or binary, plain or\n"
          "                       gzipped (default: MODEL.lm.bin[.gz],\n"
          "                       else MODEL.lm.arpa[.gz])\n"
          "      --format FMT     txt (the words, one line; default), json\n"
          "                       (segments, words with start and end seconds\n"
          "                       and confidence), srt or vtt (subtitles: a\n"
          "                       segment's words in cues of at most 84\n"
          "                       characters and 7 s)\n"
          "      --beam N         hypotheses kept per frame (default 64)\n"
          "      --lm-weight X    weight of the language model (default 0.8)\n"
          "      --word-penalty X score added per word (default -1)\n"
          "      --blank-penalty X  subtracted from the blank's log-\n"
          "                       posterior in the search (default 1.5)\n"
          "      --vocabulary W1,W2,...  custom words (names, terms) the\n"
          "                       lexicon lacks, pronounced by espeak-ng\n"
          "                       and favoured by --boost\n"
          "      --boost X        score added per custom word (default 7)\n"
          "      --g2p PATH       how espeak-ng's phonemes become the model's\n"
          "                       tokens (default: MODEL.g2p.txt)\n"
          "  -h, --help           show this help\n"
          "\n"
          "With several inputs, or a directory (its audio files, by\n"
          "extension), each INPUT goes to OUT_DIR/NAME.npy (.txt for text, the\n"
          "format's extension for words; OUT_DIR is made if its parent\n"
          "exists), on all cores; a progress bar shows on a terminal, and a summary\n"
          "line gives files, hours of audio, wall time and x real time. A\n"
          "file that fails is reported at the end; the others are written.\n"
          "So is an entry of a directory with an audio name that is no file\n"
          "to read (a link to nothing, a FIFO). Two inputs that would write\n"
          "one output (a.wav and a.flac) are refused before any work.\n"
          "\n"
          "Samples that are NaN or infinite make the input invalid: the\n"
          "command names the first one and writes nothing.\n"
          "\n"
          "Ctrl-C stops the work and writes nothing more; a second Ctrl-C\n"
          "ends the command at once (as while it waits on a FIFO).\n"
          "\n"
          "Exit status: 0 on success, 1 if the input or model could not be\n"
          "processed, 2 for a bad command line, 130 when interrupted (no\n"
          "partial output is written).\n");
}

typedef enum out_kind {
  OUT_EMBEDDINGS,
  OUT_LOGITS,
  OUT_FEATURES,
  OUT_TEXT,
  OUT_WORDS,
  N_KINDS
} out_kind;
static const char *const kind_names[] = {"embeddings", "logits", "features",
                                         "text", "words"};

/* How far one input of a batch has come, written by the worker that
 * encodes it and read by the progress line. */
typedef struct job_live {
  _Atomic int64_t read_us;   /* microseconds of audio read */
  _Atomic int32_t permille;  /* of the input read (1000 once it is done;
                                0 while its length is unknown) */
} job_live;

typedef struct encode_job {
  const char *in_path, *out_path, *model_path;
  const char *in_name;   /* in_path, or "standard input" for "-" */
  void *stdin_bytes;     /* INPUT "-": standard input, read whole */
  aural_precision precision; /* --precision */
  out_kind kind;
  int quiet, show;
  size_t chunk_frames;
  aural_model *model;
  aural_stream *stream;  /* frontend, encoder, chunks and text */
  aural_chunk ch;        /* the output buffers of one chunk */
  double frame_s;        /* seconds from one frame to the next */
  outfile of;            /* the output, until it is committed */
  FILE *said;            /* reports: stdout, or stderr when the result
                            goes to stdout (no -o, or -o /dev/stdout) */
  size_t n_rows, dim;    /* rows written, row width */
  int write_failed;
  float *rows;           /* (chunk_frames, dim) one chunk's rows */
  char *chunk_text;      /* one chunk's text (text_max_bytes) */
  char *text;            /* the whole transcript */
  size_t text_len, text_cap;
  float *kept;           /* (kept_max, dim) rows kept for --show: every
                            kept_stride-th row, row k being frame
                            k * kept_stride */
  size_t n_kept, kept_max, kept_stride;
  double t_start, t_progress;
  int64_t total_in, done_in; /* input frames, for progress (total_in
                                -1: unknown) */
  double in_rate_hz;         /* the input's rate, for progress */
  job_live *live;            /* batch mode: where the progress goes */
  int progress;              /* draw a progress line on stderr */
  int progress_shown;        /* ... and one is on the terminal now */
  int shared_model;          /* model belongs to the caller (batch mode) */
  char *errors;              /* batch mode: the error message goes here */
  double audio_s;            /* seconds of audio read */
  /* --output words: */
  const char *lexicon_path, *lm_path;
  const char *vocabulary, *g2p_path; /* --vocabulary, --g2p */
  const words_res *words;    /* the lexicon and LM (shared in batch mode) */
  words_res own_words;       /* ... loaded by this job */
  aural_decoder_config dcfg;
  words_format format;
  words_run wr;              /* the finals so far */
  aural_word *chunk_words;   /* one chunk's words (words_max) */
  uint32_t *segments;        /* its segments' word counts (segments_max) */
} encode_job;

#define ERROR_BYTES 600

/* Appends s to the transcript. */
static int text_append(encode_job *job, const char *s) {
  size_t n = strlen(s);
  if (job->text_len + n + 1 > job->text_cap) {
    size_t cap = (job->text_len + n + 1) * 2;
    char *p = realloc(job->text, cap);
    if (p == NULL) return AURAL_ENOMEM;
    job->text = p;
    job->text_cap = cap;
  }
  memcpy(job->text + job->text_len, s, n + 1);
  job->text_len += n;
  return 0;
}

/* Most values --show keeps (4 MiB), whatever the input's length. */
#define SHOW_MAX_VALUES ((size_t)1 << 20)
/* Lines of the --show picture. */
#define SHOW_LINES 24

/* Keeps rows (the n after the job->n_rows written so far) for --show, in
 * memory bounded by SHOW_MAX_VALUES: when the buffer is full, every other
 * kept row goes and the stride doubles, so that the rows kept stay evenly
 * spread over the whole input. An input of up to kept_max rows is kept
 * whole. */
static int keep_rows(encode_job *job, const float *rows, size_t n) {
  size_t dim = job->dim;
  if (job->kept == NULL) {
    /* Even, and at least twice the picture's lines, so that a halving
     * leaves a row for each line. */
    size_t max = SHOW_MAX_VALUES / dim;
    if (max < 2 * SHOW_LINES) max = 2 * SHOW_LINES;
    job->kept_max = max & ~(size_t)1;
    job->kept_stride = 1;
    job->kept = malloc(job->kept_max * dim * sizeof *job->kept);
    if (job->kept == NULL) return -1;
  }
  for (size_t i = 0; i < n; i++) {
    if ((job->n_rows + i) % job->kept_stride != 0) continue;
    memcpy(job->kept + job->n_kept * dim, rows + i * dim,
           dim * sizeof *rows);
    if (++job->n_kept == job->kept_max) {
      for (size_t k = 0; 2 * k < job->n_kept; k++)
        memmove(job->kept + k * dim, job->kept + 2 * k * dim,
                dim * sizeof *rows);
      job->n_kept /= 2;
      job->kept_stride *= 2;
    }
  }
  return 0;
}

/* Writes n rows of the current output kind. */
static int emit_rows(encode_job *job, const float *rows, size_t n) {
  if (job->of.f != NULL &&
      fwrite(rows, sizeof *rows * job->dim, n, job->of.f) != n) {
    job->write_failed = errno ? errno : EIO;
    return AURAL_EIO;
  }
  if (job->show && keep_rows(job, rows, n) < 0) return AURAL_ENOMEM;
  job->n_rows += n;
  return 0;
}

enum { PROGRESS_SOON, PROGRESS_NOW, PROGRESS_DONE };

/* Draws the progress line on stderr (a terminal): PROGRESS_SOON at most
 * every 0.2 s, PROGRESS_NOW at once, PROGRESS_DONE for the last time,
 * erased. An input of unknown length (a FIFO, some Ogg files) has no
 * fraction done: its line says how much audio was read. */
static void draw_progress(encode_job *job, int when) {
  double now = cli_now_s();
  if (!job->progress ||
      (when == PROGRESS_SOON && now - job->t_progress < 0.2))
    return;
  job->t_progress = now;
  if (job->total_in < 0) {
    fprintf(stderr, "\r%s: %.1f s of audio read", job->in_name,
            job->in_rate_hz > 0 ? (double)job->done_in / job->in_rate_hz
                                : 0.0);
  } else {
    double frac =
        job->total_in > 0 ? (double)job->done_in / (double)job->total_in : 1;
    int width = 30, filled = (int)(frac * width);
    fprintf(stderr, "\r%s [%.*s%*s] %3.0f%%", job->in_name, filled,
            "##############################", width - filled, "",
            frac * 100);
  }
  job->progress_shown = when != PROGRESS_DONE;
  if (when == PROGRESS_DONE) fputs("\r\033[K", stderr);
}

/* A report line (a chunk's text or words) goes on a line of its own, above
 * the progress line, where both are on one terminal: the progress line is
 * erased first and drawn again after it. */
static void progress_pause(encode_job *job) {
  if (!job->progress_shown) return;
  fputs("\r\033[K", stderr);
  job->progress_shown = 0;
}

static void progress_resume(encode_job *job) {
  if (!job->progress) return;
  fflush(job->said);
  draw_progress(job, PROGRESS_NOW);
}

/* Passes one chunk's output on: its rows, or for text a line with its
 * tokens (an empty final chunk prints nothing). */
static int on_chunk(encode_job *job, const aural_chunk *ch) {
  size_t n = ch->n_frames;
  if (job->kind == OUT_WORDS) {
    job->n_rows += n;
    int lines = job->wr.live != NULL && ch->n_segments > 0; /* finals */
    if (lines) progress_pause(job);
    int rc = words_chunk(&job->wr, ch) < 0 ? AURAL_ENOMEM : 0;
    if (lines) progress_resume(job);
    return rc;
  }
  if (job->kind != OUT_TEXT) return emit_rows(job, job->rows, n);
  if (n == 0) return 0;
  job->n_rows += n;
  if (!job->quiet) {
    progress_pause(job);
    fprintf(job->said, "[%7.2f s] %s\n",
            (double)ch->first_frame * job->frame_s, ch->text);
    progress_resume(job);
  }
  /* Tokens are separated by single spaces: phoneme tokens may be several
   * characters long, so plain concatenation would be ambiguous. */
  if (ch->text_len > 0 &&
      ((job->text_len > 0 && text_append(job, " ") < 0) ||
       text_append(job, ch->text) < 0))
    return AURAL_ENOMEM;
  return 0;
}

/* Computes what the stream has pending and passes on every chunk that is
 * complete. */
static int compute_and_drain(encode_job *job) {
  int rc = aural_stream_compute(job->stream);
  while (rc == 0 && (rc = aural_stream_pull(job->stream, &job->ch)) == 1)
    rc = on_chunk(job, &job->ch);
  return rc;
}

/* Pushes n input frames, computing whenever the stream's pending
 * features are full. */
static int feed(encode_job *job, const float *pcm, size_t n, size_t ch) {
  for (size_t at = 0; at < n;) {
    size_t taken;
    int rc = aural_stream_push(job->stream, pcm + at * ch, n - at, &taken);
    if (rc < 0) return rc;
    at += taken;
    if (at < n && (rc = compute_and_drain(job)) < 0) return rc;
  }
  return 0;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* A coarse picture: time runs down, mel bands (or output dimensions)
 * across, darker = larger.
 * Shades span the 10th to 99.5th percentile so that silence (the log floor)
 * does not flatten the contrast. */
static void show(const encode_job *job) {
  static const char shades[] = " .:-=+*#%@";
  const size_t rows = SHOW_LINES, cols = 40, n = job->n_kept * job->dim;
  if (job->n_kept == 0) return;
  float *sorted = malloc(n * sizeof *sorted);
  if (sorted == NULL) return;
  memcpy(sorted, job->kept, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_float);
  float lo = sorted[n / 10], hi = sorted[n - 1 - n / 200];
  free(sorted);
  size_t n_r = job->n_kept < rows ? job->n_kept : rows;
  size_t n_c = job->dim < cols ? job->dim : cols;
  fprintf(job->said,
          "%s (time down, %s across; ' ' <= %.2f, '@' >= %.2f):\n",
          job->kind == OUT_FEATURES ? "log-mel energy" : kind_names[job->kind],
          job->kind == OUT_FEATURES ? "low to high bands" : "dimensions",
          (double)lo, (double)hi);
  for (size_t r = 0; r < n_r; r++) {
    size_t t0 = r * job->n_kept / n_r, t1 = (r + 1) * job->n_kept / n_r;
    fprintf(job->said, "%7.2f s |",
            (double)(t0 * job->kept_stride) * job->frame_s);
    for (size_t c = 0; c < n_c; c++) {
      size_t m0 = c * job->dim / n_c, m1 = (c + 1) * job->dim / n_c;
      double sum = 0;
      for (size_t t = t0; t < t1; t++)
        for (size_t m = m0; m < m1; m++) sum += job->kept[t * job->dim + m];
      double v = sum / (double)((t1 - t0) * (m1 - m0));
      int k = hi > lo ? (int)((v - lo) / (hi - lo) * 10) : 0;
      fputc(shades[k < 0 ? 0 : k > 9 ? 9 : k], job->said);
    }
    fputs("|\n", job->said);
  }
}

/* The open of a FIFO input waits in open(2) until something opens the
 * FIFO for writing, and aural_audiofile_open takes a path, so the wait
 * cannot be avoided here. So that a command whose FIFO nobody writes to
 * does not hang silently, this thread says what the command waits for
 * once the open has taken FIFO_NOTICE_MS; the open's end cancels it. */
typedef struct open_notice {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;         /* the open returned */
  const char *path; /* the FIFO */
} open_notice;

static void *notice_after_delay(void *arg) {
  open_notice *n = arg;
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += FIFO_NOTICE_MS * 1000000L;
  until.tv_sec += until.tv_nsec / 1000000000L;
  until.tv_nsec %= 1000000000L;
  pthread_mutex_lock(&n->mu);
  int rc = 0;
  while (!n->done && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&n->cv, &n->mu, &until);
  if (!n->done)
    cli_notice("aural encode: waiting for a writer on FIFO %s", n->path);
  pthread_mutex_unlock(&n->mu);
  return NULL;
}

/* aural_audiofile_open, which says on stderr when it waits on a FIFO
 * (even with -q: a silent hang is worse than a line on stderr). */
static int open_input(encode_job *job, aural_audiofile **af,
                      aural_err *err) {
  if (strcmp(job->in_path, "-") == 0) {
    size_t n;
    if (cli_read_stdin(&job->stdin_bytes, &n, &interrupted, err->msg,
                       sizeof err->msg) < 0)
      return interrupted ? -EINTR : AURAL_EIO;
    return aural_audiofile_open_memory(job->stdin_bytes, n, job->in_name, af,
                                       err);
  }
  struct stat st;
  if (stat(job->in_path, &st) != 0 || !S_ISFIFO(st.st_mode))
    return aural_audiofile_open(job->in_path, af, err);
  open_notice n = {.mu = PTHREAD_MUTEX_INITIALIZER,
                   .cv = PTHREAD_COND_INITIALIZER,
                   .path = job->in_path};
  /* The notice's thread blocks Ctrl-C and SIGTERM, so that they land
   * here and interrupt the open. */
  sigset_t stop, old;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  pthread_t thread;
  int started = pthread_create(&thread, NULL, notice_after_delay, &n) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  int rc = aural_audiofile_open(job->in_path, af, err);
  pthread_mutex_lock(&n.mu);
  n.done = 1;
  pthread_cond_signal(&n.cv);
  pthread_mutex_unlock(&n.mu);
  if (started) pthread_join(thread, NULL);
  if (rc < 0 && interrupted) {
    snprintf(err->msg, sizeof err->msg, "interrupted; nothing written");
    return -EINTR;
  }
  return rc;
}

/* Loads the model and checks that it has what the output kind needs. */
static int prepare(encode_job *job, aural_err *err) {
  int rc = 0;
  if (!job->shared_model) {
    aural_model_load_config lc;
    aural_model_load_config_default(&lc);
    lc.precision = job->precision;
    rc = aural_model_load(job->model_path, &lc, &job->model, err);
    if (rc < 0) return rc;
  }
  const aural_model_config *mc = aural_model_get_config(job->model);
  if ((job->kind == OUT_LOGITS || job->kind == OUT_TEXT ||
       job->kind == OUT_WORDS) &&
      mc->vocab_size == 0) {
    snprintf(err->msg, sizeof err->msg,
             "%s: the model has no CTC head, so there are no %s "
             "(try --output embeddings)",
             job->model_path, kind_names[job->kind]);
    return AURAL_EINVAL;
  }
  job->dim = job->kind == OUT_FEATURES   ? (size_t)mc->fbank.num_mel_bins
             : job->kind == OUT_EMBEDDINGS ? (size_t)mc->d_model
                                           : (size_t)mc->vocab_size;
  if (job->kind == OUT_WORDS && job->words == NULL) {
    if (words_load(&job->own_words, job->model, job->model_path,
                   job->lexicon_path, job->lm_path, true, err->msg,
                   sizeof err->msg) < 0 ||
        (job->vocabulary != NULL &&
         words_custom(&job->own_words, job->model, job->model_path,
                      job->g2p_path, job->vocabulary, err->msg,
                      sizeof err->msg) < 0))
      return AURAL_EINVAL;
    job->words = &job->own_words;
  }
  return 0;
}

static const unsigned kind_outputs[] = {
    AURAL_STREAM_EMBEDDINGS, AURAL_STREAM_LOGITS, AURAL_STREAM_FEATURES,
    AURAL_STREAM_TEXT, AURAL_STREAM_WORDS};

/* The stream over the input, and the buffers of one chunk of it. Work is
 * grouped by chunks: the encoder takes at most chunk_frames (up to 1024)
 * frames at once. */
static int open_stream(encode_job *job, const aural_audiofile_info *info,
                       aural_err *err) {
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.input_rate_hz = info->rate_hz;
  sc.n_channels = info->n_channels;
  sc.outputs = kind_outputs[job->kind];
  sc.chunk_frames = job->chunk_frames;
  sc.max_pending_frames = job->chunk_frames < 1024 ? job->chunk_frames : 1024;
  sc.encoder_batch_frames = sc.max_pending_frames;
  if (job->kind == OUT_WORDS) {
    sc.lexicon = job->words->lex;
    sc.lm = job->words->lm;
    sc.decoder = job->dcfg;
    sc.decoder.boost_words = job->words->custom;
  }
  int rc = aural_stream_create(job->model, &sc, &job->stream, err);
  if (rc < 0) return rc;
  aural_stream_info si;
  aural_stream_get_info(job->stream, &si);
  job->frame_s = si.frame_seconds;
  if (job->kind == OUT_TEXT)
    job->chunk_text = malloc(si.text_max_bytes);
  else if (job->kind == OUT_WORDS)
    job->chunk_words = malloc(si.words_max * sizeof *job->chunk_words);
  else
    job->rows = malloc(job->chunk_frames * job->dim * sizeof *job->rows);
  if (job->kind == OUT_WORDS)
    job->segments = malloc(si.segments_max * sizeof *job->segments);
  if (job->rows == NULL && job->chunk_text == NULL &&
      (job->chunk_words == NULL || job->segments == NULL)) {
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return AURAL_ENOMEM;
  }
  job->ch = (aural_chunk){.max_frames = job->chunk_frames};
  if (job->kind == OUT_EMBEDDINGS) job->ch.emb = job->rows;
  if (job->kind == OUT_LOGITS) job->ch.logits = job->rows;
  if (job->kind == OUT_WORDS) {
    job->ch.words = job->chunk_words;
    job->ch.words_cap = si.words_max;
    job->ch.segments = job->segments;
    job->ch.segments_cap = si.segments_max;
    words_start(&job->wr, si.frame_seconds, NULL);
  }
  if (job->kind == OUT_FEATURES) job->ch.features = job->rows;
  if (job->kind == OUT_TEXT) {
    job->ch.text = job->chunk_text;
    job->ch.text_cap = si.text_max_bytes;
  }
  return 0;
}

static int run(encode_job *job) {
  aural_err err = {0};
  double rate_hz = 0, af_seconds = 0;
  aural_audiofile *af = NULL;
  float *pcm = NULL;
  /* Reports go to stdout unless the result does: without -o (text and
   * words) or with -o /dev/stdout they go to stderr, so that what stdout
   * holds is the result alone. */
  job->said = job->out_path == NULL ? stderr : stdout;
  job->in_name =
      strcmp(job->in_path, "-") == 0 ? "standard input" : job->in_path;
  int rc = prepare(job, &err);
  if (rc < 0) goto fail;
  rc = open_input(job, &af, &err);
  if (rc < 0) goto fail;
  aural_audiofile_info info;
  aural_audiofile_get_info(af, &info);
  job->total_in = info.n_frames;
  job->in_rate_hz = rate_hz = info.rate_hz;

  rc = open_stream(job, &info, &err);
  if (rc < 0) goto fail;

  pcm = malloc((size_t)READ_FRAMES * (size_t)info.n_channels * sizeof *pcm);
  if (pcm == NULL) {
    rc = AURAL_ENOMEM;
    snprintf(err.msg, sizeof err.msg, "out of memory");
    goto fail;
  }
  if (job->out_path != NULL) {
    if (outfile_open(&job->of, "aural encode", job->out_path,
                     strcmp(job->in_path, "-") == 0 ? NULL : job->in_path,
                     err.msg, sizeof err.msg) < 0) {
      rc = AURAL_EIO;
      goto fail;
    }
    if (job->of.is_stdout) job->said = stderr;
    if (job->kind != OUT_TEXT && job->kind != OUT_WORDS &&
        npy_write_begin(job->of.f, job->dim) < 0)
      goto write_fail;
  }
  if (job->kind == OUT_WORDS && !job->quiet) job->wr.live = job->said;

  for (;;) {
    size_t n = 0;
    if (interrupted) {
      rc = -EINTR;
      snprintf(err.msg, sizeof err.msg, "interrupted; nothing written");
      goto fail;
    }
    rc = aural_audiofile_read(af, pcm, READ_FRAMES, &n, &err);
    if (rc < 0) goto fail;
    if (n == 0) break;
    rc = feed(job, pcm, n, (size_t)info.n_channels);
    if (rc < 0) goto push_fail;
    job->done_in += (int64_t)n;
    draw_progress(job, PROGRESS_SOON);
    if (job->live != NULL) {
      atomic_store_explicit(
          &job->live->read_us,
          (int64_t)((double)job->done_in / info.rate_hz * 1e6),
          memory_order_relaxed);
      if (job->total_in > 0)
        atomic_store_explicit(
            &job->live->permille,
            (int32_t)(1000 * job->done_in / job->total_in),
            memory_order_relaxed);
    }
  }
  rc = aural_stream_end(job->stream);
  if (rc == 0) rc = compute_and_drain(job);
  if (rc < 0) goto push_fail;
  draw_progress(job, PROGRESS_DONE);
  if (job->kind == OUT_TEXT && !job->quiet && job->out_path != NULL)
    fprintf(job->said, "text: %s\n", job->text ? job->text : "");
  if (job->of.f != NULL) {
    if (job->kind == OUT_WORDS) {
      if (words_write(&job->wr, job->of.f, job->format) < 0) goto write_fail;
    } else if (job->kind == OUT_TEXT) {
      if (fprintf(job->of.f, "%s\n", job->text ? job->text : "") < 0)
        goto write_fail;
    } else if (npy_write_end(job->of.f, job->n_rows, job->dim) < 0) {
      goto write_fail;
    }
    if (interrupted) {
      rc = -EINTR;
      snprintf(err.msg, sizeof err.msg, "interrupted; nothing written");
      goto fail;
    }
    if (outfile_commit(&job->of, err.msg, sizeof err.msg) < 0) {
      rc = AURAL_EIO;
      goto fail;
    }
  } else if (job->kind == OUT_TEXT) {
    printf("%s\n", job->text ? job->text : "");
  } else if (job->kind == OUT_WORDS) {
    words_write(&job->wr, stdout, job->format); /* checked below */
  }

  if (!job->quiet) {
    double secs = (double)job->done_in / info.rate_hz;
    double wall = cli_now_s() - job->t_start;
    /* Words and text: how many came out ("x 1 words" read as one word,
     * "x 1 text" as nothing at all). */
    char shape[64];
    if (job->kind == OUT_WORDS) {
      snprintf(shape, sizeof shape, "%zu frames, %zu word%s", job->n_rows,
               job->wr.n_words, job->wr.n_words == 1 ? "" : "s");
    } else if (job->kind == OUT_TEXT) {
      size_t n_tokens = 0; /* the tokens are apart by single spaces */
      for (const char *p = job->text; p != NULL && *p != '\0'; p++)
        n_tokens += *p != ' ' && (p == job->text || p[-1] == ' ');
      snprintf(shape, sizeof shape, "%zu frames, %zu token%s", job->n_rows,
               n_tokens, n_tokens == 1 ? "" : "s");
    } else {
      snprintf(shape, sizeof shape, "%zu frames x %zu %s", job->n_rows,
               job->dim, kind_names[job->kind]);
    }
    fprintf(job->said,
            "%s: %.2f s of %.0f Hz, %d channel%s (%s)\n"
            "  -> %s in %.1f ms (%.0fx real time)%s%s\n",
            job->in_name, secs, info.rate_hz, info.n_channels,
            info.n_channels == 1 ? "" : "s", info.format, shape, wall * 1e3,
            wall > 0 ? secs / wall : 0.0, job->out_path ? ", written to " : "",
            job->out_path ? job->out_path : "");
  }
  if (job->show && job->kind != OUT_TEXT && job->kind != OUT_WORDS)
    show(job);
  if (cli_stdout_flush(err.msg, sizeof err.msg) < 0) {
    rc = AURAL_EIO;
    goto fail;
  }
  rc = 0;
  goto done;

write_fail:
  rc = -(job->write_failed ? job->write_failed : errno ? errno : EIO);
  outfile_write_error(&job->of, -rc, err.msg, sizeof err.msg);
  goto fail;
push_fail:
  if (job->write_failed) goto write_fail;
  if (rc == AURAL_EOVERFLOW) {
    aural_stream_stats st;
    aural_stream_get_stats(job->stream, &st);
    uint64_t bad = st.first_frame + st.n_encoded_frames;
    snprintf(err.msg, sizeof err.msg,
             "%s: the model's outputs are NaN or infinite from frame %llu "
             "(%.2f s) on: its weights, CMVN or input_scale overflow on "
             "this audio",
             job->in_name, (unsigned long long)bad,
             (double)bad * job->frame_s);
  } else {
    snprintf(err.msg, sizeof err.msg, "%s: %s", job->in_name,
             aural_strerror(rc));
  }
fail:
  if (job->progress) fputs("\r\033[K", stderr);
  if (job->errors != NULL)
    snprintf(job->errors, ERROR_BYTES, "%s", err.msg);
  else
    fprintf(stderr, "aural encode: %s\n", err.msg);
done:
  if (rate_hz > 0) af_seconds = (double)job->done_in / rate_hz;
  outfile_discard(&job->of);
  free(pcm);
  free(job->kept);
  free(job->rows);
  free(job->chunk_text);
  free(job->chunk_words);
  free(job->segments);
  free(job->text);
  aural_stream_destroy(job->stream);
  words_stop(&job->wr);
  if (job->words == &job->own_words) {
    words_free(&job->own_words);
    job->words = NULL;
  }
  aural_audiofile_close(af);
  free(job->stdin_bytes); /* after af, which reads it in place */
  job->stdin_bytes = NULL;
  if (!job->shared_model) aural_model_free(job->model);
  job->audio_s = af_seconds;
  return rc;
}

/* ---- batch mode: many inputs, one output each, all cores ---------------- */

static const char *const audio_exts[] = {
    ".wav", ".flac", ".ogg", ".oga", ".opus", ".aiff", ".aif", ".aifc",
    ".au", ".snd", ".caf", ".w64", ".rf64", ".mp3", ".sph", ".voc"};

static int is_audio_name(const char *name) {
  const char *dot = strrchr(name, '.');
  if (dot == NULL || name[0] == '.') return 0;
  for (size_t i = 0; i < sizeof audio_exts / sizeof audio_exts[0]; i++)
    if (strcasecmp(dot, audio_exts[i]) == 0) return 1;
  return 0;
}

typedef struct batch {
  const encode_job *proto;     /* options shared by every file */
  char **inputs;               /* (n) paths */
  char **outputs;              /* (n) paths in the output directory */
  char **errors;               /* (n) messages of failed files, or NULL */
  double *audio_s;             /* (n) seconds of audio of each file */
  job_live *live;              /* (n) how far each file has come */
  size_t n;
  char **skipped;              /* (n_skipped) messages: entries of a
                                  directory that are not files to read */
  size_t n_skipped;
  pthread_mutex_t mu;
  size_t next, done, written, failed; /* failed counts the skipped too */
  double audio_done_s;
} batch;

/* Appends a copy of s to the list v of *n strings (room for *cap). */
static int add_string(char ***v, size_t *n, size_t *cap, const char *s) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 64;
    char **p = realloc(*v, c * sizeof *p);
    if (p == NULL) return -1;
    *v = p;
    *cap = c;
  }
  (*v)[*n] = strdup(s);
  return (*v)[(*n)++] == NULL ? -1 : 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Adds the audio files directly in the directory dir to b->inputs, sorted.
 * An entry with an audio name that is not a file we can read (a link to
 * nothing or a loop of links, a FIFO, a socket) goes to b->skipped with the
 * reason: the user asked for the directory's audio and must hear what was
 * left out. Subdirectories are not entered. */
static int collect_dir(batch *b, const char *dir, size_t *cap,
                       size_t *skipped_cap) {
  DIR *d = opendir(dir);
  if (d == NULL) {
    fprintf(stderr, "aural encode: %s: %s\n", dir, strerror(errno));
    return -1;
  }
  size_t first = b->n, first_skipped = b->n_skipped;
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (!is_audio_name(e->d_name)) continue;
    char *path = NULL, *why = NULL;
    if (asprintf(&path, "%s/%s", dir, e->d_name) < 0) {
      rc = -1;
      break;
    }
    struct stat st;
    int got = 0;
    if (stat(path, &st) != 0) {
      got = asprintf(&why, "%s: %s; not encoded", path, strerror(errno));
    } else if (S_ISREG(st.st_mode)) {
      rc = add_string(&b->inputs, &b->n, cap, path);
    } else if (!S_ISDIR(st.st_mode)) {
      /* A FIFO would hold a job until someone writes to it; named alone
       * on the command line, it is read. */
      got = asprintf(&why, "%s: not a regular file; not encoded", path);
    }
    if (got < 0) {
      why = NULL;
      rc = -1;
    } else if (why != NULL) {
      rc = add_string(&b->skipped, &b->n_skipped, skipped_cap, why);
    }
    free(why);
    free(path);
  }
  closedir(d);
  if (rc < 0) return -1;
  if (b->n > first)
    qsort(b->inputs + first, b->n - first, sizeof *b->inputs, cmp_str);
  if (b->n_skipped > first_skipped)
    qsort(b->skipped + first_skipped, b->n_skipped - first_skipped,
          sizeof *b->skipped, cmp_str);
  if (b->n == first)
    fprintf(stderr, "aural encode: %s: no audio files in it\n", dir);
  return 0;
}

/* Expands the command line's inputs into b->inputs: files as given,
 * directories to the audio files directly in them (by extension,
 * sorted). */
static int collect_inputs(batch *b, char **args, int n_args) {
  size_t cap = 0, skipped_cap = 0;
  for (int i = 0; i < n_args; i++) {
    struct stat st;
    if (stat(args[i], &st) == 0 && S_ISDIR(st.st_mode)) {
      if (collect_dir(b, args[i], &cap, &skipped_cap) < 0) return -1;
    } else if (add_string(&b->inputs, &b->n, &cap, args[i]) < 0) {
      return -1;
    }
  }
  return 0;
}

static int cmp_str_ref(const void *a, const void *b) {
  return strcmp(**(char **const *)a, **(char **const *)b);
}

/* OUT_DIR/BASE.npy (or .txt for text); two inputs with one base name are
 * refused before any work, so no output overwrites another. The message
 * names both inputs: in a directory of many files, the user must find
 * them. */
static int plan_outputs(batch *b, const char *dir, const char *ext) {
  b->outputs = calloc(b->n, sizeof *b->outputs);
  if (b->outputs == NULL) return -1;
  /* -o out/ names out: no "out//a.npy" in messages. */
  int dir_len = (int)strlen(dir);
  while (dir_len > 1 && dir[dir_len - 1] == '/') dir_len--;
  for (size_t i = 0; i < b->n; i++) {
    const char *base = strrchr(b->inputs[i], '/');
    base = base ? base + 1 : b->inputs[i];
    const char *dot = strrchr(base, '.');
    int len = dot && dot != base ? (int)(dot - base) : (int)strlen(base);
    if (asprintf(&b->outputs[i], "%.*s/%.*s.%s", dir_len, dir, len, base,
                 ext) < 0) {
      b->outputs[i] = NULL;
      return -1;
    }
  }
  /* Sorted references into b->outputs, so that each one's index (and so
   * its input) is known. */
  char ***sorted = malloc(b->n * sizeof *sorted);
  if (sorted == NULL) return -1;
  for (size_t i = 0; i < b->n; i++) sorted[i] = &b->outputs[i];
  qsort(sorted, b->n, sizeof *sorted, cmp_str_ref);
  int clash = 0;
  for (size_t i = 1; i < b->n; i++)
    if (strcmp(*sorted[i - 1], *sorted[i]) == 0) {
      size_t x = (size_t)(sorted[i - 1] - b->outputs);
      size_t y = (size_t)(sorted[i] - b->outputs);
      fprintf(stderr,
              "aural encode: %s and %s would both write %s; rename one\n",
              b->inputs[x < y ? x : y], b->inputs[x < y ? y : x],
              *sorted[i]);
      clash = 1;
    }
  free(sorted);
  return clash ? -1 : 0;
}

static void *batch_worker(void *arg) {
  batch *b = arg;
  char *msg = malloc(ERROR_BYTES);
  for (;;) {
    pthread_mutex_lock(&b->mu);
    size_t i = b->next < b->n && !interrupted ? b->next++ : b->n;
    pthread_mutex_unlock(&b->mu);
    if (i == b->n) break;
    encode_job job = *b->proto;
    job.in_path = b->inputs[i];
    job.out_path = b->outputs[i];
    job.live = &b->live[i];
    job.errors = msg;
    if (msg) msg[0] = '\0';
    job.t_start = cli_now_s();
    int rc = run(&job);
    pthread_mutex_lock(&b->mu);
    b->done++;
    b->audio_s[i] = job.audio_s;
    b->audio_done_s += job.audio_s;
    atomic_store_explicit(&b->live[i].permille, 1000, memory_order_relaxed);
    if (rc == 0) {
      b->written++;
    } else if (!interrupted) {
      b->failed++;
      b->errors[i] = strdup(msg && msg[0] ? msg : "failed");
    }
    pthread_mutex_unlock(&b->mu);
  }
  free(msg);
  return NULL;
}

/* The batch's progress line: the bar and the hours of audio count the
 * files being encoded for what has been read of them, so that a few long
 * files do not show an empty bar and no audio until the first one ends. */
static void batch_progress(batch *b, double t0, int final) {
  pthread_mutex_lock(&b->mu);
  size_t done = b->done, failed = b->failed, n = b->n;
  pthread_mutex_unlock(&b->mu);
  double audio = 0, files = 0;
  for (size_t i = 0; i < n; i++) {
    audio += (double)atomic_load_explicit(&b->live[i].read_us,
                                          memory_order_relaxed) / 1e6;
    files += (double)atomic_load_explicit(&b->live[i].permille,
                                          memory_order_relaxed) / 1000;
  }
  double wall = cli_now_s() - t0;
  int width = 30, fill = n ? (int)((double)width * files / (double)n)
                           : width;
  if (fill > width) fill = width;
  fprintf(stderr, "\r\033[K[%.*s%.*s] %zu/%zu files%s%s, %.2f h of audio, "
                  "%.0fx real time%s",
          fill, "##############################", width - fill,
          "..............................", done, n, failed ? ", failed " : "",
          failed ? "some" : "", audio / 3600.0,
          wall > 0 ? audio / wall : 0.0, final ? "\n" : "");
}

/* Encodes every input into OUT_DIR with n_jobs threads sharing one model.
 * Failed files are reported at the end; the others are written. why says
 * what made this a batch ("several inputs", "-j", ...), for messages. */
static int run_batch(encode_job *proto, char **args, int n_args,
                     const char *out_dir, size_t n_jobs, const char *why) {
  batch b = {.proto = proto};
  int rc = EXIT_FAIL;
  if (collect_inputs(&b, args, n_args) < 0) goto out;
  if (b.n == 0) {
    for (size_t i = 0; i < b.n_skipped; i++)
      fprintf(stderr, "aural encode: %s\n", b.skipped[i]);
    fprintf(stderr, "aural encode: no input files\n");
    goto out;
  }
  b.failed = b.n_skipped;
  if (mkdir(out_dir, 0777) < 0 && errno != EEXIST) {
    fprintf(stderr, "aural encode: cannot create %s: %s\n", out_dir,
            strerror(errno));
    goto out;
  }
  struct stat st;
  if (stat(out_dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
    fprintf(stderr, "aural encode: -o %s must be a directory with %s\n",
            out_dir, why);
    goto out;
  }
  b.errors = calloc(b.n, sizeof *b.errors);
  b.audio_s = calloc(b.n, sizeof *b.audio_s);
  b.live = calloc(b.n, sizeof *b.live);
  if (b.errors == NULL || b.audio_s == NULL || b.live == NULL ||
      plan_outputs(&b, out_dir,
                   proto->kind == OUT_TEXT    ? "txt"
                   : proto->kind == OUT_WORDS ? words_format_names[proto->format]
                                              : "npy") < 0)
    goto out;
  aural_err err = {0};
  aural_model_load_config lc;
  aural_model_load_config_default(&lc);
  lc.precision = proto->precision;
  if (aural_model_load(proto->model_path, &lc, &proto->model, &err) < 0) {
    fprintf(stderr, "aural encode: %s\n", err.msg);
    goto out;
  }
  proto->shared_model = 1;
  if (proto->kind == OUT_WORDS) {
    if (words_load(&proto->own_words, proto->model, proto->model_path,
                   proto->lexicon_path, proto->lm_path, true, err.msg,
                   sizeof err.msg) < 0 ||
        (proto->vocabulary != NULL &&
         words_custom(&proto->own_words, proto->model, proto->model_path,
                      proto->g2p_path, proto->vocabulary, err.msg,
                      sizeof err.msg) < 0)) {
      fprintf(stderr, "aural encode: %s\n", err.msg);
      aural_model_free(proto->model);
      goto out;
    }
    proto->words = &proto->own_words;
  }
  int quiet = proto->quiet;
  proto->quiet = 1;
  proto->progress = 0;
  if (n_jobs > b.n) n_jobs = b.n;
  pthread_mutex_init(&b.mu, NULL);
  struct sigaction wake = {.sa_handler = on_wake}; /* no SA_RESTART */
  sigaction(SIGUSR1, &wake, NULL);
  pthread_t *threads = calloc(n_jobs, sizeof *threads);
  size_t started = 0;
  double t0 = cli_now_s();
  for (; threads != NULL && started < n_jobs; started++)
    if (pthread_create(&threads[started], NULL, batch_worker, &b) != 0)
      break;
  if (started == 0) {
    fprintf(stderr, "aural encode: cannot start threads\n");
  } else {
    int tty = !quiet && isatty(STDERR_FILENO); /* the progress bar */
    for (;;) {
      pthread_mutex_lock(&b.mu);
      int finished = b.done == b.n || (interrupted && b.next == b.done);
      pthread_mutex_unlock(&b.mu);
      if (finished) break;
      /* After a Ctrl-C, wake the workers from their waits, every turn:
       * one that was about to wait when the last came waits now. */
      if (interrupted)
        for (size_t i = 0; i < started; i++) pthread_kill(threads[i], SIGUSR1);
      if (tty) batch_progress(&b, t0, 0);
      usleep(200000);
    }
    for (size_t i = 0; i < started; i++) pthread_join(threads[i], NULL);
    if (tty) batch_progress(&b, t0, 1);
    double wall = cli_now_s() - t0;
    for (size_t i = 0; i < b.n_skipped; i++)
      fprintf(stderr, "aural encode: %s\n", b.skipped[i]);
    for (size_t i = 0; i < b.n; i++)
      if (b.errors[i]) fprintf(stderr, "aural encode: %s\n", b.errors[i]);
    /* Files written, not files started: after a Ctrl-C, those being
     * encoded were dropped. */
    char failed[64] = "";
    if (b.failed > 0)
      snprintf(failed, sizeof failed, ", %zu failed", b.failed);
    if (!quiet)
      printf("%zu of %zu file%s written%s%s, %.3f h of audio in %.1f s "
             "with %zu thread%s: %.0fx real time, outputs in %s\n",
             b.written, b.n + b.n_skipped, b.n + b.n_skipped == 1 ? "" : "s",
             failed, interrupted ? ", interrupted" : "",
             b.audio_done_s / 3600.0, wall, started, started == 1 ? "" : "s",
             wall > 0 ? b.audio_done_s / wall : 0.0, out_dir);
    rc = b.failed == 0 && !interrupted ? EXIT_OK : EXIT_FAIL;
  }
  free(threads);
  pthread_mutex_destroy(&b.mu);
  words_free(&proto->own_words);
  aural_model_free(proto->model);
out:
  for (size_t i = 0; i < b.n; i++) {
    free(b.inputs[i]);
    if (b.outputs) free(b.outputs[i]);
    if (b.errors) free(b.errors[i]);
  }
  for (size_t i = 0; i < b.n_skipped; i++) free(b.skipped[i]);
  free(b.skipped);
  free(b.inputs);
  free(b.outputs);
  free(b.errors);
  free(b.audio_s);
  free(b.live);
  return rc;
}

/* --beam, --lm-weight, --word-penalty, --blank-penalty or --boost. */
static int parse_decoder_option(aural_decoder_config *dc, int c,
                                const char *arg) {
  char *end;
  double v = strtod(arg, &end);
  bool ok = end != arg && *end == '\0' && isfinite(v);
  if (c == 'B' && ok && v >= 1 && v <= 4096 && v == floor(v)) {
    dc->beam = (int)v;
    return 0;
  }
  if (c == 'W' && ok && v >= 0 && v <= 100) {
    dc->lm_weight = (float)v;
    return 0;
  }
  if (c == 'P' && ok && fabs(v) <= 100) {
    dc->word_penalty = (float)v;
    return 0;
  }
  if (c == 'X' && ok && v >= 0 && v <= 100) {
    dc->boost = (float)v;
    return 0;
  }
  if (c == 'K' && ok && v >= 0 && v <= 100) {
    dc->blank_penalty = (float)v;
    return 0;
  }
  fprintf(stderr, "aural encode: %s %s: expected %s\n",
          c == 'B'   ? "--beam"
          : c == 'W' ? "--lm-weight"
          : c == 'X' ? "--boost"
          : c == 'K' ? "--blank-penalty"
                     : "--word-penalty",
          arg,
          c == 'B'   ? "an integer in 1..4096"
          : c == 'W' || c == 'X' || c == 'K' ? "a number in 0..100"
                     : "a number in -100..100");
  return -1;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

int cmd_encode(int argc, char **argv) {
  static const struct option opts[] = {
      {"model", required_argument, NULL, 'm'},
      {"out", required_argument, NULL, 'o'},
      {"output", required_argument, NULL, 'O'},
      {"chunk-frames", required_argument, NULL, 'C'},
      {"show", no_argument, NULL, 'S'},
      {"quiet", no_argument, NULL, 'q'},
      {"jobs", required_argument, NULL, 'j'},
      {"lexicon", required_argument, NULL, 'L'},
      {"lm", required_argument, NULL, 'G'},
      {"format", required_argument, NULL, 'F'},
      {"beam", required_argument, NULL, 'B'},
      {"lm-weight", required_argument, NULL, 'W'},
      {"word-penalty", required_argument, NULL, 'P'},
      {"blank-penalty", required_argument, NULL, 'K'},
      {"vocabulary", required_argument, NULL, 'V'},
      {"boost", required_argument, NULL, 'X'},
      {"g2p", required_argument, NULL, 'Y'},
      {"precision", required_argument, NULL, 'R'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  encode_job job = {.chunk_frames = 50, .kind = OUT_EMBEDDINGS};
  aural_decoder_config_default(&job.dcfg);
  size_t n_jobs = (size_t)cli_cpus_available();
  int jobs_given = 0, boost_given = 0;
  const char *kind = NULL;
  const char *words_only = NULL; /* an option that only words use */
  int c, li;
  optind = 1;
  while ((li = -1, c = getopt_long(argc, argv, "m:o:qj:h", opts, &li)) !=
         -1) {
    if (li >= 0 && strchr("LGFVYBWXPK", c) != NULL) words_only = opts[li].name;
    switch (c) {
    case 'm': job.model_path = optarg; break;
    case 'j':
      if (cli_parse_size(optarg, 1, 256, &n_jobs) < 0) {
        fprintf(stderr, "aural encode: -j %s: expected 1..256\n", optarg);
        return EXIT_USAGE;
      }
      jobs_given = 1;
      break;
    case 'o': job.out_path = outfile_path(optarg); break;
    case 'O': kind = optarg; break;
    case 'C':
      if (cli_parse_size(optarg, 1, 100000, &job.chunk_frames) < 0) {
        fprintf(stderr, "aural encode: --chunk-frames %s: expected an "
                        "integer in 1..100000\n", optarg);
        return EXIT_USAGE;
      }
      break;
    case 'S': job.show = 1; break;
    case 'q': job.quiet = 1; break;
    case 'L': job.lexicon_path = optarg; break;
    case 'G': job.lm_path = optarg; break;
    case 'F': {
      int f = words_format_parse(optarg);
      if (f < 0) {
        fprintf(stderr, "aural encode: --format %s: expected txt, json, srt "
                        "or vtt\n", optarg);
        return EXIT_USAGE;
      }
      job.format = (words_format)f;
      break;
    }
    case 'V': job.vocabulary = optarg; break;
    case 'Y': job.g2p_path = optarg; break;
    case 'R':
      if (aural_model_precision_parse(optarg, &job.precision) < 0) {
        fprintf(stderr, "aural encode: --precision %s: expected f32 or bf16\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'B':
    case 'W':
    case 'X':
    case 'P':
    case 'K':
      if (parse_decoder_option(&job.dcfg, c, optarg) < 0) return EXIT_USAGE;
      if (c == 'X') boost_given = 1;
      break;
    case 'h': usage(stdout); return EXIT_OK;
    default:
      fprintf(stderr, "(see 'aural encode --help')\n");
      return EXIT_USAGE;
    }
  }
  if (kind != NULL) {
    size_t k = 0;
    while (k < N_KINDS && strcmp(kind, kind_names[k]) != 0) k++;
    if (k == N_KINDS) {
      fprintf(stderr,
              "aural encode: --output %s: unknown kind (embeddings, logits, "
              "features, text or words)\n",
              kind);
      return EXIT_USAGE;
    }
    job.kind = (out_kind)k;
  }
  if (job.show && (job.kind == OUT_TEXT || job.kind == OUT_WORDS)) {
    /* The picture is of rows of numbers; text has none to draw. */
    fprintf(stderr, "aural encode: --show draws embeddings, logits or "
                    "features, not --output %s\n",
            kind_names[job.kind]);
    return EXIT_USAGE;
  }
  if (words_only != NULL && job.kind != OUT_WORDS) {
    /* Taken without words it would be ignored, and the user left to
     * wonder why it changed nothing. */
    fprintf(stderr, "aural encode: --%s needs --output words\n",
            words_only);
    return EXIT_USAGE;
  }
  /* As aural sub and send do: a bad list or a boost with nothing to boost
   * is a bad command line, found before the model and the LM load. */
  char why[256];
  if (job.vocabulary != NULL &&
      words_custom_check(job.vocabulary, why, sizeof why) < 0) {
    fprintf(stderr, "aural encode: %s\n", why);
    return EXIT_USAGE;
  }
  if (boost_given && job.vocabulary == NULL) {
    fprintf(stderr, "aural encode: --boost needs --vocabulary\n");
    return EXIT_USAGE;
  }
  if (job.model_path == NULL) job.model_path = cli_default_model();
  struct stat st;
  /* What makes this a run of many inputs, for messages about -o (a lone
   * file given -j was told it was several inputs). */
  const char *batch_why =
      argc - optind > 1 ? "several inputs"
      : argc - optind == 1 && stat(argv[optind], &st) == 0 &&
              S_ISDIR(st.st_mode)
          ? "a directory as INPUT"
      : jobs_given ? "-j" : NULL;
  int batch_mode = batch_why != NULL;
  if (optind == argc || (batch_mode && job.out_path == NULL) ||
      (job.out_path == NULL && job.kind != OUT_TEXT &&
       job.kind != OUT_WORDS)) {
    fprintf(stderr, "aural encode: %s%s\n(see 'aural encode --help')\n",
            optind == argc ? "an INPUT file is required"
            : batch_mode   ? "-o DIR is required with "
                           : "-o OUT.npy is required",
            optind != argc && batch_mode ? batch_why : "");
    return EXIT_USAGE;
  }
  if (batch_mode && (ends_with(job.out_path, ".npy") ||
                     ends_with(job.out_path, ".txt") ||
                     strcmp(job.out_path, "/dev/stdout") == 0)) {
    fprintf(stderr,
            "aural encode: -o %s: with %s, -o names the output directory "
            "(a file per input)\n",
            job.out_path, batch_why);
    return EXIT_USAGE;
  }
  if (batch_mode && job.show) {
    fprintf(stderr, "aural encode: --show takes one input\n");
    return EXIT_USAGE;
  }
  for (int i = optind; batch_mode && i < argc; i++)
    if (strcmp(argv[i], "-") == 0) {
      /* It would have no name to make its output's from. */
      fprintf(stderr, "aural encode: - (standard input) is read only as "
                      "the one INPUT\n");
      return EXIT_USAGE;
    }
  /* With -o FILE, stdout holds reports alone. */
  if (job.out_path != NULL && strcmp(job.out_path, "/dev/stdout") != 0 &&
      cli_stdout_reports_only() < 0) {
    fprintf(stderr, "aural encode: /dev/null: %s\n", strerror(errno));
    return EXIT_FAIL;
  }
  job.in_path = argv[optind];
  job.t_start = cli_now_s();
  job.progress = !job.quiet && isatty(STDERR_FILENO);
  if (job.precision == AURAL_PRECISION_BF16 && !job.quiet)
    fprintf(stderr, "aural encode: precision bf16 (approximate): %s\n",
            cli_bf16_method());

  /* The first Ctrl-C stops the work where it can and writes nothing more;
   * the second ends the process at once. That one is needed: libsndfile
   * reads again when a signal interrupts its read, so a FIFO input whose
   * writer is idle, or one that nobody opened for writing in a worker's
   * open, would hold the command for as long as no audio comes. Outputs
   * have no name until committed: nothing is left. */
  cli_catch_stop(on_signal);

  if (batch_mode) {
    int brc = run_batch(&job, argv + optind, argc - optind, job.out_path,
                        n_jobs, batch_why);
    return interrupted ? EXIT_SIGNAL : brc;
  }
  int rc = run(&job);
  if (interrupted) return EXIT_SIGNAL;
  return rc < 0 ? EXIT_FAIL : EXIT_OK;
}
