"""A text folder is served exactly or refused (issue 38 item 5): every hostile folder a red-team
built fails to load with a ValueError that names its problem in one line; a checkpoint saved with
a known task head still loads and embeds as sentence-transformers does; MPNet positions follow
transformers whatever ``pad_token_id`` says.

The folders are tiny and random (``tests/utils/tiny_encoders.py``); the hostile ones are copies
broken one way each (``tests/utils/hostile_folders.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from models.text import SentenceEncoder
from models.text.network.architectures import KNOWN_HEAD_PREFIXES, read_config
from tests.utils.hostile_folders import HOSTILE, PRISTINE_LAYERS, hostile_folder
from tests.utils.tiny_encoders import (
    SAMPLE_TEXTS,
    build_tiny_model,
    min_cosine,
    reference_embeddings,
    save_tiny_encoder,
)

EXACT_FLOOR = 0.99999


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pristine") / "tiny-bert"
    return save_tiny_encoder(folder, "bert", layers=PRISTINE_LAYERS)


def test_the_pristine_folder_loads(pristine: Path) -> None:
    """The hostile cases below each break one thing in a folder that loads."""
    encoder = SentenceEncoder.from_folder(pristine)
    assert encoder.model.config.num_hidden_layers == PRISTINE_LAYERS


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_folder_is_refused_in_one_line_naming_the_problem(
    pristine: Path, tmp_path: Path, case: str
) -> None:
    folder = hostile_folder(pristine, tmp_path / case, case)
    with pytest.raises(ValueError) as caught:
        SentenceEncoder.from_folder(folder)
    message = str(caught.value)
    assert HOSTILE[case][1] in message, message
    assert "\n" not in message


def test_an_unknown_tensor_is_refused_even_with_a_prefix(tmp_path: Path) -> None:
    """A task model's checkpoint (``bert.`` prefix): a bare ``embeddings.*`` beside the prefixed
    encoder is a second encoder, not a head, even under a name the encoder uses; the first few
    unknowns are named, the rest counted."""
    from safetensors.torch import save_file

    folder = tmp_path / "mlm"
    build_tiny_model("bert", folder, layers=1, task="BertForMaskedLM")
    tensors = load_file(folder / "model.safetensors")
    tensors["embeddings.word_embeddings.weight"] = tensors[
        "bert.embeddings.word_embeddings.weight"
    ].clone()
    for i in range(4):
        tensors[f"embeddings.extra{i}.weight"] = torch.zeros(2)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(
        ValueError, match=r"holds 5 tensors .*'embeddings\.extra0\.weight'.* and 2 "
    ):
        SentenceEncoder.from_folder(folder)


def test_config_sizes_are_checked_by_name_for_every_architecture() -> None:
    distilbert = {
        "model_type": "distilbert",
        "vocab_size": 10,
        "dim": 8,
        "n_layers": -1,
        "n_heads": 2,
        "hidden_dim": 16,
        "max_position_embeddings": 32,
    }
    with pytest.raises(ValueError, match=r"config\.json n_layers is -1"):
        read_config(distilbert)
    modern = {
        "model_type": "modernbert",
        "vocab_size": 10,
        "hidden_size": 8,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 16,
        "max_position_embeddings": 32,
        "global_attn_every_n_layers": 0,  # a modulus: 0 would divide by zero
    }
    with pytest.raises(ValueError, match="global_attn_every_n_layers is 0"):
        read_config(modern)
    with pytest.raises(ValueError, match="must hold a JSON object"):
        read_config([1, 2])  # type: ignore[arg-type]


# ------------------------------------------------------------------ known heads still load

# transformers task classes whose head tensors the encoder leaves aside (KNOWN_HEAD_PREFIXES).
TASKS = [
    ("bert", "BertForSequenceClassification"),
    ("bert", "BertForPreTraining"),
    ("roberta", "RobertaForMaskedLM"),
    ("distilbert", "DistilBertForMaskedLM"),
    ("distilbert", "DistilBertForSequenceClassification"),
    ("mpnet", "MPNetForMaskedLM"),
    ("xlm-roberta", "XLMRobertaForQuestionAnswering"),
    ("modernbert", "ModernBertForMaskedLM"),
]


@pytest.mark.parametrize(("architecture", "task"), TASKS)
def test_a_task_model_folder_is_served_as_its_encoder(
    tmp_path: Path, architecture: str, task: str
) -> None:
    folder = tmp_path / task
    build_tiny_model(architecture, folder, layers=2, task=task)
    heads = [
        n for n in load_file(folder / "model.safetensors") if n.startswith(KNOWN_HEAD_PREFIXES)
    ]
    assert heads, "the checkpoint should hold its task head"
    got = SentenceEncoder.from_folder(folder).encode(SAMPLE_TEXTS, truncate=True)
    assert min_cosine(got, reference_embeddings(folder, SAMPLE_TEXTS)) >= EXACT_FLOOR


# ------------------------------------------------------------------ MPNet positions


def test_mpnet_positions_follow_transformers_whatever_the_pad_id(tmp_path: Path) -> None:
    """An MPNet under a BERT tokenizer (pad id 0): transformers still starts positions at 2."""
    folder = save_tiny_encoder(tmp_path / "mpnet-bert-vocab", "mpnet", tokenizer="bert")
    assert json.loads((folder / "config.json").read_text())["pad_token_id"] == 0
    encoder = SentenceEncoder.from_folder(folder)
    assert encoder.model.config.position_offset == 2
    got = encoder.encode(SAMPLE_TEXTS, truncate=True)
    assert min_cosine(got, reference_embeddings(folder, SAMPLE_TEXTS)) >= EXACT_FLOOR
