/* aural pronounce: custom words as the decoder will spell them. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <aural.h>

#include "cli.h"
#include "words.h"

static void usage(FILE *to) {
  fprintf(to,
          "Usage: aural pronounce [OPTIONS] WORD...\n"
          "\n"
          "Prints each WORD's pronunciations in the model's tokens, one line\n"
          "\"WORD<TAB>TOKEN ...\" per distinct pronunciation, as a decoder\n"
          "given --vocabulary WORD spells it: espeak-ng's phonemes in each\n"
          "dialect of the g2p map, mapped into the model's tokens the way its\n"
          "training labels were. The lines are in the lexicon's format.\n"
          "\n"
          "A WORD is 1-64 bytes of UTF-8 without spaces, commas or control\n"
          "characters, and does not start with '#' or a byte order mark\n"
          "(U+FEFF); at most 1024 WORDs.\n"
          "\n"
          "Options:\n"
          "  -m, --model PATH   the model (default: the bundled one)\n"
          "      --g2p PATH     the g2p map (default: MODEL.g2p.txt)\n"
          "  -h, --help         show this help\n"
          "\n"
          "Example:\n"
          "  aural pronounce Dashwood Kubernetes\n"
          "\n"
          "Exit status: 0 on success, 1 when a word cannot be pronounced or\n"
          "a file cannot be read, 2 for a bad command line (a WORD of the\n"
          "wrong form among them, or more than 1024).\n");
}

int cmd_pronounce(int argc, char **argv) {
  static const struct option opts[] = {
      {"model", required_argument, NULL, 'm'},
      {"g2p", required_argument, NULL, 'Y'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *model_path = NULL, *g2p_path = NULL;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
    switch (c) {
    case 'm': model_path = optarg; break;
    case 'Y': g2p_path = optarg; break;
    case 'h': usage(stdout); return EXIT_OK;
    default:
      fprintf(stderr, "(see 'aural pronounce --help')\n");
      return EXIT_USAGE;
    }
  }
  if (optind == argc) {
    fprintf(stderr, "aural pronounce: no WORD given\n"
                    "(see 'aural pronounce --help')\n");
    return EXIT_USAGE;
  }
  /* A word that no model could take is a bad command line, told before
   * the model is loaded; so are more words than a lexicon of custom words
   * holds (aural_g2p_text's 1024). */
  if (argc - optind > 1024) {
    fprintf(stderr, "aural pronounce: %d words (at most 1024)\n"
                    "(see 'aural pronounce --help')\n",
            argc - optind);
    return EXIT_USAGE;
  }
  for (int i = optind; i < argc; i++) {
    aural_err werr = {0};
    if (aural_g2p_check_word(argv[i], &werr) < 0) {
      fprintf(stderr, "aural pronounce: %s\n(see 'aural pronounce --help')\n",
              werr.msg);
      return EXIT_USAGE;
    }
  }
  if (model_path == NULL) model_path = cli_default_model();
  char path_buf[4096];
  char why[4200];
  int beside = 0; /* words_g2p_beside(), when the map is the model's */
  if (g2p_path == NULL) {
    beside = words_g2p_beside(model_path, path_buf, sizeof path_buf, why,
                              sizeof why);
    if (beside == -1) {
      fprintf(stderr, "aural pronounce: %s\n", why);
      return EXIT_USAGE;
    }
    g2p_path = path_buf;
  }
  aural_err err = {0};
  aural_model *model = NULL;
  aural_g2p *g2p = NULL;
  char *text = NULL;
  int rc = EXIT_FAIL;
  if (aural_model_load(model_path, NULL, &model, &err) < 0) {
    fprintf(stderr, "aural pronounce: %s\n", err.msg);
  } else if (beside < 0) { /* the model first: its absence says more */
    fprintf(stderr, "aural pronounce: %s\n", why);
  } else if (aural_g2p_load(g2p_path, model, &g2p, &err) == 0 &&
             aural_g2p_text(g2p, (const char *const *)(argv + optind),
                            (size_t)(argc - optind), &text, &err) == 0) {
    fputs(text, stdout); /* main() checks that it arrived */
    rc = EXIT_OK;
  } else {
    fprintf(stderr, "aural pronounce: %s\n", err.msg);
  }
  free(text);
  aural_g2p_destroy(g2p);
  aural_model_free(model);
  return rc;
}
