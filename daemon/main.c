/*
 * aurald: the streaming speech-frame encoder daemon (DESIGN.md §4).
 *
 * Start-up loads the model, takes the socket (socket.c), starts the
 * compute workers and the sources, then runs the loop until SIGINT or
 * SIGTERM. Shutdown stops accepting, ends every stream (their final
 * chunks still go out), tells clients SHUTDOWN, and closes every handle,
 * within 2 s (server.c).
 */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <malloc.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <aural/cluster.h>

#include "daemon.h"

#define TICK_MS 10
/* At exit, how long the last log lines may wait for a stderr that does not
 * take them (a healthy one takes them at once). */
#define LOG_DRAIN_S 0.5

enum {
  OPT_CHUNK_MS = 256, OPT_MIC, OPT_LIST, OPT_FILE, OPT_REALTIME, OPT_EXIT,
  OPT_HOLD, OPT_THREADS, OPT_MAX_CLIENTS, OPT_MAX_STREAMS, OPT_HARD, OPT_SOFT,
  OPT_SOFT_S, OPT_HELLO_TIMEOUT, OPT_GROUP, OPT_F16, OPT_PRECISION, OPT_MAX_MODEL_MEM, OPT_LOG,
  OPT_CONFIG, OPT_NO_CONFIG, OPT_LEXICON, OPT_LM, OPT_CLUSTER,
  OPT_CLUSTER_OPTIONAL, OPT_CLUSTER_PASSWORD, OPT_CLUSTER_NODE,
  OPT_CLUSTER_CAPACITY, OPT_CLUSTER_RETENTION, OPT_CLUSTER_TTL,
  OPT_CLUSTER_TIMEOUT, OPT_CLUSTER_EXPIRE, OPT_CLUSTER_IDLE,
  OPT_CLUSTER_OUTPUTS,
  OPT_CLUSTER_DTYPE,
  OPT_HTTP, OPT_HTTP_TOKEN, OPT_HTTP_ORIGIN, OPT_HTTP_CERT, OPT_HTTP_KEY,
  OPT_HTTP_ROOT,
  /* --no-NAME of options[i] is OPT_NO + i. */
  OPT_NO = 1024,
};

/* Every option once: getopt's table and --help are made from this list,
 * so they cannot disagree (the config file's keys are the same names). */
typedef struct option_doc {
  const char *name;
  int has_arg;      /* no_argument, required_argument, optional_argument */
  int id;           /* the short option, or OPT_* */
  const char *arg;  /* as --help shows it: " PATH", "[=NAME|INDEX]" */
  const char *help; /* its lines, '\n' between them */
  unsigned conf;    /* CONFIG_* flags of its key in the config file */
} option_doc;

