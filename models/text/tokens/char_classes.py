"""Character classes behind the cut rules (:mod:`models.text.tokens.cuts`): which characters each
tokenizer family splits at, keeps whole, composes or removes, as regex class bodies.

Built from :mod:`unicodedata`, restricted to characters whose category (and normal form) Unicode
3.2 already gave them, so the Rust tables of whatever Unicode version the tokenizers library
carries agree with ours on every character a cut depends on; ``tests/unit/test_cut_rules.py``
checks each class against the library's own normalizers and pre-tokenizers.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Literal

Form = Literal["NFC", "NFD", "NFKC", "NFKD"]

# Unicode's White_Space property: Rust's char::is_whitespace, and oniguruma's \s in the
# ByteLevel regex (checked against the pre-tokenizer in the tests). Python's str.isspace also
# takes U+001C..U+001F, which neither splits at.
WHITE_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_WS = re.compile(f"[{WHITE_SPACE}]")
# BertNormalizer's is_chinese_char (normalizers/bert.rs): padded with spaces when
# handle_chinese_chars is on (the ranges checked against the normalizer in the tests).
CJK = (
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df\U0002a700-\U0002b81f"
    "\U0002b920-\U0002ceaf\U0002f800-\U0002fa1f"
)
_CJK = re.compile(f"[{CJK}]")
# Grapheme_Cluster_Break=Prepend letters and the characters that extend the cluster before
# them (UAX #29 GB9, GB9a, GB9b): SentencePiece's Precompiled normalizer rewrites whole
# grapheme clusters, so a cut must fall between two clusters.
_PREPEND = (
    "\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2\u0d4e\U000110bd\U000110cd\U000111c2\U000111c3"
)
_EXTEND = (
    "\u0300-\u036f\u200c\u200d\u0e33\u0eb3\uff9e\uff9f\U0001f3fb-\U0001f3ff\U000e0020-\U000e007f"
)
_HANGUL_VT = range(0x1161, 0x11C3)  # vowel and trailing jamo: NFC composes them with the one before


def _class(codes: list[int]) -> str:
    """A regex character class body for the code points ``codes`` (sorted), as ranges."""
    out, i = [], 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        lo, hi = re.escape(chr(codes[i])), re.escape(chr(codes[j]))
        out.append(lo if i == j else f"{lo}-{hi}")
        i = j + 1
    return "".join(out) or r"\x00-\x00"  # an empty class would not compile; NUL never cuts


def _stable(c: str) -> bool:
    """Same category in Unicode 3.2 as now: assigned, and classed alike by any table since."""
    cat = unicodedata.category(c)
    return cat != "Cn" and unicodedata.ucd_3_2_0.category(c) == cat


def _kind(c: str) -> str:
    """The ByteLevel regex's class of one character: L (``\\p{L}``), N, S (``\\s``), O."""
    if _WS.match(c):
        return "S"
    cat = unicodedata.category(c)[0]
    return cat if cat in "LN" else "O"


