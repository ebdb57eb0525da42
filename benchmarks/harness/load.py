"""The load driver every benchmark uses: a lean closed-loop HTTP/1.1 load generator on raw
asyncio streams, its result (:class:`LoadResult`) and one-off requests (:func:`call_once`).

The driver shares a small machine with the server it measures, so every CPU cycle it spends is
one the server does not get. It therefore does as little as it can per request: the request
bytes are built once per text, a response is read as a head (status line and the three headers
that frame the body: ``content-length``, ``transfer-encoding``, ``connection``) and a body that is
never decoded, and no HTTP client library sits in between. uvloop runs the event loop when it
is installed.

Each of ``clients`` connections is one closed-loop client: it sends its next request the moment
the previous answer is in, over the same keep-alive connection (reopened only when the server
says ``Connection: close`` or drops it). Answers that arrive in the measured window, after
``warmup`` seconds, count; a non-2xx answer, a dropped connection, or a request still unanswered
a grace period after the window are errors, counted by kind. A server that reports the batch
each answer ran in (attnserve's ``x-batch-size``) has those sizes recorded too.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec

from benchmarks.harness.host import load_average
from benchmarks.harness.timing import percentile

P = ParamSpec("P")
HOST = "127.0.0.1"  # every server under test listens here
GRACE_S = 30.0  # how long a request sent inside the window may take before it is an error
_RETRY_PAUSE_S = 0.05  # after a failed connection, so a down server is not hammered in a spin


# ----------------------------------------------------------------------------- HTTP framing


def build_request(
    host: str, port: int, path: str, body: bytes = b"", method: str = "POST"
) -> bytes:
    """The bytes of one ``method path`` on a keep-alive connection: a JSON ``body`` for POST, no
    body for GET."""
    framing = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if body else ""
    if method == "POST" and not body:
        framing = "Content-Length: 0\r\n"
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{framing}\r\n"
    return head.encode("ascii") + body


@dataclass(frozen=True)
class Head:
    """What the driver needs from a response head."""

    status: int
    content_length: int | None  # None: the body is chunked or runs until the connection closes
    chunked: bool
    close: bool  # the server closes the connection after this response
    batch_size: int | None = None  # the server's x-batch-size header, when it sends one


def parse_head(head: bytes) -> Head:
    """Parse a response head (status line and headers, up to and including the blank line).

    Raises:
        ValueError: not an HTTP/1.x status line, or a malformed ``content-length``.
    """
    lines = head.split(b"\r\n")
    status_line = lines[0]
    if not status_line.startswith(b"HTTP/1.") or len(status_line) < 12:
        raise ValueError(f"not an HTTP/1.x status line: {status_line[:40]!r}")
    status = int(status_line[9:12])
    length: int | None = None
    chunked = False
    batch: int | None = None
    close = status_line.startswith(b"HTTP/1.0")  # 1.0 closes unless told to keep alive
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
            if length < 0:
                raise ValueError(f"negative content-length {length}")
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            token = value.strip().lower()
            close = token == b"close" or (close and token != b"keep-alive")
        elif name == b"x-batch-size":
            batch = int(value)
    if chunked:
        length = None  # RFC 9112 section 6.3: transfer-encoding wins over content-length
    return Head(status, length, chunked, close or (length is None and not chunked), batch)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            # Trailers (usually none) end with an empty line.
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)  # the CRLF after each chunk


async def read_response(reader: asyncio.StreamReader) -> tuple[Head, bytes]:
    """One response: its head and its (undecoded) body."""
    head = parse_head(await reader.readuntil(b"\r\n\r\n"))
    if head.chunked:
        body = await _read_chunked(reader)
    elif head.content_length is not None:
        body = await reader.readexactly(head.content_length)
    else:
        body = await reader.read()  # no framing: the body ends with the connection
    return head, body


async def request_once(
    host: str, port: int, request: bytes, timeout: float = 10.0
) -> tuple[int, bytes]:
    """Send one request on a fresh connection; the status and body of its answer.

    Raises:
        OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError: no answer.
    """

    async def exchange() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(request)
            head, body = await read_response(reader)
            return head.status, body
        finally:
            writer.close()

    return await asyncio.wait_for(exchange(), timeout)


# ----------------------------------------------------------------------------- results


@dataclass
class LoadResult:
    """What one measured window saw.

    Attributes:
        requests: 2xx answers that arrived in the window.
        seconds: the window's length.
        latencies_ms: send-to-last-byte time of each of those answers.
        errors: failures in the window, by kind (``HTTP 503``, ``ConnectionResetError``, ...).
        cpu_s: CPU seconds over the window: ``driver`` (this process) and one entry per probe
            given to :func:`drive` (the server's, the whole machine's, ...).
        batch_sizes: the batch each of those answers ran in, where the server says
            (``x-batch-size``).
        load: the 1, 5 and 15-minute load averages before and after (:func:`run_load`), so a
            row skewed by other work on the machine shows it.
    """

    requests: int
    seconds: float
    latencies_ms: list[float]
    errors: Counter[str] = field(default_factory=Counter)
    cpu_s: dict[str, float] = field(default_factory=dict)
    batch_sizes: list[int] = field(default_factory=list)
    load: tuple[str, str] = ("", "")

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    @property
    def throughput(self) -> float:
        """Answered requests per second."""
        return self.requests / self.seconds if self.seconds > 0 else float("nan")

    def pct(self, q: float) -> float:
        """Latency percentile in ms (nearest rank)."""
        return percentile(self.latencies_ms, q)

    def cpu_ms_per_request(self, which: str = "server") -> float:
        """CPU milliseconds of probe ``which`` per answered request; NaN when not measured."""
        cpu = self.cpu_s.get(which)
        return float("nan") if cpu is None or not self.requests else cpu * 1000 / self.requests


def combined(parts: Sequence[LoadResult]) -> LoadResult:
    """Several windows of the same workload as one result: requests, time, latencies, errors and
    batch sizes pooled (CPU times are left out: they were sampled per window)."""
    return LoadResult(
        requests=sum(p.requests for p in parts),
        seconds=sum(p.seconds for p in parts),
        latencies_ms=[x for p in parts for x in p.latencies_ms],
        errors=sum((p.errors for p in parts), Counter()),
        batch_sizes=[x for p in parts for x in p.batch_sizes],
    )


# ----------------------------------------------------------------------------- load


async def drive(
    host: str,
    port: int,
    requests: Sequence[bytes],
    clients: int,
    seconds: float,
    warmup: float = 2.0,
    probes: Mapping[str, Callable[[], float]] | None = None,
    grace: float = GRACE_S,
    pause: float = 0.0,
) -> LoadResult:
    """``clients`` closed-loop keep-alive clients for ``warmup + seconds``; client ``k`` sends
    ``requests[k]``, ``requests[k + clients]``, ... (cycling), waiting ``pause`` seconds after
    each answer (a prober beside the load; 0: none). ``probes``: counters of CPU seconds so far
    (a server's, the machine's), read at the window's start and end."""
    if clients < 1 or not requests:
        raise ValueError("need at least one client and one request")
    loop = asyncio.get_running_loop()
    clock = time.perf_counter
    start = clock()
    measure_from, stop_at = start + warmup, start + warmup + seconds
    latencies: list[float] = []
    batches: list[int] = []
    errors: Counter[str] = Counter()
    count = len(requests)

    async def client(k: int) -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        i = k
        try:
            while True:
                sent = clock()
                if sent >= stop_at:
                    return
                try:
                    if reader is None or writer is None:
                        reader, writer = await asyncio.open_connection(host, port)
                    writer.write(requests[i % count])
                    head, _ = await read_response(reader)
                except (OSError, EOFError, ValueError, asyncio.LimitOverrunError) as exc:
                    # IncompleteReadError is an EOFError: the server closed mid-answer.
                    if measure_from <= clock() <= stop_at:
                        errors[type(exc).__name__] += 1
                    if writer is not None:
                        writer.close()
                    reader = writer = None
                    await asyncio.sleep(_RETRY_PAUSE_S)
                    continue
                done = clock()
                i += clients
                if measure_from <= done <= stop_at:
                    if 200 <= head.status < 300:
                        latencies.append((done - sent) * 1000.0)
                        if head.batch_size is not None:
                            batches.append(head.batch_size)
                    else:
                        errors[f"HTTP {head.status}"] += 1
                if head.close:
                    writer.close()
                    reader = writer = None
                if pause:
                    await asyncio.sleep(pause)
        finally:  # also when cancelled, unanswered, after the grace period
            if writer is not None:
                writer.close()

    cpu: dict[str, float] = {}
    counters: dict[str, Callable[[], float]] = {"driver": time.process_time, **(probes or {})}

    async def sample_cpu() -> None:
        await asyncio.sleep(max(0.0, measure_from - clock()))
        before = {name: read() for name, read in counters.items()}
        await asyncio.sleep(max(0.0, stop_at - clock()))
        cpu.update({name: read() - before[name] for name, read in counters.items()})

    tasks = [loop.create_task(client(k)) for k in range(clients)]
    sampler = loop.create_task(sample_cpu())
    _, pending = await asyncio.wait(tasks, timeout=warmup + seconds + grace)
    for task in pending:  # a request still unanswered long after the window closed
        task.cancel()
        errors["unanswered"] += 1
    await asyncio.gather(*pending, return_exceptions=True)
    await sampler
    for task in tasks:  # an exception here is a bug in the driver, not a load error
        if not task.cancelled() and (exc := task.exception()) is not None:
            raise exc
    return LoadResult(len(latencies), seconds, latencies, errors, cpu, batches)


def _synchronous(
    coroutine: Callable[P, Coroutine[Any, Any, LoadResult]],
) -> Callable[P, LoadResult]:
    def run(*args: P.args, **kwargs: P.kwargs) -> LoadResult:
        try:
            import uvloop

            factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
        except ImportError:
            factory = None
        before = load_average()
        with asyncio.Runner(loop_factory=factory) as runner:
            result = runner.run(coroutine(*args, **kwargs))
        result.load = (before, load_average())
        return result

    run.__doc__ = f""":func:`{coroutine.__name__}` on a fresh event loop (uvloop when installed), with
    the load average before and after (``load``)."""
    return run


run_load = _synchronous(drive)


def say(label: str, result: LoadResult, extra: str = "") -> None:
    """One progress line for a load window: req/s, p50 and p99, errors by kind."""
    errors = f"  errors {dict(result.errors)}" if result.errors else ""
    print(
        f"  {label} {result.throughput:7.1f} req/s  p50 {result.pct(50):7.1f}  "
        f"p99 {result.pct(99):7.1f} ms{extra}{errors}",
        flush=True,
    )


def call_once(host: str, port: int, request: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    """:func:`request_once` from synchronous code."""
    return asyncio.run(request_once(host, port, request, timeout))