static const option_doc options[] = {
    {"model", required_argument, 'm', " PATH",
     "model file (default: the bundled model)",
     CONFIG_PATH},
    {"lexicon", required_argument, OPT_LEXICON, " PATH",
     "lexicon of the words output, plain or gzipped\n"
     "(default: MODEL.lexicon.txt, else .txt.gz,\n"
     "beside the model; words are on when it and\n"
     "the LM are both there)",
     CONFIG_PATH},
    {"lm", required_argument, OPT_LM, " PATH",
     "language model of the words output, ARPA or\n"
     "aural's binary form, plain or gzipped (default:\n"
     "beside the model, MODEL.lm.bin, .lm.bin.gz,\n"
     ".lm.arpa or .lm.arpa.gz, the first there)",
     CONFIG_PATH},
    {"socket", required_argument, 's', " PATH",
     "socket path (default: $AURAL_SOCKET, else\n"
     "$XDG_RUNTIME_DIR/aural.sock, /run/aural/aural.sock\n"
     "for root, /tmp/aural-UID/aural.sock otherwise)",
     CONFIG_PATH},
    {"chunk-ms", required_argument, OPT_CHUNK_MS, " N",
     "chunk length in ms, 1 to 600000 and a whole\n"
     "number of the model's frames (default 500)",
     CONFIG_ONCE},
    {"mic", optional_argument, OPT_MIC, "[=NAME|INDEX]",
     "capture from the default input device, or the one\n"
     "named (a substring of its name) or numbered",
     CONFIG_ONCE},
    {"list-devices", no_argument, OPT_LIST, "", "list input devices and exit",
     CONFIG_NEVER},
    {"file", required_argument, OPT_FILE, " PATH",
     "encode an audio file as a stream named after its\n"
     "base name; repeatable",
     CONFIG_PATH | CONFIG_REPEAT},
    {"realtime", no_argument, OPT_REALTIME, "",
     "pace the --file just before at 1x real time\n"
     "(default: as fast as possible)",
     CONFIG_REPEAT},
    {"exit-when-done", no_argument, OPT_EXIT, "",
     "exit once every --file stream has ended (at\n"
     "least one --file is needed)",
     CONFIG_ONCE},
    {"hold", no_argument, OPT_HOLD, "",
     "start each --file and --mic source only when its\n"
     "first subscriber arrives (default: at once)",
     CONFIG_ONCE},
    {"threads", required_argument, OPT_THREADS, " N",
     "compute threads (default: one per CPU it may\n"
     "run on)",
     CONFIG_ONCE},
    {"max-clients", required_argument, OPT_MAX_CLIENTS, " N",
     "simultaneous connections (default 1024)",
     CONFIG_ONCE},
    {"max-streams", required_argument, OPT_MAX_STREAMS, " N",
     "simultaneous streams (default 1024)",
     CONFIG_ONCE},
    {"sub-hard-limit", required_argument, OPT_HARD, " B",
     "a subscriber's queue above B bytes loses chunks\n"
     "(reported by GAP); suffixes K, M, G (default 16M)",
     CONFIG_ONCE},
    {"sub-soft-limit", required_argument, OPT_SOFT, " B",
     "a queue above B bytes for too long is\n"
     "disconnected (default 4M)",
     CONFIG_ONCE},
    {"sub-soft-seconds", required_argument, OPT_SOFT_S, " S",
     "how long is too long (default 10)",
     CONFIG_ONCE},
    {"hello-timeout", required_argument, OPT_HELLO_TIMEOUT, " S",
     "close connections that have not sent HELLO\n"
     "S seconds after connecting (default 10)",
     CONFIG_ONCE},
    {"group", required_argument, OPT_GROUP, " NAME",
     "also accept clients whose group is NAME",
     CONFIG_ONCE},
    {"f16", no_argument, OPT_F16, "", "keep weights in half precision in memory",
     CONFIG_ONCE},
    {"precision", required_argument, OPT_PRECISION, " P",
     "f32 (default: exact) or bf16 (opt-in and\n"
     "approximate: bfloat16 products, faster only on\n"
     "CPUs with AVX512-BF16; see the README)",
     CONFIG_ONCE},
    {"max-model-memory", required_argument, OPT_MAX_MODEL_MEM, " B",
     "refuse a model whose weights, one stream and\n"
     "one compute thread's scratch need more than B\n"
     "bytes; suffixes K, M, G (default 2G)",
     CONFIG_ONCE},
    {"cluster", required_argument, OPT_CLUSTER, " URL",
     "also take streams from a Redis cluster:\n"
     "redis://[USER@]HOST[:PORT][/DB] or unix:PATH\n"
     "(docs/CLUSTER.md); exits if it is unreachable",
     CONFIG_URL},
    {"cluster-optional", no_argument, OPT_CLUSTER_OPTIONAL, "",
     "serve locally while the cluster is unreachable,\n"
     "and join it when it answers",
     CONFIG_ONCE},
    {"cluster-password-file", required_argument, OPT_CLUSTER_PASSWORD,
     " PATH", "the Redis password, first line of PATH (mode\n"
     "0600); else $AURAL_REDIS_PASSWORD",
     CONFIG_PATH},
    {"cluster-node", required_argument, OPT_CLUSTER_NODE, " ID",
     "this node's name in the cluster (default\n"
     "HOST-PID)",
     CONFIG_ONCE},
    {"cluster-capacity", required_argument, OPT_CLUSTER_CAPACITY, " N",
     "take at most N cluster streams (default 64)",
     CONFIG_ONCE},
    {"cluster-retention", required_argument, OPT_CLUSTER_RETENTION, " N",
     "keep about N chunks of each stream's output in\n"
     "Redis (default 1200: 10 minutes)",
     CONFIG_ONCE},
    {"cluster-ttl", required_argument, OPT_CLUSTER_TTL, " S",
     "heartbeat expiry: a node silent for S seconds\n"
     "loses its streams to the others (default 3)",
     CONFIG_ONCE},
    {"cluster-timeout", required_argument, OPT_CLUSTER_TIMEOUT, " S",
     "reconnect when Redis has not answered for S\n"
     "seconds (default 10)",
     CONFIG_ONCE},
    {"cluster-expire", required_argument, OPT_CLUSTER_EXPIRE, " S",
     "an ended stream's outputs stay S seconds\n"
     "(default 86400)",
     CONFIG_ONCE},
    {"cluster-idle", required_argument, OPT_CLUSTER_IDLE, " S",
     "end a cluster stream whose producer has added\n"
     "no audio for S seconds (default 60; 0: never)",
     CONFIG_ONCE},
    {"cluster-outputs", required_argument, OPT_CLUSTER_OUTPUTS, " LIST",
     "what each published chunk carries: embeddings,\n"
     "logits, text (default: all the model has)",
     CONFIG_ONCE},
    {"cluster-dtype", required_argument, OPT_CLUSTER_DTYPE, " T",
     "f32 (default) or f16 for published chunks",
     CONFIG_ONCE},
    {"http", required_argument, OPT_HTTP, " ADDR:PORT",
     "serve the page, /ws, /metrics and /healthz over\n"
     "HTTP (off by default; e.g. 127.0.0.1:8080)",
     CONFIG_ONCE},
    {"http-token-file", required_argument, OPT_HTTP_TOKEN, " PATH",
     "require \"Authorization: Bearer TOKEN\" on every\n"
     "HTTP request, TOKEN read from PATH (required\n"
     "when ADDR is not a loopback address)",
     CONFIG_PATH},
    {"http-origin", required_argument, OPT_HTTP_ORIGIN, " ORIGIN",
     "allow WebSockets and requests from ORIGIN\n"
     "(repeatable; default: the server's own, by\n"
     "the name a request was sent to)",
     CONFIG_REPEAT},
    {"http-cert", required_argument, OPT_HTTP_CERT, " PATH",
     "serve HTTPS with this certificate (PEM)",
     CONFIG_PATH},
    {"http-key", required_argument, OPT_HTTP_KEY, " PATH",
     "and this private key (PEM)",
     CONFIG_PATH},
    {"http-root", required_argument, OPT_HTTP_ROOT, " DIR",
     "the page's files (default: the installed page)",
     CONFIG_PATH},
    {"log-level", required_argument, OPT_LOG, " L",
     "error, warn, info (default) or debug",
     CONFIG_ONCE},
    {"config", required_argument, OPT_CONFIG, " PATH",
     "read options from PATH (default:\n" AURAL_CONFIG "\n"
     "when it exists); the command line wins; SIGHUP\n"
     "re-reads it",
     CONFIG_NEVER},
    {"no-config", no_argument, OPT_NO_CONFIG, "", "read no config file",
     CONFIG_NEVER},
    {"help", no_argument, 'h', "", "show this help",
     CONFIG_NEVER},
    {"version", no_argument, 'V', "", "show the version",
     CONFIG_NEVER},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

/* One option in --help: its flags, then its text from column 26 (on the
 * next line when the flags leave no space before that column). */
static void usage_option(FILE *to, const option_doc *d) {
  char flags[64];
  if (d->id < 256)
    snprintf(flags, sizeof flags, "  -%c, --%s%s", d->id, d->name, d->arg);
  else
    snprintf(flags, sizeof flags, "      --%s%s", d->name, d->arg);
  fputs(flags, to);
  const char *text = d->help;
  if (strlen(flags) < 24)
    fprintf(to, "%*s", (int)(25 - strlen(flags)), "");
  else
    fprintf(to, "\n%25s", "");
  for (const char *nl; (nl = strchr(text, '\n')) != NULL; text = nl + 1)
    fprintf(to, "%.*s\n%25s", (int)(nl - text), text, "");
  fprintf(to, "%s\n", text);
}

static void usage(FILE *to) {
  fputs("Usage: aurald [OPTIONS]\n"
        "\n"
        "Streaming speech-frame encoder daemon: turns audio from files, a\n"
        "microphone or socket clients into frame embeddings (and CTC token\n"
        "posteriors and text when the model has a head), and publishes each\n"
        "chunk over a Unix socket to subscribers (see proto/PROTOCOL.md).\n"
        "\n"
        "Options:\n",
        to);
  for (size_t i = 0; i < N_OPTIONS; i++) {
    usage_option(to, &options[i]);
    if (options[i].id == OPT_NO_CONFIG)
      usage_option(to, &(option_doc){"no-NAME", no_argument, OPT_NO, "",
                                      "undo NAME as the config file and the\n"
                                      "command line before it set it: its\n"
                                      "default again (e.g. --no-hold,\n"
                                      "--no-mic, --no-file)",
                                      0});
  }
  fputs("\n"
        "Config file lines are \"key = value\" with the long option names as\n"
        "keys, each once (\"file\", \"realtime\" after each file it paces and\n"
        "\"http-origin\" may repeat; \"file-realtime = PATH\" is --file PATH\n"
        "--realtime; switches take yes or no; a relative path is the config\n"
        "file's neighbour), e.g. \"chunk-ms = 500\". The command line wins:\n"
        "its value replaces the file's, its --file and --http-origin add to\n"
        "the file's (--no-file --file PATH replaces them), and --no-NAME\n"
        "turns off a switch or anything else the file sets.\n"
        "Under systemd, a socket passed by socket activation is used instead\n"
        "of binding one, and readiness is reported on $NOTIFY_SOCKET.\n"
        "\n"
        "Examples:\n"
        "  aurald --file talk.flac --realtime      # then: aural sub --all\n"
        "  aurald --mic -s /tmp/aural.sock\n",
        to);
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* "16M", "512K", "1048576" -> bytes. Digits first: strtoull skips
 * spaces and negates what follows a minus, so " -18446744073709551615G"
 * was 1 GiB. */
static int parse_bytes(const char *s, size_t *out) {
  if (s[0] < '0' || s[0] > '9') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return -1;
  unsigned long long mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1024, end++;
  else if (*end == 'M' || *end == 'm') mult = 1024 * 1024, end++;
  else if (*end == 'G' || *end == 'g') mult = 1024ull * 1024 * 1024, end++;
  if (*end != '\0' || v == 0 || v > (1ull << 40) / mult) return -1;
  *out = (size_t)(v * mult);
  return 0;
}

/* The CPUs this process may run on (its affinity: taskset, systemd's
 * CPUAffinity=, a container's cpuset), for one worker each: workers past
 * them would only take turns on the same CPUs. */
static int cpus_available(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

static const char *default_model(void) {
  const char *env = getenv("AURAL_MODEL");
  if (env != NULL && env[0] != '\0') return env;
  if (access(AURAL_INSTALLED_MODEL, R_OK) == 0) return AURAL_INSTALLED_MODEL;
  return AURAL_SOURCE_MODEL;
}

/* --cluster-ttl, --cluster-timeout, --cluster-expire or --cluster-idle. */
static int parse_seconds(const char *s, int which, aurald_options *o) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  const char *name = which == OPT_CLUSTER_TTL       ? "cluster-ttl"
                     : which == OPT_CLUSTER_TIMEOUT ? "cluster-timeout"
                     : which == OPT_CLUSTER_IDLE    ? "cluster-idle"
                                                    : "cluster-expire";
  double lo = which == OPT_CLUSTER_TTL    ? 0.5
              : which == OPT_CLUSTER_IDLE ? 0
                                          : 1;
  double hi = which == OPT_CLUSTER_EXPIRE  ? 3.2e7
              : which == OPT_CLUSTER_IDLE ? 86400
                                          : 3600;
  if (errno || end == s || *end || !(v >= lo && v <= hi)) {
    aurald_usage_error("--%s must be %g to %g seconds\n", name, lo, hi);
    return -1;
  }
  if (which == OPT_CLUSTER_TTL) o->cluster_ttl_s = v;
  else if (which == OPT_CLUSTER_TIMEOUT) o->cluster_timeout_s = v;
  else if (which == OPT_CLUSTER_IDLE) o->cluster_idle_s = v;
  else o->cluster_expire_s = v;
  return 0;
}

/* "embeddings,logits,text" (any of them, once each) as AURAL_OUT_* bits. */
static int parse_outputs(const char *s, uint32_t *out) {
  static const char *names[] = {"embeddings", "logits", "text"};
  *out = 0;
  for (const char *p = s; *p != '\0';) {
    size_t n = strcspn(p, ",");
    uint32_t bit = 0;
    for (uint32_t i = 0; i < 3; i++)
      if (strlen(names[i]) == n && strncmp(p, names[i], n) == 0)
        bit = 1u << i;
    if (bit == 0 || (*out & bit)) return -1;
    *out |= bit;
    p += n + (p[n] == ',');
  }
  return *out != 0 ? 0 : -1;
}

/* The --http options (http.c checks how they go together at start). */
static int parse_http_option(int ch, const char *arg, http_options *h) {
  char why[256];
  switch (ch) {
  case OPT_HTTP:
    if (http_parse_addr(arg, &h->addr, why, sizeof why) < 0) {
      aurald_usage_error("%s\n", why);
      return -1;
    }
    h->on = true;
    return 0;
  case OPT_HTTP_ORIGIN:
    if (h->n_origins == HTTP_MAX_ORIGINS || strlen(arg) > HTTP_ORIGIN_MAX ||
        strstr(arg, "://") == NULL) {
      aurald_usage_error("--http-origin \"%s\": give at most %d, each "
                         "SCHEME://HOST[:PORT]\n",
                         arg, HTTP_MAX_ORIGINS);
      return -1;
    }
    h->origins[h->n_origins++] = arg;
    return 0;
  case OPT_HTTP_TOKEN: h->token_file = arg; return 0;
  case OPT_HTTP_CERT: h->cert = arg; return 0;
  case OPT_HTTP_KEY: h->key = arg; return 0;
  default: h->root = arg; return 0;
  }
}

static const aurald_options option_defaults = {
    .chunk_ms = 500,
    .n_threads = 0, /* one per CPU */
    .max_request_bytes = 1u << 20,
    .max_message_bytes = 64u << 20,
    .max_clients = 1024,
    .max_streams = 1024,
    .sub_hard_bytes = 16u << 20,
    .sub_soft_bytes = 4u << 20,
    .sub_soft_s = 10.0,
    .hello_timeout_s = 10.0,
    /* The library's default: the bundled model needs about 25 MB with its
     * batches, so 2 GiB leaves room for far larger real models, while a
     * small file whose dimensions ask for gigabytes per stream or per
     * compute thread is refused at start. */
    .max_model_bytes = (size_t)AURAL_MODEL_DEFAULT_MAX_MEMORY,
    .cluster_capacity = 64,
    .cluster_retention = 1200,
    .cluster_ttl_s = 3,
    .cluster_timeout_s = 10,
    .cluster_expire_s = 86400,
    .cluster_idle_s = 60,
    .cluster_outputs = AURAL_OUT_ALL,
    .cluster_dtype = AURAL_DTYPE_F32,
};

/* Whether the config file may set options[i], and so the command line
 * may take it back with --no-NAME. */
static bool negatable(size_t i) { return !(options[i].conf & CONFIG_NEVER); }

/* getopt's table: every option, and --no-NAME for each one the file may
 * set (names kept in no_names, filled on the first call). */
static char no_names[N_OPTIONS][48];
static void long_options(struct option longs[2 * N_OPTIONS + 1]) {
  size_t n = 0;
  for (size_t i = 0; i < N_OPTIONS; i++)
    longs[n++] = (struct option){options[i].name, options[i].has_arg, NULL,
                                 options[i].id};
  for (size_t i = 0; i < N_OPTIONS; i++) {
    if (!negatable(i)) continue;
    snprintf(no_names[i], sizeof no_names[i], "no-%s", options[i].name);
    longs[n++] = (struct option){no_names[i], no_argument, NULL,
                                 OPT_NO + (int)i};
  }
  longs[n] = (struct option){NULL, 0, NULL, 0};
}

/* The index in options[] of the option whose getopt id is id. */
static size_t option_index(int id) {
  for (size_t i = 0; i < N_OPTIONS; i++)
    if (options[i].id == id) return i;
  assert(!"every id is in options[]");
  return 0;
}

/* --no-NAME on the command line: NAME as the file (whose NAME is left
 * out, load_options) and the command line before it set it is undone,
 * so that the last word wins as it does between two values. *first_file
 * is where the command line's own --file options begin. */
static void option_reset(int id, aurald_options *o, int *first_file) {
  const aurald_options *d = &option_defaults;
  switch (id) {
  case 'm': o->model_path = d->model_path; break;
  case 's': o->socket_path = d->socket_path; break;
  case OPT_LEXICON: o->lexicon_path = d->lexicon_path; break;
  case OPT_LM: o->lm_path = d->lm_path; break;
  case OPT_CHUNK_MS: o->chunk_ms = d->chunk_ms; break;
  case OPT_MIC:
    o->mic = d->mic;
    o->mic_device = d->mic_device;
    break;
  case OPT_FILE: o->n_files = *first_file = 0; break;
  case OPT_REALTIME:
    for (int i = 0; i < o->n_files; i++) o->files[i].realtime = false;
    break;
  case OPT_EXIT: o->exit_when_done = d->exit_when_done; break;
  case OPT_HOLD: o->hold = d->hold; break;
  case OPT_THREADS: o->n_threads = d->n_threads; break;
  case OPT_MAX_CLIENTS: o->max_clients = d->max_clients; break;
  case OPT_MAX_STREAMS: o->max_streams = d->max_streams; break;
  case OPT_HARD: o->sub_hard_bytes = d->sub_hard_bytes; break;
  case OPT_SOFT: o->sub_soft_bytes = d->sub_soft_bytes; break;
  case OPT_SOFT_S: o->sub_soft_s = d->sub_soft_s; break;
  case OPT_HELLO_TIMEOUT: o->hello_timeout_s = d->hello_timeout_s; break;
  case OPT_GROUP:
    o->group = d->group;
    o->group_gid = d->group_gid;
    break;
  case OPT_F16: o->f16_weights = d->f16_weights; break;
  case OPT_PRECISION: o->precision = d->precision; break;
  case OPT_MAX_MODEL_MEM: o->max_model_bytes = d->max_model_bytes; break;
  case OPT_CLUSTER: o->cluster_url = d->cluster_url; break;
  case OPT_CLUSTER_OPTIONAL: o->cluster_optional = d->cluster_optional; break;
  case OPT_CLUSTER_PASSWORD:
    o->cluster_password_file = d->cluster_password_file;
    break;
  case OPT_CLUSTER_NODE: o->cluster_node = d->cluster_node; break;
  case OPT_CLUSTER_CAPACITY: o->cluster_capacity = d->cluster_capacity; break;
  case OPT_CLUSTER_RETENTION:
    o->cluster_retention = d->cluster_retention;
    break;
  case OPT_CLUSTER_TTL: o->cluster_ttl_s = d->cluster_ttl_s; break;
  case OPT_CLUSTER_TIMEOUT: o->cluster_timeout_s = d->cluster_timeout_s; break;
  case OPT_CLUSTER_EXPIRE: o->cluster_expire_s = d->cluster_expire_s; break;
  case OPT_CLUSTER_IDLE: o->cluster_idle_s = d->cluster_idle_s; break;
  case OPT_CLUSTER_OUTPUTS: o->cluster_outputs = d->cluster_outputs; break;
  case OPT_CLUSTER_DTYPE: o->cluster_dtype = d->cluster_dtype; break;
  case OPT_HTTP:
    o->http.on = d->http.on;
    o->http.addr = d->http.addr;
    break;
  case OPT_HTTP_TOKEN: o->http.token_file = d->http.token_file; break;
  case OPT_HTTP_ORIGIN: o->http.n_origins = d->http.n_origins; break;
  case OPT_HTTP_CERT: o->http.cert = d->http.cert; break;
  case OPT_HTTP_KEY: o->http.key = d->http.key; break;
  case OPT_HTTP_ROOT: o->http.root = d->http.root; break;
  case OPT_LOG: aurald_log_level = LOG_INFO; break;
  default: assert(!"every option the file may set is reset here"); break;
  }
}

/* Parses the words of argv into o: one line of the config file at a time
 * (cmdline false), then the command line. */
static int parse_options(int argc, char **argv, aurald_options *o,
                         bool *list, bool cmdline) {
  struct option longs[2 * N_OPTIONS + 1];
  long_options(longs);
  int ch;
  long v;
  char *end;
  /* The config file's --file options end here: a --realtime on the
   * command line paces a --file of its own, not the file's last. */
  int first_file = cmdline ? o->n_files : 0;
  optind = 0; /* full re-initialisation: this runs for the file and argv */
  while ((ch = getopt_long(argc, argv, "m:s:hV", longs, NULL)) != -1) {
    /* An empty value: "-s ''" bound an abstract socket and put its lock
     * file, ".lock", in the current directory; "--mic=" took the first
     * device that has an input; the others failed later with a message
     * naming an empty path. The config file refuses one as well. */
    if (ch != '?' && ch < OPT_NO && optarg != NULL && optarg[0] == '\0' &&
        options[option_index(ch)].has_arg != no_argument) {
      if (ch == OPT_MIC)
        aurald_usage_error("--mic= needs a device name or number (--mic "
                           "alone is the default device)\n");
      else
        aurald_usage_error("--%s needs a value, not an empty one\n",
                           options[option_index(ch)].name);
      return 2;
    }
    switch (ch) {
    case 'm': o->model_path = optarg; break;
    case 's': o->socket_path = optarg; break;
    case OPT_LEXICON: o->lexicon_path = optarg; break;
    case OPT_LM: o->lm_path = optarg; break;
    case OPT_CHUNK_MS:
      if (parse_long(optarg, 1, 600000, &v) < 0) {
        aurald_usage_error("--chunk-ms must be 1 to 600000, not "
                           "\"%s\"\n",
                           optarg);
        return 2;
      }
      o->chunk_ms = (int)v;
      break;
    case OPT_MIC:
      o->mic = true;
      o->mic_device = optarg;
      break;
    case OPT_LIST: *list = true; break;
    case OPT_FILE: {
      file_opt *f = realloc(o->files, (size_t)(o->n_files + 1) * sizeof *f);
      if (f == NULL) return 1;
      o->files = f;
      o->files[o->n_files++] = (file_opt){optarg, false};
      break;
    }
    case OPT_REALTIME:
      if (o->n_files == first_file) {
        aurald_usage_error("--realtime applies to the --file before "
                           "it; give --file PATH --realtime\n");
        return 2;
      }
      o->files[o->n_files - 1].realtime = true;
      break;
    case OPT_EXIT: o->exit_when_done = true; break;
    case OPT_HOLD: o->hold = true; break;
    case OPT_THREADS:
      if (parse_long(optarg, 1, 256, &v) < 0) {
        aurald_usage_error("--threads must be 1..256\n");
        return 2;
      }
      o->n_threads = (int)v;
      break;
    case OPT_MAX_CLIENTS:
    case OPT_MAX_STREAMS:
      if (parse_long(optarg, 1, 1000000, &v) < 0) {
        aurald_usage_error("--%s must be 1..1000000\n",
                           ch == OPT_MAX_CLIENTS ? "max-clients"
                                                 : "max-streams");
        return 2;
      }
      if (ch == OPT_MAX_CLIENTS) o->max_clients = (int)v;
      else o->max_streams = (int)v;
      break;
    case OPT_HARD:
    case OPT_SOFT:
      if (parse_bytes(optarg, ch == OPT_HARD ? &o->sub_hard_bytes
                                             : &o->sub_soft_bytes) < 0) {
        aurald_usage_error("bad byte count \"%s\" (e.g. 4M, 512K)\n", optarg);
        return 2;
      }
      break;
    case OPT_SOFT_S:
    case OPT_HELLO_TIMEOUT: {
      double *secs = ch == OPT_SOFT_S ? &o->sub_soft_s : &o->hello_timeout_s;
      errno = 0;
      *secs = strtod(optarg, &end);
      if (errno || end == optarg || *end || !(*secs > 0) || *secs > 86400) {
        aurald_usage_error("--%s must be a number of seconds above 0 "
                           "and at most 86400, not \"%s\"\n",
                           ch == OPT_SOFT_S ? "sub-soft-seconds"
                                            : "hello-timeout",
                           optarg);
        return 2;
      }
      break;
    }
    case OPT_GROUP: {
      struct group *g = getgrnam(optarg);
      if (g == NULL) {
        aurald_usage_error("no group named \"%s\"\n", optarg);
        return 2;
      }
      o->group = optarg;
      o->group_gid = g->gr_gid;
      break;
    }
    case OPT_F16: o->f16_weights = true; break;
    case OPT_PRECISION:
      if (aural_model_precision_parse(optarg, &o->precision) < 0) {
        aurald_usage_error("--precision must be f32 or bf16, not \"%s\"\n",
                           optarg);
        return 2;
      }
      break;
    case OPT_CLUSTER: {
      /* Checked here, so that a URL that cannot be is a bad command line
       * or config (exit 2, at the file's line; a reload refuses it): at
       * the cluster's start, after the model had loaded, it exited 1. */
      aural_cluster_url url;
      char why[256];
      if (aural_cluster_url_parse(optarg, &url, why, sizeof why) < 0) {
        aurald_usage_error("--cluster: %s\n", why);
        return 2;
      }
      o->cluster_url = optarg;
      break;
    }
    case OPT_CLUSTER_OPTIONAL: o->cluster_optional = true; break;
    case OPT_CLUSTER_PASSWORD: o->cluster_password_file = optarg; break;
    case OPT_CLUSTER_NODE:
      if (!aural_cluster_valid_name(optarg)) {
        aurald_usage_error("--cluster-node \"%s\": 1-64 printable "
                           "ASCII characters, without / \\ { }\n",
                           optarg);
        return 2;
      }
      o->cluster_node = optarg;
      break;
    case OPT_CLUSTER_CAPACITY:
    case OPT_CLUSTER_RETENTION:
      if (parse_long(optarg, 1, 100000000, &v) < 0) {
        aurald_usage_error("--%s must be a whole number from 1 to "
                           "100000000, not \"%s\"\n",
                           ch == OPT_CLUSTER_CAPACITY ? "cluster-capacity"
                                                      : "cluster-retention",
                           optarg);
        return 2;
      }
      if (ch == OPT_CLUSTER_CAPACITY) o->cluster_capacity = (int)v;
      else o->cluster_retention = v;
      break;
    case OPT_CLUSTER_TTL:
    case OPT_CLUSTER_TIMEOUT:
    case OPT_CLUSTER_EXPIRE:
    case OPT_CLUSTER_IDLE:
      if (parse_seconds(optarg, ch, o) < 0) return 2;
      break;
    case OPT_CLUSTER_OUTPUTS:
      if (parse_outputs(optarg, &o->cluster_outputs) < 0) {
        aurald_usage_error("--cluster-outputs \"%s\": a comma-separated "
                           "list of embeddings, logits, text\n",
                           optarg);
        return 2;
      }
      break;
    case OPT_CLUSTER_DTYPE:
      if (strcmp(optarg, "f32") != 0 && strcmp(optarg, "f16") != 0) {
        aurald_usage_error("--cluster-dtype must be f32 or f16\n");
        return 2;
      }
      o->cluster_dtype = optarg[1] == '1' ? AURAL_DTYPE_F16 : AURAL_DTYPE_F32;
      break;
    case OPT_MAX_MODEL_MEM:
      if (parse_bytes(optarg, &o->max_model_bytes) < 0) {
        aurald_usage_error("--max-model-memory: bad byte count \"%s\" "
                           "(e.g. 512M, 2G)\n",
                           optarg);
        return 2;
      }
      break;
    case OPT_LOG: {
      int level = aurald_log_level_parse(optarg);
      if (level < 0) {
        aurald_usage_error("--log-level must be error, warn, info or "
                           "debug\n");
        return 2;
      }
      aurald_log_level = level;
      break;
    }
    case OPT_HTTP:
    case OPT_HTTP_TOKEN:
    case OPT_HTTP_ORIGIN:
    case OPT_HTTP_CERT:
    case OPT_HTTP_KEY:
    case OPT_HTTP_ROOT:
      if (parse_http_option(ch, optarg, &o->http) < 0) return 2;
      break;
    case OPT_CONFIG:
    case OPT_NO_CONFIG:
      break; /* found before parsing (config_path) */
    case '?':
      fprintf(stderr, "Try 'aurald --help'.\n");
      return 2;
    case 'h': usage(stdout); exit(0);
    case 'V': printf("aurald %s\n", AURAL_VERSION); exit(0);
    default:
      /* --no-NAME: the file's NAME was left out (load_options), and
       * what the command line gave before it is undone. */
      assert(ch >= OPT_NO && ch < OPT_NO + (int)N_OPTIONS);
      option_reset(options[ch - OPT_NO].id, o, &first_file);
      break;
    }
  }
  if (optind < argc) {
    aurald_usage_error("unexpected argument \"%s\" (files are given "
                       "with --file)\n",
                       argv[optind]);
    return 2;
  }
  return 0;
}

/* The config file named on the command line, or the default one when it
 * exists; NULL with --no-config or when there is none. getopt reads the
 * command line here as parse_options() does, so that "--conf PATH", which
 * it takes for --config, names the file here too. *answer is 'h' or 'V'
 * when --help or --version asks for an answer that needs no config. */
static const char *find_config(int argc, char **argv, int *answer,
                               bool negated[N_OPTIONS]) {
  *answer = 0;
  memset(negated, 0, N_OPTIONS * sizeof *negated);
  struct option longs[2 * N_OPTIONS + 1];
  long_options(longs);
  /* getopt permutes what it reads: a copy of argv keeps it as it is. */
  char **copy = malloc(((size_t)argc + 1) * sizeof *copy);
  if (copy == NULL) return NULL;
  memcpy(copy, argv, ((size_t)argc + 1) * sizeof *copy);
  const char *path = NULL;
  bool none = false;
  int ch, was_opterr = opterr;
  opterr = 0; /* parse_options() reports the errors */
  optind = 0;
  while ((ch = getopt_long(argc, copy, "m:s:hV", longs, NULL)) != -1) {
    if (ch == OPT_CONFIG) path = optarg;
    else if (ch == OPT_NO_CONFIG) none = true;
    else if (ch >= OPT_NO && ch < OPT_NO + (int)N_OPTIONS)
      negated[ch - OPT_NO] = true;
    else if ((ch == 'h' || ch == 'V') && *answer == 0) *answer = ch;
  }
  opterr = was_opterr;
  free(copy);
  if (none) return NULL;
  if (path != NULL) return path;
  return access(AURAL_CONFIG, F_OK) == 0 ? AURAL_CONFIG : NULL;
}

/* The option a word of the config file sets ("--NAME" or
 * "--NAME=VALUE"), as an index into options[]. */
static size_t option_of_word(const char *word) {
  const char *name = word + 2, *eq = strchr(name, '=');
  size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
  for (size_t i = 0; i < N_OPTIONS; i++)
    if (strlen(options[i].name) == len &&
        strncmp(options[i].name, name, len) == 0)
      return i;
  assert(!"config words are made from option names");
  return 0;
}

/* Options from the config file (if any), less those the command line
 * takes back with --no-NAME, then the command line, which wins. cw keeps
 * the file's words alive: options point into them. Returns
 * 0, or the exit status with the errors on stderr and where, one line,
 * saying where they are. */
static int load_options(int argc, char **argv, const char *conf,
                        aurald_options *o, config_words *cw, bool *list,
                        char *where, size_t where_len) {
  *o = option_defaults;
  /* The level is set as the options are read: a reload whose file no
   * longer names one goes back to the default (it kept the old one). */
  aurald_log_level = LOG_INFO;
  memset(cw, 0, sizeof *cw);
  if (conf != NULL) {
    char why[512];
    config_key keys[N_OPTIONS];
    for (size_t i = 0; i < N_OPTIONS; i++)
      keys[i] = (config_key){options[i].name, options[i].has_arg,
                             options[i].conf};
    if (config_read(conf, keys, N_OPTIONS, cw, why, sizeof why) < 0) {
      aurald_usage_error("%s\n", why);
      snprintf(where, where_len, "%s", why);
      return 2;
    }
    bool negated[N_OPTIONS];
    int answer;
    find_config(argc, argv, &answer, negated);
    /* "realtime" paces the file before it ("file-realtime = PATH" is both
     * words): with the file's files left out, it would pace nothing and
     * be refused as a --realtime without a --file. */
    if (negated[option_index(OPT_FILE)])
      negated[option_index(OPT_REALTIME)] = true;
    /* One line of the file at a time, so that an error names its line. */
    for (size_t i = 1, j; i < cw->n; i = j) {
      char *line_argv[4] = {cw->words[0]};
      int line_argc = 1;
      for (j = i; j < cw->n && cw->lines[j] == cw->lines[i] && j - i < 2;
           j++)
        if (!negated[option_of_word(cw->words[j])])
          line_argv[line_argc++] = cw->words[j];
      line_argv[line_argc] = NULL;
      if (line_argc == 1) continue;
      int rc = parse_options(line_argc, line_argv, o, list, false);
      if (rc != 0) {
        aurald_usage_error("%s:%d: the setting refused above\n", conf,
                           cw->lines[i]);
        snprintf(where, where_len, "%s:%d: a setting aurald refuses", conf,
                 cw->lines[i]);
        return rc;
      }
    }
  }
  int rc = parse_options(argc, argv, o, list, true);
  if (rc != 0) {
    snprintf(where, where_len, "an option on the command line");
    return rc;
  }
  if (o->exit_when_done && o->n_files == 0) {
    /* It waits for the file streams to end: with none, for ever. */
    aurald_usage_error("--exit-when-done needs a --file (it exits "
                       "once every file stream has ended)\n");
    snprintf(where, where_len, "exit-when-done without a file");
    return 2;
  }
  if (o->f16_weights && o->precision == AURAL_PRECISION_BF16) {
    /* A bad command line or config (exit 2, which aurald.service does not
     * restart): found after the model had loaded, it exited 1 and was
     * started again every RestartSec. */
    aurald_usage_error("--f16 and --precision bf16 exclude each other "
                       "(bf16 holds the weights as bfloat16)\n");
    snprintf(where, where_len, "f16 with precision bf16");
    return 2;
  }
  char http_why[256];
  if (http_check_options(&o->http, http_why, sizeof http_why) < 0) {
    aurald_usage_error("%s\n", http_why);
    snprintf(where, where_len, "%s", http_why);
    return 2;
  }
  if (o->sub_soft_bytes > o->sub_hard_bytes) {
    /* Name both, and a soft limit nobody gave as the default it is. */
    bool dflt = o->sub_soft_bytes == option_defaults.sub_soft_bytes;
    aurald_usage_error("--sub-soft-limit (%zu bytes%s) must not exceed "
                       "--sub-hard-limit (%zu bytes)%s\n",
                       o->sub_soft_bytes, dflt ? ", its default" : "",
                       o->sub_hard_bytes,
                       dflt ? ": give a --sub-soft-limit below it too" : "");
    snprintf(where, where_len, "sub-soft-limit exceeds sub-hard-limit");
    return 2;
  }
  static char sock[512]; /* the default path never changes */
  if (o->socket_path == NULL) {
    if (aural_proto_default_socket(sock, sizeof sock) < 0) {
      /* Too long to hold: as a -s that long, a bad configuration. */
      aurald_usage_error("the default socket path, from $AURAL_SOCKET or "
                         "$XDG_RUNTIME_DIR, is longer than a socket "
                         "address holds; give -s PATH\n");
      snprintf(where, where_len, "the default socket path");
      return 2;
    }
    o->socket_path = sock;
  }
  if (o->model_path == NULL) o->model_path = default_model();
  return 0;
}

static bool str_differs(const char *a, const char *b) {
  return (a == NULL) != (b == NULL) || (a != NULL && strcmp(a, b) != 0);
}

/* Appends name to a list of option names ("a, b"). */
static void name_append(char *list, size_t cap, bool given, const char *name) {
  size_t used = strlen(list);
  if (given && used < cap)
    snprintf(list + used, cap - used, "%s%s", used ? ", " : "", name);
}

/* The options of --http and of --cluster do nothing without it, nor does
 * --hold without a --file or --mic source. They are named in the log
 * rather than refused, so that a config file can turn either off by
 * commenting out its one line and keep the rest. */
static void warn_idle_options(const aurald_options *o) {
  const aurald_options *d = &option_defaults;
  char list[512] = "";
  if (o->hold && o->n_files == 0 && !o->mic)
    log_warn("without --file or --mic, --hold does nothing (it holds those "
             "sources until their first subscriber)");
  if (!o->http.on) {
    name_append(list, sizeof list, o->http.token_file, "http-token-file");
    name_append(list, sizeof list, o->http.n_origins > 0, "http-origin");
    name_append(list, sizeof list, o->http.cert, "http-cert");
    name_append(list, sizeof list, o->http.key, "http-key");
    name_append(list, sizeof list, o->http.root, "http-root");
    if (list[0] != '\0') log_warn("without --http, these do nothing: %s", list);
  }
  list[0] = '\0';
  if (o->cluster_url == NULL) {
    name_append(list, sizeof list, o->cluster_optional, "cluster-optional");
    name_append(list, sizeof list, o->cluster_password_file,
                "cluster-password-file");
    name_append(list, sizeof list, o->cluster_node, "cluster-node");
    name_append(list, sizeof list, o->cluster_capacity != d->cluster_capacity,
                "cluster-capacity");
    name_append(list, sizeof list,
                o->cluster_retention != d->cluster_retention,
                "cluster-retention");
    name_append(list, sizeof list, o->cluster_ttl_s != d->cluster_ttl_s,
                "cluster-ttl");
    name_append(list, sizeof list,
                o->cluster_timeout_s != d->cluster_timeout_s,
                "cluster-timeout");
    name_append(list, sizeof list, o->cluster_expire_s != d->cluster_expire_s,
                "cluster-expire");
    name_append(list, sizeof list, o->cluster_idle_s != d->cluster_idle_s,
                "cluster-idle");
    name_append(list, sizeof list, o->cluster_outputs != d->cluster_outputs,
                "cluster-outputs");
    name_append(list, sizeof list, o->cluster_dtype != d->cluster_dtype,
                "cluster-dtype");
    if (list[0] != '\0')
      log_warn("without --cluster, these do nothing: %s", list);
  }
}

/* Descriptors kept for everything but clients and --file sources: the
 * loop's own, the listener, the lock, the model, PortAudio's, logs. */
#define FD_RESERVE 64

/* Raises the open-file limit to its hard maximum (systemd's default soft
 * limit is 1,024, as many as the default --max-clients), and lowers
 * --max-clients to what the limit leaves, so that a client past the limit
 * is refused with a LIMIT error rather than reset by a failed accept.
 * With --http, libwebsockets holds up to --max-clients + HTTP_EXTRA_FDS
 * descriptors of its own (http.c) beside the Unix clients. */
static void fit_clients_to_fd_limit(aurald_options *o) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) rl.rlim_cur = was;
  }
  if (rl.rlim_cur == RLIM_INFINITY) return;
  /* Every --file source holds its file open while its stream runs (all of
   * them at once with --hold or --realtime). */
  long room = (long)rl.rlim_cur - FD_RESERVE - o->n_files;
  if (o->http.on) room = (room - HTTP_EXTRA_FDS) / 2;
  if (room < 1) room = 1;
  if (o->max_clients > room) {
    char files[64] = "";
    if (o->n_files > 0)
      snprintf(files, sizeof files, ", with %d --file sources open",
               o->n_files);
    log_warn("--max-clients %d lowered to %ld: the open file limit is "
             "%llu%s",
             o->max_clients, room, (unsigned long long)rl.rlim_cur, files);
    o->max_clients = (int)room;
  }
}

