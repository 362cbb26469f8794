/*
 * A library the integration tests preload into aurald to count its calls
 * of mallinfo2(), glibc's walk of every free block of every arena (what
 * STATS and /metrics report as heap_bytes): the count is written to
 * stderr, "mallinfo2 calls: N", when the process exits.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static atomic_ulong n_calls;

struct mallinfo2 mallinfo2(void) {
  static struct mallinfo2 (*next)(void);
  if (next == NULL) {
    void *p = dlsym(RTLD_NEXT, "mallinfo2"); /* ISO C: no cast to a function */
    memcpy(&next, &p, sizeof next);
  }
  atomic_fetch_add(&n_calls, 1);
  return next();
}

__attribute__((destructor)) static void report(void) {
  fprintf(stderr, "mallinfo2 calls: %lu\n",
          (unsigned long)atomic_load(&n_calls));
}
