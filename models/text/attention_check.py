"""Whether an attention backend can run a BERT-family encoder's self-attention, asked once per
request by every text model (sentence encoders, cross-encoders, classifiers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from models.attention import BACKENDS, AttentionError, InputSpec, get_backend
from models.text.bert import BertEncoder
from models.text.config import BertConfig


def check_text_attention(
    config: BertConfig,
    max_tokens: int,
    dtype: torch.dtype,
    device: torch.device,
    name: str,
    backend: str,
    options: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Resolved options for ``backend`` on a padded, non-causal self-attention of up to
    ``max_tokens`` tokens with ``config``'s head width and score bias, in ``dtype`` on ``device``.

    Raises:
        AttentionError: unknown backend, invalid option (naming it), or a backend that cannot
            run this model (its reasons, and the backends ``name`` runs).
    """
    chosen = get_backend(backend)
    resolved = chosen.resolve_options(options)  # an option problem raises here, naming it
    spec = InputSpec(
        lq=max_tokens,
        lk=max_tokens,
        head_dim=config.head_dim,
        dtype=dtype,
        device_type=device.type,
        causal=False,
        has_padding_mask=True,
        has_score_bias=config.relative_buckets > 0,
    )
    reasons = chosen.unsupported_reasons(spec, resolved)
    if reasons:
        able = [b for b in BACKENDS if not get_backend(b).unsupported_reasons(spec)]
        raise AttentionError(f"{'; '.join(reasons)}; {name} runs: {', '.join(able)}")
    return resolved


class ChecksTextAttention:
    """``check_attention`` for a text model holding ``model`` (a BERT-family encoder),
    ``max_tokens``, ``dtype``, ``device`` and ``name``."""

    model: BertEncoder
    max_tokens: int
    dtype: torch.dtype
    device: torch.device
    name: str

    def check_attention(self, backend: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
        """Resolved options for ``backend`` on this model's device and dtype
        (:func:`check_text_attention`).

        Raises:
            AttentionError: unknown backend, invalid option, or a backend that cannot run this
                model's self-attention on its device/dtype (the message lists those that can).
        """
        return check_text_attention(
            self.model.config, self.max_tokens, self.dtype, self.device, self.name, backend, options
        )
