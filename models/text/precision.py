"""A :class:`~models.text.SentenceEncoder` in another precision (:mod:`models.precision`).

bfloat16 and float16 convert the float32 network; int8 quantizes its linear layers, by default
after calibrating SmoothQuant input scales on real texts: embedding them once in float32 gives
each linear layer's largest input per channel (:func:`models.precision.convert_network`).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from models.precision import DTYPES, convert_network, needs_conversion

if TYPE_CHECKING:
    from models.text.encoder import SentenceEncoder

# Linear layers left in float32 by int8, as regular expressions over the module names. None:
# with SmoothQuant every layer holds a min cosine of 0.99 to float32 on all-MiniLM-L6-v2
# (benchmarks/results/precision-cpu.md).
INT8_KEEP_FLOAT: tuple[str, ...] = ()
# Calibration texts per word-count bin of the shipped corpus (models.text.corpus.length_spread):
# every length band, a second or two of float32 work per model.
INT8_CALIBRATION_PER_BIN = 16


def calibrate(encoder: SentenceEncoder, model: Any) -> None:
    """Embed the calibration texts with ``model`` in place of ``encoder``'s network."""
    from models.text.corpus import length_spread

    twin = copy.copy(encoder)
    twin.model, twin._compiled, twin.compiled_backends = model, None, frozenset()
    ids = encoder.tokenize(length_spread(INT8_CALIBRATION_PER_BIN), truncate=True)
    twin.embed(ids, "full" if encoder.max_tokens <= 512 else encoder.default_attention)


def in_precision(
    encoder: SentenceEncoder,
    precision: str,
    keep_float: tuple[str, ...] | None = None,
    smooth: bool | tuple[str, ...] = True,
) -> SentenceEncoder:
    """``encoder`` (float32) in ``precision``: a new encoder over a converted copy of the
    network, sharing the tokenizer, prompts and quality figures (float32: ``encoder`` itself).
    int8 only: ``keep_float`` names linear layers left in float32 (default
    :data:`INT8_KEEP_FLOAT`), and ``smooth`` calibrates the others' input ranges first (True:
    every layer; patterns over the module names: the layers they match only).

    Raises:
        ValueError: ``encoder`` is not float32 (convert from the float32 weights), or an
            unknown precision.
    """
    if not needs_conversion(encoder.precision, precision):
        return encoder
    keep = INT8_KEEP_FLOAT if keep_float is None else keep_float
    twin = copy.copy(encoder)
    twin.model = convert_network(  # type: ignore[assignment]
        encoder.model,
        precision,
        calibrate=lambda model: calibrate(encoder, model),
        keep_float=keep,
        smooth=smooth,
    )
    twin.dtype = DTYPES[precision]
    twin.precision = precision
    twin._compiled, twin.compiled_backends = None, frozenset()
    return twin
