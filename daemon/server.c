/*
 * The server's lifecycle: what start-up sets up (model, WELCOME, shared
 * queues, loop handles), the orderly stop on a signal, and the teardown.
 * main.c adds options, sources and signals; the fuzz harness for client
 * connections (tests/fuzz/fuzz_daemon.c) uses this file without them.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"

#define SHUTDOWN_S 1.8 /* the whole shutdown stays under 2 s */

/* WELCOME is the same for every client but its id: its fields and the
 * vocabulary's strings are kept, and it is encoded once without the id
 * (the size every client's copy starts from, and what STATS counts as the
 * server's own message bytes). */
static int build_welcome(server *srv) {
  const aural_model_config *mc = srv->mc;
  size_t cap = 4096;
  if (mc->vocab_size > 0) {
    srv->vocab = calloc((size_t)mc->vocab_size, sizeof *srv->vocab);
    if (srv->vocab == NULL) return -1;
  }
  for (int i = 0; i < mc->vocab_size; i++) {
    srv->vocab[i] = aural_model_token(srv->model, i);
    cap += 6 * strlen(srv->vocab[i]) + 4;
  }
  aural_msg_welcome *w = &srv->welcome_msg;
  *w = (aural_msg_welcome){
      .version = AURAL_PROTO_VERSION,
      .server = "aurald " AURAL_VERSION,
      .max_request_bytes = srv->opt->max_request_bytes,
      .max_message_bytes = srv->opt->max_message_bytes,
      .model = {.sample_rate = mc->fbank.sample_rate_hz,
                .n_mels = (uint32_t)mc->fbank.num_mel_bins,
                .frame_ms = mc->fbank.frame_shift_ms,
                .frame_length_ms = mc->fbank.frame_length_ms,
                .d_model = (uint32_t)mc->d_model,
                .n_layers = (uint32_t)mc->n_layers,
                .window = (uint32_t)mc->window,
                .vocab_size = (uint32_t)mc->vocab_size,
                .chunk_frames = (uint32_t)srv->chunk_frames,
                .words = srv->lexicon != NULL}};
  if (aural_model_precision(srv->model) != AURAL_PRECISION_F32)
    snprintf(w->model.precision, sizeof w->model.precision, "%s",
             aural_model_precision_name(aural_model_precision(srv->model)));
  uint8_t *buf = malloc(cap);
  if (buf == NULL) return -1;
  srv->welcome =
      msgbuf_from(buf, aural_proto_encode_welcome(buf, cap, w, srv->vocab));
  free(buf);
  return srv->welcome != NULL ? 0 : -1;
}

/* The lexicon and LM that make words: --lexicon and --lm (a missing one
 * is the file beside the model, plain or gzipped), or, with neither, both
 * files beside the model when both are there. Files named and unreadable
 * stop the start; absent ones only leave words off. */
static int load_words(server *srv, char *why, size_t why_len) {
  const aurald_options *o = srv->opt;
  char lex_path[4096], lm_path[4096];
  if (aural_decoder_resource_path(o->model_path, ".lexicon.txt", lex_path,
                                  sizeof lex_path) < 0 ||
      aural_decoder_resource_path(o->model_path, ".lm", lm_path,
                                  sizeof lm_path) < 0) {
    snprintf(why, why_len, "the model's path is too long");
    return -1;
  }
  bool named = o->lexicon_path != NULL || o->lm_path != NULL;
  if (o->lexicon_path != NULL)
    snprintf(lex_path, sizeof lex_path, "%s", o->lexicon_path);
  if (o->lm_path != NULL) snprintf(lm_path, sizeof lm_path, "%s", o->lm_path);
  if (!named && (access(lex_path, R_OK) != 0 || access(lm_path, R_OK) != 0)) {
    log_info("words off: no %s and %s beside the model", lex_path, lm_path);
    return 0;
  }
  if (srv->mc->vocab_size == 0) {
    if (named) {
      snprintf(why, why_len, "words need a model with a CTC head");
      return -1;
    }
    log_info("words off: the model has no CTC head");
    return 0;
  }
  aural_err err = {0};
  if (aural_lexicon_load(lex_path, srv->model, &srv->lexicon, &err) < 0 ||
      aural_lm_load(lm_path, srv->lexicon, &srv->lm, &err) < 0) {
    snprintf(why, why_len, "%s", err.msg);
    return -1;
  }
  if (stream_words_limits(srv, why, why_len) < 0) return -1;
  aural_lexicon_info li;
  aural_lexicon_get_info(srv->lexicon, &li);
  log_info("words on: %zu words from %s, language model %s", li.n_words,
           lex_path, lm_path);
  /* Custom words need the g2p map beside the model; without it requests
   * that name a vocabulary are refused. */
  char g2p_path[4096];
  aural_decoder_resource_path(o->model_path, ".g2p.txt", g2p_path,
                              sizeof g2p_path); /* fits: the LM's did */
  if (access(g2p_path, R_OK) != 0) {
    log_info("custom words off: no %s", g2p_path);
    return 0;
  }
  if (aural_g2p_load(g2p_path, srv->model, &srv->g2p, &err) < 0) {
    snprintf(why, why_len, "%s", err.msg);
    return -1;
  }
  log_info("custom words on: pronounced by espeak-ng through %s", g2p_path);
  return 0;
}

