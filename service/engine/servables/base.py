"""The one protocol every served model implements, and the typed values that cross it.

The engine (:mod:`service.engine.engine`) drives a request through a model in four steps, each a
method of :class:`ServedModel`:

1. ``check(request)``: validate everything that needs the model but not much work (backend and
   options, horizon, dimensions, empty inputs) into a typed :class:`Checked`, before anything is parsed;
   under a compute limit, ``over_token_cap(checked, cap)`` then counts a long_text windows
   request's tokens up to the most its windows may cost, before any of it is prepared;
2. ``prepare(checked)``: the CPU-side work (tokenize, parse and scale histories) into :class:`Work`:
   the rows, their lengths, the :class:`Call` they share and how to turn outputs into the answer;
3. ``run(rows, call)``: one forward pass over exactly the rows the batcher formed (worker thread);
4. ``card()``: what ``GET /models`` shows.

A servable wraps one model object from ``models/`` (which knows tensors) and speaks in plain
Python values; routes never see it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from models.errors import ModelInputError
from models.names import DEFAULT_PRECISION

if TYPE_CHECKING:
    from models.text.tokens.tokenizer import Token

OptionItems = tuple[tuple[str, Hashable], ...]

# Tokenizing (or decoding) this many characters costs about as much as a thread hop: shorter
# requests are tokenized on the event loop, longer ones in a thread (Checked.inline).
INLINE_TOKENIZE_CHARS = 4096


@dataclass(frozen=True)
class Call:
    """What every row of one forward pass shares; requests with equal calls (and length bucket)
    may be batched together.

    Attributes:
        backend: attention backend name.
        options: canonical backend options (defaults filled, derived ones left out) as sorted
            ``(name, value)`` pairs, so ``{}`` and the spelled-out defaults batch together.
        precision: which loaded copy of the weights runs (``float32``, ``bfloat16``, ``int8``,
            ``float16``; :mod:`models.precision`): part of the batch key, so rows of different
            precisions never share a forward pass.
    """

    backend: str
    options: OptionItems = ()
    precision: str = field(default=DEFAULT_PRECISION, kw_only=True)

    @property
    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)


@dataclass(frozen=True)
class TextCall(Call):
    """A text forward pass: also whether embeddings are scaled to unit length, and how many
    leading (prompt) tokens per text pooling leaves out."""

    normalize: bool = True
    skip: int = 0
    pooled: bool = True  # False: every token's hidden state (/embed_all); such rows batch apart


@dataclass(frozen=True)
class TextInput:
    """An ``/encode`` or ``/v1/embeddings`` request, whichever route it came through."""

    texts: list[str]
    attention: str | None = None
    attention_options: Mapping[str, Any] = field(default_factory=dict)
    normalize: bool | None = None  # None: as the model does (its Normalize module)
    long_text: str = (
        "error"  # over the limit: error, truncate or windows (models.text.tokens.windows)
    )
    cut_start: bool = False  # truncate: drop a long text's first tokens rather than its last
    dimensions: int | None = None  # keep the first dimensions components (renormalised)
    max_quality_loss: float | None = None  # with attention "auto" (service.engine.auto_attention)
    prompt_name: str | None = None  # one of the model's prompts (None: its default prompt)
    precision: str | None = None  # one of the loaded precisions (None: the first loaded)
    token_embeddings: bool = False  # every token's embedding, unpooled (TEI's /embed_all)
    quantize: tuple[str, ...] = ()  # also these forms; value {form: rows} (models.text.quantize)
    task: str | None = None  # query, document, ...: its prompt when prompt_name is None
    max_active_dims: int | None = None  # /embed_sparse: keep the largest entries (None: model's)
    multi_vector: bool = False  # the route carries a list of token vectors per text (/encode)


@dataclass(frozen=True)
class ClassifyInput:
    """A ``/predict``, ``/rerank`` or ``/v1/rerank`` request: texts or ``(query, document)``
    pairs, each scored by a classifier (:mod:`service.engine.servables.classify`)."""

    inputs: Sequence[str | tuple[str, str]]
    attention: str | None = None
    attention_options: Mapping[str, Any] = field(default_factory=dict)
    truncate: bool = False  # cut an input over the token limit (longest_first) instead of a 422
    raw_scores: bool = False  # logits instead of the model's activation
    max_quality_loss: float | None = None  # with attention "auto"
    precision: str | None = None  # one of the loaded precisions (None: the first loaded)
    what: str = "input"  # how errors name one of ``inputs`` ("document" for rerank)
    windows: bool = False  # pairs over the limit: the document as windows, scored by the best
    cut_start: bool = False  # truncate from the start of the longer text instead of its end
    ranking: bool = False  # rerank scores (CrossEncoder.predict's activation), not label scores


# Per-series inputs besides the history that some forecasters take (transformers' encoder-
# decoders); passed to ``prepare`` only when a request gives them.
EXTRA_INPUTS = (
    "time_features",
    "static_categorical",
    "static_real",
    "past_covariates",
    "future_covariates",
)


@dataclass(frozen=True)
class ForecastInput:
    """A ``/forecast`` request: each series a mapping of ``timestamps`` or ``start`` and
    ``values`` or ``columns`` (see :meth:`models.informer.InformerForecaster.prepare`)."""

    series: Sequence[Mapping[str, Any]]
    horizon: int | None = None
    attention: str | None = None
    attention_options: Mapping[str, Any] = field(default_factory=dict)
    steps: int = 0  # history rows over all series: how much parsing ``prepare`` has to do
    max_quality_loss: float | None = None  # with attention "auto" (service.engine.auto_attention)
    quantiles: tuple[float, ...] = ()  # probabilistic models: quantiles beside the mean
    seed: int = 0  # probabilistic models: series i samples with seed + i
    precision: str | None = None  # one of the loaded precisions (None: the first loaded)
    model_options: Mapping[str, Any] = field(default_factory=dict)  # zero-shot models' own


@dataclass(frozen=True)
class Checked:
    """A request checked against its model, not yet prepared (typed: nothing is validated again).

    Attributes:
        call: the forward pass it needs.
        request: the request it came from.
        inline: preparing it is cheap enough to do on the event loop (a thread hop costs more);
            otherwise the engine prepares it in a thread so the loop keeps answering.
        detail: what the model resolved besides the call (the forecast horizon).
    """

    call: Call
    request: Any
    inline: bool
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Work:
    """A prepared job, ready for the batcher.

    Attributes:
        rows: model inputs, one per text / series.
        lengths: tokens / time steps per row.
        bucket: length bucket of the longest row (rows of one bucket batch together).
        finish: turns this job's row outputs, in order, into its answer (runs on the worker
            thread after the forward pass).
        tokens: what the usage field reports (tokens read; 0 for forecasts).
    """

    rows: list[Any]
    lengths: list[int]
    bucket: int
    finish: Callable[[list[Any]], Any]
    tokens: int = 0


@runtime_checkable
class ServedModel(Protocol):
    """A loaded model the engine can check, prepare, batch and describe."""

    name: str
    task: str  # "encode", "rerank", "classify" or "forecast"
    aliases: tuple[str, ...]
    default_attention: str

    # What the engine and routes read of every kind (read-only here: a kind narrows the type).

    @property
    def labels(self) -> tuple[str, ...]:
        """A classifier's label names in score order; ``()`` for every other kind."""
        ...

    @property
    def max_tokens(self) -> int | None:
        """A text model's longest row, special tokens included; None for a forecaster."""
        ...

    @property
    def context(self) -> int | None:
        """A forecaster's window length (a zero-shot one's longest); None for a text model."""
        ...

    @property
    def extra_tasks(self) -> tuple[str, ...]:
        """Routes' tasks it answers besides its own (a multi-vector model: ``rerank``)."""
        ...

    @property
    def zero_shot(self) -> bool:
        """A forecaster of histories of any length (TimesFM, Chronos-2), not a fixed window."""
        ...

    @property
    def quality_task(self) -> str:
        """The task whose quality figures ``auto`` reads: its default ``max_quality_loss`` and
        the metric the card names (:data:`models.quality_loss.DEFAULT_MAX_QUALITY_LOSS`)."""
        ...

    def check(self, request: Any) -> Checked:
        """Validate ``request`` against this model.

        Raises:
            AttentionError, ModelInputError: what is wrong and how to fix it (a 422).
        """
        ...

    def over_token_cap(self, checked: Checked, cap: int) -> int | None:
        """The step before ``prepare`` under a compute limit: for a text request whose long
        texts will be cut into windows, its tokens counted up to ``cap`` (reading about that
        much text, however long the texts; :mod:`models.text.tokens.token_cap`), returned when
        they pass it (a lower bound of what the texts hold), None when within it or when the
        request makes no windows (a forecast's)."""
        ...

    def prepare(self, checked: Checked) -> Work:
        """The rows for the batcher (``ModelInputError`` naming the input that is wrong)."""
        ...

    def run(self, rows: list[Any], call: Any) -> list[Any]:
        """One output per row, in order: one forward pass over exactly these rows (worker
        thread, under inference mode)."""
        ...

    def card(self) -> dict[str, Any]:
        """The model card served at ``GET /models``."""
        ...

    def attention_fallback(self, call: Any) -> str | None:
        """Which layers ran another backend than ``call``'s, and why (the
        ``x-attention-fallback`` header); None when every layer ran it."""
        ...

    # What the worker needs to operate the model (not per request).

    def backends(self) -> list[str]:
        """Backends this model serves on its device (warmed up at start-up)."""
        ...

    def default_call(self, backend: str, precision: str | None = None) -> Call:
        """The call ``backend`` makes with its default options, in ``precision`` (None: the
        model's default precision, the first loaded)."""
        ...

    def precisions(self) -> list[str]:
        """The precisions this model is loaded in, the default first."""
        ...

    def memory_estimate(self, call: Any, rows: int, length: int) -> int:
        """Estimated peak activation memory, in bytes, of :meth:`run` on ``rows`` rows of
        ``length`` tokens / time steps (the batcher keeps batches under its memory budget)."""
        ...

    def work_estimate(self, call: Any, rows: int, length: int) -> float:
        """Flop-equivalents of :meth:`run` on ``rows`` rows of ``length`` (see
        :mod:`models.attention.pricing`); the worker prices them in seconds with the rate it
        measured for the backend (:mod:`service.engine.batching.cost`)."""
        ...

    def quality_losses(self, length: int) -> dict[Call, float]:
        """Measured quality loss against exact attention per call (a backend at its default
        options, or at options scored separately), for rows of ``length`` (see
        :mod:`models.quality_loss`); calls without a figure are left out (``attention: "auto"``
        never picks them)."""
        ...

    def measured_variants(self, backend: str) -> list[Call]:
        """Calls of ``backend`` at options other than its defaults that have quality figures:
        ``auto`` may pick them, so warm-up prices each on this device."""
        ...

    def calibration_batch(self, backend: str) -> tuple[list[Any], Call, int]:
        """A batch of typical size (rows, call, longest row), timed at start-up to measure
        ``backend``'s work rate."""
        ...

    def warmup_batches(self, backend: str) -> Sequence[tuple[list[Any], Call]]:
        """The batches (rows, call) to run before ready: one small batch, or for a compiled
        backend one per shape it will see (so no graph compiles while serving)."""
        ...

    def compile(
        self, backends: list[str], mode: str, compiler: str, batch_buckets: tuple[int, ...]
    ) -> None:
        """``torch.compile`` the forward for those of ``backends`` this model serves."""
        ...


