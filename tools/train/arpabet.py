"""The default model's phone inventory: the 39 phones of CMU's ARPAbet.

Every engine's own phone sequence is mapped into this one set:

* flite and festival speak CMU's "radio" phone set (ARPAbet with `ax`,
  `pau` and a few allophones), so their labels map almost one to one;
* espeak-ng's mnemonics (after the merges of phonemes.canonical, per
  dialect) map many to one; a few become two phones (`@L` is a syllabic l,
  AH L, as CMUdict writes "little"), and the r-coloured vowels depend on the
  dialect (_DIALECT, below).

Why ARPAbet and not espeak-ng's 81 mnemonics: flite and festival cannot be
mapped up into the finer set (their phones carry no dialect detail), while
every espeak-ng mnemonic has an ARPAbet phone that CMUdict would use; and
CMUdict, flite, festival and the words decoder's lexicon all speak ARPAbet.
Stress is not modelled.
"""

import phonemes

PHONES = ["AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY",
          "F", "G", "HH", "IH", "IY", "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P",
          "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y", "Z", "ZH"]
VOCAB = [phonemes.BLANK] + PHONES

# CMU radio phone set (flite, festival) -> ARPAbet-39. Silence and breath
# marks map to nothing.
RADIO = {p.lower(): [p] for p in PHONES}
RADIO.update({"ax": ["AH"], "axr": ["ER"], "ix": ["IH"], "dx": ["T"], "nx": ["N"],
              "hv": ["HH"], "el": ["AH", "L"], "em": ["AH", "M"], "en": ["AH", "N"],
              "pau": [], "h#": [], "brth": [], "ssil": [], "sil": []})

# espeak-ng mnemonic -> ARPAbet, the same in every dialect.
_ESPEAK = {
    "0": "AA", "?": "T", "@": "AH", "@-": "AH", "@2": "AH", "@L": "AH L", "A:": "AA",
    "A~": "AA", "C": "HH", "D": "DH", "E": "EH", "I": "IH", "I#": "IH", "I2": "IH",
    "IR": "ER", "N": "NG", "O": "AO", "O2": "AO", "O:": "AO", "OI": "OY", "O~": "AO",
    "S": "SH", "T": "TH", "U": "UH", "V": "AH", "VR": "ER", "Z": "ZH", "a": "AE",
    "a#": "AH", "a#:": "AA", "a:": "AA", "aI": "AY", "aI2": "AY", "aU": "AW", "aa": "AE",
    "b": "B", "d": "D", "dZ": "JH", "e": "EY", "eI": "EY", "f": "F", "g": "G", "h": "HH",
    "i": "IY", "i:": "IY", "i::": "IY", "j": "Y", "k": "K", "l": "L", "l#": "L", "m": "M",
    "n": "N", "n-": "AH N", "o": "OW", "oU": "OW", "p": "P", "r": "R", "s": "S", "t": "T",
    "t#": "T", "t2": "T", "tS": "CH", "t[": "T", "u:": "UW", "v": "V", "w": "W", "w#": "W",
    "x": "K", "z": "Z", "3:": "ER", "@5": "AH", "nI": "N IH",
}
# The r-coloured vowels. en-us implies the r ("car" is `k A@`: AA R); the
# British and Caribbean dialects and espeak-ng's en-us-nyc do not say it
# ("car" is [kA:]: AA), except as a linking r, which espeak-ng writes `r-`
# and speaks only before a vowel ("car is" [kA:r Iz]); en-gb-scotland writes
# its r as a phoneme of its own (`h i@3 r`, [hIr]).
_RHOTIC = {"A@": "AA R", "o@": "AO R", "O@": "AO R", "e@": "EH R", "i@": "IY AH",
           "i@3": "IH R", "U@": "UH R", "aI@": "AY ER", "aI3": "AY ER", "3": "ER",
           "r-": "R", "aU@": "AW ER"}
_NON_RHOTIC = {"A@": "AA", "o@": "AO", "O@": "AO", "e@": "EH", "i@": "IH AH",
               "i@3": "IH AH", "U@": "UH AH", "aI@": "AY AH", "aI3": "AY AH", "3": "AH",
               "r-": "R", "aU@": "AW AH"}
_DIALECT = {
    "en-us": _RHOTIC,
    "en-gb-scotland": dict(_NON_RHOTIC, **{"i@3": "IH"}),
    # RP's "bath" vowel is [A:]; elsewhere `aa` is [a] (or merged into `a`).
    "en-gb-x-rp": dict(_NON_RHOTIC, aa="AA"),
}


def from_radio(phones):
    """flite / festival segment names -> ARPAbet-39 list. KeyError names an
    unknown phone."""
    out = []
    for p in phones:
        if p not in RADIO:
            raise KeyError("unknown radio phone %r" % p)
        out += RADIO[p]
    return out


# An r said by the vowel before it is not said again: these mnemonics
# (after the merges) say nothing right after these phones.
R_MNEMONICS = ("r", "r-")
R_ENDS = ("ER", "R")


def from_espeak(tokens, voice):
    """espeak-ng tokens of an utterance in `voice` -> ARPAbet-39 list."""
    special = _DIALECT.get(phonemes.dialect_of(voice), _NON_RHOTIC)
    out = []
    for t in phonemes.canonical(tokens, voice):
        m = special.get(t, _ESPEAK.get(t))
        if m is None:
            raise KeyError("no ARPAbet phone for espeak-ng mnemonic %r (%s)" % (t, voice))
        # One r sound where the vowel already ends in it: en-us "hour"
        # (aU 3 r-), "hurry" (h 3: r i), "four apples" (f o@ r ...).
        if t in R_MNEMONICS and out and out[-1] in R_ENDS:
            continue
        out += m.split()
    return out


def espeak_mnemonics():
    """Every mnemonic the maps know (for the old model's vocabulary)."""
    return set(_ESPEAK) | set(_RHOTIC)


def espeak_token_map(voice):
    """mnemonic -> ARPAbet list for one voice (before canonical merges)."""
    return {t: from_espeak([t], voice) for t in espeak_mnemonics()}


def g2p_map(voice, raw_mnemonics):
    """The rules of from_espeak for one voice, per raw mnemonic (before the
    merges), for the C g2p map (lib/g2p.c): ({mnemonic: ARPAbet list},
    {mnemonic: phones after which it says nothing}). Mnemonics without an
    ARPAbet phone are left out."""
    table, after = {}, {}
    for t in sorted(raw_mnemonics):
        try:
            table[t] = from_espeak([t], voice)
        except KeyError:
            continue
        if phonemes.canonical([t], voice)[0] in R_MNEMONICS:
            after[t] = list(R_ENDS)
    return table, after
