/*
 * aural stats: asks a running aurald for its statistics (STATS) and prints
 * them as two tables, streams and subscribers, or as the raw JSON reply;
 * with --cluster, lists the cluster's nodes from Redis instead (their
 * heartbeats, docs/CLUSTER.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"
#include "redis.h"

static void usage(FILE *to) {
  char sock[128];
  fprintf(to,
          "Usage: aural stats [-s SOCKET] [--json]\n"
          "       aural stats --cluster URL [--json]\n"
          "\n"
          "Asks a running aurald for its statistics and prints, per stream,\n"
          "the audio, frames and chunks it has processed, the compute time\n"
          "and the compute rounds it took (frames / rounds: frames computed\n"
          "at a time), the latency percentiles (audio available -> chunk\n"
          "queued) and the capture overruns; per subscriber, the bytes queued\n"
          "for it and the chunks sent and dropped. With --cluster, lists the\n"
          "cluster's nodes instead: id, host, pid, alive (its heartbeat has\n"
          "not expired; 'dead' once it has), streams/capacity, load, seconds\n"
          "since its last heartbeat and the names of its streams.\n"
          "\n"
          "Options:\n"
          "  -s, --socket PATH  aurald's socket (default: $AURAL_SOCKET,\n"
          "                     else $XDG_RUNTIME_DIR/aural.sock, else\n"
          "                     /run/aural/aural.sock for root, else\n"
          "                     /tmp/aural-UID/aural.sock;\n"
          "                     here %s)\n"
          CLUSTER_HELP
          "      --json         print the statistics as one JSON object\n"
          "                     (PROTOCOL.md section 4.15; the pages of a\n"
          "                     large server's reply joined into one; with\n"
          "                     --cluster: {\"cluster\": URL, \"nodes\": [...]},\n"
          "                     each node its heartbeat's fields with \"alive\"\n"
          "                     and \"last_heartbeat_ms\")\n"
          "  -h, --help         show this help\n"
          "\n"
          "Examples:\n"
          "  aural stats\n"
          "  aural stats -s /tmp/x/aural.sock --json | python3 -m json.tool\n"
          "  aural stats --cluster redis://10.0.0.5\n"
          "\n"
          "Exit status: 0 on success, 1 if aurald or Redis could not be\n"
          "reached or answered with an error, 2 for a bad command line.\n",
          client_default_socket(sock, sizeof sock));
}

/* Every page's entries joined, with the first page's counts. */
typedef struct stats_all {
  aural_msg_stats_reply head; /* its lists and cursors are not used */
  aural_stats_stream *streams;
  size_t n_streams, cap_streams;
  aural_stats_subscriber *subs;
  size_t n_subs, cap_subs;
} stats_all;

static void stats_all_free(stats_all *a) {
  free(a->streams);
  free(a->subs);
}

/* Room for one more element of size bytes in *p (n used, *cap there). */
static bool grow(void **p, size_t n, size_t *cap, size_t size) {
  if (n < *cap) return true;
  size_t c = *cap ? 2 * *cap : 64;
  void *q = realloc(*p, c * size);
  if (q == NULL) return false;
  *p = q;
  *cap = c;
  return true;
}

