"""A second, general-English LM for the word decoder: reading CMU
Sphinx's binary trie LM (Debian `pocketsphinx-en-us`'s `en-us.lm.bin`, a
US-English trigram model trained on far more text than the fortune
files), and mixing two backoff LMs into one.

The trie format, as sphinxbase 5prealpha writes it (little-endian):

    "Trie Language Model"            19 bytes, no NUL
    order                            uint8 (2..3 here)
    counts[order]                    uint32 each
    quantization                     int32 (ignored), then float32 tables:
                                     per middle order a 65,536-entry
                                     probability table and a backoff
                                     table, then the highest order's
                                     probability table
    unigrams[counts[0] + 1]          float32 prob, float32 backoff,
                                     uint32 first child (a sentinel last)
    per middle order (2..order-1)    bit-packed records of word index,
                                     16-bit backoff code, 16-bit
                                     probability code, first child;
                                     one extra record closes the last range
    highest order                    bit-packed records: word index,
                                     16-bit probability code
    word strings                     int32 byte count, then that many
                                     bytes of NUL-terminated words

The trie is keyed on the n-gram read backwards: a unigram's children are
the bigrams that end in it, each keyed by the word before. Log
probabilities are in base 1.0001 (sphinxbase's logmath). A record's field
widths follow from the counts: a word index takes bits(counts[0]), a
child pointer bits(counts[n]) (bits(x): the bits of x's highest set bit).
"""

import math
import struct

import numpy as np

from wordlib import log10

HEADER = b"Trie Language Model"
QUANT_ENTRIES = 1 << 16
LOG_BASE_TO_LOG10 = math.log10(1.0001)


class BadTrie(ValueError):
    pass


def _bits(x):
    return int(x).bit_length()


