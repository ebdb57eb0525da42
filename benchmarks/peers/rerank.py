"""The rerank task of :mod:`.run`: attnserve's ``/v1/rerank`` beside infinity-emb's ``/rerank``
and a LitServe ``CrossEncoder`` app, and its page.

One query and :data:`DOCS` documents per request: documents are the shipped standard-library
docstrings of 40-120 words, queries the first lines of shorter docstrings, and only documents
whose pair with the longest query fits the folder's 256 tokens are used, so no server truncates
and none has to agree with another on how. The model is
:func:`benchmarks.text.rerank_speed.build_cross_encoder`'s (all-MiniLM-L6-v2's encoder under a
seeded one-logit head, saved by ``CrossEncoder.save``: ms-marco-MiniLM-L-6-v2's shape, no
download), built once into ``<attnserve cache>/peers/minilm-cross-encoder`` like
:mod:`.model_folder`; every server loads that folder by path. In-process rows first, each in its own process
(:mod:`.inprocess`): sentence-transformers' ``CrossEncoder.predict``, whose scores are the
reference, and attnserve's ``TextClassifier``, per request and in passes of 32 pairs. Each server
must score the first :data:`GUARD` requests within ``--tolerance`` of the reference before it is
timed. Without the peers' interpreter (``--smoke``) attnserve is checked against its own
in-process scores.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.load import HOST, call_once
from benchmarks.harness.report import table
from benchmarks.peers import report
from benchmarks.peers.model_folder import peers_root
from benchmarks.peers.servers import (
    Peer,
    PeerServer,
    attnserve_serve,
    in_process,
    infinity_v2,
    peers_app,
)
from models.text.folders.packaged import build_folder

# ----------------------------------------------------------------------------- the workload

NAME = "minilm-cross-encoder"
DOCS = 16  # documents per request
REQUESTS = 64  # distinct requests the clients cycle through
SEED = 0
MAX_TOKENS = 256
BATCH = 32  # pairs per forward pass, every server
GUARD = 8  # requests whose scores each server must get right before it is timed


@dataclass(frozen=True)
class RerankRequest:
    query: str
    documents: list[str]


def rerank_folder(root: Path | None = None) -> Path:
    """The cross-encoder folder every server loads (built on first use; project venv only)."""
    from benchmarks.text.rerank_speed import build_cross_encoder

    return build_folder(
        (root or peers_root()) / NAME,
        f"build_cross_encoder seed {SEED}",
        lambda tree: build_cross_encoder(tree, SEED),
    )


def rerank_requests(folder: Path, count: int = REQUESTS, docs: int = DOCS) -> list[RerankRequest]:
    """``count`` requests of one query and ``docs`` documents each, deterministic."""
    from transformers import AutoTokenizer

    from models.text.quality.corpus import stdlib_docstrings

    texts = stdlib_docstrings()
    queries = [t.splitlines()[0][:120] for t in texts if 4 <= len(t.split()) < 20]
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    longest_query = max(len(tokenizer(q)["input_ids"]) for q in queries[:count])
    budget = MAX_TOKENS - longest_query  # the document's share of the pair's tokens
    documents = [
        t for t in texts if 40 <= len(t.split()) <= 120 and len(tokenizer(t)["input_ids"]) <= budget
    ]
    return [
        RerankRequest(queries[k], [documents[(k * docs + j) % len(documents)] for j in range(docs)])
        for k in range(count)
    ]


NOTES = (
    "Notes. infinity-emb returns the model's raw logits through a sigmoid of its own "
    "(`raw_scores: false`), whatever activation the folder saved; this folder saves Sigmoid, so "
    "its scores match `CrossEncoder.predict`. The in-process rows run once, before the rounds, "
    "not alternated with the servers: their CPU ms per request is the steadier figure to set "
    "beside the servers'. The tokenizer's warning about sequences over 256 tokens during set-up "
    "comes from filtering the documents; none of those is sent."
)


# ----------------------------------------------------------------------------- the servers


def _cohere(r: RerankRequest) -> dict[str, Any]:
    return {"model": NAME, "query": r.query, "documents": r.documents, "return_documents": False}


_ST = ("sentence-transformers", "transformers", "torch")


def _litserve(name: str, requests_per_batch: int, config: str) -> Peer:
    """The LitServe ``CrossEncoder`` app collecting up to ``requests_per_batch`` requests."""
    options = ("--task", "rerank", "--max-batch-size", str(requests_per_batch))
    return Peer(
        name, "/predict", lambda r: {"query": r.query, "documents": r.documents},
        peers_app("litserve_app", *options), "peers", ("litserve", *_ST, "fastapi", "uvicorn"),
        config,
    )  # fmt: skip


PEERS: dict[str, Peer] = {
    "attnserve": Peer(
        "attnserve", "/v1/rerank", _cohere, attnserve_serve(), "attnserve",
        ("attnserve", "torch", "fastapi", "uvicorn"),
        f"attnserve serve --models FOLDER --max-batch-size {BATCH} (pairs), max wait 5 ms, "
        "attention flash (its defaults)",
    ),
    "infinity": Peer(
        "infinity", "/rerank", _cohere, infinity_v2(NAME), "infinity",
        ("infinity-emb", *_ST, "fastapi", "uvicorn"),
        f"infinity_emb v2 --engine torch --device cpu --batch-size {BATCH} (pairs), no disk cache",
    ),
    "litserve": _litserve(
        "litserve", 32,
        "LitAPI max_batch_size=32 (requests), batch_timeout=0.01, CrossEncoder.predict of all "
        f"their pairs, batch_size={BATCH}; one worker, cpu, fast_queue off",
    ),
    "litserve-1": _litserve(
        "litserve-1", 1,
        "LitAPI max_batch_size=1: CrossEncoder.predict of one request's pairs per call; "
        "one worker, cpu, fast_queue off",
    ),
}  # fmt: skip


def scores_in_order(answer: Any, count: int) -> list[float]:
    """The scores of a Cohere-shaped answer (``results`` best first), back in request order."""
    out = [math.nan] * count
    for item in answer["results"]:
        out[int(item["index"])] = float(item["relevance_score"])
    return out


def scores(server: PeerServer, r: RerankRequest) -> list[float]:
    """``server``'s scores of ``r``, in request order."""
    status, body = call_once(HOST, server.port, server.request(r), timeout=60.0)
    if not 200 <= status < 300:
        raise RuntimeError(f"{server.name} answered {status}: {body[:300]!r}")
    return scores_in_order(json.loads(body), len(r.documents))


