"""Issue 50 item 4, "no probe, no model waits behind another": ``/healthz`` latency beside
abusive-but-legal load, and a small forecast on one model beside the largest legal forecast on
another.

    .venv/bin/python -m benchmarks.service.attacks_probes [--seconds 10] [--repeats 2] \
        [--workers 1] [--out benchmarks/results/attacks-probes-cpu.md]

Loads (:func:`probe_latency`):

* ``cjk-windows``: ``clients`` closed-loop senders of ``POST /encode`` with one 350,000-character
  Japanese text under ``long_text: windows`` (refused 422 ``compute_budget_exceeded``);
* ``token-listing``: ``clients`` closed-loop senders of TEI's ``POST /tokenize`` with 10 texts of
  2,000 words each.

Meanwhile one prober calls ``GET /healthz`` every 10 ms on a kept-alive connection (p50 / p99 /
max). :func:`cross_model`: the largest legal ``performer`` forecast (32 series x 2,048 steps,
``num_features`` 4096) looping on :data:`BIG_MODEL`, and 1-series forecasts on
:data:`SMALL_MODEL`: the small one's latency alone and beside it. ``main`` starts one
``attnserve serve`` (one process, one torch thread unless ``--workers``/``--threads`` say
otherwise) with the three models, runs every measurement ``--repeats`` times, prints a table and
writes it with the host's CPU and load average. Both functions are self-contained (they take a
base URL, open their own connections and close them), so other scripts can import them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pandas as pd

from benchmarks.harness import cli
from benchmarks.harness.host import cpu_model, load_average
from benchmarks.harness.load import build_request, read_response
from benchmarks.harness.process import TEXT_MODEL, attnserve
from benchmarks.harness.report import RESULTS, command, table, write
from benchmarks.harness.timing import percentile

BIG_MODEL = "informer-ettm1-h288-c2048"
SMALL_MODEL = "informer-ettm1-h96-c2048"
CONTEXT = 2048
CJK_TEXT = "東京は日本の首都です" * 35000
PROBE_PAUSE_S = 0.01
LOADS = ("cjk-windows", "token-listing")


# ----------------------------------------------------------------------------- bodies


def cjk_body() -> bytes:
    """The windows encode of one 350,000-character text (the compute bound refuses it)."""
    return json.dumps({"inputs": [CJK_TEXT], "long_text": "windows"}).encode()


def token_listing_body(texts: int = 10, words: int = 2000) -> bytes:
    """TEI's ``/tokenize`` of ``texts`` texts of ``words`` words (stdlib docstrings)."""
    from models.text.quality.corpus import word_windows

    return json.dumps({"inputs": word_windows(texts, words)}).encode()


def ettm1_series(count: int, steps: int = CONTEXT, seed: int = 0) -> list[dict[str, Any]]:
    """``count`` regular 15-minute 7-channel histories of ``steps`` rows, one decimal per value
    (32 x 2,048 of them stay under the 4 MiB body limit)."""
    index = pd.date_range("2017-01-01", periods=steps, freq="15min").strftime("%Y-%m-%d %H:%M:%S")
    stamps = list(index)
    rng = np.random.default_rng(seed)
    t = np.arange(steps)[:, None]
    out = []
    for _ in range(count):
        wave = (
            3.0 + np.sin(2 * np.pi * t / 96 + np.arange(7)) + 0.1 * rng.standard_normal((steps, 7))
        )
        out.append({"timestamps": stamps, "values": np.round(wave, 1).tolist()})
    return out


def forecast_body(model: str, series: int, performer: bool) -> bytes:
    body: dict[str, Any] = {"model": model, "series": ettm1_series(series)}
    if performer:
        body["attention"] = "performer"
        body["attention_options"] = {"num_features": 4096}
    return json.dumps(body, separators=(",", ":")).encode()


# ----------------------------------------------------------------------------- HTTP


class _Conn:
    """One kept-alive connection (reopened when the server closes it)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def call(self, request: bytes) -> tuple[int, dict[str, str]]:
        """Send ``request``; the status and (lower-cased) headers of the answer."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        try:
            self.writer.write(request)
            head, _ = await read_response(self.reader)
        except (OSError, asyncio.IncompleteReadError):
            await self.close()
            raise
        if head.close:
            await self.close()
        return head.status, {}

    async def call_headers(self, request: bytes) -> tuple[int, dict[str, str]]:
        """As :meth:`call` on a fresh connection, with the answer's headers."""
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(request)
            raw = await reader.readuntil(b"\r\n\r\n")
            lines = raw.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if sep:
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            await reader.readexactly(length)
            return int(lines[0][9:12]), headers
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None


