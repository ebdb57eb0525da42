"""attnserve beside LitServe, infinity-emb and a naive FastAPI server, same weights, same driver.

    make bench-peers                   # installs both peer virtualenvs, then the full run below
    .venv/bin/python -m benchmarks.peers.run [--seconds 10] [--rounds 2] [--clients 1 32]
        [--threads 2] [--servers attnserve litserve infinity naive] [--batches 32 1]

1. Builds the sentence-transformers folder every peer loads (:mod:`.model_folder`).
2. In-process reference rows, one process after the other, at each of ``--batches``:
   attnserve's encoder, sentence-transformers' ``encode`` and ONNX Runtime on the same weights,
   exported and optimized (:mod:`.inprocess`, :mod:`.onnx_reference`); their embeddings must
   agree with attnserve's (cosine at least 0.9999) or the run stops.
3. ``--rounds`` rounds; in each, every server in turn (in ``--servers`` order, so drift over the
   run hits all alike): start it on a free port, wait until it answers a real request (whose
   embedding must match attnserve's, cosine at least 0.9999), then for each ``--clients`` count
   ``--warmup`` s of load and ``--seconds`` s measured (:mod:`.driver`), then stop it: SIGTERM,
   SIGKILL for what outlives a grace, and psutil must find none of its processes left before
   the next server starts (:meth:`.servers.ServerProcess.stop`; how each ended is recorded).
4. Writes ``<out-dir>/<name>.md`` and ``.json`` (:mod:`.report`).

attnserve runs from this interpreter's environment (the project's ``.venv``); LitServe, the
naive server and the reference rows other than attnserve's from ``--peers-python``
(``.venv-peers``: the newest releases); infinity-emb from ``--infinity-python``
(``.venv-peers-infinity``: its own pins, numpy<2, transformers<5). No peer runs at versions
pinned for another.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.host import cpu_model, load_average
from benchmarks.peers import report
from benchmarks.peers.driver import LoadResult, run_load
from benchmarks.peers.model_folder import peer_folder
from benchmarks.peers.servers import (
    HOST,
    PEERS,
    ROOT,
    Launch,
    ServerProcess,
    Stopped,
    default_infinity_python,
    default_peers_python,
    server_env,
    versions,
)

MIN_COSINE = 0.9999
TEXTS = 512


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine so far (all cores; idle, I/O wait and time stolen
    by a hypervisor left out)."""
    import psutil

    t = psutil.cpu_times()
    idle = t.idle + getattr(t, "iowait", 0.0) + getattr(t, "steal", 0.0)
    return sum(t) - idle - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def in_process(
    impl: str, python: Path, texts_file: Path, args: argparse.Namespace, folder: Path | None
) -> dict[str, Any]:
    """One :mod:`.inprocess` measurement (every batch size) in its own process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [
            str(python), "-m", "benchmarks.peers.inprocess", impl,
            "--texts", str(texts_file),
            "--out", str(out),
            "--threads", str(args.threads),
            "--repeats", str(args.repeats),
            "--batches", *map(str, args.batches),
        ]  # fmt: skip
        if folder is not None:
            command += ["--folder", str(folder)]
        env = server_env(args.threads, args.omp_wait_policy)
        subprocess.run(command, cwd=ROOT, env=env, check=True)
        return dict(json.loads(out.read_text()))


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
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts[:256]))
        ours = in_process("attnserve", Path(sys.executable), texts_file, args, None)
        results.append(({**ours, "cosine": 1.0}, "attnserve SentenceEncoder.encode (flash)"))
        print(f"  in-process attnserve: {ours['rows']}", flush=True)
        if args.peers_python.is_file():
            for impl, label in REFERENCES:
                other = in_process(impl, args.peers_python, texts_file, args, folder)
                worst = min(
                    cosine(a, b) for a, b in zip(ours["guard"], other["guard"], strict=True)
                )
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


@dataclass(frozen=True)
class Served:
    """One server's turn in a round."""

    startup_s: float  # from start to its first right answer
    cosine: float  # of that answer's embedding to attnserve's
    results: dict[int, LoadResult]  # by client count
    loads: dict[int, tuple[str, str]]  # load averages before / after each client count's run
    stopped: Stopped  # how its process tree ended


