"""``(query, document)`` pairs rendered through the tokenizer's chat template, as sentence-transformers
renders them for a model whose ``Transformer`` module takes the ``message`` modality (a causal-LM
reranker whose tokenizer has a chat template: zerank, Qwen3-Reranker conversions).

sentence-transformers (``Transformer.preprocess``) turns each pair into two messages with the roles
``query`` and ``document`` (a text alone: one ``user`` message), puts the default prompt first as a
``system`` message, renders the conversation with ``apply_chat_template`` (plus the module's saved
``processing_kwargs["chat_template"]``), tokenises the render without adding special tokens and
cuts it to the limit from the right. A cut render has lost the template's tail (the assistant
prefix the score is read after), so the tail is written back over the last kept tokens: the
longest common token suffix of two renders of the same conversation with different filler
contents (``Transformer._restore_chat_template_suffix``). This module does the same with
transformers' own ``apply_chat_template`` (the template is data of the folder, rendered by the
library that defines its semantics) and the folder's ``tokenizer.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from models.errors import ModelInputError
from models.text.tokens.pairs import PairRow

PAIR_ROLES = ("query", "document")
# apply_chat_template arguments that size or shape the output: the cut is ours, not the template's.
_SIZE_KEYS = frozenset(
    {"padding", "truncation", "max_length", "return_tensors", "tokenize", "return_dict"}
)
# sentence-transformers' format rule for templates it cannot tell (``InputFormatter._infer_format``).
_FLAT_MODEL_TYPES = frozenset({"apertus", "deepseek_v3", "gpt_oss", "seed_oss"})
_STRUCTURED_PATTERNS = ("content[0]", ".type", "'type'", '"type"', "item.type", "message.content[")


@dataclass(frozen=True)
class ChatSpec:
    """How the folder renders messages.

    Attributes:
        format: ``flat`` (a message's content is the text) or ``structured`` (a list of
            ``{"type": "text", "text": ...}``); ``auto`` is decided from the template on load.
        kwargs: extra ``apply_chat_template`` arguments (``add_generation_prompt``, ...).
        restore_suffix: write the template's tail back over a cut render (default on).
    """

    format: str = "auto"
    kwargs: dict[str, Any] = field(default_factory=dict)
    restore_suffix: bool = True


def read_chat_spec(transformer: dict[str, Any]) -> ChatSpec | None:
    """The chat rendering a ``Transformer`` module's ``sentence_bert_config.json`` asks for; None
    when its ``modality_config`` has no ``message`` (pairs go through the pair template). A
    folder saved without ``modality_config`` is text only, as sentence-transformers reads it.

    Raises:
        ValueError: a ``modality_config`` or ``processing_kwargs`` attnserve cannot follow.
    """
    modalities = transformer.get("modality_config", {"text": {}})
    if not isinstance(modalities, dict) or not set(modalities) <= {"text", "message"}:
        shown = sorted(modalities) if isinstance(modalities, dict) else repr(modalities)
        raise ValueError(
            f"its Transformer module takes {shown} inputs; attnserve serves text pairs (the "
            "text and message modalities) only"
        )
    processing = transformer.get("processing_kwargs") or {}
    if not isinstance(processing, dict) or not set(processing) <= {"chat_template"}:
        shown = sorted(processing) if isinstance(processing, dict) else repr(processing)
        raise ValueError(
            f"sentence_bert_config.json processing_kwargs {shown}: attnserve applies only "
            "chat_template arguments; remove the others and re-save"
        )
    if "message" not in modalities:
        return None
    kwargs = dict(processing.get("chat_template") or {})
    restore = bool(kwargs.pop("restore_suffix", True))
    kwargs = {k: v for k, v in kwargs.items() if k not in _SIZE_KEYS}
    message = modalities["message"] if isinstance(modalities["message"], dict) else {}
    return ChatSpec(str(message.get("format", "auto")), kwargs, restore)


class ChatPairs:
    """Renders and tokenises pairs as :mod:`this module <models.text.tokens.chat_pairs>` describes.

    Args:
        renderer: the folder's transformers tokenizer (only its ``apply_chat_template`` runs).
        spec: what the folder says about rendering.
        model_type: ``config.json`` ``model_type`` (sentence-transformers' format rule).
    """

    def __init__(self, renderer: Any, spec: ChatSpec, model_type: str) -> None:
        self.renderer = renderer
        self.kwargs = spec.kwargs
        self.restore_suffix = spec.restore_suffix
        self.flat = spec.format == "flat" or (spec.format == "auto" and _flat(renderer, model_type))
        self._suffixes: dict[tuple[int, str], list[int]] = {}

    @classmethod
    def load(cls, weights: Path, spec: ChatSpec, model_type: str) -> ChatPairs:
        """The renderer of the folder ``weights``; refuses a template that drops a pair's role.

        Raises:
            ValueError: transformers cannot load the tokenizer, it has no chat template, or the
                template does not render the ``query`` and ``document`` roles.
        """
        from transformers import AutoTokenizer

        try:
            renderer = AutoTokenizer.from_pretrained(str(weights), local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"transformers cannot load its tokenizer ({exc})") from None
        if not getattr(renderer, "chat_template", None):
            raise ValueError(
                "its Transformer module takes chat messages but the tokenizer has no chat "
                "template; add chat_template.jinja or re-save with the text modality only"
            )
        chat = cls(renderer, spec, model_type)
        probe = chat.render([("alpha query", "bravo document")], "")[0]
        if "alpha query" not in probe or "bravo document" not in probe:
            raise ValueError(
                "its chat template does not render the 'query' and 'document' roles of a pair "
                f"(a probe pair rendered as {probe[:120]!r}); give the template those roles"
            )
        return chat

    def _content(self, text: str) -> Any:
        return text if self.flat else [{"type": "text", "text": text}]

    def conversation(self, item: Sequence[str], prompt: str) -> list[dict[str, Any]]:
        """The messages of one text or pair: the prompt as a system message, then ``user`` (a
        text alone) or ``query`` and ``document``."""
        roles = PAIR_ROLES if len(item) == 2 else ("user",)
        messages = [
            {"role": r, "content": self._content(t)} for r, t in zip(roles, item, strict=True)
        ]
        if prompt:
            messages.insert(0, {"role": "system", "content": self._content(prompt)})
        return messages

    def render(self, items: Sequence[Sequence[str]], prompt: str) -> list[str]:
        """The template's text of each item."""
        conversations = [self.conversation(item, prompt) for item in items]
        rendered = self.renderer.apply_chat_template(conversations, tokenize=False, **self.kwargs)
        return [str(text) for text in rendered]

    def suffix(self, width: int, prompt: str, tokenizer: Any) -> list[int]:
        """The template's tail after the last content, as token ids: the common token suffix of
        renders with two different fillers (empty when they never differ)."""
        key = (width, prompt)
        if key not in self._suffixes:
            first, second = (
                tokenizer.encode(
                    self.render([[filler] * width], prompt)[0], add_special_tokens=False
                ).ids
                for filler in ("0", "1 2 3 4")
            )
            count = 0
            for left, right in zip(reversed(first), reversed(second), strict=False):
                if left != right:
                    break
                count += 1
            self._suffixes[key] = (
                first[len(first) - count :] if 0 < count < min(len(first), len(second)) else []
            )
        return self._suffixes[key]

    def rows(
        self,
        items: Sequence[Sequence[str]],
        prompt: str,
        limit: int,
        tokenizer: Any,
        truncate: bool = False,
        what: str = "input",
        cut_start: bool = False,
    ) -> list[PairRow]:
        """Token ids of each rendered item (segments all 0), cut to ``limit`` with the tail
        restored; ``cut_start`` cuts from the start instead (the tail stays).

        Raises:
            ModelInputError: an item over ``limit`` without ``truncate`` (naming its index).
        """
        encoded = tokenizer.encode_batch(self.render(items, prompt), add_special_tokens=False)
        out = []
        for i, (item, enc) in enumerate(zip(items, encoded, strict=True)):
            ids = list(enc.ids)
            if len(ids) > limit:
                if not truncate:
                    raise ModelInputError(
                        f"{what} {i} is {len(ids)} tokens long once rendered by the chat template, "
                        f"over this model's limit of {limit} tokens; shorten it or set "
                        f"truncate=true to cut it to {limit} tokens"
                    )
                ids = ids[len(ids) - limit :] if cut_start else ids[:limit]
                tail = self.suffix(len(item), prompt, tokenizer) if self.restore_suffix else []
                if tail and not cut_start:
                    keep = min(len(tail), limit)
                    ids[limit - keep :] = tail[len(tail) - keep :]
            out.append(PairRow(ids, [0] * len(ids)))
        return out


def _flat(renderer: Any, model_type: str) -> bool:
    """sentence-transformers' ``auto`` rule: flat for a few model types, else structured when
    the template reads content as a list of typed parts."""
    if model_type in _FLAT_MODEL_TYPES:
        return True
    template = renderer.chat_template
    return isinstance(template, str) and not any(p in template for p in _STRUCTURED_PATTERNS)
