"""BigBird block-sparse attention: against a dense masked reference built here from the same
block layout, against transformers' own BigBirdBlockSparseAttention on its random layout, exact
when the layout covers the input, exactly causal, and its options validated."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models.attention import attend
from models.attention.bigbird import block_sparse_attention, random_blocks
from tests.attention_inputs import reference_attention, structured_qkv


def _allowed_blocks(nb: int, n_row: int, causal: bool, w: int, g: int, rand) -> torch.Tensor:
    """Bool ``[nb, nb]``: which key blocks each query block of a row of ``n_row`` real blocks
    sees, written from the paper's rules (window, global, random), a set so nothing twice."""
    allowed = torch.zeros(nb, nb, dtype=torch.bool)
    for i in range(nb):
        if not causal and (i < g or n_row - g <= i < n_row):  # a global query block
            allowed[i, :n_row] = True
            continue
        cols = set(range(i - w, i + (0 if causal else w) + 1)) | set(range(g))
        if not causal:
            cols |= set(range(n_row - g, n_row))
        if i < n_row:
            cols |= {int(x) for x in rand[i] if x >= 0}
        for j in cols:
            if 0 <= j < n_row and (not causal or j <= i):
                allowed[i, j] = True
    return allowed


def dense_reference(q, k, v, mask, causal, bs, w=1, g=1, r=3, layout=None, bias=None):
    """Float64 masked softmax attention under BigBird's block mask; ``layout`` ``[h, nb, r]``
    (one random layout per head) or None: each row's own :func:`random_blocks`; ``bias``
    ``[1, h, L, L]`` added to the scores."""
    q, k, v = q.double(), k.double(), v.double()
    b, h, length, d = q.shape
    nb = math.ceil(length / bs)
    real = torch.ones(b, length, dtype=torch.bool) if mask is None else mask
    out = torch.zeros(b, h, length, d, dtype=torch.float64)
    for row in range(b):
        positions = torch.nonzero(real[row]).flatten()
        n_row = 0 if len(positions) == 0 else math.ceil((int(positions.max()) + 1) / bs)
        for head in range(h):
            if layout is not None:
                rand = layout[head]
            else:
                rand = random_blocks(n_row, w, g, r, causal) if n_row else torch.empty(0, r)
            blocks = _allowed_blocks(nb, n_row, causal, w, g, rand)
            tokens = blocks.repeat_interleave(bs, 0).repeat_interleave(bs, 1)[:length, :length]
            tokens = tokens & real[row][None, :]
            if causal:
                tokens &= torch.ones(length, length, dtype=torch.bool).tril()
            scores = q[row, head] @ k[row, head].T / math.sqrt(d)
            if bias is not None:
                scores = scores + bias[0, head].double()
            weights = scores.masked_fill(~tokens, float("-inf")).softmax(-1).nan_to_num(0.0)
            out[row, head] = weights @ v[row, head]
    return out


def _padded(b: int, length: int, cut: int) -> torch.Tensor:
    mask = torch.ones(b, length, dtype=torch.bool)
    mask[0, cut:] = False  # row 0 shorter; its last blocks are its own
    return mask


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize(
    ("length", "options"),
    [
        (200, {"block_size": 16}),  # not a multiple of the block size
        (256, {"block_size": 16, "num_random_blocks": 2}),
        (300, {"block_size": 8, "window_blocks": 2, "global_blocks": 2, "num_random_blocks": 4}),
        (130, {"block_size": 16, "window_blocks": 0, "global_blocks": 0}),
        # K·B >= the padded length: the kernel's one-call path under the [L, L] mask
        (100, {"block_size": 16}),
        (70, {"block_size": 8, "window_blocks": 3, "num_random_blocks": 2}),
        (40, {"block_size": 8, "window_blocks": 2, "global_blocks": 0, "num_random_blocks": 1}),
    ],
)
def test_equals_the_dense_reference_of_its_layout(length, options, causal, padded):
    q, k, v = structured_qkv(2, 2, length, length, 16, scale=0.8, seed=length)
    q, k, v = q.double(), k.double(), v.double()
    mask = _padded(2, length, length - 45) if padded else None
    if padded:
        mask[1, 10:14] = False  # a hole inside a row
    out = attend(q, k, v, backend="bigbird", key_padding_mask=mask, causal=causal, **options)
    w, g = options.get("window_blocks", 1), options.get("global_blocks", 1)
    r = options.get("num_random_blocks", 3)
    want = dense_reference(q, k, v, mask, causal, options["block_size"], w, g, r)
    assert torch.allclose(out, want, atol=1e-6, rtol=0), float((out - want).abs().max())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("length", [60, 200])  # the all-global path, and a sparse layout
