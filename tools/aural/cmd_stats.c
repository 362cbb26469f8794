/*
 * aural stats: asks a running aurald for its statistics (STATS) and prints
 * them as two tables, streams and subscribers, or as the raw JSON reply.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "client.h"

static void usage(FILE *to) {
  char sock[128];
  fprintf(to,
          "Usage: aural stats [-s SOCKET] [--json]\n"
          "\n"
          "Asks a running aurald for its statistics and prints, per stream,\n"
          "the audio, frames and chunks it has processed, the compute time,\n"
          "the latency percentiles (audio available -> chunk queued) and the\n"
          "capture overruns; per subscriber, the bytes queued for it and the\n"
          "chunks sent and dropped.\n"
          "\n"
          "Options:\n"
          "  -s, --socket PATH  aurald's socket (default: $AURAL_SOCKET,\n"
          "                     else $XDG_RUNTIME_DIR/aural.sock, else\n"
          "                     /run/aural/aural.sock for root, else\n"
          "                     /tmp/aural-UID/aural.sock; here %s)\n"
          "      --json         print the statistics as one JSON object\n"
          "                     (PROTOCOL.md section 4.15; the pages of a\n"
          "                     large server's reply joined into one)\n"
          "  -h, --help         show this help\n"
          "\n"
          "Examples:\n"
          "  aural stats\n"
          "  aural stats -s /tmp/x/aural.sock --json | python3 -m json.tool\n"
          "\n"
          "Exit status: 0 on success, 1 if aurald could not be reached or\n"
          "answered with an error, 2 for a bad command line.\n",
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
  printf("aurald up %.1f s, %u client%s, %u worker%s\n", r->uptime_s,
         r->clients, r->clients == 1 ? "" : "s", r->workers,
         r->workers == 1 ? "" : "s");
  printf("\nstreams (%zu)\n", a->n_streams);
  printf("%6s  %-20s %-7s %9s %9s %7s %9s %7s %7s %8s\n", "id", "name",
         "source", "audio_s", "frames", "chunks", "compute_s", "p50_ms",
         "p99_ms", "overruns");
  for (size_t i = 0; i < a->n_streams; i++) {
    const aural_stats_stream *s = &a->streams[i];
    printf(" %5u  %-20s %-7s %9.2f %9llu %7llu %9.3f %7.1f %7.1f %8llu\n",
           s->info.id, s->info.name, aural_source_name(s->info.source),
           s->audio_s, (unsigned long long)s->info.frames,
           (unsigned long long)s->info.chunks, s->compute_s,
           s->latency_ms_p50, s->latency_ms_p99,
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

int cmd_stats(int argc, char **argv) {
  static const struct option opts[] = {
      {"socket", required_argument, NULL, 's'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *sock = NULL;
  int json = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "s:h", opts, NULL)) != -1) {
    switch (c) {
    case 's': sock = optarg; break;
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
  rc = fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
  client_close(cl);
  return rc;
fail:
  fprintf(stderr, "aural stats: %s\n", err);
  client_close(cl);
  return rc;
}
