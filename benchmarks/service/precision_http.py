"""``/encode`` per precision through HTTP: one server loaded with every precision, each request
naming its own, driven at ``--clients`` and at 1 client for ``--rounds`` rounds, the precisions
alternated within each.

    .venv/bin/python -m benchmarks.service.precision_http [--precision float32 bfloat16] \
        [--clients 32] [--threads 2] [--seconds 10] [--rounds 3]

The page it writes (``--out``) says how each figure is taken.
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
from benchmarks.harness.report import RESULTS, command, table, write
from benchmarks.harness.timing import percentile
from benchmarks.peers.servers import PEERS, Launch, PeerServer
from benchmarks.service import common
from benchmarks.service.common import alternated, per_round, pooled
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
    log = args.log_dir / "service-bench-precision.log"
    server = PeerServer(peer, launch, log)
    requests = {
        p: [server.post("/encode", {"inputs": t, "precision": p}) for t in texts]
        for p in precisions
    }
    counts = sorted({args.clients, 1}, reverse=True)
    runs: dict[tuple[str, int], list[LoadResult]] = {}
    checks: dict[str, float] = {}
    load_before = common.load_before()
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
                for p in alternated(precisions, k):
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
    rows = []
    for clients in counts:
        for p in precisions:
            res = runs[(p, clients)]
            ratios = [
                r.throughput / b.throughput
                for r, b in zip(res, runs[(first, clients)], strict=True)
            ]
            cpu = sum(r.cpu_s.get("server", 0.0) for r in res) * 1000
            q = [percentile(pooled(res), x) for x in (50, 95, 99)]
            rows.append(
                [
                    p,
                    clients,
                    f"{statistics.median(r.throughput for r in res):.1f}",
                    per_round([r.throughput for r in res]),
                    f"{statistics.median(ratios):.2f}x ({per_round(ratios, '.2f')})",
                    f"{q[0]:.1f} / {q[1]:.1f} / {q[2]:.1f}",
                    f"{cpu / max(1, sum(r.requests for r in res)):.2f}",
                    sum(r.error_count for r in res),
                    "; ".join(f"{a} -> {b}" for a, b in (r.load for r in res)),
                ]
            )
    columns = (
        f"precision | clients | req/s (median) | per round | x {first} (per round) | "
        "p50 / p95 / p99 ms | server CPU ms/req | errors | load average before -> after"
    ).split(" | ")
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
        table(columns, rows, "lrrllrrrl"),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        cli.threads(1, "torch threads of the server"),
        common.load_options(8.0),
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
    parser.set_defaults(texts=512)
    args = cli.parse(parser, argv, **common.SMOKE, rounds=1, texts=32)
    args.argv = sys.argv[1:] if argv is None else argv
    page = precision_rounds(args)
    print()
    print(page)
    write(args.out, page)


if __name__ == "__main__":
    main()
