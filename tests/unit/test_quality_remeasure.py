"""Re-measuring float32 drops the other precisions' old figures (issue 43): they were measured
against the float32 reference the run replaces (the weights may have changed since), so a
``quality.json`` never pairs new float32 figures with stale bfloat16 / int8 ones; the command
says which it dropped and how to measure them again. A run that leaves float32's exact
reference alone (a forecaster's ``--backends performer``) keeps them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from models.quality_file import merge_backends
from models.text.quality.embedding import write_quality
from models.training.evaluate.forecast_quality import score_precisions


def _section(loss: float) -> dict[str, Any]:
    return {"backends": {"flash": {"loss": loss}, "performer": {"loss": 2 * loss}}}


BEFORE = {
    "backends": {"flash": {"loss": 0.0}},
    "precisions": {"bfloat16": _section(0.001), "int8": _section(0.01)},
}


def _write(tmp_path: Path, measured: list[str], result: dict[str, Any]) -> dict[str, Any]:
    output = tmp_path / "quality.json"
    output.write_text(json.dumps(BEFORE))
    write_quality(output, result, measured, 1.0, lambda r: "table")
    written: dict[str, Any] = json.loads(output.read_text())
    return written


def test_a_text_float32_remeasure_drops_the_old_precisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    float32 = {"backends": {"flash": {"loss": 0.0}}}
    written = _write(tmp_path, [], {"precisions": {"float32": float32}})
    assert written["precisions"] == {"float32": float32}
    out = capsys.readouterr().out
    assert "dropped the bfloat16, int8 figures" in out
    assert "--precisions bfloat16 int8" in out


def test_a_text_run_keeps_only_the_precisions_it_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh = _section(0.002)
    measured = {"float32": {"backends": {}}, "bfloat16": fresh}
    written = _write(tmp_path, ["bfloat16"], {"precisions": measured})
    assert written["precisions"] == measured
    out = capsys.readouterr().out
    assert "dropped the int8 figures" in out and "--precisions int8" in out


def _score(backends: list[str], precisions: tuple[str, ...]) -> dict[str, Any]:
    return score_precisions(
        BEFORE, "flash", backends, precisions, lambda p, b: {"loss": 0.5, "fresh": True}
    )


def test_a_forecaster_remeasuring_its_exact_reference_drops_the_old_precisions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _score(["flash", "performer"], ()) == {}
    assert "dropped the bfloat16, int8 figures" in capsys.readouterr().out
    # A precision measured again holds this run's figures only.
    assert _score(["flash"], ("int8",)) == {
        "int8": {"backends": {"flash": {"loss": 0.5, "fresh": True}}}
    }
    assert "dropped the bfloat16 figures" in capsys.readouterr().out


def test_a_forecaster_run_that_leaves_the_reference_alone_keeps_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    kept = _score(["performer"], ("int8",))
    assert kept["bfloat16"] == BEFORE["precisions"]["bfloat16"]
    assert kept["int8"]["backends"] == {
        "flash": {"loss": 0.01},
        "performer": {"loss": 0.5, "fresh": True},
    }
    assert "dropped" not in capsys.readouterr().out


def test_adding_one_backend_keeps_every_other_figure() -> None:
    """``python -m models.text.quality.embedding --backends skyformer``: the new backend's figures join
    each precision it measured; nothing else changes, and a different corpus is refused."""
    before = {
        "reference": "full",
        "corpus": {"texts": 550},
        "backends": {"flash": {"loss": 0.0}},
        "precisions": {"bfloat16": _section(0.001)},
    }
    new = {"loss": 0.05}
    measured = {
        "reference": "full",
        "corpus": {"texts": 550, "max_tokens": 256},
        "precisions": {
            "float32": {"backends": {"skyformer": new}},
            "bfloat16": {"backends": {"skyformer": new}},
        },
    }
    merged = merge_backends(before, measured)
    assert merged["corpus"] == {"texts": 550}
    assert merged["precisions"]["float32"]["backends"] == {"flash": {"loss": 0.0}, "skyformer": new}
    assert merged["precisions"]["bfloat16"]["backends"] == {
        **_section(0.001)["backends"],
        "skyformer": new,
    }
    with pytest.raises(ValueError, match="corpus differs"):
        merge_backends(before, {**measured, "corpus": {"texts": 10}})
