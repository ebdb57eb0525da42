"""A tiny random-weight TimesFM 2.5 folder, written by transformers' own class.

The weights are redrawn wider than transformers' initialisation (which gives near-zero
projections, so every backend would answer alike and the tests could not tell them apart)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

# Small enough for a test, shaped like the real one where it matters: patches of 32 steps,
# causal self-attention with its own query scaling, both output heads and nine quantile levels.
TINY = {
    "context_length": 1024,
    "horizon_length": 32,
    "output_quantile_len": 64,
    "num_hidden_layers": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "head_dim": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
}


def save_tiny_timesfm(folder: Path, seed: int = 0, **overrides: Any) -> Path:
    """Write a seeded random-weight ``TimesFm2_5ModelForPrediction`` to ``folder``."""
    from transformers import TimesFm2_5Config, TimesFm2_5ModelForPrediction

    torch.manual_seed(seed)
    model = TimesFm2_5ModelForPrediction(TimesFm2_5Config(**{**TINY, **overrides})).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    model.save_pretrained(str(folder))
    return folder


def reference(folder: Path) -> Any:
    """The same folder loaded by transformers alone (its own eager attention)."""
    from transformers import TimesFm2_5ModelForPrediction

    return TimesFm2_5ModelForPrediction.from_pretrained(
        str(folder), attn_implementation="eager"
    ).eval()
