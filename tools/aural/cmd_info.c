/* aural info: what a model file holds and what running it costs. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <aural.h>

#include "cli.h"
#include "words.h"

static void usage(FILE *to) {
  fprintf(to,
          "Usage: aural info [OPTIONS] [[-m] MODEL]\n"
          "\n"
          "Validates MODEL and prints its configuration, parameter count,\n"
          "weight memory, memory per stream, floating-point operations per\n"
          "10 ms frame, the compute kernels this CPU runs (AVX-512, AVX2 or\n"
          "scalar), and, for a model with a CTC head, the words resources\n"
          "beside it (MODEL.lexicon.txt, MODEL.lm.bin or .lm.arpa, each may\n"
          "be .gz): their size, load time and decoder state per stream, or\n"
          "why there are none (the model is valid either way). MODEL is by\n"
          "default the bundled model,\n"
          "  %s\n"
          "\n"
          "Options:\n"
          "  -m, --model PATH  the model, as MODEL (the same option as the\n"
          "                 other commands')\n"
          "      --f16      report weight memory with matrices held as f16\n"
          "      --precision P  load in precision P (f32 or bf16) and report\n"
          "                 its weight memory\n"
          "  -h, --help     show this help\n"
          "\n"
          "Exit status: 0 if the model is valid, 1 if not, 2 for a bad\n"
          "command line.\n",
          cli_default_model());
}

static const char *const act_names[] = {"relu", "gelu"};

/* The lexicon and LM beside the model, when there are: their size in
 * memory and how long they take to load. */
static void print_words(const aural_model *m, const char *path) {
  if (aural_model_get_config(m)->vocab_size == 0) return;
  words_res r;
  char err[600];
  double t0 = cli_now_s();
  if (words_load(&r, m, path, NULL, NULL, false, err, sizeof err) < 0) {
    printf("words        none (%s)\n", err);
    return;
  }
  double load_ms = (cli_now_s() - t0) * 1e3;
  aural_lexicon_info li;
  aural_lm_info mi;
  aural_lexicon_get_info(r.lex, &li);
  aural_lm_get_info(r.lm, &mi);
  printf("words        lexicon of %zu words (%zu pronunciations), %.1f MB; "
         "%d-gram LM (",
         li.n_words, li.n_prons, (double)li.memory_bytes / 1e6, mi.order);
  for (int k = 0; k < mi.order; k++)
    printf("%s%zu", k ? "+" : "", mi.n_grams[k]);
  printf(" n-grams), %.1f MB; loaded in %.0f ms\n",
         (double)mi.memory_bytes / 1e6, load_ms);
  aural_decoder *d;
  aural_err e;
  if (aural_decoder_create(NULL, m, r.lex, r.lm, &d, &e) == 0) {
    aural_decoder_info di;
    aural_decoder_get_info(d, &di);
    printf("             decoder state %zu bytes per stream (default beam)\n",
           di.memory_bytes);
    aural_decoder_destroy(d);
  }
  words_free(&r);
}