# ----------------------------------------------------------------------------- the run


def worst_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def scored_alike(
    requests: list[RerankRequest], reference: list[list[float]], tolerance: float
) -> Callable[[PeerServer, Any], float]:
    """The check of a server's turn: its scores of the first :data:`GUARD` requests within
    ``tolerance`` of ``reference``; their worst difference."""

    def check(server: PeerServer, answer: Any) -> float:
        worst = worst_diff([scores(server, r) for r in requests[:GUARD]], reference[:GUARD])
        if not worst <= tolerance:
            raise SystemExit(
                f"{server.name}'s scores differ from CrossEncoder.predict's by {worst:.2e}"
            )
        return worst

    return check


# ----------------------------------------------------------------------------- the page


SERVERS = (
    "server | clients | req/s (rounds) | docs/s | × LitServe | p50 ms | p95 ms | p99 ms | "
    "server CPU ms/req | driver CPU ms/req | other load | errors | load 1-min (rounds)"
)
IN_PROCESS = (
    "implementation | shape | req/s | pairs/s | × CrossEncoder.predict | CPU ms/req | "
    "max abs score diff"
)
CONFIGS = (
    "server | config | venv | versions | start-up s | "
    f"max abs score diff ({GUARD} requests) | how it stopped"
)


def _f(x: float, digits: int = 1) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def markdown(meta: dict[str, Any], summaries: list[report.Summary], inproc: list[dict[str, Any]],
             loads: dict[tuple[str, int], list[tuple[str, str]]]) -> str:  # fmt: skip
    """The results page: the servers, the in-process rows, each server's configuration."""
    servers = [
        [s.server, s.clients, f"{s.rps:.1f} ({', '.join(f'{x:.1f}' for x in s.rps_rounds)})",
         f"{s.rps * DOCS:.0f}", report.vs_baseline(s, summaries), _f(s.p50_ms), _f(s.p95_ms),
         _f(s.p99_ms), _f(s.server_cpu_ms_per_request), _f(s.driver_cpu_ms_per_request, 2),
         _f(s.other_cores, 2), ", ".join(f"{k}: {v}" for k, v in s.errors.items()) or "0",
         report.loads_cell(loads[(s.server, s.clients)])]
        for s in summaries
    ]  # fmt: skip
    ce = {r["shape"]: r for r in inproc if r["impl"] == "cross-encoder"}
    in_process = [
        [r["label"], r["shape"], f"{r['req_per_s']:.1f}", f"{r['pairs_per_s']:.0f}",
         f"{r['req_per_s'] / ce[r['shape']]['req_per_s'] if r['shape'] in ce else math.nan:.2f}x",
         f"{r['cpu_ms_per_request']:.1f}", r["diff"]]
        for r in inproc
    ]  # fmt: skip
    configs = [
        [name, info["config"], info["venv"], ", ".join(f"{k} {v}" for k, v in info["versions"].items()),
         ", ".join(f"{x:.1f}" for x in info["startup_s"]), f"{max(info['diff']):.1e}",
         "; ".join(f"{s['processes']} proc, {report.stop_cell(s, ', ')}" for s in info["stops"])]
        for name, info in meta["server_info"].items()
    ]  # fmt: skip
    return "\n".join([
        f"# Rerank peers on the CPU: one query, {DOCS} documents per request",
        "",
        "```bash",
        meta["command"],
        "```",
        "",
        f"{meta['date']} · {meta['cpu_model']} · {meta['usable_cpus']} usable CPUs · "
        f"{meta['threads']} torch threads per server · OMP_WAIT_POLICY={meta['omp_wait_policy']} · "
        f"load average before {meta['load_before']}, after {meta['load_after']}",
        "",
        f"Model: `{NAME}`, all-MiniLM-L6-v2's encoder under a seeded one-logit head, saved by "
        "`CrossEncoder.save` (`benchmarks/text/rerank_speed.py::build_cross_encoder`); every server "
        f"loads that folder. {REQUESTS} distinct requests, each a docstring first line as query "
        f"and {DOCS} stdlib docstrings of 40-120 words (every pair under 256 tokens: nobody "
        f"truncates). {meta['seconds']:g} s measured after {meta['warmup_s']:g} s warm-up per "
        f"client count, {meta['rounds']} rounds, servers alternating "
        f"({', '.join(meta['servers'])}, ...), each process tree ended and checked gone before "
        "the next starts. req/s: median of rounds; latency percentiles pool the rounds. "
        "*other load*: cores busy with anything but the server and the driver during the "
        "window. The machine is shared: read ratios, not absolutes.",
        "",
        "## Servers",
        "",
        table(SERVERS.split(" | "), servers, "lrlrrrrrrrr"),
        "",
        f"## In process (no HTTP; tokenization included; {meta['inprocess_requests']} requests, "
        f"best of {meta['repeats']} passes)",
        "",
        table(IN_PROCESS.split(" | "), in_process, "llrrrrr"),
        "",
        "## Configurations",
        "",
        table(CONFIGS.split(" | "), configs),
        "",
        *meta["notes"],
        "",
    ])  # fmt: skip


