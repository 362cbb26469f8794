#!/usr/bin/python3
"""Finds the espeak-ng phoneme mnemonics that a dialect speaks identically.

    phoneme_identity.py [-o tools/train/phoneme_merges.json] [--sentences N]

espeak-ng transcribes every English dialect with one set of mnemonics, and
a dialect's phoneme table may give two of them the same sound: en-gb says
`3` exactly as `@`. A recognizer cannot hear such a difference, so the
training labels and the test references merge the pair (phonemes.canonical).

For each dialect (those of training and of the unseen test voices), the
script takes the phoneme transcriptions of N training sentences, and for
each mnemonic T up to CONTEXTS two-word snippets in which it occurs. T
sounds like B in that dialect when every snippet with T replaced by B
(stress marks kept) synthesizes to the very same samples as the snippet
itself; a pair is merged when that holds both ways, over T's snippets and
over B's. Merged mnemonics form classes (a union of pairs); each class is
named by its most frequent member in the sentences' transcriptions.

espeak-ng keeps state from one utterance to the next (its noise source), so
every snippet is synthesized in a child process forked from a parent that
has loaded the voice and synthesized nothing: the same phonemes give the
same samples. Needs espeak-ng's library (libespeak-ng1). Deterministic; a
few minutes per dialect on one core.
"""

import argparse
import collections
import ctypes
import hashlib
import json
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402
import phonemes  # noqa: E402

# espeak-ng's name of each dialect's voice ("en-gb" takes no variant and is
# the same voice as "en").
DIALECTS = corpus.TRAIN_DIALECTS + sorted({v.split("+")[0] for v in corpus.UNSEEN_VOICES})
CONTEXTS = 6
STRESS = "',%="
VOWEL_START = set("03@AEIOUVaeiou")

def espeak_voice(dialect):
    """espeak-ng's library knows the British voice as "en", not "en-gb"."""
    return "en" if dialect == "en-gb" else dialect


# speak_lib.h of espeak-ng 1.51
AUDIO_OUTPUT_SYNCHRONOUS = 2
POS_CHARACTER = 1
PHONEMES_INPUT = 0x100  # espeakPHONEMES: [[...]] is phoneme input
END_PAUSE = 0x1000


