/*
 * aural encode: an audio file in, a .npy of per-frame outputs out.
 *
 * The output appears only when everything succeeded: rows are streamed to
 * a temporary file beside OUT, which is renamed over OUT at the end and
 * removed on any failure or interruption.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <aural.h>

#include "cli.h"
#include "npy.h"

#define READ_FRAMES 4096

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

static void usage(FILE *to) {
  fprintf(to,
          "Usage: aural encode [OPTIONS] -o OUT.npy INPUT\n"
          "\n"
          "Reads INPUT (WAV, FLAC, Ogg/Vorbis, AIFF or anything else\n"
          "libsndfile opens; any sample rate and channel count), converts it\n"
          "to 16 kHz mono and writes one row per 10 ms frame to OUT.npy as a\n"
          "float32 NumPy array [n_frames, dim].\n"
          "\n"
          "Options:\n"
          "  -o, --out PATH      output file (required); written only when\n"
          "                      the whole input was processed\n"
          "      --output KIND   what each row holds:\n"
          "                        features  80 log-mel filterbank energies,\n"
          "                                  Kaldi-compatible (default)\n"
          "      --show          print a coarse text spectrogram of the result\n"
          "  -q, --quiet         print nothing but errors\n"
          "  -h, --help          show this help\n"
          "\n"
          "Samples that are NaN or infinite make the input invalid: the\n"
          "command names the first one and writes nothing.\n"
          "\n"
          "Exit status: 0 on success, 1 if the input could not be processed,\n"
          "2 for a bad command line.\n");
}

typedef struct encode_job {
  const char *in_path, *out_path;
  int quiet, show;
  FILE *out;             /* the temporary output */
  char *tmp_path;        /* its name, removed unless renamed */
  size_t n_rows, dim;
  int write_failed;
  float *kept;           /* (n_rows, dim) rows kept for --show */
  size_t kept_cap;
  double t_start, t_progress;
  int64_t total_in, done_in; /* input frames, for progress */
  int progress;              /* draw a progress line on stderr */
} encode_job;

static int on_frames(void *user, const float *rows, size_t n, uint64_t first) {
  encode_job *job = user;
  (void)first;
  if (fwrite(rows, sizeof *rows * job->dim, n, job->out) != n) {
    job->write_failed = errno ? errno : EIO;
    return AURAL_EIO;
  }
  if (job->show) {
    size_t need = (job->n_rows + n) * job->dim;
    if (need > job->kept_cap) {
      size_t cap = need * 2;
      float *p = realloc(job->kept, cap * sizeof *p);
      if (p == NULL) return AURAL_ENOMEM;
      job->kept = p;
      job->kept_cap = cap;
    }
    memcpy(job->kept + job->n_rows * job->dim, rows,
           n * job->dim * sizeof *rows);
  }
  job->n_rows += n;
  return 0;
}

