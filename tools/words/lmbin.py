#!/usr/bin/python3
"""Converts an ARPA LM into aural's binary LM (a file libaural loads in a
fraction of the time, a third of the gzipped ARPA's size).

    tools/words/lmbin.py IN.arpa[.gz] OUT.lm.bin

The format (little-endian; lib/lm.c reads it, tools/words/README.md
describes it for users):

    "AURALLMB"                       8 bytes
    version                          uint32, 1
    order                            uint32, 1 to 4
    counts[order]                    uint64 each: the n-grams of each order
    vocabulary                       uint64 byte count, then counts[0]
                                     NUL-terminated words; word i is the
                                     LM's word id i
    unigrams                         counts[0] x (float32 log10 p,
                                     float32 log10 backoff), in id order
    for each order k = 2..order:
      levels                         256 float32 log10 probabilities; then
                                     256 float32 backoffs when k < order
      stream sizes                   uint64 each: children, words
      children                       for each (k-1)-gram in sorted order,
                                     its k-grams' count (varint)
      words                          for each k-gram, in sorted order, its
                                     last word's id: the first of a
                                     (k-1)-gram's children as is, each
                                     next as the increase over the one
                                     before (varint, at least 1)
      probabilities                  counts[k-1] bytes: level indices
      backoffs                       counts[k-1] bytes when k < order

Sorted order is lexicographic over word ids; the k-grams, read as the
children of the (k-1)-grams in turn, come out in that order too, which
is what makes them the next order's contexts. A varint is 7 bits per byte,
low bits first, the high bit set on every byte but the last, at most 5
bytes. Every n-gram of order 2 and up has its probability (and backoff)
quantized to one of 256 levels per order: the means of 256 bins of equal
count over that order's values (every distinct value its own level when
there are 256 or fewer). On the default model's dev set, 8-bit levels
decode the same words as the float LM within noise (tools/words/README.md).
"""

import argparse
import struct
import sys
import zlib

import numpy as np

import wordlib

MAGIC = b"AURALLMB"
VERSION = 1
LEVELS = 256


def read_arpa(path):
    """(order, [per order: list of (words tuple, log10 p, log10 bow or None)])."""
    try:
        return read_arpa_text(path)
    except (EOFError, zlib.error) as e:  # gzip's, for a file cut short or damaged
        raise ValueError("%s: %s (a file cut short?)" % (path, e)) from None
    except UnicodeDecodeError as e:
        raise ValueError("%s: not UTF-8 text (%s)" % (path, e)) from None


def read_arpa_text(path):
    grams = {}
    announced = {}
    order = 0
    section = 0
    ended = False
    with wordlib.open_text(path) as f:
        for ln, line in enumerate(f, 1):
            line = line.strip()
            try:
                if line.startswith("ngram "):
                    k, _, n = line[6:].partition("=")
                    announced[int(k)] = int(n)
                    continue
                if line.startswith("\\") and line.endswith("-grams:"):
                    section = int(line[1:-7])
                    order = max(order, section)
                    grams[section] = []
                    continue
            except ValueError:
                raise ValueError("%s:%d: %r: a number expected" % (path, ln, line[:40])) from None
            if not line:
                section = 0  # a blank line ends a section, as lib/lm.c reads it
                continue
            if line == "\\data\\":
                continue
            if line == "\\end\\":
                ended = True
                break
            # As lib/lm.c reads them: an n-gram line of its section's order,
            # numbers where numbers go (a KeyError or a bare float() error
            # named no line).
            parts = line.split()
            if section == 0 or len(parts) not in (section + 1, section + 2):
                raise ValueError("%s:%d: %r is no line of a %s" % (
                    path, ln, line[:40], "%d-gram" % section if section else
                    "section (a \\k-grams: line starts one, a blank line ends it)"))
            try:
                bow = float(parts[1 + section]) if len(parts) > 1 + section else None
                grams[section].append((tuple(parts[1:1 + section]), float(parts[0]), bow))
            except ValueError:
                raise ValueError("%s:%d: %r: a number expected" % (path, ln, line[:40])) from None
    if not ended:
        raise ValueError("%s: no \\end\\ (a file cut short?), which libaural refuses" % path)
    for k in range(1, max([order] + list(announced)) + 1):
        if len(grams.get(k, ())) != announced.get(k, -1):
            raise ValueError("%s: %d %d-grams listed, \\data\\ announced %s" % (
                path, len(grams.get(k, ())), k, announced.get(k, "none")))
    return order, [grams[k] for k in range(1, order + 1)]


