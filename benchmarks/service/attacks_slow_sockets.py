"""Slow sockets: does a crowd of connections that send a request a byte at a time keep
``/healthz`` and new clients out?

    .venv/bin/python -m benchmarks.service.attacks_slow_sockets [--n 2000] [--seconds 30]

Issue 50 item 2: 1,030 sockets each sending ``POST /encode`` with ``Content-Length: 1000`` and
one byte every 20 s got every fresh ``/healthz`` and ``/encode`` a 503 for as long as they
lasted. :func:`slow_sockets` opens ``n`` such sockets against a running server (half stalled in
their body, half in their headers; each reopened as soon as the server drops it, as slowloris
tools do) and meanwhile measures ``/healthz`` and a one-text ``POST /encode`` from fresh
connections: latency percentiles and errors (any status but 200, a refused or reset
connection, no answer within 5 s). A dropped socket is reopened ``reopen_after_s`` later (by
default one byte interval, as slowloris recreates its sockets each round; 0 turns the attack
into a connection flood). Two runs: the sockets spread over loopback addresses
127.0.0.2... so that each stays under the per-client connection cap (only the overall limit's
shedding can save the probes), then all from one address. :func:`main` starts one server
process (all-MiniLM-L6-v2, default limits), runs both and prints a table.

Self-contained (the combined attack script imports :func:`slow_sockets`): it raises its own
open-file limit, and closes every socket and thread it opened before returning.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import resource
import socket
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.harness import cli
from benchmarks.harness.host import cpu_model, load_average
from benchmarks.harness.process import attnserve
from benchmarks.harness.timing import percentile

MODEL = "all-MiniLM-L6-v2"
BODY_HEAD = (
    b"POST /encode HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n"
)
HEADERS_HEAD = b"POST /encode HTTP/1.1\r\nHost: x\r\n"
PROBE_TIMEOUT_S = 5.0
PROBE_PAUSE_S = 0.05
# Connections per loopback address in the spread run: under the default per-client cap (256).
PER_SOURCE = 125


def raise_own_fd_limit() -> int:
    """This process's open-file soft limit, raised to the hard one (each socket is a file)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return int(soft)


@dataclass
class Probes:
    """Latencies (ms) and errors of one probe kind."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""

    def summary(self) -> dict[str, Any]:
        ms = sorted(self.latencies_ms)
        return {
            "answered": len(ms),
            "errors": self.errors,
            "p50_ms": statistics.median(ms) if ms else math.nan,
            "p99_ms": percentile(ms, 99),  # the harness's nearest rank, as every benchmark
            "max_ms": ms[-1] if ms else math.nan,
            "first_error": self.first_error,
        }


def _probe_once(host: str, port: int, request: bytes) -> tuple[float, str]:
    """One request on a fresh connection: (latency ms, '' or what went wrong)."""
    started = time.perf_counter()
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock:
            sock.sendall(request)
            data = b""
            while chunk := sock.recv(65536):  # Connection: close: read to the end
                data += chunk
    except OSError as exc:
        return (time.perf_counter() - started) * 1e3, f"{type(exc).__name__}: {exc}"
    took = (time.perf_counter() - started) * 1e3
    status = data[:12].decode("latin-1")
    first_line = data.split(b"\r\n", 1)[0].decode("latin-1")
    return took, "" if status == "HTTP/1.1 200" else (first_line or "closed without an answer")


def _prober(host: str, port: int, stop: threading.Event, seen: dict[str, Probes]) -> None:
    body = b'{"inputs": ["a fresh client during the slow sockets"]}'
    requests = {
        "healthz": b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "encode": b"POST /encode HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body,
    }
    while not stop.is_set():
        for name, request in requests.items():
            took, error = _probe_once(host, port, request)
            probes = seen[name]
            if error:
                probes.errors += 1
                probes.first_error = probes.first_error or error
            else:
                probes.latencies_ms.append(took)
        stop.wait(PROBE_PAUSE_S)


@dataclass
class Attack:
    """Counts of one run's slow sockets."""

    opened: int = 0
    dropped: int = 0  # closed or answered by the server, then reopened
    failed_opens: int = 0
    answers: dict[str, int] = field(default_factory=dict)  # first status line seen -> count


async def _hold(
    host: str,
    port: int,
    source: str,
    head: bytes,
    every_s: float,
    reopen_after_s: float,
    stop: asyncio.Event,
    a: Attack,
) -> None:
    """One slow socket, reopened whenever the server drops it, until ``stop``."""
    while not stop.is_set():
        writer = None
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
            a.opened += 1
            writer.write(head)
            while not stop.is_set():
                try:
                    data = await asyncio.wait_for(reader.read(65536), every_s)
                except TimeoutError:
                    writer.write(b"a")  # one more byte of body or of a header line
                    continue
                line = data.split(b"\r\n", 1)[0].decode("latin-1")[:32] or "closed"
                a.answers[line] = a.answers.get(line, 0) + 1
                a.dropped += 1
                break
        except OSError:
            a.failed_opens += 1
        finally:
            if writer is not None:
                writer.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), reopen_after_s)


