"""Tiny random-weight text encoders built with transformers' own classes, saved as
sentence-transformers (or transformers) saves them, and their reference embeddings.

    folder = save_tiny_encoder(tmp_path / "tiny-mpnet", "mpnet")
    expected = reference_embeddings(folder, SAMPLE_TEXTS)    # sentence-transformers' encode

Nothing is downloaded: the tokenizer is a WordPiece trained here on the standard library's
docstrings (BERT-style ``[CLS] A [SEP]`` or RoBERTa-style ``<s> A </s>`` with pad id 1, as each
architecture's real tokenizers are; ``tokenizer="bert"`` gives any architecture the BERT one, with
pad id 0, as MPNet fine-tunes ship), and the weights are drawn from a seed. They are drawn wider
than transformers' default initialisation (std 0.02), which makes every attention row nearly
uniform and would let a wrong score term slip through an exactness test.
"""

from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

ARCHITECTURES = ("bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "modernbert")
HIDDEN, HEADS, FFN = 32, 2, 64
MAX_POSITIONS = 128
MODERNBERT_WINDOW = 8  # local_attention: query i sees |i - j| <= 4

SAMPLE_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "Return the number of items in a container.",
    "Open a file and return a stream; raise OSError upon failure. " * 4,
    "ok",
    "Ünïcödé text, emoji 🙂 and CJK 漢字 pass through the tokenizer too.",
    "Split the string at the first occurrence of sep, and return a 3-tuple containing the part "
    "before the separator, the separator itself, and the part after the separator.",
    "Short one.",
]


@dataclass(frozen=True)
class _Style:
    specials: tuple[str, ...]  # in id order
    start: str
    end: str
    pad: str
    unk: str
    mask: str


