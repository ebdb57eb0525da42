"""Prometheus metrics (every one in :mod:`~service.observability.metrics`) and logging."""
