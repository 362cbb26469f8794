/* aural: one command-line tool, one subcommand per job. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

#include <aural.h>

#include "cli.h"

static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} commands[] = {
    {"encode", cmd_encode,
     "run the encoder over an audio file (.npy, text, words)"},
    {"info", cmd_info, "describe a model: config, size, cost per frame"},
    {"bench", cmd_bench, "measure the speed of the library's stages"},
    {"sub", cmd_sub, "follow a running aurald's streams (chunks, text, .npy)"},
    {"send", cmd_send, "push an audio file to a running aurald as a stream"},
    {"stats", cmd_stats, "show a running aurald's streams and subscribers"},
    {"load", cmd_load, "load aurald with real-time streams; measure latency"},
    {"pronounce", cmd_pronounce, "spell custom words in the model's tokens"},
};

static void usage(FILE *to) {
  fprintf(to,
          "Usage: aural COMMAND [OPTIONS] [ARGS]\n"
          "\n"
          "aural runs the streaming speech-frame encoder's library from the\n"
          "command line, without the daemon (encode, info, bench,\n"
          "pronounce), and talks to a running aurald (sub, send, stats,\n"
          "load).\n"
          "\n"
          "Commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(to, "  %-9s  %s\n", commands[i].name, commands[i].summary);
  fprintf(to,
          "\n"
          "Options:\n"
          "  -h, --help     show this help\n"
          "  -V, --version  show the version\n"
          "\n"
          "'aural COMMAND --help' describes a command. Example:\n"
          "  aural encode -o speech.npy speech.wav\n");
}

void cli_notice(const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  /* One call: stdio's lock keeps it whole beside the progress's. */
  fprintf(stderr, "%s%s\n", isatty(STDERR_FILENO) ? "\r\033[K" : "", line);
}

const char *cli_printable(const char *s, size_t len, char *out,
                          size_t cap) {
  size_t n = len < cap - 1 ? len : cap - 1;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    out[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
  }
  out[n] = '\0';
  return out;
}

double cli_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double cli_thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *cli_default_sample(void) {
  if (access(AURAL_INSTALLED_SAMPLE, R_OK) == 0) return AURAL_INSTALLED_SAMPLE;
  return AURAL_SOURCE_SAMPLE;
}

const char *cli_default_model(void) {
  const char *env = getenv("AURAL_MODEL");
  if (env != NULL && env[0] != '\0') return env;
  if (access(AURAL_INSTALLED_MODEL, R_OK) == 0) return AURAL_INSTALLED_MODEL;
  return AURAL_SOURCE_MODEL;
}

const char *cli_pos_name(int pos_encoding) {
  return pos_encoding == AURAL_POS_ROPE         ? "rope"
         : pos_encoding == AURAL_POS_SINUSOIDAL ? "sinusoidal"
                                                : "none";
}

const char *cli_bf16_method(void) {
  static char text[240];
  size_t dot_rows = aural_model_bf16_dot_rows();
  if (strcmp(aural_isa_name(), "scalar") == 0)
    return "the scalar oracle: much slower than f32";
  if (dot_rows == SIZE_MAX) return "AVX512-BF16 dot products";
  if (dot_rows == 0)
    return "emulated by the f32 kernels without AVX512-BF16's dot products "
           "(this CPU has none, or AURAL_BF16 or AURAL_ISA set them aside): "
           "the same results, slower than f32";
  snprintf(text, sizeof text,
           "AVX512-BF16 dot products for products of up to %zu rows, "
           "emulated by the f32 kernels for more (faster on this CPU, where "
           "the dot products are slow: chunk mode a little slower than f32)",
           dot_rows);
  return text;
}

/* The first error of a write to stdout, kept because the stream's error
 * flag stays set and a later fflush() may have nothing left to write (and
 * so no errno to give). A write that fails inside a printf (more than the
 * buffer at once) leaves its errno to whatever runs next: stdout's writes
 * go through stdout_write(), which records it there. */
static int stdout_errno;

/* As stdio writes a stream of its own: a short write goes on with the
 * rest, a failed one ends the write (the stream's error flag is set). */
static ssize_t stdout_write(void *cookie, const char *buf, size_t n) {
  (void)cookie;
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(STDOUT_FILENO, buf + done, n - done);
    if (w <= 0) {
      if (stdout_errno == 0) stdout_errno = w < 0 ? errno : EIO;
      return done > 0 ? (ssize_t)done : -1;
    }
    done += (size_t)w;
  }
  return (ssize_t)done;
}

/* stdout as a stream over fd 1 whose writes are stdout_write(), buffered
 * as stdio buffers it (by line on a terminal, else in blocks). Left as it
 * was if the stream cannot be made. */
