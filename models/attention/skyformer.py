"""Skyformer attention (Chen, Zeng, Ji, Yang, "Skyformer: Remodel Self-Attention with Gaussian
Kernel and Nyström Method", NeurIPS 2021, §3–4).

The ``Lq x Lk`` attention matrix is one block of the kernel matrix B̄ of the *stacked* queries and
keys X = [Q; K] (``Lq + Lk`` points). B̄ is positive semi-definite, so the symmetric Nyström
method applies: with ``m`` landmarks L taken from the stacked set,

    B̄ ≈ κ(X, L) · κ(L, L)⁺ · κ(L, X),   so   κ(Q, K) ≈ κ(Q, L) · κ(L, L)⁺ · κ(L, K).

Two kernels (option ``kernel``), both on q, k scaled by ``d^-1/4``:
    * ``gaussian`` (the paper's, for models trained with it): κ(q, k) = exp(−‖q − k‖² / 2), used
      unnormalised, out = κ(Q, K)·V, with the authors' ridge κ(L, L) + 0.1·I.
    * ``softmax`` (default, for pretrained softmax models): κ(q, k) = exp(q·k), i.e.
      exp(q·k/√d) on the unscaled inputs, PSD by the Schur product theorem. Since
      exp(q·k) = e^{‖q‖²/2} · exp(−‖q − k‖²/2) · e^{‖k‖²/2}, its Nyström approximation is the
      Gaussian one between the same diagonal factors (a diagonal rescaling of the landmarks
      cancels in κ(Q,L)κ(L,L)⁺κ(L,K)); the query factor then cancels in softmax's row
      normalisation, so only the key factor e^{‖k‖²/2} (its maximum taken out) is formed, and
      every kernel entry stays in (0, 1]. Rows are normalised by the same approximation of
      softmax's denominator; a query whose approximate denominator is not positive gets the mean
      of the values.

κ(L, L)⁺ comes from the iterative scheme of Razavi et al. (2014) that the authors use
(:func:`models.attention.nystrom.iterative_pinv`, the same Newton–Schulz-type iteration), on
κ(L, L) symmetrically normalised by its row sums D (D^-½ W D^-½, spectral radius 1) and started
from Aᵀ/‖A‖₁ as the authors do, then un-normalised: W⁺ ≈ D^-½ A⁺ D^-½. O((Lq + Lk)·m·d) time,
memory linear in length, all in float32 (:func:`models.attention.base.working_precision`).

Differences from the reference code (pkuzengqi/Skyformer, ``src/models/attention_skyformer.py``):
    * Landmarks (``landmarks="uniform"``, the default) are the authors' choice, ``m`` positions
      drawn uniformly with replacement, the first ``m // 2`` among the real queries and the rest
      among the real keys, but from one *fixed-seed* draw shared by every row (the reference
      draws anew on every call), so a row's landmarks depend only on its own length, never on
      the call or the rows batched with it. ``segment_means`` (means of ``m`` near-equal
      segments of the row's real stacked points, as ``nystrom`` takes them) is the alternative;
      on the trained MiniLM it is far worse (the means of a few points lie where no query or
      key is, in the Gaussian's sense).
    * The inputs are scaled by ``d^-1/4`` of their own head dimension (the paper's 2√p); the
      reference code fixes ``32^-1/4``.
    * The pseudo-inverse's initial scaling ‖A‖₁ is taken per (row, head), not over the whole
      batch, so a row's output does not depend on the rows batched with it.
    * The softmax kernel is not in the reference code (issue #45: pretrained softmax models).
      Two steps make it usable on them, neither changing exact softmax attention: the queries
      and the keys are each centred (means over the row's real positions; the query shift
      becomes a key factor, the key shift a per-query constant that cancels), which brings the
      two clouds together so the query–key block of B̄ is not vanishingly small beside the
      query–query and key–key blocks (mean cosine on MiniLM at m = 64: 0.84 uncentred, 0.94
      centred); and every output coordinate is clamped between the values' least and greatest
      over the real keys, where softmax attention's lies, which only moves a row closer to the
      exact one and bounds the rows whose approximate denominator is near zero.
    * Softmax kernel: a row with at most ``m`` real keys gets exact softmax attention (``full``),
      as ``nystrom`` does. The Gaussian kernel is Nyström at every length, as in the reference
      code (no exact path; landmarks drawn with replacement, so a row shorter than ``m`` repeats
      some, and the ridge keeps κ(L, L) invertible): a model trained with it expects that
      function, and an exact path below ``m`` would make the output jump at length ``m``.
There is no causal variant: landmarks mix every position into every output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache, partial
from typing import Any, Literal

import torch
from torch import Tensor

from models.attention.base import (
    Backend,
    ChoiceOption,
    masked_mean_values,
    working_precision,
)
from models.attention.full import full_attention, full_bytes, full_work
from models.attention.nystrom import (
    LANDMARK_CAPABILITIES,
    PINV_ITERATIONS,
    iterative_pinv,
    num_landmarks_option,
    segment_means,
    short_rows_exact,
)
from models.attention.pricing import (
    ELEMENTWISE,
    HEAD_MATMUL,
    INDEX,
    MATMUL,
    AttentionCall,
    in_float32,
)

KernelName = Literal["softmax", "gaussian"]
Selection = Literal["segment_means", "uniform"]
RIDGE = 0.1  # the authors' κ(L, L) + 0.1·I for the Gaussian kernel
UNIFORM_SEED = 0  # the one draw of positions for landmarks="uniform"


def gaussian_kernel(x: Tensor, y: Tensor) -> Tensor:
    """exp(−‖x − y‖² / 2) for ``[..., n, d] x [..., p, d] -> [..., n, p]`` (entries in (0, 1])."""
    out = x @ y.transpose(-1, -2)
    out.sub_(x.square().sum(dim=-1, keepdim=True) / 2)
    out.sub_(y.square().sum(dim=-1)[..., None, :] / 2)
    return out.clamp_max_(0.0).exp_()  # rounding can push ‖x − x‖² below zero


def gaussian_attention(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None
) -> Tensor:
    """Exact (unnormalised) Gaussian-kernel attention: exp(−‖q − k‖² / 2√d)·V over real keys,
    as the authors' "kernelized attention" (``SoftmaxAttention_RBF``): what ``kernel="gaussian"``
    approximates (a reference for tests and docs; the backend itself is always Nyström)."""
    scale = q.shape[-1] ** -0.25
    weights = gaussian_kernel(q * scale, k * scale)
    if key_padding_mask is not None:
        weights = weights * key_padding_mask[:, None, None, :]
    return weights @ v


@lru_cache(maxsize=32)
def _uniform_draw(m: int, device: str) -> Tensor:
    """The one fixed-seed draw of ``m`` uniform numbers, made once per size and device (every
    layer of every call reads the same draw). Read-only: callers slice it, never write to it."""
    return torch.rand(m, generator=torch.Generator().manual_seed(UNIFORM_SEED)).to(device)


def uniform_landmarks(
    q: Tensor, k: Tensor, query_real: Tensor | None, key_real: Tensor | None, m: int
) -> Tensor:
    """The authors' landmark positions in the stacked ``[b, Lq + Lk]`` set of ``q``'s and
    ``k``'s points: ``m`` uniform draws (one fixed-seed draw for every row), ``m // 2`` scaled
    to the row's real query count and the rest to its real key count, mapped to those real
    positions. Returns ``[b, m]`` indices, the first ``m // 2`` below ``Lq``."""
    b, lq, lk = q.shape[0], q.shape[2], k.shape[2]
    draw = _uniform_draw(m, str(q.device))
    half = m // 2
    parts = []
    for real, length, offset, u in (
        (query_real, lq, 0, draw[:half]),
        (key_real, lk, lq, draw[half:]),
    ):
        if real is None:
            real = torch.ones(b, length, dtype=torch.bool, device=q.device)
        count = real.sum(dim=-1, keepdim=True)
        # float32 product then truncation, as the reference code's ``einsum(...).long()``
        rank = (u[None, :] * count.to(torch.float32)).long().clamp_max(count - 1).clamp_min(0)
        order = torch.argsort((~real).to(torch.uint8), dim=-1, stable=True)  # real ones first
        parts.append(torch.gather(order, 1, rank) + offset)
    return torch.cat(parts, dim=1)


