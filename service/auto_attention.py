"""``attention: "auto"``: the fastest backend whose measured quality loss fits the request's budget.

Two ingredients, both measured, none assumed:

- **quality**: each model's shipped figures per backend at its default options
  (:meth:`~service.servables.base.ServedModel.quality_losses`): for a forecaster the relative
  test-MSE increase over exact attention (``quality.json``), for the encoder ``1 - mean cosine``
  to the exact embedding over texts of the request's length (``models/text/quality.json``).
  Exact backends (``flash``, ``full``) lose nothing; a backend without a figure is never chosen.
- **cost**: the worker's estimate for *this* request (rows and length) under each backend, from
  the rates it measured on this device at warm-up (:mod:`service.batching.cost`).

The choice is the cheapest candidate within the budget that also fits the batch memory budget;
a budget of 0 leaves only exact backends. Candidates use each backend's default options (the
ones the figures were measured with).
"""

from __future__ import annotations

from dataclasses import dataclass

from models.quality_loss import EXACT as EXACT_BACKENDS
from service.batching.policy import BatchKey
from service.batching.worker import ModelWorker
from service.servables.base import ServedModel

AUTO = "auto"
QUALITY_METRIC = {
    "forecast": "relative test-MSE increase over exact attention",
    "encode": "1 - mean cosine similarity to the exact embedding, over texts of this length",
}


@dataclass(frozen=True)
class Candidate:
    """One backend at its default options, priced for one request."""

    backend: str
    loss: float
    seconds: float | None  # None: not measured on this device (never before warm-up)
    fits_memory: bool


@dataclass(frozen=True)
class Choice:
    """What ``auto`` picked, and why (the ``x-attention-choice`` header)."""

    backend: str
    loss: float
    budget: float
    seconds: float | None
    reference: Candidate | None  # flash (else full), for the comparison in the header

    def header(self) -> str:
        """e.g. ``performer; loss -0.0002 <= 0.05; est 41 ms vs flash 126 ms``."""
        text = f"{self.backend}; loss {self.loss:.4g} <= {self.budget:g}"
        if self.seconds is not None:
            text += f"; est {self.seconds * 1000:.0f} ms"
            ref = self.reference
            if ref is not None and ref.backend != self.backend and ref.seconds is not None:
                text += f" vs {ref.backend} {ref.seconds * 1000:.0f} ms"
        return text


def candidates(model: ServedModel, worker: ModelWorker, rows: int, length: int) -> list[Candidate]:
    """Every backend this model serves that has a measured loss at ``length``, priced for
    ``rows`` rows of ``length`` on this device."""
    losses = model.quality_losses(length)
    budget = worker.limits.max_batch_memory
    out = []
    for backend in model.backends():
        loss = 0.0 if backend in EXACT_BACKENDS else losses.get(backend)
        if loss is None:
            continue
        key = BatchKey(model.default_call(backend))
        fits = budget is None or worker.memory_estimate(key, 1, length) <= budget
        out.append(Candidate(backend, loss, worker.seconds_estimate(key, rows, length), fits))
    return out


def choose(options: list[Candidate], budget: float) -> Choice:
    """The cheapest candidate with ``loss <= budget`` that fits in memory (an exact one when
    nothing else qualifies; unpriced candidates last)."""
    allowed = [c for c in options if c.loss <= budget and c.fits_memory]
    if not allowed:  # no measured loss fits: exact attention always does
        allowed = [c for c in options if c.backend in EXACT_BACKENDS] or options
    if not allowed:
        raise ValueError("no attention backend to choose from")
    best = min(allowed, key=lambda c: (c.seconds is None, c.seconds or 0.0, c.loss))
    by_name = {c.backend: c for c in options}
    reference = by_name.get("flash") or by_name.get("full")
    return Choice(best.backend, best.loss, budget, best.seconds, reference)


def quality_table(model: ServedModel, worker: ModelWorker, length: int) -> list[dict[str, object]]:
    """What ``GET /models`` shows under ``auto``: per candidate backend its measured loss and
    estimated milliseconds for one row of ``length`` on this device, cheapest first."""
    rows = []
    for c in candidates(model, worker, 1, length):
        rows.append(
            {
                "backend": c.backend,
                "quality_loss": round(c.loss, 6),
                "estimated_ms_per_row": None if c.seconds is None else round(c.seconds * 1000, 2),
                "fits_memory_budget": c.fits_memory,
            }
        )
    return sorted(
        rows, key=lambda r: (r["estimated_ms_per_row"] is None, r["estimated_ms_per_row"] or 0)
    )
