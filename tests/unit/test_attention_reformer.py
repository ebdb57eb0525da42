"""Reformer (LSH) attention: exact when one chunk holds the row, causal, better with more budget,
and its shared-QK form equal to transformers' ``LSHSelfAttention``."""

from __future__ import annotations

import itertools

import pytest
import torch

from models.attention import attend
from models.attention.lsh import lsh_shared_qk_attention
from models.attention.reformer import lsh_attention
from tests.attention_inputs import relative_error, structured_qkv


def _padded_inputs(n: int = 150, seed: int = 0):
    q, k, v = (t.double() for t in structured_qkv(3, 2, n, n, 16, scale=1.2, seed=seed))
    mask = torch.ones(3, n, dtype=torch.bool)
    mask[1, n - 40 :] = False  # right padding
    mask[2, ::7] = False  # scattered padding
    return q, k, v, mask


@pytest.mark.parametrize("hashing", ["asymmetric", "shared"])
@pytest.mark.parametrize("num_hashes", [1, 3])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_exact_when_one_chunk_holds_the_row(hashing, num_hashes, causal, padded):
    """bucket_size >= L: every round sees every key, and the duplicate correction (a key met
    in several rounds, and the self slot) makes it count once, so the output is exact."""
    q, k, v, mask = _padded_inputs()
    mask = mask if padded else None
    # The hashed computation itself (the served kernel answers one chunk with exact attention).
    out = lsh_attention(q, k, v, mask, causal, 160, num_hashes, hashing)
    served = attend(
        q, k, v, backend="reformer", key_padding_mask=mask, causal=causal,
        bucket_size=160, num_hashes=num_hashes, hashing=hashing,
    )  # fmt: skip
    expected = attend(q, k, v, backend="full", key_padding_mask=mask, causal=causal)  # float64
    rows = torch.ones(3, 150, dtype=torch.bool) if mask is None else mask
    for got in (out, served):
        diff = (got - expected)[rows[:, None, :, None].expand_as(got)].abs().max()
        assert float(diff) < 1e-6


def test_exact_within_chunks_when_every_token_shares_one_bucket():
    """Several chunks, all tokens in one bucket (one direction): the sorted order is the
    positions, so query chunk c sees exactly key chunks c and c − 1 (a banded mask)."""
    n, bs = 96, 16
    g = torch.Generator().manual_seed(0)
    direction = torch.randn(16, generator=g, dtype=torch.float64)
    scale = 1 + torch.rand(1, 1, n, 1, generator=g, dtype=torch.float64)
    q = k = direction * scale  # parallel vectors: one bucket in every round and form
    v = torch.randn(1, 1, n, 16, generator=g, dtype=torch.float64)
    chunk = torch.arange(n) // bs
    band = (chunk[:, None] - chunk[None, :] >= 0) & (chunk[:, None] - chunk[None, :] <= 1)
    scores = (q @ k.transpose(-1, -2) / 4).masked_fill(~band, float("-inf"))
    expected = scores.softmax(dim=-1) @ v
    for hashing in ("asymmetric", "shared"):
        out = attend(q, k, v, backend="reformer", bucket_size=bs, num_hashes=2, hashing=hashing)
        assert torch.allclose(out, expected, atol=1e-10), hashing


@pytest.mark.parametrize("hashing", ["asymmetric", "shared"])
def test_causal_future_keys_get_no_weight(hashing):
    """Values of later keys never reach a query, and no gradient flows from a query to a later
    key (hashing moves chunk boundaries with content, but masking is exact)."""
    q, k, v = structured_qkv(2, 2, 300, 300, 16, scale=1.2, seed=4)
    t = 170
    out = attend(q, k, v, backend="reformer", causal=True, bucket_size=16, hashing=hashing)
    v2 = v.clone()
    v2[:, :, t + 1 :] = 1e4
    again = attend(q, k, v2, backend="reformer", causal=True, bucket_size=16, hashing=hashing)
    assert torch.equal(out[:, :, : t + 1], again[:, :, : t + 1])
    k = k.clone().requires_grad_()
    out = attend(q, k, v, backend="reformer", causal=True, bucket_size=16, hashing=hashing)
    out[:, :, t].sum().backward()
    grad = k.grad
    assert grad is not None
    assert float(grad[:, :, t + 1 :].abs().max()) == 0.0
    assert float(grad[:, :, : t + 1].abs().max()) > 0.0


