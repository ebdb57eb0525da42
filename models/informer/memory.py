"""Peak activation memory of one Informer forward pass, from its attention plan and its shapes.

    plan = attention_plan(config, "full")
    forward_bytes(config, plan, rows=32)   # bytes above the weights and the caller's inputs

The forward pass (:class:`~models.informer.model.Informer`, inference mode) runs its layers one
after another, so its peak is the busiest single phase plus what stays alive across phases (the
layer input the loop holds, the encoder output during the decoder). Each phase below names the
tensors alive in it; the attention kernels' own peaks come from
:func:`models.attention.attention_bytes`, per layer, with the backend :func:`attention_plan
<models.informer.model.attention_plan>` gives that layer (a fallback to ``full`` costs what
``full`` costs). ``tests/unit/test_model_memory.py`` holds the estimate to the measured peak.

Dimension legend: ``r`` rows through the network (batch, x channels when channels run
independently), ``n`` encoder tokens of a layer, ``t`` decoder tokens, ``D`` width,
``F`` feed-forward width, ``c`` channels, ``f`` calendar features.
"""

from __future__ import annotations

from collections.abc import Mapping

from models.attention import AttentionCall, attention_bytes, attention_work
from models.attention.pricing import ELEMENTWISE, FLOAT32, dense_work
from models.informer.config import InformerConfig
from models.informer.model import LayerChoice


def forward_bytes(
    config: InformerConfig,
    plan: Mapping[str, LayerChoice],
    rows: int,
    itemsize: int = FLOAT32,
    device_type: str = "cpu",
) -> int:
    """Estimated peak bytes of activations while one forward pass runs ``rows`` windows.

    Args:
        config: the network (its ``seq_len`` is the context the windows have).
        plan: backend per attention layer, as :func:`~models.informer.model.attention_plan`
            returns it for this forward pass.
        rows: windows in the batch.
        itemsize: bytes per activation element (4: float32).
        device_type: where it runs (``cpu`` / ``cuda``).
    """
    c = config
    d_model, d_ff, heads, e = c.d_model, c.d_ff, c.n_heads, c.head_dim
    r = rows * (c.enc_in if c.channel_independent else 1)
    channels, marks = c.series_channels, c.time_features

    # The caller's windows and their normalised / decoder copies (float32, small: c channels).
    inputs = rows * (c.seq_len + c.dec_len) * (2 * c.enc_in + marks) * 2 * FLOAT32

    def width(n: int, k: int = d_model) -> int:  # one [r, n, k] activation
        return r * n * k * itemsize

    def attention(layer: str, lq: int, lk: int, causal: bool) -> int:
        call = AttentionCall(r, heads, lq, lk, e, itemsize, causal, device_type=device_type)
        return attention_bytes(plan[layer].backend, call, plan[layer].options)

    lengths = c.encoder_lengths()
    phases = [width(lengths[0], 2 * channels) + 2 * width(lengths[0])]  # embedding
    for i, n in enumerate(lengths):
        kernel = attention(f"encoder.{i}.self", n, n, False)
        # x, q, k, v (+ the kernel's peak); then x, q, k, v, output, merged heads, projection.
        phases.append(max(4 * width(n) + kernel, 7 * width(n)))
        phases.append(2 * width(n) + 2 * width(n, d_ff))  # layer input, norm1, two [r, n, F]
        if c.distil and i < c.e_layers - 1:
            phases.append(3 * width(n) + width(n + 2))  # input, padded copy, conv / norm / elu

    n_enc, t = lengths[-1], c.dec_tokens
    memory = width(n_enc)  # the encoder's output, alive through the decoder
    for i in range(c.d_layers):
        self_kernel = attention(f"decoder.{i}.self", t, t, True)
        cross = attention(f"decoder.{i}.cross", t, n_enc, False)
        phases.append(memory + max(4 * width(t) + self_kernel, 7 * width(t)))
        phases.append(memory + 3 * width(t) + 2 * width(n_enc) + cross)
        phases.append(memory + 2 * width(t) + 2 * width(t, d_ff))
    return inputs + max(phases)


def forward_work(config: InformerConfig, plan: Mapping[str, LayerChoice], rows: int) -> float:
    """Flop-equivalents of one forward pass over ``rows`` windows (:mod:`models.attention.pricing`):
    embeddings, per encoder layer its projections, feed-forward and attention kernel (from
    ``plan``) and distilling convolution, then the decoder's self- and cross-attention layers.
    The linear path and normalisation are a few passes over the raw window: negligible."""
    c = config
    d_model, d_ff, heads, e = c.d_model, c.d_ff, c.n_heads, c.head_dim
    r = rows * (c.enc_in if c.channel_independent else 1)
    channels, marks = c.series_channels, c.time_features

    def attention(layer: str, lq: int, lk: int, causal: bool) -> float:
        call = AttentionCall(r, heads, lq, lk, e, FLOAT32, causal)
        return attention_work(plan[layer].backend, call, plan[layer].options)

    def projections(n: int, kv_tokens: int) -> float:  # q and output of n tokens, k and v
        q_out = 2 * dense_work(r * n, d_model, d_model)
        return q_out + dense_work(r * kv_tokens, d_model, 2 * d_model) + norm(n)

    def feed_forward(n: int) -> float:
        return dense_work(r * n, d_model, d_ff) + dense_work(r * n, d_ff, d_model) + norm(n)

    def norm(n: int) -> float:  # residual add and layer norm, ~3 passes
        return ELEMENTWISE * 3 * r * n * d_model

    lengths, t = c.encoder_lengths(), c.dec_tokens
    patch = max(c.patch_len, 1)
    total = dense_work(r * lengths[0], 3 * channels * patch + marks, d_model)  # embeddings
    total += dense_work(r * t, 3 * channels * patch + marks, d_model)
    for i, n in enumerate(lengths):
        total += projections(n, n) + feed_forward(n) + attention(f"encoder.{i}.self", n, n, False)
        if c.distil and i < c.e_layers - 1:  # conv (k=3), batch norm, ELU, max-pool
            total += dense_work(r * n, 3 * d_model, d_model) + ELEMENTWISE * 4 * r * n * d_model
    n_enc = lengths[-1]
    for i in range(c.d_layers):
        total += projections(t, t) + attention(f"decoder.{i}.self", t, t, True)
        total += projections(t, n_enc) + attention(f"decoder.{i}.cross", t, n_enc, False)
        total += feed_forward(t)
    return total + dense_work(r * t, d_model, patch * (c.c_out if not c.channel_independent else 1))
