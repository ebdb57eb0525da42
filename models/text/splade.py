"""SPLADE's sparse lexical vectors, as pure functions over packed tokens.

- SPLADE (Formal, Piwowarski & Clinchant, "SPLADE: Sparse Lexical and Expansion Model for First
  Stage Ranking", SIGIR 2021): a text's weight for vocabulary entry j is
  ``sum_i log(1 + relu(w_ij))`` over its tokens i, ``w`` the masked-language-model logits.
- SPLADE v2 (Formal, Lassance, Piwowarski & Clinchant, arXiv:2109.10086, 2021): the max over
  tokens instead of the sum (sentence-transformers' ``pooling_strategy: max``, the usual one).
- ``log1p_relu`` (OpenSearch's sparse encoders, arXiv:2504.14839, 2025): a second ``log1p``.
- Inference-free SPLADE (Geng et al., "Towards Competitive Search Relevance for Inference-Free
  Learned Sparse Retrievers", arXiv:2411.04403, 2024; sentence-transformers'
  ``SparseStaticEmbedding``): one side (usually the query) skips the network; a text's vector
  holds a fixed weight (an IDF) for each vocabulary entry among its tokens, counted once.

Dimension legend: b texts, t tokens of the batch (packed), V vocabulary size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

STRATEGIES = ("max", "sum")
ACTIVATIONS = ("relu", "log1p_relu")
# Tokens whose [chunk, V] logits exist at once: the vocabulary is wide (30522 for BERT), so a
# batch's whole [t, V] block would dwarf the network's own activations.
LOGIT_CHUNK_TOKENS = 512


def activate(logits: Tensor, activation: str) -> Tensor:
    """``log(1 + relu(x))`` (``relu``) or ``log(1 + log(1 + relu(x)))`` (``log1p_relu``),
    in place on ``logits``."""
    x = logits.relu_().log1p_()
    return x.log1p_() if activation == "log1p_relu" else x


def splade_pool(
    states: Tensor,
    rows: Tensor,
    batch_size: int,
    logits_of: Callable[[Tensor], Tensor],
    strategy: str = "max",
    activation: str = "relu",
) -> Tensor:
    """``[b, V]`` float32 SPLADE vectors from ``[t, c]`` packed token states, ``rows`` ``[t]``
    naming each token's text; ``logits_of`` maps ``[k, c]`` states to ``[k, V]`` logits.

    Logits are made :data:`LOGIT_CHUNK_TOKENS` tokens at a time and folded into the texts'
    vectors at once (max or sum by text). Every activated value is >= 0 and every text has a
    token, so a max started from zeros equals sentence-transformers' max started from -inf.
    """
    out: Tensor | None = None
    for start in range(0, states.shape[0], LOGIT_CHUNK_TOKENS):
        chunk = activate(logits_of(states[start : start + LOGIT_CHUNK_TOKENS]), activation)
        if out is None:  # a sum over hundreds of tokens accumulates in float64, rounded once
            wide = torch.float64 if strategy == "sum" else chunk.dtype
            out = chunk.new_zeros(batch_size, chunk.shape[-1], dtype=wide)
        index = rows[start : start + LOGIT_CHUNK_TOKENS]
        if strategy == "max":
            out.scatter_reduce_(0, index[:, None].expand_as(chunk), chunk, "amax")
        else:
            out.index_add_(0, index, chunk.to(out.dtype))
    assert out is not None, "a batch holds at least one token"
    return out.float()


def static_vectors(token_ids: list[list[int]], weight: Tensor) -> Tensor:
    """``[b, V]``: each text's vector holds ``weight[j]`` for every entry j among its tokens
    (present once or many times, the same), zero elsewhere."""
    out = weight.new_zeros(len(token_ids), weight.shape[0])
    for i, ids in enumerate(token_ids):
        present = torch.tensor(sorted(set(ids)), dtype=torch.long, device=weight.device)
        out[i, present] = weight[present]
    return out


def nonzero_entries(vectors: Tensor) -> list[tuple[list[int], list[float]]]:
    """Each row's non-zero entries: ``(indices, values)``, indices ascending."""
    out = []
    for row in vectors:
        index = torch.nonzero(row, as_tuple=True)[0]
        out.append((index.tolist(), row[index].tolist()))
    return out


def keep_largest(
    indices: list[int], values: list[float], k: int | None
) -> tuple[list[int], list[float]]:
    """The ``k`` entries of largest absolute value (None: all), still by ascending index, as
    sentence-transformers' ``select_max_active_dims`` keeps them (the dropped zeros cannot
    outrank a non-zero)."""
    if k is None or len(indices) <= k:
        return indices, values
    top = torch.topk(torch.tensor(values, dtype=torch.float32).abs(), k).indices
    kept = sorted(top.tolist())
    return [indices[i] for i in kept], [values[i] for i in kept]
