"""attnserve beside LitServe, infinity-emb and a naive FastAPI server, same weights, same driver.

    make bench-peers                   # installs .venv-peers, then the full run below
    .venv/bin/python -m benchmarks.peers.run [--seconds 10] [--rounds 2] [--clients 1 32]
        [--threads 2] [--servers attnserve litserve infinity naive]

1. Builds the sentence-transformers folder every peer loads (:mod:`.model_folder`).
2. In-process ceilings, one after the other: attnserve's encoder and sentence-transformers'
   ``encode`` on batches of 32 (:mod:`.inprocess`); their embeddings must agree (cosine at least
   0.9999) or the run stops: the peers would not be serving the same model.
3. ``--rounds`` rounds; in each, every server in turn (in ``--servers`` order, so drift over the
   run hits all alike): start it on a free port, wait until it answers a real request (whose
   embedding must match attnserve's, cosine at least 0.9999), then for each ``--clients`` count
   ``--warmup`` s of load and ``--seconds`` s measured (:mod:`.driver`), then stop it.
4. Writes ``<out-dir>/<name>.md`` and ``.json`` (:mod:`.report`).

attnserve runs from this interpreter's environment (the project's ``.venv``); the peers from
``--peers-python`` (``.venv-peers``, made by ``make peers-venv``), because infinity-emb's pins
(numpy<2, transformers<5) do not fit the project's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
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
    default_peers_python,
    free_port,
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
    """One :mod:`.inprocess` measurement in its own process, alone on the machine."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [
            str(python), "-m", "benchmarks.peers.inprocess", impl,
            "--texts", str(texts_file),
            "--out", str(out),
            "--threads", str(args.threads),
            "--repeats", str(args.repeats),
        ]  # fmt: skip
        if folder is not None:
            command += ["--folder", str(folder)]
        subprocess.run(command, cwd=ROOT, env=server_env(args.threads), check=True)
        return dict(json.loads(out.read_text()))


def measure_ceilings(
    texts: list[str], args: argparse.Namespace, folder: Path
) -> tuple[list[dict[str, Any]], list[float]]:
    """The in-process rows and attnserve's embedding of ``texts[0]`` (the reference every
    server's answer is checked against).

    Raises:
        SystemExit: sentence-transformers' embeddings from ``folder`` differ from attnserve's.
    """
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts[:256]))
        ours = in_process("attnserve", Path(sys.executable), texts_file, args, None)
        rows = [{**ours, "label": "attnserve SentenceEncoder.encode (flash)"}]
        print(f"  in-process attnserve: {ours['texts_per_s']:.1f} texts/s", flush=True)
        if args.peers_python.is_file():
            st = in_process("sentence-transformers", args.peers_python, texts_file, args, folder)
            worst = min(cosine(a, b) for a, b in zip(ours["guard"], st["guard"], strict=True))
            print(
                f"  in-process sentence-transformers: {st['texts_per_s']:.1f} texts/s; "
                f"cosine to attnserve >= {worst:.6f}",
                flush=True,
            )
            if worst < MIN_COSINE:
                raise SystemExit(
                    f"sentence-transformers from {folder} and attnserve disagree (cosine "
                    f"{worst:.6f} < {MIN_COSINE}): the peers would not serve the same model"
                )
            rows.append({**st, "label": "sentence-transformers encode", "cosine": worst})
    for row in rows:
        row["repeats"] = args.repeats
    reference = ours["guard"][0]
    for row in rows:
        del row["guard"]
    return rows, reference


def serve_and_drive(
    name: str,
    args: argparse.Namespace,
    folder: Path,
    texts: list[str],
    reference: list[float],
    log_dir: Path,
    tag: str,
) -> tuple[float, float, dict[int, LoadResult]]:
    """Start server ``name``, check its answer, drive it at each client count, stop it.
    Returns its start-up seconds, its answer's cosine to attnserve's, and the results."""
    peer = PEERS[name]
    launch = Launch(free_port(), args.threads, folder, Path(sys.executable), args.peers_python)
    started = time.monotonic()
    server = ServerProcess(peer, launch, log_dir / f"{name}-{tag}.log")
    results: dict[int, LoadResult] = {}
    try:
        embedding = server.wait_answering(texts[0])
        startup = time.monotonic() - started
        similarity = cosine(embedding, reference)
        if similarity < MIN_COSINE:
            raise SystemExit(f"{name} answers a different embedding (cosine {similarity:.6f})")
        requests = [server.request(t) for t in texts]
        for clients in args.clients:
            probes = {"server": server.cpu_seconds, "machine": machine_cpu_seconds}
            result = run_load(
                HOST, launch.port, requests, clients, args.seconds, args.warmup, probes
            )
            results[clients] = result
            errors = f"  errors {dict(result.errors)}" if result.errors else ""
            print(
                f"  {tag} {name:>9} x{clients:<3} {result.throughput:7.1f} req/s  "
                f"p50 {result.pct(50):6.1f}  p99 {result.pct(99):6.1f} ms{errors}",
                flush=True,
            )
    finally:
        server.stop()
    return startup, similarity, results


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
    parser.add_argument("--repeats", type=int, default=3, help="in-process passes (best kept)")
    parser.add_argument(
        "--peers-python",
        type=Path,
        default=default_peers_python(),
        help="the interpreter of the peers' virtualenv (make peers-venv)",
    )
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--name", default="peers-cpu", help="results file name, no suffix")
    parser.add_argument("--log-dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args(argv)
    needs_peers = any(PEERS[s].interpreter == "peers" for s in args.servers)
    if needs_peers and not args.peers_python.is_file():
        parser.error(f"{args.peers_python} is missing: make peers-venv (or --servers attnserve)")
    command = "python -m benchmarks.peers.run " + shlex.join(sys.argv[1:] if argv is None else argv)

    from benchmarks.service import short_texts

    load_before = load_average()
    print(f"load average before: {load_before} ({os.cpu_count()} CPUs)", flush=True)
    folder = peer_folder()
    texts = short_texts(TEXTS)
    print("in-process ceilings (batch 32) ...", flush=True)
    ceilings, reference = measure_ceilings(texts, args, folder)

    rounds: dict[tuple[str, int], list[LoadResult]] = {}
    startup: dict[str, list[float]] = {name: [] for name in args.servers}
    similarity: dict[str, list[float]] = {name: [] for name in args.servers}
    for k in range(args.rounds):
        print(f"round {k + 1} of {args.rounds} ...", flush=True)
        for name in args.servers:
            seconds, sim, results = serve_and_drive(
                name, args, folder, texts, reference, args.log_dir, f"peers-r{k + 1}"
            )
            startup[name].append(seconds)
            similarity[name].append(sim)
            for clients, result in results.items():
                rounds.setdefault((name, clients), []).append(result)

    pythons = {"attnserve": Path(sys.executable), "peers": args.peers_python}
    meta: dict[str, Any] = {
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "threads": args.threads,
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
            }
            for name in args.servers
        },
    }
    summaries = [
        report.summarize(name, clients, rounds[(name, clients)])
        for clients in args.clients
        for name in args.servers
    ]
    page = report.markdown(meta, summaries, ceilings)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{args.name}.md").write_text(page)
    (args.out_dir / f"{args.name}.json").write_text(
        json.dumps(report.record(meta, summaries, ceilings, rounds), indent=2) + "\n"
    )
    print()
    print(page)


if __name__ == "__main__":
    main()
