"""Running one batch on the worker thread, with split-and-retry so one request cannot sink others.

The batch the policy formed is the forward pass that runs. Only a lone request over a limit
(more rows than ``max_batch_size``, more padded tokens than ``max_batch_tokens``, or an estimated
peak over the memory budget: the policy stops adding requests before) runs in parts of as many
rows as fit (:func:`~service.batching.policy.part_rows`), and the outputs are joined in order.

A batch that runs out of device memory is split in two halves (by request) and each half is
retried; a single request that still does not fit gets a clear ``out_of_memory`` error. Any other
failure of a multi-request batch is bisected the same way, so the request that caused it fails
alone and the requests batched beside it still get their answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from service.batching.device import DeviceRuntime, is_out_of_memory
from service.batching.job import BatchStats, Job
from service.batching.policy import Limits, padded_tokens, part_rows
from service.errors import ClientDisconnected, OutOfDeviceMemory, from_model_error

log = logging.getLogger("attnserve.batching")

RunRows = Callable[[list[Any]], list[Any]]
# Estimated peak bytes of one forward pass of (rows, longest row), for this batch's key.
RowsMemory = Callable[[int, int], int]


@dataclass
class Outcome:
    """What one job got: a value or an error, and the (sub-)batch it ran in."""

    job: Job
    value: Any = None
    error: Exception | None = None
    stats: BatchStats | None = None


class Abandoned(Exception):
    """Every request of the batch was given up (client gone or timed out) between two parts."""


def run_in_parts(
    run_rows: RunRows,
    rows: list[Any],
    lengths: list[int],
    part: int,
    abandoned: Callable[[], bool] = lambda: False,
) -> list[Any]:
    """``run_rows`` on parts of at most ``part`` rows, longest rows first (so each part pads to
    rows of its own length); the outputs joined in the rows' order. Before each part after the
    first, :class:`Abandoned` if nobody waits for the answer any more (the worker is free
    sooner)."""
    if len(rows) <= part:
        return run_rows(rows)
    order = sorted(range(len(rows)), key=lambda i: (-lengths[i], i))
    outputs: list[Any] = [None] * len(rows)
    for start in range(0, len(rows), part):
        if start and abandoned():
            raise Abandoned(f"stopped after {start} of {len(rows)} rows: nobody waits")
        chunk = order[start : start + part]
        for i, out in zip(chunk, run_rows([rows[i] for i in chunk]), strict=True):
            outputs[i] = out
    return outputs


def execute(
    jobs: list[Job],
    run_rows: RunRows,
    runtime: DeviceRuntime,
    backend: str,
    limits: Limits,
    on_split: Callable[[], None] = lambda: None,
    memory: RowsMemory | None = None,
) -> list[Outcome]:
    """Run ``jobs`` as one forward pass (``run_rows`` gets all their rows in order), or, for a
    lone request over a limit, as several of :func:`~service.batching.policy.part_rows`."""
    rows = [row for job in jobs for row in job.rows]
    lengths = [n for job in jobs for n in job.lengths]
    longest = max(lengths, default=0)
    part = part_rows(
        len(rows), longest, limits, None if memory is None else lambda n: memory(n, longest)
    )
    if part < len(rows):
        log.info(
            "request %s (%d rows of up to %d) is over a batch limit: parts of %d rows",
            jobs[0].request_id,
            len(rows),
            longest,
            part,
        )
    estimate = None if memory is None else memory(part, longest)
    started = time.perf_counter()
    baseline = runtime.reset_peak()
    try:
        try:
            with runtime.inference(backend):
                outputs = run_in_parts(
                    run_rows, rows, lengths, part, lambda: all(job.cancelled for job in jobs)
                )
        finally:
            measured = runtime.peak_above(baseline)
        if len(outputs) != len(rows):
            raise RuntimeError(f"model returned {len(outputs)} outputs for {len(rows)} rows")
    except Abandoned as exc:
        log.info("request %s: %s", jobs[0].request_id, exc)
        gone = ClientDisconnected("the client left or timed out before the answer")
        return [Outcome(job, error=gone) for job in jobs]
    except Exception as exc:
        oom = is_out_of_memory(exc)
        if oom:
            runtime.after_out_of_memory()
        if len(jobs) > 1:
            if oom:
                log.warning("out of memory on a batch of %d requests: splitting", len(jobs))
            else:
                log.warning("batch of %d requests failed (%r): bisecting", len(jobs), exc)
            on_split()
            half = len(jobs) // 2
            return execute(
                jobs[:half], run_rows, runtime, backend, limits, on_split, memory
            ) + execute(jobs[half:], run_rows, runtime, backend, limits, on_split, memory)
        if oom:
            error: Exception = OutOfDeviceMemory(
                f"this request ({len(rows)} rows, longest {longest}) does not fit in device memory "
                "even on its own; send fewer or shorter inputs"
            )
        else:
            error = from_model_error(exc)
            if error.status >= 500:  # ours, not the caller's: one line with the traceback
                log.error("request %s failed in the model", jobs[0].request_id, exc_info=exc)
        return [Outcome(jobs[0], error=error)]

    stats = BatchStats(
        rows=part,
        requests=len(jobs),
        tokens=padded_tokens(part, longest),
        inference_s=time.perf_counter() - started,
        peak_memory_bytes=runtime.peak_bytes(),
        memory_estimate_bytes=estimate,
        memory_measured_bytes=measured,
    )
    outcomes, start = [], 0
    for job in jobs:
        mine = outputs[start : start + job.n_rows]
        start += job.n_rows
        try:
            outcomes.append(Outcome(job, value=job.finish(mine), stats=stats))
        except Exception as exc:
            log.error("request %s failed after the model", job.request_id, exc_info=exc)
            outcomes.append(Outcome(job, error=from_model_error(exc), stats=stats))
    return outcomes
