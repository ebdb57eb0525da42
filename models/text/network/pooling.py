"""Sentence pooling over packed token states, as sentence-transformers' ``Pooling`` module does it.

Modes (Reimers & Gurevych, "Sentence-BERT", EMNLP 2019, section 3; Muennighoff, "SGPT", 2022,
for position-weighted means): ``cls`` (first token), ``mean``, ``max``, ``mean_sqrt_len_tokens``
(sum / sqrt(count)), ``weightedmean`` (token ``p`` weighted ``p + 1``) and ``lasttoken``. Several
modes concatenate in the order given. ``skip`` leading tokens of every text (a prompt that the
model's ``include_prompt: false`` keeps out of pooling) take no part.

Legend: ``t`` packed tokens, ``b`` texts, ``c`` hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# sentence-transformers' older pooling config: one flag per mode, concatenated in this order.
LEGACY_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


@dataclass(frozen=True)
class Pooling:
    """How token states become one vector per text.

    Attributes:
        modes: pooling modes, concatenated in this order.
        include_prompt: whether prompt tokens take part (False: they are skipped).
    """

    modes: tuple[str, ...] = ("mean",)
    include_prompt: bool = True

    def __post_init__(self) -> None:
        unknown = [m for m in self.modes if m not in MODES]
        if unknown or not self.modes:
            raise ValueError(
                f"pooling mode(s) {unknown or 'none'} not supported; supported: {', '.join(MODES)}"
            )

    def describe(self) -> str:
        """One line for the model card."""
        text = " + ".join(self.modes)
        return text if self.include_prompt else f"{text} (prompt tokens excluded)"


def pool(
    x: Tensor, rows: Tensor, positions: Tensor, lengths: Tensor, pooling: Pooling, skip: int = 0
) -> Tensor:
    """``[t, c]`` packed token states -> ``[b, c * len(modes)]``.

    Args:
        rows: ``[t]`` text of each token; positions: ``[t]`` its position in the text;
        lengths: ``[b]`` tokens per text; skip: leading tokens per text left out of pooling
            (never all of them: at least the last token stays).
    """
    b, c = lengths.shape[0], x.shape[-1]
    starts = torch.cumsum(lengths, 0) - lengths  # [b] index of each text's first token
    first = torch.minimum(torch.full_like(lengths, skip), lengths - 1)  # [b]
    kept = positions >= first[rows]  # [t]
    count = (lengths - first).to(x.dtype)[:, None]  # [b, 1]
    out: list[Tensor] = []
    sums: Tensor | None = None
    for mode in pooling.modes:
        if mode == "cls":
            out.append(x[starts + first])
        elif mode == "lasttoken":
            out.append(x[starts + lengths - 1])
        elif mode == "max":
            masked = x.masked_fill(~kept[:, None], float("-inf"))
            index = rows[:, None].expand(-1, c)
            full = x.new_full((b, c), float("-inf"))
            out.append(full.scatter_reduce(0, index, masked, reduce="amax"))
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            if sums is None:
                weights = kept.to(x.dtype)[:, None]
                sums = x.new_zeros(b, c).index_add_(0, rows, x * weights)
            out.append(sums / (count if mode == "mean" else count.sqrt()))
        else:  # weightedmean
            weights = ((positions + 1) * kept).to(x.dtype)[:, None]
            total = x.new_zeros(b, c).index_add_(0, rows, x * weights)
            norm = x.new_zeros(b, 1).index_add_(0, rows, weights)
            out.append(total / norm.clamp_min(1e-9))
    return out[0] if len(out) == 1 else torch.cat(out, dim=-1)
