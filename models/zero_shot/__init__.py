"""Zero-shot foundation forecasters (TimesFM 2.5, Chronos-2): any series in, quantiles out,
with attnserve's attention backends per request."""

from models.zero_shot.folder import FORECASTERS, load_zero_shot, zero_shot_kind

__all__ = ["FORECASTERS", "load_zero_shot", "zero_shot_kind"]
