"""Texts over a model's limit: overlapping windows against truncation, on a retrieval check.

    .venv/bin/python -m benchmarks.text.long_text_retrieval [--documents 60] [--model all-MiniLM-L6-v2]

Documents: standard-library modules, each all its docstrings in source order
(:func:`models.text.quality.corpus.module_documents`), kept when they run 2x to 12x the model's token
limit. Queries: from each document, the first sentence of one docstring that starts inside the
first window (``early``) and one that starts past the limit (``late``, which truncation never
reads). Each query is scored against every document by cosine; the table gives recall@1 and
mean reciprocal rank for ``long_text=truncate`` and ``long_text=windows``, overall and by where
the query's passage sits, plus the time to embed the documents. Both modes run through
:meth:`models.text.SentenceEncoder.encode` with ``flash`` attention. ``--smoke``: 3 documents.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import torch

from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report, write_json
from models.text import SentenceEncoder
from models.text.folders.packaged import PACKAGED, packaged_folder
from models.text.quality.corpus import module_documents

MIN_QUERY_WORDS = 6


def build(
    encoder: SentenceEncoder, limit_docs: int
) -> tuple[list[str], list[tuple[str, int, str]]]:
    """Documents, and queries as (text, document index, "early" or "late")."""
    documents: list[str] = []
    queries: list[tuple[str, int, str]] = []
    limit = encoder.max_tokens
    for _name, docs in module_documents():
        text = " ".join(docs)
        total = encoder.tokenizer.count([text])[0]
        if not 2 * limit <= total <= 12 * limit:
            continue
        # Token offset where each docstring starts (counted on the running prefix).
        offsets = encoder.tokenizer.count([" ".join(docs[:i]) or "." for i in range(len(docs))])
        early = late = None
        for doc, offset in zip(docs, offsets, strict=True):
            sentence = re.split(r"(?<=[.!?])\s", doc, maxsplit=1)[0]
            if len(sentence.split()) < MIN_QUERY_WORDS:
                continue
            if early is None and offset < limit // 2:
                early = sentence
            if late is None and offset > limit + 32:
                late = sentence
        if early is None or late is None:
            continue
        index = len(documents)
        documents.append(text)
        queries += [(early, index, "early"), (late, index, "late")]
        if len(documents) == limit_docs:
            break
    return documents, queries


def scores(query_vectors: torch.Tensor, doc_vectors: torch.Tensor, targets: list[int]) -> list[int]:
    """Rank (1 = best) of each query's own document among all."""
    sims = query_vectors @ doc_vectors.T
    own = sims[torch.arange(len(targets)), torch.tensor(targets)]
    return (sims > own[:, None]).sum(dim=1).add(1).tolist()


def summarise(ranks: list[int]) -> dict[str, float]:
    """Recall@1 and mean reciprocal rank of ``ranks``."""
    return {
        "recall@1": sum(r == 1 for r in ranks) / len(ranks),
        "mrr": sum(1.0 / r for r in ranks) / len(ranks),
    }


def run(model: str, limit_docs: int) -> dict:
    """Both modes' ranks summarised, with the corpus's size."""
    encoder = (
        SentenceEncoder.from_folder(packaged_folder(model))
        if model in PACKAGED
        else SentenceEncoder.load()
    )
    documents, queries = build(encoder, limit_docs)
    q_vectors = encoder.encode([q for q, _, _ in queries], truncate=True)
    targets = [d for _, d, _ in queries]
    doc_tokens = sum(encoder.tokenizer.count(documents))
    out: dict = {
        "model": encoder.name,
        "max_tokens": encoder.max_tokens,
        "documents": len(documents),
        "queries": len(queries),
        "document_tokens": doc_tokens,
        "modes": {},
    }
    for mode in ("truncate", "windows"):
        start = time.perf_counter()
        d_vectors = encoder.encode(documents, long_text=mode)
        seconds = time.perf_counter() - start
        ranks = scores(q_vectors, d_vectors, targets)
        row = {"all": summarise(ranks), "seconds": seconds}
        for where in ("early", "late"):
            row[where] = summarise(
                [r for r, (_, _, w) in zip(ranks, queries, strict=True) if w == where]
            )
        out["modes"][mode] = row
    return out


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--documents", type=int, default=60)
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help=f"or {', '.join(PACKAGED)}")
    parser.add_argument("--output-prefix", type=Path, default=None)
    args = cli.parse(parser, argv, documents=3)
    report = Report("benchmarks.text.long_text_retrieval", argv)
    result = run(args.model, args.documents)
    prefix = args.output_prefix or RESULTS / f"long-text-retrieval-{result['model']}"
    write_json(prefix.with_suffix(".json"), result)
    report.add(
        f"{result['model']} (limit {result['max_tokens']} tokens): {result['documents']} "
        f"stdlib-module documents ({result['document_tokens']} tokens), {result['queries']} "
        "queries (one early, one late per document)"
    )
    report.table(
        ["long_text", "recall@1", "MRR", "recall@1 early", "recall@1 late", "MRR late", "embed s"],
        [
            [f"`{mode}`", *(f"{row[w][k]:.3f}" for w, k in _COLUMNS), f"{row['seconds']:.1f}"]
            for mode, row in result["modes"].items()
        ],
    )
    report.write(prefix.with_suffix(".md"))


# The table's figures after the mode: (where the query's passage sits, measure).
_COLUMNS = (
    ("all", "recall@1"),
    ("all", "mrr"),
    ("early", "recall@1"),
    ("late", "recall@1"),
    ("late", "mrr"),
)


if __name__ == "__main__":
    main()
