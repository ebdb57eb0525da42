"""Head-of-line blocking: one-text requests while a large ``full`` encode runs, per time slice.

    .venv/bin/python -m benchmarks.service.head_of_line [--slices 0.25 0.1 0.5 0] [--threads 1 2]
        [--repeats 5]

The large request is the largest legal ``/encode``: 64 texts of exactly 256 tokens (truncated)
under attention ``full`` on all-MiniLM-L6-v2. Per ``attnserve serve`` (max batch 32, no compute
bound, 120 s timeout; one per ``--slices`` value, 0: slice off), the large request's latency alone,
then beside a one-text request every ``--interval-ms`` (open loop), with the small requests'
own compute and client latency. Servers are started together and measured in turn, round by
round (medians of ``--repeats``), a table per ``--threads`` value. Writes
``benchmarks/results/head-of-line-cpu.{md,json}`` (``--out``). ``--smoke``: one round of a
4-text request, the slice on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import cli
from benchmarks.harness.host import cpu_model, load_average
from benchmarks.harness.process import TEXT_MODEL, ServerProcess, attnserve
from benchmarks.harness.report import RESULTS, command, write
from benchmarks.harness.timing import percentile

ROWS, TOKENS = 64, 256
SMALL = "how do I open a file?"


def long_texts(rows: int = ROWS, tokens: int = TOKENS) -> list[str]:
    """``rows`` distinct stdlib-docstring texts that are each at least ``tokens`` tokens long
    ([CLS]/[SEP] included), so ``truncate`` makes every row exactly ``tokens``."""
    from models.text.folders.weights import model_dir
    from models.text.quality.corpus import word_windows
    from models.text.tokens.tokenizer import TextTokenizer

    texts = word_windows(rows, 2 * tokens)
    counts = TextTokenizer(model_dir() / "tokenizer.json", 512).count(texts)
    short = [c for c in counts if c < tokens]
    if short:
        raise RuntimeError(f"{len(short)} texts under {tokens} tokens: {short}")
    return texts


@dataclass
class Row:
    """One server's figures (seconds unless named ms)."""

    server: str
    slice_s: float | None
    large_alone_s: list[float] = field(default_factory=list)
    large_with_traffic_s: list[float] = field(default_factory=list)
    large_inference_ms: list[float] = field(default_factory=list)
    large_batch_size: str = ""
    small_waits_ms: list[float] = field(default_factory=list)
    small_inference_ms: list[float] = field(default_factory=list)
    small_per_run: list[int] = field(default_factory=list)
    small_errors: int = 0

    @property
    def alone(self) -> float:
        return statistics.median(self.large_alone_s)

    @property
    def with_traffic(self) -> float:
        return statistics.median(self.large_with_traffic_s)

    def small_pct(self, q: float) -> float:
        return percentile(self.small_waits_ms, q)


class Client:
    """One server's client: the large request alone, or beside a stream of small ones."""

    def __init__(self, url: str, row: Row, large: dict[str, Any]) -> None:
        self.http = httpx.AsyncClient(base_url=url, timeout=300)
        self.row, self.large = row, large
        self.small = {"model": TEXT_MODEL, "inputs": [SMALL], "attention": "full"}

    async def post_large(self) -> float:
        started = time.perf_counter()
        r = await self.http.post("/encode", json=self.large)
        r.raise_for_status()
        self.row.large_batch_size = r.headers["x-batch-size"]
        self.row.large_inference_ms.append(float(r.headers["x-inference-time-ms"]))
        return time.perf_counter() - started

    async def post_small(self, waits: list[float]) -> None:
        started = time.perf_counter()
        r = await self.http.post("/encode", json=self.small)
        waits.append((time.perf_counter() - started) * 1000)
        if r.status_code != 200:
            self.row.small_errors += 1
        else:
            # Its share of its batch's forward pass (the batch's requests each report it).
            share = float(r.headers["x-inference-time-ms"]) / int(r.headers["x-batch-requests"])
            self.row.small_inference_ms.append(share)

    async def warm(self) -> None:
        """First shapes of this length, allocator growth: not measured."""
        await self.post_large()
        for _ in range(3):
            await self.post_small([])
        self.row.large_inference_ms.clear()
        self.row.small_inference_ms.clear()

    async def alone(self) -> None:
        self.row.large_alone_s.append(await self.post_large())

    async def with_traffic(self, interval: float) -> None:
        """The large request, and a small one every ``interval`` s while it runs."""
        running = asyncio.create_task(self.post_large())
        smalls: list[asyncio.Task[None]] = []
        waits: list[float] = []
        next_send = time.perf_counter() + interval
        while True:
            await asyncio.wait({running}, timeout=max(0.0, next_send - time.perf_counter()))
            if running.done():
                break
            smalls.append(asyncio.create_task(self.post_small(waits)))
            next_send += interval
        self.row.large_with_traffic_s.append(await running)
        await asyncio.gather(*smalls)
        self.row.small_waits_ms.extend(waits)
        self.row.small_per_run.append(len(waits))


