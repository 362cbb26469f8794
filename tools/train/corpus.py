"""Sentences and voices for the default model, and how they are split.

Text comes from two Debian packages: the fortune cookie files of `fortunes`
(and `fortune-mod`), cut into sentences, and the word list of `wamerican`,
from which random word sequences are drawn (they cover rare words and
phoneme sequences that proverbs do not).

Held out for testing:

* sentences: every fortune sentence whose SHA-1 falls in the TEST_PERCENT
  bucket, plus the sentences of the bundled sample recording; no training
  sentence equals, contains or is contained in one of them;
* voices: two espeak-ng dialects (en-us-nyc, en-gb-x-rp) and two voice
  variants (f4, m6) are never used in training; the unseen test voices
  combine them.

Everything here is a pure function of the installed packages, so the split
is the same on every machine with the same Debian release.
"""

import glob
import hashlib
import os
import re

FORTUNE_DIR = "/usr/share/games/fortunes"
WORDS_FILE = "/usr/share/dict/american-english"
SKIP_FORTUNE_FILES = {"ascii-art", "translate-me", "perl"}
TEST_PERCENT = 6

# The sentences of models/sample.flac (see tools/make_sample_recording.sh).
SAMPLE_VOICE = "en-us"
SAMPLE_WPM = 165
SAMPLE_TEXT = ("The quick brown fox jumps over the lazy dog. "
               "A streaming encoder turns every ten milliseconds of sound into a frame.")

TRAIN_DIALECTS = ["en-us", "en-gb", "en-gb-scotland", "en-gb-x-gbclan",
                  "en-gb-x-gbcwmd", "en-029"]
# "" is the dialect's own default voice. klatt* use a different synthesizer.
TRAIN_VARIANTS = ["", "m1", "m2", "m3", "m4", "m5", "m7", "m8",
                  "f1", "f2", "f3", "f5", "klatt", "klatt2", "klatt3", "klatt4",
                  "Andy", "annie", "aunty", "boris", "david", "edward", "grandma",
                  "linda", "max", "paul", "rob", "steph", "travis", "victor", "zac",
                  "whisper"]
UNSEEN_VOICES = ["en-us-nyc+m6", "en-gb-x-rp+f4"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ALLOWED = re.compile(r"^[A-Za-z][A-Za-z ,.;:!?'\-]*$")


def voice_name(dialect, variant):
    """espeak-ng's name of `dialect` spoken by `variant`. espeak-ng 1.51
    ignores a variant after "en-gb" (every "en-gb+VARIANT" is the plain
    en-gb voice); "en", the same British voice, takes one."""
    if variant and dialect == "en-gb":
        dialect = "en"
    return dialect + ("+" + variant if variant else "")


def normalize(sentence):
    """Collapsed whitespace; the key used to compare sentences."""
    return " ".join(sentence.split())


def _key(sentence):
    return re.sub(r"[^a-z ]", "", sentence.lower()).strip()


def fortune_sentences():
    """Every usable sentence of the fortune files, deduplicated, in a fixed order."""
    out = {}
    for path in sorted(glob.glob(os.path.join(FORTUNE_DIR, "*"))):
        name = os.path.basename(path)
        if "." in name or name in SKIP_FORTUNE_FILES or os.path.isdir(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for cookie in text.split("\n%\n"):
            # Attribution lines ("-- Someone") are not prose.
            lines = [l for l in cookie.splitlines() if not l.strip().startswith("--")]
            flat = normalize(" ".join(lines)).replace('"', "")
            for s in _SENTENCE_END.split(flat):
                s = s.strip()
                n_words = len(s.split())
                if 3 <= n_words <= 22 and len(s) <= 140 and _ALLOWED.match(s):
                    out.setdefault(_key(s), s)
    return [out[k] for k in sorted(out)]


def dictionary_words():
    with open(WORDS_FILE, encoding="utf-8") as f:
        return sorted({w.strip() for w in f if re.fullmatch(r"[A-Za-z]{2,}", w.strip())})


def _is_test(sentence):
    h = hashlib.sha1(_key(sentence).encode()).digest()
    return int.from_bytes(h[:4], "little") % 100 < TEST_PERCENT


def split_sentences():
    """(train, test) lists of fortune sentences. Training sentences that
    overlap a test or sample sentence (equal, containing or contained) are
    dropped, so no test sentence is ever heard in training."""
    sentences = fortune_sentences()
    test = [s for s in sentences if _is_test(s)]
    held = [_key(s) for s in test] + [_key(s) for s in _SENTENCE_END.split(SAMPLE_TEXT)]
    held_set = set(held)
    train = []
    for s in sentences:
        if _is_test(s):
            continue
        k = _key(s)
        if k in held_set or any(h in k or (len(k) > 20 and k in h) for h in held):
            continue
        train.append(s)
    return train, test
