#!/usr/bin/python3
"""Writes models/sample.phonemes.txt, the reference phonemes of models/sample.flac.

    sample_phonemes.py [--model models/default.safetensors]

The recording is made by tools/make_sample_recording.sh (espeak-ng en-us,
165 words/min, at 22.05 kHz); its sentences are corpus.SAMPLE_TEXT and are
held out of training. The script first re-synthesizes the speech and checks
that it equals the samples in the FLAC file, so the text and the recording
cannot drift apart, then writes espeak-ng's phonemes in the model's
tokens, as the training labels are made: mnemonics that en-us speaks
identically merged (phonemes.canonical), then, for a model of ARPAbet
phones, mapped by arpabet.from_espeak; and checks every token is in the
model's vocab.
"""

import argparse
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
import arpabet  # noqa: E402
import corpus  # noqa: E402
import export  # noqa: E402
import phonemes  # noqa: E402
import synth  # noqa: E402


def decode_flac(path):
    p = subprocess.run(["sox", path, "-t", "raw", "-e", "signed", "-b", "16", "-"],
                       check=True, capture_output=True)
    return np.frombuffer(p.stdout, dtype="<i2")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.safetensors"))
    ap.add_argument("--sample", default=os.path.join(ROOT, "models", "sample.flac"))
    ap.add_argument("-o", "--out", default=os.path.join(ROOT, "models", "sample.phonemes.txt"))
    args = ap.parse_args()

    pcm, toks = synth.espeak(corpus.SAMPLE_VOICE, corpus.SAMPLE_WPM, 50, corpus.SAMPLE_TEXT)
    flac = decode_flac(args.sample)
    if len(flac) != len(pcm) or not np.array_equal(flac, pcm):
        raise SystemExit("%s is not espeak-ng's %s reading of corpus.SAMPLE_TEXT" % (
            args.sample, corpus.SAMPLE_VOICE))
    toks = phonemes.canonical(toks, corpus.SAMPLE_VOICE)
    _, config, _ = export.read(args.model)
    if config["vocab"] == arpabet.VOCAB:
        toks = arpabet.from_espeak(toks, corpus.SAMPLE_VOICE)
    missing = sorted(set(toks) - set(config["vocab"]))
    if missing:
        raise SystemExit("sample phonemes not in the model vocab: %s" % " ".join(missing))
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(" ".join(toks) + "\n")
    print("wrote %s: %d phonemes, %.2f s" % (args.out, len(toks), len(pcm) / 22050.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
