#!/usr/bin/python3
"""Checks the bundled model on the bundled recording through the C CLI.

    check_sample.py [--aural PATH] [--model PATH] [--sample PATH]
                    [--phonemes PATH] [--max-per X]

Runs `aural encode --output text` on models/sample.flac with
models/default.safetensors, compares the greedy transcript (ARPAbet
phones) with models/sample.phonemes.txt (space-separated tokens of the
model's vocab) and
exits 1 when the phoneme error rate (edit distance / reference length)
exceeds --max-per, 2 when the CLI fails. Standard library only.

MAX_PER is the PER measured when the model was trained (see
models/README.md) plus a small margin; a larger value means the model, the
frontend, the resampler or the encoder changed behaviour.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from phonemes import edit_distance  # noqa: E402

MEASURED_PER = 0.0  # models/default.safetensors as committed
MAX_PER = MEASURED_PER + 0.05  # four more phoneme errors in 82


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--aural", default=os.path.join(ROOT, "build", "tools", "aural"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.safetensors"))
    ap.add_argument("--sample", default=os.path.join(ROOT, "models", "sample.flac"))
    ap.add_argument("--phonemes", default=os.path.join(ROOT, "models", "sample.phonemes.txt"))
    ap.add_argument("--max-per", type=float, default=MAX_PER)
    args = ap.parse_args()

    with open(args.phonemes, encoding="utf-8") as f:
        ref = f.read().split()
    p = subprocess.run([args.aural, "encode", "-q", "-m", args.model, "--output", "text",
                        args.sample], capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        print("check_sample: %s failed with status %d" % (args.aural, p.returncode))
        return 2
    hyp = p.stdout.split()
    per = edit_distance(ref, hyp) / max(len(ref), 1)
    ok = per <= args.max_per
    print("check_sample: PER %.4f (%d reference phonemes, %d decoded), limit %.4f: %s" % (
        per, len(ref), len(hyp), args.max_per, "ok" if ok else "FAILED"))
    if not ok:
        print("reference: " + " ".join(ref))
        print("decoded:   " + " ".join(hyp))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
