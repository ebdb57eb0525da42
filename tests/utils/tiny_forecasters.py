"""Tiny random-weight transformers time-series models, saved as a user's ``save_pretrained``
folder, and their own classes' answers (the references the served forecasts must match).

Weights are drawn at ``init_std=0.2`` (transformers' default 0.02 leaves attention's share of
the output below 1e-6, where any backend would "match"): at 0.2 an approximate backend moves
the forecast by several percent, so an exactness bound of 1e-4 means something.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

INIT_STD = 0.2
CHANNELS = ("load", "temp", "wind")


def patchtst_config(distribution: str | None = None, **overrides: Any) -> Any:
    from transformers import PatchTSTConfig

    fields: dict[str, Any] = dict(
        num_input_channels=len(CHANNELS),
        context_length=96,
        prediction_length=12,
        patch_length=8,
        patch_stride=4,
        d_model=32,
        num_attention_heads=4,
        num_hidden_layers=2,
        ffn_dim=64,
        init_std=INIT_STD,
        scaling="std",
    )
    if distribution:
        fields.update(loss="nll", distribution_output=distribution, num_parallel_samples=32)
    fields.update(overrides)
    return PatchTSTConfig(**fields)


def seq2seq_config(kind: str, **overrides: Any) -> Any:
    """A TimeSeriesTransformer (``kind="tst"``), Informer (``"informer"``) or Autoformer
    (``"autoformer"``, a family the loader refuses) config with two calendar features, one static
    categorical feature and lags up to 3."""
    from transformers import AutoformerConfig, InformerConfig, TimeSeriesTransformerConfig

    fields: dict[str, Any] = dict(
        prediction_length=6,
        context_length=24,
        lags_sequence=[1, 2, 3],
        num_time_features=2,
        num_static_categorical_features=1,
        cardinality=[4],
        embedding_dimension=[2],
        d_model=16,
        encoder_layers=2,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        num_parallel_samples=16,
        init_std=INIT_STD,
    )
    fields.update(overrides)
    if kind == "informer":
        fields.setdefault("attention_type", "full")
        return InformerConfig(**fields)
    if kind == "autoformer":
        return AutoformerConfig(**fields)
    return TimeSeriesTransformerConfig(**fields)


def build(config: Any, folder: Path, seed: int = 0, sidecar: dict[str, Any] | None = None) -> Path:
    """Build the prediction class of ``config`` with random weights and ``save_pretrained`` it."""
    import transformers

    name = {
        "patchtst": "PatchTSTForPrediction",
        "time_series_transformer": "TimeSeriesTransformerForPrediction",
        "informer": "InformerForPrediction",
        "autoformer": "AutoformerForPrediction",
    }[config.model_type]
    torch.manual_seed(seed)
    model = getattr(transformers, name)(config).eval()
    model.save_pretrained(folder)
    if sidecar is not None:
        (folder / "attnserve.json").write_text(json.dumps(sidecar))
    return folder


def reference_model(folder: Path) -> Any:
    """The folder loaded by transformers itself, eager attention (the reference)."""
    import transformers

    config = json.loads((folder / "config.json").read_text())
    cls = getattr(transformers, config["architectures"][0])
    return cls.from_pretrained(folder, attn_implementation="eager").eval()


def history(rows: int, channels: int, seed: int) -> np.ndarray:
    """A random walk around 10 in every channel (original units, not centred)."""
    rng = np.random.default_rng(seed)
    return 10.0 + np.cumsum(rng.normal(size=(rows, channels)), axis=0)


def seq2seq_series(folder: Path, seed: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A request series for a tiny encoder-decoder and the same inputs as the class takes them."""
    config = json.loads((folder / "config.json").read_text())
    rows = config["context_length"] + max(config["lags_sequence"])
    horizon, width = config["prediction_length"], config["num_time_features"]
    values = history(rows, config["input_size"], seed)
    feats = np.random.default_rng(seed + 100).uniform(-0.5, 0.5, size=(rows + horizon, width))
    series = {
        "values": values.tolist(),
        "time_features": feats.tolist(),
        "static_categorical": [seed % 4],
    }
    inputs = {
        "past_values": values[:, 0] if config["input_size"] == 1 else values,
        "past_time_features": feats[:rows],
        "future_time_features": feats[rows:],
        "static_categorical_features": np.asarray([seed % 4]),
    }
    return series, inputs


@torch.no_grad()
def patchtst_reference(folder: Path, values: np.ndarray) -> np.ndarray:
    """The class's forecast ``[b, H, c]``: the point head's output, or a distribution head's mean."""
    model = reference_model(folder)
    out = model(past_values=torch.tensor(values, dtype=torch.float32))
    if model.distribution_output is None:
        return out.prediction_outputs.double().numpy()
    d = model.distribution_output.distribution(out.prediction_outputs, loc=out.loc, scale=out.scale)
    return d.mean.double().numpy()


@torch.no_grad()
def generate_reference(model: Any, seed: int, **inputs: np.ndarray) -> np.ndarray:
    """The class's own ``generate`` of one window after ``torch.manual_seed(seed)``: ``[S, H, c]``."""
    tensors = {
        k: torch.tensor(v, dtype=torch.long if "categorical" in k else torch.float32)[None]
        for k, v in inputs.items()
    }
    torch.manual_seed(seed)
    if "past_time_features" not in tensors:  # PatchTST
        sequences = model.generate(past_values=tensors["past_values"]).sequences[0]
    else:
        tensors["past_observed_mask"] = torch.ones_like(tensors["past_values"])
        sequences = model.generate(**tensors).sequences[0]
    out = sequences.double().numpy()
    return out[..., None] if out.ndim == 2 else out
