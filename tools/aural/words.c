/*
 * Words for the CLI (words.h): a decoder over one stream's logits, its
 * finals kept in order, and the transcript written as plain text, JSON or
 * subtitles (SRT, WebVTT: a final segment in cues of a readable size).
 */
#include "words.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <aural/proto.h>

#include "cli.h"

const char *const words_format_names[4] = {"txt", "json", "srt", "vtt"};

int words_format_parse(const char *name) {
  for (int i = 0; i < 4; i++)
    if (strcmp(name, words_format_names[i]) == 0) return i;
  return -1;
}

int words_load(words_res *r, const aural_model *model, const char *model_path,
               const char *lexicon_path, const char *lm_path, bool options,
               char *err, size_t err_len) {
  *r = (words_res){0};
  char lex_buf[4096], lm_buf[4096];
  if ((lexicon_path == NULL &&
       aural_decoder_resource_path(model_path, ".lexicon.txt", lex_buf,
                                   sizeof lex_buf) < 0) ||
      (lm_path == NULL &&
       aural_decoder_resource_path(model_path, ".lm", lm_buf,
                                   sizeof lm_buf) < 0)) {
    snprintf(err, err_len, "%s: the model's path is too long", model_path);
    return -1;
  }
  if (lexicon_path == NULL) lexicon_path = lex_buf;
  if (lm_path == NULL) lm_path = lm_buf;
  aural_err e = {0};
  if (aural_lexicon_load(lexicon_path, model, &r->lex, &e) < 0 ||
      aural_lm_load(lm_path, r->lex, &r->lm, &e) < 0) {
    snprintf(err, err_len, "%s (words need a lexicon and a language model: "
                           "%s)", e.msg,
             options ? "--lexicon and --lm"
                     : "MODEL.lexicon.txt and MODEL.lm.bin or .lm.arpa "
                       "beside the model, each may be .gz");
    words_free(r);
    return -1;
  }
  return 0;
}

int words_split(const char *list, char *buf, size_t buf_len, char **out,
                size_t cap) {
  size_t len = strlen(list);
  if (len + 1 > buf_len) return -1;
  memcpy(buf, list, len + 1);
  size_t n = 0;
  for (char *p = buf;;) {
    char *comma = strchr(p, ',');
    if (comma != NULL) *comma = '\0';
    if (*p == '\0' || n == cap) return -1;
    out[n++] = p;
    if (comma == NULL) return (int)n;
    p = comma + 1;
  }
}

/* Room for one --vocabulary list of aural encode: its copy, and its words. */
#define CUSTOM_LIST_BYTES 65536
#define CUSTOM_WORDS_MAX 1024

static int custom_split(const char *list, char *buf, char **words, char *err,
                        size_t err_len) {
  int n = words_split(list, buf, CUSTOM_LIST_BYTES, words, CUSTOM_WORDS_MAX);
  if (n < 0)
    snprintf(err, err_len, "--vocabulary: a comma-separated list of at most "
                           "%d words (%d bytes), none empty",
             CUSTOM_WORDS_MAX, CUSTOM_LIST_BYTES - 1);
  return n;
}

int words_custom_check(const char *list, char *err, size_t err_len) {
  char *buf = malloc(CUSTOM_LIST_BYTES);
  char **words = malloc(CUSTOM_WORDS_MAX * sizeof *words);
  int n = -1;
  if (buf == NULL || words == NULL)
    snprintf(err, err_len, "--vocabulary: out of memory");
  else
    n = custom_split(list, buf, words, err, err_len);
  free(words);
  free(buf);
  return n < 0 ? -1 : 0;
}

int words_g2p_beside(const char *model_path, char *buf, size_t len,
                     char *err, size_t err_len) {
  if (aural_decoder_resource_path(model_path, ".g2p.txt", buf, len) < 0) {
    snprintf(err, err_len, "%s: the model's path is too long", model_path);
    return -1;
  }
  if (access(buf, F_OK) != 0 && errno == ENOENT) {
    snprintf(err, err_len,
             "%s: no g2p map beside the model (custom words need one; "
             "give it with --g2p PATH)", buf);
    return -2;
  }
  return 0;
}

int words_custom(words_res *r, const aural_model *model, const char *model_path,
                 const char *g2p_path, const char *list, char *err,
                 size_t err_len) {
  char path_buf[4096], buf[CUSTOM_LIST_BYTES];
  char *words[CUSTOM_WORDS_MAX];
  int n = custom_split(list, buf, words, err, err_len);
  if (n < 0) return -1;
  if (g2p_path == NULL) {
    if (words_g2p_beside(model_path, path_buf, sizeof path_buf, err,
                         err_len) < 0)
      return -1;
    g2p_path = path_buf;
  }
  aural_err e = {0};
  if ((r->g2p == NULL && aural_g2p_load(g2p_path, model, &r->g2p, &e) < 0) ||
      aural_g2p_lexicon(r->g2p, (const char *const *)words, (size_t)n,
                        &r->custom, &e) < 0) {
    snprintf(err, err_len, "%s", e.msg);
    return -1;
  }
  return 0;
}

