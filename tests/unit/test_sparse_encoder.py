"""SPLADE sparse encoders (``models.text.sparse``): equal to sentence-transformers'
``SparseEncoder.encode`` / ``encode_query`` / ``encode_document`` on the exact backends (the same
non-zero entries, values within float32 rounding), for every MLM head we read (BERT, RoBERTa,
DistilBERT, MPNet, ModernBERT), max and sum pooling, both activations, ``max_active_dims`` (the
folder's and a call's), and the inference-free Router form with the static side on either route.
Bad folders are refused in one line.

The models are tiny and random (``tests/utils/tiny_sparse.py``), saved by
``SparseEncoder.save``, so the reference is the real library.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from models.attention import BACKENDS, get_backend
from models.text.sparse import SparseEncoder
from tests.utils.tiny_encoders import SAMPLE_TEXTS
from tests.utils.tiny_sparse import (
    MASKED_LM,
    dense_of,
    reference_vectors,
    save_tiny_inference_free,
    save_tiny_splade,
)

TOLERANCE = 1e-5  # float32, the bound against sentence-transformers
EXACT = [b for b in BACKENDS if get_backend(b).exact and b in ("flash", "full")]
# (strategy, activation) per architecture, so each pooling form meets a real model.
POOLING = {
    "bert": ("max", "relu"),
    "roberta": ("sum", "relu"),
    "distilbert": ("max", "log1p_relu"),
    "mpnet": ("max", "relu"),
    "modernbert": ("sum", "log1p_relu"),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sparse")
    out = {
        arch: save_tiny_splade(
            root / arch, arch, strategy=POOLING[arch][0], activation=POOLING[arch][1], seed=i
        )
        for i, arch in enumerate(MASKED_LM)
    }
    out["pruned"] = save_tiny_splade(root / "pruned", "bert", max_active_dims=12, seed=5)
    out["fill-mask"] = save_tiny_splade(root / "fill-mask", "roberta", seed=6, legacy=False)
    out["free-query"] = save_tiny_inference_free(root / "free-query", max_active_dims=9, seed=3)
    out["free-document"] = save_tiny_inference_free(
        root / "free-document", "roberta", static_side="document", seed=4
    )
    return out


def _same(got: torch.Tensor, expected: torch.Tensor) -> None:
    """The same non-zero entries, each within TOLERANCE (relative above 1: a sum over 64
    tokens reaches about 40, where float32's own step is 4e-6)."""
    assert torch.equal(got != 0, expected != 0), "different non-zero entries"
    scale = expected.abs().clamp(min=1.0)
    assert ((got - expected).abs() / scale).max().item() <= TOLERANCE


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("arch", list(MASKED_LM))
def test_splade_equals_sentence_transformers(
    folders: dict[str, Path], arch: str, backend: str
) -> None:
    model = SparseEncoder.from_folder(folders[arch])
    expected = reference_vectors(folders[arch], SAMPLE_TEXTS)
    got = dense_of(model.encode(SAMPLE_TEXTS, backend=backend, truncate=True), model.vocab_size)
    _same(got, expected)
    assert (expected != 0).sum() > len(SAMPLE_TEXTS)  # a test with something to compare


def test_a_fill_mask_transformer_is_read_as_mlm_transformer(folders: dict[str, Path]) -> None:
    modules = json.loads((folders["fill-mask"] / "modules.json").read_text())
    assert modules[0]["type"].endswith(".Transformer")  # sentence-transformers 6's own form
    model = SparseEncoder.from_folder(folders["fill-mask"])
    expected = reference_vectors(folders["fill-mask"], SAMPLE_TEXTS)
    _same(dense_of(model.encode(SAMPLE_TEXTS, truncate=True), model.vocab_size), expected)


@pytest.mark.parametrize("top", [None, 3, 40])
def test_max_active_dims_from_the_folder_and_the_call(folders: dict[str, Path], top: int) -> None:
    model = SparseEncoder.from_folder(folders["pruned"])
    assert model.max_active_dims == 12
    expected = reference_vectors(folders["pruned"], SAMPLE_TEXTS, max_active_dims=top)
    got = dense_of(model.encode(SAMPLE_TEXTS, max_active_dims=top, truncate=True), model.vocab_size)
    _same(got, expected)
    assert int((got != 0).sum(-1).max()) == (top or 12)


@pytest.mark.parametrize("backend", EXACT)
@pytest.mark.parametrize("task", [None, "query", "document"])
@pytest.mark.parametrize("name", ["free-query", "free-document"])
def test_inference_free_routes_as_the_router(
    folders: dict[str, Path], name: str, task: str | None, backend: str
) -> None:
    model = SparseEncoder.from_folder(folders[name])
    expected = reference_vectors(folders[name], SAMPLE_TEXTS, task=task)
    got = dense_of(
        model.encode(SAMPLE_TEXTS, task=task, backend=backend, truncate=True), model.vocab_size
    )
    _same(got, expected)


def test_the_static_route_runs_no_network(folders: dict[str, Path]) -> None:
    model = SparseEncoder.from_folder(folders["free-query"])
    assert model.route_for("query") == "query" and model.folder.routes["query"] == "static"

    def refuse(*args: object) -> None:
        raise AssertionError("the network ran for a static route")

    model.model.forward = refuse  # type: ignore[method-assign,assignment]
    ((indices, values),) = model.encode(["hello world"], task="query")
    assert indices and all(v > 0 for v in values)


def test_the_card_says_sparse(folders: dict[str, Path]) -> None:
    card = SparseEncoder.from_folder(folders["free-query"]).card()
    assert card["output"] == "sparse" and card["task"] == "sparse"
    assert card["sparse"]["vocab_size"] == card["dim"] > 0
    assert card["sparse"]["max_active_dims"] == 9
    assert card["sparse"]["pooling_strategy"] == "max"
    assert set(card["sparse"]["routes"]) == {"query", "document"}


def _break(folder: Path, tmp_path: Path, edit: str) -> Path:
    import shutil

    broken = tmp_path / f"broken-{edit}"
    shutil.copytree(folder, broken)
    if edit == "pooling":
        path = broken / "1_SpladePooling" / "config.json"
        path.write_text(json.dumps({"pooling_strategy": "mean"}))
    elif edit == "module":
        modules = json.loads((broken / "modules.json").read_text())
        modules[1]["type"] = "sentence_transformers.sparse_encoder.modules.SparseAutoEncoder"
        (broken / "modules.json").write_text(json.dumps(modules))
    else:  # a checkpoint without its MLM head
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(broken / "model.safetensors"))
        kept = {k: v for k, v in tensors.items() if not k.startswith("cls.")}
        save_file(kept, str(broken / "model.safetensors"))
    return broken


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        ("pooling", "pooling_strategy 'mean'"),
        ("module", "SparseAutoEncoder"),
        ("head", "cls.predictions"),
    ],
)
def test_a_bad_folder_is_refused_in_one_line(
    folders: dict[str, Path], tmp_path: Path, edit: str, says: str
) -> None:
    with pytest.raises(ValueError, match=says) as caught:
        SparseEncoder.from_folder(_break(folders["bert"], tmp_path, edit))
    assert "\n" not in str(caught.value)
