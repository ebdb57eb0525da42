"""Tiny random-weight cross-encoders and sequence classifiers built with transformers' own
``...ForSequenceClassification`` classes, saved as ``save_pretrained`` or ``CrossEncoder.save``
writes them, and their reference scores.

    folder = save_tiny_classifier(tmp_path / "tiny-rerank", "bert", num_labels=1, cross_encoder=True)
    expected = reference_scores(folder, PAIRS)        # CrossEncoder.predict

The tokenizer is the tiny encoders' WordPiece (:mod:`tests.utils.tiny_encoders`) with each
architecture family's pair template: BERT's ``[CLS] A [SEP] B [SEP]`` with segment 1 on the
second text, RoBERTa's ``<s> A </s></s> B </s>`` with one segment.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tests.utils import tiny_encoders as tiny

QUERIES = ["what does a context manager do", "how is a file opened", "ok"]
DOCUMENTS = [
    "Return a context manager that suppresses any of the specified exceptions.",
    "Open file and return a stream. Raise OSError upon failure.",
    "a",
    "Split the string at the first occurrence of sep, and return a 3-tuple containing the part "
    "before the separator, the separator itself, and the part after the separator. " * 2,
    "Ünïcödé text, emoji 🙂 and CJK 漢字 pass through the tokenizer too.",
]
PAIRS = [(q, d) for q in QUERIES for d in DOCUMENTS]


def _pair_tokenizer_json(architecture: str) -> str:
    from tokenizers import Tokenizer, processors

    style = tiny._STYLE[architecture]
    tok = Tokenizer.from_str(tiny._tokenizer_json(style))
    ids = [(t, tok.token_to_id(t)) for t in (style.start, style.end)]
    s, e = style.start, style.end
    # RoBERTa family: one segment and a doubled separator; BERT: segment 1 on the second text.
    pair = f"{s} $A {e} {e} $B {e}" if style.start == "<s>" else f"{s} $A {e} $B:1 {e}:1"
    tok.post_processor = processors.TemplateProcessing(
        single=f"{s} $A {e}", pair=pair, special_tokens=ids
    )
    return str(tok.to_str())


def _save_tokenizer(folder: Path, architecture: str, max_length: int) -> int:
    style = tiny._STYLE[architecture]
    # As each family's own tokenizer class declares: BERT's hands the model segment ids.
    inputs = ["input_ids", "attention_mask"]
    if style.start != "<s>":
        inputs.insert(1, "token_type_ids")
    pair_json = _pair_tokenizer_json(architecture)
    return tiny._save_tokenizer(folder, style, max_length, pair_json, inputs)


def build_tiny_classifier(
    architecture: str,
    folder: Path,
    num_labels: int = 1,
    seed: int = 0,
    layers: int = 2,
    **config_overrides: Any,
) -> Path:
    """``save_pretrained`` a random ``...ForSequenceClassification`` plus its tokenizer."""
    import transformers as tf

    folder.mkdir(parents=True, exist_ok=True)
    style = tiny._STYLE[architecture]
    vocab = _save_tokenizer(folder, architecture, tiny.MAX_POSITIONS)
    config = tiny._config(architecture, vocab, style.specials.index(style.pad), layers)
    config.num_labels = num_labels
    if num_labels > 1:
        config.id2label = {i: f"label_{chr(97 + i)}" for i in range(num_labels)}
        config.label2id = {v: k for k, v in config.id2label.items()}
    for key, value in config_overrides.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    model = tf.AutoModelForSequenceClassification.from_config(
        config, attn_implementation="eager"
    ).eval()
    tiny.widen_weights(model, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def save_tiny_classifier(
    folder: Path,
    architecture: str,
    num_labels: int = 1,
    *,
    cross_encoder: bool = False,
    seed: int = 0,
    layers: int = 2,
    **config_overrides: Any,
) -> Path:
    """A tiny classifier in ``folder``: ``save_pretrained`` as is, or loaded into
    sentence-transformers' ``CrossEncoder`` and written by ``CrossEncoder.save``."""
    if not cross_encoder:
        return build_tiny_classifier(
            architecture, folder, num_labels, seed, layers, **config_overrides
        )
    from sentence_transformers import CrossEncoder

    with tempfile.TemporaryDirectory() as raw:
        build_tiny_classifier(architecture, Path(raw), num_labels, seed, layers, **config_overrides)
        CrossEncoder(raw, device="cpu", local_files_only=True).save(str(folder))
    return folder


def save_minilm_sized_reranker(folder: Path, seed: int = 1) -> Path:
    """A one-label cross-encoder with all-MiniLM-L6-v2's shape (6 layers, 384 wide, 12 heads)
    and random weights, saved by ``CrossEncoder.save``: its cost per token is a real model's,
    which is what sets how much text a compute budget admits (a toy model's would admit far
    more)."""
    return save_tiny_classifier(
        folder,
        "bert",
        1,
        cross_encoder=True,
        seed=seed,
        layers=6,
        hidden_size=384,
        intermediate_size=1536,
        num_attention_heads=12,
    )


def reference_scores(folder: Path, pairs: list[tuple[str, str]], batch_size: int = 3) -> np.ndarray:
    """``CrossEncoder.predict`` on ``pairs`` (its activation; a small batch mixes padding)."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(folder), device="cpu", local_files_only=True)
    out = model.predict(pairs, batch_size=batch_size, convert_to_numpy=True)
    return np.asarray(out, dtype=np.float32)


def reference_probabilities(folder: Path, inputs: list[Any]) -> np.ndarray:
    """The ``...ForSequenceClassification`` class's softmax over labels, one input at a time."""
    import transformers as tf

    tokenizer = tf.AutoTokenizer.from_pretrained(str(folder))
    model = tf.AutoModelForSequenceClassification.from_pretrained(
        str(folder), attn_implementation="eager"
    ).eval()
    rows = []
    with torch.no_grad():
        for item in inputs:
            args = (item,) if isinstance(item, str) else tuple(item)
            logits = model(**tokenizer(*args, return_tensors="pt")).logits
            rows.append(torch.softmax(logits, dim=-1)[0].numpy())
    return np.stack(rows).astype(np.float32)