_BERT_STYLE = _Style(
    ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"), "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"
)
_ROBERTA_STYLE = _Style(
    ("<s>", "<pad>", "</s>", "<unk>", "<mask>"), "<s>", "</s>", "<pad>", "<unk>", "<mask>"
)
# A real BERT vocabulary's id 1 is ``[unused0]``, which no text tokenizes to; under MPNet that
# matters, since transformers gives id 1 the padding position whatever pad_token_id says.
_BERT_VOCAB_STYLE = _Style(
    ("[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    "[CLS]",
    "[SEP]",
    "[PAD]",
    "[UNK]",
    "[MASK]",
)
_STYLE = {
    "bert": _BERT_STYLE,
    "distilbert": _BERT_STYLE,
    "modernbert": _BERT_STYLE,
    "roberta": _ROBERTA_STYLE,
    "xlm-roberta": _ROBERTA_STYLE,
    "mpnet": _ROBERTA_STYLE,
}


@functools.lru_cache(maxsize=2)
def _tokenizer_json(style: _Style) -> str:
    """A WordPiece tokenizer (``tokenizer.json`` text) trained on stdlib docstrings."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    from models.text.quality.corpus import stdlib_docstrings

    tok = Tokenizer(models.WordPiece(unk_token=style.unk))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=600, special_tokens=list(style.specials), show_progress=False
    )
    tok.train_from_iterator(stdlib_docstrings()[:3000], trainer)
    ids = {t: tok.token_to_id(t) for t in (style.start, style.end)}
    tok.post_processor = processors.TemplateProcessing(
        single=f"{style.start} $A {style.end}",
        special_tokens=list(ids.items()),
    )
    return str(tok.to_str())


def _save_tokenizer(
    folder: Path,
    style: _Style,
    max_length: int,
    tokenizer_json: str | None = None,
    model_input_names: list[str] | None = None,
) -> int:
    """Write the tokenizer files transformers' ``AutoTokenizer`` reads; returns the vocab size.
    ``tokenizer_json``: another tokenizer in ``style`` (default: the single-text one);
    ``model_input_names``: what the tokenizer hands the model (default: transformers')."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer.from_str(tokenizer_json or _tokenizer_json(style))
    names = {} if model_input_names is None else {"model_input_names": model_input_names}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=style.start,
        eos_token=style.end,
        cls_token=style.start,
        sep_token=style.end,
        pad_token=style.pad,
        unk_token=style.unk,
        mask_token=style.mask,
        model_max_length=max_length,
        **names,
    )
    fast.save_pretrained(str(folder))
    return int(tokenizer.get_vocab_size())


def _config(architecture: str, vocab: int, pad: int, layers: int) -> Any:
    import transformers as tf

    common: dict[str, Any] = {"vocab_size": vocab, "pad_token_id": pad}
    if architecture == "distilbert":
        return tf.DistilBertConfig(
            dim=HIDDEN,
            n_layers=layers,
            n_heads=HEADS,
            hidden_dim=FFN,
            max_position_embeddings=MAX_POSITIONS,
            **common,
        )
    shape: dict[str, Any] = {
        "hidden_size": HIDDEN,
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS,
        "intermediate_size": FFN,
        **common,
    }
    if architecture == "modernbert":
        return tf.ModernBertConfig(
            max_position_embeddings=512,
            local_attention=MODERNBERT_WINDOW,
            global_attn_every_n_layers=2,
            cls_token_id=2,
            sep_token_id=3,
            bos_token_id=2,
            eos_token_id=3,
            **shape,
        )
    classes = {
        "bert": tf.BertConfig,
        "roberta": tf.RobertaConfig,
        "xlm-roberta": tf.XLMRobertaConfig,
        "mpnet": tf.MPNetConfig,
    }
    # RoBERTa-family positions start after the pad id: the table needs pad + 1 extra rows;
    # MPNet's after id 1 whatever the pad id (transformers' MPNetEmbeddings.padding_idx).
    extra = {"roberta": pad + 1, "xlm-roberta": pad + 1, "mpnet": 2}.get(architecture, 0)
    return classes[architecture](max_position_embeddings=MAX_POSITIONS + extra, **shape)


def widen_weights(model: torch.nn.Module, seed: int) -> None:
    """Redraw every weight wider than transformers' init (see the module docstring)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if "norm" in name.lower() and name.endswith("weight"):
                param.copy_(1.0 + 0.1 * noise)
            elif name.endswith("bias"):
                param.copy_(0.1 * noise)
            else:
                param.copy_(0.2 * noise)


def build_tiny_model(
    architecture: str,
    folder: Path,
    seed: int = 0,
    layers: int = 3,
    *,
    tokenizer: str | None = None,
    task: str = "AutoModel",
    **config_overrides: Any,
) -> None:
    """``save_pretrained`` a random ``architecture`` model plus its tokenizer into ``folder``:
    the bare encoder, or transformers' ``task`` class (``BertForMaskedLM``, ...) with its head.
    ``tokenizer="bert"``: a BERT vocabulary (pad id 0) whatever the architecture;
    ``config_overrides``: config fields to change (``hidden_size=384``, ...)."""
    import transformers as tf

    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {architecture!r}")
    folder.mkdir(parents=True, exist_ok=True)
    style = _BERT_VOCAB_STYLE if tokenizer == "bert" else _STYLE[architecture]
    vocab = _save_tokenizer(folder, style, MAX_POSITIONS)
    config = _config(architecture, vocab, style.specials.index(style.pad), layers)
    for key, value in config_overrides.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    if task == "AutoModel":
        model = tf.AutoModel.from_config(config, attn_implementation="eager").eval()
    else:  # a concrete class builds from a config with the private classmethod
        model = getattr(tf, task)._from_config(config, attn_implementation="eager").eval()
    widen_weights(model, seed)
    model.save_pretrained(str(folder), safe_serialization=True)


def _st_modules() -> tuple[Any, Any, Any]:
    try:
        from sentence_transformers.sentence_transformer.modules import (
            Normalize,
            Pooling,
            Transformer,
        )
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Normalize, Pooling, Transformer
    return Transformer, Pooling, Normalize


def save_tiny_encoder(
    folder: Path,
    architecture: str,
    *,
    pooling: str | tuple[str, ...] = "mean",
    normalize: bool = True,
    max_seq_length: int = 64,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    include_prompt: bool = True,
    seed: int = 0,
    layers: int = 3,
    tokenizer: str | None = None,
) -> Path:
    """A tiny ``architecture`` model saved by ``SentenceTransformer.save`` into ``folder``
    (``tokenizer``: as :func:`build_tiny_model`)."""
    from sentence_transformers import SentenceTransformer

    transformer_cls, pooling_cls, normalize_cls = _st_modules()
    with tempfile.TemporaryDirectory() as raw:
        build_tiny_model(architecture, Path(raw), seed, layers, tokenizer=tokenizer)
        transformer = transformer_cls(raw, max_seq_length=max_seq_length)
        modules = [
            transformer,
            pooling_cls(HIDDEN, pooling_mode=pooling, include_prompt=include_prompt),
        ]
        if normalize:
            modules.append(normalize_cls())
        model = SentenceTransformer(
            modules=modules,
            device="cpu",
            prompts=prompts,
            default_prompt_name=default_prompt_name,
        )
        model.save(str(folder))
    return folder


def reference_embeddings(
    folder: Path, texts: list[str], prompt_name: str | None = None, batch_size: int = 3
) -> np.ndarray:
    """sentence-transformers' own embeddings of ``texts`` from ``folder`` (float32, CPU); a
    small ``batch_size`` mixes padded and unpadded batches."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    out = model.encode(texts, prompt_name=prompt_name, batch_size=batch_size, convert_to_numpy=True)
    return np.asarray(out, dtype=np.float32)


def min_cosine(a: Any, b: Any) -> float:
    """Smallest row-wise cosine similarity between two ``[n, dim]`` arrays."""
    x = torch.as_tensor(np.asarray(a), dtype=torch.float64)
    y = torch.as_tensor(np.asarray(b), dtype=torch.float64)
    return float(torch.nn.functional.cosine_similarity(x, y, dim=-1).min())
