"""Hyper-parameters of the BERT-style sentence encoder: a dataclass plus named presets.

gpt-fast style (``ModelArgs`` + ``transformer_configs``): the architecture is fixed by the
checkpoint, so it lives in code, not in settings. :meth:`BertConfig.from_json` reads a Hugging Face
``config.json`` so a checkpoint that disagrees with the preset is caught at load time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from models.names import TEXT_MODEL


@dataclass(frozen=True)
class BertConfig:
    """Shape of a BERT encoder (Devlin et al., "BERT", NAACL 2019, section 3)."""

    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    @property
    def head_dim(self) -> int:
        """Width of one attention head (``d`` in the attention legend)."""
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_json(cls, path: str | Path) -> BertConfig:
        """Read the fields this encoder uses from a Hugging Face ``config.json``.

        Raises:
            ValueError: the checkpoint is not a post-LayerNorm, GELU, absolute-position BERT.
        """
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        if raw.get("hidden_act", "gelu") != "gelu":
            raise ValueError(
                f"{path}: hidden_act {raw['hidden_act']!r} is not supported (gelu only)"
            )
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: only absolute position embeddings are supported")
        names = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in raw.items() if k in names})
        if config.hidden_size % config.num_attention_heads:
            raise ValueError(f"{path}: hidden_size must be divisible by num_attention_heads")
        return config


# Named presets (gpt-fast's ``transformer_configs``).
PRESETS: dict[str, BertConfig] = {
    # nreimers/MiniLM-L6-H384-uncased, fine-tuned as sentence-transformers/all-MiniLM-L6-v2.
    TEXT_MODEL: BertConfig(),
}