async def measure(servers: list[tuple[str, Row]], large: dict[str, Any], args: Any) -> None:
    """Every server in turn, ``repeats`` rounds (so load from elsewhere on the machine falls on
    all of them alike): the large request alone, then beside the small ones."""
    clients = [Client(url, row, large) for url, row in servers]
    try:
        for client in clients:
            await client.warm()
        for _ in range(args.repeats):
            for client in clients:
                await client.alone()
                await asyncio.sleep(0.5)
                await client.with_traffic(args.interval_ms / 1000)
                await asyncio.sleep(0.5)
    finally:
        for client in clients:
            await client.http.aclose()


def start_server(label: str, slice_s: float | None, threads: int) -> ServerProcess:
    extra = ["--max-request-compute-s", "0", "--request-timeout-s", "120"]
    if slice_s is not None:
        extra += ["--batch-slice-s", str(slice_s)]
    name = label.split(" ")[0] if slice_s is None else f"slice-{slice_s:g}"
    log = Path(tempfile.gettempdir()) / f"head-of-line-{name}.log"
    server = attnserve([TEXT_MODEL], threads, 32, log, extra=extra)
    server.wait_ready()
    return server


def table(rows: list[Row]) -> str:
    lines = [
        "| server | slice s | rows per forward pass | large alone s | "
        "large with traffic s | small requests per run | their compute s | "
        "small wait p50 ms | p95 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        runs = max(1, len(r.small_per_run))
        lines.append(
            f"| {r.server} | {'-' if r.slice_s is None else f'{r.slice_s:g}'} | "
            f"{r.large_batch_size} | {r.alone:.2f} | {r.with_traffic:.2f} | "
            f"{statistics.median(r.small_per_run or [0]):.0f} | "
            f"{sum(r.small_inference_ms) / 1000 / runs:.2f} | {r.small_pct(50):.0f} | "
            f"{r.small_pct(95):.0f} | {max(r.small_waits_ms, default=0):.0f} |"
        )
    return "\n".join(lines)


def run_servers(
    plan: list[tuple[str, float | None]],
    threads: int,
    large: dict[str, Any],
    args: argparse.Namespace,
) -> list[Row]:
    """Start every server of ``plan`` (label, slice) with ``threads`` torch
    threads, measure them round by round, stop them."""
    servers: list[ServerProcess] = []
    rows = [Row(label, slice_s) for label, slice_s in plan]
    try:
        for label, slice_s in plan:
            servers.append(start_server(label, slice_s, threads))
        asyncio.run(measure([(s.url, r) for s, r in zip(servers, rows, strict=True)], large, args))
    finally:
        for server in servers:
            server.stop()
    return rows


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__, cli.repeats(5))
    p.add_argument("--slices", type=float, nargs="+", default=[0.25, 0.0])
    p.add_argument(
        "--threads", type=int, nargs="+", default=[1], help="server torch threads (a table each)"
    )
    p.add_argument("--interval-ms", type=float, default=100.0)
    p.add_argument("--out", default="head-of-line-cpu")
    p.set_defaults(rows=ROWS)
    args = cli.parse(p, argv, repeats=1, slices=[0.25], rows=4)

    large = {
        "model": TEXT_MODEL,
        "inputs": long_texts(args.rows),
        "attention": "full",
        "truncate": True,
    }
    plan = [("time slice" if slice_s else "slice off", slice_s) for slice_s in args.slices]
    run_command = command("benchmarks.service.head_of_line", argv)
    cores = len(os.sched_getaffinity(0))
    runs, sections = [], []
    for threads in args.threads:
        load_before = load_average()
        rows = run_servers(plan, threads, large, args)
        machine = (
            f"{cpu_model()}, {cores} cores, server torch threads {threads}; load average "
            f"before {load_before}, after {load_average()}"
        )
        text = table(rows)
        print(machine, text, sep="\n")
        runs.append({"threads": threads, "machine": machine, "rows": [asdict(r) for r in rows]})
        sections.append(
            f"## {threads} torch thread{'s' if threads > 1 else ''}\n\n{machine}.\n\n{text}\n"
        )
    summary = {
        "command": run_command,
        "large": {"rows": ROWS, "tokens": TOKENS, "attention": "full"},
        "interval_ms": args.interval_ms,
        "repeats": args.repeats,
        "runs": runs,
    }
    write(RESULTS / f"{args.out}.json", json.dumps(summary, indent=1) + "\n")
    write(
        RESULTS / f"{args.out}.md",
        f"# Head-of-line blocking: one-text requests beside a {ROWS} x {TOKENS}-token `full` "
        f"encode\n\n`{run_command}`\n\n" + "\n".join(sections),
    )


if __name__ == "__main__":
    main()
