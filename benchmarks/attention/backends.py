"""Attention backends alone: median latency, peak memory and error against exact attention.

    python -m benchmarks.attention.backends                     # B=1, H=8, D=64, fp32, L = 512 … 32768
    python -m benchmarks.attention.backends --lengths 512 2048 --device cuda --dtype bfloat16
    python -m benchmarks.attention.backends --implementations probsparse peer:informer2020 --threads 1

Every (implementation, L) runs in a fresh subprocess so its peak memory is its own: on CPU the
peak RSS (``ru_maxrss``) minus the RSS before the first call, on CUDA ``max_memory_allocated``
minus the inputs. The error is the mean over rows of ||y − y_exact|| / ||y_exact|| against the
``flash`` output (exact; checked against a float64 reference in the tests). Peers run at the
same budgets: performer-pytorch ``FastAttention`` and nystrom-attention's ``NystromAttention``
with its projections replaced by identities, so only the attention itself is timed. ProbSparse has
no package; its peer ``peer:informer2020`` re-implements the reference code's algorithm
(zhouhaoyi/Informer2020 ``models/attn.py``, ``ProbAttention``) at the same factor.
Prints a markdown table and writes a JSON file and a PNG plot to ``--results-dir``
(``benchmarks/results/attention-<device>-<dtype>.{json,png}``). ``--smoke``: L = 128, our
backends only, one repeat each.

Our rows are every backend the registry holds (:func:`models.attention.registry.names`, read
when the script runs), each at its default options; only the peers are named here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks.attention.common import full_fits, in_subprocess, length_plot, peak_rss_mib, rss_mib
from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, table, write_json
from benchmarks.harness.timing import budget_samples
from models.attention import get_backend
from models.attention.performer import default_num_features
from models.attention.registry import names

# The peers run at our backends' default budgets (read from the registry where the option has
# a fixed default): m = int(d·ln d) random features, 64 landmarks, factor c = 5.
LANDMARKS = get_backend("nystrom").resolve_options(None)["num_landmarks"]
FACTOR = get_backend("probsparse").resolve_options(None)["factor"]
# Each approximation's peer: the same algorithm from its reference package (or code).
PEERS = {
    "performer": "peer:performer-pytorch",
    "nystrom": "peer:nystrom-attention",
    "probsparse": "peer:informer2020",
}


def ours() -> list[str]:
    """Every registered backend, in listing order (a new backend file is a new row)."""
    return list(names())


def implementations() -> list[str]:
    """Our backends, then the peers."""
    return [*ours(), *PEERS.values()]


def approximate() -> tuple[str, ...]:
    """The registered backends that approximate attention."""
    return tuple(b for b in names() if not get_backend(b).exact)


def options_note() -> str:
    """Each approximation's budget option at its default, for the table's caption."""
    notes = []
    for name in approximate():
        backend = get_backend(name)
        if backend.budget is None:
            continue
        value = backend.resolve_options(None)[backend.budget]
        # None: derived from the input (performer's m = int(d·ln d))
        notes.append(f"{name} {backend.budget}={'from D' if value is None else value}")
    return ", ".join(notes)


def informer2020_probsparse(q, k, v, factor: int = FACTOR):
    """Non-causal ProbSparse as the reference code computes it, ``[b,h,i,d] -> [b,h,i,d]``.

    The algorithm of Informer2020's ``ProbAttention`` (written here from its description, not
    copied): every query draws its own ``U = c·⌈ln Lk⌉`` key indices with ``torch.randint``
    (the same draw for all rows and heads); the sampled keys are picked out of the keys broadcast
    to ``[b, h, Lq, Lk, d]``, one ``[U, d]`` block per query, and scored against their query;
    the measure is ``max − sum / Lk`` of those unscaled scores; the ``u = c·⌈ln Lq⌉`` queries
    with the largest measure get ``softmax(q kᵀ/√d) v`` and every other query the mean of ``v``.
    """
    b, h, lq, d = q.shape
    lk = k.shape[-2]
    n_sample = min(factor * math.ceil(math.log(lk)), lk)
    n_top = min(factor * math.ceil(math.log(lq)), lq)
    picks = torch.randint(lk, (lq, n_sample))  # [Lq, U]
    broadcast = k.unsqueeze(2).expand(b, h, lq, lk, d)
    sampled = broadcast[:, :, torch.arange(lq)[:, None], picks, :]  # [b, h, Lq, U, d]
    sample_scores = (q.unsqueeze(-2) @ sampled.transpose(-2, -1)).squeeze(-2)  # [b, h, Lq, U]
    measure = sample_scores.amax(dim=-1) - sample_scores.sum(dim=-1) / lk
    top = measure.topk(n_top, dim=-1, sorted=False).indices  # [b, h, u]
    rows = torch.arange(b)[:, None, None], torch.arange(h)[None, :, None]
    scores = q[rows[0], rows[1], top] @ k.transpose(-2, -1) / math.sqrt(d)  # [b, h, u, Lk]
    out = v.mean(dim=-2, keepdim=True).expand(b, h, lq, d).clone()
    out[rows[0], rows[1], top] = scores.softmax(dim=-1) @ v
    return out


def _runner(name: str, heads: int, head_dim: int, device: str):
    """A function ``(q, k, v) -> out`` for one implementation."""
    if name.startswith("peer:performer"):
        from performer_pytorch import FastAttention

        features = default_num_features(head_dim)  # our performer's default m
        module = FastAttention(dim_heads=head_dim, nb_features=features, causal=False).to(device)
        return module
    if name.startswith("peer:nystrom"):
        from nystrom_attention import NystromAttention

        inner = heads * head_dim
        module = NystromAttention(
            dim=3 * inner,
            dim_head=head_dim,
            heads=heads,
            num_landmarks=LANDMARKS,
            pinv_iterations=6,
            residual=False,
        ).to(device)
        module.to_qkv = torch.nn.Identity()  # q, k, v arrive ready: time attention only
        module.to_out = torch.nn.Identity()

        def run(q, k, v):
            b, h, n, d = q.shape
            x = torch.cat([t.transpose(1, 2).reshape(b, n, h * d) for t in (q, k, v)], dim=-1)
            return module(x).reshape(b, n, h, d).transpose(1, 2)

        return run
    if name == "peer:informer2020":
        return informer2020_probsparse

    from models.attention import attend

    return lambda q, k, v: attend(q, k, v, backend=name)  # its default options


def worker(args: argparse.Namespace) -> None:
    """Measure one implementation at one length; print one JSON line."""
    torch.manual_seed(0)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    device = args.device
    shape = (1, args.heads, args.length, args.head_dim)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.attention_inputs import structured_qkv

    q, k, v = (
        t.to(device=device, dtype=dtype) for t in structured_qkv(*shape[:3], *shape[2:], scale=0.5)
    )
    run = _runner(args.impl, args.heads, args.head_dim, device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base: float = torch.cuda.memory_allocated()
    else:
        base = rss_mib()
    out: list[torch.Tensor] = []

    def call() -> None:  # keeps only the latest output alive, as one variable would
        out[:] = [run(q, k, v)]

    with torch.inference_mode():
        sync = torch.cuda.synchronize if device == "cuda" else lambda: None
        times = budget_samples(call, args.seconds, args.min_reps, sync=sync)
    if device == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = peak_rss_mib() - base
    if args.save:
        torch.save(out[-1].float().cpu(), args.save)
    print(
        json.dumps(
            {"median_ms": 1000 * statistics.median(times), "peak_mib": peak, "reps": len(times)}
        )
    )


def _measure(impl: str, length: int, args: argparse.Namespace, save: str | None) -> dict:
    """One (implementation, L) in a fresh process (``{"note": "failed"}`` when it fails)."""
    argv = [
        "--impl", impl, "--length", str(length), "--heads", str(args.heads),
        "--head-dim", str(args.head_dim), "--dtype", args.dtype, "--device", args.device,
        "--seconds", str(args.seconds), "--min-reps", str(args.min_reps),
        "--threads", str(args.threads), *(["--save", save] if save else []),
    ]  # fmt: skip
    result = in_subprocess("benchmarks.attention.backends", argv, args.timeout)
    if "error" in result:
        print(f"  {impl} L={length}: failed: {result['error']}", file=sys.stderr)
        return {"note": "failed"}
    return result


def _relative_error(out: torch.Tensor, exact: torch.Tensor) -> float:
    per_row = (out.double() - exact.double()).norm(dim=-1) / exact.double().norm(dim=-1)
    return float(per_row.mean())


def main(args: argparse.Namespace) -> None:
    """Every implementation at every length; the table, the JSON and the plot."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for length in args.lengths:
            exact_path = os.path.join(tmp, f"flash-{length}.pt")
            # flash runs first in every length: its output is the exact reference for the error.
            for impl in ["flash"] + [i for i in args.implementations if i != "flash"]:
                if impl == "full" and not full_fits(length, args.heads, args.full_budget_gib):
                    gib = 2 * args.heads * length**2 * 4 / 2**30
                    rows.append(
                        {"impl": impl, "L": length, "note": f"skipped: needs ~{gib:.0f} GiB"}
                    )
                    continue
                save = exact_path if impl == "flash" else os.path.join(tmp, "out.pt")
                result = _measure(impl, length, args, save)
                row = {"impl": impl, "L": length, **result}
                if "median_ms" in result:
                    exact = impl != "flash" and os.path.exists(exact_path)
                    row["rel_error"] = (
                        _relative_error(torch.load(save), torch.load(exact_path)) if exact else 0.0
                    )
                rows.append(row)
                print(f"  {impl:24s} L={length:6d} {row}", file=sys.stderr, flush=True)
    print(_table(rows, args))
    tag = f"attention-{args.device}-{args.dtype}"
    print(f"\nwrote {write_json(args.results_dir / f'{tag}.json', rows)}")
    threads = args.threads or torch.get_num_threads()
    title = (
        f"B=1, H={args.heads}, D={args.head_dim}, {args.dtype}, {args.device}, {threads} threads"
    )
    length_plot(
        args.results_dir / f"{tag}.png",
        rows,
        "impl",
        implementations(),
        ("sequence length L", "median latency (ms)", "peak memory (MiB)"),
        title,
    )


