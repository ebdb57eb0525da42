"""The Reformer paper's shared-QK LSH attention (Kitaev, Kaiser, Levskaya, "Reformer: The
Efficient Transformer", ICLR 2020, §2–3), with the conventions of transformers'
``LSHSelfAttention`` (``transformers.models.reformer.modeling_reformer``), so a trained Reformer's
attention can be reproduced from its projections. No ``BACKEND`` here: the served backend,
for models with separate queries and keys, is :mod:`models.attention.reformer`.

Conventions (read from transformers, written anew):
    * one projection ``qk`` serves as queries; keys are ``qk`` scaled to unit RMS
      (``x / √(mean x² + 1e-6)``) and divided by √d: the score is q·k/‖k‖, queries unscaled;
    * bucket = argmax([xR; −xR]) with the given rotations ``[h, d, rounds, n_buckets/2]``; when
      any token of the batch is padded, padded tokens get an extra last bucket;
    * the ``rounds·L`` (bucket, round)-offset hashes are sorted stably (ties in position order),
      cut into chunks of ``chunk_length`` *across* rounds, and each chunk attends to itself and
      the chunk before it, chunk 0 wrapping round to the last;
    * masked pairs score −1e9, and a token's own position −1e5 (so it attends to itself only
      when it has no other key: the self mask is applied last, over the padding mask);
    * no duplicate correction; rounds are weighted by exp(lse − logsumexp over rounds);
    * a sequence no longer than ``chunk_length`` gets plain attention with the same masks.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _mask_values(dtype: torch.dtype) -> tuple[float, float]:
    """(masked pair, own position) score values, as transformers sets them per precision."""
    return (-1e4, -1e3) if dtype == torch.float16 else (-1e9, -1e5)


def lsh_shared_qk_attention(
    qk: Tensor,
    v: Tensor,
    rotations: Tensor,
    chunk_length: int,
    key_padding_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    """Shared-QK LSH attention, ``[b,h,L,d] x [b,h,L,d] -> [b,h,L,d]`` (transformers' context
    before its output dense layer).

    Args:
        qk: the shared query-key projection; v: the values.
        rotations: ``[h, d, rounds, n_buckets / 2]`` random rotations (transformers draws them
            with ``torch.randn`` after ``torch.manual_seed(hash_seed)``).
        chunk_length: tokens per chunk; ``rounds·L`` must be a multiple of it when L exceeds it.
        key_padding_mask: bool ``[b, L]``, True marks a real token.
        causal: a token sees earlier positions (and itself) only.
    """
    b, h, n, d = qk.shape
    masked, own = _mask_values(qk.dtype)
    keys = qk * torch.rsqrt(qk.square().mean(dim=-1, keepdim=True) + 1e-6) / math.sqrt(d)
    real = None if key_padding_mask is None else key_padding_mask[:, None, :]  # [b, 1, L]
    if n <= chunk_length:  # one chunk: plain attention, no hashing
        scores = qk @ keys.transpose(-1, -2)
        pos = torch.arange(n, device=qk.device)
        ok = None if real is None else real[:, :, None, :].expand(b, h, n, n)
        if causal:
            tri = pos[:, None] >= pos[None, :]
            ok = tri if ok is None else ok & tri
        if ok is not None:
            scores = torch.where(ok, scores, masked)
        scores = torch.where(pos[:, None] == pos[None, :], own, scores)
        return scores.softmax(dim=-1) @ v

    rounds, half = rotations.shape[2], rotations.shape[3]
    with torch.no_grad():
        proj = torch.einsum("bhld,hdrk->bhrlk", qk.detach(), rotations)
        bucket = torch.cat([proj, -proj], dim=-1).argmax(dim=-1)  # [b, h, rounds, L]
        per_round = 2 * half
        if key_padding_mask is not None and not bool(key_padding_mask.all()):
            per_round += 1  # padded tokens: one more bucket, the last of each round
            bucket = torch.where(key_padding_mask[:, None, None, :], bucket, 2 * half)
        offsets = torch.arange(rounds, device=qk.device)[:, None] * per_round
        order = torch.argsort((bucket + offsets).flatten(2), dim=-1, stable=True)  # [b, h, R·L]
        pos = order % n
        chunks = rounds * n // chunk_length
        pos_c = pos.view(b, h, chunks, chunk_length)
        pos_w = torch.cat([pos_c.roll(1, dims=2), pos_c], dim=-1)  # [b, h, C, 2·chunk]

    def window(x: Tensor) -> Tensor:
        """``x`` at the window's positions: ``[b, h, C, 2·chunk, d]``."""
        flat = pos_w.flatten(2)[..., None].expand(-1, -1, -1, d)
        return torch.gather(x, 2, flat).view(b, h, chunks, 2 * chunk_length, d)

    qs = torch.gather(qk, 2, pos[..., None].expand(-1, -1, -1, d))
    scores = qs.view(b, h, chunks, chunk_length, d) @ window(keys).transpose(-1, -2)
    ok = None
    if real is not None:
        ok = torch.gather(real.expand(b, h, n), 2, pos_w.flatten(2)).view(b, h, chunks, 1, -1)
    if causal:
        later = pos_c[..., :, None] >= pos_w[..., None, :]
        ok = later if ok is None else ok & later
    if ok is not None:
        scores = torch.where(ok, scores, masked)
    scores = torch.where(pos_c[..., :, None] == pos_w[..., None, :], own, scores)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    out = torch.exp(scores - lse) @ window(v)  # [b, h, C, chunk, d]
    # Back to (round, position) order, then the rounds weighted by their log-sum-exps.
    back = torch.empty_like(order).scatter_(
        -1, order, torch.arange(rounds * n, device=qk.device).expand_as(order)
    )
    out = torch.gather(out.view(b, h, rounds * n, d), 2, back[..., None].expand(-1, -1, -1, d))
    lse = torch.gather(lse.view(b, h, rounds * n), 2, back)
    lse = lse.view(b, h, rounds, n)
    # exp(lse − logsumexp(lse)), not softmax: the same rounding as transformers where a token
    # saw only itself (scores near −1e5, where float32's spacing is 0.008).
    weights = torch.exp(lse - torch.logsumexp(lse, dim=2, keepdim=True))[..., None]
    return (out.view(b, h, rounds, n, d) * weights).sum(dim=2)
