"""Exact attention through ``torch.nn.functional.scaled_dot_product_attention`` (fused, tiled).

Same result as ``full`` without the Lq x Lk score matrix (Dao et al., "FlashAttention", NeurIPS
2022; Rabe & Staats, "Self-attention Does Not Need O(n²) Memory", 2021). On CUDA the call is pinned
to the flash and memory-efficient kernels, so a silent fallback to the O(L²) math kernel becomes
an error instead; on CPU it uses SDPA's fused CPU flash kernel, which takes a broadcast key
padding mask without expanding it.

Padded batches (option ``padding``): the FlashAttention kernel takes no mask, so a padded batch
with ``padding='mask'`` runs the memory-efficient kernel with a broadcast key mask (and computes
the padded positions too). ``padding='jagged'`` packs the real tokens of each row into a nested
(jagged) tensor instead, which SDPA runs with the variable-length FlashAttention kernel (Dao,
"FlashAttention-2", 2023, Sec. 3: sequences of different lengths in one launch, no padding
work); CUDA only, since SDPA has no fused CPU kernel for nested tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from models.attention.base import (
    AttentionError,
    Backend,
    Capabilities,
    ChoiceOption,
    InputSpec,
    repeat_kv_heads,
    visible_keys,
    zero_blind,
)
from models.attention.pricing import ELEMENTWISE, FLOAT32, HEAD_MATMUL, AttentionCall

# CUDA: flash (fp16/bf16, no mask) first, then memory-efficient (any float, takes a mask).
CUDA_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
CPU_KERNELS = [SDPBackend.FLASH_ATTENTION]


def fused_kernels_for(device_type: str) -> list[SDPBackend]:
    """The SDPA kernels ``flash`` may use on a device type."""
    return CUDA_KERNELS if device_type == "cuda" else CPU_KERNELS


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Tensor | None = None,
    causal: bool = False,
    padding: str = "mask",
    attn_bias: Tensor | None = None,
) -> Tensor:
    """``[b,h,i,d] x [b,h,j,d] x [b,h,j,d] -> [b,h,i,d]``, exact, fused.

    With ``padding='jagged'``, padded non-causal self-attention runs on the real tokens only and
    the rows at padded positions come back as zeros (other inputs take the mask path).
    ``attn_bias`` (broadcastable to ``[b,h,i,j]``) is added to the scaled scores: SDPA takes it
    as a float mask, with the keys a query may not see at -inf.
    """
    lq, lk = q.shape[-2], k.shape[-2]
    grouped = k.shape[1] != q.shape[1]  # grouped-query keys: SDPA's enable_gqa reads them as is
    if grouped and (attn_bias is not None or padding == "jagged"):
        k, v = repeat_kv_heads(k, q.shape[1]), repeat_kv_heads(v, q.shape[1])
        grouped = False
    if attn_bias is not None:
        return _biased(q, k, v, key_padding_mask, causal, attn_bias)
    if padding == "jagged" and key_padding_mask is not None and not causal and lq == lk:
        return jagged_self_attention(q, k, v, key_padding_mask, fused_kernels_for(q.device.type))
    if key_padding_mask is None:
        mask, is_causal = None, causal
    else:
        # SDPA cannot combine is_causal with a mask: a causal padded call builds the Lq x Lk
        # boolean mask (1 byte per entry). Padding alone stays a broadcast [b,1,1,Lk] mask.
        mask, is_causal = visible_keys(lq, lk, key_padding_mask, causal, q.device), False
    kernels = fused_kernels_for(q.device.type)
    gqa = {"enable_gqa": True} if grouped else {}
    out = _fused_sdpa(q, k, v, kernels, "input", attn_mask=mask, is_causal=is_causal, **gqa)
    return _zero_blind_queries(out, mask)


def _fused_sdpa(
    q: Tensor, k: Tensor, v: Tensor, kernels: list[SDPBackend], what: str, **sdpa_args: Any
) -> Tensor:
    """SDPA restricted to ``kernels``. "No available kernel" becomes an :class:`AttentionError`
    naming ``what`` was refused, rather than a fall-back to the O(L²) math kernel."""
    try:
        with sdpa_kernel(kernels):
            return F.scaled_dot_product_attention(q, k, v, **sdpa_args)
    except RuntimeError as exc:
        raise AttentionError(f"flash: no fused SDPA kernel accepts this {what} ({exc})") from exc


def _zero_blind_queries(out: Tensor, mask: Tensor | None) -> Tensor:
    """``out`` with zeros for the queries that see no key (:func:`zero_blind`)."""
    return out if mask is None else zero_blind(out, mask.any(dim=-1, keepdim=True))


def _biased(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, causal: bool, bias: Tensor
) -> Tensor:
    """Fused SDPA with an additive score bias (and the padding / causal mask folded into it)."""
    visible = visible_keys(q.shape[-2], k.shape[-2], key_padding_mask, causal, q.device)
    if visible is not None:
        bias = torch.where(visible, bias, torch.tensor(float("-inf"), dtype=bias.dtype))
    out = _fused_sdpa(q, k, v, fused_kernels_for(q.device.type), "input", attn_mask=bias)
    return _zero_blind_queries(out, visible)


def jagged_self_attention(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor, kernels: list[SDPBackend]
) -> Tensor:
    """Self-attention over the real tokens of each row, as one nested (jagged) SDPA call.

    ``key_padding_mask`` ``[b, L]`` marks the real tokens (queries and keys alike). Real tokens
    are gathered into ``[total, h, d]`` with per-row offsets, attended, and scattered back;
    padded positions get zeros. ``kernels``: the SDPA kernels allowed (tests pass MATH on CPU).
    """
    b, h, n, d = q.shape
    real = key_padding_mask.reshape(b * n)
    offsets = F.pad(key_padding_mask.sum(dim=1).cumsum(0), (1, 0))

    def pack(t: Tensor) -> Tensor:  # [b, h, n, d] -> nested [b, h, j, d]
        tokens = t.transpose(1, 2).reshape(b * n, h, d)[real]  # [total, h, d]
        return torch.nested.nested_tensor_from_jagged(tokens, offsets=offsets).transpose(1, 2)

    out = _fused_sdpa(pack(q), pack(k), pack(v), kernels, "jagged input")
    dense = q.new_zeros(b * n, h, d)
    dense[real] = out.transpose(1, 2).values()
    return dense.view(b, n, h, d).transpose(1, 2)


def _fused_kernel_rules(spec: InputSpec, options: Mapping[str, Any]) -> list[str]:
    reasons = []
    if options.get("padding") == "jagged" and spec.device_type != "cuda":
        reasons.append(
            "flash: padding='jagged' runs the variable-length CUDA kernel; SDPA has no fused CPU "
            "kernel for nested tensors, so use padding='mask' on CPU"
        )
    if spec.device_type == "cuda":
        if spec.dtype == torch.float64:
            reasons.append(
                "flash: the fused CUDA kernels take float16, bfloat16 or float32, not float64"
            )
        if spec.head_dim % 8 != 0:
            reasons.append(
                f"flash: fused CUDA kernels need a head dimension divisible by 8, got {spec.head_dim}"
            )
    return reasons


def flash_bytes(call: AttentionCall, options: Mapping[str, Any] | None = None) -> int:
    """Peak bytes: the output and a float32 logsumexp per query row, and on CPU each thread's
    score tile (up to ``256 x 512`` float32; on CUDA tiles live on chip): linear in length. A
    padded call adds the broadcast mask (``[b, 1, 1, Lk]``, converted to the kernel's additive
    form) and the ``torch.where`` that zeroes queries seeing no key; a padded *causal* call
    builds the ``[b, 1, Lq, Lk]`` mask (boolean, then additive): the only quadratic case.
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


def flash_work(call: AttentionCall, options: Mapping[str, Any] | None = None) -> float:
    """Flop-equivalents: ``full``'s two products, but the softmax stays in tiles (one pass) and
    a causal call skips the blocks above the diagonal (about half)."""
    s = call.scores / (2 if call.causal and call.lq == call.lk else 1)
    return HEAD_MATMUL * 2 * s * call.d + ELEMENTWISE * s


BACKEND = Backend(
    name="flash",
    order=2,
    exact=True,
    summary="Exact attention via fused scaled_dot_product_attention kernels; memory linear in L.",
    citation="Dao et al., FlashAttention, NeurIPS 2022",
    kernel=flash_attention,
    memory=flash_bytes,
    work=flash_work,
    capabilities=Capabilities(max_head_dim=256, score_bias=True, grouped_kv=True),
    options={
        "padding": ChoiceOption(
            default="mask",
            choices=("mask", "jagged"),
            description=(
                "How a padded batch reaches the kernel: 'mask' (memory-efficient kernel with a "
                "key mask) or 'jagged' (real tokens only, variable-length flash kernel; CUDA)"
            ),
        )
    },
    extra_check=_fused_kernel_rules,
)
