"""How close one set of scores comes to a reference set: rank agreement for rerankers (Kendall's
tau-b, NDCG@k) and label agreement for classifiers. Plain tensor arithmetic, no scipy; what
:mod:`models.text.quality.classifier` reports per backend against exact attention."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence, Sized
from typing import Any

import torch
from torch import Tensor

NDCG_K = 10


def kendall_tau_b(x: Tensor, y: Tensor) -> float:
    """Kendall's tau-b of two score vectors ``[n]``: ``(C - D) / sqrt((P - Tx) (P - Ty))``, with
    ``C``/``D`` the concordant/discordant pairs, ``P`` all pairs and ``Tx``/``Ty`` the pairs tied
    in ``x``/``y`` (Kendall 1945, "The treatment of ties in ranking problems"). When either
    vector is constant the coefficient is undefined; it is 1.0 here if both are, else 0.0.
    """
    x, y = x.double().flatten(), y.double().flatten()
    upper = torch.triu(torch.ones(len(x), len(x), dtype=torch.bool), diagonal=1)  # pairs i < j
    sx = torch.sign(x[:, None] - x[None, :])[upper]
    sy = torch.sign(y[:, None] - y[None, :])[upper]
    untied_x, untied_y = int(sx.count_nonzero()), int(sy.count_nonzero())
    if untied_x == 0 or untied_y == 0:
        return 1.0 if untied_x == untied_y else 0.0
    return float((sx * sy).sum()) / math.sqrt(untied_x * untied_y)


def graded_relevance(reference: Tensor) -> Tensor:
    """Each item's gain from the reference scores ``[n]``: how many items score below it (the
    top of ``n`` gets ``n - 1``, the bottom 0; ties get the same gain)."""
    r = reference.double().flatten()
    return (r[:, None] > r[None, :]).sum(dim=1).double()


def ndcg_at_k(scores: Tensor, reference: Tensor, k: int = NDCG_K) -> float:
    """NDCG@k (Järvelin & Kekäläinen 2002) of ranking items by ``scores`` ``[n]``, with
    :func:`graded_relevance` of ``reference`` as the gains: ``DCG = sum_r gain_r / log2(r + 2)``
    over the first ``k`` ranks ``r = 0..k-1``, divided by the DCG of the reference's own order.
    Tied scores keep item order (a stable sort). 1.0 when every gain is 0."""
    gains = graded_relevance(reference)
    discount = 1.0 / torch.log2(torch.arange(len(gains), dtype=torch.float64) + 2.0)[:k]
    order = torch.sort(scores.double().flatten(), descending=True, stable=True).indices[:k]
    ideal = float((torch.sort(gains, descending=True).values[:k] * discount).sum())
    return 1.0 if ideal == 0.0 else float((gains[order] * discount).sum()) / ideal


def rank_figures(logits: Tensor, reference: Tensor, groups: Sequence[Sequence[int]]) -> dict:
    """A reranker's ``loss``, ``kendall_tau`` and ``ndcg_at_10`` over ``groups`` (queries' pair
    indices; those with fewer than two pairs are skipped), from ``[n, 1]`` logits."""
    taus, ndcgs = [], []
    for group in groups:
        if len(group) < 2:
            continue
        got, want = logits[list(group), 0], reference[list(group), 0]
        taus.append(kendall_tau_b(got, want))
        ndcgs.append(ndcg_at_k(got, want))
    tau = statistics.fmean(taus)
    return {
        "loss": round(1.0 - tau, 6),
        "kendall_tau": round(tau, 6),
        "ndcg_at_10": round(statistics.fmean(ndcgs), 6),
    }


def label_figures(logits: Tensor, reference: Tensor) -> dict:
    """A classifier's ``loss`` (1 - agreement), top-label ``agreement`` and mean softmax
    ``total_variation`` distance, from ``[n, labels]`` logits."""
    agreement = float((logits.argmax(-1) == reference.argmax(-1)).double().mean())
    p, q = torch.softmax(logits.double(), -1), torch.softmax(reference.double(), -1)
    variation = float(0.5 * (p - q).abs().sum(-1).mean())
    return {
        "loss": round(1.0 - agreement, 6),
        "agreement": round(agreement, 6),
        "total_variation": round(variation, 6),
    }


def by_band(
    groups: Sequence[Sequence[int]],
    lengths: Sequence[int],
    bands: Sequence[tuple[int, int]],
    figures: Callable[[list[list[int]]], dict[str, Any]],
) -> dict[str, Any]:
    """``figures`` of every query's candidates (``groups``: row indices per query), then per
    band of candidate token counts (``lengths`` per row) under ``by_tokens``, each with its
    ``pairs``; a band where no query keeps two candidates has no ranking and is left out."""
    out: dict[str, Any] = {}
    for low, high in bands:
        kept = [[i for i in g if low <= lengths[i] <= high] for g in groups]
        if all(len(g) < 2 for g in kept):
            continue
        out[f"{low}-{high}"] = {"pairs": sum(len(g) for g in kept), **figures(kept)}
    return {**figures([list(g) for g in groups]), "by_tokens": out}


def query_document_corpus(
    corpus: Any, queries: Sequence[Sized], bands: Sequence[tuple[int, int]]
) -> dict[str, Any]:
    """``quality.json``'s ``corpus`` record of a query/document measurement: the rerankers'
    docstring pairs (``corpus``: its ``groups`` and candidate ``lengths``) with the queries
    encoded as queries (``queries``: their token rows) and the candidates as documents."""
    from models.text.quality.corpus import load_snapshot

    return {
        "source": f"Python {load_snapshot()['python']} standard-library docstrings "
        "(modules, classes, functions; tests/idlelib/lib2to3 excluded): query = a docstring's "
        "first sentence (encoded as a query), candidates = text from it and the next "
        "docstrings (encoded as documents), cut to lengths spread over each band",
        **pair_counts(corpus.groups, corpus.lengths, bands),
        "query_tokens_max": max(len(row) for row in queries),
    }


def pair_counts(
    groups: Sequence[Sequence[int]], lengths: Sequence[int], bands: Sequence[tuple[int, int]]
) -> dict[str, Any]:
    """A pair corpus's sizes in ``quality.json``'s ``corpus`` record: pairs, queries (``groups``:
    each query's pair indices), candidates per query, the longest band's top and the pairs'
    token counts (``lengths``: min, median, max)."""
    return {
        "pairs": len(lengths),
        "queries": len(groups),
        "candidates_per_query": max(len(g) for g in groups),
        "max_tokens": max(high for _, high in bands),
        "tokens_min": min(lengths),
        "tokens_median": int(statistics.median(lengths)),
        "tokens_max": max(lengths),
    }
