"""The one call between HTTP and the models: find the model, check, prepare, batch, await.

Routes parse a body into a :class:`~service.engine.servables.base.TextInput`,
:class:`~service.engine.servables.base.ForecastInput` or
:class:`~service.engine.servables.base.ClassifyInput`, make one call (:meth:`Engine.encode`,
:meth:`Engine.forecast`, :meth:`Engine.rerank`, :meth:`Engine.classify`) and render what it returns (the shape of TEI's router). Everything
between lives here, in order:

1. the model by name and task (404 naming the loaded ones), the request's metric labels;
2. the request-level limit (``max_inputs_per_request``);
3. ``model.check``: every model-level check once, into a typed, immutable job; under a compute
   limit, ``model.over_token_cap``: a long_text windows job's tokens counted up to what its
   windows may cost, refused (422) before any of it is prepared;
4. ``model.prepare``: tokenize / parse on the event loop when that is cheaper than a thread hop
   (the model says which), otherwise in a thread so the loop keeps answering;
5. ``attention: "auto"``: the backend for these rows (:mod:`service.engine.auto_attention`),
   applied to the call checked in 3 (one pass: nothing is checked or prepared twice);
6. submit to the model's worker under the job's batch key and await the result (or a 504, or
   the client leaving).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from models.names import BACKEND_NAMES, DEFAULT_PRECISION, PRECISION_NAMES
from models.quality_loss import DEFAULT_MAX_QUALITY_LOSS
from service.engine.auto_attention import (
    AUTO,
    QUALITY_METRIC,
    Choice,
    candidates,
    choose,
    exact_default,
    quality_table,
)
from service.engine.batching.admission import window_token_cap, windows_refusal
from service.engine.batching.batcher import Batcher
from service.engine.batching.job import JobResult
from service.engine.batching.policy import BatchKey, length_bucket
from service.engine.cpu_work import off_loop
from service.engine.registry import Registry
from service.engine.servables.base import (
    INLINE_TOKENIZE_CHARS,
    Checked,
    ClassifyInput,
    ForecastInput,
    ServedModel,
    ServedText,
    TextInput,
    Work,
)
from service.errors import InvalidRequest, ModelNotFound
from service.settings import Settings

if TYPE_CHECKING:
    from models.text.tokens.tokenizer import Token

# Text lengths (tokens) at which ``GET /models`` shows the auto table: the quality bands' tops.
TEXT_TABLE_LENGTHS = (64, 128, 256)
# The tasks of text models (what the text-embeddings-inference routes serve).
TEXT_TASKS = ("encode", "rerank", "classify", "sparse")


@dataclass(frozen=True)
class Client:
    """Who asked, as far as the engine cares.

    Attributes:
        request_id: for logs.
        labels: the request's metric labels (``model``, ``attention``), filled in here.
        disconnected: returns once the client has gone (its job is then dropped).
    """

    request_id: str = ""
    labels: MutableMapping[str, Any] | None = None
    disconnected: Callable[[], Awaitable[Any]] | None = None
    priority: int = 0  # lower is served first (vLLM's priority field)


@dataclass(frozen=True)
class Answer:
    """What a route renders.

    Attributes:
        model: the model's name (not an alias).
        attention: the backend that ran.
        value: the model's answer (embeddings, or forecasts as response dicts).
        result: timings and the batch it ran in (for the response headers).
        tokens: tokens read (text), for the usage field.
        horizon: steps returned (forecasts).
    """

    model: str
    attention: str
    value: Any
    result: JobResult
    tokens: int = 0
    horizon: int = 0
    choice: str | None = None  # attention "auto": what ran and why (x-attention-choice)
    precision: str = DEFAULT_PRECISION  # which loaded copy of the weights ran
    fallback: str | None = None  # layers that ran exact attention instead, and why


class Engine:
    """Drives requests through the loaded models and their batcher (one per process)."""

    def __init__(self, settings: Settings, registry: Registry, batcher: Batcher) -> None:
        self.settings = settings
        self.registry = registry
        self.batcher = batcher

    async def encode(
        self,
        model: str | None,
        request: TextInput,
        client: Client,
        first_if_unnamed: bool = False,
        task: str = "encode",
    ) -> Answer:
        """Embeddings for ``request.texts``, one per text, in order (``task`` sparse: sparse
        vectors, ``/embed_sparse``). ``first_if_unnamed``: with no model named, the first
        loaded encoder answers however many are loaded (TEI's routes: TEI serves one model, so
        its clients name none)."""
        name = self._first_if_unnamed(model, task, first_if_unnamed)
        return await self._serve(task, name, request, len(request.texts), "inputs", client)

    async def forecast(self, model: str | None, request: ForecastInput, client: Client) -> Answer:
        """Forecasts for ``request.series``, one per series, in order."""
        return await self._serve("forecast", model, request, len(request.series), "series", client)

    async def rerank(
        self,
        model: str | None,
        request: ClassifyInput,
        client: Client,
        first_if_unnamed: bool = False,
    ) -> Answer:
        """A relevance score per ``(query, document)`` pair of ``request.inputs``, in order
        (``CrossEncoder.predict``'s scores: the model's saved activation); ``first_if_unnamed``
        as for :meth:`encode`."""
        request = replace(request, ranking=True)
        name = self._first_if_unnamed(model, "rerank", first_if_unnamed)
        return await self._serve("rerank", name, request, len(request.inputs), "documents", client)

    async def classify(
        self,
        model: str | None,
        request: ClassifyInput,
        client: Client,
        first_if_unnamed: bool = False,
    ) -> Answer:
        """Label scores (in the model's label order) per text or pair, in order;
        ``first_if_unnamed`` as for :meth:`encode` (a classifier or a reranker)."""
        name = self._first_if_unnamed(model, "classify", first_if_unnamed)
        return await self._serve("classify", name, request, len(request.inputs), "inputs", client)

    def _first_if_unnamed(self, name: str | None, task: str, wanted: bool) -> str | None:
        """``name``, or with ``wanted`` and no name the first loaded model serving ``task``."""
        if name is not None or not wanted:
            return name
        return self.text_model(None, ("classify", "rerank") if task == "classify" else (task,))[0]

    async def _serve(
        self, task: str, name: str | None, request: Any, count: int, what: str, client: Client
    ) -> Answer:
        labels = client.labels if client.labels is not None else {}
        auto = request.attention == AUTO
        if request.attention in BACKEND_NAMES or auto:  # known names only: bounded label values
            labels["attention"] = request.attention
        model = self.registry.get(name, task)
        labels["model"] = model.name
        if request.attention is None:
            labels["attention"] = model.default_attention
        if request.precision in PRECISION_NAMES:  # known names only, as for attention
            labels["precision"] = request.precision
        elif request.precision is None:
            labels["precision"] = model.precisions()[0]
        check_count(count, self.settings.max_inputs_per_request, what)
        check_attention_named(request, model)
        check_auto_fields(request)
        # auto: checked and prepared as for the default backend (the rows do not depend on
        # it), then the backend is chosen for these rows: one pass, nothing checked twice.
        checked = model.check(replace(request, attention=None) if auto else request)
        if not auto:  # auto's pick is priced by the worker on arrival, as today
            await self._within_window_cap(model, checked)
        work = await self._run_step(checked.inline, model.prepare, checked)
        choice = None
        if auto:
            choice = self._choose(model, request, work)
            checked = replace(checked, call=choice.applied_to(checked.call))
        labels["attention"] = checked.call.backend
        labels["precision"] = checked.call.precision
        result = await self.batcher.submit(
            model.name,
            BatchKey(checked.call, work.bucket),
            work.rows,
            work.lengths,
            finish=work.finish,
            disconnected=client.disconnected,
            request_id=client.request_id,
            priority=client.priority,
        )
        horizon = int(checked.detail.get("horizon", 0))
        reason = choice.header() if choice is not None else None
        return Answer(
            model.name,
            checked.call.backend,
            result.value,
            result,
            work.tokens,
            horizon,
            reason,
            checked.call.precision,
            model.attention_fallback(checked.call),
        )

    def text_model(self, name: str | None, tasks: tuple[str, ...] = TEXT_TASKS) -> tuple[str, str]:
        """The model a text-embeddings-inference route serves, and its task (``encode``,
        ``rerank`` or ``classify``): ``name`` (or an alias of it), else the default model, the
        first loaded model of ``tasks`` (TEI serves one model; here the first stands in for it).

        Raises:
            ModelNotFound: no model by that name, or no text model at all, is loaded.
            InvalidRequest: ``name`` is a forecaster.
        """
        models = list(self.registry.models.values())
        if name is None:
            text = [m for m in models if m.task in tasks]
            if not text:
                raise ModelNotFound(
                    f"no {' or '.join(tasks)} model is loaded; loaded: "
                    f"{', '.join(self.registry.names())}"
                )
            return text[0].name, text[0].task
        model = next((m for m in models if name in (m.name, *m.aliases)), None)
        if model is None:
            raise ModelNotFound(
                f"model {name!r} is not loaded; loaded: {', '.join(self.registry.names())}"
            )
        if model.task not in TEXT_TASKS:
            raise InvalidRequest(
                f"model {model.name!r} is a {model.task} model; this route serves text models "
                f"({', '.join(self._text_names()) or 'none loaded'}); POST /forecast serves it"
            )
        return model.name, model.task

    def _text_names(self) -> list[str]:
        return [n for n, m in self.registry.models.items() if m.task in TEXT_TASKS]

    def _text_servable(self, name: str | None) -> ServedText:
        """The text model a tokenizer route serves (see :meth:`text_model`)."""
        model = self.registry.find(self.text_model(name)[0])
        assert isinstance(model, ServedText)  # every model of a text task is
        return model

    async def tokenize(
        self, name: str | None, texts: list[str], add_special_tokens: bool, prompt_name: str | None
    ) -> tuple[str, list[list[Token]]]:
        """The model's name and every token of each text, the model's prompt before it (no
        token limit; nothing runs on the model). Long inputs tokenize in a thread."""
        model = self._text_servable(name)
        check_count(len(texts), self.settings.max_inputs_per_request, "inputs")
        tokens = model.tokens
        if sum(map(len, texts)) <= INLINE_TOKENIZE_CHARS:
            return model.name, tokens(texts, add_special_tokens, prompt_name)
        return model.name, await off_loop(tokens, texts, add_special_tokens, prompt_name)

    async def decode(
        self, name: str | None, ids: list[list[int]], skip_special_tokens: bool
    ) -> tuple[str, list[str]]:
        """The model's name and the text of each list of token ids (its own tokenizer)."""
        model = self._text_servable(name)
        check_count(len(ids), self.settings.max_inputs_per_request, "ids")
        for i, row in enumerate(ids):
            if not row:
                raise InvalidRequest(f"ids {i} is empty; send at least one token id")
        decode = model.decode
        if sum(map(len, ids)) <= INLINE_TOKENIZE_CHARS:
            return model.name, decode(ids, skip_special_tokens)
        return model.name, await off_loop(decode, ids, skip_special_tokens)

    @staticmethod
    async def _run_step(inline: bool, step: Callable[..., Any], *args: Any) -> Any:
        """``step(*args)`` on the event loop when the model judged it cheap (``inline``), else
        in a thread so the loop keeps answering."""
        return step(*args) if inline else await off_loop(step, *args)

    async def _within_window_cap(self, model: ServedModel, checked: Checked) -> None:
        """Under a compute limit, refuse a long_text windows request whose texts hold more
        tokens than its windows could run in
        (:func:`~service.engine.batching.admission.window_token_cap`): counted up to that cap
        before anything is prepared (``over_token_cap``)."""
        worker = self.batcher.workers.get(model.name)
        limit = model.max_tokens
        budget = worker.limits.max_request_seconds if worker is not None else None
        if worker is None or not limit or budget is None:
            return
        key = BatchKey(checked.call, length_bucket(limit))
        cap = window_token_cap(key, limit, budget, worker.seconds_estimate)
        if cap is None:
            return
        counted = await self._run_step(checked.inline, model.over_token_cap, checked, cap)
        if counted is not None:
            self.batcher.metrics.rejections.labels(model.name, "compute_budget").inc()
            raise windows_refusal(model, key, counted, limit, budget, worker.seconds_estimate)

    def _choose(self, model: ServedModel, request: Any, work: Work) -> Choice:
        """``attention: "auto"``: the backend, options and precision for these prepared rows
        (:mod:`service.engine.auto_attention`); a precision the request names is kept."""
        budget = request.max_quality_loss
        if budget is None:
            budget = DEFAULT_MAX_QUALITY_LOSS[model.quality_task]
        worker = self.batcher.workers[model.name]
        rows, longest = len(work.rows), max(work.lengths)
        found = candidates(model, worker, rows, longest, request.precision)
        fallback = exact_default(model, worker, rows, longest, request.precision)
        choice = choose(found, budget, fallback)
        self.batcher.metrics.auto_choices.labels(model.name, choice.backend, choice.precision).inc()
        return choice

    def labels(self, name: str) -> list[str]:
        """A classifier's label names in score order (``[]`` for other models)."""
        return list(self.registry.find(name).labels)

    def cards(self) -> list[dict[str, Any]]:
        """Every loaded model's card, in load order."""
        return [self.card(name) for name in self.registry.names()]

    def card(self, name: str) -> dict[str, Any]:
        """One model's card (by name or alias) plus this server's request limits."""
        model = self.registry.find(name)
        s = self.settings
        card = dict(model.card())
        card["limits"] = {
            "max_inputs_per_request": s.max_inputs_per_request,
            "max_batch_size": s.max_batch_size,
            "max_batch_tokens": s.max_batch_tokens,
            "max_body_bytes": s.max_body_bytes,
            "request_timeout_s": s.request_timeout_s,
            "max_request_compute_s": s.request_compute_limit_s,
        }
        worker = self.batcher.workers.get(model.name)
        if worker is not None:
            # forecasters: every window's length; text models: the quality bands' tops
            lengths = [model.context] if model.context else TEXT_TABLE_LENGTHS
            card["auto"] = {
                "default_max_quality_loss": DEFAULT_MAX_QUALITY_LOSS[model.quality_task],
                "quality_metric": QUALITY_METRIC[model.quality_task],
                "by_length": {
                    str(n): quality_table(model, worker, n)
                    for n in lengths
                    if model.max_tokens is None or n <= model.max_tokens
                },
            }
        return card


def check_attention_named(request: Any, model: Any) -> None:
    """422 for ``attention: ""``: a backend named by nothing is a mistake, not a request for the
    default (the one place every model route passes; a name that is no backend is refused by
    the model, listing the valid ones)."""
    if request.attention is not None and not request.attention.strip():
        raise InvalidRequest(
            f"attention {request.attention!r} names no backend; send one of "
            f"{', '.join(model.backends())} or auto, or leave attention out for "
            f"{model.name}'s default ({model.default_attention})"
        )


def check_auto_fields(request: Any) -> None:
    """422 for a quality budget without ``auto``, or options with it."""
    if request.attention == AUTO:
        if request.attention_options:
            raise InvalidRequest(
                "attention_options cannot be combined with attention 'auto' (it picks a backend "
                "at its default options); drop attention_options, or name a backend to set them"
            )
    elif request.max_quality_loss is not None:
        raise InvalidRequest(
            "max_quality_loss applies only with attention 'auto'; send attention 'auto', or "
            "drop max_quality_loss to run the backend you named"
        )


def check_count(n: int, limit: int, what: str) -> None:
    """422 for no inputs or more than ``limit`` of them."""
    if n == 0:
        raise InvalidRequest(f"{what} must not be empty")
    if n > limit:
        raise InvalidRequest(f"too many {what}: {n}; at most {limit} per request")
