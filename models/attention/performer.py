"""Performer attention with FAVOR+ (Choromanski et al., "Rethinking Attention with Performers",
ICLR 2021, §2.3–2.4).

softmax(q·k/√d) is estimated by φ(q)·φ(k) with *positive* random features
``φ(x) = exp(ωᵀx − |x|²/2) / √m`` whose projections ω are orthogonal blocks with Gaussian-like
row norms (lower variance than i.i.d. features, §2.4). Attention then costs O(L·m·d):

    out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ  /  φ(q_i)ᵀ Σ_j φ(k_j)

Numerics (kept in fp32 even for half inputs): the exponent is shifted by a stabiliser before
``exp`` — per query row for φ(q) and over all *real* keys of a (batch row, head) for φ(k) — and a
small constant is added to every feature, as in the reference implementations. The shifts cancel
between numerator and denominator; taking the key maximum over real keys only keeps padding from
changing a row's result.
Causal mode uses prefix sums computed chunk by chunk (§B.1), so memory stays linear in L.
The random features are drawn once per (head_dim, num_features) from a fixed seed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from models.attention.base import Backend, Capabilities, IntOption, working_precision
from models.attention.pricing import ELEMENTWISE, HEAD_MATMUL, AttentionCall, in_float32

FEATURE_SEED = 0xFA7
# Prefix-sum chunk of causal mode. The in-chunk product is quadratic in the chunk, so smaller
# chunks cost less until the per-chunk loop dominates; 128 was the fastest at decoder lengths
# (144 to 1,024 tokens) on CPU, and bounds the in-chunk scores to 128² per (row, head).
CAUSAL_CHUNK = 128


def default_num_features(head_dim: int) -> int:
    """m ≈ d·ln d, the Performer paper's suggested feature count (266 for d = 64)."""
    return max(1, int(head_dim * math.log(max(head_dim, 2))))


# Run eagerly under torch.compile: traced, the cache would be bypassed and the seeded QR draws
# re-run inside the graph; called as-is, the compiled graph gets the cached tensor.
@torch.compiler.disable
@functools.lru_cache(maxsize=64)
def orthogonal_features(head_dim: int, num_features: int, device: str = "cpu") -> Tensor:
    """ω: ``[m, d]`` fp32, stacked orthogonal ``d x d`` blocks, each row scaled by a chi(d) norm.

    Drawn from a fixed seed on the CPU, so every process and device gets the same features.
    """
    gen = torch.Generator().manual_seed(FEATURE_SEED + 1009 * head_dim + num_features)
    blocks = []
    for _ in range(math.ceil(num_features / head_dim)):
        gaussian = torch.randn(head_dim, head_dim, generator=gen, dtype=torch.float64)
        ortho, _ = torch.linalg.qr(gaussian)
        blocks.append(ortho.T)
    omega = torch.cat(blocks)[:num_features]
    norms = torch.randn(num_features, head_dim, generator=gen, dtype=torch.float64).norm(dim=1)
    return (omega * norms[:, None]).to(device=device, dtype=torch.float32)


# Added to every feature after the max shift, as the reference implementations do: keeps
# denominators positive and shrinks the estimate towards uniform attention where the random
# features carry almost no signal (google-research/performer uses 1e-6, performer-pytorch 1e-4,
# both before their 1/√m scaling; we drop that scaling, which cancels in the ratio).
NUMERICAL_STABILISER = 1e-4


# Run eagerly under torch.compile, for the reason given at orthogonal_features.
@torch.compiler.disable
@functools.lru_cache(maxsize=64)
def signed_features(head_dim: int, pairs: int, device: str = "cpu") -> Tensor:
    """``[ω; −ω]``: ``[2·pairs, d]``, so that one product gives both halves of the hyperbolic
    features (and a max over it is the max of ``|ωᵀx|``)."""
    omega = orthogonal_features(head_dim, pairs, device)
    return torch.cat([omega, -omega])


def _positive_features(proj: Tensor, shift: Tensor) -> Tensor:
    """``exp(proj − shift) + ε``; in place on ``proj`` (a temporary) outside training."""
    if torch.is_grad_enabled() and (proj.requires_grad or shift.requires_grad):
        return (proj - shift).exp() + NUMERICAL_STABILISER  # in-place ops cannot be differentiated
    return proj.sub_(shift).exp_().add_(NUMERICAL_STABILISER)


