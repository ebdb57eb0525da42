"""Block layouts of BigBird attention (:mod:`models.attention.bigbird`): which key blocks each
query block sees, from a row's own length, and the fixed random blocks.

A helper module, not a backend (no ``BACKEND`` record). Dimension legend: ``b`` rows, ``n``
blocks, ``K`` key blocks per query block, ``r`` random blocks.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor

HASH_SEED = 20200728  # the fixed seed of the random-block hash (the paper's arXiv date)
_MODULUS = 2**31 - 1  # products below stay far under 2**63


def _pair_hash(rows: Tensor, cols: Tensor) -> Tensor:
    """A fixed pseudo-random int64 in [0, 2³¹) per (query block, key block) pair: a few rounds
    of a multiplicative congruential step with xor-shifts, the same on every device."""
    x = (rows * 92821 + cols * 68917 + HASH_SEED) % _MODULUS
    for _ in range(3):
        x = (x * 48271 + 12345) % _MODULUS
        x = x ^ (x >> 13)
    return x


@lru_cache(maxsize=256)
def random_blocks(
    num_blocks: int, window: int, global_blocks: int, num_random: int, causal: bool
) -> Tensor:
    """``[n, r]`` random key blocks of each query block of an ``n``-block row (-1: none).

    Candidates of block ``i``: non-causal, the blocks outside its window and outside the first
    and last ``g``; causal, the past blocks ``g <= j < i - w``. Block ``i`` takes the ``r``
    candidates with the smallest :func:`_pair_hash`, fewer when there are fewer candidates.
    Global query blocks take none (they see every key). Cached: read-only, on the CPU.
    """
    r = min(num_random, num_blocks)
    if r == 0:
        return torch.full((num_blocks, num_random), -1, dtype=torch.long)
    i = torch.arange(num_blocks)[:, None]
    j = torch.arange(num_blocks)[None, :]
    if causal:
        allowed = (j >= global_blocks) & (j < i - window)
    else:
        not_global = (j >= global_blocks) & (j < num_blocks - global_blocks)
        query_global = (i < global_blocks) | (i >= num_blocks - global_blocks)
        allowed = not_global & ((i - j).abs() > window) & ~query_global
    # Disallowed pairs sort last; the block number breaks (unlikely) ties deterministically.
    key = torch.where(allowed, _pair_hash(i, j), _MODULUS) * num_blocks + j
    chosen = key.topk(r, dim=-1, largest=False).indices  # [n, r]
    chosen = torch.where(allowed.gather(1, chosen), chosen, -1)
    return F.pad(chosen, (0, num_random - r), value=-1)


def row_blocks_of(
    key_padding_mask: Tensor | None, b: int, length: int, block: int, device
) -> Tensor:
    """``[b]`` blocks of each row: up to its last real key (0 for a row of padding only)."""
    if key_padding_mask is None:
        return torch.full((b,), math.ceil(length / block), dtype=torch.long, device=device)
    positions = torch.arange(1, length + 1, device=device)
    last = (key_padding_mask * positions).amax(dim=-1)  # last real key + 1, 0 if none
    return torch.div(last + block - 1, block, rounding_mode="floor")


def block_layout(
    row_blocks: Tensor, num_blocks: int, window: int, global_blocks: int, rand: Tensor, causal: bool
) -> tuple[Tensor, Tensor]:
    """Key blocks ``[b, n, K]`` of each query block and which are used (in range, not a repeat)."""
    b, device = row_blocks.shape[0], row_blocks.device
    i = torch.arange(num_blocks, device=device)
    offsets = torch.arange(-window, (0 if causal else window) + 1, device=device)
    parts = [(i[:, None] + offsets).expand(b, -1, -1)]
    first = torch.arange(global_blocks, device=device)
    parts.append(first.expand(b, num_blocks, -1))
    if not causal:  # the row's own last blocks
        last = row_blocks[:, None] - global_blocks + first
        parts.append(last[:, None, :].expand(-1, num_blocks, -1))
    parts.append(rand)
    index = torch.cat(parts, dim=-1)  # [b, n, K]
    ends = row_blocks[:, None, None]
    # Query blocks past the row's end (padding) keep their slots: they see the row's global
    # blocks, so their weights still sum to one over real keys, as in exact attention.
    used = (index >= 0) & (index < ends)
    if causal:
        used &= index <= i[:, None]
    # A block reached by an earlier slot is counted there only.
    k = index.shape[-1]
    earlier = torch.ones(k, k, dtype=torch.bool, device=device).tril(-1)
    repeat = (index[..., :, None] == index[..., None, :]) & used[..., None, :] & earlier
    used &= ~repeat.any(dim=-1)
    return torch.where(used, index, 0), used
