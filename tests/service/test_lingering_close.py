"""A body refused for its size is answered, never reset (issue 50 item 5.3): the 413 closes the
connection, and the server reads and discards the rest of the body for a while first (a
lingering close, service.http.linger), so a client still writing its body gets no "connection
reset" and reads the 413. Raw sockets on the real server, under both HTTP parsers."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.service.server_process import ServerProcess

MODEL = "informer-etth1-h24"
SIZE = 5 * 1024 * 1024  # over the default max_body_bytes (4 MiB)
CHUNK = 64 * 1024
TRIES = 40


@pytest.fixture(scope="module", params=["httptools", "h11"])
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("linger") / "server.log"
    s = ServerProcess(log, [MODEL], ["--http-parser", request.param])
    with s.serving():
        yield s


def upload(server: ServerProcess, extra: bytes, pause_s: float) -> tuple[bytes, int, str]:
    """Headers declaring ``SIZE`` bytes, the whole body as fast as the socket takes it, a pause,
    then everything the server answers until it closes. Returns (answer, bytes of body written,
    the error the client met, if any: a client such as http.client stops at a failed write)."""
    head = (
        b"POST /forecast HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % SIZE
    )
    chunk = b" " * CHUNK
    written, error = 0, ""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        try:
            sock.sendall(head)
            while written < SIZE:
                sock.sendall(chunk)
                written += CHUNK
        except OSError as exc:
            error = f"write: {exc!r}"
        time.sleep(pause_s)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError as exc:
            error += f" read: {exc!r}"
    return answer, written, error


def check_413(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"connection: close" in head.lower()
    assert json.loads(body)["error"]["type"] == "body_too_large"


@pytest.mark.parametrize("pause_s", [0.0, 0.2], ids=["reads-at-once", "pauses-first"])
@pytest.mark.parametrize("extra", [b"", b"Connection: close\r\n"], ids=["keep-alive", "close"])
def test_an_oversized_upload_always_reads_its_413(
    server: ServerProcess, extra: bytes, pause_s: float
) -> None:
    # Before the lingering close, every upload that asked for Connection: close met a reset
    # on a write (the server closed with body bytes unread) before its body was all written.
    for attempt in range(TRIES):
        answer, written, error = upload(server, extra, pause_s)
        assert not error and written == SIZE, f"try {attempt}: {written} bytes written, {error}"
        check_413(answer)


def test_a_client_that_awaits_100_continue_is_answered_at_once(server: ServerProcess) -> None:
    # It has not sent its body and will not (no 100 Continue comes): nothing to linger for.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /forecast HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % SIZE
        )
        started = time.monotonic()
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    check_413(answer)
    assert time.monotonic() - started < 0.9  # closed at once, not after the linger's idle wait


def test_a_client_that_keeps_sending_is_cut_off(server: ServerProcess) -> None:
    # A declared 1 GB body: the server discards at most twice max_body_bytes after its 413,
    # then closes, well before the client could send it all.
    head = b"POST /forecast HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % 2**30
    chunk = b" " * CHUNK
    written = 0
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head)
        with pytest.raises(OSError):
            while written < 2**30:
                sock.sendall(chunk)
                written += CHUNK
    assert written < 64 * 1024 * 1024
