"""The linear baseline and the Informer options beyond the paper: linear path, patch tokens,
channel independence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.attention import BACKENDS
from models.informer.config import preset
from models.informer.model import Informer
from models.informer.patching import fold_channels, unfold_channels
from models.training.linear import DEFAULT_RIDGE, LinearBaseline, sliding_windows
from tests.utils.informer import random_batch

pytestmark = pytest.mark.usefixtures("one_thread")


def _series(rows: int = 400, channels: int = 3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(rows)[:, None]
    return np.sin(2 * np.pi * t / 24 + np.arange(channels)) + 0.1 * rng.standard_normal(
        (rows, channels)
    )


def test_linear_fit_equals_direct_least_squares():
    """The chunked normal equations give the same map as one lstsq over explicit windows."""
    values, ctx, horizon, ridge = _series(), 24, 6, 1e-3
    fit = LinearBaseline.fit(values, ctx, horizon, ridge)
    rows_x, rows_y = [], []
    for i in range(len(values) - ctx - horizon + 1):
        for c in range(values.shape[1]):
            x, y = values[i : i + ctx, c], values[i + ctx : i + ctx + horizon, c]
            rows_x.append(x - x[-1])
            rows_y.append(y - x[-1])
    X, Y = np.asarray(rows_x), np.asarray(rows_y)
    lam = ridge * len(X)
    # Ridge as an augmented least-squares problem: an independent route to the same solution.
    X_aug = np.vstack([X, np.sqrt(lam) * np.eye(ctx)])
    Y_aug = np.vstack([Y, np.zeros((ctx, horizon))])
    expected = np.linalg.lstsq(X_aug, Y_aug, rcond=None)[0]
    np.testing.assert_allclose(fit.weight, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("ridge", [DEFAULT_RIDGE, 1.0])
def test_linear_fit_on_straight_lines_has_a_closed_form(ridge):
    """On straight lines the ridge solution is known on paper, so a wrong fit cannot hide.

    Channel c is ``a_c·t + b_c``. Every last-value-subtracted window is then ``a_c·v`` with
    ``v = [-(n-1), …, -1, 0]`` and its target ``a_c·u`` with ``u = [1, …, h]``, so with
    ``S = windows·Σa_c²`` and ``λ = ridge·windows·channels`` the normal equations
    ``(S·vvᵀ + λI) W = S·vuᵀ`` are solved by ``W = vuᵀ·S / (S·|v|² + λ)`` (Sherman–Morrison).
    A line of slope ``s`` is then continued with its steps shrunk by ``S|v|² / (S|v|² + λ)``.
    """
    ctx, horizon, rows = 8, 5, 60  # ctx != horizon: a transposed map cannot fit
    slopes, offsets = np.array([0.5, -1.25, 2.0]), np.array([3.0, -7.0, 0.25])
    values = np.arange(rows)[:, None] * slopes + offsets
    windows, channels = rows - ctx - horizon + 1, len(slopes)
    v = np.arange(ctx) - (ctx - 1.0)
    u = np.arange(1.0, horizon + 1)
    s = windows * np.sum(slopes**2)
    lam = ridge * windows * channels
    expected = np.outer(v, u) * s / (s * (v @ v) + lam)

    fit = LinearBaseline.fit(values, ctx, horizon, ridge)
    np.testing.assert_allclose(fit.weight, expected, rtol=1e-10, atol=1e-13)

    # A fresh line (slope 0.3 from 10.0) is continued from its last value.
    history = 10.0 + 0.3 * np.arange(ctx)
    shrink = s * (v @ v) / (s * (v @ v) + lam)
    continued = history[-1] + 0.3 * u * shrink
    np.testing.assert_allclose(fit.predict(history[None, None]), continued[None, None], rtol=1e-10)


def test_linear_score_counts_every_window():
    values, ctx, horizon = _series(), 24, 6
    fit = LinearBaseline.fit(values[:300], ctx, horizon)
    x, y = sliding_windows(values[300:], ctx, horizon)
    errs = [fit.predict(x[i]) - y[i] for i in range(len(x))]
    mse, mae = fit.score(values[300:])
    assert mse == pytest.approx(float(np.mean(np.square(errs))))
    assert mae == pytest.approx(float(np.mean(np.abs(errs))))
    assert mse < float(np.mean(np.square(y - x[..., -1:])))  # beats "repeat the last value"


def test_linear_score_with_a_stride_counts_every_kth_window():
    values, ctx, horizon = _series(), 24, 6
    fit = LinearBaseline.fit(values[:300], ctx, horizon)
    x, y = sliding_windows(values[300:], ctx, horizon)
    errs = [fit.predict(x[i]) - y[i] for i in range(0, len(x), 5)]
    mse, mae = fit.score(values[300:], stride=5)
    assert mse == pytest.approx(float(np.mean(np.square(errs))))
    assert mae == pytest.approx(float(np.mean(np.abs(errs))))
    assert mse != pytest.approx(fit.score(values[300:])[0], rel=1e-6)


def test_linear_fit_refuses_too_few_rows():
    with pytest.raises(ValueError, match="need at least 30 rows"):
        LinearBaseline.fit(_series(rows=20), 24, 6)


def _patch_config(**kw):
    return preset("patch", seq_len=48, label_len=16, pred_len=20, **kw)


@torch.no_grad()
@pytest.mark.parametrize("backend", BACKENDS)
def test_untrained_linear_path_model_is_the_linear_baseline(backend):
    """The network's output projection starts at zero, so every backend returns exactly the
    closed-form map's forecast (RevIN on: the map commutes with it)."""
    cfg = _patch_config()
    model = Informer(cfg).eval()
    fit = LinearBaseline.fit(_series(rows=300, channels=7), cfg.seq_len, cfg.pred_len)
    model.linear.weight.copy_(torch.from_numpy(fit.weight.T))
    x, xm, xd, ym = random_batch(cfg, b=2, walk=True)
    out = model(x, xm, xd, ym, backend=backend)
    expected = fit.predict(x.double().numpy().transpose(0, 2, 1)).transpose(0, 2, 1)
    np.testing.assert_allclose(out.double().numpy(), expected, atol=1e-4)