def _feature_maps(
    q: Tensor, k: Tensor, key_padding_mask: Tensor | None, num_features: int
) -> tuple[Tensor, Tensor]:
    """φ(q), φ(k): ``[b,h,n,m]`` each, stabilised and without the (cancelling) 1/√m; padded
    keys get φ = 0.

    Hyperbolic positive features (the paper's Lemma 1, "SM^hyp+"): each projection ω is used
    as the antithetic pair (ω, −ω), φ(x) = e^(−|x|²/2) · [e^(ωᵀx), e^(−ωᵀx)], which has lower
    variance than m independent positive features at the same feature count. Both halves come
    out of one product with ``[ω; −ω]``, then shift, exp and ε run in place: at the head widths
    we serve these few passes over ``[b,h,n,m]`` are most of the kernel's time.
    """
    d = q.shape[-1]
    pairs = max(1, num_features // 2)
    scale = d**-0.25  # so that (q·d^-¼)·(k·d^-¼) = q·k/√d
    omega = signed_features(d, pairs, str(q.device)).to(q.dtype) * scale  # [m, d]
    half_sq = 0.5 * scale**2

    # Query stabiliser: the row's own max |projection| (a per-query constant, cancels).
    q_proj = torch.matmul(q, omega.T)  # [b,h,n,m]: ωᵀq then −ωᵀq
    q_shift = q_proj.amax(dim=-1, keepdim=True) + half_sq * q.pow(2).sum(-1, keepdim=True)
    phi_q = _positive_features(q_proj, q_shift)
    # Key stabiliser: one max over the real keys of a (row, head); padding must not move it.
    k_proj = torch.matmul(k, omega.T)
    k_abs = k_proj.amax(dim=-1, keepdim=True)  # [b,h,n,1]
    if key_padding_mask is not None:
        real = key_padding_mask[:, None, :, None]
        k_abs = k_abs.masked_fill(~real, -torch.inf)
    k_max = k_abs.amax(dim=-2, keepdim=True)
    k_max = torch.where(torch.isfinite(k_max), k_max, torch.zeros_like(k_max))  # all padding
    phi_k = _positive_features(k_proj, k_max + half_sq * k.pow(2).sum(-1, keepdim=True))
    if key_padding_mask is not None:  # padded keys leave numerator and denominator
        phi_k = phi_k * real
    return phi_q, phi_k


def _linear_attention(phi_q: Tensor, phi_k: Tensor, v: Tensor) -> Tensor:
    # A ones column appended to v makes the denominator Σ_j φ(q)·φ(k_j) come out of the same
    # matmul as the numerator.
    v1 = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
    kv = torch.matmul(phi_k.transpose(-1, -2), v1)  # [b,h,m,d+1]
    out = torch.matmul(phi_q, kv)
    return out[..., :-1] / out[..., -1:].clamp_min(torch.finfo(out.dtype).tiny)


def _causal_linear_attention(phi_q: Tensor, phi_k: Tensor, v: Tensor, chunk: int) -> Tensor:
    """Prefix-sum linear attention, one chunk at a time: O(L·m·d) time, O(chunk² + m·d) state."""
    b, h, n, m = phi_q.shape
    v1 = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)  # last column: the denominator
    state = phi_q.new_zeros(b, h, m, v1.shape[-1])  # Σ_{j < chunk start} φ(k_j) [v_j, 1]ᵀ
    out = torch.empty(b, h, n, v.shape[-1], dtype=v.dtype, device=v.device)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        qc, kc, vc = phi_q[:, :, start:stop], phi_k[:, :, start:stop], v1[:, :, start:stop]
        local = torch.matmul(qc, kc.transpose(-1, -2)).tril()
        acc = torch.matmul(qc, state) + torch.matmul(local, vc)
        out[:, :, start:stop] = acc[..., :-1] / acc[..., -1:].clamp_min(torch.finfo(acc.dtype).tiny)
        state = state + torch.matmul(kc.transpose(-1, -2), vc)
    return out


