"""Position schemes that act inside attention: rotary embeddings and a bucketed relative bias.

Both are functions of the padded block length ``n`` only (a text's tokens sit at ``0..len-1`` of
its row), so each is built once per forward pass and shared by the layers that use it.

Legend: ``b`` texts, ``h`` heads, ``n`` padded length, ``d`` head dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def rotary_tables(n: int, head_dim: int, theta: float, device: torch.device) -> Tensor:
    """``[2, n, d]``: the cosines and sines rotary embedding multiplies by (Su et al.,
    "RoFormer", 2021, eq. 34), in float32, in the half-split layout (``rotate_half``) that
    GPT-NeoX and ModernBERT use."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.arange(n, device=device).float()[:, None] * inv_freq[None, :]  # [n, d/2]
    angles = torch.cat((angles, angles), dim=-1)  # [n, d]
    return torch.stack((angles.cos(), angles.sin()))


def apply_rotary(x: Tensor, tables: Tensor) -> Tensor:
    """Rotate ``x`` ``[b, h, n, d]`` by position: ``x cos + rotate_half(x) sin``, in float32."""
    cos, sin = tables[0], tables[1]
    x32 = x.float()
    half = x.shape[-1] // 2
    rotated = torch.cat((-x32[..., half:], x32[..., :half]), dim=-1)
    return (x32 * cos + rotated * sin).to(x.dtype)


def relative_buckets(n: int, num_buckets: int, max_distance: int, device: torch.device) -> Tensor:
    """``[n, n]`` bucket of each (query, key) offset: T5's bidirectional scheme (Raffel et al.
    2020, section 2.1) as MPNet uses it: half the buckets per direction, exact below a quarter of
    them, logarithmic up to ``max_distance``, the last bucket beyond."""
    offset = torch.arange(n, device=device)[None, :] - torch.arange(n, device=device)[:, None]
    distance = -offset  # MPNet buckets the query-minus-key distance
    half = num_buckets // 2
    bucket = (distance < 0).long() * half
    distance = distance.abs()
    exact = half // 2
    far = (
        exact
        + (
            torch.log(distance.float().clamp_min(1) / exact)
            / math.log(max_distance / exact)
            * (half - exact)
        ).long()
    )
    far = far.clamp_max(half - 1)
    return bucket + torch.where(distance < exact, distance, far)


def relative_bias(table: Tensor, buckets: Tensor) -> Tensor:
    """``[1, h, n, n]`` score bias from a learned ``[num_buckets, h]`` table."""
    return table[buckets].permute(2, 0, 1).unsqueeze(0)
