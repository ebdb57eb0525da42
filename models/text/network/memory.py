"""Peak activation memory of one BERT forward pass over a padded batch, per attention backend.

    forward_bytes(BertConfig(), "full", {}, rows=32, length=256)

The encoder (:mod:`models.text.network.bert`) runs its layers one after another on packed tokens, so
the peak is its busiest layer phase: self-attention (the packed ``[t, 3c]`` projections, their
padded ``[b, n, 3c]`` copy and the kernel's own peak from :func:`models.attention.attention_bytes`) or the
feed-forward block (``[t, f]``). Every row is priced at the padded length (``t = b·n``), an
upper bound for a batch of mixed lengths. ``tests/unit/test_model_memory.py`` holds the estimate
to the measured peak.

Dimension legend (as :mod:`models.text.network.bert`): ``b`` texts, ``n`` padded length, ``t`` tokens,
``c`` hidden size, ``h`` heads, ``d`` head dim, ``f`` FFN width.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.attention import AttentionCall, attention_bytes, attention_work
from models.attention.pricing import ELEMENTWISE, FLOAT32, dense_work
from models.attention.sliding_window import sliding_window_bytes, sliding_window_work
from models.text.network.config import BertConfig


def _kernel_bytes(
    config: BertConfig, backend: str, options: Mapping[str, Any] | None, call: AttentionCall
) -> int:
    """The busiest attention kernel of a forward pass: the backend's on global layers, the
    banded kernel's on sliding-window layers, plus a relative score bias ``[h, n, n]``."""
    peak = attention_bytes(backend, call, options) if config.global_layers() else 0
    for window in {w for w in config.windows if w is not None}:
        banded = sliding_window_bytes(call.b, call.h, call.lq, call.d, window, call.itemsize)
        peak = max(peak, banded)
    if config.relative_buckets:
        peak += call.h * call.lq * call.lk * call.itemsize
    return peak


def forward_bytes(
    config: BertConfig,
    backend: str,
    options: Mapping[str, Any] | None,
    rows: int,
    length: int,
    itemsize: int = FLOAT32,
    device_type: str = "cpu",
) -> int:
    """Estimated peak bytes of activations while one forward pass embeds ``rows`` texts padded
    to ``length`` tokens with ``backend`` (its ``options``); ``rows >= 2`` are priced with a
    key padding mask (a batch of mixed lengths), one row without."""
    c, f = config.hidden_size, config.ffn_in_size
    t = rows * length
    padded = rows > 1
    heads, d = config.num_attention_heads, config.head_dim
    call = AttentionCall(rows, heads, length, length, d, itemsize, False, padded, device_type)
    kernel = _kernel_bytes(config, backend, options, call)
    ids = t * 8 * 3  # token ids, positions, rows (int64)
    embeddings = 3 * t * c * itemsize
    # x and qkv [t, 3c] while its padded copy [b, n, 3c] is made (then only the copy is kept);
    # x, qkv or its copy, and the kernel; x, the copy, the heads' output and its unpadded copy.
    copy = 3 * t * c if padded else 0
    pad = (4 * t * c + copy) * itemsize
    attention = max(pad, 4 * t * c * itemsize + kernel, 6 * t * c * itemsize)
    feed_forward = (2 * t * c + 2 * t * f) * itemsize
    return ids + max(embeddings, attention, feed_forward)


def forward_work(
    config: BertConfig,
    backend: str,
    options: Mapping[str, Any] | None,
    rows: int,
    length: int,
) -> float:
    """Flop-equivalents of one forward pass over ``rows`` texts padded to ``length`` tokens
    (:mod:`models.attention.pricing`): per layer, the fused q/k/v, output and feed-forward
    products, the layer norms and the attention kernel (the backend's on global layers, the
    banded kernel's on sliding-window layers)."""
    c, f = config.hidden_size, config.intermediate_size
    t = rows * length
    heads, d = config.num_attention_heads, config.head_dim
    call = AttentionCall(rows, heads, length, length, d, FLOAT32, False, rows > 1)
    kernel = attention_work(backend, call, options) * len(config.global_layers())
    for i in range(config.num_hidden_layers):
        window = config.window(i)
        if window is not None:
            kernel += sliding_window_work(rows, heads, length, d, window)
    dense = dense_work(t, c, 3 * c) + dense_work(t, c, c) + dense_work(t, c, config.ffn_in_size)
    dense += dense_work(t, f, c)
    norms = ELEMENTWISE * 2 * 3 * t * c  # two residual layer norms, ~3 passes each
    layers = config.num_hidden_layers * (dense + norms) + kernel
    return layers + ELEMENTWISE * 3 * t * c
