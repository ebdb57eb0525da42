"""FlashAttention-2's published speeds, the reference column of the GPU check's attention table.

These are other people's measurements, read off the bar labels of the papers' figures; nothing
here was measured by this project. Every figure uses the shapes of the FlashAttention-2 paper
(Dao 2023, Sec. 4.1): hidden size 2048 (32 heads of 64 or 16 of 128), batch x sequence length =
16k tokens, fp16/bf16, with and without a causal mask, and counts FLOPs as
``4 * batch * heads * L^2 * head_dim`` for the forward pass, halved with a causal mask, and 2.5x
that for the backward pass (so forward + backward is 3.5x the forward count).

* :data:`FA2_H100_FWD_BWD` -- FlashAttention-2 paper, Figure 7, "Attention forward + backward
  speed (H100 80GB SXM5)"; reproduced as ``assets/flash2_h100_fwd_bwd_benchmark.png`` in the
  Dao-AILab/flash-attention repository.
* :data:`FA2_A100_FWD_BWD` -- the same paper, Figure 4, "Attention forward + backward speed
  (A100 80GB SXM4)" (``assets/flash2_a100_fwd_bwd_benchmark.png``). The legend covers three
  labels without a mask: at 1k (head dim 64: 153; 128: 173) they are faint but legible, at 512
  with head dim 128 hidden, so ``None``.
* :data:`FA2_H100_FWD` -- forward only. The FlashAttention-2 paper shows forward-only speed for
  the A100 alone, so this column is FlashAttention-2 as measured in the FlashAttention-3 paper
  (Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao 2024, arXiv 2407.08608), its figure "Attention
  forward speed (FP16/BF16) on H100" (``assets/flash3_fp16_fwd.png``), the FlashAttention-2 bars.

Keys: ``(causal, head_dim)``; values: TFLOP/s at sequence lengths :data:`LENGTHS`.
"""

from __future__ import annotations

LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
TOKENS = 16384  # batch x sequence length in every figure
HIDDEN = 2048  # heads x head dim in every figure

Figure = dict[tuple[bool, int], tuple[int | None, ...]]

FA2_H100_FWD_BWD: Figure = {
    (False, 64): (215, 254, 274, 288, 294, 296),
    (False, 128): (248, 294, 320, 326, 335, 338),
    (True, 64): (141, 192, 232, 257, 273, 284),
    (True, 128): (163, 221, 265, 294, 308, 328),
}

FA2_A100_FWD_BWD: Figure = {
    (False, 64): (132, 153, 162, 171, 175, 176),
    (False, 128): (None, 173, 187, 196, 201, 203),
    (True, 64): (88, 119, 140, 156, 165, 171),
    (True, 128): (99, 133, 155, 173, 182, 189),
}

FA2_H100_FWD: Figure = {
    (False, 64): (282, 306, 318, 321, 322, 324),
    (False, 128): (309, 350, 362, 368, 370, 370),
    (True, 64): (180, 229, 262, 284, 295, 299),
    (True, 128): (191, 260, 298, 319, 333, 335),
}

SOURCES = {
    "fa2_h100_fwd_bwd": "FlashAttention-2 paper (Dao 2023), Fig. 7, H100 80GB SXM5, fwd+bwd",
    "fa2_a100_fwd_bwd": "FlashAttention-2 paper (Dao 2023), Fig. 4, A100 80GB SXM4, fwd+bwd",
    "fa2_h100_fwd": "FlashAttention-2 measured in the FlashAttention-3 paper (Shah et al. 2024), "
    "H100 80GB SXM5, FP16 forward",
}
_FIGURES = {
    "fa2_h100_fwd_bwd": FA2_H100_FWD_BWD,
    "fa2_a100_fwd_bwd": FA2_A100_FWD_BWD,
    "fa2_h100_fwd": FA2_H100_FWD,
}


def fa2_shape(seq_len: int, head_dim: int, tokens: int = TOKENS) -> tuple[int, int]:
    """(batch, heads) of the papers' benchmark at ``seq_len`` and ``head_dim``: ``tokens`` in
    all (the papers': 16k), hidden size 2048; at least one row."""
    return max(1, tokens // seq_len), max(1, HIDDEN // head_dim)


def forward_flops(batch: int, heads: int, seq_len: int, head_dim: int, causal: bool) -> float:
    """The forward pass's FLOPs as the papers count them (two matmuls; half with a causal
    mask)."""
    return 4.0 * batch * heads * seq_len**2 * head_dim / (2 if causal else 1)


def published(causal: bool, head_dim: int, seq_len: int) -> dict[str, int | None]:
    """Every published figure for one shape (``None`` where a figure has no such bar)."""
    out: dict[str, int | None] = {}
    for key, figure in _FIGURES.items():
        bars = figure.get((causal, head_dim))
        out[key] = bars[LENGTHS.index(seq_len)] if bars and seq_len in LENGTHS else None
    return out
