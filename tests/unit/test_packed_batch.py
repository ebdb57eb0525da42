"""``PackedBatch.pad`` / ``unpad``: packed tokens into the attention block and back."""

from __future__ import annotations

import torch

from models.attention import attend
from models.text.network.bert import PackedBatch

LENGTHS = [5, 2, 7, 1]


def _batch(padded: int) -> tuple[PackedBatch, torch.Tensor]:
    ids = [[100 + i] * n for i, n in enumerate(LENGTHS)]
    batch = PackedBatch.from_lists(ids, padded, torch.device("cpu"))
    x = torch.randn(sum(LENGTHS), 6, generator=torch.Generator().manual_seed(0))
    return batch, x


def test_pad_places_each_token_and_unpad_takes_them_back() -> None:
    batch, x = _batch(9)
    block = batch.pad(x)
    assert block.shape == (len(LENGTHS), 9, 6)
    start = 0
    for row, n in enumerate(LENGTHS):
        assert torch.equal(block[row, :n], x[start : start + n])
        # A padded slot holds a finite copy of its text's first token (never read unmasked).
        assert torch.equal(block[row, n:], x[start].expand(9 - n, 6))
        start += n
    assert torch.equal(batch.unpad(block), x)
    # unpad takes any strides: a transposed block as attention returns it.
    heads = block.view(len(LENGTHS), 9, 2, 3).transpose(1, 2).contiguous().transpose(1, 2)
    assert torch.equal(batch.unpad(heads).reshape(-1, 6), x)


def test_an_unpadded_batch_is_a_view() -> None:
    ids = [[101] * 4, [102] * 4]
    batch = PackedBatch.from_lists(ids, 4, torch.device("cpu"))
    x = torch.randn(8, 3)
    assert batch.key_padding_mask is None and batch.pad_source is None
    assert batch.pad(x).data_ptr() == x.data_ptr()
    assert torch.equal(batch.unpad(batch.pad(x)), x)


def test_padded_slots_do_not_reach_real_tokens_in_any_backend() -> None:
    """What a padded slot holds (a copy of a real token here, zeros before) changes no real
    token's attention output: every backend leaves padded keys out."""
    batch, _ = _batch(64)
    gen = torch.Generator().manual_seed(1)
    qkv = torch.randn(sum(LENGTHS), 3 * 8, generator=gen)
    mask = batch.key_padding_mask
    assert mask is not None
    for backend in ("full", "flash", "performer", "nystrom", "probsparse"):
        outs = []
        for fill in ("copy", "zeros", "large"):
            block = batch.pad(qkv)
            if fill != "copy":
                block = block.masked_fill(~mask[..., None], 0.0 if fill == "zeros" else 1e3)
            q, k, v = block.view(len(LENGTHS), 64, 3, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
            torch.manual_seed(0)  # performer draws its features
            out = attend(q, k, v, backend=backend, key_padding_mask=mask)
            outs.append(batch.unpad(out.transpose(1, 2)))
        for other in outs[1:]:
            torch.testing.assert_close(other, outs[0], rtol=1e-5, atol=1e-5, msg=backend)
