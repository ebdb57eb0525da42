"""What the cross-encoder and classifier tests share: the models' names and folders, the inputs
and tolerance of the reference comparisons, and a rerank request read back in document order.

The models are tiny and random (``tests/utils/tiny_classifiers.py``), built with transformers'
own ``...ForSequenceClassification`` classes and saved by ``CrossEncoder.save`` or
``save_pretrained``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tests.utils.tiny_classifiers import save_tiny_classifier
from tests.utils.tiny_encoders import ARCHITECTURES

TOLERANCE = 1e-4
EXACT = ("full", "flash")
PREDICT_INPUTS: list[Any] = [
    "Open file and return a stream.",
    ["what does a context manager do", "It suppresses the specified exceptions."],
    "ok",
]


def rerank_name(arch: str) -> str:
    """The served name of the one-label cross-encoder of ``arch``."""
    return f"rerank-{arch}"


def classify_name(arch: str) -> str:
    """The served name of the three-label classifier of ``arch``."""
    return f"classify-{arch}"


def save_classifier_folders(root: Path) -> dict[str, Path]:
    """A cross-encoder and a classifier of every architecture, and two ModernBERT classifiers
    with other head settings, saved under ``root``: their folders by served name."""
    out = {}
    for i, arch in enumerate(ARCHITECTURES):
        # Cross-encoders as CrossEncoder.save writes them; classifiers as save_pretrained does.
        out[rerank_name(arch)] = save_tiny_classifier(
            root / rerank_name(arch), arch, 1, cross_encoder=True, seed=i
        )
        out[classify_name(arch)] = save_tiny_classifier(
            root / classify_name(arch), arch, 3, seed=10 + i
        )
    out["classify-modernbert-mean"] = save_tiny_classifier(
        root / "classify-modernbert-mean", "modernbert", 2, seed=31, classifier_pooling="mean"
    )
    # Head settings transformers reads from the config: another activation, no dense bias.
    out["classify-modernbert-silu"] = save_tiny_classifier(
        root / "classify-modernbert-silu",
        "modernbert",
        3,
        seed=32,
        classifier_activation="silu",
        classifier_bias=False,
    )
    return out


def post_rerank(client: Any, model: str, query: str, documents: list[str], **extra: Any) -> Any:
    """POST ``/v1/rerank`` (truncating unless ``extra`` says otherwise)."""
    body = {"model": model, "query": query, "documents": documents, "truncate": True, **extra}
    return client.post("/v1/rerank", json=body)


def scores_in_order(body: dict[str, Any], n: int) -> np.ndarray:
    """A ``/v1/rerank`` answer's scores in the order of its ``n`` documents."""
    out = np.full(n, np.nan, dtype=np.float32)
    for result in body["results"]:
        out[result["index"]] = result["relevance_score"]
    return out
