"""Tokenising texts and text pairs for a cross-encoder or classifier, with their segment ids.

A pair is encoded as the folder's tokenizer encodes ``tokenizer(a, b)`` in transformers
(``[CLS] a [SEP] b [SEP]`` with segment 0 then 1 for BERT, ``<s> a </s></s> b </s>`` for
RoBERTa), and cut on request with transformers' default ``longest_first`` rule, which is what
sentence-transformers' ``CrossEncoder.predict`` does (``truncation=True``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from models.errors import ModelInputError
from models.text.tokenizer import TextTokenizer

TextOrPair = str | tuple[str, str]


@dataclass(frozen=True)
class PairRow:
    """One tokenised input: token ids and each token's segment (0 first text, 1 second)."""

    ids: list[int]
    types: list[int]

    def __len__(self) -> int:
        return len(self.ids)


class PairTokenizer(TextTokenizer):
    """A :class:`TextTokenizer` that also encodes pairs (``(query, document)``)."""

    def pairs(self, inputs: Sequence[TextOrPair], truncate: bool = False) -> list[PairRow]:
        """Token ids and segments of each text or pair, special tokens included.

        Raises:
            ModelInputError: an input is neither a string nor a pair of strings, or (without
                ``truncate``) is longer than ``max_tokens``; the message names its index.
        """
        flat: list[str] = []
        for i, item in enumerate(inputs):
            parts = [item] if isinstance(item, str) else list(item)
            if not 1 <= len(parts) <= 2 or not all(isinstance(p, str) for p in parts):
                raise ModelInputError(f"input {i} must be a text or a pair of two texts")
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
                        f"input {i} is {len(enc.ids)} tokens long (special tokens included), "
                        f"over this model's limit of {limit} tokens; shorten it or set "
                        f"truncate=true to cut it to {limit} tokens"
                    )
                pair = prepared[i]
                enc = (
                    self._cutting.encode(*pair) if len(pair) == 2 else self._cutting.encode(pair[0])
                )
            out.append(PairRow(list(enc.ids), list(enc.type_ids)))
        return out