static void print_table(const stats_all *a) {
  const aural_msg_stats_reply *r = &a->head;
  printf("aurald up %.1f s, %u client%s, %u worker%s", r->uptime_s,
         r->clients, r->clients == 1 ? "" : "s", r->workers,
         r->workers == 1 ? "" : "s");
  if (r->heap_bytes != 0)
    printf(", %.1f MiB allocated", (double)r->heap_bytes / (1 << 20));
  printf("\n");
  printf("\nstreams (%zu)\n", a->n_streams);
  printf("%6s  %-20s %-7s %9s %9s %7s %9s %7s %7s %7s %8s\n", "id", "name",
         "source", "audio_s", "frames", "chunks", "compute_s", "rounds",
         "p50_ms", "p99_ms", "overruns");
  for (size_t i = 0; i < a->n_streams; i++) {
    const aural_stats_stream *s = &a->streams[i];
    printf(" %5u  %-20s %-7s %9.2f %9llu %7llu %9.3f %7llu %7.1f %7.1f "
           "%8llu\n",
           s->info.id, s->info.name, aural_source_name(s->info.source),
           s->audio_s, (unsigned long long)s->info.frames,
           (unsigned long long)s->info.chunks, s->compute_s,
           (unsigned long long)s->rounds, s->latency_ms_p50, s->latency_ms_p99,
           (unsigned long long)s->overruns);
  }
  printf("\nsubscribers (%zu)\n", a->n_subs);
  printf("%7s %6s  %-20s %11s %11s %8s\n", "client", "sub", "stream",
         "queue_bytes", "chunks_sent", "dropped");
  for (size_t i = 0; i < a->n_subs; i++) {
    const aural_stats_subscriber *s = &a->subs[i];
    printf(" %6u %6u  %-20s %11llu %11llu %8llu\n", s->client,
           s->subscription, s->all ? "(all)" : s->stream,
           (unsigned long long)s->queue_bytes,
           (unsigned long long)s->chunks_sent,
           (unsigned long long)s->chunks_dropped);
  }
}

/* The joined statistics as one STATS_REPLY payload without cursors,
 * written by proto's encoder. Returns 0 or -1 (out of memory). */
static int print_json(const stats_all *a) {
  size_t cap = 4096 + a->n_streams * 1024 + a->n_subs * 768;
  uint8_t *buf = malloc(cap);
  if (buf == NULL) return -1;
  aural_msg_stats_reply head = a->head;
  head.next_streams_before = head.next_clients_before = 0;
  aural_msg_writer mw;
  aural_proto_stats_reply_begin(&mw, buf, cap, &head);
  for (size_t i = 0; i < a->n_streams; i++)
    aural_proto_stats_reply_add_stream(&mw, &a->streams[i]);
  for (size_t i = 0; i < a->n_subs; i++)
    aural_proto_stats_reply_add_subscriber(&mw, &a->subs[i]);
  size_t n = aural_proto_stats_reply_end(&mw, &head);
  if (n > 0)
    printf("%.*s\n", (int)(n - AURAL_PROTO_HEADER_BYTES),
           (const char *)buf + AURAL_PROTO_HEADER_BYTES);
  free(buf);
  return n > 0 ? 0 : -1;
}

/* Appends the entries of one decoded page to a. */
static int append_page(stats_all *a, aural_msg_stats_reply *r, char *err,
                       size_t err_len) {
  char why[256];
  int rc = 1;
  while (rc == 1) {
    if (!grow((void **)&a->streams, a->n_streams, &a->cap_streams,
              sizeof *a->streams))
      goto oom;
    rc = aural_proto_stats_stream_next(&r->streams,
                                       &a->streams[a->n_streams], why,
                                       sizeof why);
    if (rc == 1) a->n_streams++;
  }
  if (rc == 0) rc = 1;
  while (rc == 1) {
    if (!grow((void **)&a->subs, a->n_subs, &a->cap_subs, sizeof *a->subs))
      goto oom;
    rc = aural_proto_stats_subscriber_next(&r->subscribers,
                                           &a->subs[a->n_subs], why,
                                           sizeof why);
    if (rc == 1) a->n_subs++;
  }
  if (rc < 0) snprintf(err, err_len, "malformed STATS_REPLY: %s", why);
  return rc;
oom:
  snprintf(err, err_len, "out of memory");
  return -1;
}

/* One STATS page from the given cursors, appended to a; its cursors in
 * *next. */
