"""Tiny random-weight SPLADE and inference-free SPLADE models, saved by sentence-transformers'
own ``SparseEncoder.save``, and their reference vectors.

    folder = save_tiny_splade(tmp_path / "splade", "bert")
    expected = reference_vectors(folder, SAMPLE_TEXTS)        # SparseEncoder.encode, dense

The masked-language model comes from :func:`tests.utils.tiny_encoders.build_tiny_model` (its
``...ForMaskedLM`` class, weights drawn wide); the static route's weights are drawn from a seed
(distinct values, so pruning to ``max_active_dims`` has no ties to break).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from tests.utils.tiny_encoders import build_tiny_model

MASKED_LM = {
    "bert": "BertForMaskedLM",
    "roberta": "RobertaForMaskedLM",
    "distilbert": "DistilBertForMaskedLM",
    "mpnet": "MPNetForMaskedLM",
    "modernbert": "ModernBertForMaskedLM",
}


def _splade_modules(raw: Path, strategy: str, activation: str, legacy: bool = True) -> list[Any]:
    """MLMTransformer (``legacy``, what SPLADE folders on the hub hold) or sentence-transformers
    6's ``Transformer(transformer_task="fill-mask")``, then SpladePooling."""
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    pooling = SpladePooling(strategy, activation)  # type: ignore[arg-type]  # checked there
    if legacy:
        return [MLMTransformer(str(raw), max_seq_length=64), pooling]
    return [Transformer(str(raw), max_seq_length=64, transformer_task="fill-mask"), pooling]


def save_tiny_splade(
    folder: Path,
    architecture: str = "bert",
    *,
    strategy: str = "max",
    activation: str = "relu",
    max_active_dims: int | None = None,
    prompts: dict[str, str] | None = None,
    seed: int = 0,
    layers: int = 2,
    legacy: bool = True,
) -> Path:
    """A tiny ``architecture`` SPLADE model (MLMTransformer + SpladePooling; ``legacy`` False:
    a fill-mask Transformer) saved into ``folder``."""
    from sentence_transformers import SparseEncoder

    with tempfile.TemporaryDirectory() as raw:
        build_tiny_model(architecture, Path(raw), seed, layers, task=MASKED_LM[architecture])
        model = SparseEncoder(
            modules=_splade_modules(Path(raw), strategy, activation, legacy),
            device="cpu",
            max_active_dims=max_active_dims,
            prompts=prompts,
        )
        model.save(str(folder))
    return folder


def save_tiny_inference_free(
    folder: Path,
    architecture: str = "bert",
    *,
    static_side: str = "query",
    max_active_dims: int | None = None,
    seed: int = 0,
    layers: int = 2,
) -> Path:
    """A tiny inference-free SPLADE model: a Router whose ``static_side`` (query or document)
    is a SparseStaticEmbedding and whose other side is MLMTransformer + SpladePooling."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.base.modules import Router
    from sentence_transformers.sparse_encoder.modules import SparseStaticEmbedding

    with tempfile.TemporaryDirectory() as raw:
        build_tiny_model(architecture, Path(raw), seed, layers, task=MASKED_LM[architecture])
        splade = _splade_modules(Path(raw), "max", "relu")
        vocab = len(splade[0].tokenizer.get_vocab())
        generator = torch.Generator().manual_seed(seed)
        weight = torch.rand(vocab, generator=generator) * 3 + 0.1
        static: list[Any] = [SparseStaticEmbedding(tokenizer=splade[0].tokenizer, weight=weight)]
        query, document = (static, splade) if static_side == "query" else (splade, static)
        router = Router.for_query_document(query_modules=query, document_modules=document)
        model = SparseEncoder(modules=[router], device="cpu", max_active_dims=max_active_dims)
        model.save(str(folder))
    return folder


def reference_vectors(
    folder: Path,
    texts: list[str],
    task: str | None = None,
    max_active_dims: int | None = None,
    batch_size: int = 3,
) -> torch.Tensor:
    """sentence-transformers' own vectors of ``texts`` (``encode``, or ``encode_query`` /
    ``encode_document`` for ``task``), dense ``[n, V]`` float32; a small ``batch_size`` mixes
    padded and unpadded batches."""
    from sentence_transformers import SparseEncoder

    model = SparseEncoder(str(folder), device="cpu", local_files_only=True)
    encode = {None: model.encode, "query": model.encode_query, "document": model.encode_document}
    out = encode[task](
        texts, batch_size=batch_size, max_active_dims=max_active_dims, convert_to_tensor=True
    )
    return out.to_dense().float()


def dense_of(entries: list[Any], width: int) -> torch.Tensor:
    """``[n, width]`` from per-text sparse entries: ``(indices, values)`` pairs or lists of
    ``{"index", "value"}`` (``/embed_sparse``'s answer)."""
    out = torch.zeros(len(entries), width)
    for row, entry in enumerate(entries):
        if isinstance(entry, tuple):
            indices, values = entry
        else:
            indices = [e["index"] for e in entry]
            values = [e["value"] for e in entry]
        out[row, indices] = torch.tensor(values, dtype=torch.float32)
    return out
