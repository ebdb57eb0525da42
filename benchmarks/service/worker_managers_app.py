"""What gunicorn and uvicorn's own ``--workers`` need to run attnserve, for
:mod:`benchmarks.service.worker_managers` (a benchmark adapter, not a supported way to serve):

    gunicorn -c python:benchmarks.service.worker_managers_app \
        -k benchmarks.service.worker_managers_app.GuardedUvicornWorker -w 2 \
        -b 127.0.0.1:8000 'benchmarks.service.worker_managers_app:create_app()'
    uvicorn --factory benchmarks.service.worker_managers_app:create_app --workers 2 \
        --http benchmarks.service.worker_managers_app:GuardedProtocol ...

Settings come from ``ATTNSERVE_*`` env vars, as for ``attnserve serve``. Each piece stands in for
something :mod:`service.runtime.server` and :mod:`service.runtime.workers` do themselves. Neither
manager sets ``PROMETHEUS_MULTIPROC_DIR`` or empties it between runs: whoever starts them does
(the benchmark, here).
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

from fastapi import FastAPI

from service.http.connections import ConnectionRegistry
from service.http.transport import guarded_protocol
from service.settings import Settings

with warnings.catch_warnings():  # "uvicorn.workers is deprecated, use uvicorn-worker"
    warnings.simplefilter("ignore", DeprecationWarning)
    from uvicorn.workers import UvicornWorker

_SETTINGS = Settings()

# uvicorn's HTTP protocol with our header deadline and size limit, body backstop and connection
# limits (service.http.transport); uvicorn's ``--http`` takes it as an import string. Each
# worker process imports this module, so each has its own connection registry, as ours do.
GuardedProtocol = guarded_protocol(
    _SETTINGS.header_timeout_s,
    _SETTINGS.max_header_bytes,
    _SETTINGS.http_parser,
    body_timeout_s=_SETTINGS.body_timeout_s,
    registry=ConnectionRegistry(_SETTINGS.max_connections, _SETTINGS.max_connections_per_client),
)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The ``uvicorn.Config`` options of :func:`service.runtime.server.build_server`, but the
    app, host and port (the manager's)."""
    return {
        "http": GuardedProtocol,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "timeout_graceful_shutdown": max(1, int(settings.shutdown_grace_s)),
        "limit_concurrency": None,  # the registry's limits instead (service.http.connections)
        "access_log": False,
    }


def create_app() -> FastAPI:
    """One worker's app, from ``ATTNSERVE_*`` settings. Its models load before it takes
    connections (``background_load`` off, as our supervisor sets for its workers): on a shared
    socket a worker still loading would otherwise answer 503 while its peers could serve."""
    from service.app import create_app as build  # torch: in the worker only
    from service.observability.logs import configure_logging

    settings = Settings().model_copy(update={"workers": 1, "background_load": False})
    configure_logging(settings)
    return build(settings)


class GuardedUvicornWorker(UvicornWorker):
    """uvicorn's gunicorn worker (deprecated there for the ``uvicorn-worker`` package, same
    class) with our transport guard and the uvicorn settings of ``build_server``, through
    ``CONFIG_KWARGS``, the documented way to change them."""

    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {"loop": "auto", **uvicorn_options(_SETTINGS)}


def child_exit(server: Any, worker: Any) -> None:
    """gunicorn hook (prometheus-client's multiprocess mode asks for it): a worker has exited;
    drop its live gauges (requests in flight, queue depth, memory) from every scrape. uvicorn's
    ``--workers`` has no such hook."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
