"""Running the app under uvicorn with a drain on SIGTERM.

On the first SIGTERM/SIGINT the server keeps listening but turns ``/readyz`` and new model
requests to 503 (so a load balancer still probing gets a clear answer), waits until every
admitted model request is answered or ``shutdown_grace_s`` passes, then lets uvicorn shut down
(close the listener, finish open responses, run the lifespan's drain). A second signal exits at
once. The process then exits 0 (uvicorn's default re-raises the signal after a graceful stop);
a failed start-up (missing weights, ...) exits 1.

With ``workers`` > 1 the CLI starts :class:`service.runtime.workers.Supervisor` instead (it must not
import this module, which pulls in torch and the app); its worker processes each run the same
server (:func:`build_server`) on their own ``SO_REUSEPORT`` listener.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI
from uvicorn.lifespan.on import LifespanOn, LifespanSendMessage

from service.app import create_app
from service.http.connections import ConnectionRegistry
from service.http.transport import guarded_protocol
from service.lifecycle import Lifecycle, Phase
from service.observability.logs import configure_logging
from service.runtime.fd_limit import raise_fd_limit
from service.settings import Settings
from service.state import AppState

log = logging.getLogger("attnserve")

# Returns why the server should stop now, or None to go on (checked once per tick).
ExitCondition = Callable[[], str | None]


class StartupLifespan(LifespanOn):
    """uvicorn's lifespan runner, minus the traceback Starlette sends it when loading the models
    failed: the app has logged the reason already (one line for a bad model name or checkpoint
    folder, the traceback for anything unexpected)."""

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle) -> None:
        super().__init__(config)
        self.lifecycle = lifecycle

    async def send(self, message: LifespanSendMessage) -> None:
        failed = message["type"] == "lifespan.startup.failed"
        if failed and self.lifecycle.phase is Phase.FAILED:
            message = {"type": "lifespan.startup.failed", "message": ""}
        await super().send(message)


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` whose exit signal first drains the app (see the module docstring)."""

    def __init__(
        self, config: uvicorn.Config, state: AppState, exit_when: ExitCondition | None = None
    ) -> None:
        super().__init__(config)
        self.state = state
        self.exit_when = exit_when
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    async def startup(self, sockets: list | None = None) -> None:
        # When the models load before the server listens (background_load off) and that fails,
        # uvicorn logs Starlette's traceback and exits with status 3 from here: log nothing more
        # than the app did, and return, so that serve() exits with status 1 as in the background.
        if isinstance(self.lifespan, LifespanOn):
            self.lifespan = StartupLifespan(self.config, self.state.lifecycle)
        try:
            await super().startup(sockets)
        except SystemExit:
            if self.state.lifecycle.phase is not Phase.FAILED:
                raise
            self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        lifecycle = self.state.lifecycle
        if self.should_exit or lifecycle.draining or self._loop is None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True
            return
        log.info("signal %s: draining (grace %.0f s)", sig, self.state.settings.shutdown_grace_s)
        lifecycle.begin_drain()
        self.state.metrics.ready.set(0)
        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._drain()))  # type: ignore[union-attr]

    async def on_tick(self, counter: int) -> bool:
        # A failed start-up (e.g. missing weights) ends the process with status 1, so a
        # supervisor (Docker restart policy, systemd, Kubernetes) sees it and acts.
        if self.state.lifecycle.phase is Phase.FAILED:
            log.error("exiting with status 1: start-up failed (see above)")
            return True
        # The embedder's reason to stop (a worker whose supervisor is gone): drain and go.
        if self.exit_when is not None and not (self.state.lifecycle.draining or self.should_exit):
            reason = self.exit_when()
            if reason:
                log.warning("%s: draining", reason)
                self.handle_exit(signal.SIGTERM, None)
        return await super().on_tick(counter)

    async def _drain(self) -> None:
        lifecycle = self.state.lifecycle
        deadline = time.monotonic() + self.state.settings.shutdown_grace_s
        while lifecycle.inflight > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if lifecycle.inflight:
            log.warning("grace period over with %d requests in flight", lifecycle.inflight)
        else:
            log.info("drained: every admitted request was answered")
        self.should_exit = True


def build_server(
    settings: Settings, app: FastAPI | None = None, exit_when: ExitCondition | None = None
) -> DrainingServer:
    """A configured server for ``settings`` (``app`` defaults to ``create_app(settings)``);
    ``exit_when``: checked every tick; a reason it returns drains and stops the server (see
    :mod:`service.runtime.workers`)."""
    app = app or create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=max(1, int(settings.shutdown_grace_s)),
        # Transport limits (the body's size and deadline are BodyLimit's, with the error body;
        # the protocol cuts off a body that outlives that deadline).
        http=guarded_protocol(
            settings.header_timeout_s,
            settings.max_header_bytes,
            settings.http_parser,
            body_timeout_s=settings.body_timeout_s,
            registry=ConnectionRegistry(
                settings.max_connections, settings.max_connections_per_client
            ),
            # A client refused a body a little over the limit may finish sending it; one that
            # sends twice the limit after a 413 is cut off (service.http.linger).
            linger_bytes=2 * settings.max_body_bytes,
        ),
        h11_max_incomplete_event_size=settings.max_header_bytes,
        timeout_keep_alive=settings.keep_alive_timeout_s,
        # Not uvicorn's limit_concurrency: it answers a plain-text 503 to every new request once
        # the process holds that many connections, stalled or not (issue 50); the registry above
        # drops stalled connections for new ones instead (service.http.connections).
        limit_concurrency=None,
        access_log=False,
    )
    return DrainingServer(config, app.state.attnserve, exit_when)


def serve(settings: Settings) -> int:
    """Run one server process until SIGTERM/SIGINT, drain, stop. Returns the exit status: 0, or
    1 when start-up failed. (``workers`` is the CLI's business: see the module docstring.)"""
    configure_logging(settings)
    raise_fd_limit(settings.max_connections)
    server = build_server(settings)
    server.run()
    return 1 if server.state.lifecycle.phase is Phase.FAILED else 0