def _rows(x: Tensor, index: Tensor) -> Tensor:
    """``x[b, :, index[b]]`` for ``[b, h, L, d]`` and ``[b, n]`` indices: ``[b, h, n, d]``."""
    b, h, _, d = x.shape
    return torch.gather(x, 2, index[:, None, :, None].expand(b, h, index.shape[1], d))


def skyformer_nystrom(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_real: Tensor | None = None,
    query_real: Tensor | None = None,
    num_landmarks: int = 64,
    kernel: KernelName = "softmax",
    landmarks: Selection = "uniform",
    pinv_iterations: int = 6,
) -> Tensor:
    """The symmetric Nyström product alone (no exact fallback), in the inputs' precision.

    ``*_real``: bool ``[b, L]`` (None: every position real); padded points are kept out of the
    landmarks, padded keys out of every sum.
    """
    b, _, lq, d = q.shape
    m = num_landmarks
    scale = d**-0.25
    q, k = q * scale, k * scale
    if kernel == "softmax":
        # Centre both clouds; softmax is unchanged: q·k = (q−q̄)·(k−k̄) + q̄·k + (q−q̄)·k̄, the
        # last term a per-query constant (cancels in the normalisation), q̄·k a key factor.
        q_mean = masked_mean_values(q, query_real)  # [b, h, 1, d]
        key_log_weight = (k @ q_mean.transpose(-1, -2))[..., 0]  # [b, h, Lk]
        q, k = q - q_mean, k - masked_mean_values(k, key_real)
    ok = None
    if landmarks == "uniform":
        # Gathered from each cloud: the stacked set itself is never built.
        index = uniform_landmarks(q, k, query_real, key_real, m)  # [b, m]
        half = m // 2
        land = torch.cat(
            [_rows(q, index[:, :half]), _rows(k, index[:, half:] - lq)], dim=2
        )  # [b, h, m, d]
    else:
        x = torch.cat([q, k], dim=2)  # [b, h, Lq+Lk, d]: the stacked set
        real = None
        if key_real is not None or query_real is not None:
            ones = torch.ones(b, 1, dtype=torch.bool, device=q.device)
            parts = [query_real, key_real]
            lengths = [lq, k.shape[2]]
            real = torch.cat(
                [
                    ones.expand(b, n) if r is None else r
                    for r, n in zip(parts, lengths, strict=True)
                ],
                1,
            )
        land, land_ok = segment_means(x, real, m)  # [b, h, m, d], [b, m]
        del x
        if not bool(land_ok.all()):  # rows with fewer real points than m: empty landmarks
            ok = land_ok[:, None, :].to(q.dtype)  # [b, 1, m]
    w = gaussian_kernel(land, land)  # [b, h, m, m]
    if kernel == "gaussian":
        w.diagonal(dim1=-2, dim2=-1).add_(RIDGE)
    if ok is not None:
        w = w * ok[..., :, None] * ok[..., None, :]
    # Symmetric normalisation by the row sums (spectral radius 1), the authors' preconditioning.
    degree = w.sum(dim=-1)  # [b, h, m]
    s = torch.where(degree > 0, degree.clamp_min(torch.finfo(w.dtype).tiny).rsqrt(), 0.0)
    a = s[..., :, None] * w * s[..., None, :]
    del w
    start = a.transpose(-1, -2) / a.sum(dim=-2).amax(dim=-1).clamp_min(1e-30)[..., None, None]
    core = s[..., :, None] * iterative_pinv(a, pinv_iterations, initial=start) * s[..., None, :]
    del a, start
    # Values (and, for softmax, the key factor and a column of ones for the denominator).
    if kernel == "softmax":
        # exp(q·k) = e^{‖q‖²/2}·exp(−‖q − k‖²/2)·e^{‖k‖²/2}; the query factor cancels.
        key_log_weight += k.square().sum(dim=-1) / 2
        if key_real is not None:
            key_log_weight.masked_fill_(~key_real[:, None, :], float("-inf"))
        top = key_log_weight.amax(dim=-1, keepdim=True)
        top = torch.where(torch.isfinite(top), top, 0.0)  # an all-pad row: no -inf - -inf
        weight = torch.exp(key_log_weight - top)[..., None]  # [b, h, Lk, 1], 0 at padded keys
        values = torch.cat([v * weight, weight], dim=-1)  # [b, h, Lk, d+1]
    else:
        values = v if key_real is None else v * key_real[:, None, :, None]
    g_kl = gaussian_kernel(k, land)  # [b, h, Lk, m]
    if ok is not None:
        g_kl = g_kl * ok[..., None, :]
    context = core @ (g_kl.transpose(-1, -2) @ values)  # [b, h, m, d(+1)]
    del g_kl, values, core
    out = gaussian_kernel(q, land) @ context  # [b, h, Lq, d(+1)]
    if kernel == "gaussian":
        return out
    numerator, denominator = out[..., :-1], out[..., -1:]
    fallback = masked_mean_values(v, key_real)  # [b, h, 1, d]
    positive = denominator > 0
    out = torch.where(positive, numerator / torch.where(positive, denominator, 1.0), fallback)
    # Softmax attention is a convex combination of the values, so each coordinate lies between
    # the values' least and greatest: clamping into that box can only move an approximate row
    # closer to the exact one, and bounds the rows whose denominator is nearly zero.
    if key_real is None:
        low, high = v.amin(dim=-2, keepdim=True), v.amax(dim=-2, keepdim=True)
    else:
        pad = ~key_real[:, None, :, None]
        low = v.masked_fill(pad, float("inf")).amin(dim=-2, keepdim=True)
        high = v.masked_fill(pad, float("-inf")).amax(dim=-2, keepdim=True)
    return out.clamp_(low, high)


