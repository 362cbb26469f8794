#!/usr/bin/python3
"""The default model's test set over engines and conditions, and its scoring
through the C path.

    multi_test.py make  --out DIR [--count N] [--seed S]
    multi_test.py score --test DIR [--model M] [--aural BIN] [--json OUT]
                        [--precision f32|bf16]

`make` writes, for held-out test sentences only (corpus.split_sentences),
N utterances in each of four groups:

  flite      flite's held-out voice (rms)
  festival   festival's held-out voice (ked_diphone)
  espeak     espeak-ng's training voices
  unseen     espeak-ng's two unseen voices

each in four conditions: `clean` (16 kHz), `babble` (three other test
utterances, any engine, summed at 10 dB SNR), `reverb` (a room of RT60
0.3-0.8 s, augment.make_rir) and `tel8k` (300-3400 Hz, 8 kHz, mu-law;
written as an 8 kHz file, so the C resampler is part of the test). Rooms,
babble and voices are drawn with their own seeds, never from the training
draws; but rooms, babble and the channel are made by the training
augmentation's own code, so those conditions are of the kind the model
trained on (new draws, not new kinds).
refs.tsv holds each utterance's engine phones in ARPAbet.

`score` transcribes every file with `aural encode --output text` (greedy
CTC) and prints the phone error rate (edit distance / reference phones) of
each group and condition. A model whose vocabulary is espeak-ng's mnemonics
(the earlier default model) is scored after mapping its output to ARPAbet
the way the references are (arpabet.from_espeak, with the test voice's
dialect; en-us for flite and festival).
"""

import argparse
import json
import os
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

GROUPS = [("flite", "flite, held-out voice (rms)"),
          ("festival", "festival, held-out voice (ked_diphone)"),
          ("espeak", "espeak-ng, training voices"),
          ("unseen", "espeak-ng, unseen voices")]
CONDITIONS = [("clean", "clean"), ("babble", "3-talker babble, 10 dB"),
              ("reverb", "room, RT60 0.3-0.8 s"), ("tel8k", "telephone, 8 kHz mu-law")]


def test_spec(rng, group, text):
    import engines
    engine = "espeak" if group in ("espeak", "unseen") else group
    spec = engines.random_spec(rng, [text], [], train=group == "espeak", engine=engine)
    if engine == "espeak":
        spec.update(wpm=int(rng.integers(140, 201)), pitch=int(rng.integers(35, 66)))
    else:
        spec.update(stretch=float(rng.uniform(0.9, 1.15)))
    return spec


def cmd_make(args):
    import torch
    import augment
    import corpus
    import engines
    _, test_sentences = corpus.split_sentences()
    # Keys of three entries: no training utterance ([seed, i]) shares them.
    rng = np.random.default_rng([args.seed, 11, 7357])
    order = rng.permutation(len(test_sentences))
    n_groups = len(GROUPS)
    assert len(order) >= n_groups * args.count, "not enough test sentences"
    for cond, _ in CONDITIONS:
        os.makedirs(os.path.join(args.out, cond), exist_ok=True)
    clean, rows = [], []
    for g, (group, _) in enumerate(GROUPS):
        for k in range(args.count):
            i = g * args.count + k
            text = test_sentences[order[i]]
            spec = test_spec(rng, group, text)
            x, phones = engines.synthesize(spec)
            clean.append(x)
            rows.append(dict(group=group, file="%04d.wav" % i, engine=spec["engine"],
                             voice=spec["voice"], text=text, phones=" ".join(phones)))
        print("%s: %d utterances" % (group, args.count), flush=True)
    for i, (x, row) in enumerate(zip(clean, rows)):
        crng = np.random.default_rng([args.seed, 12, i])
        t = torch.from_numpy(x)
        engines.write_wav(os.path.join(args.out, "clean", row["file"]), x, engines.RATE)
        others = [clean[j] for j in crng.choice([j for j in range(len(clean)) if j != i], 3,
                                                 replace=False)]
        b = augment.babble([torch.from_numpy(o) for o in others], len(x), crng, "cpu")
        y = augment.mix_at_snr(t, b, 10.0)
        write_scaled(os.path.join(args.out, "babble", row["file"]), y.numpy(), engines.RATE)
        h, rt60 = augment.make_rir(crng, rt60=crng.uniform(0.3, 0.8))
        y = augment.convolve(t, torch.from_numpy(h))
        write_scaled(os.path.join(args.out, "reverb", row["file"]), y.numpy(), engines.RATE)
        row["rt60"] = "%.2f" % rt60
        y = augment.bandpass(t, 300.0, 3400.0)
        y = augment.resample(y, engines.RATE, 8000)
        peak = float(y.abs().max()) + 1e-9
        y = augment.mu_law(y / peak * 0.7) * peak / 0.7
        write_scaled(os.path.join(args.out, "tel8k", row["file"]), y.numpy(), 8000)
    keys = ["group", "file", "engine", "voice", "rt60", "text", "phones"]
    with open(os.path.join(args.out, "refs.tsv"), "w", encoding="utf-8") as f:
        f.write("\t".join(keys) + "\n")
        for r in rows:
            f.write("\t".join(str(r[k]) for k in keys) + "\n")
    print("%s: %d utterances x %d conditions" % (args.out, len(rows), len(CONDITIONS)))
    return 0


