/*
 * The encoder's per-stream state and its forward pass (DESIGN.md §2, §3).
 *
 * A call takes n new frames at absolute positions t0 .. t0+n-1 and runs
 * them through the model in passes of at most max_batch_frames rows (or,
 * through an aural_batch, rows of several streams together): the matrix
 * products see all rows of a pass at once; attention is per stream and
 * head, because row i must see exactly the frames max(first, t_i-W+1) ..
 * t_i of its own stream (a few rows share the loads of the key ring, see
 * attend()).
 * A model with a lead-in (lead_in_frames K) first runs K frames of
 * silence through a stream's state, at positions first .. first+K-1, the
 * first time the stream is computed after create or reset: positions are
 * then the stream's frame index plus K, and the frames' outputs go
 * nowhere.
 * Each layer's ring holds the keys and values of the last W frames in slot
 * t mod W. Row i writes its own slot before it mixes values, and rows are
 * taken in order, so the slot it overwrites (frame t_i - W) is one no later
 * row of the batch needs: frame t_i + 1 looks back only to t_i - W + 2.
 */
#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aural/encoder.h"
#include "internal.h"

#define DEFAULT_BATCH AURAL__DEFAULT_BATCH
/* Query rows of one head whose scores are computed together (attend()). */
#define ATT_ROWS AURAL__MIX_ROWS
/* Groups of rows whose mixing plans a pass works out once for all heads:
 * enough for the default batch. */
#define PLANS ((DEFAULT_BATCH + ATT_ROWS - 1) / ATT_ROWS)

/* Scratch for one pass of up to `cap` rows, which may come from several
 * streams of one model. */
typedef struct work {
  size_t cap;
  float *x;       /* (cap, d) residual stream */
  float *a;       /* (cap, d) normalised input of a sublayer */
  float *att;     /* (cap, d) attention output */
  float *qkv;     /* (cap, 3 d) */
  float *ff;      /* (cap, d_ff) */
  float *in;      /* (cap, n_mels) CMVN-normalised features */
  float *rot_cos; /* (cap, hs / 2 + 1) rope rotation of each row */
  float *rot_sin; /* (cap, hs / 2 + 1) */
  float *logits;  /* (cap, vocab_size) */
  double *scores; /* (ATT_ROWS, w_pad) attention weights of rows of one head */
  aural__mix_plan *plans; /* (PLANS) of one stream's first groups */
} work;

struct aural_encoder {
  const aural_model *model;
  uint64_t first_frame; /* position of the first frame (lead-in included) */
  uint64_t next_frame;  /* position of the next frame to encode */
  uint64_t lead;        /* lead-in frames (the model's) */
  bool primed;          /* the lead-in has run since create or reset */
  bool marked;          /* listed in the batch being checked (check_items) */
  int d, hs, n_heads, window;
  size_t w_pad;     /* window + ATT_ROWS, rounded up to 16 */
  float *k_ring;    /* (n_layers, d, w_pad) keys, rope applied, transposed:
                       key c of slot s at c * w_pad + s; slots window ..
                       window + ATT_ROWS - 1 hold a group's new keys */
  float *v_ring;    /* (n_layers, n_heads, window, hs) values: each head's
                       slots together, 256-byte rows rather than d apart,
                       which would crowd a few L1 sets */
  double *inv_freq; /* (max(d, hs) / 2) position frequencies */
  work own;         /* scratch for this stream's own calls */
};

struct aural_batch {
  const aural_model *model;
  float *mem; /* the one block that w is carved from */
  work w;
  struct seg *segs; /* (w.cap) one per stream in a pass */
  aural_batch_item *items; /* (w.cap) for aural_stream_compute_batch */
};

void aural_encoder_config_default(aural_encoder_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->max_batch_frames = DEFAULT_BATCH;
}

/* The key ring's slots: the window's, then room for the new keys of a
 * group of rows (attend()), rounded up to whole groups of 16 lanes. (For
 * the windows of 50 of the bundled and base models that is the 64 it
 * always was; a window of 16 now takes 32, one of 64 takes 80.) */
static size_t window_pad(const aural_model_config *c) {
  return ((size_t)c->window + ATT_ROWS + 15) / 16 * 16;
}

