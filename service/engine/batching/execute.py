"""Running one batch on the worker thread, with split-and-retry so one request cannot sink others.

The batch the policy formed is the forward pass that runs. Only a lone request over a limit
(more rows than ``max_batch_size``, more padded tokens than ``max_batch_tokens``, an estimated
peak over the memory budget or estimated seconds over the time slice: the policy stops adding
requests before) runs in parts of as many rows as fit
(:func:`~service.engine.batching.policy.part_rows`), and the outputs are joined in order. A
:class:`BatchRun` runs one part per :meth:`~BatchRun.step` (one call on the worker thread each),
so the worker can run other requests' batches between them; :meth:`BatchRun.run_to_end` runs them all.

A failed batch of several requests is retried in smaller groups, one forward pass per
:meth:`~BatchRun.step` (each a worker turn, like a part, so other batches run between them and
no retry holds the worker past the time slice), by what the failure says (:meth:`BatchRun._recover`):

* out of device memory: the batch's composition matters, so it is split in halves (by request)
  and each half retried, down to a single request, which then gets a clear ``out_of_memory``
  error;
* any other error: halves are tried, and while exactly one half fails the fault looks like one
  request's, so that half is bisected on (one bad request among ``n`` costs ``1 + 2*ceil(log2
  n)`` passes and fails alone). When *both* halves fail, bisecting on would cost about two passes
  per request (``2n - 1`` in all for a fault on every row), so a refusal of the input (a 422:
  a row's content, and every request must get its own answer) tries the requests one at a time
  (``n + 3`` passes when every row is refused), and a server fault (a 500) fails them all with it
  (3 passes), as TEI fails a batch its backend could not run (``core/src/infer.rs``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
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


class BatchRun:
    """One batch on its way through the model, a part at a time.

    Each :meth:`step` (on the worker thread) runs the next forward pass: the whole batch, or for
    a lone request over a limit its next :func:`~service.engine.batching.policy.part_rows` rows,
    longest first (so each part pads to rows of its own length). After the last part the
    outputs are joined in the rows' order and each job's ``finish`` runs once on all of its
    rows. Stats add up the parts: ``inference_s`` is their sum (not the time other batches ran
    between them), ``rows`` and ``tokens`` describe one forward pass, and the memory figures are
    the largest part's.

    Args:
        jobs: the batch, in order.
        run_rows: the model on a list of rows.
        runtime: device, inference context, memory readings.
        backend: the batch's attention backend (for the inference context).
        limits: batch limits, which set the part size.
        on_split: called when a failed batch of several requests is split in two.
        memory: estimated peak bytes of (rows, longest) for this batch's key.
        seconds: estimated seconds of (rows, longest) for this batch's key (the time slice).
        recover: retry a failed batch of several requests in smaller groups (see the module
            docstring); False: every job gets the error (a group the recovery itself tries).
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
        recover: bool = True,
    ) -> None:
        self.jobs = jobs
        self._recovers = recover
        self.failure: Exception | None = None  # what the model raised, if it failed
        # After a failure: the retries still to run, one forward pass per step.
        self._recovery: Generator[None, None, list[Outcome]] | None = None
        self._run_rows, self._runtime, self._backend = run_rows, runtime, backend
        self._limits, self._on_split = limits, on_split
        self._memory, self._seconds = memory, seconds
        self.started_at = time.monotonic()  # when it left the queue (its requests' queue time)
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
        self.done = 0  # rows run so far, in :attr:`_order`
        self._order = list(range(len(self.rows)))
        if self.part < len(self.rows):  # longest first: each part pads to its own length
            self._order.sort(key=lambda i: -self.lengths[i])
        self._outputs: list[Any] = [None] * len(self.rows)
        self._stats = _Totals()
        if self.parts > 1:
            log.info(
                "request %s (%d rows of up to %d) is over a batch limit: %d parts of %d rows",
                jobs[0].request_id,
                len(self.rows),
                longest,
                self.parts,
                self.part,
            )

    def _of(self, jobs: list[Job]) -> BatchRun:
        """A run of ``jobs`` with this run's model, device, limits and estimates, that reports
        a failure (:attr:`failure`) for :meth:`_recover` to act on instead of retrying itself."""
        return BatchRun(
            jobs,
            self._run_rows,
            self._runtime,
            self._backend,
            self._limits,
            self._on_split,
            self._memory,
            self._seconds,
            recover=False,
        )

    @property
    def parts(self) -> int:
        """Forward passes the batch takes."""
        return max(1, -(-len(self.rows) // self.part))

    @property
    def abandoned(self) -> bool:
        """Nobody waits for the answer any more (every client left or timed out)."""
        return all(job.cancelled for job in self.jobs)

    def step(self) -> list[Outcome] | None:
        """Run the next forward pass (blocking: call on the worker thread). None while parts
        or retries remain (a failed batch of several requests is retried in smaller groups, one
        pass per step, see :meth:`_recover`); else every job's outcome: after the last part, on
        a failure, or, before a part after the first, :class:`~service.errors.ClientDisconnected`
        when nobody waits."""
        if self._recovery is not None:
            return self._resume()
        if self.done and self.abandoned:
            log.info(
                "request %s: stopped after %d of %d rows: nobody waits",
                self.jobs[0].request_id,
                self.done,
                len(self.rows),
            )
            gone = ClientDisconnected("the client left or timed out before the answer")
            return [Outcome(job, error=gone) for job in self.jobs]
        chunk = self._order[self.done : self.done + self.part]
        runtime = self._runtime
        started = time.perf_counter()
        baseline = runtime.reset_peak()
        try:
            try:
                with runtime.inference(self._backend):
                    outputs = self._run_rows([self.rows[i] for i in chunk])
            finally:
                measured = runtime.peak_above(baseline)
            if len(outputs) != len(chunk):
                raise RuntimeError(f"model returned {len(outputs)} outputs for {len(chunk)} rows")
        except Exception as exc:
            return self._failed(exc)
        self._stats.add(time.perf_counter() - started, runtime.peak_bytes(), measured)
        for i, out in zip(chunk, outputs, strict=True):
            self._outputs[i] = out
        self.done += len(chunk)
        return None if self.done < len(self.rows) else self._finish()

    def run_to_end(self) -> list[Outcome]:
        """Every remaining part back to back (blocking); every job's outcome."""
        while (outcomes := self.step()) is None:
            pass
        return outcomes

    def _failed(self, exc: Exception) -> list[Outcome] | None:
        self.failure = exc
        if is_out_of_memory(exc):
            self._runtime.after_out_of_memory()
        if len(self.jobs) > 1 and self._recovers:
            self._recovery = self._recover(self.jobs, exc)
            return self._resume()  # the failed pass was this turn: retries start next turn
        return self._errors(self.jobs, exc)

    def _resume(self) -> list[Outcome] | None:
        """Advance the recovery by one forward pass; its outcomes once it is done."""
        assert self._recovery is not None
        try:
            next(self._recovery)
        except StopIteration as done:
            return done.value
        return None

    def _recover(self, jobs: list[Job], exc: Exception) -> Generator[None, None, list[Outcome]]:
        """Every job's outcome after ``jobs`` failed together with ``exc``: a generator that
        yields before each forward pass, so each pass is one :meth:`step` (a worker turn).

        Group testing by halving (one bad request among ``n`` is found in ``2*ceil(log2 n)``
        passes) while the evidence points at one request; see the module docstring for when
        both halves fail."""
        if len(jobs) == 1:
            return self._errors(jobs, exc)
        oom = is_out_of_memory(exc)
        if oom:
            log.warning("out of memory on a batch of %d requests: splitting", len(jobs))
        else:
            log.warning("batch of %d requests failed (%r): bisecting", len(jobs), exc)
        self._on_split()
        half = len(jobs) // 2
        tried = []
        for group in (jobs[:half], jobs[half:]):
            run = self._of(group)
            outcomes = yield from self._attempt(run)
            tried.append((group, outcomes, run.failure))
        both_failed = all(failure is not None for _, _, failure in tried)
        result: list[Outcome] = []
        for group, outcomes, failure in tried:
            if failure is None or len(group) == 1:
                result += outcomes
            elif is_out_of_memory(failure) or not both_failed:
                result += yield from self._recover(group, failure)
            elif from_model_error(failure).status < 500:  # each row's input: each gets its own
                for job in group:
                    result += yield from self._attempt(self._of([job]))
            else:
                result += outcomes  # a server fault on both halves: all of them fail with it
        return result

    def _attempt(self, run: BatchRun) -> Generator[None, None, list[Outcome]]:
        """Run ``run`` to its end, yielding before each forward pass; a group whose clients all
        left is answered without one."""
        if run.abandoned:
            gone = ClientDisconnected("the client left or timed out before the answer")
            return [Outcome(job, error=gone) for job in run.jobs]
        while True:
            yield
            if (outcomes := run.step()) is not None:
                return outcomes

    def _errors(self, jobs: list[Job], exc: Exception) -> list[Outcome]:
        """Every job of ``jobs``, failed together with ``exc``, gets the error a client sees."""
        if is_out_of_memory(exc):
            rows = sum(job.n_rows for job in jobs)
            error: Exception = OutOfDeviceMemory(
                f"this request ({rows} rows, longest {self.longest}) does not fit in "
                "device memory even on its own; send fewer or shorter inputs"
            )
        else:
            error = from_model_error(exc)
            if error.status >= 500:  # ours, not the caller's: one line with the traceback
                ids = ", ".join(job.request_id for job in jobs)
                log.error("request %s failed in the model", ids, exc_info=exc)
        return [Outcome(job, error=error) for job in jobs]

    def _finish(self) -> list[Outcome]:
        totals = self._stats
        stats = BatchStats(
            rows=self.part,
            requests=len(self.jobs),
            tokens=padded_tokens(self.part, self.longest),
            inference_s=totals.inference_s,
            peak_memory_bytes=totals.peak,
            memory_estimate_bytes=(
                None if self._memory is None else self._memory(self.part, self.longest)
            ),
            memory_measured_bytes=totals.measured,
        )
        outcomes, start = [], 0
        for job in self.jobs:
            mine = self._outputs[start : start + job.n_rows]
            start += job.n_rows
            try:
                outcomes.append(Outcome(job, value=job.finish(mine), stats=stats))
            except Exception as exc:
                log.error("request %s failed after the model", job.request_id, exc_info=exc)
                outcomes.append(Outcome(job, error=from_model_error(exc), stats=stats))
        return outcomes


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
