"""A request waiting for the model: its validated rows, batch key, clock and the future it awaits."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from service.engine.batching.policy import BatchKey


@dataclass(frozen=True)
class BatchStats:
    """How the batch a request ran in looked (sent back in headers and metrics).

    Attributes:
        peak_memory_bytes: CUDA allocator peak while it ran (None on CPU).
        memory_estimate_bytes: the model's estimate of its peak activation memory (of its
            largest part, when it ran in parts to stay within the memory budget).
        memory_measured_bytes: the peak memory it added above what was in use when it started
            (see :mod:`service.engine.batching.device`; None where it cannot be measured).
    """

    rows: int
    requests: int
    tokens: int
    inference_s: float
    peak_memory_bytes: int | None = None
    memory_estimate_bytes: int | None = None
    memory_measured_bytes: int | None = None


@dataclass(frozen=True)
class JobResult:
    """A finished request: its value plus where its time went."""

    value: Any
    queue_s: float
    batch: BatchStats


@dataclass(eq=False)
class Job:
    """One request's share of the work (a request with several texts/series is one job).

    Attributes:
        key: what it may be batched with.
        rows: prepared model inputs, one per text / series (already validated).
        lengths: tokens / time steps per row.
        finish: turns this job's row outputs into its response value (runs on the worker
            thread, e.g. cutting forecasts to the requested horizon).
        future: resolved with a :class:`JobResult` or a service error.
        enqueued_at, deadline: ``time.monotonic()`` seconds.
        cancelled: the client left or timed out; the worker drops the job if not yet run.
        arrived_idle: it found the worker idle and the queue empty, so it runs at once.
        priority: lower is served first (see :func:`~service.engine.batching.policy.served_order`).
    """

    key: BatchKey
    rows: list[Any]
    lengths: list[int]
    finish: Callable[[list[Any]], Any]
    future: asyncio.Future[JobResult]
    enqueued_at: float
    deadline: float
    request_id: str = ""
    cancelled: bool = False
    arrived_idle: bool = False
    priority: int = 0

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    @property
    def longest(self) -> int:
        return max(self.lengths, default=0)
