"""The benchmarks' load driver (benchmarks/harness/load.py): response framing,
percentiles, and closed-loop load against a tiny local asyncio HTTP server (no models)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import uvloop

from benchmarks.harness.load import build_request, drive, parse_head, request_once
from benchmarks.harness.timing import percentile

HOST = "127.0.0.1"

# ----------------------------------------------------------------------------- a tiny server

_BODY = json.dumps({"embeddings": [[0.5, -0.25]]}).encode()


def _fixed(status: str, extra: str = "", body: bytes = _BODY) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def _chunked(parts: list[bytes]) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunks = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts)
    return head + chunks + b"0\r\n\r\n"


ROUTES = {
    b"/ok": _fixed("200 OK"),
    b"/busy": _fixed("503 Service Unavailable", body=b'{"error":"busy"}'),
    b"/close": _fixed("200 OK", "Connection: close\r\n"),
    b"/chunked": _chunked([b'{"embeddings": ', b"[[0.5, -0.25]]}"]),
}


class TinyServer:
    """Answers each request by its path (see ROUTES); counts connections and requests."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                self.requests += 1
                writer.write(ROUTES[path])
                await writer.drain()
                if path == b"/close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def tiny_server() -> AsyncIterator[TinyServer]:
    state = TinyServer()
    server = await asyncio.start_server(state.handle, HOST, 0)
    state.port = server.sockets[0].getsockname()[1]
    async with server:
        yield state


def with_server(test: Callable[[TinyServer], Awaitable[None]], loop: str = "asyncio") -> None:
    """Run ``test`` against a fresh server on an ``asyncio`` or ``uvloop`` event loop."""
    # uvloop ships with uvicorn[standard], a dependency: missing, the test fails, never skips.
    factory = uvloop.new_event_loop if loop == "uvloop" else None

    async def main() -> None:
        async with tiny_server() as server:
            await test(server)

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())


def requests_for(server: TinyServer, path: str, n: int = 3) -> list[bytes]:
    return [
        build_request(HOST, server.port, path, f'{{"inputs": "t{i}"}}'.encode()) for i in range(n)
    ]


# ----------------------------------------------------------------------------- framing


def test_build_request_frames_the_body() -> None:
    request = build_request(HOST, 8000, "/encode", b'{"inputs": "a"}')
    head, body = request.split(b"\r\n\r\n", 1)
    assert head.startswith(b"POST /encode HTTP/1.1\r\n")
    assert b"Content-Length: 15" in head.split(b"\r\n")
    assert body == b'{"inputs": "a"}'


@pytest.mark.parametrize(
    ("head", "status", "length", "chunked", "close"),
    [
        (b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n", 200, 12, False, False),
        (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n", 503, 0, False, False),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\n", 200, 3, False, True),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 200, None, True, False),
        # transfer-encoding wins over a content-length sent beside it (RFC 9112 section 6.3)
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            200,
            None,
            True,
            False,
        ),
        # no framing at all: the body runs until the server closes
        (b"HTTP/1.1 200 OK\r\n\r\n", 200, None, False, True),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n", 200, 2, False, True),
        (
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\n",
            200,
            2,
            False,
            False,
        ),
    ],
)
def test_parse_head(
    head: bytes, status: int, length: int | None, chunked: bool, close: bool
) -> None:
    parsed = parse_head(head)
    assert (parsed.status, parsed.content_length, parsed.chunked, parsed.close) == (
        status,
        length,
        chunked,
        close,
    )


@pytest.mark.parametrize(
    "head", [b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"]
)
def test_parse_head_refuses_malformed_heads(head: bytes) -> None:
    with pytest.raises(ValueError):
        parse_head(head)


# ----------------------------------------------------------------------------- percentiles


def test_percentile_is_nearest_rank() -> None:
    values = [float(x) for x in range(100, 0, -1)]  # 1..100, unsorted
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 0.5) == 1.0
    # Never interpolated: with 4 values p50 is the 2nd smallest, p99 the largest.
    assert percentile([10.0, 40.0, 20.0, 30.0], 50) == 20.0
    assert percentile([10.0, 40.0, 20.0, 30.0], 99) == 40.0
    assert percentile([7.0], 99) == 7.0


