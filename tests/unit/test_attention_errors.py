"""Every unsupported combination is refused with an AttentionError that says why."""

from __future__ import annotations

import pytest
import torch

from models.attention import BACKENDS, AttentionError, InputSpec, attend, check, get_backend


def _qkv(lq=8, lk=8, d=16, dtype=torch.float32):
    return (
        torch.randn(1, 2, lq, d, dtype=dtype),
        torch.randn(1, 2, lk, d, dtype=dtype),
        torch.randn(1, 2, lk, d, dtype=dtype),
    )


def test_unknown_backend_lists_valid_names():
    with pytest.raises(
        AttentionError,
        match=r"unknown attention backend 'linformer'.*valid backends: " + ", ".join(BACKENDS),
    ):
        attend(*_qkv(), backend="linformer")


@pytest.mark.parametrize(
    ("backend", "options", "message"),
    [
        ("full", {"factor": 5}, "unknown option.*'factor'.*valid options: none"),
        ("performer", {"num_landmarks": 8}, "unknown option.*valid options: num_features"),
        ("performer", {"num_features": 2}, r"'num_features' must be in \[8, 4096\], got 2"),
        ("performer", {"num_features": True}, "must be an integer"),
        ("nystrom", {"num_landmarks": "64"}, "must be an integer"),
        ("nystrom", {"num_landmarks": 0}, r"must be in \[1, 1024\]"),
        ("probsparse", {"factor": 101}, r"must be in \[1, 100\]"),
        ("probsparse", {"factor": 2.5}, "must be an integer"),
        ("bigbird", {"block_size": 4}, r"'block_size' must be in \[8, 1024\], got 4"),
        ("bigbird", {"block_size": 2048}, r"'block_size' must be in \[8, 1024\]"),
        ("bigbird", {"num_random_blocks": -1}, r"'num_random_blocks' must be in \[0, 32\]"),
        ("bigbird", {"window_blocks": 33}, r"'window_blocks' must be in \[0, 32\]"),
        ("bigbird", {"global_blocks": 17}, r"'global_blocks' must be in \[0, 16\]"),
        ("bigbird", {"block_size": 6.5}, "'block_size' must be an integer"),
        ("bigbird", {"random_blocks": 3}, "unknown option.*'random_blocks'"),
        (
            "reformer",
            {"bucket_size": 2},
            r"reformer: option 'bucket_size' must be in \[4, 4096\], got 2",
        ),
        ("reformer", {"bucket_size": 8192}, r"'bucket_size' must be in \[4, 4096\], got 8192"),
        (
            "reformer",
            {"num_hashes": 0},
            r"reformer: option 'num_hashes' must be in \[1, 16\], got 0",
        ),
        ("reformer", {"num_hashes": 1.5}, r"'num_hashes' must be an integer in \[1, 16\]"),
        ("reformer", {"hashing": "angular"}, r"'hashing' must be one of 'shared', 'asymmetric'"),
    ],
)
def test_bad_options_are_refused(backend, options, message):
    with pytest.raises(AttentionError, match=message):
        attend(*_qkv(), backend=backend, **options)


@pytest.mark.parametrize(
    "backend", [b for b in BACKENDS if not get_backend(b).capabilities.cross_attention]
)
def test_self_attention_only_backends_refuse_lq_other_than_lk(backend):
    """The model falls back to exact attention for such a layer; a direct call is refused."""
    with pytest.raises(AttentionError, match=f"{backend} needs Lq == Lk"):
        attend(*_qkv(lq=4, lk=8), backend=backend)


def test_integral_float_options_are_accepted():
    assert get_backend("probsparse").resolve_options({"factor": 3.0}) == {"factor": 3}


def test_nystrom_refuses_causal():
    with pytest.raises(AttentionError, match="nystrom has no causal"):
        attend(*_qkv(), backend="nystrom", causal=True)


def test_performer_refuses_causal_cross_attention():
    with pytest.raises(
        AttentionError, match="performer supports causal attention only with Lq == Lk"
    ):
        attend(*_qkv(lq=4, lk=8), backend="performer", causal=True)


def test_flash_refuses_oversized_heads_and_explains_cuda_rules():
    with pytest.raises(AttentionError, match="head dimensions up to 256"):
        attend(*_qkv(d=264), backend="flash")
    spec = InputSpec(lq=8, lk=8, head_dim=12, dtype=torch.float64, device_type="cuda")
    reasons = get_backend("flash").unsupported_reasons(spec)
    assert any("float64" in r for r in reasons) and any("divisible by 8" in r for r in reasons)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((torch.randn(2, 8, 16), torch.randn(2, 8, 16), torch.randn(2, 8, 16)), "must be 4-D"),
        (
            (torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 9, 16)),
            "same shape",
        ),
        (
            (torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 8), torch.randn(1, 2, 8, 8)),
            "must agree",
        ),
        (
            (torch.randn(1, 2, 0, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)),
            "at least 1",
        ),
        ((torch.ones(1, 2, 8, 16, dtype=torch.long),) * 3, "floating dtype"),
    ],
)
def test_malformed_tensors_are_refused(args, message):
    with pytest.raises(AttentionError, match=message):
        attend(*args)


@pytest.mark.parametrize("mask", [torch.ones(1, 7, dtype=torch.bool), torch.ones(1, 8)])
def test_bad_mask_is_refused(mask):
    with pytest.raises(AttentionError, match="key_padding_mask must be bool"):
        attend(*_qkv(), key_padding_mask=mask)


def test_check_validates_without_running():
    spec = InputSpec(lq=8, lk=8, head_dim=16, dtype=torch.float32, device_type="cpu", causal=True)
    check("performer", spec, {"num_features": 64})
    with pytest.raises(AttentionError, match="no causal"):
        check("nystrom", spec)
    with pytest.raises(AttentionError, match="does not run on device 'mps'"):
        check("full", InputSpec(8, 8, 16, torch.float32, "mps"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_describes_itself(backend):
    info = get_backend(backend).describe()
    assert info["name"] == backend and info["citation"] and "causal" in info["supports"]
