"""What the server adds to a request: attnserve against a plain FastAPI wrapper, same encoder.

    .venv/bin/python -m benchmarks.service.overhead [--seconds 10] [--clients 1 32]

Both serve all-MiniLM-L6-v2 through our own encoder (``flash``, one torch thread, one process):
attnserve (engine, dynamic batching, metrics) and :mod:`benchmarks.service.plain_encoder_app`
(each request encoded on arrival), each driven alone by closed-loop clients sending one short
text per request, at each ``--clients`` level. The wrapper is the reference row.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import cli
from benchmarks.harness.host import load_average
from benchmarks.harness.load import HOST, LoadResult, run_load
from benchmarks.harness.process import ROOT, TEXT_MODEL, ServerProcess, attnserve, free_port
from benchmarks.harness.report import RESULTS, write, write_json
from benchmarks.service.workloads import short_texts, workload


def plain_server(threads: int, log: Path) -> ServerProcess:
    """The plain wrapper under uvicorn on a free port."""
    port = free_port()
    command = [
        sys.executable, "-m", "uvicorn", "benchmarks.service.plain_encoder_app:app",
        "--port", str(port), "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PLAIN_TORCH_THREADS": str(threads)}
    return ServerProcess(command, log, port, env, name="plain wrapper")


def measure(server: ServerProcess, args: argparse.Namespace, ready: str) -> dict[int, LoadResult]:
    """Wait until ``server`` answers (``ready``: attnserve's readiness route; the wrapper has
    none, so an encode), then drive it at each ``--clients`` level; stop it."""
    results = {}
    try:
        if ready == "/readyz":
            server.wait_ready()
        else:
            server.first_answer(server.post("/encode", {"inputs": ["ready?"]}))
        wire = workload("/encode", short_texts(512), "flash").requests(server.port)
        probes = {"server": server.cpu_seconds}
        for clients in args.clients:
            results[clients] = run_load(HOST, server.port, wire, clients, args.seconds,
                                        args.warmup, probes)  # fmt: skip
    finally:
        server.stop()
    return results


def table(
    plain: dict[int, LoadResult],
    ours: dict[int, LoadResult],
) -> str:
    lines = [
        "| clients | server | req/s | p50 ms | p99 ms | mean batch | p50 / wrapper | req/s / wrapper |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for clients in plain:
        ref, mine = plain[clients], ours[clients]
        lines.append(
            f"| {clients} | plain FastAPI wrapper (reference) | {ref.throughput:.1f} | "
            f"{ref.pct(50):.2f} | {ref.pct(99):.2f} | 1 | 1.00 | 1.00 |"
        )
        batch = sum(mine.batch_sizes) / max(1, len(mine.batch_sizes))
        lines.append(
            f"| {clients} | attnserve | {mine.throughput:.1f} | {mine.pct(50):.2f} | "
            f"{mine.pct(99):.2f} | {batch:.1f} | {mine.pct(50) / ref.pct(50):.2f} | "
            f"{mine.throughput / ref.throughput:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        cli.threads(1, "torch threads per server"),
        cli.seconds(10.0, "measured seconds per run"),
        cli.out(RESULTS / "service-overhead-cpu"),
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--log-dir", default="/tmp")
    args = cli.parse(parser, argv, seconds=1.0, warmup=0.5, clients=[2])
    load_before = load_average()
    log_dir = Path(args.log_dir)
    plain = measure(plain_server(args.threads, log_dir / "plain-wrapper.log"), args, "/encode")
    server = attnserve([TEXT_MODEL], args.threads, args.max_batch_size, log_dir / "attnserve.log")
    ours = measure(server, args, "/readyz")
    text = table(plain, ours)
    header = (
        f"# attnserve vs a plain FastAPI wrapper: /encode, one short text per request\n\n"
        f"`python -m benchmarks.service.overhead --seconds {args.seconds:g}` "
        f"(flash, {args.threads} torch thread(s), one process each, {os.cpu_count()} CPUs; "
        f"load average before {load_before}, after {load_average()}).\n\n"
    )
    print(header + text)
    write(args.out.with_suffix(".md"), header + text + "\n")
    raw: dict[str, Any] = {
        name: {
            str(c): {"req_s": r.throughput, "p50_ms": r.pct(50), "p99_ms": r.pct(99)}
            for c, r in results.items()
        }
        for name, results in (("plain", plain), ("attnserve", ours))
    }
    write_json(args.out.with_suffix(".json"), raw)


if __name__ == "__main__":
    main()
