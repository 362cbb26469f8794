/*
 * aural cluster layout: where aurald nodes, producers and consumers meet in
 * Redis (docs/CLUSTER.md is the normative description). This header names
 * the keys and parses the cluster URL; it does no I/O of its own beyond
 * reading a password file, and links nothing but libc.
 *
 *   aural_cluster_url u;
 *   char why[256];
 *   if (aural_cluster_url_parse("redis://aural@10.0.0.5:6379/2", &u, why,
 *                               sizeof why) < 0) die(why);
 *   char key[AURAL_CLUSTER_KEY_MAX];
 *   aural_cluster_key(key, sizeof key, "call-17", AURAL_CLUSTER_OUT);
 *   // "aural:{call-17}:out"
 */
#ifndef AURAL_CLUSTER_H
#define AURAL_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Keys shared by every stream. */
#define AURAL_CLUSTER_ANNOUNCE "aural:announce" /* stream: new streams */
#define AURAL_CLUSTER_GROUP "nodes"             /* its consumer group */
#define AURAL_CLUSTER_EVENTS "aural:events"     /* stream: started/ended */
#define AURAL_CLUSTER_NODES "aural:nodes"       /* zset: node id -> ms */
#define AURAL_CLUSTER_NODE_PREFIX "aural:node:" /* + id: heartbeat (expires) */

/* A stream's own keys: aural:{NAME}:PART. The braces make NAME the hash
 * tag, so that in Redis Cluster all of a stream's keys share one slot. */
#define AURAL_CLUSTER_META "meta"   /* hash: format, rate, model dims */
#define AURAL_CLUSTER_AUDIO "audio" /* stream: PCM, ID <first sample>-1 */
#define AURAL_CLUSTER_OUT "out"     /* stream: chunks, ID <seq>-1 */
#define AURAL_CLUSTER_CKPT "ckpt"   /* hash: progress after each chunk */

/* Longest key: prefix, braces, a 64-byte name, a part, the NUL. */
#define AURAL_CLUSTER_KEY_MAX 96
/* Most seconds of audio one audio entry may hold. */
#define AURAL_CLUSTER_ENTRY_MAX_S 1
/* Longest password read from a file or the environment. */
#define AURAL_CLUSTER_PASSWORD_MAX 512

typedef struct aural_cluster_url {
  bool is_unix;      /* unix:PATH */
  char path[108];    /* the socket's path (is_unix) */
  char host[256];    /* redis://HOST... */
  int port;          /* default 6379 */
  char user[128];    /* redis://USER@...: an ACL user, or empty */
  int db;            /* /DB, default 0 */
} aural_cluster_url;

/* Parses redis://[USER@]HOST[:PORT][/DB] or unix:PATH. A password in the
 * URL is refused (it would show in ps and in logs): it comes from a file
 * or $AURAL_REDIS_PASSWORD (aural_cluster_password). Returns 0, or -1
 * with why naming the problem. */
int aural_cluster_url_parse(const char *url, aural_cluster_url *u, char *why,
                            size_t why_len);

/* The URL again, for logs (never a password). */
void aural_cluster_url_format(const aural_cluster_url *u, char *buf,
                              size_t cap);

/* The password: the first line of file when it is not NULL (a file that
 * others may read is refused), else $AURAL_REDIS_PASSWORD, else none.
 * Returns 1 with out set, 0 when there is none, -1 with why. */
int aural_cluster_password(const char *file, char *out, size_t cap,
                           char *why, size_t why_len);

/* A name a cluster stream may have: a protocol stream name (PROTOCOL.md
 * §4.14) without '{' or '}', which would break the hash tag. */
bool aural_cluster_valid_name(const char *name);

/* Writes "aural:{name}:part" into buf; returns its length, or 0 when the
 * name is not valid or cap is too small. */
size_t aural_cluster_key(char *buf, size_t cap, const char *name,
                         const char *part);

/* Numbers read back from Redis (announcements, meta hashes, checkpoints,
 * entry IDs) come from other programs and are read strictly, by these
 * alone: the len bytes at s are a whole decimal number, digits only (no
 * sign, space, point, exponent or base prefix), at most 20 of them, of
 * lo..hi. Returns 0 with *out set, or -1. */
int aural_cluster_parse_uint(const char *s, size_t len, uint64_t lo,
                             uint64_t hi, uint64_t *out);

/* As aural_cluster_parse_uint, with an optional leading '-'. */
int aural_cluster_parse_int(const char *s, size_t len, int64_t lo,
                            int64_t hi, int64_t *out);

/* A decimal number with an optional '-' and an optional fraction
 * ("12", "-0.25", "1.5"; not ".5", "5.", "1e3", "0x10", "inf"), at most
 * 40 bytes, of lo..hi. Returns 0 with *out set, or -1. */
int aural_cluster_parse_real(const char *s, size_t len, double lo,
                             double hi, double *out);

#ifdef __cplusplus
}
#endif

#endif
