"""The embedding task of :mod:`.run`: one short text per request (the servers of
:data:`.servers.PEERS`), each answer within cosine 0.9999 of attnserve's embedding, in-process
rows compared with attnserve's encoder at the same batch size, the targets of issue 37.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness.report import table
from benchmarks.peers import report
from benchmarks.peers.model_folder import peer_folder
from benchmarks.peers.report import ratio_of, x_cell
from benchmarks.peers.servers import PEERS, PeerServer, in_process
from benchmarks.service.workloads import short_texts

MIN_COSINE = 0.9999
TEXTS = 512


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


# The in-process rows after attnserve's: (implementation, label); both run with the peers'
# interpreter, the one LitServe and the naive server use.
REFERENCES = (
    ("sentence-transformers", "sentence-transformers encode"),
    ("onnxruntime", "ONNX Runtime, optimized graph, float32"),
)


def measure_ceilings(
    texts: list[str], args: argparse.Namespace, folder: Path
) -> tuple[list[dict[str, Any]], list[float]]:
    """The in-process rows (one per implementation and batch size) and attnserve's embedding
    of ``texts[0]`` (the reference every server's answer is checked against).

    Raises:
        SystemExit: another implementation's embeddings from ``folder`` differ from attnserve's.
    """
    results = []
    options = ["--batches", *map(str, args.batches)]
    inputs = ("--texts", texts[:256])
    ours = in_process("attnserve", Path(sys.executable), args, *options, inputs=inputs)
    results.append(({**ours, "cosine": 1.0}, "attnserve SentenceEncoder.encode (flash)"))
    print(f"  in-process attnserve: {ours['rows']}", flush=True)
    if args.peers_python.is_file():
        for impl, label in REFERENCES:
            other = in_process(impl, args.peers_python, args, *options, "--folder", str(folder),
                               inputs=inputs)  # fmt: skip
            worst = min(cosine(a, b) for a, b in zip(ours["guard"], other["guard"], strict=True))
            print(f"  in-process {impl}: {other['rows']}; cosine >= {worst:.6f}", flush=True)
            if worst < MIN_COSINE:
                raise SystemExit(
                    f"{impl} from {folder} and attnserve disagree (cosine {worst:.6f} < "
                    f"{MIN_COSINE}): it would not be the same model"
                )
            results.append(({**other, "cosine": worst}, label))
    rows = []
    for batch in args.batches:  # batch-major: each batch's rows side by side
        for result, label in results:
            row = next(r for r in result["rows"] if r["batch"] == batch)
            keys = ("fused", "opset", "versions", "spinning")
            extra = {k: result[k] for k in keys if k in result}
            rows.append(
                {
                    **row,
                    **extra,
                    "impl": result["impl"],
                    "label": label,
                    "threads": result["threads"],
                    "cosine": result["cosine"],
                    "texts": result["texts"],
                    "repeats": args.repeats,
                }
            )
    return rows, ours["guard"][0]


def _vs_attnserve(ceilings: list[dict[str, Any]], row: dict[str, Any]) -> float:
    ours = next(
        (c for c in ceilings if c["impl"] == "attnserve" and c["batch"] == row["batch"]), None
    )
    return ratio_of(row["texts_per_s"], ours["texts_per_s"]) if ours else float("nan")


def checks(
    summaries: list[report.Summary], ceilings: list[dict[str, Any]] | None = None
) -> list[tuple[str, float, bool]]:
    """The targets of issue 37 (items 4 and 3): (what, measured ratio, met) for those whose
    rows ran."""
    by = {(s.server, s.clients): s for s in summaries}
    out = []
    busy = max((s.clients for s in summaries), default=0)
    if ("attnserve", busy) in by and (report.BASELINE, busy) in by:
        a, lit = by[("attnserve", busy)], by[(report.BASELINE, busy)]
        ratio = ratio_of(a.rps, lit.rps)
        out.append((f"attnserve req/s >= 1.5x LitServe's at {busy} clients", ratio, ratio >= 1.5))
        ratio = ratio_of(a.p99_ms, lit.p99_ms)
        out.append((f"attnserve p99 <= LitServe's at {busy} clients", ratio, ratio <= 1.0))
    if ("attnserve", 1) in by and (report.BASELINE, 1) in by:
        ratio = ratio_of(by[("attnserve", 1)].p50_ms, by[(report.BASELINE, 1)].p50_ms)
        out.append(("attnserve p50 <= 0.5x LitServe's at 1 client", ratio, ratio <= 0.5))
    if ("attnserve", 1) in by and ("naive", 1) in by:
        ratio = ratio_of(by[("attnserve", 1)].p50_ms, by[("naive", 1)].p50_ms)
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


def _errors(s: report.Summary) -> str:
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
    summaries: list[report.Summary],
    ceilings: list[dict[str, Any]],
    loads: report.Loads,
) -> str:
    """The page: machine and versions, the servers, the in-process rows, the targets."""
    servers = [
        [name, info["config"],
         f"{info.get('venv', '-')}: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()),
         "/".join(f"{s:.0f}" for s in info["startup_s"]), f"{min(info['cosine']):.6f}",
         " / ".join(map(report.stop_cell, info.get("stops", [])))]
        for name, info in meta["server_info"].items()
    ]  # fmt: skip
    runs = []
    for s in summaries:
        base = report.baseline_of(summaries, s.clients)
        ratios = (
            (
                x_cell(ratio_of(s.p50_ms, base.p50_ms)),
                x_cell(ratio_of(s.p99_ms, base.p99_ms)),
            )
            if base
            else ()
        )
        runs.append(
            [s.server, s.clients, " / ".join(f"{r:.1f}" for r in s.rps_rounds), f"{s.rps:.1f}",
             report.vs_baseline(s, summaries), f"{s.p50_ms:.1f} / {s.p95_ms:.1f} / {s.p99_ms:.1f}",
             ", ".join(ratios) or "-", _errors(s), f"{s.server_cpu_ms_per_request:.2f}",
             f"{s.driver_cpu_ms_per_request:.2f}", f"{s.other_cores:.2f}",
             report.loads_cell(loads[(s.server, s.clients)])]
        )  # fmt: skip
    in_process = [
        [c["label"], c["batch"], f"{c['texts_per_s']:.1f}", x_cell(_vs_attnserve(ceilings, c)),
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
        rows = [[what, x_cell(ratio), "yes" if met else "no"] for what, ratio, met in targets]
        lines += ["", table(["target", "measured", "met"], rows, "lr")]
    return "\n".join(lines) + "\n"


def record(
    meta: dict[str, Any],
    summaries: list[report.Summary],
    ceilings: list[dict[str, Any]],
    rounds: report.Rounds,
    loads: report.Loads,
) -> dict[str, Any]:
    """Everything in the page, plus each round's own percentiles, as JSON-ready data."""
    rows = []
    for s in summaries:
        base = report.baseline_of(summaries, s.clients)
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
                "rps_vs_litserve": ratio_of(s.rps, base.rps) if base else None,
                "p50_vs_litserve": ratio_of(s.p50_ms, base.p50_ms) if base else None,
                "p99_vs_litserve": ratio_of(s.p99_ms, base.p99_ms) if base else None,
                "rounds": [
                    {
                        "rps": r.throughput,
                        "p50_ms": r.pct(50),
                        "p95_ms": r.pct(95),
                        "p99_ms": r.pct(99),
                        "errors": dict(r.errors),
                        "cpu_s": r.cpu_s,
                        "other_cores": report.other_cores(r),
                        "load_before_after": list(load),
                    }
                    for r, load in zip(
                        rounds[(s.server, s.clients)], loads[(s.server, s.clients)], strict=True
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


def options(parser: argparse.ArgumentParser) -> None:
    """``--batches``, the in-process batch sizes."""
    parser.add_argument(
        "--batches", type=int, nargs="+", default=[32, 1], help="in-process batch sizes"
    )


def prepare(args: argparse.Namespace) -> report.Workload:
    """The texts, the in-process rows, and the check that a server answers attnserve's
    embedding of the first text."""
    folder = peer_folder()
    texts = short_texts(args.texts)
    print(f"in-process reference rows (batches {args.batches}) ...", flush=True)
    ceilings, reference = measure_ceilings(texts, args, folder)

    def same_model(server: PeerServer, answer: Any) -> float:
        similarity = cosine(server.peer.embedding(answer), reference)
        if similarity < MIN_COSINE:
            raise SystemExit(
                f"{server.name} answers a different embedding (cosine {similarity:.6f})"
            )
        return similarity

    return report.Workload(folder, texts, ceilings, same_model, {"texts": args.texts})


TASK = report.Task(
    PEERS, "peers",
    {"clients": [1, 32], "seconds": 10.0, "warmup": 2.0, "name": "peers-cpu", "texts": TEXTS},
    {"batches": [4], "texts": 16}, options, prepare, "cosine", markdown, record,
)  # fmt: skip
