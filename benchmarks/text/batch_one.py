"""One short text per forward: attnserve beside ONNX Runtime, and (``--ops``) where this
checkout's forward spends its time, per op.

    .venv/bin/python -m benchmarks.text.batch_one [--rounds 3] [--threads 2] [--ops]

Issue 37 item 3 compares attnserve's in-process encoder with ONNX Runtime's optimized float32
graph of the same weights (:mod:`benchmarks.peers.onnx_reference`) on the peers' texts (8-24
words, :func:`benchmarks.service.workloads.short_texts`), at batch 1 and 32, tokenization included. Each
contender runs :mod:`benchmarks.peers.inprocess` in its own process, in the environment every peer
row gets (:func:`benchmarks.harness.process.server_env`: same threads, same OpenMP wait policy):

- ``attnserve``: this checkout;
- ``onnxruntime``: ``--peers-python`` (the peers' virtualenv, which has onnxruntime; the row is
  left out when that interpreter is missing).

The machine is shared, so the contenders alternate within each round, every run records the load
average around it, and the table gives the median over rounds of each run's best-of-``--repeats``
texts/s, with CPU milliseconds per text (all threads of the process; steadier than wall time when
other work takes time slices). ``--ops`` appends ``torch.profiler``'s self CPU time per text by op
(with calls per text) over 128 lone texts through :meth:`models.text.SentenceEncoder.embed`, run
in that same environment, plus the wall time per text outside the profiler. ``--smoke``: one
round, one pass, batch 1, 4 texts per op.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import cli
from benchmarks.harness.host import load_average
from benchmarks.harness.process import ROOT, server_env
from benchmarks.harness.report import Report, table
from benchmarks.peers.model_folder import peer_folder
from benchmarks.service.workloads import short_texts

TEXTS = 256  # as the peers' in-process rows
OPS_TEXTS, OPS_ROWS = 128, 14  # lone texts profiled by --ops, ops listed


def run_one(
    impl: str, python: Path, tree: Path, texts: Path, args: argparse.Namespace, folder: Path
) -> dict[str, Any]:
    """One :mod:`benchmarks.peers.inprocess` run from ``tree``; its result plus the load."""
    out = texts.parent / f"{impl}-{tree.name}.json"
    command = [
        str(python), "-m", "benchmarks.peers.inprocess", impl,
        "--texts", str(texts), "--out", str(out),
        "--threads", str(args.threads), "--repeats", str(args.repeats),
        "--batches", *map(str, args.batches),
    ]  # fmt: skip
    if impl != "attnserve":
        command += ["--folder", str(folder)]
    env = {**server_env(args.threads, args.omp_wait_policy), "PYTHONPATH": str(tree)}
    before = load_average()
    subprocess.run(command, cwd=tree, env=env, check=True, stderr=subprocess.DEVNULL)
    return {**json.loads(out.read_text()), "load": (before, load_average())}


def ops_table(texts: int, threads: int) -> str:
    """The per-op table for ``texts`` lone texts (run in the ``--ops`` child: its environment
    is set before torch loads)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from models.text import SentenceEncoder

    torch.set_num_threads(threads)
    encoder = SentenceEncoder.load()
    ids = encoder.tokenize(short_texts(512)[:texts])
    for one in ids:  # warm: allocator, primitive caches
        encoder.embed([one])
    started = time.perf_counter()
    for one in ids:
        encoder.embed([one])
    wall_ms = (time.perf_counter() - started) * 1000 / len(ids)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for one in ids:
            encoder.embed([one])
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    mean_tokens = sum(map(len, ids)) / len(ids)
    head = (
        f"{len(ids)} lone texts (mean {mean_tokens:.1f} tokens), {torch.get_num_threads()} "
        f"threads, OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', 'unset')}: "
        f"{wall_ms:.2f} ms per text unprofiled; profiled ops {total / 1000 / len(ids):.2f} ms "
        "per text (the rest is Python between ops)"
    )
    cells = [
        [f"`{e.key}`", f"{e.self_cpu_time_total / len(ids):.0f}",
         f"{100 * e.self_cpu_time_total / total:.1f} %", f"{e.count / len(ids):.1f}",
         f"{e.self_cpu_time_total / e.count:.1f}"]
        for e in events[:OPS_ROWS]
    ]  # fmt: skip
    columns = ["op", "self CPU us per text", "share", "calls per text", "us per call"]
    return head + "\n\n" + table(columns, cells, "lrrrr")


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        cli.rounds(3),
        cli.repeats(3, "passes per run (best is kept)"),
        cli.threads(2),
        cli.sizes("--batches", [1, 32]),
        cli.out(None, "also write the table here (markdown)"),
    )
    parser.add_argument("--omp-wait-policy", default="passive")
    parser.add_argument(
        "--peers-python", type=Path, default=ROOT / ".venv-peers" / "bin" / "python"
    )
    parser.add_argument("--ops", action="store_true", help="append the per-op table")
    parser.add_argument("--ops-child", type=int, metavar="TEXTS", help=argparse.SUPPRESS)
    parser.add_argument(
        "--bfloat16",
        action="store_true",
        help="also this checkout with precision bfloat16 (a reference row: fewer bits, not the "
        "float32 target)",
    )
    args = cli.parse(parser, argv, rounds=1, repeats=1, batches=[1])
    if args.ops_child:
        print(ops_table(args.ops_child, args.threads))
        return
    report = Report("benchmarks.text.batch_one", argv)
    folder = peer_folder()
    with tempfile.TemporaryDirectory() as tmp:
        texts = Path(tmp) / "texts.json"
        texts.write_text(json.dumps(short_texts(512)[:TEXTS]))
        contenders = {"attnserve": ("attnserve", Path(sys.executable), ROOT)}
        if args.peers_python.exists():
            contenders["onnxruntime"] = ("onnxruntime", args.peers_python, ROOT)
        else:
            print(f"{args.peers_python} is missing: no ONNX Runtime row", flush=True)
        if args.bfloat16:
            contenders["attnserve-bfloat16"] = ("attnserve-bfloat16", Path(sys.executable), ROOT)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
        for k in range(args.rounds):
            for name, (impl, python, tree) in contenders.items():
                result = run_one(impl, python, tree, texts, args, folder)
                runs[name].append(result)
                rates = {r["batch"]: round(r["texts_per_s"], 1) for r in result["rows"]}
                print(f"round {k + 1} {name}: {rates} load {result['load']}", flush=True)
    report.add(
        f"{TEXTS} texts of 8-24 words, {args.threads} threads, OMP_WAIT_POLICY "
        f"{args.omp_wait_policy}, {args.rounds} rounds (contenders alternating), best of "
        f"{args.repeats} passes per run, tokenization included."
    )
    report.table(
        ["batch", "contender", "texts/s per round", "texts/s (median)", "vs ONNX Runtime",
         "CPU ms/text (median)", "load 1 min before→after, per round"],
        table_rows(runs, args),
        "rllrrrl",
    )  # fmt: skip
    if args.ops:  # this checkout's lone-text forward, per op, in a child with the rows' environment
        ops = subprocess.run(
            [sys.executable, "-m", "benchmarks.text.batch_one", "--threads", str(args.threads),
             "--ops-child", str(4 if args.smoke else OPS_TEXTS)],
            cwd=ROOT, env=server_env(args.threads, args.omp_wait_policy), capture_output=True,
            text=True, check=True,
        ).stdout  # fmt: skip
        report.add(f"Per op, this checkout (load {load_average()}): " + ops.strip())
    report.write(args.out)


