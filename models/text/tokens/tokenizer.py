"""Tokenisation with sentence-transformers' length rules, and clear errors past them.

A model folder's ``tokenizer.json`` may pad or truncate on its own (all-MiniLM-L6-v2's does both
at 128 tokens, where sentence-transformers uses 256). We switch both off, so an over-long text
can be reported instead of silently shortened; a text cut on request goes through a copy with
``enable_truncation(limit)``, the tokenizer's own rule (it keeps the model's special tokens,
whatever they are: ``[CLS] A [SEP]``, ``<s> A </s>``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from models.errors import ModelInputError
from models.text.tokens.bounded import WHOLE, Ends, OverTokenBudget, bounded_reason
from models.text.tokens.cuts import cut_rule
from models.text.tokens.token_cap import TokenCount, count_up_to
from models.text.tokens.token_floor import token_floor

# The most tokens one token listing (``/tokenize``) holds: reading ids, offsets and token strings
# out of the tokenizer makes Python objects per token under the GIL, a hold that grows with the
# answer; at this size it stays in tens of milliseconds (benchmarks/service/large_requests.py).
MAX_LISTED_TOKENS = 1 << 17


@dataclass(frozen=True)
class Token:
    """One token of a text, as text-embeddings-inference's ``/tokenize`` shows it.

    Attributes:
        id: the token id.
        text: the characters it covers in the text (a special token: its own spelling).
        special: whether the tokenizer added it (``[CLS]``, ``[SEP]``, ...).
        start, stop: where those characters sit in the text as UTF-8 byte offsets (TEI's, from
            the Rust tokenizer); None for a special token.
    """

    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


def with_prompt(prompt: str, texts: list[str]) -> list[str]:
    """``prompt`` before each text, as sentence-transformers does. Anything that is no list of
    strings passes unchanged, for :class:`TextTokenizer` to refuse naming the bad input."""
    if not prompt or not isinstance(texts, list | tuple):
        return texts
    return [prompt + t if isinstance(t, str) else t for t in texts]


def _read(path: str | Path) -> Tokenizer:
    """``Tokenizer.from_file``, a file it cannot read as ``ValueError`` naming the file."""
    try:
        return Tokenizer.from_file(str(path))
    # tokenizers raises a bare ``Exception`` for malformed JSON or an unknown model kind, and
    # OSError-like ``Exception``s for a missing file: nothing narrower to catch.
    except Exception as exc:
        detail = " ".join(str(exc).split())
        raise ValueError(f"{Path(path).name} cannot be read by tokenizers ({detail})") from None


def _fast(tokenizer: Tokenizer) -> Any:
    """The tokenizer's batch call without character offsets (``encode_batch_fast``, tokenizers
    >= 0.20; ``encode_batch`` before). Both release the GIL while they work."""
    return getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)


class TextTokenizer:
    """Texts to token ids (with ``[CLS]``/``[SEP]``), at most ``max_tokens`` per text.

    Raises:
        ValueError: the tokenizer file cannot be read (the message names it and the problem).
    """

    def __init__(self, path: str | Path, max_tokens: int, lowercase: bool = False) -> None:
        self._tokenizer = _read(path)
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        # No truncating copies: cuts slice encodings of the parts that decide them (below), so
        # the library never builds overflow encodings of a long text, and no lazily built copy
        # can be used before its truncation is set.
        self.max_tokens = max_tokens
        mask = self._tokenizer.encode("a").special_tokens_mask  # (leading, trailing) specials
        self._specials = (
            next((i for i, m in enumerate(mask) if not m), len(mask)),
            next((i for i, m in enumerate(reversed(mask)) if not m), len(mask)),
        )
        self.lowercase = lowercase  # sentence-transformers' do_lower_case
        # encode_batch_fast (tokenizers >= 0.20) skips character offsets, which we never use.
        self._encode_batch = _fast(self._tokenizer)
        # Long texts: tokenise only the prefix or suffix that decides what is kept; the reason
        # when that is not safe for this tokenizer (None: it is).
        self.bounded_fallback = bounded_reason(self._tokenizer.to_str())
        rule = cut_rule(self._tokenizer.to_str()) if self.bounded_fallback is None else None
        self._ends = Ends(self._encode_batch, self._specials, rule)
        # A lower bound of a text's tokens without tokenising (None: none proven for this
        # pipeline): texts far over a cap are refused for the cost of a few regex scans.
        self._floor = token_floor(self._tokenizer.to_str())

    def special_tokens(self) -> int:
        """How many special tokens one text gets (``[CLS]`` and ``[SEP]``: 2)."""
        return int(self._tokenizer.num_special_tokens_to_add(False))

    @property
    def vocab_size(self) -> int:
        """Number of token ids the tokenizer can produce."""
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def count(self, texts: list[str]) -> list[int]:
        """Token count of each text before any cut (special tokens included)."""
        return [len(enc.ids) for enc in self._encode_batch(self._prepare(texts))]

    def prompt_length(self, prompt: str) -> int:
        """Tokens a prompt occupies at the start of a text, the start token included and a
        trailing special token excluded (sentence-transformers' ``_get_prompt_length``)."""
        enc = self._encode_batch(self._prepare([prompt]))[0]
        return len(enc.ids) - (1 if enc.special_tokens_mask[-1:] == [1] else 0)

    def leading_special(self) -> int:
        """Special tokens before a text's own (``[CLS]``: 1)."""
        return self._specials[0]

    def _prepare(self, texts: list[str]) -> list[str]:
        return [t.lower() for t in texts] if self.lowercase else list(texts)

    def with_special_mask(
        self, texts: list[str], max_tokens: int | None = None
    ) -> list[tuple[list[int], list[int]]]:
        """Token ids of each whole text (no limit applied) and which of them are special tokens
        (1) - what :mod:`models.text.tokens.windows` cuts into windows.

        Args:
            max_tokens: stop counting, and raise, once the texts hold more than this many tokens
                of their own while one of them is over the limit (so will be cut into windows):
                tokenising stops at about that much text (:mod:`models.text.tokens.bounded`).

        Raises:
            ModelInputError: an input is not a string (the message names its index).
            OverTokenBudget: over ``max_tokens`` (its ``tokens``: a lower bound of the count).
        """
        if max_tokens is not None:
            counted = self.count_up_to(texts, max_tokens)
            if counted.exceeded:
                raise OverTokenBudget(counted.tokens, max_tokens)
        self._check(texts)
        parts = self._ends(self._prepare(texts), [WHOLE] * len(texts))
        return [(p.ids, p.special) for p in parts]

    def count_up_to(self, texts: list[str], cap: int) -> TokenCount:
        """The texts' own tokens counted up to ``cap``: whether they hold more while one of
        them is over the limit (so will be cut into windows), reading about ``cap`` tokens'
        worth of text at most (:mod:`models.text.tokens.token_cap`).

        Raises:
            ModelInputError: an input is not a string (the message names its index).
        """
        self._check(texts)
        over = self.max_tokens - sum(self._specials)
        return count_up_to(self._ends, self._floor, self._prepare(texts), cap, over)

    def _check(self, texts: list[str], names: list[str] | None = None) -> None:
        """Strings of valid Unicode; ``names[i]`` says what ``texts[i]`` is in an error
        (default "input i")."""
        if isinstance(texts, str) or not isinstance(texts, list | tuple):
            raise ModelInputError(f"inputs must be a list of strings, got {type(texts).__name__}")
        for i, text in enumerate(texts):
            name = names[i] if names is not None else f"input {i}"
            if not isinstance(text, str):
                raise ModelInputError(f"{name} must be a string, got {type(text).__name__}")
            try:
                text.encode("utf-8")  # the tokenizer fails on anything that is not Unicode text
            except UnicodeEncodeError as exc:
                raise ModelInputError(
                    f"{name} holds an unpaired surrogate at character {exc.start}, which is "
                    "not Unicode text; send valid UTF-8 text"
                ) from None

    def trailing_special(self) -> int:
        """Special tokens after a text's own (``[SEP]``: 1)."""
        return self._specials[1]

    def _cut_start(self, ids: list[int], keep: int) -> list[int]:
        """``ids`` cut to ``max_tokens`` from the start of the text: its first ``keep`` tokens
        (the start token, a prompt) and its trailing special tokens stay, then as many of its
        last tokens as fit (text-embeddings-inference's ``truncation_direction: Left``)."""
        return self._join_cut(ids, ids, keep)

    def _join_cut(self, head: list[int], tail: list[int], keep: int) -> list[int]:
        """The first ``keep`` of ``head`` (an encoding of the text or of a prefix of it), then
        the last tokens of ``tail`` (the text or a suffix) that fit, then the trailing specials."""
        end_specials = self.trailing_special()
        room = self.max_tokens - keep - end_specials
        if room < 1:
            raise ModelInputError(
                f"the prompt takes {keep} of this model's {self.max_tokens} tokens, leaving no "
                "room for the text; use a shorter prompt"
            )
        end = len(tail) - end_specials
        return head[:keep] + tail[end - room : end] + tail[end:]

    def __call__(
        self, texts: list[str], truncate: bool = False, keep_start: int | None = None
    ) -> list[list[int]]:
        """Token ids per text, special tokens included. With ``truncate``, a text over the limit
        loses its last tokens, or with ``keep_start`` its first ones after the ``keep_start``
        tokens it starts with (see :meth:`_cut_start`).

        A long text costs what is kept, not what was sent: only a prefix (and, cutting from the
        start, a suffix) long enough to decide the kept tokens is tokenised
        (:mod:`models.text.tokens.bounded`, which proves the tokens the same as the whole text's).

        Raises:
            ModelInputError: an input is not a string, or (without ``truncate``) is longer than
                ``max_tokens``; the message names the input index, its length and the limit.
        """
        self._check(texts)
        prepared = self._prepare(texts)
        limit, (lead, trail) = self.max_tokens, self._specials
        own = limit - lead - trail  # a text's own tokens that fit
        # own + 1 exact tokens tell whether a text is over the limit, and hold the kept ones.
        heads = self._ends(prepared, [own + 1] * len(prepared))
        over = [i for i, p in enumerate(heads) if not p.whole or len(p.ids) > limit]
        if over and not truncate:
            i = over[0]
            length = f"{len(heads[i].ids)}" if heads[i].whole else f"over {limit}"
            raise ModelInputError(
                f"input {i} is {length} tokens long (special tokens included), over "
                f"this model's limit of {limit} tokens; shorten it or set truncate=true "
                f"to cut it to {limit} tokens, or long_text=windows to embed all of it in "
                "overlapping windows"
            )
        tails = {}
        if keep_start is not None and over:
            found = self._ends([prepared[i] for i in over], [own + 1] * len(over), "tail")
            tails = dict(zip(over, found, strict=True))
        out = []
        for i, part in enumerate(heads):
            ids = part.ids
            if i in tails:
                ids = self._join_cut(ids, tails[i].ids, keep_start or 0)
            elif len(ids) > limit or not part.whole:
                # The tokenizer's own truncation of one text: its first tokens, then the
                # trailing special tokens.
                ids = ids[: limit - trail] + ids[len(ids) - trail :]
            out.append(ids)
        return out

    def tokens(
        self, texts: list[str], add_special_tokens: bool = True, limit: int = MAX_LISTED_TOKENS
    ) -> list[list[Token]]:
        """Every token of each whole text (no model limit applied), with the characters it
        covers and their byte offsets (text-embeddings-inference's ``/tokenize``), at most
        ``limit`` tokens over all texts.

        Raises:
            ModelInputError: an input is not a string (the message names its index), or the
                texts hold more than ``limit`` tokens.
        """
        self._check(texts)
        prepared = self._prepare(texts)
        out = []
        if sum(map(len, prepared)) > limit // 4:
            # Counted first on growing prefixes (the fast call, no offsets), so that texts far
            # over the cap are refused after reading about the cap's worth of text, not all of
            # it (the offsets call below costs several times the fast one).
            counted = count_up_to(self._ends, self._floor, prepared, limit, -1)
            if counted.exceeded:
                raise _too_many_to_list(f"at least {counted.tokens}", limit)
        # encode_batch (not the fast variant) for its character offsets; it releases the GIL.
        encodings = self._tokenizer.encode_batch(prepared, add_special_tokens=add_special_tokens)
        total = sum(len(enc) for enc in encodings)  # no per-token Python objects yet
        if total > limit:
            raise _too_many_to_list(str(total), limit)
        for original, text, enc in zip(texts, prepared, encodings, strict=True):
            # Offsets index the text the tokenizer read: the lowercased one when lowercasing
            # kept every character in place, the sent one otherwise.
            source = original if len(original) == len(text) else text
            out.append(_spans(source, enc.ids, enc.tokens, enc.offsets, enc.special_tokens_mask))
        return out

    def decode(self, ids: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
        """The text of each list of token ids.

        Raises:
            ModelInputError: an id outside the vocabulary (the message names the list and id).
        """
        vocab = self.vocab_size
        for i, row in enumerate(ids):
            bad = next((t for t in row if not 0 <= t < vocab), None)
            if bad is not None:
                raise ModelInputError(
                    f"ids {i} holds token id {bad}, outside this model's vocabulary [0, {vocab})"
                )
        return list(self._tokenizer.decode_batch(ids, skip_special_tokens=skip_special_tokens))


def _too_many_to_list(tokens: str, limit: int) -> ModelInputError:
    return ModelInputError(
        f"the inputs hold {tokens} tokens; a tokenize answer lists at most {limit} tokens "
        "(each is an object of the answer): send shorter or fewer texts"
    )


def _spans(
    text: str,
    ids: list[int],
    names: list[str],
    offsets: list[tuple[int, int]],
    special: list[int],
) -> list[Token]:
    """Tokens with TEI's fields: a special token by its name, others by the characters they
    cover, their character offsets turned into UTF-8 byte offsets."""
    # Byte offset of each character position (one pass; only non-ASCII texts need it).
    if text.isascii():
        byte_at: list[int] | range = range(len(text) + 1)
    else:
        byte_at = [0]
        for ch in text:
            byte_at.append(byte_at[-1] + len(ch.encode("utf-8", "surrogatepass")))
    return [
        Token(i, name, True, None, None)
        if mask
        else Token(i, text[start:stop], False, byte_at[start], byte_at[stop])
        for i, name, (start, stop), mask in zip(ids, names, offsets, special, strict=True)
    ]