/* The compute threads a start with o runs: --threads, else one per CPU it
 * may run on. */
static int threads_wanted(const aurald_options *o) {
  return o->n_threads > 0 ? o->n_threads : cpus_available();
}

/* The options of n that differ from o and apply only at a restart, as
 * their names in the option table's order ("file, cluster-node"), so that
 * a reload says which of its changes wait; "" when none do. */
static void restart_only_changes(const server *srv, const aurald_options *o,
                                 const aurald_options *n, char *out,
                                 size_t out_len) {
  bool files = n->n_files != o->n_files;
  for (int i = 0; !files && i < n->n_files; i++)
    files = strcmp(n->files[i].path, o->files[i].path) != 0 ||
            n->files[i].realtime != o->files[i].realtime;
  bool origins = n->http.n_origins != o->http.n_origins;
  for (int i = 0; !origins && i < n->http.n_origins; i++)
    origins = strcmp(n->http.origins[i], o->http.origins[i]) != 0;
  const http_addr *ha = &n->http.addr, *hb = &o->http.addr;
  const struct {
    const char *name;
    bool changed;
  } keys[] = {
      {"model", str_differs(n->model_path, o->model_path)},
      {"lexicon", str_differs(n->lexicon_path, o->lexicon_path)},
      {"lm", str_differs(n->lm_path, o->lm_path)},
      {"socket",
       !srv->activated && str_differs(n->socket_path, o->socket_path)},
      {"chunk-ms", n->chunk_ms != o->chunk_ms},
      {"mic", n->mic != o->mic || str_differs(n->mic_device, o->mic_device)},
      {"file", files},
      {"exit-when-done", n->exit_when_done != o->exit_when_done},
      {"hold", n->hold != o->hold},
      {"threads", threads_wanted(n) != srv->n_workers},
      {"group", str_differs(n->group, o->group)},
      {"f16", n->f16_weights != o->f16_weights},
      {"precision", n->precision != o->precision},
      {"max-model-memory", n->max_model_bytes != o->max_model_bytes},
      {"cluster", str_differs(n->cluster_url, o->cluster_url)},
      {"cluster-optional", n->cluster_optional != o->cluster_optional},
      {"cluster-password-file",
       str_differs(n->cluster_password_file, o->cluster_password_file)},
      {"cluster-node", str_differs(n->cluster_node, o->cluster_node)},
      {"cluster-capacity", n->cluster_capacity != o->cluster_capacity},
      {"cluster-retention", n->cluster_retention != o->cluster_retention},
      {"cluster-ttl", n->cluster_ttl_s != o->cluster_ttl_s},
      {"cluster-timeout", n->cluster_timeout_s != o->cluster_timeout_s},
      {"cluster-expire", n->cluster_expire_s != o->cluster_expire_s},
      {"cluster-idle", n->cluster_idle_s != o->cluster_idle_s},
      {"cluster-outputs", n->cluster_outputs != o->cluster_outputs},
      {"cluster-dtype", n->cluster_dtype != o->cluster_dtype},
      {"http", n->http.on != o->http.on || ha->port != hb->port ||
                   strcmp(ha->host, hb->host) != 0},
      {"http-token-file",
       str_differs(n->http.token_file, o->http.token_file)},
      {"http-origin", origins},
      {"http-cert", str_differs(n->http.cert, o->http.cert)},
      {"http-key", str_differs(n->http.key, o->http.key)},
      {"http-root", str_differs(n->http.root, o->http.root)},
  };
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    if (!keys[i].changed || used >= out_len) continue;
    int w = snprintf(out + used, out_len - used, "%s%s", used ? ", " : "",
                     keys[i].name);
    if (w > 0) used += (size_t)w;
  }
}

