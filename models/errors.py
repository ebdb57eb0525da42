"""Errors a model raises for input it cannot take (the service answers them with a 422)."""

from models.attention.base import AttentionError


class ModelInputError(ValueError):
    """The caller's input is invalid for this model; the message says what and how to fix it."""


__all__ = ["AttentionError", "ModelInputError"]
