"""Texts with their prompt, into tokens: a sentence encoder's named prompts
(sentence-transformers' ``prompts`` and ``default_prompt_name``), which text a prompt name stands
for, which prompt a kind of text gets, how many tokens a prompt takes at the start of a text
(what pooling may leave out), and tokenising texts with their prompt in front.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.errors import ModelInputError
from models.text.tokens.tokenizer import TextTokenizer, Token, with_prompt

# The prompt for a kind of text (a request's task, e.g. Cohere's input_type) when it names no
# prompt: the first of these the model has, as sentence-transformers' encode_query and
# encode_document pick (query; document, passage, corpus); none: the default prompt, as encode.
TASK_PROMPTS: dict[str, tuple[str, ...]] = {
    "query": ("query",),
    "document": ("document", "passage", "corpus"),
    "classification": ("classification",),
    "clustering": ("clustering",),
}


class PromptedText:
    """Prompts and tokenising for a text model with ``prompts`` (name -> text), a
    ``default_prompt_name``, a ``tokenizer`` and a network whose pooling says whether it
    includes the prompt; :class:`~models.text.encoder.SentenceEncoder` mixes it in."""

    name: str
    prompts: dict[str, str]
    default_prompt_name: str | None
    tokenizer: TextTokenizer
    model: Any
    _prompt_lengths: dict[str, int]

    def _set_prompts(self, prompts: Mapping[str, str] | None, default: str | None) -> None:
        """Keep a copy of ``prompts`` and the ``default`` prompt name; no prompt's token count
        is known yet (:meth:`prompt_tokens` works each out once)."""
        self.prompts = dict(prompts or {})
        self.default_prompt_name = default
        self._prompt_lengths = {}

    def prompt(self, prompt_name: str | None) -> str:
        """The text ``prompt_name`` stands for (the default prompt when None; "" when none).

        Raises:
            ModelInputError: the model has no prompt of that name (the message lists them).
        """
        name = prompt_name if prompt_name is not None else self.default_prompt_name
        if name is None:
            return ""
        if name not in self.prompts:
            known = ", ".join(repr(p) for p in self.prompts) or "none"
            raise ModelInputError(
                f"prompt_name {name!r} is not one of {self.name}'s prompts ({known})"
            )
        return self.prompts[name]

    def task_prompt_name(self, task: str) -> str | None:
        """The prompt for texts of ``task`` (a key of :data:`TASK_PROMPTS`): the first of its
        candidates among the model's prompts, or None (the default prompt applies)."""
        return next((name for name in TASK_PROMPTS[task] if name in self.prompts), None)

    def pool_skip(self, prompt_name: str | None) -> int:
        """Leading tokens that pooling leaves out for texts sent with ``prompt_name``: the
        prompt's own tokens (and the start token) when the model's pooling excludes the
        prompt, else 0 (sentence-transformers' ``include_prompt: false``)."""
        prompt = self.prompt(prompt_name)
        if self.model.pooling.include_prompt or not prompt:
            return 0
        return self.prompt_tokens(prompt)

    def prompt_tokens(self, prompt: str) -> int:
        """Tokens ``prompt`` takes at the start of a text, the start token included
        (:meth:`TextTokenizer.prompt_length`; worked out once per prompt, asked per request)."""
        if prompt not in self._prompt_lengths:
            self._prompt_lengths[prompt] = self.tokenizer.prompt_length(prompt)
        return self._prompt_lengths[prompt]

    def tokenize(
        self,
        texts: list[str],
        truncate: bool = False,
        prompt_name: str | None = None,
        cut_start: bool = False,
    ) -> list[list[int]]:
        """Token ids per text (special tokens included), the prompt ``prompt_name`` (or the
        model's default prompt) prepended to each text as sentence-transformers does. With
        ``truncate``, a text over ``max_tokens`` loses its last tokens, or with ``cut_start``
        its first ones: the start token and the prompt stay in place, so pooling that leaves
        the prompt out still finds it (text-embeddings-inference's ``truncation_direction``).

        Raises:
            ModelInputError: a non-string input, an unknown prompt, or a text over
                ``max_tokens`` without ``truncate`` (the message names the index, its length
                and the limit).
        """
        prompt = self.prompt(prompt_name)
        keep = None
        if cut_start:
            keep = self.prompt_tokens(prompt) if prompt else self.tokenizer.leading_special()
        return self.tokenizer(with_prompt(prompt, texts), truncate=truncate, keep_start=keep)

    def tokens(
        self, texts: list[str], add_special_tokens: bool = True, prompt_name: str | None = None
    ) -> list[list[Token]]:
        """Every token of each text, with the prompt ``prompt_name`` (or the default prompt)
        before it as :meth:`tokenize` puts it; no limit applied (TEI's ``/tokenize``)."""
        prompt = self.prompt(prompt_name)
        return self.tokenizer.tokens(with_prompt(prompt, texts), add_special_tokens)
