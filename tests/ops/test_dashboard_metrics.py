"""The Grafana dashboard queries only what the service really exports.

An in-process app (the service tests' tiny random-weight encoder and forecaster) answers a few
requests, then ``/metrics`` is scraped: every ``attnserve_*`` series a panel queries must be in
that exposition (histograms as ``_bucket``/``_sum``/``_count``), and every label a query filters,
groups or names in its legend must be a label of those series (or one Prometheus adds).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.ops.helpers import DOCKER
from tests.service.helpers import (
    TINY_FORECAST,
    TINY_TEXT,
    forecast_servable,
    hourly_series,
    make_app,
    text_servable,
)

DASHBOARD = DOCKER / "grafana" / "dashboards" / "attnserve.json"
# Labels Prometheus attaches at scrape time, and the histogram bucket bound.
SCRAPE_LABELS = {"instance", "job"}
METRIC = re.compile(r"\battnserve_[a-z0-9_]+\b")
MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass
class Exported:
    """Series names in the exposition, and the label names of those that have samples."""

    names: set[str] = field(default_factory=set)
    labels: dict[str, set[str]] = field(default_factory=dict)


def _parse(text: str) -> Exported:
    exported = Exported()
    suffixes = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
    for line in text.splitlines():
        match = re.match(r"# TYPE (\S+) (\w+)", line)
        if match:
            name, kind = match.groups()
            exported.names.update(name + suffix for suffix in suffixes.get(kind, ("",)))
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            exported.names.add(sample.name)
            exported.labels.setdefault(sample.name, set()).update(sample.labels)
    return exported


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exported]:
    servables = [text_servable(), forecast_servable(tmp_path_factory.mktemp("ops") / TINY_FORECAST)]
    app = make_app(servables, max_body_bytes=64 * 1024)
    with TestClient(app) as client:
        encode = client.post(
            "/encode", json={"inputs": ["a text", "another one"], "model": TINY_TEXT}
        )
        assert encode.status_code == 200, encode.text
        forecast = client.post(
            "/forecast",
            json={"model": TINY_FORECAST, "attention": "probsparse", "series": [hourly_series(24)]},
        )
        assert forecast.status_code == 200, forecast.text
        for response in (encode, forecast):
            for header in ("x-queue-time-ms", "x-inference-time-ms", "x-batch-size"):
                assert header in response.headers, header
        # A rejection, so attnserve_rejections_total has a labelled sample too.
        too_big = client.post(
            "/encode", content=b" " * (65 * 1024), headers={"content-type": "application/json"}
        )
        assert too_big.status_code == 413
        # What a CUDA batch would record (the tests run on CPU): per-batch peak memory, and an
        # out-of-memory split. The label values are positional, as the batcher passes them.
        metrics = app.state.attnserve.metrics
        metrics.batch_peak_memory.labels(TINY_TEXT).observe(2**20)
        # Measured per-batch memory needs Linux's /proc on CPU: record one wherever this runs.
        metrics.batch_memory_measured.labels(TINY_TEXT, "flash", "float32").observe(2**20)
        metrics.batch_splits.labels(TINY_TEXT).inc()
        scrape = client.get("/metrics")
        assert scrape.status_code == 200
        yield _parse(scrape.text)


def _queries() -> list[tuple[str, str, str]]:
    """(panel title, expr, legend format) of every panel target and query variable."""
    dashboard = json.loads(Path(DASHBOARD).read_text(encoding="utf-8"))
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"], target.get("legendFormat", "")))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            out.append((f"${variable['name']}", variable["definition"], ""))
    return out


QUERIES = _queries()


def test_the_dashboard_has_the_panels_operators_need() -> None:
    exprs = "\n".join(expr for _, expr, _ in QUERIES)
    titles = {title.lower() for title, _, _ in QUERIES}
    for quantile in ("0.5", "0.95", "0.99"):
        assert (
            f"histogram_quantile({quantile}, sum by (le, endpoint, attention, precision) (rate(attnserve_request_duration_seconds_bucket"
            in exprs
        )
    for needed in (
        "attnserve_requests_total",  # throughput
        "attnserve_queue_depth_requests",
        "attnserve_batch_size_rows",
        "attnserve_rejections_total",
        "attnserve_device_memory_allocated_bytes",
        "attnserve_device_memory_reserved_bytes",
        "attnserve_batch_peak_device_memory_bytes",
        "attnserve_batch_activation_memory_estimated_bytes",
        "attnserve_batch_activation_memory_measured_bytes",
        "attnserve_batch_memory_budget_bytes",
        "attnserve_process_resident_memory_bytes",
        "attnserve_queue_duration_seconds",
        "attnserve_inference_duration_seconds",
    ):
        assert needed in exprs, needed
    assert any("queue vs inference" in t for t in titles)


@pytest.mark.parametrize(("title", "expr", "legend"), QUERIES, ids=[q[0] for q in QUERIES])
def test_queries_use_exported_series_and_labels(
    exported: Exported, title: str, expr: str, legend: str
) -> None:
    names = set(METRIC.findall(expr))
    assert names, f"{title}: queries no attnserve metric"
    missing = names - exported.names
    assert not missing, f"{title}: not exported: {sorted(missing)}"

    without_samples = sorted(n for n in names if n not in exported.labels)
    assert not without_samples, f"{title}: no samples to read labels from: {without_samples}"
    known = SCRAPE_LABELS.union(*(exported.labels[n] for n in names))
    used = set(MATCHER.findall(expr)) | set(LEGEND.findall(legend))
    for group in GROUPING.findall(expr):
        used |= {label.strip() for label in group.split(",") if label.strip()}
    assert used <= known, f"{title}: unknown labels {sorted(used - known)} in {expr}"
