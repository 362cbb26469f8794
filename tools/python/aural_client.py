"""A small client of aurald, the aural streaming speech-frame encoder daemon.

Written from proto/PROTOCOL.md (protocol version 1) with the standard
library and numpy only. One Client is one Unix-socket connection; it is
blocking and not thread-safe.

Example::

    from aural_client import Client, Chunk, StreamEnded, Words

    with Client() as c:                      # connects, HELLO/WELCOME
        print(c.model["d_model"], c.model["chunk_frames"])
        c.subscribe(stream="mic", outputs=("embeddings", "text"))
        for ev in c.events():
            if isinstance(ev, Chunk):
                print(ev.name, ev.seq, ev.emb.shape, ev.text)
            elif isinstance(ev, Words):          # outputs=("words",)
                print([w.word for seg in ev.segments for w in seg])
            elif isinstance(ev, StreamEnded):
                break

Pushing audio::

    with Client("/tmp/x/aural.sock") as c:
        sid = c.open_audio("call-17", rate=8000, channels=1, fmt="s16")
        c.send_audio(sid, samples_int16)
        totals = c.close_audio(sid)          # {"frames": ..., "chunks": ...}

A cluster (docs/CLUSTER.md: aurald nodes sharing streams through Redis;
needs the redis module, imported only here)::

    from aural_client import cluster_send, cluster_subscribe, Chunk

    cluster_send("redis://10.0.0.5", "call-17", pcm_bytes, rate=8000,
                 channels=1, fmt="s16")      # password: $AURAL_REDIS_PASSWORD
    for ev in cluster_subscribe("redis://10.0.0.5", "call-17", start=0):
        if isinstance(ev, Chunk):            # else a Gap: chunks trimmed
            print(ev.seq, ev.emb.shape, ev.text, ev.words)
"""

import collections
import json
import math
import os
import pwd
import re
import select
import socket
import stat
import struct
import time
from dataclasses import dataclass
from typing import Any, Deque, Dict, Iterator, List, Optional, Sequence

import numpy as np

__all__ = [
    "Client", "Chunk", "StreamStarted", "StreamEnded", "Gap", "Error",
    "ServerError", "ProtocolError", "default_socket_path",
    "check_default_dir", "check_server", "decode_chunk", "ClusterError",
    "cluster_send", "cluster_subscribe", "parse_cluster_url",
    "cluster_valid_name", "cluster_key",
]

PROTOCOL_VERSION = 1
MAGIC = b"AURL"
HEADER = struct.Struct("<4sBBHII")           # magic version type flags stream bytes
CHUNK_FIXED = struct.Struct("<QQIIqqqqIIHBBI")  # PROTOCOL.md section 5, 72 bytes
PING_MAX = 256

# Message types (PROTOCOL.md section 4).
HELLO, WELCOME, ERROR, PING, PONG = 0x01, 0x02, 0x03, 0x04, 0x05
LIST_STREAMS, STREAMS, SUBSCRIBE, SUBSCRIBED = 0x06, 0x07, 0x08, 0x09
UNSUBSCRIBE, UNSUBSCRIBED, STREAM_STARTED, STREAM_ENDED = 0x0A, 0x0B, 0x0C, 0x0D
CHUNK, GAP, AUDIO_OPEN, AUDIO_OPENED = 0x0E, 0x0F, 0x10, 0x11
AUDIO_DATA, AUDIO_CLOSE, AUDIO_CLOSED, STATS, STATS_REPLY = 0x12, 0x13, 0x14, 0x15, 0x16
WORDS = 0x17

TYPE_NAMES = {
    v: k for k, v in dict(
        HELLO=HELLO, WELCOME=WELCOME, ERROR=ERROR, PING=PING, PONG=PONG,
        LIST_STREAMS=LIST_STREAMS, STREAMS=STREAMS, SUBSCRIBE=SUBSCRIBE,
        SUBSCRIBED=SUBSCRIBED, UNSUBSCRIBE=UNSUBSCRIBE,
        UNSUBSCRIBED=UNSUBSCRIBED, STREAM_STARTED=STREAM_STARTED,
        STREAM_ENDED=STREAM_ENDED, CHUNK=CHUNK, GAP=GAP,
        AUDIO_OPEN=AUDIO_OPEN, AUDIO_OPENED=AUDIO_OPENED,
        AUDIO_DATA=AUDIO_DATA, AUDIO_CLOSE=AUDIO_CLOSE,
        AUDIO_CLOSED=AUDIO_CLOSED, STATS=STATS,
        STATS_REPLY=STATS_REPLY, WORDS=WORDS).items()
}
SERVER_TYPES = {WELCOME, ERROR, PONG, STREAMS, SUBSCRIBED, UNSUBSCRIBED,
                STREAM_STARTED, STREAM_ENDED, CHUNK, GAP, AUDIO_OPENED,
                AUDIO_CLOSED, STATS_REPLY, WORDS}
EVENT_TYPES = {STREAM_STARTED, STREAM_ENDED, CHUNK, GAP, WORDS}

# Error codes (PROTOCOL.md section 6).
ERROR_NAMES = {
    1: "FRAMING", 2: "VERSION", 3: "TOO_LARGE", 4: "UNKNOWN_TYPE",
    5: "BAD_PAYLOAD", 6: "STATE", 7: "NO_STREAM", 8: "NAME_IN_USE",
    9: "LIMIT", 10: "NO_HEAD", 11: "AUDIO", 12: "SLOW_CONSUMER",
    13: "SHUTDOWN", 14: "INTERNAL", 15: "NO_SUBSCRIPTION", 16: "PERMISSION",
    17: "NO_WORDS",
}
# Errors about AUDIO_DATA, which has no reply of its own (section 4.13).
AUDIO_DATA_ERRORS = {"NO_STREAM", "BAD_PAYLOAD", "AUDIO"}

OUTPUT_BITS = {"embeddings": 1, "logits": 2, "text": 4, "words": 8}
SAMPLE_DTYPES = {"s16": np.dtype("<i2"), "f32": np.dtype("<f4")}

# Bound on the WELCOME payload, before the server has announced its own.
WELCOME_MAX_BYTES = 64 << 20


def default_socket_path() -> str:
    """The socket used when none is given, by the rule aurald follows:
    $AURAL_SOCKET if set and non-empty, else $XDG_RUNTIME_DIR/aural.sock,
    else /run/aural/aural.sock for root, else /tmp/aural-UID/aural.sock;
    when that does not exist but the system service's
    /run/aural/aural.sock does, that one."""
    env = os.environ.get("AURAL_SOCKET")
    if env:
        return env
    # As aural_proto_default_socket (proto/unix.c): an empty variable
    # counts as unset, and the user is the effective one.
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        path = os.path.join(xdg, "aural.sock")
    elif os.geteuid() == 0:
        path = "/run/aural/aural.sock"
    else:
        path = "/tmp/aural-%d/aural.sock" % os.geteuid()
    if not os.path.exists(path) and os.path.exists("/run/aural/aural.sock"):
        return "/run/aural/aural.sock"
    return path


