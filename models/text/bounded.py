"""Tokenising only the part of a long text that decides the tokens we keep.

Truncating a 2 MB text to 256 tokens should cost 256 tokens of work, not 2 MB of it; so should
refusing it, or finding that its windows are over a compute budget. :class:`Ends` tokenises a
prefix (or, for left truncation, a suffix) of each text just long enough to hold the tokens
that must be exact, grown geometrically when it is not, and falls back to the whole text when
no safe place to cut exists. Everything goes through ``encode_batch_fast``, which releases the
GIL (a single ``Tokenizer.encode`` holds it for the whole text and stalls the event loop).

Why a prefix gives the whole text's tokens
------------------------------------------
Write ``T(s)`` for the tokens of ``s`` without special tokens. The tokenizers library builds
``T(s)`` in three steps: a normalizer rewrites ``s``; a pre-tokenizer splits it into pieces;
the model (WordPiece, BPE, Unigram, WordLevel) tokenizes every piece on its own. Special tokens
are added after that, and truncation cuts ``T(s)`` before they are.

A *boundary* of ``s`` is an index ``x`` with ``s[x] == " "`` and ``s[x-1]`` a letter or digit.

Lemma. For the pipelines :func:`bounded_reason` accepts, and a boundary ``x`` of ``s``,
``T(s) = T(s[:x]) + T(s[x:])``.

Proof, component by component: no normalizer we accept rewrites across ``x``: ``BertNormalizer``,
``Lowercase``, ``StripAccents`` and the NF* forms act per character or per combining sequence,
and a space combines with nothing before it; ``Precompiled`` (SentencePiece's charsmap) replaces
character sequences that contain no space; ``Replace`` is accepted only for runs of spaces,
which start at ``x`` since ``s[x-1]`` is not one. No pre-tokenizer we accept makes a piece that
holds both ``s[x-1]`` and ``s[x]``: ``BertPreTokenizer``/``Whitespace``/``WhitespaceSplit``
split at whitespace; ``ByteLevel``'s regex (``'s|'t|… | ?\\p{L}+| ?\\p{N}+|
?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``) has no alternative that runs from a letter or digit
into a space, and its matching decides each piece from the text at and after the piece (no
lookbehind; the only lookahead sits inside whitespace runs, which end before ``x-1``);
``Metaspace`` turns the space at ``x`` into ``▁`` and splits before it. On the right, ``s[x:]``
starts with a space, so ``Metaspace``'s prepended ``▁`` and ``ByteLevel``'s
``add_prefix_space`` add nothing that ``s`` did not have there. Added tokens are matched on the
raw text: accepted only when their content holds no whitespace and they do not strip
whitespace on their right, so no match spans ``x`` and none eats characters across it. So the
pieces of ``s`` are those of ``s[:x]`` followed by those of ``s[x:]``, and the model maps each
piece alone. ∎

Exactness. Keeping the first ``k`` tokens: if ``|T(s[:x])| ≥ k`` then ``T(s)[:k] =
T(s[:x])[:k]``; keeping the last ``k``: if ``|T(s[x:])| ≥ k`` then ``T(s)[-k:] =
T(s[x:])[-k:]``. We ask for more than that: the part must hold ``k`` tokens *besides* an upper
bound on the tokens of the word at its cut end (its UTF-8 bytes plus 2: WordPiece makes at most
one token per character, byte-level BPE one per byte plus a leading space, Unigram one per
character plus ``▁``). Under the lemma this margin is not needed; it keeps the kept tokens right
even if a component treats the end of a string specially in a way the lemma missed, since only
the pieces of that last (or first) word could then differ. Token counts of a part are lower
bounds of the whole text's, which is what a refusal needs.

Pairs (``longest_first``): with ``m`` the tokens both texts may keep together, the library
keeps ``(k1, k2) = f(n1, n2, m)`` of their lengths, and ``f`` does not change with ``n2``
while ``n2 ≥ max(n1, m + 1)`` (it cuts the longer text down to the shorter's length, then both
evenly); symmetrically for ``n1 > max(n2, m)``; when both are over ``m`` the split is the same
whichever is longer only for an even ``m``. :meth:`PairTokenizer.pairs
<models.text.pairs.PairTokenizer.pairs>` asks for parts that meet those conditions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# A space after a letter or digit: where a text may be cut (see the module docstring).
_BOUNDARY = re.compile(r"(?<=[^\W_]) ")

_NORMALIZERS = {"BertNormalizer", "Lowercase", "StripAccents", "NFC", "NFD", "NFKC", "NFKD"}
_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits"}
_MODELS = {"WordPiece", "BPE", "Unigram", "WordLevel"}
WHOLE = 1 << 62  # "every token": a need no part of a text can meet


class OverTokenBudget(ValueError):
    """Counting stopped: the texts hold more than the token cap a caller passed (``tokens``: a
    lower bound of what they hold)."""

    def __init__(self, tokens: int, cap: int) -> None:
        super().__init__(f"at least {tokens} tokens, over the cap of {cap}")
        self.tokens = tokens
        self.cap = cap


def _normalizer_reason(spec: dict[str, Any] | None) -> str | None:
    if spec is None:
        return None
    kind = spec.get("type")
    if kind == "Sequence":
        return next(filter(None, map(_normalizer_reason, spec.get("normalizers", []))), None)
    if kind in _NORMALIZERS or kind == "Precompiled":
        return None
    if kind == "Replace" and set((spec.get("pattern") or {}).get("Regex", "x")) <= set(
        " {},0123456789"
    ):
        return None  # XLM-R's "runs of spaces to one": acts on spaces only
    return f"normalizer {kind}"


def _pre_tokenizer_reason(spec: dict[str, Any] | None) -> str | None:
    if spec is None:
        return "no pre-tokenizer (the whole text is one piece)"
    kind = spec.get("type")
    if kind == "Sequence":
        return next(filter(None, map(_pre_tokenizer_reason, spec.get("pretokenizers", []))), None)
    if kind in _PRE_TOKENIZERS:
        return None
    if kind == "ByteLevel" and spec.get("use_regex", True):
        return None
    if kind == "Metaspace" and spec.get("split", True):
        return None
    return f"pre-tokenizer {kind}"


def bounded_reason(tokenizer_json: str) -> str | None:
    """Why a tokenizer's texts cannot be cut at boundaries without changing their tokens, or
    None when they can (the components the lemma in the module docstring covers)."""
    spec = json.loads(tokenizer_json)
    model = spec.get("model") or {}
    if model.get("type") not in _MODELS or model.get("dropout"):
        return f"model {model.get('type')}"
    for token in spec.get("added_tokens") or []:
        content = token.get("content", "")
        if token.get("rstrip") or any(c.isspace() for c in content):
            return f"added token {content!r}"
    return _normalizer_reason(spec.get("normalizer")) or _pre_tokenizer_reason(
        spec.get("pre_tokenizer")
    )


def _cut(text: str, at: int, side: str) -> int | None:
    """A boundary ``x`` leaving a part of ``at`` to ``2·at`` characters (a prefix ``text[:x]``
    for ``side`` "head", a suffix ``text[x:]`` for "tail"), or None when that window has none."""
    n = len(text)
    if side == "head":
        found = _BOUNDARY.search(text, at, min(n, 2 * at))
    else:
        found = _BOUNDARY.search(text, max(1, n - 2 * at), n - at + 1)
    return None if found is None else found.start()


def margin(part: str, side: str) -> int:
    """Upper bound on the tokens of the word at a part's cut end (its last word for a prefix,
    its leading spaces and first word for a suffix): UTF-8 bytes plus 2."""
    if side == "head":
        word = part[part.rfind(" ") + 1 :]
    else:
        stripped = part.lstrip(" ")
        end = stripped.find(" ")
        word = part[: len(part) - len(stripped) + (len(stripped) if end < 0 else end)]
    return len(word.encode("utf-8", "surrogatepass")) + 2


@dataclass(frozen=True)
class Part:
    """What was tokenised of one text.

    Attributes:
        text: the part (the whole text when ``whole``).
        ids: its token ids, special tokens included.
        special: which of ``ids`` are special tokens.
        whole: the part is the whole text.
        exact: tokens of the text's own (no special tokens) proven equal to the whole text's,
            counted from the cut side (all of them when ``whole``).
    """

    text: str
    ids: list[int]
    special: list[int]
    whole: bool
    exact: int


class Ends:
    """Prefixes or suffixes of texts, tokenised just far enough (see the module docstring).

    Args:
        encode_batch: the tokenizer's batch call (``encode_batch_fast``), special tokens added.
        specials: special tokens one text gets (before, after).
        enabled: cutting is safe for this tokenizer (:func:`bounded_reason`); otherwise every
            text is tokenised whole.
    """

    def __init__(
        self,
        encode_batch: Callable[[list[str]], list[Any]],
        specials: tuple[int, int],
        enabled: bool,
    ) -> None:
        self._encode = encode_batch
        self._specials = sum(specials)
        self.enabled = enabled

    def __call__(
        self,
        texts: Sequence[str],
        needs: Sequence[int],
        side: str = "head",
        cap: int | None = None,
        over: int | None = None,
    ) -> list[Part]:
        """One :class:`Part` per text holding at least ``needs[i]`` exact tokens of its own (or
        the whole text; :data:`WHOLE` asks for that).

        Args:
            side: "head" keeps a prefix (the first tokens), "tail" a suffix (the last).
            cap: stop once the exact tokens counted over all texts pass ``cap`` while one text
                is over ``over`` tokens of its own (it will be cut into windows).

        Raises:
            OverTokenBudget: ``cap`` was passed (the lower bound counted so far).
        """
        parts: list[Part | None] = [None] * len(texts)
        # A token is rarely shorter than a character on average, and 4 characters is about one
        # token of English: the first round usually suffices, and each miss doubles the part.
        targets = [4 * min(need, cap if cap is not None else need) + 64 for need in needs]
        pending = list(range(len(texts)))
        while pending:
            pieces = []
            for i in pending:
                text, x = texts[i], None
                if self.enabled:
                    # A cut part over half the text would save less than a second round costs.
                    while x is None and 2 * targets[i] < len(text):
                        x = _cut(text, targets[i], side)
                        if x is None:
                            targets[i] *= 2
                pieces.append(text if x is None else text[:x] if side == "head" else text[x:])
            encodings = self._encode(pieces)
            still = []
            for i, piece, enc in zip(pending, pieces, encodings, strict=True):
                whole = len(piece) == len(texts[i])
                own = len(enc.ids) - self._specials
                exact = own if whole else max(0, own - margin(piece, side))
                parts[i] = Part(piece, list(enc.ids), list(enc.special_tokens_mask), whole, exact)
                if not whole and exact < needs[i]:
                    targets[i] *= 2
                    still.append(i)
            pending = still
            if cap is not None and over is not None:
                done = [p for p in parts if p is not None]
                counted = sum(p.exact for p in done)
                if counted > cap and any(p.exact > over for p in done):
                    raise OverTokenBudget(counted, cap)
        return [p for p in parts if p is not None]
