"""Shape of a BERT-family encoder: one frozen dataclass that every supported architecture maps to.

gpt-fast style (``ModelArgs`` + ``transformer_configs``): the architecture is fixed by the
checkpoint, so it lives in a dataclass read from the checkpoint's ``config.json``
(:mod:`models.text.network.architectures` does the reading), not in settings. The defaults are BERT's
(Devlin et al., "BERT", NAACL 2019, section 3): post-LayerNorm layers, learned absolute positions,
segment embeddings, biased linear layers, an exact-GELU feed-forward block.

What the other architectures change, field by field:

========================  =====================================================================
``position_offset``       RoBERTa, XLM-RoBERTa: positions start at ``pad_token_id + 1``; MPNet: 2
``type_vocab_size``       0 where there are no segment embeddings (DistilBERT, MPNet, ModernBERT)
``relative_buckets``      MPNet: a learned relative position bias added to every layer's scores
``rotary_thetas``         ModernBERT: rotary positions (Su et al. 2021), one base per layer
``windows``               ModernBERT: sliding-window (local) layers, half-width per layer
``pre_norm``              ModernBERT: LayerNorm before each block and after the last layer
``glu``                   ModernBERT: gated feed-forward (GeGLU, Shazeer 2020)
``bias`` / ``norm_bias``  ModernBERT: no biases in linear layers and LayerNorms
========================  =====================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from models.names import TEXT_MODEL

ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")


@dataclass(frozen=True)
class BertConfig:
    """Shape of a BERT-family encoder (see the module docstring for what each field changes)."""

    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    architecture: str = "bert"
    activation: str = "gelu"
    position_offset: int = 0
    absolute_positions: bool = True
    relative_buckets: int = 0
    relative_max_distance: int = 128
    rotary_thetas: tuple[float, ...] = ()
    windows: tuple[int | None, ...] = ()
    pre_norm: bool = False
    glu: bool = False
    bias: bool = True
    norm_bias: bool = True

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation {self.activation!r} is not supported; supported: "
                f"{', '.join(ACTIVATIONS)}"
            )
        for name in ("rotary_thetas", "windows"):
            given = getattr(self, name)
            if given and len(given) != self.num_hidden_layers:
                raise ValueError(
                    f"{name} has {len(given)} entries for {self.num_hidden_layers} layers"
                )

    @property
    def head_dim(self) -> int:
        """Width of one attention head (``d`` in the attention legend)."""
        return self.hidden_size // self.num_attention_heads

    @property
    def max_tokens(self) -> int:
        """Longest text the position scheme covers (special tokens included)."""
        return self.max_position_embeddings - self.position_offset

    @property
    def ffn_in_size(self) -> int:
        """Width of the first feed-forward product (twice the inner width when gated)."""
        return self.intermediate_size * (2 if self.glu else 1)

    def window(self, layer: int) -> int | None:
        """Half-width of ``layer``'s sliding window (query i sees keys |i - j| <= it); None:
        global attention."""
        return self.windows[layer] if self.windows else None

    def global_layers(self) -> list[int]:
        """The layers whose attention spans the whole text (the backend choice applies there)."""
        return [i for i in range(self.num_hidden_layers) if self.window(i) is None]


# Named presets (gpt-fast's ``transformer_configs``).
PRESETS: dict[str, BertConfig] = {
    # nreimers/MiniLM-L6-H384-uncased, fine-tuned as sentence-transformers/all-MiniLM-L6-v2.
    TEXT_MODEL: BertConfig(),
}