/* SIGHUP: re-reads the config file and applies what can change while
 * streams run (limits, log level); the rest is reported as needing a
 * restart. A file that does not parse changes nothing. The default file
 * is looked for again, as a start would: one created since is read, and
 * without one removed since, the command line's options are all. */
static void reload(server *srv) {
  notify("RELOADING=1");
  aurald_options n;
  config_words cw;
  bool list = false, negated[N_OPTIONS];
  int old_level = aurald_log_level, answer;
  char where[600], status[900];
  srv->config_path = find_config(srv->argc, srv->argv, &answer, negated);
  if (load_options(srv->argc, srv->argv, srv->config_path, &n, &cw, &list,
                   where, sizeof where) != 0) {
    aurald_log_level = old_level;
    log_error("reload failed, nothing changed: %s", where);
    free(n.files);
    config_words_free(&cw);
    /* systemctl reload cannot fail once the signal is sent: systemctl
     * status shows this line instead. */
    snprintf(status, sizeof status,
             "READY=1\nSTATUS=reload failed, nothing changed: %s", where);
    notify(status);
    return;
  }
  aurald_options *o = srv->opt;
  o->sub_hard_bytes = n.sub_hard_bytes;
  o->sub_soft_bytes = n.sub_soft_bytes;
  o->sub_soft_s = n.sub_soft_s;
  o->hello_timeout_s = n.hello_timeout_s;
  o->max_clients = n.max_clients;
  fit_clients_to_fd_limit(o);
  o->max_streams = n.max_streams;
  char waiting[512];
  restart_only_changes(srv, o, &n, waiting, sizeof waiting);
  if (n.group == NULL || !str_differs(n.group, o->group))
    o->group_gid = n.group ? n.group_gid : o->group_gid;
  log_info("reloaded %s: limits and log level applied%s%s",
           srv->config_path ? srv->config_path
                            : "the command line (no config file)",
           waiting[0] ? "; these change at the next restart: " : "",
           waiting);
  free(n.files);
  config_words_free(&cw);
  snprintf(status, sizeof status, "READY=1\nSTATUS=serving %.200s",
           o->socket_path);
  notify(status);
}