async def _attack(
    host: str,
    port: int,
    sources: list[str],
    n: int,
    every_s: float,
    reopen_after_s: float,
    seconds: float,
) -> Attack:
    a = Attack()
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(
            _hold(host, port, sources[i % len(sources)], heads, every_s, reopen_after_s, stop, a)
        )
        for i, heads in enumerate([BODY_HEAD, HEADERS_HEAD] * (n // 2) + [BODY_HEAD] * (n % 2))
    ]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return a


def _one_run(
    host: str,
    port: int,
    sources: list[str],
    n: int,
    seconds: float,
    every_s: float,
    reopen_after_s: float,
) -> dict[str, Any]:
    seen = {"healthz": Probes(), "encode": Probes()}
    stop = threading.Event()
    prober = threading.Thread(target=_prober, args=(host, port, stop, seen), daemon=True)
    started = time.monotonic()
    prober.start()
    try:
        attack = asyncio.run(_attack(host, port, sources, n, every_s, reopen_after_s, seconds))
    finally:
        stop.set()
        prober.join(PROBE_TIMEOUT_S * 3)
    return {
        "sources": len(sources),
        "sockets": n,
        "seconds": round(time.monotonic() - started, 1),
        "opened": attack.opened,
        "dropped_by_server": attack.dropped,
        "failed_opens": attack.failed_opens,
        "server_answers": attack.answers,
        "healthz": seen["healthz"].summary(),
        "encode": seen["encode"].summary(),
    }


def slow_sockets(
    base_url: str,
    n: int = 2000,
    seconds: float = 30.0,
    every_s: float = 5.0,
    reopen_after_s: float | None = None,
) -> dict[str, Any]:
    """``n`` slow sockets against the server at ``base_url`` (loopback only), twice for
    ``seconds`` each: spread over ``ceil(n / 125)`` addresses 127.0.0.2..., then all from
    127.0.0.2; each sends a byte every ``every_s``, and is reopened ``reopen_after_s`` (default
    ``every_s``) after the server drops it. Returns, per run (``spread``,
    ``one_address``), the probes' figures (``healthz`` / ``encode``: answered, errors, p50/p99/
    max ms) and the sockets' (opened, dropped by the server, its answers); plus ``fd_limit`` and
    the load average before and after. Blocks (runs its own event loop)."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    fd_limit = raise_own_fd_limit()
    spread = [f"127.0.0.{2 + i}" for i in range(max(1, math.ceil(n / PER_SOURCE)))]
    result: dict[str, Any] = {"fd_limit": fd_limit, "load_before": load_average()}
    reopen = every_s if reopen_after_s is None else reopen_after_s
    result["spread"] = _one_run(host, port, spread, n, seconds, every_s, reopen)
    result["one_address"] = _one_run(host, port, spread[:1], n, seconds, every_s, reopen)
    result["load_after"] = load_average()
    return result


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        "| run | sockets | addresses | dropped by server | probe | answered | errors "
        "| p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for run in ("spread", "one_address"):
        r = result[run]
        for probe in ("healthz", "encode"):
            p = r[probe]
            lines.append(
                f"| {run} | {r['sockets']} | {r['sources']} | {r['dropped_by_server']} | "
                f"{probe} | {p['answered']} | {p['errors']} | {p['p50_ms']:.1f} | "
                f"{p['p99_ms']:.1f} | {p['max_ms']:.1f} |"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__, cli.seconds(30.0, "seconds per run"))
    p.add_argument("--n", type=int, default=2000, help="slow sockets")
    p.add_argument("--every-s", type=float, default=5.0, help="seconds between a socket's bytes")
    p.add_argument("--reopen-after-s", type=float, help="default: --every-s; 0: at once")
    p.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    p.add_argument("--extra", nargs="*", default=[], help="more attnserve serve flags")
    args = cli.parse(p, argv, seconds=2.0, n=40, every_s=0.5)
    server = attnserve([MODEL], 1, 32, args.log_dir / "attacks-slow-sockets.log", extra=args.extra)
    try:
        server.wait_ready()
        result = slow_sockets(server.url, args.n, args.seconds, args.every_s, args.reopen_after_s)
    finally:
        server.stop()
    print(f"CPU: {cpu_model()}; fd limit {result['fd_limit']}")
    print(f"load average before: {result['load_before']}; after: {result['load_after']}")
    for run in ("spread", "one_address"):
        print(run, "server answers to the slow sockets:", result[run]["server_answers"])
        for probe in ("healthz", "encode"):
            if result[run][probe]["first_error"]:
                print(f"  {probe} first error: {result[run][probe]['first_error']}")
    print("\n".join(table(result)), flush=True)


if __name__ == "__main__":
    main()
