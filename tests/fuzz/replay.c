/*
 * The fuzz targets without libFuzzer: a main() that feeds each file named
 * on the command line (a directory: each regular file in it, in name
 * order) to LLVMFuzzerTestOneInput once, so that the build's own compiler
 * and sanitizers run every target over its committed seeds and the inputs
 * that once broke it (tests/meson.build's suite "fuzz_replay"). A target's
 * checks abort on a broken contract and the sanitizers on memory errors,
 * so a passing replay is one that returns; it prints what it ran.
 *   fuzz_replay_NAME FILE|DIR...
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

/* A custom mutator's fallback to libFuzzer's own; a replay never mutates. */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size) {
  (void)data;
  (void)max_size;
  return size;
}

/* The whole of file path in malloc'd memory (at least one byte, so that
 * an empty input is a valid pointer too); exits on any error, naming the
 * file: a seed that cannot be read is a broken checkout, not a pass. */
static uint8_t *slurp(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "fuzz_replay: %s: %s\n", path, strerror(errno));
    exit(1);
  }
  size_t cap = 4096, n = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (buf == NULL) {
      fprintf(stderr, "fuzz_replay: %s: out of memory\n", path);
      exit(1);
    }
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    cap *= 2;
    buf = realloc(buf, cap);
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    fprintf(stderr, "fuzz_replay: %s: read error\n", path);
    exit(1);
  }
  *size = n;
  return buf;
}

static void run_one(const char *path) {
  size_t size;
  uint8_t *data = slurp(path, &size);
  printf("%s\n", path); /* the input a crash's report follows */
  fflush(stdout);
  LLVMFuzzerTestOneInput(data, size);
  free(data);
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Each regular file in dir, in name order; the number run. */
static size_t run_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) {
    fprintf(stderr, "fuzz_replay: %s: %s\n", dir, strerror(errno));
    exit(1);
  }
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    if (de->d_name[0] == '.') continue;
    size_t len = strlen(dir) + strlen(de->d_name) + 2;
    char *path = malloc(len);
    char **grown = realloc(names, (n + 1) * sizeof *names);
    if (path == NULL || grown == NULL) {
      fprintf(stderr, "fuzz_replay: %s: out of memory\n", dir);
      exit(1);
    }
    names = grown;
    snprintf(path, len, "%s/%s", dir, de->d_name);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
      names[n++] = path;
    else
      free(path);
  }
  closedir(d);
  qsort(names, n, sizeof *names, by_name);
  for (size_t i = 0; i < n; i++) {
    run_one(names[i]);
    free(names[i]);
  }
  free(names);
  return n;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
    return 2;
  }
  size_t total = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
      size_t n = run_dir(argv[i]);
      if (n == 0) { /* an emptied seed directory tests nothing */
        fprintf(stderr, "fuzz_replay: %s: no inputs\n", argv[i]);
        return 1;
      }
      total += n;
    } else {
      run_one(argv[i]);
      total++;
    }
  }
  printf("fuzz_replay: %zu inputs, every one returned\n", total);
  return 0;
}
