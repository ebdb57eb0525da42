"""BigBird block-sparse attention (Zaheer et al., "Big Bird: Transformers for Longer
Sequences", NeurIPS 2020, section 2 and appendix D: the ITC layout).

The sequence is cut into blocks of ``B`` tokens (the last one padded inside the kernel, so any
length works). Query block ``i`` attends to:
    * its window, key blocks ``i - w .. i + w`` (``window_blocks``; 1, i.e. three blocks, as the
      paper and transformers);
    * the global blocks, the first and the last ``g`` blocks of the row (``global_blocks``);
      the global *query* blocks attend to every key, in one separate exact call;
    * ``r`` random blocks (``num_random_blocks``) among the blocks not already in the window or
      global.
A key block reached twice (a window overlapping a global block on a short row) is counted once.
Queries are computed a few blocks at a time against their gathered key blocks (fused SDPA under
a boolean mask); an input so short that a query block's ``K`` key blocks would be at least all
of it runs the same layout as one SDPA call under its ``[L, L]`` mask.
When a row's blocks are all covered (at most ``2g`` blocks, a window that spans the row, or the
random blocks taking every block left: with the defaults, rows of up to 7 blocks, 448 tokens;
causal, 6 blocks, 384 tokens) the result is exact attention.

Batch invariance: the layout of a row is computed from the row's own length, the last real key
plus one (the "last" global blocks are the row's own last real blocks), and the random blocks
come from a fixed hash of (query block, key block) rather than from any generator's state: block
``i`` takes the ``r`` candidates with the smallest hash (:func:`random_blocks`). The choice
therefore never depends on the other rows, the call, or (causal form) on the length.

Causal form (``causal=True``, ``Lq == Lk``): the window looks back only (``i - w .. i``, token
masked inside the diagonal block), the first ``g`` blocks stay global keys ("sinks"), and the
random blocks are drawn among past blocks outside the window. The first ``g`` query blocks see
their whole past through the window and sinks; the last blocks are *not* global in this form,
so that a query's keys depend only on its position, never on how long the input is.

Differences from transformers' ``BigBirdBlockSparseAttention``: any length and any window or
global count (it needs a multiple of the block size, at least ``2r + 5`` blocks, one window
block and one global block each side); random blocks from a fixed hash, the same for every head
(it draws per head with numpy, and only in training mode); a causal form. With its random
layout (:func:`block_sparse_attention` takes one, per head if wanted) the results agree.

Dimension legend: ``b`` rows, ``h`` heads, ``L`` length, ``d`` head dim, ``B`` block size,
``n = ceil(L / B)`` blocks, ``K`` key blocks per query block (window, global, random).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from models.attention.base import Backend, Capabilities, IntOption, zero_blind
from models.attention.block_layout import block_layout, random_blocks, row_blocks_of
from models.attention.pricing import ELEMENTWISE, FLOAT32, HEAD_MATMUL, INDEX, AttentionCall

CHUNK_BYTES = 4 * 2**20  # gathered keys per SDPA call: a few query blocks (see the kernel)
# Elementwise passes one gathered key or value element costs, fitted on CPU: kernel time against
# block_size at 8K tokens is linear with an intercept (the part that does not grow with B: the
# gathers and SDPA's per-row work) about eight times one pass over the gathered blocks.
GATHER_PASSES = 8


def _tokens(x: Tensor, padded_length: int, block: int) -> Tensor:
    """``[b, h, L, d] -> [b, n, B·h·d]``: token-major blocks (a view for a head-split input
    whose length is a multiple of the block)."""
    b, h, length, d = x.shape
    t = x.transpose(1, 2)  # [b, L, h, d]
    if padded_length != length:
        t = F.pad(t, (0, 0, 0, 0, 0, padded_length - length))
    return t.reshape(b, padded_length // block, block * h * d)


def _gather_blocks(x: Tensor, index: Tensor) -> Tensor:
    """``x[b, index[b, m]]`` for ``x`` ``[b, n, e]`` and ``index`` ``[b, m]``: ``[b, m, e]``.
    One ``index_select`` of whole rows (a copy per block), far faster than an elementwise
    ``gather`` through an expanded index."""
    b, n, e = x.shape
    rows = index + torch.arange(b, device=index.device)[:, None] * n
    return x.reshape(b * n, e).index_select(0, rows.reshape(-1)).view(b, -1, e)


def block_sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    block_size: int,
    random_layout: Tensor,
    window_blocks: int = 1,
    global_blocks: int = 1,
    attn_bias: Tensor | None = None,
) -> Tensor:
    """BigBird attention with an explicit random layout, ``[b,h,L,d]`` x3 -> ``[b,h,L,d]``.

    ``random_layout``: long ``[b or 1, h or 1, n, r]``, the random key blocks of each query
    block (-1: none; ignored for global query blocks), the same for every head or one per head
    (heads are then folded into rows). Window and global blocks follow the module docstring.
    ``attn_bias`` (broadcastable to ``[b, h, L, L]``) is added to the scores the layout keeps.
    """
    b, h, length, d = q.shape
    if (
        random_layout.shape[1] > 1 and attn_bias is None
    ):  # one layout per head: each head becomes a one-head row
        fq, fk, fv = (t.reshape(b * h, 1, length, d) for t in (q, k, v))
        mask = None if key_padding_mask is None else key_padding_mask.repeat_interleave(h, 0)
        rand = random_layout.expand(b, h, -1, -1).reshape(b * h, 1, *random_layout.shape[2:])
        out = block_sparse_attention(
            fq, fk, fv, mask, causal, block_size, rand, window_blocks, global_blocks
        )
        return out.reshape(b, h, length, d)
    nb, bs, g = math.ceil(length / block_size), block_size, global_blocks
    padded = nb * bs
    row_blocks = row_blocks_of(key_padding_mask, b, length, bs, q.device)
    rand = random_layout[:, 0].expand(b, -1, -1).to(q.device)
    index, used = block_layout(row_blocks, nb, window_blocks, g, rand, causal)
    kk = index.shape[-1]
    # Which gathered keys each query may see: used slots, real keys, (causal) not in the future.
    real = torch.ones(b, padded, dtype=torch.bool, device=q.device)
    if key_padding_mask is not None:
        real[:, :length] = key_padding_mask
    real[:, length:] = False
    # Gathering would copy every key per query block, or a score bias is given (an [L, L]
    # tensor already, as the one masked call's mask is): the layout as one masked call.
    if kk * bs >= padded or attn_bias is not None:
        args = (real[:, :length], causal, bs, g, row_blocks, index, used, attn_bias)
        return _dense(q, k, v, *args)
    visible = _gather_blocks(real.view(b, nb, bs), index.view(b, nb * kk)).view(b, nb, kk, bs)
    visible = (visible & used[..., None]).view(b * nb, 1, 1, kk * bs)
    if causal:
        q_pos = torch.arange(padded, device=q.device).view(1, nb, bs, 1)
        k_pos = (index[..., None] * bs + torch.arange(bs, device=q.device)).view(b, nb, 1, -1)
        visible = visible & (k_pos <= q_pos).view(b * nb, 1, bs, kk * bs)
    # Token-major blocks [b·n, B·h·d]: a query block's K key blocks are K whole rows, and SDPA
    # reads the gathered [·, K·B, h, d] keys through a transposed view. The gather runs a few
    # query blocks at a time (CHUNK_BYTES): one copy of every block's keys at once costs more in
    # fresh pages than the products themselves, and peak memory stays small.
    rows = (index + torch.arange(b, device=q.device)[:, None, None] * nb).view(b * nb, kk)
    kt = _tokens(k, padded, bs).view(b * nb, bs * h * d)
    vt = _tokens(v, padded, bs).view(b * nb, bs * h * d)
    q_tokens = _tokens(q, padded, bs)  # [b, n, B·h·d]
    qb = q_tokens.view(b * nb, bs, h, d)
    out = q.new_empty(b * nb, bs, h, d)
    step = max(1, CHUNK_BYTES // (kk * bs * h * d * q.element_size()))
    for s in range(0, b * nb, step):
        n, picked = min(step, b * nb - s), rows[s : s + step].reshape(-1)
        kb = kt.index_select(0, picked).view(n, kk * bs, h, d).transpose(1, 2)
        vb = vt.index_select(0, picked).view(n, kk * bs, h, d).transpose(1, 2)
        part = F.scaled_dot_product_attention(
            qb[s : s + n].transpose(1, 2), kb, vb, attn_mask=visible[s : s + n]
        )
        out[s : s + n] = part.transpose(1, 2)
    out = zero_blind(out, visible.any(dim=-1).transpose(1, 2)[..., None])
    out = out.view(b, nb, bs * h * d)  # token-major, as q_tokens
    if g > 0 and not causal:
        # Global query blocks (the first and the row's last g) attend to every key at once.
        first = torch.arange(g, device=q.device)
        ends = row_blocks.clamp_min(1)[:, None]
        glob = torch.cat([first.expand(b, g).minimum(ends - 1), (ends - g + first).clamp_min(0)], 1)
        gq = _gather_blocks(q_tokens, glob).view(b, 2 * g * bs, h, d).transpose(1, 2)
        if key_padding_mask is None:
            gout = F.scaled_dot_product_attention(gq, k, v)
        else:
            key_mask = key_padding_mask[:, None, None, :]
            gout = F.scaled_dot_product_attention(gq, k, v, attn_mask=key_mask)
            gout = zero_blind(gout, key_padding_mask.any(dim=-1)[:, None, None, None])
        gout = gout.transpose(1, 2).reshape(b, 2 * g, bs * h * d)
        target = glob[:, :, None].expand(-1, -1, bs * h * d)
        out.scatter_(1, target, gout)
    return out.view(b, padded, h, d)[:, :length].transpose(1, 2)


def _dense(q, k, v, real, causal, bs, g, row_blocks, index, used, bias=None) -> Tensor:
    """Short inputs (``K·B >= n·B``), or a score bias: the same layout as one SDPA call under
    its ``[L, L]`` mask (with the bias: the bias where the layout keeps a score, -inf elsewhere)."""
    b, nb = index.shape[:2]
    length = q.shape[-2]
    blocks = torch.zeros(b, nb, nb + 1, dtype=torch.bool, device=q.device)
    blocks.scatter_(2, torch.where(used, index, nb), True)  # unused slots land in column n
    blocks = blocks[..., :nb]
    if not causal and g > 0:  # global query blocks see every block of the row
        i = torch.arange(nb, device=q.device)
        ends = row_blocks[:, None]
        glob = (i < g) | ((i >= ends - g) & (i < ends))
        blocks |= glob[:, :, None] & (i < ends)[:, None, :]
    mask = blocks.repeat_interleave(bs, 1)[:, :length].repeat_interleave(bs, 2)[..., :length]
    mask = (mask & real[:, None, :])[:, None]  # [b, 1, L, L]
    if causal:
        mask &= torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
    return _masked_sdpa(q, k, v, mask, bias)


def _masked_sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, bias: Tensor | None) -> Tensor:
    """SDPA under a boolean ``mask`` (plus ``bias`` where it is True); zeros for blind queries."""
    sees = mask.any(dim=-1, keepdim=True)
    if bias is not None:
        mask = torch.where(mask, bias.to(q.dtype), float("-inf"))
    return zero_blind(F.scaled_dot_product_attention(q, k, v, attn_mask=mask), sees)


def bigbird_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    causal: bool = False,
    block_size: int = 64,
    num_random_blocks: int = 3,
    window_blocks: int = 1,
    global_blocks: int = 1,
    attn_bias: Tensor | None = None,
) -> Tensor:
    """BigBird attention, ``[b,h,L,d]`` x3 -> ``[b,h,L,d]`` (self-attention, ``Lq == Lk``).

    Each row's layout follows its own length (last real key + 1) and the fixed random blocks of
    :func:`random_blocks`; rows whose blocks are all global (non-causal: at most ``2g`` blocks;
    causal: at most ``g``) get exact attention. ``attn_bias`` (a relative position bias,
    broadcastable to ``[b, h, L, L]``) is added to every score the layout keeps.
    """
    b, _, length, _ = q.shape
    nb = math.ceil(length / block_size)
    if nb <= (global_blocks if causal else 2 * global_blocks):
        return _exact(q, k, v, key_padding_mask, causal, attn_bias)
    row_blocks = row_blocks_of(key_padding_mask, b, length, block_size, q.device)
    rand = torch.full((b, 1, nb, num_random_blocks), -1, dtype=torch.long)
    for n in sorted(set(row_blocks.tolist()) - {0}):  # one layout per distinct row length
        layout = random_blocks(n, window_blocks, global_blocks, num_random_blocks, causal)
        rand[(row_blocks == n).cpu(), 0, :n] = layout
    return block_sparse_attention(
        q, k, v, key_padding_mask, causal, block_size, rand, window_blocks, global_blocks, attn_bias
    )


def _exact(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None,
    causal: bool,
    bias: Tensor | None = None,
) -> Tensor:
    """Exact SDPA attention (every block global), zeros for queries that see no key."""
    if key_padding_mask is None and bias is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    n = q.shape[-2]
    mask = torch.ones(1, 1, 1, n, dtype=torch.bool, device=q.device)
    if key_padding_mask is not None:
        mask = key_padding_mask[:, None, None, :]
    if causal:
        mask = mask & torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    return _masked_sdpa(q, k, v, mask, bias)


def _slots(options: Mapping[str, Any], causal: bool) -> int:
    """``K``: key blocks gathered per query block (window, global, random)."""
    w, g, r = options["window_blocks"], options["global_blocks"], options["num_random_blocks"]
    return (w + 1 if causal else 2 * w + 1) + (g if causal else 2 * g) + r


def _all_global(call: AttentionCall, options: Mapping[str, Any]) -> bool:
    nb = math.ceil(call.lk / options["block_size"])
    g = options["global_blocks"]
    return nb <= (g if call.causal else 2 * g)


def _tiles(call: AttentionCall, lq: int, lk: int) -> int:
    """Bytes of the CPU SDPA kernel's per-thread score blocks for ``lq`` queries over ``lk``
    keys (query blocks of 256 / 64 / 32 rows by length, key blocks of 512); none on CUDA."""
    if call.device_type != "cpu":
        return 0
    rows = 256 if lq >= 768 else 64 if lq >= 192 else 32
    return torch.get_num_threads() * min(lq, rows) * (min(lk, 512) + call.d) * FLOAT32


def bigbird_bytes(call: AttentionCall, options: Mapping[str, Any]) -> int:
    """Peak bytes, following the kernel: the padded token-major copies of q, k, v (none for a
    head-split input whose length is a multiple of the block size), the blocked output
    ``[b, n·B, h, d]``, the boolean visibility mask ``[b·n, 1, 1 or B, K·B]`` and the layout's
    indices; then, per chunk of query blocks, the gathered key and value blocks, SDPA's output
    and its additive copy of the mask, and each CPU thread's score tile. Non-causal, the global
    query blocks add their gathered queries and output ``[b, h, 2g·B, d]``. When every block is
    global: exact SDPA's output (and its mask when padded); when ``K >= n``, the one masked call's
    ``[b, L, L]`` masks."""
    e = call.itemsize
    b, h, d = call.b, call.h, call.d
    if _all_global(call, options):
        mask = call.b * call.lk * (1 + e) * (call.lq if call.causal else 1) if call.padded else 0
        where = call.padded and call.device_type != "cpu"  # CPU skips it when every row sees
        return call.queries * e * (2 if where else 1) + mask + _tiles(call, call.lq, call.lk)
    bs = options["block_size"]
    nb = math.ceil(call.lq / bs)
    padded, kk = nb * bs, _slots(options, call.causal)
    if kk >= nb:  # one SDPA call under the [b, 1, L, L] mask: booleans, SDPA's float copy
        square = b * call.lq * call.lq
        causal = call.lq**2 if call.causal else 0
        return square * (2 + e) + causal + call.queries * e + _tiles(call, call.lq, call.lk)
    rows = bs if call.causal else 1
    copies = 3 * b * padded * h * d if padded != call.lq else 0
    blocked = b * h * padded * d
    masks = b * nb * rows * kk * bs + b * nb * kk * (3 * INDEX + kk)
    n = min(max(1, CHUNK_BYTES // (kk * bs * h * d * e)), b * nb)
    chunk = (2 * kk + 1) * n * bs * h * d * e + n * rows * kk * bs * e + _tiles(call, bs, kk * bs)
    glob = 0
    if not call.causal and options["global_blocks"] > 0:
        span = 2 * options["global_blocks"] * bs
        glob = 2 * b * h * span * d * e + _tiles(call, span, call.lk)
        glob += call.b * call.lk * (1 + e) if call.padded else 0
    return (copies + blocked) * e + masks + max(chunk, glob)


def bigbird_work(call: AttentionCall, options: Mapping[str, Any]) -> float:
    """Flop-equivalents: the two per-head products of each query block with its ``K·B``
    gathered keys and the fused softmax and mask over them, the copies that gather the key and
    value blocks (:data:`GATHER_PASSES` each), and (non-causal) the global query blocks'
    products with every key."""
    if _all_global(call, options):
        s = call.scores / (2 if call.causal else 1)
        return HEAD_MATMUL * 2 * s * call.d + ELEMENTWISE * s
    bs = options["block_size"]
    nb = math.ceil(call.lq / bs)
    keys = _slots(options, call.causal) * bs
    if keys >= nb * bs:  # one masked call over every pair, and the mask built per row
        return HEAD_MATMUL * 2 * call.scores * call.d + ELEMENTWISE * (
            call.scores + 3 * call.b * call.lq * call.lk
        )
    scores = call.heads * nb * bs * keys
    gathers = 2 * call.heads * nb * keys * call.d
    glob = 0 if call.causal else call.heads * 2 * options["global_blocks"] * bs * call.lk
    products = HEAD_MATMUL * 2 * (scores + glob) * call.d
    return products + ELEMENTWISE * (2 * scores + glob + GATHER_PASSES * gathers)


BACKEND = Backend(
    name="bigbird",
    order=7,
    exact=False,
    summary=(
        "BigBird block-sparse attention: each block of B queries sees its window of blocks, "
        "the first and last (global) blocks and r fixed random blocks; global blocks see every "
        "key. O(L·K·B·d); exact when the global or window blocks cover the row. Causal form: "
        "past window, first blocks and past random blocks. Self-attention only."
    ),
    citation="Zaheer et al., Big Bird: Transformers for Longer Sequences, NeurIPS 2020",
    kernel=bigbird_attention,
    budget="block_size",
    memory=bigbird_bytes,
    work=bigbird_work,
    # A score bias is added to the scores the layout keeps (MPNet's relative positions).
    capabilities=Capabilities(cross_attention=False, causal_cross_attention=False, score_bias=True),
    options={
        "block_size": IntOption(
            default=64, minimum=8, maximum=1024, description="Tokens per block B."
        ),
        "num_random_blocks": IntOption(
            default=3, minimum=0, maximum=32, description="Random key blocks r per query block."
        ),
        "window_blocks": IntOption(
            default=1,
            minimum=0,
            maximum=32,
            description="Window blocks w on each side of a query block (1: three blocks).",
        ),
        "global_blocks": IntOption(
            default=1,
            minimum=0,
            maximum=16,
            description="Global blocks g at each end of a row (causal: the first g only).",
        ),
    },
)
