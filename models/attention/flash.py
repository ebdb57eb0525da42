"""Exact attention through ``torch.nn.functional.scaled_dot_product_attention`` (fused, tiled).

Same result as ``full`` without the Lq x Lk score matrix (Dao et al., "FlashAttention", NeurIPS
2022; Rabe & Staats, "Self-attention Does Not Need O(n²) Memory", 2021). On CUDA the call is pinned
to the flash and memory-efficient kernels, so a silent fallback to the O(L²) math kernel becomes
an error instead; on CPU it uses SDPA's fused CPU flash kernel, which takes a broadcast key
padding mask without expanding it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from models.attention.base import AttentionError, Backend, Capabilities, InputSpec, visible_keys

# CUDA: flash (fp16/bf16, no mask) first, then memory-efficient (any float, takes a mask).
CUDA_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
CPU_KERNELS = [SDPBackend.FLASH_ATTENTION]


def fused_kernels_for(device_type: str) -> list[SDPBackend]:
    """The SDPA kernels ``flash`` may use on a device type."""
    return CUDA_KERNELS if device_type == "cuda" else CPU_KERNELS


def flash_attention(
    q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None = None, causal: bool = False
) -> Tensor:
    """``[b,h,i,d] x [b,h,j,d] x [b,h,j,d] -> [b,h,i,d]``, exact, fused."""
    lq, lk = q.shape[-2], k.shape[-2]
    if key_padding_mask is None:
        mask, is_causal = None, causal
    else:
        # SDPA cannot combine is_causal with a mask: a causal padded call builds the Lq x Lk
        # boolean mask (1 byte per entry). Padding alone stays a broadcast [b,1,1,Lk] mask.
        mask, is_causal = visible_keys(lq, lk, key_padding_mask, causal, q.device), False
    try:
        with sdpa_kernel(fused_kernels_for(q.device.type)):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
    except RuntimeError as exc:  # "No available kernel": refuse rather than fall back to math
        raise AttentionError(f"flash: no fused SDPA kernel accepts this input ({exc})") from exc
    if mask is not None:
        # Queries that see no key: the fused kernels return 0 or NaN depending on kernel.
        out = torch.where(mask.any(dim=-1, keepdim=True), out, torch.zeros((), dtype=out.dtype))
    return out


def _fused_kernel_rules(spec: InputSpec) -> list[str]:
    reasons = []
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


BACKEND = Backend(
    name="flash",
    exact=True,
    summary="Exact attention via fused scaled_dot_product_attention kernels; memory linear in L.",
    citation="Dao et al., FlashAttention, NeurIPS 2022",
    kernel=flash_attention,
    capabilities=Capabilities(max_head_dim=256),
    extra_check=_fused_kernel_rules,
)
