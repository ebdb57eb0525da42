"""The HTTP connection layer's guards that uvicorn does not give: a deadline for a request's
headers and a hard limit on their size. (Keep-alive and connection limits are uvicorn settings;
the body's size and read timeout are :class:`service.middleware.BodyLimit`'s.)

uvicorn arms no timer before the first request of a connection, and disarms the keep-alive
timer on any byte, so a client that sends a request's headers a byte at a time (or nothing)
holds the connection open for ever. Here a connection must deliver complete headers within
``header_timeout_s`` of connecting, and each later request within that time of its first byte.
And h11 bounds the size of headers only while they arrive in pieces (a large block in one read
is parsed whatever its size): here every byte before the end of the headers counts.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def _error_response(status: bytes, type_: str, message: str) -> bytes:
    """A complete HTTP/1.1 response with the one error body, closing the connection."""
    body = json.dumps({"error": {"type": type_, "message": message}}).encode()
    head = (
        b"HTTP/1.1 "
        + status
        + b"\r\nconnection: close\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
    )
    return head + body


TIMEOUT_RESPONSE = _error_response(
    b"408 Request Timeout",
    "header_timeout",
    "the request headers did not arrive in time; send them at once",
)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline (see the module docstring)."""

    header_timeout_s: ClassVar[float] = 10.0
    max_header_bytes: ClassVar[int] = 16 * 1024

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._header_bytes = 0  # of the request whose headers are arriving
        self._tail = b""  # its last 3 bytes, to find a terminator split between two reads

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            if self._header_deadline is None:
                self._arm()  # the first byte of a request on a kept-alive connection
            # h11 bounds only headers that arrive in pieces: count them here, whole or not.
            seen = self._tail + data
            end = seen.find(b"\r\n\r\n")
            self._header_bytes += len(data) if end < 0 else end + 4 - len(self._tail)
            self._tail = seen[-3:]
            if self._header_bytes > self.max_header_bytes:
                self._refuse_headers()
                return
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()  # the headers are in
            self._header_bytes, self._tail = 0, b""

    def _refuse_headers(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(
                _error_response(
                    b"431 Request Header Fields Too Large",
                    "headers_too_large",
                    f"the request line and headers are over {self.max_header_bytes} bytes",
                )
            )
            self.transport.close()

    def _arm(self) -> None:
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _expired(self) -> None:
        self._header_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.write(TIMEOUT_RESPONSE)
            self.transport.close()


def guarded_protocol(header_timeout_s: float, max_header_bytes: int) -> type[GuardedH11Protocol]:
    """The protocol class for uvicorn's ``http=`` with this header deadline and size limit."""
    limits = {"header_timeout_s": header_timeout_s, "max_header_bytes": max_header_bytes}
    return type("GuardedH11", (GuardedH11Protocol,), limits)
