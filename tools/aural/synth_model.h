/* Random-weight models built in memory, for benchmarks and tests. */
#ifndef AURAL_TOOLS_SYNTH_MODEL_H
#define AURAL_TOOLS_SYNTH_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct synth_spec {
  int d_model, n_heads, n_layers, d_ff, window;
  const char *pos_encoding; /* "rope", "sinusoidal", "none" */
  const char *activation;   /* "gelu", "relu" */
  int norm_first, final_norm;
  int vocab_size;           /* 0: no CTC head */
  int cmvn;
  int f16;                  /* store weights as F16 (else F32) */
  int lead_in_frames;       /* written when not 0 */
  uint32_t seed;
} synth_spec;

/* The `base` configuration of the benchmarks: d_model 256, 4 heads,
 * d_ff 1024, 6 layers, W 50, rope, Pre-LN, gelu, final norm, no head. */
void synth_spec_base(synth_spec *s);

/* Bytes of the tensors of synth_model(spec)'s file (its header aside). */
uint64_t synth_model_tensor_bytes(const synth_spec *s);

/* A complete safetensors file for spec, malloc'ed; NULL on failure. */
unsigned char *synth_model(const synth_spec *s, size_t *size);

#endif
