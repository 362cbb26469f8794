#!/usr/bin/env python3
"""Checks the Python client against a running aurald.

Opens a client stream, subscribes to it by name, pushes a 16-bit WAV file
(read with the standard wave module, sent as s16), closes it, collects every
chunk until STREAM_ENDED and checks that:

- the concatenated embeddings equal EXPECTED.npy (what `aural encode` computes
  offline for the same file) within 1e-5 max abs;
- chunk seq numbers run from 0 without a hole, frame ranges are contiguous,
  and only the last chunk, which is flagged FINAL, may be short (or empty,
  when the frames filled whole chunks);
- STREAM_ENDED and AUDIO_CLOSED agree with what arrived;
- PING echoes its data.

Exit status 0 on success, 1 with a message naming the failed check.

Example:
    aurald -m tests/data/encoder/tiny.safetensors -s /tmp/x/aural.sock &
    aural encode -m tests/data/encoder/tiny.safetensors -o /tmp/x/e.npy in.wav
    tests/integration/python_client_check.py --socket /tmp/x/aural.sock \\
        --input in.wav --expect /tmp/x/e.npy
"""

import argparse
import os
import sys
import wave

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "python"))
from aural_client import (Chunk, Client, Error, Gap, StreamEnded,  # noqa: E402
                          StreamStarted)


class CheckFailed(Exception):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise CheckFailed(what)


def read_wav_s16(path: str):
    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2:
            raise CheckFailed("%s: %d-bit samples; this check sends 16-bit "
                              "WAV files only" % (path, 8 * w.getsampwidth()))
        rate, channels = w.getframerate(), w.getnchannels()
        data = w.readframes(w.getnframes())
    x = np.frombuffer(data, "<i2").reshape(-1, channels)
    return x, rate, channels


def run(args) -> None:
    samples, rate, channels = read_wav_s16(args.input)
    expect = np.load(args.expect)
    check(expect.ndim == 2, "%s: expected a 2-D array" % args.expect)
    name = args.name or "pycheck-%d" % os.getpid()

    with Client(args.socket, client_name="python_client_check",
                timeout=args.timeout) as c:
        d_model = int(c.model["d_model"])
        model_chunk_frames = c.model["chunk_frames"]
        check(expect.shape[1] == d_model,
              "%s has rows of %d, the model's d_model is %d"
              % (args.expect, expect.shape[1], d_model))
        rtt = c.ping(b"python_client_check")
        check(rtt >= 0, "ping")
        sub = c.subscribe(stream=name, outputs=("embeddings",), dtype="f32")
        sid = c.open_audio(name, rate=rate, channels=channels, fmt="s16")
        # Several pushes of uneven size, as a live client would send.
        step = max(1, rate // 7)
        for i in range(0, len(samples), step):
            c.send_audio(sid, samples[i:i + step])
        totals = c.close_audio(sid)
        check(c.ping(b"again") >= 0, "ping after the stream")

        started = None
        ended = None
        chunks = []
        for ev in c.events(timeout=args.timeout):
            if isinstance(ev, StreamStarted) and ev.stream_id == sid:
                check(started is None, "two STREAM_STARTED for the stream")
                started = ev
            elif isinstance(ev, Chunk) and ev.stream_id == sid:
                check(started is not None, "CHUNK before STREAM_STARTED")
                chunks.append(ev)
            elif isinstance(ev, Gap):
                raise CheckFailed("lost chunks %d-%d (%s)" % (
                    ev.first_chunk, ev.first_chunk + ev.n_chunks - 1,
                    ev.reason))
            elif isinstance(ev, Error):
                raise CheckFailed("aurald: %s: %s" % (ev.name, ev.message))
            elif isinstance(ev, StreamEnded) and ev.stream_id == sid:
                ended = ev
                break
        check(started is not None, "no STREAM_STARTED for stream %d" % sid)
        check(ended is not None, "no STREAM_ENDED for stream %d within %s s"
              % (sid, args.timeout))
        check(started.name == name, "STREAM_STARTED names %r, not %r"
              % (started.name, name))
        check(started.next_chunk == 0, "subscribed before the data, but "
              "next_chunk is %d" % started.next_chunk)
        check(ended.reason == "closed", "STREAM_ENDED reason %r, expected "
              "'closed'" % ended.reason)
        c.unsubscribe(sub)

    check(len(chunks) > 0, "no chunks arrived")
    seqs = [ck.seq for ck in chunks]
    check(seqs == list(range(len(chunks))),
          "seq numbers are not 0..%d in order: %s" % (len(chunks) - 1, seqs))
    chunk_frames = int(model_chunk_frames)
    frame = 0
    for ck in chunks:
        check(ck.first_frame == frame, "chunk %d starts at frame %d, expected "
              "%d" % (ck.seq, ck.first_frame, frame))
        last = ck is chunks[-1]
        check(ck.final == last, "chunk %d FINAL flag is %s" % (ck.seq,
                                                               ck.final))
        check(last or ck.n_frames == chunk_frames, "chunk %d has %d frames, "
              "not %d" % (ck.seq, ck.n_frames, chunk_frames))
        check(ck.emb is not None and ck.emb.shape == (ck.n_frames, d_model),
              "chunk %d embeddings have shape %s" % (
                  ck.seq, None if ck.emb is None else ck.emb.shape))
        frame += ck.n_frames
    check(ended.chunks == len(chunks) and ended.frames == frame,
          "STREAM_ENDED says %d frames, %d chunks; %d frames, %d chunks "
          "arrived" % (ended.frames, ended.chunks, frame, len(chunks)))
    check(totals == {"frames": frame, "chunks": len(chunks)},
          "AUDIO_CLOSED says %s; %d frames, %d chunks arrived"
          % (totals, frame, len(chunks)))

    got = np.concatenate([ck.emb for ck in chunks])
    check(got.shape == expect.shape, "embeddings have shape %s, %s has %s"
          % (got.shape, args.expect, expect.shape))
    err = float(np.max(np.abs(got - expect))) if got.size else 0.0
    check(err <= 1e-5, "embeddings differ from %s by up to %.3g (at most 1e-5 "
          "allowed)" % (args.expect, err))
    print("python client check: %d chunks, %d frames x %d, max abs diff "
          "%.2g, ping %.2f ms" % (len(chunks), frame, d_model, err, rtt * 1e3))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True, help="aurald's socket")
    ap.add_argument("--input", required=True, help="a 16-bit WAV file")
    ap.add_argument("--expect", required=True,
                    help="its embeddings from `aural encode` (.npy)")
    ap.add_argument("--name", help="stream name (default: pycheck-PID)")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds to wait for any one reply or event")
    args = ap.parse_args()
    try:
        run(args)
    except CheckFailed as e:
        print("python client check FAILED: %s" % e, file=sys.stderr)
        return 1
    except Exception as e:  # a broken connection, a refused request, ...
        print("python client check FAILED: %s: %s" % (type(e).__name__, e),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
