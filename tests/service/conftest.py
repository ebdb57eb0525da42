"""Fixtures: tiny random-weight servables (built once) and apps around them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from service.engine.servables.forecast import ForecastServable
from service.engine.servables.text import TextServable
from tests.service.helpers import Wrapped, forecast_servable, make_app, text_servable


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """Two intra-op threads on a shared two-core machine spin-wait for each other: the tiny
    test models then take ~300 ms per call instead of ~1 ms. One thread, restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ckpt") / "informer-tiny"


@pytest.fixture(scope="session")
def text_model() -> TextServable:
    return text_servable()


@pytest.fixture(scope="session")
def forecast_model(tiny_ckpt: Path) -> ForecastServable:
    return forecast_servable(tiny_ckpt)


@pytest.fixture
def text_double(text_model: TextServable) -> Wrapped:
    return Wrapped(text_model)


@pytest.fixture
def forecast_double(forecast_model: ForecastServable) -> Wrapped:
    return Wrapped(forecast_model)


@pytest.fixture
def client(text_double: Wrapped, forecast_double: Wrapped) -> Iterator[TestClient]:
    """A ready app with the tiny encoder and the tiny forecaster."""
    app = make_app([text_double, forecast_double])
    with TestClient(app) as c:
        text_double.recording = forecast_double.recording = True
        yield c


def metric(text: str, name: str, **labels: Any) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(
                sample.labels.get(k) == str(v) for k, v in labels.items()
            ):
                total += sample.value
    return total


@pytest.fixture(scope="session")
def drop_in_paths(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The drop-in server's folders (encoder, reranker, classifier): references load them."""
    from tests.utils.live_server import drop_in_folders

    return drop_in_folders(tmp_path_factory.mktemp("drop-in"))


@pytest.fixture(scope="session")
def drop_in_url(drop_in_paths: list[Path]) -> Iterator[str]:
    """The base URL of a real server (uvicorn on loopback) serving the drop-in folders
    (:mod:`tests.utils.live_server`): the peers' client packages are pointed at it. Its first
    model, the encoder, is the default model of the TEI routes that name none."""
    from tests.service.helpers import folders_app
    from tests.utils.live_server import serving

    with serving(folders_app(drop_in_paths)) as url:
        yield url
