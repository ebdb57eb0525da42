"""On CPU every piece of torch work of the process runs on one thread (loading, warm-up and every
batch of every model), so torch's OpenMP keeps a single pool of helper threads
(``service.engine.batching.device.torch_thread`` says why that matters)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.service.helpers import TINY_TEXT, Wrapped, forecast_servable, text_servable


class ThreadRecording(Wrapped):
    """Remembers the name of every thread that ran a forward pass."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.threads: set[str] = set()

    def run(self, rows: list[Any], call: Any) -> list[Any]:
        self.threads.add(threading.current_thread().name)
        return super().run(rows, call)


def test_loading_warm_up_and_batches_of_every_model_share_one_thread(tmp_path: Path) -> None:
    models = [ThreadRecording(text_servable()), ThreadRecording(forecast_servable(tmp_path))]
    loaded_on: list[str] = []

    def loader(_settings: Settings, _device: str) -> list[Any]:
        loaded_on.append(threading.current_thread().name)
        return list(models)

    settings = Settings(
        models=[m.name for m in models], background_load=False, device="cpu", torch_threads=1
    )
    with TestClient(create_app(settings, loader=loader)) as client:
        assert client.post("/encode", json={"inputs": TINY_TEXT}).status_code == 200
        names = loaded_on + [name for m in models for name in m.threads]
    assert all(m.threads for m in models)  # warm-up ran each of them
    assert len(set(names)) == 1 and names[0].startswith("attnserve-torch"), names
    assert names[0] != threading.main_thread().name
