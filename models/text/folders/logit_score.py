"""Read a causal-LM reranker folder (sentence-transformers' ``CrossEncoder`` on a ``*ForCausalLM``
checkpoint, Qwen3-Reranker style) and build its ``LogitScore`` head.

``CrossEncoder.save`` writes ``modules.json`` with a ``Transformer`` module
(``transformer_task: text-generation``: the language model with its ``lm_head``) and a
``LogitScore`` module whose ``config.json`` names ``true_token_id`` (``"yes"``) and optionally
``false_token_id`` (``"no"``). ``CrossEncoder.predict`` encodes each ``(query, document)`` pair
with the tokenizer's pair template (the folder's default prompt before the query), runs the
model, and scores the last token's next-token logits: ``logit[yes] - logit[no]`` (the log-odds of
"yes" against "no"; ``logit[yes]`` alone without a false token), then its activation (a sigmoid
unless another was saved): the model's probability of answering "yes" (the scoring of
Nogueira et al. 2020, "Document Ranking with a Pretrained Sequence-to-Sequence Model", which
Qwen3-Reranker uses on a decoder).

Only the ``lm_head`` rows of those tokens are read and applied, to the last token of each pair:
the full-vocabulary logits are never formed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor, nn

from models.hf_text.config import BackboneConfig
from models.text.folders.classifier import ClassifierFolder, score_activation
from models.text.folders.embedding import (
    module_dir,
    read_json,
    read_optional_json,
    read_weights_folder,
    transformer_text_folder,
)
from models.text.folders.weights import _shards as shard_files
from models.text.network.heads import HeadSpec
from models.text.network.pooling import Pooling
from models.text.tokens.chat_pairs import ChatSpec, read_chat_spec

_HOW = "re-save it with sentence-transformers' CrossEncoder on a *ForCausalLM checkpoint"
# Logit transforms some causal LMs apply after lm_head that the head below does not: refused.
_UNSUPPORTED_SCALES = ("logit_scale", "logits_scaling")


@dataclass(frozen=True)
class LogitScoreSpec:
    """What a ``LogitScore`` module scores.

    Attributes:
        true_token_id: the "yes" token's id.
        false_token_id: the "no" token's id; None scores ``logit[yes]`` alone.
        true_token: how the tokenizer spells the true token (for the card).
        false_token: how it spells the false one.
        softcap: ``final_logit_softcapping`` (Gemma): logits pass through
            ``cap * tanh(logits / cap)`` before they are compared.
    """

    true_token_id: int
    false_token_id: int | None
    true_token: str
    false_token: str | None
    softcap: float | None = None

    def describe(self) -> str:
        """One line for the card: what the score is."""
        yes = f"{self.true_token!r} (token {self.true_token_id})"
        if self.false_token_id is None:
            return f"LogitScore: the logit of {yes} on the last token"
        no = f"{self.false_token!r} (token {self.false_token_id})"
        return (
            f"LogitScore: log-odds of {yes} against {no} on the last token's next-token "
            "logits (only those lm_head rows are computed)"
        )


@dataclass(frozen=True)
class CausalRerankerFolder:
    """A causal-LM reranker folder: the classifier view the rerank routes share, plus its
    ``LogitScore``."""

    classifier: ClassifierFolder
    score: LogitScoreSpec
    prompt: str = ""
    prompt_name: str | None = None
    chat: ChatSpec | None = None  # pairs rendered through the tokenizer's chat template


def _modules(path: Path) -> list[dict[str, Any]] | None:
    """``modules.json`` entries, or None when the file is missing or not a list of objects."""
    try:
        modules = json.loads((path / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        return None
    return modules


def _kind(entry: dict[str, Any]) -> str:
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def is_causal_reranker_folder(path: Path) -> bool:
    """True when ``path``'s ``modules.json`` lists a ``LogitScore`` module."""
    modules = _modules(path)
    return modules is not None and any(_kind(m) == "LogitScore" for m in modules)


