"""A proven lower bound on a text's token count, found without tokenising it.

Refusing a ``long_text: "windows"`` request over its compute budget should not cost counting
its tokens: :func:`token_floor` reads a ``tokenizer.json`` once and returns a
:class:`TokenFloor` whose call counts, with a few regex scans in C, something every
tokenisation of the text must hold at least as many tokens as. Write ``T(s)`` for the tokens of
``s`` without special tokens (the notation of :mod:`models.text.tokens.bounded`), and ``WS`` for
Unicode's White_Space (:data:`~models.text.tokens.char_classes.WHITE_SPACE`).

Counted characters. ``K`` holds the letters and digits of the BMP (``str.isalnum``) that
Unicode 3.2 already classed alike (so the library's tables, whatever their version, do not
call them unassigned and let ``clean_text`` drop them); that keep a letter or digit, and no
white space, under every normal form of themselves lowercased, under accent stripping, and
under the tokenizer's own normalizer (asked one character at a time); that start a
normalization segment and a grapheme cluster (combining class 0, no second of a canonical
composition, no Hangul jamo, no Grapheme_Extend, SpacingMark or Prepend letter). So a
character of ``K`` leaves at least one character of its own in the normalized text, a letter
or digit that is no white space, whatever stands beside it. *Separators* ``S`` are the
white-space characters the normalizer turns into white space only (asked one at a time;
``BertNormalizer`` removes U+000B, U+000C, U+0085), for Metaspace those holding U+0020.

Bounds, per family (the floor is the largest that applies):

- **Runs** (every family below): each maximal run of characters outside ``S`` that holds a
  character of ``K`` yields a token of its own. Pre-tokenizers split at ``S`` (BertPreTokenizer
  and ByteLevel's regex at any white space: a ByteLevel piece is white space, or an optional
  U+0020 then one class run or a contraction; Metaspace before every U+0020), so no piece,
  hence no token, holds characters of two runs; an added token holds no white space (else no
  floor) so matches inside one run, whatever it strips beside it. The ``K`` character of a
  run survives into a non-empty piece, and the model maps a non-empty piece to at least one
  token (WordPiece: ``[UNK]`` at worst; byte-level BPE: its vocabulary holds all 256 bytes,
  else no floor; Unigram: a node covers every position, ``<unk>`` at worst).
- **WordPiece** with ``BertNormalizer`` and ``BertPreTokenizer``: the runs are split further
  at BERT punctuation (ASCII punctuation or category P, staying one such character through the
  normalizer) and at CJK ideographs of ``is_chinese_char`` (padded with spaces when
  ``handle_chinese_chars``): each is a piece alone (``Isolated`` split, normalizers/bert.rs,
  pre_tokenizers/bert.rs), so a token; characters of added tokens are neither (no added token
  match then crosses a split we count).
- **Byte-level BPE**: every byte of the normalized text is covered by exactly one token, a
  vocabulary token or an added token, each covering at most ``L`` bytes outside white space
  (``L``: the longest vocabulary token in bytes, or added token's content; an added token's
  ``lstrip``/``rstrip`` swallows white space only). Without a normalizer the text's non-white
  bytes are its normalized ones: ``T(s) ≥ ⌈non-white bytes / L⌉``. Under NFC/NFKC/Lowercase
  each character of ``K`` leaves a character of its own (at least one byte): ``T(s) ≥ ⌈|K in
  s| / L⌉``.
- **Unigram** (``Metaspace``): every normalized position whose character is a piece of one
  character in the vocabulary is covered by a vocabulary token (``<unk>`` nodes go only where
  no single-character piece matches, models/unigram/model.rs ``populate_nodes``, and only those
  are fused), of at most ``M`` characters (the longest piece or added token). Counting the
  characters of ``K`` whose normalized first character is such a piece and that no following
  character composes with or extends: ``T(s) ≥ ⌈count / M⌉``.

Anything else (other pipelines, ``Precompiled``'s runs, ...) gets no bound of that kind, or no
floor at all (:func:`token_floor` returns None). The property tests compare the floor with
the library's count on texts of every script.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from models.text.tokens.bounded import bounded_reason
from models.text.tokens.char_classes import CJK, WHITE_SPACE, _byte_of_char, _class

_WS = re.compile(f"[{WHITE_SPACE}]")
_WS_LIST = [chr(c) for c in (9, 10, 11, 12, 13, 32, 0x85, 0xA0, 0x1680, 0x2028, 0x2029)] + [
    chr(c) for c in (*range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000)
]
# Letters that join the character before them into one grapheme cluster (Grapheme_Extend or
# SpacingMark: Thai and Lao SARA AM, halfwidth voiced marks) or the one after (Prepend), and
# Hangul jamo (L, V, T form clusters and compose): never counted, never "following" safely.
_JOINING = "\u0d4e\u0e33\u0eb3\uff9e\uff9f\u1100-\u11ff\ua960-\ua97f\ud7b0-\ud7ff"
_JOINING_RE = re.compile(f"[{_JOINING}]")
_CHUNK = 1 << 16  # characters read at a time (a bound past the cap stops the reading)


def _stable(c: str) -> bool:
    cat = unicodedata.category(c)
    return cat != "Cn" and unicodedata.ucd_3_2_0.category(c) == cat


@functools.cache
def _composition_seconds() -> frozenset[int]:
    """The second character of every two-character canonical decomposition."""
    out = set()
    for code in range(0x20000):
        parts = unicodedata.decomposition(chr(code)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            out.add(int(parts[1], 16))
    return frozenset(out)


def _joins_back(c: str) -> bool:
    """``c`` may compose with, reorder with or extend the cluster of the character before."""
    first = unicodedata.normalize("NFKD", c)[:1] or c
    return (
        unicodedata.category(c)[0] == "M"
        or unicodedata.combining(first) != 0
        or ord(first) in _composition_seconds()
        or c in "\u200c\u200d"
        or _JOINING_RE.match(c) is not None
    )


def _keeps_alnum(n: str) -> bool:
    return any(x.isalnum() for x in n) and not _WS.search(n)


@functools.cache
def _unicode_alnum() -> tuple[int, ...]:
    """Letters and digits of the BMP that keep one under every normal form and accent
    stripping, whatever their neighbours (see ``K`` in the module docstring)."""
    out = []
    for code in range(0x30, 0x10000):
        c = chr(code)
        if not c.isalnum() or 0xD800 <= code < 0xE000 or not _stable(c) or _joins_back(c):
            continue
        ok = True
        for form in ("NFC", "NFD", "NFKC", "NFKD"):
            for x in (c, c.lower()):
                n = unicodedata.normalize(form, x)
                if unicodedata.ucd_3_2_0.normalize(form, x) != n:
                    ok = False
                bare = "".join(y for y in n if unicodedata.category(y) != "Mn")
                ok = ok and _keeps_alnum(n) and _keeps_alnum(bare)
        if ok:
            out.append(code)
    return tuple(out)


def _normalize(tokenizer: Any, c: str) -> str:
    return c if tokenizer.normalizer is None else str(tokenizer.normalizer.normalize_str(c))


@dataclass(frozen=True)
class TokenFloor:
    """A lower bound on ``|T(s)|`` for one tokenizer (see the module docstring).

    Attributes:
        name: the family, for messages and tests.
        units: each match is a unit holding at least one token of its own.
        counted: matches covered by tokens of at most ``per_token`` of them each (None: no
            such bound); with ``in_bytes``, the non-white-space UTF-8 bytes are counted instead.
    """

    name: str
    units: re.Pattern[str] | None
    counted: re.Pattern[str] | None = None
    per_token: int = 1
    in_bytes: bool = False

    def __call__(self, text: str, enough: int | None = None) -> int:
        """At most the number of tokens (special tokens excluded) ``text`` tokenises to.

        Args:
            enough: stop reading once the bound passes this (the bound so far is returned):
                the text is read in chunks, a run split by a chunk's end counted once.
        """
        units = counted = 0
        best = 0
        for start in range(0, len(text), _CHUNK):
            chunk = text[start : start + _CHUNK]
            split = 1 if start else 0  # a unit (or a lookahead) across the chunks' boundary
            if self.units is not None:
                units += self.units.subn("", chunk)[1] - split
            if self.in_bytes:
                counted += len(_WS.sub("", chunk).encode("utf-8", "surrogatepass"))
            elif self.counted is not None:
                counted += self.counted.subn("", chunk)[1] - split
            best = max(units, -(-counted // self.per_token), 0)
            if enough is not None and best > enough:
                break
        return best


def _kinds(spec: dict[str, Any] | None) -> list[dict[str, Any]]:
    if spec is None:
        return []
    if spec.get("type") == "Sequence":
        inner = spec.get("normalizers", spec.get("pretokenizers", []))
        return [n for s in inner for n in _kinds(s)]
    return [spec]


def token_floor(tokenizer_json: str) -> TokenFloor | None:
    """The floor of a tokenizer's texts, or None when no bound is proven for its pipeline."""
    return _floor(tokenizer_json)


