"""The HTTP connection layer's guards that uvicorn does not give: a deadline for a request's
headers and a hard limit on their size. (Keep-alive and connection limits are uvicorn settings;
the body's size and read time are :class:`service.http.middleware.BodyLimit`'s.)

uvicorn arms no timer before the first request of a connection, and disarms the keep-alive
timer on any byte, so a client that sends a request's headers a byte at a time (or nothing)
holds the connection open for ever. Here a connection must deliver complete headers within
``header_timeout_s`` of connecting, and each later request within that time of its first byte.
Neither parser bounds the headers' size on its own (h11 only while they arrive in pieces;
httptools not at all): here every byte before the end of the headers counts.

Both of uvicorn's HTTP/1.1 protocols are guarded alike: httptools (a C parser, the default: it
takes a fraction of h11's time per request on the event loop) and h11 (pure Python, for
platforms without httptools' wheels). :func:`guarded_protocol` picks one.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from typing import Any, ClassVar, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HttpParser = Literal["auto", "httptools", "h11"]


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


class HeaderGuard:
    """The deadline and byte count of one connection's incoming request headers, shared by the
    two guarded protocols: they only say when a request's headers start (:meth:`feed` while
    waiting for them) and end (:meth:`done`)."""

    header_timeout_s: ClassVar[float] = 10.0
    max_header_bytes: ClassVar[int] = 16 * 1024

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def _guard_init(self) -> None:
        self._header_deadline: asyncio.TimerHandle | None = None
        self._header_bytes = 0  # of the request whose headers are arriving
        self._tail = b""  # its last 3 bytes, to find a terminator split between two reads

    def _awaiting_headers(self) -> bool:
        """Whether the next byte belongs to a request's line or headers."""
        raise NotImplementedError

    # The protocol's own connection callbacks, with the deadline armed from the first moment.
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)  # type: ignore[misc]

    def feed(self, data: bytes) -> bool:
        """Count ``data`` (received while awaiting headers); False: refused, stop reading."""
        if self._header_deadline is None:
            self._arm()  # the first byte of a request on a kept-alive connection
        seen = self._tail + data
        end = seen.find(b"\r\n\r\n")
        self._header_bytes += len(data) if end < 0 else end + 4 - len(self._tail)
        self._tail = seen[-3:]
        if self._header_bytes > self.max_header_bytes:
            self._refuse_headers()
            return False
        return True

    def done(self) -> None:
        """The request's headers are in."""
        self._disarm()
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
        if self._awaiting_headers() and not self.transport.is_closing():
            self.transport.write(TIMEOUT_RESPONSE)
            self.transport.close()


class GuardedH11Protocol(HeaderGuard, H11Protocol):
    """uvicorn's h11 protocol with the header guard (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard_init()

    def _awaiting_headers(self) -> bool:
        return self.conn.their_state is h11.IDLE

    def data_received(self, data: bytes) -> None:
        if self._awaiting_headers() and not self.feed(data):
            return
        super().data_received(data)
        if not self._awaiting_headers():
            self.done()


def _httptools_protocol() -> type:
    """The guarded httptools protocol (defined only where httptools is installed)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(HeaderGuard, HttpToolsProtocol):
        """uvicorn's httptools protocol with the header guard. The parser reports a request's
        start and the end of its headers by callbacks; between the end of one request's body
        and the next request's headers, the connection awaits headers (while no response is
        still being written: bytes of a pipelined request then wait, as under h11)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._guard_init()
            self._between_requests = True

        def _awaiting_headers(self) -> bool:
            return self._between_requests and (self.cycle is None or self.cycle.response_complete)

        def data_received(self, data: bytes) -> None:
            if self._awaiting_headers() and not self.feed(data):
                return
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self._between_requests = False
            self.done()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._between_requests = True

    return GuardedHttpToolsProtocol


def resolve_parser(parser: HttpParser) -> Literal["httptools", "h11"]:
    """``auto``: httptools when installed, else h11."""
    if parser == "auto":
        return "httptools" if importlib.util.find_spec("httptools") else "h11"
    return parser


def guarded_protocol(
    header_timeout_s: float, max_header_bytes: int, parser: HttpParser = "auto"
) -> type:
    """The protocol class for uvicorn's ``http=`` with this header deadline and size limit."""
    base = _httptools_protocol() if resolve_parser(parser) == "httptools" else GuardedH11Protocol
    limits = {"header_timeout_s": header_timeout_s, "max_header_bytes": max_header_bytes}
    return type(base.__name__, (base,), limits)
