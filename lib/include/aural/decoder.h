/*
 * aural/decoder.h — words from a CTC phoneme model, streaming.
 *
 *   aural_lexicon *lex;
 *   aural_lm *lm;
 *   aural_decoder *dec;
 *   aural_lexicon_load("default.lexicon.txt.gz", model, &lex, &err);
 *   aural_lm_load("default.lm.bin.gz", lex, &lm, &err);
 *   aural_decoder_config dc;
 *   aural_decoder_config_default(&dc);
 *   aural_decoder_create(&dc, model, lex, lm, &dec, &err);
 *   aural_decoder_info di;
 *   aural_decoder_get_info(dec, &di);
 *   size_t cap = di.max_words;                    // always enough
 *   aural_word *words = malloc(cap * sizeof *words);
 *   // each chunk's logits (n_frames, vocab_size), as aural_stream pulls them:
 *   for (size_t at = 0; at < n_frames;) {
 *     at += aural_decoder_push(dec, logits + at * vocab, n_frames - at);
 *     if (aural_decoder_final(dec, words, cap, &n) == 1) show_final(words, n);
 *   }
 *   n = aural_decoder_partial(dec, words, cap);   // may still change
 *   ...
 *   aural_decoder_end(dec);                       // end of stream
 *   if (aural_decoder_final(dec, words, cap, &n) == 1) show_final(words, n);
 *
 * The lexicon maps words to one or more pronunciations in the model's
 * tokens; the language model is a word n-gram model with backoff (ARPA,
 * up to 4-grams). Both are read-only after loading and shared by any
 * number of decoders. A decoder is one stream's CTC prefix beam search
 * over the lexicon's prefix tree, scored in natural-log units: acoustic
 * log-posteriors (the blank's lowered by blank_penalty) + lm_weight * LM
 * log-probability + word_penalty per word.
 * Hypotheses that reach the same state (LM context, place in the tree,
 * last token) are merged: when they hold the same words (another
 * alignment of them) their probabilities add, else the better is kept
 * (sum_alignments; with it off, always the better: Viterbi). The LM's
 * best unigram below each tree node is added early, so that pruning sees
 * it.
 *
 * Endpoints (DESIGN.md §8) come from the posteriors: a frame is
 * non-speech when blank is its most likely token. A segment ends after
 * endpoint_silence_s of trailing non-speech once something was decoded,
 * after endpoint_idle_s when nothing was (the decoder then starts afresh,
 * with a final only where the best hypothesis was inside a word and one
 * between words held some), once it reaches endpoint_max_s at its first
 * non-speech frame with the best hypothesis between words (so that no
 * word is cut in two; endpoint_silence_s later at the latest), and at the
 * end of the stream. Each ended segment with words is a final: its words, times
 * and confidences never change. What the best hypothesis holds between
 * finals is the partial.
 *
 * Outputs depend only on the sequence of frames, not on how it is split
 * into pushes. State is allocated at create and bounded by the beam and
 * endpoint_max_s, whatever the stream's length; push allocates nothing.
 * A decoder is not thread-safe; distinct decoders are independent.
 */
#ifndef AURAL_DECODER_H
#define AURAL_DECODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aural/error.h"
#include "aural/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- resources beside a model --------------------------------------------- */

/* A model's words resources live beside it: for MODEL.safetensors,
 * MODEL.lexicon.txt, MODEL.g2p.txt and the LM, MODEL.lm.bin (aural's
 * binary form, tools/words/lmbin.py) or MODEL.lm.arpa. Each may be stored
 * gzipped (the same name + ".gz", as the default model's LM and lexicon
 * are); every loader below reads either form, from a file or a buffer.
 * This writes into out the path of the resource named by suffix
 * (".lexicon.txt", ...): the plain file when it exists, else the gzipped
 * one when that exists, else the plain name (a loader then says it is
 * missing). The suffix ".lm" names the LM in either form: the first of
 * MODEL.lm.bin, MODEL.lm.bin.gz, MODEL.lm.arpa, MODEL.lm.arpa.gz that
 * exists, else MODEL.lm.bin. Returns 0, -ENAMETOOLONG when the path
 * (or its gzipped form) does not fit in cap, or AURAL_EINVAL when an
 * argument is NULL.
 * Thread-safe; it asks the file system, so not for a real-time path. */
int aural_decoder_resource_path(const char *model_path, const char *suffix,
                                char *out, size_t cap);

/* --- lexicon -------------------------------------------------------------- */

typedef struct aural_lexicon aural_lexicon;

/* Reads a lexicon: UTF-8 text, one pronunciation per line,
 * "word<TAB>token token ...", tokens from the model's vocabulary (not the
 * blank) apart by spaces or tabs; a word may have several lines. Blank
 * lines and lines starting with '#' are skipped. Errors name the file,
 * line and what is wrong; no text, model or out pointer is AURAL_EINVAL. */
int aural_lexicon_load(const char *path, const aural_model *model,
                       aural_lexicon **out, aural_err *err);
