/*
 * The numeric kernels of the encoder: matrix products (through OpenBLAS
 * for float weights), layer norm and activations.
 */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "aural/encoder.h"
#include "internal.h"

void aural__linear_ref(const aural__mat *w, const float *b, const float *x,
                       size_t n, float *y) {
  size_t rows = (size_t)w->rows, cols = (size_t)w->cols;
  for (size_t i = 0; i < n; i++) {
    for (size_t r = 0; r < rows; r++) {
      float acc = b != NULL ? b[r] : 0.0f;
      for (size_t c = 0; c < cols; c++) {
        float wv = w->f32 != NULL ? w->f32[r * cols + c]
                                  : aural__f16_to_f32(w->f16[r * cols + c]);
        acc += x[i * cols + c] * wv;
      }
      y[i * rows + r] = acc;
    }
  }
}

void aural__linear(const aural__mat *w, const float *b, const float *x,
                   size_t n, float *y) {
  if (w->f32 == NULL) {
    aural__linear_ref(w, b, x, n, y);
    return;
  }
  size_t rows = (size_t)w->rows;
  if (b != NULL)
    for (size_t i = 0; i < n; i++) memcpy(y + i * rows, b, rows * sizeof *y);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, w->rows,
              w->cols, 1.0f, x, w->cols, w->f32, w->cols,
              b != NULL ? 1.0f : 0.0f, y, w->rows);
}

void aural__layer_norm(float *x, size_t n, int d, const float *g,
                       const float *b, float eps) {
  for (size_t i = 0; i < n; i++) {
    float *r = x + i * (size_t)d;
    float mean = 0.0f, var = 0.0f;
    for (int k = 0; k < d; k++) mean += r[k];
    mean /= (float)d;
    for (int k = 0; k < d; k++) var += (r[k] - mean) * (r[k] - mean);
    var /= (float)d;
    float inv = 1.0f / sqrtf(var + eps);
    for (int k = 0; k < d; k++) r[k] = (r[k] - mean) * inv * g[k] + b[k];
  }
}

void aural__gelu(float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * (float)M_SQRT1_2));
}

void aural__relu(float *x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* OpenBLAS reports "Prescott" (its generic x86-64 kernel) when it does not
 * recognise the CPU, as Debian's 0.3.21 does on recent Xeons. */
static int is_generic_core(const char *core) {
  return strcmp(core, "Prescott") == 0 || strcmp(core, "Core2") == 0 ||
         strcmp(core, "Penryn") == 0 || strcmp(core, "Nehalem") == 0 ||
         strcmp(core, "Dunnington") == 0;
}

static char gemm_name[160];
static pthread_once_t gemm_name_once = PTHREAD_ONCE_INIT;

static void make_gemm_name(void) {
  {
    const char *cfg = openblas_get_config();
    const char *core = openblas_get_corename();
    char version[32] = "";
    if (sscanf(cfg, "OpenBLAS %31s", version) != 1) version[0] = '\0';
    snprintf(gemm_name, sizeof gemm_name, "OpenBLAS %s %s%s", version, core,
             is_generic_core(core) ? " (generic kernel)" : "");
  }
}

const char *aural_gemm_name(void) {
  pthread_once(&gemm_name_once, make_gemm_name);
  return gemm_name;
}

const char *aural_gemm_env_fix(void) {
  if (!is_generic_core(openblas_get_corename())) return NULL;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "OPENBLAS_CORETYPE=SkylakeX";
  if (__builtin_cpu_supports("avx2")) return "OPENBLAS_CORETYPE=Haswell";
  return NULL;
}
