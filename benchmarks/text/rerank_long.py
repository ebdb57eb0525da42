"""Long pairs: each backend reranking a query against an 8,192-token document on ModernBERT's shape.

    .venv/bin/python -m benchmarks.text.rerank_long [--rounds 2] [--quality-layers 6]

The reranker has ModernBERT-base's shape (:data:`benchmarks.text.long_document_speed.SHAPE`) with
**random weights**: transformers' ``ModernBertForSequenceClassification`` with one label, saved
beside the all-MiniLM-L6-v2 tokenizer (nothing is downloaded) and loaded as a
:class:`~models.text.classifier.TextClassifier`.

Speed: one ``(query, document)`` pair of 8,192 tokens (shipped docstrings,
:func:`models.text.quality.classifier.fit_pair`), one :meth:`TextClassifier.logits` call per
backend, each backend once per round in alternating order (forward, then backward), so a slow
spell of a shared machine hits every row alike: median milliseconds per pair and the speed-up over
``flash``. ``full`` is skipped past ``--full-max`` tokens (its ``[12, n, n]`` score matrices).

Quality: :func:`models.text.quality.classifier.measure` on pairs in a few long bands (257-512,
1,025-2,048, 4,097-8,192 tokens by default), every backend's Kendall tau-b and NDCG@10 against
``flash`` (exact, the reference past 512 tokens), on ``--quality-layers`` layers (global attention
on every third, as at full depth) to stay within minutes on a small CPU. With random weights these
figures are agreement with exact attention on this shape, not retrieval quality: no trained
reranker ships with the repository.

Capacity (``--capacity-lengths``, empty: none): the reranker at ``--capacity-layers`` layers
served by ``attnserve serve``, one ``(query, document)`` pair per ``POST /v1/rerank``, driven
over HTTP by the harness's raw-socket client (:mod:`benchmarks.harness.capacity`): per backend,
p50 of one client alone beside requests/s at ``--clients`` concurrent clients, each against
``flash``. ``--smoke``: one layer, a 300-token pair, ``flash`` and ``performer``, one quality
band of 4 pairs, capacity at 300 tokens.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.harness import capacity, cli
from benchmarks.harness.host import cpu_model, load_average
from benchmarks.harness.report import RESULTS, Report, table, write_json
from benchmarks.text.long_document_speed import CAPACITY_MODEL, LONG_REQUESTS, SHAPE, build_folder
from models.attention import BACKENDS as REGISTERED
from models.quality_file import backends_of
from models.text.classifier import TextClassifier
from models.text.quality.classifier import fit_pair, measure, query_of
from models.text.quality.corpus import stdlib_docstrings, word_windows

# Every registered backend, flash (the reference) first and full (skipped at length) last.
BACKENDS = ("flash", *(b for b in REGISTERED if b not in ("flash", "full")), "full")
WARM_TOKENS = 256


def build_reranker(folder: Path, layers: int) -> TextClassifier:
    """A random-weight one-label ``ModernBertForSequenceClassification`` at :data:`SHAPE`."""
    build_folder(folder, layers, task="classify")
    return TextClassifier.from_folder(folder)


def speed(classifier: TextClassifier, tokens: int, args: Any) -> dict[str, Any]:
    """Median seconds per pair of ``tokens`` tokens per backend, in alternating rounds."""
    query = query_of(stdlib_docstrings()[0])
    words = word_windows(1, tokens)[0].split()
    _, row = fit_pair(classifier, query, words, tokens)
    _, warm = fit_pair(classifier, query, words, WARM_TOKENS)
    backends = [b for b in args.backends if b != "full" or len(row) <= args.full_max]
    for backend in backends:
        classifier.logits([warm], backend)
    times: dict[str, list[float]] = {b: [] for b in backends}
    for round_ in range(args.rounds):
        for backend in backends if round_ % 2 == 0 else backends[::-1]:
            start = time.perf_counter()
            classifier.logits([row], backend)
            times[backend].append(time.perf_counter() - start)
            print(f"round {round_ + 1}: {backend:>10} {times[backend][-1]:.2f} s", flush=True)
    return {
        "tokens": len(row),
        "seconds": {b: statistics.median(t) for b, t in times.items()},
        "all_seconds": times,
        "skipped": [b for b in args.backends if b not in backends],
    }


def rerank_capacity(
    classifier: TextClassifier, tmp: Path, args: Any
) -> dict[str, dict[int, capacity.Capacity]]:
    """:func:`benchmarks.harness.capacity.serve` of ``POST /v1/rerank``, one pair per request
    (fitted to each length with ``classifier``'s tokenizer), on the reranker at
    ``--capacity-layers`` layers; ``full`` stops at ``--full-max`` tokens."""
    folder = tmp / "rerank-capacity"
    build_folder(folder, args.capacity_layers, task="classify")
    query = query_of(stdlib_docstrings()[0])

    def bodies(length: int) -> dict[str, list[Any]]:
        document, _ = fit_pair(classifier, query, word_windows(1, length)[0].split(), length)
        # fit_pair's document may run past the limit (its pair is cut to it): the server cuts
        # the same pair (truncate), so each request is the length the speed table times.
        body = {"model": folder.name, "query": query, "documents": [document], "truncate": True}
        return {
            b: [{**body, "attention": b}]
            for b in args.backends
            if b != "full" or length <= args.full_max
        }

    return capacity.serve(folder, "/v1/rerank", bodies, args, LONG_REQUESTS)


def speed_table(result: dict[str, Any]) -> str:
    """Milliseconds per pair and speed-up over ``flash`` per backend."""
    part = result["speed"]
    flash = part["seconds"]["flash"]
    skipped = f"skipped (n² memory past {result['full_max']} tokens)"
    cells = [
        [f"`{backend}`", f"{1000 * seconds:.0f}", f"{flash / seconds:.2f}x"]
        for backend, seconds in part["seconds"].items()
    ] + [[f"`{backend}`", skipped, "-"] for backend in part["skipped"]]
    return (
        f"One-request latency: one pair of {part['tokens']} tokens, {result['layers']} layers, "
        f"{result['threads']} threads, {result['rounds']} rounds (median), in process, one "
        "pair at a time.\n\n" + table(["backend", "ms per pair", "× flash"], cells)
    )


def quality_table(result: dict[str, Any]) -> str:
    """Kendall tau and NDCG@10 against exact attention per backend and token band."""
    quality = result["quality"]
    corpus = quality["corpus"]
    rows = backends_of(quality)
    bands = list(next(iter(rows.values()))["by_tokens"])

    def pair(figures: dict[str, float] | None) -> str:
        if figures is None:
            return "-"
        return f"{figures['kendall_tau']:.4f} / {figures['ndcg_at_10']:.4f}"

    cells = [
        [
            f"`{name}`",
            ", ".join(f"{k}={'auto' if v is None else v}" for k, v in row["options"].items())
            or "-",
            *(pair(row["by_tokens"].get(b)) for b in bands),
            pair(row),
        ]
        for name, row in rows.items()
    ]
    columns = [
        "backend", "options", *(f"{b} tokens: Kendall τ / NDCG@10" for b in bands),
        "all: Kendall τ / NDCG@10",
    ]  # fmt: skip
    return (
        f"Ranking agreement with exact attention (`{quality['reference']}`): "
        f"{result['quality_layers']} layers, {corpus['pairs']} pairs, {corpus['queries']} "
        f"queries x {corpus['candidates_per_query']} candidates, tokens {corpus['tokens_min']}-"
        f"{corpus['tokens_max']}; random weights, so this is agreement with exact attention "
        "on this architecture's shape, not retrieval quality.\n\n" + table(columns, cells)
    )


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        __doc__,
        cli.names("--backends", BACKENDS),
        cli.rounds(2),
        cli.threads(torch.get_num_threads()),
    )
    parser.add_argument("--tokens", type=int, default=8192, help="pair length for the speed table")
    parser.add_argument("--layers", type=int, default=SHAPE["num_hidden_layers"])
    parser.add_argument("--full-max", type=int, default=4096)
    parser.add_argument("--quality-layers", type=int, default=6)
    parser.add_argument(
        "--bands", nargs="+", default=["257-512", "1025-2048", "4097-8192"], help="quality bands"
    )
    parser.add_argument(
        "--quality-pairs", type=int, nargs="+", default=[80, 40, 20], help="pairs per band"
    )
    parser.add_argument("--candidates", type=int, default=10, help="candidates per query")
    parser.add_argument("--output-prefix", type=Path, default=RESULTS / "rerank-long-cpu")
    capacity.options(parser, [8192])
    args = cli.parse(
        parser, argv, tokens=300, layers=1, quality_layers=1, rounds=1,
        backends=["flash", "performer"], bands=["257-512"], quality_pairs=[4], candidates=2,
        capacity_lengths=[300], capacity_layers=1, capacity_seconds=1.0,
    )  # fmt: skip
    torch.set_num_threads(args.threads)
    report = Report("benchmarks.text.rerank_long", argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        reranker = build_reranker(Path(tmp) / "speed", args.layers)
        timed = speed(reranker, args.tokens, args)
        caps = rerank_capacity(reranker, Path(tmp), args) if args.capacity_lengths else {}
        del reranker
        shallow = build_reranker(Path(tmp) / "quality", args.quality_layers)
        bands = [tuple(int(x) for x in b.split("-")) for b in args.bands]
        plan = [((lo, hi), n) for (lo, hi), n in zip(bands, args.quality_pairs, strict=True)]
        quality_backends = [b for b in args.backends if b != "full"]
        quality = measure(
            shallow, plan, candidates=args.candidates, backends=quality_backends, reference="flash"
        )
    result = {
        "command": report.command,
        "cpu": cpu_model(),
        "threads": args.threads,
        "layers": args.layers,
        "quality_layers": args.quality_layers,
        "rounds": args.rounds,
        "full_max": args.full_max,
        "load_before": report.load_before,
        "load_after": load_average(),
        "minutes": round((time.perf_counter() - started) / 60, 1),
        "speed": timed,
        "quality": quality,
        "capacity": capacity.record_of(caps, args, layers=args.capacity_layers),
    }
    write_json(args.output_prefix.with_suffix(".json"), result)
    report.add(
        f"ModernBERT-base shape reranker (random weights); {result['minutes']} min in all.",
        speed_table(result),
        *(
            [capacity.table_of(caps, args, f"{CAPACITY_MODEL}, one pair per `POST /v1/rerank`")]
            if caps
            else []
        ),
        quality_table(result),
    )
    report.write(args.output_prefix.with_suffix(".md"))


if __name__ == "__main__":
    main()
