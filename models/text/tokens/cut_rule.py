"""One tokenizer's cut rule: the compiled patterns that say where its texts may be cut without
changing their tokens, and the search for a cut in a window of a text. Built per tokenizer
family by :func:`models.text.tokens.cuts.cut_rule`; used by :mod:`models.text.tokens.bounded`."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from models.text.tokens.char_classes import Form


@dataclass(frozen=True)
class CutRule:
    """Where texts of one tokenizer may be cut (see :mod:`models.text.tokens.bounded`).

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
