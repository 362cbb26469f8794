"""A small WebSocket client (RFC 6455) on the standard library, for aurald's
/ws (proto/PROTOCOL.md, "WebSocket") and for tests that need to send
frames no browser would.

    ws = WebSocket("ws://127.0.0.1:8080/ws", headers={"Origin": ...})
    ws.send(b"...")            # one binary message
    opcode, data = ws.recv()   # one whole message (pings answered)
    ws.close()

MessageSocket wraps a WebSocket so that aural_client.Client can use it as
its socket: every protocol message it writes goes out as one binary
message, and what it reads is the concatenation of the messages received.
"""

import base64
import hashlib
import os
import socket
import ssl
import struct
from typing import Dict, Optional, Tuple
from urllib.parse import urlsplit

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
HEADER = struct.Struct("<IBBHII")  # the protocol's message header
HEAD_MAX = 16384  # bytes of the upgrade response's status line and fields


class HandshakeError(Exception):
    """The server refused the upgrade: status is its HTTP status."""

    def __init__(self, status: int, text: str):
        super().__init__("WebSocket upgrade refused: HTTP %d: %s"
                         % (status, text.strip()))
        self.status = status
        self.text = text


class Closed(Exception):
    """The server closed: code is the close frame's status (or None)."""

    def __init__(self, code: Optional[int], reason: str = ""):
        super().__init__("WebSocket closed (%s) %s" % (code, reason))
        self.code = code
        self.reason = reason


class TooLarge(Exception):
    """The server sent a frame or message over the limit the reader set
    (or a control frame over RFC 6455's 125 bytes); nothing of it was
    read."""


class WebSocket:
    def __init__(self, url: str, headers: Optional[Dict[str, str]] = None,
                 timeout: Optional[float] = 10.0,
                 ssl_context: Optional[ssl.SSLContext] = None):
        u = urlsplit(url)
        if u.scheme not in ("ws", "wss"):
            raise ValueError("not a ws:// or wss:// URL: %s" % url)
        port = u.port or (443 if u.scheme == "wss" else 80)
        sock = socket.create_connection((u.hostname, port), timeout=timeout)
        if u.scheme == "wss":
            ctx = ssl_context or ssl.create_default_context()
            sock = ctx.wrap_socket(sock, server_hostname=u.hostname)
        self.sock = sock
        self._buf = bytearray()
        self.close_code: Optional[int] = None
        self._handshake(u, headers or {})

    def _handshake(self, u, headers: Dict[str, str]) -> None:
        key = base64.b64encode(os.urandom(16)).decode()
        host = u.netloc.rsplit("@", 1)[-1]
        lines = ["GET %s HTTP/1.1" % (u.path or "/"), "Host: %s" % host,
                 "Upgrade: websocket", "Connection: Upgrade",
                 "Sec-WebSocket-Key: %s" % key, "Sec-WebSocket-Version: 13"]
        lines += ["%s: %s" % kv for kv in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        while b"\r\n\r\n" not in self._buf:
            if len(self._buf) > HEAD_MAX:
                raise HandshakeError(0, "a response head of more than %d "
                                        "bytes" % HEAD_MAX)
            part = self.sock.recv(4096)
            if not part:
                raise HandshakeError(0, "connection closed during the "
                                        "handshake")
            self._buf += part
        head, rest = bytes(self._buf).split(b"\r\n\r\n", 1)
        self._buf = bytearray(rest)
        status_line, *fields = head.decode("latin-1").split("\r\n")
        words = status_line.split()
        if (len(words) < 2 or not words[0].startswith("HTTP/") or
                not words[1].isdigit() or len(words[1]) != 3):
            raise HandshakeError(0, "not an HTTP response: %.80r"
                                 % status_line)
        status = int(words[1])
        if status != 101:
            body = bytes(self._buf)
            try:
                self.sock.settimeout(2)
                while True:
                    part = self.sock.recv(4096)
                    if not part:
                        break
                    body += part
                    if b"\n" in body:
                        break
            except OSError:
                pass
            self.sock.close()
            raise HandshakeError(status, body.decode("utf-8", "replace"))
        want = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest())
        got = dict(f.split(": ", 1) for f in fields if ": " in f)
        accept = {k.lower(): v for k, v in got.items()}.get(
            "sec-websocket-accept", "")
        if accept.encode() != want:
            raise HandshakeError(status, "bad Sec-WebSocket-Accept")

    # --- frames -------------------------------------------------------

    def send_frame(self, opcode: int, data: bytes, fin: bool = True,
                   rsv: int = 0, mask: bool = True) -> None:
        """One frame as given (tests use it for what clients must not do)."""
        b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
        n = len(data)
        if n < 126:
            head = struct.pack("!BB", b0, (0x80 if mask else 0) | n)
        elif n < 65536:
            head = struct.pack("!BBH", b0, (0x80 if mask else 0) | 126, n)
        else:
            head = struct.pack("!BBQ", b0, (0x80 if mask else 0) | 127, n)
        if mask:
            key = os.urandom(4)
            head += key
            data = _mask(data, key)
        self.sock.sendall(head + data)

    def send(self, data: bytes) -> None:
        self.send_frame(BINARY, data)

    def _read(self, n: int) -> bytes:
        # At most 1 MiB a recv(): what is allocated follows what arrived,
        # not the length a frame's header claims.
        while len(self._buf) < n:
            part = self.sock.recv(min(max(65536, n - len(self._buf)), 1 << 20))
            if not part:
                raise Closed(self.close_code, "connection closed")
            self._buf += part
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def recv_frame(self, max_bytes: Optional[int] = None
                   ) -> Tuple[bool, int, bytes]:
        """One frame. A data frame of more than max_bytes (None: any), or a
        control frame of more than 125 bytes, raises TooLarge before its
        data is read."""
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read(8))[0]
        if b0 & 0x08 and n > 125:
            raise TooLarge("a control frame of %d bytes (at most 125)" % n)
        if not b0 & 0x08 and max_bytes is not None and n > max_bytes:
            raise TooLarge("a frame of %d bytes where at most %d were left "
                           "for its message" % (n, max_bytes))
        key = self._read(4) if b1 & 0x80 else None
        data = self._read(n)
        if key:
            data = _mask(data, key)
        return bool(b0 & 0x80), b0 & 0x0F, data

    def recv(self, max_bytes: Optional[int] = None) -> Tuple[int, bytes]:
        """One whole data message (opcode, bytes). Pings are answered;
        a close frame raises Closed with its status; a message longer than
        max_bytes (None: any) raises TooLarge."""
        opcode, parts, total = None, [], 0
        while True:
            left = None if max_bytes is None else max_bytes - total
            fin, op, data = self.recv_frame(left)
            if op == PING:
                self.send_frame(PONG, data)
                continue
            if op == PONG:
                continue
            if op == CLOSE:
                code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 \
                    else None
                self.close_code = code
                try:
                    self.send_frame(CLOSE, data[:2])
                except OSError:
                    pass
                raise Closed(code, data[2:].decode("utf-8", "replace"))
            if opcode is None:
                opcode = op
            parts.append(data)
            total += len(data)
            if fin:
                return opcode, b"".join(parts)

    def close(self, code: int = 1000) -> None:
        try:
            self.send_frame(CLOSE, struct.pack("!H", code))
        except OSError:
            pass
        self.sock.close()

    def fileno(self) -> int:
        return self.sock.fileno()