int words_request(const char *list, const char *boost,
                  struct aural_msg_vocabulary *v, char *err, size_t err_len) {
  char buf[AURAL_PROTO_VOCAB_MAX * (AURAL_PROTO_VOCAB_WORD_MAX + 1) + 1];
  char *words[AURAL_PROTO_VOCAB_MAX];
  memset(v, 0, sizeof *v);
  int n = words_split(list, buf, sizeof buf, words, AURAL_PROTO_VOCAB_MAX);
  for (int i = 0; i < n; i++)
    if (strlen(words[i]) > AURAL_PROTO_VOCAB_WORD_MAX) n = -1;
  if (n < 0) {
    snprintf(err, err_len, "--vocabulary: a comma-separated list of at most "
                           "%d words of at most %d bytes, none empty",
             AURAL_PROTO_VOCAB_MAX, AURAL_PROTO_VOCAB_WORD_MAX);
    return -1;
  }
  /* A word that no server can take (a space, a leading '#', ...) is a
   * bad command line, told before anything is sent. */
  for (int i = 0; i < n; i++) {
    aural_err werr = {0};
    if (aural_g2p_check_word(words[i], &werr) < 0) {
      snprintf(err, err_len, "--vocabulary: %s", werr.msg);
      return -1;
    }
  }
  for (int i = 0; i < n; i++) strcpy(v->words[i], words[i]);
  v->n_words = (uint32_t)n;
  if (boost != NULL) {
    char *end;
    v->boost = strtod(boost, &end);
    if (end == boost || *end != '\0' || !(v->boost >= 0 && v->boost <= 100)) {
      snprintf(err, err_len, "--boost %s: expected a number in 0..100", boost);
      return -1;
    }
    v->has_boost = true;
  }
  return 0;
}

void words_free(words_res *r) {
  aural_lexicon_destroy(r->custom);
  aural_g2p_destroy(r->g2p);
  aural_lm_destroy(r->lm);
  aural_lexicon_destroy(r->lex);
  *r = (words_res){0};
}

void words_start(words_run *w, double frame_s, FILE *live) {
  *w = (words_run){.frame_s = frame_s, .live = live};
}

void words_stop(words_run *w) {
  free(w->words);
  free(w->seg_end);
  *w = (words_run){0};
}

/* Appends one final segment of n words. */
static int add_segment(words_run *w, const aural_word *words, size_t n) {
  if (w->n_words + n > w->cap_words) {
    size_t cap = (w->n_words + n) * 2;
    aural_word *p = realloc(w->words, cap * sizeof *p);
    if (p == NULL) return -1;
    w->words = p;
    w->cap_words = cap;
  }
  if (w->n_segs == w->cap_segs) {
    size_t cap = w->cap_segs ? w->cap_segs * 2 : 64;
    size_t *p = realloc(w->seg_end, cap * sizeof *p);
    if (p == NULL) return -1;
    w->seg_end = p;
    w->cap_segs = cap;
  }
  memcpy(w->words + w->n_words, words, n * sizeof *words);
  w->n_words += n;
  w->seg_end[w->n_segs++] = w->n_words;
  if (w->live != NULL && n > 0) {
    fprintf(w->live, "[%7.2f - %7.2f s]",
            (double)words[0].start_frame * w->frame_s,
            (double)words[n - 1].end_frame * w->frame_s);
    for (size_t i = 0; i < n; i++) fprintf(w->live, " %s", words[i].text);
    fputc('\n', w->live);
  }
  return 0;
}

int words_chunk(words_run *w, const aural_chunk *ch) {
  size_t at = 0;
  for (size_t i = 0; i < ch->n_segments; i++) {
    if (add_segment(w, ch->words + at, ch->segments[i]) < 0) return -1;
    at += ch->segments[i];
  }
  return 0;
}

/* A time as subtitles write it: HH:MM:SS,mmm (sep ',') or .mmm. */
static void put_time(FILE *to, double s, char sep) {
  long ms = (long)(s * 1000.0 + 0.5);
  fprintf(to, "%02ld:%02ld:%02ld%c%03ld", ms / 3600000, ms / 60000 % 60,
          ms / 1000 % 60, sep, ms % 1000);
}

