"""``attnserve evaluate --help`` without a folder says which tool each kind of folder gets."""

from __future__ import annotations

import pytest

from service.cli import run_model_tool


def test_help_without_a_folder_lists_every_kind_then_the_forecaster_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        run_model_tool("evaluate", ["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for kind in ("time-series folder", "text", "cross-encoder", "classifier"):
        assert kind in out, kind
    # The Informer tool's own help follows the list.
    assert out.index("cross-encoder") < out.index("usage:")
    assert "--stride" in out


def test_train_help_is_the_tool_help_alone(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_model_tool("train", ["--help"])
    assert "cross-encoder" not in capsys.readouterr().out
