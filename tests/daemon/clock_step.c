/*
 * A library the integration tests preload into aurald to step its system
 * clock, as NTP or a resumed virtual machine does, without touching the
 * machine's: CLOCK_REALTIME reads as the kernel's plus the seconds written
 * in the file named by $AURAL_TEST_CLOCK_STEP_FILE (none, or no file: no
 * step). Every other clock passes through. The clock is read with the
 * system call itself, so that nothing here depends on which library
 * comes next.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int clock_gettime(clockid_t id, struct timespec *ts) {
  if (syscall(SYS_clock_gettime, id, ts) != 0) return -1;
  const char *path = getenv("AURAL_TEST_CLOCK_STEP_FILE");
  if (id != CLOCK_REALTIME || path == NULL) return 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[32];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  ts->tv_sec += (time_t)strtol(buf, NULL, 10);
  return 0;
}
