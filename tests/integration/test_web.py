#!/usr/bin/python3
"""aurald --http: /healthz, /metrics against STATS, the access checks
(Host, bearer token, Origin, TLS), and /ws clients against Unix-socket
subscribers.

Run by meson (`meson test -C build web`) with AURALD_BIN, AURAL_BIN and
AURAL_TEST_DATA set; prints `integration: N passed, M failed` at the end.
Every daemon must exit 0 (under ASan that includes the leak check).
"""

import hashlib
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_daemon  # noqa: E402
from test_daemon import SAMPLE, DaemonTest, run  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "python"))
import aural_client as ac  # noqa: E402
import aural_ws  # noqa: E402


NODE_DUMP = os.path.join(HERE, "..", "..", "tools", "js", "ws-dump.mjs")


def http_port(d):
    m = re.search(r"http: listening on https?://[^ ]*:(\d+)/", d.text())
    assert m, d.text()
    return int(m.group(1))


def get(port, path, headers=None, tls=False, host="127.0.0.1"):
    """(status, headers, body) of one GET."""
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        c = http.client.HTTPSConnection(host, port, timeout=10, context=ctx)
    else:
        c = http.client.HTTPConnection(host, port, timeout=10)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def metrics(port, headers=None):
    status, _, body = get(port, "/metrics", headers)
    assert status == 200, body
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


class WebTest(DaemonTest):
    def start_http(self, *args, addr="127.0.0.1:0", **kw):
        d = self.start("--http", addr, *args, **kw)
        d.port = http_port(d)
        d.url = "ws://127.0.0.1:%d/ws" % d.port
        return d

    def token_file(self, token="s3cret-token-0123456789"):
        path = os.path.join(self.tmp, "token")
        with open(path, "w") as f:
            f.write(token + "\n")
        os.chmod(path, 0o600)
        return path


