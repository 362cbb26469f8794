/*
 * aural/model.h — loading an encoder model (safetensors, DESIGN.md §2).
 *
 *   aural_model *model;
 *   aural_err err;
 *   if (aural_model_load("model.safetensors", NULL, &model, &err) < 0)
 *     die(err.msg);                      // names the tensor or field at fault
 *   const aural_model_config *cfg = aural_model_get_config(model);
 *   ... aural_encoder_create(model, ...) for each stream ...
 *   aural_model_free(model);             // after every encoder is destroyed
 *
 * A model file is untrusted: every size, offset, dtype and shape is checked
 * against the file length and the config before anything is read. Weights
 * (F32, F16 or BF16 in the file) are converted once at load. The loaded
 * model is immutable: any number of encoders on any number of threads may
 * share it.
 */
#ifndef AURAL_MODEL_H
#define AURAL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aural/error.h"
#include "aural/fbank.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum aural_activation {
  AURAL_ACT_RELU = 0,
  AURAL_ACT_GELU, /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
} aural_activation;

typedef enum aural_pos_encoding {
  AURAL_POS_NONE = 0,
  AURAL_POS_SINUSOIDAL, /* added to the input projection */
  AURAL_POS_ROPE,       /* q and k rotated in interleaved pairs */
} aural_pos_encoding;

/* How matrix weights are held in memory. */
typedef enum aural_weight_type {
  AURAL_WEIGHTS_F32 = 0, /* float32 (default) */
  AURAL_WEIGHTS_F16,     /* IEEE half: half the bytes, fp32 arithmetic */
} aural_weight_type;

/* The model's aural.config, parsed and validated. */
typedef struct aural_model_config {
  aural_fbank_opts fbank; /* frontend options (sample_rate, mel bins, ...) */
  int d_model;            /* embedding width */
  int n_heads;            /* divides d_model */
  int n_layers;
  int d_ff;               /* feed-forward width */
  aural_activation activation;
  bool norm_first;        /* Pre-LN (true) or Post-LN (false) */
  double layer_norm_eps;
  int window;             /* W: frames attended, including the current one */
  aural_pos_encoding pos_encoding;
  double rope_theta;
  bool final_norm;
  bool has_cmvn;          /* frontend.cmvn.mean/std present */
  int vocab_size;         /* CTC head outputs; 0 when there is no head */
} aural_model_config;

typedef struct aural_model_load_config {
  aural_weight_type weights; /* in-memory type of the matrices */
} aural_model_load_config;

typedef struct aural_model aural_model;

void aural_model_load_config_default(aural_model_load_config *cfg);

/* Loads and validates path (read into memory, freed before returning; a
 * file that changes size while it is read is refused with
 * AURAL_ETRUNCATED or AURAL_EIO). cfg may be NULL for defaults. Returns 0, -errno, AURAL_EEMPTY, AURAL_EFORMAT,
 * AURAL_ETRUNCATED, AURAL_ECONFIG or AURAL_ENOMEM; err names the file and
 * the tensor or field at fault. Weights are converted as stored: NaN or
 * infinite weights are not checked (CMVN statistics are). Thread-safe. */
int aural_model_load(const char *path, const aural_model_load_config *cfg,
                     aural_model **out, aural_err *err);

/* Same, from a buffer holding a whole safetensors file (not retained);
 * `name` is used in messages. */
int aural_model_load_buffer(const void *data, size_t size, const char *name,
                            const aural_model_load_config *cfg,
                            aural_model **out, aural_err *err);

/* NULL-safe. No encoder may use the model afterwards. */
void aural_model_free(aural_model *model);

const aural_model_config *aural_model_get_config(const aural_model *model);

/* Token string of a CTC vocabulary entry (0 = blank), or NULL. */
const char *aural_model_token(const aural_model *model, int id);

/* Parameters (weights and biases) in the model. */
uint64_t aural_model_n_params(const aural_model *model);

/* Bytes the weights occupy in memory. */
uint64_t aural_model_weight_bytes(const aural_model *model);

/* Floating-point operations (multiply and add counted apart) to encode one
 * frame once its window is full: matrix products and attention. */
uint64_t aural_model_flops_per_frame(const aural_model *model);

/* The CMVN statistics, (num_mel_bins) each, or NULL when absent. */
const float *aural_model_cmvn_mean(const aural_model *model);
const float *aural_model_cmvn_std(const aural_model *model);

#ifdef __cplusplus
}
#endif

#endif