static void stdout_record_errors(void) {
  FILE *f = fopencookie(NULL, "w", (cookie_io_functions_t){
                                       .write = stdout_write});
  if (f == NULL) return;
  if (setvbuf(f, NULL, isatty(STDOUT_FILENO) ? _IOLBF : _IOFBF, BUFSIZ) !=
      0) {
    fclose(f);
    return;
  }
  stdout = f;
}

int cli_stdout_flush(char *err, size_t err_bytes) {
  errno = 0;
  if (fflush(stdout) != 0 && stdout_errno == 0)
    stdout_errno = errno ? errno : EIO;
  if (!ferror(stdout)) return 0;
  if (stdout_errno == 0) stdout_errno = EIO;
  snprintf(err, err_bytes, "standard output: %s", strerror(stdout_errno));
  return -1;
}

int cli_cpus_available(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int cli_parse_size(const char *s, size_t lo, size_t hi, size_t *out) {
  /* Digits alone: strtoull skips spaces and takes a sign, and negates
   * what follows a minus, so " -18446744073709551615" was 1. */
  if (s[0] < '0' || s[0] > '9') return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return -1;
  *out = (size_t)v;
  return 0;
}

void cli_stop_now_on_next(void) {
  signal(SIGINT, SIG_DFL); /* signal() is async-signal-safe */
  signal(SIGTERM, SIG_DFL);
}

void cli_catch_stop(void (*on_stop)(int)) {
  struct sigaction sa = {.sa_handler = on_stop};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

int cli_read_stdin(void **bytes, size_t *n, const volatile sig_atomic_t *stop,
                   char *err, size_t err_bytes) {
  size_t cap = 0;
  *n = 0;
  for (;;) {
    if (*n == cap) {
      size_t want = cap ? 2 * cap : 1 << 20;
      char *p = want <= CLI_STDIN_MAX_BYTES ? realloc(*bytes, want) : NULL;
      if (p == NULL) {
        snprintf(err, err_bytes, "standard input: %s",
                 want > CLI_STDIN_MAX_BYTES
                     ? "more than 1 GiB (give a file instead)"
                     : "out of memory");
        return -1;
      }
      *bytes = p;
      cap = want;
    }
    ssize_t k = read(STDIN_FILENO, (char *)*bytes + *n, cap - *n);
    if (k < 0 && errno == EINTR && !*stop) continue;
    if (k < 0) {
      snprintf(err, err_bytes, "standard input: %s",
               *stop ? "interrupted" : strerror(errno));
      return -1;
    }
    if (k == 0) return 0;
    *n += (size_t)k;
  }
}

/* The exit status of a command that returned rc: whatever it wrote to
 * stdout arrived, or it fails (a result lost on a full disk is not a
 * success). A command that failed already said why. */
static int finish(const char *cmd, int rc) {
  char err[256];
  if (cli_stdout_flush(err, sizeof err) < 0 && rc == EXIT_OK) {
    fprintf(stderr, "aural%s%s: %s\n", cmd ? " " : "", cmd ? cmd : "", err);
    rc = EXIT_FAIL;
  }
  return rc;
}

/* Opens /dev/null onto any of fds 0, 1 and 2 that is closed; -1 if one
 * cannot be. Without it the next file or socket opened takes the closed
 * number: with fd 1 closed, 'aural stats' would write its table into its
 * own connection to aurald, and 'aural encode -o' its reports into the
 * output file. Fd 1 gets it for reading only, so that a write to stdout
 * still fails (EBADF) as on the closed descriptor: a result printed there
 * is lost, and the command's exit status says so (finish()). */
int cli_stdout_closed;

static int std_fds_open(void) {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
    if (fd == STDOUT_FILENO) cli_stdout_closed = 1;
    /* The lower numbers are open, so the lowest free one is fd. */
    int got = open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY);
    if (got != fd) {
      if (got >= 0) close(got);
      return -1;
    }
  }
  return 0;
}

int cli_stdout_reports_only(void) {
  if (!cli_stdout_closed) return 0;
  int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = dup2(fd, STDOUT_FILENO) < 0 ? -1 : 0;
  close(fd);
  return rc;
}

int main(int argc, char **argv) {
  if (std_fds_open() < 0) {
    fprintf(stderr, "aural: cannot open /dev/null: %s\n", strerror(errno));
    return EXIT_FAIL;
  }
  stdout_record_errors();
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 ||
      strcmp(cmd, "help") == 0) {
    usage(stdout);
    return finish(NULL, EXIT_OK);
  }
  if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
    printf("aural %s\n", AURAL_VERSION);
    return finish(NULL, EXIT_OK);
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(cmd, commands[i].name) == 0) {
      /* getopt's own messages name the program by argv[0]. */
      char prog[32];
      snprintf(prog, sizeof prog, "aural %s", cmd);
      argv[1] = prog;
      return finish(cmd, commands[i].run(argc - 1, argv + 1));
    }
  fprintf(stderr, "aural: unknown command '%s' (see 'aural --help')\n", cmd);
  return EXIT_USAGE;
}
