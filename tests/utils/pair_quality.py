"""Checks shared by the tests of the pair measurements (``attnserve evaluate`` of a multi-vector
or sparse folder): which backends a model accepts, the figures of the approximations, and the
``quality.json`` round trip through the command line and back into ``auto``'s losses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from models.attention import BACKENDS, AttentionError
from models.names import DEFAULT_PRECISION
from models.quality_file import backends_of, read_quality
from models.quality_loss import classifier_losses
from models.text.base import TextModel
from service.cli import run_model_tool


def accepted(model: TextModel) -> list[str]:
    """Every registered backend ``model`` accepts at its default options, in registry order
    (asked of the model one by one, not of the measurement under test)."""
    names = []
    for name in BACKENDS:
        try:
            model.check_attention(name, None)
        except AttentionError:
            continue
        names.append(name)
    return names


def approximations(figures: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rows of ``figures`` that lost something (``loss > 0``), after checking that there is
    one and that each row's and band's ``loss`` is ``1 - kendall_tau``."""
    approximate = {n: r for n, r in figures.items() if r["loss"] > 0.0}
    assert approximate, figures
    for name, row in approximate.items():
        assert row["loss"] == pytest.approx(1.0 - row["kendall_tau"], abs=1e-6), name
        for band in row["by_tokens"].values():
            assert band["loss"] == pytest.approx(1.0 - band["kendall_tau"], abs=1e-6)
    return approximate


def evaluate_round_trip(
    folder: Path, task: str, pairs: int, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """Run ``attnserve evaluate FOLDER`` in float32 and bfloat16, check the ``quality.json`` it
    writes (task, precisions, the losses ``auto`` reads from it with the float32 reference's at
    0) and ``--show``'s table; returns the file's contents."""
    output = folder / "quality.json"
    output.unlink(missing_ok=True)
    argv = [str(folder), "--pairs-per-band", str(pairs), "--precisions", "bfloat16"]
    assert run_model_tool("evaluate", argv) == 0
    assert "wrote" in capsys.readouterr().out
    quality = read_quality(output)
    assert quality["task"] == task
    assert set(quality["precisions"]) == {DEFAULT_PRECISION, "bfloat16"}
    losses = classifier_losses(quality, 32)
    assert losses["full"] == (0.0, {})
    for name, entry in backends_of(quality).items():
        assert losses[name][0] == pytest.approx(entry["by_tokens"]["1-64"]["loss"]), name
    assert run_model_tool("evaluate", [str(folder), "--show"]) == 0
    assert "| `full` |" in capsys.readouterr().out
    return quality
