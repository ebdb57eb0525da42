"""A transformers text backbone behind the interface of our own encoder: packed batches in, token
states or pooled vectors out, attention computed by the backend of the call.

transformers runs the layers (its own embeddings, rotary positions, norms and MLPs: the model is
exactly the class sentence-transformers loads); every attention layer hands its ``q, k, v`` to
:func:`models.hf_forecast.bridge.attend_hf`, which runs the backend chosen for this forward pass
(:func:`~models.hf_forecast.bridge.backend_scope`) or, where that backend has no form for the
layer (``nystrom`` has no causal form), exact attention, named in :meth:`HFBackbone.plan`.

Batches are right-padded: under a causal mask a real token never sees a pad that follows it, and
positions start at 0 in every row, so each text gets what it gets alone (sentence-transformers
pads Qwen3 on the left; rotary scores depend on distances only, so the two agree).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from models.attention import BACKENDS, InputSpec
from models.hf_forecast.bridge import backend_scope, layer_choice, name_layers, use_bridge
from models.hf_text.config import BackboneConfig, backbone_class
from models.informer.model import LayerChoice
from models.text.network.bert import PackedBatch
from models.text.network.pooling import Pooling, pool


class HFBackbone(nn.Module):
    """A transformers ``AutoModel`` run on packed batches with a per-call attention backend.

    Args:
        model: the loaded transformers model (eval mode), routed through the bridge here.
        config: its shape (:func:`~models.hf_text.config.read_backbone`); ``causal`` is
            re-read from the model's attention layers.
        pooling: how token states become one vector per text.
        pad_id: the token id padded slots hold (never attended to).
    """

    def __init__(
        self, model: nn.Module, config: BackboneConfig, pooling: Pooling, pad_id: int = 0
    ) -> None:
        super().__init__()
        use_bridge(model)
        name_layers(model)
        self.model = model
        causal = [bool(getattr(m, "is_causal", False)) for m in _attention_layers(model)]
        self.config = replace(config, causal=any(causal))
        self.pooling = pooling
        self.pad_id = pad_id

    @classmethod
    def load(
        cls,
        folder: Path,
        config: BackboneConfig,
        pooling: Pooling,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
    ) -> HFBackbone:
        """The backbone saved in ``folder`` (``config.json`` + safetensors), on ``device``.

        Raises:
            ValueError: weights transformers cannot load into the class (its message).
        """
        model_class = backbone_class(config.architecture)
        try:
            model, info = model_class.from_pretrained(
                str(folder),
                dtype=dtype,
                local_files_only=True,
                attn_implementation="sdpa",
                output_loading_info=True,
            )
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            detail = " ".join(str(exc).split())[:300]
            raise ValueError(f"transformers cannot load the backbone: {detail}") from None
        _check_loaded(info, f"{model_class.__name__} (model_type {config.architecture!r})")
        model = model.to(device).eval().requires_grad_(False)
        pad = getattr(model.config, "pad_token_id", None)
        return cls(model, config, pooling, int(pad) if isinstance(pad, int) else 0)

    def plan(self, backend: str, options: Mapping[str, Any], spec: InputSpec) -> LayerChoice:
        """What every attention layer runs for ``backend``: the layers of a backbone share one
        shape (self-attention, causal or not), so one choice holds for all of them."""
        return layer_choice(backend, options, replace(spec, causal=self.config.causal))

    def fallback(self, backend: str, options: Mapping[str, Any]) -> str | None:
        """``all N layers ran flash: <why>`` when ``backend`` has no form for this backbone's
        layers (the ``x-attention-fallback`` header); None when they run it."""
        given = {k: v for k, v in options.items() if v is not None}
        choice = self.plan(backend, given, self.layer_spec())
        if choice.reason is None:
            return None
        return f"all {self.config.num_hidden_layers} layers ran {choice.backend}: {choice.reason}"

    def layer_spec(self) -> InputSpec:
        """A padded self-attention call of the longest input, on this model's device and dtype
        (causality is the plan's to add)."""
        c, first = self.config, next(self.parameters())
        return InputSpec(
            c.max_tokens,
            c.max_tokens,
            c.head_dim,
            first.dtype,
            first.device.type,
            has_padding_mask=True,
        )

    def describe(self) -> dict[str, Any]:
        """The card's fields about the backbone: its class, grouped heads, which layers take
        the requested backend and, per backend that has no form for them, why they run exact
        attention instead."""
        c = self.config
        fallbacks = {}
        for backend in BACKENDS:
            choice = self.plan(backend, {}, self.layer_spec())
            if choice.reason:
                fallbacks[backend] = f"runs {choice.backend}: {choice.reason}"
        kind = "causal (decoder)" if c.causal else "bidirectional"
        return {
            "backbone": f"transformers {c.model_class}, through its attention interface",
            "key_value_heads": c.num_key_value_heads,
            "attention_layout": (
                f"all {c.num_hidden_layers} layers are {kind} self-attention and run the "
                "requested backend"
                + (" in its causal form" if c.causal else "")
                + "; a backend without one falls back to exact attention (attention_fallbacks, "
                "and the x-attention-fallback header of each answer)"
            ),
            "attention_fallbacks": fallbacks,
        }

    def forward(
        self, batch: PackedBatch, backend: str = "flash", options: Mapping[str, Any] | None = None
    ) -> Tensor:
        """Token states ``[t, c]`` for a packed batch, attention computed by ``backend``."""
        ids = batch.pad(batch.input_ids[:, None])[..., 0]  # [b, n]; pads hold a real id
        mask = None
        if batch.key_padding_mask is not None:
            mask = batch.key_padding_mask.to(torch.long)
        with backend_scope(backend, options):
            out = self.model(input_ids=ids, attention_mask=mask).last_hidden_state  # [b, n, c]
        return batch.unpad(out)

    def pooled(
        self,
        batch: PackedBatch,
        backend: str = "flash",
        options: Mapping[str, Any] | None = None,
        skip: int = 0,
    ) -> Tensor:
        """One vector per text, ``[b, c * modes]``, pooled in float32 as ``pooling`` says."""
        x = self(batch, backend, options)
        return pool(x.float(), batch.rows, batch.positions, batch.lengths, self.pooling, skip)


# Weights a checkpoint may hold beside the backbone, which an embedding does not use: a causal
# LM's output layer, a sequence-classification or token-classification head.
_HEAD_PREFIXES = ("lm_head.", "score.", "classifier.")


def _check_loaded(info: Mapping[str, Any], model_class: str) -> None:
    """Refuse a backbone transformers had to fill in: a weight the checkpoint lacks (it would
    be random), one whose shape differs, or one that belongs to no known part of the model."""
    missing = sorted(info.get("missing_keys") or [])
    mismatched = sorted(
        str(k[0]) if isinstance(k, tuple) else str(k) for k in info.get("mismatched_keys") or []
    )
    unexpected = sorted(
        k for k in info.get("unexpected_keys") or [] if not k.startswith(_HEAD_PREFIXES)
    )
    for what, keys in (
        ("lacks", missing),
        ("has other shapes for", mismatched),
        ("holds unknown", unexpected),
    ):
        if keys:
            shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
            raise ValueError(
                f"model.safetensors {what} weights of {model_class} ({shown}): it does not hold "
                "this backbone; check config.json's model_type and the weights"
            )


def _attention_layers(model: nn.Module) -> list[nn.Module]:
    """The modules transformers calls the attention function from (each says ``is_causal``)."""
    return [
        m
        for m in model.modules()
        if type(m).__name__.endswith("Attention") and hasattr(m, "is_causal")
    ]
