"""The sentence encoder as a servable: tokenize up front (validation), embed in batches."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.text import SentenceEncoder
from models.text.encoder import DEFAULT_ATTENTION
from service.servables.base import accepted_backends, canonical_options


class TextServable:
    """Wraps a :class:`~models.text.SentenceEncoder`.

    Args:
        encoder: the loaded encoder.
        max_batch_tokens: cap on one forward pass's padded tokens (the encoder sub-batches).
        aliases: other names clients may use for it (e.g. the sentence-transformers hub id).
    """

    task = "encode"

    def __init__(
        self,
        encoder: SentenceEncoder,
        max_batch_tokens: int | None = None,
        aliases: tuple[str, ...] = (),
    ) -> None:
        self.encoder = encoder
        self.name = encoder.name
        self.aliases = aliases
        self.default_attention = DEFAULT_ATTENTION
        self.max_batch_tokens = max_batch_tokens
        self.dim = encoder.dim
        self.max_tokens = encoder.max_tokens
        self._backends = accepted_backends(self.encoder.check_attention)

    def backends(self) -> list[str]:
        return list(self._backends)

    def check_attention(self, backend: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
        return canonical_options(self.encoder.check_attention(backend, options))

    def tokenize(self, texts: list[str], truncate: bool) -> list[list[int]]:
        """Token ids per text; ``ModelInputError`` for a text over the limit without truncate."""
        return self.encoder.tokenize(texts, truncate)

    def run(
        self, rows: list[Any], backend: str, options: dict[str, Any], variant: tuple[Any, ...]
    ) -> list[Any]:
        (normalize,) = variant
        vectors = self.encoder.embed(rows, backend, options, normalize, self.max_batch_tokens)
        return vectors.tolist()

    def memory_estimate(self, backend: str, options: dict[str, Any], rows: int, length: int) -> int:
        return self.encoder.memory_estimate(backend, options, rows, length, self.max_batch_tokens)

    def warmup_rows(self) -> tuple[list[Any], tuple[Any, ...]]:
        texts = ["warm-up", "a slightly longer sentence to warm up padded batches of text"]
        return self.tokenize(texts, truncate=True), (True,)

    def warmup_batches(self, backend: str) -> list[tuple[list[Any], tuple[Any, ...]]]:
        rows, variant = self.warmup_rows()
        if backend not in self.encoder.compiled_backends:
            return [(rows, variant)]
        # Symbolic shapes: a few sizes settle the graph (sizes 1 and 2 specialise separately).
        long = self.tokenize(["warm-up " * self.max_tokens], truncate=True)
        return [(rows[:1], variant), (rows, variant), (rows * 4 + long, variant)]

    def compile(
        self, backends: list[str], mode: str, compiler: str, batch_buckets: tuple[int, ...]
    ) -> None:
        served = [b for b in backends if b in self._backends]
        if served:
            self.encoder.compile(served, mode, compiler)

    def card(self) -> dict[str, Any]:
        card = self.encoder.card()
        card["aliases"] = list(self.aliases)
        card["served_backends"] = self.backends()
        return card