def test_a_query_always_sees_itself():
    """Causal, first position: its only key is itself, whatever the chunks hold."""
    q, k, v = structured_qkv(1, 2, 200, 200, 16, seed=5)
    out = attend(q, k, v, backend="reformer", causal=True, bucket_size=8)
    assert torch.allclose(out[:, :, 0], v[:, :, 0], atol=1e-6)
    assert torch.isfinite(out).all()


B, H, L, D = 2, 4, 512, 32


def _errors(option: str, values, **fixed) -> list[float]:
    q, k, v = structured_qkv(B, H, L, L, D, scale=0.8)
    exact = attend(q.double(), k.double(), v.double(), backend="full")
    return [
        relative_error(attend(q, k, v, backend="reformer", **{option: x}, **fixed), exact)
        for x in values
    ]


@pytest.mark.parametrize("hashing", ["asymmetric", "shared"])
def test_error_falls_as_bucket_size_grows(hashing):
    errors = _errors("bucket_size", (16, 32, 64, 128), hashing=hashing)
    assert all(a > b for a, b in itertools.pairwise(errors)), errors


@pytest.mark.parametrize("hashing", ["asymmetric", "shared"])
def test_error_falls_as_num_hashes_grows(hashing):
    errors = _errors("num_hashes", (1, 2, 4, 8), hashing=hashing)
    assert all(a > b for a, b in itertools.pairwise(errors)), errors


# ------------------------------------------------------------ shared-QK form vs transformers


def _transformers_lsh(
    length: int, causal: bool, rounds: int = 3, buckets: int = 4, chunk: int = 16
):
    transformers = pytest.importorskip("transformers")
    from transformers.models.reformer.modeling_reformer import LSHSelfAttention

    heads, head_dim, seed = 2, 16, 7
    config = transformers.ReformerConfig(
        attn_layers=["lsh"], hidden_size=32, num_attention_heads=heads,
        attention_head_size=head_dim, lsh_attn_chunk_length=chunk, num_buckets=buckets,
        num_hashes=rounds, hash_seed=seed, lsh_attention_probs_dropout_prob=0.0,
        lsh_num_chunks_before=1, lsh_num_chunks_after=0, is_decoder=causal,
        max_position_embeddings=max(length, chunk),
    )  # fmt: skip
    torch.manual_seed(0)
    layer = LSHSelfAttention(config).eval()
    # transformers seeds the global RNG with hash_seed and draws [h, d, rounds, buckets / 2]
    torch.manual_seed(seed)
    rotations = torch.randn(heads, head_dim, rounds, buckets // 2)
    return layer, rotations, heads, head_dim, chunk


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "padded"), [(64, False), (64, True), (48, True), (16, True)])
def test_shared_qk_form_equals_transformers_lsh_self_attention(causal, length, padded):
    layer, rotations, heads, head_dim, chunk = _transformers_lsh(length, causal)
    x = torch.randn(2, length, 32, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, length, dtype=torch.long)
    if padded:
        mask[1, length - 7 :] = 0
    with torch.no_grad():
        expected = layer(x, attention_mask=mask if padded else None).hidden_states
        qk = layer.query_key(x).view(2, length, heads, head_dim).transpose(1, 2)
        v = layer.value(x).view(2, length, heads, head_dim).transpose(1, 2)
        got = lsh_shared_qk_attention(
            qk, v, rotations, chunk, mask.bool() if padded else None, causal
        )
    got = got.transpose(1, 2).reshape(2, length, heads * head_dim)
    assert torch.allclose(got, expected, atol=1e-5, rtol=0), float((got - expected).abs().max())
