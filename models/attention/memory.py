"""Peak memory of one attention call, per backend, read off what each kernel allocates.

    from models.attention.memory import AttentionCall, attention_bytes
    attention_bytes("full", AttentionCall(b=32, h=4, lq=2049, lk=2049, d=16))  # ~4.3 GB

The estimate is the most bytes of tensors a kernel holds at any one moment while it runs, in
inference mode (nothing is kept for a backward pass), *beyond* its inputs ``q``, ``k``, ``v``
(the caller holds those) and including its output. Each function below follows its kernel
top-down and names the tensors alive at the kernel's busiest moment, so when a kernel changes,
its estimate is the paragraph to revisit; ``tests/unit/test_attention_memory.py`` measures every
backend with the torch allocator's own events (:mod:`models.profiling`) and holds ``full``
within 15 % of the measured peak and the others within 2x either way (observed on CPU at the
Informer and MiniLM shapes: ``full`` within 5 %, the others within 35 %).

What dominates:
    * ``full`` materialises the ``[b, h, Lq, Lk]`` score matrix two or three times (scores,
      softmax, masked copy): quadratic in length, the backend that stops fitting first.
    * ``flash`` (SDPA) keeps only the output and a row-wise logsumexp: linear.
    * ``performer`` keeps feature maps ``[b, h, L, m]``, ``nystrom`` landmark kernels
      ``[b, h, L, m]`` and ``probsparse`` sampled scores ``[b, h, Lq, U]`` plus ``u`` full rows:
      linear (``probsparse`` L·log L) in length.

Half precision is priced as the server runs it on CUDA, under autocast: ``full``'s softmax
comes out in float32 (autocast's float32 list), and ``performer``, ``nystrom`` and ``probsparse``
compute in float32 whatever their input (each casts ``q``, ``k``, ``v`` first).

Dimension legend (as :mod:`models.attention.base`): ``b`` batch, ``h`` heads, ``Lq``/``Lk``
query/key length, ``d`` head dimension, ``m`` features / landmarks, ``U`` sampled keys,
``u`` active queries.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from models.attention.performer import CAUSAL_CHUNK, default_num_features
from models.attention.registry import get_backend

FLOAT32 = 4
INDEX = 8  # int64 positions and indices
# Largest gathered block of sampled keys (elements) in ProbSparse's causal, per-query sampling
# (``probsparse._GATHER_BUDGET``; copied, not imported: that module is private and changing).
PROBSPARSE_GATHER_BUDGET = 1 << 24
# Causal scores (b·h·Lq·Lk) up to which ProbSparse computes them all and picks the sampled ones
# (``probsparse._DENSE_MEASURE_BUDGET``, copied likewise).
PROBSPARSE_DENSE_MEASURE_BUDGET = 1 << 20


@dataclass(frozen=True)
class AttentionCall:
    """The shape of one attention call.

    Attributes:
        b, h, lq, lk, d: batch, heads, query length, key length, head dimension.
        itemsize: bytes per element of ``q``/``k``/``v`` (4 for float32, 2 for bf16/fp16).
        causal: query ``i`` sees keys ``j <= i``.
        padded: a key padding mask is passed (padded text batches).
        device_type: ``cpu`` or ``cuda`` (CPU kernels keep per-thread buffers).
    """

    b: int
    h: int
    lq: int
    lk: int
    d: int
    itemsize: int = FLOAT32
    causal: bool = False
    padded: bool = False
    device_type: str = "cpu"

    @property
    def scores(self) -> int:
        """Elements of one ``[b, h, Lq, Lk]`` score matrix."""
        return self.b * self.h * self.lq * self.lk

    @property
    def queries(self) -> int:
        """Elements of ``q`` (and of the output): ``b·h·Lq·d``."""
        return self.b * self.h * self.lq * self.d

    @property
    def keys(self) -> int:
        """Elements of ``k`` (and of ``v``): ``b·h·Lk·d``."""
        return self.b * self.h * self.lk * self.d

    @property
    def heads(self) -> int:
        """``b·h``: the batch of matrices every kernel works on."""
        return self.b * self.h


Estimate = Callable[[AttentionCall, Mapping[str, Any]], int]


def _in_float32(call: AttentionCall) -> tuple[int, int]:
    """(working itemsize, bytes of the float32 copies of q, k, v) for kernels that compute in
    float32 (or float64) whatever their input."""
    work = max(call.itemsize, FLOAT32)
    cast = 0 if call.itemsize >= FLOAT32 else (call.queries + 2 * call.keys) * work
    return work, cast


# ----------------------------------------------------------------------------- full


def full_bytes(call: AttentionCall, options: Mapping[str, Any] | None = None) -> int:
    """``full``: ``einsum`` writes the scores; ``* 1/√d`` makes a second score matrix while the
    first is alive; softmax a third *if* a mask is applied first (``masked_fill`` copies, and
    the ``scores`` variable stays alive until the kernel returns). Then ``weights @ v``.

    Unmasked peak: 2 score matrices; masked (causal or padding): 3, plus the causal boolean
    ``[Lq, Lk]`` mask (``[b, 1, Lq, Lk]`` when padding is combined with it).
    """
    e = call.itemsize
    soft = max(e, FLOAT32)  # autocast runs softmax (and what follows) in float32
    # masked: masked scores, softmax, softmax * any-visible; else: scores (scaled), softmax
    scores = call.scores * (e + soft + (soft if call.causal or call.padded else 0))
    if e < FLOAT32:
        scores += call.scores * e  # autocast casts the float32 weights back for ``@ v``
    mask = (call.b if call.padded else 1) * call.lq * call.lk if call.causal else 0
    return scores + mask + call.queries * e  # + output


# ----------------------------------------------------------------------------- flash


def flash_bytes(call: AttentionCall, options: Mapping[str, Any] | None = None) -> int:
    """``flash`` (SDPA fused kernels): the output and a float32 logsumexp per query row, and on
    CPU each thread's score tile (up to ``256 x 512`` float32; on CUDA tiles live on chip). A
    padded call adds the
    broadcast mask (``[b, 1, 1, Lk]``, converted to the kernel's additive form) and the
    ``torch.where`` that zeroes queries seeing no key; a padded *causal* call builds the
    ``[b, 1, Lq, Lk]`` mask (boolean, then additive): the only quadratic case.
    """
    e = call.itemsize
    tiles = 0
    if call.device_type == "cpu":
        # ATen's CPU flash kernel: query blocks of 256 / 64 / 32 rows by length, key blocks of 512.
        q_split = 256 if call.lq >= 768 else 64 if call.lq >= 192 else 32
        tile = min(call.lq, q_split) * (min(call.lk, 512) + call.d)
        tiles = torch.get_num_threads() * tile * FLOAT32
    total = call.queries * e + call.heads * call.lq * FLOAT32 + tiles
    if call.padded:
        total += call.queries * e + call.b * call.lk * (1 + e)
        if call.causal:
            total += call.b * call.lq * call.lk * (1 + e)
    return total


# ----------------------------------------------------------------------------- performer


def performer_bytes(call: AttentionCall, options: Mapping[str, Any] | None = None) -> int:
    """``performer`` (FAVOR+, ``m`` features used as ``m/2`` antithetic pairs ``p``).

    Feature phase: the projections ``q·ωᵀ`` ``[b, h, Lq, p]`` and ``k·ωᵀ`` (alive until the
    feature maps return) and the maps φ(q) ``[b, h, Lq, m]``, φ(k) ``[b, h, Lk, m]`` (a second
    φ(k) when padding is masked out), plus a ``|k·ωᵀ|`` temporary. Product phase: φ(q), φ(k),
    ``[v, 1]`` ``[b, h, Lk, d+1]``, the numerator/denominator ``[b, h, Lq, d+1]`` and the
    output; the causal variant instead carries the prefix state ``[b, h, m, d+1]`` and a
    ``chunk x chunk`` block per step.
    """
    opts = options or {}
    work, cast = _in_float32(call)
    m = opts.get("num_features") or default_num_features(call.d)
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


# ----------------------------------------------------------------------------- nystrom


def nystrom_bytes(call: AttentionCall, options: Mapping[str, Any] | None = None) -> int:
    """``nystrom`` (``m`` landmarks; exact ``full`` when ``Lk <= m``).

    Alive throughout: the scaled queries ``[b, h, Lq, d]``. Landmarks: segment means through a
    ``[b, m+1, L]`` assignment matrix and a contiguous copy of the input (a plain reshape when
    ``L`` is a multiple of ``m`` and nothing is padded). Kernels: ``softmax(q·k̃ᵀ)``
    ``[b, h, Lq, m]``, ``softmax(q̃·k̃ᵀ)`` ``[b, h, m, m]``, ``softmax(q̃·kᵀ)`` ``[b, h, m, Lk]``,
    each briefly twice (product, softmax; three times with a mask), then the pseudo-inverse's
    ``m x m`` temporaries. A padded call may also run exact attention on rows with at most ``m``
    real keys (``[b, h, Lq, m]`` scores, up to three copies) and merges the two results.
    """
    opts = options or {}
    m = int(opts.get("num_landmarks") or 64)
    if call.lk <= m:
        return full_bytes(call)
    work, cast = _in_float32(call)
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


# ----------------------------------------------------------------------------- probsparse


def ln_count(n: int, factor: int) -> int:
    """``min(c·⌈ln n⌉, n)``, at least 1: ProbSparse's active queries ``u`` / samples ``U``."""
    return min(max(factor * math.ceil(math.log(max(n, 1))), 1), n)


def probsparse_bytes(call: AttentionCall, options: Mapping[str, Any] | None = None) -> int:
    """``probsparse`` (factor ``c``: ``u = c·⌈ln Lq⌉`` active queries, ``U = c·⌈ln Lk⌉`` sampled
    keys; exact ``full`` when ``u >= Lq``).

    Measure phase, non-causal: the scaled queries and one sample of ``U`` keys per row shared by
    its queries and heads, scores ``[b, h, Lq, U]`` (twice with a mask). Causal: per-query
    samples (index tensors ``[b, Lq, U]``, int64, drawn per call only with padding); up to
    :data:`PROBSPARSE_DENSE_MEASURE_BUDGET` scores every score ``[b, h, Lq, Lk]`` and the
    sampled ones picked out, beyond it a gathered key block capped at
    :data:`PROBSPARSE_GATHER_BUDGET` elements (``[b, Lq, s, h, d]``, ``s`` sample slots at a
    time; ``einsum`` copies it once more), plus a contiguous copy of ``k``. Top phase: the ``u``
    active rows' exact scores ``[b, h, u, Lk]`` (up to three copies: scores, mask, softmax) and
    the lazy queries' mean of ``v`` expanded to ``[b, h, Lq, d]`` (causal: from running sums
    ``[b, h, Lk, d]``), into which the active rows are scattered: the output.
    """
    opts = options or {}
    factor = int(opts.get("factor") or 5)
    u = ln_count(call.lq, factor)
    if u >= call.lq:
        work, cast = _in_float32(call)
        return cast + full_bytes(replace(call, itemsize=work))
    work, cast = _in_float32(call)
    big_u = ln_count(call.lk, factor)
    b, h, lq, lk, d, bh = call.b, call.h, call.lq, call.lk, call.d, call.heads
    masked = call.padded or call.causal
    if call.causal:
        # drawn per call with padding; without, once per shape and cached
        indices = b * lq * big_u * (4 * INDEX + 1) if call.padded else 0
        if bh * lq * lk <= PROBSPARSE_DENSE_MEASURE_BUDGET:
            # every score, then the sampled ones picked out, masked and summed
            measure = bh * lq * lk + 3 * bh * lq * big_u
        else:
            slots = max(1, PROBSPARSE_GATHER_BUDGET // max(1, call.queries))
            s = min(slots, big_u)
            # the gathered block, and einsum's contiguous copy of it, per chunk of sample slots
            measure = call.queries + call.keys + b * lq * s * h * (2 * d + 3) + 3 * b * lq * h
        measure_bytes = measure * work + indices
    else:
        measure = call.queries + bh * (big_u * d + (3 if masked else 1) * lq * big_u)
        measure_bytes = measure * work + b * big_u * INDEX * 2
    # The lazy values become the output (active rows scattered in); causal: running sums first.
    lazy = call.keys + 2 * call.queries if call.causal else call.queries
    top = bh * u * (3 * d + (3 if masked else 2) * lk) + lazy
    mask = bh * u * lk if call.causal else 0  # boolean "key before query" per active row
    return cast + max(measure_bytes, top * work + mask)


# ----------------------------------------------------------------------------- registry

ESTIMATES: dict[str, Estimate] = {
    "full": full_bytes,
    "flash": flash_bytes,
    "performer": performer_bytes,
    "nystrom": nystrom_bytes,
    "probsparse": probsparse_bytes,
}


def attention_bytes(
    backend: str, call: AttentionCall, options: Mapping[str, Any] | None = None
) -> int:
    """Estimated peak bytes ``backend`` allocates for ``call`` with ``options`` (validated, and
    defaults filled, by the registry; :class:`~models.attention.AttentionError` if invalid)."""
    resolved = get_backend(backend).resolve_options(options)
    return int(ESTIMATES[backend](call, resolved))
