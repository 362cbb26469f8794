/*
 * Counts the heap allocations each thread makes, for the tests of the
 * library's "allocates nothing" promises. A byte count (test_allocated_bytes)
 * misses a call that frees what it allocated; this counts every call.
 *
 * Under a sanitizer, whose allocator must stay the process's, the count
 * comes from its malloc hook. Elsewhere (glibc) the test program itself
 * defines the allocation functions, which the dynamic linker then binds
 * for every library in the process, and hands each call to glibc's own.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "helpers.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define SANITIZER_ALLOCATOR 1
#endif
#endif

static _Thread_local unsigned long n_alloc_calls;

/* Through a volatile pointer, so that the compiler cannot leave out the
 * pair of calls the check below makes. */
static void *(*volatile check_malloc)(size_t) = malloc;
static void (*volatile check_free)(void *) = free;

/* A count that stayed 0 (a sanitizer whose hook is not installed, a
 * libc whose calls do not reach ours) would pass every "allocates
 * nothing" test without checking anything: the first reading on each
 * thread makes one allocation and fails the program if it went
 * uncounted. */
unsigned long test_alloc_calls(void) {
  static _Thread_local int checked;
  if (!checked) {
    unsigned long before = n_alloc_calls;
    check_free(check_malloc(24));
    if (n_alloc_calls == before) {
      fprintf(stderr, "tests/alloc_calls.c: a malloc() went uncounted; "
                      "the allocation tests would check nothing\n");
      abort();
    }
    checked = 1;
  }
  return n_alloc_calls;
}

#ifdef SANITIZER_ALLOCATOR

int __sanitizer_install_malloc_and_free_hooks(
    void (*malloc_hook)(const volatile void *, size_t),
    void (*free_hook)(const volatile void *));

static void count_malloc(const volatile void *p, size_t size) {
  (void)p;
  (void)size;
  n_alloc_calls++;
}

static void ignore_free(const volatile void *p) { (void)p; }

__attribute__((constructor)) static void install_hooks(void) {
  __sanitizer_install_malloc_and_free_hooks(count_malloc, ignore_free);
}

#else

void *__libc_malloc(size_t size);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void __libc_free(void *p);

void *malloc(size_t size) {
  n_alloc_calls++;
  return __libc_malloc(size);
}

void *calloc(size_t n, size_t size) {
  n_alloc_calls++;
  return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size) {
  n_alloc_calls++;
  return __libc_realloc(p, size);
}

void *memalign(size_t align, size_t size) {
  n_alloc_calls++;
  return __libc_memalign(align, size);
}

void *aligned_alloc(size_t align, size_t size) {
  n_alloc_calls++;
  return __libc_memalign(align, size);
}

int posix_memalign(void **out, size_t align, size_t size) {
  n_alloc_calls++;
  if (align % sizeof(void *) != 0 || (align & (align - 1)) != 0)
    return EINVAL;
  void *p = __libc_memalign(align, size);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

void free(void *p) { __libc_free(p); }

#endif
