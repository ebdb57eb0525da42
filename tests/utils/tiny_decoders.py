"""Tiny random-weight transformers backbones (decoder LLMs and others served through transformers'
attention interface), saved as sentence-transformers saves them.

    folder = save_tiny_decoder_encoder(tmp_path / "qwen3", "qwen3", pooling="lasttoken")
    expected = SentenceTransformer(str(folder)).encode(texts)

The tokenizer is a byte-level BPE trained here on the standard library's docstrings, with the
decoders' conventions: no start token, ``<|endoftext|>`` appended to every text (Qwen3-Embedding's
post-processor), the same token as padding, left padding in ``tokenizer_config.json``. Weights are
drawn wider than transformers' default initialisation (as :mod:`tests.utils.tiny_encoders` does),
so a wrong score term cannot hide in near-uniform attention.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import torch

from tests.utils.tiny_encoders import widen_weights

# model_types whose transformers classes use the attention interface: decoder LLMs (grouped
# keys and values where the architecture has them), then a bidirectional encoder that is none of
# our own six (NomicBERT: rotary, SwiGLU).
DECODERS = ("qwen3", "qwen2", "llama", "gemma3_text", "modernbert-decoder")
BACKBONES = (*DECODERS, "nomic_bert")
# Architectures without grouped keys and values or an explicit head width.
_FULL_HEADS = ("qwen2", "modernbert-decoder", "nomic_bert")
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 4, 2, 16, 96
EOS = "<|endoftext|>"


@functools.lru_cache(maxsize=1)
def _tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    from models.text.quality.corpus import stdlib_docstrings

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=[EOS, "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(stdlib_docstrings()[:2000], trainer)
    eos = tok.token_to_id(EOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, eos)]
    )
    return tok


def save_decoder_tokenizer(folder: Path, max_length: int = 512) -> int:
    """``tokenizer.json`` and ``tokenizer_config.json`` into ``folder``; returns the vocabulary
    size."""
    from transformers import PreTrainedTokenizerFast

    tok = _tokenizer()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=EOS,
        padding_side="left",
        model_max_length=max_length,
    )
    fast.save_pretrained(str(folder))
    return int(tok.get_vocab_size())


def decoder_config(architecture: str, layers: int = 2, **overrides: Any) -> Any:
    """A small transformers config of ``architecture`` (one of :data:`BACKBONES`)."""
    import transformers as tf

    classes = {
        "qwen3": tf.Qwen3Config,
        "qwen2": tf.Qwen2Config,
        "llama": tf.LlamaConfig,
        "gemma3_text": tf.Gemma3TextConfig,
        "modernbert-decoder": tf.ModernBertDecoderConfig,
        "nomic_bert": tf.NomicBertConfig,
    }
    eos = _tokenizer().token_to_id(EOS)
    fields: dict[str, Any] = {
        "vocab_size": _tokenizer().get_vocab_size(),
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS,
        "max_position_embeddings": 1024,
        "pad_token_id": eos,
        "eos_token_id": eos,
        "bos_token_id": eos,
    }
    if architecture not in _FULL_HEADS:  # the others derive the head width from hidden / heads
        fields["head_dim"] = HEAD_DIM
        fields["num_key_value_heads"] = KV_HEADS
    if architecture == "qwen2":
        fields["num_key_value_heads"] = KV_HEADS
    if architecture == "gemma3_text":
        fields["sliding_window"] = 8  # every sixth layer global: sliding layers are exercised
    if architecture == "modernbert-decoder":  # a global layer every second, windows of 8
        fields.update(local_attention=8, global_attn_every_n_layers=2)
        fields.update(cls_token_id=eos, sep_token_id=eos)
    fields.update(overrides)
    return classes[architecture](**fields)


def build_tiny_backbone(
    architecture: str,
    folder: Path,
    *,
    seed: int = 0,
    layers: int = 2,
    task: str = "AutoModel",
    max_length: int = 512,
    **overrides: Any,
) -> Path:
    """``save_pretrained`` a random ``architecture`` model (``task``: ``AutoModel`` or a class
    such as ``Qwen3ForCausalLM``) plus its tokenizer into ``folder``."""
    import transformers as tf

    folder.mkdir(parents=True, exist_ok=True)
    save_decoder_tokenizer(folder, max_length)
    config = decoder_config(architecture, layers, **overrides)
    torch.manual_seed(seed)
    if task == "AutoModel":
        model = tf.AutoModel.from_config(config).eval()
    else:
        model = getattr(tf, task)._from_config(config).eval()
    widen_weights(model, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder


def save_tiny_decoder_encoder(
    folder: Path,
    architecture: str = "qwen3",
    *,
    pooling: str | tuple[str, ...] = "lasttoken",
    dense: tuple[int, ...] = (),
    activation: str = "Tanh",
    normalize: bool = True,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    max_seq_length: int = 256,
    seed: int = 0,
    layers: int = 2,
    **overrides: Any,
) -> Path:
    """A tiny ``architecture`` embedder saved by ``SentenceTransformer.save``: Transformer,
    Pooling, a ``Dense`` module per width in ``dense``, then Normalize."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import (
        Dense,
        Normalize,
        Pooling,
        Transformer,
    )

    with tempfile.TemporaryDirectory() as raw:
        build_tiny_backbone(architecture, Path(raw), seed=seed, layers=layers, **overrides)
        transformer = Transformer(raw, max_seq_length=max_seq_length)
        width = transformer.get_embedding_dimension()
        pooler = Pooling(width, pooling_mode=pooling)
        modules: list[Any] = [transformer, pooler]
        fan_in = pooler.get_embedding_dimension()
        torch.manual_seed(seed + 1)
        for fan_out in dense:
            act = getattr(torch.nn, activation)()
            modules.append(Dense(fan_in, fan_out, activation_function=act))
            fan_in = fan_out
        if normalize:
            modules.append(Normalize())
        model = SentenceTransformer(
            modules=modules, prompts=prompts, default_prompt_name=default_prompt_name
        )
        model.save(str(folder))
    return folder