def write_scaled(path, y, rate):
    import engines
    peak = float(np.abs(y).max())
    engines.write_wav(path, y * (0.9 / peak if peak > 0.9 else 1.0), rate)


def model_vocab(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["aural.config"]).get("vocab", [])


def cmd_score(args):
    import arpabet
    from phonemes import edit_distance
    with open(os.path.join(args.test, "refs.tsv"), encoding="utf-8") as f:
        keys = f.readline().rstrip("\n").split("\t")
        refs = [dict(zip(keys, l.rstrip("\n").split("\t"))) for l in f if l.strip()]
    espeak_vocab = "AA" not in model_vocab(args.model)
    jobs = [(r, c) for r in refs for c, _ in CONDITIONS]

    def run(job):
        r, cond = job
        p = subprocess.run([args.aural, "encode", "-q", "-m", args.model, "--output", "text",
                            "--precision", args.precision,
                            os.path.join(args.test, cond, r["file"])],
                           check=True, capture_output=True, text=True)
        hyp = p.stdout.split()
        if espeak_vocab:
            voice = r["voice"] if r["engine"] == "espeak" else "en-us"
            hyp = arpabet.from_espeak(hyp, voice)
        ref = r["phones"].split()
        return r["group"], cond, edit_distance(ref, hyp), len(ref)

    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(run, jobs))
    out = {"model": os.path.relpath(args.model, ROOT), "espeak_vocab_mapped": espeak_vocab,
           "per": {}}
    print("| group | utterances | phones | " + " | ".join(l for _, l in CONDITIONS) + " |")
    print("|---|---:|---:|" + "---:|" * len(CONDITIONS))
    for group, label in GROUPS + [("all", "all four groups")]:
        cells = []
        for cond, _ in CONDITIONS:
            sel = [(e, n) for g, c, e, n in results if group in (g, "all") and c == cond]
            rate = sum(e for e, _ in sel) / max(1, sum(n for _, n in sel))
            out["per"]["%s/%s" % (group, cond)] = rate
            cells.append("%.2f%%" % (100 * rate))
        mine = [r for r in refs if group in (r["group"], "all")]
        n_ph = sum(len(r["phones"].split()) for r in mine)
        print("| %s | %d | %d | %s |" % (label, len(mine), n_ph, " | ".join(cells)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("make", "score"))
    ap.add_argument("--out", help="make: output directory")
    ap.add_argument("--test", help="score: directory written by make")
    ap.add_argument("--count", type=int, default=100, help="make: utterances per group")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.safetensors"))
    ap.add_argument("--aural", default=os.path.join(ROOT, "build", "tools", "aural"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--precision", default="f32", choices=("f32", "bf16"),
                    help="score: aural encode's --precision")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(HERE, "..", "reference"))
    if args.what == "make":
        if not args.out:
            ap.error("make needs --out")
        return cmd_make(args)
    if not args.test:
        ap.error("score needs --test")
    return cmd_score(args)


if __name__ == "__main__":
    sys.exit(main())
