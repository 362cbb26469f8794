#!/usr/bin/python3
"""Builds the word resources of the default model: a pronunciation lexicon
and a word trigram LM, both from Debian packages alone.

    build_resources.py [--out-dir models] [--order 3] [--prune-min 2]
                       [--no-extra-text] [--extra-words FILE]
                       [--general-lm FILE] [--general-weight 0.5]
                       [--prune-entropy 0] [--arpa]
                       [--harvest-min 2] [--linking-r 5] [--report]

Writes, next to the model:

* `default.lexicon.txt.gz`: one pronunciation per line, `word<TAB>tok tok ...`,
  each tok a model vocabulary token (never the blank). Pronunciations are
  espeak-ng's (`-x --sep='|' -q`) in every training dialect
  (corpus.TRAIN_DIALECTS), tokenized and merged per dialect exactly as the
  training labels (phonemes.tokenize, phonemes.canonical), deduplicated.
  For a model of ARPAbet phones (tools/train/arpabet.py) each is mapped
  as the training labels are, and CMUdict's pronunciations (Debian
  pocketsphinx-en-us, stress dropped) are added.
  Two sources: each word said alone, and each word as espeak-ng says it in
  running speech in the LM's training sentences ("the" is `D @` there, `D
  @2` alone; "a" is `a#`, alone `eI`), kept when a dialect says it so at
  least --harvest-min times; and the linking r (`r-` before a vowel) of
  words spelled with a final r or re, in the dialects and after the
  vowels where the harvest shows it (--linking-r). Words whose every
  pronunciation has a token outside the vocabulary are dropped from the LM
  too.
* `default.lm.bin.gz`: an interpolated modified Kneser-Ney word n-gram LM
  (Chen & Goodman 1998, three discounts per order), written as ARPA and
  converted to aural's binary form (tools/words/lmbin.py: 8-bit
  probability levels, a third of the gzipped ARPA's size, several times
  faster to load; --arpa keeps `default.lm.arpa.gz` beside it), with
  <s>, </s> and <unk>; singleton n-grams of the highest order are pruned
  and the backoff weights recomputed so every distribution sums to one.
  Corpus: the training part of corpus.split_sentences() minus the dev
  sentences (wordlib.split_dev), and (unless --no-extra-text) the other
  sentences of the same fortune files (those corpus.py leaves out: too long
  or too short, or with characters it does not admit; those with digits or
  non-ASCII characters are dropped), minus anything that equals, contains
  or is contained in a dev or test sentence. Its vocabulary: the corpus's
  words and the words of a word list (--extra-words, by default
  wamerican's 102,000: names, places, rarer words), which the corpus
  mostly never says; Kneser-Ney gives each of those its floor, the lowest
  unigram probability (a share of the discounted mass, as for any word
  seen in no n-gram), so that a word off the corpus can be recognized at
  all (each out-of-vocabulary word is at least one word error).
  That model is then mixed (--general-lm, --general-weight) with a
  general US-English trigram LM, CMU Sphinx's `en-us.lm.bin` from Debian
  `pocketsphinx-en-us` (lmmix.py reads it), restricted to the lexicon's
  words: P(w | h) = (1 - g) P_fortune(w | h) + g P_general(w | h) on the
  union of both models' n-grams, and may be pruned by relative entropy
  (--prune-entropy; by default it is not: on the dev set the whole
  mixture makes fewer word errors than any pruned one, and in binary form
  it loads within a second).

--report prints the LM's perplexity and OOV rate on the dev and test
references and how often the lexicon holds the pronunciation espeak-ng
uses for a word in context in the dev sentences (measurement only: test
sentences never shape anything here).
"""

import argparse
import collections
import glob
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lmbin  # noqa: E402
import lmmix  # noqa: E402
import wordlib  # noqa: E402
from wordlib import arpabet, corpus, normalize, phonemes  # noqa: E402

SPECIAL = ("<s>", "</s>", "<unk>")


# ---------------------------------------------------------------- LM corpus