def test_linear_path_refuses_another_length():
    cfg = _patch_config()
    model = Informer(cfg).eval()
    x, xm, xd, ym = random_batch(cfg, b=2, walk=True)
    with pytest.raises(ValueError, match="maps exactly 48 steps to 20"):
        model(x[:, 8:], xm[:, 8:], xd, ym, backend="full")


def test_linear_path_is_frozen_unless_asked():
    model = Informer(_patch_config())
    assert not model.linear.weight.requires_grad
    assert model.projection.weight.abs().sum() == 0


@torch.no_grad()
def test_patch_token_counts_match_the_config():
    cfg = _patch_config(linear_path=False)
    model = Informer(cfg).eval()
    x, xm, xd, ym = random_batch(cfg, b=2, walk=True)
    tokens = model.enc_embedding(fold_channels(x), xm.repeat_interleave(cfg.enc_in, 0))
    assert tokens.shape[1] == cfg.encoder_lengths()[0] == (48 + 8 - 16) // 8 + 1
    assert cfg.dec_tokens == 16 // 16 + 2  # start token patch + ceil(20 / 16) horizon patches
    assert model(x, xm, xd, ym, backend="flash").shape == (2, 20, 7)


def test_fold_and_unfold_channels_round_trip():
    x = torch.randn(3, 10, 4)
    folded = fold_channels(x)
    assert folded.shape == (12, 10, 1)
    assert torch.equal(folded[5, :, 0], x[1, :, 1])  # row b·c + channel
    assert torch.equal(unfold_channels(folded, 4), x)


@torch.no_grad()
def test_independent_channels_are_permutation_equivariant():
    """With shared weights and no mixing, permuting the input channels permutes the forecast."""
    cfg = _patch_config(linear_path=False, dropout=0.0)
    torch.manual_seed(1)
    model = Informer(cfg).eval()
    x, xm, xd, ym = random_batch(cfg, b=2, walk=True)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    out = model(x, xm, xd, ym, backend="full")
    out_perm = model(x[..., perm], xm, xd[..., perm], ym, backend="full")
    torch.testing.assert_close(out_perm, out[..., perm], atol=1e-5, rtol=1e-5)


def test_patch_config_is_checked():
    with pytest.raises(ValueError, match="multiple of patch_len"):
        preset("patch", label_len=20)
    with pytest.raises(ValueError, match="patch_stride <= patch_len"):
        preset("patch", patch_stride=32)
    with pytest.raises(ValueError, match="channel_independent"):
        preset("patch", c_out=1)
