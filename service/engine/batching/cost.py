"""What a forward pass costs in seconds on this device: the model's arithmetic, priced by a rate
measured at start-up.

A model states the work of a forward pass in flop-equivalents
(:meth:`~service.engine.servables.base.ServedModel.work_estimate`, from
:mod:`models.attention.pricing`): how cost grows with rows, length and the backend's options. How
many of them this device does per second differs by backend (fused SDPA kernels, Performer's
``exp`` maps, ProbSparse's gathers) and by device, so the worker measures it: during warm-up
each backend runs the model's calibration batch
(:meth:`~service.engine.servables.base.ServedModel.calibration_batch`) and its rate is that
batch's work over its fastest time. An estimate is then ``work / rate``.

The rate comes from a batch of a typical size, fixed overhead included, so requests larger than
it are priced a little high and smaller ones a little low: the bound that uses it
(``max_request_compute_s``) is about refusing requests that would hold the worker for many
seconds, where that errs on the safe side. ``python -m benchmarks.attention.cost_model`` prints estimated
against measured times.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace

from models.names import DEFAULT_PRECISION
from service.engine.servables.base import Call, OptionItems, ServedModel

# Timed runs of the calibration batch per backend (after warm-up, so kernels are loaded): one
# keeps start-up short (each backend of each model is timed); the fastest counts.
CALIBRATION_RUNS = 1


# A rate's key: (backend, options, precision), options None for the backend's defaults in that
# precision (its base rate) and the canonical option items of a measured variant otherwise.
RateKey = tuple[str, OptionItems | None, str]


@dataclass
class CostModel:
    """Measured work rates (flop-equivalents per second) of one model on one device, one table
    keyed by (backend, options, precision): each backend at its default options, and the option
    variants ``auto`` may pick (their constant factors differ from the defaults' too: fewer
    Performer features leave fixed passes that do not shrink), in every loaded precision (other
    precisions run other kernels: bfloat16 matmuls, int8 GEMMs)."""

    rates: dict[RateKey, float] = field(default_factory=dict)

    def seconds(
        self,
        backend: str,
        work: float,
        options: OptionItems = (),
        precision: str = DEFAULT_PRECISION,
    ) -> float | None:
        """Estimated seconds of ``work`` under ``backend`` at ``options`` in ``precision`` (the
        variant's own rate when it was measured, else the backend's in that precision); None
        before the backend was calibrated in that precision."""
        rate = self.rates.get((backend, options, precision)) or self.rates.get(
            (backend, None, precision)
        )
        return None if not rate else work / rate

    def calibrate(
        self,
        backend: str,
        work: float,
        run: Callable[[], object],
        options: OptionItems | None = None,
        precision: str = DEFAULT_PRECISION,
    ) -> float:
        """Time ``run`` (a forward pass of ``work``) and keep the rate, as the backend's or (with
        ``options``) as that variant's, in ``precision``; returns its seconds."""
        best = float("inf")
        for _ in range(CALIBRATION_RUNS):
            started = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - started)
        self.rates[(backend, options, precision)] = work / max(best, 1e-6)
        return best


def measure_backend(
    cost: CostModel,
    model: ServedModel,
    backend: str,
    inference: Callable[[str], AbstractContextManager[object]],
    variant: Call | None = None,
) -> float:
    """Time ``model``'s calibration batch under ``backend`` (inside ``inference(backend)``, the
    device's inference context) and keep the rate in ``cost``, or with ``variant`` (a call of
    ``backend`` at other options, or in another precision) that variant's rate; returns the
    batch's seconds."""
    rows, call, longest = model.calibration_batch(backend)
    precision = (variant or call).precision
    # A precision's own defaults are its base rate; other options are its variants.
    options: OptionItems | None = None
    if variant is not None and variant != replace(call, precision=precision):
        options = variant.options
    call = variant or call
    work = model.work_estimate(call, len(rows), longest)

    def run() -> None:
        with inference(backend):
            model.run(rows, call)

    return cost.calibrate(backend, work, run, options, precision)
