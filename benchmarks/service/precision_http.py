"""``/encode`` per precision through HTTP: one server loaded with every precision, each request
naming its own.

    .venv/bin/python -m benchmarks.service.precision_http [--precision float32 bfloat16] \
        [--clients 32] [--threads 2] [--seconds 10] [--rounds 3]

One ``attnserve serve --precisions float32,bfloat16`` (max batch 32, ``--threads`` torch threads,
OMP_WAIT_POLICY passive), driven by the lean raw-asyncio driver (:mod:`benchmarks.harness.load`)
at ``--clients`` and at 1 client, ``--rounds`` rounds with the precisions alternated (reversed
every other round, so drift hits all alike). req/s is the median over rounds, percentiles pool
them, and each round's ratio to the first precision is listed. The server's process tree is
ended and checked gone with psutil (:meth:`benchmarks.harness.process.ServerProcess.stop`).
Writes ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.harness import cli
from benchmarks.harness.host import cpu_model, load_average
from benchmarks.harness.load import HOST, LoadResult, call_once, run_load, say
from benchmarks.harness.process import ROOT, TEXT_MODEL, free_port
from benchmarks.harness.report import RESULTS, command, write
from benchmarks.harness.timing import percentile
from benchmarks.peers.servers import PEERS, Launch, PeerServer
from benchmarks.service.workloads import short_texts


def precision_rounds(args: argparse.Namespace) -> str:
    """Drive the server per precision, client count and round; the results page in Markdown."""
    precisions: list[str] = args.precision
    base = PEERS["attnserve"]
    peer = dataclasses.replace(
        base,
        command=lambda launch: [*base.command(launch), "--precisions", ",".join(precisions)],
    )
    python = Path(sys.executable)
    launch = Launch(free_port(), args.threads, ROOT, python, python, python)
    texts = short_texts(args.texts)
    log = Path(args.log_dir) / "service-bench-precision.log"
    server = PeerServer(peer, launch, log)
    requests = {
        p: [server.post("/encode", {"inputs": t, "precision": p}) for t in texts]
        for p in precisions
    }
    counts = sorted({args.clients, 1}, reverse=True)
    runs: dict[tuple[str, int], list[LoadResult]] = {}
    checks: dict[str, float] = {}
    load_before = load_average()
    print(f"load average before: {load_before} ({os.cpu_count()} CPUs)", flush=True)
    try:
        started = time.monotonic()
        reference = peer.embedding(server.wait_answering(texts[0]))
        startup = time.monotonic() - started
        for p in precisions:  # each answers, in the precision asked, the same text alike
            status, body = call_once(HOST, launch.port, requests[p][0], timeout=30)
            answer = json.loads(body)
            if status != 200 or answer.get("precision") != p:
                raise RuntimeError(f"{p}: HTTP {status} {body[:200]!r}")
            got = answer["embeddings"][0]
            dot = sum(a * b for a, b in zip(got, reference, strict=True))
            checks[p] = dot / math.sqrt(sum(a * a for a in got) * sum(b * b for b in reference))
        for k in range(args.rounds):
            for clients in counts:
                for p in precisions if k % 2 == 0 else precisions[::-1]:
                    probes = {"server": server.cpu_seconds}
                    result = run_load(HOST, launch.port, requests[p], clients, args.seconds,
                                      args.warmup, probes)  # fmt: skip
                    runs.setdefault((p, clients), []).append(result)
                    say(f"round {k + 1} {p:>9} x{clients:<3}", result,
                        f"  load {result.load[0]} -> {result.load[1]}")  # fmt: skip
    finally:
        stopped = server.stop()
        print(
            f"server stopped: {stopped.processes} process(es), gone after {stopped.signal} in "
            f"{stopped.seconds:.1f} s (psutil finds none left)",
            flush=True,
        )
    load_after = load_average()

    first = precisions[0]
    lines = [
        f"# /encode per precision through HTTP ({datetime.now(UTC):%Y-%m-%d %H:%M UTC})",
        "",
        f"`{command('benchmarks.service.precision_http', args.argv)}`",
        "",
        f"One server, `attnserve serve --models {TEXT_MODEL} --precisions {','.join(precisions)}"
        f" --torch-threads {args.threads} --max-batch-size 32` (max wait 5 ms, attention flash, "
        f"OMP_WAIT_POLICY=PASSIVE; ready in {startup:.1f} s), each request one text of 8-24 "
        f"words ({len(texts)} distinct) naming its `precision`; the lean raw-asyncio driver "
        "(`benchmarks/harness/load.py`), closed-loop keep-alive clients, "
        f"{args.warmup:g} s warm-up + {args.seconds:g} s measured per run; {args.rounds} rounds, "
        "the precisions alternated (order reversed every other round). req/s: median over "
        "rounds; percentiles: all rounds pooled. CPU: "
        f"{cpu_model()}, {os.cpu_count()} logical CPUs, shared with other benchmarks during the "
        f"run: load average (1, 5, 15 min) before {load_before}, after {load_after}. Server "
        f"stopped with {stopped.signal}; psutil found none of its {stopped.processes} "
        "process(es) left. Cosine of each precision's first answer to the default's: "
        + ", ".join(f"{p} {c:.5f}" for p, c in checks.items())
        + ".",
        "",
        f"| precision | clients | req/s (median) | per round | x {first} (per round) | "
        "p50 / p95 / p99 ms | server CPU ms/req | errors | load average before -> after |",
        "|---|---:|---:|---|---|---:|---:|---:|---|",
    ]
    for clients in counts:
        for p in precisions:
            res = runs[(p, clients)]
            pooled = [x for r in res for x in r.latencies_ms]
            ratios = [
                r.throughput / b.throughput
                for r, b in zip(res, runs[(first, clients)], strict=True)
            ]
            cpu = sum(r.cpu_s.get("server", 0.0) for r in res) * 1000
            q = [percentile(pooled, x) for x in (50, 95, 99)]
            lines.append(
                f"| {p} | {clients} | {statistics.median(r.throughput for r in res):.1f} | "
                + ", ".join(f"{r.throughput:.1f}" for r in res)
                + f" | {statistics.median(ratios):.2f}x ("
                + ", ".join(f"{x:.2f}" for x in ratios)
                + f") | {q[0]:.1f} / {q[1]:.1f} / {q[2]:.1f} | "
                + f"{cpu / max(1, sum(r.requests for r in res)):.2f} | "
                + f"{sum(r.error_count for r in res)} | "
                + "; ".join(f"{r.load[0]} -> {r.load[1]}" for r in res)
                + " |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        cli.threads(1, "torch threads of the server"),
        cli.seconds(8.0, "measured seconds per run"),
        cli.rounds(3),
        cli.out(RESULTS / "precision-http-cpu.md"),
    )
    parser.add_argument(
        "--precision",
        nargs="+",
        default=["float32", "bfloat16"],
        choices=["float32", "bfloat16", "int8"],
        help="the precisions to load and compare (the first is the reference)",
    )
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    parser.add_argument("--log-dir", default="/tmp")
    parser.set_defaults(texts=512)
    args = cli.parse(parser, argv, seconds=1.0, warmup=0.5, rounds=1, clients=4, texts=32)
    args.argv = sys.argv[1:] if argv is None else argv
    page = precision_rounds(args)
    print()
    print(page)
    write(args.out, page)


if __name__ == "__main__":
    main()
