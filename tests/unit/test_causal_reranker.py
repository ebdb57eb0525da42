"""Causal-LM rerankers (sentence-transformers' ``CrossEncoder`` with a ``LogitScore`` module on a
``*ForCausalLM``, Qwen3-Reranker style): scores equal to ``CrossEncoder.predict`` on the exact
backends (raw log-odds and the sigmoid), a batch equal to each pair alone, the default prompt,
truncation, Gemma's logit soft-capping and tied embeddings, the causal forms of the approximate
backends, only the answer tokens' ``lm_head`` rows, and the folders refused with one line.

The models are tiny and random (``tests/utils/tiny_decoders.py``), saved by ``CrossEncoder.save``,
so the reference is the real library.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from models.attention import BACKENDS, get_backend
from models.errors import ModelInputError
from models.hf_text.network import HFBackbone
from models.text.causal_reranker import CausalReranker
from tests.utils.tiny_decoders import (
    RERANK_CHAT_TEMPLATE,
    build_tiny_backbone,
    save_tiny_causal_reranker,
)

TOLERANCE = 1e-5  # float32, the bound against sentence-transformers
EXACT = [b for b in BACKENDS if get_backend(b).exact and b in ("flash", "full")]
PAIRS = [
    ("what is a list", "A list is a mutable sequence of items."),
    ("x", "y" * 60),
    (
        "how do I open a file for reading",
        "Use open() with a path and a mode; the file object is a context manager. " * 4,
    ),
    ("q", "d"),
    ("Return the number of items in a container.", "len(s) counts them."),
]
PROMPT = {"rerank": "Judge whether the document answers the query. Query: "}
# One variant per architecture, so each reading path meets a real model.
VARIANTS: dict[str, dict[str, Any]] = {
    "qwen3": {},
    "llama": {"tie_word_embeddings": True},  # lm_head is the embedding table
    "gemma3_text": {"final_logit_softcapping": 3.0},  # sliding layers and soft-capped logits
    "qwen2": {"prompts": PROMPT, "default_prompt_name": "rerank", "max_seq_length": 40},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("causal-rerankers")
    return {
        arch: save_tiny_causal_reranker(root / arch, arch, seed=i, **kwargs)
        for i, (arch, kwargs) in enumerate(VARIANTS.items())
    }


def _reference(folder: Path, pairs: list[tuple[str, str]], raw: bool = False) -> torch.Tensor:
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(folder), device="cpu")
    kwargs = {"activation_fn": torch.nn.Identity()} if raw else {}
    return torch.as_tensor(model.predict(pairs, batch_size=2, **kwargs)).float()


@pytest.mark.parametrize("arch", VARIANTS)
@pytest.mark.parametrize("backend", EXACT)
def test_equal_to_cross_encoder_predict(folders: dict[str, Path], arch: str, backend: str) -> None:
    model = CausalReranker.from_folder(folders[arch])
    truncate = "max_seq_length" in VARIANTS[arch]  # CrossEncoder cuts longest_first too
    logits = model.predict(PAIRS, backend, truncate=truncate, raw=True)[:, 0]
    scores = model.predict(PAIRS, backend, truncate=truncate)[:, 0]
    assert (logits - _reference(folders[arch], PAIRS, raw=True)).abs().max() <= TOLERANCE
    assert (scores - _reference(folders[arch], PAIRS)).abs().max() <= TOLERANCE
    assert model.activation == "sigmoid"  # CrossEncoder's default for a LogitScore
    assert logits.std() > 0.1  # the pairs score differently: a constant would pass otherwise


@pytest.mark.parametrize("backend", EXACT)
def test_a_batch_equals_each_pair_alone(folders: dict[str, Path], backend: str) -> None:
    """Right padding under a causal mask: each pair gets what it gets alone."""
    model = CausalReranker.from_folder(folders["qwen3"])
    together = model.predict(PAIRS, backend, raw=True)
    alone = torch.cat([model.predict([pair], backend, raw=True) for pair in PAIRS])
    assert (together - alone).abs().max() <= TOLERANCE


def test_the_default_prompt_goes_before_the_query(folders: dict[str, Path]) -> None:
    model = CausalReranker.from_folder(folders["qwen2"])
    assert model.tokenizer.prompt == PROMPT["rerank"]
    with_prompt = model.predict(PAIRS, truncate=True, raw=True)
    model.tokenizer.prompt = ""
    assert (model.predict(PAIRS, truncate=True, raw=True) - with_prompt).abs().max() > 1e-3


@pytest.mark.parametrize("backend", [b for b in BACKENDS if not get_backend(b).exact])
def test_approximate_backends_run_their_causal_form_or_exact(
    folders: dict[str, Path], backend: str
) -> None:
    model = CausalReranker.from_folder(folders["qwen3"])
    scores = model.predict(PAIRS, backend)
    assert scores.shape == (len(PAIRS), 1) and torch.isfinite(scores).all()
    network = model.model
    assert isinstance(network, HFBackbone)  # the transformers backbone, run through the bridge
    fallback = network.fallback(backend, {})
    if get_backend(backend).capabilities.causal:
        assert fallback is None
    else:  # no causal form: every layer ran exact attention, so the scores are flash's
        assert fallback is not None and "no causal" in fallback
        assert (scores - model.predict(PAIRS, "flash")).abs().max() <= TOLERANCE


def test_only_the_answer_tokens_lm_head_rows(folders: dict[str, Path]) -> None:
    model = CausalReranker.from_folder(folders["qwen3"])
    assert model.head.rows.shape == (2, model.model.config.hidden_size)
    assert not any("lm_head" in name for name, _ in model.model.named_parameters())


def test_card_says_what_the_score_is(folders: dict[str, Path]) -> None:
    card = CausalReranker.from_folder(folders["qwen3"]).card()
    assert card["task"] == "rerank" and card["output"] == "scores"
    assert card["score"].startswith("LogitScore: log-odds of 'Y'") and "'N'" in card["score"]
    assert card["backbone"].startswith("transformers Qwen3Model")
    no_causal = {b for b in BACKENDS if not get_backend(b).capabilities.causal}
    assert set(card["attention_fallbacks"]) == no_causal
    assert card["score_activation"] == "sigmoid"


def test_a_true_token_alone_scores_its_logit(tmp_path: Path) -> None:
    folder = save_tiny_causal_reranker(tmp_path / "yes-only", false_token=None)
    model = CausalReranker.from_folder(folder)
    got = model.predict(PAIRS, raw=True)[:, 0]
    assert (got - _reference(folder, PAIRS, raw=True)).abs().max() <= TOLERANCE
    assert model.card()["score"].startswith("LogitScore: the logit of 'Y'")


# ---------------------------------------------------------------- chat templates

# The same template reading each message's content as a list of typed parts ("structured").
STRUCTURED_TEMPLATE = RERANK_CHAT_TEMPLATE.replace("m.content", "m.content[0].text")
CHAT_VARIANTS: dict[str, dict[str, Any]] = {
    "flat": {"chat_template": RERANK_CHAT_TEMPLATE},
    "structured": {"chat_template": STRUCTURED_TEMPLATE},
    # Renders over the limit: cut from the right, the template's tail written back.
    "cut": {"chat_template": RERANK_CHAT_TEMPLATE, "max_seq_length": 40},
    # The default prompt as a system message.
    "prompt": {
        "chat_template": RERANK_CHAT_TEMPLATE,
        "prompts": PROMPT,
        "default_prompt_name": "rerank",
    },
}


@pytest.fixture(scope="module")
def chat_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("chat-rerankers")
    return {
        name: save_tiny_causal_reranker(root / name, **kw) for name, kw in CHAT_VARIANTS.items()
    }


@pytest.mark.parametrize("variant", CHAT_VARIANTS)
@pytest.mark.parametrize("backend", EXACT)
def test_chat_template_pairs_equal_cross_encoder_predict(
    chat_folders: dict[str, Path], variant: str, backend: str
) -> None:
    model = CausalReranker.from_folder(chat_folders[variant])
    logits = model.predict(PAIRS, backend, truncate=True, raw=True)[:, 0]
    assert (logits - _reference(chat_folders[variant], PAIRS, raw=True)).abs().max() <= TOLERANCE
    assert logits.std() > 0.1


def test_chat_template_renders_every_row_through_the_template(
    chat_folders: dict[str, Path],
) -> None:
    model = CausalReranker.from_folder(chat_folders["cut"])
    rows = model.tokenize(PAIRS, truncate=True)
    assistant = model.tokenizer.chat.suffix(2, "", model.tokenizer._tokenizer)  # type: ignore[union-attr]
    assert assistant and all(row.ids[-len(assistant) :] == assistant for row in rows)
    assert max(len(row.ids) for row in rows) == 40  # cut, the tail restored
    with pytest.raises(ModelInputError, match="chat template"):
        model.tokenize(PAIRS)  # over the limit without truncate
    with pytest.raises(ModelInputError, match="chat template"):
        model.tokenizer.windows(PAIRS)


# ---------------------------------------------------------------------- refusals


def _edit(path: Path, **changes: object) -> None:
    raw = json.loads(path.read_text())
    raw.update(changes)
    path.write_text(json.dumps(raw))


def _refusal(folder: Path) -> str:
    with pytest.raises(ValueError) as caught:
        CausalReranker.from_folder(folder)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("key", ["true_token_id", "false_token_id"])
@pytest.mark.parametrize("value", [10**6, -1, "yes"])
def test_a_token_outside_the_vocabulary_is_refused(tmp_path: Path, key: str, value: object) -> None:
    folder = save_tiny_causal_reranker(tmp_path / "bad-token")
    _edit(folder / "1_LogitScore" / "config.json", **{key: value})
    message = _refusal(folder)
    assert f"LogitScore {key}" in message and "convert_tokens_to_ids" in message


def test_a_token_the_tokenizer_lacks_is_refused(tmp_path: Path) -> None:
    """A padded vocabulary (lm_head rows past the tokenizer's last token) is no answer token."""
    folder = save_tiny_causal_reranker(tmp_path / "padded", vocab_size=512)
    _edit(folder / "1_LogitScore" / "config.json", true_token_id=505)
    assert "no token of the tokenizer" in _refusal(folder)


def test_a_backbone_that_is_no_causal_lm_is_refused(tmp_path: Path) -> None:
    folder = save_tiny_causal_reranker(tmp_path / "not-causal")
    _edit(folder / "config.json", architectures=["Qwen3ForSequenceClassification"])
    message = _refusal(folder)
    assert "causal language model" in message and "ForCausalLM" in message


def test_a_bidirectional_encoder_under_logit_score_is_refused(tmp_path: Path) -> None:
    folder = save_tiny_causal_reranker(tmp_path / "encoder-task")
    _edit(folder / "sentence_bert_config.json", transformer_task="feature-extraction")
    assert "transformer_task 'feature-extraction'" in _refusal(folder)


def test_inputs_other_than_text_are_refused(tmp_path: Path) -> None:
    folder = save_tiny_causal_reranker(tmp_path / "image")
    text = {"method": "forward", "method_output_name": "logits"}
    _edit(folder / "sentence_bert_config.json", modality_config={"text": text, "image": text})
    assert "['image', 'text'] inputs" in _refusal(folder)


def test_a_chat_template_without_the_pair_roles_is_refused(tmp_path: Path) -> None:
    """sentence-transformers renders a pair as ``query`` and ``document`` messages: a template
    that drops them would score the template alone."""
    user_only = (
        "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}"
    )
    folder = save_tiny_causal_reranker(tmp_path / "user-only", chat_template=user_only)
    assert "'query' and 'document' roles" in _refusal(folder)


def test_an_unsaved_modality_config_reads_pairs_as_text(tmp_path: Path) -> None:
    """sentence-transformers reads a folder saved without ``modality_config`` as text only, even
    with a chat template beside the tokenizer: so does attnserve (the pair template)."""
    folder = save_tiny_causal_reranker(tmp_path / "chat-file")
    config = json.loads((folder / "sentence_bert_config.json").read_text())
    del config["modality_config"], config["module_output_name"]
    (folder / "sentence_bert_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ m.content }}{% endfor %}"
    )
    got = CausalReranker.from_folder(folder).predict(PAIRS, raw=True)[:, 0]
    assert (got - _reference(folder, PAIRS, raw=True)).abs().max() <= TOLERANCE


def test_another_module_layout_is_refused(tmp_path: Path) -> None:
    folder = build_tiny_backbone("qwen3", tmp_path / "layout", task="Qwen3ForCausalLM")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "x.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "x.Pooling"},
        {"idx": 2, "name": "2", "path": "2_LogitScore", "type": "x.LogitScore"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    assert "Transformer module then a LogitScore module" in _refusal(folder)


def test_attnserve_evaluate_measures_ranking_agreement(tmp_path: Path) -> None:
    """``attnserve evaluate`` on a causal reranker folder writes its ranking figures per backend
    (what ``auto`` reads): exact backends agree with ``full`` on every pair."""
    from service.cli import run_model_tool
    from tests.utils.tiny_decoders import save_tiny_causal_reranker

    folder = save_tiny_causal_reranker(tmp_path / "measured-reranker")
    run_model_tool("evaluate", [str(folder), "--pairs-per-band", "1", "--threads", "1"])
    quality = json.loads((folder / "quality.json").read_text())
    assert quality["task"] == "rerank"
    rows = quality["precisions"]["float32"]["backends"]
    assert rows["flash"]["kendall_tau"] == 1.0 and rows["flash"]["loss"] == 0.0
    assert {"bigbird", "reformer", "nystrom"} <= set(rows)