def _token_id(raw: dict[str, Any], key: str, vocab: int, tokens: Any, folder: Path) -> int:
    """A ``LogitScore`` token id that the vocabulary and the tokenizer both hold."""
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
        raise ValueError(
            f"LogitScore {key} {value!r} ({folder.name}/config.json) is not a token of the "
            f"model's vocabulary (0..{vocab - 1}); set it to the id of the answer token, e.g. "
            "tokenizer.convert_tokens_to_ids('yes'), and re-save"
        )
    if tokens.id_to_token(value) is None:
        raise ValueError(
            f"LogitScore {key} {value} ({folder.name}/config.json) is no token of the "
            "tokenizer (tokenizer.json); set it to the id of the answer token, e.g. "
            "tokenizer.convert_tokens_to_ids('yes'), and re-save"
        )
    return value


def _causal_lm(raw: dict[str, Any], task: str, config: Any) -> None:
    """Refuse a backbone that is not a causal language model run for its next-token logits."""
    names = raw.get("architectures") or []
    arch = str(names[0]) if isinstance(names, list) and names else str(raw.get("model_type"))
    if (
        not isinstance(config, BackboneConfig)
        or not arch.endswith("ForCausalLM")
        or task != "text-generation"
    ):
        raise ValueError(
            "LogitScore scores a causal language model's next-token logits, but the "
            f"Transformer module holds {arch} (transformer_task {task!r}); {_HOW} "
            "(transformer_task text-generation)"
        )
    for key in _UNSUPPORTED_SCALES:
        if raw.get(key) not in (None, 1, 1.0):
            raise ValueError(
                f"config.json sets {key} {raw[key]!r}, a logit scaling attnserve's LogitScore "
                "does not apply; serve this reranker with sentence-transformers"
            )


def read_causal_reranker_folder(path: Path) -> CausalRerankerFolder:
    """Read a ``CrossEncoder`` folder of a ``Transformer`` (causal LM) and a ``LogitScore``.

    Raises:
        ValueError: another module layout, a backbone that is not a causal LM, inputs other
            than text pairs, token ids missing from the vocabulary or tokenizer, an
            unsupported activation or logit scaling; the message says which and what to do
            (the caller names the folder).
    """
    from tokenizers import Tokenizer

    modules = _modules(path)
    kinds = [_kind(m) for m in modules or []]
    if modules is None or kinds != ["Transformer", "LogitScore"]:
        raise ValueError(
            f"modules.json lists {kinds}; a causal-LM reranker is a Transformer module then a "
            f"LogitScore module ({_HOW})"
        )
    weights, config = read_weights_folder(module_dir(path, modules[0]), any_backbone=True)
    raw = dict(read_json(weights / "config.json"))
    transformer = read_optional_json(weights / "sentence_bert_config.json")
    _causal_lm(raw, str(transformer.get("transformer_task", "sequence-classification")), config)
    chat = read_chat_spec(transformer)  # None: the tokenizer's pair template
    nested = raw.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else raw
    score_dir = module_dir(path, modules[1])
    score = read_optional_json(score_dir / "config.json")
    given = score.get("module_input_name", "causal_logits")
    if given != "causal_logits":
        raise ValueError(f"LogitScore reads {given!r}; attnserve scores causal_logits only")
    try:
        tokens = Tokenizer.from_file(str(weights / "tokenizer.json"))
    except Exception as exc:  # the tokenizers library raises its own Exception subclass
        raise ValueError(f"tokenizer.json cannot be read ({exc})") from None
    true_id = _token_id(score, "true_token_id", config.vocab_size, tokens, score_dir)
    false_id = None
    if score.get("false_token_id") is not None:
        false_id = _token_id(score, "false_token_id", config.vocab_size, tokens, score_dir)
    cap = text.get("final_logit_softcapping")
    spec = LogitScoreSpec(
        true_id,
        false_id,
        str(tokens.decode([true_id])),
        None if false_id is None else str(tokens.decode([false_id])),
        float(cap) if isinstance(cap, int | float) and not isinstance(cap, bool) else None,
    )
    activation, _ = score_activation(path, weights, raw, 1)
    st_config = read_optional_json(path / "config_sentence_transformers.json")
    prompts = st_config.get("prompts") or {}
    default = st_config.get("default_prompt_name")
    if default is not None and (not isinstance(prompts, dict) or default not in prompts):
        raise ValueError(f"default_prompt_name {default!r} is not one of its prompts")
    encoder = transformer_text_folder(
        path, weights, config, Pooling(("lasttoken",)), transformer, layout="cross-encoder"
    )
    head = HeadSpec(config.architecture, 1, pooling="lasttoken")
    classifier = ClassifierFolder(encoder, head, ("LABEL_0",), activation, cross_encoder=True)
    prompt = "" if default is None else str(prompts[default])
    return CausalRerankerFolder(classifier, spec, prompt, default, chat)


