"""attnserve beside LitServe, infinity-emb and a naive FastAPI server, same weights, same driver.

    make bench-peers                   # installs both peer virtualenvs, then the full run below
    .venv/bin/python -m benchmarks.peers.run [--seconds 10] [--rounds 2] [--clients 1 32]
        [--threads 2] [--servers attnserve litserve infinity naive] [--batches 32 1]

First the in-process reference rows at each of ``--batches`` (attnserve's encoder,
sentence-transformers' ``encode``, ONNX Runtime's optimized graph: :mod:`.inprocess`), then
``--rounds`` rounds of every server in turn (:func:`.servers.run_rounds`) at each ``--clients``
count. Every embedding, in process or served, must agree with attnserve's (cosine at least
0.9999) or the run stops. Writes ``<out-dir>/<name>.md`` and ``.json`` (:mod:`.report`).
What is measured, and which virtualenv runs which peer (``--peers-python``,
``--infinity-python``): ``benchmarks/peers/README.md``. ``--smoke``: one short round at 2
clients, attnserve alone when the peer virtualenvs are missing.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import cli
from benchmarks.harness.host import load_average
from benchmarks.harness.report import command, write, write_json
from benchmarks.peers import report
from benchmarks.peers.model_folder import peer_folder
from benchmarks.peers.servers import (
    PEERS,
    PeerServer,
    by_run,
    in_process,
    interpreters,
    peer_options,
    run_rounds,
)
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


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(__doc__, peer_options([1, 32], 10.0, 2.0, list(PEERS), "peers-cpu"))
    parser.add_argument(
        "--batches", type=int, nargs="+", default=[32, 1], help="in-process batch sizes"
    )
    parser.set_defaults(texts=TEXTS)
    args = cli.parse(parser, argv, seconds=1.0, warmup=0.5, rounds=1, clients=[2], repeats=1,
                     batches=[4], texts=16)  # fmt: skip
    pythons = interpreters(args, PEERS)
    run_command = command("benchmarks.peers.run", argv)

    load_before = load_average()
    print(f"load average before: {load_before} ({os.cpu_count()} CPUs)", flush=True)
    folder = peer_folder()
    texts = short_texts(args.texts)
    print(f"in-process reference rows (batches {args.batches}) ...", flush=True)
    ceilings, reference = measure_ceilings(texts, args, folder)

    similarity: dict[str, list[float]] = {name: [] for name in args.servers}

    def same_model(server: PeerServer, answer: Any) -> None:
        similarity[server.name].append(cosine(server.peer.embedding(answer), reference))
        if similarity[server.name][-1] < MIN_COSINE:
            raise SystemExit(f"{server.name} answers a different embedding "
                             f"(cosine {similarity[server.name][-1]:.6f})")  # fmt: skip

    turns = run_rounds(args, PEERS, folder, texts[0], texts, same_model, "peers")
    rounds = by_run(turns, args.clients)
    loads = {key: [r.load for r in results] for key, results in rounds.items()}
    meta = report.run_meta(args, run_command, load_before, PEERS, pythons, turns, texts=args.texts)
    for name in args.servers:
        meta["server_info"][name]["cosine"] = similarity[name]
    summaries = report.summaries(rounds, args.servers, args.clients)
    page = report.markdown(meta, summaries, ceilings, loads)
    write(args.out_dir / f"{args.name}.md", page)
    record = report.record(meta, summaries, ceilings, rounds, loads)
    write_json(args.out_dir / f"{args.name}.json", record)
    print()
    print(page)


if __name__ == "__main__":
    main()