def _address(base_url: str) -> tuple[str, int]:
    parts = urlsplit(base_url)
    return parts.hostname or "127.0.0.1", parts.port or 80


async def _loop_sender(
    host: str, port: int, request: bytes, stop_at: float, statuses: Counter[str]
) -> None:
    conn = _Conn(host, port)
    try:
        while time.perf_counter() < stop_at:
            try:
                status, _ = await conn.call(request)
                statuses[str(status)] += 1
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                statuses[type(exc).__name__] += 1
                await asyncio.sleep(0.05)
    finally:
        await conn.close()


def _summary(latencies_ms: list[float]) -> dict[str, float]:
    if not latencies_ms:
        return {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
    return {
        "n": len(latencies_ms),
        "p50_ms": percentile(latencies_ms, 50),
        "p99_ms": percentile(latencies_ms, 99),
        "max_ms": max(latencies_ms),
    }


# ----------------------------------------------------------------------------- measurements


async def _probe_latency(base_url: str, load: str, clients: int, seconds: float) -> dict[str, Any]:
    host, port = _address(base_url)
    if load == "cjk-windows":
        request = build_request(host, port, "/encode", cjk_body())
    elif load == "token-listing":
        request = build_request(host, port, "/tokenize", token_listing_body())
    else:
        raise ValueError(f"unknown load {load!r}; one of {LOADS}")
    probe = build_request(host, port, "/healthz", method="GET")
    statuses: Counter[str] = Counter()
    warmup = min(1.0, seconds / 4)
    start = time.perf_counter()
    stop_at = start + warmup + seconds
    senders = [
        asyncio.create_task(_loop_sender(host, port, request, stop_at, statuses))
        for _ in range(clients)
    ]
    latencies: list[float] = []
    conn = _Conn(host, port)
    try:
        while (now := time.perf_counter()) < stop_at:
            sent = time.perf_counter()
            await conn.call(probe)
            if now >= start + warmup:
                latencies.append((time.perf_counter() - sent) * 1000)
            await asyncio.sleep(PROBE_PAUSE_S)
    finally:
        await conn.close()
        await asyncio.gather(*senders, return_exceptions=True)
    return {"load": load, "clients": clients, "seconds": seconds, **_summary(latencies),
            "load_answers": dict(statuses)}  # fmt: skip


def probe_latency(base_url: str, load: str, clients: int, seconds: float) -> dict[str, Any]:
    """``/healthz`` latency (ms: p50, p99, max; ``n`` probes) on a kept-alive connection, one
    probe every 10 ms, while ``clients`` closed-loop clients send ``load`` (one of
    :data:`LOADS`) for ``seconds`` (after a short warm-up); ``load_answers`` counts their
    answers by status."""
    return asyncio.run(_probe_latency(base_url, load, clients, seconds))


async def _timed_forecasts(
    conn: _Conn, request: bytes, stop_at: float, out: list[tuple[float, float]]
) -> None:
    """Small forecasts one after another until ``stop_at``: (latency ms, queue ms) each."""
    while time.perf_counter() < stop_at:
        sent = time.perf_counter()
        status, headers = await conn.call_headers(request)
        if status != 200:
            raise RuntimeError(f"small forecast answered {status}")
        queue_ms = float(headers.get("x-queue-time-ms", "nan"))
        out.append(((time.perf_counter() - sent) * 1000, queue_ms))
        await asyncio.sleep(0.02)


async def _cross_model(base_url: str, seconds: float, big_series: int) -> dict[str, Any]:
    host, port = _address(base_url)
    small = build_request(host, port, "/forecast", forecast_body(SMALL_MODEL, 1, False))
    big = build_request(host, port, "/forecast", forecast_body(BIG_MODEL, big_series, True))
    conn = _Conn(host, port)
    alone: list[tuple[float, float]] = []
    await _timed_forecasts(conn, small, time.perf_counter() + 0.5, [])  # warm the path
    await _timed_forecasts(conn, small, time.perf_counter() + min(3.0, seconds / 2), alone)
    sent = time.perf_counter()
    status, _ = await conn.call_headers(big)
    big_alone_ms = (time.perf_counter() - sent) * 1000
    if status != 200:
        raise RuntimeError(f"the large forecast answered {status}")
    statuses: Counter[str] = Counter()
    stop_at = time.perf_counter() + seconds
    looping = asyncio.create_task(_loop_sender(host, port, big, stop_at, statuses))
    beside: list[tuple[float, float]] = []
    try:
        await asyncio.sleep(0.2)  # the large one is running
        await _timed_forecasts(conn, small, stop_at, beside)
    finally:
        await looping
    alone_ms = _summary([a for a, _ in alone])
    beside_ms = _summary([a for a, _ in beside])
    queue = [q for _, q in beside if q == q]
    return {
        "small_alone": alone_ms,
        "small_beside": beside_ms,
        "small_beside_queue_p50_ms": percentile(queue, 50) if queue else float("nan"),
        "small_beside_queue_max_ms": max(queue, default=float("nan")),
        "big_alone_ms": big_alone_ms,
        "big_answers": dict(statuses),
    }


def cross_model(base_url: str, seconds: float, big_series: int = 32) -> dict[str, Any]:
    """A 1-series forecast on :data:`SMALL_MODEL` alone (about ``seconds``/2, at most 3 s),
    then for ``seconds`` beside the largest legal performer forecast looping on
    :data:`BIG_MODEL`: latency summaries (ms) of both, the small one's queue time (its
    ``x-queue-time-ms``) beside, one large forecast's latency alone, and the large loop's
    answers by status. ``big_series``: series of the large forecast (32: the most one request
    may hold)."""
    return asyncio.run(_cross_model(base_url, seconds, big_series))


# ----------------------------------------------------------------------------- script


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__, cli.seconds(10.0), cli.repeats(2), cli.out(None))
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--workers", type=int, default=1, help="server processes")
    p.add_argument("--clients", type=int, nargs=2, default=[16, 4],
                   help="clients of cjk-windows and token-listing")  # fmt: skip
    p.add_argument("--big-series", type=int, default=32, help="series of the large forecast")
    p.add_argument("--log", type=Path, default=Path("/tmp/attacks-probes.log"))
    args = cli.parse(p, argv, seconds=2.0, repeats=1, big_series=2)
    out = args.out or RESULTS / "attacks-probes-cpu.md"
    models = [TEXT_MODEL, BIG_MODEL, SMALL_MODEL]
    server = attnserve(models, args.threads, 32, args.log, workers=args.workers)
    rows = []
    try:
        server.wait_ready()
        for _ in range(args.repeats):
            for load, clients in zip(LOADS, args.clients, strict=True):
                r = probe_latency(server.url, load, clients, args.seconds)
                answers = ", ".join(f"{k}: {v}" for k, v in sorted(r["load_answers"].items()))
                rows.append([f"`/healthz` beside {clients} x {load}", f"{r['p50_ms']:.1f}",
                             f"{r['p99_ms']:.1f}", f"{r['max_ms']:.1f}", answers, load_average()])  # fmt: skip
                print(rows[-1], flush=True)
            c = cross_model(server.url, args.seconds, args.big_series)
            for what in ("small_alone", "small_beside"):
                s = c[what]
                note = (f"queue p50 {c['small_beside_queue_p50_ms']:.0f} / max "
                        f"{c['small_beside_queue_max_ms']:.0f} ms; large alone "
                        f"{c['big_alone_ms']:.0f} ms, {c['big_answers']}"
                        if what == "small_beside" else f"{s['n']} requests")  # fmt: skip
                label = (
                    "alone"
                    if what == "small_alone"
                    else (f"beside {args.big_series} x {CONTEXT} performer(4096) on {BIG_MODEL}")
                )
                rows.append([f"1-series forecast on {SMALL_MODEL}, {label}", f"{s['p50_ms']:.1f}",
                             f"{s['p99_ms']:.1f}", f"{s['max_ms']:.1f}", note, load_average()])  # fmt: skip
                print(rows[-1], flush=True)
    finally:
        server.stop()
    text = "\n".join([
        "# Probes beside abusive load (issue 50 item 4)", "",
        f"`{command('benchmarks.service.attacks_probes', argv)}`", "",
        f"Host: {cpu_model()}; load average at the end: {load_average()}. One `attnserve serve`, "
        f"{args.workers} process(es) of {args.threads} torch thread(s), models {', '.join(models)}; "
        f"{args.seconds:.0f} s per measurement, {args.repeats} repeat(s), the load generator "
        "on the same host.", "",
        table(["what", "p50 ms", "p99 ms", "max ms", "notes", "load average"], rows, "lrrrll"), "",
    ])  # fmt: skip
    print(text)
    print(f"wrote {write(out, text)}")


if __name__ == "__main__":
    main()