# The user aurald.service runs as (User= in systemd/aurald.service.in).
SERVICE_USER = "aural"


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "no such user"


def _uid_of(name: str) -> Optional[int]:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return int(name) if name.isdigit() else None


def check_default_dir(path: str) -> None:
    """Raises ConnectionError when path is in /tmp/aural-UID or /run/aural
    and that directory is a symbolic link, not a directory, owned by
    someone other than us or root, or writable by group or others: another
    local user could have made it to serve a socket of their own there
    (aurald refuses such a directory too). A missing one is left to
    connect() to report."""
    d = os.path.dirname(path)
    if d not in ("/tmp/aural-%d" % os.getuid(), "/run/aural"):
        return
    try:
        st = os.lstat(d)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        bad = "is a symbolic link"
    elif not stat.S_ISDIR(st.st_mode):
        bad = "is not a directory"
    elif st.st_uid not in (os.getuid(), 0):
        bad = "belongs to another user"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        bad = "is writable by group or others"
    else:
        return
    raise ConnectionError(
        "%s %s (owned by uid %d, %s, mode %04o): another user could have "
        "put a socket there; not connecting (remove it, or give the socket "
        "path)" % (d, bad, st.st_uid, _user_name(st.st_uid),
                   stat.S_IMODE(st.st_mode)))


def check_server(sock: socket.socket, path: str) -> None:
    """Raises ConnectionError unless the process serving the connected
    socket runs as us, root, the service's user (aural) or the user named
    in $AURAL_SERVER_USER; anyone else could have put the socket there to
    receive our audio. Called before anything is sent."""
    cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                           struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", cred)
    trusted = {os.getuid(), os.geteuid(), 0, _uid_of(SERVICE_USER)}
    extra = os.environ.get("AURAL_SERVER_USER")
    if extra:
        trusted.add(_uid_of(extra))
    if uid in trusted:
        return
    name = _user_name(uid)
    raise ConnectionError(
        "%s: served by uid %d (%s, pid %d), not by you (uid %d), root or "
        "user %s; not talking to it (AURAL_SERVER_USER=%s trusts that user)"
        % (path, uid, name, pid, os.getuid(), SERVICE_USER, name))


class ProtocolError(Exception):
    """The server broke the protocol, or the connection broke."""


class ServerError(Exception):
    """An ERROR message answering a request.

    Attributes: code (int), name (e.g. "NO_STREAM"), message, fatal,
    stream_id."""

    def __init__(self, code: int, name: str, message: str, fatal: bool,
                 stream_id: int = 0):
        super().__init__("%s (%d): %s" % (name, code, message))
        self.code, self.name, self.message = code, name, message
        self.fatal, self.stream_id = fatal, stream_id


@dataclass
class StreamStarted:
    """A stream this client receives has started (or was live when the
    subscription began); next_chunk is the seq of its first chunk here."""
    stream_id: int
    name: str
    source: str
    sample_rate: int
    channels: int
    start_us: int
    next_chunk: int


@dataclass
class StreamEnded:
    """A stream ended. reason: eof, closed, disconnected, device_lost,
    error or shutdown; frames and chunks are the stream's totals."""
    stream_id: int
    name: str
    reason: str
    message: str
    frames: int
    chunks: int


@dataclass
class Gap:
    """Chunks first_chunk .. first_chunk + n_chunks - 1 of a stream were
    lost because this client fell behind."""
    stream_id: int
    name: str
    first_chunk: int
    n_chunks: int
    reason: str


@dataclass
class Error:
    """An ERROR that arrived outside a request: a rejected AUDIO_DATA, or a
    fatal error (SLOW_CONSUMER, SHUTDOWN) before the server closes."""
    stream_id: int
    code: int
    name: str
    message: str
    fatal: bool


@dataclass
class Chunk:
    """One chunk of a stream: frames first_frame .. first_frame + n_frames - 1.
    The FINAL chunk of a stream whose frames filled whole chunks is empty
    (n_frames 0, arrays of 0 rows).

    emb is a float32 array [n_frames, d_model] and logits [n_frames,
    vocab_size] (converted from f16 when that was the wire dtype), or None
    when not subscribed; text is the chunk's tokens separated by spaces, or
    None. Times are microseconds since the Unix epoch (server clock);
    received_us is this client's clock when the chunk was read. words:
    the chunk's Words, from cluster_subscribe() only (aurald sends them
    as events of their own)."""
    stream_id: int
    name: str
    seq: int
    first_frame: int
    n_frames: int
    final: bool
    start_us: int
    capture_us: int
    ready_us: int
    emitted_us: int
    d_model: int
    vocab_size: int
    dtype: str
    emb: Optional[np.ndarray] = None
    logits: Optional[np.ndarray] = None
    text: Optional[str] = None
    received_us: int = 0
    words: Optional["Words"] = None

    @property
    def latency_ms(self) -> float:
        """End-to-end latency: received here minus audio ready at the
        server (meaningful on one machine)."""
        return (self.received_us - self.ready_us) / 1e3


@dataclass
class Word:
    """One recognized word: frames [start, end) of its stream (frame t
    starts t * frame_ms after the stream's start), confidence in [0, 1]."""
    word: str
    start: int
    end: int
    confidence: float


@dataclass
class Words:
    """The words of chunk seq of a stream (PROTOCOL.md 4.16): segments, the
    final segments that ended in it (lists of Word, never revised), and
    partial, the open segment so far (replaced by the next Words)."""
    stream_id: int
    name: str
    seq: int
    final: bool
    segments: List[List[Word]]
    partial: List[Word]


def _words_of(items: Any) -> List[Word]:
    if not isinstance(items, list):
        raise ProtocolError("WORDS: a list of words expected")
    out = []
    for w in items:
        if not isinstance(w, dict):
            raise ProtocolError("WORDS: a word must be an object")
        try:
            word = Word(str(w["word"]), _int(w, "start", "WORDS", _MISSING),
                        _int(w, "end", "WORDS", _MISSING),
                        float(w["confidence"]))
        except (KeyError, TypeError, ValueError, ProtocolError) as e:
            raise ProtocolError("WORDS: malformed word %r" % (w,)) from e
        if not word.word or word.end < word.start or not (
                0.0 <= word.confidence <= 1.0):
            raise ProtocolError("WORDS: malformed word %r" % (w,))
        out.append(word)
    return out


