#!/usr/bin/python3
"""How soon a word shows in the partials: for every final word of a set's
utterances, the chunk in which it first appeared (in a partial or a final,
with the same start frame) against the chunk in which it ends. Streams go
through a running aurald (words on), pushed by the Python client.

    tools/words/partial_latency.py --socket SOCK --set /tmp/aural-words/test/seen/clean

Prints the distribution of the delay in chunks (0: the word appeared in the
chunk holding its last frame; 1: the next chunk) and its 95th percentile.
"""
import argparse
import glob
import os
import sys
import wave

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import aural_client as ac  # noqa: E402


def read_wav(path):
    with wave.open(path) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1
        return w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), np.int16)


def delays_of(sock, path, name):
    """Per final word: first chunk seen - chunk of its end frame."""
    rate, pcm = read_wav(path)
    sub = ac.Client(sock, timeout=30)
    chunk = int(sub.model["chunk_frames"])
    sub.subscribe(name, outputs=("words",))
    feed = ac.Client(sock, timeout=30)
    sid = feed.open_audio(name, rate, 1, "s16")
    feed.send_audio(sid, pcm)
    feed.close_audio(sid)
    first_seen = {}  # (word, start) -> seq
    finals = []
    for ev in sub.events(timeout=30):
        if not isinstance(ev, ac.Words):
            continue
        for w in [w for seg in ev.segments for w in seg] + ev.partial:
            first_seen.setdefault((w.word, w.start), ev.seq)
        for seg in ev.segments:
            finals.extend(seg)
        if ev.final:
            break
    sub.close()
    feed.close()
    return [first_seen[(w.word, w.start)] - (w.end - 1) // chunk for w in finals]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--set", required=True, help="a directory of WAV files")
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()
    files = sorted(glob.glob(os.path.join(args.set, "*.wav")))
    if args.limit:
        files = files[:args.limit]
    delays = []
    for i, f in enumerate(files):
        delays += delays_of(args.socket, f, "lat-%d" % i)
    d = np.array(delays)
    print("%d final words of %d utterances" % (len(d), len(files)))
    for k in range(int(d.max()) + 1 if len(d) else 0):
        print("  delay %d chunk%s: %5.1f%%" % (k, "" if k == 1 else "s", 100 * np.mean(d == k)))
    print("p95 delay: %d chunk(s); the worst: %d" % (np.percentile(d, 95), d.max()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