/* Floats of scratch for cap rows (0 on overflow), the attention scores
 * (doubles) counted as two floats each, plus one to align them, and the
 * PLANS mixing plans (attend()) in whole floats. Small
 * factors, and cap and the dimensions are bounded, so only the sum needs
 * watching. */
static size_t work_floats(const aural_model_config *c, size_t cap) {
  size_t d = (size_t)c->d_model, hs = d / (size_t)c->n_heads;
  size_t per_row = 3 * d + 3 * d + (size_t)c->d_ff +
                   (size_t)c->fbank.num_mel_bins + 2 * (hs / 2 + 1) +
                   (size_t)c->vocab_size;
  size_t n;
  if (!aural__mul_ok(per_row, cap, &n)) return 0;
  return n + 2 * ATT_ROWS * window_pad(c) + 1 +
         PLANS * (sizeof(aural__mix_plan) + sizeof(float) - 1) / sizeof(float);
}

static float *work_carve(work *w, const aural_model_config *c, size_t cap,
                         float *p) {
  size_t d = (size_t)c->d_model, hs = d / (size_t)c->n_heads;
  w->cap = cap;
  /* The doubles first, aligned. */
  p += ((uintptr_t)p % sizeof(double)) / sizeof *p;
  w->scores = (double *)p, p += 2 * ATT_ROWS * window_pad(c);
  w->plans = (aural__mix_plan *)p; /* 8-byte aligned, as the scores */
  p += PLANS * (sizeof(aural__mix_plan) + sizeof(float) - 1) / sizeof(float);
  w->x = p, p += cap * d;
  w->a = p, p += cap * d;
  w->att = p, p += cap * d;
  w->qkv = p, p += cap * 3 * d;
  w->ff = p, p += cap * (size_t)c->d_ff;
  w->in = p, p += cap * (size_t)c->fbank.num_mel_bins;
  w->rot_cos = p, p += cap * (hs / 2 + 1);
  w->rot_sin = p, p += cap * (hs / 2 + 1);
  w->logits = p, p += cap * (size_t)c->vocab_size;
  return p;
}

/* Floats of an encoder's own state: frequencies (as doubles), rings and
 * scratch for `batch` rows; 0 on overflow. */
static size_t encoder_floats(const aural_model_config *c, size_t batch) {
  size_t d = (size_t)c->d_model, hs = d / (size_t)c->n_heads;
  size_t k_ring, freq = 2 * ((d > hs ? d : hs) / 2 + 1);
  if (!aural__mul_ok((size_t)c->n_layers * window_pad(c), d, &k_ring))
    return 0;
  size_t v_ring = (size_t)c->n_layers * (size_t)c->window * d; /* <= k_ring */
  size_t scratch = work_floats(c, batch);
  size_t total = freq + k_ring + v_ring + scratch;
  if (scratch == 0 || total < k_ring) return 0;
  return total;
}

size_t aural__encoder_bytes(const aural_model_config *c, size_t batch) {
  size_t n = encoder_floats(c, batch), bytes;
  if (n == 0 || !aural__mul_ok(n, sizeof(float), &bytes) ||
      bytes > SIZE_MAX - sizeof(aural_encoder))
    return SIZE_MAX;
  return sizeof(aural_encoder) + bytes;
}

size_t aural__ring_bytes(const aural_model_config *c) {
  size_t k, v, bytes;
  if (!aural__mul_ok((size_t)c->n_layers * window_pad(c), (size_t)c->d_model,
                     &k) ||
      !aural__mul_ok((size_t)c->n_layers * (size_t)c->window,
                     (size_t)c->d_model, &v) ||
      !aural__mul_ok(k + v, sizeof(float), &bytes))
    return SIZE_MAX;
  return bytes;
}

size_t aural_encoder_state_bytes(const aural_model *model,
                                 const aural_encoder_config *cfg) {
  aural_encoder_config dflt;
  if (cfg == NULL) {
    aural_encoder_config_default(&dflt);
    cfg = &dflt;
  }
  size_t batch = cfg->max_batch_frames ? cfg->max_batch_frames : DEFAULT_BATCH;
  /* What create refuses has no size: SIZE_MAX, as an overflow. */
  if (model == NULL || batch > AURAL_ENCODER_MAX_BATCH_FRAMES) return SIZE_MAX;
  return aural__encoder_bytes(aural_model_get_config(model), batch);
}

