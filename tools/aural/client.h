/*
 * client.h — a small blocking client of aurald over its Unix socket, for
 * the aural subcommands that talk to the daemon (sub, send, stats).
 *
 *   aural_client *c;
 *   char err[256];
 *   if (client_connect(NULL, "aural sub", &c, err, sizeof err) < 0) {
 *     fprintf(stderr, "%s\n", err); ...
 *   }
 *   client_send_raw(c, AURAL_MSG_STATS, 0, NULL, 0, err, sizeof err);
 *   client_msg m;
 *   while (client_read(c, &m, err, sizeof err) == 0) { ... m.u.stats ... }
 *   client_close(c);
 *
 * Messages are framed, encoded and decoded with proto/: every JSON message
 * from the server arrives decoded into its typed struct. Nothing here is
 * thread-safe; a client belongs to one thread.
 */
#ifndef AURAL_TOOLS_CLIENT_H
#define AURAL_TOOLS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <aural/proto.h>

/* What WELCOME says about the model. */
typedef struct client_model {
  uint32_t sample_rate;  /* Hz */
  uint32_t n_mels;
  double frame_ms;        /* frame shift */
  double frame_length_ms; /* analysis window; 0 when not given */
  uint32_t d_model;      /* embedding width */
  uint32_t n_layers;
  uint32_t window;       /* attention window, frames */
  uint32_t chunk_frames; /* frames per chunk */
  uint32_t vocab_size;   /* 0 without a CTC head */
  bool words;            /* the server can send words */
  char precision[16];    /* "bf16" when the server says so; "": f32 */
  char **vocab;          /* (vocab_size) token strings, index 0 = blank */
} client_model;

typedef struct aural_client {
  int fd;
  char path[128];               /* the socket connected to */
  uint32_t version;             /* negotiated protocol version */
  char server[128];             /* e.g. "aurald 0.1.0" */
  uint32_t max_request_bytes;   /* largest payload we may send */
  uint32_t max_message_bytes;   /* largest payload the server sends */
  client_model model;
  uint8_t *buf;                 /* the last message read */
  size_t cap;
  bool closed;                  /* the server closed the connection */
  int timeout_ms;               /* how long a read waits for the server's
                                   next bytes before it fails; -1: for
                                   ever (set it so for open-ended waits) */
} aural_client;

/* The reads of a new client wait this long: aurald answers a request
 * from its event loop, which the encoder never holds up, so silence this
 * long means a stopped or stuck server, not a busy one. */
#define CLIENT_TIMEOUT_MS 5000

/* One message from the server. payload (and the lists of u, which point
 * into it) belong to the client and stay valid until the next
 * client_read(). */
typedef struct client_msg {
  aural_msg_header h;
  const uint8_t *payload; /* h.payload_bytes bytes */
  union {                 /* the payload decoded, by h.type */
    aural_msg_welcome welcome;
    aural_msg_error error;
    aural_msg_streams streams;
    aural_msg_subscribed subscribed;
    uint32_t unsubscribed; /* the subscription id */
    aural_msg_stream_started started;
    aural_msg_stream_ended ended;
    aural_msg_gap gap;
    aural_msg_audio_opened opened;
    aural_msg_audio_closed closed;
    aural_msg_stats_reply stats;
    aural_msg_words words;
  } u;
} client_msg;

/* The socket path used without -s: $AURAL_SOCKET if set and non-empty, else
 * $XDG_RUNTIME_DIR/aural.sock when XDG_RUNTIME_DIR is set, else
 * /run/aural/aural.sock for root, else /tmp/aural-UID/aural.sock (the rule
 * aurald follows); when that socket does not exist but the system
 * service's /run/aural/aural.sock does, that one. Writes into buf and
 * returns it. */
const char *client_default_socket(char *buf, size_t len);

/* Connects to path (NULL: the default) and does the HELLO/WELCOME
 * handshake, introducing itself as name; the connect (to a server whose
 * listen queue is full) and reads wait CLIENT_TIMEOUT_MS (c->timeout_ms),
 * the handshake's too, and a signal ends the wait. The default path's
 * directory (/tmp/aural-UID, /run/aural) must be owned by us or root and
 * writable by nobody else, and the server must run as us, root, user aural (the
 * service) or the user in $AURAL_SERVER_USER; this is checked before
 * anything is sent. On failure returns -1 with a readable message in err
 * (no socket, permission, path too long, an untrusted directory or
 * server, an ERROR from the server, ...). */
int client_connect(const char *path, const char *name, aural_client **out,
                   char *err, size_t err_len);

/* Closes the connection and frees everything. NULL-safe. */
void client_close(aural_client *c);

/* Sends n bytes of already-encoded messages. Returns 0 or -1 (err set). */
int client_send(aural_client *c, const uint8_t *msg, size_t n, char *err,
                size_t err_len);

/* Sends one message of the given type with the payload bytes as they are. */
int client_send_raw(aural_client *c, uint8_t type, uint32_t stream_id,
                    const void *payload, size_t n, char *err, size_t err_len);

/* Reads one whole message and decodes its payload into m->u (a payload
 * that does not decode is an error). Returns 0; 1 when the server closed the
 * connection cleanly between messages; -1 on a read error, a truncated or
 * malformed message (err set; c->closed tells whether the server closed the
 * connection in the middle of a message), or when nothing came for
 * c->timeout_ms; -EINTR when a signal interrupted
 * the wait (the connection is then out of step and must be closed). */
int client_read(aural_client *c, client_msg *m, char *err, size_t err_len);

/* For an ERROR message: writes "NAME: message" into out, and returns the
 * code (AURAL_PROTO_E*, from the wire value) with *fatal as the server
 * said. */
int client_error(const client_msg *m, char *out, size_t len, bool *fatal);

/* Microseconds since the Unix epoch (CLOCK_REALTIME), as the server's
 * time fields. */
int64_t client_realtime_us(void);

#endif
