"""Precision pieces without a server: int8 quantization (per-channel weights, layers kept in
float), the fused linear helpers on a quantized layer, quality figures per precision (old files
without precisions read as float32) and the cost model's rates per precision."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from models.precision import quantize_int8
from models.quality_file import measured_precisions
from models.quality_loss import embedding_losses, forecast_losses
from models.text.network import fused_linear
from service.engine.batching.cost import CostModel

OLD_FORECAST = {  # a quality.json written before precisions existed
    "linear_baseline": {"mse": 0.5},
    "backends": {"flash": {"mse": 0.40}, "performer": {"mse": 0.42}},
}
NEW_FORECAST = {
    **OLD_FORECAST,
    "precisions": {"bfloat16": {"backends": {"flash": {"mse": 0.402}}}},
}
TEXT = {
    "reference": "full",
    "backends": {
        "full": {"options": {}, "by_tokens": {"1-64": {"mean_cosine": 1.0}}},
        "performer": {"options": {}, "by_tokens": {"1-64": {"mean_cosine": 0.9}}},
    },
    "precisions": {
        "int8": {
            "backends": {
                "full": {"options": {}, "by_tokens": {"1-64": {"mean_cosine": 0.99}}},
            }
        }
    },
}


def test_old_quality_files_read_as_float32_only() -> None:
    assert forecast_losses(OLD_FORECAST) == {"flash": 0.0, "performer": 0.42 / 0.40 - 1}
    assert forecast_losses(OLD_FORECAST, "bfloat16") == {}
    assert measured_precisions(OLD_FORECAST) == ["float32"]


def test_other_precisions_lose_against_the_float32_exact_reference() -> None:
    # bfloat16's flash is not exact: 0.402 / 0.400 - 1.
    assert forecast_losses(NEW_FORECAST, "bfloat16") == {"flash": 0.402 / 0.400 - 1}
    assert forecast_losses(NEW_FORECAST)["flash"] == 0.0
    assert measured_precisions(NEW_FORECAST) == ["float32", "bfloat16"]
    losses = embedding_losses(TEXT, 32, "int8")
    assert set(losses) == {"full"}  # the reference is exact in float32 only
    assert abs(losses["full"][0] - 0.01) < 1e-12
    assert embedding_losses(TEXT, 32)["full"] == (0.0, {})


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()


def test_int8_quantizes_linear_layers_per_channel_and_keeps_the_named_ones() -> None:
    net = _net()
    quantized: Any = quantize_int8(net, keep_float=(r"^2$",))
    assert type(quantized[2]) is nn.Linear  # kept in float32
    assert type(net[0]) is nn.Linear  # the original is untouched
    layer = quantized[0]
    assert type(layer).__module__.startswith("torch.ao.nn.quantized.dynamic")
    assert layer.weight().qscheme() == torch.per_channel_affine  # one scale per output row
    x = torch.randn(64, 16)
    cos = nn.functional.cosine_similarity(quantized(x), net(x), dim=-1)
    assert cos.min() > 0.99


def test_fused_helpers_run_a_quantized_layer_as_its_own_module() -> None:
    quantized: Any = quantize_int8(_net())
    layer = quantized[0]
    x, r = torch.randn(8, 16), torch.randn(8, 32)
    with torch.inference_mode():
        assert torch.equal(fused_linear.linear(x, layer), layer(x))
        assert torch.equal(fused_linear.linear_gelu(x, layer), nn.functional.gelu(layer(x)))
        assert torch.equal(fused_linear.residual_linear(r.clone(), x, layer), r + layer(x))


def test_cost_model_keeps_a_rate_per_precision() -> None:
    cost = CostModel()
    cost.calibrate("flash", 100.0, lambda: None)
    cost.calibrate("flash", 100.0, lambda: None, precision="bfloat16")
    cost.rates[("flash", None, "bfloat16")] = 400.0
    cost.rates[("flash", None, "float32")] = 100.0
    assert cost.seconds("flash", 100.0) == 1.0
    assert cost.seconds("flash", 100.0, (), "bfloat16") == 0.25
    assert cost.seconds("flash", 100.0, (), "int8") is None  # never measured: never guessed
    cost.rates[("flash", (("x", 1),), "bfloat16")] = 50.0
    assert cost.seconds("flash", 100.0, (("x", 1),), "bfloat16") == 2.0


def test_text_quality_measures_each_precision_against_float32_exact() -> None:
    """``attnserve evaluate --precisions`` for a text model: every backend in bfloat16 and int8,
    the reference included, against the float32 exact embedding, read back per precision."""
    from models.text.quality.embedding import measure
    from tests.service.helpers import tiny_encoder

    encoder = tiny_encoder()
    result = measure(encoder, 2, 64, ("bfloat16", "int8"))
    sections = dict(result["precisions"])
    float32 = sections.pop("float32")["backends"]
    assert set(sections) == {"bfloat16", "int8"}
    for precision, section in sections.items():
        backends = section["backends"]
        assert result["reference"] in backends  # not exact outside float32
        assert set(backends) == {result["reference"], *float32}
        full = backends["full"]
        assert 0.99 < full["min_cosine"] < 1.0 or precision == "int8"
        assert 0.9 < full["min_cosine"] < 1.0
        loss, _ = embedding_losses(result, 32, precision)["full"]
        assert loss == max(0.0, 1.0 - full["by_tokens"]["1-64"]["mean_cosine"]) > 0


def test_smoothing_keeps_the_map_and_spares_the_other_channels_an_outlier() -> None:
    """SmoothQuant: one input channel 50x larger than the rest takes a per-tensor int8 scale's
    whole range; smoothed first, the quantized layer's error falls well below plain int8's."""
    from models.precision import SmoothedLinear, input_ranges

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32)).eval()
    x = torch.randn(256, 16)
    x[:, 3] *= 50
    ranges = input_ranges(net, lambda probed: probed(x))
    assert torch.equal(ranges["0"], x.abs().amax(0))
    plain: Any = quantize_int8(net)
    smoothed: Any = quantize_int8(net, input_absmax=ranges)
    assert isinstance(smoothed[0], SmoothedLinear)
    with torch.inference_mode():
        exact = net(x)
        plain_error = (plain(x) - exact).norm() / exact.norm()
        smoothed_error = (smoothed(x) - exact).norm() / exact.norm()
    assert smoothed_error < plain_error / 2, (smoothed_error, plain_error)


def test_smoothing_can_be_limited_to_named_layers() -> None:
    """``smooth`` as patterns: only the matching linear layers are calibrated and smoothed, the
    others are plain dynamic int8 (how the benchmark measures which layers need it)."""
    from models.precision import SmoothedLinear
    from tests.service.helpers import tiny_encoder

    encoder = tiny_encoder()

    def smoothed_names(smooth: bool | tuple[str, ...]) -> set[str]:
        int8 = encoder.with_precision("int8", smooth=smooth)
        return {n for n, m in int8.model.named_modules() if isinstance(m, SmoothedLinear)}

    every = smoothed_names(True)
    assert {n.rsplit(".", 1)[-1] for n in every} == {"qkv", "attn_out", "ffn_in", "ffn_out"}
    assert smoothed_names((r"\.ffn_out$",)) == {n for n in every if n.endswith(".ffn_out")}
    assert smoothed_names(False) == set()
