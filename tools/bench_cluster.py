#!/usr/bin/python3
"""What cluster mode costs a node: the same N real-time streams pushed to
one aurald over its Unix socket (`aural load`), then taken from a private
redis-server (`aurald --cluster`), side by side in one run.

    tools/bench_cluster.py [-m MODEL] [--seconds S] [N ...]

Reports, for each N and mode, aurald's CPU seconds per stream-second (its
/proc counters over the run; the producers' own CPU is not counted) and the
chunk latency aurald saw (ready -> emitted, from the chunks' own headers in
cluster mode; `aural load`'s ready -> received for the local runs, which
includes the socket). Capacity in real-time streams is CPU-bound, so the
ratio of CPU per stream is the ratio of streams per node.

Defaults: the bundled model, 30 s, N = 20 60. Input: the bundled recording
at 16 kHz (sox), 16-bit, in 100 ms pieces both ways (entries in cluster
mode, AUDIO_DATA messages locally). Whatever ends the run (Ctrl-C, exit
status 130; a failure), the aurald and redis-server it started are stopped
and its files removed.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import wave

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AURALD = os.path.join(ROOT, "build", "daemon", "aurald")
AURAL = os.path.join(ROOT, "build", "tools", "aural")
SAMPLE = os.path.join(ROOT, "models", "sample.flac")
CHUNK = struct.Struct("<QQIIqqqqIIHBBI")

# The daemons started, stopped at the end whatever ends the run.
children = []


def spawn(argv, **kw):
    p = subprocess.Popen(argv, **kw)
    children.append(p)
    return p


def stop_children():
    for p in children:
        if p.poll() is None:
            p.terminate()
    for p in children:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_daemon(work, model, *extra):
    sock = os.path.join(work, "aural.sock")
    log = open(os.path.join(work, "aurald.log"), "a")
    p = spawn([AURALD, "-m", model, "-s", sock, "--no-config", *extra],
              stdout=log, stderr=subprocess.STDOUT)
    for _ in range(6000):
        if os.path.exists(sock) or p.poll() is not None:
            break
        time.sleep(0.05)
    if not os.path.exists(sock):
        log.flush()
        with open(log.name) as f:
            sys.exit("bench_cluster.py: aurald did not start:\n" + f.read())
    time.sleep(0.5)
    return p, sock


def stop(p):
    p.terminate()
    p.wait(30)


def run_local(work, model, wav, n, seconds):
    p, sock = start_daemon(work, model, "--max-streams", str(n + 10))
    c0 = cpu_seconds(p.pid)
    out = subprocess.run([AURAL, "load", "-s", sock, "-n", str(n),
                          "--block-ms", "100", "--seconds", str(seconds),
                          "--json", wav],
                         stdout=subprocess.PIPE, text=True)
    if out.returncode not in (0, 3):  # 3: chunks lost, still a report
        sys.exit("bench_cluster.py: aural load: exit status %d"
                 % out.returncode)
    cpu = cpu_seconds(p.pid) - c0
    stop(p)
    res = json.loads(out.stdout)
    lat = res.get("latency_ms", res.get("latency", {}))
    return cpu, lat.get("p50"), lat.get("p99")


def produce(r_sock, names, pcm, rate, seconds):
    """Every stream's audio at 1x in 100 ms entries, one pipeline a tick."""
    r = redis.Redis(unix_socket_path=r_sock)
    for name in names:
        r.xadd("aural:announce", {"name": name, "rate": rate,
                                  "channels": 1, "format": "s16"})
    block = rate // 10
    total = rate * seconds
    t0 = time.monotonic()
    for at in range(0, total, block):
        wait = t0 + at / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        k = min(block, total - at)
        src = (at % (len(pcm) // 2 - block)) * 2
        pipe = r.pipeline(transaction=False)
        for name in names:
            pipe.xadd("aural:{%s}:audio" % name,
                      {"pcm": pcm[src:src + 2 * k]}, id="%d-1" % at)
        pipe.execute()
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.xadd("aural:{%s}:audio" % name, {"end": "1"},
                  id="%d-1" % total)
    pipe.execute()


def run_cluster(work, model, wav, n, seconds):
    rsock = os.path.join(work, "redis.sock")
    rp = spawn(["redis-server", "--port", "0", "--unixsocket", rsock,
                "--save", "", "--appendonly", "no", "--dir", work],
               stdout=subprocess.DEVNULL)
    r = redis.Redis(unix_socket_path=rsock)
    for _ in range(200):
        try:
            r.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    p, _ = start_daemon(work, model, "--cluster", "unix:" + rsock,
                        "--cluster-capacity", str(n + 10),
                        "--max-streams", str(n + 10))
    with wave.open(wav) as w:
        rate, pcm = w.getframerate(), w.readframes(w.getnframes())
    names = ["b%d" % i for i in range(n)]
    c0 = cpu_seconds(p.pid)
    produce(rsock, names, pcm, rate, seconds)
    deadline = time.monotonic() + 60
    left = set(names)
    while left and time.monotonic() < deadline:
        for name in list(left):
            last = r.xrevrange("aural:{%s}:out" % name, count=1)
            if last and last[0][1].get(b"final") == b"1":
                left.discard(name)
        time.sleep(0.2)
    cpu = cpu_seconds(p.pid) - c0
    lat = []
    for name in names:
        for _, f in r.xrange("aural:{%s}:out" % name):
            h = CHUNK.unpack_from(f[b"chunk"])
            if not h[3] & 1:  # the final chunk waits for the end entry
                lat.append((h[7] - h[6]) / 1000)
    stop(p)
    rp.kill()
    rp.wait()
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None
    return cpu, pick(0.5), pick(0.99), len(left)


def positive(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError("a whole number of 1 or more, not %r"
                                         % text)
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model",
                    default=os.path.join(ROOT, "models", "default.safetensors"))
    ap.add_argument("--seconds", type=positive, default=30)
    ap.add_argument("counts", nargs="*", type=positive, default=[20, 60])
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="aural-bench-cluster-")
    try:
        wav = os.path.join(work, "in.wav")
        subprocess.run(["sox", SAMPLE, "-r", "16000", "-b", "16", wav],
                       check=True)
        print("%6s %8s %16s %10s %10s %s" % ("streams", "mode",
                                            "cpu s/stream-s", "p50 ms",
                                            "p99 ms", "unfinished"))
        for n in a.counts:
            cpu, p50, p99 = run_local(work, a.model, wav, n, a.seconds)
            local = cpu / (n * a.seconds)
            print("%6d %8s %16.4f %10s %10s" % (n, "local", local, p50, p99))
            cpu, p50, p99, left = run_cluster(work, a.model, wav, n,
                                              a.seconds)
            clus = cpu / (n * a.seconds)
            print("%6d %8s %16.4f %10.1f %10.1f %d" % (n, "cluster", clus,
                                                      p50, p99, left))
            print("       cluster/local CPU per stream: %.3f" %
                  (clus / local))
            sys.stdout.flush()
    except KeyboardInterrupt:
        print("bench_cluster.py: interrupted", file=sys.stderr)
        sys.exit(130)
    finally:
        stop_children()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