static int stats_page(aural_client *cl, const aural_msg_stats *req,
                      stats_all *a, aural_msg_stats *next, char *err,
                      size_t err_len) {
  uint8_t buf[128];
  size_t n = aural_proto_encode_stats(buf, sizeof buf, req);
  if (client_send(cl, buf, n, err, err_len) < 0) return -1;
  for (;;) {
    client_msg m;
    int r = client_read(cl, &m, err, err_len);
    if (r == 1) snprintf(err, err_len, "aurald closed the connection");
    if (r == -EINTR) snprintf(err, err_len, "interrupted");
    if (r != 0) return -1;
    if (m.h.type == AURAL_MSG_ERROR) {
      client_error(&m, err, err_len, NULL);
      return -1;
    }
    if (m.h.type != AURAL_MSG_STATS_REPLY) continue;
    if (req->streams_before == 0 && req->clients_before == 0)
      a->head = m.u.stats;
    next->streams_before = m.u.stats.next_streams_before;
    next->clients_before = m.u.stats.next_clients_before;
    return append_page(a, &m.u.stats, err, err_len);
  }
}

/* The whole statistics: the first page, with the streams and subscribers
 * of every further page the server points to appended (a page holds at
 * most 256 streams and 1,024 subscriptions, PROTOCOL.md section 4.15).
 * Pages are walked by id, so streams that start meanwhile are not listed
 * and none is listed twice. */
static int stats_all_pages(aural_client *cl, stats_all *a, char *err,
                           size_t err_len) {
  aural_msg_stats req = {0, 0};
  for (;;) {
    aural_msg_stats next;
    if (stats_page(cl, &req, a, &next, err, err_len) < 0) return -1;
    if (next.streams_before == 0 && next.clients_before == 0) return 0;
    /* A list that is complete is asked past its end on later pages. */
    next.streams_before = next.streams_before ? next.streams_before : 1;
    next.clients_before = next.clients_before ? next.clients_before : 1;
    /* Each page must start below the last (ids only fall), or a server
     * could keep us reading for ever. */
    bool s_ok = req.streams_before == 0 ||
                next.streams_before < req.streams_before ||
                next.streams_before == 1;
    bool c_ok = req.clients_before == 0 ||
                next.clients_before < req.clients_before ||
                next.clients_before == 1;
    if (!s_ok || !c_ok || (next.streams_before == req.streams_before &&
                           next.clients_before == req.clients_before)) {
      snprintf(err, err_len, "malformed STATS_REPLY: its next page does "
                             "not start below the last one");
      return -1;
    }
    req = next;
  }
}

/* --- the cluster ------------------------------------------------------------ */

/* A node of the set aural:nodes: the time of its last heartbeat and the
 * heartbeat key's value, a string while the node lives, nil once it
 * expired. */
typedef struct node {
  const char *id;   /* in the ZRANGE reply */
  double last_ms;   /* the set's score */
  redisReply *beat; /* GET aural:node:ID, or NULL when wrong_type */
  bool wrong_type;  /* that key is no string: not a heartbeat */
} node;

/* A heartbeat decoded (CLUSTER.md: aural:node:ID). */
typedef struct heartbeat {
  aural_json js;
  char host[256];
  int64_t pid, capacity, started_us;
  double load;
  aural_json_list streams; /* the names, strings */
} heartbeat;

static bool alive(const node *n) {
  return n->beat != NULL && n->beat->type == REDIS_REPLY_STRING;
}

/* Why a node's heartbeat key holds no heartbeat of any age, or NULL. */
static const char *wrong_type(const node *n, char *why, size_t why_len) {
  if (!n->wrong_type) return NULL;
  snprintf(why, why_len, "%s%.64s is not a string: no heartbeat",
           AURAL_CLUSTER_NODE_PREFIX, n->id);
  return why;
}

/* Decodes a live node's heartbeat. Returns 0, or -1 with why naming the
 * field at fault. */
