"""Cross-encoder and classifier folders: what is read from them (task, labels, activation,
segments) and what is refused in one line (a missing head, labels that do not fit the head, an
activation we do not implement, a module path leaving the folder)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from models.text.classifier import TextClassifier
from models.text.folders.classifier import is_classifier_folder, read_classifier_folder
from models.text.folders.embedding import is_text_folder
from tests.utils.tiny_classifiers import save_tiny_classifier


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_classifier(tmp_path_factory.mktemp("ce") / "ce", "bert", 1, cross_encoder=True)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_classifier(tmp_path_factory.mktemp("cls") / "cls", "roberta", 3)


def _copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def _edit_json(path: Path, **changes: object) -> None:
    raw = json.loads(path.read_text())
    raw.update(changes)
    path.write_text(json.dumps(raw))


def test_what_a_cross_encoder_folder_says(cross_encoder: Path) -> None:
    spec = read_classifier_folder(cross_encoder)
    assert is_classifier_folder(cross_encoder)
    assert (spec.task, spec.labels, spec.activation) == ("rerank", ("LABEL_0",), "sigmoid")
    assert spec.cross_encoder and spec.segments and spec.encoder.layout == "cross-encoder"


def test_what_a_classifier_folder_says(classifier: Path) -> None:
    spec = read_classifier_folder(classifier)
    assert (spec.task, spec.activation) == ("classify", "softmax")
    assert spec.labels == ("label_a", "label_b", "label_c")
    # RoBERTa's tokenizer hands the model no segment ids.
    assert not spec.cross_encoder and not spec.segments


def test_an_encoder_folder_is_not_a_classifier(tmp_path: Path) -> None:
    from tests.utils.tiny_encoders import build_tiny_model

    build_tiny_model("bert", tmp_path / "enc")
    assert is_text_folder(tmp_path / "enc") and not is_classifier_folder(tmp_path / "enc")


def test_multi_label_problems_score_with_a_sigmoid(classifier: Path, tmp_path: Path) -> None:
    folder = _copy(classifier, tmp_path)
    _edit_json(folder / "config.json", problem_type="multi_label_classification")
    assert read_classifier_folder(folder).activation == "sigmoid"


def test_a_saved_activation_is_honoured(cross_encoder: Path, tmp_path: Path) -> None:
    folder = _copy(cross_encoder, tmp_path)
    path = folder / "config_sentence_transformers.json"
    _edit_json(path, activation_fn="torch.nn.modules.linear.Identity")
    assert read_classifier_folder(folder).activation == "identity"
    _edit_json(path, activation_fn="my_package.Sharpen")
    with pytest.raises(
        ValueError, match=re.escape("activation_fn 'my_package.Sharpen' is not supported")
    ):
        read_classifier_folder(folder)


def test_a_missing_head_tensor_is_refused(classifier: Path, tmp_path: Path) -> None:
    folder = _copy(classifier, tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["classifier.out_proj.weight"]
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(
        ValueError, match=re.escape("lacks the classification head's 'classifier.out_proj")
    ):
        TextClassifier.from_folder(folder)


def test_labels_that_do_not_fit_the_head_are_refused(classifier: Path, tmp_path: Path) -> None:
    folder = _copy(classifier, tmp_path)
    _edit_json(folder / "config.json", id2label={"0": "a", "1": "b"}, label2id={"a": 0, "b": 1})
    with pytest.raises(ValueError, match=re.escape("3 outputs, config.json names 2 labels")):
        TextClassifier.from_folder(folder)
    _edit_json(folder / "config.json", id2label={"zero": "a"})
    with pytest.raises(ValueError, match="id2label keys must be label indices"):
        read_classifier_folder(folder)


@pytest.mark.parametrize("escape", ["../..", "/etc"])
def test_a_module_path_leaving_the_folder_is_refused(
    cross_encoder: Path, tmp_path: Path, escape: str
) -> None:
    folder = _copy(cross_encoder, tmp_path)
    modules = json.loads((folder / "modules.json").read_text())
    modules[0]["path"] = escape
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ValueError, match=r"outside|absolute"):
        read_classifier_folder(folder)
