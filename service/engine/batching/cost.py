"""What a forward pass costs in seconds on this device: the model's arithmetic, priced by a rate
measured at start-up.

A model states the work of a forward pass in flop-equivalents
(:meth:`~service.engine.servables.base.ServedModel.work_estimate`, from
:mod:`models.attention.work`): how cost grows with rows, length and the backend's options. How
many of them this device does per second differs by backend (fused SDPA kernels, Performer's
``exp`` maps, ProbSparse's gathers) and by device, so the worker measures it: during warm-up
each backend runs the model's calibration batch
(:meth:`~service.engine.servables.base.ServedModel.calibration_batch`) and its rate is that
batch's work over its fastest time. An estimate is then ``work / rate``.

The rate comes from a batch of a typical size, fixed overhead included, so requests larger than
it are priced a little high and smaller ones a little low: the bound that uses it
(``max_request_compute_s``) is about refusing requests that would hold the worker for many
seconds, where that errs on the safe side. ``python -m benchmarks.cost_model`` prints estimated
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


@dataclass
class CostModel:
    """Measured work rates (flop-equivalents per second) of one model on one device: per backend
    at its default options, and per (backend, options) for the option variants ``auto`` may pick
    (their constant factors differ from the defaults' too: fewer Performer features leave
    fixed passes that do not shrink). Precisions other than float32 run other kernels
    (bfloat16 matmuls, int8 GEMMs), so each has rates of its own, at its defaults and per
    variant."""

    rates: dict[str, float] = field(default_factory=dict)
    option_rates: dict[tuple[str, OptionItems], float] = field(default_factory=dict)
    precision_rates: dict[tuple[str, str], float] = field(default_factory=dict)
    precision_option_rates: dict[tuple[str, OptionItems, str], float] = field(default_factory=dict)

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
        if precision == DEFAULT_PRECISION:
            rate = self.option_rates.get((backend, options)) or self.rates.get(backend)
        else:
            rate = self.precision_option_rates.get(
                (backend, options, precision)
            ) or self.precision_rates.get((backend, precision))
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
        rate = work / max(best, 1e-6)
        if precision != DEFAULT_PRECISION:
            if options is None:
                self.precision_rates[(backend, precision)] = rate
            else:
                self.precision_option_rates[(backend, options, precision)] = rate
        elif options is None:
            self.rates[backend] = rate
        else:
            self.option_rates[(backend, options)] = rate
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
    precision = getattr(variant or call, "precision", DEFAULT_PRECISION)
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