static int parse_heartbeat(const node *n, heartbeat *hb, char *why,
                           size_t why_len) {
  aural_json *js = &hb->js;
  char e[160];
  if (aural_json_parse_lists(js, n->beat->str, n->beat->len, e, sizeof e) <
      0) {
    snprintf(why, why_len, "heartbeat is not JSON: %s", e);
    return -1;
  }
  const char *field = NULL;
  if (aural_json_string(js, aural_json_get(js, 0, "host"), hb->host,
                        sizeof hb->host) < 0)
    field = "host";
  else if (aural_json_int(js, aural_json_get(js, 0, "pid"), 1, INT32_MAX,
                          &hb->pid) < 0)
    field = "pid";
  else if (aural_json_int(js, aural_json_get(js, 0, "capacity"), 0,
                          INT32_MAX, &hb->capacity) < 0)
    field = "capacity";
  else if (aural_json_double(js, aural_json_get(js, 0, "load"), &hb->load) <
           0)
    field = "load";
  else if (aural_json_int(js, aural_json_get(js, 0, "started_us"), 0,
                          INT64_MAX, &hb->started_us) < 0)
    field = "started_us";
  else if (aural_json_list_init(js, aural_json_get(js, 0, "streams"),
                                &hb->streams) < 0)
    field = "streams";
  if (field != NULL)
    snprintf(why, why_len, "heartbeat lacks a valid \"%s\"", field);
  return field != NULL ? -1 : 0;
}

/* The next stream name of a heartbeat into out: 1, 0 after the last, -1. */
static int next_stream(aural_json_list *l, char *out, size_t cap) {
  aural_json item;
  int rc = aural_json_list_next(l, &item, NULL, 0);
  if (rc != 1) return rc < 0 ? -1 : 0;
  return aural_json_string(&item, 0, out, cap) < 0 ? -1 : 1;
}

static void print_node(const node *n, heartbeat *hb, double now_ms) {
  char id[64], host[32], why[200], names[1024] = "",
                                   name[AURAL_PROTO_TEXT_MAX + 1];
  double age_s = (now_ms - n->last_ms) / 1000;
  printf("%-24s ", cli_printable(n->id, strlen(n->id), id, sizeof id));
  if (!alive(n)) {
    const char *bad = wrong_type(n, why, sizeof why);
    printf("%-20s %8s %-5s %9s %6s %10.1f", "-", "-", "dead", "-", "-",
           age_s);
    if (bad != NULL)
      printf("  (%s)", cli_printable(bad, strlen(bad), why, sizeof why));
    putchar('\n');
    return;
  }
  if (parse_heartbeat(n, hb, why, sizeof why) < 0) {
    printf("%-20s %8s %-5s %9s %6s %10.1f  (%s)\n", "-", "-", "yes", "-",
           "-", age_s, why);
    return;
  }
  aural_json_list l = hb->streams;
  size_t at = 0;
  while (next_stream(&l, name, sizeof name) == 1 && at + 1 < sizeof names)
    at += (size_t)snprintf(
        names + at, sizeof names - at, "%s%s", at ? " " : "",
        cli_printable(name, strlen(name), name, sizeof name));
  char used[32];
  snprintf(used, sizeof used, "%u/%lld", hb->streams.n_items,
           (long long)hb->capacity);
  printf("%-20s %8lld %-5s %9s %6.2f %10.1f  %s\n",
         cli_printable(hb->host, strlen(hb->host), host, sizeof host),
         (long long)hb->pid, "yes", used, hb->load, age_s, names);
}

static int by_id(const void *a, const void *b) {
  return strcmp(((const node *)a)->id, ((const node *)b)->id);
}

static int print_nodes(const node *nodes, size_t n, const char *url) {
  heartbeat *hb = malloc(sizeof *hb);
  if (hb == NULL) return -1;
  double now_ms = (double)client_realtime_us() / 1000;
  size_t n_alive = 0;
  for (size_t i = 0; i < n; i++) n_alive += alive(&nodes[i]);
  printf("cluster at %s: %zu node%s, %zu alive\n\n", url, n,
         n == 1 ? "" : "s", n_alive);
  printf("%-24s %-20s %8s %-5s %9s %6s %10s  %s\n", "node", "host", "pid",
         "alive", "streams", "load", "beat_age_s", "stream names");
  for (size_t i = 0; i < n; i++) print_node(&nodes[i], hb, now_ms);
  free(hb);
  return 0;
}

/* One node as a JSON object: alive, the time of its last heartbeat, and
 * the heartbeat's fields (or "error" when it does not decode). */