int server_setup(server *srv, aurald_options *o, uv_loop_t *loop, char *why,
                 size_t why_len) {
  srv->opt = o;
  srv->loop = loop;
  srv->lock_fd = -1;
  srv->t_start = aurald_mono_s();
  /* Test hook: AURALD_SUB_ID_BASE=N gives each connection's subscriptions
   * the ids after N, so that a test meets the wrap of their count. */
  const char *base = getenv("AURALD_SUB_ID_BASE");
  if (base != NULL) srv->sub_id_base = (uint32_t)strtoul(base, NULL, 10);
  pthread_mutex_init(&srv->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* for timed waits */
  pthread_cond_init(&srv->cv, &ca);
  pthread_condattr_destroy(&ca);
  uv_async_init(loop, &srv->wake, server_on_done);
  srv->wake.data = srv;
  uv_timer_init(loop, &srv->tick);
  srv->tick.data = srv;
  uv_timer_init(loop, &srv->deadline);
  srv->deadline.data = srv;
  uv_idle_init(loop, &srv->later);
  srv->later.data = srv;
  srv->on_later = conn_on_later;
  srv->handles_ready = true;

  aural_err err = {0};
  aural_model_load_config lc;
  aural_model_load_config_default(&lc);
  /* --f16 with --precision bf16 is refused with the options (main.c). */
  if (o->f16_weights) lc.weights = AURAL_WEIGHTS_F16;
  lc.precision = o->precision;
  lc.max_memory_bytes = o->max_model_bytes;
  lc.batch_rows = AURALD_BATCH_ROWS;
  if (aural_model_load(o->model_path, &lc, &srv->model, &err) < 0) {
    snprintf(why, why_len, "%s", err.msg);
    return -1;
  }
  srv->mc = aural_model_get_config(srv->model);
  if (o->precision == AURAL_PRECISION_BF16) {
    size_t dot_rows = aural_model_bf16_dot_rows();
    if (dot_rows == SIZE_MAX)
      log_info("precision bf16 (approximate): bfloat16 dot products "
               "(AVX512-BF16)");
    else if (dot_rows > 0)
      log_info("precision bf16 (approximate): bfloat16 dot products "
               "(AVX512-BF16) for products of up to %zu rows; more are "
               "emulated by the f32 kernels (the same results), which this "
               "CPU runs faster than its dot products: rounds of many "
               "streams take a little longer than in f32",
               dot_rows);
    else
      log_info("precision bf16 (approximate): emulated by the f32 kernels "
               "without AVX512-BF16's dot products (this CPU has none, or "
               "AURAL_BF16 or AURAL_ISA set them aside): the same results, "
               "slower than f32");
  }
  /* Chunks in whole frames of the model's frontend. */
  double frame_ms = srv->mc->fbank.frame_shift_ms;
  double frames = o->chunk_ms / frame_ms;
  if (frames < 1 || fabs(frames - round(frames)) > 1e-6) {
    snprintf(why, why_len,
             "--chunk-ms %d is not a whole number of the model's %g ms "
             "frames",
             o->chunk_ms, frame_ms);
    return -2;
  }
  srv->chunk_frames = (size_t)round(frames);
  for (int i = 0; i < srv->mc->vocab_size; i++) {
    size_t n = strlen(aural_model_token(srv->model, i));
    if (n > srv->max_token_bytes) srv->max_token_bytes = n;
  }
  if (load_words(srv, why, why_len) < 0) return -1;
  srv->scratch = malloc(o->max_request_bytes / 2 * sizeof(float));
  if (srv->scratch == NULL || build_welcome(srv) < 0) {
    snprintf(why, why_len, "out of memory at start-up");
    return -1;
  }
  return 0;
}

int server_teardown(server *srv) {
  int rc = 0;
  if (srv->handles_ready && !srv->stopped) {
    /* A start-up that failed before the loop ran: close what was opened
     * and let the loop finish the closes. */
    server_close_handles(srv);
  }
  if (srv->loop != NULL) rc = uv_run(srv->loop, UV_RUN_NOWAIT) != 0;
  /* Streams a failed start-up or the deadline left behind. */
  while (srv->streams != NULL) {
    stream *s = srv->streams;
    srv->streams = s->loop.next;
    stream_destroy(s);
  }
  if (srv->lock_fd >= 0) close(srv->lock_fd);
  srv->lock_fd = -1;
  msgbuf_unref(srv->welcome);
  srv->welcome = NULL;
  free(srv->vocab);
  srv->vocab = NULL;
  free(srv->scratch);
  srv->scratch = NULL;
  aural_lm_destroy(srv->lm);
  srv->lm = NULL;
  aural_g2p_destroy(srv->g2p);
  srv->g2p = NULL;
  aural_lexicon_destroy(srv->lexicon);
  srv->lexicon = NULL;
  aural_model_free(srv->model);
  srv->model = NULL;
  http_free(srv);
  if (srv->handles_ready) {
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    srv->handles_ready = false;
  }
  return rc ? UV_EBUSY : 0;
}

/* ---- shutdown ------------------------------------------------------------ */

static void close_if_open(uv_handle_t *h) {
  if (h->loop != NULL && !uv_is_closing(h)) uv_close(h, NULL);
}

/* Last step of a shutdown: workers are joined (they may still hold
 * streams), leftovers freed, and every handle closed so uv_run returns. */
void server_close_handles(server *srv) {
  if (srv->stopped) return;
  srv->stopped = true;
  for (conn *c = srv->conns; c != NULL; c = c->next) conn_kill(c);
  workers_stop(srv);
  server_on_done(&srv->wake); /* events the workers left */
  /* Its callers are loop callbacks and main: nothing below holds a
   * connection's subscriptions. */
  conn_reap_all(srv);
  cluster_close(srv);
  close_if_open((uv_handle_t *)&srv->later);
  close_if_open((uv_handle_t *)&srv->tick);
  close_if_open((uv_handle_t *)&srv->deadline);
  close_if_open((uv_handle_t *)&srv->sigint);
  close_if_open((uv_handle_t *)&srv->sigterm);
  close_if_open((uv_handle_t *)&srv->sighup);
  close_if_open((uv_handle_t *)&srv->wake);
  if (srv->listening) close_if_open((uv_handle_t *)&srv->listener);
  http_stop(srv);
}

static void on_deadline(uv_timer_t *t) {
  server *srv = t->data;
  log_warn("shutdown: deadline reached with %d streams and %d clients "
           "left; closing them",
           srv->n_streams, srv->n_conns);
  server_close_handles(srv);
}

void server_stop(server *srv, const char *why) {
  if (srv->stopping) return;
  srv->stopping = true;
  log_info("stopping: %s", why);
  notify("STOPPING=1");
  if (srv->listening) {
    uv_close((uv_handle_t *)&srv->listener, NULL);
    srv->listening = false;
    socket_remove(srv); /* not systemd's, nor one that replaced ours */
  }
  mic_stop(srv);
  cluster_stop(srv);
  for (stream *s = srv->streams; s != NULL; s = s->loop.next)
    stream_end_input(s, END_SHUTDOWN, "");
  for (conn *c = srv->conns; c != NULL; c = c->next)
    if (c->reading) {
      conn_read_stop(c);
      c->paused = true; /* no resume */
    }
  uv_timer_start(&srv->deadline, on_deadline,
                 (uint64_t)(SHUTDOWN_S * 1000), 0);
}

