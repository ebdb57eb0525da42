"""Where a tokenizer's texts may be cut without changing their tokens: one rule per pipeline.

:func:`cut_rule` reads a ``tokenizer.json`` once and compiles the places its pipeline splits a
text into pieces that no normalizer, pre-tokenizer or model decision crosses (the proof, per
family, is the lemma in :mod:`models.text.bounded`); :meth:`CutRule.find` finds one in a window
of a text with a few regex searches over that window only. Character classes are built from
:mod:`unicodedata`, restricted to characters whose category (and normal form) Unicode 3.2
already gave them, so the Rust tables of whatever Unicode version the tokenizers library
carries agree with ours on every character a cut depends on.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Literal, cast

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


@dataclass(frozen=True)
class CutRule:
    """Where texts of one tokenizer may be cut (see :mod:`models.text.bounded`).

    Attributes:
        name: the family, for messages and tests.
        both: a zero-width pattern matching at every cut ``x`` with ``T(s) = T(s[:x]) +
            T(s[x:])``.
        long_word: WordPiece's ``max_input_chars_per_word`` when a cut inside a longer word
            is exact on the side that keeps more than that many of its characters (the
            piece is one ``[UNK]`` either way); None otherwise.
        word, silent: class bodies of that long-word rule (counted, and passed over).
        inner: byte-level BPE: a zero-width pattern matching inside runs of letters or of
            numbers, a cut where no merge joins the last byte of the character before to the
            first byte of the one after (``junctions`` holds the joined byte pairs).
        form: the normal form those characters are read in (None: as they are).
        piece: Unigram under Metaspace, head side only: a zero-width pattern matching between
            two characters the normalizer keeps as they are, at a grapheme cluster and
            normalization boundary; a cut where no vocabulary piece holds the two characters
            in a row (``bigrams`` holds every pair that a piece does).
        unknown: runs of the characters no vocabulary piece holds (closed under the
            normalizer), when a run of them is one fused ``<unk>``: a part whose other side is
            such a run holds every token; None when not.
    """

    name: str
    both: re.Pattern[str]
    long_word: int | None = None
    word: str = ""
    silent: str = ""
    inner: re.Pattern[str] | None = None
    junctions: frozenset[int] = frozenset()
    form: Form | None = None
    piece: re.Pattern[str] | None = None
    bigrams: frozenset[str] = frozenset()
    unknown: re.Pattern[str] | None = None

    def find(self, text: str, lo: int, hi: int, side: str) -> tuple[int, bool] | None:
        """A cut ``x`` with ``lo <= x <= hi`` (0 < x < len(text)) and whether the part it
        leaves holds every token of the text, or None. For ``side`` "head" the tokens of the
        prefix ``text[:x]`` start the text's, for "tail" those of ``text[x:]`` end them."""
        n = len(text)
        lo, hi = max(1, lo), min(hi, n - 1)
        if lo > hi:
            return None
        # Lookarounds see two characters past hi (a pattern may look at s[x] and s[x+1]).
        found = self.both.search(text, lo, min(n, hi + 2))
        if found is not None and found.start() <= hi:
            return found.start(), False
        if self.piece is not None:
            return self._in_piece(text, lo, hi, side)
        if self.inner is not None:
            # At most 64 candidates a window: a vocabulary that merges across most of them
            # leaves the text to a longer window, or whole.
            for found in _take(self.inner.finditer(text, lo, min(n, hi + 2)), 64):
                x = found.start()
                if x > hi:
                    break
                if self._junction(text[x - 1], text[x]) not in self.junctions:
                    return x, False
            return None
        return self._in_long_word(text, lo, hi, side) if self.long_word else None

    def _in_piece(self, text: str, lo: int, hi: int, side: str) -> tuple[int, bool] | None:
        """A Unigram cut inside a Metaspace piece (head side; at most 64 candidates a window),
        or for either side any place in a text that is one run of unknown characters."""
        if self.unknown is not None and self.unknown.fullmatch(text) is not None:
            return lo, True  # one fused <unk> (after the "▁"), whatever part is kept
        if side != "head":
            return None  # the suffix would start with Metaspace's "▁": not proven
        assert self.piece is not None
        for found in _take(self.piece.finditer(text, lo, min(len(text), hi + 2)), 64):
            x = found.start()
            if x > hi:
                break
            if text[x - 1 : x + 1] not in self.bigrams:
                rest = self.unknown is not None and self.unknown.fullmatch(text, x - 1)
                return x, bool(rest)
        return None

    def _junction(self, left: str, right: str) -> int:
        """The last UTF-8 byte of ``left`` and the first of ``right``, normalized, as one int."""
        if self.form is not None:
            left, right = (
                unicodedata.normalize(self.form, left),
                unicodedata.normalize(self.form, right),
            )
        return left.encode()[-1] << 8 | right.encode()[0]

    def _in_long_word(self, text: str, lo: int, hi: int, side: str) -> tuple[int, bool] | None:
        """A cut inside a word with more than ``long_word`` counted characters on the kept
        side. Runs are found from their start (the lookbehind), so a window costs one pass, and
        at most 64 are looked at. The part holds every token when the word runs to the other
        end of the text (one regex pass, in C, over the rest)."""
        m = self.long_word or 0
        chars = f"[{self.word}{self.silent}]"
        runs = re.compile(f"(?<!{chars}){chars}+")
        units = re.compile(f"(?:[{self.silent}]*[{self.word}]){{{m + 1}}}")
        start, stop = max(0, lo - 4 * (m + 1)), min(len(text), hi + 4 * (m + 1))
        rest = re.compile(f"{chars}*")
        # A run may start before `start`: seen from `start` on, it holds no more.
        first = re.compile(f"{chars}+").match(text, start, stop)
        candidates = ([first] if first else []) + _take(runs.finditer(text, start, stop), 64)
        if side == "head":
            for run in candidates:
                counted = units.match(text, run.start(), run.end())
                if counted is not None:
                    x = max(counted.end(), lo)
                    if x <= min(hi, run.end()):
                        return x, rest.fullmatch(text, x) is not None
            return None
        for run in candidates:
            x = max(run.start(), lo)
            if x <= hi and units.match(text, x, run.end()) is not None:
                return x, rest.fullmatch(text, 0, x) is not None
        return None