static void node_json(aural_jw *w, const node *n, heartbeat *hb) {
  char why[200], name[AURAL_PROTO_TEXT_MAX + 1];
  aural_jw_begin_object(w);
  aural_jw_key(w, "id");
  aural_jw_string(w, n->id);
  aural_jw_key(w, "alive");
  aural_jw_bool(w, alive(n));
  aural_jw_key(w, "last_heartbeat_ms");
  aural_jw_int(w, (int64_t)n->last_ms);
  if (wrong_type(n, why, sizeof why) != NULL) {
    aural_jw_key(w, "error");
    aural_jw_string(w, why);
  } else if (alive(n) && parse_heartbeat(n, hb, why, sizeof why) < 0) {
    aural_jw_key(w, "error");
    aural_jw_string(w, why);
  } else if (alive(n)) {
    aural_jw_key(w, "host");
    aural_jw_string(w, hb->host);
    aural_jw_key(w, "pid");
    aural_jw_int(w, hb->pid);
    aural_jw_key(w, "capacity");
    aural_jw_int(w, hb->capacity);
    aural_jw_key(w, "load");
    aural_jw_double(w, hb->load);
    aural_jw_key(w, "started_us");
    aural_jw_int(w, hb->started_us);
    aural_jw_key(w, "streams");
    aural_jw_begin_array(w);
    aural_json_list l = hb->streams;
    while (next_stream(&l, name, sizeof name) == 1) aural_jw_string(w, name);
    aural_jw_end_array(w);
  }
  aural_jw_end_object(w);
}

static int print_nodes_json(const node *nodes, size_t n, const char *url) {
  size_t cap = 4096;
  for (size_t i = 0; i < n; i++)
    cap += 1024 + 6 * (strlen(nodes[i].id) +
                       (alive(&nodes[i]) ? nodes[i].beat->len : 0));
  char *buf = malloc(cap);
  heartbeat *hb = malloc(sizeof *hb);
  long len = -1;
  if (buf != NULL && hb != NULL) {
    aural_jw w;
    aural_jw_init(&w, buf, cap);
    aural_jw_begin_object(&w);
    aural_jw_key(&w, "cluster");
    aural_jw_string(&w, url);
    aural_jw_key(&w, "nodes");
    aural_jw_begin_array(&w);
    for (size_t i = 0; i < n; i++) node_json(&w, &nodes[i], hb);
    aural_jw_end_array(&w);
    aural_jw_end_object(&w);
    len = aural_jw_finish(&w);
  }
  if (len >= 0) printf("%.*s\n", (int)len, buf);
  free(buf);
  free(hb);
  return len >= 0 ? 0 : -1;
}

/* The set aural:nodes into *zr and each node with its heartbeat key's
 * value into *nodes (n of them, ids pointing into *zr). */
