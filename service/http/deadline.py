"""A one-shot deadline on the event loop that can be armed, disarmed and re-armed: the
connection guards' header and body deadlines (:mod:`service.http.transport`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Deadline:
    """Calls ``on_expiry`` once ``seconds`` after :meth:`arm`, unless :meth:`disarm` comes
    first; :attr:`armed` is false again once it has fired."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_expiry: Callable[[], None]) -> None:
        self._loop = loop
        self._on_expiry = on_expiry
        self._handle: asyncio.TimerHandle | None = None

    @property
    def armed(self) -> bool:
        """Whether the deadline is running."""
        return self._handle is not None

    def arm(self, seconds: float) -> None:
        """Start the deadline ``seconds`` from now (callers disarm before re-arming)."""
        self._handle = self._loop.call_later(seconds, self._expire)

    def disarm(self) -> None:
        """Stop the deadline (nothing happens when it is not running)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _expire(self) -> None:
        self._handle = None
        self._on_expiry()
