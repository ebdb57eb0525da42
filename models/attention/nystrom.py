"""Nyströmformer attention (Xiong et al., "Nyströmformer", AAAI 2021, §3).

softmax(QKᵀ/√d) is approximated from ``m`` landmarks (segment means of queries and keys):

    Ŝ = softmax(Q K̃ᵀ) · pinv(softmax(Q̃ K̃ᵀ)) · softmax(Q̃ Kᵀ)

with the pseudo-inverse from the iterative scheme of Razavi et al. (2014) that the paper uses
(6 iterations by default), computed in fp32. O(L·m·d) time and memory linear in L.

Differences from the reference code (mlpen/Nystromformer, lucidrains/nystrom-attention):
    * Landmarks are means of ``m`` near-equal segments of each row's *real* tokens, so any length
      works (no padding to a multiple of ``m``) and padding never moves a segment boundary.
    * The pseudo-inverse's initial scaling uses each (row, head)'s own norms, not a maximum over
      the whole batch, so a row's output does not depend on the rows batched with it.
    * No depthwise-convolution skip on V: that is a learned layer, not part of attention.
    * A row with at most ``m`` real keys gets exact attention (Nyström is exact only in the limit).
There is no causal variant: segment means mix future tokens into every landmark.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from models.attention.base import Backend, Capabilities, IntOption, working_precision
from models.attention.full import full_attention


def segment_means(x: Tensor, real: Tensor | None, num_segments: int) -> tuple[Tensor, Tensor]:
    """Means of ``num_segments`` near-equal segments of each row's real positions.

    x: ``[b, h, n, d]``; real: bool ``[b, n]`` or None (every position real). Returns landmarks
    ``[b, h, s, d]`` and which segments are non-empty ``[b, s]`` (a row with fewer real tokens
    than segments has empties).
    """
    b, h, n, d = x.shape
    if real is None and n % num_segments == 0:  # equal contiguous segments: a reshape
        means = x.reshape(b, h, num_segments, n // num_segments, d).mean(dim=-2)
        return means, torch.ones(b, num_segments, dtype=torch.bool, device=x.device)
    if real is None:
        real = torch.ones(b, n, dtype=torch.bool, device=x.device)
    count = real.sum(dim=-1, keepdim=True)  # [b, 1]
    rank = real.cumsum(dim=-1) - 1  # rank of each real token within its row
    segment = torch.div(rank * num_segments, count.clamp_min(1), rounding_mode="floor")
    segment = torch.where(real, segment, torch.full_like(segment, num_segments))  # pad -> bin s
    assign = torch.zeros(b, num_segments + 1, n, dtype=x.dtype, device=x.device)
    assign.scatter_(1, segment[:, None, :], 1.0)
    assign = assign[:, :num_segments]
    sizes = assign.sum(dim=-1)  # [b, s]
    means = torch.einsum("bsn,bhnd->bhsd", assign, x) / sizes.clamp_min(1.0)[:, None, :, None]
    return means, sizes > 0


def iterative_pinv(a: Tensor, iterations: int) -> Tensor:
    """Moore–Penrose pseudo-inverse of ``[..., m, m]`` by the Razavi et al. iteration, in fp32+.

    Z₀ = Aᵀ / (‖A‖₁‖A‖∞), then Z ← ¼ Z (13I − AZ (15I − AZ (7I − AZ))). Zero rows/columns of A
    (empty landmarks) stay zero in Z.
    """
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    col = a.abs().sum(dim=-2).amax(dim=-1)
    row = a.abs().sum(dim=-1).amax(dim=-1)
    z = a.transpose(-1, -2) / (col * row).clamp_min(torch.finfo(a.dtype).tiny)[..., None, None]
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


def _masked_softmax(scores: Tensor, allowed: Tensor | None) -> Tensor:
    if allowed is None:
        return scores.softmax(dim=-1)
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1) * allowed.any(dim=-1, keepdim=True)


def _nystrom(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_real: Tensor | None,
    query_real: Tensor | None,
    m: int,
    iterations: int,
) -> Tensor:
    """The Nyström product; ``*_real`` None means no padding (the fast, mask-free path)."""
    q = q * (1.0 / math.sqrt(q.shape[-1]))
    q_land, q_land_ok = segment_means(q, query_real, m)  # [b,h,m,d], [b,m]
    k_land, k_land_ok = segment_means(k, key_real, m)
    # Every landmark is non-empty when each row has at least m real tokens (the usual case).
    k_ok = None if bool(k_land_ok.all()) else k_land_ok[:, None, None, :]
    q_ok = None if bool(q_land_ok.all()) else q_land_ok[:, None, :, None]
    kernel_1 = _masked_softmax(q @ k_land.transpose(-1, -2), k_ok)
    kernel_2 = _masked_softmax(q_land @ k_land.transpose(-1, -2), k_ok)
    kernel_3 = _masked_softmax(
        q_land @ k.transpose(-1, -2), None if key_real is None else key_real[:, None, None, :]
    )
    if q_ok is not None:  # empty query landmarks: zero rows
        kernel_2, kernel_3 = kernel_2 * q_ok, kernel_3 * q_ok
    return kernel_1 @ (iterative_pinv(kernel_2, iterations) @ (kernel_3 @ v))


def _exact_short_rows(q: Tensor, k: Tensor, v: Tensor, key_real: Tensor, m: int) -> Tensor:
    """Exact attention for rows with at most ``m`` real keys, in O(Lq·m): gather those keys."""
    order = torch.argsort((~key_real).to(torch.uint8), dim=-1, stable=True)[:, :m]  # [b, m]
    b, h, _, d = k.shape
    index = order[:, None, :, None].expand(b, h, order.shape[-1], d)
    k_small, v_small = torch.gather(k, 2, index), torch.gather(v, 2, index)
    return full_attention(q, k_small, v_small, torch.gather(key_real, 1, order))


def nystrom_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    causal: bool = False,
    num_landmarks: int = 64,
    pinv_iterations: int = 6,
) -> Tensor:
    """Nyström attention, ``[b,h,i,d] x [b,h,j,d] x [b,h,j,d] -> [b,h,i,d]`` (non-causal)."""
    if causal:  # the registry refuses this first; kept for direct callers
        raise ValueError("nystrom has no causal variant")
    lq = q.shape[-2]
    lk = k.shape[-2]
    m = num_landmarks
    if lk <= m:  # every row has at most m keys: exact attention is as cheap as the approximation
        return full_attention(q, k, v, key_padding_mask)
    out_dtype = q.dtype
    q, k, v = working_precision(q, k, v)
    if key_padding_mask is None:
        return _nystrom(q, k, v, None, None, m, pinv_iterations).to(out_dtype)
    key_real = key_padding_mask
    # Self-attention: the key padding mask also marks padded queries (kept out of landmarks).
    query_real = key_real if lq == lk else None
    short = key_real.sum(dim=-1) <= m  # [b]
    if bool(short.all()):
        return _exact_short_rows(q, k, v, key_real, m).to(out_dtype)
    out = _nystrom(q, k, v, key_real, query_real, m, pinv_iterations)
    if bool(short.any()):
        exact = _exact_short_rows(q, k, v, key_real, m)
        out = torch.where(short[:, None, None, None], exact, out)
    return out.to(out_dtype)


BACKEND = Backend(
    name="nystrom",
    exact=False,
    summary=(
        "Nyströmformer: softmax approximated through m segment-mean landmarks and an iterative "
        "pseudo-inverse; O(L·m·d), exact for rows with at most m keys. No causal variant."
    ),
    citation="Xiong et al., Nyströmformer, AAAI 2021",
    kernel=nystrom_attention,
    capabilities=Capabilities(causal=False, causal_cross_attention=False),
    options={
        "num_landmarks": IntOption(
            default=64, minimum=1, maximum=1024, description="Landmarks m (segment means)."
        ),
        "pinv_iterations": IntOption(
            default=6,
            minimum=1,
            maximum=30,
            description="Iterations of the Moore–Penrose pseudo-inverse approximation.",
        ),
    },
)