int aural_encoder_create(const aural_model *model,
                         const aural_encoder_config *cfg, aural_encoder **out,
                         aural_err *err) {
  if (out == NULL || model == NULL)
    return aural__err_set(err, AURAL_EINVAL, "encoder: no %s",
                          out == NULL ? "out pointer" : "model");
  *out = NULL;
  aural_encoder_config dflt;
  if (cfg == NULL) {
    aural_encoder_config_default(&dflt);
    cfg = &dflt;
  }
  const aural_model_config *c = aural_model_get_config(model);
  size_t batch = cfg->max_batch_frames ? cfg->max_batch_frames : DEFAULT_BATCH;
  if (batch > AURAL_ENCODER_MAX_BATCH_FRAMES)
    return aural__err_set(err, AURAL_EINVAL,
                          "encoder: max_batch_frames %zu is above %d", batch,
                          AURAL_ENCODER_MAX_BATCH_FRAMES);
  size_t n = encoder_floats(c, batch);
  if (n == 0)
    return aural__err_set(err, AURAL_ENOMEM,
                          "encoder: state size overflows (window %d, d_model "
                          "%d, %d layers)",
                          c->window, c->d_model, c->n_layers);
  aural_encoder *e = calloc(1, sizeof *e);
  float *mem = malloc(n * sizeof *mem);
  if (e == NULL || mem == NULL) {
    free(e);
    free(mem);
    return aural__err_set(err, AURAL_ENOMEM,
                          "encoder: out of memory for %zu bytes of state",
                          n * sizeof *mem);
  }
  e->model = model;
  e->d = c->d_model;
  e->n_heads = c->n_heads;
  e->hs = c->d_model / c->n_heads;
  e->window = c->window;
  e->w_pad = window_pad(c);
  /* The doubles go first so they are aligned. */
  size_t d = (size_t)e->d, hs = (size_t)e->hs;
  e->inv_freq = (double *)mem;
  float *p = mem + 2 * ((d > hs ? d : hs) / 2 + 1);
  e->k_ring = p, p += (size_t)c->n_layers * e->w_pad * d;
  e->v_ring = p, p += (size_t)c->n_layers * (size_t)e->window * d;
  /* Attention reads every slot of a key group, in the context or not, so
   * the slots hold numbers from the start. */
  memset(e->k_ring, 0, (size_t)(p - e->k_ring) * sizeof *p);
  e->lead = (uint64_t)c->lead_in_frames;
  work_carve(&e->own, c, batch, p);

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
  e->primed = e->lead == 0;
}

uint64_t aural_encoder_next_frame(const aural_encoder *e) {
  return e->primed ? e->next_frame - e->lead : e->next_frame;
}

void aural_encoder_destroy(aural_encoder *e) {
  if (e == NULL) return;
  free(e->inv_freq); /* the start of the one block */
  free(e);
}

/* Rows [row0, row0 + n) of a pass belong to stream e, in time order. */
typedef struct seg {
  aural_encoder *e;
  size_t row0, n;
  const float *feats; /* (n, n_mels) */
  float *emb;         /* (n, d) or NULL */
  float *logits;      /* (n, V) or NULL */
} seg;

/* The ring slot of the frame at position t: t mod W, counted from the
 * stream's first frame so that a position past 2^64 (a first_frame near
 * the top of its range) keeps the slots in step. */
static size_t slot_of(const aural_encoder *e, uint64_t t) {
  uint64_t win = (uint64_t)e->window;
  return (size_t)((t - e->first_frame + e->first_frame % win) % win);
}

