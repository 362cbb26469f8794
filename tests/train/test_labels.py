#!/usr/bin/python3
"""The labels of the default model: tokenizer, voices, merged mnemonics and
their mapping to the model's ARPAbet phones.

Standard library only (no espeak-ng, no torch): checks that the committed
tools/train/phoneme_merges.json is a usable table for every dialect the
recipe trains or tests on, that merging is a function, that every espeak-ng
mnemonic and every flite/festival phone maps into the bundled model's
vocab in every dialect, that the bundled sample's reference is in that
vocab, and that the evaluation scores two mnemonics a dialect speaks
identically as equal and any others as different.
"""

import json
import os
import struct
import sys
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import arpabet  # noqa: E402
import corpus  # noqa: E402
import phonemes  # noqa: E402

# espeak-ng 1.51's mnemonics in the English dialects the recipe uses (the
# earlier default model's inventory, plus two it never had).
ESPEAK_INVENTORY = (
    "0 3 3: ? @ @- @2 @5 @L A: A@ A~ C D E I I# I2 IR N O O2 O: O@ OI O~ S T U U@ V VR Z "
    "a a# a#: a: aI aI2 aI3 aI@ aU aa b d dZ e e@ eI f g h i i: i:: i@ i@3 j k l l# m n "
    "n- o o@ oU p r r- s t t# t2 tS t[ u: v w w# x z").split()
RADIO_PHONES = ("aa ae ah ao aw ax axr ay b ch d dh dx eh el em en er ey f g hh hv ih ix iy "
                "jh k l m n nx ng ow oy p r s sh t th uh uw v w y z zh pau h#").split()


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

    def test_tokenize_splits_a_linking_r_run_into_a_vowel(self):
        # espeak-ng 1.51, en-us-nyc, "Humor in the Court": m|3|r-I|n
        self.assertEqual(phonemes.tokenize("j|'u:|m|3|r-I|n|D|@2"),
                         ["j", "u:", "m", "3", "r-", "I", "n", "D", "@2"])
        self.assertEqual(arpabet.from_espeak(phonemes.tokenize("m|3|r-I|n"),
                                             "en-us-nyc+m6"),
                         arpabet.from_espeak(phonemes.tokenize("m|3|r- 'I|n"),
                                             "en-us-nyc+m6"))

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
            once = phonemes.canonical(list(table) + ESPEAK_INVENTORY, dialect)
            self.assertEqual(phonemes.canonical(once, dialect), once, dialect)

    def test_every_label_lands_in_the_vocab(self):
        self.assertEqual(self.vocab, arpabet.VOCAB)
        self.assertEqual(len(arpabet.PHONES), 39)
        for dialect in self.classes:
            for t in ESPEAK_INVENTORY:
                mapped = arpabet.from_espeak([t], dialect)
                self.assertTrue(set(mapped) <= set(self.vocab[1:]), (dialect, t, mapped))
                self.assertLessEqual(len(mapped), 2, (dialect, t))
        for p in RADIO_PHONES:
            self.assertTrue(set(arpabet.from_radio([p])) <= set(self.vocab[1:]), p)
        self.assertRaises(KeyError, arpabet.from_radio, ["zz"])
        self.assertRaises(KeyError, arpabet.from_espeak, ["Q!"], "en-us")

    def test_r_follows_the_dialect(self):
        car = ["k", "A@"]
        self.assertEqual(arpabet.from_espeak(car, "en-us"), ["K", "AA", "R"])
        self.assertEqual(arpabet.from_espeak(car, "en-gb"), ["K", "AA"])
        # en-gb-scotland writes its r.
        self.assertEqual(arpabet.from_espeak(car + ["r"], "en-gb-scotland"), ["K", "AA", "R"])
        # en-us: one r sound where the vowel ends in one ("hour is" is
        # aU 3 r-, "hurry" h 3: r i); espeak-ng's en-us-nyc is not rhotic.
        self.assertEqual(arpabet.from_espeak(["aU", "3", "r-"], "en-us"), ["AW", "ER"])
        self.assertEqual(arpabet.from_espeak(["h", "3:", "r", "i"], "en-us"), ["HH", "ER", "IY"])
        self.assertEqual(arpabet.from_espeak(car, "en-us-nyc"), ["K", "AA"])
        # The linking r (`r-`, written only before a vowel) is spoken.
        self.assertEqual(arpabet.from_espeak(car + ["r-", "I", "z"], "en-gb"),
                         ["K", "AA", "R", "IH", "Z"])
        self.assertEqual(arpabet.from_espeak(["h", "i@3", "r"], "en-gb-scotland"),
                         ["HH", "IH", "R"])
        # RP's "bath" vowel.
        self.assertEqual(arpabet.from_espeak(["b", "aa", "T"], "en-gb-x-rp"), ["B", "AA", "TH"])
        self.assertEqual(arpabet.from_espeak(["b", "aa", "T"], "en-gb"), ["B", "AE", "TH"])
        # flite's and festival's schwa and syllabic consonants.
        self.assertEqual(arpabet.from_radio("pau dh ax b ah t en pau".split()),
                         ["DH", "AH", "B", "AH", "T", "AH", "N"])

    def test_en_gb_variants_use_the_en_voice(self):
        # espeak-ng 1.51 ignores a variant after "en-gb".
        self.assertEqual(corpus.voice_name("en-gb", "m3"), "en+m3")
        self.assertEqual(corpus.voice_name("en-gb", ""), "en-gb")
        self.assertEqual(corpus.voice_name("en-us", "f2"), "en-us+f2")
        self.assertEqual(phonemes.dialect_of("en+m3"), "en-gb")
        self.assertEqual(phonemes.dialect_of("en-gb-x-rp+f4"), "en-gb-x-rp")
        self.assertRaises(KeyError, phonemes.canonical, ["a"], "de+m1")

    def test_sample_reference_is_in_the_vocab(self):
        with open(os.path.join(ROOT, "models", "sample.phonemes.txt"), encoding="utf-8") as f:
            ref = f.read().split()
        self.assertGreater(len(ref), 50)
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
