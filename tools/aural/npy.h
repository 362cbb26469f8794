/*
 * npy.h — NumPy .npy files (format 1.0, little-endian float32, C order).
 *
 * The writer streams rows and fixes the shape at the end, so the row count
 * need not be known in advance. The reader is for tests and tools.
 */
#ifndef AURAL_TOOLS_NPY_H
#define AURAL_TOOLS_NPY_H

#include <stdio.h>

/* Size of the header the writer reserves (fixed so it can be rewritten). */
#define NPY_HEADER_BYTES 128

/* Writes a header for (0, n_cols); rows follow with fwrite. */
int npy_write_begin(FILE *f, size_t n_cols);

/* Rewrites the header with the final shape (n_rows, n_cols). */
int npy_write_end(FILE *f, size_t n_rows, size_t n_cols);

/* Reads a 2-D '<f4' C-order array. On success *data is malloc'ed (may be
 * NULL for 0 rows). On failure returns -1 and writes a message to err. */
int npy_read_f32(const char *path, float **data, size_t *n_rows,
                 size_t *n_cols, char *err, size_t err_len);

#endif
