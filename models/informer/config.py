"""Informer hyperparameters: one dataclass and named presets.

The ``paper`` preset is the configuration of Zhou et al., "Informer: Beyond Efficient Transformer
for Long Sequence Time-Series Forecasting", AAAI 2021 (Sec. 5, "Setup"; defaults of
zhouhaoyi/Informer2020 ``main_informer.py``). The shipped checkpoints use ``small``: the same
architecture, narrower, so three horizons train on one CPU core in under an hour and their weights
stay a few MB each.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class InformerConfig:
    """Architecture of one Informer forecaster (the window lengths live here too).

    Attributes:
        enc_in: channels fed to the encoder (7 for multivariate ETT).
        dec_in: channels fed to the decoder.
        c_out: channels predicted.
        seq_len: encoder context length (rows of history).
        label_len: start-token length: the last ``label_len`` known rows fed to the decoder.
        pred_len: horizon predicted in one forward pass.
        d_model: model width.
        n_heads: attention heads.
        e_layers: encoder attention layers (``e_layers - 1`` distilling layers between them).
        d_layers: decoder layers.
        d_ff: feed-forward width.
        dropout: dropout probability (embeddings, residual branches, feed-forward).
        activation: feed-forward activation, ``gelu`` or ``relu``.
        distil: insert the self-attention distilling layers (paper Sec. 3.2, eq. 5).
        mix: reshape the decoder self-attention output head-major before the output projection,
            as the reference does (``AttentionLayer(mix=True)``); kept for fidelity.
        freq: calendar frequency of the time features (``h`` hourly).
        time_features: number of calendar features for ``freq`` (4 for ``h``).
        revin: reversible instance normalisation around the network (Kim et al., ICLR 2022);
            not in the paper.
        factor: ProbSparse sampling factor c used when the backend is ``probsparse`` and the
            caller gives no ``factor`` (the paper uses 3 at horizon 24, 5 elsewhere).
        channel_independent: run every channel as its own univariate series through shared
            weights (PatchTST, Nie et al., ICLR 2023); not in the Informer paper.
        patch_len: steps per token (PatchTST patches); 0 keeps Informer's one token per step.
        patch_stride: encoder patch stride (the decoder's patches never overlap); 0 means
            ``patch_len // 2``.
        linear_path: add the closed-form NLinear map (:mod:`models.training.linear`) as a path
            beside the network, whose output projection starts at zero: the untrained model is
            the linear baseline, and training adds what attention finds on top.
        default_attention: the backend a request gets when it names none (the one trained with).
        calendar: add the calendar (``timeF``) embedding to every token. PatchTST goes without:
            with one year of training data, day-of-year lets a network memorise that year's
            level, which hurts on the next months.
    """

    enc_in: int = 7
    dec_in: int = 7
    c_out: int = 7
    seq_len: int = 96
    label_len: int = 48
    pred_len: int = 24
    d_model: int = 512
    n_heads: int = 8
    e_layers: int = 2
    d_layers: int = 1
    d_ff: int = 2048
    dropout: float = 0.05
    activation: str = "gelu"
    distil: bool = True
    mix: bool = True
    freq: str = "h"
    time_features: int = 4
    revin: bool = False
    factor: int = 5
    channel_independent: bool = False
    patch_len: int = 0
    patch_stride: int = 0
    linear_path: bool = False
    default_attention: str = "probsparse"
    calendar: bool = True

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} must be divisible by n_heads {self.n_heads}")
        if self.label_len > self.seq_len:
            raise ValueError(f"label_len {self.label_len} must not exceed seq_len {self.seq_len}")
        if self.activation not in ("gelu", "relu"):
            raise ValueError(f"activation must be 'gelu' or 'relu', got {self.activation!r}")
        if self.channel_independent and not self.enc_in == self.dec_in == self.c_out:
            raise ValueError("channel_independent needs enc_in == dec_in == c_out")
        if self.patch_len:
            if not 0 < self.stride <= self.patch_len <= self.seq_len:
                raise ValueError(
                    f"need 0 < patch_stride <= patch_len <= seq_len, got stride {self.stride}, "
                    f"patch_len {self.patch_len}, seq_len {self.seq_len}"
                )
            if self.label_len % self.patch_len:
                raise ValueError(
                    f"label_len {self.label_len} must be a multiple of patch_len {self.patch_len}"
                )

    @property
    def stride(self) -> int:
        """Encoder patch stride (``patch_stride``, or half a patch when 0)."""
        return self.patch_stride or max(1, self.patch_len // 2)

    @property
    def series_channels(self) -> int:
        """Channels inside one series the network sees (1 when channels run independently)."""
        return 1 if self.channel_independent else self.enc_in

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def dec_len(self) -> int:
        """Decoder input length in steps: start token plus placeholders."""
        return self.label_len + self.pred_len

    @property
    def dec_tokens(self) -> int:
        """Decoder tokens: steps, or whole patches covering the start token and the horizon."""
        if not self.patch_len:
            return self.dec_len
        return self.label_len // self.patch_len + -(-self.pred_len // self.patch_len)

    def encoder_lengths(self) -> list[int]:
        """Tokens seen by each encoder attention layer (halved by each distil step)."""
        n = self.seq_len
        if self.patch_len:
            # PatchTST pads the end with ``stride`` repeated steps before cutting patches.
            n = (n + self.stride - self.patch_len) // self.stride + 1
        lengths = []
        for i in range(self.e_layers):
            lengths.append(n)
            if self.distil and i < self.e_layers - 1:
                n = (n - 1) // 2 + 1  # MaxPool1d(kernel 3, stride 2, padding 1)
        return lengths

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InformerConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


PRESETS: dict[str, InformerConfig] = {
    # Zhou et al. 2021 / Informer2020 defaults: 2 encoder layers + 1 distil, 1 decoder layer.
    "paper": InformerConfig(),
    # The shipped checkpoints: same layer structure, a quarter of the width.
    "small": InformerConfig(d_model=128, n_heads=8, d_ff=256, revin=True),
    # Informer layers over patch tokens of single channels, refining a closed-form linear map:
    # narrow and strongly regularised, as PatchTST found best on the small ETT sets.
    "patch": InformerConfig(
        d_model=64,
        n_heads=4,
        d_ff=128,
        dropout=0.2,
        revin=True,
        channel_independent=True,
        patch_len=16,
        patch_stride=8,
        linear_path=True,
        default_attention="flash",
        calendar=False,
    ),
    # Long histories (thousands of steps): one token per step and all channels together, so the
    # encoder sees the whole context and the attention choice decides the cost (Informer's own
    # setting), refining the same closed-form linear map as "patch".
    "long": InformerConfig(
        d_model=64,
        n_heads=4,
        d_ff=128,
        dropout=0.1,
        revin=True,
        linear_path=True,
        default_attention="performer",
        calendar=False,
    ),
    # For tests: builds and runs in milliseconds.
    "tiny": InformerConfig(d_model=16, n_heads=2, d_ff=32, seq_len=24, label_len=12, pred_len=8),
}


def preset(name: str, **overrides: Any) -> InformerConfig:
    """The preset ``name`` with ``overrides`` applied (e.g. ``seq_len=168``)."""
    try:
        base = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}") from None
    return replace(base, **overrides)
