#!/usr/bin/python3
"""Soak test for aurald: hours of audio at full speed with subscriber churn.

Several pusher threads send audio as fast as the daemon takes it (a new
stream per recording, until --hours of audio have gone through), healthy
subscribers receive every stream, and a churn thread keeps connecting,
subscribing, reading a little and disconnecting (sometimes abruptly). A
monitor samples the daemon's RSS and fd count every second.

At the end it checks, and reports as JSON:
  - RSS slope after warm-up (the first quarter of the run) in kB per
    minute: must stay below --max-slope-kb-per-min;
  - the bytes the daemon has allocated (STATS heap_bytes, which leaves out
    the free memory its allocator keeps, and counts in sanitizer builds
    too) are back within --max-heap-growth-kb of their level after a
    warm-up of one recording per pusher;
  - the fd count at the end equals the one before the pushers and the
    churn started (each taken when STATS counts no client but the healthy
    ones, so that a connection the daemon is still closing is in neither);
  - the healthy subscribers lost no chunk (no GAP, sequences complete, and
    every stream's chunk count equals what STREAM_ENDED announced);
  - STATS agrees: no stream or subscription left but the healthy ones, and
    no chunk counted as dropped for them.

Usage:
    aurald -m MODEL -s SOCK &
    tools/soak.py -s SOCK --hours 4 --streams 4
Exit status 0 when every check passes.
"""

import argparse
import json
import os
import random
import socket
import struct
import sys
import threading
import time
import wave

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "python"))
import aural_client as ac  # noqa: E402


def read_wav(path):
    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2:
            raise SystemExit("soak: %s: 16-bit WAV expected" % path)
        x = np.frombuffer(w.readframes(w.getnframes()), "<i2")
        return x.reshape(-1, w.getnchannels())[:, 0].copy(), w.getframerate()


