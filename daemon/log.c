/* Logging to stderr with levels, clocks and shared message buffers. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

int aurald_log_level = LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
/* syslog(3)'s priorities of the levels: LOG_ERR, LOG_WARNING, LOG_INFO,
 * LOG_DEBUG. */
static const int level_priorities[] = {3, 4, 6, 7};

/* Set once by aurald_log_setup(), before any thread, then only read. */
static bool to_journal;

/* systemd connects stderr to the journal and names that stream in
 * JOURNAL_STREAM as "DEVICE:INODE" (systemd.exec(5)). A child that
 * inherited the variable but writes elsewhere does not match. */
void aurald_log_setup(void) {
  const char *js = getenv("JOURNAL_STREAM");
  unsigned long long dev, ino;
  struct stat st;
  char end;
  to_journal = js != NULL &&
               sscanf(js, "%llu:%llu%c", &dev, &ino, &end) == 2 &&
               fstat(STDERR_FILENO, &st) == 0 &&
               (unsigned long long)st.st_dev == dev &&
               (unsigned long long)st.st_ino == ino;
}

void aurald_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%saurald: ", to_journal ? "<3>" : "");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
}

int aurald_log_level_parse(const char *s) {
  for (int i = 0; i < 4; i++)
    if (strcmp(s, level_names[i]) == 0) return i;
  if (strcmp(s, "warning") == 0) return LOG_WARN;
  return -1;
}

/* Copies msg into out (cap bytes, cap >= 8) with every control byte, DEL
 * and backslash escaped (\n, \t, \\, \u00XX), and every byte above
 * 0x7f (\xHH: UTF-8 can encode the C1 controls, such as CSI), so that a
 * string a peer chose (a client's name, a file's) can neither end a log
 * line nor forge one nor drive a terminal. Cuts at a whole escape. */
static void escape_line(const char *msg, char *out, size_t cap) {
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
    char e[8];
    size_t k;
    if (*p == '\\') k = (size_t)snprintf(e, sizeof e, "\\\\");
    else if (*p == '\n') k = (size_t)snprintf(e, sizeof e, "\\n");
    else if (*p == '\t') k = (size_t)snprintf(e, sizeof e, "\\t");
    else if (*p < 0x20 || *p == 0x7f)
      k = (size_t)snprintf(e, sizeof e, "\\u%04x", *p);
    else if (*p > 0x7f)
      k = (size_t)snprintf(e, sizeof e, "\\x%02x", *p);
    else e[0] = (char)*p, k = 1;
    if (o + k >= cap) break;
    memcpy(out + o, e, k);
    o += k;
  }
  out[o] = '\0';
}

/* One line per call, written with a single fprintf so that lines from the
 * loop and from workers never interleave mid-line. */
void aurald_log(int level, const char *fmt, ...) {
  if (level > aurald_log_level) return;
  char msg[1024], line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  escape_line(msg, line, sizeof line);
  if (to_journal) {
    /* The journal keeps the time; "<N>" is the line's priority. */
    fprintf(stderr, "<%d>aurald %s: %s\n", level_priorities[level],
            level_names[level], line);
    return;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  localtime_r(&ts.tv_sec, &tm);
  fprintf(stderr, "%02d:%02d:%02d.%03ld aurald %s: %s\n", tm.tm_hour,
          tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, level_names[level],
          line);
}

int64_t aurald_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

double aurald_mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes held by live message buffers, for STATS (loop thread only). */
size_t msgbuf_live_bytes;

msgbuf *msgbuf_new(size_t len) {
  msgbuf *m = malloc(sizeof *m + len);
  if (m == NULL) return NULL;
  m->refs = 1;
  m->len = len;
  msgbuf_live_bytes += len;
  return m;
}

msgbuf *msgbuf_from(const void *data, size_t len) {
  msgbuf *m = len > 0 ? msgbuf_new(len) : NULL;
  if (m != NULL) memcpy(m->data, data, len);
  return m;
}

void msgbuf_trim(msgbuf *m, size_t len) {
  msgbuf_live_bytes -= m->len - len;
  m->len = len;
}

void msgbuf_unref(msgbuf *m) {
  if (m != NULL && --m->refs == 0) {
    msgbuf_live_bytes -= m->len;
    free(m);
  }
}
