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

/* Prints the member key of obj as a number with the given decimals, in a
 * field of the given width; "-" when it is missing. */
static void put_num(const cJSON *obj, const char *key, int width,
                    int decimals) {
  double v;
  if (client_json_num(obj, key, &v) < 0)
    printf(" %*s", width, "-");
  else
    printf(" %*.*f", width, decimals, v);
}

static void put_str(const cJSON *obj, const char *key, int width) {
  const char *s = client_json_str(obj, key);
  printf("%-*s", width, s ? s : "-");
}

static void print_table(const cJSON *r) {
  double up = 0;
  int64_t clients = -1, workers = -1;
  client_json_num(r, "uptime_s", &up);
  client_json_int(r, "clients", 0, INT64_MAX, &clients);
  client_json_int(r, "workers", 0, INT64_MAX, &workers);
  printf("aurald up %.1f s, %lld client%s, %lld worker%s\n", up,
         (long long)clients, clients == 1 ? "" : "s", (long long)workers,
         workers == 1 ? "" : "s");

  const cJSON *streams = cJSON_GetObjectItemCaseSensitive(r, "streams");
  if (!cJSON_IsArray(streams)) streams = NULL;
  const cJSON *s;
  printf("\nstreams (%d)\n", cJSON_IsArray(streams)
                                 ? cJSON_GetArraySize(streams) : 0);
  printf("%6s  %-20s %-7s %9s %9s %7s %9s %7s %7s %8s\n", "id", "name",
         "source", "audio_s", "frames", "chunks", "compute_s", "p50_ms",
         "p99_ms", "overruns");
  cJSON_ArrayForEach(s, streams) {
    put_num(s, "id", 5, 0);
    printf("  ");
    put_str(s, "name", 20);
    printf(" ");
    put_str(s, "source", 7);
    put_num(s, "audio_s", 9, 2);
    put_num(s, "frames", 9, 0);
    put_num(s, "chunks", 7, 0);
    put_num(s, "compute_s", 9, 3);
    put_num(s, "latency_ms_p50", 7, 1);
    put_num(s, "latency_ms_p99", 7, 1);
    put_num(s, "overruns", 8, 0);
    putchar('\n');
  }

  const cJSON *subs = cJSON_GetObjectItemCaseSensitive(r, "subscribers");
  if (!cJSON_IsArray(subs)) subs = NULL;
  printf("\nsubscribers (%d)\n",
         cJSON_IsArray(subs) ? cJSON_GetArraySize(subs) : 0);
  printf("%7s %6s  %-20s %11s %11s %8s\n", "client", "sub", "stream",
         "queue_bytes", "chunks_sent", "dropped");
  cJSON_ArrayForEach(s, subs) {
    bool all = false;
    put_num(s, "client", 6, 0);
    put_num(s, "subscription", 6, 0);
    printf("  ");
    if (client_json_bool(s, "all", &all) == 0 && all)
      printf("%-20s", "(all)");
    else
      put_str(s, "stream", 20);
    put_num(s, "queue_bytes", 11, 0);
    put_num(s, "chunks_sent", 11, 0);
    put_num(s, "chunks_dropped", 8, 0);
    putchar('\n');
  }
}

/* One STATS page (the reply, parsed into *out) from the given cursors. */
static int stats_page(aural_client *cl, const aural_msg_stats *req,
                      cJSON **out, char *err, size_t err_len) {
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
    if (m.h.type != AURAL_MSG_STATS_REPLY || m.json == NULL) continue;
    *out = cJSON_Duplicate(m.json, 1);
    if (*out == NULL) snprintf(err, err_len, "out of memory");
    return *out != NULL ? 0 : -1;
  }
}

/* Moves the items of page's array `key` to the end of all's. */
static void append_items(cJSON *all, const cJSON *page, const char *key) {
  cJSON *to = cJSON_GetObjectItemCaseSensitive(all, key);
  cJSON *from = cJSON_GetObjectItemCaseSensitive(page, key);
  if (!cJSON_IsArray(to) || !cJSON_IsArray(from)) return;
  while (cJSON_GetArraySize(from) > 0)
    cJSON_AddItemToArray(to, cJSON_DetachItemFromArray(from, 0));
}

/* The whole statistics: the first page, with the streams and subscribers
 * of every further page the server points to appended (a page holds at
 * most 256 streams and 1,024 subscriptions, PROTOCOL.md section 4.15).
 * Pages are walked by id, so streams that start meanwhile are not listed
 * and none is listed twice. */
static int stats_all_pages(aural_client *cl, cJSON **out, char *err,
                           size_t err_len) {
  aural_msg_stats req = {0, 0};
  cJSON *all = NULL;
  for (int page = 0; page < 1 << 20; page++) {
    cJSON *r;
    if (stats_page(cl, &req, &r, err, err_len) < 0) {
      cJSON_Delete(all);
      return -1;
    }
    int64_t next_s = 0, next_c = 0;
    client_json_int(r, "next_streams_before", 1, UINT32_MAX, &next_s);
    client_json_int(r, "next_clients_before", 1, UINT32_MAX, &next_c);
    if (all == NULL) {
      all = r;
    } else {
      append_items(all, r, "streams");
      append_items(all, r, "subscribers");
      cJSON_Delete(r);
    }
    if (next_s == 0 && next_c == 0) {
      cJSON_DeleteItemFromObjectCaseSensitive(all, "next_streams_before");
      cJSON_DeleteItemFromObjectCaseSensitive(all, "next_clients_before");
      *out = all;
      return 0;
    }
    /* A list that is complete is asked past its end on later pages. */
    req.streams_before = next_s ? (uint32_t)next_s : 1;
    req.clients_before = next_c ? (uint32_t)next_c : 1;
  }
  cJSON_Delete(all);
  snprintf(err, err_len, "the statistics never ended");
  return -1;
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
  cJSON *all = NULL;
  if (stats_all_pages(cl, &all, err, sizeof err) < 0) goto fail;
  if (json) {
    char *text = cJSON_PrintUnformatted(all);
    if (text != NULL) puts(text);
    free(text);
  } else {
    print_table(all);
  }
  cJSON_Delete(all);
  rc = fflush(stdout) == 0 ? EXIT_OK : EXIT_FAIL;
  client_close(cl);
  return rc;
fail:
  fprintf(stderr, "aural stats: %s\n", err);
  client_close(cl);
  return rc;
}
