"""Phoneme tokens of espeak-ng's transcription, shared by every training script.

espeak-ng writes its phoneme mnemonics with `-x --sep='|'`: phonemes of a
word are separated by '|', words by spaces or newlines, for example
"D|@2 k|w|'I|k b|r|'aU|n". The tokenizer keeps every phoneme name as one
token and drops what is not a sound of its own:

* stress and syllable marks written before a phoneme: ' , % =
* the ';' modifier (palatalization),
* pause tokens ("_", "_:", "_!", ...).

There is no word-boundary token: the model recognizes phonemes only. The
vocabulary is index 0 = BLANK, then the phoneme inventory sorted by name.

espeak-ng's mnemonics name dictionary phonemes, and a dialect may speak two
of them the same way (en-gb says `3` exactly as `@`; several dialects say
`I2` as `I`). No listener can tell such a pair apart, so the labels merge
it: `canonical()` replaces each mnemonic by the name of its class in the
utterance's dialect, from MERGES_FILE, which `phoneme_identity.py` writes
by synthesizing each mnemonic in place of the others of its kind (vowel
or consonant) and comparing the samples.
"""

import json
import os
import subprocess

MERGES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "phoneme_merges.json")
_MERGES = None

BLANK = "<blank>"
DROP_CHARS = "',%=;"


def tokenize(phoneme_text):
    """espeak-ng `-x --sep='|'` output -> list of phoneme token strings.

    A linking r that espeak-ng runs into the next word's vowel comes without
    a separator ("Humor in": `m|3|r-I|n`, en-us-nyc): it is split off, as
    `r-` is the only mnemonic that starts so."""
    tokens = []
    for word in phoneme_text.split():
        for piece in word.split("|"):
            tok = "".join(c for c in piece if c not in DROP_CHARS)
            if tok.startswith("r-") and len(tok) > 2:
                tokens += ["r-", tok[2:]]
            elif tok and not tok.startswith("_"):
                tokens.append(tok)
    return tokens


def espeak_phonemes(voice, text):
    """Tokens of `text` as espeak-ng's `voice` pronounces it (no audio made)."""
    out = subprocess.run(["espeak-ng", "-q", "-x", "--sep=|", "-v", voice, text],
                         check=True, capture_output=True, text=True).stdout
    return tokenize(out)


def dialect_of(voice):
    """The espeak-ng dialect of a voice name ("en+m3" -> "en-gb")."""
    d = voice.split("+")[0]
    return "en-gb" if d == "en" else d


def canonical(tokens, voice):
    """`tokens` of an utterance in `voice` with every mnemonic replaced by
    the name of its class of identically spoken mnemonics in that dialect."""
    global _MERGES
    if _MERGES is None:
        with open(MERGES_FILE, encoding="utf-8") as f:
            _MERGES = json.load(f)["classes"]
    table = _MERGES.get(dialect_of(voice))
    if table is None:
        raise KeyError("no phoneme classes for dialect %r in %s" % (dialect_of(voice), MERGES_FILE))
    return [table.get(t, t) for t in tokens]


def make_vocab(token_lists):
    """BLANK followed by every token seen, sorted by name."""
    seen = set()
    for toks in token_lists:
        seen.update(toks)
    return [BLANK] + sorted(seen)


def edit_distance(ref, hyp):
    """Levenshtein distance between two token sequences."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]
