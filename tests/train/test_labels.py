#!/usr/bin/python3
"""The labels of the default model: tokenizer, voices and merged mnemonics.

Standard library only (no espeak-ng, no torch): checks that the committed
tools/train/phoneme_merges.json is a usable table for every dialect the
recipe trains or tests on, that merging is a function onto the bundled
model's vocab, that the bundled sample's reference is already merged, and
that the evaluation scores two mnemonics a dialect speaks identically as
equal and any others as different.
"""

import json
import os
import struct
import sys
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import corpus  # noqa: E402
import phonemes  # noqa: E402


def model_vocab(path):
    """The `vocab` of a safetensors model file's config, read with the stdlib."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["aural.config"])["vocab"]


class Labels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(phonemes.MERGES_FILE, encoding="utf-8") as f:
            cls.classes = json.load(f)["classes"]
        cls.vocab = model_vocab(os.path.join(ROOT, "models", "default.safetensors"))

    def test_tokenize_drops_stress_and_pauses(self):
        self.assertEqual(phonemes.tokenize("D|@2 k|w|'I|k _:_ ,oU|v|3\n%aI;"),
                         ["D", "@2", "k", "w", "I", "k", "oU", "v", "3", "aI"])

    def test_every_dialect_has_a_table(self):
        dialects = set(corpus.TRAIN_DIALECTS) | {phonemes.dialect_of(v)
                                                 for v in corpus.UNSEEN_VOICES}
        self.assertEqual(set(self.classes), dialects)

    def test_merging_is_idempotent_and_lands_in_the_vocab(self):
        for dialect, table in self.classes.items():
            for src, dst in table.items():
                self.assertNotEqual(src, dst, dialect)
                # Keys are tokens as the tokenizer writes them.
                self.assertEqual(phonemes.tokenize(src), [src], dialect)
                self.assertEqual(phonemes.tokenize(dst), [dst], dialect)
                self.assertNotIn(dst, table, "%s: %s maps to a merged name" % (dialect, src))
                self.assertIn(dst, self.vocab, "%s: class %s not in the model vocab" % (dialect, dst))
            once = phonemes.canonical(list(table) + self.vocab[1:], dialect)
            self.assertEqual(phonemes.canonical(once, dialect), once, dialect)

    def test_en_gb_variants_use_the_en_voice(self):
        # espeak-ng 1.51 ignores a variant after "en-gb".
        self.assertEqual(corpus.voice_name("en-gb", "m3"), "en+m3")
        self.assertEqual(corpus.voice_name("en-gb", ""), "en-gb")
        self.assertEqual(corpus.voice_name("en-us", "f2"), "en-us+f2")
        self.assertEqual(phonemes.dialect_of("en+m3"), "en-gb")
        self.assertEqual(phonemes.dialect_of("en-gb-x-rp+f4"), "en-gb-x-rp")
        self.assertRaises(KeyError, phonemes.canonical, ["a"], "de+m1")

    def test_sample_reference_is_merged(self):
        with open(os.path.join(ROOT, "models", "sample.phonemes.txt"), encoding="utf-8") as f:
            ref = f.read().split()
        self.assertGreater(len(ref), 50)
        self.assertEqual(phonemes.canonical(ref, corpus.SAMPLE_VOICE), ref)
        self.assertTrue(set(ref) <= set(self.vocab[1:]))

    def test_scoring_counts_identical_sounds_as_equal(self):
        # en-gb speaks "3" as "@"; en-us does not.
        gb, us = self.classes["en-gb"], self.classes["en-us"]
        self.assertEqual(gb.get("3"), "@")
        self.assertNotIn("3", us)
        ref, hyp = ["D", "@", "k", "3"], ["D", "3", "k", "@"]
        score = lambda v: phonemes.edit_distance(phonemes.canonical(ref, v),
                                                 phonemes.canonical(hyp, v))
        self.assertEqual(score("en+m3"), 0)
        self.assertEqual(score("en-us"), 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
