"""Start-up with a hostile text folder (issue 38 item 5): one line naming the folder and its
problem, through ``load_servables`` and the real ``attnserve serve`` (exit 1, no traceback); and a
folder saved with a known task head is still served as an encoder.

The folders: ``tests/utils/hostile_folders.py`` (the cases and the words each refusal holds).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.engine.registry import ModelLoadError, load_servables
from service.settings import Settings
from tests.service.server_process import start_up_failure
from tests.utils.hostile_folders import HOSTILE, PRISTINE_LAYERS, hostile_folder
from tests.utils.tiny_encoders import (
    SAMPLE_TEXTS,
    build_tiny_model,
    min_cosine,
    reference_embeddings,
    save_tiny_encoder,
)

SHIPPED = "informer-etth1-h24"  # a model that loads fast, served beside the folders


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pristine") / "tiny-bert"
    return save_tiny_encoder(folder, "bert", layers=PRISTINE_LAYERS)


def _settings(model_dir: Path) -> Settings:
    return Settings(models=(SHIPPED,), model_dir=model_dir, device="cpu", background_load=False)


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_folder_in_model_dir_stops_loading_in_one_line(
    pristine: Path, tmp_path: Path, case: str
) -> None:
    folder = hostile_folder(pristine, tmp_path / "models" / case, case)
    with pytest.raises(ModelLoadError) as caught:
        load_servables(_settings(folder.parent), "cpu")
    message = str(caught.value)
    assert message.startswith(f"{folder}: "), message
    assert HOSTILE[case][1] in message and "\n" not in message, message


@pytest.mark.e2e
@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", ["broken-tokenizer", "huge-header", "negative-layers"])
def test_attnserve_serve_exits_1_with_one_line_naming_the_hostile_folder(
    pristine: Path, tmp_path: Path, case: str
) -> None:
    folder = hostile_folder(pristine, tmp_path / "models" / case, case)
    output = start_up_failure(
        "--models", SHIPPED, "--model-dir", str(folder.parent), "--background-load", "false"
    )
    failed = [line for line in output.splitlines() if "start-up failed" in line]
    assert len(failed) == 1, output
    assert f"start-up failed: {folder}: " in failed[0] and HOSTILE[case][1] in failed[0], output


def test_a_masked_lm_folder_in_model_dir_is_served_as_its_encoder(tmp_path: Path) -> None:
    """``RobertaForMaskedLM.save_pretrained``: its ``lm_head.*`` is a known head, left aside."""
    folder = tmp_path / "models" / "tiny-roberta-mlm"
    build_tiny_model("roberta", folder, layers=2, task="RobertaForMaskedLM")
    with TestClient(create_app(_settings(folder.parent))) as client:
        response = client.post(
            "/encode",
            json={"model": folder.name, "inputs": SAMPLE_TEXTS, "truncate": True},
        )
    assert response.status_code == 200, response.text
    got = response.json()["embeddings"]
    assert min_cosine(got, reference_embeddings(folder, SAMPLE_TEXTS)) >= 0.99999