def _take(iterator: Any, count: int) -> list[Any]:
    out = []
    for item in iterator:
        out.append(item)
        if len(out) == count:
            break
    return out


def _normalizers(spec: dict[str, Any] | None) -> list[dict[str, Any]]:
    if spec is None:
        return []
    if spec.get("type") == "Sequence":
        return [n for s in spec.get("normalizers", []) for n in _normalizers(s)]
    return [spec]


def _whitespace_cuts(tokenizer: Any, first_space: bool) -> str:
    """The White_Space characters the tokenizer's own normalizer keeps as white space (starting
    with U+0020 when ``first_space``: Metaspace and ByteLevel's add_prefix_space look for that
    one): asked of the normalizer itself, one character at a time."""
    spaces = [chr(c) for c in (9, 10, 11, 12, 13, 32, 0x85, 0xA0, 0x1680, 0x2028, 0x2029)]
    spaces += [chr(c) for c in (*range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000)]
    kept = []
    for c in spaces:
        n = c if tokenizer.normalizer is None else tokenizer.normalizer.normalize_str(c)
        if n and all(_WS.match(x) for x in n) and (n[0] == " " or not first_space):
            kept.append(ord(c))
    return _class(sorted(kept))


def _never() -> re.Pattern[str]:
    return re.compile(r"(?!)")


