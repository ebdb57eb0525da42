"""A multi-vector (ColBERT-style) model as a served model: ``/encode`` and ``/embed_all`` answer
one list of token vectors per text, ``/v1/rerank`` and ``/v2/rerank`` score documents by
late interaction (MaxSim: Khattab & Zaharia, SIGIR 2020), and the routes whose answer holds one
vector per text (OpenAI ``/v1/embeddings``, Cohere ``/v1/embed`` / ``/v2/embed``, TEI ``/embed``)
get a 422 naming the routes that can carry them.

Rows carry their side (query or document, :class:`~models.text.multi_vector.VectorRow`), so the
rows of a rerank job (its query and documents) and of concurrent requests share forward passes;
a rerank job's ``finish`` scores the documents once all its rows are back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from models.errors import ModelInputError
from models.names import DEFAULT_PRECISION
from models.quality_loss import classifier_losses
from models.text.multi_vector import MultiVectorModel, VectorRow
from models.text.tokens.tokenizer import Token
from service.engine.batching.policy import length_bucket
from service.engine.servables.base import Call, Checked, ClassifyInput, OptionItems, TextInput, Work
from service.engine.servables.embed import TOKEN_OUTPUT_VALUES
from service.engine.servables.text import TextServable

# The routes a multi-vector model's answer fits, for the refusal of the others.
VECTOR_ROUTES = "POST /encode or POST /embed_all (a list of token vectors per text)"
RANK_ROUTES = "POST /v1/rerank or POST /v2/rerank (documents scored by MaxSim)"
# The card's routes: those above, TEI's and infinity's /rerank, and the tokenizer's.
ROUTES = ("/encode", "/embed_all", "/v1/rerank", "/rerank", "/v2/rerank", "/tokenize", "/decode")


class MultiVectors:
    """The encode and rerank tasks of a :class:`~models.text.multi_vector.MultiVectorModel`.

    Args:
        model: the default precision's copy (tokenizers, sides, mask; all copies share them).
    """

    task = "encode"
    labels: tuple[str, ...] = ()

    def __init__(self, model: MultiVectorModel) -> None:
        self.model = model
        self.dim = model.dim

    # ------------------------------------------------------------------ per request

    def resolve(self, request: TextInput | ClassifyInput) -> TextInput | ClassifyInput:
        """Refuse what a multi-vector answer cannot be: one vector per text, windows, shorter
        or quantized vectors."""
        name = self.model.name
        if isinstance(request, ClassifyInput):
            if not request.ranking:
                raise ModelInputError(f"{name} is a multi-vector model: it ranks, it has no labels")
            if request.windows:
                raise ModelInputError(
                    f"{name} scores each document by MaxSim over one pass: windows do not "
                    "apply; send truncate=true to cut long documents"
                )
            return request
        if not (request.multi_vector or request.token_embeddings):
            raise ModelInputError(
                f"{name} is a multi-vector (ColBERT) model: it gives one vector per token, "
                f"which this route's one-vector-per-text answer cannot carry; use {VECTOR_ROUTES}, "
                f"or {RANK_ROUTES}"
            )
        if request.long_text == "windows":
            raise ModelInputError(
                f"{name} gives one vector per token of one pass: long_text windows does not "
                "apply; send truncate=true to cut long texts"
            )
        if request.dimensions is not None or request.quantize:
            raise ModelInputError(f"{name}'s token vectors cannot be shortened or quantized")
        if request.task not in (None, "query", "document"):
            raise ModelInputError(
                f"input_type {request.task!r} does not apply to {name}; query or document"
            )
        return request

    def inputs(self, request: TextInput | ClassifyInput) -> tuple[Sequence[Any], str]:
        """The texts or ``(query, document)`` pairs, and how an error names one."""
        if isinstance(request, ClassifyInput):
            return request.inputs, request.what
        return request.texts, "input"

    def call(
        self,
        backend: str,
        options: OptionItems,
        precision: str,
        request: TextInput | ClassifyInput | None = None,
    ) -> Call:
        """Every request's rows share one call: a row's side travels with it."""
        return Call(backend, options, precision=precision)

    def prepare(self, checked: Checked) -> Work:
        """Rows per text (a rerank job: its query, then its documents), and how their vectors
        become the answer (lists of token vectors, or one MaxSim score per document)."""
        request = checked.request
        if isinstance(request, ClassifyInput):
            return self._prepare_ranking(request)
        side = request.task or "none"
        truncate = request.long_text == "truncate"
        rows = self.model.rows(
            request.texts, side, truncate, request.prompt_name, request.cut_start
        )
        lengths = [len(row) for row in rows]
        self._check_output(sum(lengths))
        return Work(rows, lengths, length_bucket(max(lengths)), _as_lists, sum(lengths))

    def _prepare_ranking(self, request: ClassifyInput) -> Work:
        pairs = [p for p in request.inputs if not isinstance(p, str)]
        if len(pairs) != len(request.inputs) or len({q for q, _ in pairs}) > 1:
            raise ModelInputError("a ranking request holds one query and its documents")
        model, cut = self.model, request.cut_start
        documents = [d for _, d in pairs]
        try:
            query = model.rows([pairs[0][0]], "query", request.truncate, cut_start=cut)
        except ModelInputError as exc:
            raise ModelInputError(str(exc).replace("input 0", "the query", 1)) from None
        try:
            rows = query + model.rows(documents, "document", request.truncate, cut_start=cut)
        except ModelInputError as exc:  # name the document, not "input i"
            raise ModelInputError(str(exc).replace("input ", f"{request.what} ", 1)) from None
        lengths = [len(row) for row in rows]

        def finish(vectors: list[Any]) -> list[list[float]]:
            return [[s] for s in model.score(vectors[0], vectors[1:])]

        return Work(rows, lengths, length_bucket(max(lengths)), finish, sum(lengths))

    def _check_output(self, tokens: int) -> None:
        """Refuse an answer too large to render on the event loop (as token embeddings)."""
        limit = max(self.model.max_tokens, TOKEN_OUTPUT_VALUES // self.dim)
        if tokens > limit:
            raise ModelInputError(
                f"token vectors of {tokens} tokens asked for; at most {limit} tokens per request "
                f"({self.dim} numbers come back per token): send fewer or shorter texts"
            )

    def run(self, model: MultiVectorModel, rows: list[VectorRow], call: Call) -> list[Any]:
        """Each row's kept token vectors (tensors; the job's ``finish`` renders them)."""
        return model.vectors(rows, call.backend, call.options_dict, validated=True)

    def over_token_cap(self, request: Any, cap: int) -> int | None:
        """Nothing to count: long_text windows is refused when the request is checked."""
        return None

    def card(self) -> dict[str, Any]:
        """The late-interaction settings and which routes answer."""
        return {"routes": list(ROUTES), "multi_vector": self.model.describe_multi_vector()}

    # ------------------------------------------------------------------ operations

    def output_bytes(self, call: Call, rows: int, length: int) -> int:
        """Every token's float32 vector (the model's estimate counts one per row)."""
        return rows * length * self.dim * 4

    def losses(
        self, quality: Mapping[str, Any], length: int, precision: str
    ) -> dict[str, tuple[float, dict[str, Any]]]:
        """1 - Kendall's tau of the MaxSim scores to exact attention's, per backend, in the
        band holding ``length`` (``attnserve evaluate``: :mod:`models.text.quality.multi_vector`)."""
        return classifier_losses(quality, length, precision)

    def sample_rows(self, document: str, count: int, tokens: int) -> list[VectorRow]:
        """``count`` copies of ``document`` as document rows of at most ``tokens`` tokens."""
        rows = self.model.rows([document] * count, "document", truncate=True)
        return [
            VectorRow(r.ids[:tokens], min(r.keys, tokens), min(r.real, tokens), r.side)
            for r in rows
        ]

    def warmup_rows(self, backend: str) -> list[list[VectorRow]]:
        """A query (expanded, if the model expands) and a document in one batch."""
        query = self.model.rows(["warm-up"], "query", truncate=True)
        document = self.model.rows(
            ["a slightly longer text to warm up padded batches"], "document", True
        )
        return [query + document]

    def compile(self, backends: list[str], copies: list[Any], mode: str, compiler: str) -> None:
        """Not compiled: multi-vector models run eagerly (the compiled forward pools)."""

    def tokens(
        self, texts: list[str], add_special_tokens: bool, prompt_name: str | None
    ) -> list[list[Token]]:
        return self.model.tokens(texts, add_special_tokens, prompt_name)


def _as_lists(vectors: list[Any]) -> list[list[list[float]]]:
    return [v.tolist() for v in vectors]


class MultiVectorServable(TextServable):
    """A :class:`TextServable` whose head is :class:`MultiVectors`: it serves ``encode`` and
    also ``rerank`` (:data:`extra_tasks`, read by the registry)."""

    extra_tasks = ("rerank",)
    head: MultiVectors  # type: ignore[assignment]

    @property
    def quality_task(self) -> str:
        """``multi_vector``: ``auto`` budgets the ranking loss its ``quality.json`` measures
        (:mod:`models.text.quality.multi_vector`), not an embedding's cosine."""
        return "multi_vector"

    def __init__(
        self,
        model: MultiVectorModel,
        aliases: tuple[str, ...] = (),
        precisions: tuple[str, ...] = (DEFAULT_PRECISION,),
    ) -> None:
        super().__init__(cast(Any, model), aliases, precisions)

    def _make_head(self, model: Any) -> MultiVectors:  # type: ignore[override]
        return MultiVectors(self.model)


def load_multi_vector(
    folder: Path, device: str, precisions: tuple[str, ...]
) -> MultiVectorServable:
    """The servable of a multi-vector folder. A folder that cannot load raises ValueError,
    which the registry turns into one line naming the folder."""
    try:
        model = MultiVectorModel.from_folder(folder, device=device)
    except (OSError, KeyError, TypeError) as exc:
        raise ValueError(
            f"cannot load this multi-vector folder ({type(exc).__name__}: {exc})"
        ) from exc
    return MultiVectorServable(model, (), precisions)
