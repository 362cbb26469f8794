#!/usr/bin/env python3
"""Follows streams of a running aurald and prints one line per chunk.

Example:
    python3 tools/python/example_subscribe.py --stream mic --output text
    python3 tools/python/example_subscribe.py -s /tmp/x/aural.sock --all
"""

import argparse
import os
import signal
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aural_client import (Chunk, Client, Error, Gap,  # noqa: E402
                          ProtocolError, ServerError, StreamEnded,
                          StreamStarted, default_socket_path)


def main() -> int:
    ap = argparse.ArgumentParser(
        description="Subscribe to a stream of aurald (or all of them) and "
        "print one line per chunk: name, chunk number, frames, latency and "
        "the mean L2 norm of the embeddings, or the chunk's text.",
        epilog="example: %(prog)s -s /tmp/x/aural.sock --stream speech.wav")
    ap.add_argument("-s", "--socket", default=None,
                    help="aurald's socket (default: %s)" % default_socket_path())
    who = ap.add_mutually_exclusive_group()
    who.add_argument("--stream", metavar="NAME",
                     help="the stream to follow, by name (may start later)")
    who.add_argument("--all", action="store_true",
                     help="every stream (the default without --stream)")
    ap.add_argument("--output", choices=("embeddings", "logits", "text"),
                    default="embeddings", help="what to receive per chunk")
    ap.add_argument("--dtype", choices=("f32", "f16"), default="f32",
                    help="wire dtype of embeddings and logits")
    ap.add_argument("--until-end", action="store_true",
                    help="exit after the stream ends (with --all: the first "
                    "stream to end)")
    args = ap.parse_args()

    try:
        client = Client(args.socket, client_name="example_subscribe.py")
    except (OSError, ProtocolError, ServerError) as e:
        print("example_subscribe: %s" % e, file=sys.stderr)
        return 1
    with client:
        m = client.model
        print("connected to %s: d_model %s, vocab %s, %s frames per chunk"
              % (client.server, m.get("d_model"), m.get("vocab_size"),
                 m.get("chunk_frames")))
        try:
            client.subscribe(stream=args.stream, all=args.stream is None,
                             outputs=(args.output,), dtype=args.dtype)
        except ServerError as e:  # NO_HEAD: --output text of a bare encoder
            print("example_subscribe: subscription refused: %s" % e,
                  file=sys.stderr)
            return 1
        try:
            for ev in client.events():
                if isinstance(ev, StreamStarted):
                    print("%s  started (%s, %d Hz, %d ch)"
                          % (ev.name, ev.source, ev.sample_rate, ev.channels))
                elif isinstance(ev, Chunk):
                    frames = ("frames %d-%d" % (
                        ev.first_frame, ev.first_frame + ev.n_frames - 1)
                        if ev.n_frames else "no frames")
                    line = "%s  #%d  %s  latency %.1f ms" % (
                        ev.name, ev.seq, frames, ev.latency_ms)
                    if ev.emb is not None and ev.n_frames:
                        line += "  |emb| %.2f" % float(
                            np.linalg.norm(ev.emb, axis=1).mean())
                    if ev.logits is not None and ev.n_frames:
                        line += "  |logits| %.2f" % float(
                            np.linalg.norm(ev.logits, axis=1).mean())
                    if ev.final:
                        line += "  final"
                    if ev.text:
                        line += "  " + ev.text
                    print(line, flush=True)
                elif isinstance(ev, Gap):
                    print("%s: lost chunks %d-%d (%s)"
                          % (ev.name, ev.first_chunk,
                             ev.first_chunk + ev.n_chunks - 1, ev.reason),
                          file=sys.stderr)
                elif isinstance(ev, StreamEnded):
                    print("%s  ended: %s, %d frames, %d chunks"
                          % (ev.name, ev.reason, ev.frames, ev.chunks),
                          flush=True)
                    if args.until_end:
                        return 0
                elif isinstance(ev, Error):
                    print("aurald: %s: %s" % (ev.name, ev.message),
                          file=sys.stderr)
                    if ev.fatal:
                        return 3
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            # Whoever read our output has gone (| head): end as a shell
            # tool does, by SIGPIPE and quietly (Python ignores the
            # signal and raises this instead).
            sys.stdout = None  # nothing left to flush at exit
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGPIPE)
            return 141
        except (ProtocolError, OSError) as e:
            print("example_subscribe: %s" % e, file=sys.stderr)
            return 3
    print("aurald closed the connection", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