def cut_rule(tokenizer_json: str) -> CutRule:
    """The cut rule of a tokenizer that :func:`models.text.bounded.bounded_reason` accepts."""
    from tokenizers import Tokenizer

    spec = json.loads(tokenizer_json)
    tokenizer = Tokenizer.from_str(tokenizer_json)
    norms = _normalizers(spec.get("normalizer"))
    kinds = [str(n.get("type")) for n in norms]
    pre = spec.get("pre_tokenizer") or {}
    kind = pre.get("type")
    model = spec.get("model") or {}
    added = [t.get("content", "") for t in spec.get("added_tokens") or []]
    added_chars = {x for t in added for c in t for x in (c, c.lower(), c.upper())}
    plain_added = not any(t.get("single_word") for t in spec.get("added_tokens") or [])
    splitters = {"BertPreTokenizer", "ByteLevel", "Metaspace", "Whitespace", "WhitespaceSplit"}
    parts = pre.get("pretokenizers", []) if kind == "Sequence" else [pre]
    if not any(p.get("type") in splitters for p in parts):
        # Punctuation or Digits alone keep white space inside pieces.
        return CutRule("none (no pre-tokenizer splits at white space)", _never())
    if kind == "BertPreTokenizer" and kinds in ([], ["BertNormalizer"]):
        return _bert_rule(tokenizer, norms, model, added, added_chars, plain_added)
    if kind == "ByteLevel" and not set(kinds) - {"NFC", "NFD", "NFKC", "NFKD", "Lowercase"}:
        return _byte_level_rule(tokenizer, pre, kinds, model, added_chars, plain_added)
    # Metaspace (it splits at U+0020 only, after the normalizer), and any other pipeline: a
    # white space the normalizer turns into U+0020, after a character no normalizer we accept
    # removes or ends in white space (a letter or digit under Precompiled, whose table may map
    # anything), between two grapheme clusters (Precompiled rewrites whole clusters).
    cuts = _whitespace_cuts(tokenizer, kind not in ("Whitespace", "WhitespaceSplit"))
    left = "[^\\W_]" if "Precompiled" in kinds else f"[{_solid()}]"
    # (CR LF is one cluster: it may normalize unlike a lone CR.)
    pattern = f"(?<={left})(?<![{_PREPEND}])(?=[{cuts}](?![{_EXTEND}]))(?!\\r\\n)"
    name = "white space after a letter, digit, punctuation or symbol"
    both = re.compile(pattern)
    if kind != "Metaspace" or model.get("type") != "Unigram" or not _piece_normalizers(norms):
        return CutRule(name, both)
    return _unigram_rule(name, both, tokenizer, kinds, pre, model, added_chars)


def _piece_normalizers(norms: list[dict[str, Any]]) -> bool:
    """Normalizers acting per character, per normalization segment, per grapheme cluster or
    on runs of spaces only (XLM-R's ``Replace`` of `` {2,}``): what a cut inside a piece
    between two characters each kept as it is may rely on."""
    for n in norms:
        kind = n.get("type")
        if kind == "Replace":
            pattern = (n.get("pattern") or {}).get("Regex") or (n.get("pattern") or {}).get(
                "String", "x"
            )
            if re.sub(r"\{\d*,?\d*\}|[+*]", "", pattern).strip(" ") or " " not in pattern:
                return False  # (a run of anything but spaces could span the cut)
        elif kind not in ("NFC", "NFD", "NFKC", "NFKD", "Precompiled", "Lowercase"):
            return False
    return True


_JAMO = "\u1100-\u11ff\ua960-\ua97f\ud7b0-\ud7ff"


