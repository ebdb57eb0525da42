"""Tokenising texts and text pairs for a cross-encoder or classifier, with their segment ids.

A pair is encoded as the folder's tokenizer encodes ``tokenizer(a, b)`` in transformers
(``[CLS] a [SEP] b [SEP]`` with segment 0 then 1 for BERT, ``<s> a </s></s> b </s>`` for
RoBERTa), and cut on request with transformers' default ``longest_first`` rule, which is what
sentence-transformers' ``CrossEncoder.predict`` does (``truncation=True``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from models.errors import ModelInputError
from models.text.tokens.bounded import OverTokenBudget, Part
from models.text.tokens.token_cap import TokenCount, count_up_to
from models.text.tokens.tokenizer import TextTokenizer
from models.text.tokens.windows import window_starts

TextOrPair = str | tuple[str, str]


@dataclass(frozen=True)
class PairRow:
    """One tokenised input: token ids and each token's segment (0 first text, 1 second)."""

    ids: list[int]
    types: list[int]

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class PairWindows:
    """Rows for pairs whose second text may be cut into windows, and which pair each row
    belongs to (a pair within the limit is one row)."""

    rows: list[PairRow]
    owners: list[int]


class PairTokenizer(TextTokenizer):
    """A :class:`TextTokenizer` that also encodes pairs (``(query, document)``)."""

    def _checked(self, inputs: Sequence[TextOrPair], what: str) -> list[tuple[str, ...]]:
        """Each input as a tuple of one or two prepared (lowercased) texts.

        Raises:
            ModelInputError: an input is neither a string nor a pair of strings, or holds text
                that is not Unicode; the message names the input by its own index.
        """
        flat: list[str] = []
        names: list[str] = []
        for i, item in enumerate(inputs):
            parts = [item] if isinstance(item, str) else list(item)
            if not 1 <= len(parts) <= 2 or not all(isinstance(p, str) for p in parts):
                raise ModelInputError(f"{what} {i} must be a text or a pair of two texts")
            flat.extend(parts)
            if len(parts) == 1:
                names.append(f"{what} {i}")
            else:  # a reranker's pairs are (query, document): name the query as such
                first = "the query" if what == "document" else f"the first text of {what} {i}"
                names.extend(
                    [
                        first,
                        f"{what} {i}" if what == "document" else f"the second text of {what} {i}",
                    ]
                )
        self._check(flat, names)  # strings, valid Unicode
        return [
            tuple(self._prepare(list(item) if not isinstance(item, str) else [item]))
            for item in inputs
        ]

    def pairs(
        self,
        inputs: Sequence[TextOrPair],
        truncate: bool = False,
        what: str = "input",
        cut_start: bool = False,
    ) -> list[PairRow]:
        """Token ids and segments of each text or pair, special tokens included. Truncation
        follows ``longest_first``, from the end of the longer text or, with ``cut_start``, from
        its start (the tokenizers library's ``direction="left"``, which text-embeddings-inference
        uses for ``truncation_direction: Left``); special tokens always stay.

        A long text costs what is kept: each text is tokenised only as far as the cut needs
        (a prefix, or with ``cut_start`` a suffix; :mod:`models.text.tokens.bounded`), then the
        library's own truncation runs on those parts, which keep the same tokens as the whole
        texts would (the conditions on ``longest_first`` are in that module's docstring).

        Raises:
            ModelInputError: an input is neither a string nor a pair of strings, or (without
                ``truncate``) is longer than ``max_tokens``; the message names its index.
        """
        prepared = self._checked(inputs, what)
        side = "tail" if cut_start else "head"
        limit = self.max_tokens
        single_room = limit - self.special_tokens()
        pair_room = limit - int(self._tokenizer.num_special_tokens_to_add(True))
        flat = [text for item in prepared for text in item]
        owner = [i for i, item in enumerate(prepared) for _ in item]
        rooms = [single_room if len(prepared[i]) == 1 else pair_room for i in owner]
        parts = self._ends(flat, [room + 1 for room in rooms], side)
        # Pairs whose parts do not yet meet longest_first's conditions: grow them (each round
        # makes a part whole or longer than its partner's, so this ends).
        while True:
            regrow: dict[int, int] = {}
            at = 0
            for item in prepared:
                if len(item) == 2:
                    regrow.update(_pair_needs(parts[at], parts[at + 1], at, pair_room))
                at += len(item)
            if not regrow:
                break
            more = self._ends([flat[j] for j in regrow], list(regrow.values()), side)
            for j, part in zip(regrow, more, strict=True):
                parts[j] = part
        rows = []
        at = 0
        for i, item in enumerate(prepared):
            own = parts[at : at + len(item)]
            at += len(item)
            room = single_room if len(item) == 1 else pair_room
            whole = all(p.whole for p in own)
            length = sum(p.exact for p in own) + limit - room  # exact when whole
            if (not whole or length > limit) and not truncate:
                told = f"{length}" if whole else f"over {limit}"
                raise ModelInputError(
                    f"{what} {i} is {told} tokens long (special tokens included), "
                    f"over this model's limit of {limit} tokens; shorten it or set "
                    f"truncate=true to cut it to {limit} tokens"
                )
            keep = longest_first([p.exact for p in own], room)
            rows.append((tuple(p.text for p in own), keep))
        # A part much longer than what it keeps (it was grown to count, or to learn which text
        # is longer) is cut again to about what it keeps: the final encoding stays small.
        recut = [
            (i, s)
            for i, (texts, keep) in enumerate(rows)
            for s, k in enumerate(keep)
            if len(texts[s]) > 8 * k + 256
        ]
        if recut:
            again = self._ends(
                [rows[i][0][s] for i, s in recut], [rows[i][1][s] for i, s in recut], side
            )
            for (i, s), part in zip(recut, again, strict=True):
                texts = list(rows[i][0])
                texts[s] = part.text
                rows[i] = (tuple(texts), rows[i][1])
        inputs_cut = [texts[0] if len(texts) == 1 else texts for texts, _ in rows]
        encodings = self._encode_batch(inputs_cut)  # the parts, uncut
        return [_cut(enc, keep, cut_start) for enc, (_, keep) in zip(encodings, rows, strict=True)]

    def count_documents_up_to(
        self, pairs: Sequence[TextOrPair], cap: int, what: str = "input"
    ) -> TokenCount:
        """The documents' tokens counted up to ``cap``: whether they hold more while one of
        them leaves its query over the limit (so will be cut into windows), reading about
        ``cap`` tokens' worth of text at most (:mod:`models.text.tokens.token_cap`).

        Raises:
            ModelInputError: an input is not a pair of strings (the message names it).
        """
        prepared = self._checked(list(pairs), what)
        if any(len(pair) != 2 for pair in prepared):
            raise ModelInputError("long_text windows applies to query-document pairs only")
        return self._count_documents(prepared, cap)

    def _count_documents(self, prepared: list[tuple[str, ...]], cap: int) -> TokenCount:
        room = self.max_tokens - int(self._tokenizer.num_special_tokens_to_add(True))
        docs = [pair[1] for pair in prepared]
        return count_up_to(self._ends, self._floor, docs, cap, room)

    def windows(
        self, pairs: Sequence[tuple[str, str]], what: str = "input", max_tokens: int | None = None
    ) -> PairWindows:
        """Each ``(query, document)`` pair as one row, or, when over ``max_tokens``, as
        overlapping windows of the document, each row holding the whole query and the special
        tokens (the MaxP scheme of Dai & Callan, SIGIR 2019: a document scores as its best
        passage; :data:`models.text.tokens.windows.OVERLAP` of each window repeats in the next).

        Args:
            max_tokens: refuse (:class:`~models.text.tokens.bounded.OverTokenBudget`) once the
                documents hold more than this many tokens while one is over the limit,
                tokenising only about that much text to find out.

        Raises:
            ModelInputError: an input is not a pair of strings, or a query leaves no room for
                a document inside the limit (the message names it).
            OverTokenBudget: over ``max_tokens``.
        """
        prepared = self._checked(list(pairs), what)
        if any(len(pair) != 2 for pair in prepared):
            raise ModelInputError("long_text windows applies to query-document pairs only")
        if max_tokens is not None:
            counted = self._count_documents(prepared, max_tokens)
            if counted.exceeded:
                raise OverTokenBudget(counted.tokens, max_tokens)
        rows: list[PairRow] = []
        owners: list[int] = []
        for i, enc in enumerate(self._encode_batch(prepared)):
            ids, types, sequences = enc.ids, enc.type_ids, enc.sequence_ids
            if len(ids) <= self.max_tokens:
                rows.append(PairRow(list(ids), list(types)))
                owners.append(i)
                continue
            body = [j for j, s in enumerate(sequences) if s == 1]
            width = self.max_tokens - (len(ids) - len(body))
            if not body or width < 1:  # a document of no tokens: the query alone is over
                raise ModelInputError(
                    f"{what} {i}: the query and the special tokens take {len(ids) - len(body)} "
                    f"of this model's {self.max_tokens} tokens and leave no room for the "
                    "document; shorten the query"
                )
            head, tail = body[0], body[-1] + 1
            for start in window_starts(len(body), width):
                cut = slice(head + start, head + min(start + width, len(body)))
                rows.append(
                    PairRow(
                        list(ids[:head]) + list(ids[cut]) + list(ids[tail:]),
                        list(types[:head]) + list(types[cut]) + list(types[tail:]),
                    )
                )
                owners.append(i)
        return PairWindows(rows, owners)


