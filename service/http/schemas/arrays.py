"""History numbers validated as float64 arrays in one C-level pass (rows or columns, JSON numbers
or base64 float32), instead of pydantic checking each number as a Python object."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

import numpy as np
from pydantic import ValidatorFunctionWrapHandler, WithJsonSchema
from pydantic.functional_validators import WrapValidator
from pydantic_core import PydanticCustomError


def _checked_array(ndim: int) -> WrapValidator:
    """Numbers nested ``ndim`` deep as a float64 array (see :func:`number_array`), or a float64
    array of ``ndim`` dimensions let through as it is: JSON never holds one, only the
    body-parsing helper (``service.http.body_pool``) puts them there, after validating the very
    lists they were built from, so the event loop does not walk the numbers a second time."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        return _packed_or(value, handler, ndim)

    return WrapValidator(validate)


def _packed_or(value: Any, handler: ValidatorFunctionWrapHandler, ndim: int) -> Any:
    """``value`` itself when it is a float64 array of ``ndim`` dimensions, lists of numbers as
    such an array, anything else validated (pydantic's strict walk names what is wrong)."""
    if isinstance(value, np.ndarray) and value.dtype == np.float64 and value.ndim == ndim:
        return value
    array = number_array(value, ndim)
    return array if array is not None else handler(value)


# Past this share of elements equal to 0 or 1, looking at each one for a bool costs more than
# pydantic's strict walk of them all.
_MAX_SUSPECT_SHARE = 1 / 8
_NUMBER_DTYPES = (np.dtype(np.float64), np.dtype(np.int64))


def number_array(value: Any, ndim: int) -> np.ndarray | None:
    """``value``, lists nested ``ndim`` (1 or 2) deep of nothing but numbers (a history: one
    column or the rows), as a float64 array built in one C-level pass, instead of pydantic
    checking each number as a Python object and the forecaster converting them again. None for
    anything else (strings, nulls, nested or ragged lists, integers past int64): pydantic's
    strict walk then refuses or accepts it as before.

    numpy reads JSON ``true``/``false`` as 1 and 0, which the strict schema refuses: the
    elements equal to 0 or 1 (few in real data) are looked at one by one, and a value with many
    of them is left to pydantic."""
    if not isinstance(value, list):
        return None
    try:
        array = np.array(value)
    except (ValueError, TypeError, OverflowError):
        return None
    if array.ndim != ndim or array.dtype not in _NUMBER_DTYPES:
        return None
    if array.dtype != np.float64:
        array = array.astype(np.float64)
    suspects = np.flatnonzero((array == 0.0) | (array == 1.0))
    if suspects.size > _MAX_SUSPECT_SHARE * array.size:
        return None
    if ndim == 1:
        if any(type(value[i]) is bool for i in suspects.tolist()):
            return None
    else:
        width = array.shape[1]
        if any(type(value[i // width][i % width]) is bool for i in suspects.tolist()):
            return None
    return array


def array_or_list(numbers: Any, ndim: int) -> Any:
    """``numbers`` as a float64 array when they form one of ``ndim`` dimensions, else as given."""
    try:
        array = np.asarray(numbers, dtype=np.float64)
    except ValueError:
        return numbers
    return array if array.ndim == ndim else numbers


def decode_float32(text: str) -> np.ndarray:
    """A base64 string of little-endian float32 values (the ``encoding_format: base64`` of
    embeddings, here for inputs) as a float64 array; ``ValueError`` says what is wrong."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            "a column given as a string must be base64 (standard alphabet, padded) of "
            "little-endian float32 values"
        ) from None
    if len(raw) % 4:
        raise ValueError(
            f"a base64 column holds {len(raw)} bytes, not a whole number of float32 values "
            "(4 bytes each)"
        )
    return np.frombuffer(raw, dtype="<f4").astype(np.float64)


def _column() -> WrapValidator:
    """A column as JSON numbers (validated as usual), as base64 float32 (decoded here, without
    a number walk), or as the float64 array the body-parsing helper packed."""

    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(value, str):
            try:
                return decode_float32(value)
            except ValueError as exc:
                raise PydanticCustomError("base64_column", str(exc)) from None
        return _packed_or(value, handler, ndim=1)

    return WrapValidator(validate)


# A history as rows or as one column; typed as what a client sends (the OpenAPI schema). A null
# in a row is a missing value: zero-shot forecasters take it (each by its own rule), the others
# answer a 422 naming the row.
FloatRows = Annotated[list[list[float | None]], _checked_array(2)]
FloatColumn = Annotated[
    list[float] | str,
    _column(),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "number"}},
                {"type": "string", "contentEncoding": "base64"},
            ],
            "description": "Numbers, or base64 of their little-endian float32 bytes.",
        }
    ),
]