static int open_files(server *srv, char *why, size_t why_len) {
  for (int i = 0; i < srv->opt->n_files; i++) {
    const file_opt *f = &srv->opt->files[i];
    aural_audiofile *af = NULL;
    aural_err err = {0};
    struct stat st;
    /* Files only: a FIFO or a device would make start-up wait for a
     * writer, and a worker block in reads (live audio is for clients). */
    if (stat(f->path, &st) == 0 && !S_ISREG(st.st_mode) &&
        !S_ISDIR(st.st_mode)) {
      snprintf(why, why_len,
               "%s: not a regular file (for live audio from a pipe, use "
               "'aural send')", f->path);
      return -1;
    }
    if (aural_audiofile_open(f->path, &af, &err) < 0) {
      snprintf(why, why_len, "%s", err.msg);
      return -1;
    }
    aural_audiofile_info info;
    aural_audiofile_get_info(af, &info);
    const char *base = strrchr(f->path, '/');
    base = base ? base + 1 : f->path;
    /* Names are printable ASCII: the base name made so first, so that two
     * files whose names differ only in what is replaced get #2. */
    char clean[AURAL_PROTO_NAME_MAX + 1], name[AURAL_PROTO_NAME_MAX + 1];
    snprintf(clean, sizeof clean, "%s", base);
    for (char *p = clean; *p; p++)
      if (*p < 0x21 || *p > 0x7e || *p == '\\') *p = '_';
    snprintf(name, sizeof name, "%s", clean);
    for (int k = 2; stream_find(srv, name) != NULL; k++)
      snprintf(name, sizeof name, "%.56s#%d", clean, k % 100000);
    stream *s = stream_create(srv, name, SRC_FILE, info.rate_hz,
                              info.n_channels, NULL, -1, 0, why, why_len);
    if (s == NULL) {
      aural_audiofile_close(af);
      return -1;
    }
    s->work.af = af;
    s->file_frames = info.n_frames;
    s->realtime = f->realtime;
    srv->n_file_streams_left++;
    log_info("stream %u \"%s\": file %s (%.0f Hz, %d ch%s)", s->id, s->name,
             f->path, info.rate_hz, info.n_channels,
             f->realtime ? ", real time" : "");
  }
  for (stream *s = srv->streams; s != NULL; s = s->loop.next)
    if (s->source == SRC_FILE) stream_start(s);
  return 0;
}