def skyformer_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    causal: bool = False,
    num_landmarks: int = 64,
    kernel: KernelName = "softmax",
    landmarks: Selection = "uniform",
    pinv_iterations: int = 6,
) -> Tensor:
    """Skyformer attention, ``[b,h,i,d] x [b,h,j,d] x [b,h,j,d] -> [b,h,i,d]`` (non-causal)."""
    if causal:  # the registry refuses this first; kept for direct callers
        raise ValueError("skyformer has no causal variant")
    m = num_landmarks
    out_dtype = q.dtype
    q, k, v = working_precision(q, k, v)
    approximate = partial(
        skyformer_nystrom,
        num_landmarks=m,
        kernel=kernel,
        landmarks=landmarks,
        pinv_iterations=pinv_iterations,
    )
    if kernel == "gaussian":  # Nyström at every length, as the authors' code (module docstring)
        key_real = key_padding_mask
        query_real = key_real if q.shape[-2] == k.shape[-2] else None  # self-attention
        return approximate(q, k, v, key_real, query_real).to(out_dtype)
    if k.shape[-2] <= m:  # every row has at most m keys: exact is as cheap as the approximation
        return full_attention(q, k, v, key_padding_mask).to(out_dtype)
    return short_rows_exact(q, k, v, key_padding_mask, m, approximate).to(out_dtype)


