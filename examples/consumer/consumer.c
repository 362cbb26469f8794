/*
 * consumer.c: a minimal subscriber of aurald, a starting point to copy.
 *
 * It connects to aurald's socket, says HELLO, subscribes to one stream by
 * name (or to all of them), and prints one line per CHUNK of frame
 * embeddings: stream, chunk number, frames, the mean and standard
 * deviation of the embedding values and the latency (now - ready_us, the
 * moment the audio completing the chunk reached the server).
 *
 *   cc -std=c11 -o consumer consumer.c \
 *      $(pkg-config --cflags --libs aural-proto) -lm
 *   ./consumer                       # every stream, until interrupted
 *   ./consumer --stream mic          # one stream by name
 *   ./consumer -s /run/aural/aural.sock --until-end   # exit when a stream ends
 *
 * Only the protocol codec (aural-proto, <aural/proto.h>) is needed: it
 * builds and parses messages in our buffers, and this file does the I/O.
 * The protocol is specified in PROTOCOL.md of the aural sources.
 */
#define _POSIX_C_SOURCE 200809L
#include <aural/proto.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Names of the streams we receive, by stream id (from STREAM_STARTED). */
#define MAX_NAMES 64
static struct {
  uint32_t id;
  char name[AURAL_PROTO_NAME_MAX + 1];
} names[MAX_NAMES];

static const char *stream_name(uint32_t id) {
  for (int i = 0; i < MAX_NAMES; i++)
    if (names[i].id == id) return names[i].name;
  return "?";
}

/* The path aurald and its clients use when none is given (the codec's
 * rule: $AURAL_SOCKET, $XDG_RUNTIME_DIR, ...), and the system service's
 * when that is not there and no $AURAL_SOCKET asks for it. */
static void default_socket(char *buf, size_t len) {
  const char *env = getenv("AURAL_SOCKET");
  if (aural_proto_default_socket(buf, len) < 0) buf[0] = '\0';
  if ((env == NULL || env[0] == '\0') && access(buf, F_OK) != 0 &&
      access(AURAL_PROTO_SYSTEM_SOCKET, F_OK) == 0)
    snprintf(buf, len, "%s", AURAL_PROTO_SYSTEM_SOCKET);
}

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1; /* error, or the server closed the connection */
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/* Reads one message: the 16-byte header into h, the payload into *buf
 * (grown as needed, at most max_payload bytes). Returns 0 or -1. */
static int read_message(int fd, uint32_t max_payload, aural_msg_header *h,
                        uint8_t **buf, size_t *cap) {
  uint8_t head[AURAL_PROTO_HEADER_BYTES];
  if (read_all(fd, head, sizeof head) < 0) return -1;
  int rc = aural_proto_decode_header(head, sizeof head, max_payload, h);
  if (rc != 0) {
    fprintf(stderr, "consumer: bad message: %s\n", aural_proto_strerror(rc));
    return -1;
  }
  if (h->payload_bytes > *cap) {
    uint8_t *p = realloc(*buf, h->payload_bytes);
    if (p == NULL) return -1;
    *buf = p;
    *cap = h->payload_bytes;
  }
  return read_all(fd, *buf, h->payload_bytes);
}

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* One line per chunk: mean and standard deviation of its n_frames x
 * d_model float32 values (little-endian on the wire). */
static void print_chunk(uint32_t stream_id, const uint8_t *payload,
                        size_t n) {
  aural_chunk_header c;
  const uint8_t *emb, *logits;
  const char *text;
  if (aural_chunk_decode(payload, n, &c, &emb, &logits, &text) != 0) {
    fprintf(stderr, "consumer: malformed chunk\n");
    return;
  }
  double sum = 0, sum2 = 0;
  size_t count = (size_t)c.n_frames * c.d_model;
  for (size_t i = 0; i < count && emb != NULL; i++) {
    uint32_t bits = aural_get_u32(emb + 4 * i);
    float v;
    memcpy(&v, &bits, sizeof v);
    sum += v;
    sum2 += (double)v * v;
  }
  double mean = count ? sum / (double)count : 0;
  double var = count ? sum2 / (double)count - mean * mean : 0;
  printf("%s  seq %llu  frames %u  mean %+.4f  std %.4f  latency %.1f ms%s\n",
         stream_name(stream_id), (unsigned long long)c.seq, c.n_frames, mean,
         sqrt(var > 0 ? var : 0), (double)(now_us() - c.ready_us) / 1000.0,
         (c.flags & AURAL_CHUNK_FINAL) ? "  final" : "");
}