/* The mixing plan of the g rows of frames t0 .. t0+g-1 of stream e. */
static void plan_group(const aural_encoder *e, uint64_t t0, size_t g,
                       aural__mix_plan *mp) {
  size_t win = (size_t)e->window, n_ctx[ATT_ROWS];
  for (size_t j = 0; j < g; j++) {
    uint64_t t = t0 + j;
    uint64_t lo = t - e->first_frame + 1 >= win ? t - win + 1 : e->first_frame;
    n_ctx[j] = (size_t)(t - lo + 1);
  }
  uint64_t lo0 = t0 + 1 - n_ctx[0];
  aural__mix_plan_of(mp, g, win, slot_of(e, lo0), n_ctx[0] - 1, n_ctx);
}

/* Keys k_j (row j of k, rows ld apart) into column col[j] of the head's
 * transposed key ring kt (one row of w_pad slots per key lane), for the
 * g <= ATT_ROWS rows of a group: lane by lane, so that the group's writes
 * to one row of kt come together. */
_Static_assert(ATT_ROWS == 3, "put_keys takes groups of up to 3 rows");
static inline void put_keys(float *kt, size_t w_pad, const size_t *col,
                            const float *k, size_t ld, size_t g, size_t hs) {
  switch (g) {
  case 3:
    for (size_t c = 0; c < hs; c++) {
      float *r = kt + c * w_pad;
      r[col[0]] = k[c], r[col[1]] = k[ld + c], r[col[2]] = k[2 * ld + c];
    }
    break;
  case 2:
    for (size_t c = 0; c < hs; c++) {
      float *r = kt + c * w_pad;
      r[col[0]] = k[c], r[col[1]] = k[ld + c];
    }
    break;
  default:
    for (size_t c = 0; c < hs; c++) kt[c * w_pad + col[0]] = k[c];
    break;
  }
}

/* Self-attention of layer li for one stream's rows of the pass, head by
 * head, so that one head's slice of the rings stays in L1 across the rows.
 * Rows go ATT_ROWS at a time (frames t0 .. t0+g-1): the group's new keys
 * go into the key ring's slots past the window, then one pass over the
 * keys scores every row against every slot, the ring's as it was before
 * the group and the new ones; row j's scores for its own and the earlier
 * rows' new keys then take the slots those frames will take (the frames
 * the slots still hold are older than row j's window). The rows then mix
 * together (aural__attention_mix_rows): older frames' values from the
 * ring, still as it was before the group, the group's own from the
 * projection's output. Only then do the group's keys and values go into
 * their slots, for the groups after it. A frame's scores and mix have the
 * same bits whatever group or lane it was in (see linalg.c). The mixing
 * plans of a stream's first PLANS groups are worked out with the first
 * head and kept for the others. */
static void attend(work *w, const seg *sg, int li) {
  aural_encoder *e = sg->e;
  size_t d = (size_t)e->d, win = (size_t)e->window, hs = (size_t)e->hs,
         w_pad = e->w_pad;
  float *k_ring = e->k_ring + (size_t)li * w_pad * d;
  float *v_ring = e->v_ring + (size_t)li * win * d;
  double scale = 1.0 / sqrt((double)hs);
  for (size_t h = 0; h < (size_t)e->n_heads; h++) {
    float *kt = k_ring + h * hs * w_pad, *vh = v_ring + h * win * hs;
    for (size_t i0 = 0; i0 < sg->n; i0 += ATT_ROWS) {
      size_t g = sg->n - i0 < ATT_ROWS ? sg->n - i0 : ATT_ROWS;
      const float *q0 = w->qkv + (sg->row0 + i0) * 3 * d + h * hs;
      uint64_t t0 = e->next_frame + i0;
      size_t past[ATT_ROWS] = {0}, slot[ATT_ROWS] = {0};
      for (size_t j = 0; j < g; j++) {
        past[j] = win + j;
        slot[j] = slot_of(e, t0 + j); /* a window may be 1 or 2 */
        assert(slot[j] < win); /* a slot past the ring writes another's */
      }
      put_keys(kt, w_pad, past, q0 + d, 3 * d, g, hs);
      aural__attention_scores(q0, 3 * d, g, kt, w_pad, hs, scale, w->scores);
      for (size_t j = 0; j < g; j++) {
        double *sj = w->scores + j * w_pad;
        for (size_t jj = 0; jj <= j; jj++) /* later frames win a shared slot */
          sj[slot[jj]] = sj[win + jj];
      }
      aural__mix_plan one, *mp = &one;
      if (i0 / ATT_ROWS < PLANS) {
        mp = &w->plans[i0 / ATT_ROWS];
        if (h == 0) plan_group(e, t0, g, mp);
      } else {
        plan_group(e, t0, g, mp);
      }
      aural__attention_mix_rows(mp, w->scores, w_pad, vh, hs, q0 + 2 * d,
                                3 * d, hs,
                                w->att + (sg->row0 + i0) * d + h * hs, d);
      put_keys(kt, w_pad, slot, q0 + d, 3 * d, g, hs);
      for (size_t j = 0; j < g; j++)
        memcpy(vh + slot[j] * hs, q0 + j * 3 * d + 2 * d, hs * sizeof *vh);
    }
  }
}

