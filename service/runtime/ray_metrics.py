"""Every Ray Serve replica's ``attnserve_*`` metrics on any replica's ``/metrics``, labelled by
replica.

Prometheus reaches replicas only through Ray's proxy, which sends a scrape to one replica of its
choosing, so each replica alone would report a random share of the traffic. Instead each replica
pushes its own exposition to a small named Ray actor (:class:`MetricsHub`) every ``PUSH_EVERY_S``
and keeps the others' latest copies; its ``/metrics`` answers every live replica's values, each
sample labelled ``replica``. Dashboards that sum over labels work unchanged; a replica that stops
pushing (gone) drops out after ``STALE_AFTER_S``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import cast

import ray
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from service.observability.metrics import Metrics

HUB_NAME = "attnserve-metrics-hub"
PUSH_EVERY_S = 2.0
STALE_AFTER_S = 3 * PUSH_EVERY_S


@ray.remote(num_cpus=0)
class MetricsHub:
    """The latest exposition text of every replica, by replica id."""

    def __init__(self) -> None:
        self.texts: dict[str, tuple[float, str]] = {}

    def push(self, replica: str, text: str) -> dict[str, str]:
        """Keep ``replica``'s text; returns every replica's fresh text (its own included)."""
        now = time.monotonic()
        self.texts[replica] = (now, text)
        self.texts = {r: v for r, v in self.texts.items() if now - v[0] <= STALE_AFTER_S}
        return {r: text for r, (_, text) in self.texts.items()}


def hub() -> ray.actor.ActorHandle:
    """The cluster's hub (created by the first replica that asks; detached, so it outlives any
    one replica)."""
    return MetricsHub.options(  # type: ignore[attr-defined]
        name=HUB_NAME, get_if_exists=True, lifetime="detached"
    ).remote()


def merge(texts: dict[str, str]) -> bytes:
    """One exposition of several replicas' texts, each sample labelled with its replica."""
    families: dict[str, Metric] = {}
    for replica, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            merged.samples.extend(
                Sample(s.name, {**s.labels, "replica": replica}, s.value, s.timestamp, s.exemplar)
                for s in family.samples
            )

    class Merged:
        def collect(self) -> Iterator[Metric]:
            yield from families.values()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Merged())
    return generate_latest(registry)


class ReplicaMetrics:
    """Pushes one replica's metrics to the hub and serves everyone's (``Metrics.render``)."""

    def __init__(self, metrics: Metrics, replica: str) -> None:
        self.metrics = metrics
        self.replica = replica
        self.own = metrics.render  # this replica's registry alone
        self.others: dict[str, str] = {}
        self.hub = hub()
        self._thread = threading.Thread(target=self._loop, name="metrics-push", daemon=True)

    def start(self) -> None:
        """Replace ``metrics.render`` with the cluster-wide view and start pushing."""
        self.metrics.render = self.render  # type: ignore[method-assign]
        self._thread.start()

    def render(self) -> bytes:
        """Every live replica's metrics: this one's current values, the others' latest push."""
        return merge({**self.others, self.replica: self.own().decode()})

    def _loop(self) -> None:
        # Runs as long as the replica's process: a replica that is gone stops pushing and drops
        # out of the others' views after STALE_AFTER_S.
        while True:
            try:
                pushed: ray.ObjectRef[dict[str, str]] = self.hub.push.remote(
                    self.replica, self.own().decode()
                )
                texts = cast(dict[str, str], ray.get(pushed))
            except Exception:  # the hub was lost (its node died): recreate it, push again
                self.hub = hub()
            else:
                texts.pop(self.replica, None)
                self.others = texts
            time.sleep(PUSH_EVERY_S)
