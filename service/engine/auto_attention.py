"""``attention: "auto"``: the fastest backend (with its options) whose measured quality loss fits
the request's budget.

Two ingredients, both measured, none assumed:

- **quality**: each model's shipped figures per backend at its default options, and at the
  option variants scored separately
  (:meth:`~service.engine.servables.base.ServedModel.quality_losses`): for a forecaster the relative
  test-MSE increase over exact attention (``quality.json``, ``attnserve evaluate --variants``),
  for the encoder ``1 - mean cosine`` to the exact embedding over texts of the request's length
  (``models/text/quality/quality.json``). Exact backends (``flash``, ``full``) lose nothing; a backend
  or option set without a figure is never chosen.
- **cost**: the worker's estimate for *this* request (rows and length) under each candidate,
  from the rates it measured on this device at warm-up, each variant at its own options
  (:mod:`service.engine.batching.cost`).

The choice is the cheapest candidate within the budget that also fits the batch memory budget;
a budget of 0 leaves only exact backends in float32.

Precision is a second axis (:mod:`models.precision`): every loaded precision's calls are
candidates too, each with its measured loss against exact float32 attention (a bfloat16 ``flash``
is not exact) and its own measured rate, so ``auto`` picks across backend x precision. A request
that names a precision is chosen for within it. A precision without figures (a folder before
``attnserve evaluate --precisions``), or whose figures all exceed the budget, runs the model's
exact default backend in that precision (:func:`exact_default`), and the header says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from models.names import DEFAULT_PRECISION
from models.quality_loss import EXACT as EXACT_BACKENDS
from models.quality_loss import variant_label
from service.engine.batching.policy import BatchKey
from service.engine.batching.worker import ModelWorker
from service.engine.servables.base import Call, ServedModel

AUTO = "auto"
QUALITY_METRIC = {
    "forecast": "relative test-MSE increase over exact attention",
    "encode": "1 - mean cosine similarity to the exact embedding, over texts of this length",
    "rerank": "1 - Kendall's tau between the scores and exact attention's, per query",
    "classify": "share of inputs whose top label differs from exact attention's",
    "sparse": "1 - Kendall's tau between the sparse vectors' dot-product scores and exact "
    "attention's, per query",
    "multi_vector": "1 - Kendall's tau between the MaxSim scores and exact attention's, per query",
}


@dataclass(frozen=True)
class Candidate:
    """One backend at one set of options (its defaults, or a measured variant), priced for one
    request."""

    call: Call
    loss: float
    seconds: float | None  # None: not measured on this device (never before warm-up)
    fits_memory: bool
    changed: tuple[tuple[str, Any], ...] = ()  # options that differ from the backend's defaults

    @property
    def backend(self) -> str:
        return self.call.backend

    @property
    def precision(self) -> str:
        return self.call.precision

    @property
    def exact(self) -> bool:
        """Exact attention in float32: the reference every loss is measured against."""
        return self.backend in EXACT_BACKENDS and self.precision == DEFAULT_PRECISION

    @property
    def label(self) -> str:
        """``performer`` at the defaults, ``performer(num_features=16)`` for a variant,
        ``flash@bfloat16`` in another precision."""
        label = variant_label(self.backend, dict(self.changed))
        return label if self.precision == DEFAULT_PRECISION else f"{label}@{self.precision}"


@dataclass(frozen=True)
class Choice:
    """What ``auto`` picked, and why (the ``x-attention-choice`` header)."""

    picked: Candidate
    budget: float
    reference: Candidate | None  # flash (else full), for the comparison in the header
    # The picked candidate is the exact default fallback: no measured candidate of its
    # precision fits the budget (``measured``: whether that precision has any figure at all).
    fallback: bool = False
    measured: bool = True

    @property
    def backend(self) -> str:
        return self.picked.backend

    @property
    def options(self) -> dict[str, Any]:
        """The picked options, spelled out, as a request's ``attention_options``."""
        return self.picked.call.options_dict

    @property
    def precision(self) -> str:
        return self.picked.precision

    def applied_to(self, call: Call) -> Call:
        """The request's own call (checked at the default backend) running the pick: its
        backend, options and precision; what else the call carries (a text call's pooling and
        normalisation, a sparse call's route) comes from the request, not the backend, so it
        stays. The pick is one of the model's own calls, so nothing needs checking again."""
        picked = self.picked.call
        return replace(
            call, backend=picked.backend, options=picked.options, precision=picked.precision
        )

    def header(self) -> str:
        """e.g. ``performer(num_features=16); loss -0.0002 <= 0.05; est 41 ms vs flash 126 ms``."""
        picked = self.picked
        if not self.fallback:
            text = f"{picked.label}; loss {picked.loss:.4g} <= {self.budget:g}"
        elif self.measured:
            text = (
                f"{picked.label}; no {picked.precision} candidate measured within "
                f"{self.budget:g}: the exact default backend"
            )
        else:
            text = (
                f"{picked.label}; {picked.precision} not measured (attnserve evaluate "
                f"--precisions {picked.precision}): the exact default backend"
            )
        if picked.seconds is not None:
            text += f"; est {picked.seconds * 1000:.0f} ms"
            ref = self.reference
            if ref is not None and ref.call != picked.call and ref.seconds is not None:
                text += f" vs {ref.label} {ref.seconds * 1000:.0f} ms"
        return text


