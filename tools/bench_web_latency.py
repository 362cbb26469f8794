#!/usr/bin/python3
"""Push-to-chunk latency over aurald's WebSocket (/ws) against its Unix
socket: N client streams push audio in real time, each subscribed to its
own stream; the latency of a chunk is when the client received it minus
when it pushed the block of audio that completed it (one clock, one
machine). The same Python client (tools/python/aural_client.py) runs over
both transports, one thread per stream.

    tools/bench_web_latency.py [--streams 20] [--seconds 20] [-m MODEL]
                               [--block-ms 20] [--aurald build/daemon/aurald]

Prints a line per transport (p50, p99, max over all chunks, chunks, lost)
and writes nothing else: the aurald it starts for each transport (without
a config file) and its directory are gone when it ends, however it ends
(Ctrl-C: exit status 130). Numbers depend on the machine and its load:
this is a measurement, not a test.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "python"))
import aural_client as ac  # noqa: E402

RATE = 16000


def speech(seconds):
    """The bundled recording at 16 kHz, repeated to length, as float32."""
    out = subprocess.run(["sox", os.path.join(HERE, "..", "models",
                                              "sample.flac"),
                          "-t", "f32", "-r", str(RATE), "-c", "1", "-"],
                         capture_output=True, check=True).stdout
    x = np.frombuffer(out, np.float32)
    return np.tile(x, int(np.ceil(seconds * RATE / len(x))))[:int(seconds * RATE)]


def run_stream(addr, k, audio, block, lat, lost, start_at, model_frames):
    """One stream: pushes audio in real time from start_at, records the
    latency of each chunk."""
    c = ac.Client(addr, timeout=30)
    name = "lat-%d" % k
    c.subscribe(name, outputs=["embeddings"])
    sid = c.open_audio(name, rate=RATE, fmt="f32")
    sent_at = []   # (samples pushed so far, time) per block
    hop, win = model_frames

    def record(ev):
        if isinstance(ev, ac.Gap):
            lost[0] += ev.n_chunks
        if not isinstance(ev, ac.Chunk) or ev.n_frames == 0:
            return
        # Samples that complete its last frame.
        need = (ev.first_frame + ev.n_frames - 1) * hop + win
        for n, t in sent_at:
            if n >= need:
                lat.append(ev.received_us / 1e6 - t)
                return

    while time.time() < start_at:
        time.sleep(0.001)
    pushed = 0
    for i in range(0, len(audio), block):
        due = start_at + i / RATE
        while True:
            now = time.time()
            if now >= due:
                break
            for ev in c.events(timeout=due - now):
                record(ev)
                if time.time() >= due:
                    break
        c.send_audio(sid, audio[i:i + block])
        pushed += len(audio[i:i + block])
        sent_at.append((pushed, time.time()))
    c.close_audio(sid)
    for ev in c.events(timeout=0.5):
        record(ev)
    c.close()


def measure(aurald, model, addr_of, n, seconds, block_ms):
    """One transport's run, on an aurald of its own that is stopped and
    whose directory is removed whatever ends the run."""
    tmp = tempfile.mkdtemp(prefix="aural-weblat-")
    d = None
    try:
        d, port = start(aurald, model, tmp)
        return run(d, addr_of(os.path.join(tmp, "s"), port), n, seconds,
                   block_ms)
    finally:
        if d is not None and d.poll() is None:
            d.send_signal(signal.SIGTERM)
            try:
                d.wait(10)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def start(aurald, model, tmp):
    sock = os.path.join(tmp, "s")
    log = open(os.path.join(tmp, "aurald.log"), "w+")
    args = [aurald, "-s", sock, "--no-config", "--http", "127.0.0.1:0"]
    if model:
        args += ["-m", model]
    d = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    port = None
    # As long as it runs: loading the model, lexicon and LM takes seconds
    # on a busy machine (tools/wait_daemon.sh).
    for _ in range(6000):
        log.seek(0)
        text = log.read()
        if "serving" in text:
            port = int(text.split("http: listening on http://127.0.0.1:")[1]
                       .split("/")[0])
            break
        if d.poll() is not None:
            break
        time.sleep(0.05)
    if port is None:
        d.kill()
        log.seek(0)
        sys.exit("bench_web_latency: aurald did not start:\n" + log.read())
    return d, port


def run(d, addr, n, seconds, block_ms):
    probe = ac.Client(addr, timeout=10)
    m = probe.model
    hop = int(m["sample_rate"] * m["frame_ms"] / 1000)
    win = int(m["sample_rate"] * m.get("frame_length_ms", 25) / 1000)
    probe.close()
    audio = speech(seconds)
    block = int(RATE * block_ms / 1000)
    lat, lost = [], [0]
    start_at = time.time() + 1.0
    threads = [threading.Thread(target=run_stream,
                                args=(addr, k, audio, block, lat, lost,
                                      start_at, (hop, win)),
                                daemon=True)  # a Ctrl-C waits for none
               for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    d.send_signal(signal.SIGTERM)
    d.wait(10)
    return np.array(lat) * 1e3, lost[0]


def positive(kind):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            v = 0
        if not v > 0:
            raise argparse.ArgumentTypeError("more than 0, not %r" % text)
        return v
    return parse


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=positive(int), default=20)
    ap.add_argument("--seconds", type=positive(float), default=20.0)
    ap.add_argument("--block-ms", type=positive(float), default=20.0)
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("--aurald", default=os.path.join(HERE, "..", "build",
                                                     "daemon", "aurald"))
    a = ap.parse_args()
    transports = [("unix", lambda sock, port: sock),
                  ("websocket", lambda sock, port: "ws://127.0.0.1:%d/ws"
                   % port)]
    print("%d streams, %.0f s each, %.0f ms blocks, push->chunk latency (ms)"
          % (a.streams, a.seconds, a.block_ms))
    try:
        for name, addr_of in transports:
            lat, lost = measure(a.aurald, a.model, addr_of, a.streams,
                                a.seconds, a.block_ms)
            if len(lat) == 0:
                print("%-9s  no chunk measured, lost %d" % (name, lost))
                continue
            print("%-9s  p50 %6.1f  p99 %6.1f  max %6.1f  chunks %5d  lost %d"
                  % (name, np.percentile(lat, 50), np.percentile(lat, 99),
                     lat.max(), len(lat), lost), flush=True)
    except KeyboardInterrupt:
        print("bench_web_latency: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