int cmd_info(int argc, char **argv) {
  static const struct option opts[] = {
      {"model", required_argument, NULL, 'm'},
      {"f16", no_argument, NULL, 'F'},
      {"precision", required_argument, NULL, 'P'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  aural_model_load_config lc;
  aural_model_load_config_default(&lc);
  const char *path = NULL;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
    switch (c) {
    case 'm': path = optarg; break;
    case 'F': lc.weights = AURAL_WEIGHTS_F16; break;
    case 'P':
      if (aural_model_precision_parse(optarg, &lc.precision) < 0) {
        fprintf(stderr, "aural info: --precision %s: expected f32 or bf16\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'h': usage(stdout); return EXIT_OK;
    default:
      fprintf(stderr, "(see 'aural info --help')\n");
      return EXIT_USAGE;
    }
  }
  if (argc - optind > (path == NULL ? 1 : 0)) {
    fprintf(stderr, "aural info: one MODEL at most (-m MODEL or MODEL)\n");
    return EXIT_USAGE;
  }
  if (lc.weights == AURAL_WEIGHTS_F16 &&
      lc.precision == AURAL_PRECISION_BF16) {
    fprintf(stderr, "aural info: --f16 and --precision bf16 exclude each "
                    "other (bf16 holds the weights as bfloat16)\n");
    return EXIT_USAGE;
  }
  if (path == NULL)
    path = optind < argc ? argv[optind] : cli_default_model();
  aural_model *m;
  aural_err err;
  if (aural_model_load(path, &lc, &m, &err) < 0) {
    fprintf(stderr, "aural info: %s\n", err.msg);
    return EXIT_FAIL;
  }
  const aural_model_config *mc = aural_model_get_config(m);
  aural_encoder_config ec;
  aural_encoder_config_default(&ec);
  size_t state = aural_encoder_state_bytes(m, &ec);
  /* Keys are kept transposed with the window padded to 16 (encoder.c). */
  size_t w_pad = ((size_t)mc->window + 15) / 16 * 16;
  size_t ring = (size_t)mc->n_layers * (size_t)mc->d_model *
                (w_pad + (size_t)mc->window) * sizeof(float);
  uint64_t flops = aural_model_flops_per_frame(m);
  printf("model        %s\n", path);
  printf("frontend     %.0f Hz, %d mel bins, %g ms windows every %g ms%s\n",
         mc->fbank.sample_rate_hz, mc->fbank.num_mel_bins,
         mc->fbank.frame_length_ms, mc->fbank.frame_shift_ms,
         mc->has_cmvn ? ", global CMVN" : "");
  printf("encoder      %d layers, d_model %d, %d heads of %d, d_ff %d, %s, "
         "%s\n",
         mc->n_layers, mc->d_model, mc->n_heads, mc->d_model / mc->n_heads,
         mc->d_ff, act_names[mc->activation],
         mc->norm_first ? "Pre-LN" : "Post-LN");
  printf("attention    causal window of %d frames (%.2f s), positions: %s",
         mc->window, mc->window * mc->fbank.frame_shift_ms / 1000,
         cli_pos_name(mc->pos_encoding));
  if (mc->pos_encoding == AURAL_POS_ROPE) printf(" (theta %g)", mc->rope_theta);
  printf("\nfinal norm   %s\n", mc->final_norm ? "yes" : "no");
  if (mc->lead_in_frames > 0)
    printf("lead-in      %d frames of silence (%.2f s) before each stream\n",
           mc->lead_in_frames,
           mc->lead_in_frames * mc->fbank.frame_shift_ms / 1000);
  if (mc->vocab_size > 0) {
    printf("CTC head     %d tokens:", mc->vocab_size);
    for (int i = 0; i < mc->vocab_size && i < 12; i++)
      printf(" %s", aural_model_token(m, i));
    printf("%s\n", mc->vocab_size > 12 ? " ..." : "");
  } else {
    printf("CTC head     none\n");
  }
  printf("parameters   %llu (%.2f M)\n",
         (unsigned long long)aural_model_n_params(m),
         (double)aural_model_n_params(m) / 1e6);
  printf("weights      %.2f MB in memory (%s matrices)\n",
         (double)aural_model_weight_bytes(m) / 1e6,
         aural_model_precision(m) == AURAL_PRECISION_BF16 ? "bf16"
         : lc.weights == AURAL_WEIGHTS_F16                 ? "f16"
                                                           : "f32");
  printf("precision    %s; modes on this CPU: f32 (default, exact), bf16 "
         "(opt-in, approximate: %s)\n",
         aural_model_precision_name(aural_model_precision(m)),
         cli_bf16_method());
  printf("per stream   %zu bytes (%.2f MB): KV rings %zu bytes, scratch for "
         "%zu-frame batches %zu bytes\n",
         state, (double)state / 1e6, ring, ec.max_batch_frames, state - ring);
  printf("cost         %.3f MFLOP per frame (%.3f GFLOP/s for one real-time "
         "stream)\n",
         (double)flops / 1e6, (double)flops * 100 / 1e9);
  printf("kernels      %s on this CPU (AURAL_ISA chooses): %s\n",
         aural_isa_name(), aural_gemm_name());
  print_words(m, path);
  aural_model_free(m);
  return EXIT_OK;
}
