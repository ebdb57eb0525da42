"""The per-request compute bound (``max_request_compute_s``): warm-up measures a rate per backend,
a request whose estimated compute is over the bound is refused before it runs, with a 422 that
says how to fit, and the server goes on serving.

Decisions are made deterministic by pinning the measured rates after start-up (the rate is the
only machine-dependent input; the work is arithmetic): one "second" of budget is then a known
amount of work.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.engine.batching.policy import BatchKey, length_bucket
from service.engine.batching.worker import ModelWorker
from service.engine.servables.base import TextCall
from service.settings import Settings
from tests.service.conftest import metric
from tests.service.helpers import TINY_TEXT, Wrapped, make_app, text_servable

BUDGET_S = 1.0
TEXTS = ["a sentence that is long enough to make a few dozen tokens of text " * 4] * 8
HEAVY = {"num_features": 4096}


@pytest.fixture(scope="module")
def tiny_text() -> Any:
    return text_servable()


def worker_of(client: TestClient) -> ModelWorker:
    return client.app.state.attnserve.batcher.workers[TINY_TEXT]  # type: ignore[attr-defined]


def pin_rates(worker: ModelWorker, seconds_for_default: float) -> tuple[BatchKey, int]:
    """Set every backend's rate so :data:`TEXTS` under default performer costs
    ``seconds_for_default``; returns that request's batch key and its longest row."""
    servable = worker.servable
    lengths = [len(ids) for ids in servable.tokenize(TEXTS, True)]  # type: ignore[attr-defined]
    longest = max(lengths)
    key = BatchKey(servable.default_call("performer"), length_bucket(longest))
    work = servable.work_estimate(key.call, len(TEXTS), longest)
    rate = work / seconds_for_default
    worker.cost.rates.update({(b, None, "float32"): rate for b in servable.backends()})
    return key, longest


def post(client: TestClient, **body: Any) -> Any:
    return client.post("/encode", json={"model": TINY_TEXT, "inputs": TEXTS, **body})


def test_warm_up_measures_a_rate_for_every_served_backend(tiny_text: Any) -> None:
    with TestClient(make_app([tiny_text])) as client:
        worker = worker_of(client)
        rates = worker.cost.rates
        assert sorted(rates) == sorted((b, None, "float32") for b in tiny_text.backends())
        assert all(math.isfinite(r) and r > 0 for r in rates.values())
        _, call, longest = tiny_text.calibration_batch("flash")
        estimate = worker.seconds_estimate(BatchKey(call, length_bucket(longest)), 8, longest)
        assert estimate is not None and 0 < estimate < 10  # a tiny model's batch of 8


def test_a_request_over_the_bound_is_refused_before_it_runs_and_says_how_to_fit(
    tiny_text: Any,
) -> None:
    double = Wrapped(tiny_text)
    with TestClient(make_app([double], max_request_compute_s=BUDGET_S)) as client:
        worker = worker_of(client)
        key, longest = pin_rates(worker, seconds_for_default=0.1)
        heavy_key = BatchKey(TextCall("performer", tuple(HEAVY.items())), key.bucket)
        needed = worker.seconds_estimate(heavy_key, len(TEXTS), longest)
        assert needed is not None and needed > 4 * BUDGET_S  # the premise: far over the bound
        double.recording = True
        refused = post(client, attention="performer", attention_options=HEAVY)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["type"] == "compute_budget_exceeded"
        message = error["message"]
        assert f"{needed:.1f} s" in message and f"{BUDGET_S:.1f} s" in message
        assert "max_request_compute_s" in message and "num_features=4096" in message
        # The most texts that fit: the estimate at that many is within, one more is over.
        most = int(message.split("send at most ")[1].split()[0])
        assert worker.seconds_estimate(heavy_key, most, longest) <= BUDGET_S  # type: ignore[operator]
        assert worker.seconds_estimate(heavy_key, most + 1, longest) > BUDGET_S  # type: ignore[operator]
        assert "use performer's default options (~0.1 s)" in message
        assert "use a cheaper attention backend: " in message
        assert double.batches == []  # nothing of it ran
        # The same texts at default options are within the bound, and run.
        fine = post(client, attention="performer")
        assert fine.status_code == 200, fine.text
        assert double.batches == [len(TEXTS)]
        scrape = client.get("/metrics").text
        assert metric(scrape, "attnserve_rejections_total", reason="compute_budget") == 1


def test_a_request_with_no_way_to_fit_says_to_send_shorter_texts(tiny_text: Any) -> None:
    with TestClient(make_app([tiny_text], max_request_compute_s=BUDGET_S)) as client:
        worker = worker_of(client)
        pin_rates(worker, seconds_for_default=len(TEXTS) * 10 * BUDGET_S)  # one text: 10 s
        refused = post(client)
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["type"] == "compute_budget_exceeded"
        message = refused.json()["error"]["message"]
        assert message.endswith("to fit: send shorter texts"), message


def test_zero_turns_the_bound_off(tiny_text: Any) -> None:
    with TestClient(make_app([tiny_text], max_request_compute_s=0)) as client:
        pin_rates(worker_of(client), seconds_for_default=1000.0)
        assert post(client, attention="performer", attention_options=HEAVY).status_code == 200
        limits = client.get(f"/models/{TINY_TEXT}").json()["limits"]
        assert limits["max_request_compute_s"] is None


def test_the_default_bound_is_half_the_request_timeout_and_the_card_shows_it(
    tiny_text: Any,
) -> None:
    assert Settings(request_timeout_s=30).request_compute_limit_s == 15
    assert Settings(request_timeout_s=30, max_request_compute_s=4).request_compute_limit_s == 4
    with TestClient(make_app([tiny_text], request_timeout_s=8.0)) as client:
        limits = client.get(f"/models/{TINY_TEXT}").json()["limits"]
        assert limits["max_request_compute_s"] == 4.0
