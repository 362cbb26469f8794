/*
 * aural bench: how fast the library's stages run, on one thread.
 *
 * frontend: the cost of one 10 ms feature frame when audio arrives 10 ms at
 * a time, as it does from a microphone: 16 kHz mono straight into the
 * fbank, and 44.1 kHz stereo and 48 kHz mono through downmix and resampler.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <aural.h>

#include "cli.h"

static void usage(FILE *to) {
  fprintf(to,
          "Usage: aural bench [OPTIONS] [SUITE...]\n"
          "\n"
          "Measures single-thread speed. Suites (default: all):\n"
          "  frontend   microseconds of CPU per 10 ms feature frame, fed\n"
          "             10 ms of audio per push (16 kHz mono; 44.1 kHz\n"
          "             stereo and 48 kHz mono through the resampler)\n"
          "\n"
          "Options:\n"
          "      --seconds S   audio per measurement (default 60)\n"
          "      --repeat N    measurements per case; the best is kept\n"
          "                    (default 3)\n"
          "      --json        print one JSON object instead of text\n"
          "  -h, --help        show this help\n");
}

static int count_frames(void *user, const float *rows, size_t n,
                        uint64_t first) {
  (void)rows;
  (void)first;
  *(size_t *)user += n;
  return 0;
}

/* Deterministic test signal: two sweeping tones in noise, speech-like in
 * level, so every part of the spectrum is busy. */
static void fill_signal(float *x, size_t n_frames, int n_ch, double rate) {
  uint32_t s = 12345;
  for (size_t i = 0; i < n_frames; i++) {
    double t = (double)i / rate;
    double v = 0.2 * sin(2 * M_PI * (200 + 50 * sin(t)) * t) +
               0.1 * sin(2 * M_PI * (2500 + 400 * sin(3 * t)) * t);
    for (int c = 0; c < n_ch; c++) {
      s = s * 1664525u + 1013904223u;
      x[i * (size_t)n_ch + (size_t)c] =
          (float)(v + 0.02 * ((double)(s >> 8) / 16777216.0 - 0.5));
    }
  }
}

typedef struct frontend_case {
  double rate_hz;
  int n_channels;
  double us_per_frame; /* best CPU time per emitted frame */
  double wall_us_per_frame;
  size_t n_frames;
} frontend_case;

static int bench_frontend_case(frontend_case *bc, double seconds, int repeat) {
  size_t n_in = (size_t)(seconds * bc->rate_hz);
  size_t hop_in = (size_t)(bc->rate_hz / 100); /* 10 ms per push */
  float *x = malloc(n_in * (size_t)bc->n_channels * sizeof *x);
  if (x == NULL) return -1;
  fill_signal(x, n_in, bc->n_channels, bc->rate_hz);

  aural_frontend_config cfg;
  aural_frontend_config_default(&cfg);
  cfg.input_rate_hz = bc->rate_hz;
  cfg.n_channels = bc->n_channels;
  aural_err err;
  aural_frontend *fe;
  if (aural_frontend_create(&cfg, &fe, &err) < 0) {
    fprintf(stderr, "aural bench: %s\n", err.msg);
    free(x);
    return -1;
  }
  bc->us_per_frame = INFINITY;
  bc->wall_us_per_frame = INFINITY;
  for (int r = 0; r < repeat; r++) {
    size_t n_frames = 0;
    aural_frontend_reset(fe);
    double c0 = cli_thread_cpu_s(), w0 = cli_now_s();
    for (size_t at = 0; at < n_in; at += hop_in) {
      size_t k = n_in - at < hop_in ? n_in - at : hop_in;
      aural_frontend_push(fe, x + at * (size_t)bc->n_channels, k,
                          count_frames, &n_frames);
    }
    aural_frontend_finish(fe, count_frames, &n_frames);
    double cpu = cli_thread_cpu_s() - c0, wall = cli_now_s() - w0;
    bc->n_frames = n_frames;
    bc->us_per_frame = fmin(bc->us_per_frame, cpu * 1e6 / (double)n_frames);
    bc->wall_us_per_frame =
        fmin(bc->wall_us_per_frame, wall * 1e6 / (double)n_frames);
  }
  aural_frontend_destroy(fe);
  free(x);
  return 0;
}

int cmd_bench(int argc, char **argv) {
  static const struct option opts[] = {
      {"seconds", required_argument, NULL, 's'},
      {"repeat", required_argument, NULL, 'r'},
      {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  double seconds = 60;
  int repeat = 3, json = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 's': seconds = atof(optarg); break;
    case 'r': repeat = atoi(optarg); break;
    case 'j': json = 1; break;
    case 'h': usage(stdout); return EXIT_OK;
    default:
      fprintf(stderr, "(see 'aural bench --help')\n");
      return EXIT_USAGE;
    }
  }
  if (!(seconds >= 1 && seconds <= 3600) || repeat < 1 || repeat > 100) {
    fprintf(stderr, "aural bench: --seconds must be 1..3600 and --repeat "
                    "1..100\n");
    return EXIT_USAGE;
  }
  for (int i = optind; i < argc; i++)
    if (strcmp(argv[i], "frontend") != 0) {
      fprintf(stderr, "aural bench: unknown suite '%s' (known: frontend)\n",
              argv[i]);
      return EXIT_USAGE;
    }

  frontend_case cases[] = {{16000, 1, 0, 0, 0}, {44100, 2, 0, 0, 0},
                           {48000, 1, 0, 0, 0}};
  size_t n_cases = sizeof cases / sizeof cases[0];
  for (size_t i = 0; i < n_cases; i++)
    if (bench_frontend_case(&cases[i], seconds, repeat) < 0) return EXIT_FAIL;

  if (json) {
    printf("{\"frontend\": [");
    for (size_t i = 0; i < n_cases; i++)
      printf("%s{\"rate_hz\": %.0f, \"channels\": %d, \"push_ms\": 10, "
             "\"frames\": %zu, \"cpu_us_per_frame\": %.3f, "
             "\"wall_us_per_frame\": %.3f}",
             i ? ", " : "", cases[i].rate_hz, cases[i].n_channels,
             cases[i].n_frames, cases[i].us_per_frame,
             cases[i].wall_us_per_frame);
    printf("]}\n");
  } else {
    printf("frontend, 10 ms per push, one thread, best of %d over %.0f s of "
           "audio:\n",
           repeat, seconds);
    for (size_t i = 0; i < n_cases; i++)
      printf("  %6.0f Hz x%d: %6.2f us CPU per frame (%.0fx real time)\n",
             cases[i].rate_hz, cases[i].n_channels, cases[i].us_per_frame,
             1e4 / cases[i].us_per_frame);
  }
  return EXIT_OK;
}
