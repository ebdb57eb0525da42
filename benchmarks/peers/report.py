"""The peer benchmark's results: per-server summaries, the Markdown table and the JSON record.

Throughput is the median over rounds of each round's req/s; latency percentiles pool every
round's answers (nearest rank); CPU per request sums CPU seconds and requests over rounds.
Ratios compare with LitServe at the same client count.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from benchmarks.peers.driver import LoadResult, percentile

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


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else float("nan")


def _x(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


def baseline_of(summaries: list[Summary], clients: int) -> Summary | None:
    return next((s for s in summaries if s.server == BASELINE and s.clients == clients), None)


def checks(summaries: list[Summary]) -> list[tuple[str, float, bool]]:
    """The targets: (what, measured ratio, met) for those whose servers ran."""
    by = {(s.server, s.clients): s for s in summaries}
    out = []
    busy = max((s.clients for s in summaries), default=0)
    if ("attnserve", busy) in by and (BASELINE, busy) in by:
        a, lit = by[("attnserve", busy)], by[(BASELINE, busy)]
        ratio = _ratio(a.rps, lit.rps)
        out.append((f"attnserve req/s >= 1.5x LitServe's at {busy} clients", ratio, ratio >= 1.5))
        ratio = _ratio(a.p99_ms, lit.p99_ms)
        out.append((f"attnserve p99 <= LitServe's at {busy} clients", ratio, ratio <= 1.0))
    if ("attnserve", 1) in by and ("naive", 1) in by:
        ratio = _ratio(by[("attnserve", 1)].p50_ms, by[("naive", 1)].p50_ms)
        out.append(("attnserve p50 <= the naive server's at 1 client", ratio, ratio <= 1.0))
    return out


def markdown(meta: dict[str, Any], summaries: list[Summary], ceilings: list[dict[str, Any]]) -> str:
    """The results page: machine and versions, the server table, the in-process ceilings, the
    targets."""
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
        "driver runs on the same machine",
        f"- workload: one text of 8-24 words per request (stdlib docstrings, "
        f"{meta['texts']} distinct texts), closed-loop keep-alive clients, {meta['warmup_s']} s "
        f"warm-up then {meta['seconds']} s measured per run, {meta['rounds']} round(s), servers "
        f"alternating within each round ({', '.join(meta['servers'])}), one at a time",
        f"- load average before / after: {meta['load_before']} / {meta['load_after']}",
        "",
        "| server | configuration | versions | start-up s | cosine to attnserve |",
        "|---|---|---|---:|---:|",
    ]
    for name, info in meta["server_info"].items():
        packages = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
        startup = "/".join(f"{s:.0f}" for s in info["startup_s"])
        lines.append(
            f"| {name} | {info['config']} | {packages} | {startup} | {min(info['cosine']):.6f} |"
        )
    lines += [
        "",
        "| server | clients | req/s per round | req/s (median) | vs LitServe | p50 / p95 / p99 ms "
        "| p50, p99 vs LitServe | errors | server CPU ms/req | driver CPU ms/req "
        "| other load, cores |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        base = baseline_of(summaries, s.clients)
        rps_x = _x(_ratio(s.rps, base.rps)) if base else "-"
        lat_x = (
            f"{_x(_ratio(s.p50_ms, base.p50_ms))}, {_x(_ratio(s.p99_ms, base.p99_ms))}"
            if base
            else "-"
        )
        errors = str(s.error_count)
        if s.errors:
            errors += " (" + ", ".join(f"{k}: {v}" for k, v in sorted(s.errors.items())) + ")"
        lines.append(
            f"| {s.server} | {s.clients} | {' / '.join(f'{r:.1f}' for r in s.rps_rounds)} | "
            f"{s.rps:.1f} | {rps_x} | {s.p50_ms:.1f} / {s.p95_ms:.1f} / {s.p99_ms:.1f} | "
            f"{lat_x} | {errors} | {s.server_cpu_ms_per_request:.2f} | "
            f"{s.driver_cpu_ms_per_request:.2f} | {s.other_cores:.2f} |"
        )
    if ceilings:
        lines += [
            "",
            "Reference rows, no server: the model in one process on batches of 32 texts "
            "(tokenization included), same texts and threads, best of "
            f"{ceilings[0]['repeats']} passes.",
            "",
            "| in-process, batch 32 | texts/s | CPU ms/text | torch threads |",
            "|---|---:|---:|---:|",
        ]
        for c in ceilings:
            lines.append(
                f"| {c['label']} | {c['texts_per_s']:.1f} | {c['cpu_ms_per_text']:.2f} | "
                f"{c['torch_threads']} |"
            )
    targets = checks(summaries)
    if targets:
        lines += ["", "| target | measured | met |", "|---|---:|---|"]
        for what, ratio, met in targets:
            lines.append(f"| {what} | {_x(ratio)} | {'yes' if met else 'no'} |")
    return "\n".join(lines) + "\n"


def record(
    meta: dict[str, Any],
    summaries: list[Summary],
    ceilings: list[dict[str, Any]],
    rounds: dict[tuple[str, int], list[LoadResult]],
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
                    }
                    for r in rounds[(s.server, s.clients)]
                ],
            }
        )
    return {
        **meta,
        "rows": rows,
        "in_process": ceilings,
        "targets": [{"target": w, "ratio": r, "met": m} for w, r, m in checks(summaries)],
    }


__all__ = ["BASELINE", "Summary", "checks", "markdown", "other_cores", "record", "summarize"]
