"""OpenTelemetry traces out: where they go, the tracer provider's life, and quiet failures.

Tracing is on when ``otlp_endpoint`` is set (``--otlp-endpoint``, ``ATTNSERVE_OTLP_ENDPOINT``) or
the standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT`` variables
name a collector, and off otherwise: then :func:`configured` returns None, the app installs no
tracing middleware and no tracer provider, and the request path pays one context-variable read
at the places that would record spans (:mod:`service.observability.spans`).

Spans leave as OTLP over HTTP with protobuf bodies (OTLP specification, "OTLP/HTTP":
https://opentelemetry.io/docs/specs/otlp/#otlphttp) through the SDK's ``BatchSpanProcessor``,
which queues finished spans and sends them from its own thread: a slow or unreachable collector
never holds a request. The SDK reads its own variables as it always does: ``OTEL_SERVICE_NAME``
and ``OTEL_RESOURCE_ATTRIBUTES`` (the resource), ``OTEL_TRACES_SAMPLER`` and ``_ARG`` (the
sampler; by default the parent's decision, else every trace), ``OTEL_EXPORTER_OTLP_(TRACES_)``
``HEADERS``/``TIMEOUT``/``COMPRESSION`` and ``OTEL_BSP_*`` (queue size, delay, batch size).

The provider belongs to one app (not the process-wide global one), so each app, and each worker
process, exports on its own and stops its exporter when it stops.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Tracer

from service.settings import Settings

log = logging.getLogger("attnserve.tracing")

SERVICE_NAME = "attnserve"
TRACES_PATH = "/v1/traces"
# The exporter's own logger: one line per failed batch and per retry (every few seconds while a
# collector is down); muffled, and summed up by :class:`QuietExporter` once a minute.
EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
# The batch processor's logger: "Queue full, dropping Span." when spans come faster than they
# leave (a collector that answers slowly), up to three times a minute; held to once a minute.
PROCESSOR_LOGGER = "opentelemetry.sdk._shared_internal"
# How long stopping may wait for the last spans to leave before the server exits without them.
STOP_TIMEOUT_S = 5.0


def traces_url(base: str) -> str:
    """The traces URL of a collector: ``base`` itself when it already ends in ``/v1/traces``,
    else ``base`` with ``/v1/traces`` added (as the SDK treats ``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
    base = base.strip()
    if base.rstrip("/").endswith(TRACES_PATH):
        return base
    return base.rstrip("/") + TRACES_PATH


def endpoint_of(settings: Settings, environ: Mapping[str, str] | None = None) -> str | None:
    """Where traces go, or None when tracing is off: ``settings.otlp_endpoint``, else
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (as it is), else ``OTEL_EXPORTER_OTLP_ENDPOINT`` plus
    ``/v1/traces`` (the OTLP exporter specification's rules). ``OTEL_SDK_DISABLED=true`` turns
    tracing off, and ``OTEL_TRACES_EXPORTER=none`` turns off tracing that only the ``OTEL_*``
    variables asked for."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if settings.otlp_endpoint and settings.otlp_endpoint.strip():  # blank: not set
        return traces_url(settings.otlp_endpoint)
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return None
    if signal := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        return signal
    if base := env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        return traces_url(base)
    return None


class _Muffle(logging.Filter):
    """Drops the OTLP exporter's own log records, keeping the last one's text for the warning
    :class:`QuietExporter` writes instead."""

    def __init__(self) -> None:
        super().__init__()
        self.last = ""

    def filter(self, record: logging.LogRecord) -> bool:
        self.last = record.getMessage()
        return False


class _OncePerMinute(logging.Filter):
    """Lets a record through when none has passed in the last minute."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._passed_at: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        now = self._clock()
        if self._passed_at is not None and now - self._passed_at < QuietExporter.WARN_EVERY_S:
            return False
        self._passed_at = now
        return True


_MUFFLE = _Muffle()
_ONCE_PER_MINUTE = _OncePerMinute()


def _muffle_exporter_logs() -> None:
    for name, quiet in ((EXPORTER_LOGGER, _MUFFLE), (PROCESSOR_LOGGER, _ONCE_PER_MINUTE)):
        logger = logging.getLogger(name)
        if quiet not in logger.filters:
            logger.addFilter(quiet)


class QuietExporter(SpanExporter):
    """An exporter that never raises and warns at most once a minute: a batch the collector did
    not take is dropped (spans are not worth a slower server), and the warning says how many
    spans were dropped since the last one and why the last export failed."""

    WARN_EVERY_S = 60.0

    def __init__(
        self, inner: SpanExporter, url: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.inner, self.url, self._clock = inner, url, clock
        self._warned_at: float | None = None
        self._dropped = 0
        self.warnings = 0  # warnings written so far (for tests and the curious)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Send ``spans`` (on the batch processor's thread); FAILURE when they were dropped."""
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # an exporter bug must not kill the processor's thread
            _MUFFLE.last = repr(exc)
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._dropped += len(spans)
            now = self._clock()
            if self._warned_at is None or now - self._warned_at >= self.WARN_EVERY_S:
                self._warned_at, self.warnings = now, self.warnings + 1
                log.warning(
                    "traces: could not send spans to %s (%s); %d spans dropped (requests are "
                    "not affected; at most one such warning a minute)",
                    self.url,
                    _MUFFLE.last or "no reason given",
                    self._dropped,
                )
                self._dropped, _MUFFLE.last = 0, ""
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def abort(self) -> None:
        """Stop retrying at once (the exporter's retry waits end on shutdown)."""
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _resource(environ: Mapping[str, str]) -> Resource:
    """The SDK's resource (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``), named attnserve
    unless those name the service."""
    try:
        version = metadata.version("attnserve")
    except metadata.PackageNotFoundError:  # a source tree that was never installed
        version = "unknown"
    # process.pid: worker processes export apart, and their spans stay told apart.
    resource = Resource.create({"service.version": version, "process.pid": os.getpid()})
    named = environ.get("OTEL_SERVICE_NAME", "").strip() or any(
        pair.split("=", 1)[0].strip() == "service.name"
        for pair in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(",")
    )
    return resource if named else resource.merge(Resource({"service.name": SERVICE_NAME}))


class Tracing:
    """One app's tracer provider, from the lifespan's start to its end (the middleware starts
    and stops it: :class:`service.observability.spans.TraceRequests`).

    Args:
        url: the collector's traces URL.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.tracer: Tracer | None = None  # None until started, and again once stopped
        self.provider: TracerProvider | None = None
        self.exporter: QuietExporter | None = None

    def start(self) -> None:
        """Build the provider and its batch processor (a thread of its own)."""
        if self.provider is not None:
            return
        _muffle_exporter_logs()
        self.exporter = QuietExporter(OTLPSpanExporter(endpoint=self.url), self.url)
        # No sampler argument: the SDK reads OTEL_TRACES_SAMPLER (default: parent-based, on).
        self.provider = TracerProvider(resource=_resource(os.environ))
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("attnserve")
        log.info("traces: OTLP/HTTP to %s", self.url)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Send the spans still queued and stop (blocking; at most about ``timeout_s``).

        The processor's shutdown waits for its thread, which may be inside an export that
        retries with backoff for the exporter's whole timeout while a collector is down: it
        runs on a helper thread, and past ``timeout_s`` the exporter is told to stop retrying and
        the rest is dropped. Returns False when it had to give up."""
        provider, exporter = self.provider, self.exporter
        self.tracer = None
        if provider is None or exporter is None:
            return True
        self.provider = None
        done = threading.Thread(target=provider.shutdown, name="attnserve-traces-stop", daemon=True)
        done.start()
        done.join(timeout_s)
        if done.is_alive():
            exporter.abort()
            done.join(1.0)
            log.warning("traces: the last spans could not be sent within %.0f s", timeout_s)
            return False
        return True


def configured(settings: Settings) -> Tracing | None:
    """The app's tracing when the settings or the ``OTEL_*`` variables turn it on, else None."""
    url = endpoint_of(settings)
    return None if url is None else Tracing(url)
