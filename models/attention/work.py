"""Arithmetic of one attention call, per backend: what a request costs before it runs.

    from models.attention.memory import AttentionCall
    from models.attention.work import attention_work
    attention_work("performer", AttentionCall(b=64, h=12, lq=256, lk=256, d=32), {"num_features": 4096})

The unit is a *flop-equivalent*: two per multiply-add of a dense layer's product
(:data:`HEAD_MATMUL` in the per-head products of attention), plus
:data:`ELEMENTWISE` per element of an elementwise pass (``exp``, softmax, masking, gathers, the
``1/√d`` scale). Elementwise passes are bound by memory traffic, not arithmetic, so one element
costs far more than one multiply-add of a product; without that weight, ``performer``'s feature
maps (an ``exp`` over ``[b, h, L, m]``) and ``full``'s softmax look nearly free and a large
``num_features`` is priced at a fraction of what it costs.

The service turns work into seconds with a rate per backend measured on its own device at
start-up (:mod:`service.engine.batching.cost`), so only the *ratios* between two calls of one backend
matter here: how cost grows with rows, length and options. Each function follows its kernel
(:mod:`models.attention`) top-down, as :mod:`models.attention.memory` does for bytes;
``benchmarks/attention/cost_model.py`` prints estimated against measured time.

Dimension legend (as :mod:`models.attention.base`): ``L`` lengths, ``d`` head dimension,
``m`` features / landmarks, ``U`` sampled keys, ``u`` active queries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from models.attention.memory import AttentionCall, ln_count
from models.attention.performer import CAUSAL_CHUNK, default_num_features
from models.attention.registry import get_backend

MATMUL = 2  # flops per multiply-add of a dense layer's product
# Per-head products (one side as narrow as the head dimension) run at a fraction of a dense
# layer's speed; measured on CPU, Performer's feature products cost about 2.5x their flops
# relative to the model's dense layers (benchmarks/results/cost-model-cpu.md).
HEAD_MATMUL = 5
ELEMENTWISE = 16  # flop-equivalents per element of a memory-bound elementwise pass

Work = Callable[[AttentionCall, Mapping[str, Any]], float]


def full_work(call: AttentionCall, options: Mapping[str, Any] | None = None) -> float:
    """``full``: ``q·kᵀ`` and ``weights·v`` over every pair (a causal mask still computes all of
    them), plus the scale, softmax (max, exp-sum, divide) and, when masked, the fill."""
    s = call.scores
    passes = 4 + (1 if call.causal or call.padded else 0)
    return HEAD_MATMUL * 2 * s * call.d + ELEMENTWISE * passes * s


def flash_work(call: AttentionCall, options: Mapping[str, Any] | None = None) -> float:
    """``flash`` (fused SDPA): the same two products, but the softmax stays in tiles (one pass)
    and a causal call skips the blocks above the diagonal (about half)."""
    s = call.scores / (2 if call.causal and call.lq == call.lk else 1)
    return HEAD_MATMUL * 2 * s * call.d + ELEMENTWISE * s


def performer_work(call: AttentionCall, options: Mapping[str, Any] | None = None) -> float:
    """``performer`` (FAVOR+, ``m`` features as ``m/2`` antithetic pairs): the projections of q
    and k onto the features, the ``exp`` feature maps ``[L, m]``, then ``φ(k)ᵀ[v, 1]`` and ``φ(q)·kv``; causal: the same per chunk, plus each
    chunk's ``chunk x chunk`` local block."""
    opts = options or {}
    m = opts.get("num_features") or default_num_features(call.d)
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


def nystrom_work(call: AttentionCall, options: Mapping[str, Any] | None = None) -> float:
    """``nystrom`` (``m`` landmarks, exact ``full`` when ``Lk <= m``): segment means of q and k,
    three softmax kernels ``[Lq, m]``, ``[m, m]``, ``[m, Lk]``, the iterative pseudo-inverse
    (four ``m x m`` products per iteration) and the products right to left."""
    opts = options or {}
    m = int(opts.get("num_landmarks") or 64)
    if call.lk <= m:
        return full_work(call)
    iterations = int(opts.get("pinv_iterations") or 6)
    lq, lk, d = call.lq, call.lk, call.d
    means = ELEMENTWISE * (lq + lk) * d
    kernels = HEAD_MATMUL * (lq * m + m * m + m * lk) * d + ELEMENTWISE * 3 * (
        lq * m + m * m + m * lk
    )
    pinv = MATMUL * iterations * 5 * m**3  # square m x m products: dense-layer speed
    products = HEAD_MATMUL * (m * lk * d + m * m * d + lq * m * d)
    return call.heads * (means + kernels + pinv + products)


def probsparse_work(call: AttentionCall, options: Mapping[str, Any] | None = None) -> float:
    """``probsparse`` (factor ``c``; exact ``full`` when ``u >= Lq``): scores of every query
    against ``U`` sampled keys (non-causal: one shared sample, a product; causal: per-query
    samples, a gather of ``Lq·U`` key rows), the sparsity measure and its top-``u``, exact
    softmax rows for the ``u`` active queries, and the mean of ``v`` (causal: running sums)
    spread over the lazy queries."""
    opts = options or {}
    factor = int(opts.get("factor") or 5)
    u = ln_count(call.lq, factor)
    if u >= call.lq:
        return full_work(call)
    big_u = ln_count(call.lk, factor)
    lq, lk, d = call.lq, call.lk, call.d
    measure = HEAD_MATMUL * lq * big_u * d + ELEMENTWISE * 3 * lq * big_u
    if call.causal:
        measure += ELEMENTWISE * 2 * lq * big_u * d  # the gathered key rows and einsum's copy
    top = HEAD_MATMUL * 2 * u * lk * d + ELEMENTWISE * 4 * u * lk
    lazy = ELEMENTWISE * (lk * d * (3 if call.causal else 1) + 2 * lq * d)
    return call.heads * (measure + top + lazy)


WORK: dict[str, Work] = {
    "full": full_work,
    "flash": flash_work,
    "performer": performer_work,
    "nystrom": nystrom_work,
    "probsparse": probsparse_work,
}


def attention_work(
    backend: str, call: AttentionCall, options: Mapping[str, Any] | None = None
) -> float:
    """Flop-equivalents of ``backend`` on ``call`` with ``options`` (validated, and defaults
    filled, by the registry; :class:`~models.attention.AttentionError` if invalid)."""
    resolved = get_backend(backend).resolve_options(options)
    return float(WORK[backend](call, resolved))


def dense_work(tokens: int, fan_in: int, fan_out: int) -> float:
    """A linear layer on ``tokens`` rows: the product and its bias/activation pass."""
    return MATMUL * tokens * fan_in * fan_out + ELEMENTWISE * tokens * fan_out