# A Qwen3-Reranker-style chat template: the pair's query and document roles in one user turn,
# then the assistant's turn, whose first token the LogitScore reads.
RERANK_CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}<|im_start|>system\n{{ m.content }}<|im_end|>\n"
    "{%- elif m.role == 'query' -%}<|im_start|>user\n<Query>: {{ m.content }}\n"
    "{%- elif m.role == 'document' -%}<Document>: {{ m.content }}<|im_end|>\n"
    "{%- else -%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{%- endif -%}{%- endfor -%}"
    "<|im_start|>assistant\n"
)
# model_type -> its causal-LM class (a reranker's Transformer module).
CAUSAL_LMS = {
    "qwen3": "Qwen3ForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "llama": "LlamaForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
}


def save_tiny_causal_reranker(
    folder: Path,
    architecture: str = "qwen3",
    *,
    true_token: str = "Y",
    false_token: str | None = "N",
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    max_seq_length: int | None = None,
    chat_template: str | None = None,
    seed: int = 0,
    layers: int = 2,
    **overrides: Any,
) -> Path:
    """A tiny ``architecture`` causal-LM reranker saved by ``CrossEncoder.save``: a
    ``Transformer`` (``text-generation``) and a ``LogitScore`` over ``true_token`` against
    ``false_token`` (the tiny vocabulary has no "yes"/"no"; ``Y``/``N`` stand in). With
    ``chat_template`` (e.g. :data:`RERANK_CHAT_TEMPLATE`) pairs are rendered through it, as
    sentence-transformers does when the tokenizer has one."""
    from sentence_transformers import CrossEncoder
    from sentence_transformers.cross_encoder.modules import LogitScore, Transformer

    tok = _tokenizer()
    with tempfile.TemporaryDirectory() as raw:
        task = CAUSAL_LMS[architecture]
        build_tiny_backbone(
            architecture, Path(raw), seed=seed, layers=layers, task=task, **overrides
        )
        if chat_template is not None:
            (Path(raw) / "chat_template.jinja").write_text(chat_template, encoding="utf-8")
        transformer = Transformer(
            raw, transformer_task="text-generation", max_seq_length=max_seq_length
        )
        score = LogitScore(
            true_token_id=tok.token_to_id(true_token),
            false_token_id=None if false_token is None else tok.token_to_id(false_token),
        )
        model = CrossEncoder(
            modules=[transformer, score], prompts=prompts, default_prompt_name=default_prompt_name
        )
        model.save(str(folder))
    return folder
