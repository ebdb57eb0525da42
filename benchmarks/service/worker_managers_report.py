"""The worker-manager benchmark's results page: speed per manager, then each behaviour."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.peers.report import versions as installed
from benchmarks.service.managers import GRACE_S, MANAGERS, TITLES

ORPHAN_WAIT_S = 30.0


def fmt_s(x: float | None) -> str:
    return "never" if x is None else f"{x:.1f} s"


def behaviour_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    """(behaviour, what one manager did) in the order of the table."""
    m, d, kills = r["metrics"], r["drain"], r["kills"]
    rec = [k["recovered_s"] for k in kills]
    after = [k["throughput_after"] / k["throughput_before"] for k in kills if k["throughput_after"]]
    orphan = r["orphans"]
    fail = r["startup_failure"]
    exit_ok = d["exit_status"] == 0 and d["exit_s"] <= GRACE_S
    return [
        (
            "start: both workers serving after",
            " / ".join(fmt_s(s["ready_s"]) for s in r["speed"]),
        ),
        ("header guard (20 kB of headers)", r["header_limit"]),
        (
            "`/metrics` from any worker counts all",
            f"{'yes' if m['aggregates'] else 'no'}: {sorted(set(m['counted_per_scrape']))} "
            f"of {m['sent']} on {len(m['counted_per_scrape'])} scrapes",
        ),
        (
            "SIGKILLed worker: a replacement serves after",
            " / ".join(fmt_s(x) for x in rec)
            + (f" (median {statistics.median(rec):.1f} s)" if None not in rec else ""),
        ),
        (
            "SIGKILLed worker: failed requests (32 clients)",
            " / ".join(str(k["failed_requests"]) for k in kills),
        ),
        (
            "SIGKILLed worker: throughput after recovery vs before",
            " / ".join(f"{x:.0%}" for x in after) or "-",
        ),
        (
            "SIGKILLed worker: idle `requests_in_flight` after",
            " / ".join(f"{k['idle_in_flight_after']:g}" for k in kills)
            + (" (stale)" if any(k["idle_in_flight_after"] for k in kills) else ""),
        ),
        (
            "SIGTERM: admitted requests answered",
            f"{d['answered']} of {d['burst']} ({d['in_flight_at_signal']:g} in flight)",
        ),
        ("SIGTERM: new requests until exit (every 0.25 s)", d["new_requests"]),
        ("SIGTERM: `/readyz` until exit", d["readyz"]),
        (
            "SIGTERM: exit status, time",
            f"{d['exit_status']} after {d['exit_s']:.1f} s"
            + ("" if exit_ok else " (not within the grace)")
            + (f", {d['workers_left']} workers left" if d["workers_left"] else ""),
        ),
        (
            "start-up failure: exit status, time",
            "still running at 120 s"
            if fail["exit_status"] is None
            else f"{fail['exit_status']} after {fail['exit_s']:.1f} s",
        ),
        (
            "manager SIGKILLed: its workers",
            f"exit after {orphan['workers_exited_s']:.1f} s"
            if orphan["workers_exited_s"] is not None
            else f"{orphan['workers_left']} still running after {ORPHAN_WAIT_S:g} s; "
            f"the port answers: {orphan['port_answers']}",
        ),
    ]


def report(args: argparse.Namespace, results: dict[str, Any], host: dict[str, str]) -> str:
    names = list(results)
    base = "ours" if "ours" in results else names[0]
    base_rate = statistics.median(r["throughput"] for r in results[base]["speed"])
    lines = [
        "# Worker managers: our supervisor, gunicorn with uvicorn workers, uvicorn --workers (CPU)",
        "",
        f"`.venv/bin/python -m benchmarks.service.worker_managers --rounds {args.rounds} "
        f"--seconds {args.seconds:g} --clients {args.clients}`",
        "",
        f"Host: {host['cpu']}, {host['cores']} cores; load average {host['load_start']} at the "
        f"start, {host['load_end']} at the end. {host['versions']}.",
        "",
        f"Two workers each, all-MiniLM-L6-v2 on CPU, one torch thread per worker, the same "
        f"uvicorn settings and header guard, prometheus-client multiprocess mode. Speed: "
        f"{args.clients} closed-loop keep-alive clients, one short text (8-24 words) per "
        f"`/encode`, {args.warmup:g} s warm-up then {args.seconds:g} s; median of "
        f"{args.rounds} rounds (the managers alternate within each round). Connections per "
        "worker: how the clients' keep-alive connections were split, mid-window; a worker with "
        "fewer runs smaller batches (mean batch: requests per batch), which cost more per "
        "request on CPU.",
        "",
        f"| manager | req/s | vs {base} | p50 ms | p99 ms | errors | req/s per round | "
        "connections per worker | mean batch | load avg at round start |",
        "|---|---:|---:|---:|---:|---:|---|---|---|---|",
    ]
    for name in names:
        speed = results[name]["speed"]
        median = statistics.median(s["throughput"] for s in speed)
        lines.append(
            f"| {TITLES[name]} | {median:.0f} | {median / base_rate - 1:+.0%} | "
            f"{statistics.median(s['p50_ms'] for s in speed):.1f} | "
            f"{statistics.median(s['p99_ms'] for s in speed):.1f} | "
            f"{sum(s['errors'] for s in speed)} | "
            + " / ".join(f"{s['throughput']:.0f}" for s in speed)
            + " | "
            + " / ".join(":".join(map(str, s["connections"])) for s in speed)
            + " | "
            + " / ".join(f"{s['mean_batch']:.1f}" for s in speed)
            + " | "
            + " / ".join(f"{s['load_avg']:.2f}" for s in speed)
            + " |"
        )
    rows = {name: behaviour_rows(results[name]) for name in names}
    lines += [
        "",
        "Behaviours (`tests/service/test_workers.py` checks each of ours); values per round "
        "joined by /:",
        "",
        "| behaviour | " + " | ".join(TITLES[n] for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for i, (label, _) in enumerate(rows[names[0]]):
        lines.append(f"| {label} | " + " | ".join(rows[n][i][1] for n in names) + " |")
    lines += [
        "",
        "Commands (the port is chosen at run time), each with `ATTNSERVE_MODELS=all-MiniLM-L6-v2 "
        "ATTNSERVE_DEVICE=cpu ATTNSERVE_TORCH_THREADS=1 OMP_NUM_THREADS=1` in its environment, "
        "and for gunicorn and uvicorn a fresh `PROMETHEUS_MULTIPROC_DIR`:",
        "",
    ]
    for n in names:
        command = MANAGERS[n].command(8000)
        lines.append(f"- {TITLES[n]}: `{' '.join([Path(command[0]).name, *command[1:]])}`")
    return "\n".join(lines) + "\n"


def versions() -> str:
    """The managers' and torch's versions in this environment ("-" where missing)."""
    packages = ("gunicorn", "uvicorn", "prometheus-client", "torch")
    return ", ".join(f"{p} {v}" for p, v in installed(Path(sys.executable), packages).items())