int main(int argc, char **argv) {
  char path[108];
  const char *stream = NULL; /* NULL: every stream */
  int until_end = 0;
  setvbuf(stdout, NULL, _IOLBF, 0); /* one line per event, even into a pipe */
  default_socket(path, sizeof path);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-s") == 0 && i + 1 < argc)
      snprintf(path, sizeof path, "%s", argv[++i]);
    else if (strcmp(argv[i], "--stream") == 0 && i + 1 < argc)
      stream = argv[++i];
    else if (strcmp(argv[i], "--until-end") == 0)
      until_end = 1;
    else {
      int help = strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
      fprintf(help ? stdout : stderr,
              "usage: consumer [-s SOCKET] [--stream NAME] [--until-end]\n");
      return help ? 0 : 2;
    }
  }

  /* 1. Connect. */
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    fprintf(stderr, "consumer: %s: %s\n", path, strerror(errno));
    return 1;
  }

  /* 2. HELLO, answered by WELCOME (or a fatal ERROR). */
  uint8_t out[512];
  aural_msg_hello hello = {.versions = 1u << AURAL_PROTO_VERSION};
  snprintf(hello.client, sizeof hello.client, "consumer example");
  size_t n = aural_proto_encode_hello(out, sizeof out, &hello);
  if (write_all(fd, out, n) < 0) return 1;

  uint8_t *buf = NULL;
  size_t cap = 0;
  uint32_t max_payload = 1u << 20; /* until WELCOME says otherwise */
  aural_msg_header h;
  aural_msg_welcome w;
  char why[256];
  if (read_message(fd, max_payload, &h, &buf, &cap) < 0 ||
      h.type != AURAL_MSG_WELCOME ||
      aural_proto_decode_welcome(buf, h.payload_bytes, &w, why,
                                 sizeof why) < 0) {
    fprintf(stderr, "consumer: no WELCOME from %s\n", path);
    return 1;
  }
  if (w.max_message_bytes > 0) max_payload = w.max_message_bytes;
  printf("connected to %s: d_model %u, %u frames per chunk\n", path,
         w.model.d_model, w.model.chunk_frames);

  /* 3. SUBSCRIBE to embeddings as float32. */
  aural_msg_subscribe sub = {.all = stream == NULL,
                             .outputs = AURAL_OUT_EMBEDDINGS,
                             .dtype = AURAL_DTYPE_F32};
  if (stream != NULL) snprintf(sub.stream, sizeof sub.stream, "%s", stream);
  n = aural_proto_encode_subscribe(out, sizeof out, &sub);
  if (n == 0 || write_all(fd, out, n) < 0) return 1;

  /* 4. Events until the server closes (or the first stream ends). */
  int status = 0;
  while (read_message(fd, max_payload, &h, &buf, &cap) == 0) {
    const uint8_t *p = buf;
    size_t pn = h.payload_bytes;
    aural_msg_stream_started started;
    aural_msg_gap gap;
    aural_msg_stream_ended ended;
    aural_msg_error error;
    if (h.type == AURAL_MSG_CHUNK) {
      print_chunk(h.stream_id, p, pn);
    } else if (h.type == AURAL_MSG_STREAM_STARTED &&
               aural_proto_decode_stream_started(p, pn, &started, why,
                                                 sizeof why) == 0) {
      int slot = (int)(h.stream_id % MAX_NAMES);
      names[slot].id = h.stream_id;
      snprintf(names[slot].name, sizeof names[slot].name, "%s", started.name);
      printf("%s  started\n", names[slot].name);
    } else if (h.type == AURAL_MSG_GAP &&
               aural_proto_decode_gap(p, pn, &gap, why, sizeof why) == 0) {
      printf("%s  lost chunks %llu..%llu\n", stream_name(h.stream_id),
             (unsigned long long)gap.first_chunk,
             (unsigned long long)(gap.first_chunk + gap.n_chunks - 1));
    } else if (h.type == AURAL_MSG_STREAM_ENDED &&
               aural_proto_decode_stream_ended(p, pn, &ended, why,
                                               sizeof why) == 0) {
      printf("%s  ended (%s): %llu frames, %llu chunks\n",
             stream_name(h.stream_id), aural_end_reason_name(ended.reason),
             (unsigned long long)ended.frames,
             (unsigned long long)ended.chunks);
      if (until_end) break;
    } else if (h.type == AURAL_MSG_ERROR &&
               aural_proto_decode_error(p, pn, &error, why, sizeof why) ==
                   0) {
      fprintf(stderr, "consumer: server error %s: %s\n", error.name,
              error.message);
      if (error.fatal) {
        status = 1;
        break;
      }
    } /* SUBSCRIBED and anything newer: nothing to do here */
  }
  free(buf);
  close(fd);
  return status;
}
