/*
 * A library the integration tests preload into aurald to put its default
 * config file (the compiled-in path, which a test must not write) at a
 * file of the test's: access() and fopen() of the path in
 * $AURAL_TEST_CONFIG_FROM go to the path in $AURAL_TEST_CONFIG_TO, which
 * may or may not exist. Every other path passes through.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *moved(const char *path) {
  const char *from = getenv("AURAL_TEST_CONFIG_FROM"),
             *to = getenv("AURAL_TEST_CONFIG_TO");
  return from != NULL && to != NULL && strcmp(path, from) == 0 ? to : path;
}

/* The next definition of name (ISO C: no cast from void * to a function). */
static void next_of(const char *name, void *fn, size_t size) {
  void *p = dlsym(RTLD_NEXT, name);
  memcpy(fn, &p, size);
}

int access(const char *path, int mode) {
  static int (*next)(const char *, int);
  if (next == NULL) next_of("access", &next, sizeof next);
  return next(moved(path), mode);
}

FILE *fopen(const char *path, const char *mode) {
  static FILE *(*next)(const char *, const char *);
  if (next == NULL) next_of("fopen", &next, sizeof next);
  return next(moved(path), mode);
}
