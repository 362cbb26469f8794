/* Shared pieces of the aural command-line tool. */
#ifndef AURAL_TOOLS_CLI_H
#define AURAL_TOOLS_CLI_H

#include <stdio.h>

/* Exit codes of every subcommand. */
enum {
  EXIT_OK = 0,
  EXIT_FAIL = 1,   /* bad input or a failure while working */
  EXIT_USAGE = 2,  /* bad command line */
  EXIT_SIGNAL = 130,
};

int cmd_encode(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* Monotonic wall clock and this thread's CPU time, in seconds. */
double cli_now_s(void);
double cli_thread_cpu_s(void);

#endif
