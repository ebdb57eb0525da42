"""Every Prometheus metric the server exports, in one place (prefix ``attnserve_``, units in names).

Each app gets its own :class:`Metrics` on its own ``CollectorRegistry``, so tests that build
several apps in one process do not collide on the global registry.

With several worker processes (``--workers N``, see :mod:`service.runtime.workers`) the supervisor
sets ``PROMETHEUS_MULTIPROC_DIR`` before starting them: prometheus-client then keeps every value
in per-process files there and any worker's ``/metrics`` reads them all, so counters and histograms
add up across workers and each gauge says how it combines (``multiprocess_mode``). Gauges read
through a callable (memory) cannot be evaluated at scrape time in another process, so there
:meth:`Metrics.refresh` writes them, every second and before each scrape; the other gauges are
set as things happen.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal

import psutil
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Request latencies on CPU span ~1 ms (tiny forecast) to many seconds (a 512-token batch).
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
BATCH_ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
BATCH_TOKEN_BUCKETS = tuple(2**i for i in range(4, 21))  # 16 .. 1M
MEMORY_BUCKETS = tuple(2.0**i for i in range(20, 38))  # 1 MiB .. 128 GiB

CONTENT_TYPE = CONTENT_TYPE_LATEST
RUN_LABELS = ("model", "attention", "precision")
# How a gauge's worker processes combine; the live modes drop a worker's value once it exits.
LiveMode = Literal["livesum", "livemax", "livemin"]


class Metrics:
    """The collectors of one app. Labels: ``endpoint`` is the route path, ``attention`` the
    backend name and ``precision`` the copy of the weights that ran (``float32``, ``bfloat16``,
    ``int8``, ``float16``; "" where none applies), ``status`` the HTTP status code."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        # prometheus-client picks its value store when first imported, from the same variable.
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        self._watched: list[tuple[Gauge, Callable[[], float]]] = []
        r = self.registry
        self.requests = Counter(
            "attnserve_requests_total",
            "HTTP requests answered, by endpoint, model, attention backend, precision and status.",
            ["endpoint", "model", "attention", "precision", "status"],
            registry=r,
        )
        self.request_duration = Histogram(
            "attnserve_request_duration_seconds",
            "Time from request start to response start.",
            ["endpoint", "model", "attention", "precision", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_duration = self._by_run(
            "attnserve_queue_duration_seconds",
            "Time a request waited in its model's queue before its batch started.",
            LATENCY_BUCKETS,
        )
        self.inference_duration = self._by_run(
            "attnserve_inference_duration_seconds",
            "Time one batch spent in the model.",
            LATENCY_BUCKETS,
        )
        self.batch_rows = self._by_run(
            "attnserve_batch_size_rows",
            "Rows (texts or series) in one batch run by the model.",
            BATCH_ROW_BUCKETS,
        )
        self.batch_requests = self._by_run(
            "attnserve_batch_size_requests",
            "Requests merged into one batch.",
            BATCH_ROW_BUCKETS,
        )
        self.batch_tokens = self._by_run(
            "attnserve_batch_tokens",
            "Padded tokens (texts) or time steps (series) in one batch: rows x longest row.",
            BATCH_TOKEN_BUCKETS,
        )
        self.queue_depth = self._gauge(
            "attnserve_queue_depth_requests",
            "Requests waiting in a model's queue (summed over worker processes).",
            "livesum",
            ("model",),
        )
        self.queue_capacity = self._gauge(
            "attnserve_queue_capacity_requests",
            "Most requests a model's queue holds (max_queue; summed over worker processes).",
            "livesum",
            ("model",),
        )
        self.requests_in_flight = self._gauge(
            "attnserve_requests_in_flight",
            "Model requests admitted and not yet answered (queued, batching or running).",
            "livesum",
        )
        self.auto_choices = Counter(
            "attnserve_auto_attention_choices_total",
            "Backends chosen for requests that asked for attention 'auto', by model, backend and "
            "precision.",
            ["model", "backend", "precision"],
            registry=r,
        )
        self.rejections = Counter(
            "attnserve_rejections_total",
            "Requests refused or dropped, by reason (queue_full, timeout, shutting_down, "
            "not_ready, client_disconnected, out_of_memory, memory_budget, compute_budget, "
            "unauthorized, "
            "body_too_large).",
            ["model", "reason"],
            registry=r,
        )
        self.batch_splits = Counter(
            "attnserve_batch_splits_total",
            "Batches split in two and retried after a device out-of-memory error.",
            ["model"],
            registry=r,
        )
        self.batch_peak_memory = Histogram(
            "attnserve_batch_peak_device_memory_bytes",
            "Peak device memory allocated while one batch ran (CUDA only).",
            ["model"],
            buckets=MEMORY_BUCKETS,
            registry=r,
        )
        self.batch_memory_estimated = self._by_run(
            "attnserve_batch_activation_memory_estimated_bytes",
            "The model's estimate of one batch's peak activation memory at its backend, rows "
            "and length (its largest part when over the budget); kept under the budget.",
            MEMORY_BUCKETS,
        )
        self.batch_memory_measured = self._by_run(
            "attnserve_batch_activation_memory_measured_bytes",
            "Measured peak memory one batch added above what was in use when it started: the "
            "CUDA allocator's peak on CUDA, the process's resident high-water mark on CPU "
            "(process-wide: overlapping batches of other models count too).",
            MEMORY_BUCKETS,
        )
        self.batch_memory_budget = self._gauge(
            "attnserve_batch_memory_budget_bytes",
            "Budget a batch's estimated peak activation memory is held under "
            "(max_batch_memory_mb; 0: no cap).",
            "livemax",
        )
        self.device_memory_allocated = self._gauge(
            "attnserve_device_memory_allocated_bytes",
            "Device memory held by tensors (CUDA; 0 on CPU).",
            "livesum",
        )
        self.device_memory_reserved = self._gauge(
            "attnserve_device_memory_reserved_bytes",
            "Device memory reserved by the caching allocator (CUDA; 0 on CPU).",
            "livesum",
        )
        self.device_memory_total = self._gauge(
            "attnserve_device_memory_total_bytes",
            "The device's memory (CUDA; 0 on CPU).",
            "livemax",
        )
        self.memory_limit = self._gauge(
            "attnserve_memory_limit_bytes",
            "Most resident memory the host or container allows (cgroup limit, else total RAM).",
            "livemax",
        )
        self.process_rss = self._gauge(
            "attnserve_process_resident_memory_bytes",
            "Resident set size of the server process (summed over worker processes).",
            "livesum",
        )
        self.ready = self._gauge(
            "attnserve_ready",
            "1 when models are loaded and warmed up and the server is not draining (every "
            "worker process).",
            "livemin",
        )
        self.models_loaded = self._gauge(
            "attnserve_models_loaded",
            "Models loaded and warmed up (in the worker process that has the fewest).",
            "livemin",
        )
        process = psutil.Process()
        self.watch(self.process_rss, lambda: float(process.memory_info().rss))

    def _by_run(self, name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
        """A histogram by the model, backend and precision that ran (queue, batch and memory)."""
        return Histogram(name, documentation, RUN_LABELS, buckets=buckets, registry=self.registry)

    def _gauge(
        self, name: str, documentation: str, mode: LiveMode, labels: tuple[str, ...] = ()
    ) -> Gauge:
        """A gauge that says how its worker processes' values combine (``mode``: prometheus-
        client's ``multiprocess_mode``, e.g. ``livesum``, ``livemax``, ``livemin``); without
        one, several workers would each export a series of their own."""
        return Gauge(name, documentation, labels, registry=self.registry, multiprocess_mode=mode)

    def watch(self, gauge: Gauge, read: Callable[[], float]) -> None:
        """Give ``gauge`` the value of ``read()``: at scrape time in one process, at each
        :meth:`refresh` with several."""
        if self.multiprocess:
            self._watched.append((gauge, read))
            gauge.set(read())
        else:
            gauge.set_function(read)

    def watch_device_memory(
        self, allocated: Callable[[], float], reserved: Callable[[], float]
    ) -> None:
        """Read device memory through these callables (the runtime owns torch)."""
        self.watch(self.device_memory_allocated, allocated)
        self.watch(self.device_memory_reserved, reserved)

    def serving(self, models: list[str], max_queue: int, device_total: float, limit: int) -> None:
        """What is fixed once the models are loaded: queue capacities, memory sizes; and a zero
        for each model's per-model counters, so dashboards and alerts see 0 rather than no data."""
        for model in models:
            self.queue_capacity.labels(model).set(max_queue)
            self.queue_depth.labels(model).set(0)
            self.batch_splits.labels(model)
        self.device_memory_total.set(device_total)
        self.memory_limit.set(limit)

    def refresh(self) -> None:
        """Write every watched gauge's current value (several processes only; a no-op else)."""
        for gauge, read in self._watched:
            gauge.set(read())

    def render(self) -> bytes:
        """The text exposition: this app's registry, or every worker process's values."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        self.refresh()
        merged = CollectorRegistry()
        MultiProcessCollector(merged)
        return generate_latest(merged)
