/* aural bench words: the words decoder's cost beside the encoder's. */
#ifndef AURAL_CLI_BENCH_WORDS_H
#define AURAL_CLI_BENCH_WORDS_H

/* beam: the decoder's (0: its default). Prints the measurement as text,
 * or with json set puts it in *json as the member '"words": {...}' of
 * the caller's one JSON object (malloc'ed: free it). Returns 0 or -1
 * (with a message on stderr). */
int bench_words(const char *model_path, const char *lexicon_path,
                const char *lm_path, int beam, double seconds, int repeat,
                char **json);

#endif
