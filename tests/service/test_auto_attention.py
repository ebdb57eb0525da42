"""``attention: "auto"`` through HTTP: the cheapest backend within the request's quality budget
runs, the response says which and why, the choice is counted, ``/models`` shows the table, auto
requests batch with requests for the backend they resolved to, and bad budgets get a 422.

Prices are pinned after start-up (the measured rates are the only machine-dependent input), so
which backend is cheapest is known; the quality figures are a ``quality.json`` written into the
tiny checkpoint (a relative MSE loss per backend, as shipped checkpoints carry).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from models.attention import BACKENDS
from service.engine.batching.worker import ModelWorker
from service.engine.servables.base import Call
from tests.service.conftest import metric
from tests.service.helpers import (
    FORECAST_QUALITY as QUALITY,
)
from tests.service.helpers import (
    TINY_TEXT,
    Wrapped,
    forecast_servable,
    hourly_series,
    make_app,
    post_behind_a_running_batch,
    text_servable,
)

# Pinned seconds per one-window request: cheapest first.
SECONDS = {
    "probsparse": 0.01,
    "nystrom": 0.02,
    "skyformer": 0.025,
    "performer": 0.03,
    "flash": 0.05,
    "full": 0.09,
}


def pin(worker: ModelWorker, seconds: dict[str, float], rows: int, length: int) -> None:
    """Rates such that ``rows`` rows of ``length`` cost ``seconds[backend]`` under each backend."""
    servable = worker.servable
    # Backends without a pinned price cost more than every pinned one: the machine's own
    # measured rate must never decide which backend is cheapest.
    priced = {b: 10 * max(seconds.values()) for b in BACKENDS} | seconds
    worker.cost.rates.update(
        {
            (b, None, "float32"): servable.work_estimate(servable.default_call(b), rows, length) / s
            for b, s in priced.items()
        }
    )


@pytest.fixture(scope="module")
def forecaster(tmp_path_factory: pytest.TempPathFactory) -> Wrapped:
    directory: Path = tmp_path_factory.mktemp("auto") / "auto-forecaster"
    forecast_servable(directory)  # writes the checkpoint
    (directory / "quality.json").write_text(json.dumps(QUALITY))
    return Wrapped(forecast_servable(directory))


@pytest.fixture(scope="module")
def client(forecaster: Wrapped) -> Iterator[TestClient]:
    with TestClient(make_app([forecaster])) as c:
        worker = c.app.state.attnserve.batcher.workers[forecaster.name]  # type: ignore[attr-defined]
        pin(worker, SECONDS, 1, forecaster.context)
        yield c


def body(forecaster: Wrapped, **extra: Any) -> dict[str, Any]:
    return {"model": forecaster.name, "series": [hourly_series(forecaster.context)], **extra}


@pytest.mark.parametrize(
    "budget,expected",
    [(None, "performer"), (0.05, "performer"), (0.2, "nystrom"), (0.02, "flash"), (0, "flash")],
)
def test_the_cheapest_backend_within_the_budget_runs(
    client: TestClient, forecaster: Wrapped, budget: float | None, expected: str
) -> None:
    extra: dict[str, Any] = {"attention": "auto"}
    if budget is not None:
        extra["max_quality_loss"] = budget
    before = client.get("/metrics").text
    r = client.post("/forecast", json=body(forecaster, **extra))
    assert r.status_code == 200, r.text
    assert r.json()["attention"] == expected
    header = r.headers["x-attention-choice"]
    assert header.startswith(f"{expected}; loss ")
    assert f"<= {budget if budget is not None else 0.05:g}" in header
    est = SECONDS[expected] * 1000
    assert f"est {est:.0f} ms" in header
    assert (expected == "flash") == ("vs flash" not in header)
    after = client.get("/metrics").text
    name = "attnserve_auto_attention_choices_total"
    labels = {"model": forecaster.name, "backend": expected}
    assert metric(after, name, **labels) == metric(before, name, **labels) + 1
    # Counted under the backend that ran, like any request for it.
    requests = {"endpoint": "/forecast", "attention": expected, "status": "200"}
    total = "attnserve_requests_total"
    assert metric(after, total, **requests) == metric(before, total, **requests) + 1


def test_auto_answers_exactly_what_the_chosen_backend_answers(
    client: TestClient, forecaster: Wrapped
) -> None:
    auto = client.post("/forecast", json=body(forecaster, attention="auto"))
    fixed = client.post("/forecast", json=body(forecaster, attention="performer"))
    assert auto.status_code == fixed.status_code == 200
    assert auto.json()["forecasts"] == fixed.json()["forecasts"]
    assert "x-attention-choice" not in fixed.headers


def test_an_unmeasured_backend_is_never_chosen_however_cheap(
    client: TestClient, forecaster: Wrapped
) -> None:
    r = client.post("/forecast", json=body(forecaster, attention="auto", max_quality_loss=1e6))
    assert r.json()["attention"] == "nystrom"  # probsparse costs less but has no figure


def test_auto_requests_batch_with_requests_for_the_backend_they_resolved_to(
    client: TestClient, forecaster: Wrapped
) -> None:
    first = body(forecaster, attention="flash")
    bodies = [body(forecaster, attention="auto"), body(forecaster, attention="performer")]
    _, (auto, fixed) = post_behind_a_running_batch(client, forecaster, "/forecast", first, bodies)
    assert auto.status_code == fixed.status_code == 200
    assert auto.json()["attention"] == fixed.json()["attention"] == "performer"
    assert auto.headers["x-batch-requests"] == fixed.headers["x-batch-requests"] == "2"


def test_models_shows_the_cost_and_quality_table(client: TestClient, forecaster: Wrapped) -> None:
    card = next(m for m in client.get("/models").json()["data"] if m["name"] == forecaster.name)
    auto = card["auto"]
    assert auto["default_max_quality_loss"] == 0.05
    assert "MSE" in auto["quality_metric"]
    (table,) = auto["by_length"].values()
    assert [row["backend"] for row in table] == ["nystrom", "performer", "flash", "full"]
    assert [row["quality_loss"] for row in table] == pytest.approx([0.1, 0.025, 0.0, 0.0])
    ms = [row["estimated_ms_per_row"] for row in table]
    assert ms == pytest.approx([SECONDS[r["backend"]] * 1000 for r in table])


@pytest.mark.parametrize(
    "extra,says",
    [
        ({"max_quality_loss": 0.1}, "only with attention 'auto'"),
        ({"attention": "performer", "max_quality_loss": 0.1}, "only with attention 'auto'"),
        ({"attention": "auto", "max_quality_loss": -0.1}, "greater than or equal to 0"),
        ({"attention": "auto", "max_quality_loss": "0.1"}, "valid number"),
        ({"attention": "auto", "max_quality_loss": True}, "valid number"),
        ({"attention": "auto", "max_quality_los": 0.1}, "Extra inputs are not permitted"),
        (
            {"attention": "auto", "attention_options": {"num_features": 64}},
            "cannot be combined with attention 'auto'",
        ),
    ],
)
def test_bad_budgets_get_a_422_that_says_what_is_valid(
    client: TestClient, forecaster: Wrapped, extra: dict[str, Any], says: str
) -> None:
    r = client.post("/forecast", json=body(forecaster, **extra))
    assert r.status_code == 422, r.text
    assert says in r.json()["error"]["message"]
    assert client.post("/forecast", json=body(forecaster, attention="auto")).status_code == 200


# ----------------------------------------------------------------------- option variants

# Performer at 8 features scored on its own (attnserve evaluate --variants): 3 % worse than exact
# and priced below every default; at 12 features 30 % worse (over any budget below 0.3).
VARIANTS = {
    **QUALITY,
    "variants": [
        {"backend": "performer", "options": {"num_features": 8}, "mse": 0.412},
        {"backend": "performer", "options": {"num_features": 12}, "mse": 0.52},
    ],
}
EIGHT = (("num_features", 8),)


@pytest.fixture(scope="module")
def variant_client(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[TestClient, Wrapped]]:
    directory: Path = tmp_path_factory.mktemp("auto-variants") / "variant-forecaster"
    forecast_servable(directory)
    (directory / "quality.json").write_text(json.dumps(VARIANTS))
    wrapped = Wrapped(forecast_servable(directory))
    with TestClient(make_app([wrapped])) as c:
        worker = c.app.state.attnserve.batcher.workers[wrapped.name]  # type: ignore[attr-defined]
        # Warm-up priced each variant at its own options, beside the defaults.
        rates = worker.cost.rates
        assert {key for key in rates if key[1] is not None} == {
            ("performer", EIGHT, "float32"),
            ("performer", (("num_features", 12),), "float32"),
        }
        pin(worker, SECONDS, 1, wrapped.context)
        work = wrapped.work_estimate(Call("performer", EIGHT), 1, wrapped.context)
        # Only this variant priced (the other unmeasured), at 5 ms: cheapest.
        worker.cost.rates = {key: rate for key, rate in rates.items() if key[1] is None}
        worker.cost.rates[("performer", EIGHT, "float32")] = work / 0.005
        yield c, wrapped


def test_auto_picks_a_measured_variant_when_it_is_cheapest_within_the_budget(
    variant_client: tuple[TestClient, Wrapped],
) -> None:
    client, forecaster = variant_client
    before = client.get("/metrics").text
    r = client.post("/forecast", json=body(forecaster, attention="auto"))
    assert r.status_code == 200, r.text
    assert r.json()["attention"] == "performer"
    assert r.headers["x-attention-choice"].startswith(
        "performer(num_features=8); loss 0.03 <= 0.05; est 5 ms vs flash 50 ms"
    )
    # It ran at those options: the same answer as asking for them.
    fixed = client.post(
        "/forecast",
        json=body(forecaster, attention="performer", attention_options={"num_features": 8}),
    )
    assert r.json()["forecasts"] == fixed.json()["forecasts"]
    default = client.post("/forecast", json=body(forecaster, attention="performer"))
    assert r.json()["forecasts"] != default.json()["forecasts"]
    name, labels = "attnserve_auto_attention_choices_total", {"backend": "performer"}
    after = client.get("/metrics").text
    assert metric(after, name, model=forecaster.name, **labels) == (
        metric(before, name, model=forecaster.name, **labels) + 1
    )


def test_a_variant_over_the_budget_is_never_picked(
    variant_client: tuple[TestClient, Wrapped],
) -> None:
    client, forecaster = variant_client
    r = client.post("/forecast", json=body(forecaster, attention="auto", max_quality_loss=0.028))
    assert r.headers["x-attention-choice"].startswith("performer; loss 0.025 <= 0.028")
    # 12 features would lose 30 %: not even a budget of 0.2 lets it in (8 features wins there).
    r = client.post("/forecast", json=body(forecaster, attention="auto", max_quality_loss=0.2))
    assert r.headers["x-attention-choice"].startswith("performer(num_features=8);")


def test_models_lists_each_variant_with_its_options(
    variant_client: tuple[TestClient, Wrapped],
) -> None:
    client, forecaster = variant_client
    card = next(m for m in client.get("/models").json()["data"] if m["name"] == forecaster.name)
    (table,) = card["auto"]["by_length"].values()
    rows = [(row["backend"], row["options"]) for row in table]
    assert rows[0] == ("performer", {"num_features": 8})
    assert ("performer", {"num_features": 12}) in rows and ("performer", {}) in rows
    first = table[0]
    assert first["quality_loss"] == pytest.approx(0.03)
    assert first["estimated_ms_per_row"] == pytest.approx(5.0)


# ----------------------------------------------------------------------------- encoder

TEXT = ["a short sentence"]


@pytest.fixture(scope="module")
def text_client() -> Iterator[TestClient]:
    servable = text_servable()
    with TestClient(make_app([servable])) as c:
        worker = c.app.state.attnserve.batcher.workers[TINY_TEXT]  # type: ignore[attr-defined]
        length = len(servable.tokenize(TEXT)[0])
        pin(worker, SECONDS, 1, length)
        yield c


def test_encoder_auto_uses_the_shipped_cosine_figures_for_the_length(
    text_client: TestClient,
) -> None:
    # Short texts: nystrom's measured cosine is 1.0 (loss 0) and it is priced cheapest of the
    # measured ones; probsparse (loss 0.06 at this length) is over the default 0.01.
    r = text_client.post("/encode", json={"model": TINY_TEXT, "inputs": TEXT, "attention": "auto"})
    assert r.status_code == 200, r.text
    assert r.json()["attention"] == "nystrom"
    assert r.headers["x-attention-choice"].startswith("nystrom; loss 0 <= 0.01")
    wide = {"model": TINY_TEXT, "input": TEXT, "attention": "auto", "max_quality_loss": 0.1}
    r = text_client.post("/v1/embeddings", json=wide)
    assert r.status_code == 200, r.text
    assert r.headers["x-attention-choice"].startswith("probsparse; loss 0.06")
    card = next(m for m in text_client.get("/models").json()["data"] if m["name"] == TINY_TEXT)
    assert list(card["auto"]["by_length"]) == ["64"]  # the tiny encoder reads at most 64 tokens