/* The same from text in memory (len bytes); name is used in messages. */
int aural_lexicon_load_buffer(const char *text, size_t len, const char *name,
                              const aural_model *model, aural_lexicon **out,
                              aural_err *err);
void aural_lexicon_destroy(aural_lexicon *lex);

typedef struct aural_lexicon_info {
  size_t n_words;          /* distinct words */
  size_t n_prons;          /* pronunciations */
  size_t n_nodes;          /* prefix-tree nodes */
  size_t memory_bytes;     /* what the loaded lexicon holds */
} aural_lexicon_info;

void aural_lexicon_get_info(const aural_lexicon *lex, aural_lexicon_info *info);

/* The id of word (0..n_words-1), or -1 when the lexicon lacks it (or
 * either argument is NULL). */
int aural_lexicon_find(const aural_lexicon *lex, const char *word);
/* The text of word id; NULL when out of range (or lex is NULL). */
const char *aural_lexicon_word(const aural_lexicon *lex, int id);

/* --- language model ------------------------------------------------------- */

typedef struct aural_lm aural_lm;

/* Reads an n-gram model (orders 1 to 4) over the lexicon's words, in ARPA
 * text or aural's binary form (it starts "AURALLMB": tools/words/lmbin.py
 * writes it from ARPA; it loads several times faster, and its n-grams of
 * order 2 and up hold one of 256 probability levels per order), either
 * one plain or gzipped: n-grams with a word the lexicon lacks are dropped
 * (it cannot be recognized), <s> and </s> are required, <unk> is optional
 * (the LM's probability for lexicon words it does not list); an LM with
 * neither <unk> nor any word of the lexicon is refused. Errors name
 * the file, the line or n-gram, and what is wrong; no data, lexicon or
 * out pointer is AURAL_EINVAL. */
int aural_lm_load(const char *path, const aural_lexicon *lex, aural_lm **out,
                  aural_err *err);
int aural_lm_load_buffer(const char *data, size_t len, const char *name,
                         const aural_lexicon *lex, aural_lm **out,
                         aural_err *err);
void aural_lm_destroy(aural_lm *lm);

typedef struct aural_lm_info {
  int order;                /* highest n */
  size_t n_grams[4];        /* kept, per order */
  size_t n_dropped;         /* n-grams over words the lexicon lacks */
  size_t memory_bytes;
} aural_lm_info;

void aural_lm_get_info(const aural_lm *lm, aural_lm_info *info);

/* log10 P(words[n-1] | words[0..n-2]) with backoff, the ARPA way; word
 * ids are the lexicon's, AURAL_LM_BOS for <s>, AURAL_LM_EOS for </s>.
 * For tests and tools; the decoder scores incrementally. */
#define AURAL_LM_BOS (-2)
#define AURAL_LM_EOS (-3)
double aural_lm_score(const aural_lm *lm, const int *words, size_t n);

/* --- custom words ---------------------------------------------------------- */

/* Words a lexicon lacks (names, technical terms), pronounced at run time
 * by espeak-ng's grapheme-to-phoneme rules (libespeak-ng) and mapped into
 * the model's tokens exactly as its training labels were: a g2p map file,
 * written beside the model by the tool that writes its lexicon
 * (tools/words/build_resources.py), names the dialects to pronounce each
 * word in and, per dialect, the model's tokens for each espeak-ng
 * mnemonic:
 *
 *   # comment
 *   drop ',%=;                 characters dropped from mnemonics (stress)
 *   dialect en-us              an espeak-ng voice; the lines below are its
 *   map A@ AA R                mnemonic -> 0 to 4 tokens (none: says nothing)
 *   after r ER R               mnemonic r says nothing right after ER or R
 *                              (1 to 8 tokens)
 *
 * Each word gets one pronunciation per distinct result over the dialects.
 * The map is untrusted input: errors name the file, line and what is
 * wrong (no text, model or out pointer: AURAL_EINVAL). libespeak-ng is
 * not reentrant: calls into it are serialized. */
typedef struct aural_g2p aural_g2p;

int aural_g2p_load(const char *path, const aural_model *model, aural_g2p **out,
                   aural_err *err);
int aural_g2p_load_buffer(const char *text, size_t len, const char *name,
                          const aural_model *model, aural_g2p **out,
                          aural_err *err);
void aural_g2p_destroy(aural_g2p *g);

/* The lexicon of n words (each 1..64 bytes of UTF-8 without spaces,
 * commas or control characters, not starting with '#', which starts a
 * lexicon's comments, or U+FEFF, a file's byte order mark; n <= 1024),
 * spelled as given: the word a decoder then outputs. Errors name the word
 * (one espeak-ng cannot say, or with a phoneme the map lacks); no map,
 * words or out pointer is AURAL_EINVAL. For
 * aural_decoder_config.boost_words. */
int aural_g2p_lexicon(const aural_g2p *g, const char *const *words, size_t n,
                      aural_lexicon **out, aural_err *err);
/* The same as lexicon text ("word<TAB>tok tok ...\n" per pronunciation),
 * malloc'd into *out, for tools. */
int aural_g2p_text(const aural_g2p *g, const char *const *words, size_t n,
                   char **out, aural_err *err);
