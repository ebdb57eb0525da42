"""Reformer attention: angular LSH buckets, sorted and chunked (Kitaev, Kaiser, Levskaya,
"Reformer: The Efficient Transformer", ICLR 2020, §2), for separate queries and keys,
optionally with the asymmetric transform of SMYRF (Daras, Kitaev, Odena, Dimakis, "SMYRF:
Efficient Attention using Asymmetric Clustering", NeurIPS 2020, §3).

One hash round: random rotations R ``[d', n_buckets/2]``; a vector x goes to bucket
argmax([xR; −xR]). Queries and keys are each sorted by (bucket, position) and cut into chunks of
``bucket_size``; query chunk c attends to key chunks c and c − 1. ``num_hashes`` rounds are
combined by their log-sum-exp weights (the paper's eq. for multi-round attention), and a key a
query reaches in several rounds counts once: its score loses log(number of rounds in which the
pair is co-located), so with ``bucket_size`` ≥ the length the output is exact attention.

Pretrained models have separate queries and keys (the paper ties them). By default
(``hashing="shared"``) both are hashed with the same rotations, on q/‖q‖ and k/‖k‖.
``hashing="asymmetric"`` first applies SMYRF's transform, which turns maximum inner product into
nearest neighbour on a sphere: with M² = max‖q‖² + max‖k‖² over the row's real tokens (per row
and head), F(q) = [q, √(M² − ‖q‖²), 0] and G(k) = [k, 0, √(M² − ‖k‖²)], both of norm M, so
‖F(q) − G(k)‖² = 2M² − 2 q·k. Why not the default: under angular (argmax) hashing the large
extra coordinate decides the bucket (on ``structured_qkv``, 2,048 tokens, 92 % of the queries
share one bucket), so the sort falls back to position order and the chunks become local windows;
its mean relative row error there is higher than shared hashing's (2.78 against 2.74 at scale
0.8, 2.19 against 2.04 at 1.5, 1.32 against 1.22 with log-normal q and k norms), though on the
MiniLM text encoder, whose attention is local, it scores better (mean cosine 0.987 against
0.976 on ``length_spread(2)``). Self-attention only (Lq == Lk): query i always sees key i (a
causal query then has at least one key), counted once with the chunks' copies.

Choices that keep a row's output independent of its batch and of the call:
    * rotations come from one fixed seed per (buckets, dimension, round, device)
      (:func:`models.attention.lsh_buckets.rotation`), never the global RNG;
    * the number of buckets, ≈ 2·n/``bucket_size`` rounded to an even number ≥ 2 (the paper's
      n_buckets ~ L / chunk), follows the row's own real length n; rows batched with others
      of another count take their own rotations' columns, the rest masked out of the argmax;
    * padded tokens sort after every real one, so the real tokens' chunks are those of the row
      alone; a query at a padded position attends to the row's last real chunk.
The shared-QK form of the paper, as transformers' ``LSHSelfAttention`` computes it, is
:func:`models.attention.lsh.lsh_shared_qk_attention`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from models.attention.base import (
    Backend,
    Capabilities,
    ChoiceOption,
    IntOption,
    working_precision,
)
from models.attention.full import full_attention, full_bytes, full_work
from models.attention.lsh_buckets import (
    Hashing,
    bucket_counts,
    hash_inputs,
    inverse,
    sort_rounds,
)
from models.attention.pricing import (
    ELEMENTWISE,
    HEAD_MATMUL,
    INDEX,
    AttentionCall,
    in_float32,
)


def reformer_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    causal: bool = False,
    bucket_size: int = 64,
    num_hashes: int = 2,
    hashing: Hashing = "shared",
) -> Tensor:
    """LSH attention, ``[b,h,L,d] x [b,h,L,d] x [b,h,L,d] -> [b,h,L,d]`` (self-attention).

    Exact when ``bucket_size`` ≥ L. ``causal``: a query sees its own key and earlier keys of
    its chunks only.
    """
    if q.shape[-2] != k.shape[-2]:  # the registry refuses this first; kept for direct callers
        raise ValueError("reformer needs Lq == Lk")
    if q.shape[-2] <= bucket_size:
        # One chunk holds every key, in every round: the LSH result is exact attention, so
        # compute that directly (short texts, patch sequences) rather than hash and sort.
        exact = full_attention(*working_precision(q, k, v), key_padding_mask, causal)
        return exact.to(q.dtype)
    return lsh_attention(q, k, v, key_padding_mask, causal, bucket_size, num_hashes, hashing)


def lsh_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    bucket_size: int,
    num_hashes: int,
    hashing: Hashing,
) -> Tensor:
    """The hashed, sorted and chunked computation of :func:`reformer_attention`, at any length:
    also where one chunk holds every key, which the served kernel answers with exact attention
    directly and the tests check this against."""
    out_dtype = q.dtype
    q, k, v = working_precision(q, k, v)
    b, h, n, d = q.shape
    bs, rounds, dev = bucket_size, num_hashes, q.device
    real = torch.ones(b, n, dtype=torch.bool, device=dev)
    real = real if key_padding_mask is None else key_padding_mask
    count = real.sum(dim=-1)  # [b]
    chunks = -(-n // bs)
    padded = chunks * bs
    scale = 1.0 / math.sqrt(d)

    tracking = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    # Hash, sort and find every token's chunk in every round.
    with torch.no_grad():
        fq, gk = hash_inputs(q.detach(), k.detach(), real, hashing)
        n_buckets = bucket_counts(count, bs)
        perm_q, chunk_q = sort_rounds(fq, real, n_buckets, rounds, bs)
        del fq
        perm_k, chunk_k = sort_rounds(gk, real, n_buckets, rounds, bs)
        del gk
        # Window of query chunk c: key slots of chunks c − 1 (none before chunk 0) and c. Real
        # tokens sort first; chunks past a row's last real one (padded positions only) reuse
        # that chunk's window, so a padded position still averages real values.
        last = torch.div((count - 1).clamp_min(0), bs, rounding_mode="floor")  # [b]
        chunk = torch.minimum(torch.arange(chunks, device=dev)[None, :], last[:, None])
        offsets = torch.arange(-bs, bs, device=dev)
        window = chunk[:, :, None] * bs + offsets  # [b, C, 2bs] key slots
        key_ok = (window >= 0) & (window < count[:, None, None])
        window = window.clamp_min(0).view(b, 1, -1).expand(b, h, -1)
        # The self slot (key i for query i) counts once with its copies in the chunks.
        self_count = torch.ones(b, h, n, device=dev, dtype=q.dtype)
        for r in range(rounds):
            self_count += (chunk_q[r] - chunk_k[r]).bitwise_or_(1) == 1
        # Per pair, meets = 1 + [the self pair] + Σ over the other rounds [co-located]: small
        # integers, exact in float, built in place in one buffer (no bool-to-float copies).
        # It starts at 1 + 3/2·(rounds − 1) (each other round then takes 1/2 or 3/2 off).
        meets = torch.empty(b, h, chunks, bs, 2 * bs, device=dev, dtype=q.dtype)
        temp = torch.empty_like(meets) if causal or (rounds > 1 and tracking) else None
        # Masks stay out of log and exp (their slow paths at ±inf): a masked pair's score is
        # capped at −inf (cap +inf elsewhere) only for the maximum, and its weight multiplied
        # by 0 (keep), before exp (so exp sees a finite 0) and after (so exp(0) = 1 becomes 0).
        key_keep = key_ok[:, None, :, None, :].to(q.dtype)  # [b, 1, C, 1, 2bs]
        key_cap = (key_keep - 0.5) * float("inf")
        # Query slot i's window starts at key slot (chunk(i) − 1)·bs.
        start = ((chunk - 1) * bs).repeat_interleave(bs, dim=1)[:, None, :]  # [b, 1, Lp]
        rank_k = [inverse(perm) for perm in perm_k]

    # Gathers are whole-row index_selects on [b·h·L, d] (far faster than an elementwise gather
    # through an expanded index): row of position p of (batch, head) bh is bh·L + p.
    q_rows, k_rows, v_rows = (x.reshape(b * h * n, d) for x in (q, k, v))
    first = torch.arange(0, b * h * n, n, device=dev).view(b, h, 1)
    first_out = torch.arange(0, b * h * padded, padded, device=dev).view(b, h, 1)
    # Without autograd, every round writes its big tensors into the same buffers (a fresh one
    # of that size costs page faults each time): the gathered queries, then the round's output;
    # the key window, then its values; the scores (and first the chunk-id differences).
    qo = kvw = sbuf = None
    if not tracking:
        qo, kvw = (torch.empty(b * h * padded * m, d, dtype=q.dtype, device=dev) for m in (1, 2))
        sbuf = torch.empty_like(meets)
    outs, lses = [], []
    for r in range(rounds):
        with torch.no_grad():
            qperm = F.pad(perm_q[r], (0, padded - n))  # [b, h, Lp]; pad slots masked below
            kperm = torch.gather(F.pad(perm_k[r], (0, padded - n)), -1, window)  # [b, h, C·2bs]
            meets.fill_(1 + 1.5 * (rounds - 1))
            for other in range(rounds):
                if other != r:  # cq − ck ∈ {0, 1} iff |cq − 1/2 − ck| = 1/2 (else ≥ 3/2)
                    cq = torch.gather(chunk_q[other], -1, qperm).to(q.dtype).sub_(0.5)
                    ck = torch.gather(chunk_k[other], -1, kperm).to(q.dtype)
                    cq, ck = cq.view(b, h, chunks, bs, 1), ck.view(b, h, chunks, 1, 2 * bs)
                    diff = torch.sub(cq, ck, out=temp if sbuf is None else sbuf)  # scores later
                    meets.sub_(diff.abs_().clamp_max_(1.5))
            # The self pair: the query's own position sits at its key rank, if in the window.
            slot = torch.gather(rank_k[r], -1, qperm).sub_(start)  # [b, h, Lp]
            hit = ((slot >= 0) & (slot < 2 * bs)).to(q.dtype).view(-1, 1)
            meets.view(-1, 2 * bs).scatter_add_(1, slot.clamp_(0, 2 * bs - 1).view(-1, 1), hit)
            penalty = meets.log_()  # log of the rounds in which the pair meets leaves the score
            cap, keep = key_cap, key_keep
            if causal:  # (qpos + 1/2 − kpos)·inf: +inf for an earlier key, −inf for a later
                qpos = qperm.to(q.dtype).add_(0.5).view(b, h, chunks, bs, 1)  # exact < 2**24
                kpos = kperm.to(q.dtype).view(b, h, chunks, 1, 2 * bs)
                cap = torch.sub(qpos, kpos, out=temp).mul_(float("inf"))
                cap = torch.minimum(cap, key_cap, out=cap)
        qs = torch.index_select(q_rows, 0, (qperm + first).view(-1), out=qo)
        index = (kperm + first).view(-1)
        kw = torch.index_select(k_rows, 0, index, out=kvw).view(b, h, chunks, 2 * bs, d)
        scores = torch.matmul(qs.view(b, h, chunks, bs, d), kw.mT, out=sbuf)
        scores = scores.mul_(scale).sub_(penalty)
        # The shift is a constant for the gradient (softmax and log-sum-exp do not depend on it).
        with torch.no_grad():
            top = torch.minimum(scores, cap, out=penalty).amax(dim=-1, keepdim=True)
            top = torch.where(torch.isfinite(top), top, 0.0)  # a query seeing nothing
            if causal:
                keep = cap.clamp_(0, 1) if not tracking else cap.clamp(0, 1)
        weights = scores.sub_(top).mul_(keep).exp_()
        # In place unless autograd keeps exp's result for the backward pass.
        weights = weights * keep if tracking else weights.mul_(keep)
        total = weights.sum(dim=-1, keepdim=True)
        seen = total > 0
        vw = torch.index_select(v_rows, 0, index, out=kvw).view(b, h, chunks, 2 * bs, d)
        out = torch.matmul(weights, vw, out=None if qo is None else qo.view(b, h, chunks, bs, d))
        total = torch.where(seen, total, 1.0)
        out = out / total if tracking else out.div_(total)
        lse = torch.where(seen, total.log() + top, float("-inf"))
        # Back to positions: a query's output sits at its rank in this round's order.
        rank = inverse(perm_q[r])
        outs.append(out.view(-1, d).index_select(0, (rank + first_out).view(-1)).view(b, h, n, d))
        lses.append(torch.gather(lse.view(b, h, padded), 2, rank))
        del out, lse
    del meets, temp, sbuf, kvw  # the queries' buffer then holds the products below
    prod = None if qo is None else qo[: b * h * n].view(b, h, n, d)
    self_score = (q * k).sum(dim=-1) * scale - self_count.log()
    lses.append(self_score.masked_fill(~real[:, None, :], float("-inf")))
    outs.append(v)
    # Rounds weighted by their log-sum-exp: together, one softmax over the union of keys.
    lse_all = torch.stack(lses)  # [T, b, h, L]
    top = lse_all.amax(dim=0)
    top = torch.where(torch.isfinite(top), top, 0.0)
    w = torch.exp(lse_all - top)
    total = w.sum(dim=0)
    result = torch.zeros_like(v)
    for weight, out in zip(w[..., None], outs, strict=True):
        result += weight * out if prod is None else torch.mul(weight, out, out=prod)
    total = torch.where(total > 0, total, 1.0)[..., None]
    result = result / total if tracking else result.div_(total)
    return result.to(out_dtype)


def _sizes(call: AttentionCall, options: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """(chunked length Lp, score elements S = b·h·Lp·2·bucket_size, hash columns n_buckets/2,
    hashed dimension d') of a call: the sizes the kernel's tensors are made of."""
    bs = options["bucket_size"]
    padded = -(-call.lq // bs) * bs
    half = max(2, 2 * ((call.lk + bs // 2) // bs)) // 2
    dim = call.d + (2 if options["hashing"] == "asymmetric" else 0)
    return padded, call.heads * padded * 2 * bs, half, dim


def reformer_bytes(call: AttentionCall, options: Mapping[str, Any]) -> int:
    """Peak bytes: linear in length for a fixed ``bucket_size`` (the hash projection aside).

    Alive throughout: every round's sort orders (int64) and chunk ids (int16), ``[b, h, L]``
    each, the keys' ranks and the self slot's count. Then the busiest of: hashing (the hashed
    q and k ``[b, h, L, d']`` and one round's projection ``[b, h, L, n_buckets/2]``, twice when
    rows of different real lengths mask columns); the rounds: q, k and v as rows (a copy of
    strided inputs, such as a projection's head split), buffers the size of a round's scores
    ``[b, h, Lp, 2·bucket_size]`` (the scores, the duplicate counts and, when causal, the cap;
    without autograd the chunk-id differences use the scores' buffer), the gathered queries
    and key window ``3·b·h·Lp·d`` (reused by every round) and the gather indices, with the
    earlier rounds' outputs and log-sum-exps; the combination (rows, outputs, sum, products).
    """
    work, cast = in_float32(call)
    if call.lq <= options["bucket_size"]:  # one chunk: exact attention, in float32
        return cast + full_bytes(replace(call, itemsize=work))
    rounds = options["num_hashes"]
    padded, scores, half, dim = _sizes(call, options)
    bh, n = call.heads, call.heads * call.lq
    kept = 2 * rounds * n * (INDEX + 2) + rounds * n * INDEX + n * work
    hashing = 2 * n * dim * work + n * half * work * (2 if call.padded else 1) + 4 * n * INDEX
    rows = 0 if cast else (call.queries + 2 * call.keys) * work
    chunked = (
        (3 if call.causal else 2) * scores * work
        + 3 * bh * padded * call.d * work
        + 3 * bh * padded * INDEX
        + (rounds - 1) * (call.queries + n) * work
    )
    combine = (rounds + 3) * call.queries * work + 3 * (rounds + 1) * n * work
    return cast + kept + max(hashing, rows + chunked, rows + combine)


def reformer_work(call: AttentionCall, options: Mapping[str, Any]) -> float:
    """Flop-equivalents per round: hashing q and k (a ``[L, d'] x [d', n_buckets/2]`` product
    and max/min passes) and their sorts, the score and value products over each query's
    ``2·bucket_size`` keys, the elementwise passes over the scores (count fill, co-location with
    every other round, log, scale, penalty, capped maximum, shift, mask twice, exp, sum) and the
    row gathers; then the combination of the rounds."""
    if call.lq <= options["bucket_size"]:  # one chunk: exact attention
        return full_work(call)
    rounds = options["num_hashes"]
    padded, scores, half, dim = _sizes(call, options)
    n = call.lq
    hashing = 2 * (HEAD_MATMUL * n * dim * half + ELEMENTWISE * (2 * n * half + n * dim))
    sorting = 2 * ELEMENTWISE * n * max(1.0, math.log2(n))
    per_head = scores / call.heads
    chunked = HEAD_MATMUL * 2 * per_head * call.d + ELEMENTWISE * per_head * (10 + 4 * (rounds - 1))
    gathers = ELEMENTWISE * 6 * padded * call.d
    combine = ELEMENTWISE * 3 * (rounds + 1) * n * call.d
    return call.heads * (rounds * (hashing + sorting + chunked + gathers) + combine)


BACKEND = Backend(
    name="reformer",
    order=8,
    exact=False,
    summary=(
        "Reformer: angular LSH buckets of the queries and keys (shared rotations, or SMYRF's "
        "asymmetric transform), sorted and cut into chunks; each query chunk attends to its own "
        "key chunk and the one before, over num_hashes rounds. O(L·bucket_size·d); exact when "
        "bucket_size >= L. Self-attention only."
    ),
    citation=(
        "Kitaev, Kaiser, Levskaya, Reformer, ICLR 2020; Daras, Kitaev, Odena, Dimakis, SMYRF, "
        "NeurIPS 2020"
    ),
    kernel=reformer_attention,
    memory=reformer_bytes,
    work=reformer_work,
    capabilities=Capabilities(cross_attention=False, causal_cross_attention=False),
    budget="bucket_size",
    options={
        "bucket_size": IntOption(
            default=64,
            minimum=4,
            maximum=4096,
            description="Chunk length: each query chunk sees this many keys and the chunk before.",
        ),
        "num_hashes": IntOption(
            default=2, minimum=1, maximum=16, description="Hash rounds, combined by log-sum-exp."
        ),
        "hashing": ChoiceOption(
            default="shared",
            choices=("shared", "asymmetric"),
            description=(
                "shared: the same rotations on q/|q| and k/|k|; asymmetric: SMYRF's transform "
                "first (max inner product as nearest neighbour), whose extra coordinate "
                "dominates angular buckets."
            ),
        ),
    },
)