static void on_signal(uv_signal_t *h, int signum) {
  server *srv = h->data;
  if (signum == SIGHUP) {
    if (!srv->stopping) reload(srv);
    return;
  }
  const char *name = signum == SIGINT ? "SIGINT" : "SIGTERM";
  if (srv->stopping) {
    log_warn("second %s: closing now", name);
    server_close_handles(srv);
    return;
  }
  server_stop(srv, name);
}

static void on_tick(uv_timer_t *t) {
  server *srv = t->data;
  if (srv->files_done && srv->opt->exit_when_done && !srv->stopping)
    server_stop(srv, "every file has been processed");
  mic_poll(srv);
  pthread_mutex_lock(&srv->mu);
  double now = aurald_mono_s();
  for (stream *s = srv->streams; s != NULL; s = s->loop.next)
    if (s->source == SRC_FILE && s->realtime && !s->sched.held) {
      s->sched.in_total = (uint64_t)((now - s->t0_mono) * s->rate_hz);
      if (s->sched.pending_since == 0) s->sched.pending_since = now;
      server_mark_ready(srv, s);
    }
  pthread_mutex_unlock(&srv->mu);
  conn_check_limits(srv);
  if (!srv->stopping) {
    for (conn *c = srv->conns; c != NULL; c = c->next)
      conn_resume_if_drained(c);
    return;
  }
  if (srv->n_streams > 0) return;
  /* Every stream has ended and its final chunks are queued: say goodbye.
   * A connection closes once its queue is written. */
  for (conn *c = srv->conns; c != NULL; c = c->next)
    if (!c->fatal_sent && !c->closing)
      conn_send_error(c, 0, AURAL_PROTO_ESHUTDOWN, true,
                      "the server is shutting down");
  if (srv->n_conns == 0) server_close_handles(srv);
}

