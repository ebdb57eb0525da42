"""What the server adds to a request: attnserve against a plain FastAPI wrapper, same encoder.

    .venv/bin/python -m benchmarks.service_overhead [--seconds 10] [--clients 1 32]

Both serve all-MiniLM-L6-v2 through our own encoder with ``flash`` attention, one torch thread,
one process: attnserve (``attnserve serve``: engine, dynamic batching, metrics) and the plain
wrapper (:mod:`benchmarks.plain_encoder_app`: each request encoded on arrival in FastAPI's
thread pool). Each is driven in turn, alone, by closed-loop clients sending one short text per
request (:func:`benchmarks.service.drive`), at each ``--clients`` level. The table gives
throughput and client-side p50/p99 per server and attnserve's ratio to the wrapper; the
reference row is the wrapper.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from benchmarks.service import (
    ROOT,
    LoadResult,
    ServerProcess,
    drive,
    encode_workload,
    free_port,
    load_average,
    short_texts,
)

RESULTS = ROOT / "benchmarks" / "results"


class PlainServer(ServerProcess):
    """The plain wrapper under uvicorn on a free port."""

    def __init__(self, threads: int, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [
            sys.executable, "-m", "uvicorn", "benchmarks.plain_encoder_app:app",
            "--port", str(self.port), "--log-level", "warning", "--no-access-log",
        ]  # fmt: skip
        self.log = log.open("w")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PLAIN_TORCH_THREADS": str(threads)}
        self.proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=self.log, stderr=self.log)

    def ready(self) -> bool:
        """The wrapper has no readiness route: ready once it answers an encode."""
        r = httpx.post(self.url + "/encode", json={"inputs": ["ready?"]}, timeout=5)
        return r.status_code == 200


def measure(server: ServerProcess, args: argparse.Namespace) -> dict[int, LoadResult]:
    work = encode_workload(short_texts(512), "flash")
    results = {}
    try:
        server.wait_ready()
        for clients in args.clients:
            results[clients] = asyncio.run(
                drive(server.url, work, clients, args.seconds, args.warmup, server.proc.pid)
            )
    finally:
        server.stop()
    return results


def table(
    plain: dict[int, LoadResult],
    ours: dict[int, LoadResult],
    before: dict[int, LoadResult] | None = None,
    before_label: str = "",
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
        rows = [("attnserve", mine)]
        if before:
            rows.insert(0, (f"attnserve before ({before_label})", before[clients]))
        for label, got in rows:
            batch = sum(got.batch_sizes) / max(1, len(got.batch_sizes))
            lines.append(
                f"| {clients} | {label} | {got.throughput:.1f} | {got.pct(50):.2f} | "
                f"{got.pct(99):.2f} | {batch:.1f} | {got.pct(50) / ref.pct(50):.2f} | "
                f"{got.throughput / ref.throughput:.2f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per server")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument(
        "--before",
        type=Path,
        help="also measure attnserve from this checkout (e.g. a git worktree of an older commit)",
    )
    parser.add_argument("--log-dir", default="/tmp")
    parser.add_argument("--out", type=Path, default=RESULTS / "service-overhead-cpu")
    args = parser.parse_args(argv)
    load_before = load_average()
    log_dir = Path(args.log_dir)
    plain = measure(PlainServer(args.threads, log_dir / "plain-wrapper.log"), args)
    ours = measure(
        ServerProcess(
            ["all-MiniLM-L6-v2"], args.threads, args.max_batch_size, log_dir / "attnserve.log"
        ),
        args,
    )
    before = None
    label = ""
    if args.before:
        label = subprocess.run(
            ["git", "-C", str(args.before), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        before = measure(
            ServerProcess(
                ["all-MiniLM-L6-v2"],
                args.threads,
                args.max_batch_size,
                log_dir / "attnserve-before.log",
                root=args.before.resolve(),
            ),
            args,
        )
    text = table(plain, ours, before, label)
    header = (
        f"# attnserve vs a plain FastAPI wrapper: /encode, one short text per request\n\n"
        f"`python -m benchmarks.service_overhead --seconds {args.seconds:g}"
        + (f" --before <worktree of {label}>" if args.before else "")
        + "` "
        f"(flash, {args.threads} torch thread(s), one process each, {os.cpu_count()} CPUs; "
        f"load average before {load_before}, after {load_average()}).\n\n"
    )
    print(header + text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(header + text + "\n")
    raw: dict[str, Any] = {
        name: {
            str(c): {"req_s": r.throughput, "p50_ms": r.pct(50), "p99_ms": r.pct(99)}
            for c, r in results.items()
        }
        for name, results in (("plain", plain), ("attnserve", ours), ("before", before or {}))
    }
    args.out.with_suffix(".json").write_text(json.dumps(raw, indent=2) + "\n")


if __name__ == "__main__":
    main()
