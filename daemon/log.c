/* Logging to stderr with levels, clocks and shared message buffers. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

_Atomic int aurald_log_level = LOG_INFO;

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

/* ---- the writer ----------------------------------------------------------
 *
 * stderr can stop taking lines: a pipe whose reader is stopped or stuck
 * (`aurald 2>&1 | tee`, a log collector that hangs), a terminal held by
 * ^S. A write there blocks, and a log line written by the loop then froze
 * every client (after 64 KiB: about 300 connections at debug level). So
 * once the daemon serves, lines go into a bounded buffer that one thread
 * writes out; a line that finds the buffer full is dropped and counted,
 * and the count is said when stderr takes lines again. Nobody but that
 * thread ever waits for stderr. */

#define LOG_BUFFER_BYTES (64 * 1024)

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;      /* lines came; the buffer was written; stop */
  char buf[LOG_BUFFER_BYTES];
  size_t len;             /* bytes waiting in buf */
  unsigned long long dropped; /* lines lost since the last report */
  bool running;           /* the writer takes the lines */
  bool stopping;          /* the writer is asked to finish */
  bool writing;           /* the writer holds a batch it is writing */
  bool stuck;             /* it did not finish in time: drop everything */
  pthread_t thread;
} lw = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* All of p to stderr, waiting as long as it takes; gives up on an error
 * (a closed pipe, a full disk: the lines are lost, nothing else is). */
static void write_all(const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = write(STDERR_FILENO, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd pfd = {.fd = STDERR_FILENO, .events = POLLOUT};
      poll(&pfd, 1, -1);
      continue;
    }
    if (k <= 0) return;
    p += k;
    n -= (size_t)k;
  }
}

/* One whole line (ending in '\n') from any thread. */
static void emit(const char *line, size_t n) {
  pthread_mutex_lock(&lw.mu);
  if (lw.running) {
    if (n <= sizeof lw.buf - lw.len) {
      memcpy(lw.buf + lw.len, line, n);
      lw.len += n;
      pthread_cond_broadcast(&lw.cv);
    } else {
      lw.dropped++;
    }
    pthread_mutex_unlock(&lw.mu);
    return;
  }
  bool stuck = lw.stuck;
  pthread_mutex_unlock(&lw.mu);
  if (!stuck) write_all(line, n);
}

static size_t format_line(int level, const char *msg, char *out, size_t cap);

static void *writer_main(void *arg) {
  (void)arg;
  static char batch[LOG_BUFFER_BYTES];
  pthread_mutex_lock(&lw.mu);
  for (;;) {
    while (lw.len == 0 && lw.dropped == 0 && !lw.stopping)
      pthread_cond_wait(&lw.cv, &lw.mu);
    if (lw.len == 0 && lw.dropped == 0) break; /* stopping, all written */
    size_t n = lw.len;
    unsigned long long lost = lw.dropped;
    memcpy(batch, lw.buf, n);
    lw.len = 0;
    lw.dropped = 0;
    lw.writing = true;
    pthread_mutex_unlock(&lw.mu);
    write_all(batch, n);
    if (lost > 0) {
      char msg[160], line[400];
      snprintf(msg, sizeof msg,
               "%llu log line%s lost: stderr did not take them as fast as "
               "they came",
               lost, lost == 1 ? "" : "s");
      write_all(line, format_line(LOG_WARN, msg, line, sizeof line));
    }
    pthread_mutex_lock(&lw.mu);
    lw.writing = false;
    pthread_cond_broadcast(&lw.cv);
  }
  pthread_mutex_unlock(&lw.mu);
  return NULL;
}

void aurald_log_start(void) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* for the stop's wait */
  pthread_cond_init(&lw.cv, &ca);
  pthread_condattr_destroy(&ca);
  /* Signals are the loop's: the writer is started with all blocked. */
  sigset_t all, was;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &was);
  pthread_mutex_lock(&lw.mu);
  lw.stopping = lw.stuck = false;
  lw.running = pthread_create(&lw.thread, NULL, writer_main, NULL) == 0;
  pthread_mutex_unlock(&lw.mu);
  pthread_sigmask(SIG_SETMASK, &was, NULL);
}

void aurald_log_stop(double timeout_s) {
  pthread_mutex_lock(&lw.mu);
  if (!lw.running) {
    pthread_mutex_unlock(&lw.mu);
    return;
  }
  lw.stopping = true;
  pthread_cond_broadcast(&lw.cv);
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  double end = (double)until.tv_sec + (double)until.tv_nsec * 1e-9 + timeout_s;
  until.tv_sec = (time_t)end;
  until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
  int rc = 0;
  while ((lw.len > 0 || lw.dropped > 0 || lw.writing) && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&lw.cv, &lw.mu, &until);
  bool drained = lw.len == 0 && lw.dropped == 0 && !lw.writing;
  lw.running = false;
  /* Not drained: the writer is blocked in a write that may never return.
   * It is left to the process's exit, and later lines are dropped. */
  lw.stuck = !drained;
  pthread_mutex_unlock(&lw.mu);
  if (drained) {
    pthread_join(lw.thread, NULL);
    pthread_cond_destroy(&lw.cv);
  } else {
    pthread_detach(lw.thread);
  }
}

void aurald_usage_error(const char *fmt, ...) {
  char msg[1024], line[1100];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  int n = snprintf(line, sizeof line, "%saurald: %s",
                   to_journal ? "<3>" : "", msg);
  if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
  if (n > 0) emit(line, (size_t)n);
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

/* The line of msg at level, as stderr gets it: escaped, with the
 * journal's priority or the time. Returns its length (cap > 16). */
static size_t format_line(int level, const char *msg, char *out, size_t cap) {
  char esc[2048];
  escape_line(msg, esc, sizeof esc);
  int n;
  if (to_journal) {
    /* The journal keeps the time; "<N>" is the line's priority. */
    n = snprintf(out, cap, "<%d>aurald %s: %s\n", level_priorities[level],
                 level_names[level], esc);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    n = snprintf(out, cap, "%02d:%02d:%02d.%03ld aurald %s: %s\n",
                 tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
                 level_names[level], esc);
  }
  if (n < 0) return 0;
  if ((size_t)n >= cap) { /* cut, still one line */
    out[cap - 2] = '\n';
    return cap - 1;
  }
  return (size_t)n;
}

/* One line per call, handed on whole, so that lines from the loop and
 * from workers never interleave mid-line. */
void aurald_log(int level, const char *fmt, ...) {
  if (level > aurald_log_level) return;
  char msg[1024], line[2200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  emit(line, format_line(level, msg, line, sizeof line));
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
