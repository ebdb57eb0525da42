"""Tiny random-weight ColBERT-style models saved by sentence-transformers' own
``MultiVectorEncoder.save``, and their reference token vectors and MaxSim scores.

    folder = save_tiny_multi_vector(tmp_path / "colbert", "colbert")
    expected = reference_vectors(folder, texts, "query")      # MultiVectorEncoder.encode_query

Variants (:data:`VARIANTS`) cover the settings the loader reads: ``colbert`` (BERT, classic
query expansion to 16 ``[MASK]`` tokens that nothing attends to, punctuation skiplist, text
markers as prompts, ``query_length`` / ``document_length``), ``attend`` (RoBERTa, expansion
``min`` that the encoder attends to, a biased Tanh ``Dense`` then a second ``Dense``,
MeanMaxSim, a skiplist on both sides) and ``plain`` (MPNet, no ``MultiVectorMask``, no
``Normalize``). Nothing is downloaded (:func:`tests.utils.tiny_encoders.build_tiny_model`).
"""

from __future__ import annotations

import string
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from tests.utils.tiny_encoders import HIDDEN, build_tiny_model

VARIANTS = ("colbert", "attend", "plain")
QUERY_EXPANSION = 16
TOKEN_DIM = 12

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "Return the number of items in a container; raise an error, if empty!",
    "Open a file and return a stream; raise OSError upon failure. " * 3,
    "what is a stream?",
]


def _modules(variant: str, raw: str) -> tuple[list[Any], dict[str, Any]]:
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.base.modules.dense import Dense
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask
    from torch import nn

    if variant == "colbert":
        transformer = Transformer(
            raw,
            max_seq_length=64,
            query_length=QUERY_EXPANSION,
            document_length=48,
            query_expansion={"strategy": "fixed", "length": QUERY_EXPANSION},
        )
        dense = Dense(
            HIDDEN, TOKEN_DIM, bias=False, activation_function=nn.Identity(),
            module_input_name="token_embeddings",
        )  # fmt: skip
        mask = MultiVectorMask(skiplist_words=list(string.punctuation))
        modules = [transformer, dense, mask, Normalize(module_input_name="token_embeddings")]
        return modules, {"prompts": {"query": "[Q] ", "document": "[D] "}}
    if variant == "attend":
        transformer = Transformer(
            raw,
            max_seq_length=64,
            query_length=24,
            query_expansion={"strategy": "min", "length": 10, "attend": True},
        )
        first = Dense(
            HIDDEN, 20, activation_function=nn.Tanh(), module_input_name="token_embeddings"
        )
        second = Dense(20, TOKEN_DIM, module_input_name="token_embeddings")
        mask = MultiVectorMask(skiplist_words=[",", ";", "?"], skiplist_tasks=["query", "document"])
        modules = [
            transformer,
            first,
            second,
            mask,
            Normalize(module_input_name="token_embeddings"),
        ]
        return modules, {"similarity_fn_name": "meanmaxsim"}
    transformer = Transformer(raw, max_seq_length=64)
    dense = Dense(HIDDEN, TOKEN_DIM, module_input_name="token_embeddings")
    return [transformer, dense], {}


_ARCH = {"colbert": "bert", "attend": "roberta", "plain": "mpnet"}


def save_tiny_multi_vector(
    folder: Path, variant: str = "colbert", seed: int = 0, architecture: str | None = None
) -> Path:
    """A tiny ``variant`` model saved by ``MultiVectorEncoder.save`` into ``folder``, on the
    variant's architecture or ``architecture`` (one of ``tiny_encoders.ARCHITECTURES``)."""
    import torch
    from sentence_transformers import MultiVectorEncoder

    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")
    with tempfile.TemporaryDirectory() as raw:
        build_tiny_model(architecture or _ARCH[variant], Path(raw), seed)
        torch.manual_seed(seed)  # the Dense modules' weights
        modules, settings = _modules(variant, raw)
        model = MultiVectorEncoder(modules=modules, device="cpu", **settings)
        model.save(str(folder))
    return folder


def _reference(folder: Path) -> Any:
    from sentence_transformers import MultiVectorEncoder

    return MultiVectorEncoder(str(folder), device="cpu", local_files_only=True)


def reference_vectors(
    folder: Path, texts: list[str], side: str = "none", batch_size: int = 2
) -> list[np.ndarray]:
    """``MultiVectorEncoder.encode_query`` / ``encode_document`` / ``encode`` (side ``none``) of
    ``texts`` from ``folder``: one float32 ``[tokens, dim]`` array per text; a small
    ``batch_size`` mixes padded and unpadded batches."""
    model = _reference(folder)
    encode = {"query": model.encode_query, "document": model.encode_document}.get(
        side, model.encode
    )
    return [
        np.asarray(v, dtype=np.float32)
        for v in encode(texts, batch_size=batch_size, convert_to_numpy=True)
    ]


def reference_scores(folder: Path, query: str, documents: list[str]) -> list[float]:
    """sentence-transformers' own similarity (MaxSim / MeanMaxSim) of ``query`` (encoded as a
    query) to each of ``documents`` (encoded as documents)."""
    model = _reference(folder)
    q = model.encode_query([query])
    d = model.encode_document(documents, batch_size=2)
    return [float(s) for s in model.similarity(q, d)[0]]