def _read_fields(buf, bit_offsets, width):
    """The `width`-bit fields at the given bit offsets (little-endian bit
    order), as int64."""
    byte = bit_offsets >> 3
    shift = (bit_offsets & 7).astype(np.uint64)
    value = np.zeros(len(byte), np.uint64)
    for k in range((7 + width + 7) // 8):     # a shift of up to 7 bits, then the field
        value |= buf[byte + k].astype(np.uint64) << np.uint64(8 * k)
    return ((value >> shift) & np.uint64((1 << width) - 1)).astype(np.int64)


def read_sphinx_trie(path):
    """(words, grams): the word strings and, per order n (1-based), a dict
    n-gram tuple -> (log10 P(w | h), log10 backoff). Raises BadTrie naming
    what is wrong with a file that is not this format."""
    with open(path, "rb") as f:
        data = f.read()
    at = len(HEADER)
    if data[:at] != HEADER:
        raise BadTrie("%s: not a sphinxbase trie LM (header)" % path)

    def take(fmt):
        nonlocal at
        size = struct.calcsize(fmt)
        if at + size > len(data):
            raise BadTrie("%s: truncated at byte %d" % (path, at))
        out = struct.unpack_from(fmt, data, at)
        at += size
        return out

    (order,) = take("<B")
    if not 2 <= order <= 3:
        raise BadTrie("%s: order %d (this reader takes 2 or 3)" % (path, order))
    counts = take("<%dI" % order)
    if min(counts) == 0 or counts[0] >= 1 << 25 or max(counts) >= 1 << 25:
        raise BadTrie("%s: n-gram counts %s out of range" % (path, counts))
    take("<i")
    n_tables = (order - 2) * 2 * QUANT_ENTRIES + QUANT_ENTRIES
    if at + 4 * n_tables > len(data):
        raise BadTrie("%s: truncated in the quantization tables" % path)
    tables = np.frombuffer(data, "<f4", n_tables, at)
    at += 4 * n_tables
    uni_type = np.dtype([("p", "<f4"), ("bo", "<f4"), ("next", "<u4")])
    if at + uni_type.itemsize * (counts[0] + 1) > len(data):
        raise BadTrie("%s: truncated in the unigrams" % path)
    uni = np.frombuffer(data, uni_type, counts[0] + 1, at)
    at += uni_type.itemsize * (counts[0] + 1)

    word_bits = _bits(counts[0])
    layers = []     # (bit offset of the first record, record bits, pointer bits)
    for n in range(2, order):
        ptr_bits = _bits(counts[n])
        rec = word_bits + 32 + ptr_bits
        layers.append((at * 8, rec, ptr_bits))
        at += ((1 + counts[n - 1]) * rec + 7) // 8 + 8
    top_rec = word_bits + 16
    top_at = at * 8
    at += ((1 + counts[order - 1]) * top_rec + 7) // 8 + 8
    (nbytes,) = take("<i")
    if nbytes < 0 or at + nbytes != len(data):
        raise BadTrie("%s: word strings take %d bytes where %d are left" % (
            path, nbytes, len(data) - at))
    words = data[at:at + nbytes].split(b"\0")
    if words[-1] != b"" or len(words) - 1 != counts[0]:
        raise BadTrie("%s: %d word strings for %d unigrams" % (path, len(words) - 1, counts[0]))
    words = [w.decode("utf-8", "replace") for w in words[:-1]]

    buf = np.frombuffer(data + b"\0" * 16, np.uint8)
    to10 = LOG_BASE_TO_LOG10
    grams = {1: {}}
    for i, w in enumerate(words):
        grams[1][(w,)] = (float(uni["p"][i]) * to10, float(uni["bo"][i]) * to10)

    # Walk down: `parents[k]` is the n-gram (as a word-index tuple, oldest
    # first) whose children occupy [first[k], first[k + 1]).
    first = uni["next"].astype(np.int64)
    parents = [(i,) for i in range(counts[0])]
    for n in range(2, order + 1):
        top = n == order
        total = counts[n - 1]
        if np.any(np.diff(first) < 0) or first[0] != 0 or first[-1] > total:
            raise BadTrie("%s: %d-gram child ranges are not ordered within %d records" % (
                path, n, total))
        reach = int(first[-1])
        idx = np.arange(reach + (0 if top else 1), dtype=np.int64)
        if top:
            base, rec = top_at, top_rec
        else:
            base, rec, ptr_bits = layers[n - 2]
        offs = base + idx * rec
        word = _read_fields(buf, offs[:reach], word_bits)
        if reach and word.max() >= counts[0]:
            raise BadTrie("%s: a %d-gram names word %d of %d" % (path, n, word.max(), counts[0]))
        parent = np.searchsorted(first, np.arange(reach), "right") - 1
        if top:
            prob = tables[-QUANT_ENTRIES:][_read_fields(buf, offs + word_bits, 16)]
            bo = np.zeros(reach, np.float32)
        else:
            t = (n - 2) * 2 * QUANT_ENTRIES
            bo = tables[t + QUANT_ENTRIES:t + 2 * QUANT_ENTRIES][
                _read_fields(buf, offs[:reach] + word_bits, 16)]
            prob = tables[t:t + QUANT_ENTRIES][_read_fields(buf, offs[:reach] + word_bits + 16, 16)]
            first = _read_fields(buf, offs + word_bits + 32, ptr_bits)
        layer = {}
        new_parents = []
        for k in range(reach):
            g = (int(word[k]),) + parents[parent[k]]
            new_parents.append(g)
            layer[tuple(words[i] for i in g)] = (float(prob[k]) * to10, float(bo[k]) * to10)
        grams[n] = layer
        parents = new_parents
    return words, grams


class BackoffLM:
    """A backoff LM held as dicts: n-gram -> log10 P(w | h), and n-gram ->
    log10 backoff weight (absent: 0)."""

    def __init__(self, prob, bow, order):
        self.prob, self.bow, self.order = prob, bow, order
        self.vocab = {g[0] for g in prob if len(g) == 1}

    @classmethod
    def from_grams(cls, grams, keep_word):
        """From read_sphinx_trie's grams, keeping n-grams whose words all
        pass `keep_word`."""
        prob, bow = {}, {}
        for n, layer in grams.items():
            for g, (p, b) in layer.items():
                if all(keep_word(w) for w in g):
                    prob[g] = p
                    if b != 0.0:
                        bow[g] = b
        return cls(prob, bow, max(grams))

    @classmethod
    def from_arpa(cls, arpa):
        return cls(arpa.prob, arpa.bow, arpa.order)

    def p(self, hist, w):
        """P(w | hist) (not log); 0 for a word outside the vocabulary."""
        if w not in self.vocab:
            return 0.0
        hist = hist[max(0, len(hist) - (self.order - 1)):]
        penalty = 0.0
        while True:
            g = hist + (w,)
            lp = self.prob.get(g)
            if lp is not None:
                return 10.0 ** (penalty + lp)
            penalty += self.bow.get(hist, 0.0)
            hist = hist[1:]


def mix(lms, weights, vocab, order):
    """Static linear interpolation: one backoff LM whose listed n-grams are
    the union of the components' (their words in `vocab`, plus <s>, </s>,
    <unk>), each with P(w | h) = sum_i weight_i P_i(w | h) exactly, and
    backoff weights recomputed so that every distribution sums to what the
    components' mixture leaves for the unlisted words. Returns per order
    n a dict n-gram -> P (not log)."""
    allowed = set(vocab) | {"<s>", "</s>", "<unk>"}
    prob = [None] + [{} for _ in range(order)]
    for n in range(1, order + 1):
        grams = set()
        for lm in lms:
            grams.update(g for g in lm.prob if len(g) == n and all(w in allowed for w in g))
        if n == 1:
            grams.update((w,) for w in allowed)
        grams.discard(("<s>",))
        for g in sorted(grams):     # a fixed order: sums, and so the file, repeat exactly
            prob[n][g] = sum(wt * lm.p(g[:-1], g[-1]) for lm, wt in zip(lms, weights))
    # A listed n-gram keeps its prefix (its history's state) and its suffix
    # (the lower order it backs off to) listed.
    for n in range(order, 1, -1):
        for g in prob[n]:
            for part in (g[:-1], g[1:]):
                if part not in prob[n - 1] and part != ("<s>",):
                    prob[n - 1][part] = sum(wt * lm.p(part[:-1], part[-1])
                                            for lm, wt in zip(lms, weights))
    return prob


def backoff_weights(prob, order):
    """bow(h) = (1 - sum of listed P(w | h)) / (1 - sum of P(w | h') over
    the same w), h' = h without its oldest word."""
    bows = [None] + [{} for _ in range(order)]
    for n in range(1, order):
        hi, lo = {}, {}
        for g, p in prob[n + 1].items():
            h = g[:-1]
            hi[h] = hi.get(h, 0.0) + p
            lo[h] = lo.get(h, 0.0) + lower_p(prob, bows, g[1:])
        for h in hi:
            num, den = 1.0 - hi[h], 1.0 - lo[h]
            bows[n][h] = num / den if num > 1e-12 and den > 1e-12 else 1e-9
    return bows


def lower_p(prob, bows, g):
    """P(g[-1] | g[:-1]) in the model (prob, bows), backing off."""
    scale = 1.0
    while True:
        p = prob[len(g)].get(g)
        if p is not None:
            return scale * p
        scale *= bows[len(g) - 1].get(g[:-1], 1.0)
        g = g[1:]


def prune(prob, order, threshold):
    """Relative-entropy pruning (in the spirit of Stolcke 1998, with the
    history's backoff weight held fixed): an n-gram of order 2 or more is
    dropped where P(h) P(w | h) log(P(w | h) / (bow(h) P(w | h'))) is below
    `threshold`, unless a longer kept n-gram needs it as its prefix or
    suffix. Highest order first. Returns the pruned copy."""
    prob = [None] + [dict(prob[n]) for n in range(1, order + 1)]
    bows = backoff_weights(prob, order)

    def p_hist(h):
        # P(h) by the chain rule within the model.
        total = 1.0
        for i in range(len(h)):
            if h[i] == "<s>":
                continue
            total *= lower_p(prob, bows, h[:i + 1][-order:])
        return total

    for n in range(order, 1, -1):
        need = set()
        if n < order:
            for g in prob[n + 1]:
                need.add(g[:-1])
                need.add(g[1:])
        keep = {}
        for g, p in prob[n].items():
            if g in need:
                keep[g] = p
                continue
            h = g[:-1]
            est = bows[n - 1].get(h, 1.0) * lower_p(prob, bows, g[1:])
            if p <= 0 or est <= 0:
                continue
            if p_hist(h) * p * math.log(p / est) >= threshold:
                keep[g] = p
        prob[n] = keep
    return prob


def write_arpa(path, prob, order):
    """Writes `prob` (per order, n-gram -> P) as ARPA with fresh backoff
    weights; returns the n-gram counts."""
    bows = backoff_weights(prob, order)
    counts = []
    with open(path, "w", encoding="utf-8") as f:
        f.write("\\data\\\n")
        for n in range(1, order + 1):
            f.write("ngram %d=%d\n" % (n, len(prob[n]) + (1 if n == 1 else 0)))
            counts.append(len(prob[n]) + (1 if n == 1 else 0))
        for n in range(1, order + 1):
            f.write("\n\\%d-grams:\n" % n)
            items = sorted(prob[n].items())
            if n == 1:
                items = sorted(items + [(("<s>",), 0.0)])
            for g, p in items:
                line = "%.6f\t%s" % (log10(p), " ".join(g))
                if n < order and g in bows[n]:
                    line += "\t%.6f" % log10(bows[n][g])
                f.write(line + "\n")
        f.write("\n\\end\\\n")
    return counts
