"""/metrics after traffic: the series move, with the right labels and statuses."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.service.conftest import metric
from tests.service.helpers import TINY_FORECAST, TINY_TEXT, hourly_series, make_app


def test_series_move_after_traffic(client: TestClient) -> None:
    before = client.get("/metrics").text
    assert metric(before, "attnserve_requests_total", endpoint="/encode") == 0
    for _ in range(3):
        assert (
            client.post("/encode", json={"inputs": ["a"], "attention": "full"}).status_code == 200
        )
    forecast = {"model": TINY_FORECAST, "series": [hourly_series(24)] * 2}
    assert client.post("/forecast", json=forecast).status_code == 200
    assert client.post("/encode", json={"inputs": []}).status_code == 422
    assert client.post("/encode", json={"inputs": ["x"], "model": "nope"}).status_code == 404
    scrape = client.get("/metrics").text

    assert (
        metric(
            scrape,
            "attnserve_requests_total",
            endpoint="/encode",
            model=TINY_TEXT,
            attention="full",
            status="200",
        )
        == 3
    )
    assert metric(scrape, "attnserve_requests_total", endpoint="/forecast", status="200") == 1
    assert metric(scrape, "attnserve_requests_total", endpoint="/encode", status="422") == 1
    assert metric(scrape, "attnserve_requests_total", endpoint="/encode", status="404") == 1
    assert metric(scrape, "attnserve_request_duration_seconds_count", endpoint="/encode") == 5
    assert metric(scrape, "attnserve_queue_duration_seconds_count", model=TINY_TEXT) == 3
    assert metric(scrape, "attnserve_inference_duration_seconds_count", model=TINY_FORECAST) == 1
    assert metric(scrape, "attnserve_batch_size_rows_sum", model=TINY_FORECAST) == 2
    assert metric(scrape, "attnserve_batch_tokens_sum", model=TINY_FORECAST) == 2 * 24
    assert metric(scrape, "attnserve_batch_tokens_count", model=TINY_TEXT) == 3
    # Every request was answered: both queues are back to empty (a series per model).
    for model in (TINY_TEXT, TINY_FORECAST):
        assert f'attnserve_queue_depth_requests{{model="{model}"}} 0.0' in scrape
    assert metric(scrape, "attnserve_process_resident_memory_bytes") > 1e6
    assert "attnserve_device_memory_allocated_bytes 0.0" in scrape  # CPU: no device memory
    assert metric(scrape, "attnserve_models_loaded") == 2
    assert metric(scrape, "attnserve_ready") == 1


def test_rejections_by_reason(text_double: object) -> None:
    with TestClient(make_app([text_double], api_key="k", max_body_bytes=1024)) as c:
        assert c.post("/encode", json={"inputs": ["x"]}).status_code == 401
        big = {"inputs": ["x" * 2000]}
        assert c.post("/encode", json=big, headers={"Authorization": "Bearer k"}).status_code == 413
        scrape = c.get("/metrics").text
        assert metric(scrape, "attnserve_rejections_total", reason="unauthorized") == 1
        assert metric(scrape, "attnserve_rejections_total", reason="body_too_large") == 1
        assert metric(scrape, "attnserve_requests_total", status="401") == 1
        assert metric(scrape, "attnserve_requests_total", status="413") == 1


def test_unexpected_errors_are_counted_as_500(text_double: object) -> None:
    # An error outside the ServiceError family escapes to the catch-all handler (outside the
    # middleware); the request metrics must still say 500, and the body must hold no internals.
    from fastapi import APIRouter

    router = APIRouter()

    @router.get("/boom")
    async def boom() -> None:
        raise KeyError("internal secret")

    app = make_app([text_double])
    app.include_router(router)
    with TestClient(app) as c:  # the middleware answers; nothing reaches the server
        r = c.get("/boom", headers={"x-request-id": "req-500"})
        assert r.status_code == 500
        assert r.headers["x-request-id"] == "req-500"
        assert r.json() == {
            "error": {
                "type": "internal_error",
                "message": "internal error; the server logged the details",
            }
        }
        scrape = c.get("/metrics").text
        assert metric(scrape, "attnserve_requests_total", endpoint="/boom", status="500") == 1


def test_apps_do_not_share_metrics(text_double: object, forecast_double: object) -> None:
    with TestClient(make_app([text_double])) as a, TestClient(make_app([forecast_double])) as b:
        a.post("/encode", json={"inputs": ["x"]})
        assert metric(b.get("/metrics").text, "attnserve_requests_total", endpoint="/encode") == 0
