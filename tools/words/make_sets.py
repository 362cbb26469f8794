#!/usr/bin/python3
"""Synthesizes the word-level dev and test sets of the default model.

    make_sets.py --out DIR [--dev-count 300] [--test-count 200] [--seed 1]

DIR/test is exactly what `tools/train/synth.py test --count N --seed S`
writes (held-out sentences; N utterances in training voices and N in the
unseen voices en-us-nyc+m6 and en-gb-x-rp+f4, half each; each clean and
with white noise at 20 dB SNR; 22.05 kHz WAV under {seen,unseen}/{clean,
snr20}/, refs.tsv with the phoneme references) and in addition words.tsv,
the word references normalized by wordlib.normalize.

DIR/dev holds the dev sentences (wordlib.split_dev: training-split
sentences kept out of the LM corpus and the pronunciation harvest) in
training voices, made the same way as the test set's training-voice group
(random dialect and variant, 140-200 words per minute, pitch 35-65, clean
and 20 dB SNR), under seen/{clean,snr20}/, with refs.tsv and words.tsv in
the same formats. It is for tuning decoder parameters; the acoustic model
has heard these sentences in training (in other voices and speeds), the LM
has not.

words.tsv: a header line `group<TAB>file<TAB>voice<TAB>words`, then one
line per utterance, `words` the space-separated normalized reference.
Every choice is drawn from numpy generators seeded with --seed.
"""

import argparse
import os
import sys
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wordlib  # noqa: E402
from wordlib import corpus  # noqa: E402
import synth  # noqa: E402  (tools/train, on the path through wordlib)


def write_words(out):
    """DIR/words.tsv from DIR/refs.tsv."""
    with open(os.path.join(out, "refs.tsv"), encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        refs = [dict(zip(header, l.rstrip("\n").split("\t"))) for l in f if l.strip()]
    with open(os.path.join(out, "words.tsv"), "w", encoding="utf-8") as f:
        f.write("group\tfile\tvoice\twords\n")
        for r in refs:
            f.write("%s\t%s\t%s\t%s\n" % (r["group"], r["file"], r["voice"],
                                          " ".join(wordlib.normalize(r["text"]))))
    return len(refs)


def make_dev(out, count, seed):
    _, dev, _ = wordlib.split_dev()
    count = min(count, len(dev))
    rng = np.random.default_rng([seed, 17])
    for cond in ("clean", "snr20"):
        os.makedirs(os.path.join(out, "seen", cond), exist_ok=True)
    rows = []
    for i in range(count):
        voice = corpus.voice_name(
            corpus.TRAIN_DIALECTS[rng.integers(len(corpus.TRAIN_DIALECTS))],
            corpus.TRAIN_VARIANTS[rng.integers(len(corpus.TRAIN_VARIANTS))])
        wpm, pitch = int(rng.integers(140, 201)), int(rng.integers(35, 66))
        text = dev[i]
        pcm22, toks = synth.espeak(voice, wpm, pitch, text)
        x = pcm22.astype(np.float64) / 32768.0
        name = "%04d.wav" % i
        synth.write_wav(os.path.join(out, "seen", "clean", name), x)
        noise = np.random.default_rng([seed, 18, i]).standard_normal(len(x))
        synth.write_wav(os.path.join(out, "seen", "snr20", name), synth.add_noise(x, 20.0, noise))
        rows.append("\t".join(["seen", name, voice, str(wpm), str(pitch), text, " ".join(toks)]))
    with open(os.path.join(out, "refs.tsv"), "w", encoding="utf-8") as f:
        f.write("group\tfile\tvoice\twpm\tpitch\ttext\tphonemes\n")
        f.write("\n".join(rows) + "\n")
    return count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dev-count", type=int, default=300)
    ap.add_argument("--test-count", type=int, default=200,
                    help="utterances per voice group (training, unseen)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.dev_count:
        d = os.path.join(args.out, "dev")
        n = make_dev(d, args.dev_count, args.seed)
        write_words(d)
        print("%s: %d utterances x 2 conditions" % (d, n))
    if args.test_count:
        t = os.path.join(args.out, "test")
        synth.cmd_test(types.SimpleNamespace(out=t, count=args.test_count, seed=args.seed))
        write_words(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
