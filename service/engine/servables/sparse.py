"""The sparse task of a text servable (:class:`~service.engine.servables.text.TextServable`):
what a SPLADE model (:class:`~models.text.sparse.SparseEncoder`) adds to checking, preparing and
running texts for ``POST /embed_sparse``.

A request's ``task`` (query / document, as sentence-transformers' ``encode_query`` /
``encode_document``) picks the prompt and, for an inference-free model, the route: rows of
different routes never share a forward pass (the route is part of the call). The forward pass
gives each row's non-zero entries; ``max_active_dims`` (the request's, else the folder's) keeps
the largest of them when the job finishes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from models.errors import ModelInputError
from models.names import DEFAULT_PRECISION
from models.quality_loss import classifier_losses
from models.text.sparse import SparseEncoder
from models.text.splade import keep_largest
from models.text.tokens.tokenizer import Token
from service.engine.batching.policy import length_bucket
from service.engine.servables.base import Call, Checked, OptionItems, TextInput, Work
from service.engine.servables.text import TextServable


@dataclass(frozen=True)
class SparseCall(Call):
    """A sparse forward pass: also the route its rows take (inference-free models)."""

    route: str = ""


class SparseEmbeddings:
    """The sparse task of a :class:`~models.text.sparse.SparseEncoder`.

    Args:
        encoder: the default precision's copy (tokenizers, prompts, routes; all copies share
            them).
    """

    task = "sparse"
    labels: tuple[str, ...] = ()

    def __init__(self, encoder: SparseEncoder) -> None:
        self.encoder = encoder

    # ------------------------------------------------------------------ per request

    def resolve(self, request: TextInput) -> TextInput:
        """Refuse what a sparse vector cannot be (shortened, quantized, windowed, per token),
        check ``max_active_dims``, and give the task's prompt when none is named."""
        name = self.encoder.name
        if request.dimensions is not None or request.quantize or request.token_embeddings:
            raise ModelInputError(
                f"{name} gives sparse vocabulary vectors: dimensions, embedding types and token "
                "embeddings do not apply; max_active_dims keeps the largest entries"
            )
        if request.long_text == "windows":
            raise ModelInputError(
                f"{name}: long_text windows does not apply to sparse vectors; send "
                "truncate=true to cut long texts"
            )
        top = request.max_active_dims
        if top is not None and top < 1:
            raise ModelInputError(f"max_active_dims must be a positive integer, got {top}")
        if request.task is not None and request.task not in ("query", "document"):
            raise ModelInputError(f"unknown input_type {request.task!r}; query or document")
        prompt_name = self.encoder.task_prompt(request.task, request.prompt_name)
        return replace(request, prompt_name=prompt_name)

    def inputs(self, request: TextInput) -> tuple[Sequence[str], str]:
        """The texts, and how an error names one."""
        return request.texts, "input"

    def call(
        self, backend: str, options: OptionItems, precision: str, request: TextInput | None = None
    ) -> SparseCall:
        """The call at ``backend``'s ``options``: the route of ``request``'s task (no request:
        the route through the network, for warm-up and calibration)."""
        route = self.encoder.mlm_route if request is None else self.encoder.route_for(request.task)
        self.encoder.prompt(None if request is None else request.prompt_name)  # a known prompt
        return SparseCall(backend, options, precision=precision, route=route)

    def prepare(self, checked: Checked) -> Work:
        """Token ids per text for its route, and the pruning that makes the answer."""
        request: TextInput = checked.request
        assert isinstance(checked.call, SparseCall)
        route = checked.call.route
        rows = self.encoder.tokenize(
            request.texts,
            request.long_text == "truncate",
            request.prompt_name,
            request.cut_start,
            route,
        )
        top = request.max_active_dims or self.encoder.max_active_dims

        def finish(outputs: list[Any]) -> list[list[dict[str, Any]]]:
            kept = (keep_largest(indices, values, top) for indices, values in outputs)
            return [
                [{"index": i, "value": v} for i, v in zip(*entry, strict=True)] for entry in kept
            ]

        # A static row may hold no tokens of its own (its vector is then empty); the batcher
        # counts it as one.
        lengths = [max(1, len(ids)) for ids in rows]
        return Work(rows, lengths, length_bucket(max(lengths)), finish, sum(map(len, rows)))

    def run(self, encoder: SparseEncoder, rows: list[Any], call: SparseCall) -> list[Any]:
        """``encoder``'s non-zero entries of ``rows`` on ``call``'s route."""
        return encoder.entries(rows, call.route, call.backend, call.options_dict, validated=True)

    def over_token_cap(self, request: Any, cap: int) -> int | None:
        """Nothing to count: long_text windows is refused when the request is checked."""
        return None

    def card(self) -> dict[str, Any]:
        """What the sparse task adds to the card: the prompt each task picks."""
        return {
            "task_prompts": {t: self.encoder.task_prompt(t, None) for t in ("query", "document")}
        }

    # ------------------------------------------------------------------ operations

    def output_bytes(self, call: Call, rows: int, length: int) -> int:
        """Nothing beyond the model's estimate (one vocabulary-wide vector per row)."""
        return 0

    def losses(
        self, quality: Mapping[str, Any], length: int, precision: str
    ) -> dict[str, tuple[float, dict[str, Any]]]:
        """1 - Kendall's tau of the dot-product scores to exact attention's, per backend, in
        the band holding ``length`` (``attnserve evaluate``: :mod:`models.text.quality.sparse`);
        ``{}`` without figures (``auto`` then runs an exact backend)."""
        return classifier_losses(quality, length, precision)

    def sample_rows(self, document: str, count: int, tokens: int) -> list[list[int]]:
        """``count`` copies of ``document``'s token ids, cut to ``tokens``."""
        return [ids[:tokens] for ids in self.encoder.tokenize([document] * count, True)]

    def warmup_rows(self, backend: str) -> list[list[list[int]]]:
        """One small batch through the network."""
        texts = ["warm-up", "a slightly longer sentence to warm up padded batches of text"]
        return [self.encoder.tokenize(texts, True)]

    def compile(
        self, backends: list[str], copies: list[SparseEncoder], mode: str, compiler: str
    ) -> None:
        """Nothing: a sparse encoder runs eagerly (its pooling loops over logit chunks)."""

    def tokens(
        self, texts: list[str], add_special_tokens: bool, prompt_name: str | None
    ) -> list[list[Token]]:
        """Every token of each text, the prompt prepended (TEI's ``/tokenize``)."""
        return self.encoder.tokens(texts, add_special_tokens, prompt_name)


class SparseServable(TextServable):
    """A :class:`TextServable` whose head is :class:`SparseEmbeddings` (task ``sparse``)."""

    head: SparseEmbeddings  # type: ignore[assignment]

    def __init__(
        self,
        model: SparseEncoder,
        aliases: tuple[str, ...] = (),
        precisions: tuple[str, ...] = (DEFAULT_PRECISION,),
    ) -> None:
        super().__init__(cast(Any, model), aliases, precisions)

    def _make_head(self, model: Any) -> SparseEmbeddings:  # type: ignore[override]
        return SparseEmbeddings(self.model)


def load_sparse(folder: Path, device: str, precisions: tuple[str, ...]) -> SparseServable:
    """The servable of a ``SparseEncoder`` folder. A folder that cannot load raises
    ValueError, which the registry turns into one line naming the folder."""
    try:
        model = SparseEncoder.from_folder(folder, device=device)
    except (OSError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot load this sparse encoder ({type(exc).__name__}: {exc})") from exc
    return SparseServable(model, (), precisions)