static int read_nodes(cluster_conn *c, redisReply **zr, node **nodes,
                      size_t *n, char *err, size_t err_len) {
  cluster_args a;
  cluster_args_list(&a, "ZRANGE", AURAL_CLUSTER_NODES, "0", "-1",
                    "WITHSCORES", NULL);
  if ((*zr = cluster_run(c, &a, err, err_len)) == NULL) return -1;
  const redisReply *r = *zr;
  if (r->type != REDIS_REPLY_ARRAY) {
    snprintf(err, err_len, "Redis at %s: ZRANGE %s: not an array",
             c->url_text, AURAL_CLUSTER_NODES);
    return -1;
  }
  if ((*nodes = calloc(r->elements / 2 + 1, sizeof **nodes)) == NULL) {
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  for (; *n < r->elements / 2; (*n)++) {
    node *d = &(*nodes)[*n];
    const redisReply *id = r->element[2 * *n], *score = r->element[2 * *n + 1];
    d->id = id->type == REDIS_REPLY_STRING ? id->str : "?";
    d->last_ms = score->type == REDIS_REPLY_STRING ? strtod(score->str, NULL)
                                                   : 0;
    char key[sizeof AURAL_CLUSTER_NODE_PREFIX + 512];
    snprintf(key, sizeof key, "%s%s", AURAL_CLUSTER_NODE_PREFIX, d->id);
    cluster_args_list(&a, "GET", key, NULL);
    /* A key of another type (another program's) is that node's error,
     * not the listing's. */
    if ((d->beat = cluster_run(c, &a, err, err_len)) == NULL &&
        !(d->wrong_type = strncmp(c->said, "WRONGTYPE", 9) == 0))
      return -1;
  }
  return 0;
}

/* aural stats --cluster: the nodes, alive or dead, their load and their
 * streams. */
static int stats_cluster(const char *url, const char *password_file,
                         bool json) {
  char err[600];
  cluster_conn c;
  if (cluster_connect(&c, url, password_file, err, sizeof err) < 0) {
    fprintf(stderr, "aural stats: %s\n", err);
    return EXIT_FAIL;
  }
  redisReply *zr = NULL;
  node *nodes = NULL;
  size_t n = 0;
  int rc = read_nodes(&c, &zr, &nodes, &n, err, sizeof err);
  if (rc == 0) qsort(nodes, n, sizeof *nodes, by_id);
  if (rc == 0 && (json ? print_nodes_json(nodes, n, c.url_text)
                        : print_nodes(nodes, n, c.url_text)) < 0) {
    snprintf(err, sizeof err, "out of memory");
    rc = -1;
  }
  if (rc == 0 && cli_stdout_flush(err, sizeof err) < 0) rc = -1;
  if (rc < 0) fprintf(stderr, "aural stats: %s\n", err);
  for (size_t i = 0; i < n; i++) freeReplyObject(nodes[i].beat);
  free(nodes);
  freeReplyObject(zr);
  cluster_close(&c);
  return rc < 0 ? EXIT_FAIL : EXIT_OK;
}

int cmd_stats(int argc, char **argv) {
  static const struct option opts[] = {
      {"socket", required_argument, NULL, 's'},
      {"cluster", required_argument, NULL, 'C'},
      {"cluster-password-file", required_argument, NULL, 'P'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *sock = NULL, *cluster = NULL, *password_file = NULL;
  int json = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "s:h", opts, NULL)) != -1) {
    switch (c) {
    case 's': sock = optarg; break;
    case 'C': cluster = optarg; break;
    case 'P': password_file = optarg; break;
    case 'J': json = 1; break;
    case 'h': usage(stdout); return EXIT_OK;
    default:
      fprintf(stderr, "(see 'aural stats --help')\n");
      return EXIT_USAGE;
    }
  }
  if (optind != argc) {
    fprintf(stderr, "aural stats: unexpected argument '%s'\n"
                    "(see 'aural stats --help')\n", argv[optind]);
    return EXIT_USAGE;
  }
  char why[600];
  const char *bad = cluster_options(cluster, password_file, sock, why,
                                    sizeof why);
  if (bad != NULL) {
    fprintf(stderr, "aural stats: %s\n(see 'aural stats --help')\n", bad);
    return EXIT_USAGE;
  }
  if (cluster != NULL) return stats_cluster(cluster, password_file, json);

  char err[512];
  aural_client *cl;
  if (client_connect(sock, "aural stats", &cl, err, sizeof err) < 0) {
    fprintf(stderr, "aural stats: %s\n", err);
    return EXIT_FAIL;
  }
  int rc = EXIT_FAIL;
  stats_all all = {0};
  if (stats_all_pages(cl, &all, err, sizeof err) < 0) {
    stats_all_free(&all);
    goto fail;
  }
  if (json) {
    if (print_json(&all) < 0) {
      snprintf(err, sizeof err, "out of memory");
      stats_all_free(&all);
      goto fail;
    }
  } else {
    print_table(&all);
  }
  stats_all_free(&all);
  rc = EXIT_OK; /* main() checks that stdout got the table */
  client_close(cl);
  return rc;
fail:
  fprintf(stderr, "aural stats: %s\n", err);
  client_close(cl);
  return rc;
}
