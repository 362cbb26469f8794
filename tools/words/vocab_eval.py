#!/usr/bin/python3
"""Custom words: recall of words the lexicon lacks, with and without them
named as custom words, and how often they are inserted where nobody said
them.

    vocab_eval.py make --out DIR [--seed 1]
    vocab_eval.py score --set DIR/test [--boost 7 ...] [--json OUT]
    vocab_eval.py tune --set DIR/dev [--boosts 0,1,2,...]

`make` writes two sets, each a directory of 22.05 kHz WAVs and refs.tsv:

* DIR/test: each of TEST_WORDS (names and technical terms that
  models/default.lexicon.txt.gz lacks; `make` checks) said in 5 held-out test
  sentences (wordlib.split_dev's test split), inserted at a random word
  boundary, and 100 other test sentences without any of them;
* DIR/dev: each of DEV_WORDS (other such words) in 4 dev sentences, and 50
  dev sentences without them: what `tune` chooses the default boost on.

Voices: espeak-ng training voices (a random dialect and variant each,
140-200 words per minute, pitch 35-65), clean, as the words test set's
training-voice group. espeak-ng reads each custom word by the same rules
that pronounce it for the decoder, so recall here is an upper bound for
voices that say the word otherwise.

`score` decodes every file with `aural encode --output words`: without
custom words, then with all of the set's words as one --vocabulary at each
--boost. It reports recall (target utterances whose words hold the target
word, case-insensitive), false insertions (custom words in the utterances
without any, per 100 utterances, and custom words other than the target in
the target utterances), and the word error rate of the utterances without
custom words (the boost must not cost the rest).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import wordlib  # noqa: E402
from wordlib import corpus, normalize, phonemes  # noqa: E402
import synth  # noqa: E402  (tools/train, on the path through wordlib)

# (Kafka, Netflix, Reykjavik and eight more were test words until the
# lexicon took wamerican's words, which hold them: replaced by others that
# it lacks, as Youtube, Github, Wikipedia and Bluetooth were in dev.)
TEST_WORDS = ["Dashwood", "Kubernetes", "Grafana", "Terraform", "Ansible", "Shopify",
              "Duolingo", "Siobhan", "Okonkwo", "Kowalski", "Szymanski", "Huawei",
              "Spotify", "Papadopoulos", "Ethereum", "Postgres", "Buttigieg", "Jupyter",
              "Zelensky", "Yoshida", "Okafor", "Moderna", "Wireshark", "Xiaomi"]
DEV_WORDS = ["Nginx", "Tanaka", "Mbappe", "Chromebook", "Zendesk", "Photoshop", "Sorensen",
             "Kathmandu", "Docker", "Kibana", "Chatbot", "Fauci"]
AURAL = os.path.join(wordlib.ROOT, "build", "tools", "aural")


def make_set(out, words, sentences, per_word, n_without, seed):
    lexicon = wordlib.read_lexicon(os.path.join(wordlib.ROOT, "models", "default.lexicon.txt.gz"))
    known = [w for w in words if normalize(w)[0] in lexicon]
    if known:
        sys.exit("vocab_eval: the lexicon has %s: not custom words" % ", ".join(known))
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(sentences))
    need = len(words) * per_word + n_without
    if need > len(order):
        sys.exit("vocab_eval: %d sentences, %d needed" % (len(order), need))
    rows = []
    for i in range(need):
        text = sentences[order[i]]
        target = words[i // per_word] if i < len(words) * per_word else ""
        if target:
            ws = text.split()
            at = int(rng.integers(len(ws) + 1))
            text = " ".join(ws[:at] + [target] + ws[at:])
        voice = corpus.voice_name(
            corpus.TRAIN_DIALECTS[rng.integers(len(corpus.TRAIN_DIALECTS))],
            corpus.TRAIN_VARIANTS[rng.integers(len(corpus.TRAIN_VARIANTS))])
        wpm, pitch = int(rng.integers(140, 201)), int(rng.integers(35, 66))
        pcm22, _ = synth.espeak(voice, wpm, pitch, text)
        name = "%04d.wav" % i
        synth.write_wav(os.path.join(out, name), pcm22.astype(np.float64) / 32768.0)
        rows.append("\t".join([name, voice, target, text]))
    with open(os.path.join(out, "refs.tsv"), "w", encoding="utf-8") as f:
        f.write("file\tvoice\ttarget\ttext\n" + "\n".join(rows) + "\n")
    with open(os.path.join(out, "words.txt"), "w", encoding="utf-8") as f:
        f.write(",".join(words) + "\n")
    return len(rows)


def read_set(path):
    with open(os.path.join(path, "refs.tsv"), encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        rows = [dict(zip(header, l.rstrip("\n").split("\t"))) for l in f if l.strip()]
    with open(os.path.join(path, "words.txt"), encoding="utf-8") as f:
        words = f.read().strip()
    return rows, words


def decode(args, path, rows, extra):
    """{file: normalized words} from one batch run of aural encode."""
    with tempfile.TemporaryDirectory(prefix="aural-vocab-") as tmp:
        subprocess.run([args.aural, "encode", "-q", "-m", args.model, "--output", "words",
                        "-j", str(args.jobs), "-o", tmp] + extra +
                       [os.path.join(path, r["file"]) for r in rows],
                       check=True, capture_output=True, text=True)
        out = {}
        for r in rows:
            with open(os.path.join(tmp, r["file"][:-4] + ".txt"), encoding="utf-8") as f:
                out[r["file"]] = normalize(f.read())
        return out


def measure(rows, hyps, words):
    custom = {normalize(w)[0] for w in words.split(",")}
    with_t = [r for r in rows if r["target"]]
    without = [r for r in rows if not r["target"]]
    hits = sum(normalize(r["target"])[0] in hyps[r["file"]] for r in with_t)
    other = sum(sum(w in custom and w != normalize(r["target"])[0] for w in hyps[r["file"]])
                for r in with_t)
    inserted = sum(sum(w in custom for w in hyps[r["file"]]) for r in without)
    errs = sum(phonemes.edit_distance(normalize(r["text"]), hyps[r["file"]]) for r in without)
    n_ref = sum(len(normalize(r["text"])) for r in without)
    return {"recall": hits / len(with_t), "hits": hits, "targets": len(with_t),
            "insertions_per_100": 100.0 * inserted / len(without), "inserted": inserted,
            "without": len(without), "other_custom_in_targets": other,
            "wer_without": errs / n_ref}


def cmd_make(args):
    _, dev, test = wordlib.split_dev()
    n = make_set(os.path.join(args.out, "test"), TEST_WORDS, test, 5, 100, [args.seed, 1])
    m = make_set(os.path.join(args.out, "dev"), DEV_WORDS, dev, 4, 50, [args.seed, 2])
    print("vocab_eval: %d test and %d dev utterances under %s" % (n, m, args.out))


def run_conditions(args, boosts):
    rows, words = read_set(args.set)
    results = {"none": measure(rows, decode(args, args.set, rows, []), words)}
    for b in boosts:
        hyps = decode(args, args.set, rows, ["--vocabulary", words, "--boost", str(b)])
        results["boost %g" % b] = measure(rows, hyps, words)
    print("%-10s %8s %14s %18s %10s" % ("custom", "recall", "ins./100 utt.",
                                         "others in targets", "WER rest"))
    for name, r in results.items():
        print("%-10s %7.1f%% %14.2f %18d %9.2f%%" % (
            name, 100 * r["recall"], r["insertions_per_100"], r["other_custom_in_targets"],
            100 * r["wer_without"]))
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--out", required=True)
    m.add_argument("--seed", type=int, default=1)
    for name in ("score", "tune"):
        s = sub.add_parser(name)
        s.add_argument("--set", required=True)
        s.add_argument("--aural", default=AURAL)
        s.add_argument("--model", default=wordlib.MODEL)
        s.add_argument("--jobs", type=int, default=2)
        s.add_argument("--json")
        if name == "score":
            s.add_argument("--boost", type=float, action="append",
                           help="boost to measure (repeatable; default 0 and 7)")
        else:
            s.add_argument("--boosts", default="0,1,2,3,4,5,6,7,8,10")
    args = ap.parse_args()
    if args.cmd == "make":
        cmd_make(args)
        return 0
    boosts = (args.boost or [0.0, 7.0]) if args.cmd == "score" else \
        [float(b) for b in args.boosts.split(",")]
    results = run_conditions(args, boosts)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
