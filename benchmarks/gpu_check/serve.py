"""The GPU check's service step: ``attnserve serve`` on the device with the shipped Informers and
a random-weight BERT encoder built here with transformers (served as a user's model folder),
under closed-loop load at a few concurrencies, then its ``/metrics`` (batch sizes, memory).

    python -m benchmarks.gpu_check.serve --result service.json --log server.log [--dry]

On CUDA the encoder has all-MiniLM-L6-v2's shape (6 layers, 384 wide, 12 heads: its cost per
token is a real model's) and the context-2048 ETTm1 Informer joins the ETTh1 one; ``--dry``
runs the server on the CPU with a 2-layer, 32-wide encoder, the ETTh1 model and one-second
windows, to prove the step, not to measure. The result file is rewritten after every window.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.forecast.common import request_body, test_windows
from benchmarks.gpu_check.report import save_result
from benchmarks.harness.load import HOST, build_request, call_once, run_load, say
from benchmarks.harness.process import ROOT, ServerProcess, free_port
from benchmarks.service.managers import metric
from benchmarks.service.workloads import short_texts, workload
from models.informer.checkpoint import shipped_dirs

ENCODER = "random-bert"
SHORT, LONG = "informer-etth1-h24", "informer-ettm1-h288-c2048"
MINILM_SHAPE = {"hidden_size": 384, "intermediate_size": 1536, "num_attention_heads": 12}


@dataclass(frozen=True)
class Plan:
    """What one run of the step serves and sends."""

    device: str
    layers: int
    shape: dict[str, Any]  # config fields of the encoder (its width)
    forecasters: tuple[str, ...]
    windows: tuple[tuple[str, str, int], ...]  # (model, attention, clients)
    seconds: float
    warmup: float


GPU = Plan(
    "cuda", 6, MINILM_SHAPE, (SHORT, LONG),
    ((ENCODER, "flash", 1), (ENCODER, "flash", 16), (ENCODER, "flash", 64),
     (ENCODER, "full", 64), (SHORT, "flash", 1), (SHORT, "flash", 16), (SHORT, "probsparse", 16),
     (LONG, "flash", 16), (LONG, "probsparse", 16)),
    seconds=3.0, warmup=1.0,
)  # fmt: skip
DRY = Plan(
    "cpu", 2, {}, (SHORT,),
    ((ENCODER, "flash", 1), (ENCODER, "flash", 4), (SHORT, "flash", 4)),
    seconds=1.0, warmup=0.5,
)  # fmt: skip
MIB = 2**20
# What the report reads off /metrics after the load: (row, metric, divisor, per-count metric).
# A histogram's mean is its _sum over its _count; gauges are read as they are (summed over
# label sets, of which the memory gauges have none).
METRICS = (
    ("batches run (warm-up included)", "attnserve_batch_size_rows_count", 1, None),
    ("mean rows per batch", "attnserve_batch_size_rows_sum", 1, "attnserve_batch_size_rows_count"),
    ("mean requests per batch", "attnserve_batch_size_requests_sum", 1,
     "attnserve_batch_size_requests_count"),
    ("batch splits (out of memory)", "attnserve_batch_splits_total", 1, None),
    ("device memory allocated, MiB", "attnserve_device_memory_allocated_bytes", MIB, None),
    ("device memory reserved, MiB", "attnserve_device_memory_reserved_bytes", MIB, None),
    ("device memory total, MiB", "attnserve_device_memory_total_bytes", MIB, None),
    ("mean per-batch peak device memory, MiB", "attnserve_batch_peak_device_memory_bytes_sum",
     MIB, "attnserve_batch_peak_device_memory_bytes_count"),
    ("batch memory budget, MiB", "attnserve_batch_memory_budget_bytes", MIB, None),
    ("process resident memory, MiB", "attnserve_process_resident_memory_bytes", MIB, None),
)  # fmt: skip


def build_encoder(folder: Path, plan: Plan) -> Path:
    """A random-weight BERT saved by transformers' ``save_pretrained`` with its tokenizer: a
    user's model folder (the test suite's builder, :mod:`tests.utils.tiny_encoders`)."""
    from tests.utils.tiny_encoders import build_tiny_model

    build_tiny_model("bert", folder, seed=0, layers=plan.layers, **plan.shape)
    return folder


def requests(port: int, model: str, attention: str, n: int = 64) -> list[bytes]:
    """One request per text (``/encode``) or per history (``/forecast``) for ``model``."""
    if model == ENCODER:
        return workload("/encode", short_texts(n), attention, model=model).requests(port)
    channels, windows = test_windows(shipped_dirs()[model], min(n, 16))
    return [
        build_request(
            HOST, port, "/forecast",
            request_body(stamps, values, channels, "base64", model=model, attention=attention),
        )
        for stamps, values in windows
    ]  # fmt: skip


def scrape(server: ServerProcess) -> dict[str, float | None]:
    """The :data:`METRICS` rows from the server's ``/metrics``."""
    request = build_request(HOST, server.port, "/metrics", method="GET")
    status, body = call_once(HOST, server.port, request)
    if status != 200:
        return {"/metrics": float(status)}
    text = body.decode()
    out: dict[str, float | None] = {}
    for label, name, divisor, per in METRICS:
        value = metric(text, name) / divisor
        count = metric(text, per) if per else 1.0
        out[label] = round(value / count, 2) if count else None
    return out


