"""Running one batch on the worker thread, with split-and-retry so one request cannot sink others.

The batch the policy formed is the forward pass that runs. Only a lone request over a limit
(more rows than ``max_batch_size``, more padded tokens than ``max_batch_tokens``, an estimated
peak over the memory budget or estimated seconds over the time slice: the policy stops adding
requests before) runs in parts of as many rows as fit
(:func:`~service.engine.batching.policy.part_rows`), and the outputs are joined in order. A
:class:`BatchRun` runs one part per :meth:`~BatchRun.step` (one call on the worker thread each),
so the worker can run other requests' batches between them; :meth:`BatchRun.run_to_end` runs them all.

A failed batch of several requests is retried in smaller groups: a work list of request ranges
(``start:stop`` of the batch), one forward pass per :meth:`~BatchRun.step` (each a worker turn,
like a part, so other batches run between them and no retry holds the worker past the time
slice). A failed range is split in halves and both halves are tried; what happens next depends
on what the failure says and on whether both halves failed (:meth:`BatchRun._judge`):

* out of device memory: the batch's composition matters, so a failed half is split again, down
  to a single request, which then gets a clear ``out_of_memory`` error;
* any other error: while exactly one half fails the fault looks like one request's, so that
  half is split again (one bad request among ``n`` costs ``1 + 2*ceil(log2 n)`` passes and
  fails alone). When *both* halves fail, splitting on would cost about two passes per request
  (``2n - 1`` in all for a fault on every row), so a refusal of the input (a 422: a row's
  content, and every request must get its own answer) tries the requests one at a time
  (``n + 3`` passes when every row is refused), and a server fault (a 500) fails them all with
  it (3 passes), as TEI fails a batch its backend could not run (``core/src/infer.rs``).

The work list is a stack, so retries run depth first: both halves of a range, then everything
the first half needs, then everything the second half needs. A range whose clients all left is
answered without a forward pass.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from service.engine.batching.device import DeviceRuntime, is_out_of_memory
from service.engine.batching.job import BatchStats, Job
from service.engine.batching.policy import Limits, padded_tokens, part_rows
from service.errors import ClientDisconnected, OutOfDeviceMemory, from_model_error

log = logging.getLogger("attnserve.batching")

RunRows = Callable[[list[Any]], list[Any]]
# Estimated peak bytes of one forward pass of (rows, longest row), for this batch's key.
RowsMemory = Callable[[int, int], int]
# Estimated seconds of one forward pass of (rows, longest row); None: not measured.
RowsSeconds = Callable[[int, int], float | None]


@dataclass
class Outcome:
    """What one job got: a value or an error, and the (sub-)batch it ran in."""

    job: Job
    value: Any = None
    error: Exception | None = None
    stats: BatchStats | None = None


class _Role(enum.Enum):
    """What a range of the batch's requests is in the work list for."""

    WHOLE = "whole"  # the batch as the policy formed it
    SPLIT = "split"  # failed with several requests: try both halves (no forward pass itself)
    HALF = "half"  # one half of a split: judged with the other half once both ran
    ALONE = "alone"  # one request of a refused split: its outcome is its answer


@dataclass(frozen=True)
class _Task:
    """Requests ``start:stop`` of the batch, and why they are in the work list."""

    start: int
    stop: int
    role: _Role
    failure: Exception | None = None  # for a split: what the range failed with


@dataclass
class _Tried:
    """A range that ran: every job's outcome, and what the model raised if it failed."""

    task: _Task
    outcomes: list[Outcome]
    failure: Exception | None = None


