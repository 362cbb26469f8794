#!/usr/bin/python3
"""The binary LM writer (tools/words/lmbin.py).

* It writes tests/data/words/tri.lm.bin from tri.lm.arpa byte for byte (the
  C tests read that file against the ARPA text; this pins the writer to
  it), and the same bytes again.
* Quantization: 256 or fewer distinct values are kept exactly; more share
  256 levels, each value's level the mean of its bin, equal values in one
  bin, the levels rising with the values, every value within its bin's
  span of its level.
* Varints as lib/lm.c reads them; a k-gram whose first words are no
  (k-1)-gram, an n-gram or word listed twice, a positive probability, an
  order past 4 and an ARPA file whose sections disagree with its \\data\\
  counts are refused; so are a gzipped file cut short, text that is not
  UTF-8 and a blank line inside a section, by file and line.

    test_lmbin.py
"""

import gzip
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "words"))
import lmbin  # noqa: E402

DATA = os.path.join(ROOT, "tests", "data", "words")


class TestLmbin(unittest.TestCase):
    def test_writes_the_committed_file(self):
        order, grams = lmbin.read_arpa(os.path.join(DATA, "tri.lm.arpa"))
        self.assertEqual(order, 3)
        data = lmbin.convert(order, grams)
        with open(os.path.join(DATA, "tri.lm.bin"), "rb") as f:
            self.assertEqual(data, f.read())
        self.assertEqual(lmbin.convert(order, grams), data)
        self.assertEqual(data[:8], b"AURALLMB")

    def test_few_values_are_exact(self):
        v = [-0.5, -1.25, -0.5, -3.0]
        levels, idx = lmbin.quantize(v)
        self.assertEqual(len(levels), 256)
        self.assertEqual([float(levels[i]) for i in idx], [np.float32(x) for x in v])

    def test_many_values_share_levels(self):
        rng = np.random.default_rng(5)
        v = np.concatenate([-rng.exponential(2.0, 5000), np.full(700, -1.5)])
        levels, idx = lmbin.quantize(v)
        self.assertTrue(np.all(np.diff(levels) >= 0))
        self.assertEqual(len(set(idx[v == -1.5])), 1)
        for b in np.unique(idx):
            sel = v[idx == b]
            self.assertAlmostEqual(float(levels[b]), sel.mean(), places=5)
        # Bins are runs of the sorted values: a larger value never has a
        # lower level index.
        order = np.argsort(v, kind="stable")
        self.assertTrue(np.all(np.diff(idx[order].astype(int)) >= 0))
        self.assertGreater(len(np.unique(idx)), 200)  # the 700 equal values take one
        self.assertLess(np.abs(levels[idx] - v).mean(), 0.02)

    def test_varints(self):
        self.assertEqual(lmbin.varints([0, 127, 128, 300, 2**32 - 1]),
                         bytes([0, 127, 0x80, 1, 0xAC, 2, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]))

    def test_refuses_inconsistent_models(self):
        uni = [(("<s>",), -99.0, -0.1), (("</s>",), -1.0, None), (("a",), -1.0, -0.2)]
        with self.assertRaisesRegex(ValueError, "no 2-gram"):
            lmbin.convert(3, [uni, [(("<s>", "a"), -0.3, -0.1)],
                              [(("a", "a", "</s>"), -0.2, None)]])
        with self.assertRaisesRegex(ValueError, "twice"):
            lmbin.convert(1, [uni + [(("a",), -2.0, None)]])
        with self.assertRaisesRegex(ValueError, "2-gram is listed twice"):
            lmbin.convert(2, [uni, [(("<s>", "a"), -0.3, None), (("<s>", "a"), -0.4, None)]])
        with self.assertRaisesRegex(ValueError, "above 0"):
            lmbin.convert(1, [uni + [(("b",), 0.5, None)]])
        with self.assertRaisesRegex(ValueError, "order 5"):
            lmbin.convert(5, [uni] * 5)

    def test_arpa_counts_checked(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.arpa")
            with open(path, "w") as f:
                f.write("\\data\\\nngram 1=3\nngram 2=1\n\n\\1-grams:\n-99\t<s>\n-1\t</s>\n"
                        "-1\ta\n\n\\end\\\n")
            with self.assertRaisesRegex(ValueError, "0 2-grams listed"):
                lmbin.read_arpa(path)

    def test_odd_arpa_files(self):
        """A byte order mark and CRLF line ends read as libaural reads
        them; a file cut short (no \\end\\), a line outside any section or
        of the wrong order, and an n-gram over a word no 1-gram lists are
        refused by name (a KeyError, a bare float() error, or a file that
        libaural then refused as ARPA but took converted)."""
        plain = ("\\data\\\nngram 1=3\nngram 2=1\n\n\\1-grams:\n-99\t<s>\t-0.5\n"
                 "-1\t</s>\n-1\ta\n\n\\2-grams:\n-0.3\t<s> a\n\n\\end\\\n")
        bad = {
            "no \\\\end": plain.replace("\\end\\\n", ""),
            ":4: .* no line of a section": plain.replace("ngram 2=1\n", "ngram 2=1\n-1 a\n"),
            ":11: .* no line of a 2-gram": plain.replace("<s> a", "<s> a b c"),
            ":11: .* a number expected": plain.replace("-0.3\t<s> a", "x\t<s> a"),
            "2-gram <s> b: 'b' is no 1-gram": plain.replace("<s> a", "<s> b"),
        }
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.arpa")
            with open(path, "wb") as f:
                f.write(plain.encode())
            want = lmbin.convert(*lmbin.read_arpa(path))
            with open(path, "wb") as f:
                f.write(b"\xef\xbb\xbf" + plain.replace("\n", "\r\n").encode())
            self.assertEqual(lmbin.convert(*lmbin.read_arpa(path)), want)
            for msg, text in bad.items():
                with open(path, "w") as f:
                    f.write(text)
                with self.assertRaisesRegex(ValueError, msg):
                    lmbin.convert(*lmbin.read_arpa(path))
            # The command says so in a line, exit 1, no traceback.
            p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "words", "lmbin.py"),
                                path, os.path.join(tmp, "x.lm.bin")],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 1)
            self.assertEqual(p.stderr, "lmbin.py: 2-gram <s> b: 'b' is no 1-gram\n")
            self.assertFalse(os.path.exists(os.path.join(tmp, "x.lm.bin")))

    def test_unreadable_arpa_files_named(self):
        """A gzipped ARPA file cut short ended in an EOFError traceback;
        text that is not UTF-8 and a count that is no number were one line
        naming neither the file nor the line; a blank line inside a
        section, which ends the section for libaural (it then refuses the
        file), was skipped and the file converted."""
        plain = ("\\data\\\nngram 1=3\nngram 2=1\n\n\\1-grams:\n-99\t<s>\t-0.5\n"
                 "-1\t</s>\n-1\ta\n\n\\2-grams:\n-0.3\t<s> a\n\n\\end\\\n")
        packed = gzip.compress(plain.encode())
        bad = {
            "x.arpa.gz: .*cut short": ("x.arpa.gz", packed[:-12]),
            "x.arpa: not UTF-8 text": ("x.arpa", plain.replace("a\n", "\xe9\n").encode("latin-1")),
            "x.arpa:3: 'ngram 2=x': a number": ("x.arpa", plain.replace("2=1", "2=x").encode()),
            "x.arpa:5: '.*x-grams:': a number": ("x.arpa", plain.replace("\\1-grams", "\\x-grams").encode()),
            "x.arpa:8: .* no line of a section": ("x.arpa", plain.replace("-1\t</s>\n", "\n-1\t</s>\n").encode()),
        }
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "x.lm.bin")
            for msg, (name, data) in bad.items():
                path = os.path.join(tmp, name)
                with open(path, "wb") as f:
                    f.write(data)
                with self.assertRaisesRegex(ValueError, msg):
                    lmbin.read_arpa(path)
                p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "words", "lmbin.py"),
                                    path, out], capture_output=True, text=True)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertRegex(p.stderr, "^lmbin.py: [^\n]*%s[^\n]*\n$" % msg)
                self.assertFalse(os.path.exists(out))

    def test_command_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "x.lm.bin")
            rc = os.system("%s %s %s %s > /dev/null" % (
                sys.executable, os.path.join(ROOT, "tools", "words", "lmbin.py"),
                os.path.join(DATA, "tri.lm.arpa"), out))
            self.assertEqual(rc, 0)
            with open(out, "rb") as f, open(os.path.join(DATA, "tri.lm.bin"), "rb") as g:
                self.assertEqual(f.read(), g.read())


if __name__ == "__main__":
    unittest.main(verbosity=2)
