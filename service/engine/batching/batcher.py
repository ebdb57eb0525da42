"""The face the routes see: hand in validated rows, await the result (or a 504 / a dropped job).

Routes build the batch key and rows (validation happens before anything is queued); the batcher
queues them with the model's worker and waits for whichever comes first: the result, the
request's deadline, or the client disconnecting (then the job is dropped if it has not run).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from service.engine.batching.device import DeviceRuntime
from service.engine.batching.job import Job, JobResult
from service.engine.batching.policy import BatchKey, Limits
from service.engine.batching.worker import ModelWorker
from service.engine.servables.base import ServedModel
from service.errors import ClientDisconnected, ModelNotFound, RequestTimeout
from service.observability.metrics import Metrics
from service.observability.spans import trace_job

Disconnected = Callable[[], Awaitable[Any]]


class Batcher:
    """All model workers of one process."""

    def __init__(
        self,
        servables: list[ServedModel],
        limits: Limits,
        max_queue: int,
        timeout_s: float,
        runtime: DeviceRuntime,
        metrics: Metrics,
    ) -> None:
        self.timeout_s = timeout_s
        self.metrics = metrics
        self.workers = {
            s.name: ModelWorker(s, limits, max_queue, runtime, metrics) for s in servables
        }

    def start(self) -> None:
        for worker in self.workers.values():
            worker.start()

    def warm_up(self) -> dict[str, dict[str, float]]:
        """Warm every model on every backend it serves (blocking)."""
        return {name: worker.warm_up() for name, worker in self.workers.items()}

    async def drain(self, grace_s: float) -> bool:
        """Finish every queued request within ``grace_s`` (all workers in parallel)."""
        results = await asyncio.gather(*(w.drain(grace_s) for w in self.workers.values()))
        return all(results)

    async def submit(
        self,
        model: str,
        key: BatchKey,
        rows: list[Any],
        lengths: list[int],
        finish: Callable[[list[Any]], Any],
        disconnected: Disconnected | None = None,
        request_id: str = "",
        priority: int = 0,
    ) -> JobResult:
        """Queue rows for ``model`` and await their result (``priority``: lower runs first).

        Raises:
            QueueFull, ShuttingDown: refused at once.
            RequestTimeout: not answered within the request timeout.
            ClientDisconnected: the client left first (its job is dropped).
            ServiceError: whatever the batch run gave this job (422, 507, 500).
        """
        worker = self.workers.get(model)
        if worker is None:
            raise ModelNotFound(f"model {model!r} is not loaded")
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        job = Job(
            key=key,
            rows=rows,
            lengths=lengths,
            finish=finish,
            future=loop.create_future(),
            enqueued_at=now,
            deadline=now + self.timeout_s,
            request_id=request_id,
            priority=priority,
        )
        worker.submit(job)
        watcher = asyncio.ensure_future(disconnected()) if disconnected else None
        waiting: set[asyncio.Future[Any]] = {job.future}
        if watcher is not None:
            waiting.add(watcher)
        try:
            done, _ = await asyncio.wait(
                waiting, timeout=self.timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            if watcher is not None:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watcher
            if not job.future.done():
                job.cancelled = True  # timed out, client left, or the handler was cancelled
        if job.future.done():
            try:
                return trace_job(model, job, job.future.result())  # no-op untraced
            except RequestTimeout:
                self.metrics.rejections.labels(model, "timeout").inc()
                raise
        if watcher is not None and watcher in done:
            self.metrics.rejections.labels(model, "client_disconnected").inc()
            raise ClientDisconnected("the client closed the connection before the answer")
        self.metrics.rejections.labels(model, "timeout").inc()
        raise RequestTimeout(f"no answer within the request timeout of {self.timeout_s:g} s")