class TestHttp(WebTest):
    def test_healthz_and_security_headers(self):
        d = self.start_http()
        # Served to every local user without a token: the log says so.
        self.assertIn("no token: every local user", d.text())
        status, headers, body = get(d.port, "/healthz")
        self.assertEqual((status, body), (200, b"ok\n"))
        csp = headers["content-security-policy"]
        self.assertIn("script-src 'self'", csp)
        self.assertNotIn("unsafe-inline", csp)
        self.assertEqual(headers["x-content-type-options"], "nosniff")
        self.assertEqual(get(d.port, "/nothing")[0], 404)
        self.stop_clean(d)

    def test_page_is_served_with_its_scripts(self):
        d = self.start_http()
        status, headers, body = get(d.port, "/")
        self.assertEqual(status, 200)
        self.assertTrue(headers["content-type"].startswith("text/html"))
        self.assertNotIn(b"<script>", body)  # no inline script
        for path in re.findall(rb'src="([^"]+)"', body):
            self.assertEqual(get(d.port, path.decode())[0], 200, path)
        self.stop_clean(d)

    def test_metrics_match_stats(self):
        d = self.start_http()
        with ac.Client(d.path) as c:
            sid = c.open_audio("talk", rate=16000)
            c.subscribe("talk", outputs=["embeddings"])
            x = np.sin(np.arange(16000 * 3) * 0.05).astype(np.float32) * 0.3
            c.send_audio(sid, x)
            n = 0
            for ev in c.events(timeout=30):
                if isinstance(ev, ac.Chunk):
                    n += 1
                    if n == 5:
                        break
            # The last frames may still be computing: a snapshot of the
            # metrics between two equal STATS is one of the same counters.
            deadline = time.monotonic() + 10
            while True:
                before = c.stats()
                m = metrics(d.port)
                stats = c.stats()
                if (before["streams"] == stats["streams"] or
                        time.monotonic() > deadline):
                    break
                time.sleep(0.05)
        st = stats["streams"][0]
        lab = (("id", str(st["id"])), ("source", "client"),
               ("stream", "talk"))
        self.assertEqual(m[("aurald_stream_frames_total", lab)], st["frames"])
        self.assertEqual(m[("aurald_stream_chunks_total", lab)], st["chunks"])
        self.assertAlmostEqual(m[("aurald_stream_compute_seconds_total", lab)],
                               st["compute_s"], places=5)
        self.assertAlmostEqual(m[("aurald_stream_audio_seconds_total", lab)],
                               st["audio_s"], places=5)
        self.assertGreater(st["rounds"], 0)
        self.assertEqual(m[("aurald_stream_compute_rounds_total", lab)],
                         st["rounds"])
        self.assertAlmostEqual(
            m[("aurald_stream_latency_p99_seconds", lab)] * 1e3,
            st["latency_ms_p99"], places=2)
        self.assertEqual(m[("aurald_streams", ())], stats["streams_total"])
        self.assertEqual(m[("aurald_subscribers", ())],
                         stats["subscribers_total"])
        self.assertEqual(m[("aurald_clients", ())], stats["clients"])
        self.assertGreater(stats["heap_bytes"], stats["message_bytes"])
        self.assertGreater(m[("aurald_heap_bytes", ())], 0)
        sub = stats["subscribers"][0]
        key = (("client", str(sub["client"])),
               ("subscription", str(sub["subscription"])))
        self.assertEqual(m[("aurald_subscription_chunks_sent_total", key)],
                         sub["chunks_sent"])
        self.assertEqual(m[("aurald_chunk_latency_seconds_count", ())],
                         st["chunks"])
        self.assertEqual(m[("aurald_chunk_latency_seconds_bucket",
                            (("le", "+Inf"),))], st["chunks"])
        self.stop_clean(d)

    def test_host_and_origin_are_checked(self):
        d = self.start_http()
        own = "http://127.0.0.1:%d" % d.port
        self.assertEqual(get(d.port, "/healthz", {"Origin": own})[0], 200)
        self.assertEqual(get(d.port, "/healthz",
                             {"Origin": "http://localhost:%d" % d.port})[0],
                         200)
        self.assertEqual(get(d.port, "/healthz",
                             {"Origin": "http://evil.example"})[0], 403)
        self.assertEqual(get(d.port, "/healthz", {"Origin": "null"})[0], 403)
        # DNS rebinding: a name that resolves here but is not the server's.
        self.assertEqual(get(d.port, "/metrics",
                             {"Host": "evil.example:%d" % d.port})[0], 403)
        with self.assertRaises(aural_ws.HandshakeError) as e:
            aural_ws.WebSocket(d.url, {"Origin": "http://evil.example"})
        self.assertEqual(e.exception.status, 403)
        ws = aural_ws.WebSocket(d.url, {"Origin": own})
        ws.close()
        self.stop_clean(d)

    def test_origin_allow_list_replaces_the_default(self):
        d = self.start_http("--http-origin", "https://app.example")
        self.assertEqual(get(d.port, "/healthz",
                             {"Origin": "https://app.example"})[0], 200)
        self.assertEqual(get(d.port, "/healthz", {
            "Origin": "http://127.0.0.1:%d" % d.port})[0], 403)
        self.stop_clean(d)

    def test_non_loopback_page_origin_is_the_host_it_was_loaded_from(self):
        # Bound to every address, the server's own origin is the name the
        # browser reached it by (its Host): a page loaded from
        # http://HOST:PORT/ opens its WebSocket with that Origin, which
        # was refused (only http://0.0.0.0:PORT, which no browser sends,
        # was allowed) unless --http-origin named it.
        token = "s3cret-token-0123456789"
        d = self.start_http("--http-token-file", self.token_file(token),
                            addr="0.0.0.0:0")
        jar = {"Cookie": "aural_token=" + token}
        for host in ("127.0.0.1", "localhost"):
            origin = {"Origin": "http://%s:%d" % (host, d.port)}
            url = "ws://%s:%d/ws" % (host, d.port)  # its Host: host:port
            with ac.Client(url, headers={**jar, **origin}) as c:
                self.assertEqual(c.list_streams(), [])
            self.assertEqual(get(d.port, "/healthz", {
                **jar, **origin, "Host": "%s:%d" % (host, d.port)})[0], 200)
        # Another site's page, or the right name by another scheme or
        # port, is still refused.
        for origin in ("http://evil.example",
                       "https://127.0.0.1:%d" % d.port,
                       "http://127.0.0.1:%d" % (d.port + 1),
                       "http://127.0.0.1:%d.evil.example" % d.port, "null"):
            hdrs = {**jar, "Origin": origin}
            with self.assertRaises(aural_ws.HandshakeError, msg=origin) as e:
                aural_ws.WebSocket(d.url, hdrs)
            self.assertEqual(e.exception.status, 403, origin)
            self.assertEqual(get(d.port, "/healthz", hdrs)[0], 403, origin)
        # --http-origin replaces it.
        self.stop_clean(d)
        d = self.start_http("--http-token-file", self.token_file(token),
                            "--http-origin", "https://app.example",
                            addr="0.0.0.0:0")
        hdrs = {**jar, "Origin": "http://127.0.0.1:%d" % d.port}
        self.assertEqual(get(d.port, "/healthz", hdrs)[0], 403)
        self.stop_clean(d)

    def test_non_loopback_bind_needs_a_token(self):
        # Options that do not go together are a bad command line: exit 2,
        # which aurald.service does not restart (it was 1), found before
        # the model loads (a missing one here).
        for args, why in ((["--http", "0.0.0.0:0"], "--http-token-file"),
                          (["--http", "127.0.0.1:0", "--http-cert", "c.pem"],
                           "TLS needs both --http-cert and --http-key"),
                          (["--http", "127.0.0.1:0", "--http-key", "k.pem"],
                           "TLS needs both --http-cert and --http-key")):
            with self.subTest(args=args):
                p = subprocess.run([test_daemon.AURALD, "--no-config", "-m",
                                    os.path.join(self.tmp, "none.st"), "-s",
                                    os.path.join(self.tmp, "x.sock"), *args],
                                   capture_output=True, text=True,
                                   timeout=30)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(why, p.stderr)
                self.assertNotIn("none.st", p.stderr)
        # A token too long to fit in a request's headers beside the rest
        # is refused at start (it used to be taken, and never matched).
        token = self.token_file("t" * 2000)
        p = subprocess.run([test_daemon.AURALD, "-m", test_daemon.TINY, "-s",
                            os.path.join(self.tmp, "x.sock"), "--http",
                            "127.0.0.1:0", "--http-token-file", token],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("16 to 1024 printable characters", p.stderr)

    def test_bearer_token_on_every_request_and_upgrade(self):
        token = "s3cret-token-0123456789"
        d = self.start_http("--http-token-file", self.token_file(token),
                            addr="0.0.0.0:0")
        good = {"Authorization": "Bearer " + token}
        status, headers, _ = get(d.port, "/healthz")
        self.assertEqual(status, 401)
        self.assertIn("Bearer", headers["www-authenticate"])
        self.assertEqual(get(d.port, "/metrics",
                             {"Authorization": "Bearer wrong"})[0], 401)
        self.assertEqual(get(d.port, "/metrics",
                             {"Authorization": "Bearer " + token + "x"})[0],
                         401)
        self.assertEqual(get(d.port, "/metrics", good)[0], 200)
        for hdrs in ({}, {"Authorization": "Bearer nope"}):
            with self.assertRaises(aural_ws.HandshakeError) as e:
                aural_ws.WebSocket(d.url, hdrs)
            self.assertEqual(e.exception.status, 401)
        with ac.Client(d.url, headers=good) as c:
            self.assertEqual(c.list_streams(), [])
        self.stop_clean(d)

    def test_browser_login_cookie(self):
        # A browser cannot put the token in an Authorization header (not on
        # a page load, not on its WebSocket): /login?token= hands it over as
        # an HttpOnly, SameSite=Strict cookie, which then admits the page,
        # its files and its WebSocket like the header does.
        token = "s3cret-token-0123456789"
        d = self.start_http("--http-token-file", self.token_file(token),
                            addr="0.0.0.0:0")
        self.assertEqual(get(d.port, "/login")[0], 401)
        self.assertEqual(get(d.port, "/login?token=nope")[0], 401)
        self.assertEqual(get(d.port, "/login?token=" + token + "x")[0], 401)
        status, headers, _ = get(d.port, "/login?token=" + token)
        self.assertEqual(status, 303)
        self.assertEqual(headers["location"], "/")
        cookie = headers["set-cookie"]
        for attr in ("aural_token=" + token, "HttpOnly", "SameSite=Strict",
                     "Path=/"):
            self.assertIn(attr, cookie)
        self.assertNotIn("Secure", cookie)  # plain HTTP here
        jar = {"Cookie": "theme=dark; aural_token=" + token}
        self.assertEqual(get(d.port, "/", jar)[0], 200)
        self.assertEqual(get(d.port, "/app.js", jar)[0], 200)
        for bad in ("aural_token=" + token + "x", "aural_token=",
                    "other=" + token, "xaural_token=" + token):
            self.assertEqual(get(d.port, "/", {"Cookie": bad})[0], 401, bad)
        with self.assertRaises(aural_ws.HandshakeError) as e:
            aural_ws.WebSocket(d.url, {"Cookie": "aural_token=wrong-token-123456"})
        self.assertEqual(e.exception.status, 401)
        with ac.Client(d.url, headers=jar) as c:
            self.assertEqual(c.list_streams(), [])
        # A foreign origin is refused at the login too.
        self.assertEqual(get(d.port, "/login?token=" + token,
                             {"Origin": "https://evil.example"})[0], 403)
        self.stop_clean(d)

    def test_tls(self):
        cert = os.path.join(self.tmp, "cert.pem")
        key = os.path.join(self.tmp, "key.pem")
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
            "-keyout", key, "-out", cert, "-days", "1", "-subj",
            "/CN=127.0.0.1")
        d = self.start("--http", "127.0.0.1:0", "--http-cert", cert,
                       "--http-key", key)
        port = http_port(d)
        self.assertIn("https://127.0.0.1:%d/" % port, d.text())
        self.assertEqual(get(port, "/healthz", tls=True)[:3:2], (200, b"ok\n"))
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        # Offered HTTP/2 as a browser does, the server picks HTTP/1.1 (over
        # HTTP/2 every request was refused: its Host check reads Host, not
        # :authority).
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)),
                             server_hostname="127.0.0.1") as s:
            self.assertEqual(s.selected_alpn_protocol(), "http/1.1")
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                      b"Connection: close\r\n\r\n" % port)
            reply = b""
            while True:
                got = s.recv(4096)
                if not got:
                    break
                reply += got
            self.assertTrue(reply.startswith(b"HTTP/1.1 200"), reply[:200])
        ctx.set_alpn_protocols(["http/1.1"])
        ws = aural_ws.WebSocket("wss://127.0.0.1:%d/ws" % port,
                                ssl_context=ctx)
        ws.close()
        self.stop_clean(d)


