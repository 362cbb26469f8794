#!/usr/bin/python3
"""Cluster mode (docs/CLUSTER.md): aurald nodes sharing streams through a
real redis-server on a private Unix socket.

Run by meson (`meson test -C build cluster`) with AURALD_BIN, AURAL_BIN and
AURAL_TEST_DATA set, like test_daemon.py, whose helpers it uses. Streams
are produced here with the layout of docs/CLUSTER.md §1 (the producer the
CLI has is tested in test_cluster_clients.py and used here once), and every
chunk read back from Redis is compared with `aural encode` of the same
audio.
"""

import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import wave

import numpy as np
import redis
from prometheus_client.parser import text_string_to_metric_families

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_daemon as td  # noqa: E402

CHUNK = struct.Struct("<QQIIqqqqIIHBBI")  # PROTOCOL.md §5, 72 bytes
FINAL = 1


class Redis:
    """A private redis-server: Unix socket only, in the test's folder."""

    def __init__(self, folder, aof=False):
        self.folder = folder
        self.sock = os.path.join(folder, "redis.sock")
        self.aof = aof
        self.start()

    def start(self):
        args = ["redis-server", "--port", "0", "--unixsocket", self.sock,
                "--unixsocketperm", "700", "--dir", self.folder,
                "--save", "", "--appendonly", "yes" if self.aof else "no",
                "--appendfsync", "always"]
        self.log = open(os.path.join(self.folder, "redis.log"), "a")
        self.proc = subprocess.Popen(args, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client().ping()
                return
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise AssertionError("redis-server did not start")
                time.sleep(0.02)

    def client(self):
        return redis.Redis(unix_socket_path=self.sock, socket_timeout=30)

    def url(self):
        return "unix:" + self.sock

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


def read_wav(path):
    with wave.open(path) as w:
        assert w.getsampwidth() == 2
        return w.getframerate(), w.getnchannels(), w.readframes(w.getnframes())


def patient(call, *args, **kw):
    """A Redis write retried while Redis is away (a producer that outlives
    a Redis restart); an entry already stored counts as written."""
    while True:
        try:
            return call(*args, **kw)
        except (redis.exceptions.ConnectionError,
                redis.exceptions.TimeoutError):
            time.sleep(0.1)
        except redis.exceptions.ResponseError as e:
            if "equal or smaller" in str(e):
                return None
            raise


def produce(r, name, path, block_ms=100, realtime=True, stop=None):
    """Announces a stream and writes its audio as a producer does (ID
    FIRST_SAMPLE-1, then the end entry), paced at 1x when realtime."""
    rate, channels, pcm = read_wav(path)
    frame_bytes = 2 * channels
    n = len(pcm) // frame_bytes
    key = "aural:{%s}:audio" % name
    r.hset("aural:{%s}:meta" % name,
           mapping={"rate": rate, "channels": channels, "format": "s16",
                    "created_us": int(time.time() * 1e6)})
    r.xadd("aural:announce", {"name": name, "rate": rate,
                              "channels": channels, "format": "s16"})
    block = rate * block_ms // 1000
    t0 = time.monotonic()
    for at in range(0, n, block):
        if stop is not None and stop.is_set():
            return
        k = min(block, n - at)
        if realtime:
            wait = t0 + at / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        patient(r.xadd, key,
                {"pcm": pcm[at * frame_bytes:(at + k) * frame_bytes]},
                id="%d-1" % at)
    patient(r.xadd, key, {"end": "1"}, id="%d-1" % n)


def produce_all(r_factory, streams, **kw):
    """Produces every (name, path) at once, one thread each."""
    threads = [threading.Thread(target=produce,
                                args=(r_factory(), name, path), kwargs=kw)
               for name, path in streams]
    for t in threads:
        t.start()
    return threads


def decode_chunk(payload):
    (seq, first, n, flags, _start, _cap, _ready, _emit, d, v, outputs,
     dtype, _res, text_bytes) = CHUNK.unpack_from(payload)
    assert dtype == 0, dtype
    at = CHUNK.size
    emb = logits = None
    if outputs & 1:
        emb = np.frombuffer(payload, np.float32, n * d, at).reshape(n, d)
        at += 4 * n * d
    if outputs & 2:
        logits = np.frombuffer(payload, np.float32, n * v, at).reshape(n, v)
        at += 4 * n * v
    text = payload[at:at + text_bytes].decode() if outputs & 4 else None
    at += text_bytes if outputs & 4 else 0
    assert at == len(payload), (at, len(payload))
    return {"seq": seq, "first_frame": first, "n": n,
            "final": bool(flags & FINAL), "emb": emb, "logits": logits,
            "text": text}


def read_outputs(r, name):
    """Every chunk of the stream in Redis, by entry ID."""
    out = []
    for eid, fields in r.xrange("aural:{%s}:out" % name):
        c = decode_chunk(fields[b"chunk"])
        ms, seq = eid.decode().split("-")
        assert int(ms) == c["seq"] and seq == "1", eid
        c["final_field"] = fields.get(b"final") == b"1"
        out.append(c)
    return out


def wait_finished(r, names, timeout):
    """Waits until each stream's final chunk is in Redis."""
    deadline = time.monotonic() + timeout
    left = set(names)
    while left and time.monotonic() < deadline:
        for name in list(left):
            last = r.xrevrange("aural:{%s}:out" % name, count=1)
            if last and last[0][1].get(b"final") == b"1":
                left.discard(name)
        time.sleep(0.1)
    return left


class ClusterTest(td.DaemonTest):
    model = td.CTC

    def setUp(self):
        super().setUp()
        self.redis = Redis(self.tmp, aof=getattr(self, "aof", False))
        self.r = self.redis.client()

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            self.redis.kill()

    def node(self, name, *args):
        folder = os.path.join(self.tmp, name)
        os.makedirs(folder, exist_ok=True)
        return self.start("--cluster", self.redis.url(), "--cluster-node",
                          name, "--no-config", *args, model=self.model,
                          socket_path=os.path.join(folder, "aural.sock"))

    def send(self, name, path, *args):
        """`aural send --cluster` of path as stream name, at 1x."""
        return subprocess.Popen([td.AURAL, "send", "-q", "--cluster",
                                 self.redis.url(), "--name", name,
                                 "--realtime", *args, path],
                                stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def sent(self, procs):
        for p in procs:
            _, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)

    def whole(self, path):
        """`aural encode` of the file: embeddings and logits."""
        return (self.encode(path, model=self.model),
                self.encode(path, model=self.model, output="logits"))

    def check_stream(self, name, path, tol=0.0, want=None):
        """The stream's outputs in Redis: seqs 0..n-1 once each, the last
        final, embeddings and logits those of `aural encode`."""
        chunks = read_outputs(self.r, name)
        seqs = [c["seq"] for c in chunks]
        self.assertEqual(seqs, list(range(len(chunks))), name)
        self.assertTrue(chunks[-1]["final"] and chunks[-1]["final_field"])
        self.assertFalse(any(c["final"] for c in chunks[:-1]))
        emb = np.concatenate([c["emb"] for c in chunks])
        logits = np.concatenate([c["logits"] for c in chunks])
        want_emb, want_logits = want or self.whole(path)
        self.assertEqual(emb.shape, want_emb.shape, name)
        if tol == 0:
            np.testing.assert_array_equal(emb, want_emb, name)
            np.testing.assert_array_equal(logits, want_logits, name)
        else:
            np.testing.assert_allclose(emb, want_emb, rtol=0, atol=tol)
            np.testing.assert_allclose(logits, want_logits, rtol=0, atol=tol)
        return chunks


class TestCluster(ClusterTest):
    def test_streams_across_nodes(self):
        """Three nodes, 30 streams sent at real time by `aural send
        --cluster` (some at 22.05 kHz): every stream whole, its chunks once
        each, bit-identical to `aural encode`."""
        nodes = [self.node("n%d" % i) for i in range(3)]
        files = [self.wav(4 + 0.37 * k, rate=22050 if k % 2 else 16000,
                          name="f%d.wav" % k) for k in range(5)]
        paths = [files[i % 5] for i in range(30)]
        names = ["s%d" % i for i in range(30)]
        self.sent([self.send(n, p) for n, p in zip(names, paths)])
        self.assertEqual(wait_finished(self.r, names, 60), set())
        owners = set()
        wants = {}
        owners = set()
        wants = {}
        bad = []
        for name, path in zip(names, paths):
            try:
                self.check_stream(name, path)
            except AssertionError as e:
                bad.append((name, str(e)[:300]))
        print(bad, [self.r.hget("aural:{%s}:meta" % n, "node") for n in names])
        for name, path in zip(names, paths):
            key = os.path.getsize(path)
            if key not in wants:
                wants[key] = self.whole(path)
            self.check_stream(name, path, want=wants[key])
            owners.add(self.r.hget("aural:{%s}:meta" % name, "node"))
        self.assertEqual(len(owners), 3, owners)  # every node took some
        events = self.r.xrange("aural:events")
        ended = [f for _, f in events if f[b"type"] == b"ended"]
        self.assertEqual(len(ended), 30)
        self.assertEqual(self.r.xlen("aural:announce"), 0)  # all done
        for n in nodes:
            self.stop_clean(n)
        self.assertEqual(self.r.zcard("aural:nodes"), 0)

    def test_failover(self):
        """kill -9 of a node with 10 live streams: the others take each
        over within 3 s of its heartbeat's expiry, and every stream's
        chunks are there once each, bit-identical to `aural encode` (the
        issue asks 1e-4; the windows refilled give the same bits)."""
        a = self.node("a", "--cluster-ttl", "2")
        # At the model's rate, or sent by `aural send`, which converts to
        # it: a resumed stream then restarts no resampler (docs/CLUSTER.md
        # §3, on streams at other rates).
        stereo = os.path.join(self.tmp, "f2.wav")
        td.run("sox", td.SAMPLE, "-r", "22050", "-c", "2", "-b", "16",
               stereo, "repeat", "1", "trim", "0", "13")
        files = [self.wav(14, name="f0.wav"), self.wav(12.5, name="f1.wav"),
                 stereo]
        names = ["v%d" % i for i in range(10)]
        paths = [files[i % 2] for i in range(6)] + [stereo] * 4
        threads = produce_all(self.redis.client,
                              list(zip(names[:6], paths[:6])))
        procs = [self.send(n, p) for n, p in zip(names[6:], paths[6:])]
        def on_a():
            return [n for n in names
                    if self.r.hget("aural:{%s}:meta" % n, "node") == b"a"]
        deadline = time.monotonic() + 30
        while len(on_a()) < len(names) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertEqual(on_a(), names)  # all taken by a, the only node
        others = [self.node("b", "--cluster-ttl", "2"),
                  self.node("c", "--cluster-ttl", "2")]
        deadline = time.monotonic() + 30
        while ((any(self.r.xlen("aural:{%s}:out" % n) <= 2 for n in names)
                or self.r.exists("aural:node:b", "aural:node:c") < 2)
               and time.monotonic() < deadline):
            time.sleep(0.1)
        for name in names:  # all live on a, with chunks out
            self.assertEqual(self.r.hget("aural:{%s}:meta" % name, "node"),
                             b"a")
            self.assertGreater(self.r.xlen("aural:{%s}:out" % name), 2)
        expiry = time.time() + self.r.pttl("aural:node:a") / 1000
        a.proc.kill()
        a.proc.wait()
        a.log.close()
        self.daemons.remove(a)
        for t in threads:
            t.join()
        self.sent(procs)
        self.assertEqual(wait_finished(self.r, names, 60), set())
        took = {}
        for eid, f in self.r.xrange("aural:events"):
            if f[b"type"] == b"resumed":
                took[f[b"stream"].decode()] = int(eid.split(b"-")[0]) / 1000
        self.assertEqual(sorted(took), sorted(names))
        late = max(took.values()) - expiry
        print("  taken over %.2f s after the heartbeat expired at most" %
              late)
        self.assertLess(late, 3.0)
        wants = {path: self.whole(path) for path in files}
        for name, path in zip(names, paths):
            self.check_stream(name, path, want=wants[path])  # bit-identical
        for d in others:
            self.stop_clean(d)

    def test_redis_restart(self):
        """Redis stopped for 5 s, then killed and restarted from its AOF:
        the nodes survive and reconnect, the cluster streams finish whole,
        and a local stream's subscriber sees nothing of it."""
        self.redis.kill()
        self.redis = Redis(self.tmp, aof=True)
        self.r = self.redis.client()
        nodes = [self.node("a"), self.node("b")]
        files = [self.wav(14, name="f0.wav"), self.wav(13, name="f1.wav")]
        names = ["w%d" % i for i in range(6)]
        paths = [files[i % 2] for i in range(6)]
        threads = produce_all(self.redis.client, list(zip(names, paths)))
        local_in = self.wav(16, name="local.wav")
        local_out = os.path.join(self.tmp, "local.npy")
        sub = subprocess.Popen([td.AURAL, "sub", "-s", nodes[0].path,
                                "--stream", "here", "-o", local_out],
                               stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        td.wait_subscribed(nodes[0].path, "here", sub)
        send = subprocess.Popen([td.AURAL, "send", "-q", "-s",
                                 nodes[0].path, "--name", "here",
                                 "--realtime", local_in])
        time.sleep(3)
        self.redis.proc.send_signal(signal.SIGSTOP)
        time.sleep(5)
        self.redis.kill()  # SIGKILL, stopped or not
        time.sleep(0.5)
        self.redis.start()
        self.r = self.redis.client()
        for t in threads:
            t.join()
        self.assertEqual(wait_finished(self.r, names, 60), set())
        self.assertEqual(send.wait(60), 0)
        _, err = sub.communicate(timeout=60)
        self.assertEqual(sub.returncode, 0, err)
        np.testing.assert_array_equal(np.load(local_out),
                                      self.encode(local_in, model=self.model))
        wants = {path: self.whole(path) for path in files}
        for name, path in zip(names, paths):
            self.check_stream(name, path, want=wants[path])
        for d in nodes:
            text = d.text()
            self.assertEqual(text.count("cluster: reconnected"), 1, text)
            self.stop_clean(d)

    def test_hostile_entries(self):
        """Bad announcements and bad audio end only their own stream, with
        an `ended` event naming what was wrong; a good stream beside them
        is untouched and the node stays up."""
        d = self.node("a")
        good = self.wav(3, name="good.wav")
        threads = produce_all(self.redis.client, [("good", good)])
        r = self.r

        def announce(name, **fields):
            f = {"name": name, "rate": 16000, "channels": 1, "format": "s16"}
            f.update(fields)
            r.xadd("aural:announce", f)

        announce("badrate", rate="fast")
        announce("badfmt", format="u8")
        announce("bad{name}")
        cases = {
            "gap": [("0-1", {"pcm": b"\0" * 3200}),
                    ("3200-1", {"pcm": b"\0" * 3200})],
            "odd": [("0-1", {"pcm": b"\0" * 3})],
            "huge": [("0-1", {"pcm": b"\0" * 2 * 16001})],
            "noid": [("0-2", {"pcm": b"\0" * 320})],
            "early_end": [("0-1", {"pcm": b"\0" * 320}), ("5-1", {"end": "1"})],
            "nothing": [("0-1", {"what": "1"})],
        }
        for name, entries in cases.items():
            announce(name)
            for eid, fields in entries:
                r.xadd("aural:{%s}:audio" % name, fields, id=eid)
        announce("nan", format="f32")
        r.xadd("aural:{nan}:audio",
               {"pcm": struct.pack("<4f", 0, 0, float("nan"), 0)}, id="0-1")
        for t in threads:
            t.join()
        self.assertEqual(wait_finished(r, ["good"], 30), set())
        self.check_stream("good", good)
        deadline = time.monotonic() + 10
        want = set(cases) | {"nan", "badrate", "badfmt"}
        while time.monotonic() < deadline:
            ended = {f[b"stream"].decode(): f for _, f in
                     r.xrange("aural:events") if f[b"type"] == b"ended"}
            if want <= set(ended):
                break
            time.sleep(0.1)
        for name in want:
            self.assertIn(name, ended)
            self.assertEqual(ended[name][b"reason"], b"error", name)
        self.assertIn(b"expected audio from frame 1600",
                      ended["gap"][b"message"])
        self.assertIn(b"non-finite", ended["nan"][b"message"])
        self.assertIn(b"rate", ended["badrate"][b"message"])
        d.wait_text("bad{name}")
        # Nothing is left pending: bad streams are not retried forever.
        self.assertEqual(r.xpending("aural:announce", "nodes")["pending"], 0)
        self.stop_clean(d)

    def test_numbers_read_strictly(self):
        """An announcement's rate and channel count are whole decimal
        numbers: one with a space, an exponent, a base prefix, a sign or a
        fraction is refused naming the field, not read as strtod reads
        it; a plain one beside them is served."""
        d = self.node("a")
        bad = {"space": {"rate": " 16000"}, "exp": {"rate": "1.6e4"},
               "hex": {"rate": "0x3e80"}, "frac": {"rate": "16000.5"},
               "plus": {"rate": "+16000"}, "trail": {"rate": "16000 "},
               "chplus": {"channels": "+1"}, "chzero": {"channels": "01x"}}
        for name, f in bad.items():
            fields = {"name": name, "rate": "16000", "channels": "1",
                      "format": "s16"}
            fields.update(f)
            self.r.xadd("aural:announce", fields)
        # A start time beyond int64 was read as a count and became a
        # negative time in the stream's chunks.
        self.r.hset("aural:{far}:meta", "start_us", "18446744073709551615")
        for name in ["plain", "far"]:
            self.r.xadd("aural:announce", {"name": name, "rate": "16000",
                                           "channels": "1", "format": "s16"})
            self.r.xadd("aural:{%s}:audio" % name, {"pcm": b"\0" * 3200},
                        id="0-1")
            self.r.xadd("aural:{%s}:audio" % name, {"end": "1"}, id="1600-1")
        self.assertEqual(wait_finished(self.r, ["plain", "far"], 30), set())
        for name in ["plain", "far"]:
            chunk = self.r.xrange("aural:{%s}:out" % name)[0][1][b"chunk"]
            start_us = CHUNK.unpack_from(chunk)[4]
            self.assertGreater(start_us, 0, name)
        d.wait_text('start_us "18446744073709551615" is not a time')
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ended = {f[b"stream"].decode(): f for _, f in
                     self.r.xrange("aural:events") if f[b"type"] == b"ended"}
            if set(bad) <= set(ended):
                break
            time.sleep(0.05)
        self.assertEqual(ended["plain"][b"reason"], b"eof")
        for name, f in bad.items():
            self.assertIn(name, ended)
            self.assertEqual(ended[name][b"reason"], b"error", name)
            what = next(iter(f))
            self.assertIn(("%s \"%s\"" % (what, f[what])).encode(),
                          ended[name][b"message"], name)
        self.stop_clean(d)

    def test_duplicated_fields(self):
        """An entry may name a field twice (Redis keeps both): the node
        read the first and a reader taking the last (a Python dict) would
        read another entry. Such an announcement or audio entry, or one
        of too many fields, is refused naming the field."""
        d = self.node("a")
        x = self.r.execute_command
        base = ["name", "dup", "rate", "16000", "channels", "1",
                "format", "s16"]
        x("XADD", "aural:announce", "*", *base, "rate", "8000")
        many = ["name", "many"] + base[2:]
        for i in range(20):
            many += ["x%d" % i, "1"]
        x("XADD", "aural:announce", "*", *many)
        self.r.xadd("aural:announce", {"name": "dupaudio", "rate": "16000",
                                       "channels": "1", "format": "s16"})
        x("XADD", "aural:{dupaudio}:audio", "0-1", "pcm", b"\0" * 320,
          "pcm", b"\1" * 320)
        want = {"dup": b'the field "rate" is there twice',
                "many": b"24 fields, more than 16",
                "dupaudio": b'audio entry 0-1: the field "pcm" is there '
                            b'twice'}
        ended = self.ended_beside_a_plain_stream(want)
        for name, what in want.items():
            self.assertEqual(ended[name][b"reason"], b"error", name)
            self.assertEqual(ended[name][b"message"], what)
        self.stop_clean(d)

    def ended_beside_a_plain_stream(self, want):
        """Sends a well-formed stream "plain" through the node and waits
        for it to end at its end of file (the node still serves), then for
        an `ended` event of every stream named in want; returns the last
        `ended` event's fields of each stream by name."""
        self.r.xadd("aural:announce", {"name": "plain", "rate": "16000",
                                       "channels": "1", "format": "s16"})
        self.r.xadd("aural:{plain}:audio", {"pcm": b"\0" * 3200}, id="0-1")
        self.r.xadd("aural:{plain}:audio", {"end": "1"}, id="1600-1")
        self.assertEqual(wait_finished(self.r, ["plain"], 10), set())
        ended = {}
        deadline = time.monotonic() + 5
        while not set(want) <= set(ended) and time.monotonic() < deadline:
            ended = {f[b"stream"].decode(): f for _, f in
                     self.r.xrange("aural:events") if f[b"type"] == b"ended"}
            time.sleep(0.05)
        self.assertEqual(ended["plain"][b"reason"], b"eof")
        return ended

    def test_wrong_types(self):
        """A stream's audio key of another Redis type (a string where a
        stream is expected) made the XREAD of every stream's audio fail
        with WRONGTYPE, again at once, for ever: no stream of the node
        got audio. That stream alone ends now, naming its key. A meta,
        checkpoint or output key of another type (every write to it
        failing) refuses the announcement, naming the key."""
        d = self.node("a")
        want = {"wt_audio": "audio is a string, not a stream",
                "wt_meta": "meta is a string, not a hash",
                "wt_ckpt": "ckpt is a list, not a hash",
                "wt_out": "out is a hash, not a stream"}
        self.r.set("aural:{wt_audio}:audio", "x")
        self.r.set("aural:{wt_meta}:meta", "x")
        self.r.rpush("aural:{wt_ckpt}:ckpt", "x")
        self.r.hset("aural:{wt_out}:out", "x", "1")
        for name in list(want) + ["late"]:
            self.r.xadd("aural:announce", {"name": name, "rate": "16000",
                                           "channels": "1", "format": "s16"})
        # A key that becomes a string while the stream runs.
        want["late"] = "audio is a string, not a stream"
        self.r.xadd("aural:{late}:audio", {"pcm": b"\0" * 320}, id="0-1")
        deadline = time.monotonic() + 10
        while (b"late", b"started") not in {
                (f[b"stream"], f[b"type"])
                for _, f in self.r.xrange("aural:events")}:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
        self.r.delete("aural:{late}:audio")
        self.r.set("aural:{late}:audio", "x")
        ended = self.ended_beside_a_plain_stream(want)
        for name, what in want.items():
            self.assertEqual(ended[name][b"reason"], b"error", name)
            self.assertEqual(ended[name][b"message"],
                             ("aural:{%s}:%s" % (name, what)).encode())
        self.assertLess(d.text().count("WRONGTYPE"), 5, d.text())
        self.stop_clean(d)

    def test_bad_checkpoint_is_lost_once(self):
        """A checkpoint no stream can resume from (not a number, or a
        chunk past any stream's) loses that stream once, with a `lost`
        event naming the checkpoint: it is not handed from node to node
        for ever. A good stream beside it is untouched."""
        d = self.node("a")
        good = self.wav(2, name="good.wav")
        threads = produce_all(self.redis.client, [("good", good)])
        r = self.r
        bad = {"huge": str(2**64 - 1), "past": str(2**40 + 1),
               "word": "12x"}
        for name, chunks in bad.items():
            r.hset("aural:{%s}:ckpt" % name, "chunks", chunks)
            r.xadd("aural:{%s}:audio" % name, {"pcm": b"\0" * 3200},
                   id="0-1")
            r.xadd("aural:announce", {"name": name, "rate": 16000,
                                      "channels": 1, "format": "s16"})
        for t in threads:
            t.join()
        self.assertEqual(wait_finished(r, ["good"], 30), set())
        self.check_stream("good", good)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            lost = {f[b"stream"].decode(): f for _, f in
                    r.xrange("aural:events") if f[b"type"] == b"lost"}
            if set(bad) <= set(lost):
                break
            time.sleep(0.1)
        self.assertEqual(set(lost), set(bad))
        for name, chunks in bad.items():
            self.assertEqual(lost[name][b"reason"], b"error")
            self.assertIn(b"checkpoint", lost[name][b"message"])
            self.assertIn(chunks.encode(), lost[name][b"message"])
        self.assertEqual(r.xpending("aural:announce", "nodes")["pending"], 0)
        self.assertNotIn("handed back", d.text())
        self.stop_clean(d)

    def test_lost_consumer_group(self):
        """aural:announce deleted under a running node (FLUSHALL, DEL, an
        eviction) takes its consumer group with it: the node creates the
        group again, says so once, and takes the next stream."""
        d = self.node("a")
        r = self.r
        deadline = time.monotonic() + 10
        while not r.exists("aural:node:a"):
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        self.assertEqual(r.xinfo_groups("aural:announce")[0]["name"],
                         b"nodes")
        r.delete("aural:announce")
        path = self.wav(2, name="after.wav")
        for t in produce_all(self.redis.client, [("after", path)]):
            t.join()
        self.assertEqual(wait_finished(r, ["after"], 30), set())
        self.check_stream("after", path)
        text = d.text()
        self.assertEqual(text.count("is gone; creating it again"), 1, text)
        self.assertNotIn("NOGROUP", text)
        self.stop_clean(d)

    def test_producer_that_stops_without_the_end(self):
        """A producer that dies before its end entry does not hold the
        stream for ever: after --cluster-idle without new audio the
        stream ends with an error naming the wait, its final chunk is
        published (a consumer stops), and its announcement is done with.
        A producer slower than that limit only pauses it."""
        d = self.node("a", "--cluster-idle", "2")
        r = self.r
        r.xadd("aural:announce", {"name": "stalled", "rate": 16000,
                                  "channels": 1, "format": "s16"})
        r.xadd("aural:{stalled}:audio", {"pcm": b"\0" * 32000}, id="0-1")
        t0 = time.monotonic()
        self.assertEqual(wait_finished(r, ["stalled"], 30), set())
        self.assertGreater(time.monotonic() - t0, 2)
        ended = [f for _, f in r.xrange("aural:events")
                 if f[b"type"] == b"ended" and f[b"stream"] == b"stalled"]
        self.assertEqual(len(ended), 1)
        self.assertEqual(ended[0][b"reason"], b"error")
        self.assertIn(b"no audio added for 2 s after frame 16000",
                      ended[0][b"message"])
        chunks = read_outputs(r, "stalled")
        self.assertEqual([c["seq"] for c in chunks],
                         list(range(len(chunks))))
        # 1 s holds (16000 - 400) / 160 + 1 frames of 25 ms every 10 ms
        self.assertEqual(sum(c["n"] for c in chunks), 98)
        self.assertEqual(r.xlen("aural:announce"), 0)
        self.assertFalse(r.exists("aural:{stalled}:audio"))
        # Its consumers learn that the stream was cut short: the final
        # entry says why, aural sub -o writes nothing and exits 1, and
        # the Python client raises after the last chunk.
        final = r.xrevrange("aural:{stalled}:out", count=1)[0][1]
        self.assertIn(b"no audio added", final[b"error"])
        out = os.path.join(self.tmp, "stalled.npy")
        p = td.run(td.AURAL, "sub", "--cluster", self.redis.url(),
                   "--stream", "stalled", "-o", out, check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("ended with an error: no audio added", p.stderr)
        self.assertFalse(os.path.exists(out))
        p = td.run(td.AURAL, "sub", "--cluster", self.redis.url(),
                   "--stream", "stalled", check=False)
        self.assertIn("ended: error: no audio added", p.stdout)
        got = []
        with self.assertRaisesRegex(td.ac.ClusterError, "ended with an error"):
            for ck in td.ac.cluster_subscribe(self.redis.url(), "stalled"):
                got.append(ck.seq)
        self.assertEqual(got, [c["seq"] for c in chunks])
        self.stop_clean(d)

    def test_stream_without_frames_ends_for_its_consumers(self):
        """A stream that ends before its first frame (no audio, or bad
        audio in its first entry) has no chunk; its end goes out as an
        empty final chunk 0. Without it consumers, who stop at the final
        entry, waited for ever (aural sub --cluster hung)."""
        d = self.node("a")
        empty = os.path.join(self.tmp, "empty.wav")
        with wave.open(empty, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
        td.run(td.AURAL, "send", "-q", "--cluster", self.redis.url(),
               "--name", "empty", empty)
        self.assertEqual(wait_finished(self.r, ["empty"], 30), set())
        chunks = read_outputs(self.r, "empty")
        self.assertEqual([(c["seq"], c["n"], c["final"]) for c in chunks],
                         [(0, 0, True)])
        out = os.path.join(self.tmp, "empty.npy")
        p = td.run(td.AURAL, "sub", "--cluster", self.redis.url(),
                   "--stream", "empty", "-o", out, timeout=30)
        self.assertIn("ended: eof, 0 frames", p.stdout)
        self.assertEqual(np.load(out).shape, (0, 32))
        got = [ck.seq for ck in td.ac.cluster_subscribe(self.redis.url(),
                                                        "empty")]
        self.assertEqual(got, [0])
        ended = [f for _, f in self.r.xrange("aural:events")
                 if f[b"type"] == b"ended" and f[b"stream"] == b"empty"]
        self.assertEqual([f[b"chunks"] for f in ended], [b"1"])  # the empty one
        # Bad audio in the first entry: the empty final chunk says why.
        self.r.xadd("aural:announce", {"name": "bad", "rate": 16000,
                                       "channels": 1, "format": "s16"})
        self.r.xadd("aural:{bad}:audio", {"pcm": b"\0" * 3}, id="0-1")
        self.assertEqual(wait_finished(self.r, ["bad"], 30), set())
        p = td.run(td.AURAL, "sub", "--cluster", self.redis.url(),
                   "--stream", "bad", "-o", out + "2", check=False,
                   timeout=30)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("ended with an error", p.stderr)
        self.assertFalse(os.path.exists(out + "2"))
        self.stop_clean(d)

    def test_consumers_of_a_stream_no_node_encodes(self):
        """A stream whose announcement is refused, or that cannot resume,
        says why in its meta hash: `aural sub --cluster` and the Python
        client waiting for it fail with that message instead of waiting
        for ever, its audio is deleted and its keys expire. A refused
        second announcement of a live stream's name leaves it alone."""
        sys.path.insert(0, os.path.join(HERE, "..", "..", "tools",
                                        "python"))
        import aural_client
        r = self.r
        subs = {name: subprocess.Popen(
            [td.AURAL, "sub", "--cluster", self.redis.url(), "--stream",
             name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True) for name in ("badfmt", "badck")}
        d = self.node("a")
        good = self.wav(3, name="good.wav")
        threads = produce_all(self.redis.client, [("good", good)])
        deadline = time.monotonic() + 10
        while r.hget("aural:{good}:meta", "node") is None:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        fields = {"rate": 16000, "channels": 1, "format": "u8"}
        r.xadd("aural:announce", dict(fields, name="good"))
        r.hset("aural:{badfmt}:meta", mapping=fields)
        r.xadd("aural:{badfmt}:audio", {"pcm": b"\0" * 3200}, id="0-1")
        r.xadd("aural:announce", dict(fields, name="badfmt"))
        r.hset("aural:{badck}:ckpt", "chunks", "12x")
        r.xadd("aural:{badck}:audio", {"pcm": b"\0" * 3200}, id="0-1")
        r.xadd("aural:announce", dict(fields, name="badck", format="s16"))
        errs = {}
        for name, p in subs.items():
            _, errs[name] = p.communicate(timeout=30)
            self.assertEqual(p.returncode, 1, errs[name])
            self.assertIn("%s: no node will encode it: " % name, errs[name])
        self.assertIn('format "u8"', errs["badfmt"])
        self.assertIn('chunks "12x"', errs["badck"])
        with self.assertRaises(aural_client.ClusterError) as e:
            next(aural_client.cluster_subscribe(self.redis.url(), "badck"))
        self.assertIn("checkpoint", str(e.exception))
        for name in ("badfmt", "badck"):
            self.assertFalse(r.exists("aural:{%s}:audio" % name))
            self.assertGreater(r.pttl("aural:{%s}:meta" % name), 0)
        for t in threads:
            t.join()
        self.assertEqual(wait_finished(r, ["good"], 30), set())
        self.check_stream("good", good)
        self.assertIsNone(r.hget("aural:{good}:meta", "error"))
        self.assertEqual(r.xlen("aural:announce"), 0)
        self.stop_clean(d)

    def test_refused_chunk_leaves_the_checkpoint(self):
        """A chunk that Redis refuses as stored already (another owner of
        the stream went further: a node that paused past its heartbeat's
        expiry and went on) does not write the checkpoint, which would
        move it back to audio the other owner may have trimmed."""
        d = self.node("a")
        r = self.r
        r.xadd("aural:{ahead}:out", {"chunk": b"stored by another owner"},
               id="1000-1")
        r.xadd("aural:announce", {"name": "ahead", "rate": 16000,
                                  "channels": 1, "format": "s16"})
        r.xadd("aural:{ahead}:audio", {"pcm": b"\0" * 32000}, id="0-1")
        r.xadd("aural:{ahead}:audio", {"pcm": b"\0" * 32000},
               id="16000-1")
        r.xadd("aural:{ahead}:audio", {"end": "1"}, id="32000-1")
        deadline = time.monotonic() + 30
        while not any(f[b"type"] == b"ended"
                      for _, f in r.xrange("aural:events")):
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        self.assertEqual(r.xlen("aural:{ahead}:out"), 1)
        self.assertEqual(r.hgetall("aural:{ahead}:ckpt"), {})
        self.assertNotIn("publishing a chunk", d.text())
        self.stop_clean(d)

    def test_repeated_announcement(self):
        """A second announcement of a live stream's name (a producer's
        bug, a hostile writer), on the node that runs the stream or on
        another, is refused at once with a `refused` event naming both
        announcements: the stream has one owner and finishes whole."""
        nodes = [self.node("a"), self.node("b")]
        r = self.r
        path = self.wav(4, name="talk.wav")
        threads = produce_all(self.redis.client, [("talk", path)])
        deadline = time.monotonic() + 10
        while r.xlen("aural:{talk}:out") < 2:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        first = r.xrange("aural:announce")[0][0]
        again = [r.xadd("aural:announce", {"name": "talk", "rate": 16000,
                                           "channels": 1, "format": "s16"})
                 for _ in range(2)]
        for t in threads:
            t.join()
        self.assertEqual(wait_finished(r, ["talk"], 30), set())
        self.check_stream("talk", path)
        deadline = time.monotonic() + 10
        while True:
            refused = [f for _, f in r.xrange("aural:events")
                       if f[b"type"] == b"refused"]
            if len(refused) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(len(refused), 2)
        for f, entry in zip(sorted(refused, key=lambda f: f[b"message"]),
                            sorted(again)):
            self.assertEqual(f[b"stream"], b"talk")
            self.assertIn(entry, f[b"message"])
            self.assertIn(first, f[b"message"])
        self.assertEqual(r.hget("aural:{talk}:meta", "entry"), first)
        kinds = [f[b"type"] for _, f in r.xrange("aural:events")
                 if f[b"stream"] == b"talk"]
        self.assertEqual(kinds.count(b"started"), 1)
        self.assertEqual(kinds.count(b"ended"), 1)
        self.assertEqual(r.xlen("aural:announce"), 0)
        for d in nodes:
            self.assertNotIn("handed back", d.text())
            self.stop_clean(d)

    def test_silent_nodes_leave_the_list(self):
        """A node that never stopped cleanly stays in aural:nodes (shown
        dead by aural stats) for --cluster-expire, then a live node's
        heartbeat removes it; one silent for less stays."""
        now = int(time.time() * 1000)
        self.r.zadd("aural:nodes", {"gone-long": now - 7200 * 1000,
                                    "gone-lately": now - 600 * 1000})
        d = self.node("a", "--cluster-expire", "3600")
        deadline = time.monotonic() + 15
        while self.r.zscore("aural:nodes", "gone-long") is not None:
            self.assertLess(time.monotonic(), deadline, "gone-long stayed")
            time.sleep(0.05)
        self.assertIsNotNone(self.r.zscore("aural:nodes", "gone-lately"))
        self.assertIsNotNone(self.r.zscore("aural:nodes", "a"))
        self.stop_clean(d)

    def test_stopped_nodes_leave_the_consumer_group(self):
        """Every node that has taken a stream is a consumer of the group,
        which Redis keeps until it is deleted: with names HOST-PID, one
        more at every start. A live node's heartbeat deletes those idle
        for longer than --cluster-expire with nothing pending; one whose
        announcement is still pending (a stream not yet taken over)
        stays."""
        self.r.xgroup_create("aural:announce", "nodes", id="0", mkstream=True)
        self.r.xadd("aural:announce", {"name": "held", "rate": 16000,
                                       "channels": 1, "format": "s16"})
        self.r.xreadgroup("nodes", "busy", {"aural:announce": ">"}, count=1)
        for i in range(20):
            self.r.xgroup_createconsumer("aural:announce", "nodes",
                                         "gone-%d" % i)

        def names():
            return {c["name"].decode() for c in
                    self.r.xinfo_consumers("aural:announce", "nodes")}

        self.assertEqual(len(names()), 21)
        # A --cluster-ttl past the test: "busy"'s entry is not taken over.
        d = self.node("a", "--cluster-expire", "1", "--cluster-ttl", "3600")
        deadline = time.monotonic() + 15
        while any(n.startswith("gone-") for n in names()):
            self.assertLess(time.monotonic(), deadline, sorted(names()))
            time.sleep(0.05)
        # "busy" has been idle for as long as the others (it came first).
        self.assertIn("busy", names())
        self.assertEqual(self.r.xpending("aural:announce", "nodes")["pending"],
                         1)
        self.assertNotIn("Redis said", d.text())
        self.stop_clean(d)

    def test_words_and_text(self):
        """With the bundled model and its lexicon, each entry carries the
        chunk's text and WORDS payload: the same words `aural encode
        --output words` finds."""
        self.model = td.DEFAULT
        d = self.node("a")
        path = self.wav(7.4, name="w.wav")
        for t in produce_all(self.redis.client, [("talk", path)]):
            t.join()
        self.assertEqual(wait_finished(self.r, ["talk"], 60), set())
        words, texts = [], []
        for _, f in self.r.xrange("aural:{talk}:out"):
            w = json.loads(f[b"words"])
            words += [x["word"] for seg in w["segments"] for x in seg]
            texts.append(f[b"text"].decode())
            self.assertEqual(decode_chunk(f[b"chunk"])["text"], texts[-1])
        out = os.path.join(self.tmp, "w.txt")
        td.run(td.AURAL, "encode", "-q", "-m", td.DEFAULT, "--output",
               "words", "-o", out, path)
        with open(out) as f:
            want = f.read().split()
        self.assertGreater(len(want), 5)
        self.assertEqual(words, want)
        # Custom words come with the announcement, checked like a client's.
        self.r.xadd("aural:announce", {
            "name": "many", "rate": 16000, "channels": 1, "format": "s16",
            "vocabulary": ",".join("w%d" % i for i in range(65))})
        # A field too long to hold, or with a NUL byte, is refused: not
        # read as absent (no custom words) or cut short at the NUL.
        self.r.xadd("aural:announce", {
            "name": "long", "rate": 16000, "channels": 1, "format": "s16",
            "vocabulary": ",".join("w%063d" % i for i in range(65))})
        self.r.xadd("aural:announce", {
            "name": "nul", "rate": 16000, "channels": 1,
            "format": b"s16\0x"})
        # An empty word is refused, as a client's is: not dropped, leaving
        # a list of commas no custom words at all.
        for name, vocabulary in [("gap", "Dashwood,,Kubernetes"),
                                 ("commas", ","), ("trailing", "Dashwood,")]:
            self.r.xadd("aural:announce", {
                "name": name, "rate": 16000, "channels": 1, "format": "s16",
                "vocabulary": vocabulary})
        self.r.xadd("aural:announce", {
            "name": "named", "rate": 16000, "channels": 1, "format": "s16",
            "vocabulary": "Dashwood,Kubernetes", "boost": "4"})
        self.r.xadd("aural:{named}:audio", {"pcm": b"\0" * 32000}, id="0-1")
        self.r.xadd("aural:{named}:audio", {"end": "1"}, id="16000-1")
        self.assertEqual(wait_finished(self.r, ["named"], 30), set())
        ended = {f[b"stream"]: f for _, f in self.r.xrange("aural:events")
                 if f[b"type"] == b"ended"}
        self.assertEqual(ended[b"named"][b"reason"], b"eof")
        self.assertEqual(ended[b"many"][b"reason"], b"error")
        self.assertIn(b"more than 64", ended[b"many"][b"message"])
        for name, what in [(b"long", b"vocabulary"), (b"nul", b"format")]:
            self.assertEqual(ended[name][b"reason"], b"error")
            self.assertIn(what + b" is not text", ended[name][b"message"])
        for name in [b"gap", b"commas", b"trailing"]:
            self.assertEqual(ended[name][b"reason"], b"error", name)
            self.assertIn(b"an empty custom word", ended[name][b"message"])
        self.stop_clean(d)

    def test_rates_and_channels(self):
        """Streams at other rates and channel counts (8 channels at 96 kHz
        fill a node's input buffer in under a second) come out as `aural
        encode` gives them."""
        d = self.node("a")
        wide = os.path.join(self.tmp, "wide.wav")
        td.run("sox", "-n", "-r", "96000", "-c", "8", "-b", "16", "-t",
               "wavpcm", wide, "synth", "3", "pinknoise", "vol", "0.3")
        cd = self.wav(4, rate=44100, name="cd.wav")
        for t in produce_all(self.redis.client, [("wide", wide),
                                                 ("cd", cd)]):
            t.join()
        self.assertEqual(wait_finished(self.r, ["wide", "cd"], 60), set())
        self.check_stream("wide", wide)
        self.check_stream("cd", cd)
        self.stop_clean(d)

    def test_consumer_resumes(self):
        """A consumer that goes away for 10 s and comes back with the
        --from its interruption named misses nothing; the node's /metrics
        count what it published."""
        d = self.node("a", "--http", "127.0.0.1:0")
        path = self.wav(16, name="talk.wav")
        producer = self.send("talk", path)
        first = subprocess.Popen([td.AURAL, "sub", "--cluster",
                                  self.redis.url(), "--stream", "talk"],
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        seen = ""  # until chunk 2 has arrived (sub flushes each line)
        deadline = time.monotonic() + 60
        while not re.search(r"#2 +frames", seen):
            self.assertLess(time.monotonic(), deadline, seen)
            line = first.stdout.readline()
            self.assertTrue(line, "aural sub ended: " + seen)
            seen += line
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=30)
        out = seen + out
        m = re.search(r"--from (\d+)", err)
        self.assertIsNotNone(m, err)
        resume = int(m.group(1))
        self.assertGreater(resume, 2)
        seqs = [int(x) for x in re.findall(r"#(\d+) +frames", out)]
        self.assertEqual(seqs, list(range(resume)), out)
        time.sleep(10)
        tail = os.path.join(self.tmp, "tail.npy")
        td.run(td.AURAL, "sub", "--cluster", self.redis.url(), "--stream",
               "talk", "--from", str(resume), "-o", tail, timeout=120)
        self.sent([producer])
        want = self.encode(path, model=self.model)
        C = 50
        np.testing.assert_array_equal(np.load(tail), want[resume * C:])
        port = re.search(r"http: listening on http://127.0.0.1:(\d+)/",
                         d.text()).group(1)
        with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port,
                                    timeout=10) as r:
            metrics = {s.name: s.value for f in
                       text_string_to_metric_families(r.read().decode())
                       for s in f.samples}
        self.assertEqual(metrics["aurald_cluster_up"], 1)
        self.assertEqual(metrics["aurald_cluster_chunks_published_total"],
                         len(want) // C + 1)
        self.assertEqual(metrics["aurald_cluster_disconnects_total"], 0)
        self.stop_clean(d)

    def test_interrupted_caption_keeps_the_resume_line_apart(self):
        """aural sub --cluster --output words on a terminal, stopped by
        Ctrl-C while a partial caption stands on the line (written without
        a newline, to be rewritten in place): the line that names the
        --from to resume with was glued to it ('talk  ... the quick
        brownaural sub: talk: last chunk received 3; ...')."""
        self.model = td.DEFAULT
        d = self.node("a")
        producer = self.send("talk", self.wav(30, name="talk.wav"))
        master, slave = os.openpty()
        try:
            sub = subprocess.Popen(
                [td.AURAL, "sub", "--cluster", self.redis.url(), "--stream",
                 "talk", "--output", "words"],
                stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
            os.close(slave)
            slave = -1
            raw = b""
            deadline = time.monotonic() + 60
            # Until a partial stands on the line, its last one.
            while not re.match(r"talk  \.\.\. \S",
                               (td.terminal_lines(raw) or [""])[-1]):
                self.assertLess(time.monotonic(), deadline, raw)
                self.assertIsNone(sub.poll(), raw)
                r, _, _ = select.select([master], [], [], 0.2)
                if r:
                    raw += os.read(master, 65536)
            sub.send_signal(signal.SIGINT)
            raw += td.read_pty(master, sub)
            self.assertEqual(sub.wait(30), 130, raw)
        finally:
            os.close(master)
            if slave >= 0:
                os.close(slave)
        producer.kill()
        producer.wait()
        lines = td.terminal_lines(raw)
        said = [l for l in lines if "aural sub:" in l]
        self.assertTrue(any("--from" in l for l in said), lines)
        for l in said:
            self.assertTrue(l.startswith("aural sub: "), lines)
        self.stop_clean(d)

    def test_unreachable_at_start(self):
        """Redis not there: a clear error and exit 1, or local service with
        --cluster-optional, joining once Redis answers."""
        missing = "unix:" + os.path.join(self.tmp, "nothing.sock")
        p = td.run(td.AURALD, "-m", self.model, "-s",
                   os.path.join(self.tmp, "x.sock"), "--no-config",
                   "--cluster", missing, check=False, timeout=30)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("cannot connect", p.stderr)
        self.assertIn("nothing.sock", p.stderr)
        d = self.start("--no-config", "--cluster", missing,
                       "--cluster-optional", model=self.model)
        self.assertIn("serving locally", d.text())
        out = td.run(td.AURAL, "send", "-q", "-s", d.path, "--name", "local",
                     self.wav(2))
        self.assertEqual(out.returncode, 0)
        self.stop_clean(d)


if __name__ == "__main__":
    td.main(__name__)
