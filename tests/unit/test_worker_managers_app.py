"""The adapter that runs attnserve under gunicorn and uvicorn's ``--workers`` for the worker
manager benchmark (benchmarks/worker_managers_app.py) serves with the same uvicorn settings and
header guard as ``attnserve serve``, so the benchmark compares managers, not servers."""

from __future__ import annotations

import pytest

from benchmarks import worker_managers_app as adapter
from service.app import create_app
from service.http.transport import HeaderGuard
from service.runtime.server import build_server
from service.settings import Settings


def test_the_adapter_keeps_the_servers_uvicorn_settings_and_header_guard() -> None:
    settings = Settings()
    ours = build_server(settings, create_app(settings, loader=lambda *_: [])).config
    options = adapter.uvicorn_options(settings)
    guard = options.pop("http")
    assert issubclass(guard, HeaderGuard) and guard.__name__ == ours.http.__name__
    assert guard.max_header_bytes == ours.http.max_header_bytes == settings.max_header_bytes
    assert guard.header_timeout_s == ours.http.header_timeout_s == settings.header_timeout_s
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
