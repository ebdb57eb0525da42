"""The batch memory budget: batches capped by each backend's memory at their length, a request
over the budget run in parts, a row that can never fit refused with a 422, and the estimated and
measured peak of every batch in ``/metrics``.

The long-context model is the ``long`` preset (one token per step, 4 heads) at random init with
a 1024-step context: one window under ``full`` needs ~35 MB (two ``[4, 1025, 1025]`` float32
score matrices), 32 windows over 1 GB; under ``flash`` a window needs about a megabyte.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from service.engine.batching.device import (
    MIB,
    DeviceRuntime,
    available_host_memory,
    batch_memory_budget,
)
from service.engine.servables.forecast import ForecastServable
from service.settings import Settings
from tests.service.conftest import metric
from tests.service.helpers import (
    LONG_FORECAST,
    TINY_FORECAST,
    Wrapped,
    hourly_series,
    long_forecast_servable,
    make_app,
    post_all,
)

BUDGET_MB = 128  # a power of two: the metrics' buckets are, so "every batch <= budget" is exact
CONTEXT = 1024
ESTIMATED = "attnserve_batch_activation_memory_estimated_bytes"
MEASURED = "attnserve_batch_activation_memory_measured_bytes"


@pytest.fixture(scope="module")
def long_model(tmp_path_factory: pytest.TempPathFactory) -> ForecastServable:
    return long_forecast_servable(tmp_path_factory.mktemp("long") / LONG_FORECAST, CONTEXT)


@pytest.fixture
def long_double(long_model: ForecastServable) -> Wrapped:
    return Wrapped(long_model)


def long_app(double: Wrapped, budget_mb: int = BUDGET_MB, **settings: Any) -> Any:
    values: dict[str, Any] = {
        "max_batch_memory_mb": budget_mb,
        "max_body_bytes": 64 * MIB,  # 32 windows of 1024 x 7 values as JSON: ~5 MB
        "max_wait_ms": 200.0,
        "request_timeout_s": 120.0,
    }
    return make_app([double], **(values | settings))


def windows(n: int) -> list[dict[str, list[Any]]]:
    return [hourly_series(CONTEXT, seed=i) for i in range(n)]


def every_batch_within(scrape: str, name: str, bound_bytes: int) -> bool:
    """True when every observation of histogram ``name`` (full, long model) is <= the bucket
    bound ``bound_bytes`` (a power of two)."""
    labels = {"model": LONG_FORECAST, "attention": "full"}
    count = metric(scrape, f"{name}_count", **labels)
    within = [
        sample.value
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
        if sample.name == f"{name}_bucket"
        and all(sample.labels.get(k) == v for k, v in labels.items())
        and float(sample.labels["le"]) == bound_bytes
    ]
    return count > 0 and within == [count]


def test_the_burst_is_over_budget_unless_capped(long_model: ForecastServable) -> None:
    full, flash = long_model.default_call("full"), long_model.default_call("flash")
    one = long_model.memory_estimate(full, 1, CONTEXT)
    assert 30 * MIB < one < 40 * MIB  # ~2 x 4 x 1025² x 4 B
    assert long_model.memory_estimate(full, 32, CONTEXT) > 8 * BUDGET_MB * MIB
    assert long_model.memory_estimate(flash, 32, CONTEXT) < BUDGET_MB * MIB


def test_one_request_of_32_long_windows_under_full_runs_in_parts_within_budget(
    long_double: Wrapped,
) -> None:
    with TestClient(long_app(long_double)) as client:
        long_double.recording = True
        body = {"model": LONG_FORECAST, "attention": "full", "series": windows(32)}
        r = client.post("/forecast", json=body)
        assert r.status_code == 200, r.text
        assert len(r.json()["forecasts"]) == 32
        assert r.headers["x-batch-size"] == "3"  # rows per forward pass: it ran in parts
        # Parts of as many windows as fit: 3 x ~35 MB <= 128 MiB < 4 x ~35 MB.
        assert long_double.batches == [3] * 10 + [2]
        scrape = client.get("/metrics").text
    assert metric(scrape, f"{ESTIMATED}_count", model=LONG_FORECAST, attention="full") == 1
    assert every_batch_within(scrape, ESTIMATED, BUDGET_MB * MIB)
    # Measured (process RSS high-water on CPU) within a generous 2x of the budget.
    assert every_batch_within(scrape, MEASURED, 2 * BUDGET_MB * MIB)
    measured = metric(scrape, f"{MEASURED}_sum", model=LONG_FORECAST, attention="full")
    estimated = metric(scrape, f"{ESTIMATED}_sum", model=LONG_FORECAST, attention="full")
    assert 0.25 * estimated < measured  # the measurement sees the score matrices


def test_a_burst_of_32_requests_under_full_forms_batches_within_budget(
    long_double: Wrapped,
) -> None:
    with TestClient(long_app(long_double, max_wait_ms=500.0)) as client:
        long_double.recording = True
        bodies = [{"model": LONG_FORECAST, "attention": "full", "series": [s]} for s in windows(32)]
        responses = post_all(client, "/forecast", bodies)
        assert [r.status_code for r in responses] == [200] * 32
        assert sum(long_double.batches) == 32
        assert max(long_double.batches) <= 3  # capped by memory, not by max_batch_size (32)
        assert max(int(r.headers["x-batch-size"]) for r in responses) >= 2  # batching happened
        scrape = client.get("/metrics").text
    assert every_batch_within(scrape, ESTIMATED, BUDGET_MB * MIB)
    assert every_batch_within(scrape, MEASURED, 2 * BUDGET_MB * MIB)


def test_a_window_that_cannot_fit_alone_gets_a_422_naming_the_fix(long_double: Wrapped) -> None:
    with TestClient(long_app(long_double, budget_mb=16)) as client:
        long_double.recording = True
        body = {"model": LONG_FORECAST, "attention": "full", "series": windows(1)}
        r = client.post("/forecast", json=body)
        assert r.status_code == 422
        error = r.json()["error"]
        assert error["type"] == "memory_budget_exceeded"
        message = error["message"]
        for part in ("'full'", f"{CONTEXT} steps", "MiB", "budget of 16 MiB", "flash"):
            assert part in message, (part, message)
        assert long_double.batches == []  # refused before it was queued
        # A linear-memory backend serves the same window under the same budget.
        assert client.post("/forecast", json=body | {"attention": "flash"}).status_code == 200
        scrape = client.get("/metrics").text
    assert metric(scrape, "attnserve_rejections_total", reason="memory_budget") == 1
    assert metric(scrape, "attnserve_requests_total", endpoint="/forecast", status="422") == 1


def test_memory_metrics_after_a_batch(forecast_double: Wrapped) -> None:
    with TestClient(make_app([forecast_double], max_batch_memory_mb=64)) as client:
        forecast = {"model": TINY_FORECAST, "series": [hourly_series(24)] * 2}
        assert client.post("/forecast", json=forecast).status_code == 200
        scrape = client.get("/metrics").text
    labels = {"model": TINY_FORECAST, "attention": forecast_double.default_attention}
    assert metric(scrape, f"{ESTIMATED}_count", **labels) == 1
    assert metric(scrape, f"{ESTIMATED}_sum", **labels) > 0
    assert metric(scrape, f"{MEASURED}_count", **labels) == 1  # Linux: RSS high-water
    assert metric(scrape, "attnserve_batch_memory_budget_bytes") == 64 * MIB


def test_the_budget_setting() -> None:
    assert Settings().max_batch_memory_mb is None
    with pytest.raises(ValidationError):
        Settings(max_batch_memory_mb=-1)
    assert batch_memory_budget(256, available=10**12, models=3) == 256 * MIB
    assert batch_memory_budget(0, available=10**12, models=3) is None  # 0: no cap
    # Unset: half of what is available, shared by the models and the worker processes.
    assert batch_memory_budget(None, available=8 * 1024 * MIB, models=2, processes=2) == 1024 * MIB


def test_the_budget_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSERVE_MAX_BATCH_MEMORY_MB", "512")
    assert Settings().max_batch_memory_mb == 512
    monkeypatch.setenv("ATTNSERVE_MAX_BATCH_MEMORY_MB", "")
    assert Settings().max_batch_memory_mb is None


def test_default_budget_is_derived_from_available_memory() -> None:
    runtime = DeviceRuntime(torch.device("cpu"))
    budget = runtime.memory_budget(None, models=2, processes=1)
    assert budget is not None and 0 < budget <= available_host_memory() // 4 + MIB


def test_cpu_peak_reading_sees_a_batch_and_overlapping_batches_do_not_reset_it() -> None:
    runtime = DeviceRuntime(torch.device("cpu"))
    first = runtime.reset_peak()
    if first is None:
        pytest.skip("no resident high-water mark to reset here (not Linux)")
    block = torch.ones(64 * MIB // 4)  # 64 MiB, touched
    del block
    second = runtime.reset_peak()  # another batch starts: the mark must not be reset
    assert runtime.peak_above(second) is not None
    measured = runtime.peak_above(first)
    assert measured is not None and measured >= 60 * MIB