def _table(rows: list[dict], args: argparse.Namespace) -> str:
    """The Markdown table and the ratios read from it."""
    cells = [
        [
            r["impl"],
            r["L"],
            f"{r['median_ms']:.1f}",
            f"{r['peak_mib']:.0f}",
            f"{r['rel_error']:.3f}",
        ]
        if "median_ms" in r
        else [r["impl"], r["L"], r.get("note", ""), "", ""]
        for r in rows
    ]
    lines = [
        f"B=1, H={args.heads}, D={args.head_dim}, {args.dtype} on {args.device} "
        f"({args.threads or torch.get_num_threads()} threads); error vs exact "
        f"(flash), mean relative row error; every backend at its default options "
        f"({options_note()}), the peers at the same budgets",
        "",
        table(["implementation", "L", "median ms", "peak MiB", "rel. error"], cells, "lrrrr"),
        "",
        "Ratios (from this run):",
    ]
    by = {(r["impl"], r["L"]): r for r in rows if "median_ms" in r}
    approx = approximate()
    for ref, impls in (("full", ("flash", *approx)), ("flash", approx)):
        for length in args.lengths:
            for impl in impls:
                r, base = by.get((impl, length)), by.get((ref, length))
                if r and base:
                    memory = r["peak_mib"] / max(base["peak_mib"], 1e-9)
                    also = f", with {memory:.3f}x its peak memory" if ref == "full" else ""
                    lines.append(
                        f"- L={length}: {impl} is {base['median_ms'] / r['median_ms']:.1f}x faster "
                        f"than {ref}{also}"
                    )
    for impl in ("flash", *approx):
        a, b = by.get((impl, 8192)), by.get((impl, 32768))
        if a and b:
            lines.append(
                f"- {impl}: peak memory x{b['peak_mib'] / max(a['peak_mib'], 1e-9):.1f} "
                "from L=8192 to 32768 (linear would be x4)"
            )
    for mine in approx:
        for length in args.lengths:
            a, b = by.get((mine, length)), by.get((PEERS.get(mine, ""), length))
            if a and b:
                lines.append(
                    f"- L={length}: {mine} {b['median_ms'] / a['median_ms']:.2f}x the peer's speed, "
                    f"error {a['rel_error']:.3f} vs {b['rel_error']:.3f}"
                )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; ``--implementations`` defaults to every registered backend and peer
    (``--smoke``: our backends only)."""
    every = implementations()
    p = cli.parser(
        __doc__,
        cli.sizes("--lengths", [512, 1024, 2048, 4096, 8192, 16384, 32768]),
        cli.seconds(3.0),
        cli.threads(0, "torch threads (0: torch's default)"),
    )
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--min-reps", type=int, default=3)
    p.add_argument("--full-budget-gib", type=float, default=6.0, help="skip `full` above this")
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument(
        "--implementations",
        nargs="+",
        default=every,
        choices=every,
        metavar="IMPL",
        help=f"which to run (flash always runs: it is the exact reference); {every}",
    )
    p.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS,
        help="where the JSON and PNG go (default: benchmarks/results)",
    )
    # worker mode (internal)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--impl", help=argparse.SUPPRESS)
    p.add_argument("--length", type=int, help=argparse.SUPPRESS)
    p.add_argument("--save", help=argparse.SUPPRESS)
    return cli.parse(p, argv, lengths=[128], seconds=0.1, min_reps=1, implementations=ours())


if __name__ == "__main__":
    parsed = parse_args()
    if parsed.worker:
        worker(parsed)
    else:
        main(parsed)
