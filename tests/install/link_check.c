/*
 * Built by test_install.sh against an installed libaural, once through
 * aural.pc (shared) and once statically (pkg-config --static): opens an
 * audio file, loads a model and encodes a few frames, so that the headers,
 * the library and its dependencies (libsndfile, FFTW, soxr) and libaural_proto (its JSON reader) all have
 * to be found. Prints one line that must be the same for both builds.
 *
 *   link_check MODEL AUDIO
 */
#include <aural.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: link_check MODEL AUDIO\n");
    return 2;
  }
  aural_err err;
  aural_audiofile *af;
  if (aural_audiofile_open(argv[2], &af, &err) < 0) {
    fprintf(stderr, "link_check: %s\n", err.msg);
    return 1;
  }
  aural_audiofile_info info;
  aural_audiofile_get_info(af, &info);
  aural_audiofile_close(af);

  aural_model *model;
  if (aural_model_load(argv[1], NULL, &model, &err) < 0) {
    fprintf(stderr, "link_check: %s\n", err.msg);
    return 1;
  }
  const aural_model_config *mc = aural_model_get_config(model);
  aural_encoder_config ec;
  aural_encoder_config_default(&ec);
  aural_encoder *enc;
  if (aural_encoder_create(model, &ec, &enc, &err) < 0) {
    fprintf(stderr, "link_check: %s\n", err.msg);
    aural_model_free(model);
    return 1;
  }
  /* Ten frames of a ramp of log-mel values. */
  enum { N = 10 };
  size_t n_mels = (size_t)mc->fbank.num_mel_bins;
  float *feats = malloc(N * n_mels * sizeof *feats);
  float *emb = malloc(N * (size_t)mc->d_model * sizeof *emb);
  if (feats == NULL || emb == NULL) return 1;
  for (size_t i = 0; i < N * n_mels; i++) feats[i] = (float)(i % 17) - 8.0f;
  int rc = aural_encoder_forward(enc, feats, N, emb, NULL);
  double sum = 0;
  for (size_t i = 0; i < N * (size_t)mc->d_model; i++) sum += emb[i];
  printf("audio %.0f Hz %d ch; model d_model %d, %d layers; %d frames, "
         "sum %.6f\n", info.rate_hz, info.n_channels, mc->d_model,
         mc->n_layers, N, sum);
  free(feats);
  free(emb);
  aural_encoder_destroy(enc);
  aural_model_free(model);
  return rc == 0 ? 0 : 1;
}
