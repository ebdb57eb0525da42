"""Estimated vs measured peak activation memory of a long-context Informer forward pass.

    python -m benchmarks.attention.memory                         # preset long, L 2048, horizon 96, random init
    python -m benchmarks.attention.memory --checkpoint DIR --backends full flash --batches 1 32

For each (backend, batch), in a fresh subprocess on one thread: the estimate the batcher uses
(:mod:`models.informer.memory` over the layer plan), the torch allocator's peak during one forward
pass (:mod:`models.profiling`: what the estimate models), and the resident-set high-water mark
above the RSS before the pass, after a one-row warm-up (what
``attnserve_batch_activation_memory_measured_bytes`` reads on CPU). Memory does not depend on the weights, so random init matches a trained checkpoint of
the same config. Writes ``benchmarks/results/memory-cpu.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch

from benchmarks.harness.report import RESULTS

BACKENDS = ["full", "flash", "performer", "nystrom", "probsparse"]
MIB = 2**20


def _model(checkpoint: str | None):  # type: ignore[no-untyped-def]
    from models.informer.config import preset
    from models.informer.model import Informer

    if checkpoint:
        from models.informer import InformerForecaster

        return InformerForecaster.load(checkpoint).model.eval(), checkpoint
    torch.manual_seed(0)
    return Informer(preset("long", seq_len=2048, pred_len=96)).eval(), "preset long, random init"


def worker(backend: str, batch: int, checkpoint: str | None) -> None:
    """Runs in the subprocess: prints one JSON line."""
    from models.informer.memory import forward_bytes
    from models.informer.model import attention_plan
    from models.profiling import allocated_peak
    from service.engine.batching.device import proc_status_bytes, reset_rss_peak

    torch.set_num_threads(1)
    model, source = _model(checkpoint)
    c = model.config
    x = torch.randn(batch, c.seq_len, c.enc_in)
    marks = torch.rand(batch, c.seq_len, c.time_features) - 0.5
    x_dec = torch.cat([x[:, -c.label_len :], torch.zeros(batch, c.pred_len, c.enc_in)], dim=1)
    dec_marks = torch.rand(batch, c.dec_len, c.time_features) - 0.5
    inputs = (x, marks, x_dec, dec_marks)
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


def measure(backend: str, batch: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.attention.memory", "--worker", backend, str(batch)]
    if args.checkpoint:
        cmd += ["--checkpoint", args.checkpoint]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        return {"backend": backend, "batch": batch, "error": proc.stderr.strip().splitlines()[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    lines = [
        "| backend | batch | estimate MiB | allocator peak MiB | estimate / allocator | "
        "RSS high-water MiB |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['backend']} | {r['batch']} | {r['error']} | | | |")
            continue
        rss = "–" if r["rss_mib"] is None else f"{r['rss_mib']:.1f}"
        lines.append(
            f"| {r['backend']} | {r['batch']} | {r['estimate_mib']:.1f} | "
            f"{r['allocated_mib']:.1f} | {r['estimate_mib'] / r['allocated_mib']:.2f} | {rss} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--checkpoint", help="an Informer checkpoint folder (default: random init)")
    p.add_argument("--backends", nargs="*", default=BACKENDS)
    p.add_argument("--batches", type=int, nargs="*", default=[1, 32])
    p.add_argument("--timeout", type=int, default=600, help="seconds per (backend, batch)")
    p.add_argument("--worker", nargs=2, metavar=("BACKEND", "BATCH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.checkpoint)
        return
    rows = []
    for batch in args.batches:
        for backend in args.backends:
            rows.append(measure(backend, batch, args))
            print(json.dumps(rows[-1]), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "memory-cpu.json").write_text(json.dumps(rows, indent=1) + "\n")
    command = "python -m benchmarks.attention.memory " + " ".join(argv if argv is not None else sys.argv[1:])
    note = (
        f"\nCPU, float32, inference mode, 1 thread; torch {torch.__version__}, "
        f"{os.cpu_count()} cores. Command: `{command.strip()}`. Model: {rows[0].get('model')}.\n"
    )
    text = "# Activation memory: estimate vs measured\n\n" + table(rows) + "\n" + note
    (RESULTS / "memory-cpu.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
