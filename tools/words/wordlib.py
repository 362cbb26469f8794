"""Shared pieces of the word resources: text normalization, the dev split,
the model's vocabulary, espeak-ng pronunciations, lexicon and ARPA files.

One normalization (`normalize`) serves the LM corpus, the lexicon's word
list and every reference and hypothesis that is scored, so that a word is
spelled the same everywhere: lowercase, hyphens and dashes split words,
a word is a run of letters a-z and apostrophes (apostrophes at its ends are
quotes and are dropped), everything else is removed. Numbers are not
spelled out: the fortune sentences of tools/train/corpus.py admit no digits
(its _ALLOWED pattern), and extra LM text with digits is dropped whole
(`has_digits`), so no reference or LM sentence has a number in it.

The dev set is DEV_COUNT sentences of the training split (corpus.py),
chosen by a seeded permutation. They and every training sentence that
equals, contains or is contained in one of them (or in a held-out test
sentence) stay out of the LM corpus and out of the pronunciation harvest,
so dev can measure the LM and lexicon honestly and tune the decoder.
"""

import gzip
import json
import math
import os
import re
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import arpabet  # noqa: E402
import corpus  # noqa: E402
import phonemes  # noqa: E402

DEV_COUNT = 300
DEV_SEED = 11
MODEL = os.path.join(ROOT, "models", "default.safetensors")

_WORD = re.compile(r"[a-z']+")
_SPLIT = re.compile(r"[-\u2010-\u2015]")


def normalize(text):
    """Text -> list of normalized words (see the module docstring)."""
    words = []
    for w in _WORD.findall(_SPLIT.sub(" ", text.lower())):
        w = w.strip("'")
        if w:
            words.append(w)
    return words


def has_digits(text):
    return any(c.isdigit() for c in text)


def key(sentence):
    """corpus.py's comparison key (lowercase letters and spaces)."""
    return corpus._key(sentence)


def overlaps(k, h):
    """Whether sentence key k equals held key h, contains it (when h has 3
    words or more), or (k longer than 20 characters) is contained in it,
    word for word. corpus.py's rule compares characters and applies to the
    shortest held sentences too, so its held-out sentence "Be." keeps every
    sentence with the letters "be" out of training ("be", "because",
    "number": none is in its training text). A sentence that holds the
    one word of a one- or two-word test sentence does not give that
    sentence away; the LM corpus uses this rule instead."""
    kk, hh = " %s " % k, " %s " % h
    if k == h:
        return True
    return (h.count(" ") >= 2 and hh in kk) or (len(k) > 20 and kk in hh)


def split_dev():
    """(lm_train, dev, test) fortune sentences. dev: DEV_COUNT sentences of
    corpus.split_sentences()'s training part (the acoustic model heard
    them); test: the held-out part; lm_train: every other fortune sentence
    that overlaps no test, sample or dev sentence (overlaps())."""
    train, test = corpus.split_sentences()
    rng = np.random.default_rng([DEV_SEED, 1])
    pick = set(int(i) for i in rng.permutation(len(train))[:DEV_COUNT])
    dev = [s for i, s in enumerate(train) if i in pick]
    held = [key(s) for s in test + dev] + \
        [key(s) for s in corpus._SENTENCE_END.split(corpus.SAMPLE_TEXT) if key(s)]
    held_set = set(held)
    test_set = set(test)
    lm_train = []
    for s in corpus.fortune_sentences():
        k = key(s)
        if s in test_set or k in held_set or any(overlaps(k, h) for h in held):
            continue
        lm_train.append(s)
    return lm_train, dev, test


def model_vocab(path=MODEL):
    """The `vocab` list of the model file's aural.config (index 0 = blank)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["aural.config"])["vocab"]


def espeak_lines(voice, lines):
    """espeak-ng -x --sep='|' output for `lines` (one clause each, newline-
    separated), as a list of output lines; each line is a list of words,
    each word a string of '|'-separated mnemonics with stress marks."""
    p = subprocess.run(["espeak-ng", "-q", "-x", "--sep=|", "-v", voice],
                       input="\n".join(lines) + "\n", check=True, capture_output=True,
                       text=True)
    return [l.split() for l in p.stdout.splitlines() if l.strip()]


def word_tokens(espeak_word, voice):
    """One espeak word -> canonical tokens for `voice`'s dialect."""
    return phonemes.canonical(phonemes.tokenize(espeak_word), voice)