def extra_sentences(exclude_keys):
    """Sentences of the fortune files that corpus.py does not use, as
    word lists; none overlaps a key of `exclude_keys`."""
    used = {wordlib.key(s) for s in corpus.fortune_sentences()}
    out, seen = [], set()
    for path in sorted(glob.glob(os.path.join(corpus.FORTUNE_DIR, "*"))):
        name = os.path.basename(path)
        if "." in name or name in corpus.SKIP_FORTUNE_FILES or os.path.isdir(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for cookie in text.split("\n%\n"):
            lines = [l for l in cookie.splitlines() if not l.strip().startswith("--")]
            flat = corpus.normalize(" ".join(lines)).replace('"', "")
            for s in corpus._SENTENCE_END.split(flat):
                if has_bad(s):
                    continue
                k = wordlib.key(s)
                if not k or k in used or k in seen:
                    continue
                seen.add(k)
                if any(wordlib.overlaps(k, h) for h in exclude_keys):
                    continue
                ws = normalize(s)
                if 1 <= len(ws) <= 60:
                    out.append(ws)
    return out


MAX_WORD_LETTERS = 30


def extra_words(path):
    """The words of a word list (one per line), normalized as the corpus
    is; an entry that normalizes to more or less than one word (a hyphen,
    a digit) or to a run-together word is left out."""
    out = set()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            ws = normalize(line)
            if len(ws) == 1 and len(ws[0]) <= MAX_WORD_LETTERS and not has_bad(line):
                out.add(ws[0])
    return out


def has_bad(s):
    return wordlib.has_digits(s) or any(ord(c) > 127 for c in s)


# ---------------------------------------------------------------- Kneser-Ney

def kneser_ney(sentences, order, vocab):
    """Interpolated modified Kneser-Ney. Returns (prob, raw, discounts), per
    order n (1..order): dicts n-gram tuple -> P(w | h) (interpolated) and
    n-gram -> raw count, and the discounts (0, D1, D2, D3+). Words not in
    `vocab` count as <unk>."""
    raw = [None] + [collections.Counter() for _ in range(order)]
    for ws in sentences:
        seq = ["<s>"] + [w if w in vocab else "<unk>" for w in ws] + ["</s>"]
        for n in range(1, order + 1):
            for i in range(len(seq) - n + 1):
                g = tuple(seq[i:i + n])
                if n == 1 and g == ("<s>",):
                    continue
                raw[n][g] += 1
    # Adjusted counts: the highest order and n-grams starting at <s> keep
    # their counts; the others count distinct left extensions.
    adj = [None] * (order + 1)
    adj[order] = dict(raw[order])
    for n in range(order - 1, 0, -1):
        ext = collections.Counter(g[1:] for g in raw[n + 1])
        adj[n] = {g: (c if g[0] == "<s>" else ext[g]) for g, c in raw[n].items()}
        for g in ext:          # e.g. a unigram only ever seen after <s>
            adj[n].setdefault(g, ext[g])
    # Every vocabulary word is a unigram (count 0 if unseen).
    for w in vocab:
        adj[1].setdefault((w,), 0)
    adj[1].setdefault(("<unk>",), 0)
    adj[1].setdefault(("</s>",), 0)
    prob, gamma = [None] * (order + 1), [None] * (order + 1)
    discounts = [None] * (order + 1)
    for n in range(1, order + 1):
        cc = collections.Counter(c for c in adj[n].values() if 1 <= c <= 4)
        n1, n2, n3, n4 = (max(cc[i], 1) for i in (1, 2, 3, 4))
        y = n1 / (n1 + 2.0 * n2)
        d = (0.0, 1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3)
        d = tuple(max(0.0, min(x, i)) for i, x in enumerate(d))
        discounts[n] = d
        denom = collections.Counter()
        nk = collections.defaultdict(lambda: [0, 0, 0])
        for g, c in adj[n].items():
            if c == 0:
                continue
            denom[g[:-1]] += c
            nk[g[:-1]][min(c, 3) - 1] += 1
        gamma[n] = {h: (d[1] * k[0] + d[2] * k[1] + d[3] * k[2]) / denom[h]
                    for h, k in nk.items()}
        prob[n] = {}
        for g, c in adj[n].items():
            h = g[:-1]
            disc = max(c - d[min(c, 3)], 0.0) / denom[h] if c else 0.0
            if n == 1:
                lower = 1.0 / len(adj[1])
            else:
                lower = prob[n - 1][g[1:]]
            prob[n][g] = disc + gamma[n].get(h, 1.0) * lower
    return prob, raw, discounts


def write_arpa(path, prob, raw, order, prune_min):
    """Writes the ARPA file; n-grams of the highest order seen fewer than
    `prune_min` times are left out and the backoff weights recomputed
    (lmmix.write_arpa)."""
    kept = [None] + [dict(prob[n]) for n in range(1, order + 1)]
    if order > 1 and prune_min > 1:
        kept[order] = {g: p for g, p in prob[order].items() if raw[order][g] >= prune_min}
    return lmmix.write_arpa(path, kept, order)


GENERAL_LM = "/usr/share/pocketsphinx/model/en-us/en-us.lm.bin"


def mix_general(arpa_path, general_path, weight, threshold, vocab, order):
    """Replaces the fortune LM at `arpa_path` by its mixture with the
    general LM (restricted to `vocab`), pruned; returns the n-gram counts."""
    t0 = time.time()
    _, grams = lmmix.read_sphinx_trie(general_path)
    general = lmmix.BackoffLM.from_grams(grams, lambda w: w in vocab or w in SPECIAL)
    del grams
    fortune = lmmix.BackoffLM.from_arpa(wordlib.Arpa(arpa_path))
    prob = lmmix.mix([fortune, general], [1.0 - weight, weight], vocab, order)
    if threshold > 0:
        prob = lmmix.prune(prob, order, threshold)
    counts = lmmix.write_arpa(arpa_path, prob, order)
    print("mixed with %s (weight %g, %d of its n-grams within the vocabulary), pruned at "
          "%g: n-grams %s (%.0f s)" % (general_path, weight, len(general.prob), threshold,
                                       counts, time.time() - t0))
    return counts


# ---------------------------------------------------------------- lexicon

def isolated_prons(words, voice, chunk=1000):
    """{word: espeak word string} for each word said alone ("word." per
    line, one clause each)."""
    out = {}
    for i in range(0, len(words), chunk):
        part = words[i:i + chunk]
        lines = wordlib.espeak_lines(voice, [w + "." for w in part])
        if len(lines) != len(part):
            lines = [sum(wordlib.espeak_lines(voice, [w + "."]), []) for w in part]
        for w, l in zip(part, lines):
            out[w] = "|".join(l)
    return out


def clauses(sentence):
    """A sentence cut after , ; : . ! ? (espeak-ng's clause ends)."""
    out, cur = [], ""
    for c in sentence:
        cur += c
        if c in ",;:.!?":
            if cur.strip():
                out.append(cur.strip())
            cur = ""
    if cur.strip():
        out.append(cur.strip())
    return out


def context_prons(sentences, voice, chunk=500):
    """[(word, espeak word string)] for every word of `sentences` in a
    clause whose espeak-ng words line up one to one with its normalized
    words (clauses that do not, e.g. "of the" said as one word, are
    skipped)."""
    cl = [c for s in sentences for c in clauses(s) if normalize(c)]
    out, n_aligned = [], 0
    for i in range(0, len(cl), chunk):
        part = cl[i:i + chunk]
        lines = wordlib.espeak_lines(voice, part)
        if len(lines) != len(part):
            lines = [sum(wordlib.espeak_lines(voice, [c]), []) for c in part]
        for c, l in zip(part, lines):
            ws = normalize(c)
            if len(ws) == len(l):
                n_aligned += 1
                out.extend(zip(ws, l))
    return out, n_aligned, len(cl)


def build_lexicon(words, lm_sentences, vocab_tokens, harvest_min, linking_r, jobs=2):
    """{word: set of token tuples} and statistics."""
    stats = {}
    arpa = wordlib.arpabet_vocab(vocab_tokens)

    def one_dialect(dialect):
        iso = isolated_prons(words, dialect)
        ctx, n_al, n_cl = context_prons(lm_sentences, dialect) if harvest_min else ([], 0, 0)
        return dialect, iso, ctx, n_al, n_cl

    with ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(one_dialect, corpus.TRAIN_DIALECTS))
    lex = collections.defaultdict(set)
    ctx_lex = collections.defaultdict(set)
    bad = collections.Counter()
    wordset = set(words)
    for dialect, iso, ctx, n_al, n_cl in results:
        stats[dialect] = {"clauses": n_cl, "aligned": n_al}
        def model(toks):
            return wordlib.model_tokens(toks, dialect, arpa)
        for w in words:
            toks = model(wordlib.word_tokens(iso[w], dialect))
            if toks and all(t in vocab_tokens for t in toks):
                lex[w].add(toks)
            else:
                bad[w] += 1
        seen = collections.Counter()
        for w, ew in ctx:
            if w in wordset:
                seen[(w, tuple(wordlib.word_tokens(ew, dialect)))] += 1
        linked = collections.Counter()
        for (w, toks), c in seen.items():
            m = model(toks)
            if c >= harvest_min and m and all(t in vocab_tokens for t in m):
                ctx_lex[w].add(m)
            if toks[-1:] == ("r-",) and len(toks) > 1 and model(toks[:-1]) in lex.get(w, ()):
                linked[toks[-2]] += c
        if linking_r:
            # Linking r: where this dialect says a word's final vowel with
            # r- before a vowel (`A@ r-` for "are"), every word spelled with
            # a final r or re that ends in that vowel may be said so; the
            # harvest sees only some of them.
            finals = {v for v, c in linked.items() if c >= linking_r}
            stats[dialect]["linking_r"] = sorted(finals)
            for w in words:
                if not w.endswith(("r", "re")):
                    continue
                iso_toks = tuple(wordlib.word_tokens(iso[w], dialect))
                if iso_toks and iso_toks[-1] in finals and model(iso_toks) in lex.get(w, ()):
                    ctx_lex[w].add(model(iso_toks + ("r-",)))
    for w, ps in ctx_lex.items():
        lex[w] |= ps
    if arpa:
        # CMUdict's pronunciations too: flite and festival read with CMU's
        # lexicon, and it holds the US forms espeak-ng's rules miss.
        cmu = wordlib.cmudict()
        added = 0
        for w in words:
            for p in cmu.get(w, ()):
                if p and all(t in vocab_tokens for t in p) and p not in lex[w]:
                    lex[w].add(p)
                    added += 1
        stats["cmudict_added"] = added
    stats["isolated_bad"] = sum(1 for w in words if w not in lex)
    return lex, stats


