"""attnserve on Ray Serve: the same FastAPI app and API, as replicas across GPUs and hosts behind
one endpoint, scaled with load (``pip install "attnserve[ray]"``).

Each replica is a Ray actor running :func:`service.app.create_app` through ``serve.ingress``
with its own models, batcher, warm-up and metrics. The app is built on the replica (an ingress
*builder*), and its lifespan loads and warms up the models before the replica's constructor
returns, so Ray routes traffic to a replica only once it is ready (what ``/readyz`` says in a
single process); a replica whose models fail to load never becomes ready and never gets traffic.
Ray's health check asks the same lifecycle (:meth:`AttnServeReplica.check_health`); a replica that
fails it is replaced. On shutdown Ray stops routing to a replica, waits for its ongoing requests
(``graceful_shutdown_timeout_s`` = ``shutdown_grace_s``) and runs the lifespan's drain.

Three ways to run it:

    attnserve serve --ray --replicas 2                 # a local Ray cluster, two replicas
    attnserve serve --ray                              # autoscaled, 1..max_replicas
    serve run docker/ray/serve.yaml                    # or `serve deploy` to a running cluster

Scaling (Ray Serve's autoscaler, on ongoing requests per replica): a replica takes up to
``max_queue`` + ``max_batch_size`` ongoing requests (our own queue answers 429 beyond that, as in
one process), and autoscaling aims at ``ray_target_ongoing_requests`` per replica (default: one
full batch, ``max_batch_size``): when every replica holds more than a batch waiting, add one.
Resources: one GPU per replica with ``device`` cuda (or auto on a GPU host), else
``torch_threads`` CPUs per replica.

Each response names the replica that answered (``x-replica``); ``/metrics`` on any replica
gives every replica's metrics labelled ``replica`` (:mod:`service.runtime.ray_metrics`).
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from typing import Any, cast

import ray
from fastapi import FastAPI
from ray import serve
from ray.serve import Application, Deployment
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.app import create_app
from service.runtime.ray_metrics import ReplicaMetrics
from service.settings import Settings

log = logging.getLogger("attnserve")

APP_NAME = "attnserve"
DEPLOYMENT_NAME = "attnserve"
REPLICA_HEADER = b"x-replica"


class ReplicaHeader:
    """ASGI middleware: every HTTP response names the replica that produced it."""

    def __init__(self, app: ASGIApp, replica: str) -> None:
        self.app = app
        self.replica = replica.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (REPLICA_HEADER, self.replica)]
            await send(message)

        await self.app(scope, receive, named)


def replica_settings(settings: Settings) -> Settings:
    """What one replica runs with: models loaded before the replica reports ready (Ray routes to
    it only then), and one process (Ray makes the replicas)."""
    return settings.model_copy(update={"background_load": False, "workers": 1})


def replica_builder(settings: Settings) -> Callable[[], FastAPI]:
    """The ingress builder: runs on each replica, so models are never pickled or shipped."""
    replica = replica_settings(settings)

    def build() -> FastAPI:
        app = create_app(replica)
        name = serve.get_replica_context().replica_id.unique_id
        app.add_middleware(ReplicaHeader, replica=name)
        ReplicaMetrics(app.state.attnserve.metrics, name).start()
        return app

    return build


def uses_gpu(settings: Settings) -> bool:
    """Whether replicas ask Ray for a GPU: ``device`` cuda, or auto on a cluster that has one."""
    if settings.device == "cuda":
        return True
    if settings.device == "cpu":
        return False
    return bool(ray.is_initialized() and ray.cluster_resources().get("GPU", 0) > 0)


def deployment_options(settings: Settings, gpu: bool) -> dict[str, Any]:
    """``serve.deployment`` options from the settings (documented in the module docstring)."""
    options: dict[str, Any] = {
        "name": DEPLOYMENT_NAME,
        "ray_actor_options": {"num_gpus": 1} if gpu else {"num_cpus": settings.torch_threads or 1},
        "max_ongoing_requests": settings.max_queue + settings.max_batch_size,
        "graceful_shutdown_timeout_s": settings.shutdown_grace_s,
        "graceful_shutdown_wait_loop_s": 1.0,
        "health_check_period_s": 5.0,
        "health_check_timeout_s": 30.0,
    }
    if settings.replicas:
        options["num_replicas"] = settings.replicas
    else:
        options["autoscaling_config"] = {
            "min_replicas": 1,
            "max_replicas": settings.max_replicas,
            "target_ongoing_requests": settings.ray_target_ongoing_requests
            or settings.max_batch_size,
        }
    return options


def application(settings: Settings) -> Application:
    """The Ray Serve application serving ``settings``' models (bind it with ``serve.run``)."""

    @serve.ingress(replica_builder(settings))
    class AttnServeReplica:
        """One replica: the app's lifespan already ran (models loaded and warmed up)."""

        def check_health(self) -> None:
            """Ray's periodic health check: fails once the app failed or stopped serving, so
            Ray replaces this replica."""
            lifecycle = self.app.state.attnserve.lifecycle  # type: ignore[attr-defined]
            if not lifecycle.ready and not lifecycle.draining:
                raise RuntimeError(f"attnserve replica not serving: {lifecycle.detail}")

    options = deployment_options(settings, uses_gpu(settings))
    deployment = cast(Deployment, serve.deployment(AttnServeReplica, **options))
    return deployment.bind()


def app_builder(args: dict[str, Any]) -> Application:
    """Entry point of ``serve run`` / ``serve deploy`` configs (``import_path:
    service.runtime.ray_serve:app_builder``): ``args`` are settings fields (``ATTNSERVE_*`` env
    vars fill the rest)."""
    return application(Settings(**args))


def run(settings: Settings) -> int:
    """``attnserve serve --ray``: start (or join, with ``RAY_ADDRESS``) a Ray cluster, serve on
    ``host:port`` until SIGTERM/SIGINT, then shut down gracefully."""
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # taken below with sigwait, not by handlers
    ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=True)
    try:
        serve.start(http_options={"host": settings.host, "port": settings.port})
        serve.run(application(settings), name=APP_NAME, route_prefix="/", blocking=False)
        log.info("serving on Ray Serve at http://%s:%d", settings.host, settings.port)
        signal.sigwait(stop)
        log.info("shutting down: draining the replicas")
        serve.shutdown()
    finally:
        ray.shutdown()
    return 0
