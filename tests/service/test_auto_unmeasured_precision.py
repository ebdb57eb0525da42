"""``attention: "auto"`` in a precision nobody has measured (issue 43): every folder before
``attnserve evaluate --precisions`` has no bfloat16 or int8 figures. auto then runs the model's
exact default backend in that precision and ``x-attention-choice`` says why, on every route,
instead of a 500 ("no attention backend to choose from"); it also answers when the only loaded
precision is unmeasured, and when a named precision's figures all exceed the budget."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from models.precision import native_bf16
from tests.service.helpers import folders_client, hourly_series
from tests.utils.informer import tiny_checkpoint
from tests.utils.tiny_classifiers import save_tiny_classifier
from tests.utils.tiny_encoders import save_tiny_encoder

PRECISIONS = ("float32", "bfloat16", "int8")
UNMEASURED = [
    pytest.param(
        "bfloat16",
        marks=pytest.mark.skipif(
            native_bf16() is False, reason="the server refuses bfloat16 on this CPU"
        ),
    ),
    "int8",
]
# route -> (model folder name, request body without attention/precision)
BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "/v1/rerank": ("reranker", {"query": "q", "documents": ["a doc", "another doc"]}),
    "/rerank": ("reranker", {"query": "q", "texts": ["a doc", "another doc"]}),
    "/predict": ("classifier", {"inputs": "a text"}),
    "/v1/classify": ("classifier", {"input": ["a text"]}),
    "/encode": ("encoder", {"inputs": ["a text"]}),
    "/v1/embeddings": ("encoder", {"input": ["a text"]}),
    "/forecast": ("forecaster", {"series": [hourly_series(96)]}),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("unmeasured")
    return [
        save_tiny_classifier(root / "reranker", "bert", 1, cross_encoder=True, layers=1),
        save_tiny_classifier(root / "classifier", "bert", 3, seed=1, layers=1),
        save_tiny_encoder(root / "encoder", "bert", layers=1),
        tiny_checkpoint(root / "forecaster"),
    ]


@pytest.fixture(scope="module")
def client(folders: list[Path]) -> Iterator[Any]:
    precisions = PRECISIONS if native_bf16() is not False else ("float32", "int8")
    with folders_client(folders, precisions=precisions) as c:
        yield c


def _auto(client: Any, route: str, precision: str | None, budget: float | None = None) -> Any:
    name, body = BODIES[route]
    body = {**body, "model": name, "attention": "auto"}
    if precision is not None:
        body["precision"] = precision
    if budget is not None:
        body["max_quality_loss"] = budget
    return client.post(route, json=body)


@pytest.mark.parametrize("precision", UNMEASURED)
@pytest.mark.parametrize("route", list(BODIES))
def test_auto_in_an_unmeasured_precision_runs_the_exact_default(
    client: Any, route: str, precision: str
) -> None:
    r = _auto(client, route, precision)
    assert r.status_code == 200, r.text
    assert r.headers["x-precision"] == precision
    body = r.json()
    if isinstance(body, dict) and "attention" in body:
        assert body["attention"] == "flash" and body["precision"] == precision
    why = r.headers["x-attention-choice"]
    assert why.startswith(f"flash@{precision};"), why
    assert f"attnserve evaluate --precisions {precision}" in why, why


@pytest.mark.parametrize("route", ["/predict", "/encode", "/forecast"])
def test_auto_without_a_precision_still_picks_exact_float32(client: Any, route: str) -> None:
    r = _auto(client, route, None)
    assert r.status_code == 200, r.text
    assert r.headers["x-precision"] == "float32"
    # Exact float32 attention: flash or full, whichever the warm-up timed cheaper here.
    assert r.headers["x-attention-choice"].split(";")[0] in ("flash", "full")


def test_auto_when_the_only_loaded_precision_is_unmeasured(folders: list[Path]) -> None:
    with folders_client(folders[:2], precisions=("int8",)) as c:
        for route in ("/v1/rerank", "/predict"):
            r = _auto(c, route, None)
            assert r.status_code == 200, r.text
            assert r.headers["x-precision"] == "int8"
            assert r.headers["x-attention-choice"].startswith("flash@int8;")
