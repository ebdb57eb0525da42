"""The routes a model card lists come from one task -> routes table (service/http/task_routes.py):
the table and the app's routes agree both ways, and every card (encoder, reranker, classifier,
forecaster) lists the routes that answer it, ``/v1/classify`` included for rerankers and
classifiers (issue 43)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service.app import create_app
from service.engine.registry import task_serves
from service.http.task_routes import (
    TASK_ROUTES,
    TEXT_ROUTES,
    VLLM_POOLING,
    VLLM_SCORE,
    routes_of,
)
from service.settings import Settings
from tests.service.helpers import folders_client
from tests.utils.informer import tiny_checkpoint
from tests.utils.tiny_classifiers import save_tiny_classifier
from tests.utils.tiny_encoders import save_tiny_encoder


def _post_paths() -> set[str]:
    """The app's POST routes, read from its OpenAPI document (every model route is documented)."""
    app = create_app(Settings(device="cpu", background_load=False))  # nothing loads: no lifespan
    return {path for path, methods in app.openapi()["paths"].items() if "post" in methods}


def test_every_path_in_the_table_is_a_post_route_of_the_app() -> None:
    posted = _post_paths()
    for task, paths in TASK_ROUTES.items():
        for path in paths:
            assert path in posted, f"{task}: {path} is not a POST route of the app"


def test_every_model_route_of_the_app_is_in_the_table() -> None:
    # Every POST route serves a model (the others are GETs: health, metrics, cards, docs).
    listed = {path for paths in TASK_ROUTES.values() for path in paths} | set(TEXT_ROUTES)
    missing = _post_paths() - listed
    assert not missing, f"add these routes to TASK_ROUTES under their task: {sorted(missing)}"


def test_a_reranker_answers_the_classify_routes_too() -> None:
    assert task_serves("rerank", "classify") and not task_serves("classify", "rerank")
    assert set(TASK_ROUTES["classify"]) <= set(routes_of("rerank"))
    assert not set(TASK_ROUTES["rerank"]) & set(routes_of("classify"))
    assert routes_of("encode") == [*TASK_ROUTES["encode"], *TEXT_ROUTES]
    # /invocations is SageMaker's one route: a forecaster answers it too (Chronos-2's shape).
    assert set(TEXT_ROUTES) & set(routes_of("forecast")) == {"/invocations"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("card-routes")
    folders = [
        save_tiny_classifier(root / "reranker", "bert", 1, cross_encoder=True),
        save_tiny_classifier(root / "classifier", "bert", 3, seed=1),
        save_tiny_encoder(root / "encoder", "bert", layers=1),
        tiny_checkpoint(root / "forecaster"),
    ]
    with folders_client(folders) as c:
        yield c


def test_every_card_lists_the_routes_of_its_task(client: Any) -> None:
    cards = {card["name"]: card for card in client.get("/models").json()["data"]}
    assert cards["reranker"]["routes"] == [
        "/v1/rerank",
        "/rerank",
        "/v2/rerank",
        *VLLM_SCORE,
        "/predict",
        "/v1/classify",
        "/classify",
        *VLLM_POOLING,
        "/vllm/classify",
        *TEXT_ROUTES,
    ]
    classify = ["/predict", "/v1/classify", "/classify", *VLLM_POOLING, "/vllm/classify"]
    assert cards["classifier"]["routes"] == [*classify, *TEXT_ROUTES]
    assert cards["encoder"]["routes"] == [*TASK_ROUTES["encode"], *TEXT_ROUTES]
    assert cards["forecaster"]["routes"] == ["/forecast", "/invocations", "/v1/timeseries/forecast"]
    for name, card in cards.items():
        assert client.get(f"/models/{name}").json()["routes"] == card["routes"]


@pytest.mark.parametrize("name", ["reranker", "classifier"])
def test_v1_classify_answers_what_the_card_says(client: Any, name: str) -> None:
    r = client.post("/v1/classify", json={"model": name, "input": ["a text"]})
    assert r.status_code == 200, r.text
    assert "/v1/classify" in client.get(f"/models/{name}").json()["routes"]
