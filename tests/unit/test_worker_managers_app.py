"""The adapter that runs attnserve under gunicorn and uvicorn's ``--workers`` for the worker
manager benchmark (benchmarks/service/worker_managers_app.py) serves with the same uvicorn settings and
header guard as ``attnserve serve``, so the benchmark compares managers, not servers."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator

import pytest

from benchmarks.service import worker_managers_app as adapter
from service.app import create_app
from service.http.transport import HeaderGuard
from service.runtime.server import build_server
from service.settings import Settings

# Not the defaults, so an option the adapter or the server left at uvicorn's own default shows.
CHOSEN = {
    "ATTNSERVE_MAX_HEADER_BYTES": "20000",
    "ATTNSERVE_HEADER_TIMEOUT_S": "4.5",
    "ATTNSERVE_KEEP_ALIVE_TIMEOUT_S": "7",
    "ATTNSERVE_SHUTDOWN_GRACE_S": "3.5",
    "ATTNSERVE_MAX_CONNECTIONS": "77",
}


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No ``ATTNSERVE_*`` variable of the caller's shell reaches ``Settings()``; the adapter,
    which reads them when imported, is imported again afterwards under the restored ones."""
    for name in [n for n in os.environ if n.startswith("ATTNSERVE_")]:
        monkeypatch.delenv(name)
    yield monkeypatch
    monkeypatch.undo()
    importlib.reload(adapter)


def test_the_adapter_keeps_the_servers_uvicorn_settings_and_header_guard(
    environment: pytest.MonkeyPatch,
) -> None:
    for name, value in CHOSEN.items():
        environment.setenv(name, value)
    importlib.reload(adapter)  # its header guard is made from the environment at import
    settings = Settings()
    ours = build_server(settings, create_app(settings, loader=lambda *_: [])).config
    options = adapter.uvicorn_options(settings)
    guard = options.pop("http")
    assert issubclass(guard, HeaderGuard) and guard.__name__ == ours.http.__name__
    assert guard.max_header_bytes == ours.http.max_header_bytes == 20000
    assert guard.header_timeout_s == ours.http.header_timeout_s == 4.5
    assert guard.body_timeout_s == ours.http.body_timeout_s
    assert guard.registry.max_total == ours.http.registry.max_total == 77
    assert options == {
        "h11_max_incomplete_event_size": 20000,
        "timeout_keep_alive": 7,
        "timeout_graceful_shutdown": 3,
        "limit_concurrency": None,
        "access_log": False,
    }
    for name, value in options.items():
        assert getattr(ours, name) == value, name
    assert adapter.GuardedUvicornWorker.CONFIG_KWARGS["http"] is adapter.GuardedProtocol


def test_the_adapters_app_loads_its_models_before_it_listens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ATTNSERVE_MODELS", "all-MiniLM-L6-v2")
    monkeypatch.setenv("ATTNSERVE_WORKERS", "2")
    settings = adapter.create_app().state.attnserve.settings
    assert settings.models == ("all-MiniLM-L6-v2",)
    assert not settings.background_load and settings.workers == 1
