"""Prometheus metrics (every one in :mod:`~service.observability.metrics`), logging, and
OpenTelemetry traces (:mod:`~service.observability.tracing`, :mod:`~service.observability.spans`)."""
