#!/usr/bin/python3
"""Custom words are spelled exactly as the training labels are made.

`aural pronounce` (libespeak-ng's G2P through the g2p map, lib/g2p.c) must
give, for every word and every dialect of the map, what the training
recipe makes of espeak-ng's own command for that word: `espeak-ng -x
--sep='|'`, phonemes.tokenize, the dialect's merges and arpabet.from_espeak
(tools/train). The words: names and technical terms the lexicon lacks, and
words whose r, linking r or r-coloured vowels differ between dialects.

    test_g2p.py AURAL_BINARY
"""

import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import arpabet  # noqa: E402
import corpus  # noqa: E402
import phonemes  # noqa: E402

AURAL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "tools", "aural")
MODEL = os.path.join(ROOT, "models", "default.safetensors")
WORDS = ["Dashwood", "Kubernetes", "PostgreSQL", "Nginx", "Wojciech", "Siobhan", "Zhang",
         "Reykjavik", "Tchaikovsky", "hour", "four", "hurry", "car", "here", "bath",
         "little", "button", "rhythm", "squirrel", "February", "Worcestershire", "café",
         "naïve", "O'Brien", "x86", "Grafana", "Prometheus", "Kafka"]


def recipe(word, dialect):
    """The training recipe's tokens for `word` said in `dialect`."""
    return tuple(arpabet.from_espeak(phonemes.espeak_phonemes(dialect, word), dialect))


def pronounce(words, *extra):
    p = subprocess.run([AURAL, "pronounce", "-m", MODEL, *extra, *words],
                       capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


class G2P(unittest.TestCase):
    def test_same_as_training_labels(self):
        rc, out, err = pronounce(WORDS)
        self.assertEqual(rc, 0, err)
        got = {}
        for line in out.splitlines():
            w, toks = line.split("\t")
            got.setdefault(w, set()).add(tuple(toks.split()))
        for w in WORDS:
            want = {recipe(w, d) for d in corpus.TRAIN_DIALECTS}
            self.assertEqual(got.get(w), want, w)

    def test_dialects_differ_where_labels_do(self):
        # en-us says the r of "four"; the British dialects do not: both kept.
        rc, out, err = pronounce(["four"])
        self.assertEqual(rc, 0, err)
        self.assertIn("four\tF AO R", out.splitlines())
        self.assertIn("four\tF AO", out.splitlines())

    def test_bad_words_are_named(self):
        for bad in ["", "two words", "a,b", "x" * 65, "\x01ctl"]:
            rc, out, err = pronounce([bad])
            # A word of the wrong form is a bad command line.
            self.assertEqual(rc, 2, bad)
            self.assertIn("custom words", err)
            self.assertEqual(out, "")

    def test_too_many_words_are_a_bad_command_line(self):
        # More than a lexicon of custom words holds: told before the model
        # loads, exit 2 (it loaded the model, then exited 1).
        rc, out, err = pronounce(["w%d" % i for i in range(1025)], "-m", "no-such-model")
        self.assertEqual(rc, 2, err)
        self.assertIn("1025 words (at most 1024)", err)
        self.assertEqual(out, "")

    def test_bad_map_is_named(self):
        cases = {
            "no dialect": "map a AE\n",
            "unknown directive": "dialect en-us\nfoo a AE\n",
            "unknown token": "dialect en-us\nmap a XX\n",
            "twice": "dialect en-us\nmap a AE\nmap a AH\n",
            "after before map": "dialect en-us\nafter r ER\n",
            "empty dialect": "dialect en-us\n",
            "bad dialect name": "dialect en/us\nmap a AE\n",
            "NUL": "dialect en-us\nmap a\0 AE\n",
        }
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad.g2p.txt")
            for name, text in cases.items():
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                rc, out, err = pronounce(["hello"], "--g2p", path)
                self.assertEqual(rc, 1, name)
                self.assertIn(path, err, name)
            # A map that lacks a phoneme the word needs names both.
            with open(path, "w", encoding="utf-8") as f:
                f.write("drop ',%=;\ndialect en-us\nmap h HH\n")
            rc, out, err = pronounce(["hello"], "--g2p", path)
            self.assertEqual(rc, 1)
            self.assertIn("\"hello\"", err)
            self.assertIn("does not map", err)

    def test_model_without_its_map_names_g2p(self):
        """A model with no g2p map beside it: the message said only
        'MODEL.g2p.txt: No such file or directory', not what the map is
        for or how to give another."""
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, "alone.safetensors")
            os.symlink(MODEL, model)
            p = subprocess.run([AURAL, "pronounce", "-m", model, "hello"],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn(os.path.join(tmp, "alone.g2p.txt"), p.stderr)
            self.assertIn("--g2p", p.stderr)
            # A missing model is named as such, not as a missing map.
            p = subprocess.run([AURAL, "pronounce", "-m",
                                os.path.join(tmp, "none.safetensors"), "hi"],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertNotIn("g2p", p.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