/* A JSON string (the words are UTF-8 without control characters). */
static void put_json_string(FILE *to, const char *s) {
  fputc('"', to);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', to);
    fputc(*s, to);
  }
  fputc('"', to);
}

static void write_json(const words_run *w, FILE *to) {
  fputs("{\"text\": \"", to);
  for (size_t i = 0; i < w->n_words; i++) {
    if (i > 0) fputc(' ', to);
    for (const char *s = w->words[i].text; *s; s++) {
      if (*s == '"' || *s == '\\') fputc('\\', to);
      fputc(*s, to);
    }
  }
  fputs("\",\n \"segments\": [", to);
  size_t at = 0;
  for (size_t k = 0; k < w->n_segs; k++) {
    fprintf(to, "%s\n  {\"words\": [", k ? "," : "");
    for (size_t i = at; i < w->seg_end[k]; i++) {
      const aural_word *x = &w->words[i];
      fprintf(to, "%s\n    {\"word\": ", i > at ? "," : "");
      put_json_string(to, x->text);
      fprintf(to, ", \"start\": %.2f, \"end\": %.2f, \"confidence\": %.3f}",
              (double)x->start_frame * w->frame_s,
              (double)x->end_frame * w->frame_s, (double)x->confidence);
    }
    fputs("]}", to);
    at = w->seg_end[k];
  }
  fputs("]}\n", to);
}

/* A word as WebVTT cue text: '&', '<' and '>' as character references.
 * A raw '<' starts a tag there, which swallows the words after it (a
 * custom word such as "Fox<", which espeak-ng says as "fox"), and "-->"
 * may not appear in a cue. SubRip has no escapes: words go as they are. */
static void put_cue_word(FILE *to, const char *s, bool vtt) {
  for (; *s; s++) {
    if (vtt && *s == '&') fputs("&amp;", to);
    else if (vtt && *s == '<') fputs("&lt;", to);
    else if (vtt && *s == '>') fputs("&gt;", to);
    else fputc(*s, to);
  }
}

/* Subtitle cues. A final segment lasts up to the decoder's
 * endpoint_max_s (20 s of continuous speech, some 60 words), more than a
 * reader takes in from one cue: it is cut at word boundaries into cues of
 * at most CUE_MAX_CHARS characters of text and CUE_MAX_S, as subtitles
 * are usually held to (two lines of 42 characters, 7 s). A word longer
 * than that is a cue of its own. Each cue runs from its first word's start
 * to its last word's end. */
#define CUE_MAX_CHARS 84
#define CUE_MAX_S 7.0

/* Characters of UTF-8 text s: its bytes but for continuation bytes. */
static size_t utf8_chars(const char *s) {
  size_t n = 0;
  for (; *s != '\0'; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
  return n;
}

static void write_cue(const words_run *w, FILE *to, bool vtt, size_t from,
                      size_t to_word, size_t number) {
  if (!vtt) fprintf(to, "%zu\n", number);
  put_time(to, (double)w->words[from].start_frame * w->frame_s,
           vtt ? '.' : ',');
  fputs(" --> ", to);
  put_time(to, (double)w->words[to_word - 1].end_frame * w->frame_s,
           vtt ? '.' : ',');
  fputc('\n', to);
  for (size_t i = from; i < to_word; i++) {
    if (i > from) fputc(' ', to);
    put_cue_word(to, w->words[i].text, vtt);
  }
  fputs("\n\n", to);
}

static void write_cues(const words_run *w, FILE *to, bool vtt) {
  if (vtt) fputs("WEBVTT\n\n", to);
  size_t at = 0, cue = 0;
  for (size_t k = 0; k < w->n_segs; k++) {
    size_t end = w->seg_end[k];
    for (size_t i = at; i < end;) {
      size_t j = i + 1, chars = utf8_chars(w->words[i].text);
      for (; j < end; j++) {
        size_t more = chars + 1 + utf8_chars(w->words[j].text);
        double span_s =
            (double)(w->words[j].end_frame - w->words[i].start_frame) *
            w->frame_s;
        if (more > CUE_MAX_CHARS || span_s > CUE_MAX_S) break;
        chars = more;
      }
      write_cue(w, to, vtt, i, j, ++cue);
      i = j;
    }
    at = end;
  }
}

int words_write(const words_run *w, FILE *to, words_format format) {
  switch (format) {
  case WORDS_TXT:
    for (size_t i = 0; i < w->n_words; i++)
      fprintf(to, "%s%s", i > 0 ? " " : "", w->words[i].text);
    fputc('\n', to);
    break;
  case WORDS_JSON:
    write_json(w, to);
    break;
  case WORDS_SRT:
  case WORDS_VTT:
    write_cues(w, to, format == WORDS_VTT);
    break;
  }
  return ferror(to) ? -1 : 0;
}
