/*
 * The encoder's per-stream state and its forward pass (DESIGN.md §2, §3).
 *
 * A call takes n new frames at absolute positions t0 .. t0+n-1 and runs
 * them through the model in batches of at most max_batch_frames rows: the
 * matrix products see all rows of a batch at once; attention goes row by
 * row (within each head), because row i must see exactly the frames
 * max(first, t_i-W+1) .. t_i.
 * Each layer's ring holds the keys and values of the last W frames in slot
 * t mod W. Row i writes its own slot before attending, and rows are taken
 * in order, so the slot it overwrites (frame t_i - W) is one no later row
 * of the batch needs: frame t_i + 1 looks back only to t_i - W + 2.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "aural/encoder.h"
#include "internal.h"

#define DEFAULT_BATCH 64

struct aural_encoder {
  const aural_model *model;
  uint64_t first_frame; /* the stream's first frame */
  uint64_t next_frame;  /* the next frame to encode */
  size_t batch;         /* rows per pass */
  int d, hs, n_heads, window;
  size_t w_pad;    /* window rounded up to 16 */
  float *k_ring;   /* (n_layers, d, w_pad) keys, rope applied, transposed:
                      key c of slot s at c * w_pad + s */
  float *v_ring;   /* (n_layers, window, d) values */
  float *x;        /* (batch, d) residual stream */
  float *a;        /* (batch, d) normalised input of a sublayer */
  float *qkv;      /* (batch, 3 d) */
  float *att;      /* (batch, d) attention output */
  float *ff;       /* (batch, d_ff) */
  float *in;       /* (batch, n_mels) CMVN-normalised features */
  float *rot_cos;  /* (batch, hs / 2) rope rotation of each row */
  float *rot_sin;  /* (batch, hs / 2) */
  float *scores;   /* (w_pad) attention weights of one head */
  double *inv_freq; /* (max(d, hs) / 2) position frequencies */
};

void aural_encoder_config_default(aural_encoder_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->max_batch_frames = DEFAULT_BATCH;
}

/* The scratch layout, computed once for sizing and once for carving. */
typedef struct layout {
  size_t k_ring, v_ring, x, qkv, ff, in, rot, scores, freq, total_floats;
} layout;

static int plan(const aural_model_config *c, size_t batch, layout *l) {
  size_t d = (size_t)c->d_model, w = (size_t)c->window,
         hs = d / (size_t)c->n_heads;
  size_t w_pad = (w + 15) / 16 * 16;
  if (!aural__mul_ok((size_t)c->n_layers * w_pad, d, &l->k_ring)) return -1;
  l->v_ring = (size_t)c->n_layers * w * d;
  l->x = batch * d;
  l->qkv = batch * 3 * d;
  l->ff = batch * (size_t)c->d_ff;
  l->in = batch * (size_t)c->fbank.num_mel_bins;
  l->rot = batch * (hs / 2 + 1);
  l->scores = w_pad;
  l->freq = (d > hs ? d : hs) / 2 + 1;
  size_t t = l->k_ring + l->v_ring; /* v_ring <= k_ring, which fits */
  if (t < l->k_ring) return -1;
  size_t rest = 3 * l->x + l->qkv + l->ff + l->in + 2 * l->rot + l->scores +
                2 * l->freq; /* doubles count as two floats */
  if (t + rest < t) return -1;
  l->total_floats = t + rest;
  return 0;
}

size_t aural_encoder_state_bytes(const aural_model *model,
                                 const aural_encoder_config *cfg) {
  aural_encoder_config dflt;
  if (cfg == NULL) {
    aural_encoder_config_default(&dflt);
    cfg = &dflt;
  }
  layout l;
  size_t batch = cfg->max_batch_frames ? cfg->max_batch_frames : DEFAULT_BATCH;
  if (plan(aural_model_get_config(model), batch, &l) < 0) return SIZE_MAX;
  return sizeof(aural_encoder) + l.total_floats * sizeof(float);
}