def _mask(data: bytes, key: bytes) -> bytes:
    n = len(data)
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(k, "little")
            ).to_bytes(n, "little")


class MessageSocket:
    """The socket aural_client.Client reads and writes, over a WebSocket:
    bytes written are cut into protocol messages (by their headers), one
    binary message each; reads return the bytes of the messages received,
    in order."""

    def __init__(self, ws: WebSocket, error: type = TooLarge,
                 max_message_bytes: int = 64 << 20):
        self.ws = ws
        self._out = b""
        self._in = b""
        # The largest payload the reader accepts (its max_message_bytes):
        # a WebSocket message longer than a header and that is refused,
        # as an instance of error, before it is read.
        self.max_message_bytes = max_message_bytes
        self._error = error

    def settimeout(self, t: Optional[float]) -> None:
        self.ws.sock.settimeout(t)

    def gettimeout(self) -> Optional[float]:
        return self.ws.sock.gettimeout()

    def sendall(self, data: bytes) -> None:
        self._out += bytes(data)
        while len(self._out) >= HEADER.size:
            total = HEADER.size + HEADER.unpack(self._out[:HEADER.size])[5]
            if len(self._out) < total:
                break
            self.ws.send(self._out[:total])
            self._out = self._out[total:]

    def send(self, data, flags: int = 0) -> int:
        self.sendall(bytes(data))
        return len(data)

    def recv(self, n: int) -> bytes:
        if not self._in:
            try:
                _, self._in = self.ws.recv(HEADER.size +
                                           self.max_message_bytes)
            except Closed:
                return b""
            except TooLarge as e:
                raise self._error("aurald sent %s, over its limit of %d "
                                  "bytes a message" % (e, HEADER.size +
                                                       self.max_message_bytes)
                                  ) from None
        out, self._in = self._in[:n], self._in[n:]
        return out

    def pending(self) -> bool:
        return bool(self._in) or bool(self.ws._buf)

    def fileno(self) -> int:
        return self.ws.fileno()

    def close(self) -> None:
        self.ws.close()
