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
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
from torch import Tensor

from models.attention.base import (
    Backend,
    Capabilities,
    IntOption,
    Kernel,
    masked_softmax,
    working_precision,
)
from models.attention.full import full_attention, full_bytes, full_work
from models.attention.pricing import (
    ELEMENTWISE,
    HEAD_MATMUL,
    INDEX,
    MATMUL,
    AttentionCall,
    in_float32,
)


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


# What a landmark method can do: every landmark mixes tokens from the whole sequence (future
# ones included), so there is no causal variant.
LANDMARK_CAPABILITIES = Capabilities(causal=False, causal_cross_attention=False)


def num_landmarks_option(description: str) -> IntOption:
    """The ``num_landmarks`` option of a landmark backend: m from 1 to 1,024, 64 by default."""
    return IntOption(default=64, minimum=1, maximum=1024, description=description)


# The pseudo-inverse's iteration count, an option of every backend that uses iterative_pinv.
PINV_ITERATIONS = IntOption(
    default=6,
    minimum=1,
    maximum=30,
    description="Iterations of the Moore–Penrose pseudo-inverse approximation.",
)


def iterative_pinv(a: Tensor, iterations: int, initial: Tensor | None = None) -> Tensor:
    """Moore–Penrose pseudo-inverse of ``[..., m, m]`` by the Razavi et al. iteration, in fp32+.

    Z₀ = ``initial``, by default Aᵀ / (‖A‖₁‖A‖∞), then Z ← ¼ Z (13I − AZ (15I − AZ (7I − AZ))).
    Zero rows/columns of A (empty landmarks) stay zero in Z.
    """
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
    z = initial
    if z is None:
        col = a.abs().sum(dim=-2).amax(dim=-1)
        row = a.abs().sum(dim=-1).amax(dim=-1)
        z = a.transpose(-1, -2) / (col * row).clamp_min(torch.finfo(a.dtype).tiny)[..., None, None]
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


def _nystrom(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_real: Tensor | None = None,
    query_real: Tensor | None = None,
    m: int = 64,
    iterations: int = 6,
) -> Tensor:
    """The Nyström product; ``*_real`` None means no padding (the fast, mask-free path)."""
    q = q * (1.0 / math.sqrt(q.shape[-1]))
    q_land, q_land_ok = segment_means(q, query_real, m)  # [b,h,m,d], [b,m]
    k_land, k_land_ok = segment_means(k, key_real, m)
    # Every landmark is non-empty when each row has at least m real tokens (the usual case).
    k_ok = None if bool(k_land_ok.all()) else k_land_ok[:, None, None, :]
    q_ok = None if bool(q_land_ok.all()) else q_land_ok[:, None, :, None]
    kernel_1 = masked_softmax(q @ k_land.transpose(-1, -2), k_ok)
    kernel_2 = masked_softmax(q_land @ k_land.transpose(-1, -2), k_ok)
    kernel_3 = masked_softmax(
        q_land @ k.transpose(-1, -2), None if key_real is None else key_real[:, None, None, :]
    )
    if q_ok is not None:  # empty query landmarks: zero rows
        kernel_2, kernel_3 = kernel_2 * q_ok, kernel_3 * q_ok
    return kernel_1 @ (iterative_pinv(kernel_2, iterations) @ (kernel_3 @ v))


def exact_short_rows(
    q: Tensor, k: Tensor, v: Tensor, key_real: Tensor, m: int, exact: Kernel = full_attention
) -> Tensor:
    """Exact attention (``exact``, softmax by default) for rows with at most ``m`` real keys,
    in O(Lq·m): gather those keys."""
    order = torch.argsort((~key_real).to(torch.uint8), dim=-1, stable=True)[:, :m]  # [b, m]
    b, h, _, d = k.shape
    index = order[:, None, :, None].expand(b, h, order.shape[-1], d)
    k_small, v_small = torch.gather(k, 2, index), torch.gather(v, 2, index)
    return exact(q, k_small, v_small, torch.gather(key_real, 1, order))


