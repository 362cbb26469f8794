#!/usr/bin/python3
"""Benchmark torchaudio's Kaldi fbank cost per 10 ms frame (16 kHz, 1 thread).

Two measurements, both with the same fbank options as the golden data
(tools/gen_fbank_goldens.py: 80 mel bins, 25/10 ms, povey window, dither 0):

  (a) batch path:     one fbank() call over 60 s of seeded white noise
                      (5998 frames); reported as microseconds per output
                      frame, best of 5 runs.
  (b) per-frame path: fbank() called separately on each 400-sample window
                      (hop 160), i.e. one frame per call as a naive streaming
                      user would do, for 2000 frames; microseconds per call,
                      best of 3 runs.

Run (from the repository root):

    /usr/bin/python3 tools/bench_frontend_torch.py          # human readable
    /usr/bin/python3 tools/bench_frontend_torch.py --json   # + one JSON line

Requires torch + torchaudio (tested with torch 1.13 / torchaudio 0.13.1).
"""

import argparse
import json
import time

import numpy as np
import torch
import torchaudio
import torchaudio.compliance.kaldi as kaldi

RATE = 16000
FRAME_LEN = 400
FRAME_SHIFT = 160

FBANK_KW = dict(num_mel_bins=80, frame_length=25, frame_shift=10, dither=0.0,
                preemphasis_coefficient=0.97, remove_dc_offset=True,
                window_type="povey", round_to_power_of_two=True,
                snip_edges=True, low_freq=20, high_freq=0, use_power=True,
                use_log_fbank=True, use_energy=False, sample_frequency=RATE)


def bench_batch(wav, repeats=5):
    """Best-of-`repeats` time per output frame (us) for one call over `wav`."""
    n_frames = kaldi.fbank(wav, **FBANK_KW).shape[0]  # warm-up + frame count
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        kaldi.fbank(wav, **FBANK_KW)
        best = min(best, time.perf_counter() - t0)
    return best / n_frames * 1e6, n_frames


def bench_per_frame(wav, n_frames=2000, repeats=3):
    """Best-of-`repeats` mean time (us) of one fbank call per 400-sample window."""
    windows = [wav[:, i * FRAME_SHIFT:i * FRAME_SHIFT + FRAME_LEN].contiguous()
               for i in range(n_frames)]
    for w in windows[:50]:  # warm-up
        kaldi.fbank(w, **FBANK_KW)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for w in windows:
            out = kaldi.fbank(w, **FBANK_KW)
        best = min(best, time.perf_counter() - t0)
    assert out.shape == (1, 80)
    return best / n_frames * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true",
                    help="also print one JSON object with the results")
    args = ap.parse_args()

    torch.set_num_threads(1)
    rng = np.random.default_rng(1234)
    # 60 s of white noise at roughly speech-like int16 scale.
    audio = (rng.standard_normal(60 * RATE) * 3000.0).astype(np.float32)
    wav = torch.from_numpy(audio).unsqueeze(0)

    batch_us, n = bench_batch(wav)
    per_call_us = bench_per_frame(wav)

    print("torch %s / torchaudio %s, 1 thread: batch %.2f us/frame "
          "(60 s, %d frames, best of 5); per-frame call %.1f us/frame "
          "(2000 single-frame calls, best of 3)"
          % (torch.__version__, torchaudio.__version__, batch_us, n, per_call_us))
    if args.json:
        print(json.dumps({"torchaudio_batch_us_per_frame": round(batch_us, 3),
                          "torchaudio_per_frame_call_us": round(per_call_us, 3),
                          "torch_version": torch.__version__,
                          "torchaudio_version": torchaudio.__version__}))


if __name__ == "__main__":
    main()
