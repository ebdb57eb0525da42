"""Estimated vs measured peak activation memory of a long-context Informer forward pass.

    python -m benchmarks.attention.memory       # preset long, L 2048, horizon 96, random init
    python -m benchmarks.attention.memory --checkpoint DIR --backends full flash --batches 1 32

For each (backend, batch), in a fresh subprocess on one thread: the estimate the batcher uses
(:mod:`models.informer.memory` over the layer plan), the torch allocator's peak during one
forward pass (:mod:`models.profiling`: what the estimate models), and the resident-set
high-water mark above the RSS before the pass, after a one-row warm-up (what
``attnserve_batch_activation_memory_measured_bytes`` reads on CPU). Memory does not depend on
the weights: random init matches a trained checkpoint of the same config. Writes
``benchmarks/results/memory-cpu.{md,json}``. ``--smoke``: the ``small`` preset (context 96),
flash at batch 1.
"""

from __future__ import annotations

import argparse
import json

import torch

from benchmarks.attention.common import in_subprocess, informer_inputs
from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report

BACKENDS = ["full", "flash", "performer", "nystrom", "probsparse"]
MIB = 2**20


def _model(checkpoint: str | None, smoke: bool = False):
    """The checkpoint's network, or the ``long`` preset (context 2048; ``smoke``: the ``small``
    preset at 96) at random init; and what it is."""
    from models.informer.config import preset
    from models.informer.model import Informer

    if checkpoint:
        from models.informer import InformerForecaster

        return InformerForecaster.load(checkpoint).model.eval(), checkpoint
    torch.manual_seed(0)
    if smoke:
        return Informer(preset("small", seq_len=96)).eval(), "preset small, random init"
    return Informer(preset("long", seq_len=2048, pred_len=96)).eval(), "preset long, random init"


def worker(backend: str, batch: int, checkpoint: str | None, smoke: bool) -> None:
    """Runs in the subprocess: prints one JSON line."""
    from models.informer.memory import forward_bytes
    from models.informer.model import attention_plan
    from models.profiling import allocated_peak
    from service.engine.batching.device import proc_status_bytes, reset_rss_peak

    torch.set_num_threads(1)
    model, source = _model(checkpoint, smoke)
    c = model.config
    inputs = informer_inputs(c, batch)
    with torch.inference_mode():
        model(*(t[:1] for t in inputs), backend=backend)  # warm-up, as the server does
        base = reset_rss_peak()
        model(*inputs, backend=backend)
        high = proc_status_bytes("VmHWM")
        _, allocated = allocated_peak(lambda: model(*inputs, backend=backend))
    plan = attention_plan(c, backend)
    row = {
        "backend": backend,
        "batch": batch,
        "context": c.seq_len,
        "estimate_mib": forward_bytes(c, plan, batch) / MIB,
        "allocated_mib": allocated / MIB,
        "rss_mib": None if base is None or high is None else (high - base) / MIB,
        "model": source,
    }
    print(json.dumps(row))


def cells(r: dict) -> list[object]:
    """One row's table cells."""
    if "error" in r:
        return [r["backend"], r["batch"], r["error"], "", "", ""]
    rss = "–" if r["rss_mib"] is None else f"{r['rss_mib']:.1f}"
    return [
        r["backend"], r["batch"], f"{r['estimate_mib']:.1f}", f"{r['allocated_mib']:.1f}",
        f"{r['estimate_mib'] / r['allocated_mib']:.2f}", rss,
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        __doc__,
        cli.names("--backends", BACKENDS),
        cli.sizes("--batches", [1, 32]),
        cli.out(RESULTS / "memory-cpu.md"),
    )
    p.add_argument("--checkpoint", help="an Informer checkpoint folder (default: random init)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per (backend, batch)")
    p.add_argument("--worker", nargs=2, metavar=("BACKEND", "BATCH"), help=argparse.SUPPRESS)
    args = cli.parse(p, argv, backends=["flash"], batches=[1])
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.checkpoint, args.smoke)
        return
    report = Report("benchmarks.attention.memory", argv)
    rows = []
    for batch in args.batches:
        for backend in args.backends:
            extra = [*(["--checkpoint", args.checkpoint] if args.checkpoint else [])]
            extra += ["--smoke"] if args.smoke else []
            result = in_subprocess(__spec__.name, [backend, str(batch), *extra], args.timeout)
            rows.append({"backend": backend, "batch": batch, **result})
            print(json.dumps(rows[-1]), flush=True)
    report.table(
        ["backend", "batch", "estimate MiB", "allocator peak MiB", "estimate / allocator",
         "RSS high-water MiB"],
        map(cells, rows),
    )  # fmt: skip
    report.add(f"CPU, float32, inference mode, 1 thread. Model: {rows[0].get('model')}.")
    report.write(args.out, "Activation memory: estimate vs measured", data=rows)


if __name__ == "__main__":
    main()
