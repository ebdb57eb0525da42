"""OpenTelemetry traces, received by a real OTLP/HTTP receiver (tests/utils/otlp_receiver.py)
that parses each POST with the collector's protobuf message: the server span in the caller's
trace, its children down to each request's forward pass, a malformed ``traceparent``, an
unreachable collector, and tracing off by default."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from service.cli import build_parser
from service.observability import tracing
from service.observability.spans import TraceRequests
from service.settings import Settings
from tests.service.helpers import TINY_TEXT, Wrapped, make_app
from tests.utils.otlp_receiver import OtlpReceiver, ReceivedSpan, free_port

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
SERVER, INTERNAL = 2, 1  # opentelemetry.proto.trace.v1.Span.SpanKind
OTEL_VARIABLES = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "ATTNSERVE_OTLP_ENDPOINT",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    # Spans leave every 50 ms instead of every 5 s (the SDK reads OTEL_BSP_*).
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


def by_name(spans: list[ReceivedSpan], trace_id: str) -> dict[str, ReceivedSpan]:
    return {s.name: s for s in spans if s.trace_id == trace_id}


def test_request_trace_reaches_the_collector(receiver: OtlpReceiver, text_double: Wrapped) -> None:
    with TestClient(make_app([text_double], otlp_endpoint=receiver.endpoint)) as client:
        r = client.post(
            "/embed",
            json={"inputs": ["a trace of this request, please"]},
            headers={"traceparent": TRACEPARENT, "tracestate": "k=v", "x-request-id": "req-7"},
        )
        assert r.status_code == 200, r.text
    # The lifespan's end sends what is left: everything has arrived once the client closed.
    spans = by_name(receiver.spans, TRACE_ID)
    assert {"POST /embed", "parse", "queue", "batch", "forward", "render"} <= set(spans)
    assert receiver.content_types and set(receiver.content_types) == {"application/x-protobuf"}
    server = spans["POST /embed"]
    assert server.kind == SERVER and server.parent_span_id == PARENT_ID
    assert server.attributes["http.request.method"] == "POST"
    assert server.attributes["http.route"] == "/embed"
    assert server.attributes["url.path"] == "/embed"
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["attnserve.request_id"] == r.headers["x-request-id"] == "req-7"
    assert server.attributes["attnserve.model"] == r.headers["x-model"]
    assert server.resource["service.name"] == "attnserve"
    assert server.resource["process.pid"] == os.getpid()
    for name in ("parse", "queue", "batch", "render"):
        assert spans[name].parent_span_id == server.span_id, name
        assert spans[name].kind == INTERNAL
    forward = spans["forward"]
    assert forward.parent_span_id == spans["batch"].span_id
    # What ran, as the response headers (set by the route from the engine's answer) say.
    attributes = forward.attributes
    assert attributes["attnserve.model"] == TINY_TEXT == r.headers["x-model"]
    assert attributes["attnserve.attention"] == r.headers["x-attention"]
    assert attributes["attnserve.precision"] == r.headers["x-precision"]
    assert attributes["attnserve.batch.rows"] == int(r.headers["x-batch-size"]) == 1
    assert attributes["attnserve.batch.requests"] == int(r.headers["x-batch-requests"])
    assert attributes["attnserve.request.rows"] == 1
    assert attributes["attnserve.request.tokens"] > 2  # [CLS] text [SEP]
    assert attributes["attnserve.batch.tokens"] >= attributes["attnserve.request.tokens"]
    # In order, inside the server span.
    parse, queue, batch, render = (spans[n] for n in ("parse", "queue", "batch", "render"))
    assert server.start_ns <= parse.start_ns <= parse.end_ns <= queue.start_ns
    assert queue.end_ns == batch.start_ns == forward.start_ns
    assert forward.end_ns <= batch.end_ns <= render.start_ns <= render.end_ns <= server.end_ns
    queue_ms = (queue.end_ns - queue.start_ns) / 1e6
    assert queue_ms == pytest.approx(float(r.headers["x-queue-time-ms"]), abs=0.05)


def test_each_request_of_a_batch_gets_its_own_forward_span(
    receiver: OtlpReceiver, text_double: Wrapped
) -> None:
    ids = [f"{i + 1:032x}" for i in range(3)]
    app = make_app([text_double], otlp_endpoint=receiver.endpoint, max_wait_ms=300.0)
    with TestClient(app) as client:

        def post(trace_id: str) -> Any:
            headers = {"traceparent": f"00-{trace_id}-{PARENT_ID}-01"}
            return client.post("/embed", json={"inputs": ["batched", "twice"]}, headers=headers)

        with ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(post, ids))
    assert [r.status_code for r in answers] == [200] * 3
    assert max(int(r.headers["x-batch-requests"]) for r in answers) > 1  # a batch formed
    for trace_id, r in zip(ids, answers, strict=True):
        spans = by_name(receiver.spans, trace_id)
        forward, batch = spans["forward"], spans["batch"]
        assert forward.parent_span_id == batch.span_id
        assert batch.parent_span_id == spans["POST /embed"].span_id
        assert forward.attributes["attnserve.batch.requests"] == int(r.headers["x-batch-requests"])
        assert forward.attributes["attnserve.batch.rows"] == int(r.headers["x-batch-size"])
        assert forward.attributes["attnserve.request.rows"] == 2


@pytest.mark.parametrize(
    "header",
    [
        "00-zzzz-00f067aa0ba902b7-01",
        f"00-{'0' * 32}-{PARENT_ID}-01",  # an all-zero trace id is invalid (W3C: trace-id)
        f"00-{TRACE_ID}-{'0' * 16}-01",
        f"ff-{TRACE_ID}-{PARENT_ID}-01",  # version ff is invalid
        "garbage",
    ],
)
def test_a_malformed_traceparent_is_ignored_and_served(
    receiver: OtlpReceiver, text_double: Wrapped, header: str
) -> None:
    with TestClient(make_app([text_double], otlp_endpoint=receiver.endpoint)) as client:
        r = client.post("/embed", json={"inputs": ["hello"]}, headers={"traceparent": header})
        assert r.status_code == 200, r.text
    servers = [s for s in receiver.spans if s.name == "POST /embed"]
    assert len(servers) == 1
    assert servers[0].parent_span_id == ""  # a trace of its own
    assert servers[0].trace_id not in (TRACE_ID, "0" * 32)


def test_errors_and_unrouted_paths_are_traced(receiver: OtlpReceiver, text_double: Wrapped) -> None:
    with TestClient(make_app([text_double], otlp_endpoint=receiver.endpoint)) as client:
        r = client.post("/embed", json={"inputs": []}, headers={"traceparent": TRACEPARENT})
        assert r.status_code == 422
        assert client.get("/nowhere", headers={"traceparent": TRACEPARENT}).status_code == 404
        for probe in ("/healthz", "/readyz", "/metrics"):  # probes and scrapes: untraced
            assert client.get(probe, headers={"traceparent": TRACEPARENT}).status_code == 200
    unrouted = [s for s in receiver.spans if s.attributes.get("url.path") == "/nowhere"]
    assert [s.name for s in unrouted] == ["GET"]  # no route: the method alone (semconv)
    assert unrouted[0].attributes["http.response.status_code"] == 404
    servers = [s for s in receiver.spans if s.kind == SERVER]
    assert sorted(s.attributes["url.path"] for s in servers) == ["/embed", "/nowhere"]
    spans = by_name(receiver.spans, TRACE_ID)
    assert spans["POST /embed"].attributes["http.response.status_code"] == 422
    assert spans["POST /embed"].status_code == 0  # 4xx leave a server span unset (semconv)
    assert "forward" not in spans


def test_otel_variables_configure_it(
    receiver: OtlpReceiver, text_double: Wrapped, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "embedder-eu")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    with TestClient(make_app([text_double])) as client:
        assert client.post("/embed", json={"inputs": ["x"]}).status_code == 200
    server = next(s for s in receiver.spans if s.name == "POST /embed")
    assert server.resource["service.name"] == "embedder-eu"
    assert server.resource["deployment.environment"] == "test"


def test_the_sampler_variable_is_honoured(
    receiver: OtlpReceiver, text_double: Wrapped, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    with TestClient(make_app([text_double], otlp_endpoint=receiver.endpoint)) as client:
        assert client.post("/embed", json={"inputs": ["x"]}).status_code == 200
    assert receiver.spans == []


def test_off_by_default(text_double: Wrapped) -> None:
    app = make_app([text_double])
    assert not any(m.cls is TraceRequests for m in app.user_middleware)
    with TestClient(app) as client:
        assert client.post("/embed", json={"inputs": ["x"]}).status_code == 200
    # Nothing installed a tracer provider anywhere in the process.
    assert isinstance(otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider)


def test_unreachable_collector_costs_requests_nothing_and_warns_once(
    text_double: Wrapped, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")  # each export gives up in ~1 s
    nowhere = f"http://127.0.0.1:{free_port()}"
    caplog.set_level(logging.WARNING)
    with TestClient(make_app([text_double], otlp_endpoint=nowhere)) as client:
        took = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until two exports have failed
            started = time.perf_counter()
            r = client.post("/embed", json={"inputs": ["x"]})
            took.append(time.perf_counter() - started)
            assert r.status_code == 200
            failed = [m for m in caplog.messages if "traces: could not send" in m]
            if failed and len(took) > 40:
                break
        assert failed, "no export failed"
        assert sorted(took)[len(took) // 2] < 0.5  # the median: no request waits on exports
        stopping = time.monotonic()
    assert time.monotonic() - stopping < tracing.STOP_TIMEOUT_S + 2
    warnings = [m for m in caplog.messages if "traces: could not send" in m]
    assert len(warnings) == 1 and nowhere in warnings[0]
    # The exporter's own per-batch and per-retry lines are muffled.
    assert not [r for r in caplog.records if r.name == tracing.EXPORTER_LOGGER]


class Failing(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass


def test_quiet_exporter_warns_at_most_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    quiet = tracing.QuietExporter(Failing(), "http://collector:4318/v1/traces", lambda: now[0])
    caplog.set_level(logging.WARNING)
    for t in (0.0, 5.0, 30.0, 59.9):
        now[0] = t
        assert quiet.export([object()] * 3) is SpanExportResult.FAILURE  # type: ignore[list-item]
    assert quiet.warnings == 1
    now[0] = 60.0
    quiet.export([object()] * 2)  # type: ignore[list-item]
    assert quiet.warnings == 2
    assert "3 spans dropped" in caplog.messages[0]
    assert "11 spans dropped" in caplog.messages[-1]  # 3 x 3 since the first warning, plus 2
    assert "no reason given" in caplog.messages[-1]


def test_endpoint_precedence() -> None:
    plain = Settings()
    assert tracing.endpoint_of(plain, {}) is None
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}
    assert tracing.endpoint_of(plain, base) == "http://c:4318/v1/traces"
    signal = {**base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:9/custom"}
    assert tracing.endpoint_of(plain, signal) == "http://t:9/custom"
    ours = Settings(otlp_endpoint="http://o:4318")
    assert tracing.endpoint_of(ours, signal) == "http://o:4318/v1/traces"
    assert tracing.endpoint_of(Settings(otlp_endpoint="http://o/v1/traces"), {}) == (
        "http://o/v1/traces"
    )
    assert tracing.endpoint_of(ours, {"OTEL_SDK_DISABLED": "true"}) is None
    assert tracing.endpoint_of(plain, {**base, "OTEL_TRACES_EXPORTER": "none"}) is None
    assert tracing.endpoint_of(Settings(otlp_endpoint=" "), {}) is None


def test_the_flag_and_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(["serve", "--otlp-endpoint", "http://c:4318"])
    assert args.otlp_endpoint == "http://c:4318"
    monkeypatch.setenv("ATTNSERVE_OTLP_ENDPOINT", "http://env:4318")
    assert Settings().otlp_endpoint == "http://env:4318"


def test_stopping_is_bounded_when_the_collector_never_answers() -> None:
    # A socket that is listened on but never accepted: each export waits out the exporter's
    # whole timeout (10 s by default); stopping gives up after its own bound.
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        traces = tracing.Tracing(f"http://127.0.0.1:{silent.getsockname()[1]}/v1/traces")
        traces.start()
        assert traces.tracer is not None
        for _ in range(3):
            traces.tracer.start_span("lost").end()
        started = time.monotonic()
        assert traces.stop(timeout_s=1.0) is False
        assert time.monotonic() - started < 3.0
        assert traces.tracer is None


def test_the_processors_queue_full_lines_come_once_a_minute() -> None:
    now = [0.0]
    once = tracing._OncePerMinute(lambda: now[0])
    record = logging.LogRecord("x", logging.WARNING, "", 0, "Queue full, dropping Span.", (), None)
    passed = []
    for t in (0.0, 1.0, 20.0, 59.0, 60.0, 61.0, 119.0, 120.5):
        now[0] = t
        passed.append(once.filter(record))
    assert passed == [True, False, False, False, True, False, False, True]
    processor = logging.getLogger(tracing.PROCESSOR_LOGGER)
    tracing._muffle_exporter_logs()
    assert tracing._ONCE_PER_MINUTE in processor.filters