class TestWebSocket(WebTest):
    def collect(self, client, stream):
        """Chunks (seq -> (embeddings, logits, text)) of one stream until
        it ends."""
        out = {}
        for ev in client.events(timeout=60):
            if isinstance(ev, ac.Chunk) and ev.name == stream:
                out[ev.seq] = ev
            if isinstance(ev, ac.StreamEnded) and ev.name == stream:
                return out
        raise AssertionError("no end of %s" % stream)

    def test_python_ws_subscriber_equals_unix_subscriber(self):
        d = self.start_http(model=test_daemon.CTC)
        inp = self.wav(4.0)
        outs = ["embeddings", "logits", "text"]
        unix = ac.Client(d.path, timeout=30)
        ws = ac.Client(d.url, timeout=30)
        unix.subscribe("talk", outputs=outs)
        ws.subscribe("talk", outputs=outs)
        # The audio comes over the WebSocket too.
        pusher = ac.Client(d.url, timeout=30)
        sid = pusher.open_audio("talk", rate=16000)
        import wave
        with wave.open(inp) as w:
            x = np.frombuffer(w.readframes(w.getnframes()), np.int16)
        pusher.send_audio(sid, x)
        pusher.close_audio(sid)
        a, b = self.collect(unix, "talk"), self.collect(ws, "talk")
        self.assertEqual(sorted(a), sorted(b))
        self.assertGreater(len(a), 5)
        for seq in a:
            self.assertTrue(np.array_equal(a[seq].emb, b[seq].emb))
            self.assertTrue(np.array_equal(a[seq].logits, b[seq].logits))
            self.assertEqual(a[seq].text, b[seq].text)
        for c in (unix, ws, pusher):
            c.close()
        self.stop_clean(d)

    def test_node_ws_subscriber_equals_unix_subscriber(self):
        d = self.start_http(model=test_daemon.CTC)
        inp = self.wav(3.0)
        unix = ac.Client(d.path, timeout=30)
        unix.subscribe("talk", outputs=["embeddings", "logits", "text"])
        node = subprocess.Popen(
            ["node", "--no-warnings", NODE_DUMP,
             d.url, "talk"], stdout=subprocess.PIPE, text=True)
        self.assertEqual(node.stdout.readline().strip(), "ready")
        run(test_daemon.AURAL, "send", "-q", "-s", d.path, "--name", "talk",
            inp)
        lines = [json.loads(x) for x in node.communicate(timeout=60)[0]
                 .splitlines()]
        self.assertEqual(node.returncode, 0)
        self.assertEqual(lines[-1], {"ended": "closed"})
        want = [{"seq": ch.seq,
                 "emb": hashlib.sha256(ch.emb.astype("<f4").tobytes())
                 .hexdigest(),
                 "logits": hashlib.sha256(ch.logits.astype("<f4").tobytes())
                 .hexdigest(),
                 "text": ch.text}
                for ch in sorted(self.collect(unix, "talk").values(),
                                 key=lambda c: c.seq)]
        self.assertGreater(len(want), 3)
        self.assertEqual(lines[:-1], want)
        unix.close()
        self.stop_clean(d)

    def test_push_faster_than_real_time_is_flow_controlled(self):
        # 120 s of audio sent at once over a WebSocket: the server stops
        # reading it while the stream's input is full and reads on as the
        # workers catch up; nothing is lost.
        d = self.start_http()
        with ac.Client(d.url, timeout=60) as c:
            sid = c.open_audio("fast", rate=16000, fmt="f32")
            c.subscribe("fast", outputs=["text"])
            x = (np.sin(np.arange(16000 * 120) * 0.01) * 0.3).astype(
                np.float32)
            c.send_audio(sid, x)
            done = c.close_audio(sid)
            seqs = []
            for ev in c.events(timeout=30):
                if isinstance(ev, ac.Chunk):
                    seqs.append(ev.seq)
                elif isinstance(ev, ac.StreamEnded):
                    break
        self.assertEqual(done["frames"], 1 + (16000 * 120 - 400) // 160)
        self.assertEqual(seqs, list(range(done["chunks"])))
        self.stop_clean(d)

    def test_websocket_clients_share_half_of_the_places(self):
        """Without --http-token-file any local user can open /ws (TCP
        carries no credentials), so the WebSocket clients together hold at
        most half of --max-clients and of --max-streams, as one group
        member does; with a token they are its holder's and not counted.
        They used to be able to take every place and leave the Unix
        socket's users LIMIT."""
        d = self.start_http("--max-clients", "4", "--max-streams", "4")
        ws = [ac.Client(d.url, timeout=10) for _ in range(2)]
        with self.assertRaises(aural_ws.HandshakeError) as e:
            ac.Client(d.url, timeout=10)
        self.assertEqual(e.exception.status, 503)
        self.assertIn("their share without --http-token-file", e.exception.text)
        ws[0].open_audio("web-1", rate=16000)
        ws[1].open_audio("web-2", rate=16000)
        with self.assertRaises(ac.ServerError) as e:
            ws[0].open_audio("web-3", rate=16000)
        self.assertEqual(e.exception.name, "LIMIT")
        self.assertIn("WebSocket clients", e.exception.message)
        # The server's own user still gets in and opens the other streams.
        unix = [ac.Client(d.path, timeout=10) for _ in range(2)]
        unix[0].open_audio("mine-1", rate=16000)
        unix[1].open_audio("mine-2", rate=16000)
        for c in ws + unix:
            c.close()
        self.stop_clean(d)
        # With a token, the clients are its holder's: every place.
        d = self.start_http("--max-clients", "3", "--max-streams", "3",
                            "--http-token-file", self.token_file())
        auth = {"Authorization": "Bearer s3cret-token-0123456789"}
        ws = [ac.Client(d.url, timeout=10, headers=auth) for _ in range(3)]
        for i, c in enumerate(ws):
            c.open_audio("web-%d" % i, rate=16000)
        for c in ws:
            c.close()
        self.stop_clean(d)

    def test_websocket_clients_share_half_of_the_custom_words_places(self):
        """The 16 subscriptions with custom words: the WebSocket clients
        without a token hold 8 of them together, as one group member does,
        and the Unix socket's users get the others."""
        d = self.start_http(model=test_daemon.TestWords.custom_model(self))
        ws = [ac.Client(d.url, timeout=30) for _ in range(2)]
        for i in range(8):
            ws[i % 2].subscribe("web-%d" % i, outputs=("words",),
                                vocabulary=["Dashwood"])
        with self.assertRaises(ac.ServerError) as e:
            ws[0].subscribe("web-8", outputs=("words",),
                            vocabulary=["Dashwood"])
        self.assertEqual(e.exception.name, "LIMIT")
        self.assertIn("WebSocket clients", e.exception.message)
        with ac.Client(d.path, timeout=30) as c:
            for i in range(8):
                c.subscribe("mine-%d" % i, outputs=("words",),
                            vocabulary=["Dashwood"])
        for c in ws:
            c.close()
        self.stop_clean(d)

    def test_shutdown_with_websocket_clients_exits_zero(self):
        d = self.start_http("--file", SAMPLE, "--realtime")
        clients = [ac.Client(d.url, timeout=10) for _ in range(3)]
        for c in clients:
            c.subscribe(all=True)
        time.sleep(1.0)
        self.stop_clean(d)
        for c in clients:
            c.close()


if __name__ == "__main__":
    test_daemon.main(__name__)