static void add_rows(float *x, const float *y, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* One pass over n rows from n_segs streams: every matrix product sees all
 * rows (each weight matrix is read once for all the streams); positions
 * and attention are each row's own. The kernels compute every row the same
 * way whatever else is in the pass, so a stream's outputs do not depend on
 * what it was batched with. */
static void run_pass(const aural_model *m, work *w, seg *segs, size_t n_segs,
                     size_t n) {
  const aural_model_config *c = &m->cfg;
  size_t d = (size_t)c->d_model, mels = (size_t)c->fbank.num_mel_bins;
  int hs = c->d_model / c->n_heads;
  float eps = (float)c->layer_norm_eps;

  /* Features (CMVN-normalised when the model has statistics), then the
   * input projection; positions in double precision so that hours-long
   * streams stay exact. */
  for (size_t s = 0; s < n_segs; s++) {
    const seg *sg = &segs[s];
    for (size_t i = 0; i < sg->n; i++) {
      const float *f = sg->feats + i * mels;
      float *row = w->in + (sg->row0 + i) * mels;
      if (m->cmvn_mean != NULL)
        for (size_t j = 0; j < mels; j++)
          row[j] = (f[j] - m->cmvn_mean[j]) / m->cmvn_std[j];
      else
        memcpy(row, f, mels * sizeof *f);
    }
  }
  aural__linear(&m->in_proj, m->b_in, w->in, n, w->x);
  for (size_t s = 0; s < n_segs; s++) {
    const seg *sg = &segs[s];
    const double *inv_freq = sg->e->inv_freq;
    for (size_t i = 0; i < sg->n; i++) {
      size_t r = sg->row0 + i;
      double t = (double)(sg->e->next_frame + i);
      if (c->pos_encoding == AURAL_POS_SINUSOIDAL) {
        float *x = w->x + r * d;
        for (size_t k = 0; k < d / 2; k++) {
          double ang = t * inv_freq[k];
          x[2 * k] += (float)sin(ang);
          x[2 * k + 1] += (float)cos(ang);
        }
      } else if (c->pos_encoding == AURAL_POS_ROPE) {
        size_t half = (size_t)hs / 2, stride = half + 1;
        for (size_t k = 0; k < half; k++) {
          double ang = t * inv_freq[k];
          w->rot_cos[r * stride + k] = (float)cos(ang);
          w->rot_sin[r * stride + k] = (float)sin(ang);
        }
      }
    }
  }

  for (int li = 0; li < c->n_layers; li++) {
    const aural__layer *L = &m->layers[li];
    /* Attention sublayer. */
    const float *src = w->x;
    if (c->norm_first) {
      aural__layer_norm_to(w->x, w->a, n, c->d_model, L->ln1_w, L->ln1_b,
                           eps);
      src = w->a;
    }
    aural__linear(&L->qkv, L->b_qkv, src, n, w->qkv);
    if (c->pos_encoding == AURAL_POS_ROPE)
      for (size_t r = 0; r < n; r++) {
        const float *cs = w->rot_cos + r * (size_t)(hs / 2 + 1),
                    *sn = w->rot_sin + r * (size_t)(hs / 2 + 1);
        aural__rope(w->qkv + r * 3 * d, c->n_heads, hs, cs, sn);     /* q */
        aural__rope(w->qkv + r * 3 * d + d, c->n_heads, hs, cs, sn); /* k */
      }
    for (size_t s = 0; s < n_segs; s++) attend(w, &segs[s], li);
    aural__linear(&L->out, L->b_out, w->att, n, w->a);
    add_rows(w->x, w->a, n * d);
    if (!c->norm_first)
      aural__layer_norm(w->x, n, c->d_model, L->ln1_w, L->ln1_b, eps);

    /* Feed-forward sublayer. */
    src = w->x;
    if (c->norm_first) {
      aural__layer_norm_to(w->x, w->a, n, c->d_model, L->ln2_w, L->ln2_b,
                           eps);
      src = w->a;
    }
    aural__linear(&L->ff1, L->b_ff1, src, n, w->ff);
    if (c->activation == AURAL_ACT_GELU)
      aural__gelu(w->ff, n * (size_t)c->d_ff);
    else
      aural__relu(w->ff, n * (size_t)c->d_ff);
    aural__linear(&L->ff2, L->b_ff2, w->ff, n, w->a);
    add_rows(w->x, w->a, n * d);
    if (!c->norm_first)
      aural__layer_norm(w->x, n, c->d_model, L->ln2_w, L->ln2_b, eps);
  }
  if (c->final_norm)
    aural__layer_norm(w->x, n, c->d_model, m->norm_w, m->norm_b, eps);

  int any_logits = 0;
  for (size_t s = 0; s < n_segs; s++) any_logits |= segs[s].logits != NULL;
  if (any_logits) aural__linear(&m->head, m->b_head, w->x, n, w->logits);
  size_t v = (size_t)c->vocab_size;
  for (size_t s = 0; s < n_segs; s++) {
    seg *sg = &segs[s];
    if (sg->emb != NULL)
      memcpy(sg->emb, w->x + sg->row0 * d, sg->n * d * sizeof *sg->emb);
    if (sg->logits != NULL)
      memcpy(sg->logits, w->logits + sg->row0 * v,
             sg->n * v * sizeof *sg->logits);
    sg->e->next_frame += sg->n;
  }
}

/* n frames through e in passes over its own scratch. */
static void forward_own(aural_encoder *e, const float *feats, size_t n,
                        float *emb, float *logits) {
  const aural_model_config *c = &e->model->cfg;
  size_t d = (size_t)c->d_model, mels = (size_t)c->fbank.num_mel_bins,
         v = (size_t)c->vocab_size;
  for (size_t done = 0; done < n;) {
    size_t k = n - done < e->own.cap ? n - done : e->own.cap;
    seg sg = {.e = e, .row0 = 0, .n = k, .feats = feats + done * mels,
              .emb = emb ? emb + done * d : NULL,
              .logits = logits ? logits + done * v : NULL};
    run_pass(e->model, &e->own, &sg, 1, k);
    done += k;
  }
}

/* The lead-in, once per stream: the model's silence rows again and again. */
static void prime(aural_encoder *e) {
  if (e->primed) return;
  e->primed = true;
  for (uint64_t done = 0; done < e->lead;) {
    size_t k = e->lead - done < AURAL__LEAD_ROWS ? (size_t)(e->lead - done)
                                                 : AURAL__LEAD_ROWS;
    forward_own(e, e->model->lead_feats, k, NULL, NULL);
    done += k;
  }
}

int aural_encoder_forward(aural_encoder *e, const float *feats, size_t n,
                          float *emb, float *logits) {
  const aural_model_config *c = &e->model->cfg;
  if (n == 0) return 0;
  if (feats == NULL || (logits != NULL && c->vocab_size == 0))
    return AURAL_EINVAL;
  prime(e);
  forward_own(e, feats, n, emb, logits);
  return 0;
}

size_t aural__batch_bytes(const aural_model_config *c, size_t rows) {
  size_t n = work_floats(c, rows), bytes, segs;
  if (n == 0 || !aural__mul_ok(n, sizeof(float), &bytes) ||
      !aural__mul_ok(rows, sizeof(seg) + sizeof(aural_batch_item), &segs) ||
      bytes > SIZE_MAX - segs - sizeof(aural_batch))
    return SIZE_MAX;
  return sizeof(aural_batch) + bytes + segs;
}

int aural_batch_create(const aural_model *model, size_t max_rows,
                       aural_batch **out, aural_err *err) {
  if (out == NULL || model == NULL)
    return aural__err_set(err, AURAL_EINVAL, "batch: no %s",
                          out == NULL ? "out pointer" : "model");
  *out = NULL;
  const aural_model_config *c = aural_model_get_config(model);
  if (max_rows == 0 || max_rows > AURAL_ENCODER_MAX_BATCH_FRAMES)
    return aural__err_set(err, AURAL_EINVAL,
                          "batch: max_rows %zu is outside 1..%d", max_rows,
                          AURAL_ENCODER_MAX_BATCH_FRAMES);
  size_t n = work_floats(c, max_rows);
  aural_batch *b = calloc(1, sizeof *b);
  float *mem = n ? malloc(n * sizeof *mem) : NULL;
  seg *segs = calloc(max_rows, sizeof *segs);
  aural_batch_item *items = calloc(max_rows, sizeof *items);
  if (b == NULL || mem == NULL || segs == NULL || items == NULL) {
    free(b);
    free(mem);
    free(segs);
    free(items);
    return aural__err_set(err, AURAL_ENOMEM,
                          "batch: out of memory for %zu rows", max_rows);
  }
  b->model = model;
  b->mem = mem;
  b->segs = segs;
  b->items = items;
  work_carve(&b->w, c, max_rows, mem);
  *out = b;
  return 0;
}

void aural_batch_destroy(aural_batch *b) {
  if (b == NULL) return;
  free(b->mem);
  free(b->segs);
  free(b->items);
  free(b);
}

const aural_model *aural__batch_model(const aural_batch *b) {
  return b->model;
}

aural_batch_item *aural__batch_items(aural_batch *b, size_t *cap) {
  *cap = b->w.cap;
  return b->items;
}

/* Checks the items of a batch: each of b's model, with its features, no
 * logits without a head, and no encoder twice (a stream's rows must be
 * computed in order: once per call), in one walk, marking each encoder
 * as it goes. */
static int check_items(const aural_batch *b, const aural_batch_item *items,
                       size_t n) {
  const aural_model_config *c = &b->model->cfg;
  int rc = 0;
  size_t i = 0;
  for (; i < n && rc == 0; i++) {
    const aural_batch_item *it = &items[i];
    if (it->enc == NULL || it->enc->model != b->model || it->enc->marked ||
        (it->n > 0 && it->feats == NULL) ||
        (it->logits != NULL && c->vocab_size == 0))
      rc = AURAL_EINVAL;
    else
      it->enc->marked = true;
  }
  for (size_t j = 0; j < i; j++)
    if (items[j].enc != NULL) items[j].enc->marked = false;
  return rc;
}

int aural_encoder_forward_batch(aural_batch *b, const aural_batch_item *items,
                                size_t n_items) {
  if (b == NULL || (items == NULL && n_items > 0)) return AURAL_EINVAL;
  int rc = check_items(b, items, n_items);
  if (rc < 0) return rc;
  const aural_model_config *c = &b->model->cfg;
  for (size_t i = 0; i < n_items; i++)
    if (items[i].n > 0) prime(items[i].enc);
  size_t d = (size_t)c->d_model, mels = (size_t)c->fbank.num_mel_bins,
         v = (size_t)c->vocab_size;
  size_t item = 0, done = 0; /* the next row to place: items[item], row done */
  while (item < n_items) {
    size_t rows = 0, n_segs = 0;
    while (item < n_items && rows < b->w.cap) {
      const aural_batch_item *it = &items[item];
      size_t k = it->n - done;
      if (k > b->w.cap - rows) k = b->w.cap - rows;
      if (k > 0)
        b->segs[n_segs++] = (seg){
            .e = it->enc, .row0 = rows, .n = k,
            .feats = it->feats + done * mels,
            .emb = it->emb ? it->emb + done * d : NULL,
            .logits = it->logits ? it->logits + done * v : NULL};
      rows += k;
      done += k;
      if (done == it->n) {
        item++;
        done = 0;
      }
    }
    if (rows > 0) run_pass(b->model, &b->w, b->segs, n_segs, rows);
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
