"""The HTTP connection layer's guards that uvicorn does not give: a deadline for a request's
headers and a hard limit on their size, a backstop deadline for its body, and connection limits
that drop stalled connections before busy ones (:mod:`service.http.connections`). (Keep-alive is
a uvicorn setting; the body's size and its deadline's 408 are
:class:`service.http.middleware.BodyLimit`'s.)

uvicorn arms no timer before the first request of a connection, and disarms the keep-alive
timer on any byte, so a client that sends a request's headers a byte at a time (or nothing)
holds the connection open for ever. Here a connection must deliver complete headers within
``header_timeout_s`` of connecting, and each later request within that time of its first byte.
Neither parser bounds the headers' size on its own (h11 only while they arrive in pieces;
httptools not at all): here every byte before the end of the headers counts.

Both of uvicorn's HTTP/1.1 protocols are guarded alike: httptools (a C parser, the default: it
takes a fraction of h11's time per request on the event loop) and h11 (pure Python, for
platforms without httptools' wheels). :func:`guarded_protocol` picks one.

Connection limits: every protocol instance of one server reports its state (idle, sending
headers, sending a body, active) to the server's :class:`ConnectionRegistry`, which at
``max_connections`` (or ``max_connections_per_client`` from one address) names the connections
to drop for a new one, longest-waiting first. uvicorn's own ``limit_concurrency`` is not used:
it answers every new request a plain-text 503 once the process holds that many connections,
whatever they are doing, so a thousand trickling sockets kept ``/healthz`` down (issue 50).

An answer that ends the connection while the request's body is still arriving (a 413) is
followed by a lingering close (:mod:`service.http.linger`), so the client reads it rather than a
connection reset.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import time
from typing import Any, ClassVar, Literal, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from service.http.connections import ConnectionRegistry, State
from service.http.deadline import Deadline
from service.http.linger import Linger, LingeringTransport, expects_continue

log = logging.getLogger("attnserve")

HttpParser = Literal["auto", "httptools", "h11"]


def _error_response(status: bytes, type_: str, message: str, extra: bytes = b"") -> bytes:
    """A complete HTTP/1.1 response with the one error body, closing the connection (``extra``:
    more header lines, each ending in CRLF)."""
    body = json.dumps({"error": {"type": type_, "message": message}}).encode()
    head = (
        b"HTTP/1.1 "
        + status
        + b"\r\nconnection: close\r\ncontent-type: application/json\r\n"
        + extra
        + f"content-length: {len(body)}\r\n\r\n".encode()
    )
    return head + body


TIMEOUT_RESPONSE = _error_response(
    b"408 Request Timeout",
    "header_timeout",
    "the request headers did not arrive in time; send them at once",
)


BODY_TIMEOUT_RESPONSE = _error_response(
    b"408 Request Timeout",
    "body_timeout",
    "the request body stalled: it did not all arrive in time; send it at once",
)


def _busy_response(why: str) -> bytes:
    return _error_response(
        b"503 Service Unavailable",
        "too_many_connections",
        f"the server holds too many connections ({why}) and closed this one; retry",
        b"retry-after: 1\r\n",
    )


# A body still arriving this long after BodyLimit's own deadline (which answers the 408) is cut
# off here: a route that never reads its body, or a client that trickles on after the answer.
BODY_BACKSTOP_MARGIN_S = 1.0
# At most one warning per this many seconds about dropped or refused connections.
WARN_EVERY_S = 10.0


class HeaderGuard:
    """The deadline and byte count of one connection's incoming request headers, shared by the
    two guarded protocols: they only say whether the next byte is a request's headers
    (:meth:`_awaiting_headers`), when those end (:meth:`done`) and whether a body is still
    arriving (:meth:`_receiving_body`); this class reads each chunk first (:meth:`data_received`),
    keeps the connection's state in the server's registry and enforces its limits."""

    header_timeout_s: ClassVar[float] = 10.0
    max_header_bytes: ClassVar[int] = 16 * 1024
    body_timeout_s: ClassVar[float] = 30.0
    linger_bytes: ClassVar[int] = 8 * 1024 * 1024  # discarded at most in a lingering close
    registry: ClassVar[ConnectionRegistry | None] = None  # one per server (guarded_protocol)

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    client: tuple[str, int] | None
    cycle: Any

    def _guard_init(self) -> None:
        self._header_deadline = Deadline(self.loop, self._expired)
        self._body_deadline = Deadline(self.loop, self._body_expired)
        self._header_bytes = 0  # of the request whose headers are arriving
        self._tail = b""  # its last 3 bytes, to find a terminator split between two reads
        self._conn_state = State.IDLE
        self._linger: Linger | None = None

    def _awaiting_headers(self) -> bool:
        """Whether the next byte belongs to a request's line or headers."""
        raise NotImplementedError

    def _receiving_body(self) -> bool:
        """Whether a request's headers are in and its body is not."""
        raise NotImplementedError

    # The protocol's own connection callbacks, with the deadline armed from the first moment.
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw_transport = cast(asyncio.Transport, transport)
        lingering = LingeringTransport(self._raw_transport, self._start_linger)
        super().connection_made(cast(asyncio.Transport, lingering))  # type: ignore[misc]
        self._header_deadline.arm(self.header_timeout_s)
        self._admit()

    def connection_lost(self, exc: Exception | None) -> None:
        self._header_deadline.disarm()
        self._body_deadline.disarm()
        if self._linger is not None:
            self._linger.cancel()
        if self.registry is not None:
            self.registry.forget(self)
        super().connection_lost(exc)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._sync_state()

    # Lingering close (service.http.linger).
    def _start_linger(self) -> bool:
        """Asked by the transport's ``close()``: linger (True) when an answer is complete and
        the request's body is still arriving, unless the client awaits ``100 Continue``."""
        cycle = self.cycle
        if (
            self._raw_transport.is_closing()
            or cycle is None
            or not cycle.response_complete
            or not self._receiving_body()
            or expects_continue(cycle.scope["headers"])
        ):
            return False
        self._header_deadline.disarm()
        self._body_deadline.disarm()
        self._linger = Linger(self.loop, self._raw_transport, self.linger_bytes)
        self._conn_state = State.LINGER
        if self.registry is not None:
            self.registry.move(self, State.LINGER)
        return True

    def _discarded(self, data: bytes) -> bool:
        """Whether ``data`` came while lingering (and was discarded)."""
        if self._linger is None:
            return False
        self._linger.feed(len(data))
        return True

    # Connection limits.
    def _admit(self) -> None:
        registry = self.registry
        if registry is None:
            return
        admission = registry.admit(self, self.client[0] if self.client else "")
        for victim in admission.shed:
            assert isinstance(victim, HeaderGuard)
            victim._drop("it had waited longest")
        if not admission.admitted:
            self._drop(admission.reason, answer=True)
        if admission.shed or not admission.admitted:
            self._warn(registry)

    def _drop(self, why: str, answer: bool = False) -> None:
        """Close this connection: with a 503 when ``answer`` (a new connection refused) or when
        it has sent part of a request nothing has answered yet; silently when it has sent
        nothing (an idle keep-alive or fresh connection may be closed at any time: clients
        retry, RFC 9112 section 9.3.1)."""
        self._header_deadline.disarm()
        self._body_deadline.disarm()
        if self._linger is not None:
            self._linger.close()
            return
        if self.transport.is_closing():
            return
        started = self.cycle is not None and self.cycle.response_started
        if answer or (self._conn_state in (State.HEADERS, State.BODY) and not started):
            self.transport.write(_busy_response(why))
        self.transport.close()

    def _warn(self, registry: ConnectionRegistry) -> None:
        now = time.monotonic()
        if now - registry.warned_at < WARN_EVERY_S:
            return
        registry.warned_at = now
        log.warning(
            "connection limits: %d connections held, %d stalled ones dropped and %d new ones "
            "refused so far (max_connections %d, max_connections_per_client %d)",
            len(registry),
            registry.shed_total,
            registry.refused_total,
            registry.max_total,
            registry.max_per_client,
        )

    def _sync_state(self) -> None:
        """Tell the registry what the connection is doing now; a body's backstop deadline runs
        from the end of its headers."""
        if self.transport.is_closing():
            return
        if self._awaiting_headers():
            state = State.HEADERS if self._header_bytes else State.IDLE
        elif self._receiving_body():
            state = State.BODY
        else:
            state = State.ACTIVE
        if state is self._conn_state:
            return
        if state is State.BODY:
            timeout = self.body_timeout_s + BODY_BACKSTOP_MARGIN_S
            self._body_deadline.arm(timeout)
        elif self._conn_state is State.BODY:
            self._body_deadline.disarm()
        self._conn_state = state
        if self.registry is not None:
            self.registry.move(self, state)

    def _body_expired(self) -> None:
        if self._conn_state is not State.BODY or self.transport.is_closing():
            return
        if self.cycle is None or not self.cycle.response_started:
            self.transport.write(BODY_TIMEOUT_RESPONSE)
        self._raw_transport.close()  # no lingering for a trickle

    def data_received(self, data: bytes) -> None:
        """The protocol's callback: discarded while lingering, counted while awaiting headers
        (refused past the limit), then parsed; the registry then hears the new state."""
        if self._discarded(data):
            return
        if self._awaiting_headers() and not self.feed(data):
            return
        super().data_received(data)  # type: ignore[misc]
        self._parsed()
        self._sync_state()

    def _parsed(self) -> None:
        """After the parser has read a chunk: h11 ends a request's headers here (httptools ends
        them in its ``on_headers_complete`` callback)."""

    def feed(self, data: bytes) -> bool:
        """Count ``data`` (received while awaiting headers); False: refused, stop reading."""
        if not self._header_deadline.armed:  # the first byte of a request on a kept-alive one
            self._header_deadline.arm(self.header_timeout_s)
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
        self._header_deadline.disarm()
        self._header_bytes, self._tail = 0, b""

    def _refuse_headers(self) -> None:
        self._header_deadline.disarm()
        if not self.transport.is_closing():
            self.transport.write(
                _error_response(
                    b"431 Request Header Fields Too Large",
                    "headers_too_large",
                    f"the request line and headers are over {self.max_header_bytes} bytes",
                )
            )
            self.transport.close()

    def _expired(self) -> None:
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

    def _receiving_body(self) -> bool:
        return self.conn.their_state is h11.SEND_BODY

    def _parsed(self) -> None:
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

        def _receiving_body(self) -> bool:
            return not self._between_requests

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
    header_timeout_s: float,
    max_header_bytes: int,
    parser: HttpParser = "auto",
    body_timeout_s: float = 30.0,
    registry: ConnectionRegistry | None = None,
    linger_bytes: int = 8 * 1024 * 1024,
) -> type:
    """The protocol class for uvicorn's ``http=`` with this header deadline and size limit, the
    body backstop, and (when given) the connection limits of ``registry``: one class, and one
    registry, per server. ``linger_bytes``: the most a lingering close discards."""
    base = _httptools_protocol() if resolve_parser(parser) == "httptools" else GuardedH11Protocol
    limits = {
        "header_timeout_s": header_timeout_s,
        "max_header_bytes": max_header_bytes,
        "body_timeout_s": body_timeout_s,
        "registry": registry,
        "linger_bytes": linger_bytes,
    }
    return type(base.__name__, (base,), limits)
