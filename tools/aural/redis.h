/*
 * redis.h — a synchronous connection to the cluster's Redis (hiredis), for
 * the --cluster mode of aural send, sub and stats (docs/CLUSTER.md).
 *
 *   cluster_conn c;
 *   char err[600];
 *   if (cluster_connect(&c, "unix:/run/redis.sock", NULL, err,
 *                       sizeof err) < 0) { fprintf(stderr, "%s\n", err); ... }
 *   cluster_args a;
 *   cluster_args_init(&a, "HGET");
 *   cluster_arg(&a, "aural:{call-17}:meta");
 *   cluster_arg(&a, "rate");
 *   redisReply *r = cluster_run(&c, &a, err, sizeof err);
 *   if (r == NULL) ...  // err: "Redis at unix:/run/redis.sock: HGET ...: ..."
 *   freeReplyObject(r);
 *   cluster_close(&c);
 *
 * Every failure is told with the URL (never a password) and, for a
 * command, the command with its printable arguments. Not thread-safe: a
 * connection belongs to one thread. Connecting ignores SIGPIPE for the
 * whole process (a Redis that goes away must be an error, not a death).
 */
#ifndef AURAL_TOOLS_REDIS_H
#define AURAL_TOOLS_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include <aural/cluster.h>

/* How long connecting, and then any one command, may take. A command's
 * limit is above the 1 s that aural sub's XREAD blocks. */
#define CLUSTER_CONNECT_TIMEOUT_MS 5000
#define CLUSTER_COMMAND_TIMEOUT_MS 10000

/* Arguments of the longest command sent (an announcement). */
#define CLUSTER_ARGS_MAX 16

typedef struct cluster_conn {
  redisContext *ctx;
  aural_cluster_url url;
  char url_text[400]; /* for messages: aural_cluster_url_format */
  char password[AURAL_CLUSTER_PASSWORD_MAX + 1]; /* "" when none */
  char said[256]; /* Redis' error reply to the last failed command, or "" */
} cluster_conn;

/* The help of --cluster and --cluster-password-file, the same in every
 * command's. */
#define CLUSTER_HELP                                                     \
  "      --cluster URL  the cluster's Redis instead of aurald:\n"        \
  "                     redis://[USER@]HOST[:PORT][/DB] or\n"            \
  "                     unix:PATH (no password in the URL)\n"            \
  "      --cluster-password-file FILE\n"                                 \
  "                     Redis' password: FILE's first line (FILE\n"      \
  "                     mode 0600 or stricter); without it,\n"           \
  "                     $AURAL_REDIS_PASSWORD if set\n"

/* The command-line checks every --cluster command makes: url (or NULL:
 * no --cluster) parses, --cluster-password-file comes with it and
 * --socket does not. Returns NULL, or what is wrong (in why, or static). */
const char *cluster_options(const char *url, const char *password_file,
                            const char *socket, char *why, size_t why_len);

/* Parses url, reads the password (password_file, else
 * $AURAL_REDIS_PASSWORD, else none), connects, authenticates (AUTH [USER]
 * PASSWORD) and selects the URL's database. On failure returns -1 with err
 * naming the URL and the problem, and c holds nothing. A bad URL (one
 * with a password in it, say) fails before anything is read or sent. */
int cluster_connect(cluster_conn *c, const char *url, const char *password_file,
                    char *err, size_t err_len);

/* The connection again, after an I/O error; same contract. */
int cluster_reconnect(cluster_conn *c, char *err, size_t err_len);

/* Closes the connection and forgets the password. Safe on a zeroed or
 * closed conn. */
void cluster_close(cluster_conn *c);

/* A command's arguments, in the caller's memory and in room for numbers
 * (cluster_arg_fmt); they must outlive cluster_run. */
typedef struct cluster_args {
  int n;
  const char *v[CLUSTER_ARGS_MAX];
  size_t len[CLUSTER_ARGS_MAX];
  bool secret[CLUSTER_ARGS_MAX];    /* never shown in a message */
  char num[CLUSTER_ARGS_MAX][48];   /* cluster_arg_fmt's texts */
} cluster_args;

void cluster_args_init(cluster_args *a, const char *command);
/* The command and its arguments, all NUL-terminated strings, at once:
 * cluster_args_list(&a, "ZRANGE", key, "0", "-1", NULL). */
void cluster_args_list(cluster_args *a, const char *command, ...)
    __attribute__((sentinel));
/* Appends a NUL-terminated argument. */
void cluster_arg(cluster_args *a, const char *s);
/* Appends n bytes (binary safe). */
void cluster_arg_bin(cluster_args *a, const void *p, size_t n);
/* Appends a printf-formatted argument of at most 47 bytes. */
void cluster_arg_fmt(cluster_args *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends an argument shown as "***" in messages (a password). */
void cluster_arg_secret(cluster_args *a, const char *s);

/* Sends the command and reads its reply. Returns the reply, which the
 * caller frees with freeReplyObject(), or NULL with err naming the URL,
 * the command and what went wrong: an I/O error or timeout (c->ctx->err
 * set: the connection is unusable until cluster_reconnect), or an error
 * reply (its text also in c->said). */
redisReply *cluster_run(cluster_conn *c, const cluster_args *a, char *err,
                        size_t err_len);

/* cluster_run for a command whose reply says nothing: 0, or -1 with err. */
int cluster_do(cluster_conn *c, const cluster_args *a, char *err,
               size_t err_len);

/* As cluster_run, for a command that may be sent again without harm (an
 * XADD with an explicit ID): after an I/O error or a timeout, reconnects
 * and sends it again, up to tries times in all, half a second apart. */
redisReply *cluster_run_again(cluster_conn *c, const cluster_args *a,
                              int tries, char *err, size_t err_len);

/* Redis' refusal of an XADD whose ID is not above the stream's last: in
 * the cluster layout, that entry is already stored (a retry). */
bool cluster_said_id_taken(const cluster_conn *c);

/* --- replies ---------------------------------------------------------- */

/* The value of field name in a flat array of field, value, ... (an
 * HGETALL reply, a stream entry's fields), or NULL. Values that are not
 * strings, and a field an entry names twice, count as absent. */
const redisReply *cluster_field(const redisReply *flat, const char *name);

/* The value of field name as an integer in lo..hi, read strictly
 * (aural_cluster_parse_int): 0, or -1 (absent or not one). */
int cluster_field_int(const redisReply *flat, const char *name, int64_t lo,
                      int64_t hi, int64_t *out);

/* The value of field name as a decimal number in lo..hi, read strictly
 * (aural_cluster_parse_real): 0, or -1. */
int cluster_field_double(const redisReply *flat, const char *name, double lo,
                         double hi, double *out);

/* A stream entry ID "MS-SEQ" into its two parts. Returns 0, or -1 when r
 * is not one. */
int cluster_parse_id(const redisReply *r, uint64_t *ms, uint64_t *seq);

/* The entries of the single stream of an XREAD or XREVRANGE reply: an
 * array of [ID, [field, value, ...]], each checked. NULL with *n = 0 for
 * none (an XREAD that timed out); -1 when the reply has another shape. */
int cluster_entries(const redisReply *r, bool xread,
                    redisReply *const **entries, size_t *n);

#endif