/* A socket path that cannot be bound is a bad command line (exit 2, which
 * aurald.service does not restart): found when binding, after the model
 * had loaded, it exited 1. A socket passed by the service manager is used
 * whatever the path says. Returns 0 or the exit status. */
static int check_socket_path(const char *path) {
  const char *pid = getenv("LISTEN_PID");
  if (pid != NULL && strtol(pid, NULL, 10) == (long)getpid()) return 0;
  size_t max = sizeof ((struct sockaddr_un *)0)->sun_path - 1;
  if (strlen(path) <= max) return 0;
  aurald_usage_error("socket path is %zu bytes long; the limit is %zu: %s\n",
                     strlen(path), max, path);
  return 2;
}

/* Opens /dev/null onto any of fds 0, 1 and 2 that is closed; -1 if one
 * cannot be. Without it the loop's own descriptors take those numbers
 * (with stderr closed, log lines went into the epoll descriptor), and
 * libuv, which never closes them, aborts the exit. */
static int std_fds_open(void) {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    /* The lower numbers are open, so the lowest free one is fd. Fd 1 for
     * reading alone: what --help, --version and --list-devices print
     * there fails as on the closed descriptor (stdout_answered). */
    int got = open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY);
    if (got != fd) {
      if (got >= 0) close(got);
      return -1;
    }
  }
  return 0;
}