def candidates(
    model: ServedModel,
    worker: ModelWorker,
    rows: int,
    length: int,
    precision: str | None = None,
) -> list[Candidate]:
    """Every backend this model serves, in every loaded precision (or only ``precision``), at
    each set of options with a measured loss at ``length`` (exact backends in float32 at their
    defaults, loss 0), priced for ``rows`` rows of ``length`` on this device."""
    backends = model.backends()
    loaded = model.precisions() if precision is None else [precision]
    measured: dict[Call, float] = {}
    if DEFAULT_PRECISION in loaded:
        for b in EXACT_BACKENDS:
            if b in backends:
                measured[model.default_call(b, DEFAULT_PRECISION)] = 0.0
    for call, loss in model.quality_losses(length).items():
        exact = call.backend in EXACT_BACKENDS and call.precision == DEFAULT_PRECISION
        if call.backend in backends and call.precision in loaded and not exact:
            measured[call] = loss
    budget = worker.limits.max_batch_memory
    out = []
    for call, loss in measured.items():
        key = BatchKey(call)
        fits = budget is None or worker.memory_estimate(key, 1, length) <= budget
        defaults = dict(model.default_call(call.backend, DEFAULT_PRECISION).options)
        changed = tuple((k, v) for k, v in call.options if defaults.get(k) != v)
        seconds = worker.seconds_estimate(key, rows, length)
        out.append(Candidate(call, loss, seconds, fits, changed))
    return out


def exact_default(
    model: ServedModel,
    worker: ModelWorker,
    rows: int,
    length: int,
    precision: str | None = None,
) -> Candidate:
    """The model's exact default backend (its default when that is exact, else ``flash``, else
    ``full``; its default when it serves neither) at its default options in ``precision`` (the model's default precision when None),
    priced like any candidate: what ``auto`` runs when no measured candidate qualifies, e.g. in
    a precision ``attnserve evaluate --precisions`` has not scored. Its loss is the measured
    one, NaN when there is none."""
    precision = precision or model.precisions()[0]
    served = model.backends()
    order = (model.default_attention, *EXACT_BACKENDS)
    # A model that refuses both exact backends (none does today) runs its own default.
    backend = next(
        (b for b in order if b in EXACT_BACKENDS and b in served), model.default_attention
    )
    call = model.default_call(backend, precision)
    exact = precision == DEFAULT_PRECISION
    loss = 0.0 if exact else model.quality_losses(length).get(call, float("nan"))
    key = BatchKey(call)
    budget = worker.limits.max_batch_memory
    fits = budget is None or worker.memory_estimate(key, 1, length) <= budget
    return Candidate(call, loss, worker.seconds_estimate(key, rows, length), fits)


def choose(options: list[Candidate], budget: float, fallback: Candidate | None = None) -> Choice:
    """The cheapest candidate with ``loss <= budget`` that fits in memory (unpriced candidates
    last). When none qualifies: exact float32 attention if it is a candidate, else ``fallback``
    (:func:`exact_default` in the precision asked for), never a candidate over the budget. A
    budget of 0 asks for exact attention: an approximation whose measured loss came out at or
    below zero (as good as exact on the test windows, within their noise) is not exact, so it is
    not taken then.

    Raises:
        ValueError: nothing qualifies and there is neither an exact candidate nor a fallback.
    """
    exact_only = budget <= 0.0
    allowed = [
        c for c in options if c.loss <= budget and c.fits_memory and (c.exact or not exact_only)
    ]
    if not allowed:  # no measured loss fits: exact attention always does
        allowed = [c for c in options if c.exact]
    if not allowed and fallback is not None:
        measured = any(c.precision == fallback.precision for c in options)
        return Choice(fallback, budget, None, fallback=True, measured=measured)
    if not allowed:
        raise ValueError("no attention backend to choose from")
    best = min(allowed, key=lambda c: (c.seconds is None, c.seconds or 0.0, c.loss))
    # The comparison in the header: exact float32 attention, else the picked precision's.
    defaults = {(c.backend, c.precision): c for c in options if not c.changed}
    reference = next(
        (
            defaults[(b, p)]
            for p in (DEFAULT_PRECISION, best.precision)
            for b in ("flash", "full")
            if (b, p) in defaults
        ),
        None,
    )
    return Choice(best, budget, reference)


def quality_table(model: ServedModel, worker: ModelWorker, length: int) -> list[dict[str, object]]:
    """What ``GET /models`` shows under ``auto``: per candidate (backend, precision, and the
    options that differ from its defaults) its measured loss and estimated milliseconds for one
    row of ``length`` on this device, cheapest first."""
    rows = []
    for c in candidates(model, worker, 1, length):
        rows.append(
            {
                "backend": c.backend,
                "precision": c.precision,
                "options": dict(c.changed),
                "quality_loss": round(c.loss, 6),
                "estimated_ms_per_row": None if c.seconds is None else round(c.seconds * 1000, 2),
                "fits_memory_budget": c.fits_memory,
            }
        )
    return sorted(
        rows, key=lambda r: (r["estimated_ms_per_row"] is None, r["estimated_ms_per_row"] or 0)
    )