def longest_first(lengths: list[int], room: int) -> list[int]:
    """How many of each text's own tokens the tokenizers library's ``longest_first``
    truncation keeps when the texts (one, or a pair) may hold ``room`` tokens together: the
    longer text is cut down to the shorter's length, then both evenly, the odd token to the
    first text only when it was the longer (checked against the library in the tests)."""
    if sum(lengths) <= room:
        return list(lengths)
    if len(lengths) == 1:
        return [room]
    n1, n2 = lengths
    if n1 > n2:
        k2 = min(n2, room // 2)
        return [room - k2, k2]
    k1 = min(n1, room // 2)
    return [k1, room - k1]


def _cut(enc: Any, keep: list[int], from_start: bool) -> PairRow:
    """``enc`` (special tokens and one or two texts, uncut) keeping ``keep[s]`` tokens of text
    ``s``: its first ones, or with ``from_start`` its last ones; special tokens all stay."""
    sequences = enc.sequence_ids
    if sum(1 for s in sequences if s is not None) == sum(keep):
        return PairRow(list(enc.ids), list(enc.type_ids))  # nothing to cut
    positions = [[j for j, s in enumerate(sequences) if s == text] for text in range(len(keep))]
    kept = {j for j, s in enumerate(sequences) if s is None}
    for at, k in zip(positions, keep, strict=True):
        kept.update(at[len(at) - k :] if from_start else at[:k])
    ids, types = enc.ids, enc.type_ids
    order = sorted(kept)
    return PairRow([ids[j] for j in order], [types[j] for j in order])


def _pair_needs(first: Part, second: Part, at: int, room: int) -> dict[int, int]:
    """Exact tokens each part of a pair still needs (by its index in the flat list) for
    ``longest_first`` on the parts to keep what it keeps of the whole texts (module docstring
    of :mod:`models.text.tokens.bounded`); empty when the parts already do."""
    if first.whole and second.whole:
        return {}
    if first.whole:  # the second is long: it must be at least as long as the first
        return {} if second.exact >= first.exact else {at + 1: max(room + 1, first.exact)}
    if second.whole:  # the first is long: strictly longer than the second
        return {} if first.exact > second.exact else {at: max(room + 1, second.exact + 1)}
    # Both over the room: an even room splits the same whichever is longer; an odd one needs
    # to know which: grow the shorter so far past the other until one of them is whole.
    if room % 2 == 0:
        return {}
    # (to twice the other's count, so the parts grow geometrically)
    if first.exact > second.exact:
        return {at + 1: 2 * first.exact}
    return {at: 2 * second.exact + 1}