class _Group:
    """Some of a batch's requests on their way through the model, a part at a time: all their
    rows in one forward pass or, for a lone request over a limit, parts of :attr:`part` rows,
    longest first (so each part pads to rows of its own length)."""

    def __init__(
        self,
        task: _Task,
        jobs: list[Job],
        limits: Limits,
        memory: RowsMemory | None,
        seconds: RowsSeconds | None,
    ) -> None:
        self.task, self.jobs = task, jobs
        self.rows = [row for job in jobs for row in job.rows]
        self.lengths = [n for job in jobs for n in job.lengths]
        self.longest = longest = max(self.lengths, default=0)
        self.part = part_rows(
            len(self.rows),
            longest,
            limits,
            None if memory is None else lambda n: memory(n, longest),
            None if seconds is None else lambda n: seconds(n, longest),
        )
        self.done = 0  # rows run so far, in :attr:`order`
        self.order = list(range(len(self.rows)))
        if self.part < len(self.rows):
            self.order.sort(key=lambda i: -self.lengths[i])
        self.outputs: list[Any] = [None] * len(self.rows)
        self.totals = _Totals()
        if self.parts > 1:
            log.info(
                "request %s (%d rows of up to %d) is over a batch limit: %d parts of %d rows",
                jobs[0].request_id,
                len(self.rows),
                longest,
                self.parts,
                self.part,
            )

    @property
    def parts(self) -> int:
        """Forward passes the group takes."""
        return max(1, -(-len(self.rows) // self.part))

    @property
    def abandoned(self) -> bool:
        """Nobody waits for the answer any more (every client left or timed out)."""
        return all(job.cancelled for job in self.jobs)


class BatchRun:
    """One batch on its way through the model, a forward pass at a time.

    Each :meth:`step` (on the worker thread) runs the next forward pass: the whole batch, or for
    a lone request over a limit its next :func:`~service.engine.batching.policy.part_rows` rows,
    longest first; after a failure, the next retry (see the module docstring). After a group's
    last part its outputs are joined in the rows' order and each job's ``finish`` runs once on
    all of its rows. Stats add up the parts: ``inference_s`` is their sum (not the time other
    batches ran between them), ``rows`` and ``tokens`` describe one forward pass, and the
    memory figures are the largest part's; a request answered by a retry gets its retry's.

    Args:
        jobs: the batch, in order.
        run_rows: the model on a list of rows.
        runtime: device, inference context, memory readings.
        backend: the batch's attention backend (for the inference context).
        limits: batch limits, which set the part size.
        on_split: called when a failed batch of several requests is split in two.
        memory: estimated peak bytes of (rows, longest) for this batch's key.
        seconds: estimated seconds of (rows, longest) for this batch's key (the time slice).
    """

    def __init__(
        self,
        jobs: list[Job],
        run_rows: RunRows,
        runtime: DeviceRuntime,
        backend: str,
        limits: Limits,
        on_split: Callable[[], None] = lambda: None,
        memory: RowsMemory | None = None,
        seconds: RowsSeconds | None = None,
    ) -> None:
        self.jobs = jobs
        self._run_rows, self._runtime, self._backend = run_rows, runtime, backend
        self._limits, self._on_split = limits, on_split
        self._memory, self._seconds = memory, seconds
        self.started_at = time.monotonic()  # when it left the queue
        # When its first forward pass began: its requests' queue time ends here, so a wait for
        # a thread shared with another model's batch counts as queueing (x-queue-time-ms).
        self.first_pass_at: float | None = None
        # The group whose next forward pass the next step runs: the whole batch first.
        self._group = self._new_group(_Task(0, len(jobs), _Role.WHOLE))
        self.part, self.parts = self._group.part, self._group.parts
        self._todo: list[_Task] = []  # retries still to run, the next one last
        self._first_half: _Tried | None = None  # a split's first half, waiting for the second
        self._answers: list[Outcome | None] = [None] * len(jobs)

    def step(self) -> list[Outcome] | None:
        """Run the next forward pass (blocking: call on the worker thread). None while parts
        or retries remain; else every job's outcome: after the last pass, on a failure that
        no retry can help, or, before a part after the first, with
        :class:`~service.errors.ClientDisconnected` when nobody waits."""
        if self.first_pass_at is None:
            self.first_pass_at = time.monotonic()
        result = self._advance(self._group)
        if result is None:
            return None  # the group's next part runs next turn
        self._settle(self._group, result)
        return self._next()

    def run_to_end(self) -> list[Outcome]:
        """Every remaining pass back to back (blocking); every job's outcome."""
        while (outcomes := self.step()) is None:
            pass
        return outcomes

    def _new_group(self, task: _Task) -> _Group:
        jobs = self.jobs[task.start : task.stop]
        return _Group(task, jobs, self._limits, self._memory, self._seconds)

    def _advance(self, group: _Group) -> list[Outcome] | Exception | None:
        """One forward pass of ``group``: None while parts remain, else its jobs' outcomes
        (or, before a part after the first, ``ClientDisconnected`` when nobody waits), or
        what the model raised."""
        if group.done and group.abandoned:
            log.info(
                "request %s: stopped after %d of %d rows: nobody waits",
                group.jobs[0].request_id,
                group.done,
                len(group.rows),
            )
            return _gone(group.jobs)
        chunk = group.order[group.done : group.done + group.part]
        runtime = self._runtime
        started = time.perf_counter()
        baseline = runtime.reset_peak()
        try:
            try:
                with runtime.inference(self._backend):
                    outputs = self._run_rows([group.rows[i] for i in chunk])
            finally:
                measured = runtime.peak_above(baseline)
            if len(outputs) != len(chunk):
                raise RuntimeError(f"model returned {len(outputs)} outputs for {len(chunk)} rows")
        except Exception as exc:
            if is_out_of_memory(exc):
                runtime.after_out_of_memory()
            return exc
        group.totals.add(time.perf_counter() - started, runtime.peak_bytes(), measured)
        for i, out in zip(chunk, outputs, strict=True):
            group.outputs[i] = out
        group.done += len(chunk)
        return None if group.done < len(group.rows) else self._finish(group)

    def _settle(self, group: _Group, result: list[Outcome] | Exception) -> None:
        """Act on how ``group`` ended (its outcomes, or the failure of one of its passes)."""
        task = group.task
        if isinstance(result, Exception):
            if task.role is _Role.WHOLE and len(group.jobs) > 1:
                self._todo.append(_Task(task.start, task.stop, _Role.SPLIT, result))
                return
            tried = _Tried(task, self._errors(group, result), result)
        else:
            tried = _Tried(task, result)
        if task.role is not _Role.HALF:
            self._answer(tried.outcomes, task.start)
        elif self._first_half is None:
            self._first_half = tried
        else:
            first, self._first_half = self._first_half, None
            self._judge(first, tried)

    def _judge(self, first: _Tried, second: _Tried) -> None:
        """Both halves of a split ran: answer each, or push its retries (module docstring)."""
        both_failed = first.failure is not None and second.failure is not None
        for half in (second, first):  # a stack: the first half's retries go on top
            task, failure = half.task, half.failure
            if failure is None or task.stop - task.start == 1:
                self._answer(half.outcomes, task.start)
            elif is_out_of_memory(failure) or not both_failed:
                self._todo.append(_Task(task.start, task.stop, _Role.SPLIT, failure))
            elif from_model_error(failure).status < 500:  # each row's input: each its own answer
                self._todo += [
                    _Task(i, i + 1, _Role.ALONE) for i in range(task.stop - 1, task.start - 1, -1)
                ]
            else:
                self._answer(half.outcomes, task.start)  # a server fault on both halves: all fail

    def _next(self) -> list[Outcome] | None:
        """Move to the next retry that needs a forward pass, doing on the way what needs none
        (splitting a failed range, answering a range whose clients all left): None when one
        is ready for the next step, else every job's outcome."""
        while self._todo:
            task = self._todo.pop()
            if task.role is _Role.SPLIT:
                self._split(task)
                continue
            group = self._new_group(task)
            if group.abandoned:
                self._settle(group, _gone(group.jobs))
                continue
            self._group = group
            return None
        assert all(outcome is not None for outcome in self._answers)
        return [outcome for outcome in self._answers if outcome is not None]

    def _split(self, task: _Task) -> None:
        """Push both halves of ``task``'s range (by request), the first on top."""
        n, failure = task.stop - task.start, task.failure
        if failure is not None and is_out_of_memory(failure):
            log.warning("out of memory on a batch of %d requests: splitting", n)
        else:
            log.warning("batch of %d requests failed (%r): bisecting", n, failure)
        self._on_split()
        middle = task.start + n // 2
        self._todo.append(_Task(middle, task.stop, _Role.HALF))
        self._todo.append(_Task(task.start, middle, _Role.HALF))

    def _answer(self, outcomes: list[Outcome], start: int) -> None:
        self._answers[start : start + len(outcomes)] = outcomes

    def _errors(self, group: _Group, exc: Exception) -> list[Outcome]:
        """Every job of ``group``, failed together with ``exc``, gets the error a client sees."""
        jobs = group.jobs
        if is_out_of_memory(exc):
            rows = sum(job.n_rows for job in jobs)
            error: Exception = OutOfDeviceMemory(
                f"this request ({rows} rows, longest {group.longest}) does not fit in "
                "device memory even on its own; send fewer or shorter inputs"
            )
        else:
            error = from_model_error(exc)
            if error.status >= 500:  # ours, not the caller's: one line with the traceback
                ids = ", ".join(job.request_id for job in jobs)
                log.error("request %s failed in the model", ids, exc_info=exc)
        return [Outcome(job, error=error) for job in jobs]

    def _finish(self, group: _Group) -> list[Outcome]:
        totals = group.totals
        stats = BatchStats(
            rows=group.part,
            requests=len(group.jobs),
            tokens=padded_tokens(group.part, group.longest),
            inference_s=totals.inference_s,
            peak_memory_bytes=totals.peak,
            memory_estimate_bytes=(
                None if self._memory is None else self._memory(group.part, group.longest)
            ),
            memory_measured_bytes=totals.measured,
        )
        outcomes, start = [], 0
        for job in group.jobs:
            mine = group.outputs[start : start + job.n_rows]
            start += job.n_rows
            try:
                outcomes.append(Outcome(job, value=job.finish(mine), stats=stats))
            except Exception as exc:
                log.error("request %s failed after the model", job.request_id, exc_info=exc)
                outcomes.append(Outcome(job, error=from_model_error(exc), stats=stats))
        return outcomes


def _gone(jobs: list[Job]) -> list[Outcome]:
    """Every job's answer when its clients left: no forward pass runs for them."""
    gone = ClientDisconnected("the client left or timed out before the answer")
    return [Outcome(job, error=gone) for job in jobs]


@dataclass
class _Totals:
    """A batch's figures over its parts: seconds summed, memory readings at their largest."""

    inference_s: float = 0.0
    peak: int | None = None
    measured: int | None = None

    def add(self, seconds: float, peak: int | None, measured: int | None) -> None:
        self.inference_s += seconds
        if peak is not None:
            self.peak = max(peak, self.peak or 0)
        if measured is not None:
            self.measured = max(measured, self.measured or 0)