def daemon_pid(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    pid, _uid, _gid = struct.unpack("3i", s.getsockopt(
        socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    s.close()
    return pid


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def settled_fds(path, pid, n_clients, limit_s=30.0):
    """The daemon's fd count once only n_clients are connected besides the
    one asking (STATS' clients), the same twice in a row (a loop turn
    after the last close). A client that has closed its end can have its
    connection open in the daemon a moment longer, so neither count that
    is compared is taken while one could be closing; a leaked fd, or a
    connection never closed (counted after limit_s), stays."""
    deadline = time.monotonic() + limit_s
    last = None
    with ac.Client(path, timeout=10) as c:
        while True:
            quiet = c.stats()["clients"] == n_clients + 1
            now = fd_count(pid) if quiet else None
            if now is not None and now == last:
                return now
            if time.monotonic() > deadline:  # compared as it is: a leak
                return fd_count(pid)
            last = now
            time.sleep(0.05)


class Healthy(threading.Thread):
    """Receives every stream; records what each one delivered."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.c = ac.Client(path, timeout=60)
        self.c.subscribe(all=True)
        self.seqs = {}      # stream id -> list of seq
        self.ended = {}     # stream id -> chunks announced
        self.gaps = 0
        self.errors = []
        self.stop = False

    def run(self):
        """Reads until told to stop and then idle for a second: a quiet
        second before that (a slow start, a stalled daemon) is no end."""
        try:
            while True:
                for ev in self.c.events(timeout=1.0):
                    self.on_event(ev)
                if self.stop:
                    return
                time.sleep(0.05)  # (a closed connection returns at once)
        except Exception as e:  # noqa: BLE001 - reported as a failure
            self.errors.append(repr(e))

    def on_event(self, ev):
        if isinstance(ev, ac.Chunk):
            self.seqs.setdefault(ev.stream_id, []).append(ev.seq)
        elif isinstance(ev, ac.StreamStarted):
            self.seqs.setdefault(ev.stream_id, [])
        elif isinstance(ev, ac.StreamEnded):
            self.ended[ev.stream_id] = ev.chunks
        elif isinstance(ev, ac.Gap):
            self.gaps += 1
        elif isinstance(ev, ac.Error):
            self.errors.append(ev.name)

    def lost(self):
        lost = 0
        for sid, n in self.ended.items():
            got = self.seqs.get(sid, [])
            if got != list(range(n)):
                lost += n - len(set(got))
        return lost


def churn(path, stop, counts):
    rng = random.Random(7)
    while not stop.is_set():
        try:
            c = ac.Client(path, timeout=10)
            if rng.random() < 0.5:
                c.subscribe(all=True, outputs=("embeddings",),
                            dtype=rng.choice(["f32", "f16"]))
            else:
                c.subscribe("soak-%d" % rng.randrange(8))
            for _ in c.events(timeout=rng.uniform(0.01, 0.3)):
                if rng.random() < 0.3:
                    break
            if rng.random() < 0.5:
                c._sock.close()  # abrupt
            else:
                c.close()
            counts["churn"] += 1
        except (ConnectionError, OSError, ac.ServerError):
            counts["churn_errors"] += 1


def pusher(path, audio, rate, block, until_s, state, lock):
    while True:
        with lock:
            if state["audio_s"] >= until_s:
                return
            state["audio_s"] += len(audio) / rate
            k = state["streams"]
            state["streams"] += 1
        c = ac.Client(path, timeout=120)
        sid = c.open_audio("soak-%d" % k, rate, 1, "s16")
        for at in range(0, len(audio), block):
            c.send_audio(sid, audio[at:at + block])
        c.close_audio(sid)
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-s", "--socket", required=True)
    ap.add_argument("--hours", type=float, default=4.0,
                    help="audio to push in all (default 4)")
    ap.add_argument("--streams", type=int, default=4,
                    help="concurrent pushed streams (default 4)")
    ap.add_argument("--healthy", type=int, default=2,
                    help="subscribers that must receive everything")
    ap.add_argument("--input", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data",
        "fbank", "speech.wav"), help="16-bit WAV to loop")
    ap.add_argument("--max-slope-kb-per-min", type=float, default=64.0)
    ap.add_argument("--max-heap-growth-kb", type=float, default=64.0,
                    help="allocated bytes left at the end over the start "
                    "(default 64)")
    args = ap.parse_args()

    audio, rate = read_wav(args.input)
    reps = max(1, int(60 * rate / len(audio)))
    audio = np.tile(audio, reps)  # about a minute per stream
    pid = daemon_pid(args.socket)
    healthy = [Healthy(args.socket) for _ in range(args.healthy)]
    for h in healthy:
        h.start()
    time.sleep(0.5)
    # Warm-up: one recording per pusher at once, so that the buffers the
    # daemon keeps for its largest batch exist before the baseline.
    state, lock = {"audio_s": 0.0, "streams": 0}, threading.Lock()
    warm_s = args.streams * len(audio) / rate
    warmers = [threading.Thread(target=pusher, args=(
        args.socket, audio, rate, rate // 10, warm_s, state, lock))
        for _ in range(args.streams)]
    for w in warmers:
        w.start()
    for w in warmers:
        w.join()
    deadline = time.monotonic() + 60
    while (time.monotonic() < deadline and
           any(len(h.ended) < state["streams"] for h in healthy)):
        time.sleep(0.1)
    warm_audio_s = state["audio_s"]
    fds_base = settled_fds(args.socket, pid, len(healthy))
    with ac.Client(args.socket, timeout=10) as c:
        heap_base = c.stats().get("heap_bytes")
    stop = threading.Event()
    counts = {"churn": 0, "churn_errors": 0}
    churner = threading.Thread(target=churn, args=(args.socket, stop, counts),
                               daemon=True)
    churner.start()
    pushers = [threading.Thread(target=pusher, args=(
        args.socket, audio, rate, rate // 10, warm_s + args.hours * 3600,
        state, lock)) for _ in range(args.streams)]
    t0 = time.monotonic()
    for p in pushers:
        p.start()
    samples = []  # (seconds, rss kB, fds)
    while any(p.is_alive() for p in pushers):
        samples.append((time.monotonic() - t0, rss_kb(pid), fd_count(pid)))
        time.sleep(1.0)
    for p in pushers:
        p.join()
    stop.set()
    churner.join()
    # Every stream's end reaches each healthy subscriber (or a minute
    # passes: the report then says what was missing), then they stop.
    deadline = time.monotonic() + 60
    while (time.monotonic() < deadline and
           any(len(h.ended) < state["streams"] for h in healthy)):
        time.sleep(0.1)
    for h in healthy:
        h.stop = True
    for h in healthy:
        h.join(30)
    wall = time.monotonic() - t0
    samples.append((wall, rss_kb(pid),
                    settled_fds(args.socket, pid, len(healthy))))
    with ac.Client(args.socket, timeout=10) as c:
        stats = c.stats()

    warm = [s for s in samples if s[0] >= wall / 4] or samples
    t = np.array([s[0] for s in warm]) / 60.0
    r = np.array([s[1] for s in warm], float)
    slope = float(np.polyfit(t, r, 1)[0]) if len(warm) > 2 else 0.0
    fds_start, fds_end = fds_base, samples[-1][2]
    heap_end = stats.get("heap_bytes")
    heap_growth_kb = ((heap_end - heap_base) / 1024.0
                      if heap_base and heap_end else None)
    lost = sum(h.lost() for h in healthy)
    gaps = sum(h.gaps for h in healthy)
    errors = [e for h in healthy for e in h.errors]
    streams_seen = min(len(h.ended) for h in healthy)
    leftover = [s for s in stats["subscribers"]
                if s["chunks_dropped"] != 0]
    report = {
        "audio_hours": (state["audio_s"] - warm_audio_s) / 3600.0,
        "streams": state["streams"],  # the warm-up's included
        "wall_s": wall, "x_real_time": (state["audio_s"] - warm_audio_s) / wall,
        "rss_kb_first": warm[0][1], "rss_kb_last": samples[-1][1],
        "rss_slope_kb_per_min": slope, "fds_before": fds_start,
        "rss_kb_at_quarters": [samples[min(len(samples) - 1,
                                           len(samples) * q // 4)][1]
                               for q in range(5)],
        "heap_bytes_before": heap_base, "heap_bytes_end": heap_end,
        "fds_end": fds_end, "healthy_lost_chunks": lost, "gaps": gaps,
        "healthy_errors": errors, "streams_ended_seen": streams_seen,
        "churn_connections": counts["churn"],
        "churn_errors": counts["churn_errors"],
        "stats_streams_left": len(stats["streams"]),
        "stats_subscribers_with_drops": len(leftover),
    }
    checks = {
        "rss_slope": slope < args.max_slope_kb_per_min,
        "fds": fds_end == fds_start,
        "heap": (heap_growth_kb is None or
                 heap_growth_kb < args.max_heap_growth_kb),
        "lost_chunks": lost == 0, "gaps": gaps == 0, "errors": not errors,
        "streams_ended": streams_seen == state["streams"],
        "streams_left": not stats["streams"], "drops": not leftover,
    }
    ok = all(checks.values())
    report["failed"] = [name for name, passed in checks.items() if not passed]
    report["ok"] = ok
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
