"""Tokenising texts and text pairs for a cross-encoder or classifier, with their segment ids.

A pair is encoded as the folder's tokenizer encodes ``tokenizer(a, b)`` in transformers
(``[CLS] a [SEP] b [SEP]`` with segment 0 then 1 for BERT, ``<s> a </s></s> b </s>`` for
RoBERTa), and cut on request with transformers' default ``longest_first`` rule, which is what
sentence-transformers' ``CrossEncoder.predict`` does (``truncation=True``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer

from models.errors import ModelInputError
from models.text.tokenizer import TextTokenizer
from models.text.windows import window_starts

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

    _left: Tokenizer | None = None  # truncating from the start; see _cutting_start

    def _cutting_start(self) -> Tokenizer:
        """A copy of the tokenizer that truncates from the start (built on first use)."""
        if self._left is None:
            self._left = Tokenizer.from_str(self._tokenizer.to_str())
            self._left.enable_truncation(self.max_tokens, direction="left")
        return self._left

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

        Raises:
            ModelInputError: an input is neither a string nor a pair of strings, or (without
                ``truncate``) is longer than ``max_tokens``; the message names its index.
        """
        flat: list[str] = []
        for i, item in enumerate(inputs):
            parts = [item] if isinstance(item, str) else list(item)
            if not 1 <= len(parts) <= 2 or not all(isinstance(p, str) for p in parts):
                raise ModelInputError(f"{what} {i} must be a text or a pair of two texts")
            flat.extend(parts)
        self._check(flat)  # strings, valid Unicode
        prepared = [
            tuple(self._prepare([item] if isinstance(item, str) else list(item))) for item in inputs
        ]
        encoded = self._tokenizer.encode_batch([p[0] if len(p) == 1 else p for p in prepared])
        limit, out = self.max_tokens, []
        for i, enc in enumerate(encoded):
            if len(enc.ids) > limit:
                if not truncate:
                    raise ModelInputError(
                        f"{what} {i} is {len(enc.ids)} tokens long (special tokens included), "
                        f"over this model's limit of {limit} tokens; shorten it or set "
                        f"truncate=true to cut it to {limit} tokens"
                    )
                pair = prepared[i]
                cutting = self._cutting_start() if cut_start else self._cutting
                enc = cutting.encode(*pair) if len(pair) == 2 else cutting.encode(pair[0])
            out.append(PairRow(list(enc.ids), list(enc.type_ids)))
        return out

    def windows(self, pairs: Sequence[tuple[str, str]], what: str = "input") -> PairWindows:
        """Each ``(query, document)`` pair as one row, or, when over ``max_tokens``, as
        overlapping windows of the document, each row holding the whole query and the special
        tokens (the MaxP scheme of Dai & Callan, SIGIR 2019: a document scores as its best
        passage; :data:`models.text.windows.OVERLAP` of each window repeats in the next).

        Raises:
            ModelInputError: an input is not a pair of strings, or a query leaves no room for
                a document inside the limit (the message names it).
        """
        self.pairs(list(pairs), truncate=True, what=what)  # the type and text checks
        prepared = [tuple(self._prepare(list(pair))) for pair in pairs]
        rows: list[PairRow] = []
        owners: list[int] = []
        for i, enc in enumerate(self._tokenizer.encode_batch(prepared)):
            ids, types, sequences = enc.ids, enc.type_ids, enc.sequence_ids
            if len(ids) <= self.max_tokens:
                rows.append(PairRow(list(ids), list(types)))
                owners.append(i)
                continue
            body = [j for j, s in enumerate(sequences) if s == 1]
            head, tail = body[0], body[-1] + 1
            width = self.max_tokens - (len(ids) - len(body))
            if width < 1:
                raise ModelInputError(
                    f"{what} {i}: the query takes {head} of this model's {self.max_tokens} tokens "
                    "and leaves no room for the document; shorten the query"
                )
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