_MISSING = object()


def _int(obj: Dict[str, Any], key: str, what: str, default: Any = 0,
         whole: bool = True) -> int:
    """Member key of a server message's object as an int: a JSON number
    with no fractional part, or with whole False any finite number,
    truncated (absent: default, or ProtocolError when there is none).
    Anything else is ProtocolError, not the ValueError, TypeError or
    OverflowError that int() would raise on a server's bad value."""
    v = obj.get(key, default)
    if v is _MISSING:
        raise ProtocolError("%s: \"%s\" is missing" % (what, key))
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (
            isinstance(v, float) and not (math.isfinite(v) and (
                v.is_integer() or not whole))):
        raise ProtocolError("%s: \"%s\" must be an integer, not %.40r"
                            % (what, key, v))
    return int(v)


def _list(obj: Dict[str, Any], key: str, what: str) -> List[Any]:
    """Member key of a server message's object, which must be an array
    (absent: empty)."""
    v = obj.get(key, [])
    if not isinstance(v, list):
        raise ProtocolError("%s: \"%s\" must be an array" % (what, key))
    return v


def _reject_constant(name: str) -> Any:
    raise ValueError("%s is not JSON" % name)


def _now_us() -> int:
    return time.time_ns() // 1000


def decode_chunk(payload: bytes, stream_id: int = 0, name: str = "") -> Chunk:
    """A CHUNK payload (PROTOCOL.md section 5) as a Chunk; ProtocolError
    when its sizes do not add up."""
    if len(payload) < CHUNK_FIXED.size:
        raise ProtocolError("CHUNK of %d bytes is shorter than its fixed "
                            "part" % len(payload))
    (seq, first_frame, n_frames, flags, start_us, capture_us, ready_us,
     emitted_us, d_model, vocab_size, outputs, dtype, _res,
     text_bytes) = CHUNK_FIXED.unpack_from(payload)
    if dtype not in (0, 1):
        raise ProtocolError("CHUNK with unknown dtype %d" % dtype)
    np_dtype = np.dtype("<f4") if dtype == 0 else np.dtype("<f2")
    size = np_dtype.itemsize
    off = CHUNK_FIXED.size
    need = off
    if outputs & 1:
        need += n_frames * d_model * size
    if outputs & 2:
        need += n_frames * vocab_size * size
    if outputs & 4:
        need += text_bytes
    elif text_bytes:
        raise ProtocolError("CHUNK has text_bytes but no text section")
    if need != len(payload):
        raise ProtocolError("CHUNK of %d bytes where its header says %d"
                            % (len(payload), need))
    ck = Chunk(stream_id=stream_id, name=name,
               seq=seq, first_frame=first_frame, n_frames=n_frames,
               final=bool(flags & 1), start_us=start_us,
               capture_us=capture_us, ready_us=ready_us,
               emitted_us=emitted_us, d_model=d_model,
               vocab_size=vocab_size, dtype="f32" if dtype == 0 else "f16",
               received_us=_now_us())
    if outputs & 1:
        n = n_frames * d_model
        ck.emb = np.frombuffer(payload, np_dtype, n, off).astype(
            np.float32).reshape(n_frames, d_model)
        off += n * size
    if outputs & 2:
        n = n_frames * vocab_size
        ck.logits = np.frombuffer(payload, np_dtype, n, off).astype(
            np.float32).reshape(n_frames, vocab_size)
        off += n * size
    if outputs & 4:
        ck.text = payload[off:off + text_bytes].decode("utf-8", "replace")
    return ck


def _pcm_bytes(samples: Any, fmt: str, channels: int) -> bytes:
    """Samples ([n] or [n, channels]) as interleaved little-endian fmt
    (s16: integers, or floats in +-1 scaled by 32768; f32: floats)."""
    x = np.asarray(samples)
    if fmt == "s16" and x.dtype.kind == "f":
        x = np.clip(np.rint(x * 32768.0), -32768, 32767)
    x = np.ascontiguousarray(x, dtype=SAMPLE_DTYPES[fmt])
    if x.ndim == 1 and channels == 1:
        x = x.reshape(-1, 1)
    if x.ndim != 2 or x.shape[1] != channels:
        raise ValueError("samples must be [n, %d]" % channels)
    return x.tobytes()


def _add_vocabulary(req: Dict[str, Any], vocabulary: Optional[Sequence[str]],
                    boost: Optional[float]) -> None:
    """Adds a request's custom words (SUBSCRIBE, AUDIO_OPEN)."""
    if vocabulary is None:
        if boost is not None:
            raise ValueError("boost needs a vocabulary")
        return
    if isinstance(vocabulary, str):
        raise ValueError("vocabulary is a sequence of words, not one string")
    req["vocabulary"] = list(vocabulary)
    if boost is not None:
        req["boost"] = float(boost)


