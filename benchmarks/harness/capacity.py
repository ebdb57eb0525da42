"""Capacity beside latency: for each variant of a request (a backend, a length), the p50 of one
client alone and the requests per second ``clients`` concurrent clients get, through a real
server over HTTP with the harness's raw-socket driver (:func:`benchmarks.harness.load.drive`).

What an attention backend buys a server is capacity: at 8 clients on a small CPU an approximate
backend may serve several times ``flash``'s requests per second while one request alone is
barely faster, because ``flash`` already spreads one request over every thread and the
approximations do not need them. The two figures therefore sit side by side, each with its ratio
to a baseline row, and the server's busy cores in each phase show why.

Requests of long documents take seconds, and a batcher answers a batch's requests together, so
answers arrive in bursts and a count of answers in a window of a few batches is coarse. The rate
is therefore taken by Little's law for a closed loop (Little, "A proof for the queuing formula
L = λW", Operations Research 9(3), 1961): ``clients`` clients, each with one request always
outstanding, are served at ``clients / mean latency`` requests per second, which every answer in
the window refines.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any

from benchmarks.harness.load import GRACE_S, HOST, LoadResult, combined, run_load, say
from benchmarks.harness.process import ServerProcess, attnserve
from benchmarks.harness.report import table


def closed_loop_rate(result: LoadResult, clients: int) -> float:
    """Requests per second of ``clients`` closed-loop clients: ``clients`` over the mean latency
    of the window's answers (Little's law; NaN without answers)."""
    if not result.latencies_ms:
        return float("nan")
    return clients * 1000.0 / fmean(result.latencies_ms)


@dataclass
class Phase:
    """One concurrency's windows of one variant, pooled over the rounds.

    Attributes:
        windows: each round's result.
        server_cpu_s: the server's CPU seconds over those windows (all its threads).
        driver_cpu_s: the load driver's CPU seconds over those windows (this process).
    """

    windows: list[LoadResult] = field(default_factory=list)
    server_cpu_s: float = 0.0
    driver_cpu_s: float = 0.0

    def add(self, result: LoadResult) -> None:
        """Pool one round's window."""
        self.windows.append(result)
        self.server_cpu_s += result.cpu_s.get("server", 0.0)
        self.driver_cpu_s += result.cpu_s.get("driver", 0.0)

    @property
    def result(self) -> LoadResult:
        """The windows as one result."""
        return combined(self.windows)

    @property
    def server_cores(self) -> float:
        """Cores the server kept busy on average over the windows."""
        seconds = self.result.seconds
        return self.server_cpu_s / seconds if seconds else float("nan")

    @property
    def driver_ms_per_request(self) -> float:
        """The driver's CPU milliseconds per answered request."""
        answered = self.result.requests
        return self.driver_cpu_s * 1000 / answered if answered else float("nan")


@dataclass
class Capacity:
    """One variant at one client and at ``clients`` clients."""

    clients: int
    one: Phase = field(default_factory=Phase)
    many: Phase = field(default_factory=Phase)

    @property
    def p50_ms(self) -> float:
        """Median latency of one client alone."""
        return self.one.result.pct(50)

    @property
    def rate(self) -> float:
        """Requests per second at ``clients`` clients (:func:`closed_loop_rate`)."""
        return closed_loop_rate(self.many.result, self.clients)

    def record(self) -> dict[str, Any]:
        """The figures a results JSON keeps."""
        one, many = self.one.result, self.many.result
        return {
            "p50_ms_1_client": self.p50_ms,
            "p99_ms_1_client": one.pct(99),
            "answers_1_client": one.requests,
            "server_cores_1_client": self.one.server_cores,
            "clients": self.clients,
            "requests_per_s": self.rate,
            "p50_ms_many": many.pct(50),
            "answers_many": many.requests,
            "server_cores_many": self.many.server_cores,
            "mean_batch_many": fmean(many.batch_sizes) if many.batch_sizes else None,
            "driver_cpu_ms_per_request": self.many.driver_ms_per_request,
            "errors": one.error_count + many.error_count,
        }


def measure(
    server: ServerProcess,
    path: str,
    bodies: Mapping[str, Sequence[Any]],
    clients: int = 8,
    seconds: float = 10.0,
    rounds: int = 1,
    answers: int = 3,
    turns: float = 1.0,
    warmup: float = 0.5,
) -> dict[str, Capacity]:
    """Each variant of ``bodies`` (label -> JSON-able bodies for ``POST path``, cycled) at one client
    and at ``clients``, the variants in turn within each round (reversed every other round) so
    drift of a shared host hits them alike.

    Each variant is warmed by one answered request first, whose latency sizes its windows: at
    one client at least ``answers`` of them, at ``clients`` at least ``turns`` turns of every
    client as if concurrency gained nothing (so each client has an answer in the window, which
    Little's law needs), and never under ``seconds`` (split over the rounds). At ``clients``
    the first turn is warm-up, left out: the clients' first requests arrive together and the
    k-th is answered after k requests' work, a start-up transient whose short latencies would
    inflate the rate. The server's and the driver's CPU are read over every window.
    """
    requests = {label: [server.post(path, b) for b in bs] for label, bs in bodies.items()}
    single: dict[str, float] = {}
    for label, reqs in requests.items():
        started = time.perf_counter()
        server.first_answer(reqs[0], timeout=900.0, per_call=900.0)
        single[label] = time.perf_counter() - started
    out = {label: Capacity(clients) for label in requests}
    probes = {"server": server.cpu_seconds}
    share = seconds / rounds
    for round_ in range(rounds):
        order = list(requests) if round_ % 2 == 0 else list(requests)[::-1]
        for label in order:
            est = single[label]
            grace = GRACE_S + 2 * clients * est  # a whole turn may still be in flight
            for n, phase, window, warm in (
                (1, out[label].one, max(share, answers * est), warmup),
                (clients, out[label].many, max(share, turns * clients * est), clients * est),
            ):
                result = run_load(
                    HOST, server.port, requests[label], n, window, max(warmup, warm), probes, grace
                )
                phase.add(result)
                say(f"{label} @{n}", result, f"  {phase.server_cores:.2f} server cores")
    return out