# ----------------------------------------------------------------------------- the task


def _at_least_guard(value: str) -> int:
    count = int(value)
    if count < GUARD:  # the served scores are checked against these
        raise argparse.ArgumentTypeError(
            f"must be at least {GUARD} (the requests every server must score like "
            "CrossEncoder.predict before it is timed)"
        )
    return count


def options(parser: argparse.ArgumentParser) -> None:
    """``--inprocess-requests`` and ``--tolerance``."""
    parser.add_argument("--inprocess-requests", type=_at_least_guard, default=16,
                        help="requests the in-process rows time")  # fmt: skip
    parser.add_argument("--tolerance", type=float, default=1e-3, help="max |score diff| allowed")


def prepare(args: argparse.Namespace) -> report.Workload:
    """The requests, the in-process rows (``CrossEncoder.predict``'s scores the reference, or
    attnserve's own without the peers' interpreter), and the check of a server's scores."""
    folder = rerank_folder()
    requests = rerank_requests(folder)
    timed = [[r.query, r.documents] for r in requests[: args.inprocess_requests]]
    options, inputs = ["--folder", str(folder)], ("--requests", timed)
    ours = in_process("attnserve-rerank", Path(sys.executable), args, *options, inputs=inputs)
    ref = ours
    if args.peers_python.is_file():
        ref = in_process("cross-encoder", args.peers_python, args, *options, inputs=inputs)
    else:
        print("smoke: no peers interpreter; attnserve's own scores are the reference")
    reference: list[list[float]] = ref["scores"]
    ours_diff = worst_diff(ours["scores"], reference)
    print(f"  in-process CrossEncoder {ref['rows']}\n"
          f"  in-process attnserve {ours['rows']} |d| {ours_diff:.1e}")  # fmt: skip
    if not ours_diff <= args.tolerance:
        raise SystemExit(
            f"attnserve's TextClassifier differs from CrossEncoder.predict by {ours_diff:.2e}"
        )
    inproc = [
        {**row, "impl": result["impl"], "label": label, "diff": diff}
        for result, label, diff in (
            (ref, "sentence-transformers CrossEncoder.predict", "reference"),
            (ours, "attnserve TextClassifier (flash)", f"{ours_diff:.1e}"),
        )
        for row in result["rows"]
    ]
    notes = [
        f"After the run no process on this machine held `{folder.name}` in its command line "
        "(psutil scan), besides each server's own check when it stopped.",
        "",
        NOTES,
    ]
    meta = {"inprocess_requests": args.inprocess_requests, "notes": notes}
    return report.Workload(
        folder, requests, inproc, scored_alike(requests, reference, args.tolerance), meta
    )


def record(
    meta: dict[str, Any], summaries: list[report.Summary], inproc: list[dict[str, Any]],
    rounds: report.Rounds, loads: report.Loads,
) -> dict[str, Any]:  # fmt: skip
    """The page's data as JSON, with each run's req/s per round and their spread."""
    return {
        **meta,
        "inprocess": inproc,
        "loads": {f"{n} x{c}": v for (n, c), v in loads.items()},
        "summaries": [{**asdict(s), "rps": s.rps, "docs_per_s": s.rps * DOCS} for s in summaries],
        "rounds_rps": {f"{s.server} x{s.clients}": s.rps_rounds for s in summaries},
        "median_rps_spread": {
            f"{s.server} x{s.clients}": (max(s.rps_rounds) - min(s.rps_rounds))
            / statistics.median(s.rps_rounds)
            for s in summaries
            if s.rps_rounds and statistics.median(s.rps_rounds)
        },
    }


TASK = report.Task(
    PEERS, "rerank",
    {"clients": [1, 8], "seconds": 12.0, "warmup": 4.0, "name": "peers-rerank-cpu"},
    {"inprocess_requests": GUARD}, options, prepare, "diff", markdown, record,
)  # fmt: skip