def table_rows(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> list[list[str]]:
    """Per batch size and contender: the rates per round, their median, the ratio to ONNX
    Runtime, CPU per text and the load average around each run."""
    labels = {
        "attnserve": "attnserve (this checkout)",
        "onnxruntime": "ONNX Runtime, optimized graph, float32",
        "attnserve-bfloat16": "attnserve, precision bfloat16",
    }
    out = []
    for batch in args.batches:
        got = {
            name: [next(r for r in run["rows"] if r["batch"] == batch) for run in results]
            for name, results in runs.items()
        }
        ort = (
            statistics.median(r["texts_per_s"] for r in got["onnxruntime"])
            if "onnxruntime" in got
            else None
        )
        for name, rows in got.items():
            rate = statistics.median(r["texts_per_s"] for r in rows)
            loads = " / ".join(
                f"{run['load'][0].split()[0]}→{run['load'][1].split()[0]}" for run in runs[name]
            )
            out.append([
                str(batch), labels[name], " / ".join(f"{r['texts_per_s']:.1f}" for r in rows),
                f"{rate:.1f}", f"{rate / ort:.2f}x" if ort else "-",
                f"{statistics.median(r['cpu_ms_per_text'] for r in rows):.2f}", loads,
            ])  # fmt: skip
    return out


if __name__ == "__main__":
    main()
