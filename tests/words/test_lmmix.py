#!/usr/bin/python3
"""The general LM's reader and the LM mixture (tools/words/lmmix.py).

* read_sphinx_trie reads back what sphinxbase itself writes
  (`sphinx_lm_convert`, Debian sphinxbase-utils) from a small ARPA file:
  every n-gram, probability and backoff weight; and names what is wrong
  with a file that is cut short or is not that format.
* mix lists the union of the components' n-grams, each with exactly the
  weighted sum of their probabilities, and its backoff weights make
  every distribution sum to what the mixture of the components gives the
  vocabulary, for listed and unlisted histories alike; prune keeps the
  model a normalized distribution and keeps what a longer n-gram needs.

    test_lmmix.py
"""

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "words"))
import lmmix  # noqa: E402
import wordlib  # noqa: E402

# Two small, correctly normalized models over one vocabulary (a b c,
# </s>, <unk>): each n-gram's log10 P, and the backoff weights that make
# each listed history's distribution sum to one (computed in setUpModule
# from the listed probabilities, so the files are consistent by
# construction).
VOCAB = ["a", "b", "c"]
EVENTS = VOCAB + ["</s>", "<unk>"]
MODEL_A = {
    1: {"a": 0.4, "b": 0.3, "c": 0.15, "</s>": 0.1, "<unk>": 0.05},
    2: {("<s>", "a"): 0.6, ("a", "b"): 0.5, ("b", "c"): 0.4, ("a", "</s>"): 0.2,
        ("b", "a"): 0.3},
    3: {("<s>", "a", "b"): 0.7, ("a", "b", "c"): 0.6},
}
MODEL_B = {
    1: {"a": 0.2, "b": 0.2, "c": 0.4, "</s>": 0.15, "<unk>": 0.05},
    2: {("<s>", "c"): 0.5, ("c", "a"): 0.6, ("a", "b"): 0.2, ("c", "c"): 0.1},
    3: {("<s>", "c", "a"): 0.8, ("c", "a", "b"): 0.5},
}


def arpa_text(model):
    """ARPA text for a model given as listed probabilities, with backoff
    weights computed so that every listed history sums to one."""
    prob = [None, {(w,): p for w, p in model[1].items()}, dict(model[2]), dict(model[3])]
    bows = lmmix.backoff_weights(prob, 3)
    lines = ["\\data\\", "ngram 1=%d" % (len(prob[1]) + 1), "ngram 2=%d" % len(prob[2]),
             "ngram 3=%d" % len(prob[3]), ""]
    for n in (1, 2, 3):
        lines.append("\\%d-grams:" % n)
        items = sorted(prob[n].items()) + ([(("<s>",), 0.0)] if n == 1 else [])
        for g, p in sorted(items):
            line = "%.6f\t%s" % (wordlib.log10(p), " ".join(g))
            if n < 3 and g in bows[n]:
                line += "\t%.6f" % wordlib.log10(bows[n][g])
            lines.append(line)
        lines.append("")
    lines.append("\\end\\")
    return "\n".join(lines) + "\n"


def histories():
    """Every history of up to two words over the vocabulary and <s>."""
    words = ["<s>"] + VOCAB
    out = [()]
    for n in (1, 2):
        for h in itertools.product(words, repeat=n):
            if "<s>" not in h[1:]:
                out.append(h)
    return out


class Files(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="aural-lmmix-")
        cls.paths = {}
        for name, model in (("a", MODEL_A), ("b", MODEL_B)):
            path = os.path.join(cls.tmp, name + ".arpa")
            with open(path, "w") as f:
                f.write(arpa_text(model))
            cls.paths[name] = path

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)