@runtime_checkable
class ServedText(ServedModel, Protocol):
    """A text model (``encode``, ``rerank`` or ``classify``): the protocol, and its tokenizer for
    text-embeddings-inference's ``/tokenize`` and ``/decode``."""

    def tokens(
        self, texts: list[str], add_special_tokens: bool, prompt_name: str | None
    ) -> list[list[Token]]:
        """Every token of each text, the model's prompt prepended (no token limit).

        Raises:
            ModelInputError: a prompt the model does not have.
        """
        ...

    def decode(self, ids: list[list[int]], skip_special_tokens: bool) -> list[str]:
        """The text of each list of token ids."""
        ...


def option_items(options: Mapping[str, Any]) -> OptionItems:
    """Resolved options without the ``None`` ones ("derive from the input"), sorted."""
    return tuple((k, v) for k, v in sorted(options.items()) if v is not None)


def check_precision(requested: str | None, loaded: Sequence[str], model: str) -> str:
    """The precision a request runs in: ``requested``, or the first loaded when None.

    Raises:
        ModelInputError: ``requested`` is not loaded for this model (the message names the
            loaded ones and the setting that loads more).
    """
    if requested is None:
        return loaded[0]
    if requested not in loaded:
        raise ModelInputError(
            f"precision {requested!r} is not loaded for {model}; loaded: {', '.join(loaded)} "
            "(the server's precisions setting, ATTNSERVE_PRECISIONS, lists what loads)"
        )
    return requested
