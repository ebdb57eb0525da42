"""Precision under ``attention: auto`` (issue 37): a forecaster loaded in float32, bfloat16 and
int8, with a quality file that measures each precision, chooses the cheapest (backend,
precision) within the request's quality budget, keeps a precision the request names, and lists
every pair on its card's auto table.

The forecaster is the tiny random-weight Informer (``tests/utils/informer``) with pinned
per-(backend, precision) costs, so the choice does not depend on this machine's speed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.engine.batching.worker import ModelWorker
from service.engine.servables.forecast import ForecastServable
from tests.service.helpers import FORECAST_QUALITY, hourly_series, make_app, tiny_forecaster
from tests.utils.informer import tiny_checkpoint

PRECISIONS = ("float32", "bfloat16", "int8")


# Relative test-MSE: float32 performer 2.5 %, nystrom 10 %; bfloat16 flash 0.25 %, performer
# 3.75 %; int8 flash 15 %. Files written before precisions existed have no "precisions": those
# read as float32 only (test_quality_files_without_precisions_read_as_float32).
AUTO_QUALITY = {
    **FORECAST_QUALITY,
    "precisions": {
        "bfloat16": {"backends": {"flash": {"mse": 0.401}, "performer": {"mse": 0.415}}},
        "int8": {"backends": {"flash": {"mse": 0.46}}},
    },
}
# Pinned seconds per one-window request, per (backend, precision).
AUTO_SECONDS = {
    ("flash", "float32"): 0.05,
    ("full", "float32"): 0.09,
    ("performer", "float32"): 0.03,
    ("nystrom", "float32"): 0.02,
    ("flash", "bfloat16"): 0.015,
    ("performer", "bfloat16"): 0.01,
    ("flash", "int8"): 0.005,
}


def pin(worker: ModelWorker, rows: int, length: int) -> None:
    servable = worker.servable
    for (backend, precision), seconds in AUTO_SECONDS.items():
        work = servable.work_estimate(servable.default_call(backend, precision), rows, length)
        worker.cost.rates[(backend, None, precision)] = work / seconds


@pytest.fixture(scope="module")
def auto_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, str]]:
    directory = tmp_path_factory.mktemp("auto-precision") / "auto-precision"
    tiny_checkpoint(directory)
    (directory / "quality.json").write_text(json.dumps(AUTO_QUALITY))
    servable = ForecastServable(tiny_forecaster(directory), PRECISIONS)
    app = make_app([servable], body_parse_processes=0)
    with TestClient(app) as c:
        worker = app.state.attnserve.batcher.workers[servable.name]
        pin(worker, 1, servable.context)
        yield c, servable.name


@pytest.mark.parametrize(
    ("budget", "precision", "picked"),
    [
        (0.05, None, ("performer", "bfloat16")),  # the cheapest within 5 %
        (0.01, None, ("flash", "bfloat16")),  # performer's 3.75 % no longer fits
        (0.2, None, ("flash", "int8")),  # int8's 15 % fits: the cheapest of all
        (0.0, None, ("flash", "float32")),  # exact attention in float32 only
        (0.2, "float32", ("nystrom", "float32")),  # a named precision is kept
        (0.05, "bfloat16", ("performer", "bfloat16")),
    ],
)
def test_auto_chooses_across_backend_and_precision(
    auto_client: tuple[TestClient, str],
    budget: float,
    precision: str | None,
    picked: tuple[str, str],
) -> None:
    client, name = auto_client
    body: dict[str, Any] = {
        "model": name,
        "series": [hourly_series(96)],
        "attention": "auto",
        "max_quality_loss": budget,
    }
    if precision is not None:
        body["precision"] = precision
    r = client.post("/forecast", json=body)
    assert r.status_code == 200, r.text
    assert (r.json()["attention"], r.json()["precision"]) == picked
    assert r.headers["x-precision"] == picked[1]
    label = picked[0] if picked[1] == "float32" else f"{picked[0]}@{picked[1]}"
    assert r.headers["x-attention-choice"].startswith(f"{label};")


def test_the_auto_table_on_the_card_has_every_precision(
    auto_client: tuple[TestClient, str],
) -> None:
    client, name = auto_client
    table = client.get(f"/models/{name}").json()["auto"]["by_length"]
    (rows,) = table.values()
    listed = {(r["backend"], r["precision"]): r["quality_loss"] for r in rows}
    assert listed == pytest.approx(
        {
            ("flash", "float32"): 0.0,
            ("full", "float32"): 0.0,
            ("performer", "float32"): 0.025,
            ("nystrom", "float32"): 0.1,
            ("flash", "bfloat16"): 0.0025,
            ("performer", "bfloat16"): 0.0375,
            ("flash", "int8"): 0.15,
        }
    )
