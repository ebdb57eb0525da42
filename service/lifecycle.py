"""Where the process is in its life: starting -> ready -> draining -> stopped (or failed)."""

from __future__ import annotations

import enum
import time


class Phase(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    STOPPED = "stopped"
    FAILED = "failed"


class Lifecycle:
    """The readiness state shared by the lifespan, the signal handler and the routes."""

    def __init__(self) -> None:
        self.phase = Phase.STARTING
        self.detail = "loading models"
        self.drain_started_at: float | None = None
        self.inflight = 0  # model requests admitted and not yet answered

    @property
    def ready(self) -> bool:
        return self.phase is Phase.READY

    @property
    def draining(self) -> bool:
        return self.phase in (Phase.DRAINING, Phase.STOPPED)

    def step(self, detail: str) -> None:
        """Note progress during start-up (shown by /readyz)."""
        if self.phase is Phase.STARTING:
            self.detail = detail

    def mark_ready(self) -> None:
        if self.phase is Phase.STARTING:
            self.phase, self.detail = Phase.READY, "ready"

    def begin_drain(self) -> None:
        """SIGTERM (or lifespan shutdown): readiness off, no new model requests."""
        if self.phase in (Phase.STARTING, Phase.READY):
            self.phase, self.detail = Phase.DRAINING, "shutting down"
            self.drain_started_at = time.monotonic()

    def draining_for(self) -> float:
        """Seconds since draining began (0 when not draining)."""
        if self.drain_started_at is None:
            return 0.0
        return time.monotonic() - self.drain_started_at

    def mark_stopped(self) -> None:
        if self.phase is not Phase.FAILED:  # keep the reason a failed start-up gave
            self.phase, self.detail = Phase.STOPPED, "stopped"

    def fail(self, reason: str) -> None:
        self.phase, self.detail = Phase.FAILED, reason