def test_a_score_bias_is_added_to_the_scores_the_layout_keeps(length, causal):
    """MPNet's relative position bias: added where the layout keeps a score, as in the dense
    reference (exact where every block is global)."""
    q, k, v = (t.double() for t in structured_qkv(2, 2, length, length, 16, scale=0.8, seed=3))
    bias = 2.0 * torch.randn(1, 2, length, length, dtype=torch.float64)
    mask = _padded(2, length, length - 25)
    options = {"block_size": 16} if length > 100 else {"block_size": 32}
    out = attend(q, k, v, backend="bigbird", key_padding_mask=mask, causal=causal,
                 attn_bias=bias, **options)  # fmt: skip
    want = dense_reference(q, k, v, mask, causal, options["block_size"], bias=bias)
    assert torch.allclose(out, want, atol=1e-6, rtol=0), float((out - want).abs().max())
    plain = attend(q, k, v, backend="bigbird", key_padding_mask=mask, causal=causal, **options)
    assert float((plain - want).abs().max()) > 1e-2  # the bias matters at this scale


def test_random_blocks_are_new_distinct_and_fixed():
    for causal in (False, True):
        layout = random_blocks(40, 1, 1, 3, causal)
        assert torch.equal(layout, random_blocks.__wrapped__(40, 1, 1, 3, causal))  # no RNG
        for i, row in enumerate(layout.tolist()):
            picked = [j for j in row if j >= 0]
            assert len(set(picked)) == len(picked)
            for j in picked:
                assert abs(i - j) > 1 and j >= 1 and (j < i if causal else j < 39)
        assert int((layout >= 0).sum()) > 0.9 * 3 * 38 * (0.5 if causal else 1)
    # Causal: a block's random blocks do not depend on how long the input is.
    assert torch.equal(random_blocks(40, 1, 1, 3, True), random_blocks(64, 1, 1, 3, True)[:40])


def _transformers_layout(module, seq_len: int, bs: int, heads: int, seed: int) -> torch.Tensor:
    """The random layout transformers' module draws in training mode, redrawn with its own
    helpers under its numpy seed: ``[h, nb, r]`` (-1 for the global query blocks)."""
    np.random.seed(seed)
    plan_length, plan_random = module._get_rand_attn_plan(seq_len, bs, module.num_random_blocks)
    drawn = module._bigbird_block_rand_mask_with_head(
        from_seq_length=seq_len,
        to_seq_length=seq_len,
        from_block_size=bs,
        to_block_size=bs,
        num_heads=heads,
        plan_from_length=plan_length,
        plan_num_rand_blocks=plan_random,
    )
    inner = torch.tensor(np.stack(drawn), dtype=torch.long)  # [h, nb - 2, r]
    return torch.nn.functional.pad(inner, (0, 0, 1, 1), value=-1)