static void draw_progress(encode_job *job, int final) {
  double now = cli_now_s();
  if (!job->progress || (!final && now - job->t_progress < 0.2)) return;
  job->t_progress = now;
  double frac = job->total_in > 0 ? (double)job->done_in / job->total_in : 1;
  int width = 30, filled = (int)(frac * width);
  fprintf(stderr, "\r%s [%.*s%*s] %3.0f%%", job->in_path, filled,
          "##############################", width - filled, "", frac * 100);
  if (final) fputs("\r\033[K", stderr);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* A coarse spectrogram: time runs down, mel bands across, darker = louder.
 * Shades span the 10th to 99.5th percentile so that silence (the log floor)
 * does not flatten the contrast. */
static void show(const encode_job *job) {
  static const char shades[] = " .:-=+*#%@";
  const size_t rows = 24, cols = 40, n = job->n_rows * job->dim;
  if (job->n_rows == 0) return;
  float *sorted = malloc(n * sizeof *sorted);
  if (sorted == NULL) return;
  memcpy(sorted, job->kept, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_float);
  float lo = sorted[n / 10], hi = sorted[n - 1 - n / 200];
  free(sorted);
  size_t n_r = job->n_rows < rows ? job->n_rows : rows;
  size_t n_c = job->dim < cols ? job->dim : cols;
  printf("log-mel energy (time down, low to high bands across; ' ' <= %.1f, "
         "'@' >= %.1f):\n",
         (double)lo, (double)hi);
  for (size_t r = 0; r < n_r; r++) {
    size_t t0 = r * job->n_rows / n_r, t1 = (r + 1) * job->n_rows / n_r;
    printf("%7.2f s |", (double)t0 * 0.01);
    for (size_t c = 0; c < n_c; c++) {
      size_t m0 = c * job->dim / n_c, m1 = (c + 1) * job->dim / n_c;
      double sum = 0;
      for (size_t t = t0; t < t1; t++)
        for (size_t m = m0; m < m1; m++) sum += job->kept[t * job->dim + m];
      double v = sum / (double)((t1 - t0) * (m1 - m0));
      int k = hi > lo ? (int)((v - lo) / (hi - lo) * 10) : 0;
      putchar(shades[k < 0 ? 0 : k > 9 ? 9 : k]);
    }
    puts("|");
  }
}

/* Opens a temporary file in OUT's directory so the final rename is atomic. */
static int open_tmp(encode_job *job) {
  char *copy = strdup(job->out_path);
  if (copy == NULL) return -ENOMEM;
  const char *dir = dirname(copy);
  int n = asprintf(&job->tmp_path, "%s/.aural-encode-XXXXXX", dir);
  free(copy);
  if (n < 0) {
    job->tmp_path = NULL;
    return -ENOMEM;
  }
  int fd = mkstemp(job->tmp_path);
  if (fd < 0) {
    int e = errno;
    free(job->tmp_path);
    job->tmp_path = NULL;
    return -e;
  }
  job->out = fdopen(fd, "wb");
  if (job->out == NULL) {
    int e = errno;
    close(fd);
    return -e;
  }
  return 0;
}

static int run(encode_job *job) {
  aural_err err = {0};
  aural_audiofile *af = NULL;
  aural_frontend *fe = NULL;
  float *pcm = NULL;
  int rc = aural_audiofile_open(job->in_path, &af, &err);
  if (rc < 0) goto fail;
  aural_audiofile_info info;
  aural_audiofile_get_info(af, &info);
  job->total_in = info.n_frames;

  aural_frontend_config cfg;
  aural_frontend_config_default(&cfg);
  cfg.input_rate_hz = info.rate_hz;
  cfg.n_channels = info.n_channels;
  rc = aural_frontend_create(&cfg, &fe, &err);
  if (rc < 0) goto fail;
  job->dim = (size_t)aural_frontend_dim(fe);

  pcm = malloc((size_t)READ_FRAMES * (size_t)info.n_channels * sizeof *pcm);
  if (pcm == NULL) {
    rc = AURAL_ENOMEM;
    snprintf(err.msg, sizeof err.msg, "out of memory");
    goto fail;
  }
  rc = open_tmp(job);
  if (rc < 0) {
    snprintf(err.msg, sizeof err.msg, "%s: cannot create output: %s",
             job->out_path, strerror(-rc));
    goto fail;
  }
  if (npy_write_begin(job->out, job->dim) < 0) goto write_fail;

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
    rc = aural_frontend_push(fe, pcm, n, on_frames, job);
    if (rc < 0) goto push_fail;
    job->done_in += (int64_t)n;
    draw_progress(job, 0);
  }
  rc = aural_frontend_finish(fe, on_frames, job);
  if (rc < 0) goto push_fail;
  draw_progress(job, 1);
  if (npy_write_end(job->out, job->n_rows, job->dim) < 0) goto write_fail;
  FILE *out = job->out;
  job->out = NULL;
  if (fclose(out) != 0) goto write_fail;
  if (rename(job->tmp_path, job->out_path) != 0) {
    rc = -errno;
    snprintf(err.msg, sizeof err.msg, "%s: cannot create output: %s",
             job->out_path, strerror(errno));
    goto fail;
  }
  free(job->tmp_path);
  job->tmp_path = NULL;

  if (!job->quiet) {
    double secs = (double)info.n_frames / info.rate_hz;
    double wall = cli_now_s() - job->t_start;
    printf("%s: %.2f s of %.0f Hz, %d channel%s (%s)\n"
            "  -> %zu frames x %zu log-mel features in %.1f ms "
            "(%.0fx real time), written to %s\n",
            job->in_path, secs, info.rate_hz, info.n_channels,
            info.n_channels == 1 ? "" : "s", info.format, job->n_rows,
            job->dim, wall * 1e3, wall > 0 ? secs / wall : 0.0,
            job->out_path);
  }
  if (job->show) show(job);
  fflush(stdout);
  rc = 0;
  goto done;

write_fail:
  rc = -(job->write_failed ? job->write_failed : errno ? errno : EIO);
  snprintf(err.msg, sizeof err.msg, "%s: write failed: %s", job->out_path,
           strerror(-rc));
  goto fail;
push_fail:
  if (job->write_failed) goto write_fail;
  snprintf(err.msg, sizeof err.msg, "%s: %s", job->in_path,
           aural_strerror(rc));
fail:
  if (job->progress) fputs("\r\033[K", stderr);
  fprintf(stderr, "aural encode: %s\n", err.msg);
done:
  if (job->out != NULL) fclose(job->out);
  if (job->tmp_path != NULL) {
    unlink(job->tmp_path);
    free(job->tmp_path);
  }
  free(pcm);
  free(job->kept);
  aural_frontend_destroy(fe);
  aural_audiofile_close(af);
  return rc;
}

int cmd_encode(int argc, char **argv) {
  static const struct option opts[] = {
      {"out", required_argument, NULL, 'o'},
      {"output", required_argument, NULL, 'O'},
      {"show", no_argument, NULL, 'S'},
      {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  encode_job job = {0};
  const char *kind = "features";
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
    switch (c) {
    case 'o': job.out_path = optarg; break;
    case 'O': kind = optarg; break;
    case 'S': job.show = 1; break;
    case 'q': job.quiet = 1; break;
    case 'h': usage(stdout); return EXIT_OK;
    default:
      fprintf(stderr, "(see 'aural encode --help')\n");
      return EXIT_USAGE;
    }
  }
  if (strcmp(kind, "features") != 0) {
    fprintf(stderr,
            "aural encode: --output %s: unknown kind (this build writes: "
            "features)\n",
            kind);
    return EXIT_USAGE;
  }
  if (job.out_path == NULL || optind != argc - 1) {
    fprintf(stderr, "aural encode: %s\n(see 'aural encode --help')\n",
            job.out_path == NULL ? "-o OUT.npy is required"
                                 : "exactly one INPUT file is required");
    return EXIT_USAGE;
  }
  job.in_path = argv[optind];
  job.t_start = cli_now_s();
  job.progress = !job.quiet && isatty(STDERR_FILENO);

  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  int rc = run(&job);
  if (interrupted) return EXIT_SIGNAL;
  return rc < 0 ? EXIT_FAIL : EXIT_OK;
}