def skyformer_bytes(call: AttentionCall, options: Mapping[str, Any]) -> int:
    """Peak bytes (``m`` landmarks; exact attention in float32 when the softmax kernel has
    ``Lk <= m``): linear in length.

    Alive throughout the product: the scaled (softmax: and centred) queries and keys, ``n·d``
    with ``n = Lq + Lk``. Then, in order: softmax's centring copies (padded: the masked means'
    ``[b, h, L, d]`` temporaries); the landmarks, gathered from the two clouds (``uniform``: the
    stacked set is never built) or, for ``segment_means`` only, the stacked set ``[b, h, n, d]``
    and its means (a ``[b, m+1, n]`` assignment matrix and a copy of the set, unless a reshape
    does); the ``m x m`` kernel, its normalised copy and the pseudo-inverse's temporaries (about
    twelve ``m x m``); the values (softmax: with the key factor and the denominator's column,
    ``[b, h, Lk, d+1]``, beside ``v·weight``; Gaussian: the masked values when padded) and
    κ(K, L) ``[b, h, Lk, m]`` with its ``[b, h, Lk, d]`` squares; κ(Q, L) ``[b, h, Lq, m]`` and
    the product ``[b, h, Lq, d+1]``; softmax's normalised output. A padded softmax call may also
    run exact attention on rows with at most ``m`` real keys (``[b, h, Lq, m]`` scores, up to
    three copies) and merges the two.
    """
    m = options["num_landmarks"]
    work, cast = in_float32(call)
    if options["kernel"] == "softmax" and call.lk <= m:  # Gaussian: Nyström at every length
        return cast + full_bytes(replace(call, itemsize=work), {})
    lq, lk, d, bh = call.lq, call.lk, call.d, call.heads
    n = lq + lk
    softmax = options["kernel"] == "softmax"
    extra = 1 if softmax else 0  # the denominator's column
    points = bh * n * d  # scaled (centred) q and k
    if options["landmarks"] == "segment_means":
        # the stacked set and its means: a reshape when unpadded and m divides n, else an
        # einsum over the assignment matrix, which makes its own copy of the stacked set
        copies = 1 if not call.padded and n % m == 0 else 2
        select = copies * bh * n * d + call.b * (m + 1) * n + bh * m * d
    else:
        select = 2 * bh * m * d  # the two gathered halves and their concatenation
    # softmax: v·weight (then k's squares) beside the values with their column; Gaussian: k's
    # squares, and the masked values when padded
    values = lk * (2 * d + extra) if softmax else lk * d * (2 if call.padded else 1)
    phases = [
        points + select,  # the landmarks
        points + bh * (m * d + 12 * m * m),  # landmark kernel, pseudo-inverse
        points + bh * (m * d + m * m + values + lk * m),  # values, κ(K, L)
        points + bh * (m * d + lq * m + lq * (d + extra)),  # κ(Q, L) (q's squares), product
    ]
    if softmax:  # centring: new q and k beside the scaled ones (padded: masked copies); the
        # normalisation and the output (the Gaussian kernel's output is the product itself)
        phases.append(points + bh * n * d + (bh * max(lq, lk) * d if call.padded else 0))
        phases.append(points + bh * lq * (3 * d + extra))
    if softmax and call.padded:  # rows with at most m real keys: exact attention, torch.where
        phases += [call.queries + bh * lq * m * 3, 2 * call.queries]
    return cast + max(phases) * work + call.b * n * INDEX * 2


