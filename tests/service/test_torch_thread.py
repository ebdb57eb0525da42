"""On CPU loading and warm-up run on one thread, and with several intra-op threads so does every
batch of every model, so torch's OpenMP keeps a single pool of helper threads
(``service.engine.batching.device.torch_thread`` says why that matters). With one intra-op
thread (no pool) each model runs its batches on a thread of its own, so no model waits behind
another (``device.model_thread``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.service.helpers import (
    TINY_TEXT,
    Wrapped,
    forecast_servable,
    hourly_series,
    text_servable,
)


class ThreadRecording(Wrapped):
    """Remembers the name of every thread that ran a forward pass."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.threads: set[str] = set()

    def run(self, rows: list[Any], call: Any) -> list[Any]:
        self.threads.add(threading.current_thread().name)
        return super().run(rows, call)


def served_on(tmp_path: Path, torch_threads: int) -> tuple[list[str], list[set[str]]]:
    """(threads that loaded and warmed up, threads of each model's batches after warm-up)."""
    models = [ThreadRecording(text_servable()), ThreadRecording(forecast_servable(tmp_path))]
    loaded_on: list[str] = []

    def loader(_settings: Settings, _device: str) -> list[Any]:
        loaded_on.append(threading.current_thread().name)
        return list(models)

    settings = Settings(
        models=tuple(m.name for m in models),
        background_load=False,
        device="cpu",
        torch_threads=torch_threads,
    )
    with TestClient(create_app(settings, loader=loader)) as client:
        warm = [set(m.threads) for m in models]
        assert all(warm)  # warm-up ran each of them
        for m in models:
            m.threads.clear()
        assert client.post("/encode", json={"inputs": TINY_TEXT}).status_code == 200
        series = hourly_series(30, seed=2)
        forecast = client.post("/forecast", json={"model": models[1].name, "series": [series]})
        assert forecast.status_code == 200
    return loaded_on + [name for names in warm for name in names], [m.threads for m in models]


def test_with_several_intra_op_threads_every_model_shares_one_thread(tmp_path: Path) -> None:
    setup, batches = served_on(tmp_path, torch_threads=2)
    names = setup + [name for threads in batches for name in threads]
    assert len(set(names)) == 1 and names[0].startswith("attnserve-torch"), names
    assert names[0] != threading.main_thread().name


def test_with_one_intra_op_thread_each_model_runs_on_its_own(tmp_path: Path) -> None:
    setup, batches = served_on(tmp_path, torch_threads=1)
    assert len(set(setup)) == 1 and setup[0].startswith("attnserve-torch"), setup
    text_threads, forecast_threads = batches
    assert len(text_threads) == len(forecast_threads) == 1
    assert text_threads != forecast_threads
    assert not (text_threads | forecast_threads) & set(setup)
