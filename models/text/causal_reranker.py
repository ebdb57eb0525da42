"""``CausalReranker``: a causal language model that reranks by the log-odds of answering "yes"
(sentence-transformers' ``CrossEncoder`` with a ``LogitScore`` module, Qwen3-Reranker style), with
the attention backend chosen per call.

The backbone is a transformers model run through its attention interface
(:class:`~models.hf_text.network.HFBackbone`: every layer takes the call's backend in its causal
form, or exact attention where the backend has none, as :meth:`HFBackbone.plan` says); on top
sits :class:`~models.text.folders.logit_score.LogitScoreHead`, which applies only the ``lm_head`` rows of
the "yes" and "no" tokens to each pair's last token. Everything else is a
:class:`~models.text.classifier.TextClassifier` with one label: the same pair tokenizer (the
tokenizer's pair template, longest-first truncation, long-document windows), the same activation
(``CrossEncoder.predict``'s), the same rerank routes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from models.errors import ModelInputError
from models.text.classifier import TextClassifier
from models.text.folders.embedding import TextFolder
from models.text.folders.logit_score import (
    CausalRerankerFolder,
    LogitScoreHead,
    load_logit_score,
    read_causal_reranker_folder,
)
from models.text.tokens.chat_pairs import ChatPairs
from models.text.tokens.pairs import PairRow, PairTokenizer, PairWindows, TextOrPair


class PromptedPairTokenizer(PairTokenizer):
    """A :class:`PairTokenizer` that puts ``prompt`` before the first text of every input, as
    ``CrossEncoder.predict`` does with its default prompt (before truncation, so the prompt
    counts as part of the query)."""

    prompt: str = ""
    chat: ChatPairs | None = None  # the folder renders pairs through its chat template

    def _checked(self, inputs: Sequence[Any], what: str) -> list[tuple[str, ...]]:
        prepared = super()._checked(inputs, what)
        if not self.prompt or self.chat is not None:  # a chat template takes it as a message
            return prepared
        head = self._prepare([self.prompt])[0]
        return [(head + item[0], *item[1:]) for item in prepared]

    def pairs(
        self,
        inputs: Sequence[TextOrPair],
        truncate: bool = False,
        what: str = "input",
        cut_start: bool = False,
    ) -> list[PairRow]:
        """As :meth:`PairTokenizer.pairs`, or through the chat template
        (:meth:`ChatPairs.rows`)."""
        if self.chat is None:
            return super().pairs(inputs, truncate, what, cut_start)
        items = self._checked(inputs, what)
        return self.chat.rows(
            items, self.prompt, self.max_tokens, self._tokenizer, truncate, what, cut_start
        )

    def windows(
        self, pairs: Sequence[tuple[str, str]], what: str = "input", max_tokens: int | None = None
    ) -> PairWindows:
        """As :meth:`PairTokenizer.windows`; refused for a chat template, whose render has no
        document span to cut into windows."""
        if self.chat is not None:
            raise ModelInputError(
                "long_text windows cuts documents of the tokenizer's pair template; this model "
                "renders pairs through its chat template: send truncate=true instead"
            )
        return super().windows(pairs, what, max_tokens)


class CausalReranker(TextClassifier):
    """Relevance scores of ``(query, document)`` pairs from a causal LM's next-token logits.

    Build with :meth:`from_folder` (:func:`~models.text.folders.logit_score.read_causal_reranker_folder`);
    then ``predict(pairs, backend)`` gives ``CrossEncoder.predict``'s scores ``[n, 1]``.
    """

    tokenizer: PromptedPairTokenizer
    head: LogitScoreHead  # type: ignore[assignment]  # in place of a classification head
    tokenizer_class = PromptedPairTokenizer
    prompt_name: str | None = None  # the folder's default prompt, put before every query

    @classmethod
    def _read_folder(cls, path: Path) -> tuple[TextFolder, Any]:
        """A ``CrossEncoder`` folder of a causal LM and a ``LogitScore``."""
        spec = read_causal_reranker_folder(path)
        return spec.classifier.encoder, spec

    @classmethod
    def _from_parts(  # type: ignore[override]
        cls,
        path: Path,
        spec: CausalRerankerFolder,
        network: Any,
        tokenizer: PromptedPairTokenizer,
        limit: int,
        name: str,
        quality_file: Path,
    ) -> CausalReranker:
        device = next(network.parameters()).device
        head = load_logit_score(spec.classifier.encoder.weights, spec.score, network, device)
        tokenizer.prompt = spec.prompt
        if spec.chat is not None:
            text = spec.classifier.encoder
            tokenizer.chat = ChatPairs.load(text.weights, spec.chat, text.config.architecture)
        model = cls(
            network,
            cast(Any, head),
            tokenizer,
            spec.classifier,
            limit,
            name=name,
            quality_file=quality_file,
        )
        model.prompt_name = spec.prompt_name
        return model

    def _with_network(self, network: Any, precision: str) -> CausalReranker:
        twin = cast(CausalReranker, super()._with_network(network, precision))
        twin.prompt_name = self.prompt_name
        return twin

    def _head_card(self) -> dict[str, Any]:
        """The output kind, what the score is, the activation and the backbone's attention."""
        score = self.head.spec
        fields: dict[str, Any] = {
            "output": "scores",
            "score": score.describe(),
            "labels": list(self.labels),
            "score_activation": self.activation,
            "label_activation": self.label_activation,
        }
        if self.prompt_name is not None:  # CrossEncoder.predict's default prompt, before queries
            fields["prompts"] = {self.prompt_name: self.tokenizer.prompt}
            fields["default_prompt_name"] = self.prompt_name
        fields.update(
            cast(Any, self.model).describe()
        )  # backbone, key_value_heads, attention fallbacks
        return fields
