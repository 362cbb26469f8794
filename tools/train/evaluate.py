#!/usr/bin/python3
"""Phoneme error rate of a model through the C path (`aural encode`).

    evaluate.py --test DIR [--model models/default.safetensors]
                [--aural build/tools/aural] [--json OUT.json]

DIR is the output of `synth.py test`: WAV files under {seen,unseen}/
{clean,snr20}/ and refs.tsv with the reference phonemes. Every file is
transcribed by `aural encode --output text` (greedy CTC, tokens separated by
spaces) and compared with its reference; PER = total edit distance / total
reference tokens over the group. Reference and transcript both go through
phonemes.canonical for the utterance's voice first: mnemonics that its
dialect speaks identically count as one (--raw: as espeak-ng wrote them). Prints a Markdown table (per group and
condition, per dialect of the training-voice group and per voice of the
unseen group) and optionally writes JSON.

Needs only the standard library; runs two CLI processes at a time.
"""

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from phonemes import canonical, dialect_of, edit_distance  # noqa: E402

GROUPS = (("seen", "training voices"), ("unseen", "unseen voices"))
CONDITIONS = (("clean", "clean"), ("snr20", "white noise, 20 dB SNR"))


def transcribe(aural, model, wav):
    """Token list of the greedy CTC transcript of `wav`."""
    p = subprocess.run([aural, "encode", "-q", "-m", model, "--output", "text", wav],
                       check=True, capture_output=True, text=True)
    return p.stdout.split()


def read_refs(test_dir):
    with open(os.path.join(test_dir, "refs.tsv"), encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        return [dict(zip(header, line.rstrip("\n").split("\t"))) for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--test", required=True, help="directory written by synth.py test")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default.safetensors"))
    ap.add_argument("--aural", default=os.path.join(ROOT, "build", "tools", "aural"))
    ap.add_argument("--json", default=None, help="write the results here too")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--raw", action="store_true",
                    help="compare espeak-ng's mnemonics as they are, without merging those "
                    "the voice's dialect speaks identically (phonemes.canonical)")
    args = ap.parse_args()

    refs = read_refs(args.test)
    jobs = [(r, cond) for r in refs for cond, _ in CONDITIONS]

    def run(job):
        r, cond = job
        wav = os.path.join(args.test, r["group"], cond, r["file"])
        ref = r["phonemes"].split()
        hyp = transcribe(args.aural, args.model, wav)
        if not args.raw:
            ref, hyp = canonical(ref, r["voice"]), canonical(hyp, r["voice"])
        return r["group"], r["voice"], cond, edit_distance(ref, hyp), len(ref)

    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(run, jobs))

    def per(select):
        err = sum(e for g, v, c, e, n in results if select(g, v, c))
        tot = sum(n for g, v, c, e, n in results if select(g, v, c))
        utts = sum(1 for g, v, c, e, n in results if select(g, v, c))
        return err / max(tot, 1), utts, tot

    out = {"model": os.path.relpath(args.model, ROOT), "merged": not args.raw, "groups": {}}
    print("| voices | utterances | phonemes | PER clean | PER 20 dB SNR |")
    print("|---|---:|---:|---:|---:|")
    rows = [(g, label, lambda gg, v, g=g: gg == g) for g, label in GROUPS]
    dialects = sorted({dialect_of(r["voice"]) for r in refs if r["group"] == "seen"})
    rows += [("seen:" + d, "  " + d, lambda gg, vv, d=d: gg == "seen" and dialect_of(vv) == d)
             for d in dialects]
    unseen_voices = sorted({r["voice"] for r in refs if r["group"] == "unseen"})
    rows += [("unseen:" + v, "  " + v, lambda gg, vv, v=v: vv == v) for v in unseen_voices]
    for key, label, sel in rows:
        clean = per(lambda g, v, c: sel(g, v) and c == "clean")
        noisy = per(lambda g, v, c: sel(g, v) and c == "snr20")
        out["groups"][key] = {"per_clean": clean[0], "per_snr20": noisy[0],
                              "utterances": clean[1], "phonemes": clean[2]}
        print("| %s | %d | %d | %.2f%% | %.2f%% |" % (
            label, clean[1], clean[2], 100 * clean[0], 100 * noisy[0]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
