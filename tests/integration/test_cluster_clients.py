#!/usr/bin/python3
"""The cluster's clients (docs/CLUSTER.md) against a private redis-server,
without aurald: the test plays the node.

  send: `aural send --cluster` writes the stream's meta hash, one
      announcement, audio entries S-1 holding exactly the file's samples,
      and the end entry T-1; a name already in the cluster is refused.
  sub: chunks a fake node stores in aural:{NAME}:out reach `aural sub
      --cluster` (the .npy, the lines, the JSON events) from --from SEQ,
      start and now; trimmed chunks are reported; an interruption tells
      the --from that resumes.
  stats: `aural stats --cluster` lists a node whose heartbeat key lives,
      and one whose key expired as dead.
  python: cluster_send and cluster_subscribe of the Python client on the
      same layout.
  errors: an unreachable Redis, a password in the URL, a password file
      others may read, a wrong password.

Run by meson (`meson test -C build cluster_clients`) with AURAL_BIN set;
redis-server comes from tools/setup.sh. Prints `integration: N passed, M
failed` at the end.
"""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import wave

import numpy as np
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_daemon import AURAL, ac, main  # noqa: E402

CHUNK_FIXED = struct.Struct("<QQIIqqqqIIHBBI")  # PROTOCOL.md section 5
D_MODEL, CHUNK_FRAMES = 8, 5


class RedisServer:
    """A redis-server of our own on a Unix socket in tmp."""

    def __init__(self, tmp, *args, sock="redis.sock"):
        self.path = os.path.join(tmp, sock)
        self.proc = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", self.path,
             "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--dir", tmp] + list(args),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Ready when a connection is accepted: the socket's file appears at
        # bind(), before listen(), and a client in between is refused.
        deadline = time.monotonic() + 10
        while not self.accepts():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.02)
        self.url = "unix:" + self.path

    def accepts(self):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            try:
                s.connect(self.path)
                return True
            except OSError:
                return False

    def client(self, password=None):
        return redis.Redis(unix_socket_path=self.path, password=password)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def chunk_payload(seq, emb, final=False, text=None):
    """A CHUNK payload with embeddings (f32) and, when text is given, text."""
    text_b = text.encode() if text is not None else b""
    outputs = 1 | (4 if text is not None else 0)
    head = CHUNK_FIXED.pack(seq, seq * CHUNK_FRAMES, emb.shape[0],
                            1 if final else 0, 1000, 2000, 3000, 4000,
                            emb.shape[1], 0, outputs, 0, 0, len(text_b))
    return head + emb.astype("<f4").tobytes() + text_b


def words_payload(seq, words, final=False):
    """A WORDS payload (PROTOCOL.md 4.16): one final segment of words."""
    seg = [{"word": w, "start": seq * CHUNK_FRAMES + i,
            "end": seq * CHUNK_FRAMES + i + 1, "confidence": 0.5}
           for i, w in enumerate(words)]
    return json.dumps({"seq": seq, "final": final, "segments": [seg],
                       "partial": []})


class ClusterTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="aural-cluster-")
        self.redis = RedisServer(self.tmp)
        self.r = self.redis.client()
        self.url = self.redis.url
        self.rng = np.random.default_rng(7)

    def tearDown(self):
        self.r.close()
        self.redis.stop()
        shutil.rmtree(self.tmp)

    def aural(self, *args, stdin=None, env=None, timeout=60):
        return subprocess.run([AURAL] + list(args), input=stdin,
                              capture_output=True, timeout=timeout,
                              env=dict(os.environ, **(env or {})))

    def wav(self, n_frames, channels=1, rate=16000, name="in.wav"):
        """A 16-bit WAV of random samples; (path, int16 [n, channels])."""
        x = self.rng.integers(-32768, 32767, (n_frames, channels),
                              dtype=np.int16)
        path = os.path.join(self.tmp, name)
        with wave.open(path, "wb") as w:
            w.setnchannels(channels)
            w.setsampwidth(2)
            w.setframerate(rate)
            w.writeframes(x.astype("<i2").tobytes())
        return path, x

    # --- a fake node ---------------------------------------------------------

    def node_meta(self, name):
        """The model fields a node writes into the meta hash."""
        self.r.hset("aural:{%s}:meta" % name, mapping={
            "d_model": D_MODEL, "vocab_size": 0,
            "chunk_frames": CHUNK_FRAMES, "frame_ms": "10", "rate": 16000,
            "channels": 1, "start_us": 1000})

    def publish(self, name, seqs, final_seq, text=False, words=False):
        """Stores chunks seqs (SEQ-1 entries) as a node does; chunk
        final_seq has the FINAL flag and final=1. Returns {seq: emb}."""
        embs = {}
        for seq in seqs:
            emb = self.rng.standard_normal((CHUNK_FRAMES, D_MODEL)).astype(
                np.float32)
            final = seq == final_seq
            fields = {"chunk": chunk_payload(seq, emb, final,
                                             "t%d" % seq if text else None)}
            if words:
                fields["words"] = words_payload(seq, ["w%d" % seq], final)
            if final:
                fields["final"] = "1"
            self.r.xadd("aural:{%s}:out" % name, fields, id="%d-1" % seq)
            embs[seq] = emb
        return embs

    def sub(self, name, *args, timeout=30):
        return self.aural("sub", "--cluster", self.url, "--stream", name,
                          *args, timeout=timeout)

    def start_sub(self, name, *args):
        return subprocess.Popen(
            [AURAL, "sub", "--cluster", self.url, "--stream", name] +
            list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def audio_entries(self, name):
        return self.r.xrange("aural:{%s}:audio" % name)

    def wait_until(self, what, cond, proc, deadline_s=30):
        """Polls cond() until true; fails naming what did not happen (or
        how proc ended before it did)."""
        end = time.monotonic() + deadline_s
        while not cond():
            if proc.poll() is not None:
                self.fail("%s: the client exited %d first: %s" %
                          (what, proc.returncode, proc.stderr.read()))
            if time.monotonic() > end:
                self.fail("%s: not after %d s" % (what, deadline_s))
            time.sleep(0.05)

    def wait_reading(self, proc):
        """Until a client waits in a blocking XREAD: the subscriber has read
        everything stored and waits for more."""
        self.wait_until("a subscriber blocked in XREAD", lambda: any(
            c.get("cmd") == "xread" and "b" in c.get("flags", "")
            for c in self.r.client_list()), proc)


class TestSend(ClusterTest):
    def test_meta_announce_audio_and_end(self):
        path, x = self.wav(25000, channels=2)
        p = self.aural("send", "--cluster", self.url, "--name", "t1",
                       "--format", "s16", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        meta = self.r.hgetall("aural:{t1}:meta")
        self.assertEqual(meta[b"rate"], b"16000")
        self.assertEqual(meta[b"channels"], b"2")
        self.assertEqual(meta[b"format"], b"s16")
        self.assertGreater(int(meta[b"created_us"]), 1_500_000_000_000_000)
        ann = self.r.xrange("aural:announce")
        self.assertEqual(len(ann), 1)
        self.assertEqual(ann[0][1], {b"name": b"t1", b"rate": b"16000",
                                     b"channels": b"2", b"format": b"s16"})
        entries = self.audio_entries("t1")
        frame = 0
        pcm = bytearray()
        for eid, fields in entries[:-1]:
            self.assertEqual(eid, b"%d-1" % frame)
            n = len(fields[b"pcm"]) // 4
            self.assertTrue(1 <= n <= 16000, n)
            pcm += fields[b"pcm"]
            frame += n
        self.assertEqual(len(entries) - 1, 16)  # 100 ms blocks of 1.5625 s
        self.assertEqual(entries[-1], (b"25000-1", {b"end": b"1"}))
        got = np.frombuffer(bytes(pcm), "<i2").reshape(-1, 2)
        np.testing.assert_array_equal(got, x)

    def test_f32_samples_are_the_files_divided_by_32768(self):
        path, x = self.wav(3000)
        p = self.aural("send", "--cluster", self.url, "--name", "f",
                       "--block-ms", "1000", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        entries = self.audio_entries("f")
        self.assertEqual([e[0] for e in entries], [b"0-1", b"3000-1"])
        got = np.frombuffer(entries[0][1][b"pcm"], "<f4")
        np.testing.assert_array_equal(got, x[:, 0] / 32768.0)
        self.assertEqual(self.r.hget("aural:{f}:meta", "format"), b"f32")

    def test_same_name_refused(self):
        path, _ = self.wav(1600)
        first = self.aural("send", "--cluster", self.url, "--name", "t1",
                           path)
        self.assertEqual(first.returncode, 0, first.stderr)
        second = self.aural("send", "--cluster", self.url, "--name", "t1",
                            "-q", path)
        self.assertEqual(second.returncode, 1)
        self.assertIn(b"stream t1 already exists in the cluster",
                      second.stderr)
        self.assertEqual(len(self.r.xrange("aural:announce")), 1)
        self.assertEqual(len(self.audio_entries("t1")), 1 + 1)

    def test_standard_input_and_vocabulary(self):
        path, x = self.wav(800)
        with open(path, "rb") as f:
            p = self.aural("send", "--cluster", self.url, "--name", "in",
                           "--format", "s16", "--vocabulary", "Dashwood,K8s",
                           "--boost", "2.5", "-", stdin=f.read())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"standard input", p.stdout)
        ann = self.r.xrange("aural:announce")[0][1]
        self.assertEqual(ann[b"vocabulary"], b"Dashwood,K8s")
        self.assertEqual(ann[b"boost"], b"2.5")
        pcm = self.audio_entries("in")[0][1][b"pcm"]
        np.testing.assert_array_equal(np.frombuffer(pcm, "<i2"), x[:, 0])

    def test_entry_already_stored_counts_as_stored(self):
        """An XADD refused because its ID is taken was stored before (a
        retry): the send goes on and succeeds."""
        path, _ = self.wav(3200)
        self.r.xadd("aural:{r}:audio", {"pcm": b"earlier"}, id="0-1")
        p = self.aural("send", "--cluster", self.url, "--name", "r", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        entries = self.audio_entries("r")
        self.assertEqual(entries[0], (b"0-1", {b"pcm": b"earlier"}))
        self.assertEqual(entries[-1], (b"3200-1", {b"end": b"1"}))
        self.assertEqual(len(entries), 3200 // 1600 + 1)

    def test_realtime_paces_at_one_x(self):
        path, _ = self.wav(8000)
        t0 = time.monotonic()
        p = self.aural("send", "--cluster", self.url, "--name", "rt",
                       "--realtime", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertGreaterEqual(time.monotonic() - t0, 0.45)

    def test_interrupted_send_ends_the_stream_where_it_was(self):
        path, _ = self.wav(48000)
        proc = subprocess.Popen(
            [AURAL, "send", "--cluster", self.url, "--name", "cut",
             "--realtime", path], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        self.wait_until("8000 samples stored", lambda: sum(
            len(f[b"pcm"]) // 4 for _, f in self.audio_entries("cut")
            if b"pcm" in f) >= 8000, proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        self.assertEqual(proc.returncode, 130, err)
        entries = self.audio_entries("cut")
        end_id, end = entries[-1]
        stored = sum(len(f[b"pcm"]) // 4 for _, f in entries[:-1])
        self.assertEqual(end, {b"end": b"1"})
        self.assertEqual(end_id, b"%d-1" % stored)
        self.assertTrue(8000 <= stored < 48000, stored)
        self.assertIn(b"stream 'cut' ended after", err)

    def test_bad_audio_ends_the_stream_and_fails(self):
        """A sample the reader refuses (NaN) ends the stream after the
        entries before it, and the command fails naming the problem."""
        x = np.zeros(3200, "<f4")
        x[2000] = np.nan
        data = x.tobytes()
        fmt = struct.pack("<HHIIHH", 3, 1, 16000, 64000, 4, 32)
        body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt +
                b"data" + struct.pack("<I", len(data)) + data)
        path = os.path.join(self.tmp, "nan.wav")
        with open(path, "wb") as f:
            f.write(b"RIFF" + struct.pack("<I", len(body)) + body)
        p = self.aural("send", "--cluster", self.url, "--name", "nan", path)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"nan.wav", p.stderr)
        self.assertEqual([e[0] for e in self.audio_entries("nan")],
                         [b"0-1", b"1600-1"])
        self.assertEqual(self.audio_entries("nan")[-1][1], {b"end": b"1"})

    def test_model_rate_from_a_heartbeat_read_as_json(self):
        """The model's rate, to convert to, is a heartbeat's whole
        sample_rate: a heartbeat saying 16000.5 (or 1.6e4) is passed
        over, not a rate to resample to and announce as 16000."""
        path, _ = self.wav(800, rate=8000)
        now = int(time.time() * 1000)
        for i, beat in enumerate(['{"sample_rate": 16000.5}',
                                  '{"sample_rate": 1.6e4}',
                                  '{"x": "\\"sample_rate\\":16000"}']):
            self.r.set("aural:node:n", beat)
            self.r.zadd("aural:nodes", {"n": now})
            p = self.aural("send", "--cluster", self.url, "--name",
                           "b%d" % i, path)
            self.assertEqual(p.returncode, 0, p.stderr)
            ann = self.r.xrange("aural:announce")[-1][1]
            self.assertEqual(ann[b"rate"], b"8000", beat)
        self.r.set("aural:node:n", '{"sample_rate": 16000}')
        p = self.aural("send", "--cluster", self.url, "--name", "ok", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.r.xrange("aural:announce")[-1][1][b"rate"],
                         b"16000")

    def test_bad_command_lines(self):
        path, _ = self.wav(160)
        for args, what in [
                (["--block-ms", "2000"], b"at most 1000 with --cluster"),
                (["--name", "a{b}"], b"'{' or '}'"),
                (["-s", "/tmp/x.sock"], b"exclude each other")]:
            p = self.aural("send", "--cluster", self.url, *args, path)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(what, p.stderr)
        p = self.aural("send", "--cluster-password-file", path, path)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"needs --cluster", p.stderr)
        self.assertEqual(self.r.keys("*"), [])


class TestSub(ClusterTest):
    def test_npy_holds_exactly_the_published_embeddings(self):
        self.node_meta("t1")
        embs = self.publish("t1", range(5), 4)
        out = os.path.join(self.tmp, "out.npy")
        p = self.sub("t1", "-o", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        np.testing.assert_array_equal(
            np.load(out), np.concatenate([embs[s] for s in range(5)]))
        self.assertIn(b"t1  #4  frames 20-24", p.stdout)
        self.assertIn(b"ended: eof, 25 frames, 5 chunks", p.stdout)

    def test_from_3_starts_at_chunk_3(self):
        self.node_meta("t1")
        embs = self.publish("t1", range(6), 5)
        out = os.path.join(self.tmp, "out.npy")
        p = self.sub("t1", "--from", "3", "-o", out)
        self.assertEqual(p.returncode, 0, p.stderr)
        np.testing.assert_array_equal(
            np.load(out), np.concatenate([embs[s] for s in (3, 4, 5)]))
        self.assertIn(b"joined 't1' at chunk 3", p.stderr)
        self.assertNotIn(b"#2 ", p.stdout)

    def test_from_now_gets_only_later_chunks(self):
        self.node_meta("t1")
        self.publish("t1", range(3), None)
        proc = self.start_sub("t1", "--from", "now", "--json")
        self.wait_reading(proc)  # it has read the top before the next chunks
        self.publish("t1", range(3, 5), 4)
        out, err = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 0, err)
        events = [json.loads(line) for line in out.decode().splitlines()]
        self.assertEqual([e["seq"] for e in events if e["event"] == "chunk"],
                         [3, 4])
        self.assertEqual(events[0]["event"], "started")
        self.assertEqual(events[0]["next_chunk"], 3)
        self.assertEqual(events[-1]["event"], "ended")

    def test_nothing_after_the_final_chunk_is_waited_for(self):
        self.node_meta("done")
        self.publish("done", range(3), 2)
        for where in ("now", "3"):
            p = self.sub("done", "--from", where, timeout=10)
            self.assertEqual(p.returncode, 1, where)
            self.assertIn(b"done has ended: its final chunk is 2", p.stderr)
        p = self.sub("done", "--from", "2", "-q")
        self.assertEqual(p.returncode, 0, p.stderr)
        for where in ("now", 3):
            with self.assertRaises(ac.ClusterError):
                next(ac.cluster_subscribe(self.url, "done", start=where))
        self.assertEqual([c.seq for c in ac.cluster_subscribe(
            self.url, "done", start=2)], [2])

    def test_waits_for_a_stream_not_started_yet(self):
        proc = self.start_sub("late", "--output", "text", "-q")
        time.sleep(0.8)
        self.assertIsNone(proc.poll())
        self.node_meta("late")
        self.publish("late", range(2), 1, text=True)
        out, err = proc.communicate(timeout=20)
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(out, b"t0 t1\n")

    def test_trimmed_chunks_are_a_gap_and_o_writes_nothing(self):
        self.node_meta("t1")
        self.publish("t1", [0, 1, 4, 5], 5)
        out = os.path.join(self.tmp, "out.npy")
        p = self.sub("t1", "-o", out)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"lost chunks 2-3 (trimmed", p.stderr)
        self.assertIn(b"out.npy not written", p.stderr)
        self.assertFalse(os.path.exists(out))
        # Without -o the chunks after the gap arrive.
        p = self.sub("t1", "--from", "1", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        events = [json.loads(line) for line in p.stdout.decode().splitlines()]
        gaps = [e for e in events if e["event"] == "gap"]
        self.assertEqual([(g["first_chunk"], g["n_chunks"]) for g in gaps],
                         [(2, 2)])
        self.assertEqual(events[-1]["chunks_lost"], 2)
        self.assertEqual(events[-1]["chunks_received"], 3)

    def test_from_a_trimmed_chunk_is_a_gap(self):
        self.node_meta("t1")
        self.publish("t1", [3, 4], 4)
        p = self.sub("t1", "--from", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"lost chunks 1-2", p.stderr)
        p = self.sub("t1")  # start: the first one retained, no gap
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(b"lost", p.stderr)
        self.assertIn(b"from chunk 3", p.stdout)

    def test_text_and_words(self):
        self.node_meta("w")
        self.publish("w", range(3), 2, text=True, words=True)
        p = self.sub("w", "--output", "text,words", "-q")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, b"t0 t1 t2\nw0 w1 w2\n")
        p = self.sub("w", "--output", "words", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        events = [json.loads(line) for line in p.stdout.decode().splitlines()]
        words = [w["word"] for e in events if e["event"] == "words"
                 for seg in e["segments"] for w in seg]
        self.assertEqual(words, ["w0", "w1", "w2"])
        self.assertNotIn("chunk", [e["event"] for e in events])
        self.assertEqual(events[-1]["words"], "w0 w1 w2")

    def test_interrupt_tells_where_to_resume(self):
        self.node_meta("t1")
        self.publish("t1", range(3), None)
        proc = self.start_sub("t1", "-q")
        self.wait_reading(proc)  # chunks 0-2 read, waiting for more
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        self.assertEqual(proc.returncode, 130)
        self.assertIn(b"last chunk received 2; resume after it with "
                      b"--from 3", err)

    def test_malformed_chunk_is_an_error(self):
        self.node_meta("bad")
        self.r.xadd("aural:{bad}:out", {"chunk": b"short"}, id="0-1")
        p = self.sub("bad")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"entry 0-1 of aural:{bad}:out is not a chunk",
                      p.stderr)
        # A chunk field named twice (Redis keeps both) is not taken as
        # the first one, which a reader taking the last would not see.
        self.node_meta("twice")
        self.publish("twice", [0], 0)
        entry = self.r.xrange("aural:{twice}:out")[0][1]
        self.r.delete("aural:{twice}:out")
        self.r.execute_command("XADD", "aural:{twice}:out", "0-1", "chunk",
                               entry[b"chunk"], "chunk", b"short",
                               "final", "1")
        p = self.sub("twice")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"entry 0-1 of aural:{twice}:out is not a chunk",
                      p.stderr)

    def test_meta_numbers_read_strictly(self):
        """The model's numbers in the meta hash are decimal, as the node
        writes them: a space, a sign, a base prefix or an exponent is not
        read as strtol or strtod would read it, and the field is named."""
        for i, (field, value) in enumerate([
                ("d_model", " %d" % D_MODEL), ("d_model", "+%d" % D_MODEL),
                ("chunk_frames", "%d " % CHUNK_FRAMES),
                ("chunk_frames", "0x%x" % CHUNK_FRAMES),
                ("frame_ms", "1e1"), ("frame_ms", " 10"),
                ("frame_ms", "10.")]):
            name = "m%d" % i
            self.node_meta(name)
            self.r.hset("aural:{%s}:meta" % name, field, value)
            self.publish(name, [0], 0)
            p = self.sub(name, "-q")
            self.assertEqual(p.returncode, 1, (field, value))
            self.assertIn(b'aural:{%s}:meta has no valid "%s"'
                          % (name.encode(), field.encode()), p.stderr)

    def test_meta_error_shown_without_control_bytes(self):
        """An error another program wrote into the meta hash goes to a
        terminal: its escape sequences and other control bytes are shown
        as '?', not sent to the terminal."""
        self.r.hset("aural:{e1}:meta", "error", b"bad\x1b[2Jx\0y")
        p = self.sub("e1")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"no node will encode it: bad?[2Jx?y\n", p.stderr)

    def test_bad_command_lines(self):
        for args, what in [
                (["--from", "x"], b"--from x"),
                (["--dtype", "f16"], b"--dtype"),
                (["--output", "words", "--vocabulary", "a"],
                 b"--vocabulary")]:
            p = self.sub("t1", *args)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(what, p.stderr)
        p = self.aural("sub", "--cluster", self.url)
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"--cluster needs --stream", p.stderr)
        p = self.aural("sub", "--stream", "t1", "--from", "3")
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"--from needs --cluster", p.stderr)


