"""What the attention benchmarks share: one measurement per fresh process (so its peak memory is
its own), the resident-memory reading, the guard that keeps ``full`` attention within a memory
budget, a random Informer input, the latency/memory-against-length plot, and the
attention-free floor (every attention layer stubbed out) that the forecast and text benchmarks
measure against."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from benchmarks.harness.report import figure, log_axes
from models.attention.base import repeat_kv_heads


def rss_mib() -> float:
    """This process's resident memory now, in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    """This process's resident-memory high-water mark (``ru_maxrss``), in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def full_fits(length: int, heads: int, budget_gib: float) -> bool:
    """Whether ``full`` attention's scores and softmax output ([heads, L, L] twice, float32) fit
    in ``budget_gib``."""
    return 2 * heads * length**2 * 4 / 2**30 <= budget_gib


def informer_inputs(c: Any, batch: int) -> tuple[torch.Tensor, ...]:
    """A random input of ``batch`` rows for an Informer of config ``c`` (speed and memory do not
    depend on the values): encoder steps and marks, decoder steps (the last ``label_len``
    encoder steps, then zeros) and marks."""
    x = torch.randn(batch, c.seq_len, c.enc_in)
    marks = torch.rand(batch, c.seq_len, c.time_features) - 0.5
    x_dec = torch.cat([x[:, -c.label_len :], torch.zeros(batch, c.pred_len, c.enc_in)], dim=1)
    return x, marks, x_dec, torch.rand(batch, c.dec_len, c.time_features) - 0.5


def in_subprocess(module: str, argv: Sequence[str], timeout: float) -> dict[str, Any]:
    """Run ``python -m module --worker argv...`` and return the JSON of its last output line, or
    ``{"error": ...}`` (its last error line, or the timeout)."""
    cmd = [sys.executable, "-m", module, "--worker", *argv]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout {timeout:g}s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def length_plot(
    path: Path,
    rows: list[dict[str, Any]],
    key: str,
    order: Sequence[str],
    labels: tuple[str, str, str],
    title: str,
) -> None:
    """Latency (``median_ms``) and peak memory (``peak_mib``) against length (``L``), one line per
    ``rows[i][key]`` in ``order`` (peers dashed); ``labels``: x, latency and memory axis names."""
    with figure(path, 2, (12, 4.5)) as (ax_t, ax_m):
        for name in order:
            pts = sorted(
                (r["L"], r) for r in rows if r[key] == name and r.get("median_ms") is not None
            )
            if not pts:
                continue
            style = "--" if name.startswith("peer") else "-"
            xs = [n for n, _ in pts]
            ax_t.plot(xs, [r["median_ms"] for _, r in pts], style, marker="o", label=name)
            ax_m.plot(xs, [max(r["peak_mib"], 0.1) for _, r in pts], style, marker="o", label=name)
        log_axes(ax_t, labels[0], labels[1])
        log_axes(ax_m, labels[0], labels[2])
        ax_t.figure.suptitle(title)


def _free_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *_: Any, **__: Any
) -> torch.Tensor:
    """Attention that costs nothing: the first ``Lq`` value rows (``[b, h, Lq, d]``; in
    cross-attention with fewer keys than queries, the queries; grouped values repeated per
    query head), so every other layer sees the shapes it always sees."""
    if v.shape[2] < q.shape[2]:
        return q
    return repeat_kv_heads(v[:, :, : q.shape[2]], q.shape[1])


@contextmanager
def attention_replaced(module: ModuleType, stub: bool) -> Iterator[None]:
    """Inside the block, every attention layer that calls ``module.attend`` (the Informer's
    ``models.informer.layers``, the text models' ``models.text.network.bert``) gets the free stub when
    ``stub``: the attention-free floor no backend can go below."""
    real = module.attend
    module.attend = _free_attention if stub else real  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module.attend = real  # type: ignore[attr-defined]
