#!/usr/bin/python3
"""Hostile peers of aurald --http: oversized frames and headers, bad
opcodes, fragment floods, text frames, several messages in one frame,
slowloris connections, missing or wrong tokens, a foreign Origin, a
WebSocket subscriber that never reads. Each is refused or closed with the
right HTTP status or close code, while a Unix-socket subscriber and a
WebSocket client of the same daemon go on unharmed (every chunk, no GAP),
and the daemon exits 0 (under ASan: no error, no leak).

Run by meson (`meson test -C build web_hostile`, also in the ASan build).
"""

import json
import os
import resource
import socket
import struct
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_daemon  # noqa: E402
from test_web import WebTest, get  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "python"))
import aural_client as ac  # noqa: E402
import aural_ws as ws_  # noqa: E402

HEADER = struct.Struct("<IBBHII")
HELLO = HEADER.pack(0x4C525541, 1, ac.HELLO, 0, 0, 16) + \
    b'{"versions":[1]}'


def msg(mtype, payload=b"", stream_id=0, length=None):
    n = len(payload) if length is None else length
    return HEADER.pack(0x4C525541, 1, mtype, 0, stream_id, n) + payload


def outcome(ws):
    """(error names received, close code) until the server closes."""
    names = []
    try:
        while True:
            _, data = ws.recv()
            if len(data) > 16 and data[5] == ac.ERROR:
                names.append(json.loads(data[16:])["name"])
    except ws_.Closed as e:
        return names, e.code
    except (ConnectionError, OSError):
        return names, None


class Bystanders:
    """A Unix-socket subscriber of a pushed stream (read by a thread all
    along) and a WebSocket client that pings, checked at the end: every
    chunk, no GAP, pongs."""

    def __init__(self, d):
        self.sub = ac.Client(d.path, timeout=60)
        self.sub.subscribe("steady", outputs=["embeddings"])
        self.pusher = ac.Client(d.path, timeout=30)
        self.sid = self.pusher.open_audio("steady", rate=16000)
        self.ws = ac.Client(d.url, timeout=10)
        self.seqs, self.gaps = [], 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for ev in self.sub.events():
            if isinstance(ev, ac.Chunk):
                self.seqs.append(ev.seq)
            elif isinstance(ev, ac.Gap):
                self.gaps += 1
            elif isinstance(ev, ac.StreamEnded):
                return

    def push(self, seconds=0.5):
        x = np.sin(np.arange(int(16000 * seconds)) * 0.05).astype(np.float32)
        self.pusher.send_audio(self.sid, 0.3 * x)
        self.ws.ping(b"still here")

    def check(self, test):
        done = self.pusher.close_audio(self.sid)
        self.reader.join(60)
        test.assertFalse(self.reader.is_alive())
        test.assertEqual(self.gaps, 0)
        test.assertEqual(self.seqs, list(range(done["chunks"])))
        self.ws.ping(b"end")
        for c in (self.sub, self.pusher, self.ws):
            c.close()


