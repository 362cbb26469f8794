/* stream_file MODEL AUDIO: each chunk's start, frame count and CTC text. */
#include <aural.h>
#include <stdio.h>
#include <stdlib.h>

static int drain(aural_stream *s, aural_chunk *ch, double frame_s) {
  int rc = aural_stream_compute(s); /* encode pending frames, pull chunks */
  while (!rc && aural_stream_pull(s, ch) == 1)
    printf("%7.2f s %3zu frames%s %s\n", (double)ch->first_frame * frame_s,
           ch->n_frames, ch->final ? " final" : "", ch->text ? ch->text : "");
  return rc;
}

int main(int argc, char **argv) {
  aural_err err = {.msg = "usage: stream_file MODEL AUDIO"};
  aural_model *m = NULL; aural_audiofile *af = NULL; aural_stream *s = NULL;
  aural_audiofile_info ai; aural_stream_config sc; aural_stream_info si;
  aural_stream_config_default(&sc);
  if (argc != 3 || aural_model_load(argv[1], NULL, &m, &err) < 0 ||
      aural_audiofile_open(argv[2], &af, &err) < 0 ||
      (aural_audiofile_get_info(af, &ai), sc.input_rate_hz = ai.rate_hz,
       sc.n_channels = ai.n_channels, aural_stream_create(m, &sc, &s, &err)))
    return fprintf(stderr, "stream_file: %s\n", err.msg), 1;
  aural_stream_get_info(s, &si);
  aural_chunk ch = {.text = si.text_max_bytes ? malloc(si.text_max_bytes) : 0,
                    .text_cap = si.text_max_bytes};
  static float pcm[4096];
  size_t n, k, nch = (size_t)ai.n_channels;
  int rc = 0; /* a push takes what fits; drain makes room again */
  while (!rc && !(rc = aural_audiofile_read(af, pcm, 4096 / nch, &n, &err)) &&
         n > 0)
    for (size_t at = 0; !rc && at < n; at += k)
      if (!(rc = aural_stream_push(s, pcm + at * nch, n - at, &k)))
        rc = drain(s, &ch, si.frame_seconds);
  if (!rc && !(rc = aural_stream_end(s))) rc = drain(s, &ch, si.frame_seconds);
  if (rc) /* a failed read says where in err; the stream's calls do not */
    fprintf(stderr, "stream_file: %s\n",
            err.code == rc ? err.msg : aural_strerror(rc));
  free(ch.text);
  aural_stream_destroy(s);
  aural_audiofile_close(af);
  aural_model_free(m);
  return rc != 0;
}
