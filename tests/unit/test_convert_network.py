"""``models.precision.convert_network``: one conversion for any network, whatever model holds it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from models.precision import SmoothedLinear, convert_network


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()


def test_float32_is_the_network_itself_and_other_floats_are_copies() -> None:
    net = _net()
    assert convert_network(net, "float32") is net
    half: Any = convert_network(net, "bfloat16")
    assert half is not net and half[0].weight.dtype == torch.bfloat16
    assert net[0].weight.dtype == torch.float32  # the original is not modified


def test_int8_calibrates_only_when_asked_and_keeps_named_layers_float() -> None:
    net, x = _net(), torch.randn(64, 16)
    seen: list[nn.Module] = []

    def calibrate(probed: nn.Module) -> None:
        seen.append(probed)
        probed(x)

    smoothed: Any = convert_network(net, "int8", calibrate=calibrate)
    assert len(seen) == 1 and seen[0] is not net  # a probed copy runs, not the network
    assert isinstance(smoothed[0], SmoothedLinear) and isinstance(smoothed[2], SmoothedLinear)
    only: Any = convert_network(net, "int8", calibrate=calibrate, smooth=(r"^2$",))
    assert not isinstance(only[0], SmoothedLinear) and isinstance(only[2], SmoothedLinear)
    plain: Any = convert_network(net, "int8", calibrate=calibrate, smooth=False)
    assert len(seen) == 2  # smooth=False: no calibration run
    assert not any(isinstance(m, SmoothedLinear) for m in plain.modules())
    kept: Any = convert_network(net, "int8", keep_float=(r"^0$",))
    assert type(kept[0]) is nn.Linear and type(kept[2]) is not nn.Linear
    with torch.inference_mode():
        assert torch.allclose(smoothed(x), net(x), atol=0.05)


def test_an_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown precision 'int4'"):
        convert_network(_net(), "int4")
