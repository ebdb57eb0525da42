"""Peak activation memory and work of one forward pass of a transformers text backbone.

transformers runs a decoder layer as: norm, the q / k / v projections (keys and values with
``g`` heads under grouped-query attention), rotary positions applied to copies of q and k, the
attention function (our kernel, :func:`models.attention.attention_bytes`; keys and values copied
per head for a backend that does not take grouped heads), the output projection, norm and a gated
MLP (gate and up ``[t, f]``, their product). A padded batch also carries transformers' boolean
mask ``[b, 1, n, n]`` and the bridge's reading of it (about as much again), and a causal padded
call through ``flash`` builds its own ``[b, 1, n, n]`` mask: three bytes per query-key pair.

Legend: ``b`` texts, ``n`` padded length, ``t = b·n`` tokens, ``c`` hidden size, ``h`` query
heads, ``g`` key/value heads, ``d`` head width, ``f`` MLP width.
"""

from __future__ import annotations

from models.attention import AttentionCall, attention_bytes, attention_work, get_backend
from models.attention.pricing import ELEMENTWISE, FLOAT32, dense_work
from models.hf_text.config import BackboneConfig
from models.informer.model import LayerChoice

_MASK_BYTES_PER_PAIR = 3


def _call(
    config: BackboneConfig, rows: int, length: int, itemsize: int, device_type: str
) -> AttentionCall:
    h, d = config.num_attention_heads, config.head_dim
    return AttentionCall(rows, h, length, length, d, itemsize, config.causal, rows > 1, device_type)


def backbone_bytes(
    config: BackboneConfig,
    choice: LayerChoice,
    rows: int,
    length: int,
    itemsize: int = FLOAT32,
    device_type: str = "cpu",
) -> int:
    """Estimated peak activation bytes of one forward pass over ``rows`` texts padded to
    ``length`` tokens, every layer running ``choice`` (the backbone's plan)."""
    c, f = config.hidden_size, config.intermediate_size
    h, g, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    t = rows * length
    call = _call(config, rows, length, itemsize, device_type)
    kernel = attention_bytes(choice.backend, call, choice.options)
    if g != h and not get_backend(choice.backend).capabilities.grouped_kv:
        kernel += 2 * t * h * d * itemsize  # keys and values repeated per query head
    qkv = t * (h + 2 * g) * d
    # x, its norm, q/k/v and their rotated, transposed copies, the heads' output.
    attention = (3 * t * c + 2 * qkv + t * h * d) * itemsize + kernel
    mlp = (3 * t * c + 3 * t * f) * itemsize
    masks = _MASK_BYTES_PER_PAIR * rows * length * length if rows > 1 else 0
    return max(attention, mlp) + masks + t * 8 * 2


def backbone_work(config: BackboneConfig, choice: LayerChoice, rows: int, length: int) -> float:
    """Flop-equivalents of one forward pass (:mod:`models.attention.pricing`): per layer the
    projections, the gated MLP, two norms and the attention kernel."""
    c, f = config.hidden_size, config.intermediate_size
    h, g, d = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    t = rows * length
    kernel = attention_work(
        choice.backend, _call(config, rows, length, FLOAT32, "cpu"), choice.options
    )
    dense = dense_work(t, c, (h + 2 * g) * d) + dense_work(t, h * d, c)
    dense += dense_work(t, c, 2 * f) + dense_work(t, f, c)
    norms = ELEMENTWISE * 2 * 3 * t * c
    return config.num_hidden_layers * (dense + norms + kernel) + ELEMENTWISE * 3 * t * c