int aural_encoder_create(const aural_model *model,
                         const aural_encoder_config *cfg, aural_encoder **out,
                         aural_err *err) {
  *out = NULL;
  aural_encoder_config dflt;
  if (cfg == NULL) {
    aural_encoder_config_default(&dflt);
    cfg = &dflt;
  }
  const aural_model_config *c = aural_model_get_config(model);
  size_t batch = cfg->max_batch_frames ? cfg->max_batch_frames : DEFAULT_BATCH;
  if (batch > 65536)
    return aural__err_set(err, AURAL_EINVAL,
                          "encoder: max_batch_frames %zu is above 65536",
                          batch);
  layout l;
  if (plan(c, batch, &l) < 0)
    return aural__err_set(err, AURAL_ENOMEM,
                          "encoder: state size overflows (window %d, d_model "
                          "%d, %d layers)",
                          c->window, c->d_model, c->n_layers);
  aural_encoder *e = calloc(1, sizeof *e);
  float *mem = malloc(l.total_floats * sizeof *mem);
  if (e == NULL || mem == NULL) {
    free(e);
    free(mem);
    return aural__err_set(err, AURAL_ENOMEM,
                          "encoder: out of memory for %zu bytes of state",
                          l.total_floats * sizeof *mem);
  }
  e->model = model;
  e->batch = batch;
  e->d = c->d_model;
  e->n_heads = c->n_heads;
  e->hs = c->d_model / c->n_heads;
  e->window = c->window;
  /* The doubles go first so they are aligned. */
  e->inv_freq = (double *)mem;
  float *p = mem + 2 * l.freq;
  e->w_pad = (size_t)(e->window + 15) / 16 * 16;
  e->k_ring = p, p += l.k_ring;
  e->v_ring = p, p += l.v_ring;
  e->x = p, p += l.x;
  e->a = p, p += l.x;
  e->att = p, p += l.x;
  e->qkv = p, p += l.qkv;
  e->ff = p, p += l.ff;
  e->in = p, p += l.in;
  e->rot_cos = p, p += l.rot;
  e->rot_sin = p, p += l.rot;
  e->scores = p;

  /* Sinusoidal: frequency i of the d/2 pairs is 10000^(-2i/d). RoPE: pair
   * i of a head turns at theta^(-2i/hs) radians per frame. */
  if (c->pos_encoding == AURAL_POS_SINUSOIDAL)
    for (int i = 0; i < e->d / 2; i++)
      e->inv_freq[i] = pow(10000.0, -2.0 * i / (double)e->d);
  else if (c->pos_encoding == AURAL_POS_ROPE)
    for (int i = 0; i < e->hs / 2; i++)
      e->inv_freq[i] = pow(c->rope_theta, -2.0 * i / (double)e->hs);
  aural_encoder_reset(e, cfg->first_frame);
  *out = e;
  return 0;
}

void aural_encoder_reset(aural_encoder *e, uint64_t first_frame) {
  e->first_frame = first_frame;
  e->next_frame = first_frame;
}

uint64_t aural_encoder_next_frame(const aural_encoder *e) {
  return e->next_frame;
}

void aural_encoder_destroy(aural_encoder *e) {
  if (e == NULL) return;
  free(e->inv_freq); /* the start of the one block */
  free(e);
}

/* Rotates the pairs (2i, 2i+1) of each head of q (or k) of row r. */
static void rope_rotate(const aural_encoder *e, float *v, size_t r) {
  const float *cs = e->rot_cos + r * (size_t)(e->hs / 2 + 1);
  const float *sn = e->rot_sin + r * (size_t)(e->hs / 2 + 1);
  for (int h = 0; h < e->n_heads; h++) {
    float *hv = v + h * e->hs;
    for (int i = 0; i < e->hs / 2; i++) {
      float a = hv[2 * i], b = hv[2 * i + 1];
      hv[2 * i] = a * cs[i] - b * sn[i];
      hv[2 * i + 1] = a * sn[i] + b * cs[i];
    }
  }
}

/* Self-attention of layer li over the batch's n rows into att. Head by
 * head, so that one head's slice of the rings stays in L1 across the rows;
 * within a head, row by row in time order, each row's key and value going
 * into its slot just before it attends. */
static void attend(aural_encoder *e, int li, size_t n) {
  size_t d = (size_t)e->d, w = (size_t)e->window, hs = (size_t)e->hs;
  float *k_ring = e->k_ring + (size_t)li * e->w_pad * d;
  float *v_ring = e->v_ring + (size_t)li * w * d;
  float scale = 1.0f / sqrtf((float)hs);
  for (size_t h = 0; h < (size_t)e->n_heads; h++) {
    float *kt = k_ring + h * hs * e->w_pad, *vh = v_ring + h * hs;
    for (size_t r = 0; r < n; r++) {
      uint64_t t = e->next_frame + r;
      const float *q = e->qkv + r * 3 * d + h * hs;
      const float *k = q + d, *v = q + 2 * d;
      size_t slot = (size_t)(t % w);
      for (size_t c = 0; c < hs; c++) kt[c * e->w_pad + slot] = k[c];
      memcpy(vh + slot * d, v, hs * sizeof *v);
      uint64_t lo = t - e->first_frame + 1 >= w ? t - w + 1 : e->first_frame;
      aural__attention(q, kt, e->w_pad, vh, d, hs, w, (size_t)(lo % w),
                       (size_t)(t - lo + 1), scale, e->scores,
                       e->att + r * d + h * hs);
    }
  }
}

