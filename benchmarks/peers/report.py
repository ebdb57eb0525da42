"""The peer benchmark's results: what a run records of the machine and each server
(:func:`run_meta`), per-server summaries, the Markdown tables and the JSON record.

Throughput is the median over rounds of each round's req/s; latency percentiles pool every
round's answers (nearest rank); CPU per request sums CPU seconds and requests over rounds.
Ratios compare with LitServe at the same client count; in-process rows compare with attnserve's
encoder at the same batch size.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.harness.host import cores, cpu_model, load_average
from benchmarks.harness.load import LoadResult
from benchmarks.harness.report import table
from benchmarks.harness.timing import percentile
from benchmarks.peers.servers import Peer, Turn

BASELINE = "litserve"


@dataclass(frozen=True)
class Summary:
    """One server at one client count, over all rounds."""

    server: str
    clients: int
    rps_rounds: list[float]
    p50_ms: float
    p95_ms: float
    p99_ms: float
    requests: int
    errors: dict[str, int]
    server_cpu_ms_per_request: float
    driver_cpu_ms_per_request: float
    other_cores: float  # mean cores busy with neither the server nor the driver in the window

    @property
    def rps(self) -> float:
        return statistics.median(self.rps_rounds) if self.rps_rounds else float("nan")

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def _per_request(rounds: list[LoadResult], key: str) -> float:
    requests = sum(r.requests for r in rounds)
    if not requests or any(key not in r.cpu_s for r in rounds):
        return float("nan")
    return sum(r.cpu_s[key] for r in rounds) * 1000.0 / requests


def other_cores(result: LoadResult) -> float:
    """Cores busy on average with other processes than the server and the driver during the
    window (the machine's busy CPU seconds less theirs): load from elsewhere that skews it."""
    cpu = result.cpu_s
    if not {"machine", "server", "driver"} <= cpu.keys() or result.seconds <= 0:
        return float("nan")
    return max(0.0, cpu["machine"] - cpu["server"] - cpu["driver"]) / result.seconds


def summarize(server: str, clients: int, rounds: list[LoadResult]) -> Summary:
    latencies = [x for r in rounds for x in r.latencies_ms]
    requests = sum(r.requests for r in rounds)
    errors: Counter[str] = Counter()
    for r in rounds:
        errors.update(r.errors)
    return Summary(
        server=server,
        clients=clients,
        rps_rounds=[r.throughput for r in rounds],
        p50_ms=percentile(latencies, 50),
        p95_ms=percentile(latencies, 95),
        p99_ms=percentile(latencies, 99),
        requests=requests,
        errors=dict(errors),
        server_cpu_ms_per_request=_per_request(rounds, "server"),
        driver_cpu_ms_per_request=_per_request(rounds, "driver"),
        other_cores=statistics.fmean(other_cores(r) for r in rounds) if rounds else math.nan,
    )


def summaries(
    rounds: dict[tuple[str, int], list[LoadResult]], servers: list[str], clients: list[int]
) -> list[Summary]:
    """One summary per run, every server at the first client count, then at the next, ..."""
    return [summarize(name, c, rounds[(name, c)]) for c in clients for name in servers]


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else float("nan")


def _x(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


def baseline_of(summaries: list[Summary], clients: int) -> Summary | None:
    return next((s for s in summaries if s.server == BASELINE and s.clients == clients), None)


def _vs_attnserve(ceilings: list[dict[str, Any]], row: dict[str, Any]) -> float:
    ours = next(
        (c for c in ceilings if c["impl"] == "attnserve" and c["batch"] == row["batch"]), None
    )
    return _ratio(row["texts_per_s"], ours["texts_per_s"]) if ours else float("nan")


def checks(
    summaries: list[Summary], ceilings: list[dict[str, Any]] | None = None
) -> list[tuple[str, float, bool]]:
    """The targets of issue 37 (items 4 and 3): (what, measured ratio, met) for those whose
    rows ran."""
    by = {(s.server, s.clients): s for s in summaries}
    out = []
    busy = max((s.clients for s in summaries), default=0)
    if ("attnserve", busy) in by and (BASELINE, busy) in by:
        a, lit = by[("attnserve", busy)], by[(BASELINE, busy)]
        ratio = _ratio(a.rps, lit.rps)
        out.append((f"attnserve req/s >= 1.5x LitServe's at {busy} clients", ratio, ratio >= 1.5))
        ratio = _ratio(a.p99_ms, lit.p99_ms)
        out.append((f"attnserve p99 <= LitServe's at {busy} clients", ratio, ratio <= 1.0))
    if ("attnserve", 1) in by and (BASELINE, 1) in by:
        ratio = _ratio(by[("attnserve", 1)].p50_ms, by[(BASELINE, 1)].p50_ms)
        out.append(("attnserve p50 <= 0.5x LitServe's at 1 client", ratio, ratio <= 0.5))
    if ("attnserve", 1) in by and ("naive", 1) in by:
        ratio = _ratio(by[("attnserve", 1)].p50_ms, by[("naive", 1)].p50_ms)
        out.append(("attnserve p50 <= the naive server's at 1 client", ratio, ratio <= 1.0))
    for batch, floor in ((1, 0.8), (32, 1.0)):
        ort = next(
            (c for c in ceilings or [] if c["impl"] == "onnxruntime" and c["batch"] == batch),
            None,
        )
        if ort is not None:
            ratio = 1.0 / _vs_attnserve(ceilings or [], ort)
            out.append(
                (f"in-process batch {batch}: attnserve >= {floor}x ONNX Runtime", ratio,
                 ratio >= floor)
            )  # fmt: skip
    return out


def loads_cell(pairs: list[tuple[str, str]]) -> str:
    """The 1-minute load average before -> after each round's run."""
    return " / ".join(f"{a.split()[0]}→{b.split()[0]}" for a, b in pairs)


def stop_cell(stop: dict[str, Any], sep: str = "; ") -> str:
    """How one server's process tree ended: the last signal, how long, what outlived SIGTERM."""
    outlived = (
        f" (outlived SIGTERM: {sep.join(stop['outlived_term'])})" if stop["outlived_term"] else ""
    )
    return f"{stop['signal']} {stop['seconds']:.1f} s{outlived}"


def vs_baseline(s: Summary, summaries: list[Summary]) -> str:
    """``s``'s req/s over LitServe's at the same client count ("-" without LitServe)."""
    base = baseline_of(summaries, s.clients)
    return _x(_ratio(s.rps, base.rps)) if base else "-"


def _errors(s: Summary) -> str:
    kinds = ", ".join(f"{k}: {v}" for k, v in sorted(s.errors.items()))
    return f"{s.error_count} ({kinds})" if s.errors else str(s.error_count)


SERVERS = (
    "server | configuration | virtualenv: versions | start-up s | cosine to attnserve | "
    "stopped by, per round"
)
RUNS = (
    "server | clients | req/s per round | req/s (median) | vs LitServe | p50 / p95 / p99 ms | "
    "p50, p99 vs LitServe | errors | server CPU ms/req | driver CPU ms/req | other load, cores | "
    "load 1 min before→after"
)
IN_PROCESS = (
    "in-process | batch | texts/s | vs attnserve | CPU ms/text | threads | cosine to attnserve"
)


def markdown(
    meta: dict[str, Any],
    summaries: list[Summary],
    ceilings: list[dict[str, Any]],
    loads: dict[tuple[str, int], list[tuple[str, str]]] | None = None,
) -> str:
    """The results page: machine and versions, the server table, the in-process reference
    rows, the targets."""
    servers = [
        [name, info["config"],
         f"{info.get('venv', '-')}: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()),
         "/".join(f"{s:.0f}" for s in info["startup_s"]), f"{min(info['cosine']):.6f}",
         " / ".join(map(stop_cell, info.get("stops", [])))]
        for name, info in meta["server_info"].items()
    ]  # fmt: skip
    runs = []
    for s in summaries:
        base = baseline_of(summaries, s.clients)
        ratios = (
            (_x(_ratio(s.p50_ms, base.p50_ms)), _x(_ratio(s.p99_ms, base.p99_ms))) if base else ()
        )
        runs.append(
            [s.server, s.clients, " / ".join(f"{r:.1f}" for r in s.rps_rounds), f"{s.rps:.1f}",
             vs_baseline(s, summaries), f"{s.p50_ms:.1f} / {s.p95_ms:.1f} / {s.p99_ms:.1f}",
             ", ".join(ratios) or "-", _errors(s), f"{s.server_cpu_ms_per_request:.2f}",
             f"{s.driver_cpu_ms_per_request:.2f}", f"{s.other_cores:.2f}",
             loads_cell((loads or {}).get((s.server, s.clients), []))]
        )  # fmt: skip
    in_process = [
        [c["label"], c["batch"], f"{c['texts_per_s']:.1f}", _x(_vs_attnserve(ceilings, c)),
         f"{c['cpu_ms_per_text']:.2f}", c["threads"], f"{c['cosine']:.6f}"]
        for c in ceilings
    ]  # fmt: skip
    lines = [
        "# attnserve beside its peers: one short text per request (CPU)",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"- date: {meta['date']}",
        f"- CPU: {meta['cpu_model']}; {meta['logical_cpus']} logical CPUs "
        f"({meta['usable_cpus']} usable by this run)",
        f"- torch threads: {meta['threads']} per server process that runs the model (every "
        "server: OMP_NUM_THREADS / MKL_NUM_THREADS, plus the server's own setting, below); the "
        f"driver runs on the same machine; OMP_WAIT_POLICY {meta.get('omp_wait_policy', '-')} "
        "for every server and in-process row (attnserve's own default)",
        f"- workload: one text of 8-24 words per request (stdlib docstrings, "
        f"{meta['texts']} distinct texts), closed-loop keep-alive clients, {meta['warmup_s']} s "
        f"warm-up then {meta['seconds']} s measured per run, {meta['rounds']} round(s), servers "
        f"alternating within each round ({', '.join(meta['servers'])}), one at a time",
        f"- load average (1, 5, 15 min) before / after the whole run: {meta['load_before']} / "
        f"{meta['load_after']}; per run in the table below (the machine is shared: other load "
        "skews a row)",
        "- each server stopped before the next started: SIGTERM to its process group, SIGKILL "
        "to whatever outlived a grace, then psutil found none of its processes left (the last "
        "column: the signal that ended it and how long it took, per round)",
        "",
        table(SERVERS.split(" | "), servers, "lllrr"),
        "",
        table(RUNS.split(" | "), runs, "lrlrrrrrrrr"),
    ]
    if ceilings:
        lines += [
            "",
            "Reference rows, no server: the model in one process on batches of 32 and of 1 "
            f"text ({ceilings[0]['texts']} texts, tokenization included), same texts and "
            f"threads, best of {ceilings[0]['repeats']} passes; each in its own process, one "
            "after the other.",
            "",
            table(IN_PROCESS.split(" | "), in_process, "lrrrrrr"),
        ]
        ort = next((c for c in ceilings if c["impl"] == "onnxruntime"), None)
        if ort is not None:
            fused = ", ".join(f"{k} {v}" for k, v in ort["fused"].items())
            versions = ", ".join(f"{k} {v}" for k, v in ort["versions"].items())
            lines += [
                "",
                "ONNX Runtime: `torch.onnx.export` (TorchScript exporter, opset "
                f"{ort['opset']}, eager attention, mean pooling and normalisation in the graph), "
                "then `onnxruntime.transformers.optimizer.optimize_model(model_type='bert')`; "
                f"fused: {fused}; float32, CPU provider, intra_op_num_threads {ort['threads']}, "
                f"one inter-op thread, spinning {'on' if ort.get('spinning') else 'off'}, the "
                f"folder's fast tokenizer ({versions}; "
                "`benchmarks/peers/onnx_reference.py`).",
            ]
    targets = checks(summaries, ceilings)
    if targets:
        rows = [[what, _x(ratio), "yes" if met else "no"] for what, ratio, met in targets]
        lines += ["", table(["target", "measured", "met"], rows, "lr")]
    return "\n".join(lines) + "\n"


def record(
    meta: dict[str, Any],
    summaries: list[Summary],
    ceilings: list[dict[str, Any]],
    rounds: dict[tuple[str, int], list[LoadResult]],
    loads: dict[tuple[str, int], list[tuple[str, str]]] | None = None,
) -> dict[str, Any]:
    """Everything in the page, plus each round's own percentiles, as JSON-ready data."""
    rows = []
    for s in summaries:
        base = baseline_of(summaries, s.clients)
        rows.append(
            {
                "server": s.server,
                "clients": s.clients,
                "rps_median": s.rps,
                "rps_rounds": s.rps_rounds,
                "p50_ms": s.p50_ms,
                "p95_ms": s.p95_ms,
                "p99_ms": s.p99_ms,
                "requests": s.requests,
                "errors": s.errors,
                "server_cpu_ms_per_request": s.server_cpu_ms_per_request,
                "driver_cpu_ms_per_request": s.driver_cpu_ms_per_request,
                "other_cores": s.other_cores,
                "rps_vs_litserve": _ratio(s.rps, base.rps) if base else None,
                "p50_vs_litserve": _ratio(s.p50_ms, base.p50_ms) if base else None,
                "p99_vs_litserve": _ratio(s.p99_ms, base.p99_ms) if base else None,
                "rounds": [
                    {
                        "rps": r.throughput,
                        "p50_ms": r.pct(50),
                        "p95_ms": r.pct(95),
                        "p99_ms": r.pct(99),
                        "errors": dict(r.errors),
                        "cpu_s": r.cpu_s,
                        "other_cores": other_cores(r),
                        "load_before_after": list(load),
                    }
                    for r, load in zip(
                        rounds[(s.server, s.clients)],
                        (loads or {}).get((s.server, s.clients))
                        or [("", "")] * len(rounds[(s.server, s.clients)]),
                        strict=True,
                    )
                ],
            }
        )
    return {
        **meta,
        "rows": rows,
        "in_process": ceilings,
        "targets": [{"target": w, "ratio": r, "met": m} for w, r, m in checks(summaries, ceilings)],
    }


def run_meta(
    args: argparse.Namespace, command: str, load_before: str, peers: Mapping[str, Peer],
    pythons: Mapping[str, Path], turns: Mapping[str, list[Turn]], **extra: Any,
) -> dict[str, Any]:  # fmt: skip
    """What every peer run records: the command, the machine, the load, the run's shape
    (``extra`` added), and per server its configuration, interpreter, versions, start-up times
    and how its process tree ended each round."""
    return {
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": cores(),
        "threads": args.threads,
        "omp_wait_policy": args.omp_wait_policy,
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "rounds": args.rounds,
        "repeats": args.repeats,
        "clients": args.clients,
        "servers": args.servers,
        "load_before": load_before,
        "load_after": load_average(),
        **extra,
        "server_info": {
            name: {
                "config": peers[name].config,
                "torch_threads": args.threads,
                "venv": pythons[peers[name].interpreter].parent.parent.name,
                "versions": versions(pythons[peers[name].interpreter], peers[name].packages),
                "startup_s": [t.startup_s for t in turns[name]],
                "stops": [asdict(t.stopped) for t in turns[name] if t.stopped],
            }
            for name in args.servers
        },
    }


def versions(python: Path, packages: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of ``packages`` in ``python``'s environment ("-" if missing)."""
    script = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: out[p] = '-'\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [str(python), "-c", script, *packages], capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout))
