"""ProbSparse self-attention (Zhou et al., "Informer", AAAI 2021, §3.1 and Lemma 1).

Only the ``u = c·⌈ln Lq⌉`` queries with the most "peaked" attention get exact softmax over all
keys; the others ("lazy" queries) get the mean of the values, which is what a near-uniform
attention row would produce anyway. Peakedness is the max-mean measure
``M(q_i) = max_j(q_i·k_j/√d) − mean_j(q_i·k_j/√d)`` evaluated on ``U = c·⌈ln Lk⌉`` sampled keys.

Where this differs from the reference code (zhouhaoyi/Informer2020, ``models/attn.py``):
    * Non-causal: one sample of ``U`` keys per batch row, shared by all its queries and heads,
      where the paper and the reference draw ``U`` keys for *each* query. Sharing turns the
      measure into one ``[U, d] x [d, Lq]`` product per head instead of a gather of ``Lq·U``
      key rows, which is memory-bound and cost more than exact fused attention. The sample is
      stratified over the row's real keys (one key from each of ``U`` equal, up to rounding,
      slices of the ranks): with proportional allocation a stratified mean has no larger
      variance than a simple random sample's (Cochran, "Sampling Techniques", 3rd ed., 1977,
      ch. 5), and the candidates for the max spread over the whole row. Every query is measured
      on the same keys, so their ranking is not blurred by each query's own sampling luck
      (common random numbers). Measured against per-query sampling (``structured_qkv`` and
      i.i.d. normal inputs, L = 512 … 8192): the mean relative row error is the same to the
      third decimal; the selected queries recover 0.84–0.99 (per-query: 0.82–0.92) of the error
      reduction that selecting by the measure on *all* keys gives over a random choice; the text
      encoder's mean cosine to ``full`` over 600 docstrings rises from 0.731 to 0.744 (its
      single worst text falls from 0.200 to 0.188; the 1st/5th/10th percentiles rise). A shared
      sample without strata is worse there (0.722).
      Causal attention keeps per-query samples among keys ``j <= i``: a shared sample would
      leave early queries with few or no visible samples.
    * The reference averages the sampled scores by dividing by ``Lk``; we divide by the number of
      samples, the mean the paper writes.
    * Causal lazy queries: the reference gives position ``i`` the *cumulative sum* of ``v[:i+1]``;
      we give the running *mean*, the causal counterpart of the non-causal mean it uses (a sum
      grows with ``i`` and is not an attention output).
    * Samples are drawn from each row's real keys with a counter-based hash of the sample slot
      (causal: of query position and slot), not ``torch.randint``: the same input gives the same
      answer, and padding a row or batching it with others changes nothing.
    * ``u`` and ``U`` use each row's real length and are at least 1.
When ``u >= Lq`` every query is active and the result equals ``full`` exactly.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from models.attention.base import (
    Backend,
    Capabilities,
    IntOption,
    masked_mean_values,
    working_precision,
)
from models.attention.full import full_attention, full_bytes, full_work
from models.attention.pricing import ELEMENTWISE, HEAD_MATMUL, INDEX, AttentionCall, in_float32

SAMPLE_SEED = 0x5EED
# Scores (b·h·Lq·Lk) up to which the causal measure computes all of them (see
# _per_query_measure): 4 MiB in float32.
_DENSE_MEASURE_BUDGET = 2**20
# Largest gathered block of sampled keys, in elements, so sampling memory stays linear in L.
_GATHER_BUDGET = 1 << 24


def _hash_uniform(rows: Tensor, cols: Tensor, seed: int) -> Tensor:
    """Deterministic uniforms in [0, 1) for each (row, col) pair: a 32-bit integer hash.

    Counter-based, so the value for query ``i``/sample ``s`` never depends on how many other
    queries exist (unlike a generator stream, whose values shift with the tensor shape).
    """
    mask32 = 0xFFFFFFFF
    x = (rows * 0x9E3779B1 + cols * 0x85EBCA77 + seed) & mask32
    for _ in range(2):  # "lowbias32"-style mixing: xor-shift, multiply (fits in int64)
        x = ((x ^ (x >> 16)) * 0x45D9F3B) & mask32
    x = x ^ (x >> 16)
    return x.to(torch.float64) / float(1 << 32)


def ln_count(n: int, factor: int) -> int:
    """``min(c·⌈ln n⌉, n)``, at least 1: the active queries ``u`` / samples ``U`` of a length."""
    return min(max(factor * math.ceil(math.log(max(n, 1))), 1), n)


def _count(n: Tensor, factor: int) -> Tensor:
    """``min(c·⌈ln n⌉, n)``, at least 1 where n >= 1 (ln 1 = 0 would give no query at all)."""
    c = factor * torch.ceil(torch.log(n.clamp_min(1).to(torch.float64))).to(torch.long)
    return torch.minimum(c.clamp_min(1), n)


def _ranked_keys(
    key_padding_mask: Tensor | None, b: int, lk: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """Which keys are real ``[b, Lk]``, and their positions in order ``[b, Lk]`` (rank r ->
    position; padding after the real keys), so a sampled rank names the same key padded or not."""
    if key_padding_mask is None:
        real = torch.ones(b, lk, dtype=torch.bool, device=device)
        return real, torch.arange(lk, device=device).expand(b, lk)
    return key_padding_mask, torch.argsort((~key_padding_mask).to(torch.uint8), dim=-1, stable=True)


def _shared_positions(
    key_padding_mask: Tensor | None, b: int, lk: int, factor: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """Key positions ``[b, U]`` sampled once per row for all its queries and heads, and which
    slots count ``[b, U]`` (a row with fewer real keys than the longest uses fewer slots).

    Stratified: slot ``s`` of a row with ``n`` real keys and ``U <= n`` samples draws one key
    uniformly from ranks ``[⌊s·n/U⌋, ⌊(s+1)·n/U⌋)``, so the sample spreads over the whole row
    and never repeats a key.
    """
    real, real_pos = _ranked_keys(key_padding_mask, b, lk, device)
    n_real = real.sum(dim=-1, keepdim=True)  # [b, 1]
    per_row = _count(n_real, factor).clamp_min(1)  # [b, 1]
    slots = torch.arange(int(per_row.max()), device=device)[None, :]  # [1, U]
    lo = slots * n_real // per_row
    hi = (slots + 1) * n_real // per_row
    r = _hash_uniform(slots, torch.zeros_like(slots), SAMPLE_SEED)
    rank = lo + torch.floor(r * (hi - lo).to(torch.float64)).to(torch.long)
    rank = torch.minimum(rank, (n_real - 1).clamp_min(0))
    return torch.gather(real_pos, 1, rank), slots < per_row


def _shared_sample_measure(
    q: Tensor, k: Tensor, positions: Tensor, used: Tensor, attn_bias: Tensor | None = None
) -> Tensor:
    """Max-mean measure ``M`` of every query on its row's shared sample: ``[b, h, Lq]``.

    One gather of ``U`` keys per row and one ``[U, d] x [d, Lq]`` product per head; scores are
    laid out ``[U, Lq]`` so the max and mean reduce over an outer, not the innermost, dimension.
    With a score bias the measure is taken on the scores the softmax will see (scaled, plus the
    bias at the sampled keys): a relative position bias is what makes many rows peaked.
    """
    b, h, lq, d = q.shape
    k_s = torch.gather(k, 2, positions[:, None, :, None].expand(b, h, -1, d))  # [b, h, U, d]
    scores = k_s @ q.transpose(-1, -2)  # [b, h, U, Lq]
    if attn_bias is not None:
        full_bias = attn_bias.expand(b, h, lq, attn_bias.shape[-1])
        index = positions[:, None, None, :].expand(b, h, lq, -1)
        sampled = torch.gather(full_bias, 3, index).transpose(-1, -2)  # [b, h, U, Lq]
        scores = scores * (1.0 / math.sqrt(d)) + sampled
    if bool(used.all()):
        return scores.amax(dim=-2) - scores.mean(dim=-2)
    ok = used[:, None, :, None]
    best = scores.masked_fill(~ok, -torch.inf).amax(dim=-2)
    return best - (scores * ok).sum(dim=-2) / used.sum(dim=-1)[:, None, None]


def _sample_positions(
    key_padding_mask: Tensor | None, b: int, lq: int, lk: int, factor: int, device: torch.device
) -> tuple[Tensor, Tensor, Tensor]:
    """Causal: per-query key positions ``[b, Lq, U]`` among keys ``j <= i``, which slots count
    ``[b, Lq, U]``, and the number of keys each query sees ``[b, Lq]``."""
    if key_padding_mask is None:  # the same for every row and call: drawn once
        positions, used, visible = _unpadded_sample_positions(lq, lk, factor, str(device))
        return positions.expand(b, -1, -1), used.expand(b, -1, -1), visible.expand(b, -1)
    return _draw_sample_positions(key_padding_mask, b, lq, lk, factor, device)


@functools.lru_cache(maxsize=64)
def _unpadded_sample_positions(
    lq: int, lk: int, factor: int, device: str
) -> tuple[Tensor, Tensor, Tensor]:
    # Made outside inference mode so that training can use the cached tensors too.
    with torch.inference_mode(False), torch.no_grad():
        return _draw_sample_positions(None, 1, lq, lk, factor, torch.device(device))


def _draw_sample_positions(
    key_padding_mask: Tensor | None, b: int, lq: int, lk: int, factor: int, device: torch.device
) -> tuple[Tensor, Tensor, Tensor]:
    real, real_pos = _ranked_keys(key_padding_mask, b, lk, device)
    prefix = real.cumsum(dim=-1)  # real keys at positions <= j
    pos = torch.arange(lq, device=device).clamp_max(lk - 1)
    visible = prefix[:, pos]  # [b, Lq]
    visible = torch.where(torch.arange(lq, device=device) < lk, visible, real.sum(-1)[:, None])
    per_row = _count(visible, factor)  # [b, Lq] samples for each query
    u_max = max(int(per_row.max()), 1)
    rows = torch.arange(lq, device=device)[:, None]
    slots = torch.arange(u_max, device=device)[None, :]
    r = _hash_uniform(rows, slots, SAMPLE_SEED)[None]  # [1, Lq, U]
    rank = torch.floor(r * visible[..., None].to(torch.float64)).to(torch.long)
    rank = torch.minimum(rank, (visible[..., None] - 1).clamp_min(0))
    positions = torch.gather(real_pos, 1, rank.reshape(b, -1)).reshape(b, lq, u_max)
    used = slots[None] < per_row[..., None]
    return positions, used, visible


def _per_query_measure(q: Tensor, k: Tensor, positions: Tensor, used: Tensor) -> Tensor:
    """Causal: max-mean measure ``M`` of each query on its own sampled keys, ``[b, h, Lq]``.

    Samples are shared by the heads of a row, so keys are gathered as whole ``[h·d]`` rows
    (contiguous copies) in chunks of sample slots that bound the memory.
    """
    b, h, lq, d = q.shape
    lk = k.shape[-2]
    if b * h * lq * lk <= _DENSE_MEASURE_BUDGET:
        # Short sequences: all scores in one product, then the sampled ones picked out, costs
        # less than gathering every query's sampled keys (many small copies).
        picked = (q @ k.transpose(-1, -2)).gather(
            -1, positions[:, None].expand(b, h, lq, positions.shape[-1])
        )  # [b, h, Lq, U]
        ok = used[:, None]
        best = picked.masked_fill(~ok, -torch.inf).amax(dim=-1)
        return best - (picked * ok).sum(dim=-1) / used.sum(dim=-1).clamp_min(1)[:, None]
    q_rows = q.permute(0, 2, 1, 3)  # [b, Lq, h, d]
    k_rows = k.permute(0, 2, 1, 3).reshape(b, lk, h * d)  # [b, Lk, h·d]
    batch = torch.arange(b, device=q.device)[:, None]
    n_used = used.sum(dim=-1).clamp_min(1)  # [b, Lq]
    best = torch.full((b, lq, h), -torch.inf, dtype=q.dtype, device=q.device)
    total = torch.zeros((b, lq, h), dtype=q.dtype, device=q.device)
    chunk = max(1, _GATHER_BUDGET // max(1, b * h * lq * d))
    for s0 in range(0, positions.shape[-1], chunk):
        pos = positions[:, :, s0 : s0 + chunk]  # [b, Lq, s]
        s = pos.shape[-1]
        k_s = k_rows[batch, pos.reshape(b, lq * s)].view(b, lq, s, h, d)
        scores = torch.einsum("bihd,bishd->bish", q_rows, k_s)
        ok = used[:, :, s0 : s0 + chunk, None]
        best = torch.maximum(best, scores.masked_fill(~ok, -torch.inf).amax(dim=2))
        total = total + (scores * ok).sum(dim=2)
    return (best - total / n_used[..., None]).permute(0, 2, 1)


def _lazy_values(v: Tensor, key_padding_mask: Tensor | None, lq: int, causal: bool) -> Tensor:
    """Output of lazy queries: mean of real values (causal: running mean up to ``i``), ``[b,h,Lq,d]``."""
    b, h, lk, d = v.shape
    if not causal:
        return masked_mean_values(v, key_padding_mask).expand(b, h, lq, d)
    w = (
        torch.ones(b, 1, lk, 1, dtype=v.dtype, device=v.device)
        if key_padding_mask is None
        else key_padding_mask[:, None, :, None].to(v.dtype)
    )
    sums, counts = (v * w).cumsum(dim=2), w.cumsum(dim=2)
    pos = torch.arange(lq, device=v.device).clamp_max(lk - 1)
    return sums[:, :, pos] / counts[:, :, pos].clamp_min(1.0)


def probsparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    causal: bool = False,
    factor: int = 5,
    attn_bias: Tensor | None = None,
) -> Tensor:
    """ProbSparse attention, ``[b,h,i,d] x [b,h,j,d] x [b,h,j,d] -> [b,h,i,d]``.

    ``attn_bias`` (broadcastable to ``[b,h,i,j]``) is added to the active queries' scaled scores
    and, without ``causal``, to the sampled scores the measure ranks queries by; lazy queries
    keep the mean of the values, the uniform-row limit the bias does not enter."""
    b, h, lq, d = q.shape
    lk = k.shape[-2]
    out_dtype = q.dtype
    q, k, v = working_precision(q, k, v)
    scale = 1.0 / math.sqrt(d)

    # In self-attention the key padding mask also marks padded queries; they are never active.
    query_mask = key_padding_mask if lq == lk else None
    n_queries = (
        query_mask.sum(dim=-1)
        if query_mask is not None
        else torch.full((b,), lq, dtype=torch.long, device=q.device)
    )
    n_active = _count(n_queries, factor)  # [b]
    if bool((n_active >= n_queries).all()):
        return full_attention(q, k, v, key_padding_mask, causal, attn_bias).to(out_dtype)

    # Which queries are active is a discrete choice: no gradient flows through the measure. It is
    # taken on unscaled scores (as in the reference code): M(c·s) = c·M(s), so the ranking is the same.
    with torch.no_grad():
        if causal:
            positions, used, visible = _sample_positions(
                key_padding_mask, b, lq, lk, factor, q.device
            )
            measure = _per_query_measure(q, k, positions, used)
        else:
            positions, used = _shared_positions(key_padding_mask, b, lk, factor, q.device)
            measure = _shared_sample_measure(q, k, positions, used, attn_bias)
            n_real = lk if key_padding_mask is None else key_padding_mask.sum(-1, keepdim=True)
            visible = torch.as_tensor(n_real, device=q.device).expand(b, lq)
        idle = visible == 0  # [b, Lq]
        if query_mask is not None:
            idle = idle | ~query_mask
        measure = measure.masked_fill(idle[:, None, :], -torch.inf)
        u_max = int(n_active.max())
        top = measure.topk(u_max, dim=-1, sorted=True).indices  # [b, h, u], best first

    # Exact softmax over all (visible) keys for the active queries: [b, h, u, Lk].
    index = top[..., None].expand(b, h, u_max, d)
    scores = (torch.gather(q, 2, index) * scale) @ k.transpose(-1, -2)
    if attn_bias is not None:
        rows = top[..., None].expand(b, h, u_max, lk)
        scores = scores + torch.gather(attn_bias.to(q.dtype).expand(b, h, lq, lk), 2, rows)
    allowed = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
    if causal:
        before = torch.arange(lk, device=q.device) <= top[..., None]
        allowed = before if allowed is None else allowed & before
    if allowed is None:
        out_top = scores.softmax(dim=-1) @ v
    else:
        scores = scores.masked_fill(~allowed, torch.finfo(q.dtype).min)
        out_top = (scores.softmax(dim=-1) * allowed.any(dim=-1, keepdim=True)) @ v

    out = _lazy_values(v, key_padding_mask, lq, causal).contiguous()
    if u_max > int(n_active.min()):  # rows with fewer active queries keep their lazy value
        active = torch.arange(u_max, device=q.device)[None, None, :] < n_active[:, None, None]
        out_top = torch.where(active[..., None], out_top, torch.gather(out, 2, index))
    out = out.scatter_(2, index, out_top)
    if bool(idle.any()):  # queries that see no key at all
        out = out.masked_fill((visible == 0)[:, None, :, None], 0.0)
    return out.to(out_dtype)


def probsparse_bytes(call: AttentionCall, options: Mapping[str, Any]) -> int:
    """Peak bytes (``u`` active queries, ``U`` sampled keys; ``full``'s in float32 when every
    query is active): ``L log L`` in length.

    Measure, non-causal: the scaled queries, one shared sample of ``U`` keys per row and scores
    ``[b, h, Lq, U]`` (twice with a mask). Causal: per-query samples (int64 indices ``[b, Lq,
    U]``, drawn per call only with padding); every score ``[b, h, Lq, Lk]`` up to
    ``_DENSE_MEASURE_BUDGET``, beyond it a gathered key block ``[b, Lq, s, h, d]`` capped at
    ``_GATHER_BUDGET`` elements (and ``einsum``'s copy), plus a contiguous ``k``. Top: the
    active rows' scores ``[b, h, u, Lk]`` (up to three copies: scores, mask, softmax) and the
    lazy values ``[b, h, Lq, d]`` (causal: from running sums ``[b, h, Lk, d]``), into which the
    active rows are scattered: the output.
    """
    factor = options["factor"]
    work, cast = in_float32(call)
    u = ln_count(call.lq, factor)
    if u >= call.lq:
        return cast + full_bytes(replace(call, itemsize=work), {})
    big_u = ln_count(call.lk, factor)
    b, h, lq, lk, d, bh = call.b, call.h, call.lq, call.lk, call.d, call.heads
    masked = call.padded or call.causal
    if call.causal:
        # drawn per call with padding; without, once per shape and cached
        indices = b * lq * big_u * (4 * INDEX + 1) if call.padded else 0
        if bh * lq * lk <= _DENSE_MEASURE_BUDGET:
            measure = bh * lq * lk + 3 * bh * lq * big_u  # all scores; the sampled ones picked
        else:
            s = min(max(1, _GATHER_BUDGET // max(1, call.queries)), big_u)  # sample slots
            measure = call.queries + call.keys + b * lq * s * h * (2 * d + 3) + 3 * b * lq * h
        measure_bytes = measure * work + indices
    else:
        measure = call.queries + bh * (big_u * d + (3 if masked else 1) * lq * big_u)
        measure_bytes = measure * work + b * big_u * INDEX * 2
    lazy = call.keys + 2 * call.queries if call.causal else call.queries
    top = bh * u * (3 * d + (3 if masked else 2) * lk) + lazy
    mask = bh * u * lk if call.causal else 0  # boolean "key before query" per active row
    return cast + max(measure_bytes, top * work + mask)


def probsparse_work(call: AttentionCall, options: Mapping[str, Any]) -> float:
    """Flop-equivalents (``full``'s when every query is active): scores of every query against
    ``U`` sampled keys (non-causal: a product; causal: a gather of ``Lq·U`` key rows), the
    measure and its top-``u``, exact softmax rows for the ``u`` active queries, and the mean of
    ``v`` (causal: running sums) spread over the lazy queries."""
    factor = options["factor"]
    u = ln_count(call.lq, factor)
    if u >= call.lq:
        return full_work(call, {})
    big_u = ln_count(call.lk, factor)
    lq, lk, d = call.lq, call.lk, call.d
    measure = HEAD_MATMUL * lq * big_u * d + ELEMENTWISE * 3 * lq * big_u
    if call.causal:
        measure += ELEMENTWISE * 2 * lq * big_u * d  # the gathered key rows and einsum's copy
    top = HEAD_MATMUL * 2 * u * lk * d + ELEMENTWISE * 4 * u * lk
    lazy = ELEMENTWISE * (lk * d * (3 if call.causal else 1) + 2 * lq * d)
    return call.heads * (measure + top + lazy)


BACKEND = Backend(
    name="probsparse",
    order=3,
    exact=False,
    summary=(
        "Informer's ProbSparse attention: exact softmax for the c·ln(L) most peaked queries, "
        "mean of the values for the rest; O(L log L)."
    ),
    citation="Zhou et al., Informer, AAAI 2021",
    kernel=probsparse_attention,
    budget="factor",
    memory=probsparse_bytes,
    work=probsparse_work,
    capabilities=Capabilities(score_bias=True),
    options={
        "factor": IntOption(
            default=5,
            minimum=1,
            maximum=100,
            description="c in u = c·ceil(ln L): active queries and sampled keys per query.",
        )
    },
)