/* The exit status of an answer printed on stdout (--help, --version,
 * --list-devices): 0, or 1 with why on stderr when it could not all be
 * written (a closed stdout, a full disk). */
static int stdout_answered(void) {
  errno = 0;
  if (fflush(stdout) == 0 && !ferror(stdout)) return 0;
  fprintf(stderr, "aurald: standard output: %s\n",
          strerror(errno ? errno : EIO));
  return 1;
}

int main(int argc, char **argv) {
  if (std_fds_open() < 0) return 1;
  aurald_log_setup();
  /* SIGHUP, whose default action ends the process, waits (pending, in
   * every thread started meanwhile) until its handler is in place: one
   * that comes while the model loads is a reload once aurald serves. */
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &hup, NULL);
  aurald_options o;
  config_words cw;
  bool list = false;
  int answer;
  bool negated[N_OPTIONS];
  const char *conf = find_config(argc, argv, &answer, negated);
  /* Before the config file, whose errors say to see --help. */
  if (answer == 'h') usage(stdout);
  if (answer == 'V') printf("aurald %s\n", AURAL_VERSION);
  if (answer != 0) return stdout_answered();
  char where[600];
  int rc = load_options(argc, argv, conf, &o, &cw, &list, where,
                        sizeof where);
  if (rc == 0 && !list) rc = check_socket_path(o.socket_path);
  if (rc == 0 && list) rc = mic_list_devices();
  if (rc == 0 && list) rc = stdout_answered();
  if (rc != 0 || list) {
    free(o.files);
    config_words_free(&cw);
    return rc;
  }
  o.n_threads = threads_wanted(&o);

  signal(SIGPIPE, SIG_IGN);
  warn_idle_options(&o);
  fit_clients_to_fd_limit(&o);
  /* Streams' state (about 1.4 MB for the base model) is allocated and
   * freed as clients come and go. glibc raises its mmap threshold to the
   * largest block freed, after which such blocks come from the heap and
   * fragment it: a fixed threshold keeps them in their own mappings, so
   * the memory goes back to the system when a stream ends. */
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  /* Fixing that threshold also fixes the trim threshold at its 128 kB
   * default, and then every few chunks freed on the loop shrank the
   * workers' heaps, whose pages the next chunks faulted in again (about
   * 1,500 page faults a second at 180 streams). Free memory up to this
   * much stays in the heap instead. */
  mallopt(M_TRIM_THRESHOLD, 8 * 1024 * 1024);

  /* From here on a stderr that stops taking lines stops none of ours. */
  aurald_log_start();
  server srv = {.argc = argc, .argv = argv, .config_path = conf};
  char why[640];
  uv_loop_t loop;
  if (uv_loop_init(&loop) < 0) {
    log_error("cannot create the event loop");
    aurald_log_stop(LOG_DRAIN_S);
    return 1;
  }
  rc = server_setup(&srv, &o, &loop, why, sizeof why);
  if (rc < 0) {
    log_error("%s", why);
    server_teardown(&srv);
    uv_loop_close(&loop);
    aurald_log_stop(LOG_DRAIN_S);
    return rc == -2 ? 2 : 1; /* -2: an option the model refuses */
  }
  uv_signal_init(&loop, &srv.sigint);
  uv_signal_init(&loop, &srv.sigterm);
  uv_signal_init(&loop, &srv.sighup);
  srv.sigint.data = srv.sigterm.data = srv.sighup.data = &srv;

  int fd = activation_fd(why, sizeof why);
  if (fd == -2) {
    rc = -1;
  } else if (fd >= 0) {
    rc = socket_adopt(&srv, fd, why, sizeof why);
  } else {
    rc = socket_prepare(&srv, why, sizeof why);
  }
  if (rc == 0) rc = http_start(&srv, why, sizeof why);
  if (rc == 0) rc = workers_start(&srv, o.n_threads, why, sizeof why);
  if (rc == 0) rc = open_files(&srv, why, sizeof why);
  if (rc == 0 && o.mic) rc = mic_start(&srv, o.mic_device, why, sizeof why);
  if (rc == 0 && o.cluster_url != NULL)
    rc = cluster_start(&srv, why, sizeof why);
  if (rc < 0) {
    log_error("%s", why);
    srv.exit_code = 1;
    if (srv.listening) {
      uv_close((uv_handle_t *)&srv.listener, NULL);
      srv.listening = false;
      socket_remove(&srv);
    }
    mic_stop(&srv);
    server_close_handles(&srv);
  } else {
    uv_signal_start(&srv.sigint, on_signal, SIGINT);
    uv_signal_start(&srv.sigterm, on_signal, SIGTERM);
    uv_signal_start(&srv.sighup, on_signal, SIGHUP);
    pthread_sigmask(SIG_UNBLOCK, &hup, NULL);
    uv_timer_start(&srv.tick, on_tick, TICK_MS, TICK_MS);
    log_info("serving %s with %s (d_model %d, %d layers, vocab %d), %d "
             "workers, chunks of %d ms",
             o.socket_path, o.model_path, srv.mc->d_model, srv.mc->n_layers,
             srv.mc->vocab_size, srv.n_workers, o.chunk_ms);
    char status[256];
    snprintf(status, sizeof status, "READY=1\nSTATUS=serving %.200s",
             o.socket_path);
    notify(status);
  }
  uv_run(&loop, UV_RUN_DEFAULT);

  int closed = server_teardown(&srv);
  if (closed == 0) closed = uv_loop_close(&loop);
  if (closed != 0) {
    log_error("event loop did not close cleanly: %s", uv_strerror(closed));
    srv.exit_code = 1;
  }
  free(o.files);
  config_words_free(&cw);
  if (srv.exit_code == 0) log_info("stopped");
  aurald_log_stop(LOG_DRAIN_S);
  return srv.exit_code;
}
