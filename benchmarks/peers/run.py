"""attnserve beside LitServe, infinity-emb and a naive FastAPI server, same weights, same driver.

    make bench-peers                   # installs both peer virtualenvs, then the full run below
    .venv/bin/python -m benchmarks.peers.run [--task embed] [--seconds 10] [--rounds 2]
        [--clients 1 32] [--threads 2] [--servers attnserve litserve infinity naive]
        [--batches 32 1]
    make bench-rerank-peers            # the rerank task
    .venv/bin/python -m benchmarks.peers.run --task rerank [--seconds 12] [--warmup 4]
        [--rounds 2] [--clients 1 8] [--threads 2]
        [--servers attnserve infinity litserve litserve-1]

``--task`` picks what the servers are asked and by which routes (a :class:`.report.Task`):
``embed`` (:mod:`.embed`), one short text per request, every embedding within cosine 0.9999 of
attnserve's; ``rerank`` (:mod:`.rerank`), one query and 16 documents per request, every score
within ``--tolerance`` of ``CrossEncoder.predict``'s. Both run the same way: first the
in-process reference rows (:mod:`.inprocess`), then ``--rounds`` rounds of every server in turn
(:func:`.servers.run_rounds`) at each ``--clients`` count, each server's first answer checked
before it is timed; after the run no process may still hold the model folder. Writes
``<out-dir>/<name>.md`` and ``.json``. What is measured, and which virtualenv runs which peer
(``--peers-python``, ``--infinity-python``): ``benchmarks/peers/README.md``. ``--smoke``: one
short round at 2 clients, attnserve alone when the peer virtualenvs are missing.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import psutil

from benchmarks.harness import cli
from benchmarks.harness.host import load_average
from benchmarks.harness.report import command, write, write_json
from benchmarks.peers import embed, report, rerank
from benchmarks.peers.servers import PeerServer, by_run, interpreters, peer_options, run_rounds

TASKS = {"embed": embed.TASK, "rerank": rerank.TASK}


def leftovers(folder: Path) -> list[str]:
    """Processes whose command line names the model folder (the peers' servers name it)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(folder) in cmdline and proc.pid != os.getpid():
            found.append(f"{proc.pid}: {cmdline[:100]}")
    return found


def main(argv: list[str] | None = None) -> None:
    choice = argparse.ArgumentParser(add_help=False)
    choice.add_argument("--task", choices=list(TASKS), default="embed",
                        help="embeddings of one short text, or reranking 16 documents")  # fmt: skip
    task = TASKS[choice.parse_known_args(argv)[0].task]
    parser = cli.parser(__doc__, choice, peer_options(list(task.peers)))
    parser.set_defaults(**task.defaults)
    task.options(parser)
    args = cli.parse(parser, argv, seconds=1.0, warmup=0.5, rounds=1, clients=[2], repeats=1,
                     **task.smoke)  # fmt: skip
    pythons = interpreters(args, task.peers)
    run_command = command("benchmarks.peers.run", argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    load_before = load_average()
    print(f"load average before: {load_before} ({os.cpu_count()} CPUs)", flush=True)
    work = task.prepare(args)
    figures: dict[str, list[float]] = {name: [] for name in args.servers}

    def check(server: PeerServer, answer: Any) -> None:
        figures[server.name].append(work.check(server, answer))

    turns = run_rounds(args, task.peers, work.folder, work.items[0], work.items, check, task.tag)
    left = leftovers(work.folder)
    print(f"processes holding the model folder after the run: {left or 'none'}", flush=True)
    if left:
        raise SystemExit(f"server processes outlived the run: {left}")

    rounds = by_run(turns, args.clients)
    loads = {key: [r.load for r in results] for key, results in rounds.items()}
    summaries = report.summaries(rounds, args.servers, args.clients)
    meta = report.run_meta(args, run_command, load_before, task.peers, pythons, turns, **work.meta)
    for name in args.servers:
        meta["server_info"][name][task.quality] = figures[name]
    page = task.page(meta, summaries, work.inprocess, loads)
    write(args.out_dir / f"{args.name}.md", page)
    write_json(args.out_dir / f"{args.name}.json", task.record(meta, summaries, work.inprocess,
                                                               rounds, loads))  # fmt: skip
    print()
    print(page)


if __name__ == "__main__":
    main()
