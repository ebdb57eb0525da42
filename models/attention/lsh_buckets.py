"""Angular LSH for :mod:`models.attention.reformer`: fixed rotations, the bucket of every
query or key, and the per-round sort orders (Kitaev, Kaiser, Levskaya, "Reformer: The Efficient
Transformer", ICLR 2020, §2; SMYRF's asymmetric transform: Daras, Kitaev, Odena, Dimakis,
NeurIPS 2020, §3). A helper module, not a backend (no ``BACKEND`` record).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

import torch
from torch import Tensor
from torch.nn import functional as F

Hashing = Literal["asymmetric", "shared"]
ROTATION_SEED = 2020  # the one seed every rotation is drawn from (offset by the round)


@lru_cache(maxsize=128)
def rotation(n_buckets: int, dim: int, round_: int, device: str, dtype: torch.dtype) -> Tensor:
    """The fixed rotations ``[dim, n_buckets / 2]`` of one hash round (read-only, cached).

    Drawn in float64 from a private generator, so float32 and float64 callers hash alike and
    round r is the same whatever ``num_hashes`` (more rounds only add rounds)."""
    g = torch.Generator().manual_seed(ROTATION_SEED + 7919 * round_)
    rot = torch.randn(dim, n_buckets // 2, generator=g, dtype=torch.float64)
    return rot.to(device=device, dtype=dtype)


def bucket_counts(real_count: Tensor, bucket_size: int) -> Tensor:
    """Buckets per row: 2·n/``bucket_size`` rounded to an even number, at least 2 (``[b]``)."""
    return (
        2 * torch.div(real_count + bucket_size // 2, bucket_size, rounding_mode="floor")
    ).clamp_min(2)


def angular_buckets(x: Tensor, real: Tensor, n_buckets: Tensor, round_: int) -> Tensor:
    """Bucket of every vector in one round: argmax([xR; −xR]) with the row's own rotations.

    x: ``[b, h, L, d']``; real: bool ``[b, L]``; n_buckets: ``[b]`` (even). Returns int64
    ``[b, h, L]``; a padded position gets a bucket after every real one, so it sorts last.
    Rows of one bucket count share a rotation; a row with fewer buckets than another in the
    batch uses the first columns of a zero-padded stack, the others masked out of the argmax.
    """
    dim = x.shape[-1]
    counts = sorted(set(n_buckets.tolist()))
    half = counts[-1] // 2
    stack = torch.stack(
        [
            F.pad(rotation(n, dim, round_, str(x.device), x.dtype), (0, half - n // 2))
            for n in counts
        ]
    )  # [U, d', half]
    which = torch.searchsorted(torch.tensor(counts, device=x.device), n_buckets)
    proj = x @ stack[which][:, None]  # [b, h, L, half]
    # argmax over [xR; −xR] without the concatenation: the larger of max(xR) and −min(xR),
    # the first half winning a tie (as argmax takes the first maximum).
    if len(counts) == 1:
        high, up = proj.max(dim=-1)
        low, down = proj.min(dim=-1)
    else:
        unused = torch.arange(half, device=x.device)[None, :] >= (n_buckets // 2)[:, None]
        unused = unused[:, None, None, :]
        high, up = proj.masked_fill(unused, float("-inf")).max(dim=-1)
        low, down = proj.masked_fill_(unused, float("inf")).min(dim=-1)
    del proj
    bucket = torch.where(high >= -low, up, down + half)
    return bucket.masked_fill_(~real[:, None, :], 2 * half)


def hash_inputs(q: Tensor, k: Tensor, real: Tensor, hashing: Hashing) -> tuple[Tensor, Tensor]:
    """What is hashed: SMYRF's F(q), G(k) (``[..., d+2]``), or q and k themselves (the angle
    of q/‖q‖ is that of q)."""
    if hashing == "shared":
        return q, k
    qn, kn = q.square().sum(dim=-1), k.square().sum(dim=-1)  # [b, h, L]
    pad = ~real[:, None, :]
    # M² per row and head over real tokens only: padding cannot change a row's hashes.
    m2 = qn.masked_fill(pad, 0).amax(dim=-1, keepdim=True) + kn.masked_fill(pad, 0).amax(
        dim=-1, keepdim=True
    )
    zero = torch.zeros_like(qn)[..., None]
    fq = torch.cat([q, (m2 - qn).clamp_min(0).sqrt()[..., None], zero], dim=-1)
    gk = torch.cat([k, zero, (m2 - kn).clamp_min(0).sqrt()[..., None]], dim=-1)
    return fq, gk


def inverse(perm: Tensor) -> Tensor:
    """The rank of every position in a permutation along the last dimension."""
    ranks = torch.arange(perm.shape[-1], device=perm.device).expand_as(perm)
    return torch.empty_like(perm).scatter_(-1, perm, ranks)


def sort_rounds(
    x: Tensor, real: Tensor, n_buckets: Tensor, rounds: int, bucket_size: int
) -> tuple[list[Tensor], list[Tensor]]:
    """Per round: the order sorting ``x`` by (bucket, position) (stable, so ties keep position
    order), ``[b, h, L]`` int64, and each position's chunk in it (int16 while chunk ids fit)."""
    small = torch.int16 if x.shape[-2] // bucket_size < 2**15 - 1 else torch.int32
    perms, chunk_ids = [], []
    for r in range(rounds):  # a few rounds; everything inside is batched
        perm = torch.argsort(angular_buckets(x, real, n_buckets, r), dim=-1, stable=True)
        perms.append(perm)
        chunk_ids.append(torch.div(inverse(perm), bucket_size, rounding_mode="floor").to(small))
    return perms, chunk_ids
