"""Small random-weight models, servable test doubles and request builders for the service tests."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from models.informer import InformerForecaster
from models.informer.checkpoint import save_checkpoint
from models.informer.config import preset
from models.informer.model import Informer
from models.informer.scaler import StandardScaler
from models.text import SentenceEncoder
from models.text.folders.weights import model_dir
from models.text.network.bert import BertEncoder
from models.text.network.config import BertConfig
from models.text.tokens.tokenizer import TextTokenizer
from models.training.data.ett import ETTH1_CHANNELS
from service.app import create_app
from service.engine.servables.base import ServedModel
from service.engine.servables.forecast import ForecastServable
from service.engine.servables.text import TextServable
from service.errors import STATUS
from service.settings import Settings
from tests.utils.informer import tiny_checkpoint

TINY_TEXT = "tiny-minilm"
TINY_FORECAST = "informer-tiny"
LONG_FORECAST = "informer-long"


def tiny_encoder(
    max_tokens: int = 64, hidden: int = 32, heads: int = 2, seed: int = 0
) -> SentenceEncoder:
    """A random-weight 2-layer BERT with the real MiniLM tokenizer (runs in milliseconds)."""
    torch.manual_seed(seed)
    config = BertConfig(
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=512,
    )
    model = BertEncoder(config).eval()
    for module in model.modules():  # embedding tables start uninitialised (a checkpoint fills them)
        if isinstance(module, torch.nn.Embedding):
            torch.nn.init.normal_(module.weight, std=0.02)
    tokenizer = TextTokenizer(model_dir() / "tokenizer.json", max_tokens)
    return SentenceEncoder(model, tokenizer, max_tokens, name=TINY_TEXT, source="random weights")


def tiny_forecaster(directory: Path) -> InformerForecaster:
    if not (directory / "config.json").is_file():
        tiny_checkpoint(directory)
    return InformerForecaster.load(str(directory))


def hourly_series(
    rows: int, start: str = "2017-01-01 00:00:00", seed: int = 0
) -> dict[str, list[Any]]:
    """A regular hourly history with plausible 7-channel values, as a request ``series`` item."""
    index = pd.date_range(start, periods=rows, freq="h")
    rng = np.random.default_rng(seed)
    t = np.arange(rows)[:, None]
    values = 3.0 + np.sin(2 * np.pi * t / 24 + np.arange(7)) + 0.1 * rng.standard_normal((rows, 7))
    return {
        "timestamps": [ts.strftime("%Y-%m-%d %H:%M:%S") for ts in index],
        "values": values.tolist(),
    }


class Wrapped:
    """A servable that delegates to another, with hooks to slow it down or inject faults."""

    def __init__(self, inner: ServedModel) -> None:
        self.inner = inner
        self.name = inner.name
        self.task = inner.task
        self.default_attention = inner.default_attention
        self.aliases: tuple[str, ...] = ()
        self.delay_s = 0.0
        self.fail: Callable[[list[Any]], None] | None = None
        self.batches: list[int] = []  # rows per run() call after warm-up
        self.gate: threading.Event | None = None  # when set, run() waits for it
        self.recording = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def backends(self) -> list[str]:
        return self.inner.backends()

    def card(self) -> dict[str, Any]:
        return self.inner.card()

    def run(self, rows: list[Any], call: Any) -> list[Any]:
        if self.recording:
            self.batches.append(len(rows))
        if self.gate is not None and self.recording:
            self.gate.wait(10)
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail is not None and self.recording:
            self.fail(rows)
        return self.inner.run(rows, call)


def post_all(client: Any, path: str, bodies: list[dict[str, Any]]) -> list[Any]:
    """``bodies`` posted to ``path`` at once (one thread each); the responses in order."""
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda b: client.post(path, json=b), bodies))


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


def post_behind_a_running_batch(
    client: Any, double: Wrapped, path: str, first: dict[str, Any], bodies: list[dict[str, Any]]
) -> tuple[Any, list[Any]]:
    """Post ``first`` and hold its batch on the worker while ``bodies`` are posted at once; let
    it go when all of them are queued, so they are batched together (a request that finds the
    worker idle runs at once, alone). Returns the responses: ``first``'s, then the others'."""
    worker = client.app.state.attnserve.batcher.workers[double.name]
    double.recording = True
    double.gate = threading.Event()
    runs = len(double.batches)
    with ThreadPoolExecutor(len(bodies) + 1) as pool:
        blocker = pool.submit(client.post, path, json=first)
        wait_until(lambda: len(double.batches) > runs)
        rest = [pool.submit(client.post, path, json=b) for b in bodies]
        wait_until(lambda: worker.depth == len(bodies))
        double.gate.set()
        responses = [f.result() for f in rest]
    double.gate = None
    del double.batches[runs]  # the blocker's batch
    return blocker.result(), responses


def oom_over(limit: int) -> Callable[[list[Any]], None]:
    """A fault: ``torch.OutOfMemoryError`` for batches of more than ``limit`` rows (what the CUDA
    allocator raises), so the split-and-retry path runs on CPU."""

    def fail(rows: list[Any]) -> None:
        if len(rows) > limit:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory (injected: {len(rows)} > {limit} rows)"
            )

    return fail


def make_app(servables: list[Any], **overrides: Any) -> Any:
    """An app serving ``servables`` (loaded at lifespan start, not in the background)."""
    values: dict[str, Any] = {
        "models": [s.name for s in servables],
        "background_load": False,
        "device": "cpu",
        "max_wait_ms": 20.0,
        "shutdown_grace_s": 5.0,
    }
    values.update(overrides)
    settings = Settings(**values)
    return create_app(settings, loader=lambda _s, _d: list(servables))


@contextlib.contextmanager
def folders_client(folders: Iterable[Path], **overrides: Any) -> Iterator[Any]:
    """A test client of a server loading these model folders (by path) at start-up, each batch
    run at once (no waiting for more requests); ``overrides`` are more settings (e.g.
    ``precisions``)."""
    from fastapi.testclient import TestClient

    with TestClient(folders_app(folders, **overrides)) as client:
        yield client


def folders_app(folders: Iterable[Path], **overrides: Any) -> Any:
    """An app loading these model folders (by path) at start-up, each batch run at once."""
    values: dict[str, Any] = {"device": "cpu", "background_load": False, "max_wait_ms": 0.0}
    settings = Settings(models=tuple(str(p) for p in folders), **{**values, **overrides})
    return create_app(settings)


def text_servable(**kwargs: Any) -> TextServable:
    return TextServable(tiny_encoder(**kwargs))


def forecast_servable(directory: Path) -> ForecastServable:
    return ForecastServable(tiny_forecaster(directory))


def long_forecast_servable(directory: Path, context: int = 1024) -> ForecastServable:
    """The ``long`` preset (one token per step, 4 heads) at random init, narrowed to width 32
    and a ``context``-step history: ``full`` attention's ``[b, 4, L, L]`` scores dominate its
    memory, as at 2048 steps, at a quarter of the cost. Saved to (or loaded from) ``directory``,
    whose name is the model's (:data:`LONG_FORECAST`)."""
    if not (directory / "config.json").is_file():
        torch.manual_seed(0)
        config = preset("long", seq_len=context, label_len=48, pred_len=24, d_model=32, d_ff=32)
        scaler = StandardScaler(np.full(7, 3.0), np.ones(7))
        save_checkpoint(directory, Informer(config).eval(), scaler, list(ETTH1_CHANNELS))
    return ForecastServable(InformerForecaster.load(str(directory)))


def assert_error(r: Any, status: int, type_: str, *needles: str) -> dict[str, Any]:
    """``r`` is the one error body with ``status`` and ``type_`` (as the status table maps them),
    its message names every needle and carries no traceback; returns the body."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == type_ and STATUS[type_] == status
    message = body["error"]["message"]
    for needle in needles:
        assert needle in message, message
    assert "Traceback" not in message
    return body


# A forecaster's quality.json for the auto tests. Relative test-MSE losses: performer 0.41/0.40 - 1 = 2.5 %, nystrom 10 %; probsparse unmeasured.
FORECAST_QUALITY: dict[str, Any] = {
    "linear_baseline": {"mse": 0.5},
    "backends": {
        "flash": {"mse": 0.40},
        "full": {"mse": 0.40},
        "performer": {"mse": 0.41},
        "nystrom": {"mse": 0.44},
    },
}
