"""Encoding throughput of ``models.text.SentenceEncoder`` next to sentence-transformers.

    .venv/bin/python -m benchmarks.text.encoder [--repeats 3] [--backends flash full]

Two workloads from the stdlib-docstring corpus (``models.text.quality.corpus.word_windows``): 1024 texts
of 20 words and 64 texts of 200 words. Every encoder sees the same texts, batch size 32 and the
same ``torch`` thread count, in one process; each timing is the best of ``--repeats`` full passes
after one warm-up pass, the contenders interleaved pass by pass (best-of and interleaved, because
other processes share this CPU). The table gives texts/s and our speed relative to
sentence-transformers (> 1: we are faster) by wall time and by process CPU time. ``--smoke``:
32 texts per workload, one pass, ``flash`` only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # sentence-transformers must never reach a hub

import torch

from benchmarks.harness import cli
from benchmarks.harness.report import table
from benchmarks.harness.timing import alternating
from models.text import SentenceEncoder
from models.text.folders.weights import model_dir
from models.text.quality.corpus import word_windows

WORKLOADS = {"20 words": (1024, 20), "200 words": (64, 200)}
BATCH_SIZE = 32


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        __doc__,
        cli.repeats(3, "timed passes per encoder"),
        cli.names("--backends", ["flash", "full"]),
    )
    p.add_argument("--texts", type=int, default=None, help="texts per workload (default: as named)")
    args = cli.parse(p, argv, repeats=1, backends=["flash"], texts=32)

    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(model_dir()), device="cpu")
    ours = SentenceEncoder.load()
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, batch size {BATCH_SIZE}\n"
    )
    cells = []
    for label, (count, words) in WORKLOADS.items():
        count = args.texts or count
        texts = word_windows(count, words)
        tokens = sum(len(ids) for ids in ours.tokenize(texts, truncate=True)) / count
        runs: dict[str, Callable[[], object]] = {
            "st": partial(st.encode, texts, batch_size=BATCH_SIZE)
        }
        for backend in args.backends:
            runs[backend] = partial(ours.encode, texts, backend=backend, truncate=True)
        # Best of interleaved passes: every contender meets the same background load.
        times = {
            name: (min(t.wall), min(t.cpu)) for name, t in alternating(runs, args.repeats).items()
        }
        rate = {name: count / wall for name, (wall, _) in times.items()}
        row = [f"{count} x {label} (~{tokens:.0f} tokens)", f"{rate['st']:.1f}/s"]
        for b in args.backends:
            cpu_ratio = times["st"][1] / times[b][1]
            row += [f"{rate[b]:.1f}/s", f"{rate[b] / rate['st']:.2f}x / {cpu_ratio:.2f}x"]
        cells.append(row)
    columns = ["workload", "sentence-transformers"]
    for b in args.backends:
        columns += [f"ours `{b}`", f"ratio `{b}` (wall / CPU)"]
    print(table(columns, cells))
    print("\nratio > 1: faster than sentence-transformers (wall: texts/s; CPU: process CPU time)")


if __name__ == "__main__":
    main()
