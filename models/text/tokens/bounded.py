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

A *cut* of ``s`` is an index ``0 < x < len(s)`` that the tokenizer's :class:`CutRule
<models.text.tokens.cut_rule.CutRule>` matches (built once per tokenizer by
:func:`~models.text.tokens.cuts.cut_rule` from its ``tokenizer.json``). Write ``WS`` for Unicode's
White_Space (Rust's ``char::is_whitespace``, oniguruma's ``\\s``); every cut has ``s[x-1]``
outside ``WS``. The rule per family:

- **WordPiece** (``BertNormalizer`` + ``BertPreTokenizer``): (a) ``s[x]`` in ``WS`` and kept as
  white space by the normalizer (``clean_text`` removes U+000B, U+000C, U+0085: no cut there);
  (b) ``s[x-1]`` or ``s[x]`` a punctuation character (ASCII punctuation or category P), none
  that an added token holds; (c) ``s[x-1]`` or ``s[x]`` a CJK ideograph of ``is_chinese_char``,
  when ``handle_chinese_chars`` is on; (d) head side only: the ``max_input_chars_per_word + 1``
  counted characters before ``x`` lie in one word (letters, digits, marks, symbols; marks and
  removed controls pass uncounted); tail side: as many after ``x``.
- **byte-level BPE** (``ByteLevel``, no normalizer or one NF form): (a) ``s[x]`` in ``WS`` (only
  those that normalize to U+0020 under ``add_prefix_space``); (b) the regex's class (``\\p{L}``,
  ``\\p{N}``, other) of the normalized ``s[x-1]``'s last character differs from that of the
  normalized ``s[x]``'s first, ``s[x-1]`` does not end in an apostrophe, and under NFC/NFKC
  neither composes with what precedes it (no mark, Hangul vowel or trailing jamo); (c) both in
  the same class, letters or numbers (as in (b) otherwise), and no merge of the vocabulary
  joins a part ending in the last UTF-8 byte of ``s[x-1]`` to one starting with the first
  byte of ``s[x]`` (a BPE without ``ignore_merges``, subword prefix or end-of-word suffix);
  no added token holds ``s[x-1]`` or ``s[x]`` for (b) and (c).
- **Metaspace** (Unigram, XLM-R) and any other pipeline: ``s[x]`` a white space the normalizer
  turns into U+0020 (NFKC does so for U+00A0, U+2000..U+200A, U+202F, U+205F, U+3000; a newline
  or tab stays inside the piece), ``s[x-1]`` a letter, digit, punctuation or symbol (a letter or
  digit under ``Precompiled``), ``s[x-1]`` no Prepend and ``s[x+1]`` no grapheme extender.
- **Unigram under Metaspace**, head side only, also (e) inside a piece: ``s[x-1]`` and ``s[x]``
  each kept as it is by the normalizer (alone and under its NF form), ``s[x]`` a letter,
  digit, punctuation or symbol of combining class 0 that composes with nothing before it, no
  Hangul jamo, Prepend, grapheme extender or added-token character, ``s[x-1]`` one too or a
  white space the normalizer keeps (newline, tab), ``s[x-2]`` no Prepend or CR, ``s[x+1]`` no
  mark, jamo or extender; and no vocabulary piece holds ``s[x-1]s[x]`` in a row (normalizers
  limited to NF forms, ``Precompiled``, ``Lowercase`` and ``Replace`` on spaces; with byte
  fallback all 256 byte tokens present; the lowest score under 10).

Character classes come from :mod:`unicodedata`, kept to the characters Unicode 3.2 already
classed alike, so the library's tables agree with them whatever Unicode version it carries.

Lemma. For a cut ``x`` of ``s`` of kinds (a)-(c), ``T(s) = T(s[:x]) + T(s[x:])``; for a head
cut (d), ``T(s[:x])`` is a prefix of ``T(s)``, for a tail cut (d) ``T(s[x:])`` a suffix.

Proof, step by step. *Added tokens* are matched first, on the raw (or normalized) text: a match
spanning ``x`` would hold ``s[x-1]`` and ``s[x]``; kinds (b), (c) and byte-level (b) exclude
characters added tokens hold, kind (a) puts white space at ``x``, which no accepted added token
holds (and none strips white space on its right; one stripping on its left stops at
``s[x-1]``), and (d) needs every added token to start and end with a character no long word
holds and to be shorter than the counted run. So the sections the library normalizes apart
are those of ``s[:x]`` and ``s[x:]``, the one around ``x`` split in two; ``single_word`` tokens
(which look at the character beside a match) allow white-space cuts only.
*Normalizers* act per character (``Lowercase``, ``BertNormalizer``'s cleaning, CJK padding and
lowercasing), per canonical segment (NF forms, accent stripping: a segment starts at a
character of combining class 0 that composes with nothing before it, which every cut
character is, or which kind (b) of WordPiece puts after a punctuation or padded CJK
character), per run of spaces (``Replace``, whose runs start at ``x``), or per grapheme cluster
(``Precompiled``: ``x`` is a cluster boundary); so the normalized ``s`` is the normalized
``s[:x]`` followed by the normalized ``s[x:]``. *Pre-tokenizers*: ``BertPreTokenizer`` splits at
white space and isolates punctuation, and CJK ideographs now stand between spaces: a piece
boundary sits at ``x`` for (a)-(c). ``ByteLevel``'s regex (``'s|'t|'re|'ve|'m|'ll|'d|
?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``) decides each match from the
text at and after its start (no lookbehind); every match starting before ``x`` ends by ``x``,
since each class run stops where the class changes, an optional leading space is never
``s[x-1]``, a contraction spanning ``x`` would need ``s[x-1]`` an apostrophe or ``s[x]`` a
letter after one, and the lookahead sits inside white-space runs that end before ``x-1``; so
a match starts at ``x`` in ``s`` as in ``s[x:]``. ``Metaspace`` turns the U+0020 at ``x`` into
``▁`` and splits before it. At the string ends: ``s[x:]`` starts with U+0020 where Metaspace's
prepended ``▁`` or ByteLevel's ``add_prefix_space`` look (both add a space only to a section
not starting with one), and nothing in these pipelines looks at the end of a string
otherwise. So the pieces of ``s`` are those of ``s[:x]`` followed by those of ``s[x:]``, and
*the model* maps each piece alone. For byte-level (c), the regex ends a match at ``x`` in
``s[:x]`` and starts one there in ``s[x:]`` (a run of one class, not an apostrophe's), where
``s`` has one piece across ``x``: BPE (``Word::merge_all`` in models/bpe/word.rs) merges the
pair of lowest rank, then lowest position, and a merge only reads and rewrites its two symbols
and their neighbours' pairs; no pair across ``x`` is ever a merge (its bytes at ``x`` are the
two no merge joins), so the merges left of ``x`` and right of it run as they would alone, in
the same relative order, and the piece's tokens are those of its two halves. For (e), the
normalized ``s[:x]`` ends in ``s[x-1]`` and the normalized ``s`` continues it with ``s[x]``
(``x`` is a normalization and grapheme cluster boundary, both characters clusters of their
own), no added token holds either, and Metaspace splits neither: the prefix's pieces are
``s``'s up to the one holding ``x``, cut there. Unigram (``encode_optimized`` in
models/unigram/model.rs) walks the piece's positions in order; an edge from position ``i`` is
a vocabulary piece the text continues with at ``i`` (in the trie's order) or, when no
one-character piece starts there, an ``<unk>`` of one character, and it updates the best
path ending where it ends when strictly better. No piece holds ``s[x-1]s[x]``, so no edge
crosses ``x``: the updates to every node up to ``x`` read only ``s[:x]``, in the same order,
with the same floating-point sums, in the piece and in its prefix; and the backtrack from the
piece's end reaches node ``x`` (no edge jumps it) and follows the same pointers from there.
So the prefix's segments are the first segments of the piece. ``fuse_unk`` (always on when
loaded) joins neighbouring ``<unk>`` segments, and ``tokenize`` looks each string up (with
byte fallback, its bytes): a run crosses ``x`` only when neither ``s[x-1]`` nor ``s[x]`` has
a one-character piece; then the prefix ends with the run's part before ``x``, no piece (it
would score at least the lowest score, above its ``<unk>`` characters at 10 below it each,
and the path would have taken it), so it is ``<unk>`` as the whole run is (with byte fallback:
the first of the run's bytes). The prefix's ids are thus the first of the piece's, every one
exact. If every character from ``x-1`` on is in no vocabulary piece (unchanged by the
normalizer, no composition second: a run of them only reorders), the rest is part of that one
``<unk>`` (no byte fallback) and the prefix holds every token; a text made only of such
characters is ``▁`` and one ``<unk>`` for any suffix as well. A suffix cut at (e) is not
used: Metaspace would prepend a ``▁`` the text lacks there, and the Viterbi sums after ``x``
would start from another value (floating-point addition does not shift ties alike).
For (d), the piece holding ``x`` has over
``max_input_chars_per_word`` characters in ``s`` and still on the kept side of ``x`` (each
counted character normalizes to at least one character that is not a mark), so WordPiece maps
both to one ``[UNK]``; the pieces before it (head) or after it (tail) are as above. ∎

No cut is proven inside a piece for Unigram where a vocabulary piece holds every pair of
characters in reach (64 candidates a window), nor on the tail side inside a piece, nor inside
a run for BPE where the vocabulary merges across every character boundary in reach: such
texts (for Unigram keeping the end of newline-, tab- or comma-separated text or of one long
word) are tokenised whole, which ``benchmarks/results/truncation-scripts-cpu.md`` measures. A WordPiece cut (d) inside a
word that runs to the far end of the text leaves a part holding every token of the text.

Exactness. Keeping the first ``k`` tokens: if ``|T(s[:x])| ≥ k`` then ``T(s)[:k] =
T(s[:x])[:k]``; keeping the last ``k``: if ``|T(s[x:])| ≥ k`` then ``T(s)[-k:] =
T(s[x:])[-k:]``. Every token of a part is exact: an earlier version held back a margin (the
UTF-8 bytes of the space-separated word at the cut end) in case a component treated string
ends in a way the lemma missed; with cuts inside CJK runs and at class changes there is no
such word to bound, the lemma now names each end effect, and the property tests compare
against the library's own truncation on every script the rules cut. Token counts of a part are
lower bounds of the whole text's, which is what a refusal needs.

Pairs (``longest_first``): with ``m`` the tokens both texts may keep together, the library
keeps ``(k1, k2) = f(n1, n2, m)`` of their lengths, and ``f`` does not change with ``n2``
while ``n2 ≥ max(n1, m + 1)`` (it cuts the longer text down to the shorter's length, then both
evenly); symmetrically for ``n1 > max(n2, m)``; when both are over ``m`` the split is the same
whichever is longer only for an even ``m``. :meth:`PairTokenizer.pairs
<models.text.tokens.pairs.PairTokenizer.pairs>` asks for parts that meet those conditions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from models.text.tokens.cut_rule import CutRule

_NORMALIZERS = {"BertNormalizer", "Lowercase", "StripAccents", "NFC", "NFD", "NFKC", "NFKD"}
_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits"}
_MODELS = {"WordPiece", "BPE", "Unigram", "WordLevel"}
WHOLE = 1 << 62  # "every token": a need no part of a text can meet


class OverTokenBudget(ValueError):
    """Counting stopped: the texts hold more than the token cap a caller passed (``tokens``: a
    lower bound of what they hold; :mod:`models.text.tokens.token_cap` counts)."""

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


def _cut(rule: CutRule, text: str, at: int, side: str) -> tuple[int, bool] | None:
    """A cut ``x`` leaving a part of ``at`` to ``2·at`` characters (a prefix ``text[:x]``
    for ``side`` "head", a suffix ``text[x:]`` for "tail"), and whether that part holds every
    token of the text; None when that window has none."""
    n = len(text)
    if side == "head":
        return rule.find(text, at, min(n, 2 * at), side)
    return rule.find(text, n - 2 * at, n - at, side)


@dataclass(frozen=True)
class Part:
    """What was tokenised of one text.

    Attributes:
        text: the part (the whole text, or a part holding all of its tokens, when ``whole``).
        ids: its token ids, special tokens included.
        special: which of ``ids`` are special tokens.
        whole: the part's tokens are all the text's: it is the whole text, or it was cut
            inside a long word that runs to the text's other end (WordPiece makes that word
            one ``[UNK]`` however much of it the part holds; Unigram one fused ``<unk>``).
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
        rule: where this tokenizer's texts may be cut (:func:`models.text.tokens.cuts.cut_rule`), or
            None when cutting is not safe for it (:func:`bounded_reason`): every text is then
            tokenised whole.
    """

    def __init__(
        self,
        encode_batch: Callable[[list[str]], list[Any]],
        specials: tuple[int, int],
        rule: CutRule | None,
    ) -> None:
        self._encode = encode_batch
        self._specials = sum(specials)
        self.rule = rule

    def __call__(
        self, texts: Sequence[str], needs: Sequence[int], side: str = "head"
    ) -> list[Part]:
        """One :class:`Part` per text holding at least ``needs[i]`` exact tokens of its own (or
        the whole text; :data:`WHOLE` asks for that); ``side`` "head" keeps a prefix (the first
        tokens), "tail" a suffix (the last)."""
        *_, last = self.rounds(texts, needs, side) if texts else iter([[]])
        return last

    def rounds(
        self,
        texts: Sequence[str],
        needs: Sequence[int],
        side: str = "head",
        cap: int | None = None,
    ) -> Iterator[list[Part]]:
        """Tokenise as :meth:`__call__` does, a round at a time: after each, the parts found so
        far (one per text from the first round on; the last round's are the answer). ``cap``:
        the tokens a caller counts up to (:mod:`models.text.tokens.token_cap`), so a text's
        first part need not be longer than it takes to pass it; the caller may stop early."""
        parts: list[Part | None] = [None] * len(texts)
        # A token is rarely shorter than a character on average, and 4 characters is about one
        # token of English: the first round usually suffices, and each miss doubles the part.
        targets = [4 * min(need, cap if cap is not None else need) + 64 for need in needs]
        pending = list(range(len(texts)))
        complete = [False] * len(texts)
        while pending:
            pieces = []
            for i in pending:
                text, found = texts[i], None
                if self.rule is not None:
                    # A cut part over half the text would save less than a second round costs.
                    while found is None and 2 * targets[i] < len(text):
                        found = _cut(self.rule, text, targets[i], side)
                        if found is None:
                            targets[i] *= 2
                complete[i] = found is None or found[1]
                x = None if found is None else found[0]
                pieces.append(text if x is None else text[:x] if side == "head" else text[x:])
            encodings = self._encode(pieces)
            still = []
            for i, piece, enc in zip(pending, pieces, encodings, strict=True):
                whole = complete[i]
                own = len(enc.ids) - self._specials
                exact = own  # every token of a part cut at a cut point (the lemma)
                parts[i] = Part(piece, list(enc.ids), list(enc.special_tokens_mask), whole, exact)
                if not whole and exact < needs[i]:
                    targets[i] *= 2
                    still.append(i)
            pending = still
            yield [p for p in parts if p is not None]
