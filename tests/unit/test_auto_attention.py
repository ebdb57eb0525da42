"""``attention: "auto"``: quality losses read from the shipped figures, and a choice that never
exceeds the budget (``models.quality_loss``, ``service.engine.auto_attention``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from models.quality_file import backends_of, read_quality
from models.quality_loss import embedding_losses, forecast_losses, forecast_variant_losses
from models.text.quality.card import QUALITY_FILE
from service.engine.auto_attention import EXACT_BACKENDS, Candidate, Choice, choose
from service.engine.servables.base import Call

WEIGHTS = Path(__file__).resolve().parents[2] / "models" / "weights"
SHIPPED = sorted(p.parent for p in WEIGHTS.glob("*/quality.json"))
BUDGETS = (0.0, 1e-4, 0.001, 0.01, 0.05, 0.1, 0.5, 2.0)


def test_every_default_forecaster_ships_quality_figures() -> None:
    from service.settings import DEFAULT_MODELS

    shipped = {p.name for p in SHIPPED}
    assert {m for m in DEFAULT_MODELS if m.startswith("informer-")} <= shipped
    # Every shipped folder has its figures, so the tests parametrised over SHIPPED see them all.
    assert shipped == {p.name for p in WEIGHTS.iterdir() if p.is_dir()}
    assert "patchtst-ettm1-h96-c512" in shipped


@pytest.mark.parametrize("checkpoint", SHIPPED, ids=lambda p: p.name)
def test_forecast_losses_follow_the_figures_on_matching_windows(checkpoint: Path) -> None:
    quality = read_quality(checkpoint / "quality.json")
    losses = forecast_losses(quality)
    backends = backends_of(quality)
    assert set(losses) == set(backends)
    exact = backends.get("flash") or backends["full"]
    overall = quality["linear_baseline"]["mse"]
    for name, entry in backends.items():
        if name in EXACT_BACKENDS:
            assert losses[name] == 0.0
            continue
        # Recomputed from the figures: each MSE over the linear MSE of its own windows.
        mine = entry["mse"] / entry.get("linear_mse", overall)
        ref = exact["mse"] / exact.get("linear_mse", overall)
        assert losses[name] == pytest.approx(mine / ref - 1, abs=1e-12)
        if entry.get("windows") == exact.get("windows"):
            assert losses[name] == pytest.approx(entry["mse"] / exact["mse"] - 1, abs=1e-9)


def test_forecast_losses_compare_scores_on_different_windows_through_the_baseline() -> None:
    quality = {
        "linear_baseline": {"mse": 0.50},
        "backends": {
            "performer": {"mse": 0.45},  # all windows: 10 % better than linear there
            "flash": {"mse": 0.40, "linear_mse": 0.40},  # every k-th window: equal to linear
            "nystrom": {"mse": 0.44, "linear_mse": 0.40},  # 10 % worse than linear there
        },
    }
    losses = forecast_losses(quality)
    assert losses["flash"] == 0.0
    assert losses["performer"] == pytest.approx(0.9 - 1)
    assert losses["nystrom"] == pytest.approx(0.1)
    assert forecast_losses({"backends": {"performer": {"mse": 1.0}}}) == {}  # no exact figure
    assert forecast_losses({}) == {}


def test_variant_losses_are_worked_out_like_the_defaults() -> None:
    quality = {
        "linear_baseline": {"mse": 0.50},
        "backends": {"flash": {"mse": 0.40, "linear_mse": 0.40}},
        "variants": [
            {
                "backend": "performer",
                "options": {"num_features": 16},
                "mse": 0.42,
                "linear_mse": 0.40,
            },
            {"backend": "nystrom", "options": {"num_landmarks": 8}, "mse": 0.55},  # all windows
        ],
    }
    (performer, nystrom) = forecast_variant_losses(quality)
    assert performer[:2] == ("performer", {"num_features": 16})
    assert performer[2] == pytest.approx(0.05)
    assert nystrom[:2] == ("nystrom", {"num_landmarks": 8})
    assert nystrom[2] == pytest.approx(0.55 / 0.50 - 1)
    assert forecast_variant_losses({"variants": quality["variants"]}) == []  # no exact figure


@pytest.mark.parametrize("checkpoint", SHIPPED, ids=lambda p: p.name)
def test_shipped_variants_name_a_backend_and_options_and_follow_their_figures(
    checkpoint: Path,
) -> None:
    quality = read_quality(checkpoint / "quality.json")
    variants = forecast_variant_losses(quality)
    scored = quality["precisions"]["float32"]["variants"]
    assert len(variants) == len(scored)
    exact = backends_of(quality).get("flash") or backends_of(quality)["full"]
    overall = quality["linear_baseline"]["mse"]
    ref = exact["mse"] / exact.get("linear_mse", overall)
    for (backend, options, loss), entry in zip(variants, scored, strict=True):
        assert backend not in EXACT_BACKENDS and options  # a variant changes something
        assert loss == pytest.approx(entry["mse"] / entry.get("linear_mse", overall) / ref - 1)


def test_embedding_losses_are_the_band_of_the_length() -> None:
    quality = read_quality(QUALITY_FILE)
    for length, band in ((10, "1-64"), (64, "1-64"), (65, "65-128"), (200, "129-256")):
        losses = embedding_losses(quality, length)
        assert losses[quality["reference"]] == (0.0, {})
        for name, entry in backends_of(quality).items():
            loss, options = losses[name]
            assert loss == pytest.approx(max(0.0, 1 - entry["by_tokens"][band]["mean_cosine"]))
            assert options == entry["options"]
    assert embedding_losses(quality, 257) == {}  # no figure beyond the measured lengths


def _candidate(
    backend: str, loss: float, seconds: float | None, fits: bool = True, **changed: int
) -> Candidate:
    items = tuple(sorted(changed.items()))
    return Candidate(Call(backend, items), loss, seconds, fits, items)


def _shipped_loss_tables() -> list[tuple[str, list[tuple[str, dict[str, int], float]]]]:
    tables = []
    for p in SHIPPED:
        quality = read_quality(p / "quality.json")
        losses = [(b, {}, loss) for b, loss in forecast_losses(quality).items()]
        tables.append((p.name, losses + forecast_variant_losses(quality)))
    text = read_quality(QUALITY_FILE)
    for length in (32, 100, 256):
        losses = [(k, o, v) for k, (v, o) in embedding_losses(text, length).items()]
        tables.append((f"text@{length}", losses))
    return tables


@pytest.mark.parametrize("name,losses", _shipped_loss_tables(), ids=lambda x: str(x)[:40])
def test_never_a_backend_whose_measured_loss_exceeds_the_budget(
    name: str, losses: list[tuple[str, dict[str, int], float]]
) -> None:
    rng = random.Random(name)
    for _ in range(50):  # any prices the device might measure
        options = [
            _candidate(b, 0.0 if b in EXACT_BACKENDS else loss, rng.uniform(0.001, 1.0), **o)
            for b, o, loss in losses
        ]
        for exact in EXACT_BACKENDS:
            if exact not in {b for b, _, _ in losses}:
                options.append(_candidate(exact, 0.0, rng.uniform(0.001, 1.0)))
        for budget in BUDGETS:
            choice = choose(options, budget)
            chosen = choice.picked
            assert chosen in options
            assert chosen.loss <= budget
            allowed = [
                c
                for c in options
                if c.loss <= budget and (budget > 0 or c.backend in EXACT_BACKENDS)
            ]
            assert chosen.seconds == min(c.seconds or 0.0 for c in allowed)  # the cheapest
            if budget == 0.0:  # exact attention, even where an approximation measured <= 0
                assert choice.backend in EXACT_BACKENDS


def test_choice_skips_what_does_not_fit_memory_and_prefers_priced_candidates() -> None:
    options = [
        _candidate("full", 0.0, 0.9, False),
        _candidate("flash", 0.0, 0.5),
        _candidate("performer", 0.01, 0.1, False),
        _candidate("nystrom", 0.02, None),
        _candidate("probsparse", 0.03, 0.3),
    ]
    assert choose(options, 0.05).backend == "probsparse"
    assert choose(options, 0.025).backend == "flash"
    assert choose(options, 0.0).backend == "flash"
    with pytest.raises(ValueError):
        choose([], 0.1)


def test_a_cheaper_variant_within_the_budget_wins_and_one_over_it_never_does() -> None:
    options = [
        _candidate("flash", 0.0, 0.5),
        _candidate("performer", 0.001, 0.3),
        _candidate("performer", 0.002, 0.2, num_features=16),
        _candidate("performer", 0.08, 0.1, num_features=8),
    ]
    assert choose(options, 0.05).picked == options[2]
    assert choose(options, 0.05).options == {"num_features": 16}
    assert choose(options, 0.1).picked == options[3]
    assert choose(options, 0.0015).picked == options[1]
    # A variant that measured better than exact is still not exact: budget 0 means exact.
    better = [*options, _candidate("performer", -0.001, 0.05, num_features=12)]
    assert choose(better, 0.0).backend == "flash"
    assert choose(better, 1e-6).picked == better[-1]
    # The reference is flash at its defaults, never a variant.
    assert choose(options, 0.05).reference == options[0]


def test_the_header_says_what_ran_why_and_against_what() -> None:
    flash = _candidate("flash", 0.0, 0.126)
    performer = _candidate("performer", -0.0002, 0.041)
    choice = Choice(performer, 0.05, flash)
    assert choice.header() == "performer; loss -0.0002 <= 0.05; est 41 ms vs flash 126 ms"
    assert Choice(flash, 0.0, flash).header() == "flash; loss 0 <= 0; est 126 ms"
    variant = _candidate("performer", 0.001, 0.02, num_features=16)
    assert Choice(variant, 0.05, flash).header() == (
        "performer(num_features=16); loss 0.001 <= 0.05; est 20 ms vs flash 126 ms"
    )


def _in(precision: str, backend: str, loss: float, seconds: float | None) -> Candidate:
    return Candidate(Call(backend, (), precision=precision), loss, seconds, True)


def test_a_precision_with_no_figure_within_the_budget_runs_its_exact_default() -> None:
    fallback = _in("bfloat16", "flash", float("nan"), 0.01)
    # Nothing measured in bfloat16 (issue 43: a 500 before).
    choice = choose([], 0.05, fallback)
    assert choice.picked == fallback and choice.fallback
    assert choice.header() == (
        "flash@bfloat16; bfloat16 not measured (attnserve evaluate --precisions bfloat16): "
        "the exact default backend; est 10 ms"
    )
    # Measured, but nothing fits: never a candidate over the budget (the cheapest was taken).
    measured = [_in("bfloat16", "flash", 0.002, 0.01), _in("bfloat16", "performer", 0.03, 0.001)]
    fallback = measured[0]
    choice = choose(measured, 0.0, fallback)
    assert choice.picked == fallback
    assert choice.header().startswith("flash@bfloat16; no bfloat16 candidate measured within 0:")
    # Exact float32 attention, when it is a candidate, still comes first.
    exact = _candidate("flash", 0.0, 0.5)
    assert choose([exact, *measured], 0.0, fallback).picked == exact
    assert choose(measured, 0.05, fallback).picked == measured[1]
