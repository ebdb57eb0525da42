"""A :class:`~models.text.classifier.TextClassifier` in another precision (:mod:`models.precision`).

As for sentence encoders (:mod:`models.text.precision`): bfloat16 and float16 convert the float32
encoder; int8 quantizes its linear layers after calibrating SmoothQuant input scales on pairs of
shipped texts. The classification head stays float32 (it is tiny, and the scores are the output).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from models.precision import DTYPES, convert_network, needs_conversion

if TYPE_CHECKING:
    from torch import nn

    from models.text.classifier import TextClassifier

CALIBRATION_PER_BIN = 8


def _calibrate(classifier: TextClassifier, model: nn.Module) -> None:
    from models.text.corpus import length_spread

    texts = length_spread(CALIBRATION_PER_BIN)
    pairs = [(texts[i], texts[-1 - i]) for i in range(len(texts))]
    twin = copy.copy(classifier)
    twin.model = model  # type: ignore[assignment]
    backend = "full" if classifier.max_tokens <= 512 else classifier.default_attention
    twin.logits(twin.tokenize(pairs, truncate=True), backend)


def in_precision(classifier: TextClassifier, precision: str) -> TextClassifier:
    """``classifier`` (float32) with its encoder in ``precision`` (float32: itself).

    Raises:
        ValueError: ``classifier`` is not float32, or an unknown precision.
    """
    if not needs_conversion(classifier.precision, precision):
        return classifier
    twin = copy.copy(classifier)
    twin.model = convert_network(  # type: ignore[assignment]
        classifier.model, precision, calibrate=lambda model: _calibrate(classifier, model)
    )
    twin.dtype = DTYPES[precision]
    twin.precision = precision
    return twin
