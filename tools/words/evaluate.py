#!/usr/bin/python3
"""Word error rates on the word-level test (or dev) set: aural's C decoder
and CMU PocketSphinx on the same audio.

    evaluate.py --test DIR [--skip-aural] [--skip-pocketsphinx] [--json OUT]
                [--model M] [--lexicon L] [--lm A] [--aural PATH] [--jobs 2]
                [--limit N] [--decoder 'AURAL ENCODE OPTIONS']

DIR is written by make_sets.py (DIR/test, or DIR/dev: training voices
only): WAV files under {seen,unseen}/{clean,snr20}/ and words.tsv with the
normalized word references. Conditions scored, where present: training
voices clean, unseen voices clean, training voices at 20 dB SNR.

* aural: `aural encode -q -m MODEL --output words --lexicon LEX --lm ARPA
  FILE.wav`, which prints the utterance's transcript as space-separated
  words (one line per final segment; all lines are joined).
* PocketSphinx (Debian `pocketsphinx` 0.8+5prealpha with
  `pocketsphinx-en-us`: its own US English acoustic model, CMU dictionary
  and trigram LM): `pocketsphinx_batch` over 16 kHz raw copies of the WAVs
  made with sox, two processes at a time.

Both transcripts go through wordlib.normalize, as the references did.
WER = total word edit distance (Levenshtein over words) / total reference
words over the condition. Prints a Markdown table; --json writes it too,
with every utterance's normalized hypothesis.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wordlib  # noqa: E402
from wordlib import normalize, phonemes  # noqa: E402

CONDITIONS = (("seen", "clean", "training voices, clean"),
              ("unseen", "clean", "unseen voices, clean"),
              ("seen", "snr20", "training voices, 20 dB SNR"))
PS_MODEL = "/usr/share/pocketsphinx/model/en-us"


def read_words(test_dir):
    with open(os.path.join(test_dir, "words.tsv"), encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        return [dict(zip(header, l.rstrip("\n").split("\t"))) for l in f if l.strip()]


def aural_words(args, wav):
    p = subprocess.run([args.aural, "encode", "-q", "-m", args.model, "--output", "words",
                        "--lexicon", args.lexicon, "--lm", args.lm] + args.decoder.split() +
                       [wav],
                       check=True, capture_output=True, text=True)
    return normalize(p.stdout)


def pocketsphinx_words(wavs, jobs, extra=()):
    """{wav: word list} from pocketsphinx_batch."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="aural-ps-") as tmp:
        ids = []
        for k, wav in enumerate(wavs):
            uid = "u%05d" % k
            subprocess.run(["sox", "-q", "-V1", "-D", wav, "-t", "raw", "-r", "16000", "-e", "signed",
                            "-b", "16", "-c", "1", os.path.join(tmp, uid + ".raw")], check=True)
            ids.append(uid)
        parts = [ids[i::jobs] for i in range(jobs)]

        def run(i):
            ctl, hyp = os.path.join(tmp, "ctl%d" % i), os.path.join(tmp, "hyp%d" % i)
            with open(ctl, "w") as f:
                f.write("\n".join(parts[i]) + "\n")
            subprocess.run(["pocketsphinx_batch", "-hmm", os.path.join(PS_MODEL, "en-us"),
                            "-lm", os.path.join(PS_MODEL, "en-us.lm.bin"),
                            "-dict", os.path.join(PS_MODEL, "cmudict-en-us.dict"),
                            "-adcin", "yes", "-cepdir", tmp, "-cepext", ".raw",
                            "-ctl", ctl, "-hyp", hyp, "-logfn", os.path.join(tmp, "log%d" % i)]
                           + list(extra),
                           check=True, capture_output=True)
            res = {}
            with open(hyp, encoding="utf-8", errors="replace") as f:
                for line in f:
                    text, _, tail = line.rstrip("\n").rpartition(" (")
                    res[tail.split()[0]] = text
            return res

        with ThreadPoolExecutor(jobs) as pool:
            hyps = {}
            for r in pool.map(run, [i for i in range(jobs) if parts[i]]):
                hyps.update(r)
        for k, wav in enumerate(wavs):
            text = hyps.get(ids[k], "")
            # Fillers (<sil>, [NOISE], ++...++) and alternates' "(2)" are not words.
            text = " ".join(w.split("(")[0] for w in text.split()
                            if not w.startswith(("<", "[", "+")))
            out[wav] = normalize(text)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    models = os.path.join(wordlib.ROOT, "models")
    ap.add_argument("--test", required=True, help="a directory written by make_sets.py")
    ap.add_argument("--model", default=os.path.join(models, "default.safetensors"))
    ap.add_argument("--lexicon", default=os.path.join(models, "default.lexicon.txt.gz"))
    ap.add_argument("--lm", default=os.path.join(models, "default.lm.bin.gz"))
    ap.add_argument("--aural", default=os.path.join(wordlib.ROOT, "build", "tools", "aural"))
    ap.add_argument("--skip-aural", action="store_true")
    ap.add_argument("--skip-pocketsphinx", action="store_true")
    ap.add_argument("--ps-args", default="",
                    help="extra pocketsphinx_batch options, e.g. '-remove_noise no'")
    ap.add_argument("--decoder", default="",
                    help="extra aural encode options, e.g. '--lm-weight 1.2 --word-penalty 1'")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0,
                    help="only the first N utterances of each condition (0: all)")
    ap.add_argument("--json", default=None, help="write the results here too")
    args = ap.parse_args()
    if not args.skip_pocketsphinx and shutil.which("pocketsphinx_batch") is None:
        ap.error("pocketsphinx_batch not found: install Debian's pocketsphinx "
                 "(apt-get install pocketsphinx) or pass --skip-pocketsphinx")

    refs = read_words(args.test)
    conds = []
    for group, cond, label in CONDITIONS:
        rows = [r for r in refs if r["group"] == group]
        if args.limit:
            rows = rows[:args.limit]
        if rows and os.path.isdir(os.path.join(args.test, group, cond)):
            conds.append((group, cond, label, rows))
    systems = []
    if not args.skip_aural:
        systems.append("aural")
    if not args.skip_pocketsphinx:
        systems.append("pocketsphinx")

    results = {"test": os.path.abspath(args.test), "conditions": {}}
    for group, cond, label, rows in conds:
        wavs = [os.path.join(args.test, group, cond, r["file"]) for r in rows]
        entry = {"label": label, "utterances": len(rows),
                 "words": sum(len(r["words"].split()) for r in rows)}
        for system in systems:
            t0 = time.time()
            if system == "aural":
                with ThreadPoolExecutor(args.jobs) as pool:
                    hyps = dict(zip(wavs, pool.map(lambda w: aural_words(args, w), wavs)))
            else:
                hyps = pocketsphinx_words(wavs, args.jobs, args.ps_args.split())
            errs = sum(phonemes.edit_distance(r["words"].split(), hyps[w])
                       for r, w in zip(rows, wavs))
            entry[system] = {"wer": errs / max(entry["words"], 1), "errors": errs,
                             "seconds": round(time.time() - t0, 1),
                             "hypotheses": {r["file"]: " ".join(hyps[w])
                                            for r, w in zip(rows, wavs)}}
        results["conditions"][group + "/" + cond] = entry

    print("| condition | utterances | words | " + " | ".join("WER " + s for s in systems) + " |")
    print("|---|---:|---:|" + "---:|" * len(systems))
    for key, e in results["conditions"].items():
        print("| %s | %d | %d | %s |" % (e["label"], e["utterances"], e["words"], " | ".join(
            "%.2f%%" % (100 * e[s]["wer"]) for s in systems)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
