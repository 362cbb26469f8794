/* CHECK(cond): a contract of the code under test; when it breaks, the
 * fuzz target aborts (a libFuzzer crash) naming the line and the
 * condition. Shared by the fuzz targets. */
#ifndef AURAL_FUZZ_CHECK_H
#define AURAL_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,       \
              #cond);                                                         \
      abort();                                                                \
    }                                                                         \
  } while (0)

#endif
