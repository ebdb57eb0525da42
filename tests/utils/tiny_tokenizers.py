"""Small trained tokenizers of each kind the text models use, as ``tokenizer.json`` files.

- ``wordpiece``: BERT's (``BertNormalizer`` lowercasing, ``BertPreTokenizer``, WordPiece,
  ``[CLS] A [SEP] B [SEP]`` with segment 1 on B): BERT, DistilBERT, MPNet, MiniLM.
- ``bytelevel``: RoBERTa's (``ByteLevel`` pre-tokenizer, byte-level BPE,
  ``<s> A </s></s> B </s>``, ``<mask>`` stripping whitespace on its left).
- ``modernbert``: ModernBERT's (NFC, ``ByteLevel``, byte-level BPE, ``[CLS] A [SEP] B [SEP]``).
- ``unigram``: XLM-R's (NFKC, runs of spaces to one, ``Metaspace``, Unigram with byte fallback).

Trained on the stdlib docstrings the other tiny models use (no downloads), with small
vocabularies so long words split into several tokens.
"""

from __future__ import annotations

import functools
from pathlib import Path

KINDS = ("wordpiece", "bytelevel", "modernbert", "unigram")


@functools.lru_cache(maxsize=8)
def tokenizer_json(kind: str) -> str:
    """The ``tokenizer.json`` text of a small tokenizer of ``kind`` (one of :data:`KINDS`)."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    from models.text.quality.corpus import stdlib_docstrings

    corpus = stdlib_docstrings()[:2000]
    if kind == "wordpiece":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=40))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(
            vocab_size=500, special_tokens=specials, show_progress=False
        )
    elif kind in ("bytelevel", "modernbert"):
        specials = (
            ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
            if kind == "bytelevel"
            else ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        )
        tok = Tokenizer(models.BPE())
        if kind == "modernbert":
            tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(
            vocab_size=500,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    elif kind == "unigram":
        specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.Sequence(
            [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
        )
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.UnigramTrainer(
            vocab_size=500, special_tokens=specials, unk_token="<unk>", show_progress=False
        )
    else:
        raise ValueError(f"unknown tokenizer kind {kind!r}; one of {KINDS}")
    tok.train_from_iterator(corpus, trainer)
    if kind in ("bytelevel", "unigram"):
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
        s, e = "<s>", "</s>"
        pair = f"{s} $A {e} {e} $B {e}"
    else:
        s, e = "[CLS]", "[SEP]"
        pair = f"{s} $A {e} $B:1 {e}:1"
    ids = [(t, tok.token_to_id(t)) for t in (s, e)]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{s} $A {e}", pair=pair, special_tokens=ids
    )
    return str(tok.to_str())


def save_tokenizer(folder: Path, kind: str) -> Path:
    """``folder/tokenizer.json`` of ``kind``; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokenizer.json"
    path.write_text(tokenizer_json(kind))
    return path
