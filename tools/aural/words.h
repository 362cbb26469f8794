/* Words for the CLI: the lexicon and LM beside a model, a decoder over a
 * stream's logits, and the transcript in txt, json, srt or vtt. */
#ifndef AURAL_CLI_WORDS_H
#define AURAL_CLI_WORDS_H

#include <stdbool.h>
#include <stdio.h>

#include <aural.h>

typedef enum words_format { WORDS_TXT, WORDS_JSON, WORDS_SRT, WORDS_VTT } words_format;

extern const char *const words_format_names[4]; /* "txt", "json", ... */

/* "txt", "json", "srt" or "vtt"; -1 when unknown. */
int words_format_parse(const char *name);

/* The resources, shared by any number of transcripts. */
typedef struct words_res {
  aural_lexicon *lex;
  aural_lm *lm;
  aural_g2p *g2p;        /* words_custom's, or NULL */
  aural_lexicon *custom; /* custom words (words_custom), or NULL */
} words_res;

/* Loads the lexicon and the LM: the paths given, else those beside the
 * model file (MODEL.lexicon.txt and MODEL.lm.bin or MODEL.lm.arpa, for
 * MODEL.safetensors, each plain or gzipped: aural_decoder_resource_path).
 * Returns 0, or -1 with err set; the message points to --lexicon and --lm
 * when the command takes them (options), else to the files' places. */
int words_load(words_res *r, const aural_model *model, const char *model_path,
               const char *lexicon_path, const char *lm_path, bool options,
               char *err, size_t err_len);
/* Custom words: list is comma-separated ("Dashwood,Kubernetes"),
 * pronounced through the g2p map g2p_path, else the one beside the model
 * (MODEL.g2p.txt), into r->custom. Returns 0, or -1 with err set. */
int words_custom(words_res *r, const aural_model *model, const char *model_path,
                 const char *g2p_path, const char *list, char *err,
                 size_t err_len);
/* The g2p map beside the model at model_path (MODEL.g2p.txt) into buf.
 * Returns 0; -1 when the path does not fit, -2 when no map is there (err
 * says so and names --g2p). */
int words_g2p_beside(const char *model_path, char *buf, size_t len,
                     char *err, size_t err_len);
/* Whether list is a --vocabulary that words_custom() takes (at most 1,024
 * words, none empty), checked before anything is loaded. Returns 0, or -1
 * with err naming the option. */
int words_custom_check(const char *list, char *err, size_t err_len);
/* Splits a comma-separated list into at most cap words (pointers into
 * buf, a copy the caller gives room for). Returns how many, or -1 (an
 * empty item, or more than cap). */
int words_split(const char *list, char *buf, size_t buf_len, char **out,
                size_t cap);
void words_free(words_res *r);

struct aural_msg_vocabulary;
/* A request's custom words (aurald's SUBSCRIBE or AUDIO_OPEN) from
 * --vocabulary LIST and --boost X (NULL: the server's default). Returns 0,
 * or -1 with err naming the option. */
int words_request(const char *list, const char *boost,
                  struct aural_msg_vocabulary *v, char *err, size_t err_len);

/* One stream's transcript: every final segment so far, from its chunks. */
typedef struct words_run {
  double frame_s;
  aural_word *words;  /* every final word, in order */
  size_t n_words, cap_words;
  size_t *seg_end;    /* each segment's end in words[] */
  size_t n_segs, cap_segs;
  FILE *live;         /* each final as a line as it comes, or NULL */
} words_run;

void words_start(words_run *w, double frame_s, FILE *live);
/* The finals of a chunk pulled with AURAL_STREAM_WORDS. Returns 0 or -1
 * (memory). */
int words_chunk(words_run *w, const aural_chunk *ch);
/* Writes the transcript. Returns 0, or -1 when writing failed. */
int words_write(const words_run *w, FILE *to, words_format format);
void words_stop(words_run *w);

#endif
