"""Chronos-2 through the server (issue 53): ``POST /forecast`` with covariates and a horizon
shorter than the model's answers what ``Chronos2Pipeline.predict_quantiles`` answers for that
prediction length, and two requests of different horizons sharing the server get their own."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.service.helpers import folders_client
from tests.utils.tiny_chronos import build_chronos2, pipeline_quantiles, wave

MODEL = "chronos2-tiny"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_chronos2(tmp_path_factory.mktemp("chronos2") / MODEL)


@pytest.fixture(scope="module")
def client(folder: Path) -> Iterator[TestClient]:
    # max_wait_ms: requests sent together share the batcher.
    with folders_client([folder], body_parse_processes=0, max_wait_ms=20.0) as c:
        yield c


def case(steps: int, seed: int, horizon: int) -> tuple[dict, dict]:
    """One series with a numeric and a categorical covariate, the second known in advance: as
    the pipeline takes it and as ``/forecast`` takes it."""
    target = wave(steps, seed)[:, 0]
    rng = np.random.default_rng(seed)
    price = rng.normal(size=steps + horizon)
    promo = rng.choice(["a", "b"], size=steps + horizon)
    pipeline = {
        "target": target,
        "past_covariates": {"price": price[:steps], "promo": promo[:steps]},
        "future_covariates": {"promo": promo[steps:]},
    }
    series = {
        "values": target[:, None].tolist(),
        "past_covariates": {"price": price[:steps].tolist(), "promo": promo[:steps].tolist()},
        "future_covariates": {"promo": promo[steps:].tolist()},
    }
    return pipeline, series


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("backend", ["flash", "full"])
@pytest.mark.parametrize("horizon", [5, 17, 32])
def test_forecast_equals_the_pipeline_at_the_asked_horizon(
    client: TestClient, folder: Path, horizon: int, backend: str
) -> None:
    cases = [case(n, seed, horizon) for seed, n in enumerate((60, 300))]
    levels = [0.1, 0.5, 0.9]
    r = client.post(
        "/forecast",
        json={
            "model": MODEL,
            "series": [s for _, s in cases],
            "horizon": horizon,
            "quantiles": levels,
            "attention": backend,
        },
    )
    assert r.status_code == 200, r.text
    want_q, want_point = pipeline_quantiles(folder, [p for p, _ in cases], horizon)
    model_levels = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95]
    for answer, q, point in zip(r.json()["forecasts"], want_q, want_point, strict=True):
        assert relative(np.asarray(answer["values"]), point) <= 1e-4
        for level in levels:
            column = q[model_levels.index(level)]
            assert relative(np.asarray(answer["quantiles"][f"{level:g}"]), column) <= 1e-4


def test_requests_of_different_horizons_together_get_their_own(
    client: TestClient, folder: Path
) -> None:
    horizons = (4, 9, 4, 30)
    cases = [case(120, seed, h) for seed, h in enumerate(horizons)]

    def send(i: int) -> list:
        body = {"model": MODEL, "series": [cases[i][1]], "horizon": horizons[i]}
        r = client.post("/forecast", json=body)
        assert r.status_code == 200, r.text
        return r.json()["forecasts"][0]["values"]

    with ThreadPoolExecutor(len(cases)) as pool:
        answers = list(pool.map(send, range(len(cases))))
    for (pipeline, _), h, got in zip(cases, horizons, answers, strict=True):
        _, (point,) = pipeline_quantiles(folder, [pipeline], h)
        assert relative(np.asarray(got), point) <= 1e-4


def test_a_future_covariate_of_the_wrong_length_is_a_422(client: TestClient) -> None:
    _, series = case(80, 3, 6)
    r = client.post("/forecast", json={"model": MODEL, "series": [series], "horizon": 5})
    assert r.status_code == 422
    assert "future_covariates" in r.json()["error"]["message"]
