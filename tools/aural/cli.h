/* Shared pieces of the aural command-line tool. */
#ifndef AURAL_TOOLS_CLI_H
#define AURAL_TOOLS_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdio.h>

/* Exit codes of every subcommand. */
enum {
  EXIT_OK = 0,
  EXIT_FAIL = 1,   /* bad input or a failure while working */
  EXIT_USAGE = 2,  /* bad command line */
  EXIT_DISCONNECTED = 3, /* aurald disconnected us (slow, shutting down) */
  EXIT_SIGNAL = 130,
};

int cmd_encode(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_sub(int argc, char **argv);
int cmd_send(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_load(int argc, char **argv);
int cmd_pronounce(int argc, char **argv);

/* The model used without -m: $AURAL_MODEL, else the installed default,
 * else the one in the source tree this binary was built from. */
const char *cli_default_model(void);
/* The bundled sample recording (installed, else in the source tree). */
const char *cli_default_sample(void);

/* The config's name of a model's position encoding (AURAL_POS_*):
 * "none", "sinusoidal" or "rope". */
const char *cli_pos_name(int pos_encoding);

/* How precision bf16 runs on this CPU, in words: aural_model_bf16_dot_rows
 * (and the scalar oracle, where AURAL_ISA chose it) said as a phrase. */
const char *cli_bf16_method(void);

/* The CPUs this process may run on (its affinity: taskset, a container's
 * cpuset), else those online; at least 1. */
int cli_cpus_available(void);

/* Parses a decimal integer in lo..hi, digits alone (no sign or spaces);
 * -1 if it is not one. */
int cli_parse_size(const char *s, size_t lo, size_t hi, size_t *out);

/* Flushes stdout and says whether everything written to it so far arrived:
 * 0, or -1 with "standard output: REASON" in err (the errno of the first
 * write that failed, even one whose result nobody checked). main() calls it
 * after every command; a command that streams calls it after each batch. */
int cli_stdout_flush(char *err, size_t err_bytes);

/* 1 when standard output was closed as aural started (main() then opens
 * /dev/null there for reading, so that no other file takes its number and
 * a write to it still fails): an output asked of it (-o -) would vanish,
 * and is refused instead. */
extern int cli_stdout_closed;

/* For a command whose stdout carries reports alone (its result goes to
 * a file: encode, sub -o FILE, send): when stdout was closed at start,
 * fd 1 becomes a writable /dev/null, so the reports go nowhere, as asked,
 * and their loss fails nothing. Returns 0, or -1 with errno set. */
int cli_stdout_reports_only(void);

/* The most bytes of standard input read as one file (INPUT "-"). */
#define CLI_STDIN_MAX_BYTES ((size_t)1 << 30)

/* Standard input read whole into *bytes (malloc'ed; free it, also after a
 * failure), *n its size: libsndfile seeks in most formats, so a pipe is
 * held in memory. A read that a signal interrupts goes on unless *stop is
 * set. Returns 0, or -1 with "standard input: REASON" in err. */
int cli_read_stdin(void **bytes, size_t *n, const volatile sig_atomic_t *stop,
                   char *err, size_t err_bytes);

/* SIGINT and SIGTERM to on_stop, for a command whose first one asks its
 * work to stop where it can. on_stop records the signal and calls
 * cli_stop_now_on_next(), so that either signal after it ends the process
 * at once (the default action): a read from a FIFO whose writer is idle,
 * or a write to one whose reader does not read, is made again when a
 * signal interrupts it, and would otherwise hold the command for as long.
 * (SA_RESETHAND alone resets only the signal that came: a Ctrl-C left
 * SIGTERM caught.) */
void cli_catch_stop(void (*on_stop)(int));
/* Async-signal-safe: SIGINT and SIGTERM back to their default action. */
void cli_stop_now_on_next(void);

/* Monotonic wall clock and this thread's CPU time, in seconds. */
double cli_now_s(void);
double cli_thread_cpu_s(void);

/* A line on stderr (fmt without its newline) that may come from any
 * thread while a progress line stands there (aural encode's, drawn by
 * another thread): on a terminal it takes that line off first, so that
 * the notice has a line of its own; the progress is drawn again below. */
void cli_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The len bytes at s (text another program wrote: a node's id, an error
 * it left in Redis) for a terminal, into out (cap bytes, NUL-terminated,
 * cut to fit; out may be s): each byte that is not printable ASCII, an
 * escape sequence's ESC, a NUL, as '?'. Returns out. */
const char *cli_printable(const char *s, size_t len, char *out, size_t cap);

#endif
