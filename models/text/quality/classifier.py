"""Measure how close each attention backend's reranking (or classification) comes to exact attention.

    attnserve evaluate path/to/cross-encoder-folder [--pairs-per-band 100] [--max-tokens 2048]
    attnserve evaluate path/to/classifier-folder --precisions bfloat16 int8 [--out quality.json]

Corpus (:func:`build_corpus`): the standard-library docstrings shipped as a snapshot
(:mod:`models.text.quality.corpus`), laid end to end in their SHA-1 order. Each query is the first
sentence (at most :data:`QUERY_WORDS` words) of one docstring; its candidates are the text that
starts at that docstring (the right document) and the texts starting at the next ``candidates -
1`` docstrings, each cut to the most words whose ``(query, document)`` pair fits a target
length. The targets spread evenly over one token band (:func:`models.text.quality.embedding.bands_for`:
1-64, 65-128, 129-256, then doubling up to the model's limit), ``--pairs-per-band`` pairs per
band, so each query ranks candidates of similar but different lengths and the figures can be
read per band. Random weights still give every candidate a different score, so the rankings
are meaningful as agreement with exact attention even on an untrained model.

Every pair is scored with the exact reference (``full`` up to 512 tokens, else ``flash``, as
:mod:`models.text.quality.embedding` chooses it) and with every other backend the model accepts, at its
default options. A reranker (one label) is judged per query on its raw logits (its activation is
monotone, so the ranking is the same, and sigmoid saturation would only add ties):

- ``kendall_tau``: Kendall's tau-b (:func:`models.text.quality.ranking.kendall_tau_b`) of the backend's candidate scores to
  the reference's, averaged over queries; ``loss`` = 1 - that mean;
- ``ndcg_at_10``: NDCG@10 (:func:`models.text.quality.ranking.ndcg_at_k`) of the backend's ranking, with the reference's
  ranking as graded relevance (a candidate's gain is how many candidates the reference scores
  below it).

A classifier (several labels) is judged per pair: ``agreement`` is the share of pairs whose top
label matches the reference's, ``loss`` = 1 - agreement, and ``total_variation`` the mean total
variation distance between the softmax of the two logit rows. Pairs are used for classifiers
too: every sequence classifier takes them (NLI models need them), and they exercise segments.

``quality.json`` (the folder's, or ``--out``; :mod:`models.quality_file`) then holds ``task``,
``reference``, ``metric``, ``corpus`` and per precision and backend ``options``, the figures and
``by_tokens`` (the same figures per band of pair token counts);
:func:`models.quality_loss.classifier_losses` reads each band's ``loss``. ``--precisions bfloat16
int8`` also measures the encoder in those precisions (:meth:`TextClassifier.with_precision`):
every backend, the reference included, against the float32 exact scores. Precisions measured
before and not named again are dropped (every run measures the float32 reference again), and the
command says which.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor

from models.quality_file import backend_rows, read_quality
from models.text.base import TextModel
from models.text.classifier import TextClassifier
from models.text.quality.backends import measure_backends
from models.text.quality.corpus import load_snapshot, stdlib_docstrings
from models.text.quality.embedding import (
    add_run_arguments,
    bands_for,
    row_cells,
    write_quality,
)
from models.text.quality.ranking import label_figures, pair_counts, rank_figures
from models.text.tokens.pairs import PairRow

CANDIDATES = 20  # per query: the right document and 19 others
QUERY_WORDS = 12
Band = tuple[int, int]
M = TypeVar("M", bound=TextModel)  # the model a pair measurement loads (:func:`pair_main`)


class PairTokens(Protocol):
    """What :func:`build_corpus` needs of a model: ``(query, document)`` pairs tokenised, a
    row's length its token count (a multi-vector model's adapter counts the document alone)."""

    def tokenize(self, inputs: Sequence[tuple[str, str]], truncate: bool = ...) -> list[PairRow]:
        """One row per pair."""
        ...


# ---------------------------------------------------------------------------------------------
# Corpus: queries and candidate documents at target pair lengths.


@dataclass(frozen=True)
class Corpus:
    """Scored pairs: ``pairs[i]`` tokenised as ``rows[i]`` (``lengths[i]`` tokens, specials
    included); ``groups`` lists each query's candidate indices, the right document first."""

    pairs: list[tuple[str, str]]
    rows: list[PairRow]
    groups: list[list[int]]

    @property
    def lengths(self) -> list[int]:
        return [len(row) for row in self.rows]


def query_of(text: str, words: int = QUERY_WORDS) -> str:
    """A docstring's first sentence, at most ``words`` words."""
    first = text.split(". ", 1)[0].rstrip(".")
    return " ".join(first.split()[:words])


def fit_pair(
    classifier: PairTokens, query: str, words: list[str], target: int
) -> tuple[str, PairRow]:
    """The document (most words of ``words``, one at least) whose pair with ``query`` is at most
    ``target`` tokens, and that pair's row: a binary search over word counts with the model's
    own tokenizer."""

    def pair(count: int) -> PairRow:
        return classifier.tokenize([(query, " ".join(words[:count]))], truncate=True)[0]

    lo, hi = 1, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(pair(mid)) <= target:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]), pair(lo)


