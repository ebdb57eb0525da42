"""The folder-kind table (:mod:`service.engine.folder_kinds`): each tiny folder the libraries save
is recognised as its own kind, first match, and loading and ``attnserve evaluate`` both follow it."""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from service import cli
from service.engine import folder_kinds
from service.engine.folder_kinds import CHECKPOINT_EVALUATE, FOLDER_KINDS, FolderKind, kind_of
from tests.utils.tiny_classifiers import save_tiny_classifier
from tests.utils.tiny_decoders import save_tiny_causal_reranker
from tests.utils.tiny_encoders import save_tiny_encoder
from tests.utils.tiny_forecasters import build, patchtst_config
from tests.utils.tiny_multi_vector import save_tiny_multi_vector
from tests.utils.tiny_sparse import save_tiny_splade
from tests.utils.tiny_timesfm import save_tiny_timesfm

# What each builder saves, and the evaluate command that kind must reach.
FOLDERS: dict[str, tuple[Callable[[Path], object], str]] = {
    "colbert": (save_tiny_multi_vector, "models.text.quality.multi_vector"),
    "splade": (save_tiny_splade, "models.text.quality.sparse"),
    "cross-encoder": (
        lambda f: save_tiny_classifier(f, "bert", cross_encoder=True),
        "models.text.quality.classifier",
    ),
    "causal reranker": (save_tiny_causal_reranker, "models.text.quality.classifier"),
    "text encoder": (lambda f: save_tiny_encoder(f, "bert"), "models.text.quality.embedding"),
    "timesfm": (save_tiny_timesfm, "models.training.evaluate.zero_shot"),
    "patchtst": (lambda f: build(patchtst_config(), f), "models.training.evaluate.hf"),
}


@pytest.mark.parametrize("label", list(FOLDERS))
def test_each_saved_folder_is_its_own_kind_first_match(label: str, tmp_path: Path) -> None:
    save, evaluate = FOLDERS[label]
    save(tmp_path / label)
    kind = kind_of(tmp_path / label)
    assert kind is not None and kind.evaluate == evaluate


def test_a_checkpoint_folder_is_no_kind(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"model": "informer"}')
    assert kind_of(tmp_path) is None


def test_every_kind_names_a_command_with_main() -> None:
    for module in {kind.evaluate for kind in FOLDER_KINDS} | {CHECKPOINT_EVALUATE}:
        assert callable(importlib.import_module(module).main), module


def test_evaluate_and_loading_follow_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kind added to the table is reached by ``attnserve evaluate`` and by loading, with no
    other edit."""
    ran: list[tuple[str, list[str]]] = []
    marker = tmp_path / "novel"
    marker.mkdir()
    module = types.ModuleType("novel_evaluate")
    module.main = lambda argv: ran.append(("evaluate", argv))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "novel_evaluate", module)
    loaded: Any = object()
    novel = FolderKind("novel", lambda f: f == marker, lambda f, d, p: loaded, "novel_evaluate")
    monkeypatch.setattr(folder_kinds, "FOLDER_KINDS", (novel, *FOLDER_KINDS))
    assert cli.run_model_tool("evaluate", [str(marker)]) == 0
    assert ran == [("evaluate", [str(marker)])]

    from service.engine.registry import _load_folder
    from service.settings import Settings

    assert _load_folder(marker, Settings(), "cpu") is loaded
