"""A transformers forecaster's priced plan is what runs, and its plan cache is bounded
(issue 37, 7d and 7e).

The plan (which backend each attention layer runs) prices every batch (memory and compute
estimates); the bridge decides at run time. Both ask one function with the same inputs, so for
every layer the backend priced is the backend run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from models.attention import BACKENDS
from models.hf_forecast import bridge
from models.hf_forecast.forecaster import PLAN_CACHE_SIZE, HFForecaster
from tests.utils.tiny_forecasters import build, patchtst_config, seq2seq_config

CONFIGS = {
    "patchtst": lambda: patchtst_config(),
    "patchtst-channel-attention": lambda: patchtst_config(channel_attention=True),
    "time_series_transformer": lambda: seq2seq_config("time_series_transformer"),
    # transformers' Informer decoder self-attention runs unmasked under SDPA (its module says
    # is_causal=False and the causal mask is skipped): the plan once priced it as causal, so
    # nystrom was priced as exact (flash) and ran as nystrom.
    "informer": lambda: seq2seq_config("informer"),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def forecaster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = build(CONFIGS[request.param](), tmp_path_factory.mktemp(request.param) / "m")
    return HFForecaster.load(Path(folder))


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[tuple[int, int], set[str]]]:
    """Every attention call the bridge makes: (Lq, Lk) -> the backends it ran."""
    calls: dict[tuple[int, int], set[str]] = {}
    attend = bridge.attend

    def spy(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: str, **kw: Any) -> Any:
        calls.setdefault((q.shape[-2], k.shape[-2]), set()).add(backend)
        return attend(q, k, v, backend, **kw)

    monkeypatch.setattr(bridge, "attend", spy)
    yield calls


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_layer_runs_the_backend_its_plan_priced(
    forecaster: HFForecaster, ran: dict[tuple[int, int], set[str]], backend: str
) -> None:
    window = forecaster.prepare(**forecaster.sample_history())
    forecaster.predict([window, window], backend)
    plan = forecaster.plan(backend)
    for layer in forecaster.family.layers:  # the shapes the plan prices
        assert ran[(layer.lq, layer.lk)] == {plan[layer.name].backend}, layer


def test_many_clients_options_do_not_grow_the_plan_cache_past_its_bound(
    forecaster: HFForecaster,
) -> None:
    first = forecaster.plan("performer", {"num_features": 8})
    assert forecaster.plan("performer", {"num_features": 8}) is first  # cached
    for n in range(9, 9 + 3 * PLAN_CACHE_SIZE):  # each client's own option: a distinct key
        forecaster.plan("performer", {"num_features": n})
    # The oldest was evicted: the cache holds at most PLAN_CACHE_SIZE plans, not one per key.
    again = forecaster.plan("performer", {"num_features": 8})
    assert again is not first and again == first
    assert forecaster.plan_cache_info().currsize <= PLAN_CACHE_SIZE
