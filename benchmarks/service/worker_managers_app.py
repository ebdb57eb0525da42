"""What gunicorn and uvicorn's own ``--workers`` need to run attnserve, for
:mod:`benchmarks.service.worker_managers` (a benchmark adapter, not a supported way to serve):

    gunicorn -c python:benchmarks.service.worker_managers_app \
        -k benchmarks.service.worker_managers_app.GuardedUvicornWorker -w 2 \
        -b 127.0.0.1:8000 'benchmarks.service.worker_managers_app:create_app()'
    uvicorn --factory benchmarks.service.worker_managers_app:create_app --workers 2 \
        --http benchmarks.service.worker_managers_app:GuardedProtocol ...

Settings come from ``ATTNSERVE_*`` env vars, as for ``attnserve serve``. Each piece stands in for
something :mod:`service.runtime.server` and :mod:`service.runtime.workers` do themselves:

* :func:`create_app`: the app of one worker. Models load before the worker takes connections
  (``background_load`` off, as our supervisor sets for its workers): on a shared socket a worker
  still loading would otherwise answer 503 while its peers could serve.
* :data:`GuardedProtocol`: uvicorn's HTTP protocol with our header deadline and size limit
  (:mod:`service.http.transport`); uvicorn's ``--http`` takes it as an import string.
* :class:`GuardedUvicornWorker`: uvicorn's gunicorn worker (``uvicorn.workers.UvicornWorker``,
  deprecated there in favour of the ``uvicorn-worker`` package, same class) with that protocol and
  the uvicorn settings :func:`service.runtime.server.build_server` gives, through the class's
  ``CONFIG_KWARGS``, the documented way to change them.
* :func:`child_exit`: the gunicorn hook prometheus-client's multiprocess mode asks for, so a dead
  worker's live gauges (requests in flight, queue depth, memory) stop counting. uvicorn's
  ``--workers`` has no such hook.

Neither manager sets ``PROMETHEUS_MULTIPROC_DIR`` or empties it between runs: whoever starts them
does (the benchmark, here).
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

from fastapi import FastAPI

from service.http.transport import guarded_protocol
from service.settings import Settings

with warnings.catch_warnings():  # "uvicorn.workers is deprecated, use uvicorn-worker"
    warnings.simplefilter("ignore", DeprecationWarning)
    from uvicorn.workers import UvicornWorker

_SETTINGS = Settings()

GuardedProtocol = guarded_protocol(
    _SETTINGS.header_timeout_s, _SETTINGS.max_header_bytes, _SETTINGS.http_parser
)


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """The ``uvicorn.Config`` options of :func:`service.runtime.server.build_server`, but the
    app, host and port (the manager's)."""
    return {
        "http": GuardedProtocol,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "timeout_graceful_shutdown": max(1, int(settings.shutdown_grace_s)),
        "limit_concurrency": settings.max_connections,
        "access_log": False,
    }


def create_app() -> FastAPI:
    """One worker's app, from ``ATTNSERVE_*`` settings; loads its models before it listens."""
    from service.app import create_app as build  # torch: in the worker only
    from service.observability.logs import configure_logging

    settings = Settings().model_copy(update={"workers": 1, "background_load": False})
    configure_logging(settings)
    return build(settings)


class GuardedUvicornWorker(UvicornWorker):
    """uvicorn's gunicorn worker with our transport guard and uvicorn settings."""

    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {"loop": "auto", **uvicorn_options(_SETTINGS)}


def child_exit(server: Any, worker: Any) -> None:
    """gunicorn hook: a worker has exited; drop its live gauges from every scrape."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