@functools.lru_cache(maxsize=16)
def _floor(tokenizer_json: str) -> TokenFloor | None:
    from tokenizers import Tokenizer

    if bounded_reason(tokenizer_json) is not None:
        return None
    spec = json.loads(tokenizer_json)
    added = [str(t.get("content", "")) for t in spec.get("added_tokens") or []]
    if any(not t or _WS.search(t) for t in added):
        return None
    tokenizer = Tokenizer.from_str(tokenizer_json)
    norms = [str(n.get("type")) for n in _kinds(spec.get("normalizer"))]
    pres = [str(p.get("type")) for p in _kinds(spec.get("pre_tokenizer"))]
    model = spec.get("model") or {}
    alnum = [c for c in _unicode_alnum() if _keeps_alnum(_normalize(tokenizer, chr(c)))]
    added_chars = {ord(x) for t in added for c in t for x in (c, c.lower(), c.upper())}

    def separators(need_space: bool) -> str:
        kept = []
        for c in _WS_LIST:
            n = _normalize(tokenizer, c)
            if n and all(_WS.match(x) for x in n) and (" " in n or not need_space):
                kept.append(ord(c))
        return _class(sorted(kept))

    if pres == ["BertPreTokenizer"] and norms in ([], ["BertNormalizer"]):
        if model.get("type") not in ("WordPiece", "WordLevel"):
            return None
        chinese = bool(norms) and (spec["normalizer"].get("handle_chinese_chars", True))
        singles = [
            code
            for code in range(0x21, 0x10000)
            if code not in added_chars and _bert_punct(tokenizer, chr(code))
        ]
        cjk_added = any(re.match(f"[{CJK}]", chr(c)) for c in added_chars)
        single = _class(singles) + (CJK if chinese and not cjk_added else "")
        sep = separators(False) + single
        units = re.compile(f"[{single}]|[{_class(alnum)}][^{sep}]*")
        return TokenFloor("WordPiece", units)
    if pres == ["ByteLevel"] and set(norms) <= {"NFC", "NFD", "NFKC", "NFKD", "Lowercase"}:
        vocab = tokenizer.get_vocab(with_added_tokens=False)
        shown = set(_byte_of_char())  # the 256 byte-level characters
        if model.get("type") != "BPE" or not shown <= set(vocab):
            return None
        longest = max(
            [len(t) if set(t) <= shown else len(t.encode()) for t in vocab]
            + [len(t.encode()) for t in added]
        )
        units = re.compile(f"[{_class(alnum)}][^{separators(False)}]*")
        if not norms:
            return TokenFloor("ByteLevel", units, per_token=longest, in_bytes=True)
        return TokenFloor("ByteLevel", units, re.compile(f"[{_class(alnum)}]"), longest)
    if pres == ["Metaspace"] and model.get("type") == "Unigram":
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        longest = max(len(t) for t in vocab)
        ones = {t for t in vocab if len(t) == 1}
        follow = _class([c for c in range(0x10000) if not _joins_back(chr(c))])
        pieces = [c for c in alnum if _normalize(tokenizer, chr(c))[:1] in ones]
        counted = re.compile(f"[{_class(pieces)}](?=[{follow}]|$)")
        runs = None
        if "Precompiled" not in norms:  # (it rewrites whole grapheme clusters)
            runs = re.compile(f"[{_class(alnum)}][^{separators(True)}]*")
        return TokenFloor("Unigram", runs, counted, longest)
    return None


def _bert_punct(tokenizer: Any, c: str) -> bool:
    """``c`` stays one BERT punctuation character through the normalizer (Rust's
    ``is_ascii_punctuation() || is_punctuation()``, categories stable since Unicode 3.2)."""
    if not _stable(c) or not (c < "\x80" or unicodedata.category(c)[0] == "P"):
        return False
    n = _normalize(tokenizer, c)
    if len(n) != 1 or not _stable(n):
        return False
    return (n < "\x80" and n.isprintable() and not n.isalnum() and n != " ") or (
        unicodedata.category(n)[0] == "P"
    )