def _unigram_rule(
    name: str,
    both: re.Pattern[str],
    tokenizer: Any,
    kinds: list[str],
    pre: dict[str, Any],
    model: dict[str, Any],
    added_chars: set[str],
) -> CutRule:
    """Metaspace + Unigram: besides ``both``, a head-side cut inside a piece between two
    characters that no vocabulary piece holds in a row (the lemma's Unigram case)."""
    vocab = [str(v[0]) for v in model.get("vocab") or []]
    scores = [float(v[1]) for v in model.get("vocab") or []]
    pieces = set(vocab)
    fallback = bool(model.get("byte_fallback"))
    # A fused run of unknown characters is looked up whole: with byte fallback every byte must
    # have its token (else the run is one <unk> or bytes depending on its length), and a run
    # must never be a piece: k >= 2 unknown characters score k x (min - 10), below any piece
    # (>= min) when min < 10, so a piece holding them would have won the Viterbi path.
    if (fallback and any(f"<0x{b:02X}>" not in pieces for b in range(256))) or (
        not scores or min(scores) >= 10
    ):
        return CutRule(name, both)
    precompiled = "Precompiled" in kinds
    normalize = tokenizer.normalizer.normalize_str if tokenizer.normalizer else (lambda c: c)
    replacement = str(pre.get("replacement", "\u2581"))
    held = {c for p in vocab for c in p}
    joins = re.compile(f"[{_JAMO}{_PREPEND}{_EXTEND}\u200d]")
    seconds = _composition_seconds()
    forms = [cast(Form, k) for k in kinds if k in ("NFC", "NFD", "NFKC", "NFKD")]
    cut: list[int] = []
    after: list[int] = []
    marks: list[int] = []
    for code in range(0x21, 0x10000):
        c = chr(code)
        if 0xD800 <= code < 0xE000:
            continue
        cat = unicodedata.category(c)
        if cat[0] == "M" or unicodedata.combining(c) or joins.match(c) or not _stable(c):
            after.append(code)  # may join the character before it (cluster, segment)
            if cat[0] != "M" or joins.match(c) or not _stable(c) or code in seconds:
                continue
        elif any(_composes_back(c, f) for f in ("NFC", "NFKC")):
            after.append(code)
            continue
        if cat[0] not in "LNPSM" or _WS.match(c) or c == replacement or c in added_chars:
            continue
        if normalize(c) != c or any(
            unicodedata.normalize(f, c) != c or unicodedata.ucd_3_2_0.normalize(f, c) != c
            for f in forms
        ):
            continue
        (marks if cat[0] == "M" else cut).append(code)
    # White space the normalizer keeps as it is (a newline, a tab: Metaspace splits at U+0020
    # only) may end the prefix; it never starts the suffix, where an added token's lstrip
    # could take it (no cut after a CR: CR LF is one cluster).
    kept = [c for c in (9, 10, 11, 12, 0x85, 0x2028, 0x2029) if normalize(chr(c)) == chr(c)]
    body = _class(cut)
    pattern = (
        f"(?<=[{_class(sorted(cut + kept))}])(?<![{_PREPEND}\\r].)(?=[{body}](?![{_class(after)}]))"
    )
    bigrams = frozenset(p[i : i + 2] for p in vocab for i in range(len(p) - 1))
    # Unknown characters, fused into one <unk> (no byte fallback): under Precompiled only
    # those of the cut class (one grapheme cluster each); otherwise marks too (no composition
    # second among them, so a run of them only reorders under any normal form).
    unknown = [c for c in (cut if precompiled else sorted(cut + marks)) if chr(c) not in held]
    name += "; inside a piece between two characters no vocabulary piece holds in a row (head)"
    return CutRule(
        name,
        both,
        piece=re.compile(pattern),
        bigrams=bigrams,
        unknown=None if fallback or not unknown else re.compile(f"[{_class(unknown)}]*"),
    )


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


def _bert_rule(
    tokenizer: Any,
    norms: list[dict[str, Any]],
    model: dict[str, Any],
    added: list[str],
    added_chars: set[str],
    plain_added: bool,
) -> CutRule:
    """BertNormalizer and BertPreTokenizer: white space, punctuation, CJK ideographs, and for
    WordPiece inside words longer than ``max_input_chars_per_word``."""
    ws = WHITE_SPACE
    alternatives = [f"(?<![{ws}])(?=[{_whitespace_cuts(tokenizer, False)}])"]
    classes = _bert_classes()
    if plain_added:
        # No cut beside a character of an added token (its match cannot span the cut).
        punct = _class([c for c in classes["punct"] if chr(c) not in added_chars])
        alternatives.append(f"(?<=[{punct}])|(?<![{ws}])(?=[{punct}])")
        chinese = bool(norms) and norms[0].get("handle_chinese_chars", True)
        if chinese and not any(_CJK.match(c) for c in added_chars):
            alternatives.append(f"(?<=[{CJK}])|(?<![{ws}])(?=[{CJK}])")
    long_word = None
    if model.get("type") == "WordPiece":
        m = int(model.get("max_input_chars_per_word", 100))
        in_word = set(classes["word"]) | set(classes["silent"])
        # An added token inside a long word would split it: each must start and end with a
        # character no long word holds, and be too short to sit inside the counted run.
        if all(
            t and len(t) <= m and ord(t[0]) not in in_word and ord(t[-1]) not in in_word
            for t in added
        ):
            long_word = m
    return CutRule(
        "WordPiece/BertPreTokenizer",
        re.compile("|".join(alternatives)),
        long_word,
        _class(list(classes["word"])) if long_word else "",
        _class(list(classes["silent"])) if long_word else "",
    )


