"""The largest legal request on each route, and what the server answers beside it.

    .venv/bin/python -m benchmarks.service.large_requests [--repeats 2]

``attnserve serve`` (one torch thread, default limits) with all-MiniLM-L6-v2, a MiniLM-sized
cross-encoder (random weights) and a tiny forecaster gets each body of
:func:`tests.utils.large_bodies.large_requests` while ``/healthz`` and a one-text ``/encode`` are
probed beside it. Writes ``benchmarks/results/large-requests-cpu.md``. ``--smoke``: the first request
once.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import cli
from benchmarks.harness.host import cpu_model, load_average
from benchmarks.harness.process import ROOT, attnserve
from benchmarks.harness.report import RESULTS, command, write
from benchmarks.service.common import commit
from tests.utils.large_bodies import beside, large_requests

ENCODER = "all-MiniLM-L6-v2"
RERANKER = "minilm-sized-reranker"
FORECASTER = "tiny-forecaster"
OUT = RESULTS / "large-requests-cpu.md"


def folders(root: Path) -> tuple[Path, Path]:
    """A MiniLM-sized cross-encoder and a tiny forecaster under ``root``."""
    from tests.utils.informer import tiny_checkpoint
    from tests.utils.tiny_classifiers import save_minilm_sized_reranker

    return save_minilm_sized_reranker(root / RERANKER), tiny_checkpoint(root / FORECASTER)


def measure(
    models: list[str], repeats: int, log: Path, limit: int | None = None
) -> list[dict[str, Any]]:
    """Each large request (the first ``limit``) ``repeats`` times against a server run from
    this checkout."""
    server = attnserve(models, threads=1, max_batch_size=32, log=log)
    try:
        server.wait_ready()
        cards = httpx.get(server.url + "/models", timeout=30).json()["data"]
        channels = next(c["channels"] for c in cards if c["name"] == FORECASTER)
        rows = []
        for large in large_requests(ENCODER, RERANKER, FORECASTER, channels)[:limit]:
            for _ in range(repeats):
                seen = asyncio.run(beside(server.url, large, ENCODER, at_least_s=1.0))
                rows.append(seen.row())
        return rows
    finally:
        server.stop()


def table(rows: list[dict[str, Any]], label: str) -> list[str]:
    lines = [
        "| code | route | rule | body MiB | status | its latency ms | /healthz p50 / p99 / max ms "
        "| one-text /encode p50 / max ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {label} | {r['route']} | {r['rule']} | {r['body_mb']:.2f} | {r['status']} | "
            f"{r['latency_ms']:.0f} | {r['health_p50']:.1f} / {r['health_p99']:.1f} / "
            f"{r['health_max']:.0f} | {r['encode_p50']:.0f} / {r['encode_max']:.0f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(__doc__, cli.repeats(2))
    parser.set_defaults(limit=None)
    args = cli.parse(parser, argv, repeats=1, limit=1)
    with tempfile.TemporaryDirectory() as tmp:
        reranker, forecaster = folders(Path(tmp))
        models = [ENCODER, str(reranker), str(forecaster)]
        lines = [
            "# The largest legal request per route, and the server beside it (CPU)",
            "",
            f"Command: `.venv/bin/{command('benchmarks.service.large_requests', argv)}`",
            "",
            f"Host: {cpu_model()}; load average before: {load_average()} (2 cores shared with "
            "other work). Server: one torch thread, default limits (4 MiB bodies, compute limit "
            "15 s). Models: all-MiniLM-L6-v2 (real), a MiniLM-sized cross-encoder (random "
            "weights; 128 tokens), a tiny Informer. Probes: `/healthz` every 10 ms and a "
            "one-text `/encode` back to back, for as long as the large request runs and at "
            "least 1 s.",
            "",
        ]
        lines += [f"`this`: this checkout (commit {commit(ROOT)}).", ""]
        rows = measure(models, args.repeats, Path(tmp) / "this.log", args.limit)
        lines += [*table(rows, "this"), ""]
        print("\n".join(table(rows, "this")), flush=True)
        lines.append(f"Load average after: {load_average()}.")
    page = "\n".join(lines) + "\n"
    print(f"wrote {write(OUT, page)}")


if __name__ == "__main__":
    main()
