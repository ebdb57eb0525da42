"""One worker per model: a bounded queue, an asyncio loop that asks the policy what to run, and
one thread that owns the model and runs the batches (so the event loop keeps answering).

Memory: the worker prices batches with the model's own estimate
(:meth:`~service.engine.servables.base.ServedModel.memory_estimate`, cached per key, rows and
length) and holds them under ``limits.max_batch_memory``; a request whose single row is over it
is refused on arrival (:func:`~service.engine.batching.admission.memory_refusal`, a 422 naming
the backends that fit).

Time: warm-up measures each backend's work rate on this device
(:mod:`service.engine.batching.cost`); a request whose estimated compute is over
``limits.max_request_seconds`` is refused on arrival
(:func:`~service.engine.batching.admission.compute_refusal`, a 422 saying how many rows, which
options or which backends would fit), and no batch grows past it, so no request holds the worker
for longer than its client would wait.

Turns: no forward pass holds the worker much past ``limits.slice_seconds`` of estimated compute
(the time slice). A batch over a limit (rows, tokens, memory or the slice) runs as a
:class:`~service.engine.batching.execute.BatchRun`, one executor call per part; between two
parts the loop asks :func:`~service.engine.batching.policy.between_parts` whether the requests
that arrived meanwhile get a batch first, so a one-text request never waits behind all of a
large one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from service.engine.batching.admission import compute_refusal, memory_refusal
from service.engine.batching.cost import CostModel, measure_backend
from service.engine.batching.device import DeviceRuntime, model_thread, torch_thread
from service.engine.batching.execute import BatchRun, Outcome
from service.engine.batching.job import Job, JobResult
from service.engine.batching.policy import BatchKey, Limits, between_parts, next_batch
from service.engine.servables.base import ServedModel
from service.errors import QueueFull, RequestTimeout, ShuttingDown
from service.observability.metrics import Metrics

log = logging.getLogger("attnserve.batching")


class ModelWorker:
    """Queues requests for one model and runs them in batches on its own thread.

    Args:
        servable: the model.
        limits: batch limits.
        max_queue: most waiting requests; more get :class:`QueueFull` at once.
        runtime: device, inference context, memory readings.
        metrics: where queue depth, batch shapes and timings go.
    """

    def __init__(
        self,
        servable: ServedModel,
        limits: Limits,
        max_queue: int,
        runtime: DeviceRuntime,
        metrics: Metrics,
    ) -> None:
        self.servable = servable
        self.name = servable.name
        self.limits = limits
        self.max_queue = max_queue
        self.runtime = runtime
        self.metrics = metrics
        self._pending: list[Job] = []
        self._wakeup = asyncio.Event()
        self._accepting = True
        self._busy = False
        self._free_since: float | None = None
        self._parted: BatchRun | None = None  # a batch between two of its parts
        self._running: BatchRun | None = None  # the batch on the worker thread now
        self._parts_turn = False  # the last turn went to the others: its next part runs
        self._batch_seconds = 0.05  # running estimate, for Retry-After
        # CUDA: a thread of its own. CPU: one of its own with one intra-op torch thread, else
        # the process's one torch thread, shared by every model (see device.model_thread).
        own = (
            ThreadPoolExecutor(1, thread_name_prefix=f"attnserve-{self.name}")
            if runtime.is_cuda
            else model_thread(self.name)
        )
        self._own_executor = own is not None
        self._executor = own if own is not None else torch_thread()
        self._task: asyncio.Task[None] | None = None
        self.cost = CostModel()  # work rates per backend, measured by warm_up
        # Pure arithmetic per (key, rows, longest), asked for on every decision: cached.
        self.memory_estimate = functools.lru_cache(maxsize=4096)(self._memory_estimate)
        self._work_estimate = functools.lru_cache(maxsize=4096)(self._work)

    def _memory_estimate(self, key: BatchKey, rows: int, longest: int) -> int:
        """Estimated peak activation bytes of a forward pass of ``rows`` rows of ``longest``."""
        return self.servable.memory_estimate(key.call, rows, longest)

    def _work(self, key: BatchKey, rows: int, longest: int) -> float:
        return self.servable.work_estimate(key.call, rows, longest)

    def seconds_estimate(self, key: BatchKey, rows: int, longest: int) -> float | None:
        """Estimated seconds of a forward pass of ``rows`` rows of ``longest`` on this device
        (None before warm-up measured the backend)."""
        work = self._work_estimate(key, rows, longest)
        return self.cost.seconds(key.backend, work, key.call.options, key.precision)

    # ------------------------------------------------------------------ queue side

    @property
    def depth(self) -> int:
        """Requests waiting (not counting the batch running now)."""
        return len(self._pending)

    def submit(self, job: Job) -> None:
        """Queue ``job``; :class:`QueueFull` or :class:`ShuttingDown` when it cannot wait, the
        refusals of :mod:`~service.engine.batching.admission` when it cannot fit (one of its rows
        alone over the memory budget, its estimated compute over the per-request limit)."""
        if not self._accepting:
            self.metrics.rejections.labels(self.name, "shutting_down").inc()
            raise ShuttingDown("the server is shutting down; retry on another replica")
        self._check_memory(job)
        self._check_compute(job)
        job.arrived_idle = not self._pending and not self._busy and self._parted is None
        if len(self._pending) >= self.max_queue:
            self.metrics.rejections.labels(self.name, "queue_full").inc()
            raise QueueFull(
                f"the queue of {self.name} is full ({self.max_queue} requests waiting); retry later",
                retry_after_s=self._retry_after_s(),
            )
        self._pending.append(job)
        self.metrics.queue_depth.labels(self.name).set(len(self._pending))
        self._wakeup.set()

    def _check_memory(self, job: Job) -> None:
        budget = self.limits.max_batch_memory
        if budget is None:
            return
        refusal = memory_refusal(self.servable, job.key, job.longest, budget, self.memory_estimate)
        if refusal is not None:
            self.metrics.rejections.labels(self.name, "memory_budget").inc()
            raise refusal

    def _check_compute(self, job: Job) -> None:
        budget = self.limits.max_request_seconds
        if budget is None:
            return
        refusal = compute_refusal(
            self.servable, job.key, job.n_rows, job.longest, budget, self.seconds_estimate
        )
        if refusal is not None:
            self.metrics.rejections.labels(self.name, "compute_budget").inc()
            raise refusal

    def _retry_after_s(self) -> int:
        batches_ahead = self.max_queue / max(1, self.limits.max_batch_size)
        return max(1, math.ceil(batches_ahead * self._batch_seconds))

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the scheduling loop on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(
            self._loop(), name=f"worker-{self.name}"
        )

    def warm_up(self) -> dict[str, float]:
        """Run the warm-up batches of every served backend (blocking; call from a thread): a
        small batch, or for a compiled backend every shape bucket, so graphs compile here.

        Then times each backend's calibration batch to measure its work rate (:attr:`cost`),
        and each option variant ``auto`` may pick (warmed up and timed at its own options).

        Returns seconds per backend. Raises whatever the model raises: a model that cannot run
        its own warm-up batch must not report ready.
        """
        timings = {}
        for backend in self.servable.backends():
            started = time.perf_counter()
            batches = self.servable.warmup_batches(backend)
            for rows, call in batches:
                with self.runtime.inference(backend):
                    self.servable.run(rows, call)
            measure_backend(self.cost, self.servable, backend, self.runtime.inference)
            # The option variants auto may pick: warmed up and priced on their own.
            for variant in self.servable.measured_variants(backend):
                for rows, _ in batches:
                    with self.runtime.inference(backend):
                        self.servable.run(rows, variant)
                measure_backend(self.cost, self.servable, backend, self.runtime.inference, variant)
            timings[backend] = time.perf_counter() - started
        return timings

    async def drain(self, grace_s: float) -> bool:
        """Stop taking requests, finish the queued ones within ``grace_s``, stop.

        Returns True when everything queued was answered in time. When the grace period runs
        out, every request not yet answered gets :class:`ShuttingDown` (a 503) at once: the
        queued ones, the one between two of its parts, and those of the batch on the worker
        thread, whose forward pass cannot be interrupted and whose answer nobody would collect
        (the loop that would is cancelled), so an accepted request never waits for its timeout.
        """
        self._accepting = False
        self._wakeup.set()
        finished = True
        in_flight: list[Job] = []
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), grace_s)
            except TimeoutError:
                finished = False
                if self._running is not None:  # read before the cancel unwinds _step
                    in_flight = self._running.jobs
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        parted = self._parted.jobs if self._parted is not None else []
        for job in in_flight + parted + self._pending:
            if not job.future.done():
                job.future.set_exception(
                    ShuttingDown(
                        "the server shut down before this request was answered (its shutdown "
                        "grace period ran out); retry on another replica"
                    )
                )
        self._pending.clear()
        self._parted = self._running = None
        self.metrics.queue_depth.labels(self.name).set(0)
        if self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)
        return finished

    # ------------------------------------------------------------------ scheduling loop

    async def _loop(self) -> None:
        while True:
            now = time.monotonic()
            if self._parted is None:
                decision = next_batch(
                    self._pending,
                    now,
                    self.limits,
                    not self._accepting,
                    self._free_since,
                    self.memory_estimate,
                    self.seconds_estimate,
                )
            else:
                decision = between_parts(
                    self._pending,
                    now,
                    self.limits,
                    self._parts_turn,
                    self.memory_estimate,
                    self.seconds_estimate,
                )
            taken = set(decision.batch) | set(decision.expired) | set(decision.dropped)
            batch = [self._pending[i] for i in decision.batch]
            for i in decision.expired:
                job = self._pending[i]
                if not job.future.done():
                    job.future.set_exception(
                        RequestTimeout("the request waited in the queue past its timeout")
                    )
            if taken:
                self._pending = [j for i, j in enumerate(self._pending) if i not in taken]
                self.metrics.queue_depth.labels(self.name).set(len(self._pending))
            if decision.resume and self._parted is not None:
                await self._step(self._parted)
                continue
            if batch:
                await self._step(self._start(batch))
                continue
            if not self._pending and not self._accepting:
                return  # drained
            self._wakeup.clear()
            timeout = None if decision.wake_at is None else max(0.0, decision.wake_at - now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    def _start(self, batch: list[Job]) -> BatchRun:
        """A batch taken from the queue, ready for its first part."""
        key = batch[0].key

        def run_rows(rows: list[Any]) -> list[Any]:
            return self.servable.run(rows, key.call)

        def on_split() -> None:
            self.metrics.batch_splits.labels(self.name).inc()

        def memory(rows: int, longest: int) -> int:
            return self.memory_estimate(key, rows, longest)

        def seconds(rows: int, longest: int) -> float | None:
            return self.seconds_estimate(key, rows, longest)

        return BatchRun(
            batch, run_rows, self.runtime, key.backend, self.limits, on_split, memory, seconds
        )

    async def _step(self, run: BatchRun) -> None:
        """Run one forward pass of ``run`` on the worker thread; answer its requests when it
        is done, else keep it for its next turn (see :func:`between_parts`)."""
        parted = run is self._parted
        # A batch between two parts runs whole (between_parts picks ones of a single forward
        # pass): never two batches in parts at once.
        step = run.step if parted or self._parted is None else run.run_to_end
        started = time.monotonic()
        self._busy, self._running = True, run
        loop = asyncio.get_running_loop()
        try:
            outcomes = await loop.run_in_executor(self._executor, step)
        except Exception as exc:  # the executor itself failed (e.g. shut down)
            log.exception("batch of %s failed outside the model", self.name)
            outcomes = [Outcome(job, error=exc) for job in run.jobs]
        finally:
            self._busy = False
            self._free_since = time.monotonic()
        self._running = None  # not when cancelled: drain answers its jobs
        elapsed = time.monotonic() - started
        self._batch_seconds = 0.8 * self._batch_seconds + 0.2 * elapsed
        if outcomes is None:  # parts remain: the others get the next turn
            self._parted, self._parts_turn = run, False
            return
        if parted:
            self._parted = None
        elif self._parted is not None:  # a batch between two parts: the parts' turn
            self._parts_turn = True
        self._record(outcomes, run.first_pass_at or run.started_at)
        # Answers are out; the worker thread trims the heap before the next batch (if due).
        # Not awaited: on a shared thread the trim waits for another model's forward pass,
        # and this model's next batch would wait for it here, then again in the thread's queue.
        with contextlib.suppress(RuntimeError):  # the executor shut down while draining
            self._executor.submit(self._after_batch)

    def _after_batch(self) -> None:
        try:
            self.runtime.after_batch()
        except Exception:  # nobody awaits it: say so here
            log.exception("trimming the heap after a batch of %s failed", self.name)

    def _record(self, outcomes: list[Outcome], started: float) -> None:
        seen: set[int] = set()
        for outcome in outcomes:
            job, stats = outcome.job, outcome.stats
            series = (self.name, job.key.backend, job.key.precision)  # model, attention, precision
            queue_s = started - job.enqueued_at
            self.metrics.queue_duration.labels(*series).observe(queue_s)
            if stats is not None and id(stats) not in seen:
                seen.add(id(stats))
                self.metrics.inference_duration.labels(*series).observe(stats.inference_s)
                self.metrics.batch_rows.labels(*series).observe(stats.rows)
                self.metrics.batch_requests.labels(*series).observe(stats.requests)
                self.metrics.batch_tokens.labels(*series).observe(stats.tokens)
                if stats.peak_memory_bytes is not None:
                    self.metrics.batch_peak_memory.labels(self.name).observe(
                        stats.peak_memory_bytes
                    )
                if stats.memory_estimate_bytes is not None:
                    self.metrics.batch_memory_estimated.labels(*series).observe(
                        stats.memory_estimate_bytes
                    )
                if stats.memory_measured_bytes is not None:
                    self.metrics.batch_memory_measured.labels(*series).observe(
                        stats.memory_measured_bytes
                    )
            if outcome.error is not None and getattr(outcome.error, "type", "") == "out_of_memory":
                self.metrics.rejections.labels(self.name, "out_of_memory").inc()
            if job.future.done() or job.cancelled:
                continue  # the client left or timed out: nobody is waiting
            if outcome.error is not None:
                job.future.set_exception(outcome.error)
            else:
                assert stats is not None
                job.future.set_result(JobResult(outcome.value, queue_s, stats))