def arpabet_vocab(vocab_tokens):
    """True when the model's tokens are ARPAbet phones (not espeak-ng's)."""
    return "AA" in vocab_tokens


def model_tokens(toks, voice, arpa):
    """Canonical espeak-ng tokens of `voice` -> a tuple of the model's tokens
    (ARPAbet by tools/train/arpabet.py when `arpa`, else unchanged)."""
    if not arpa:
        return tuple(toks)
    return tuple(arpabet.from_espeak(list(toks), voice))


CMUDICT = "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict"


def cmudict(path=CMUDICT):
    """{word: set of ARPAbet tuples (stress dropped)} from CMUdict (the
    Debian package pocketsphinx-en-us); alternatives "word(2)" join "word"."""
    out = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 2 or parts[0].startswith(";;;"):
                continue
            word = re.sub(r"\(\d+\)$", "", parts[0]).lower()
            out.setdefault(word, set()).add(tuple(re.sub(r"\d", "", p) for p in parts[1:]))
    return out


def open_text(path):
    """A UTF-8 text file for reading, inflated when its name ends in .gz
    (the default model's lexicon and LM are stored gzipped), without the
    byte order mark it may start with (as libaural's readers skip it)."""
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")


def gzip_file(path):
    """Replaces path by path.gz, reproducibly (no name, no time stamp:
    the same text gives the same bytes); returns the new path."""
    with open(path, "rb") as f:
        data = f.read()
    with open(path + ".gz", "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw,
                           mtime=0) as z:
            z.write(data)
    os.remove(path)
    return path + ".gz"


def read_lexicon(path):
    """{word: [token tuple, ...]} from a lexicon file."""
    lex = {}
    with open_text(path) as f:
        for line in f:
            # The word, then its tokens apart by spaces or tabs, as
            # lib/lexicon.c reads them.
            fields = line.split()
            if fields:
                lex.setdefault(fields[0], []).append(tuple(fields[1:]))
    return lex


class Arpa:
    """A backoff n-gram LM read from an ARPA file, for scoring."""

    def __init__(self, path):
        self.prob, self.bow, self.order = {}, {}, 0
        section = 0
        with open_text(path) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("ngram ") or line == "\\data\\":
                    continue
                m = re.match(r"\\(\d+)-grams:", line)
                if m:
                    section = int(m.group(1))
                    self.order = max(self.order, section)
                    continue
                if line == "\\end\\":
                    break
                parts = line.split()
                g = tuple(parts[1:1 + section])
                self.prob[g] = float(parts[0])
                if len(parts) > 1 + section:
                    self.bow[g] = float(parts[1 + section])
        self.vocab = {g[0] for g in self.prob if len(g) == 1}

    def logp(self, hist, w):
        """log10 P(w | hist) with backoff; hist a tuple of words."""
        hist = hist[len(hist) - (self.order - 1):] if self.order > 1 else ()
        penalty = 0.0
        while True:
            g = hist + (w,)
            if g in self.prob:
                return penalty + self.prob[g]
            if not hist:
                return penalty + self.prob.get(("<unk>",), -99.0)
            penalty += self.bow.get(hist, 0.0)
            hist = hist[1:]

    def score(self, sentences):
        """(log10 prob sum, scored tokens, OOV words, words) over sentences
        (word lists). OOV words are not scored (they become <unk> as
        context); </s> is scored."""
        total, n, oov, words = 0.0, 0, 0, 0
        for ws in sentences:
            hist = ("<s>",)
            for w in ws + ["</s>"]:
                if w != "</s>":
                    words += 1
                if w not in self.vocab or w in ("<s>", "<unk>"):
                    oov += 1
                    hist = hist + ("<unk>",)
                    continue
                total += self.logp(hist, w)
                n += 1
                hist = hist + (w,)
        return total, n, oov, words


def perplexity(total, n):
    return 10 ** (-total / max(n, 1))


def log10(x):
    return math.log10(x) if x > 0 else -99.0