def _byte_level_rule(
    tokenizer: Any,
    pre: dict[str, Any],
    kinds: list[str],
    model: dict[str, Any],
    added_chars: set[str],
    plain_added: bool,
) -> CutRule:
    """ByteLevel: white space the normalizer keeps as such, and where the regex's class changes
    (letters, numbers, other) outside a contraction, at a normalization boundary."""
    ws = WHITE_SPACE
    first_space = bool(pre.get("add_prefix_space"))
    cuts = _whitespace_cuts(tokenizer, first_space)
    spaces = f"(?<![{ws}])(?=[{cuts}])"
    alternatives = []
    # (Lowercasing can change a character's class at its ends: "İ" lowercases to "i" and a
    # combining dot. Only one normal form, or none, is tabled.)
    inner = []
    form = cast(Form, kinds[0]) if kinds else None
    if len(kinds) <= 1 and "Lowercase" not in kinds and plain_added and not first_space:
        c = _byte_level_classes(form)
        for left, right in (("L", "NO"), ("N", "LO"), ("O", "LN")):
            right_class = "".join(c[f"{k}_first"] for k in right)
            alternatives.append(f"(?<=[{c[left + '_last']}])(?=[{right_class}])")
        inner = [f"(?<=[{c[f'{k}_last']}])(?=[{c[f'{k}_first']}])" for k in "LN"]
    if not alternatives:
        return CutRule("ByteLevel", re.compile(spaces))
    if added_chars:
        # No cut beside a character of an added token (its match cannot span the cut).
        bad = _class(sorted(ord(c) for c in added_chars))
        alternatives = [f"(?<![{bad}])(?![{bad}])(?:{a})" for a in alternatives]
        inner = [f"(?<![{bad}])(?![{bad}])(?:{a})" for a in inner]
    both = re.compile("|".join([spaces, *alternatives]))
    junctions = _merge_junctions(model)
    if junctions is None:
        return CutRule("ByteLevel", both)
    return CutRule(
        "ByteLevel", both, inner=re.compile("|".join(inner)), junctions=junctions, form=form
    )


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's map from byte-level characters back to bytes (``bytes_to_unicode``): printable
    Latin-1 bytes stand for themselves, the others for U+0100 onwards."""
    shown = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    rest = [b for b in range(256) if b not in shown]
    return {chr(b): b for b in shown} | {chr(0x100 + i): b for i, b in enumerate(rest)}


def _merge_junctions(model: dict[str, Any]) -> frozenset[int] | None:
    """The byte pairs a merge of a byte-level BPE joins (the last byte of its left part, the
    first of its right part), or None when a cut inside a piece is not covered: not BPE, or
    one whose result depends on the word's ends (a subword prefix or end-of-word suffix) or
    that looks whole words up first (``ignore_merges``)."""
    if model.get("type") != "BPE" or model.get("dropout") or model.get("ignore_merges"):
        return None
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    byte = _byte_of_char()
    out = set()
    for merge in model.get("merges") or []:
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        if not left or not right or left[-1] not in byte or right[0] not in byte:
            return None  # not a byte-level vocabulary
        out.add(byte[left[-1]] << 8 | byte[right[0]])
    return frozenset(out)