def skyformer_work(call: AttentionCall, options: Mapping[str, Any]) -> float:
    """Flop-equivalents (``full``'s when the softmax kernel has ``Lk <= m``): scaling, centring
    (softmax) and selecting the landmarks, three Gaussian kernels κ(Q, L), κ(K, L), κ(L, L) (a
    product and four elementwise passes each), the iterative pseudo-inverse (five ``m x m``
    products per iteration) and the products right to left, then the normalisation."""
    m = options["num_landmarks"]
    if options["kernel"] == "softmax" and call.lk <= m:
        return full_work(call, {})
    iterations = options["pinv_iterations"]
    lq, lk, d = call.lq, call.lk, call.d
    n = lq + lk
    prepare = ELEMENTWISE * 3 * n * d
    select = ELEMENTWISE * (n if options["landmarks"] == "segment_means" else m) * d
    kernels = HEAD_MATMUL * (n * m + m * m) * d + ELEMENTWISE * 4 * (n * m + m * m)
    pinv = MATMUL * iterations * 5 * m**3  # square m x m products: dense-layer speed
    products = HEAD_MATMUL * (lk + m + lq) * m * (d + 1)
    normalise = ELEMENTWISE * (2 * lk + 3 * lq) * d
    return call.heads * (prepare + select + kernels + pinv + products + normalise)


BACKEND = Backend(
    name="skyformer",
    order=6,
    exact=False,
    summary=(
        "Skyformer: symmetric Nyström on the kernel matrix of the stacked queries and keys "
        "(m landmarks, iterative pseudo-inverse); the softmax kernel, normalised (exact for rows "
        "with at most m keys), or the paper's Gaussian kernel. O(L·m·d). No causal variant."
    ),
    citation="Chen, Zeng, Ji, Yang, Skyformer, NeurIPS 2021",
    kernel=skyformer_attention,
    budget="num_landmarks",
    memory=skyformer_bytes,
    work=skyformer_work,
    capabilities=LANDMARK_CAPABILITIES,
    options={
        "num_landmarks": num_landmarks_option(
            "Landmarks m, taken from the stacked queries and keys."
        ),
        "kernel": ChoiceOption(
            default="softmax",
            choices=("softmax", "gaussian"),
            description=(
                "softmax: exp(q·k/√d), row-normalised, for models trained with softmax; "
                "gaussian: the paper's exp(−‖q−k‖²/2√d), unnormalised, for models trained with it."
            ),
        ),
        "landmarks": ChoiceOption(
            default="uniform",
            choices=("uniform", "segment_means"),
            description=(
                "uniform: the authors' fixed-seed uniform positions, half among the queries and "
                "half among the keys; segment_means: means of m segments of the stacked set."
            ),
        ),
        "pinv_iterations": PINV_ITERATIONS,
    },
)
