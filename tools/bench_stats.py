#!/usr/bin/python3
"""How long aurald takes to answer STATS with N streams and N subscribers
that each receive every stream (N^2 deliveries), and how long a PING from
another client waits behind K pipelined STATS.

    tools/bench_stats.py --aurald build/daemon/aurald [--n 128 256 512]

Starts its own aurald on a private socket with the tiny test model; prints
one line per N. Compare builds side by side in one run on one machine.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from test_daemon import HEADER, MAGIC, TINY, ac, msg, raw_client, read_msg  # noqa


def one(aurald, n, k):
    tmp = tempfile.mkdtemp(prefix="bench-stats-")
    path = os.path.join(tmp, "s.sock")
    log = open(os.path.join(tmp, "log"), "w")
    p = subprocess.Popen([aurald, "-m", TINY, "-s", path, "--threads", "1",
                          "--max-streams", str(n + 16)], stdout=log,
                         stderr=subprocess.STDOUT)
    try:
        while not os.path.exists(path):
            time.sleep(0.02)
        time.sleep(0.2)
        openers = []
        for i in range((n + 15) // 16):
            o = ac.Client(path, timeout=60)
            for j in range(min(16, n - 16 * i)):
                o.open_audio("s%d" % (16 * i + j))
            openers.append(o)
        subs = []
        for _ in range(n):
            s = raw_client(path)
            s.sendall(msg(ac.SUBSCRIBE, {"all": True}))
            subs.append(s)
        # Drain what the subscribers were sent (their STREAM_STARTEDs).
        for s in subs:
            assert read_msg(s)[0] == ac.SUBSCRIBED
            for _ in range(n):
                read_msg(s)
        c = raw_client(path)
        c.settimeout(600)
        t0 = time.monotonic()
        c.sendall(msg(ac.STATS))
        read_msg(c)
        one_stats = time.monotonic() - t0
        # K pipelined STATS, then a PING from another client.
        pinger = raw_client(path)
        pinger.settimeout(600)
        got = []
        reader = threading.Thread(
            target=lambda: [got.append(read_msg(c)) for _ in range(k)])
        reader.start()
        c.sendall(msg(ac.STATS) * k)
        time.sleep(0.005)
        t0 = time.monotonic()
        pinger.sendall(msg(ac.PING, b"p"))
        read_msg(pinger)
        ping = time.monotonic() - t0
        reader.join()
        print("N=%4d  one STATS %8.1f ms   PING behind %d STATS %8.1f ms"
              % (n, one_stats * 1e3, k, ping * 1e3), flush=True)
        for s in subs + [c, pinger]:
            s.close()
        for o in openers:
            o.close()
    finally:
        p.terminate()
        p.wait(30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aurald", required=True)
    ap.add_argument("--n", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--k", type=int, default=256,
                    help="pipelined STATS before the PING (default 256)")
    a = ap.parse_args()
    for n in a.n:
        one(a.aurald, n, a.k)


if __name__ == "__main__":
    main()