class TestHostileHttp(WebTest):
    def setUp(self):
        super().setUp()
        self.d = self.start_http("--hello-timeout", "3", "--sub-soft-limit",
                                 "256K", "--sub-hard-limit", "1M",
                                 "--sub-soft-seconds", "1")
        self.by = Bystanders(self.d)

    def tearDown(self):
        self.by.check(self)
        self.stop_clean(self.d)
        super().tearDown()

    def ws(self, **kw):
        return ws_.WebSocket(self.d.url, **kw)

    def test_websocket_frames_that_break_the_rules(self):
        cases = [
            # (what is sent, errors expected, close code expected)
            (lambda w: w.send_frame(0x3, b"abc"), [], 1002),     # opcode
            (lambda w: w.send_frame(0xB, b""), [], 1002),        # control
            (lambda w: w.send_frame(ws_.BINARY, HELLO, rsv=4), [], 1002),
            (lambda w: w.send_frame(ws_.TEXT, HELLO), ["FRAMING"], 1003),
            (lambda w: w.send(HELLO + HELLO), ["FRAMING"], 1002),
            (lambda w: w.send(HELLO[:10]), ["FRAMING"], 1002),
            (lambda w: w.send(b"GET / HTTP/1.1\r\n\r\n"), ["FRAMING"], 1002),
            (lambda w: w.send(msg(ac.PING)), ["STATE"], 1002),   # no HELLO
        ]
        for i, (send, errors, code) in enumerate(cases):
            w = self.ws()
            send(w)
            self.assertEqual(outcome(w), (errors, code), "case %d" % i)
            self.by.push(0.1)

    def test_oversized_messages(self):
        w = self.ws()
        w.send(HELLO)
        w.send(msg(ac.AUDIO_DATA, b"", 1, length=(1 << 20) + 1))
        self.assertEqual(outcome(w), (["TOO_LARGE"], 1009))
        # A frame declared far larger than any message: refused when its
        # header is in, without waiting for (or buffering) the rest.
        w = self.ws()
        w.send(HELLO)
        head = msg(ac.AUDIO_DATA, b"", 1, length=64)
        w.sock.sendall(struct.pack("!BBQ", 0x82, 0xFF, 1 << 40) +
                       b"\0\0\0\0" + head + b"\0" * 200)
        names, code = outcome(w)
        self.assertEqual(names, ["FRAMING"])
        self.by.push()

    def test_fragment_flood(self):
        w = self.ws()
        w.send(HELLO)
        w.send_frame(ws_.BINARY, msg(ac.AUDIO_DATA, b"", 1, length=1 << 20),
                     fin=False)
        try:
            for _ in range(70000):
                w.send_frame(ws_.CONT, b"\0\0", fin=False)
        except OSError:
            pass  # closed under the flood: what is wanted
        names, code = outcome(w)
        self.assertIn(code, (1008, None))
        self.by.push()

    def test_oversized_headers_and_slowloris(self):
        port = self.d.port
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                  b"X-Big: %s\r\n\r\n" % (port, b"a" * 20000))
        try:
            self.assertNotIn(b"200 OK", s.recv(4096))
        except ConnectionResetError:
            pass
        s.close()
        # Twenty connections that send a header byte a second: closed by
        # the header timeout, while others are served meanwhile.
        slow = []
        for _ in range(20):
            c = socket.create_connection(("127.0.0.1", port))
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            c.setblocking(False)
            slow.append(c)
        t0 = time.monotonic()
        closed = set()
        while len(closed) < len(slow) and time.monotonic() - t0 < 20:
            self.assertEqual(get(port, "/healthz")[0], 200)
            self.by.push(0.2)
            for i, c in enumerate(slow):
                if i in closed:
                    continue
                try:
                    c.send(b"a")
                    if c.recv(1) == b"":
                        closed.add(i)
                except BlockingIOError:
                    pass
                except OSError:
                    closed.add(i)
            time.sleep(1.0)
        self.assertEqual(len(closed), len(slow), "slowloris still open")
        self.assertLess(time.monotonic() - t0, 15)
        for c in slow:
            c.close()

    def test_more_slow_connections_than_header_slots(self):
        # Slowloris past libwebsockets' 64 header slots: any other request
        # waited for a slot and was reset after 5 s, for as long as the
        # slow connections were renewed. A new connection now closes
        # those that have waited longest (past a second's grace), so that
        # requests and WebSockets still get in.
        port = self.d.port
        slow = []
        for _ in range(100):
            c = socket.create_connection(("127.0.0.1", port))
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"X-Slow: ")
            slow.append(c)
        time.sleep(1.5)
        for _ in range(3):
            t0 = time.monotonic()
            self.assertEqual(get(port, "/healthz")[0], 200)
            self.assertLess(time.monotonic() - t0, 2.0)
        with ac.Client(self.d.url, timeout=10) as w:
            self.assertEqual(len(w.list_streams()), 1)
        # The oldest went first.
        for c in slow[:20]:
            c.settimeout(5)
            try:
                self.assertEqual(c.recv(1), b"")
            except ConnectionResetError:
                pass
        self.by.push(0.2)
        for c in slow:
            c.close()

    def test_silent_websocket_is_closed_after_the_hello_timeout(self):
        w = self.ws()
        t0 = time.monotonic()
        self.assertEqual(outcome(w), (["STATE"], 1002))
        self.assertLess(time.monotonic() - t0, 8)

    def test_foreign_origin_and_other_paths_are_refused(self):
        for hdrs, status in (({"Origin": "https://evil.example"}, 403),
                             ({"Origin": "null"}, 403),
                             ({"Host": "evil.example"}, 403)):
            with self.assertRaises(ws_.HandshakeError) as e:
                self.ws(headers=hdrs)
            self.assertEqual(e.exception.status, status)
        with self.assertRaises(ws_.HandshakeError) as e:
            ws_.WebSocket(self.d.url.replace("/ws", "/other"))
        self.assertEqual(e.exception.status, 404)
        self.by.push()

    def test_websocket_that_never_reads_is_a_slow_consumer(self):
        lazy = ac.Client(self.d.url, timeout=30)
        lazy.subscribe("steady", outputs=["embeddings", "logits", "text"])
        me = lazy.welcome["client"]
        # Far more than the socket buffers hold, so that its queue grows
        # past the soft limit (256K) for longer than allowed (1 s).
        for _ in range(20):
            self.by.push(30.0)
        deadline = time.monotonic() + 20
        gone = False
        while time.monotonic() < deadline and not gone:
            st = self.by.pusher.stats()
            gone = all(s["client"] != me for s in st["subscribers"])
            time.sleep(0.5)
        self.assertTrue(gone, "the lazy WebSocket was not disconnected")
        self.d.wait_text("disconnecting a slow consumer")
        lazy._sock.ws.sock.close()