/* Whether word has the form the two above take (without pronouncing it):
 * 0, or AURAL_EINVAL with err naming the problem (NULL: none given). For a tool to tell a
 * bad command line from a word that cannot be said. Thread-safe. */
int aural_g2p_check_word(const char *word, aural_err *err);

/* --- decoder -------------------------------------------------------------- */

typedef struct aural_decoder_config {
  /* Defaults tuned on a dev set of training-split sentences that the LM
   * never saw (tools/words/README.md), never on the test set. */
  int beam;                /* hypotheses kept after each frame (64) */
  float beam_threshold;    /* and only those within this of the best (14) */
  int max_tokens;          /* tokens tried per frame: the most likely (8) */
  float token_threshold;   /* ... within this of the frame's best (10) */
  float lm_weight;         /* weight of the LM's natural-log score (0.8) */
  float word_penalty;      /* added per word (-1) */
  /* Subtracted from the blank's log-posterior in the search, not in the
   * endpoint rules: CTC's blank takes most frames, and a model unsure
   * between blank and a token loses the token (1.5). */
  float blank_penalty;
  float endpoint_silence_s; /* trailing non-speech that ends a segment (0.8) */
  float endpoint_idle_s;   /* ... when nothing was decoded: a reset (2.4) */
  float endpoint_max_s;    /* longest segment, but for the word in
                            * progress (20; see the top) */
  /* Custom words (NULL: none), a lexicon such as aural_g2p_lexicon makes,
   * which must outlive the decoder: searched beside the main lexicon, each
   * word's score raised by boost (natural log, default 7, chosen on a
   * dev set: tools/words/vocab_eval.py tune). A word the LM
   * lists (in lower case) gets its LM score; another, the LM's <unk> (or
   * its lowest unigram when it has no <unk>). */
  const aural_lexicon *boost_words;
  float boost;
  /* Merged hypotheses with the same words add their probabilities (true,
   * the default: 0.2 points fewer word errors on the dev set than keeping
   * the better alignment, false). */
  bool sum_alignments;
} aural_decoder_config;

void aural_decoder_config_default(aural_decoder_config *cfg);

typedef struct aural_decoder aural_decoder;

/* model gives the vocabulary and the frame duration; lex and lm (lm may be
 * NULL: words are then scored by the penalty alone; else loaded over lex)
 * must outlive the decoder. Returns 0, AURAL_EINVAL (no model, lexicon or
 * out pointer), AURAL_ECONFIG (a setting out of range, a lexicon made for
 * another vocabulary, an LM loaded over another lexicon) or AURAL_ENOMEM,
 * with err naming the problem. */
int aural_decoder_create(const aural_decoder_config *cfg,
                         const aural_model *model, const aural_lexicon *lex,
                         const aural_lm *lm, aural_decoder **out,
                         aural_err *err);
void aural_decoder_destroy(aural_decoder *dec);

/* One recognized word. Frames count from the stream's first: the word
 * spans [start_frame, end_frame). */
typedef struct aural_word {
  const char *text;         /* the lexicon's; valid while it lives */
  uint64_t start_frame, end_frame;
  float confidence;         /* in [0, 1] */
} aural_word;

/* Consumes logits (n_frames, vocab_size), raw CTC head outputs, and
 * returns how many frames it took: all of them, or fewer when a segment
 * ended at the last one taken (read it with aural_decoder_final, then
 * push the rest). After aural_decoder_end it takes nothing; nor does it
 * from a NULL dec or NULL logits. The calls below take a NULL dec as a
 * decoder with nothing to give (end and reset do nothing; get_info gives
 * zeros). */
size_t aural_decoder_push(aural_decoder *dec, const float *logits,
                          size_t n_frames);

/* The stream ended: the open segment, if it has words, becomes final. */
void aural_decoder_end(aural_decoder *dec);

/* The final segment waiting, if any: its words into out (at most cap;
 * none when out is NULL; *n_words, unless NULL, says how many there were,
 * which may exceed cap), and it is cleared. Returns 1, or 0 when none is
 * waiting. */
int aural_decoder_final(aural_decoder *dec, aural_word *out, size_t cap,
                        size_t *n_words);

/* The partial hypothesis: the words of the open segment so far, at most
 * cap of them into out (NULL: none, only counted). Returns how many there
 * are (may exceed cap). */
size_t aural_decoder_partial(const aural_decoder *dec, aural_word *out,
                             size_t cap);

typedef struct aural_decoder_info {
  uint64_t frames;          /* frames consumed */
  uint64_t segments;        /* finals produced */
  size_t memory_bytes;      /* the decoder's own, fixed at create */
  size_t max_words;         /* a final or the partial has at most these */
  uint64_t min_segment_frames; /* finals end at least this far apart */
} aural_decoder_info;

/* Starts afresh, as after create: frame 0, no segment, nothing waiting. */
void aural_decoder_reset(aural_decoder *dec);

void aural_decoder_get_info(const aural_decoder *dec, aural_decoder_info *info);

#ifdef __cplusplus
}
#endif

#endif
