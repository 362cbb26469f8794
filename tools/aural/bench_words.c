/*
 * aural bench words: what the words decoder costs beside the encoder, on
 * the same audio (the bundled recording, repeated): CPU per frame of the
 * encoder (chunk mode, through aural_stream) and of the decoder at its
 * settings, and the decoder's memory per stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <aural.h>

#include "bench_words.h"
#include "cli.h"
#include "words.h"

/* The recording at the model's rate, as features and logits: runs the
 * stream over it `reps` times and keeps every frame's logits. Returns the
 * encoder's CPU seconds (computes only), or -1. */
static double encode(const aural_model *m, const float *pcm, size_t n,
                     double rate, int reps, float **logits, size_t *n_frames) {
  aural_stream_config sc;
  aural_stream_config_default(&sc);
  sc.input_rate_hz = rate;
  sc.outputs = AURAL_STREAM_LOGITS;
  aural_stream *s;
  aural_err err;
  if (aural_stream_create(m, &sc, &s, &err) < 0) {
    fprintf(stderr, "aural bench: %s\n", err.msg);
    return -1;
  }
  aural_stream_info in;
  aural_stream_get_info(s, &in);
  size_t v = (size_t)in.vocab_size, cap = 0, got = 0;
  float *lg = NULL, *chunk = malloc(in.chunk_frames * v * sizeof *chunk);
  double cpu = 0;
  aural_chunk ch = {.logits = chunk, .max_frames = in.chunk_frames};
  for (int r = 0; r <= reps; r++) {
    size_t at = 0;
    while (at < n || r == reps) {
      if (r == reps) {
        aural_stream_end(s);
      } else {
        size_t taken;
        aural_stream_push(s, pcm + at, n - at, &taken);
        at += taken;
      }
      double t0 = cli_thread_cpu_s();
      aural_stream_compute(s);
      cpu += cli_thread_cpu_s() - t0;
      while (aural_stream_pull(s, &ch) == 1) {
        if (got + ch.n_frames > cap) {
          cap = (got + ch.n_frames) * 2;
          float *p = realloc(lg, cap * v * sizeof *p);
          if (p == NULL) break;
          lg = p;
        }
        memcpy(lg + got * v, chunk, ch.n_frames * v * sizeof *lg);
        got += ch.n_frames;
      }
      if (r == reps) break;
    }
  }
  free(chunk);
  aural_stream_destroy(s);
  *logits = lg;
  *n_frames = got;
  return cpu;
}

int bench_words(const char *model_path, const char *lexicon_path,
                const char *lm_path, int beam, double seconds, int repeat,
                char **json) {
  aural_err err;
  aural_model *m;
  if (aural_model_load(model_path, NULL, &m, &err) < 0) {
    fprintf(stderr, "aural bench: %s\n", err.msg);
    return -1;
  }
  words_res res;
  char msg[600];
  double t0 = cli_now_s();
  if (words_load(&res, m, model_path, lexicon_path, lm_path, true, msg,
                 sizeof msg) < 0) {
    fprintf(stderr, "aural bench: %s\n", msg);
    aural_model_free(m);
    return -1;
  }
  double load_s = cli_now_s() - t0;
  aural_audiofile *af;
  int rc = aural_audiofile_open(cli_default_sample(), &af, &err);
  aural_audiofile_info ai = {0};
  float *pcm = NULL;
  size_t n = 0;
  if (rc == 0) {
    aural_audiofile_get_info(af, &ai);
    pcm = malloc((size_t)ai.n_frames * (size_t)ai.n_channels * sizeof *pcm);
    rc = pcm == NULL ? -1
                     : aural_audiofile_read(af, pcm, (size_t)ai.n_frames, &n,
                                            &err);
    aural_audiofile_close(af);
  }
  float *lg = NULL;
  size_t frames = 0;
  int reps = (int)(seconds / ((double)n / ai.rate_hz)) + 1;
  double enc_s = rc == 0 && ai.n_channels == 1
                     ? encode(m, pcm, n, ai.rate_hz, reps, &lg, &frames)
                     : -1;
  free(pcm);
  aural_decoder_config dc;
  aural_decoder_config_default(&dc);
  if (beam > 0) dc.beam = beam;
  aural_decoder *d = NULL;
  if (enc_s < 0 || lg == NULL ||
      aural_decoder_create(&dc, m, res.lex, res.lm, &d, &err) < 0) {
    fprintf(stderr, "aural bench: cannot run the words benchmark%s%s\n",
            enc_s < 0 ? "" : ": ", enc_s < 0 ? "" : err.msg);
    free(lg);
    words_free(&res);
    aural_model_free(m);
    return -1;
  }
  int vocab = aural_model_get_config(m)->vocab_size;
  double dec_s = 1e30;
  aural_word w[1];
  size_t nw;
  for (int r = 0; r < repeat; r++) {
    aural_decoder_reset(d);
    double c0 = cli_thread_cpu_s();
    for (size_t at = 0; at < frames;) {
      at += aural_decoder_push(d, lg + at * (size_t)vocab, frames - at);
      aural_decoder_final(d, w, 1, &nw);
    }
    aural_decoder_end(d);
    aural_decoder_final(d, w, 1, &nw);
    double c = cli_thread_cpu_s() - c0;
    if (c < dec_s) dec_s = c;
  }
  aural_decoder_info di;
  aural_decoder_get_info(d, &di);
  aural_lexicon_info li;
  aural_lexicon_get_info(res.lex, &li);
  aural_lm_info mi;
  aural_lm_get_info(res.lm, &mi);
  double enc_us = enc_s / (double)frames * 1e6, dec_us = dec_s / (double)frames * 1e6;
  int rc_out = 0;
  if (json != NULL) {
    char member[512];
    snprintf(member, sizeof member,
             "\"words\": {\"frames\": %zu, \"encoder_us_per_frame\": %.3f, "
             "\"decoder_us_per_frame\": %.3f, \"decoder_over_encoder\": "
             "%.4f, \"beam\": %d, \"decoder_bytes_per_stream\": %zu, "
             "\"lexicon_bytes\": %zu, \"lm_bytes\": %zu, \"load_s\": %.3f, "
             "\"segments\": %llu}",
             frames, enc_us, dec_us, dec_us / enc_us, dc.beam, di.memory_bytes,
             li.memory_bytes, mi.memory_bytes, load_s,
             (unsigned long long)di.segments);
    *json = strdup(member);
    if (*json == NULL) {
      fprintf(stderr, "aural bench: out of memory\n");
      rc_out = -1;
    }
  } else
    printf("words (%zu frames of the bundled recording, one thread):\n"
           "  encoder   %8.2f us CPU per frame (chunks of 50, with the "
           "frontend's features)\n"
           "  decoder   %8.2f us CPU per frame at beam %d: %.1f%% of the "
           "encoder\n"
           "  memory    %zu bytes per stream (decoder); shared: lexicon %.1f "
           "MB (%zu words), LM %.1f MB (%zu+%zu+%zu n-grams)\n"
           "  loading   %.0f ms (lexicon and LM)\n",
           frames, enc_us, dec_us, dc.beam, 100 * dec_us / enc_us,
           di.memory_bytes, (double)li.memory_bytes / 1e6, li.n_words,
           (double)mi.memory_bytes / 1e6, mi.n_grams[0], mi.n_grams[1],
           mi.n_grams[2], load_s * 1e3);
  aural_decoder_destroy(d);
  free(lg);
  words_free(&res);
  aural_model_free(m);
  return rc_out;
}
