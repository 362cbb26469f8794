#!/usr/bin/python3
"""PyTorch reference throughput of the streaming encoder (one thread, float32).

Runs tools/reference/aural_ref.py's AuralEncoder with its per-layer KV cache
(forward_chunk) under torch.no_grad(), on random features with random
weights, in two modes:

  chunk mode   50 new frames per forward_chunk call (one 500 ms chunk)
  frame mode   1 new frame per call (lowest latency)

Each mode first streams a warm-up (W + 100 frames, so every KV cache is
full and steady), then times --frames more frames of the same stream; the
best of --repeats runs is reported as frames per second. This is the peer
that the C encoder is compared with (DESIGN.md §7).

Which BLAS kernel runs matters a lot: Debian's OpenBLAS 0.3.21 chooses its
kernel from the CPU, or from the OPENBLAS_CORETYPE environment variable,
read once when the library loads. DESIGN.md §7 found it falling back to a
slow generic kernel on this machine kind; run

    OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 tools/reference/bench_torch.py

to see PyTorch at its best. This script never sets the variable itself; it
reports the kernel actually in use (openblas_get_corename()).
"""

import argparse
import ctypes
import json
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import aural_ref  # noqa: E402


def blas_info():
    """A one-line description of the BLAS PyTorch loaded, with OpenBLAS's
    active core when it is OpenBLAS. Call after a matrix product ran."""
    build = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    parts = ["BLAS_INFO=%s" % (build.group(1) if build else "?")]
    libs = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if path.startswith("/") and re.search(r"blas|mkl_rt|libmkl", path) and path not in libs:
                libs.append(path)
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
            core, config = lib.openblas_get_corename, lib.openblas_get_config
        except (OSError, AttributeError):
            continue
        core.restype = config.restype = ctypes.c_char_p
        parts.append("%s (%s, core %s)" % (path, config().decode(), core().decode()))
        break
    else:
        parts += libs
    parts.append("OPENBLAS_CORETYPE=%s" % os.environ.get("OPENBLAS_CORETYPE", "(unset)"))
    return "; ".join(parts)


def run(model, feats, chunk, warmup, repeats):
    """Best frames/s over `repeats` timings of feats streamed `chunk` frames
    per call, each after a fresh stream warmed with `warmup` frames."""
    best = 0.0
    pieces = feats.split(chunk)
    for _ in range(repeats):
        state = model.init_state()
        for w in warmup.split(chunk):
            model.forward_chunk(w, state)
        t0 = time.perf_counter()
        for p in pieces:
            model.forward_chunk(p, state)
        dt = time.perf_counter() - t0
        best = max(best, feats.shape[0] / dt)
    return best


def main():
    ap = argparse.ArgumentParser(
        description="PyTorch reference throughput of the streaming encoder "
                    "(1 thread, float32, KV cache).",
        epilog="OpenBLAS reads OPENBLAS_CORETYPE once at load: run with "
               "OPENBLAS_CORETYPE=SkylakeX in the environment to see PyTorch's "
               "best on AVX-512 machines (DESIGN.md §7). The script does not set it.")
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument("--pos", choices=aural_ref.POS_ENCODINGS, default="rope")
    ap.add_argument("--frames", type=int, default=2000, help="timed frames per run (2000)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per mode; best is kept (3)")
    ap.add_argument("--chunk", type=int, default=50, help="frames per call in chunk mode (50)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()

    torch.set_num_threads(1)
    cfg = aural_ref.complete_config(dict(
        d_model=args.d_model, n_heads=args.heads, n_layers=args.layers, d_ff=args.d_ff,
        activation="gelu", norm_first=True, window=args.window,
        pos_encoding=args.pos, final_norm=True))
    model = aural_ref.init_random(aural_ref.AuralEncoder(cfg), seed=0).float().eval()
    g = torch.Generator().manual_seed(0)
    n_mels = cfg["num_mel_bins"]
    warmup = torch.randn(args.window + 100, n_mels, generator=g) * 3 + 10
    feats = torch.randn(args.frames, n_mels, generator=g) * 3 + 10

    with torch.no_grad():
        chunk_fps = run(model, feats, args.chunk, warmup, args.repeats)
        frame_fps = run(model, feats, 1, warmup, args.repeats)
    result = {
        "torch_version": torch.__version__,
        "config": {k: cfg[k] for k in ("d_model", "n_heads", "d_ff", "n_layers",
                                       "window", "pos_encoding")},
        "chunk_frames": args.chunk,
        "chunk_frames_per_s": round(chunk_fps, 1),
        "frame_frames_per_s": round(frame_fps, 1),
        "blas": blas_info(),
    }
    if args.json:
        print(json.dumps(result))
    else:
        c = result["config"]
        print("torch %s, 1 thread, float32: d=%d, %d heads, d_ff %d, %d layers, W=%d, %s"
              % (torch.__version__, c["d_model"], c["n_heads"], c["d_ff"],
                 c["n_layers"], c["window"], c["pos_encoding"]))
        print("BLAS: %s" % result["blas"])
        print("chunk mode (%d frames/call): %8.0f frames/s" % (args.chunk, chunk_fps))
        print("frame mode (1 frame/call):  %8.0f frames/s" % frame_fps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