def ratio_table(
    rows: Sequence[tuple[Sequence[str], Capacity, Capacity | None]], head: Sequence[str]
) -> str:
    """One Markdown row per ``(keys, capacity, baseline)``: the keys (``head`` names them), p50
    at one client and its speed-up over the baseline's, the server's busy cores then, requests
    per second at the capacity's clients and their ratio to the baseline's, the busy cores then,
    the mean batch and the driver's CPU per request."""
    cells = []
    clients = 8
    for keys, cap, base in rows:
        clients = cap.clients
        rec = cap.record()
        one_x = base.p50_ms / cap.p50_ms if base else float("nan")
        many_x = cap.rate / base.rate if base else float("nan")
        batch = rec["mean_batch_many"]
        cells.append(
            [
                *keys,
                f"{cap.p50_ms:.0f}",
                f"{one_x:.2f}x",
                f"{rec['server_cores_1_client']:.2f}",
                f"{cap.rate:.2f}",
                f"**{many_x:.2f}x**",
                f"{rec['server_cores_many']:.2f}",
                "-" if batch is None else f"{batch:.1f}",
                f"{rec['driver_cpu_ms_per_request']:.2f}",
            ]
        )
    columns = [
        *head,
        "p50 ms @1 client",
        "× flash @1",
        "server cores @1",
        f"req/s @{clients} clients",
        f"× flash @{clients}",
        f"server cores @{clients}",
        f"mean batch @{clients}",
        "client CPU ms/req",
    ]
    return table(columns, cells, "l" * len(head) + "r" * 8)


def options(parser: argparse.ArgumentParser, lengths: list[int]) -> None:
    """The options of a capacity table by length (``--capacity-lengths``, default ``lengths``;
    none: no table), read by :func:`serve` and :func:`table_of`."""
    parser.add_argument(
        "--capacity-lengths",
        type=int,
        nargs="*",
        default=lengths,
        help="tokens per request in the capacity table (none: no capacity table)",
    )
    parser.add_argument("--capacity-layers", type=int, default=3, help="model depth (capacity)")
    parser.add_argument(
        "--capacity-seconds", type=float, default=10.0, help="least window per phase (capacity)"
    )
    parser.add_argument("--capacity-rounds", type=int, default=1, help="rounds (capacity)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (capacity)")


def serve(
    folder: Any,
    path: str,
    bodies: Callable[[int], dict[str, list[Any]]],
    args: argparse.Namespace,
    extra: Sequence[str] = (),
) -> dict[str, dict[int, Capacity]]:
    """Per backend and ``--capacity-lengths`` length: :func:`measure` of ``POST path`` through
    ``attnserve serve`` on the model ``folder`` (``--threads``, batches of up to 32, ``extra``
    flags). ``bodies(length)``: the request bodies per backend at that length."""
    log = Path(tempfile.gettempdir()) / f"capacity-{Path(folder).name}.log"
    server = attnserve([str(folder)], args.threads, 32, log, extra=extra)
    out: dict[str, dict[int, Capacity]] = {}
    try:
        server.wait_ready()
        for length in args.capacity_lengths:
            measured = measure(
                server, path, bodies(length), args.clients, args.capacity_seconds,
                args.capacity_rounds,
            )  # fmt: skip
            for backend, cap in measured.items():
                out.setdefault(backend, {})[length] = cap
    finally:
        server.stop()
    return out


def table_of(
    rows: dict[str, dict[int, Capacity]],
    args: argparse.Namespace,
    what: str,
    baseline: str = "flash",
) -> str:
    """The capacity paragraph and table of :func:`serve`'s rows, one per backend and length,
    against the ``baseline`` row at the same length; ``what``: the model and request in
    words."""
    flash = rows.get(baseline, {})
    cells = [
        ((f"`{backend}`", str(length)), cap, flash.get(length))
        for backend, caps in rows.items()
        for length, cap in sorted(caps.items())
    ]
    return (
        f"Capacity, what a backend buys: {args.capacity_layers} layers ({what}), `attnserve "
        f"serve` in its own process with {args.threads} torch threads, driven over HTTP by the "
        "harness's raw-socket client on the same machine. p50 @1: one client alone (at least 3 "
        f"answers); req/s @{args.clients}: {args.clients} closed-loop clients, by Little's law "
        "(clients / mean latency: answers of long requests come in bursts; after a first turn "
        "of every client as warm-up, at least one more turn); windows of at least "
        f"{args.capacity_seconds:g} s, "
        f"{args.capacity_rounds} round(s), every backend in "
        "each; server cores: the server's CPU seconds per wall second; client CPU: the "
        f"driver's, per answer at {args.clients} clients.\n\n"
        + ratio_table(cells, ["backend", "tokens"])
    )


def record_of(
    rows: dict[str, dict[int, Capacity]], args: argparse.Namespace, **extra: Any
) -> dict[str, Any]:
    """The result file's ``capacity`` entry for :func:`serve`'s rows: ``extra`` (e.g. the
    layers), the clients, the window and every cell's record by backend and length."""
    return {
        **extra,
        "clients": args.clients,
        "seconds": args.capacity_seconds,
        "rows": {b: {str(n): c.record() for n, c in cs.items()} for b, cs in rows.items()},
    }
