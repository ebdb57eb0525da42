"""What one app instance holds: settings, metrics, lifecycle, and (once loaded) models."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.engine.batching.batcher import Batcher
from service.engine.batching.device import DeviceRuntime
from service.engine.engine import Engine
from service.engine.registry import Loader, Registry
from service.http.body_pool import BodyParsePool
from service.lifecycle import Lifecycle
from service.observability.metrics import Metrics
from service.settings import Settings


@dataclass
class AppState:
    """Stored on ``app.state.attnserve``; ``registry``/``batcher``/``engine``/``runtime`` are
    None until loaded."""

    settings: Settings
    metrics: Metrics
    loader: Loader
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    registry: Registry | None = None
    batcher: Batcher | None = None
    engine: Engine | None = None
    runtime: DeviceRuntime | None = None
    device: str = "cpu"
    body_pool: BodyParsePool | None = None
