"""Where a one-text forward spends its time, per op: ``torch.profiler`` over lone texts.

    .venv/bin/python -m benchmarks.text.batch_one_ops [--threads 2] [--texts 128]

Runs :meth:`models.text.SentenceEncoder.embed` on one text at a time (the peers' short texts,
:func:`benchmarks.service.workloads.short_texts`), in the environment the in-process rows get
(:func:`benchmarks.harness.process.server_env`, set before torch loads: this process
re-executes itself in it), and prints a markdown table of self CPU time per text by op, with calls
per text, plus the wall time per text outside the profiler. :mod:`benchmarks.text.batch_one`
appends it to its results with ``--ops``. ``--smoke``: 4 texts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks.harness import cli
from benchmarks.harness.report import table as md_table

CHILD = "_BATCH_ONE_OPS_CHILD"


def table(texts: int, rows: int) -> str:
    """The per-op table for ``texts`` lone texts (this process's threads and environment)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.service.workloads import short_texts
    from models.text import SentenceEncoder

    encoder = SentenceEncoder.load()
    ids = encoder.tokenize(short_texts(512)[:texts])
    for one in ids:  # warm: allocator, primitive caches
        encoder.embed([one])
    started = time.perf_counter()
    for one in ids:
        encoder.embed([one])
    wall_ms = (time.perf_counter() - started) * 1000 / len(ids)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for one in ids:
            encoder.embed([one])
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    mean_tokens = sum(map(len, ids)) / len(ids)
    head = (
        f"{len(ids)} lone texts (mean {mean_tokens:.1f} tokens), {torch.get_num_threads()} "
        f"threads, OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', 'unset')}: "
        f"{wall_ms:.2f} ms per text unprofiled; profiled ops {total / 1000 / len(ids):.2f} ms "
        "per text (the rest is Python between ops)"
    )
    cells = [
        [f"`{e.key}`", f"{e.self_cpu_time_total / len(ids):.0f}",
         f"{100 * e.self_cpu_time_total / total:.1f} %", f"{e.count / len(ids):.1f}",
         f"{e.self_cpu_time_total / e.count:.1f}"]
        for e in events[:rows]
    ]  # fmt: skip
    columns = ["op", "self CPU us per text", "share", "calls per text", "us per call"]
    return head + "\n\n" + md_table(columns, cells, "lrrrr")


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(__doc__, cli.threads(2))
    parser.add_argument("--texts", type=int, default=128)
    parser.add_argument("--rows", type=int, default=14, help="ops listed")
    parser.add_argument("--omp-wait-policy", default="passive")
    args = cli.parse(parser, argv, texts=4)
    if os.environ.get(CHILD) != "1":
        from benchmarks.harness.process import server_env

        env = {**server_env(args.threads, args.omp_wait_policy), CHILD: "1"}
        given = sys.argv[1:] if argv is None else argv
        raise SystemExit(subprocess.run([sys.executable, "-m", __spec__.name, *given],
                                        env=env, check=False).returncode)  # fmt: skip
    import torch

    torch.set_num_threads(args.threads)
    print(table(args.texts, args.rows))


if __name__ == "__main__":
    main()