class LogitScoreHead(nn.Module):
    """``[t, c]`` packed final hidden states -> ``[b, 1]`` float32 scores: the last token's
    logits of the true (and false) token only, ``states[last] @ lm_head[ids].T``.

    Args:
        rows: ``[k, c]`` the ``lm_head`` rows of the true token then the false one (k = 1 or 2).
        bias: ``[k]`` their ``lm_head`` bias, if the head has one.
        spec: what it scores (the card's description; Gemma's ``final_logit_softcapping``).
    """

    rows: Tensor
    bias: Tensor | None

    def __init__(self, rows: Tensor, bias: Tensor | None, spec: LogitScoreSpec) -> None:
        super().__init__()
        self.register_buffer("rows", rows.float())
        self.register_buffer("bias", None if bias is None else bias.float())
        self.spec = spec
        self.softcap = spec.softcap

    def forward(self, states: Tensor, rows: Tensor, lengths: Tensor) -> Tensor:
        """Scores per text from ``states`` ``[t, c]``; ``rows`` ``[t]`` names each token's text
        (unused: texts are packed in order), ``lengths`` ``[b]`` the tokens per text."""
        last = states[torch.cumsum(lengths, 0) - 1].float()  # [b, c]: each text's last token
        logits = last @ self.rows.T  # [b, k], float32 (as a float32 CrossEncoder computes them)
        if self.bias is not None:
            logits = logits + self.bias
        if self.softcap is not None:  # Gemma's cap * tanh(logits / cap), before comparing
            logits = torch.tanh(logits / self.softcap) * self.softcap
        if logits.shape[1] == 1:
            return logits
        return logits[:, :1] - logits[:, 1:]  # log-odds of true against false


def _read_rows(weights: Path, name: str, ids: list[int]) -> Tensor | None:
    """Rows ``ids`` of tensor ``name`` from the folder's safetensors (sliced, not read whole);
    None when no shard holds it."""
    for shard in shard_files(weights):
        try:
            with safe_open(str(weights / shard), framework="pt", device="cpu") as f:
                if name in f.keys():  # noqa: SIM118 - safe_open is not a dict
                    part = f.get_slice(name)
                    return torch.stack([part[i : i + 1][0] for i in ids])
        except (SafetensorError, OSError, RuntimeError) as exc:
            detail = " ".join(str(exc).split())
            raise ValueError(f"{shard} cannot be read as safetensors ({detail})") from None
    return None


def load_logit_score(
    weights: Path, spec: LogitScoreSpec, network: Any, device: torch.device
) -> LogitScoreHead:
    """The head for ``spec``: its ``lm_head`` rows from the checkpoint, or, when the
    checkpoint ties them (``tie_word_embeddings``, or no ``lm_head.weight``), from the input
    embeddings ``network`` (an :class:`~models.hf_text.network.HFBackbone`) loaded.

    Raises:
        ValueError: an unreadable safetensors file, or rows that do not fit the hidden size.
    """
    ids = [spec.true_token_id] + ([] if spec.false_token_id is None else [spec.false_token_id])
    raw = read_json(weights / "config.json")
    nested = raw.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else raw
    tied = bool(raw.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
    rows = None if tied else _read_rows(weights, "lm_head.weight", ids)
    if rows is None:  # tied: lm_head is the token embedding table
        rows = network.model.get_input_embeddings().weight[ids].detach()
    bias = _read_rows(weights, "lm_head.bias", ids)
    hidden = network.config.hidden_size
    if rows.shape != (len(ids), hidden):
        raise ValueError(f"lm_head rows of shape {tuple(rows.shape)} do not fit hidden {hidden}")
    head = LogitScoreHead(rows, None if bias is None else bias.reshape(-1), spec)
    return head.to(device).eval().requires_grad_(False)
