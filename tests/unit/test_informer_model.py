"""Informer network: shapes, causal masking, attention plan / fallback, determinism, overfitting."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from models.attention import BACKENDS, AttentionError
from models.informer import model as model_module
from models.informer.config import PRESETS, preset
from models.informer.layers import DistilLayer
from models.informer.model import Informer, LayerChoice, attention_plan
from models.training.data.ett import decoder_input
from tests.utils.informer import random_batch

pytestmark = pytest.mark.usefixtures("one_thread")


@torch.no_grad()
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("revin", [False, True])
def test_output_shape_every_backend(backend, revin):
    cfg = preset("tiny", revin=revin)
    model = Informer(cfg).eval()
    out = model(*random_batch(cfg), backend=backend)
    assert out.shape == (3, cfg.pred_len, cfg.c_out)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("length", [1, 7, 96, 97])
def test_distilling_inference_path_matches_the_reference_layout(length):
    """The inference path (im2col GEMM, BatchNorm folded, even/odd max-pool in [b, n, d]) gives
    the reference Conv1d -> BatchNorm -> ELU -> MaxPool1d result, odd lengths included."""
    torch.manual_seed(0)
    layer = DistilLayer(16).eval()
    with torch.no_grad():  # running statistics away from the identity, as after training
        layer.norm.running_mean.uniform_(-1, 1)
        layer.norm.running_var.uniform_(0.5, 2)
        layer.norm.weight.uniform_(0.5, 1.5)
        layer.norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(3, length, 16)
    with torch.enable_grad():
        reference = layer(x).detach()  # grad mode: the reference layout
    with torch.inference_mode():
        fast = layer(x)
    assert fast.shape == reference.shape == (3, (length + 1) // 2, 16)
    torch.testing.assert_close(fast, reference, rtol=1e-5, atol=1e-5)


def test_encoder_lengths_follow_distilling():
    assert preset("paper", seq_len=96).encoder_lengths() == [96, 48]
    assert preset("paper", seq_len=97, e_layers=3).encoder_lengths() == [97, 49, 25]
    assert preset("paper", seq_len=96, distil=False).encoder_lengths() == [96, 96]


def test_decoder_input_is_start_token_then_zeros():
    y = torch.arange(2 * 10 * 3, dtype=torch.float32).view(2, 10, 3)
    dec = decoder_input(y, label_len=4, pred_len=6)
    assert torch.equal(dec[:, :4], y[:, :4])
    assert dec.shape == (2, 10, 3) and (dec[:, 4:] == 0).all()


@torch.no_grad()
@pytest.mark.parametrize("backend", ["full", "probsparse", "performer"])
def test_decoder_self_attention_is_causal(backend):
    """Changing the calendar mark of future step t leaves predictions before t untouched.

    Uses ``mix=False``: the reference's ``mix=True`` reshape re-reads the head-major buffer, which
    mixes positions after attention (the shipped models keep it for fidelity).
    """
    cfg = preset("tiny", mix=False)
    torch.manual_seed(0)
    model = Informer(cfg).eval()
    x, xm, xd, ym = random_batch(cfg, b=2)
    t = 5
    ym2 = ym.clone()
    ym2[:, cfg.label_len + t] += 0.3
    a = model(x, xm, xd, ym, backend=backend)
    b = model(x, xm, xd, ym2, backend=backend)
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(a[:, t], b[:, t])


def test_exact_fallback_is_full_where_the_fused_kernel_cannot_take_the_layer():
    # On CUDA, SDPA's fused kernels need a head dimension divisible by 8 and no float64.
    odd_heads = replace(PRESETS["small"], d_model=36, n_heads=3)  # head_dim 12
    for cfg, dtype in ((odd_heads, torch.float32), (PRESETS["small"], torch.float64)):
        plan = attention_plan(cfg, "probsparse", dtype=dtype, device_type="cuda")
        assert plan["decoder.0.cross"].backend == "full"
        assert (
            attention_plan(cfg, "nystrom", dtype=dtype, device_type="cuda")[
                "decoder.0.self"
            ].backend
            == "full"
        )
    assert (
        attention_plan(PRESETS["small"], "probsparse", device_type="cuda")[
            "decoder.0.cross"
        ].backend
        == "flash"
    )


def test_exact_fallback_gives_the_answer_of_full_attention(monkeypatch):
    # The layers a backend cannot run are exact whichever exact kernel runs them.
    torch.manual_seed(0)
    cfg = replace(PRESETS["small"], seq_len=96, label_len=24, pred_len=12, dropout=0.0)
    model = Informer(cfg).eval()
    x, xm = torch.randn(2, 96, cfg.enc_in), torch.randn(2, 96, cfg.time_features)
    xd, xdm = torch.randn(2, 36, cfg.dec_in), torch.randn(2, 36, cfg.time_features)
    planned = model_module.attention_plan
    for backend, layer in (("nystrom", "decoder.0.self"), ("probsparse", "decoder.0.cross")):
        assert planned(cfg, backend, seq_len=96)[layer].backend == "flash"
        with torch.no_grad():
            fused = model(x, xm, xd, xdm, backend)

            def with_full(*args, _layer=layer, **kwargs):
                return {**planned(*args, **kwargs), _layer: LayerChoice("full", {}, "reference")}

            monkeypatch.setattr(model_module, "attention_plan", with_full)
            reference = model(x, xm, xd, xdm, backend)
            monkeypatch.setattr(model_module, "attention_plan", planned)
        assert not torch.equal(fused, reference)  # a different kernel did run
        torch.testing.assert_close(fused, reference, rtol=1e-5, atol=1e-5)


def test_plan_falls_back_where_backend_cannot_run():
    cfg = PRESETS["small"]
    plan = attention_plan(cfg, "nystrom")
    assert plan["encoder.0.self"].backend == "nystrom"
    assert plan["decoder.0.cross"].backend == "nystrom"
    assert plan["decoder.0.self"].backend == "flash"  # no causal Nyström: exact, fused
    assert "causal" in plan["decoder.0.self"].reason
    prob = attention_plan(cfg, "probsparse")
    assert [prob[f"encoder.{i}.self"].backend for i in range(2)] == ["probsparse"] * 2
    assert prob["decoder.0.self"].backend == "probsparse"
    assert prob["decoder.0.cross"].backend == "flash"  # exact cross-attention, as in the paper
    assert prob["encoder.0.self"].options == {"factor": cfg.factor}
    for name in ("full", "flash", "performer"):
        assert all(
            c.backend == name and c.reason is None for c in attention_plan(cfg, name).values()
        )


def test_plan_rejects_bad_backend_and_options():
    cfg = PRESETS["tiny"]
    with pytest.raises(AttentionError, match="unknown attention backend"):
        attention_plan(cfg, "linformer")
    with pytest.raises(AttentionError, match="factor"):
        attention_plan(cfg, "probsparse", {"factor": 0})
    with pytest.raises(AttentionError, match="unknown option"):
        attention_plan(cfg, "full", {"factor": 3})


@torch.no_grad()
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_is_deterministic_and_batch_independent(backend):
    cfg = preset("tiny", revin=True)
    torch.manual_seed(1)
    model = Informer(cfg).eval()
    batch = random_batch(cfg, b=4)
    first = model(*batch, backend=backend)
    torch.testing.assert_close(model(*batch, backend=backend), first, rtol=0, atol=0)
    alone = model(*(t[1:2] for t in batch), backend=backend)
    torch.testing.assert_close(alone, first[1:2], rtol=1e-5, atol=1e-5)


def test_same_seed_same_initial_weights():
    torch.manual_seed(3)
    a = Informer(PRESETS["tiny"]).state_dict()
    torch.manual_seed(3)
    b = Informer(PRESETS["tiny"]).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_tiny_model_overfits_a_short_series():
    """A tiny Informer memorises a noisy two-tone series: training MSE falls from ~1 to < 0.05."""
    torch.manual_seed(0)
    cfg = preset("tiny", enc_in=1, dec_in=1, c_out=1, dropout=0.0)
    t = torch.arange(200, dtype=torch.float32)
    series = torch.sin(2 * torch.pi * t / 24) + 0.5 * torch.sin(2 * torch.pi * t / 7)
    series = (series + 0.05 * torch.randn(200))[:, None]
    marks = torch.zeros(200, cfg.time_features)
    starts = range(0, 200 - cfg.seq_len - cfg.pred_len, 8)
    x = torch.stack([series[s : s + cfg.seq_len] for s in starts])
    xm = torch.stack([marks[s : s + cfg.seq_len] for s in starts])
    ys = [series[s + cfg.seq_len - cfg.label_len : s + cfg.seq_len + cfg.pred_len] for s in starts]
    y = torch.stack(ys)
    ym = torch.zeros(len(ys), cfg.dec_len, cfg.time_features)
    dec = decoder_input(y, cfg.label_len, cfg.pred_len)
    model = Informer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    losses = []
    for _ in range(100):
        loss = torch.nn.functional.mse_loss(model(x, xm, dec, ym, "full"), y[:, -cfg.pred_len :])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 0.3
    assert min(losses[-10:]) < 0.05, losses[-10:]