def serve_and_drive(
    name: str,
    args: argparse.Namespace,
    folder: Path,
    texts: list[str],
    reference: list[float],
    log_dir: Path,
    tag: str,
) -> Served:
    """Start server ``name``, check its answer, drive it at each client count, stop it and
    check that none of its processes is left."""
    peer = PEERS[name]
    launch = Launch.on_free_port(args, folder)
    started = time.monotonic()
    server = ServerProcess(peer, launch, log_dir / f"{name}-{tag}.log", args.omp_wait_policy)
    results: dict[int, LoadResult] = {}
    loads: dict[int, tuple[str, str]] = {}
    try:
        embedding = server.wait_answering(texts[0])
        startup = time.monotonic() - started
        similarity = cosine(embedding, reference)
        if similarity < MIN_COSINE:
            raise SystemExit(f"{name} answers a different embedding (cosine {similarity:.6f})")
        requests = [server.request(t) for t in texts]
        for clients in args.clients:
            load = load_average()
            probes = {"server": server.cpu_seconds, "machine": machine_cpu_seconds}
            result = run_load(
                HOST, launch.port, requests, clients, args.seconds, args.warmup, probes
            )
            results[clients] = result
            loads[clients] = (load, load_average())
            errors = f"  errors {dict(result.errors)}" if result.errors else ""
            print(
                f"  {tag} {name:>9} x{clients:<3} {result.throughput:7.1f} req/s  "
                f"p50 {result.pct(50):6.1f}  p99 {result.pct(99):6.1f} ms{errors}",
                flush=True,
            )
    finally:
        stopped = server.stop()
        outlived = f"; outlived SIGTERM: {stopped.outlived_term}" if stopped.outlived_term else ""
        print(
            f"  {tag} {name:>9} stopped: {stopped.processes} process(es), gone after "
            f"{stopped.signal} in {stopped.seconds:.1f} s{outlived}",
            flush=True,
        )
    return Served(startup, similarity, results, loads, stopped)


def _venv(python: Path) -> str:
    """The name of ``python``'s virtualenv."""
    return python.parent.parent.name


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds first")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 32])
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads per server (this machine's cores)"
    )
    parser.add_argument("--servers", nargs="+", default=list(PEERS), choices=list(PEERS))
    parser.add_argument(
        "--omp-wait-policy",
        choices=["passive", "active", "default"],
        default="passive",
        help="OMP_WAIT_POLICY for every server and in-process row (ONNX Runtime: spinning off "
        "for passive); default: libgomp's own",
    )
    parser.add_argument("--repeats", type=int, default=3, help="in-process passes (best kept)")
    parser.add_argument(
        "--batches", type=int, nargs="+", default=[32, 1], help="in-process batch sizes"
    )
    parser.add_argument(
        "--peers-python",
        type=Path,
        default=default_peers_python(),
        help="LitServe's and the naive server's interpreter (make peers-venv)",
    )
    parser.add_argument(
        "--infinity-python",
        type=Path,
        default=default_infinity_python(),
        help="infinity-emb's interpreter (make peers-venv)",
    )
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--name", default="peers-cpu", help="results file name, no suffix")
    parser.add_argument("--log-dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args(argv)
    pythons = {
        "attnserve": Path(sys.executable),
        "peers": args.peers_python,
        "infinity": args.infinity_python,
    }
    for name in args.servers:
        python = pythons[PEERS[name].interpreter]
        if not python.is_file():
            parser.error(f"{python} is missing ({name}): make peers-venv")
    command = "python -m benchmarks.peers.run " + shlex.join(sys.argv[1:] if argv is None else argv)

    from benchmarks.service import short_texts

    load_before = load_average()
    print(f"load average before: {load_before} ({os.cpu_count()} CPUs)", flush=True)
    folder = peer_folder()
    texts = short_texts(TEXTS)
    print(f"in-process reference rows (batches {args.batches}) ...", flush=True)
    ceilings, reference = measure_ceilings(texts, args, folder)

    rounds: dict[tuple[str, int], list[LoadResult]] = {}
    startup: dict[str, list[float]] = {name: [] for name in args.servers}
    similarity: dict[str, list[float]] = {name: [] for name in args.servers}
    stops: dict[str, list[Stopped]] = {name: [] for name in args.servers}
    loads: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for k in range(args.rounds):
        print(f"round {k + 1} of {args.rounds} ...", flush=True)
        for name in args.servers:
            served = serve_and_drive(
                name, args, folder, texts, reference, args.log_dir, f"peers-r{k + 1}"
            )
            startup[name].append(served.startup_s)
            similarity[name].append(served.cosine)
            stops[name].append(served.stopped)
            for clients, result in served.results.items():
                rounds.setdefault((name, clients), []).append(result)
                loads.setdefault((name, clients), []).append(served.loads[clients])

    meta: dict[str, Any] = {
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "threads": args.threads,
        "omp_wait_policy": args.omp_wait_policy,
        "texts": TEXTS,
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "rounds": args.rounds,
        "clients": args.clients,
        "servers": args.servers,
        "load_before": load_before,
        "load_after": load_average(),
        "server_info": {
            name: {
                "config": PEERS[name].config,
                "torch_threads": args.threads,
                "versions": versions(pythons[PEERS[name].interpreter], PEERS[name].packages),
                "startup_s": startup[name],
                "cosine": similarity[name],
                "venv": _venv(pythons[PEERS[name].interpreter]),
                "stops": [dataclasses.asdict(s) for s in stops[name]],
            }
            for name in args.servers
        },
    }
    summaries = [
        report.summarize(name, clients, rounds[(name, clients)])
        for clients in args.clients
        for name in args.servers
    ]
    page = report.markdown(meta, summaries, ceilings, loads)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{args.name}.md").write_text(page)
    (args.out_dir / f"{args.name}.json").write_text(
        json.dumps(report.record(meta, summaries, ceilings, rounds, loads), indent=2) + "\n"
    )
    print()
    print(page)


if __name__ == "__main__":
    main()