def performer_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    causal: bool = False,
    num_features: int | None = None,
) -> Tensor:
    """FAVOR+ attention, ``[b,h,i,d] x [b,h,j,d] x [b,h,j,d] -> [b,h,i,d]``."""
    out_dtype = q.dtype
    q, k, v = working_precision(q, k, v)
    m = num_features or default_num_features(q.shape[-1])
    phi_q, phi_k = _feature_maps(q, k, key_padding_mask, m)
    if causal:
        out = _causal_linear_attention(phi_q, phi_k, v, CAUSAL_CHUNK)
    else:
        out = _linear_attention(phi_q, phi_k, v)
    return out.to(out_dtype)


def performer_bytes(call: AttentionCall, options: Mapping[str, Any]) -> int:
    """Peak bytes (``m`` features used as ``m/2`` antithetic pairs ``p``): linear in length.

    Feature phase: the projections ``q·ωᵀ`` ``[b, h, Lq, p]`` and ``k·ωᵀ`` (alive until the
    feature maps return) and the maps φ(q) ``[b, h, Lq, m]``, φ(k) ``[b, h, Lk, m]`` (a second
    φ(k) when padding is masked out), plus a ``|k·ωᵀ|`` temporary. Product phase: φ(q), φ(k),
    ``[v, 1]`` ``[b, h, Lk, d+1]``, the numerator/denominator ``[b, h, Lq, d+1]`` and the
    output; the causal variant instead carries the prefix state ``[b, h, m, d+1]`` and a
    ``chunk x chunk`` block per step.
    """
    work, cast = in_float32(call)
    m = options["num_features"] or default_num_features(call.d)
    p = max(1, m // 2)
    f = 2 * p
    lq, lk, d = call.lq, call.lk, call.d
    phi_k = lk * f * (2 if call.padded else 1)
    features = lq * (p + f) + lk * (2 * p) + phi_k
    if call.causal:
        c = min(CAUSAL_CHUNK, lq)
        product = lq * f + phi_k + lk * (d + 1) + 2 * f * (d + 1) + lq * d
        product += 2 * c * c + 3 * c * (d + 1)
    else:
        product = lq * f + phi_k + lk * (d + 1) + f * (d + 1) + lq * (d + 1) + lq * d
    return cast + call.heads * max(features, product) * work


def performer_work(call: AttentionCall, options: Mapping[str, Any]) -> float:
    """Flop-equivalents: the projections of q and k onto the ``m/2`` feature pairs, the ``exp``
    feature maps ``[L, m]``, then ``φ(k)ᵀ[v, 1]`` and ``φ(q)·kv``; causal: the same per chunk,
    plus each chunk's ``chunk x chunk`` local block."""
    m = options["num_features"] or default_num_features(call.d)
    p = max(1, m // 2)
    lq, lk, d = call.lq, call.lk, call.d
    # projections, then per [L, m] map: the stabiliser's max, concatenation, exp, + epsilon
    features = HEAD_MATMUL * (lq + lk) * d * p + ELEMENTWISE * 4 * (lq + lk) * 2 * p
    if call.causal:
        c = min(CAUSAL_CHUNK, lq)
        product = HEAD_MATMUL * (lq * c * 2 * p + lq * c * (d + 1) + 2 * lq * 2 * p * (d + 1))
        product += ELEMENTWISE * 2 * lq * c
    else:
        product = HEAD_MATMUL * (lk + lq) * 2 * p * (d + 1)
    return call.heads * (features + product + ELEMENTWISE * lq * (d + 1))


BACKEND = Backend(
    name="performer",
    order=4,
    exact=False,
    summary=(
        "Performer FAVOR+: softmax kernel estimated with positive orthogonal random features; "
        "O(L·m·d) time and memory linear in L."
    ),
    citation="Choromanski et al., Rethinking Attention with Performers, ICLR 2021",
    kernel=performer_attention,
    budget="num_features",
    memory=performer_bytes,
    work=performer_work,
    capabilities=Capabilities(causal_cross_attention=False),
    options={
        "num_features": IntOption(
            default=None,
            minimum=8,
            maximum=4096,
            description=(
                "Random features m (used as m/2 antithetic pairs); default int(d·ln d), "
                "266 for head_dim 64."
            ),
        )
    },
)
