/*
 * outfile.h — the file behind -o of `aural encode` and `aural sub`: it
 * appears whole when the command succeeds, or not at all.
 *
 *   outfile of;
 *   char err[600];
 *   if (outfile_open(&of, "aural encode", out_path, in_path, err,
 *                    sizeof err) < 0) { fprintf(stderr, "%s\n", err); ... }
 *   fwrite(rows, ..., of.f);      // of.f is seekable: a header may be
 *   ...                           // rewritten at the end
 *   if (outfile_commit(&of, err, sizeof err) < 0) ...
 *   outfile_discard(&of);         // always; after a commit it does nothing
 *
 * PATH "-" is standard output, as /dev/stdout (outfile_path()).
 * What PATH is decides what happens (see outfile.c for why):
 *   - nothing yet, or a regular file: written to a file without a name in
 *     PATH's directory, which replaces PATH atomically at the commit;
 *   - a symbolic link to a regular file: the file it points to is
 *     replaced the same way; the link stays;
 *   - a character device or a FIFO (/dev/null, /dev/stdout on a terminal
 *     or a pipe, a named pipe): the bytes are written into it at the
 *     commit; it is never replaced;
 *   - the input itself (same device and inode), a regular file we may
 *     not write (read-only: '>' would fail on it too), a directory, a link
 *     to nothing, a block device or a socket: refused.
 * Not thread-safe for one outfile; distinct ones may be used at once.
 */
#ifndef AURAL_TOOLS_OUTFILE_H
#define AURAL_TOOLS_OUTFILE_H

#include <stdio.h>

typedef struct outfile {
  FILE *f;        /* where the output is written; seekable */
  char *path;     /* PATH as given, for messages */
  char *target;   /* the regular file replaced at the commit, or NULL */
  char *tmp_path; /* a named temporary file (no O_TMPFILE here), or NULL */
  int dest_fd;    /* the device or FIFO written at the commit ... */
  int has_dest;   /* ... when this is 1 (a zeroed outfile holds no fd) */
  int is_stdout;  /* PATH is what standard output writes to (-o
                     /dev/stdout): reports had better go to stderr */
  char *spool_dir; /* the directory of o->f when it is a spool file for a
                      device or FIFO ($TMPDIR), or NULL */
} outfile;

/* The path that -o ARG names: /dev/stdout for "-" (the usual name of
 * standard output on command lines), else ARG itself. Callers map -o's
 * argument once, so that messages name what is written. */
const char *outfile_path(const char *arg);

/* Checks PATH and opens o->f for the whole output. input (or NULL) is the
 * file the output is made from, which PATH must not be. prog starts the
 * line printed on stderr while a FIFO waits for its reader. On failure
 * returns -1 with a message naming PATH in err, and o holds nothing. */
int outfile_open(outfile *o, const char *prog, const char *path,
                 const char *input, char *err, size_t err_len);

/* The message for a write to o->f that failed with errno e: "PATH: write
 * failed: REASON", and where the bytes were going when that is a spool
 * file (a full $TMPDIR is not a full PATH). */
void outfile_write_error(const outfile *o, int e, char *err, size_t err_len);

/* Makes the output appear: PATH replaced, or the bytes written into the
 * device or FIFO. Returns 0, or -1 with a message in err; either way o is
 * closed and only outfile_discard remains to call. */
int outfile_commit(outfile *o, char *err, size_t err_len);

/* Closes o and removes whatever was written, unless it was committed.
 * Safe to call more than once, and on a zeroed or failed outfile. */
void outfile_discard(outfile *o);

#endif
