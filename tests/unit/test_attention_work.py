"""The arithmetic estimates behind the per-request compute bound: how work grows with rows,
length and options, per backend and per model (the rate that turns work into seconds is measured
by the service; ``benchmarks/attention/cost_model.py`` compares the two with real timings)."""

from __future__ import annotations

import pytest

from models.attention import BACKENDS, AttentionCall, AttentionError, attention_work
from models.informer.config import preset
from models.informer.memory import forward_work as informer_work
from models.informer.model import attention_plan
from models.text.network.config import BertConfig
from models.text.network.memory import forward_work as text_work


def call(length: int, b: int = 2, causal: bool = False) -> AttentionCall:
    return AttentionCall(b=b, h=4, lq=length, lk=length, d=32, causal=causal)


@pytest.mark.parametrize("backend", BACKENDS)
def test_work_is_linear_in_the_batch(backend: str) -> None:
    one, four = attention_work(backend, call(2048, b=1)), attention_work(backend, call(2048, b=4))
    assert four == pytest.approx(4 * one)


@pytest.mark.parametrize("backend", ["full", "flash"])
def test_exact_attention_grows_with_the_square_of_the_length(backend: str) -> None:
    assert attention_work(backend, call(4096)) == pytest.approx(
        4 * attention_work(backend, call(2048))
    )


@pytest.mark.parametrize("backend", ["performer", "nystrom", "probsparse"])
def test_approximations_grow_about_linearly_and_beat_exact_attention_when_long(
    backend: str,
) -> None:
    ratio = attention_work(backend, call(8192)) / attention_work(backend, call(4096))
    assert 1.9 < ratio < 2.3  # L, or L·log L for probsparse
    assert attention_work(backend, call(8192)) < attention_work("flash", call(8192)) / 5


@pytest.mark.parametrize(
    ("backend", "small", "large", "factor"),
    [
        ("performer", {"num_features": 256}, {"num_features": 4096}, 8),
        ("nystrom", {"num_landmarks": 32}, {"num_landmarks": 512}, 4),
        ("probsparse", {"factor": 2}, {"factor": 30}, 4),
        # 64 x 64 products: a small share of the work at 2,048 tokens
        ("nystrom", {"pinv_iterations": 1}, {"pinv_iterations": 20}, 1.2),
    ],
)
def test_larger_options_cost_more(backend: str, small: dict, large: dict, factor: float) -> None:
    more = attention_work(backend, call(2048), large)
    assert more > factor * attention_work(backend, call(2048), small)


def test_performer_features_dominate_at_large_counts() -> None:
    # The defect the bound exists for: 4096 features cost over ten times the default's work.
    default = attention_work("performer", call(256))
    assert attention_work("performer", call(256), {"num_features": 4096}) > 10 * default


def test_flash_skips_the_masked_half_of_a_causal_call() -> None:
    causal = attention_work("flash", call(1024, causal=True))
    assert causal == pytest.approx(attention_work("flash", call(1024)) / 2)


def test_short_inputs_fall_back_to_full_attention_and_are_priced_as_such() -> None:
    short = call(32)
    assert attention_work("nystrom", short, {"num_landmarks": 64}) == attention_work("full", short)
    assert attention_work("probsparse", call(8), {"factor": 5}) == attention_work("full", call(8))


def test_bad_options_are_refused_as_the_kernel_refuses_them() -> None:
    with pytest.raises(AttentionError, match="num_features"):
        attention_work("performer", call(64), {"num_features": 0})


def test_text_model_work_is_linear_in_rows_and_grows_with_options() -> None:
    config = BertConfig()
    one = text_work(config, "flash", None, 1, 128)
    assert text_work(config, "flash", None, 8, 128) == pytest.approx(8 * one, rel=1e-6)
    features = text_work(config, "performer", {"num_features": 4096}, 8, 128)
    assert features > 3 * text_work(config, "performer", None, 8, 128)


def test_a_long_informer_costs_far_less_with_an_approximation_than_with_full() -> None:
    config = preset("long", seq_len=2048, label_len=48, pred_len=96)

    def work(backend: str, rows: int = 1) -> float:
        return informer_work(config, attention_plan(config, backend), rows)

    assert work("full", 4) == pytest.approx(4 * work("full"))
    for backend in ("performer", "nystrom", "probsparse"):
        assert work(backend) < work("full") / 3, backend
