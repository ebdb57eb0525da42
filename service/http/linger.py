"""A lingering close: after an answer that ends the connection while the request's body is
still arriving (a 413 refused from ``Content-Length``), the server half-closes (FIN after the
answer) and reads and discards what the client still sends, for a bounded time and amount,
before it closes.

Why (issue 50 item 5.3): closing a socket with unread bytes in its receive buffer makes the
kernel send a TCP reset instead of a FIN, and a reset discards whatever of the answer is still
in the server's send queue; a client still writing its body gets "connection reset" on its next
write, and many stop there without reading the 413 that was sent. nginx (``lingering_close``,
``lingering_time``, ``lingering_timeout``) and Apache (``ap_lingering_close``) do the same;
RFC 9112 section 9.6 describes it.

Bounds, so lingering cannot be abused: at most ``LINGER_S`` in all, ``LINGER_IDLE_S`` without a
byte (closing then is clean: nothing is left unread), and the protocol's ``linger_bytes``; a
lingering connection is the first one the connection limits drop. Not when the client sent
``Expect: 100-continue``: it has not sent its body (no ``100 Continue`` came) and will not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

# nginx's defaults are lingering_time 30 s and lingering_timeout 5 s; shorter here: a client whose
# body was refused gets a few seconds to finish writing it, not half a minute of the server.
LINGER_S = 5.0
LINGER_IDLE_S = 1.0


class LingeringTransport:
    """The connection's transport as the protocol and its request cycles see it (uvicorn's
    cycles close the transport themselves when a response ends the connection): ``close()``
    first offers the protocol a lingering close, and ``is_closing()`` is true while it lingers.
    Everything else is the wrapped transport's."""

    def __init__(self, transport: asyncio.Transport, linger: Callable[[], bool]) -> None:
        self._transport = transport
        self._linger = linger  # True: lingering now (the protocol closes later)
        self.lingering = False

    def close(self) -> None:
        if not self.lingering and self._linger():
            self.lingering = True
            return
        self._transport.close()

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def expects_continue(headers: Any) -> bool:
    """Whether a request's ASGI ``headers`` carry ``Expect: 100-continue``."""
    return any(k == b"expect" and v.lower() == b"100-continue" for k, v in headers)


class Linger:
    """One connection's lingering close, from the moment its answer is written: FIN after the
    answer, reading resumed, and the transport closed at the first bound reached (see the module
    docstring) or when the client closes (the transport then closes itself). :meth:`feed` counts
    each discarded chunk."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport, max_bytes: int
    ) -> None:
        self._loop = loop
        self._transport = transport
        self._left = max_bytes
        self._end = loop.time() + LINGER_S
        self._seen = loop.time()  # when the last byte came
        if transport.can_write_eof():
            transport.write_eof()  # after the answer still buffered: the client reads it, then EOF
        transport.resume_reading()  # uvicorn pauses reading while a body waits unread
        self._timer: asyncio.TimerHandle | None = loop.call_later(LINGER_IDLE_S, self._tick)

    def feed(self, n: int) -> None:
        """``n`` more bytes came and were discarded."""
        self._left -= n
        self._seen = self._loop.time()
        if self._left < 0:
            self.close()  # over the bound: the client may see a reset now

    def _tick(self) -> None:
        now = self._loop.time()
        wake = min(self._seen + LINGER_IDLE_S, self._end)
        if now >= wake:
            self._timer = None
            self.close()
        else:
            self._timer = self._loop.call_later(wake - now, self._tick)

    def cancel(self) -> None:
        """Stop the timer (the connection is gone)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        """Close now."""
        self.cancel()
        self._transport.close()
