"""Cross-encoders and classifiers as the server lists them: their cards (task, labels, routes),
the OpenAPI schema and metrics of their routes, and ``--model-dir`` loading both kinds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.service.classifiers.helpers import (
    classify_name,
    post_rerank,
    rerank_name,
)

# --------------------------------------------------- cards, schema and metrics


def test_cards_say_task_labels_and_routes(client: Any) -> None:
    cards = {c["name"]: c for c in client.get("/models").json()["data"]}
    rerank = cards[rerank_name("bert")]
    assert rerank["task"] == "rerank" and rerank["labels"] == ["LABEL_0"]
    assert rerank["score_activation"] == "sigmoid" and "/v1/rerank" in rerank["routes"]
    assert rerank["source"] == "cross-encoder folder"
    classify = cards[classify_name("bert")]
    assert classify["task"] == "classify" and classify["labels"] == [
        "label_a",
        "label_b",
        "label_c",
    ]
    assert classify["score_activation"] == "softmax"
    assert {"/predict", "/v1/classify"} <= set(classify["routes"])
    assert "/rerank" not in classify["routes"] and "/v1/rerank" not in classify["routes"]
    assert classify["max_tokens"] == 128 and "flash" in classify["served_backends"]
    assert cards["classify-modernbert-mean"]["classifier_pooling"] == "mean"


def test_openapi_lists_the_new_routes(client: Any) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for route in ("/v1/rerank", "/rerank", "/predict", "/v1/classify"):
        assert "post" in paths[route], route


def test_metrics_carry_the_new_routes(client: Any) -> None:
    name = rerank_name("bert")
    assert post_rerank(client, name, "q", ["a"]).status_code == 200
    assert client.post("/predict", json={"model": name, "inputs": "a"}).status_code == 200
    text = client.get("/metrics").text
    for route in ("/v1/rerank", "/predict"):
        line = next(
            (
                row
                for row in text.splitlines()
                if row.startswith("attnserve_requests_total{")
                and f'endpoint="{route}"' in row
                and f'model="{name}"' in row
                and 'status="200"' in row
            ),
            None,
        )
        assert line is not None and float(line.rsplit(" ", 1)[1]) >= 1, route


# -------------------------------------------------------------------- start-up


def test_model_dir_serves_cross_encoders_and_classifiers(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    from service.engine.registry import load_servables
    from service.engine.servables.classify import Scores
    from service.engine.servables.text import TextServable
    from service.settings import Settings

    for name in (rerank_name("bert"), classify_name("mpnet")):
        shutil.copytree(folders[name], tmp_path / name)
    given = str(folders[classify_name("distilbert")])
    settings = Settings(models=(given,), model_dir=tmp_path, device="cpu")
    by_name = {s.name: s for s in load_servables(settings, "cpu")}
    assert set(by_name) == {
        rerank_name("bert"),
        classify_name("mpnet"),
        classify_name("distilbert"),
    }
    assert all(isinstance(s, TextServable) for s in by_name.values())
    assert all(isinstance(s.head, Scores) for s in by_name.values())
    assert by_name[rerank_name("bert")].task == "rerank"
    assert by_name[classify_name("mpnet")].task == "classify"
