"""Reranking throughput of ``models.text.classifier.TextClassifier`` next to sentence-transformers'
``CrossEncoder.predict``, in one process, on a cross-encoder of ms-marco-MiniLM-L-6-v2's shape.

    .venv/bin/python -m benchmarks.text.rerank_speed [--repeats 3] [--docs 64] [--out FILE]

The cross-encoder is the shipped all-MiniLM-L6-v2 encoder (real weights) under a one-logit
``BertForSequenceClassification`` head drawn from a seed, saved by ``CrossEncoder.save``: the
shape and tokenizer of the popular MiniLM rerankers, without a download. The scores are not a
trained reranker's; the speed is the architecture's. Queries are docstring first lines, documents
docstrings of the shipped corpus cut at 256 tokens (both sides truncate the same way). Every
contender sees the same pairs, batch size 32 and thread count; timings are the best of
``--repeats`` interleaved passes (:func:`benchmarks.harness.timing.alternating`). The parity column
is the largest score difference to ``CrossEncoder.predict``. ``--smoke``: 4 pairs, one pass.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from benchmarks.harness import cli
from benchmarks.harness.report import Report
from benchmarks.harness.timing import alternating
from models.text.classifier import TextClassifier
from models.text.folders.weights import model_dir
from models.text.quality.corpus import stdlib_docstrings

MAX_TOKENS = 256
BATCH_SIZE = 32
REFERENCE = "sentence-transformers CrossEncoder.predict"


def build_cross_encoder(folder: Path, seed: int = 0) -> Path:
    """all-MiniLM-L6-v2's encoder under a seeded one-logit head, saved by ``CrossEncoder.save``."""
    import transformers as tf
    from sentence_transformers import CrossEncoder

    torch.manual_seed(seed)
    raw = folder.parent / (folder.name + "-raw")
    model = tf.BertForSequenceClassification.from_pretrained(str(model_dir()), num_labels=1)
    model.save_pretrained(str(raw))
    tf.AutoTokenizer.from_pretrained(str(model_dir())).save_pretrained(str(raw))
    CrossEncoder(str(raw), max_length=MAX_TOKENS, device="cpu").save(str(folder))
    return folder


def pairs(count: int) -> list[tuple[str, str]]:
    """``count`` (query, document) pairs from the shipped docstrings: long documents, short
    queries (each a docstring's first line)."""
    docs = [d for d in stdlib_docstrings() if len(d.split()) >= 60]
    queries = [d.splitlines()[0][:120] for d in stdlib_docstrings() if len(d.split()) < 60]
    return [(queries[i % len(queries)], docs[i % len(docs)]) for i in range(count)]


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        __doc__,
        cli.repeats(3, "timed passes per contender"),
        cli.names("--backends", ["flash", "full"]),
        cli.out(None, "also write the table here"),
    )
    p.add_argument("--docs", type=int, default=64, help="pairs per pass")
    args = cli.parse(p, argv, repeats=1, docs=4)

    from sentence_transformers import CrossEncoder

    report = Report("benchmarks.text.rerank_speed", argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_cross_encoder(Path(tmp) / "minilm-cross-encoder")
        reference = CrossEncoder(str(folder), max_length=MAX_TOKENS, device="cpu")
        ours = TextClassifier.from_folder(folder, max_tokens=MAX_TOKENS)
        bf16 = ours.with_precision("bfloat16")
        work = pairs(args.docs)
        expected = torch.tensor(reference.predict(work, batch_size=BATCH_SIZE))

        def run_ours(model: TextClassifier, backend: str) -> torch.Tensor:
            rows = model.tokenize(work, truncate=True)
            return model.scores(model.logits(rows, backend, max_batch_size=BATCH_SIZE))[:, 0]

        ours_runs = {f"attnserve {b} float32": (ours, b) for b in args.backends}
        ours_runs["attnserve flash bfloat16"] = (bf16, "flash")
        runs: dict[str, Callable[[], object]] = {
            REFERENCE: functools.partial(reference.predict, work, batch_size=BATCH_SIZE)
        }
        runs.update({name: functools.partial(run_ours, *run) for name, run in ours_runs.items()})
        times = {n: (min(t.wall), min(t.cpu)) for n, t in alternating(runs, args.repeats).items()}
        parity = {n: float((run_ours(*run) - expected).abs().max()) for n, run in ours_runs.items()}
    base_wall = times[REFERENCE][0]
    report.table(
        ["contender", "pairs/s (wall)", "× CrossEncoder", "CPU s", "max abs score diff"],
        [
            [name, f"{args.docs / wall:.1f}", f"{base_wall / wall:.2f}", f"{cpu:.2f}",
             "reference" if name not in parity else f"{parity[name]:.2e}"]
            for name, (wall, cpu) in times.items()
        ],
        "lrrrr",
    )  # fmt: skip
    title = (
        f"Rerank throughput, in process ({args.docs} pairs, batch {BATCH_SIZE}, "
        f"{MAX_TOKENS} tokens max, {torch.get_num_threads()} threads)"
    )
    report.write(args.out, title)


if __name__ == "__main__":
    main()
