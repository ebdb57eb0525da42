"""Transport limits on the real server (issue 15): header size, a deadline for headers (slow or
silent clients), a read timeout for bodies, keep-alive and connection limits. Raw sockets, so
the client can misbehave in ways an HTTP library will not."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.service.server_process import ServerProcess

MODEL = "informer-etth1-h24"


# Every guard holds under both of uvicorn's HTTP parsers (httptools is the default).
@pytest.fixture(scope="module", params=["httptools", "h11"])
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("transport") / "server.log"
    args = [
        "--header-timeout-s", "1", "--body-timeout-s", "1", "--keep-alive-timeout-s", "1",
        "--max-header-bytes", "4096", "--max-connections", "8", "--http-parser", request.param,
    ]  # fmt: skip
    s = ServerProcess(log, [MODEL], args)
    with s.serving():
        yield s


def connect(server: ServerProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection (or 5 s pass)."""
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def read_response(sock: socket.socket) -> bytes:
    """One complete response (headers, then Content-Length bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection mid-response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def still_serving(server: ServerProcess) -> None:
    assert httpx.get(server.url + "/readyz", timeout=5).status_code == 200


@pytest.mark.parametrize("pieces", [1, 64], ids=["one-write", "in-pieces"])
def test_headers_over_the_limit_are_refused(server: ServerProcess, pieces: int) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n"
    size = -(-len(request) // pieces)
    with connect(server) as sock:
        for start in range(0, len(request), size):
            try:
                sock.sendall(request[start : start + size])
            except (BrokenPipeError, ConnectionResetError):
                break  # refused before the rest was sent
        answer = read_all(sock)
        assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
        assert b'"headers_too_large"' in answer
    still_serving(server)


@pytest.mark.parametrize("sent", [b"", b"POST /forecast HTTP/1.1\r\nHost: x\r\n"])
def test_a_client_that_does_not_finish_its_headers_is_cut_off(
    server: ServerProcess, sent: bytes
) -> None:
    with connect(server) as sock:
        started = time.monotonic()
        sock.sendall(sent)
        answer = read_all(sock)
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b'"header_timeout"' in answer
    assert 0.8 < elapsed < 4.0
    still_serving(server)


def test_a_stalled_body_gets_a_408(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(
            b"POST /forecast HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"model": '
        )
        started = time.monotonic()
        answer = read_all(sock)
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b'"body_timeout"' in answer and b"stalled" in answer
    assert 0.8 < elapsed < 4.0
    still_serving(server)


def test_an_idle_keep_alive_connection_is_closed(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        first = read_response(sock)
        assert first.startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        rest = read_all(sock)  # nothing more is sent: the server closes after the keep-alive
        assert rest == b"" and 0.5 < time.monotonic() - started < 4.0


def test_a_connection_past_the_limit_is_served_and_the_oldest_idle_one_dropped(
    server: ServerProcess,
) -> None:
    # Eight silent connections fill max_connections; a ninth is still answered, and the
    # connection dropped for it is the one that has waited longest (the first). uvicorn's own
    # limit answered a plain-text 503 here (issue 50 item 2).
    held = [connect(server) for _ in range(8)]
    try:
        time.sleep(0.2)  # accepted and counted by the server
        with connect(server) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = read_all(sock)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        held[0].settimeout(0.5)
        assert held[0].recv(1) == b""  # closed by the server, silently: it had sent nothing
        held[-1].setblocking(False)
        with pytest.raises(BlockingIOError):
            held[-1].recv(1)  # the newest held one is still open
    finally:
        for sock in held:
            sock.close()
    still_serving(server)


def test_settings_have_sane_defaults() -> None:
    from service.settings import Settings

    s = Settings()
    assert s.max_header_bytes == 16 * 1024 and s.header_timeout_s == 10.0
    assert s.body_timeout_s == 30.0 and s.keep_alive_timeout_s == 15
    assert s.max_connections == 1024 and s.max_connections_per_client == 256


def test_old_keep_alive_connections_are_told_to_close(tmp_path: Path) -> None:
    # After max_connection_age_s a keep-alive connection's next response says
    # "Connection: close", so clients reconnect (and reach a replaced worker).
    s = ServerProcess(tmp_path / "server.log", [MODEL], ["--max-connection-age-s", "1"])
    try:
        s.wait_ready()
        with connect(s) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            first = read_response(sock)
            assert first.startswith(b"HTTP/1.1 200") and b"connection: close" not in first
            time.sleep(1.2)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            second = read_all(sock)  # the server closes after this answer
            assert second.startswith(b"HTTP/1.1 200") and b"connection: close" in second
    finally:
        s.stop()


def test_pipelined_requests_are_each_answered(server: ServerProcess) -> None:
    # Two requests in one write: the guard counts the first one's headers, lets the second
    # wait behind its response, and both are answered in order on the same connection.
    with connect(server) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        answers = read_all(sock)  # the server closes after the second answer
    assert answers.count(b"HTTP/1.1 200") == 2, answers


def test_the_default_parser_is_httptools_where_installed() -> None:
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from service.http.transport import guarded_protocol

    protocol = guarded_protocol(1.0, 4096)
    assert issubclass(protocol, HttpToolsProtocol)
    assert protocol.max_header_bytes == 4096 and protocol.header_timeout_s == 1.0
    assert issubclass(guarded_protocol(1.0, 4096, "h11"), H11Protocol)