class ReadTrie(Files):
    def trie(self, name):
        out = os.path.join(self.tmp, name + ".bin")
        subprocess.run(["sphinx_lm_convert", "-i", self.paths[name], "-o", out],
                       check=True, capture_output=True)
        return out

    def test_reads_back_what_sphinxbase_writes(self):
        for name in ("a", "b"):
            arpa = wordlib.Arpa(self.paths[name])
            words, grams = lmmix.read_sphinx_trie(self.trie(name))
            self.assertEqual(sorted(words), sorted(EVENTS + ["<s>"]))
            listed = {g for n in grams for g in grams[n]}
            self.assertEqual(listed, set(arpa.prob), name)
            for n, layer in grams.items():
                for g, (p, bo) in layer.items():
                    if g == ("<s>",):
                        continue
                    self.assertAlmostEqual(p, arpa.prob[g], delta=1e-4, msg=(name, g))
                    self.assertAlmostEqual(bo, arpa.bow.get(g, 0.0), delta=1e-4, msg=(name, g))

    def test_bad_files_are_named(self):
        with open(self.trie("a"), "rb") as f:
            good = f.read()
        cases = {
            "header": b"Trie Language Mode!" + good[19:],
            "empty": b"",
            "order": good[:19] + bytes([7]) + good[20:],
            "cut in the tables": good[:1000],
            "cut in the unigrams": good[:len(good) - 300],
            "one byte short": good[:-1],
            "one byte more": good + b"x",
        }
        for what, data in cases.items():
            path = os.path.join(self.tmp, "bad.bin")
            with open(path, "wb") as f:
                f.write(data)
            with self.assertRaises(lmmix.BadTrie, msg=what) as cm:
                lmmix.read_sphinx_trie(path)
            self.assertIn(path, str(cm.exception))


class Mix(Files):
    def models(self):
        return [lmmix.BackoffLM.from_arpa(wordlib.Arpa(self.paths[n])) for n in ("a", "b")]

    def written(self, prob, name):
        path = os.path.join(self.tmp, name)
        lmmix.write_arpa(path, prob, 3)
        return wordlib.Arpa(path)

    def test_listed_ngrams_are_the_weighted_sum(self):
        a, b = self.models()
        prob = lmmix.mix([a, b], [0.3, 0.7], VOCAB, 3)
        union = {g for g in set(a.prob) | set(b.prob) if g != ("<s>",)}
        for n in (1, 2, 3):
            self.assertTrue({g for g in union if len(g) == n} <= set(prob[n]))
        mixed = self.written(prob, "mix.arpa")
        for n in (1, 2, 3):
            for g in prob[n]:
                want = 0.3 * a.p(g[:-1], g[-1]) + 0.7 * b.p(g[:-1], g[-1])
                self.assertAlmostEqual(10 ** mixed.logp(g[:-1], g[-1]), want, delta=1e-5, msg=g)

    def test_every_history_sums_to_one(self):
        a, b = self.models()
        for threshold in (0.0, 1e-3, 1.0):
            prob = lmmix.mix([a, b], [0.5, 0.5], VOCAB, 3)
            if threshold:
                prob = lmmix.prune(prob, 3, threshold)
            mixed = self.written(prob, "mix.arpa")
            for h in histories():
                total = sum(10 ** mixed.logp(h, w) for w in EVENTS)
                self.assertAlmostEqual(total, 1.0, delta=1e-4, msg=(threshold, h))

    def test_prune_keeps_what_longer_ngrams_need(self):
        a, b = self.models()
        full = lmmix.mix([a, b], [0.5, 0.5], VOCAB, 3)
        self.assertEqual(lmmix.prune(full, 3, 0.0)[3], full[3])
        for threshold in (1e-3, 1e-2, 1.0):
            prob = lmmix.prune(full, 3, threshold)
            for n in (2, 3):
                for g in prob[n]:
                    for part in (g[:-1], g[1:]):
                        if part != ("<s>",):
                            self.assertIn(part, prob[n - 1], (threshold, g))
        self.assertEqual(lmmix.prune(full, 3, 1.0)[3], {})

    def test_words_outside_the_vocabulary_are_left_out(self):
        a, b = self.models()
        prob = lmmix.mix([a, b], [0.5, 0.5], ["a", "b"], 3)
        self.assertFalse(any("c" in g for n in (1, 2, 3) for g in prob[n]))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