def short_rows_exact(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    m: int,
    approximate: Callable[..., Tensor],
    exact: Kernel = full_attention,
) -> Tensor:
    """A landmark method's padding rule: ``approximate(q, k, v[, key_real, query_real])`` for
    the rows with more than ``m`` real keys, ``exact`` attention (gathered, O(Lq·m)) for the
    others, where Nyström gains nothing and is exact only in the limit."""
    if key_padding_mask is None:
        return approximate(q, k, v)
    key_real = key_padding_mask
    # Self-attention: the key padding mask also marks padded queries (kept out of landmarks).
    query_real = key_real if q.shape[-2] == k.shape[-2] else None
    short = key_real.sum(dim=-1) <= m  # [b]
    if bool(short.all()):
        return exact_short_rows(q, k, v, key_real, m, exact)
    out = approximate(q, k, v, key_real, query_real)
    if bool(short.any()):
        exact_rows = exact_short_rows(q, k, v, key_real, m, exact)
        out = torch.where(short[:, None, None, None], exact_rows, out)
    return out


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
    m = num_landmarks
    if k.shape[-2] <= m:  # every row has at most m keys: exact is as cheap as the approximation
        return full_attention(q, k, v, key_padding_mask)
    out_dtype = q.dtype
    q, k, v = working_precision(q, k, v)

    approximate = partial(_nystrom, m=m, iterations=pinv_iterations)
    return short_rows_exact(q, k, v, key_padding_mask, m, approximate).to(out_dtype)


def nystrom_bytes(call: AttentionCall, options: Mapping[str, Any]) -> int:
    """Peak bytes (``m`` landmarks; ``full``'s when ``Lk <= m``): linear in length.

    Alive throughout: the scaled queries ``[b, h, Lq, d]``. Landmarks: segment means through a
    ``[b, m+1, L]`` assignment matrix and a contiguous copy of the input (a plain reshape when
    ``L`` is a multiple of ``m`` and nothing is padded). Kernels: ``softmax(q·k̃ᵀ)``
    ``[b, h, Lq, m]``, ``softmax(q̃·k̃ᵀ)`` ``[b, h, m, m]``, ``softmax(q̃·kᵀ)`` ``[b, h, m, Lk]``,
    each briefly twice (product, softmax; three times with a mask), then the pseudo-inverse's
    ``m x m`` temporaries. A padded call may also run exact attention on rows with at most ``m``
    real keys (``[b, h, Lq, m]`` scores, up to three copies) and merges the two results.
    """
    m = options["num_landmarks"]
    if call.lk <= m:
        return full_bytes(call, {})
    work, cast = in_float32(call)
    lq, lk, d, bh = call.lq, call.lk, call.d, call.heads
    copies = 3 if call.padded else 2  # transient copies of a kernel: product, (mask,) softmax

    def segment(n: int) -> int:
        if not call.padded and n % m == 0:
            return bh * m * d
        return call.b * (m + 1) * n + bh * n * d + bh * m * d  # assignment, contiguous x, means

    landmarks = 2 * bh * m * d
    phases = [
        segment(lq),
        bh * m * d + segment(lk),
        landmarks + bh * (copies * lq * m + 2 * m * m),
        landmarks + bh * (lq * m + m * m + copies * m * lk),
        bh * (lq * m + m * lk + 8 * m * m),  # iterative pseudo-inverse
        bh * (lq * m + m * lk + 2 * m * d + lq * d),  # products, output
    ]
    if call.padded:  # rows with at most m real keys: exact attention on m keys, torch.where
        phases += [call.queries + bh * lq * m * 3, 2 * call.queries]
    total = call.queries + max(phases)
    return cast + total * work + call.b * lk * INDEX * 3


def nystrom_work(call: AttentionCall, options: Mapping[str, Any]) -> float:
    """Flop-equivalents (``full``'s when ``Lk <= m``): segment means of q and k, three softmax
    kernels ``[Lq, m]``, ``[m, m]``, ``[m, Lk]``, the iterative pseudo-inverse (four ``m x m``
    products per iteration) and the products right to left."""
    m = options["num_landmarks"]
    if call.lk <= m:
        return full_work(call, {})
    iterations = options["pinv_iterations"]
    lq, lk, d = call.lq, call.lk, call.d
    means = ELEMENTWISE * (lq + lk) * d
    kernels = HEAD_MATMUL * (lq * m + m * m + m * lk) * d + ELEMENTWISE * 3 * (
        lq * m + m * m + m * lk
    )
    pinv = MATMUL * iterations * 5 * m**3  # square m x m products: dense-layer speed
    products = HEAD_MATMUL * (m * lk * d + m * m * d + lq * m * d)
    return call.heads * (means + kernels + pinv + products)


BACKEND = Backend(
    name="nystrom",
    order=5,
    exact=False,
    summary=(
        "Nyströmformer: softmax approximated through m segment-mean landmarks and an iterative "
        "pseudo-inverse; O(L·m·d), exact for rows with at most m keys. No causal variant."
    ),
    citation="Xiong et al., Nyströmformer, AAAI 2021",
    kernel=nystrom_attention,
    budget="num_landmarks",
    memory=nystrom_bytes,
    work=nystrom_work,
    capabilities=LANDMARK_CAPABILITIES,
    options={
        "num_landmarks": num_landmarks_option("Landmarks m (segment means)."),
        "pinv_iterations": PINV_ITERATIONS,
    },
)