class Espeak:
    """espeak-ng's library, synthesizing into memory."""

    CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int,
                                ctypes.c_void_p)

    def __init__(self):
        self.lib = ctypes.CDLL("libespeak-ng.so.1")
        self.chunks = []
        self.callback = self.CALLBACK(self._collect)
        if self.lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, None, 0) <= 0:
            raise SystemExit("espeak-ng: cannot initialize its library")
        self.lib.espeak_SetSynthCallback(self.callback)

    def _collect(self, wav, n, _events):
        if n > 0:
            self.chunks.append(ctypes.string_at(wav, 2 * n))
        return 0

    def voice(self, dialect):
        name = espeak_voice(dialect)
        if self.lib.espeak_SetVoiceByName(name.encode()) != 0:
            raise SystemExit("espeak-ng: no voice %r" % name)

    def digest(self, phoneme_text):
        """MD5 of the samples of [[phoneme_text]], from a fresh synthesizer."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                os.close(r)
                self.chunks.clear()
                text = ("[[" + phoneme_text + "]]").encode() + b"\0"
                if self.lib.espeak_Synth(text, len(text), 0, POS_CHARACTER, 0,
                                         PHONEMES_INPUT | END_PAUSE, None, None) == 0:
                    os.write(w, hashlib.md5(b"".join(self.chunks)).hexdigest().encode())
                    status = 0
            finally:
                os._exit(status)
        os.close(w)
        out = b""
        while True:
            part = os.read(r, 64)
            if not part:
                break
            out += part
        os.close(r)
        _, status = os.waitpid(pid, 0)
        # A failed synthesis must never compare equal to another one.
        if status != 0 or len(out) != 32:
            raise SystemExit("espeak-ng could not synthesize [[%s]]" % phoneme_text)
        return out.decode()


def parse(sep_output):
    """`-x --sep=|` output -> words, each a list of (stress marks, mnemonic)."""
    words = []
    for w in sep_output.split():
        pieces = []
        for p in w.split("|"):
            n = len(p) - len(p.lstrip(STRESS))
            if p[n:]:
                pieces.append((p[:n], p[n:]))
        words.append(pieces)
    return words


def spell(words, t=None, b=None):
    """Phoneme input text of `words`, with mnemonic t replaced by b."""
    return " ".join("".join(s + (b if m == t else m) for s, m in w) for w in words)


def contexts(es, dialect, sentences):
    """({mnemonic: [(two-word snippet, digest of its samples)]}, {mnemonic:
    occurrences in the sentences' transcriptions}). A sentence
    whose re-spelled transcription does not synthesize exactly as espeak-ng's
    own is skipped (a spelling that re-parses differently)."""
    name = espeak_voice(dialect)
    out = collections.defaultdict(list)
    counts = collections.Counter()
    for s in sentences:
        run = lambda *a: subprocess.run(["espeak-ng", "-q", "-x", *a, "-v", name, s],
                                        check=True, capture_output=True, text=True).stdout
        words = parse(run("--sep=|"))
        counts.update(m for w in words for _, m in w)
        if es.digest(spell(words)) != es.digest(" ".join(run().split())):
            continue
        for k in range(len(words)):
            snippet = words[k:k + 2]
            for m in sorted({m for _, m in words[k]}):
                if not m.startswith("_") and len(out[m]) < CONTEXTS:
                    out[m].append((snippet, es.digest(spell(snippet))))
    return out, counts


def same_sound(es, ctx):
    """{T: set of B}: T replaced by B sounds the same in all of T's snippets.
    B is tried only when T could be in B's set (the relation must hold both
    ways to count), and only within vowels or consonants (or same first
    character)."""
    names = sorted(ctx)
    found = {}
    for t in names:
        cands = [b for b in names if b != t
                 and ((b[0] in VOWEL_START) == (t[0] in VOWEL_START) or b[0] == t[0])
                 and (b not in found or t in found[b])]
        for snippet, want in ctx[t]:
            cands = [b for b in cands if es.digest(spell(snippet, t, b)) == want]
            if not cands:
                break
        found[t] = set(cands)
    return found


def classes(found, counts):
    """{mnemonic: class name} for the mnemonics merged with another; a class
    is named by its most frequent member."""
    parent = {}

    def root(x):
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for t, bs in found.items():
        for b in bs:
            if t in found.get(b, ()):
                parent[root(t)] = root(b)
    groups = collections.defaultdict(list)
    for x in set(parent) | set(parent.values()):
        groups[root(x)].append(x)
    out = {}
    for members in groups.values():
        members = sorted(members, key=lambda m: (-counts[m], len(m), m))
        for m in members[1:]:
            out[m] = members[0]
    return dict(sorted(out.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", default=phonemes.MERGES_FILE)
    ap.add_argument("--sentences", type=int, default=150)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()

    train, _ = corpus.split_sentences()
    sentences = sorted(random.Random(args.seed).sample(train, args.sentences), key=len)
    es = Espeak()
    result = {}
    for dialect in DIALECTS:
        es.voice(dialect)
        ctx, counts = contexts(es, dialect, sentences)
        result[dialect] = classes(same_sound(es, ctx), counts)
        print("%s: %d mnemonics, merged %s" % (
            dialect, len(ctx), " ".join("%s>%s" % kv for kv in result[dialect].items())),
            flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"made_by": "tools/train/phoneme_identity.py --sentences %d --seed %d"
                   % (args.sentences, args.seed), "classes": result}, f, indent=1)
        f.write("\n")
    print("wrote %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