class TestFileDescriptors(WebTest):
    def test_idle_connections_past_the_fd_limit(self):
        """With 256 open files, 400 idle TCP connections to the HTTP port:
        libwebsockets stops accepting at its share of the descriptors
        instead of failing accept() over and over (which took a whole
        core and wrote some 18 MB of log a second), and a Unix client is
        still served; once they close, HTTP is served again."""
        def low_limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        d = self.start_http(preexec_fn=low_limit)

        def cpu_s():
            with open("/proc/%d/stat" % d.proc.pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        log0, cpu0 = len(d.text()), cpu_s()
        socks = []
        for _ in range(400):
            try:
                socks.append(socket.create_connection(("127.0.0.1", d.port),
                                                      2))
            except OSError:
                break
        self.assertGreater(len(socks), 256)
        time.sleep(2)
        self.assertLess(cpu_s() - cpu0, 0.5, "CPU spent while flooded")
        self.assertLess(len(d.text()) - log0, 20000, d.text()[-2000:])
        with ac.Client(d.path, timeout=5) as c:
            self.assertGreaterEqual(c.ping(b"unix"), 0)
        for s in socks:
            s.close()
        deadline = time.monotonic() + 20
        while True:
            try:
                if get(d.port, "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.2)
        self.stop_clean(d)


class TestHostileToken(WebTest):
    def test_missing_and_wrong_tokens_on_a_public_bind(self):
        token = "another-s3cret-0123456789"
        d = self.start_http("--http-token-file", self.token_file(token),
                            addr="0.0.0.0:0")
        for hdrs in ({}, {"Authorization": "Bearer"},
                     {"Authorization": "Basic " + token},
                     {"Authorization": "Bearer " + token[:-1]},
                     {"Authorization": "Bearer " + token + "0"}):
            self.assertEqual(get(d.port, "/metrics", hdrs)[0], 401, hdrs)
            with self.assertRaises(ws_.HandshakeError) as e:
                ws_.WebSocket(d.url, hdrs)
            self.assertEqual(e.exception.status, 401)
        with ac.Client(d.url, headers={"Authorization": "Bearer " + token},
                       timeout=10) as c:
            self.assertGreater(c.ping(), 0)
        self.stop_clean(d)


if __name__ == "__main__":
    test_daemon.main(__name__)
