"""WordPiece tokenisation with sentence-transformers' length rules, and clear errors past them.

The packaged ``tokenizer.json`` pads *and* truncates to 128 tokens; sentence-transformers uses
256 (``sentence_bert_config.json``) and the position table allows 512. We switch both off and
cut ourselves, so an over-long text can be reported (or truncated) instead of silently shortened.
Cutting to ``ids[:limit - 1] + [SEP]`` equals ``tokenizers``' own ``enable_truncation(limit)`` on
a single sequence (LongestFirst with the ``[CLS] A [SEP]`` template; checked in the tests).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from models.errors import ModelInputError


class TextTokenizer:
    """Texts to token ids (with ``[CLS]``/``[SEP]``), at most ``max_tokens`` per text."""

    def __init__(self, path: str | Path, max_tokens: int) -> None:
        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        sep = self._tokenizer.token_to_id("[SEP]")
        if sep is None:
            raise ValueError(f"{path}: the vocabulary has no [SEP] token")
        self.sep_id: int = sep
        self.max_tokens = max_tokens
        # encode_batch_fast (tokenizers >= 0.20) skips character offsets, which we never use.
        self._encode_batch = getattr(
            self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch
        )

    @property
    def vocab_size(self) -> int:
        """Number of token ids the tokenizer can produce."""
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def count(self, texts: list[str]) -> list[int]:
        """Token count of each text before any cut (special tokens included)."""
        return [len(enc.ids) for enc in self._encode_batch(list(texts))]

    def __call__(self, texts: list[str], truncate: bool = False) -> list[list[int]]:
        """Token ids per text, special tokens included.

        Raises:
            ModelInputError: an input is not a string, or (without ``truncate``) is longer than
                ``max_tokens``; the message names the input index, its length and the limit.
        """
        if isinstance(texts, str) or not isinstance(texts, list | tuple):
            raise ModelInputError(f"inputs must be a list of strings, got {type(texts).__name__}")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ModelInputError(f"input {i} must be a string, got {type(text).__name__}")
            try:
                text.encode("utf-8")  # the tokenizer fails on anything that is not Unicode text
            except UnicodeEncodeError as exc:
                raise ModelInputError(
                    f"input {i} holds an unpaired surrogate at character {exc.start}, which is "
                    "not Unicode text; send valid UTF-8 text"
                ) from None
        encodings = self._encode_batch(list(texts))
        limit, out = self.max_tokens, []
        for i, enc in enumerate(encodings):
            ids = enc.ids
            if len(ids) > limit:
                if not truncate:
                    raise ModelInputError(
                        f"input {i} is {len(ids)} tokens long (special tokens included), over "
                        f"this model's limit of {limit} tokens; shorten it or set truncate=true "
                        f"to cut it to {limit} tokens"
                    )
                ids = [*ids[: limit - 1], self.sep_id]
            out.append(ids)
        return out