@functools.cache
def _composition_seconds() -> frozenset[int]:
    """Characters that NFC or NFKC may compose with the character before them: the second of
    every two-character canonical decomposition (planes 0 and 1 hold them all), and Hangul
    vowel and trailing jamo (composed by rule, not by table)."""
    seconds = set(_HANGUL_VT)
    for code in range(0x20000):
        parts = unicodedata.decomposition(chr(code)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            seconds.add(int(parts[1], 16))
    return frozenset(seconds)


def _composes_back(c: str, form: str | None) -> bool:
    """``c`` may reorder or compose with the character before it under ``form``: combining
    class other than 0, or the second of a composition (also after a compatibility
    decomposition: U+FF9E is U+3099 under NFKC)."""
    if form is None:
        return False
    first = unicodedata.normalize("NFKD" if "K" in form else "NFD", c)[:1] or c
    return unicodedata.combining(first) != 0 or (
        "C" in form and ord(first) in _composition_seconds()
    )


@functools.cache
def _byte_level_classes(form: Form | None) -> dict[str, str]:
    """Class bodies over the BMP for ByteLevel cuts under normal form ``form`` (None: none):
    ``{k}_last`` holds the characters whose normalized form ends in class ``k`` and that start
    a normalization segment; ``{k}_first`` those whose normalized form starts in class ``k``."""
    sets: dict[str, list[int]] = {f"{k}_{e}": [] for k in "LNO" for e in ("first", "last")}
    for code in range(0x20, 0x10000):
        c = chr(code)
        if 0xD800 <= code < 0xE000 or _WS.match(c) or not _stable(c):
            continue
        n = c if form is None else unicodedata.normalize(form, c)
        if form is not None and unicodedata.ucd_3_2_0.normalize(form, c) != n:
            continue
        if not n or _composes_back(c, form) or _WS.search(n):
            continue
        # An apostrophe ends no left side: "'s", "'t", ... are matched across it.
        if not n.endswith("'"):
            sets[f"{_kind(n[-1])}_last"].append(code)
        sets[f"{_kind(n[0])}_first"].append(code)
    return {k: _class(v) for k, v in sets.items()}


@functools.cache
def _bert_classes() -> dict[str, tuple[int, ...]]:
    """Code points of the BMP for BertPreTokenizer: ``punct`` (each one a piece), ``word``
    (kept in a piece as one or more normalized characters, not all marks, whatever lowercasing
    and accent stripping do) and ``silent`` (kept in a piece, or removed: never a split)."""
    punct: list[int] = []
    word: list[int] = []
    silent: list[int] = []
    for code in range(0x00, 0x10000):
        c = chr(code)
        if 0xD800 <= code < 0xE000 or _WS.match(c):
            continue
        cat = unicodedata.category(c)
        if cat in ("Mn", "Cf", "Cc") or code == 0xFFFD:
            silent.append(code)  # stripped (Mn) or removed by clean_text
        elif not _stable(c) or _CJK.match(c):
            continue
        elif (code < 0x80 and not c.isalnum()) or cat[0] == "P":
            punct.append(code)  # Rust's is_ascii_punctuation() || is_punctuation()
        elif cat[0] in "LNMS":
            n = unicodedata.normalize("NFD", c.lower())
            if any(unicodedata.category(x) != "Mn" for x in n) and all(
                unicodedata.category(x)[0] in "LNMS"
                and not _CJK.match(x)
                and not (ord(x) < 0x80 and not x.isalnum())
                for x in n
            ):
                word.append(code)
    return {"punct": tuple(punct), "word": tuple(word), "silent": tuple(silent)}


_JAMO = "\u1100-\u11ff\ua960-\ua97f\ud7b0-\ud7ff"


@functools.cache
def _solid() -> str:
    """Letters, digits, punctuation and symbols of the BMP that no normal form, lowercasing,
    accent stripping or clean_text removes or ends in white space (U+00A8 does not qualify:
    NFKC makes it a space and a mark, and stripping the mark leaves the space)."""
    return _class([code for code in range(0x21, 0x10000) if _is_solid(chr(code))])


def _is_solid(c: str) -> bool:
    if c == "\ufffd" or 0xD800 <= ord(c) < 0xE000 or not _stable(c):
        return False  # (U+FFFD: clean_text removes it)
    if unicodedata.category(c)[0] not in "LNPS":
        return False
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        n = unicodedata.normalize(form, c.lower())
        kept = "".join(x for x in n if unicodedata.category(x) != "Mn")
        if not kept or _WS.match(kept[-1]) or _WS.match(n[-1]):
            return False
    return True


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's map from byte-level characters back to bytes (``bytes_to_unicode``): printable
    Latin-1 bytes stand for themselves, the others for U+0100 onwards."""
    shown = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    rest = [b for b in range(256) if b not in shown]
    return {chr(b): b for b in shown} | {chr(0x100 + i): b for i, b in enumerate(rest)}
