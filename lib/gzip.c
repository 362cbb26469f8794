/*
 * Words resources as files: a lexicon, an ARPA LM or a g2p map may be
 * stored gzipped (RFC 1952, what `gzip` writes), as the default model's
 * are. The loaders inflate such text here, whole, before they parse it;
 * everything else passes through untouched. And where a model's
 * resources are found beside it (aural_decoder_resource_path).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "aural/decoder.h"
#include "internal.h"

bool aural__is_gzip(const void *data, size_t len) {
  const unsigned char *p = data;
  return len >= 2 && p[0] == 0x1f && p[1] == 0x8b;
}

/* Feeds zlib at most this much input at once (its counts are 32-bit). */
#define FEED_MAX (1u << 30)

int aural__gunzip(const void *data, size_t len, const char *name,
                  size_t max_out, unsigned char **out, size_t *out_len,
                  aural_err *err) {
  *out = NULL;
  *out_len = 0;
  if (max_out > SIZE_MAX / 2) max_out = SIZE_MAX / 2; /* max_out + 1 fits */
  z_stream zs = {0};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
    return aural__err_set(err, AURAL_ENOMEM, "%s: out of memory to inflate",
                          name);
  /* Text compresses about four times; the buffer doubles from there, up
   * to one byte past max_out (which tells "too large" apart). */
  size_t cap = len < max_out / 4 ? 4 * len + 4096 : max_out + 1;
  if (cap > max_out + 1) cap = max_out + 1;
  unsigned char *buf = malloc(cap);
  const unsigned char *in = data;
  size_t in_at = 0, n = 0;
  int rc = buf == NULL ? aural__err_set(err, AURAL_ENOMEM,
                                        "%s: out of memory to inflate", name)
                       : 0;
  while (rc == 0) {
    if (n == cap) {
      if (cap > max_out) break; /* past the limit: said below */
      size_t grown = cap > (max_out + 1) / 2 ? max_out + 1 : 2 * cap;
      unsigned char *b = realloc(buf, grown);
      if (b == NULL) {
        rc = aural__err_set(err, AURAL_ENOMEM, "%s: out of memory to inflate",
                            name);
        break;
      }
      buf = b;
      cap = grown;
    }
    size_t feed = len - in_at < FEED_MAX ? len - in_at : FEED_MAX;
    size_t room = cap - n < FEED_MAX ? cap - n : FEED_MAX;
    zs.next_in = (unsigned char *)in + in_at;
    zs.avail_in = (uInt)feed;
    zs.next_out = buf + n;
    zs.avail_out = (uInt)room;
    int z = inflate(&zs, Z_NO_FLUSH);
    in_at += feed - zs.avail_in;
    n += room - zs.avail_out;
    if (z == Z_STREAM_END) {
      if (in_at == len) break;
      /* Another member (gzip files may be concatenated), else junk. */
      if (!aural__is_gzip(in + in_at, len - in_at)) {
        rc = aural__err_set(err, AURAL_EFORMAT,
                            "%s: %zu bytes after the end of the gzip data",
                            name, len - in_at);
        break;
      }
      inflateReset(&zs);
    } else if (z == Z_MEM_ERROR) {
      rc = aural__err_set(err, AURAL_ENOMEM, "%s: out of memory to inflate",
                          name);
    } else if (z == Z_DATA_ERROR || z == Z_NEED_DICT || z == Z_STREAM_ERROR) {
      rc = aural__err_set(err, AURAL_EFORMAT, "%s: corrupt gzip data (%s)",
                          name, zs.msg != NULL ? zs.msg : "unknown error");
    } else if (in_at == len && zs.avail_out != 0) {
      /* All input given, room left, and no end: the file was cut short. */
      rc = aural__err_set(err, AURAL_EFORMAT,
                          "%s: gzip data cut short (truncated file?)", name);
    }
  }
  inflateEnd(&zs);
  if (rc == 0 && n > max_out)
    rc = aural__err_set(err, AURAL_EFORMAT,
                        "%s: inflates to more than %zu bytes", name, max_out);
  if (rc < 0) {
    free(buf);
    return rc;
  }
  *out = buf;
  *out_len = n;
  return 0;
}

/* A UTF-8 byte order mark, which some editors write at the start of a
 * text file: it is no part of the text (it would otherwise become part of
 * the first word, or hide a header). */
static void skip_bom(const char **text, size_t *len) {
  if (*len >= 3 && memcmp(*text, "\xef\xbb\xbf", 3) == 0) {
    *text += 3;
    *len -= 3;
  }
}

int aural__plain_text(const char **text, size_t *len, const char *name,
                      size_t max_out, unsigned char **plain, aural_err *err) {
  *plain = NULL;
  if (*text == NULL) return 0;
  if (aural__is_gzip(*text, *len)) {
    size_t n;
    int rc = aural__gunzip(*text, *len, name, max_out, plain, &n, err);
    if (rc < 0) return rc;
    *text = (const char *)*plain;
    *len = n;
  }
  skip_bom(text, len);
  return 0;
}

/* --- resources beside a model ---------------------------------------------- */

/* out = the model's stem + suffix, plain when it exists, else gzipped when
 * that exists; *found says whether either did. */
static int one_path(const char *model_path, const char *suffix, char *out,
                    size_t cap, bool *found) {
  static const char ext[] = ".safetensors";
  size_t n = strlen(model_path), k = sizeof ext - 1;
  if (n > k && memcmp(model_path + n - k, ext, k) == 0) n -= k;
  int len = snprintf(out, cap, "%.*s%s.gz", (int)n, model_path, suffix);
  if (len < 0 || (size_t)len >= cap) return -ENAMETOOLONG;
  char *gz = out + len - 3;
  *gz = '\0'; /* the plain name, when it exists or neither does */
  *found = true;
  if (access(out, F_OK) == 0) return 0;
  *gz = '.';
  if (access(out, F_OK) == 0) return 0;
  *gz = '\0';
  *found = false;
  return 0;
}

int aural_decoder_resource_path(const char *model_path, const char *suffix,
                                char *out, size_t cap) {
  bool found;
  if (model_path == NULL || suffix == NULL || out == NULL) return AURAL_EINVAL;
  if (strcmp(suffix, ".lm") != 0)
    return one_path(model_path, suffix, out, cap, &found);
  /* The LM in either form: binary first, then ARPA, else the binary's name. */
  int rc = one_path(model_path, ".lm.bin", out, cap, &found);
  if (rc < 0 || found) return rc;
  rc = one_path(model_path, ".lm.arpa", out, cap, &found);
  if (rc < 0) return rc;
  if (found) return 0;
  return one_path(model_path, ".lm.bin", out, cap, &found);
}
