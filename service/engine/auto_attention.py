"""``attention: "auto"``: the fastest backend (with its options) whose measured quality loss fits
the request's budget.

Two ingredients, both measured, none assumed:

- **quality**: each model's shipped figures per backend at its default options, and at the
  option variants scored separately
  (:meth:`~service.engine.servables.base.ServedModel.quality_losses`): for a forecaster the relative
  test-MSE increase over exact attention (``quality.json``, ``attnserve evaluate --variants``),
  for the encoder ``1 - mean cosine`` to the exact embedding over texts of the request's length
  (``models/text/quality.json``). Exact backends (``flash``, ``full``) lose nothing; a backend
  or option set without a figure is never chosen.
- **cost**: the worker's estimate for *this* request (rows and length) under each candidate,
  from the rates it measured on this device at warm-up, each variant at its own options
  (:mod:`service.engine.batching.cost`).

The choice is the cheapest candidate within the budget that also fits the batch memory budget;
a budget of 0 leaves only exact backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.quality_loss import EXACT as EXACT_BACKENDS
from models.quality_loss import variant_label
from service.engine.batching.policy import BatchKey
from service.engine.batching.worker import ModelWorker
from service.engine.servables.base import Call, ServedModel

AUTO = "auto"
QUALITY_METRIC = {
    "forecast": "relative test-MSE increase over exact attention",
    "encode": "1 - mean cosine similarity to the exact embedding, over texts of this length",
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
    def label(self) -> str:
        """``performer`` at the defaults, ``performer(num_features=16)`` for a variant."""
        return variant_label(self.backend, dict(self.changed))


@dataclass(frozen=True)
class Choice:
    """What ``auto`` picked, and why (the ``x-attention-choice`` header)."""

    picked: Candidate
    budget: float
    reference: Candidate | None  # flash (else full), for the comparison in the header

    @property
    def backend(self) -> str:
        return self.picked.backend

    @property
    def options(self) -> dict[str, Any]:
        """The picked options, spelled out, as a request's ``attention_options``."""
        return self.picked.call.options_dict

    def header(self) -> str:
        """e.g. ``performer(num_features=16); loss -0.0002 <= 0.05; est 41 ms vs flash 126 ms``."""
        picked = self.picked
        text = f"{picked.label}; loss {picked.loss:.4g} <= {self.budget:g}"
        if picked.seconds is not None:
            text += f"; est {picked.seconds * 1000:.0f} ms"
            ref = self.reference
            if ref is not None and ref.backend != picked.backend and ref.seconds is not None:
                text += f" vs {ref.backend} {ref.seconds * 1000:.0f} ms"
        return text


def candidates(model: ServedModel, worker: ModelWorker, rows: int, length: int) -> list[Candidate]:
    """Every backend this model serves, at each set of options with a measured loss at
    ``length`` (exact backends at their defaults, loss 0), priced for ``rows`` rows of
    ``length`` on this device."""
    backends = model.backends()
    measured: dict[Call, float] = {
        model.default_call(b): 0.0 for b in EXACT_BACKENDS if b in backends
    }
    for call, loss in model.quality_losses(length).items():
        if call.backend in backends and call.backend not in EXACT_BACKENDS:
            measured[call] = loss
    budget = worker.limits.max_batch_memory
    out = []
    for call, loss in measured.items():
        key = BatchKey(call)
        fits = budget is None or worker.memory_estimate(key, 1, length) <= budget
        defaults = dict(model.default_call(call.backend).options)
        changed = tuple((k, v) for k, v in call.options if defaults.get(k) != v)
        seconds = worker.seconds_estimate(key, rows, length)
        out.append(Candidate(call, loss, seconds, fits, changed))
    return out


def choose(options: list[Candidate], budget: float) -> Choice:
    """The cheapest candidate with ``loss <= budget`` that fits in memory (an exact one when
    nothing else qualifies; unpriced candidates last). A budget of 0 asks for exact attention:
    an approximation whose measured loss came out at or below zero (as good as exact on the
    test windows, within their noise) is not exact, so it is not taken then."""
    exact_only = budget <= 0.0
    allowed = [
        c
        for c in options
        if c.loss <= budget and c.fits_memory and (c.backend in EXACT_BACKENDS or not exact_only)
    ]
    if not allowed:  # no measured loss fits: exact attention always does
        allowed = [c for c in options if c.backend in EXACT_BACKENDS] or options
    if not allowed:
        raise ValueError("no attention backend to choose from")
    best = min(allowed, key=lambda c: (c.seconds is None, c.seconds or 0.0, c.loss))
    defaults = {c.backend: c for c in options if not c.changed}
    reference = defaults.get("flash") or defaults.get("full")
    return Choice(best, budget, reference)


def quality_table(model: ServedModel, worker: ModelWorker, length: int) -> list[dict[str, object]]:
    """What ``GET /models`` shows under ``auto``: per candidate (backend, and the options that
    differ from its defaults) its measured loss and estimated milliseconds for one row of
    ``length`` on this device, cheapest first."""
    rows = []
    for c in candidates(model, worker, 1, length):
        rows.append(
            {
                "backend": c.backend,
                "options": dict(c.changed),
                "quality_loss": round(c.loss, 6),
                "estimated_ms_per_row": None if c.seconds is None else round(c.seconds * 1000, 2),
                "fits_memory_budget": c.fits_memory,
            }
        )
    return sorted(
        rows, key=lambda r: (r["estimated_ms_per_row"] is None, r["estimated_ms_per_row"] or 0)
    )
