"""A real OTLP/HTTP trace receiver for tests: ``POST /v1/traces`` with a protobuf
``ExportTraceServiceRequest`` body (the collector's own message, from ``opentelemetry-proto``),
on a free loopback port, in a thread.

    with OtlpReceiver() as receiver:
        app = make_app(..., otlp_endpoint=receiver.endpoint)
        ...
        spans = receiver.wait_for(lambda spans: len(spans) >= 3)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class ReceivedSpan:
    """One span as the receiver parsed it (ids as lower-case hex, as in ``traceparent``)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int
    links: list[tuple[str, str]] = field(default_factory=list)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def parse_export(body: bytes) -> list[ReceivedSpan]:
    """Every span of an ``ExportTraceServiceRequest`` body."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        kind=s.kind,
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes=_attributes(s.attributes),
                        resource=resource,
                        status_code=s.status.code,
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in s.links],
                    )
                )
    return spans


class OtlpReceiver:
    """Collects the spans POSTed to ``/v1/traces``; anything else gets a 404."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self.content_types: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                spans = parse_export(body)
                with receiver._lock:
                    receiver.spans.extend(spans)
                    receiver.posts += 1
                    receiver.content_types.append(self.headers.get("content-type", ""))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL (``/v1/traces`` is the exporter's to add)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def wait_for(
        self, enough: Callable[[list[ReceivedSpan]], bool], timeout: float = 10.0
    ) -> list[ReceivedSpan]:
        """The spans received, once ``enough`` says so (or the timeout passes)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                spans = list(self.spans)
            if enough(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.02)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def free_port() -> int:
    """A loopback port nothing listens on (just now): for an unreachable collector."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