def build_corpus(
    classifier: PairTokens,
    plan: Sequence[tuple[Band, int]],
    candidates: int = CANDIDATES,
) -> Corpus:
    """Per ``(band, pairs)`` of ``plan``: ``pairs // candidates`` queries (one at least) of
    ``candidates`` documents each (``pairs`` when fewer), documents cut so the pairs' token counts
    spread over the band (see the module doc). Deterministic: the same docs for the same plan."""
    docs = [d for d in stdlib_docstrings() if len(query_of(d).split()) >= 3]
    out_pairs: list[tuple[str, str]] = []
    rows: list[PairRow] = []
    groups: list[list[int]] = []
    start = 0  # next docstring to open a candidate at: every candidate starts at a new one
    for (low, high), pairs in plan:
        per_query = max(2, min(candidates, pairs))
        for _ in range(max(1, pairs // per_query)):
            query = query_of(docs[start % len(docs)])
            group = []
            for j in range(per_query):
                # Enough words from docstring ``start + j`` on (a word is one token or more).
                words: list[str] = []
                i = start + j
                while len(words) < high:
                    words.extend(docs[i % len(docs)].split())
                    i += 1
                target = low + (high - low) * (j + 1) // per_query
                document, row = fit_pair(classifier, query, words[:high], target)
                group.append(len(rows))
                rows.append(row)
                out_pairs.append((query, document))
            groups.append(group)
            start += per_query
    return Corpus(out_pairs, rows, groups)


# ---------------------------------------------------------------------------------------------
# Figures per backend.


def _band_of(length: int, bands: Sequence[Band]) -> Band | None:
    return next((b for b in bands if b[0] <= length <= b[1]), None)


def summarise(
    task: str, logits: Tensor, reference: Tensor, corpus: Corpus, bands: Sequence[Band]
) -> dict[str, Any]:
    """The figures overall and per band of pair token counts (a reranker's per band over each
    query's candidates in that band)."""
    lengths = corpus.lengths
    whole = list(range(len(lengths)))

    def figures(members: list[int], groups: list[list[int]]) -> dict:
        if task == "rerank":
            return rank_figures(logits, reference, groups)
        return label_figures(logits[members], reference[members])

    by_tokens = {}
    for band in bands:
        members = [i for i in whole if _band_of(lengths[i], [band])]
        groups = [[i for i in g if _band_of(lengths[i], [band])] for g in corpus.groups]
        if not members or (task == "rerank" and all(len(g) < 2 for g in groups)):
            continue
        by_tokens[f"{band[0]}-{band[1]}"] = {"pairs": len(members), **figures(members, groups)}
    return {**figures(whole, corpus.groups), "by_tokens": by_tokens}


def measure(
    classifier: TextClassifier,
    plan: Sequence[tuple[Band, int]],
    precisions: Sequence[str] = (),
    candidates: int = CANDIDATES,
    backends: Sequence[str] | None = None,
    reference: str | None = None,
) -> dict[str, Any]:
    """Every accepted backend's figures against the exact reference on :func:`build_corpus` of
    ``plan``, and in each of ``precisions`` every backend's against the float32 exact logits.
    ``reference`` defaults to :func:`models.text.quality.embedding.reference_for` the longest band."""
    bands = [band for band, _ in plan]
    corpus = build_corpus(classifier, plan, candidates)
    reference, sections = measure_backends(
        classifier,
        bands,
        backends,
        reference,
        precisions,
        lambda model, name: model.logits(corpus.rows, name),
        lambda got, exact: summarise(classifier.task, got, exact, corpus, bands),
    )
    rerank = classifier.task == "rerank"
    result: dict[str, Any] = {
        "task": classifier.task,
        "reference": reference,
        "metric": (
            "loss = 1 - mean Kendall tau-b, per query, of each backend's pair logits to the "
            "exact-attention logits; ndcg_at_10 with the exact ranking as graded relevance"
            if rerank
            else "loss = 1 - agreement, the share of pairs whose top label matches "
            "exact attention's; total_variation = mean total variation distance of the softmax"
        ),
        "corpus": {
            "source": f"Python {load_snapshot()['python']} standard-library docstrings "
            "(modules, classes, functions; tests/idlelib/lib2to3 excluded): query = a "
            "docstring's first sentence, candidates = text from it and the next docstrings, "
            "cut to lengths spread over each band",
            **pair_counts(corpus.groups, corpus.lengths, bands),
        },
        "precisions": sections,
    }
    return result


def plan_for(max_tokens: int, pairs_per_band: int) -> list[tuple[Band, int]]:
    """``pairs_per_band`` pairs in each band of :func:`models.text.quality.embedding.bands_for`."""
    return [(band, pairs_per_band) for band in bands_for(max_tokens)]


# ---------------------------------------------------------------------------------------------
# Report and command line.


# The figures a task's table shows (the first also per band); a multi-vector model's are
# written by :mod:`models.text.quality.multi_vector`, a sparse model's by
# :mod:`models.text.quality.sparse`.
TABLE_FIGURES = {
    "rerank": ("kendall_tau", "ndcg_at_10"),
    "classify": ("agreement", "total_variation"),
    "multi_vector": ("kendall_tau", "ndcg_at_10", "mean_cosine"),
    "sparse": ("kendall_tau", "ndcg_at_10", "top_k_overlap", "relative_l2"),
}


def markdown(result: dict[str, Any]) -> str:
    """The corpus line and one table row per backend (and precision), as the command prints."""
    corpus = result["corpus"]
    lines = [
        f"{result['task']}: {corpus['pairs']} pairs ({corpus['queries']} queries x "
        f"{corpus['candidates_per_query']} candidates), tokens {corpus['tokens_min']}-"
        f"{corpus['tokens_max']} (median {corpus['tokens_median']}); exact reference: "
        f"{result['reference']}",
        "",
    ]
    rows = backend_rows(result)
    bands = list(rows[0][1]["by_tokens"]) if rows else []
    figures = TABLE_FIGURES.get(result["task"], TABLE_FIGURES["classify"])
    per_band = "Kendall tau" if figures[0] == "kendall_tau" else "agreement"
    lines.append(
        "| backend | options | loss | "
        + " | ".join(f.replace("_", " ") for f in figures)
        + " | "
        + " | ".join(f"{per_band}, {b} tokens" for b in bands)
        + " |"
    )
    lines.append("|---" * (3 + len(figures) + len(bands)) + "|")
    for name, row in rows:
        shown, *cells = row_cells(row, bands, figures[0])
        lines.append(
            f"| `{name}` | {shown} | {row['loss']:.4f} | "
            + " | ".join(f"{row[f]:.4f}" for f in figures)
            + " | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def parse_pair_args(
    argv: list[str] | None, folder: str, scored: str, description: str
) -> argparse.Namespace | None:
    """The arguments of ``attnserve evaluate FOLDER`` for a measurement over query/document
    pairs (this module's; :mod:`models.text.quality.multi_vector`'s): ``folder`` helps the
    folder argument, ``scored`` names what the precisions are measured on. ``out`` is filled in
    and torch's threads set; None when ``--show`` printed the output's table instead."""
    parser = argparse.ArgumentParser(prog="attnserve evaluate", description=description)
    parser.add_argument("folder", type=Path, help=folder)
    parser.add_argument(
        "--pairs-per-band", type=int, default=5 * CANDIDATES, help="pairs per token band"
    )
    parser.add_argument("--candidates", type=int, default=CANDIDATES, help="documents per query")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="measure pairs up to this length only"
    )
    out = "default: quality.json in the folder"
    parser.add_argument("--out", "--output", dest="out", type=Path, default=None, help=out)
    add_run_arguments(parser, scored)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.out = args.out or args.folder / "quality.json"
    if args.show:
        print(markdown(read_quality(args.out)))
        return None
    return args


def pair_main(
    argv: list[str] | None,
    doc: str | None,
    folder: str,
    scored: str,
    load: Callable[[Path], M],
    measure: Callable[[M, list[tuple[Band, int]], tuple[str, ...], int], dict[str, Any]],
    limit_of: Callable[[M], int] = lambda model: model.max_tokens,
) -> None:
    """``attnserve evaluate FOLDER`` of a pair measurement (this module's, the sparse and the
    multi-vector one): :func:`parse_pair_args` (``folder``, ``scored``; the description is
    ``doc``'s first line), ``load`` the folder, ``measure`` it on :func:`plan_for` up to
    ``limit_of`` the model (or ``--max-tokens``), write and print the result."""
    args = parse_pair_args(argv, folder, scored, (doc or "").splitlines()[0])
    if args is None:
        return
    model = load(args.folder)
    start = time.perf_counter()
    limit = min(limit_of(model), args.max_tokens or limit_of(model))
    plan = plan_for(limit, args.pairs_per_band)
    result = measure(model, plan, tuple(args.precisions), args.candidates)
    write_quality(args.out, result, args.precisions, time.perf_counter() - start, markdown)


def main(argv: list[str] | None = None) -> None:
    folder = "a cross-encoder or sequence-classifier folder"
    pair_main(argv, __doc__, folder, "scores", lambda f: _loader(f).from_folder(f), measure)


def _loader(folder: Path) -> type[TextClassifier]:
    """The class that loads ``folder``: a causal-LM reranker (``LogitScore``) or any other
    cross-encoder or classifier."""
    from models.text.folders.logit_score import is_causal_reranker_folder

    if is_causal_reranker_folder(folder):
        from models.text.causal_reranker import CausalReranker

        return CausalReranker
    return TextClassifier


if __name__ == "__main__":
    main()