def test_percentile_of_nothing_is_nan_and_q_is_checked() -> None:
    assert percentile([], 50) != percentile([], 50)  # NaN
    with pytest.raises(ValueError):
        percentile([1.0], 0)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


# ----------------------------------------------------------------------------- against a server


def test_request_once_reads_content_length_and_chunked_bodies() -> None:
    async def check(server: TinyServer) -> None:
        for path in ("/ok", "/chunked"):
            status, body = await request_once(HOST, server.port, requests_for(server, path)[0])
            assert status == 200
            assert json.loads(body) == {"embeddings": [[0.5, -0.25]]}
        status, body = await request_once(HOST, server.port, requests_for(server, "/busy")[0])
        assert (status, json.loads(body)) == (503, {"error": "busy"})

    with_server(check)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_closed_loop_keeps_one_connection_per_client(loop: str) -> None:
    async def check(server: TinyServer) -> None:
        probe_calls = []

        def probe() -> float:
            probe_calls.append(1)
            return 1.5 * len(probe_calls)  # 1.5 at the window's start, 3.0 at its end

        result = await drive(
            HOST, server.port, requests_for(server, "/ok"), 4, 0.4, 0.1, probes={"server": probe}
        )
        assert server.connections == 4  # keep-alive: one connection each, never reopened
        assert result.error_count == 0
        assert result.requests > 20
        # Requests answered in the warm-up are sent but not counted.
        assert result.requests < server.requests
        assert len(result.latencies_ms) == result.requests
        assert all(0 < x < 1000 for x in result.latencies_ms)
        assert result.throughput == pytest.approx(result.requests / 0.4)
        assert result.cpu_s["server"] == pytest.approx(1.5)
        assert 0 <= result.cpu_s["driver"] < 5

    with_server(check, loop)


def test_non_2xx_answers_are_errors_not_requests() -> None:
    async def check(server: TinyServer) -> None:
        result = await drive(HOST, server.port, requests_for(server, "/busy"), 2, 0.3, 0.05)
        assert result.requests == 0
        assert result.latencies_ms == []
        assert set(result.errors) == {"HTTP 503"}
        assert result.errors["HTTP 503"] > 10

    with_server(check)


def test_connection_close_reopens_and_chunked_bodies_count() -> None:
    async def check(server: TinyServer) -> None:
        closing = await drive(HOST, server.port, requests_for(server, "/close"), 2, 0.3, 0.05)
        assert closing.error_count == 0
        assert closing.requests > 5
        assert server.connections == server.requests  # one request per connection
        chunked = await drive(HOST, server.port, requests_for(server, "/chunked"), 2, 0.3, 0.05)
        assert chunked.error_count == 0 and chunked.requests > 5

    with_server(check)


def test_a_refused_connection_is_an_error() -> None:
    async def main() -> None:
        # A port nothing listens on: take one, then let it go.
        probe = await asyncio.start_server(lambda r, w: None, HOST, 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        result = await drive(HOST, port, [build_request(HOST, port, "/ok", b"{}")], 1, 0.2, 0.0)
        assert result.requests == 0
        assert set(result.errors) == {"ConnectionRefusedError"}
        assert result.errors["ConnectionRefusedError"] >= 1

    asyncio.run(main())


def test_an_unanswered_request_is_counted_after_the_grace_period() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(silent, HOST, 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            requests = [build_request(HOST, port, "/ok", b"{}")]
            result = await drive(HOST, port, requests, 3, 0.1, 0.0, grace=0.2)
        assert result.requests == 0
        assert result.errors == {"unanswered": 3}

    asyncio.run(main())