class TestStats(ClusterTest):
    def heartbeats(self):
        now = int(time.time() * 1000)
        beat = {"id": "node-a", "host": "box1", "pid": 4242, "capacity": 8,
                "streams": ["t1", "call-2"], "load": 0.25,
                "started_us": 1_700_000_000_000_000}
        self.r.set("aural:node:node-a", json.dumps(beat), px=10000)
        self.r.zadd("aural:nodes", {"node-a": now, "node-b": now - 60000})

    def test_live_and_dead_nodes(self):
        self.heartbeats()
        p = self.aural("stats", "--cluster", self.url)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.decode().splitlines()
        self.assertIn("2 nodes, 1 alive", lines[0])
        a = next(line for line in lines if line.startswith("node-a"))
        b = next(line for line in lines if line.startswith("node-b"))
        self.assertEqual(a.split()[1:6], ["box1", "4242", "yes", "2/8",
                                          "0.25"])
        self.assertTrue(a.endswith("t1 call-2"), a)
        self.assertEqual(b.split()[3], "dead")
        self.assertGreater(float(b.split()[6]), 59)

    def test_json(self):
        self.heartbeats()
        p = self.aural("stats", "--cluster", self.url, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        obj = json.loads(p.stdout)
        self.assertEqual(obj["cluster"], self.url)
        nodes = {n["id"]: n for n in obj["nodes"]}
        self.assertTrue(nodes["node-a"]["alive"])
        self.assertEqual(nodes["node-a"]["streams"], ["t1", "call-2"])
        self.assertEqual(nodes["node-a"]["capacity"], 8)
        self.assertFalse(nodes["node-b"]["alive"])
        self.assertNotIn("host", nodes["node-b"])

    def test_heartbeat_that_does_not_decode(self):
        self.r.set("aural:node:n", '{"id": "n", "host": 5}')
        self.r.zadd("aural:nodes", {"n": int(time.time() * 1000)})
        p = self.aural("stats", "--cluster", self.url)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b'lacks a valid "host"', p.stdout)


    def test_heartbeat_of_another_type(self):
        """A node's heartbeat key of another type than a string (another
        program's hash) is that node's error: the other nodes are still
        listed, and aural stats exits 0."""
        now = int(time.time() * 1000)
        self.r.hset("aural:node:bad", "x", "1")
        self.r.set("aural:node:good", json.dumps({
            "id": "good", "host": "h", "pid": 5, "capacity": 2,
            "streams": ["s1"], "load": 0.5, "started_us": 1}))
        self.r.zadd("aural:nodes", {"bad": now, "good": now})
        p = self.aural("stats", "--cluster", self.url)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"aural:node:bad is not a string", p.stdout)
        self.assertRegex(p.stdout, rb"good +h +5 yes +1/2")
        p = self.aural("stats", "--cluster", self.url, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        nodes = {n["id"]: n for n in json.loads(p.stdout)["nodes"]}
        self.assertFalse(nodes["bad"]["alive"])
        self.assertIn("is not a string", nodes["bad"]["error"])
        self.assertEqual(nodes["good"]["streams"], ["s1"])

class TestPythonClient(ClusterTest):
    def test_send_writes_what_the_cli_writes(self):
        path, x = self.wav(5000)
        p = self.aural("send", "--cluster", self.url, "--name", "cli",
                       "--format", "s16", "--vocabulary", "a,b",
                       "--boost", "0.00001", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        res = ac.cluster_send(self.url, "py", x.astype("<i2").tobytes(),
                              16000, 1, fmt="s16", vocabulary=["a", "b"],
                              boost=0.00001)
        self.assertEqual(res, {"frames": 5000, "entries": 4})
        strip = lambda e: [(i, f) for i, f in e]  # noqa: E731
        self.assertEqual(strip(self.audio_entries("py")),
                         strip(self.audio_entries("cli")))
        ann = [f for _, f in self.r.xrange("aural:announce")]
        self.assertEqual(ann[0], {**ann[1], b"name": b"cli"})
        # A plain decimal, which nodes read, not 1e-05.
        self.assertEqual(ann[1][b"boost"], b"0.00001")
        with self.assertRaises(ac.ClusterError):
            ac.cluster_send(self.url, "py", b"\0\0", 16000, 1)
        # Words the announcement's comma-separated list cannot carry as
        # given are refused before anything is written (a word with a
        # comma became two words, an empty one or none at all no words).
        for words in (["Dash,wood"], ["a", ""], [], ["w"] * 65):
            with self.assertRaises(ValueError, msg=repr(words)):
                ac.cluster_send(self.url, "bad", b"\0\0", 16000, 1,
                                vocabulary=words)
        self.assertFalse(self.r.exists("aural:{bad}:meta"))

    def test_send_from_a_file_then_subscribe(self):
        pcm = os.path.join(self.tmp, "in.raw")
        x = self.rng.standard_normal((2400, 2)).astype("<f4")
        x.tofile(pcm)
        with open(pcm, "rb") as f:
            res = ac.cluster_send(self.url, "f", f, 8000, 2, fmt="f32",
                                  block_ms=50)
        self.assertEqual(res, {"frames": 2400, "entries": 6})
        got = b"".join(f[b"pcm"] for _, f in self.audio_entries("f")[:-1])
        self.assertEqual(got, x.tobytes())

    def test_subscribe_round_trips_the_chunks(self):
        self.node_meta("t1")
        embs = self.publish("t1", [0, 1, 3, 4], 4, text=True, words=True)
        evs = list(ac.cluster_subscribe(self.url, "t1", start=1))
        self.assertIsInstance(evs[1], ac.Gap)
        self.assertEqual((evs[1].first_chunk, evs[1].n_chunks), (2, 1))
        chunks = [e for e in evs if isinstance(e, ac.Chunk)]
        self.assertEqual([c.seq for c in chunks], [1, 3, 4])
        for c in chunks:
            np.testing.assert_array_equal(c.emb, embs[c.seq])
            self.assertEqual(c.text, "t%d" % c.seq)
            self.assertEqual([w.word for w in c.words.segments[0]],
                             ["w%d" % c.seq])
        self.assertTrue(chunks[-1].final)
        evs = list(ac.cluster_subscribe(self.url, "t1"))
        self.assertEqual([(type(e).__name__, getattr(e, "seq", None))
                          for e in evs],
                         [("Chunk", 0), ("Chunk", 1), ("Gap", None),
                          ("Chunk", 3), ("Chunk", 4)])

    def test_subscribe_from_now(self):
        self.node_meta("t1")
        self.publish("t1", range(2), None)
        it = ac.cluster_subscribe(self.url, "t1", start="now")
        later = threading.Timer(
            0.5, lambda: self.publish("t1", range(2, 4), 3))
        later.start()
        seqs = [c.seq for c in it]
        later.join()
        self.assertEqual(seqs, [2, 3])

    def test_urls(self):
        self.assertEqual(ac.parse_cluster_url("redis://u@h:7/3"),
                         {"host": "h", "port": 7, "user": "u", "db": 3})
        self.assertEqual(ac.parse_cluster_url("redis://[::1]")["host"], "::1")
        for bad in ["redis://u:pw@h", "redis://h:0", "unix:rel", "http://h",
                    "redis://h/x", "redis://"]:
            with self.assertRaises(ValueError, msg=bad):
                ac.parse_cluster_url(bad)
        with self.assertRaises(ValueError):
            ac.cluster_key("a{b}", "out")


class TestErrors(ClusterTest):
    def test_unreachable_redis_names_the_url(self):
        path, _ = self.wav(160)
        gone = "unix:" + os.path.join(self.tmp, "nothing.sock")
        for args in (["send", "--cluster", gone, path],
                     ["sub", "--cluster", gone, "--stream", "t1"],
                     ["stats", "--cluster", gone],
                     ["stats", "--cluster", "redis://127.0.0.1:1"]):
            p = self.aural(*args)
            self.assertEqual(p.returncode, 1, args)
            self.assertIn(b"cannot connect to Redis at " +
                          args[2].encode(), p.stderr)
        with self.assertRaises(ac.ClusterError) as e:
            ac.cluster_send(gone, "t1", b"", 16000, 1)
        self.assertIn(gone, str(e.exception))

    def test_password_in_the_url_is_refused(self):
        p = self.aural("stats", "--cluster", "redis://me:secret@localhost")
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"'redis://me:***@localhost': a password in the URL "
                      b"is refused", p.stderr)
        self.assertNotIn(b"secret", p.stderr)
        with self.assertRaises(ValueError) as e:
            ac.cluster_send("redis://me:secret@localhost", "t1", b"", 16000,
                            1)
        self.assertIn("redis://me:***@localhost", str(e.exception))
        self.assertNotIn("secret", str(e.exception))

    def test_password_file_others_may_read_is_refused(self):
        pw = os.path.join(self.tmp, "pw")
        with open(pw, "w") as f:
            f.write("secret\n")
        os.chmod(pw, 0o644)
        p = self.aural("stats", "--cluster", self.url,
                       "--cluster-password-file", pw)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"others may read or write it", p.stderr)

    def test_passwords(self):
        """A Redis that wants a password: the file's, the environment's;
        a wrong one is refused, and never shown."""
        secure = RedisServer(self.tmp, "--requirepass", "s3cret",
                             sock="secure.sock")
        url = secure.url
        try:
            pw = os.path.join(self.tmp, "pw")
            with open(pw, "w") as f:
                f.write("s3cret\nnot this line\n")
            os.chmod(pw, 0o600)
            p = self.aural("stats", "--cluster", url,
                           "--cluster-password-file", pw)
            self.assertEqual(p.returncode, 0, p.stderr)
            p = self.aural("stats", "--cluster", url,
                           env={"AURAL_REDIS_PASSWORD": "s3cret"})
            self.assertEqual(p.returncode, 0, p.stderr)
            p = self.aural("stats", "--cluster", url,
                           env={"AURAL_REDIS_PASSWORD": "wrong-one"})
            self.assertEqual(p.returncode, 1)
            self.assertIn(b"AUTH ***: WRONGPASS", p.stderr)
            self.assertNotIn(b"wrong-one", p.stderr)
            p = self.aural("stats", "--cluster", url)
            self.assertEqual(p.returncode, 1)
            self.assertIn(b"NOAUTH", p.stderr)
            ac.cluster_send(url, "t1", b"\0\0", 16000, 1, password="s3cret")
            with self.assertRaises(ac.ClusterError):
                ac.cluster_send(url, "t2", b"\0\0", 16000, 1)
        finally:
            secure.stop()


if __name__ == "__main__":
    main(__name__)