def dev_lexicon_match(lex, dev_sentences):
    """How often the lexicon holds a word's in-context pronunciation, over
    the dev sentences said in each training dialect: (matched word tokens,
    aligned word tokens of the lexicon's words; OOV words are not counted)."""
    hit = tot = 0
    arpa = wordlib.arpabet_vocab({t for ps in lex.values() for p in ps for t in p})
    for dialect in corpus.TRAIN_DIALECTS:
        ctx, _, _ = context_prons(dev_sentences, dialect)
        for w, ew in ctx:
            if w not in lex:
                continue
            tot += 1
            hit += wordlib.model_tokens(wordlib.word_tokens(ew, dialect), dialect,
                                        arpa) in lex.get(w, ())
    return hit, tot


# ---------------------------------------------------------------- main

def write_g2p_map(path, vocab_tokens):
    """The map lib/g2p.c pronounces custom words with: per training
    dialect, each espeak-ng mnemonic's model tokens, by the same functions
    that make the training labels and the lexicon (wordlib.model_tokens),
    and the rule that drops an r the vowel before it already says.
    Returns the number of dialects."""
    arpa = wordlib.arpabet_vocab(vocab_tokens)
    raw = set(arpabet.espeak_mnemonics())
    for classes in phonemes_merges().values():
        raw |= set(classes) | set(classes.values())
    with open(path, "w", encoding="utf-8") as f:
        f.write("# aural g2p map: espeak-ng mnemonics -> model tokens, per dialect\n"
                "# (lib/g2p.c reads it; tools/words/build_resources.py writes it)\n")
        f.write("drop %s\n" % phonemes.DROP_CHARS)
        for dialect in corpus.TRAIN_DIALECTS:
            f.write("dialect %s\n" % dialect)
            if arpa:
                table, after = arpabet.g2p_map(dialect, raw)
            else:
                table = {}
                for t in sorted(raw):
                    toks = list(wordlib.model_tokens(wordlib.word_tokens(t, dialect),
                                                     dialect, False))
                    if all(x in vocab_tokens for x in toks):
                        table[t] = toks
                after = {}
            for t in sorted(table):
                f.write("map %s%s\n" % (t, "".join(" " + x for x in table[t])))
                if t in after:
                    f.write("after %s %s\n" % (t, " ".join(after[t])))
    return len(corpus.TRAIN_DIALECTS)