def test_equals_transformers_block_sparse_attention():
    big_bird = pytest.importorskip("transformers.models.big_bird.modeling_big_bird")
    from transformers import BigBirdConfig

    bs, nb, heads, hidden, seed = 16, 16, 4, 64, 7
    seq_len = bs * nb  # transformers needs a multiple of the block size, >= 2r + 5 blocks
    config = BigBirdConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        attention_type="block_sparse",
        block_size=bs,
        num_random_blocks=2,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=1024,
    )
    torch.manual_seed(0)
    module = big_bird.BigBirdBlockSparseAttention(config, seed=seed).train()  # random blocks
    hidden_states = torch.randn(2, seq_len, hidden)
    ones = torch.ones(2, seq_len)
    blocked, band, from_mask, to_mask = big_bird.BigBirdModel.create_masks_for_block_sparse_attn(
        ones, bs
    )
    with torch.no_grad():
        theirs, _ = module(hidden_states, band, from_mask, to_mask, blocked, blocked)

        def split(layer):
            return layer(hidden_states).view(2, seq_len, heads, -1).transpose(1, 2)

        q, k, v = split(module.query), split(module.key), split(module.value)
        layout = _transformers_layout(module, seq_len, bs, heads, seed)
        assert len({tuple(x) for x in layout[:, 1:-1].reshape(-1, 2).tolist()}) > 1  # random
        ours = block_sparse_attention(q, k, v, None, False, bs, layout[None])
    ours = ours.transpose(1, 2).reshape(2, seq_len, hidden)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0), float((ours - theirs).abs().max())
    # The reference built here agrees on the same per-head layout.
    want = dense_reference(q, k, v, None, False, bs, layout=layout)
    assert torch.allclose(
        ours.double(), want.transpose(1, 2).reshape(2, seq_len, hidden), atol=1e-5
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "options",
    [
        {"block_size": 256},  # one block spans the input
        {"block_size": 16, "window_blocks": 12, "global_blocks": 0, "num_random_blocks": 0},
        {"block_size": 32, "window_blocks": 6},  # the window covers every block
    ],
)
def test_exact_when_the_layout_covers_the_input(options, causal):
    q, k, v = structured_qkv(2, 2, 190, 190, 16, scale=0.8, seed=4)
    mask = _padded(2, 190, 150)
    out = attend(q, k, v, backend="bigbird", key_padding_mask=mask, causal=causal, **options)
    want = reference_attention(q, k, v, mask, causal)
    assert torch.allclose(out.double(), want, atol=1e-5, rtol=0)


def test_approximates_when_the_layout_does_not_cover():
    q, k, v = structured_qkv(1, 2, 512, 512, 16, scale=0.8, seed=6)
    out = attend(q, k, v, backend="bigbird", block_size=16)
    assert not torch.allclose(out.double(), reference_attention(q, k, v), atol=1e-3)


@pytest.mark.parametrize("options", [{"block_size": 16}, {"block_size": 8, "window_blocks": 2}])
def test_causal_future_keys_never_matter(options):
    q, k, v = structured_qkv(1, 2, 400, 400, 16, scale=0.8, seed=8)
    out = attend(q, k, v, backend="bigbird", causal=True, **options)
    for t in (0, 15, 16, 200, 398):
        k2, v2 = k.clone(), v.clone()
        k2[:, :, t + 1 :] = torch.randn_like(k2[:, :, t + 1 :]) * 5
        v2[:, :, t + 1 :] = -100.0
        again = attend(q, k2, v2, backend="bigbird", causal=True, **options)
        assert torch.allclose(again[:, :, : t + 1], out[:, :, : t + 1], atol=1e-6, rtol=0), t
        assert not torch.allclose(again[:, :, t + 1 :], out[:, :, t + 1 :])
    # Nor does the length: a prefix alone gives the same outputs (no layout moves with length).
    prefix = attend(q[:, :, :237], k[:, :, :237], v[:, :, :237], backend="bigbird", causal=True)
    full = attend(q, k, v, backend="bigbird", causal=True)
    assert torch.allclose(prefix, full[:, :, :237], atol=1e-6, rtol=0)


def test_per_head_layouts_are_per_head():
    q, k, v = structured_qkv(1, 2, 160, 160, 16, scale=0.8, seed=9)
    layout = torch.full((2, 10, 1), -1)
    layout[1, 5, 0] = 1  # head 1, query block 5 also sees key block 1
    out = block_sparse_attention(q, k, v, None, False, 16, layout[None], global_blocks=0)
    plain = block_sparse_attention(q, k, v, None, False, 16, layout[:1, None], global_blocks=0)
    assert torch.equal(out[:, 0], plain[:, 0])
    assert not torch.allclose(out[:, 1, 80:96], plain[:, 1, 80:96])
    assert torch.allclose(out[:, 1, :80], plain[:, 1, :80])
