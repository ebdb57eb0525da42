"""Late-interaction scoring: MaxSim (ColBERT, Khattab & Zaharia, SIGIR 2020, section 3.3).

A query's score against a document is, over the query's token vectors, the sum of each one's
best dot product with any of the document's token vectors; MeanMaxSim divides it by the
query's token count (sentence-transformers' ``similarity_fn_name="meanmaxsim"``). Computed in
float32, as ``sentence_transformers.util.similarity.maxsim`` does.

Dimension legend: ``q`` query tokens, ``k`` a document's tokens, ``d`` vector width.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def maxsim_scores(query: Tensor, documents: Sequence[Tensor], mean: bool = False) -> list[float]:
    """MaxSim of ``query`` (``[q, d]``) against each of ``documents`` (``[k, d]`` each); with
    ``mean``, divided by ``q``. A document without vectors scores 0."""
    q = query.float()
    scores = []
    for document in documents:
        if document.shape[0] == 0 or q.shape[0] == 0:
            scores.append(0.0)
            continue
        best = (q @ document.float().T).amax(dim=1)  # [q, k] -> [q]
        total = best.sum()
        scores.append(float(total / q.shape[0] if mean else total))
    return scores


def pad_vectors(vectors: Sequence[Tensor]) -> Tensor:
    """``[n, k_max, d]`` zero-padded stack of ``[k_i, d]`` (for callers that batch scoring)."""
    return torch.nn.utils.rnn.pad_sequence(list(vectors), batch_first=True)