class Client:
    """A connection to aurald. Connecting sends HELLO and reads WELCOME.

    path: the socket (default: default_socket_path(), whose directory is
    checked by check_default_dir()). timeout: seconds a single blocking read
    or write may take, or None to wait forever. The server's credentials
    are checked (check_server()) before HELLO is sent; ConnectionError
    says why a directory or a server is not trusted.

    After connecting: welcome (the WELCOME object), model (its "model"
    object: sample_rate, d_model, vocab_size, vocab, chunk_frames, ...),
    version, server, max_request_bytes, max_message_bytes.
    """

    def __init__(self, path: Optional[str] = None, client_name: str =
                 "aural_client.py 1", timeout: Optional[float] = None,
                 headers: Optional[Dict[str, str]] = None):
        if path and path.startswith(("ws://", "wss://")):
            self._connect_ws(path, client_name, timeout, headers)
            return
        if path:
            self.path = path
        else:
            self.path = default_socket_path()
            if not os.environ.get("AURAL_SOCKET"):
                check_default_dir(self.path)
        self._events: Deque[Any] = collections.deque()
        self._names: Dict[int, str] = {}       # stream id -> name
        self._audio: Dict[int, str] = {}       # our open streams -> format
        self._audio_channels: Dict[int, int] = {}
        self._closed_replies: Dict[int, Dict[str, Any]] = {}
        self.max_message_bytes = WELCOME_MAX_BYTES
        self.max_request_bytes = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(self.path)
        except FileNotFoundError:
            self._sock.close()
            raise ConnectionError(
                "aurald not running? no socket at %s" % self.path) from None
        except PermissionError:
            self._sock.close()
            raise ConnectionError("%s: permission denied" % self.path) from None
        except ConnectionRefusedError:
            self._sock.close()
            raise ConnectionError(
                "aurald not running? %s exists but nothing listens on it"
                % self.path) from None
        try:
            check_server(self._sock, self.path)
            self.hello(client_name)
        except BaseException:
            self._sock.close()
            raise

    def _connect_ws(self, url: str, client_name: str,
                    timeout: Optional[float],
                    headers: Optional[Dict[str, str]]) -> None:
        """The same client over aurald's /ws (aurald --http): url is
        ws://HOST:PORT/ws or wss://...; headers such as Authorization go
        with the upgrade."""
        from aural_ws import MessageSocket, WebSocket
        self.path = url
        self._events = collections.deque()
        self._names = {}
        self._audio = {}
        self._audio_channels = {}
        self._closed_replies = {}
        self.max_message_bytes = WELCOME_MAX_BYTES
        self.max_request_bytes = 0
        self._sock = MessageSocket(WebSocket(url, headers, timeout),
                                   ProtocolError, self.max_message_bytes)
        try:
            self.hello(client_name)
        except BaseException:
            self._sock.close()
            raise

    # --- context manager ------------------------------------------------

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection. Streams this client opened and did not
        close end with reason "disconnected"."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # --- framing ---------------------------------------------------------

    def _send(self, mtype: int, payload: bytes = b"", stream_id: int = 0) -> None:
        if self.max_request_bytes and len(payload) > self.max_request_bytes:
            raise ValueError("%s payload of %d bytes is over the server's "
                             "limit of %d" % (TYPE_NAMES[mtype], len(payload),
                                              self.max_request_bytes))
        head = HEADER.pack(MAGIC, PROTOCOL_VERSION, mtype, 0, stream_id,
                           len(payload))
        self._sock.sendall(head + payload)

    def _send_json(self, mtype: int, obj: Dict[str, Any], stream_id: int = 0) -> None:
        self._send(mtype, json.dumps(obj, separators=(",", ":")).encode(),
                   stream_id)

    def _recv_exact(self, n: int, what: str) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            part = self._sock.recv(min(n - len(buf), 1 << 20))
            if not part:
                if not buf and what == "":
                    raise EOFError("aurald closed the connection")
                raise ProtocolError("aurald closed the connection in the "
                                    "middle of %s (%d of %d bytes)"
                                    % (what or "a header", len(buf), n))
            buf += part
        return bytes(buf)

    def _read_message(self):
        """Reads one whole message: (type, stream_id, payload bytes).
        Raises EOFError when the server closed between messages."""
        head = self._recv_exact(HEADER.size, "")
        magic, version, mtype, _flags, stream_id, n = HEADER.unpack(head)
        if magic != MAGIC:
            raise ProtocolError("bad magic %r from aurald" % magic)
        if version != PROTOCOL_VERSION:
            raise ProtocolError("aurald sent protocol version %d" % version)
        if mtype not in SERVER_TYPES:
            raise ProtocolError("aurald sent message type 0x%02x" % mtype)
        if n > self.max_message_bytes:
            raise ProtocolError("aurald sent %s of %d bytes, over its limit "
                                "of %d" % (TYPE_NAMES[mtype], n,
                                           self.max_message_bytes))
        payload = self._recv_exact(n, "a %s message" % TYPE_NAMES[mtype])
        return mtype, stream_id, payload

    @staticmethod
    def _json(mtype: int, payload: bytes) -> Dict[str, Any]:
        # Strict JSON (RFC 8259): NaN and Infinity are refused, and nesting
        # deep enough to exhaust the recursion limit is a ProtocolError.
        try:
            obj = json.loads(payload.decode("utf-8"),
                             parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ProtocolError("%s payload is not JSON: %s"
                                % (TYPE_NAMES[mtype], e)) from None
        if not isinstance(obj, dict):
            raise ProtocolError("%s payload is not a JSON object"
                                % TYPE_NAMES[mtype])
        return obj

    # --- decoding ---------------------------------------------------------

    def _decode_chunk(self, stream_id: int, payload: bytes) -> Chunk:
        return decode_chunk(payload, stream_id, self._names.get(stream_id, ""))

    def _event(self, mtype: int, stream_id: int, payload: bytes):
        """The typed event of an event message."""
        if mtype == CHUNK:
            return self._decode_chunk(stream_id, payload)
        obj = self._json(mtype, payload)
        if mtype == STREAM_STARTED:
            name = str(obj.get("name", ""))
            self._names[stream_id] = name
            what = "STREAM_STARTED"
            return StreamStarted(stream_id, name, str(obj.get("source", "")),
                                 _int(obj, "sample_rate", what, whole=False),
                                 _int(obj, "channels", what),
                                 _int(obj, "start_us", what),
                                 _int(obj, "next_chunk", what))
        if mtype == STREAM_ENDED:  # the stream's last message
            known = self._names.pop(stream_id, "")
            return StreamEnded(stream_id, str(obj.get("name", known)),
                               str(obj.get("reason", "")),
                               str(obj.get("message", "")),
                               _int(obj, "frames", "STREAM_ENDED"),
                               _int(obj, "chunks", "STREAM_ENDED"))
        if mtype == WORDS:
            segments = obj.get("segments")
            if not isinstance(segments, list):
                raise ProtocolError("WORDS: \"segments\" must be a list")
            return Words(stream_id, self._names.get(stream_id, ""),
                         _int(obj, "seq", "WORDS"),
                         bool(obj.get("final", False)),
                         [_words_of(seg) for seg in segments],
                         _words_of(obj.get("partial")))
        return Gap(stream_id, self._names.get(stream_id, ""),
                   _int(obj, "first_chunk", "GAP"), _int(obj, "n_chunks", "GAP"),
                   str(obj.get("reason", "")))

    def _error(self, stream_id: int, payload: bytes) -> Error:
        obj = self._json(ERROR, payload)
        code = _int(obj, "code", "ERROR")
        return Error(stream_id, code,
                     str(obj.get("name", ERROR_NAMES.get(code, "ERROR"))),
                     str(obj.get("message", "")), bool(obj.get("fatal", True)))

    def _handle_async(self, mtype: int, stream_id: int, payload: bytes) -> bool:
        """Buffers an event, or an AUDIO_CLOSED that arrived early. Returns
        True when the message was one of those."""
        if mtype in EVENT_TYPES:
            self._events.append(self._event(mtype, stream_id, payload))
            return True
        if mtype == AUDIO_CLOSED:
            self._closed_replies[stream_id] = self._json(mtype, payload)
            return True
        return False

    def _request(self, mtype: int, payload: bytes, reply: int,
                 stream_id: int = 0) -> Any:
        """Sends a request and reads until its reply, buffering events.
        Returns (stream_id, payload) of the reply; an ERROR raises
        ServerError."""
        self._send(mtype, payload, stream_id)
        while True:
            try:
                rtype, rsid, rpay = self._read_message()
            except EOFError:
                raise ProtocolError("aurald closed the connection before "
                                    "answering %s" % TYPE_NAMES[mtype]) from None
            if rtype == reply:
                return rsid, rpay
            if self._handle_async(rtype, rsid, rpay):
                continue
            if rtype == ERROR:
                err = self._error(rsid, rpay)
                # An error about AUDIO_DATA has no reply slot: it names one of
                # our streams. Keep it as an event unless this request was
                # about that very stream.
                if (not err.fatal and rsid in self._audio and rsid != stream_id
                        and err.name in AUDIO_DATA_ERRORS):
                    self._events.append(err)
                    continue
                raise ServerError(err.code, err.name, err.message, err.fatal,
                                  rsid)
            # Anything else (a stray reply) is ignored.

    # --- requests ---------------------------------------------------------

    def hello(self, client_name: str = "aural_client.py 1") -> Dict[str, Any]:
        """Sends HELLO and reads WELCOME (done on connect). Returns the
        WELCOME object."""
        # At most 64 bytes of UTF-8 (PROTOCOL.md 4.1), cut between
        # characters: a longer name makes the server refuse the HELLO.
        name = client_name.encode("utf-8")[:64].decode("utf-8", "ignore")
        payload = json.dumps({"versions": [PROTOCOL_VERSION],
                              "client": name}).encode()
        _, pay = self._request(HELLO, payload, WELCOME)
        w = self._json(WELCOME, pay)
        if w.get("version") != PROTOCOL_VERSION:
            raise ProtocolError("WELCOME chose version %r" % w.get("version"))
        self.welcome = w
        self.version = w["version"]
        self.server = str(w.get("server", ""))
        self.max_request_bytes = _int(w, "max_request_bytes", "WELCOME",
                                      _MISSING)
        self.max_message_bytes = _int(w, "max_message_bytes", "WELCOME",
                                      _MISSING)
        if hasattr(self._sock, "max_message_bytes"):  # over a WebSocket
            self._sock.max_message_bytes = self.max_message_bytes
        model = w.get("model", {})
        if not isinstance(model, dict):
            raise ProtocolError("WELCOME: \"model\" must be an object")
        self.model = dict(model)
        vocab = _list(self.model, "vocab", "WELCOME model")
        if len(vocab) != _int(self.model, "vocab_size", "WELCOME model"):
            raise ProtocolError("WELCOME vocab has %d entries, vocab_size %r"
                                % (len(vocab), self.model.get("vocab_size")))
        return w

    def subscribe(self, stream: Optional[str] = None, all: bool = False,
                  outputs: Sequence[str] = ("embeddings",),
                  dtype: str = "f32",
                  vocabulary: Optional[Sequence[str]] = None,
                  boost: Optional[float] = None) -> int:
        """Subscribes to the stream of that name (it may start later) or,
        with all=True, to every stream. outputs: among "embeddings",
        "logits", "text", "words" (Words events after each chunk's Chunk,
        or alone when "words" is the only output; the server must say
        model["words"] in its WELCOME, else ServerError NO_WORDS); dtype
        "f32" or "f16". vocabulary: custom words (at most 64) the server's
        lexicon lacks, for this subscription's words (a named stream, with
        "words"), favoured by boost (the server's default when None).
        Returns the subscription id.
        """
        if (stream is None) == (not all):
            raise ValueError("give exactly one of stream=NAME or all=True")
        req: Dict[str, Any] = {"outputs": list(outputs), "dtype": dtype}
        if all:
            req["all"] = True
        else:
            req["stream"] = stream
        _add_vocabulary(req, vocabulary, boost)
        _, pay = self._request(SUBSCRIBE, json.dumps(req).encode(), SUBSCRIBED)
        return _int(self._json(SUBSCRIBED, pay), "subscription", "SUBSCRIBED",
                    _MISSING)

    def unsubscribe(self, subscription: int) -> None:
        """Ends a subscription; no event of it follows."""
        self._request(UNSUBSCRIBE,
                      json.dumps({"subscription": subscription}).encode(),
                      UNSUBSCRIBED)

    def list_streams(self) -> List[Dict[str, Any]]:
        """The live streams: dicts with id, name, source, sample_rate,
        channels, start_us, frames, chunks."""
        _, pay = self._request(LIST_STREAMS, b"", STREAMS)
        return list(_list(self._json(STREAMS, pay), "streams", "STREAMS"))

    def stats(self) -> Dict[str, Any]:
        """The server's statistics (PROTOCOL.md section 4.15), every page
        of them: the streams and subscribers of the pages after the first
        are appended to its lists."""
        req: Dict[str, int] = {}
        whole: Optional[Dict[str, Any]] = None
        while True:
            _, pay = self._request(STATS, json.dumps(req).encode()
                                   if req else b"", STATS_REPLY)
            page = self._json(STATS_REPLY, pay)
            nxt_s = _int(page, "next_streams_before", "STATS_REPLY")
            nxt_c = _int(page, "next_clients_before", "STATS_REPLY")
            page.pop("next_streams_before", None)
            page.pop("next_clients_before", None)
            streams = _list(page, "streams", "STATS_REPLY")
            subscribers = _list(page, "subscribers", "STATS_REPLY")
            if whole is None:
                whole = page
                whole["streams"], whole["subscribers"] = streams, subscribers
            else:
                whole["streams"] += streams
                whole["subscribers"] += subscribers
            if not nxt_s and not nxt_c:
                return whole
            # A list already complete is asked past its end (id < 1).
            nxt = {"streams_before": nxt_s or 1, "clients_before": nxt_c or 1}
            # Each page starts below the last (ids only fall): a server
            # that says otherwise would keep us reading for ever.
            if req and (nxt == req or any(
                    nxt[k] >= req[k] and nxt[k] != 1 for k in nxt)):
                raise ProtocolError("STATS_REPLY's next page does not "
                                    "start below the last one")
            req = nxt

    def ping(self, data: bytes = b"") -> float:
        """Sends PING with data (at most 256 bytes), checks the echo and
        returns the round trip in seconds."""
        if len(data) > PING_MAX:
            raise ValueError("PING data is at most %d bytes" % PING_MAX)
        t0 = time.monotonic()
        _, pay = self._request(PING, bytes(data), PONG)
        dt = time.monotonic() - t0
        if pay != bytes(data):
            raise ProtocolError("PONG did not echo the PING data")
        return dt

    def open_audio(self, name: Optional[str] = None, rate: int = 16000,
                   channels: int = 1, fmt: str = "s16",
                   vocabulary: Optional[Sequence[str]] = None,
                   boost: Optional[float] = None) -> int:
        """Opens a stream this client feeds (fmt "s16" or "f32", any rate
        4000..768000, 1..256 channels). name None lets the server choose.
        vocabulary: custom words (at most 64) for the stream's words, as
        every subscriber receives them, favoured by boost. Returns the
        stream id."""
        if fmt not in SAMPLE_DTYPES:
            raise ValueError("fmt is s16 or f32")
        req: Dict[str, Any] = {"sample_rate": int(rate),
                               "channels": int(channels), "format": fmt}
        if name is not None:
            req["name"] = name
        _add_vocabulary(req, vocabulary, boost)
        sid, pay = self._request(AUDIO_OPEN, json.dumps(req).encode(),
                                 AUDIO_OPENED)
        obj = self._json(AUDIO_OPENED, pay)
        sid = sid or _int(obj, "stream", "AUDIO_OPENED")
        self._audio[sid] = fmt
        self._audio_channels[sid] = int(channels)
        self._names.setdefault(sid, str(obj.get("name", name or "")))
        return sid

    def send_audio(self, stream_id: int, samples: np.ndarray) -> None:
        """Sends samples ([n] or [n, channels]) to a stream opened by
        open_audio, converted to its format (s16: integers, or floats in
        +-1 scaled by 32768; f32: floats, full scale +-1). Large arrays
        are split into messages within the server's limit. While the server
        holds back (flow control), incoming events are read and buffered
        for events(), so subscriptions on this connection do not stall."""
        fmt = self._audio.get(stream_id)
        if fmt is None:
            raise ValueError("stream %d was not opened here" % stream_id)
        channels = self._audio_channels[stream_id]
        data = _pcm_bytes(samples, fmt, channels)
        frame_bytes = channels * SAMPLE_DTYPES[fmt].itemsize
        step = max(1, self.max_request_bytes // frame_bytes) * frame_bytes
        out = bytearray()
        for i in range(0, len(data), step):
            part = data[i:i + step]
            out += HEADER.pack(MAGIC, PROTOCOL_VERSION, AUDIO_DATA, 0,
                               stream_id, len(part)) + part
            if len(out) >= (4 << 20):
                self._send_pumping(bytes(out))
                out = bytearray()
        if out:
            self._send_pumping(bytes(out))

    def _send_pumping(self, data: bytes) -> None:
        """Writes data, reading (and buffering) whatever the server sends
        meanwhile."""
        view = memoryview(data)
        # The client's timeout bounds each wait here too: a server that
        # neither takes audio nor sends anything raises socket.timeout.
        limit = self._sock.gettimeout()
        while view:
            r, w, _ = select.select([self._sock], [self._sock], [], limit)
            if not r and not w:
                raise socket.timeout("aurald took no audio and sent nothing "
                                     "for %g s" % limit)
            if r:
                try:
                    mtype, sid, pay = self._read_message()
                except EOFError:
                    raise ProtocolError("aurald closed the connection while "
                                        "audio was being sent") from None
                if not self._handle_async(mtype, sid, pay) and mtype == ERROR:
                    err = self._error(sid, pay)
                    self._events.append(err)
                    if err.fatal:
                        raise ServerError(err.code, err.name, err.message,
                                          True, sid)
            if w:
                try:
                    n = self._sock.send(view, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    continue
                view = view[n:]

    def close_audio(self, stream_id: int) -> Dict[str, int]:
        """Ends a stream opened by open_audio and waits until the server
        has computed all of it (AUDIO_CLOSED). Events arriving meanwhile are
        buffered for events(). Returns {"frames": ..., "chunks": ...}."""
        self._send(AUDIO_CLOSE, b"", stream_id)
        while stream_id not in self._closed_replies:
            try:
                mtype, sid, pay = self._read_message()
            except EOFError:
                raise ProtocolError("aurald closed the connection before "
                                    "AUDIO_CLOSED") from None
            if self._handle_async(mtype, sid, pay):
                continue
            if mtype == ERROR:
                err = self._error(sid, pay)
                if sid == stream_id or err.fatal:
                    raise ServerError(err.code, err.name, err.message,
                                      err.fatal, sid)
                self._events.append(err)
        self._audio.pop(stream_id, None)
        self._names.pop(stream_id, None)
        reply = self._closed_replies.pop(stream_id)
        return {"frames": _int(reply, "frames", "AUDIO_CLOSED"),
                "chunks": _int(reply, "chunks", "AUDIO_CLOSED")}

    # --- events -------------------------------------------------------------

    def events(self, timeout: Optional[float] = None) -> Iterator[Any]:
        """Yields StreamStarted, Chunk, Gap, StreamEnded and Error objects as
        they arrive (first those buffered during requests). Ends when the
        server closes the connection, or when nothing arrived for timeout
        seconds (None: wait forever); a message the server began and then
        sent nothing of for timeout seconds raises ProtocolError."""
        while True:
            while self._events:
                yield self._events.popleft()
            # Over a WebSocket, messages already read may wait in its buffer.
            buffered = getattr(self._sock, "pending", lambda: False)()
            if timeout is not None and not buffered:
                r, _, _ = select.select([self._sock], [], [], timeout)
                if not r:
                    return
            try:
                mtype, sid, pay = self._read_message_within(timeout)
            except EOFError:
                return
            if self._handle_async(mtype, sid, pay):
                continue
            if mtype == ERROR:
                self._events.append(self._error(sid, pay))

    def _read_message_within(self, timeout: Optional[float]):
        """_read_message, where no wait for the rest of a message lasts
        more than timeout seconds (None: the socket's own timeout): a
        server that sends part of a message and then nothing is a
        ProtocolError rather than a read that never returns."""
        old = self._sock.gettimeout()
        if timeout is None or (old is not None and old <= timeout):
            return self._read_message()
        self._sock.settimeout(timeout)
        try:
            return self._read_message()
        except socket.timeout:
            raise ProtocolError("aurald sent part of a message, then "
                                "nothing for %g s" % timeout) from None
        finally:
            if self._sock is not None:
                self._sock.settimeout(old)


# --- cluster mode (docs/CLUSTER.md) -------------------------------------------

CLUSTER_ANNOUNCE = "aural:announce"
CLUSTER_TIMEOUT_S = 10.0        # one Redis command; above XREAD's block
CLUSTER_CONNECT_TIMEOUT_S = 5.0
_DIGITS = re.compile(r"[0-9]{1,9}\Z")


class ClusterError(Exception):
    """A cluster operation failed: Redis unreachable or refusing a command,
    or a stream name already in the cluster. The message names the URL."""


def parse_cluster_url(url: str) -> Dict[str, Any]:
    """Parses redis://[USER@]HOST[:PORT][/DB] or unix:PATH as the C tools do
    (aural/cluster.h): {"unix": PATH, "user": "", "db": 0} or {"host",
    "port" (default 6379), "user" ("" for none), "db" (default 0)}.
    ValueError names the problem; a password in the URL is refused (it
    would show in ps and in logs)."""
    def bad(what: str) -> ValueError:
        return ValueError("cluster URL '%s': %s" % (url, what))

    if url.startswith("unix:"):
        path = url[5:]
        path = path[2:] if path.startswith("//") else path
        if not path.startswith("/"):
            raise bad("expected unix:/absolute/path")
        if len(path.encode()) >= 108:
            raise bad("the socket path is too long")
        return {"unix": path, "user": "", "db": 0}
    if not url.startswith("redis://"):
        raise bad("expected redis://[USER@]HOST[:PORT][/DB] or unix:PATH")
    rest, user, db, port = url[8:], "", 0, 6379
    at, slash = rest.find("@"), rest.find("/")
    if at >= 0 and (slash < 0 or at < slash):
        user, rest = rest[:at], rest[at + 1:]
        if ":" in user:
            # The message must not show the password it refuses.
            raise ValueError(
                "cluster URL 'redis://%s:***@%s': a password in the URL is "
                "refused (it shows in ps and logs): use a password argument "
                "or $AURAL_REDIS_PASSWORD" % (user.partition(":")[0], rest))
        if not user or len(user) >= 128:
            raise bad("bad user name")
    rest, slash, dbs = rest.partition("/")
    if slash:
        if not _DIGITS.match(dbs) or int(dbs) > 1 << 20:
            raise bad("the database after '/' is not a number")
        db = int(dbs)
    if rest.startswith("["):
        host, close, tail = rest[1:].partition("]")
        if not close:
            raise bad("unclosed '['")
    else:
        host, colon, tail = rest.partition(":")
        tail = colon + tail
    if tail:
        if (not tail.startswith(":") or not _DIGITS.match(tail[1:]) or
                not 1 <= int(tail[1:]) <= 65535):
            raise bad("the port is not a number in 1..65535")
        port = int(tail[1:])
    if not host:
        raise bad("no host")
    return {"host": host, "port": port, "user": user, "db": db}


def cluster_valid_name(name: str) -> bool:
    """A cluster stream's name: 1 to 64 bytes of printable ASCII without
    '/', '\\', '{' or '}' (the braces make the name a Redis hash tag)."""
    return (isinstance(name, str) and 1 <= len(name) <= 64 and
            all(0x21 <= ord(c) <= 0x7E and c not in "/\\{}" for c in name))


def cluster_key(name: str, part: str) -> str:
    """A stream's key, aural:{NAME}:PART (PART: meta, audio, out, ckpt)."""
    if not cluster_valid_name(name):
        raise ValueError("%r is not a cluster stream name (1-64 printable "
                         "ASCII characters without '/', '\\', '{' or '}')"
                         % (name,))
    return "aural:{%s}:%s" % (name, part)


def _cluster_connect(url: str, password: Optional[str]) -> Any:
    """A redis.Redis for url, authenticated with password, else
    $AURAL_REDIS_PASSWORD; ClusterError when Redis is unreachable."""
    import redis  # only cluster mode needs the module

    u = parse_cluster_url(url)
    if password is None:
        password = os.environ.get("AURAL_REDIS_PASSWORD") or None
    if u["user"] and password is None:
        raise ValueError("cluster URL '%s': user '%s' needs a password"
                         % (url, u["user"]))
    kw: Dict[str, Any] = dict(db=u["db"], password=password,
                              username=u["user"] or None,
                              socket_timeout=CLUSTER_TIMEOUT_S,
                              socket_connect_timeout=CLUSTER_CONNECT_TIMEOUT_S)
    if "unix" in u:
        r = redis.Redis(unix_socket_path=u["unix"], **kw)
    else:
        r = redis.Redis(host=u["host"], port=u["port"], **kw)
    try:
        r.ping()
    except redis.RedisError as e:
        raise ClusterError("cannot connect to Redis at %s: %s" % (url, e)) \
            from None
    return r


def _pcm_blocks(pcm: Any, frame_bytes: int, block_bytes: int,
                fmt: str, channels: int) -> Iterator[bytes]:
    """The audio in blocks of at most block_bytes, whole frames each: from
    bytes-like PCM, a binary file of PCM, or an array (_pcm_bytes)."""
    if isinstance(pcm, np.ndarray):
        pcm = _pcm_bytes(pcm, fmt, channels)
    if isinstance(pcm, (bytes, bytearray, memoryview)):
        data = memoryview(pcm).cast("B")
        if len(data) % frame_bytes:
            raise ValueError("PCM of %d bytes is not whole frames of %d"
                             % (len(data), frame_bytes))
        for i in range(0, len(data), block_bytes):
            yield bytes(data[i:i + block_bytes])
        return
    while True:
        block = pcm.read(block_bytes)
        while block and len(block) % frame_bytes:
            more = pcm.read(frame_bytes - len(block) % frame_bytes)
            if not more:
                raise ValueError("the PCM file ends inside a frame")
            block += more
        if not block:
            return
        yield block


def _xadd_once(r: Any, key: str, entry_id: str, fields: Dict[str, Any]) -> None:
    """XADD with an explicit ID; an ID Redis finds taken was stored by an
    earlier try (CLUSTER.md, "Why these IDs")."""
    import redis

    try:
        r.xadd(key, fields, id=entry_id)
    except redis.ResponseError as e:
        if "equal or smaller than the target stream top item" not in str(e):
            raise


def cluster_send(url: str, name: str, pcm_bytes_or_file: Any, rate: int,
                 channels: int, fmt: str = "s16", block_ms: int = 100,
                 realtime: bool = False,
                 vocabulary: Optional[Sequence[str]] = None,
                 boost: Optional[float] = None,
                 password: Optional[str] = None) -> Dict[str, int]:
    """Writes a new cluster stream to Redis, as `aural send --cluster`: its
    meta hash (refused with ClusterError when the name is already in the
    cluster), an announcement that one aurald node takes up, the audio as
    entries of block_ms (1..1000) with IDs S-1 (S: the entry's first
    frame), and the end entry T-1 (T: all frames).

    pcm_bytes_or_file: interleaved little-endian samples of fmt ("s16" or
    "f32") as bytes, a binary file object of them, or an array ([n] or
    [n, channels], converted as Client.send_audio converts). realtime
    paces the entries at 1x. vocabulary (1 to 64 words, none empty or with
    a comma: ValueError) and boost go to the announcement for the stream's
    words. password: Redis' (else $AURAL_REDIS_PASSWORD). Returns
    {"frames": T, "entries": audio entries}."""
    import redis

    if fmt not in SAMPLE_DTYPES:
        raise ValueError("fmt is s16 or f32")
    if not 4000 <= int(rate) <= 768000 or not 1 <= int(channels) <= 256:
        raise ValueError("rate is 4000..768000 Hz, channels 1..256")
    if not 1 <= int(block_ms) <= 1000:
        raise ValueError("block_ms is 1..1000 (an entry holds at most 1 s)")
    ann: Dict[str, Any] = {}
    _add_vocabulary(ann, vocabulary, boost)
    if "vocabulary" in ann:
        # One comma-separated field: a word with a comma would be two
        # words there, and an empty one (or none) would not be a word.
        words = ann["vocabulary"]
        if not 1 <= len(words) <= 64 or any(
                not isinstance(w, str) or w == "" or "," in w
                for w in words):
            raise ValueError("vocabulary is 1 to 64 words, none empty or "
                             "with a comma")
        ann["vocabulary"] = ",".join(words)
    if "boost" in ann:
        # Plain decimals, which nodes read: str() would write 1e-05.
        ann["boost"] = ("%.6f" % ann["boost"]).rstrip("0").rstrip(".")
    meta, audio = cluster_key(name, "meta"), cluster_key(name, "audio")
    frame_bytes = channels * SAMPLE_DTYPES[fmt].itemsize
    block_frames = max(1, rate * block_ms // 1000)
    r = _cluster_connect(url, password)
    try:
        if not r.hsetnx(meta, "created_us", _now_us()):
            raise ClusterError("stream %s already exists in the cluster (%s)"
                               % (name, url))
        fields = {"rate": int(rate), "channels": int(channels), "format": fmt}
        r.hset(meta, mapping=fields)
        r.xadd(CLUSTER_ANNOUNCE, dict(name=name, **fields, **ann))
        t0, sent, entries = time.monotonic(), 0, 0
        for block in _pcm_blocks(pcm_bytes_or_file, frame_bytes,
                                 block_frames * frame_bytes, fmt, channels):
            got = len(block) // frame_bytes
            if realtime:
                time.sleep(max(0.0, t0 + (sent + got) / rate -
                               time.monotonic()))
            _xadd_once(r, audio, "%d-1" % sent, {"pcm": block})
            sent, entries = sent + got, entries + 1
        _xadd_once(r, audio, "%d-1" % sent, {"end": "1"})
    except redis.RedisError as e:
        raise ClusterError("Redis at %s: %s" % (url, e)) from None
    finally:
        r.close()
    return {"frames": sent, "entries": entries}


def _cluster_chunk(name: str, entry_id: bytes, fields: Dict[bytes, bytes]
                   ) -> Chunk:
    """A Chunk from one entry of aural:{NAME}:out, its words attached."""
    seq_s, _, one = entry_id.decode().partition("-")
    if one != "1" or b"chunk" not in fields:
        raise ProtocolError("%s: entry %s is not a chunk SEQ-1"
                            % (name, entry_id.decode()))
    ck = decode_chunk(fields[b"chunk"], 0, name)
    if ck.seq != int(seq_s):
        raise ProtocolError("%s: entry %s holds chunk %d"
                            % (name, entry_id.decode(), ck.seq))
    if ck.text is None and b"text" in fields:
        ck.text = fields[b"text"].decode("utf-8", "replace")
    if b"words" in fields:
        try:
            obj = json.loads(fields[b"words"].decode("utf-8"),
                             parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ProtocolError("%s: chunk %d: words are not JSON: %s"
                                % (name, ck.seq, e)) from None
        if not isinstance(obj, dict) or not isinstance(
                obj.get("segments"), list):
            raise ProtocolError("%s: chunk %d: malformed words"
                                % (name, ck.seq))
        ck.words = Words(0, name, ck.seq, bool(obj.get("final", False)),
                         [_words_of(seg) for seg in obj["segments"]],
                         _words_of(obj.get("partial", [])))
    ck.final = ck.final or fields.get(b"final") == b"1"
    return ck


def cluster_subscribe(url: str, name: str, start: Any = "start",
                      password: Optional[str] = None) -> Iterator[Any]:
    """Follows a cluster stream's chunks in Redis, as `aural sub
    --cluster`, until its final chunk. start: "start" (the first chunk
    still retained), "now" (chunks stored from now on) or a chunk number
    (that chunk on). Yields Chunk objects (stream_id 0; seq, first_frame,
    n_frames, final, emb and logits as float32 arrays when the node wrote
    them, text, words as a Words or None) and, where chunks were trimmed
    by the node's retention before they were read, a Gap (reason
    "trimmed") before the chunk that follows them. password: Redis' (else
    $AURAL_REDIS_PASSWORD). ClusterError when Redis fails, when no node
    will encode the stream (its meta hash's "error"), after the final
    chunk of a stream cut short (its "error": bad audio, a producer that
    stopped without its end), or when start is "now" or past the final
    chunk of a stream that has ended."""
    import redis

    out = cluster_key(name, "out")
    r = _cluster_connect(url, password)
    try:
        top = r.xrevrange(out, "+", "-", count=1)
        last = int(top[0][0].split(b"-")[0]) if top else -1
        if top and top[0][1].get(b"final") == b"1" and (
                start == "now" or (isinstance(start, int) and start > last)):
            raise ClusterError("%s has ended: its final chunk is %d"
                               % (name, last))
        if start == "now":
            after, expect = (top[0][0] if top else b"0-0"), None
        elif start == "start":
            after, expect = b"0-0", None
        elif isinstance(start, int) and start >= 0:
            after, expect = ("%d-0" % start).encode(), start
        else:
            raise ValueError("start is 'start', 'now' or a chunk number")
        meta = cluster_key(name, "meta")
        while True:
            reply = r.xread({out: after}, count=64, block=1000)
            if not reply:
                # A stream no node will encode says why in its meta hash.
                error = r.hget(meta, "error")
                if error is not None:
                    raise ClusterError("%s: no node will encode it: %s" % (
                        name, error.decode("utf-8", "replace")))
            for entry_id, fields in (reply[0][1] if reply else []):
                after = entry_id
                ck = _cluster_chunk(name, entry_id, fields)
                if expect is not None and ck.seq > expect:
                    yield Gap(0, name, expect, ck.seq - expect, "trimmed")
                expect = ck.seq + 1
                yield ck
                if ck.final:
                    # Cut short (bad audio, a producer gone silent): the
                    # chunks so far are not the whole stream.
                    if b"error" in fields:
                        raise ClusterError("%s ended with an error: %s" % (
                            name, fields[b"error"].decode("utf-8",
                                                          "replace")))
                    return
    except redis.RedisError as e:
        raise ClusterError("Redis at %s: %s" % (url, e)) from None
    finally:
        r.close()
