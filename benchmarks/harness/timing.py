"""Timing helpers every benchmark shares: warm-up, best-of and median timings, nearest-rank
percentiles and alternating rounds between variants.

Timings on a shared machine drift: a variant measured in one block sees a different background
load from the next. :func:`alternating` runs the variants in turn within each round, so drift hits
all of them alike, and keeps every round so a table can give the median and the spread.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Run = Callable[[], object]


def samples(fn: Run, repeats: int, warmup: int = 1) -> list[float]:
    """Wall seconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def median_ms(fn: Run, repeats: int, warmup: int = 1) -> float:
    """Median milliseconds of ``repeats`` calls of ``fn`` after ``warmup`` untimed ones."""
    return statistics.median(samples(fn, repeats, warmup)) * 1e3


def best_seconds(fn: Run, repeats: int, warmup: int = 0) -> float:
    """The fastest of ``repeats`` calls of ``fn`` in seconds (the least disturbed by other work)."""
    return min(samples(fn, repeats, warmup))


def budget_samples(
    fn: Run, seconds: float, min_reps: int, max_reps: int = 50, sync: Run = lambda: None
) -> list[float]:
    """Wall seconds of calls of ``fn``: at least ``min_reps``, more while ``seconds`` last (at most
    ``max_reps``); one call slower than the whole budget is the measurement. ``sync`` waits for
    an accelerator before each clock read."""
    out: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(out) < min_reps or (time.perf_counter() < deadline and len(out) < max_reps):
        sync()
        started = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - started)
        if len(out) == 1 and out[0] > seconds:
            break
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``; NaN when empty.

    Nearest rank: the smallest value with at least ``q`` % of the values at or below it, so p99
    of 100 values is the 99th smallest and p100 the largest; never an interpolated value.
    """
    if not values:
        return float("nan")
    if not 0 < q <= 100:
        raise ValueError(f"percentile {q} is outside (0, 100]")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class Timed:
    """One variant's wall and process-CPU seconds, one entry per round."""

    wall: list[float]
    cpu: list[float]


def alternating(runs: Mapping[str, Run], rounds: int, warmup: bool = True) -> dict[str, Timed]:
    """Time each run once per round, the runs in turn within a round (A, B, C, A, B, C, ...),
    after one untimed warm-up round when ``warmup``. CPU time (``time.process_time``, all
    threads) is the steadier measure when the machine is shared."""
    out = {name: Timed([], []) for name in runs}
    for round_ in range(rounds + int(warmup)):
        for name, fn in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            if round_ or not warmup:
                out[name].wall.append(time.perf_counter() - wall)
                out[name].cpu.append(time.process_time() - cpu)
    return out


def rows_per_s(
    run: Callable[[list[Any]], object], rows: list[Any], batch: int, repeats: int
) -> tuple[float, float]:
    """Rows per second of ``run`` over ``rows`` in chunks of ``batch`` (best of ``repeats``
    passes, after one untimed chunk: first-call costs stay out) and the CPU milliseconds per row
    of that best pass (all threads of this process)."""
    chunks = [rows[i : i + batch] for i in range(0, len(rows), batch)]
    run(chunks[0])
    best, best_cpu = float("inf"), float("nan")
    for _ in range(repeats):
        started, cpu0 = time.perf_counter(), time.process_time()
        for chunk in chunks:
            run(chunk)
        elapsed = time.perf_counter() - started
        if elapsed < best:
            best, best_cpu = elapsed, (time.process_time() - cpu0) * 1000 / len(rows)
    return len(rows) / best, best_cpu