def quantize(values):
    """(levels float32[LEVELS], indices uint8[len(values)])."""
    v = np.asarray(values, dtype=np.float64)
    distinct = np.unique(v)
    levels = np.zeros(LEVELS)
    if len(distinct) <= LEVELS:
        levels[:len(distinct)] = distinct
        idx = np.searchsorted(distinct, v)
    else:
        # A value's bin: its rank among the sorted values (equal values
        # share their first copy's), scaled to LEVELS.
        first = np.searchsorted(np.sort(v), v, side="left")
        bins = (first * LEVELS) // len(v)
        for b in range(LEVELS):
            sel = v[bins == b]
            levels[b] = sel.mean() if len(sel) else (levels[b - 1] if b else v.min())
        idx = bins
    return levels.astype("<f4"), idx.astype(np.uint8)


def varints(values):
    out = bytearray()
    for x in values:
        x = int(x)
        while x >= 0x80:
            out.append((x & 0x7F) | 0x80)
            x >>= 7
        out.append(x)
    return bytes(out)


def convert(order, grams):
    """The binary file's bytes."""
    if not 1 <= order <= 4 or len(grams) != order:
        raise ValueError("order %d (libaural reads 1 to 4)" % order)
    for k, rows in enumerate(grams, 1):
        for g, p, _ in rows:
            if p > 1e-4 and g != ("<s>",):
                raise ValueError("%d-gram %s: log10 probability %g above 0" % (k, " ".join(g), p))
    words = [g[0][0] for g in grams[0]]
    if len(set(words)) != len(words):
        raise ValueError("a word is listed twice among the 1-grams")
    ids = {w: i for i, w in enumerate(words)}
    for k, rows in enumerate(grams[1:], 2):
        for g, _, _ in rows:
            for w in g:
                if w not in ids:
                    raise ValueError("%d-gram %s: %r is no 1-gram" % (k, " ".join(g), w))
    out = bytearray(MAGIC)
    out += struct.pack("<II", VERSION, order)
    out += struct.pack("<%dQ" % order, *[len(g) for g in grams])
    vocab = b"".join(w.encode("utf-8") + b"\0" for w in words)
    out += struct.pack("<Q", len(vocab)) + vocab
    uni = np.zeros((len(words), 2), dtype="<f4")
    for i, (_, p, b) in enumerate(grams[0]):
        uni[i] = (p, b or 0.0)
    out += uni.tobytes()
    contexts = [(i,) for i in range(len(words))]
    for k in range(2, order + 1):
        rows = sorted((tuple(ids[w] for w in g), p, b) for g, p, b in grams[k - 1])
        if any(a[0] == b[0] for a, b in zip(rows, rows[1:])):
            raise ValueError("a %d-gram is listed twice" % k)
        keyed = {}
        for key, _, _ in rows:
            keyed.setdefault(key[:-1], []).append(key[-1])
        if len(keyed) and not set(keyed) <= set(contexts):
            raise ValueError("a %d-gram whose first %d words are no %d-gram" % (k, k - 1, k - 1))
        counts = varints(len(keyed.get(c, ())) for c in contexts)
        deltas = []
        for c in contexts:
            prev = None
            for w in keyed.get(c, ()):
                deltas.append(w if prev is None else w - prev)
                prev = w
        word_stream = varints(deltas)
        plev, pidx = quantize([p for _, p, _ in rows])
        out += plev.tobytes()
        if k < order:
            blev, bidx = quantize([b or 0.0 for _, _, b in rows])
            out += blev.tobytes()
        out += struct.pack("<QQ", len(counts), len(word_stream)) + counts + word_stream
        out += pidx.tobytes()
        if k < order:
            out += bidx.tobytes()
        contexts = [key for key, _, _ in rows]
    return bytes(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("arpa", help="an ARPA LM, plain or gzipped")
    ap.add_argument("out", help="the binary LM to write")
    args = ap.parse_args()
    try:
        order, grams = read_arpa(args.arpa)
        data = convert(order, grams)
        with open(args.out, "wb") as f:
            f.write(data)
    except (ValueError, OSError) as e:
        print("lmbin.py: %s" % e, file=sys.stderr)
        return 1
    print("%s: order %d, n-grams %s, %d bytes" % (args.out, order, [len(g) for g in grams],
                                                   len(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
