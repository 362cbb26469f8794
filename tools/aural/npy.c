/* NumPy .npy format 1.0: magic, version, header length, a Python dict
 * literal padded with spaces to a 64-byte boundary, then the raw data. */
#include "npy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int format_header(char *hdr, size_t n_rows, size_t n_cols) {
  char dict[NPY_HEADER_BYTES];
  int len = snprintf(dict, sizeof dict,
                     "{'descr': '<f4', 'fortran_order': False, "
                     "'shape': (%zu, %zu), }",
                     n_rows, n_cols);
  size_t body = NPY_HEADER_BYTES - 10;
  if (len < 0 || (size_t)len + 1 > body) return -1;
  memcpy(hdr, "\x93NUMPY\x01\x00", 8);
  hdr[8] = (char)(body & 0xff);
  hdr[9] = (char)(body >> 8);
  memset(hdr + 10, ' ', body);
  memcpy(hdr + 10, dict, (size_t)len);
  hdr[NPY_HEADER_BYTES - 1] = '\n';
  return 0;
}

int npy_write_begin(FILE *f, size_t n_cols) {
  char hdr[NPY_HEADER_BYTES];
  if (format_header(hdr, 0, n_cols) < 0) return -1;
  return fwrite(hdr, 1, sizeof hdr, f) == sizeof hdr ? 0 : -1;
}

int npy_write_end(FILE *f, size_t n_rows, size_t n_cols) {
  char hdr[NPY_HEADER_BYTES];
  if (format_header(hdr, n_rows, n_cols) < 0) return -1;
  if (fflush(f) != 0 || fseek(f, 0, SEEK_SET) != 0) return -1;
  if (fwrite(hdr, 1, sizeof hdr, f) != sizeof hdr) return -1;
  return fflush(f) == 0 ? 0 : -1;
}

int npy_read_f32(const char *path, float **data, size_t *n_rows,
                 size_t *n_cols, char *err, size_t err_len) {
  *data = NULL;
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    snprintf(err, err_len, "%s: cannot open", path);
    return -1;
  }
  unsigned char pre[10];
  char dict[4096];
  int ok = fread(pre, 1, 10, f) == 10 && memcmp(pre, "\x93NUMPY", 6) == 0 &&
           pre[6] == 1;
  size_t hlen = ok ? (size_t)pre[8] | (size_t)pre[9] << 8 : 0;
  ok = ok && hlen < sizeof dict && fread(dict, 1, hlen, f) == hlen;
  if (ok) dict[hlen] = '\0';
  const char *shape = ok ? strstr(dict, "'shape': (") : NULL;
  ok = ok && strstr(dict, "'descr': '<f4'") != NULL &&
       strstr(dict, "'fortran_order': False") != NULL && shape != NULL &&
       sscanf(shape, "'shape': (%zu, %zu)", n_rows, n_cols) == 2;
  size_t n = ok ? *n_rows * *n_cols : 0;
  if (ok && n > 0) {
    *data = malloc(n * sizeof **data);
    ok = *data != NULL && fread(*data, sizeof **data, n, f) == n;
  }
  fclose(f);
  if (!ok) {
    free(*data);
    *data = NULL;
    snprintf(err, err_len, "%s: not a 2-D little-endian float32 .npy", path);
    return -1;
  }
  return 0;
}
