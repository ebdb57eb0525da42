"""No request can hurt the server: issue 50's attacks against one server, each beside its
target, in one results file.

    .venv/bin/python -m benchmarks.service.attacks [--seconds 30] [--workers 0] [--threads 0]

One ``attnserve serve`` (all-MiniLM-L6-v2 and two context-2,048 Informers, default limits and,
unless ``--workers`` / ``--threads`` say otherwise, the default processes: one per CPU with one
torch thread each) meets, one after another:

1. **memory** (:mod:`benchmarks.service.attacks_memory`): 16 clients of ``POST /encode`` with a
   1 MB Japanese text in windows, every answer a 422, for ``--seconds``; then ``--seconds`` idle.
   Target: peak resident memory ≤ baseline + 1 GB, and ≤ baseline + 200 MB at the end of the
   idle time, with no request meanwhile.
2. **slow sockets** (:mod:`benchmarks.service.attacks_slow_sockets`): 2,000 sockets sending a
   request a byte at a time, spread over loopback addresses, then from one address. Target:
   every ``/healthz`` and one-text ``/encode`` from a fresh connection answered 200 meanwhile.
3. **scripts** (:mod:`benchmarks.service.attacks_scripts`): 2 MB texts of CJK, Thai, newline-,
   tab-, NBSP- and comma-separated words and one word. Target: ``truncate: true`` answered in
   ≤ 0.4 s; a windows request over the compute budget refused in ≤ 0.1 s.
4. **probes** (:mod:`benchmarks.service.attacks_probes`): ``/healthz`` beside 16 clients of (1)'s
   request and beside 4 token listings of 10 × 2,000 words. Target: p99 ≤ 100 ms, max ≤ 250 ms.
5. **cross-model** (same module): a 1-series forecast on one Informer beside the largest legal
   ``performer`` forecast looping on the other. Target: its p50 ≤ 100 ms above its own alone.

The load generators run on the same host (their CPU is the server's loss). ``--smoke``: a few
seconds each, small sizes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.harness import cli
from benchmarks.harness.host import cpu_model, load_average
from benchmarks.harness.process import TEXT_MODEL, attnserve, neighbour
from benchmarks.harness.report import RESULTS, Report
from benchmarks.service.attacks_memory import CJK_WINDOWS, flood_memory
from benchmarks.service.attacks_probes import BIG_MODEL, SMALL_MODEL, cross_model, probe_latency
from benchmarks.service.attacks_scripts import TARGET_BYTES, script_costs
from benchmarks.service.attacks_slow_sockets import slow_sockets

OUT = RESULTS / "attacks-cpu.md"


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def memory_rows(seen: dict[str, Any]) -> list[list[object]]:
    base, peak, after = seen["baseline_mb"], seen["peak_mb"], seen["after_settle_mb"]
    answers = ", ".join(f"{n}× {s}" for s, n in sorted(seen["answers"].items()))
    note = f"baseline {base:.0f} MB; {answers}; median answer {seen['median_ms']} ms"
    return [
        ["memory: peak above baseline", "≤ 1,024 MB", f"{peak - base:+.0f} MB", note,
         verdict(peak - base <= 1024)],
        [f"memory: {seen['settle_s']:g} s after the last request", "≤ 200 MB above",
         f"{after - base:+.0f} MB", f"{after:.0f} MB resident", verdict(after - base <= 200)],
    ]  # fmt: skip


def socket_rows(seen: dict[str, Any]) -> list[list[object]]:
    rows: list[list[object]] = []
    for run in ("spread", "one_address"):
        r = seen[run]
        for probe in ("healthz", "encode"):
            p = r[probe]
            rows.append([
                f"{r['sockets']} slow sockets from {r['sources']} address(es): {probe}",
                "every probe 200", f"{p['answered']} answered, {p['errors']} errors",
                f"p50 {p['p50_ms']:.1f} / p99 {p['p99_ms']:.1f} / max {p['max_ms']:.1f} ms; "
                f"{r['dropped_by_server']} sockets dropped by the server",
                verdict(p["errors"] == 0 and p["answered"] > 0),
            ])  # fmt: skip
    return rows


def script_rows(rows: list[dict[str, Any]]) -> list[list[object]]:
    out: list[list[object]] = []
    for r in rows:
        out.append([f"2 MB {r['script']}, truncate", "≤ 0.4 s", f"{r['truncate_s']:.3f} s",
                    f"status {r['truncate_status']}", verdict(r["truncate_s"] <= 0.4)])  # fmt: skip
        refused = r["windows_status"] == [422]
        out.append([
            f"2 MB {r['script']}, windows",
            "refused ≤ 0.1 s" if refused else "(under the budget: served)",
            f"{r['windows_s']:.3f} s", f"status {r['windows_status']}",
            verdict(r["windows_s"] <= 0.1) if refused else "n/a",
        ])  # fmt: skip
    return out


def probe_rows(seen: dict[str, Any]) -> list[list[object]]:
    answers = ", ".join(f"{k}: {v}" for k, v in sorted(seen["load_answers"].items()))
    ok = seen["p99_ms"] <= 100 and seen["max_ms"] <= 250
    return [[
        f"`/healthz` beside {seen['clients']} × {seen['load']}", "p99 ≤ 100, max ≤ 250 ms",
        f"p99 {seen['p99_ms']:.1f} / max {seen['max_ms']:.1f} ms",
        f"p50 {seen['p50_ms']:.1f} ms, {seen['n']} probes; load answers {answers}", verdict(ok),
    ]]  # fmt: skip


def cross_rows(seen: dict[str, Any]) -> list[list[object]]:
    alone, beside = seen["small_alone"]["p50_ms"], seen["small_beside"]["p50_ms"]
    return [[
        f"1-series forecast on {SMALL_MODEL} beside 32 × 2,048 performer on {BIG_MODEL}",
        "p50 ≤ alone + 100 ms", f"{beside:.1f} ms (alone {alone:.1f})",
        f"p99 {seen['small_beside']['p99_ms']:.1f} ms; large one alone "
        f"{seen['big_alone_ms']:.0f} ms, its answers {seen['big_answers']}",
        verdict(beside - alone <= 100),
    ]]  # fmt: skip


COLUMNS = ["attack", "target", "measured", "detail", "verdict"]


def attack(server: Any, args: Any, rows: list[list[object]], data: dict[str, Any]) -> None:
    """The five attacks in turn against ``server``, their rows and figures into ``rows`` and
    ``data``."""
    data["memory"] = flood_memory(server, CJK_WINDOWS, 16, args.seconds, args.seconds)
    rows += memory_rows(data["memory"])
    print(rows[-2:], flush=True)
    data["slow_sockets"] = slow_sockets(server.url, args.sockets, args.seconds)
    rows += socket_rows(data["slow_sockets"])
    print(rows[-4:], flush=True)
    data["scripts"] = script_costs(server.url, args.repeats, args.bytes)
    rows += script_rows(data["scripts"])
    data["probes"] = [
        probe_latency(server.url, "cjk-windows", 16, args.seconds),
        probe_latency(server.url, "token-listing", 4, args.seconds),
    ]
    for seen in data["probes"]:
        rows += probe_rows(seen)
    data["cross_model"] = cross_model(server.url, args.seconds, args.big_series)
    rows += cross_rows(data["cross_model"])


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__, cli.seconds(30.0, "seconds per flood and per idle wait"), cli.out(OUT))
    p.add_argument("--workers", type=int, default=0, help="server processes (0: auto)")
    p.add_argument("--threads", type=int, default=0, help="torch threads per process (0: auto)")
    p.add_argument("--sockets", type=int, default=2000, help="slow sockets")
    p.add_argument("--repeats", type=int, default=3, help="requests per script and mode")
    p.add_argument("--bytes", type=int, default=TARGET_BYTES, help="size of each script's text")
    p.add_argument("--big-series", type=int, default=32, help="series of the large forecast")
    p.add_argument(
        "--neighbour", action="store_true", help="a process spinning one core the whole time"
    )
    p.add_argument("--log", type=Path, default=Path("/tmp/attacks.log"))
    args = cli.parse(p, argv, seconds=2.0, sockets=40, repeats=1, bytes=20_000, big_series=2)
    report = Report("benchmarks.service.attacks", argv)
    models = [TEXT_MODEL, BIG_MODEL, SMALL_MODEL]
    server = attnserve(models, args.threads, 32, args.log, workers=args.workers)
    rows: list[list[object]] = []
    data: dict[str, Any] = {}
    try:
        server.wait_ready()
        with neighbour(args.neighbour):
            attack(server, args, rows, data)
    finally:
        server.stop()
    beside = "; a neighbour process spinning one core throughout" if args.neighbour else ""
    report.add(
        f"CPU: {cpu_model()}; load average at the end {load_average()}; one `attnserve serve` "
        f"(--workers {args.workers} --torch-threads {args.threads}; 0: auto) with "
        f"{', '.join(models)}; resident memory is the sum over its processes; the load "
        f"generators on the same host{beside}."
    )
    report.table(COLUMNS, rows)
    report.write(args.out, "No request can hurt the server: the attacks of issue 50", data)


if __name__ == "__main__":
    main()