def drive(plan: Plan, figures: dict[str, Any], result: Path, log: Path, ready_s: float) -> None:
    """Build the encoder, start the server, drive each window into ``figures["windows"]`` and
    read ``/metrics``, rewriting ``result`` as it goes; the server is stopped whatever happens."""
    with tempfile.TemporaryDirectory(prefix="attnserve-gpu-check-") as tmp:
        served = (
            [str(build_encoder(Path(tmp) / ENCODER, plan))] if ENCODER in figures["models"] else []
        )
        port = free_port()
        command = [
            sys.executable, "-m", "service", "serve", "--port", str(port),
            "--models", ",".join([*served, *plan.forecasters]),
            "--device", plan.device, "--workers", "1", "--max-batch-size", "64", "--max-queue", "1024",
            "--torch-threads", "0" if plan.device == "cuda" else "1", "--log-level", "warning",
        ]  # fmt: skip
        # The step's own environment: the carried wheels' folder stays on PYTHONPATH.
        server = ServerProcess(command, log, port, env=dict(os.environ), cwd=ROOT, name="attnserve")
        try:
            started = time.monotonic()
            server.wait_ready(timeout=ready_s)
            figures["ready_s"] = round(time.monotonic() - started, 1)
            save_result(result, "running", figures)
            for model, attention, clients in plan.windows:
                if model not in figures["models"]:
                    continue
                load = run_load(
                    HOST, port, requests(port, model, attention), clients, plan.seconds,
                    plan.warmup,
                )  # fmt: skip
                say(f"{model} {attention} c={clients}", load)
                sizes = load.batch_sizes
                figures["windows"].append({
                    "path": "/encode" if model == ENCODER else "/forecast",
                    "model": model, "attention": attention, "clients": clients,
                    "rps": load.throughput, "p50_ms": load.pct(50), "p99_ms": load.pct(99),
                    "mean_batch": sum(sizes) / len(sizes) if sizes else None,
                    "max_batch": max(sizes) if sizes else None, "errors": dict(load.errors),
                })  # fmt: skip
                save_result(result, "running", figures)
            figures["metrics"] = scrape(server)
        finally:
            server.stop()


def last_line(log: Path) -> str:
    """The server log's last line (where start-up failures say why)."""
    lines = log.read_text(errors="replace").strip().splitlines() if log.is_file() else []
    return lines[-1][:300] if lines else ""


def run(plan: Plan, result: Path, log: Path, ready_s: float) -> None:
    """The step: :func:`drive`, its outcome (a failure with its reason) into ``result``."""
    figures: dict[str, Any] = {
        "device": plan.device,
        "models": [ENCODER, *plan.forecasters],
        "windows": [],
        "metrics": {},
    }
    notes: list[str] = []
    if importlib.util.find_spec("transformers") is None:  # the Informers are served without it
        figures["models"].remove(ENCODER)
        notes.append("transformers is missing: no encoder built, /encode not measured")
    save_result(result, "running", figures, "; ".join(notes))
    try:
        drive(plan, figures, result, log, ready_s)
    except Exception as exc:  # the report says why; the runner marks the step failed
        reason = f"{type(exc).__name__}: {exc}"
        save_result(result, "failed", figures, f"{reason}; server log: {last_line(log)}")
        raise
    windows = figures["windows"]
    errors = sum(sum(w["errors"].values()) for w in windows)
    status = "ok" if windows and not errors else "failed"
    message = "; ".join([f"{len(windows)} load windows, {errors} errors", *notes])
    save_result(result, status, figures, message)


def main(argv: list[str] | None = None) -> None:
    """Run the service step into its result file."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--log", type=Path, required=True, help="the server's log")
    p.add_argument("--dry", action="store_true", help="CPU, tiny encoder, one-second windows")
    p.add_argument("--ready-s", type=float, default=120.0, help="longest wait for /readyz")
    args = p.parse_args(argv)
    # The runner ends a step past its limit with SIGTERM: exit through the finally blocks, so
    # the server (in a session of its own, out of reach of the runner's signal) is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run(DRY if args.dry else GPU, args.result, args.log, args.ready_s)


if __name__ == "__main__":
    main()
