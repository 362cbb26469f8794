/*
 * /metrics: the server's state in the Prometheus text exposition format
 * (version 0.0.4). The same numbers as STATS where STATS has them (the
 * per-stream counters are read the same way, under the same lock), plus
 * what only this keeps: a histogram of chunk latencies, and chunks and
 * GAPs lost to slow subscribers over the server's life. Read-only over
 * the registry and the connections, linear in what it lists.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

/* Upper bounds of the latency buckets, in seconds (the last is +Inf). */
static const double latency_bound_s[METRICS_LATENCY_BUCKETS] = {
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0};

void metrics_observe_latency(server *srv, double seconds) {
  metrics_counters *m = &srv->counters;
  int i = 0;
  while (i < METRICS_LATENCY_BUCKETS && seconds > latency_bound_s[i]) i++;
  m->latency_n[i]++;
  m->latency_count++;
  m->latency_sum_s += seconds;
}

/* A growing text buffer; `failed` once an allocation did not succeed. */
typedef struct text {
  char *p;
  size_t len, cap;
  bool failed;
} text;

static void put(text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  if (t->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if ((size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap * 2 + (size_t)n;
    char *q = realloc(t->p, cap);
    if (q == NULL) {
      t->failed = true;
      return;
    }
    t->p = q;
    t->cap = cap;
  }
}

static void family(text *t, const char *name, const char *type,
                   const char *help) {
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A stream's labels. Names are printable ASCII without '\' (PROTOCOL.md
 * 4.14); only '"' needs escaping in a label value. */
static void stream_labels(const stream *s, char *out, size_t cap) {
  char name[2 * AURAL_PROTO_NAME_MAX + 1];
  size_t k = 0;
  for (const char *p = s->name; *p != '\0'; p++) {
    if (*p == '"' || *p == '\\') name[k++] = '\\';
    name[k++] = *p;
  }
  name[k] = '\0';
  snprintf(out, cap, "stream=\"%s\",id=\"%u\",source=\"%s\"", name, s->id,
           source_name(s->source));
}

static void server_gauges(server *srv, text *t) {
  int n_subs = 0;
  size_t queued = 0;
  for (conn *c = srv->conns; c != NULL; c = c->next) {
    n_subs += c->n_subs;
    queued += c->q_bytes;
  }
  family(t, "aurald_uptime_seconds", "gauge", "Seconds since start.");
  put(t, "aurald_uptime_seconds %.3f\n", aurald_mono_s() - srv->t_start);
  family(t, "aurald_clients", "gauge",
         "Connected clients (Unix socket and WebSocket).");
  put(t, "aurald_clients %d\n", srv->n_conns);
  family(t, "aurald_workers", "gauge", "Compute threads.");
  put(t, "aurald_workers %d\n", srv->n_workers);
  family(t, "aurald_streams", "gauge", "Live streams.");
  put(t, "aurald_streams %d\n", srv->n_streams);
  family(t, "aurald_streams_created_total", "counter", "Streams ever created.");
  put(t, "aurald_streams_created_total %llu\n",
      (unsigned long long)srv->streams_created);
  family(t, "aurald_subscribers", "gauge", "Subscriptions on all clients.");
  put(t, "aurald_subscribers %d\n", n_subs);
  family(t, "aurald_queue_bytes", "gauge",
         "Bytes queued to clients and not yet written.");
  put(t, "aurald_queue_bytes %zu\n", queued);
  family(t, "aurald_message_bytes", "gauge",
         "Memory held by encoded messages not yet written to every client.");
  put(t, "aurald_message_bytes %zu\n", msgbuf_live_bytes);
  size_t heap = server_heap_bytes(srv);
  if (heap != 0) {
    family(t, "aurald_heap_bytes", "gauge",
           "Memory allocated from the heap and in use.");
    put(t, "aurald_heap_bytes %zu\n", heap);
  }
  family(t, "aurald_load_ratio", "gauge",
         "Share of the compute threads' time spent in rounds lately.");
  pthread_mutex_lock(&srv->mu);
  double load = srv->load;
  pthread_mutex_unlock(&srv->mu);
  put(t, "aurald_load_ratio %.4f\n", load);
}

static void loss_counters(server *srv, text *t) {
  const metrics_counters *m = &srv->counters;
  family(t, "aurald_chunks_dropped_total", "counter",
         "Chunks not queued to a subscriber over its hard limit.");
  put(t, "aurald_chunks_dropped_total %llu\n",
      (unsigned long long)m->chunks_dropped);
  family(t, "aurald_gaps_total", "counter", "GAP messages sent.");
  put(t, "aurald_gaps_total %llu\n", (unsigned long long)m->gaps_sent);
}

static void latency_histogram(server *srv, text *t) {
  const metrics_counters *m = &srv->counters;
  family(t, "aurald_chunk_latency_seconds", "histogram",
         "From the audio that completed a chunk being available to the "
         "chunk being queued to subscribers.");
  uint64_t cum = 0;
  for (int i = 0; i < METRICS_LATENCY_BUCKETS; i++) {
    cum += m->latency_n[i];
    put(t, "aurald_chunk_latency_seconds_bucket{le=\"%g\"} %llu\n",
        latency_bound_s[i], (unsigned long long)cum);
  }
  cum += m->latency_n[METRICS_LATENCY_BUCKETS];
  put(t, "aurald_chunk_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
      (unsigned long long)cum);
  put(t, "aurald_chunk_latency_seconds_sum %.6f\n", m->latency_sum_s);
  put(t, "aurald_chunk_latency_seconds_count %llu\n",
      (unsigned long long)m->latency_count);
}

/* One family of per-stream samples: what() gives each stream's value. */
typedef double (*stream_value)(server *srv, stream *s);

static double v_frames(server *srv, stream *s) {
  pthread_mutex_lock(&srv->mu);
  double v = (double)s->sched.stat_frames;
  pthread_mutex_unlock(&srv->mu);
  return v;
}
static double v_chunks(server *srv, stream *s) {
  (void)srv;
  return (double)s->loop.chunks_emitted;
}
static double v_compute(server *srv, stream *s) {
  pthread_mutex_lock(&srv->mu);
  double v = s->sched.stat_compute_s;
  pthread_mutex_unlock(&srv->mu);
  return v;
}
static double v_rounds(server *srv, stream *s) {
  pthread_mutex_lock(&srv->mu);
  double v = (double)s->sched.stat_rounds;
  pthread_mutex_unlock(&srv->mu);
  return v;
}
static double v_audio(server *srv, stream *s) {
  pthread_mutex_lock(&srv->mu);
  double v = s->sched.stat_audio_s;
  pthread_mutex_unlock(&srv->mu);
  return v;
}
static double v_cpu(server *srv, stream *s) {
  double audio = v_audio(srv, s);
  return audio > 0 ? v_compute(srv, s) / audio : 0.0;
}
static double v_overruns(server *srv, stream *s) {
  (void)srv;
  return (double)s->loop.overruns;
}
static double v_p50(server *srv, stream *s) {
  (void)srv;
  double p50, p99;
  stream_latency_pcts(s, &p50, &p99);
  return p50 * 1e-3;
}
static double v_p99(server *srv, stream *s) {
  (void)srv;
  double p50, p99;
  stream_latency_pcts(s, &p50, &p99);
  return p99 * 1e-3;
}

static const struct {
  const char *name, *type, *suffix, *help;
  stream_value value;
} stream_families[] = {
    {"aurald_stream_frames", "counter", "_total", "Frames computed.",
     v_frames},
    {"aurald_stream_chunks", "counter", "_total", "Chunks emitted.",
     v_chunks},
    {"aurald_stream_compute_seconds", "counter", "_total",
     "Compute time spent on the stream.", v_compute},
    {"aurald_stream_compute_rounds", "counter", "_total",
     "Compute rounds that took frames of the stream (as STATS).", v_rounds},
    {"aurald_stream_audio_seconds", "counter", "_total",
     "Seconds of audio computed.", v_audio},
    {"aurald_stream_cpu_ratio", "gauge", "",
     "Compute seconds per second of audio.", v_cpu},
    {"aurald_stream_overruns", "counter", "_total", "Input frames lost.",
     v_overruns},
    {"aurald_stream_latency_p50_seconds", "gauge", "",
     "Median chunk latency of the recent chunks (as STATS).", v_p50},
    {"aurald_stream_latency_p99_seconds", "gauge", "",
     "99th percentile chunk latency of the recent chunks (as STATS).",
     v_p99},
};

static void stream_metrics(server *srv, text *t) {
  size_t n = sizeof stream_families / sizeof stream_families[0];
  for (size_t f = 0; f < n; f++) {
    char full[96];
    snprintf(full, sizeof full, "%s%s", stream_families[f].name,
             stream_families[f].suffix);
    family(t, full, stream_families[f].type, stream_families[f].help);
    for (stream *s = srv->streams; s != NULL; s = s->loop.next) {
      char labels[256];
      stream_labels(s, labels, sizeof labels);
      put(t, "%s{%s} %.9g\n", full, labels,
          stream_families[f].value(srv, s));
    }
  }
}

static void subscriber_metrics(server *srv, text *t) {
  family(t, "aurald_client_queue_bytes", "gauge",
         "Bytes queued to the client and not yet written.");
  for (conn *c = srv->conns; c != NULL; c = c->next)
    put(t, "aurald_client_queue_bytes{client=\"%u\",transport=\"%s\"} %zu\n",
        c->id, c->tr != NULL ? "websocket" : "unix", c->q_bytes);
  static const char *const what[2] = {"sent", "dropped"};
  for (int k = 0; k < 2; k++) {
    put(t, "# HELP aurald_subscription_chunks_%s_total Chunks %s to the "
        "subscription.\n# TYPE aurald_subscription_chunks_%s_total "
        "counter\n",
        what[k], k == 0 ? "sent" : "lost (GAP)", what[k]);
    for (conn *c = srv->conns; c != NULL; c = c->next)
      for (subscription *sub = c->subs; sub != NULL; sub = sub->next)
        put(t, "aurald_subscription_chunks_%s_total{client=\"%u\","
            "subscription=\"%u\"} %llu\n",
            what[k], c->id, sub->id,
            (unsigned long long)(k == 0 ? sub->sent : sub->dropped));
  }
}

static void cluster_metrics(server *srv, text *t) {
  if (srv->cluster == NULL) return;
  const cluster_stats st = srv->cluster_stats;
  family(t, "aurald_cluster_up", "gauge",
         "1 while connected to the cluster's Redis (docs/CLUSTER.md).");
  put(t, "aurald_cluster_up %d\n", st.up ? 1 : 0);
  family(t, "aurald_cluster_streams", "gauge", "Cluster streams owned.");
  put(t, "aurald_cluster_streams %d\n", st.streams);
  family(t, "aurald_cluster_chunks_published_total", "counter",
         "Chunks stored in the cluster.");
  put(t, "aurald_cluster_chunks_published_total %llu\n",
      (unsigned long long)st.published);
  family(t, "aurald_cluster_chunks_duplicate_total", "counter",
         "Chunks Redis already held (published again after a resume).");
  put(t, "aurald_cluster_chunks_duplicate_total %llu\n",
      (unsigned long long)st.duplicates);
  family(t, "aurald_cluster_disconnects_total", "counter",
         "Times the connection to the cluster's Redis was lost.");
  put(t, "aurald_cluster_disconnects_total %llu\n",
      (unsigned long long)st.disconnects);
}

size_t metrics_render(server *srv, char **out) {
  text t = {.cap = 16384};
  t.p = malloc(t.cap);
  if (t.p == NULL) {
    *out = NULL;
    return 0;
  }
  server_gauges(srv, &t);
  loss_counters(srv, &t);
  latency_histogram(srv, &t);
  stream_metrics(srv, &t);
  subscriber_metrics(srv, &t);
  cluster_metrics(srv, &t);
  if (t.failed) {
    free(t.p);
    *out = NULL;
    return 0;
  }
  *out = t.p;
  return t.len;
}
