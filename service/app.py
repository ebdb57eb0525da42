"""The app factory and its lifespan: load models, warm up every backend, report ready, drain.

    from service.app import create_app
    app = create_app(Settings(models=["all-MiniLM-L6-v2"]))

Models are loaded in the lifespan, never at import, on a thread so the event loop keeps answering
``/healthz`` (and ``/readyz`` with a 503) while weights load and every backend warms up.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator

from fastapi import FastAPI

from service import __version__
from service.engine.batching import allocator
from service.engine.batching.batcher import Batcher
from service.engine.batching.device import (
    MIB,
    DeviceRuntime,
    configure_threads,
    select_device,
    torch_thread,
)
from service.engine.batching.host_memory import host_memory_limit
from service.engine.batching.policy import Limits
from service.engine.engine import Engine
from service.engine.registry import Loader, ModelLoadError, Registry, load_servables
from service.engine.served_names import with_served_names
from service.errors import install_error_handlers
from service.http.body_pool import BodyParsePool
from service.http.memory_trim import TrimAfterLargeBodies
from service.http.middleware import ApiKeyGate, BodyLimit, ConnectionRecycler, RequestContext
from service.http.routes import (
    classify,
    cohere,
    embeddings,
    encode,
    forecast,
    health,
    models,
    rerank,
    timeseries,
)
from service.http.routes.tei import sparse
from service.http.routes.tei import surface as tei
from service.http.routes.vllm import pooling as vllm_pooling
from service.http.routes.vllm import score as vllm_score
from service.http.routes.vllm import shared as vllm_shared
from service.observability import tracing
from service.observability.metrics import Metrics
from service.observability.spans import TraceRequests
from service.settings import Settings
from service.state import AppState

log = logging.getLogger("attnserve")


async def start_serving(state: AppState) -> None:
    """Load the models, warm up every backend each will serve, start the workers, mark ready."""
    settings, lifecycle, metrics = state.settings, state.lifecycle, state.metrics
    started = time.perf_counter()
    runtime = DeviceRuntime(
        select_device(settings.device), settings.autocast, settings.memory_trim_interval_s
    )
    # On CPU all torch work runs on one thread (device.torch_thread says why); loading and
    # warm-up too, so that no other thread ever starts a pool of OpenMP helpers.
    loop = asyncio.get_running_loop()
    torch_work = None if runtime.is_cuda else torch_thread()
    await loop.run_in_executor(torch_work, configure_threads, settings.torch_threads)
    if settings.memory_trim_interval_s > 0:  # the periodic trim returns freed memory instead
        allocator.retain_freed_memory()
    # Before any request thread allocates: freed memory then sits where a trim can return it.
    allocator.limit_arenas()
    state.device = str(runtime.device)
    extra = f" and the checkpoints in {settings.model_dir}" if settings.model_dir else ""
    lifecycle.step(f"loading {', '.join(settings.models)}{extra} on {runtime.device}")
    servables = await loop.run_in_executor(torch_work, state.loader, settings, state.device)
    if settings.compile_backends:
        lifecycle.step(f"compiling {', '.join(settings.compile_backends)} (torch.compile)")
        for servable in servables:
            servable.compile(
                list(settings.compile_backends),
                settings.compile_mode,
                settings.compile_backend,
                settings.batch_buckets,
            )
    registry = Registry(with_served_names(servables, settings.served_model_names))
    budget = runtime.memory_budget(settings.max_batch_memory_mb, len(servables), settings.workers)
    log.info("batch memory budget: %s", f"{budget / MIB:.0f} MiB" if budget else "none")
    metrics.batch_memory_budget.set(budget or 0)
    limits = Limits(
        settings.max_batch_size,
        settings.max_batch_tokens,
        settings.max_wait_ms / 1000,
        budget,
        settings.request_compute_limit_s,
        settings.batch_slice_s or None,  # 0: no time slice
    )
    batcher = Batcher(
        servables, limits, settings.max_queue, settings.request_timeout_s, runtime, metrics
    )
    lifecycle.step("warming up")
    timings = await loop.run_in_executor(torch_work, batcher.warm_up)
    for name, per_backend in timings.items():
        log.info(
            "warmed up %s: %s",
            name,
            ", ".join(f"{b} {s * 1000:.0f} ms" for b, s in per_backend.items()),
        )
    batcher.start()
    state.registry, state.batcher, state.runtime = registry, batcher, runtime
    state.engine = Engine(settings, registry, batcher)
    metrics.watch_device_memory(runtime.allocated_bytes, runtime.reserved_bytes)
    metrics.serving(
        registry.names(), settings.max_queue, runtime.total_bytes(), host_memory_limit()
    )
    metrics.models_loaded.set(len(servables))
    if state.body_pool is not None:
        lifecycle.step("starting the body-parsing processes")
        await asyncio.to_thread(state.body_pool.start)
    # Everything loaded so far (torch, the models: hundreds of thousands of objects) lives as
    # long as the process: keep the cyclic GC from walking it on every full collection, which a
    # large request body (a few MB of JSON: ~10^5 new objects) triggers on the event loop.
    gc.collect()
    gc.freeze()
    lifecycle.mark_ready()
    metrics.ready.set(1 if lifecycle.ready else 0)
    log.info("ready in %.1f s: %s", time.perf_counter() - started, ", ".join(registry.names()))


async def stop_serving(state: AppState) -> None:
    """Refuse new model requests and let queued and running batches finish within the grace."""
    lifecycle = state.lifecycle
    lifecycle.begin_drain()
    state.metrics.ready.set(0)
    if state.batcher is not None:
        grace = max(0.0, state.settings.shutdown_grace_s - lifecycle.draining_for())
        if not await state.batcher.drain(grace):
            log.warning("grace period over: requests still queued were answered 503")
    if state.body_pool is not None:
        await asyncio.to_thread(state.body_pool.close)
    lifecycle.mark_stopped()


async def refresh_metrics(metrics: Metrics, every_s: float = 1.0) -> None:
    """With several worker processes, keep this one's memory gauges current for scrapes that
    another worker answers."""
    while True:
        metrics.refresh()
        await asyncio.sleep(every_s)


def create_app(settings: Settings | None = None, loader: Loader | None = None) -> FastAPI:
    """Build the app. ``loader`` replaces model loading (tests pass small random-weight models)."""
    settings = settings or Settings()
    state = AppState(settings=settings, metrics=Metrics(), loader=loader or load_servables)
    if settings.body_parse_processes:
        state.body_pool = BodyParsePool(
            settings.body_parse_processes, settings.body_parse_min_bytes
        )

    async def load_or_fail() -> None:
        try:
            await start_serving(state)
        except ModelLoadError as exc:
            # A bad model name or checkpoint folder: the message is the whole story (the
            # traceback at debug level); the server exits with status 1 (service.runtime.server).
            log.error("start-up failed: %s", exc)
            log.debug("start-up failure", exc_info=True)
            state.lifecycle.fail(str(exc))
            raise
        except Exception as exc:
            log.exception("start-up failed")
            state.lifecycle.fail(f"{type(exc).__name__}: {exc}")
            raise

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loading: asyncio.Task[None] | None = None
        if settings.background_load:
            loading = asyncio.create_task(load_or_fail())
            loading.add_done_callback(lambda t: t.cancelled() or t.exception())
        else:
            await load_or_fail()
        refreshing = (
            asyncio.create_task(refresh_metrics(state.metrics))
            if state.metrics.multiprocess
            else None
        )
        try:
            yield
        finally:
            if refreshing is not None:
                refreshing.cancel()
            if loading is not None and not loading.done():
                loading.cancel()
                with contextlib.suppress(BaseException):
                    await loading
            await stop_serving(state)

    app = FastAPI(
        title="attnserve",
        version=__version__,
        summary="Informer forecasts and MiniLM embeddings; every request picks its attention.",
        lifespan=lifespan,
    )
    app.state.attnserve = state
    install_error_handlers(app)
    # vllm_shared first: it answers the paths vLLM shares with the peers (see its rule);
    # timeseries is KServe's time series forecast.
    routers = (vllm_shared, encode, embeddings, rerank, classify, forecast, models, health, tei)
    for module in (*routers, cohere, sparse, vllm_pooling, vllm_score, timeseries):
        app.include_router(module.router)
    # Added last = outermost: RequestContext sees every response, ApiKeyGate refuses before any
    # body is read, BodyLimit sees every body.
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        metrics=state.metrics,
        timeout_s=settings.body_timeout_s,
    )
    app.add_middleware(ApiKeyGate, api_key=settings.api_key_value, metrics=state.metrics)
    app.add_middleware(ConnectionRecycler, max_age_s=settings.max_connection_age_s)
    app.add_middleware(TrimAfterLargeBodies, state=state)
    traces = tracing.configured(settings)  # None when off: no middleware, no cost
    if traces is not None:  # inside RequestContext, whose request id its spans carry
        app.add_middleware(TraceRequests, tracing=traces)
    app.add_middleware(RequestContext, metrics=state.metrics)
    return app
