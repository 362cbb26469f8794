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
  AURAL_WEIGHTS_BF16,    /* bfloat16, as precision bf16 holds them (for
                            aural_model_memory_need; in a load config it
                            is the same as precision bf16) */
} aural_weight_type;

/* How the matrix products compute (DESIGN.md section 11). */
typedef enum aural_precision {
  /* The exact contract (default): float32 products, bit-identical to the
   * scalar oracle whatever the row count, within 1e-4 of a float64
   * forward. */
  AURAL_PRECISION_F32 = 0,
  /* Opt-in, approximate: weights held as bfloat16 and every matrix
   * product's inputs rounded to bfloat16 (to nearest even), products
   * summed in float32 (AVX512-BF16's dot products where the CPU has them,
   * the same sums emulated bit for bit by the AVX-512 or AVX2 float
   * kernels where it has not, the scalar oracle on other CPUs). Attention, norms and activations stay
   * as in f32. The README states its error and its effect on the
   * default model's phoneme error rate. Still independent of the row
   * count: chunk and frame mode give the same bits. */
  AURAL_PRECISION_BF16,
} aural_precision;

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
  /* Frames of digital silence every stream starts from ("lead_in_frames",
   * default 0): the encoder runs over them before the stream's first
   * frame, as if the audio had begun with them, and emits nothing for
   * them. Their features are the log floor of float32 in every bin
   * (ln FLT_EPSILON; 0 without use_log_fbank), what the frontend gives
   * for a window of zeros. For a model that was never trained on speech
   * from the first frame. */
  int lead_in_frames;
  bool has_cmvn;          /* frontend.cmvn.mean/std present */
  int vocab_size;         /* CTC head outputs; 0 when there is no head */
} aural_model_config;

/* The memory a model may demand by default: 2 GiB for its weights, one
 * stream and one batch. The bundled model needs about 25 MB and the test
 * models less; a model whose dimensions ask for more is far more likely a
 * hostile or broken file than a speech encoder. */
#define AURAL_MODEL_DEFAULT_MAX_MEMORY ((uint64_t)2 << 30)
/* The batch size the limit assumes by default: aurald's compute threads
 * each make an aural_batch of 1024 rows. */
#define AURAL_MODEL_DEFAULT_BATCH_ROWS 1024

typedef struct aural_model_load_config {
  aural_weight_type weights; /* in-memory type of the matrices (f32 or f16
                                under precision f32) */
  uint64_t max_memory_bytes; /* refuse a model whose weights, one stream
                                and one batch of batch_rows rows need more
                                (aural_model_memory_need); 0: the default */
  size_t batch_rows;         /* rows of the largest aural_batch the caller
                                will make, at most 65536
                                (AURAL_ENCODER_MAX_BATCH_FRAMES); 0: the
                                default */
  aural_precision precision; /* f32 (default) or bf16; bf16 with weights
                                f16 is refused (AURAL_EINVAL) */
} aural_model_load_config;

/* What a model needs in memory, from its config alone. */
typedef struct aural_model_memory {
  uint64_t weight_bytes; /* the weights as held (aural_model_weight_bytes) */
  uint64_t stream_bytes; /* one encoder of default config: KV rings and
                            scratch (aural_encoder_state_bytes) */
  uint64_t ring_bytes;   /* of which the KV rings */
  uint64_t batch_bytes;  /* one aural_batch of batch_rows rows */
  uint64_t total_bytes;  /* weights + stream + batch */
} aural_model_memory;

typedef struct aural_model aural_model;

void aural_model_load_config_default(aural_model_load_config *cfg);

/* Loads and validates path (read into memory, freed before returning; a
 * file that changes size while it is read is refused with
 * AURAL_ETRUNCATED or AURAL_EIO). Its header is read and validated first:
 * a file the header refuses is not read further. cfg may be NULL for
 * defaults. A model
 * that needs more memory than cfg->max_memory_bytes, or a file too large
 * to hold such a model, is refused with AURAL_ECONFIG naming the
 * dimension that asks for it, before anything is allocated for it. Returns
 * 0, AURAL_EINVAL (a load config field out of range, checked before the
 * file is opened, or path or out NULL), -errno, AURAL_EEMPTY, AURAL_EFORMAT, AURAL_ETRUNCATED,
 * AURAL_ECONFIG or AURAL_ENOMEM; err names the file and the tensor or
 * field at fault. A NaN or infinite weight (or CMVN statistic) is
 * refused with AURAL_EFORMAT naming the tensor and element, as is a float
 * weight that would become infinite held as f16 or bf16. Thread-safe. */
int aural_model_load(const char *path, const aural_model_load_config *cfg,
                     aural_model **out, aural_err *err);

/* Bytes a model with config cfg (as aural_model_get_config gives it) needs
 * in memory with matrices held as `weights`, for one stream and one batch
 * of batch_rows rows, into *out. Sizes are overflow-checked. Returns 0, or
 * AURAL_EINVAL when batch_rows is not 1..65536, a size overflows, or cfg
 * or out is NULL. Thread-safe. */
int aural_model_memory_need(const aural_model_config *cfg,
                            aural_weight_type weights, size_t batch_rows,
                            aural_model_memory *out);

/* Same, from a buffer holding a whole safetensors file (not retained);
 * `name` (NULL: "(memory)") is used in messages. NULL data with a
 * nonzero size, or a NULL out, is AURAL_EINVAL. */
int aural_model_load_buffer(const void *data, size_t size, const char *name,
                            const aural_model_load_config *cfg,
                            aural_model **out, aural_err *err);

/* NULL-safe. No encoder may use the model afterwards. */
void aural_model_free(aural_model *model);

const aural_model_config *aural_model_get_config(const aural_model *model);

/* Token string of a CTC vocabulary entry (0 = blank), or NULL (also for
 * a NULL model). A loaded
 * model's tokens are all spelled differently (a vocabulary that repeats
 * one is refused with AURAL_ECONFIG), so a spelling names one id. */
const char *aural_model_token(const aural_model *model, int id);

/* Parameters (weights and biases) in the model. */
uint64_t aural_model_n_params(const aural_model *model);

/* Bytes the weights occupy in memory. */
uint64_t aural_model_weight_bytes(const aural_model *model);

/* The precision the model was loaded with, and its name ("f32", "bf16");
 * parse: the precision of a name (0), or AURAL_EINVAL (*out unchanged)
 * for another name or a NULL argument. */
aural_precision aural_model_precision(const aural_model *model);
const char *aural_model_precision_name(aural_precision precision);
int aural_model_precision_parse(const char *name, aural_precision *out);

/* Whether this CPU computes precision bf16 with its own bfloat16 dot
 * products (AVX512-BF16), for products of some sizes at least; when it
 * does not, bf16 is emulated with the same bits and is no faster than f32
 * in chunk mode (README, "Precision bf16"). */
bool aural_model_bf16_native(void);

/* The most rows (frames computed together) of a matrix product that
 * precision bf16 computes with the dot products; a product of more rows
 * is emulated by the f32 kernels, with the same bits. SIZE_MAX where the
 * dot products are the faster at every size (AMD Zen 4 and 5); 7 where
 * this core runs them at fewer products a second than its FMAs (measured
 * at first use: Intel Xeons, where AMX would be the fast path), so that
 * chunk mode and batches, which the emulation runs faster there, take
 * it; 0 without them. AURAL_BF16=emulate makes it 0, AURAL_BF16=dot
 * SIZE_MAX where the CPU has them. */
size_t aural_model_bf16_dot_rows(void);

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