def phonemes_merges():
    with open(phonemes.MERGES_FILE, encoding="utf-8") as f:
        return json.load(f)["classes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--out-dir", default=os.path.join(wordlib.ROOT, "models"))
    ap.add_argument("--name", default="default", help="file stem (default.lexicon.txt.gz, ...)")
    ap.add_argument("--model", default=wordlib.MODEL,
                    help="the model whose tokens the lexicon uses (its vocab only)")
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--prune-min", type=int, default=2,
                    help="keep highest-order n-grams seen at least this often")
    ap.add_argument("--extra-text", action=argparse.BooleanOptionalAction, default=True,
                    help="add the fortune sentences corpus.py leaves out to the LM corpus")
    ap.add_argument("--extra-words", default=corpus.WORDS_FILE,
                    help="a word list (one per line) whose words join the LM's vocabulary "
                    "and the lexicon, as unigrams the corpus never saw (default: wamerican's "
                    "%(default)s; '' for the corpus's words alone)")
    ap.add_argument("--general-lm", default=GENERAL_LM,
                    help="a sphinxbase trie LM to mix in (default: pocketsphinx-en-us's "
                    "%(default)s; '' for the fortune LM alone)")
    ap.add_argument("--general-weight", type=float, default=0.5,
                    help="the general LM's weight in the mixture")
    ap.add_argument("--prune-entropy", type=float, default=0.0,
                    help="drop mixed n-grams whose relative-entropy contribution is "
                    "below this (0: keep all)")
    ap.add_argument("--harvest-min", type=int, default=2,
                    help="keep an in-context pronunciation a dialect uses at least this "
                    "often (0: isolated pronunciations only)")
    ap.add_argument("--linking-r", type=int, default=5,
                    help="add `r-` after the final vowel V of words spelled with a final "
                    "r or re, in a dialect whose harvest shows V r- at least this often (0: off)")
    ap.add_argument("--arpa", action="store_true",
                    help="keep the LM's ARPA text too (NAME.lm.arpa.gz), beside the binary")
    ap.add_argument("--report", action="store_true", help="print perplexity, OOV, lexicon match")
    ap.add_argument("--g2p-only", action="store_true",
                    help="write the g2p map alone (it takes a second; the rest takes minutes)")
    args = ap.parse_args()
    if not 0.0 <= args.general_weight <= 1.0:
        ap.error("--general-weight must be within 0 and 1")
    if args.prune_entropy < 0:
        ap.error("--prune-entropy must not be negative")
    t0 = time.time()
    os.makedirs(args.out_dir, exist_ok=True)
    g2p_path = os.path.join(args.out_dir, args.name + ".g2p.txt")
    n = write_g2p_map(g2p_path, wordlib.model_vocab(args.model)[1:])
    print("g2p map: %d dialects, %s" % (n, g2p_path))
    if args.g2p_only:
        return 0

    lm_train, dev, test = wordlib.split_dev()
    sentences = [normalize(s) for s in lm_train]
    sentences = [ws for ws in sentences if ws]
    if args.extra_text:
        exclude = [wordlib.key(s) for s in dev + test] + \
            [wordlib.key(s) for s in corpus._SENTENCE_END.split(corpus.SAMPLE_TEXT)]
        extra = extra_sentences(exclude)
        print("extra LM sentences: %d" % len(extra))
        sentences += extra
    # A "word" longer than this is words run together (a fortune writes
    # "thegoddessofthenet..."): the sentence is dropped, and the lexicon
    # stays within what the decoder reads (64 bytes a word).
    sentences = [ws for ws in sentences if max(map(len, ws)) <= MAX_WORD_LETTERS]
    words = {w for ws in sentences for w in ws}
    vocab_tokens = set(wordlib.model_vocab(args.model)[1:])
    print("LM corpus: %d sentences, %d words, %d distinct" % (
        len(sentences), sum(map(len, sentences)), len(words)))
    if args.extra_words:
        listed = extra_words(args.extra_words)
        print("word list %s: %d words, %d new" % (args.extra_words, len(listed),
                                                  len(listed - words)))
        words |= listed
    words = sorted(words)

    lex, stats = build_lexicon(words, lm_train, vocab_tokens, args.harvest_min, args.linking_r)
    words = sorted(lex)
    print("lexicon: %d words, %d pronunciations (%d words unpronounceable, dropped) "
          "(%.0f s)" % (len(words), sum(len(p) for p in lex.values()), stats["isolated_bad"],
                        time.time() - t0))
    if "cmudict_added" in stats:
        print("  CMUdict: %d pronunciations added" % stats["cmudict_added"])
    for d, s in stats.items():
        if isinstance(s, dict):
            print("  %s: %d/%d clauses aligned, linking r after %s" % (
                d, s["aligned"], s["clauses"], " ".join(s.get("linking_r", [])) or "-"))
    os.makedirs(args.out_dir, exist_ok=True)
    lex_path = os.path.join(args.out_dir, args.name + ".lexicon.txt")
    with open(lex_path, "w", encoding="utf-8") as f:
        for w in words:
            for p in sorted(lex[w]):
                f.write("%s\t%s\n" % (w, " ".join(p)))

    prob, raw, discounts = kneser_ney(sentences, args.order, set(words))
    arpa_path = os.path.join(args.out_dir, args.name + ".lm.arpa")
    counts = write_arpa(arpa_path, prob, raw, args.order, args.prune_min)
    if args.general_lm:
        counts = mix_general(arpa_path, args.general_lm, args.general_weight,
                             args.prune_entropy, set(words), args.order)
    print("LM: order %d, n-grams %s, discounts %s, %s: %d bytes; %s: %d bytes (%.0f s)" % (
        args.order, counts, ["%.3f/%.3f/%.3f" % d[1:] for d in discounts[1:]],
        arpa_path, os.path.getsize(arpa_path), lex_path, os.path.getsize(lex_path),
        time.time() - t0))
    # The LM ships in binary form; both files gzipped (libaural reads
    # either form).
    order, grams = lmbin.read_arpa(arpa_path)
    bin_path = os.path.join(args.out_dir, args.name + ".lm.bin")
    with open(bin_path, "wb") as f:
        f.write(lmbin.convert(order, grams))
    paths = (lex_path, bin_path, arpa_path) if args.arpa else (lex_path, bin_path)
    for path in paths:
        gz = wordlib.gzip_file(path)
        print("%s: %d bytes" % (gz, os.path.getsize(gz)))
    if args.arpa:
        arpa_path += ".gz"

    if args.report:
        lm = wordlib.Arpa(arpa_path)
        for name, ss in (("dev", dev), ("test", test)):
            total, n, oov, nw = lm.score([normalize(s) for s in ss])
            print("%s: %d sentences, %d words, OOV %.2f%%, perplexity %.1f (%d scored tokens "
                  "incl. </s>)" % (name, len(ss), nw, 100.0 * oov / nw,
                                   wordlib.perplexity(total, n), n))
        hit, tot = dev_lexicon_match(lex, dev)
        print("dev in-context pronunciations (in-vocabulary words, 6 dialects) held by the "
          "lexicon: %d/%d = %.2f%%" % (
            hit, tot, 100.0 * hit / max(tot, 1)))
    if not args.arpa:
        os.remove(arpa_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