static void add_rows(float *x, const float *y, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* One batch of n <= batch rows: e->x holds the input projection. */
static void run_layers(aural_encoder *e, size_t n) {
  const aural_model *m = e->model;
  const aural_model_config *c = &m->cfg;
  size_t d = (size_t)e->d;
  float eps = (float)c->layer_norm_eps;
  for (int li = 0; li < c->n_layers; li++) {
    const aural__layer *L = &m->layers[li];
    /* Attention sublayer. */
    const float *src = e->x;
    if (c->norm_first) {
      memcpy(e->a, e->x, n * d * sizeof *e->a);
      aural__layer_norm(e->a, n, e->d, L->ln1_w, L->ln1_b, eps);
      src = e->a;
    }
    aural__linear(&L->qkv, L->b_qkv, src, n, e->qkv);
    if (c->pos_encoding == AURAL_POS_ROPE)
      for (size_t r = 0; r < n; r++) {
        rope_rotate(e, e->qkv + r * 3 * d, r);     /* q */
        rope_rotate(e, e->qkv + r * 3 * d + d, r); /* k */
      }
    attend(e, li, n);
    aural__linear(&L->out, L->b_out, e->att, n, e->a);
    add_rows(e->x, e->a, n * d);
    if (!c->norm_first)
      aural__layer_norm(e->x, n, e->d, L->ln1_w, L->ln1_b, eps);

    /* Feed-forward sublayer. */
    src = e->x;
    if (c->norm_first) {
      memcpy(e->a, e->x, n * d * sizeof *e->a);
      aural__layer_norm(e->a, n, e->d, L->ln2_w, L->ln2_b, eps);
      src = e->a;
    }
    aural__linear(&L->ff1, L->b_ff1, src, n, e->ff);
    if (c->activation == AURAL_ACT_GELU)
      aural__gelu(e->ff, n * (size_t)c->d_ff);
    else
      aural__relu(e->ff, n * (size_t)c->d_ff);
    aural__linear(&L->ff2, L->b_ff2, e->ff, n, e->a);
    add_rows(e->x, e->a, n * d);
    if (!c->norm_first)
      aural__layer_norm(e->x, n, e->d, L->ln2_w, L->ln2_b, eps);
  }
  if (c->final_norm)
    aural__layer_norm(e->x, n, e->d, m->norm_w, m->norm_b, eps);
}

int aural_encoder_forward(aural_encoder *e, const float *feats, size_t n,
                          float *emb, float *logits) {
  const aural_model *m = e->model;
  const aural_model_config *c = &m->cfg;
  if (n == 0) return 0;
  if (feats == NULL || (logits != NULL && c->vocab_size == 0))
    return AURAL_EINVAL;
  size_t d = (size_t)e->d, mels = (size_t)c->fbank.num_mel_bins;
  for (size_t done = 0; done < n;) {
    size_t k = n - done < e->batch ? n - done : e->batch;
    const float *f = feats + done * mels;

    /* CMVN, then the input projection. */
    if (m->cmvn_mean != NULL) {
      for (size_t r = 0; r < k; r++)
        for (size_t j = 0; j < mels; j++)
          e->in[r * mels + j] =
              (f[r * mels + j] - m->cmvn_mean[j]) / m->cmvn_std[j];
      f = e->in;
    }
    aural__linear(&m->in_proj, m->b_in, f, k, e->x);

    /* Positions, in double precision so hours-long streams stay exact. */
    for (size_t r = 0; r < k; r++) {
      double t = (double)(e->next_frame + r);
      if (c->pos_encoding == AURAL_POS_SINUSOIDAL) {
        float *x = e->x + r * d;
        for (size_t i = 0; i < d / 2; i++) {
          double ang = t * e->inv_freq[i];
          x[2 * i] += (float)sin(ang);
          x[2 * i + 1] += (float)cos(ang);
        }
      } else if (c->pos_encoding == AURAL_POS_ROPE) {
        size_t half = (size_t)e->hs / 2, stride = half + 1;
        for (size_t i = 0; i < half; i++) {
          double ang = t * e->inv_freq[i];
          e->rot_cos[r * stride + i] = (float)cos(ang);
          e->rot_sin[r * stride + i] = (float)sin(ang);
        }
      }
    }

    run_layers(e, k);
    if (emb != NULL) memcpy(emb + done * d, e->x, k * d * sizeof *emb);
    if (logits != NULL)
      aural__linear(&m->head, m->b_head, e->x, k,
                    logits + done * (size_t)c->vocab_size);
    e->next_frame += k;
    done += k;
  }
  return 0;
}

size_t aural_ctc_greedy(const float *logits, size_t n_frames, int vocab_size,
                        int *prev, int *ids, size_t max_ids) {
  size_t n_ids = 0;
  for (size_t t = 0; t < n_frames; t++) {
    const float *row = logits + t * (size_t)vocab_size;
    int best = 0;
    for (int v = 1; v < vocab_size; v++)
      if (row[v] > row[best]) best = v;
    if (best != 0 && best != *prev) {
      if (n_ids < max_ids) ids[n_ids] = best;
      n_ids++;
    }
    *prev = best;
  }
  return n_ids;
}
