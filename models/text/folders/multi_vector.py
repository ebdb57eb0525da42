"""Read a sentence-transformers ``MultiVectorEncoder`` folder (ColBERT-style late interaction).

    spec = read_multi_vector_folder(folder)
    spec.text        # the Transformer: weights, config, prompts, max_seq_length (a TextFolder)
    spec.steps       # ("dense", 1_Dense) / ("normalize", None), in modules.json order
    spec.sides       # per side (query / document / none): its token limit and query expansion

What the folder holds (sentence-transformers 6's ``MultiVectorEncoder.save``): ``modules.json``
listing a ``Transformer`` (its ``sentence_bert_config.json`` carries ``query_length``,
``document_length`` and ``query_expansion``), ``Dense`` modules on ``token_embeddings``, an
optional ``MultiVectorMask`` (``skiplist_words``, ``skiplist_tasks``, ``keep_only_token_ids``)
and an optional ``Normalize``; ``config_sentence_transformers.json`` holds the query / document
prompts (``[Q] ``/``[D] `` markers are prompts there) and ``similarity_fn_name`` (``maxsim`` or
``meanmaxsim``). Any other module is refused by name, as :mod:`models.text.folders.embedding` does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from models.text.folders.embedding import (
    TextFolder,
    module_dir,
    read_json,
    read_optional_json,
    read_prompts,
    read_weights_folder,
    transformer_text_folder,
)
from models.text.network.config import BertConfig
from models.text.network.pooling import Pooling

MASK_MODULE = "MultiVectorMask"
_MODULE_KINDS = ("Transformer", "Dense", MASK_MODULE, "Normalize")
SIDES = ("query", "document")  # sentence-transformers' encode_query / encode_document tasks
SIMILARITIES = ("maxsim", "meanmaxsim")


@dataclass(frozen=True)
class Expansion:
    """ColBERT's query augmentation (Khattab & Zaharia, SIGIR 2020, section 3.2): a query
    shorter than ``length`` tokens is padded to it with ``token_id`` (``[MASK]``), whose output
    vectors are scored too. ``attend``: whether the other tokens attend to them (False, the
    classic ColBERT: they are queries only, not keys). ``strategy`` ``fixed`` also cuts longer
    queries to ``length``; ``min`` does not."""

    strategy: str
    length: int
    token_id: int
    attend: bool


@dataclass(frozen=True)
class Side:
    """How texts of one side are tokenized: at most ``max_tokens`` each, then expanded."""

    max_tokens: int
    expansion: Expansion | None = None


@dataclass(frozen=True)
class MultiVectorFolder:
    """What a ``MultiVectorEncoder`` folder says.

    Attributes:
        text: the Transformer module (weights, config, prompts, lower-casing, max_seq_length).
        steps: ``("dense", folder)`` and ``("normalize", None)`` on token vectors, in order.
        sides: ``query``, ``document`` and ``none`` (``encode`` without a task).
        masked: a ``MultiVectorMask`` module is present (expansion tokens scored, skiplist).
        skiplist_ids: token ids left out of scoring on ``skiplist_tasks`` (punctuation, ...).
        skiplist_words: the words they came from (for the card).
        skiplist_tasks: the sides the skiplist applies to (no task counts as ``document``).
        keep_only_token_ids: when set, document tokens other than these are left out.
        similarity: ``maxsim`` or ``meanmaxsim`` (MaxSim over the query's token count).
    """

    text: TextFolder
    steps: tuple[tuple[str, Path | None], ...]
    sides: dict[str, Side]
    masked: bool
    skiplist_ids: frozenset[int] = frozenset()
    skiplist_words: tuple[str, ...] = ()
    skiplist_tasks: tuple[str, ...] = ("document",)
    keep_only_token_ids: frozenset[int] | None = None
    similarity: str = "maxsim"


def _kind(entry: Any) -> str:
    if not isinstance(entry, dict):
        raise ValueError(f"modules.json entries must be JSON objects, got {entry!r}")
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def is_multi_vector_folder(path: Path) -> bool:
    """True when ``path`` is a sentence-transformers multi-vector folder: its
    ``config_sentence_transformers.json`` says ``MultiVectorEncoder`` (or PyLate's ``ColBERT``,
    refused with a reason at load), or ``modules.json`` lists a ``MultiVectorMask``."""
    try:
        st = read_optional_json(path / "config_sentence_transformers.json")
        if st.get("model_type") in ("MultiVectorEncoder", "ColBERT"):
            return True
        modules = read_json(path / "modules.json") if (path / "modules.json").is_file() else []
    except ValueError:
        return False
    return isinstance(modules, list) and any(
        isinstance(m, dict) and _kind(m) == MASK_MODULE for m in modules
    )


def _token_id(tokenizer: Tokenizer, weights: Path, names: tuple[str, ...]) -> int | None:
    """The id of the first of the tokenizer's special tokens ``names`` (``mask_token``, ...)
    that ``tokenizer_config.json`` sets and the vocabulary holds."""
    config = read_optional_json(weights / "tokenizer_config.json")
    for name in names:
        value = config.get(name)
        token = value.get("content") if isinstance(value, dict) else value
        found = tokenizer.token_to_id(token) if isinstance(token, str) else None
        if found is not None:
            return int(found)
    return None


def _expansion(raw: Any, tokenizer: Tokenizer, weights: Path) -> Expansion | None:
    """``query_expansion`` of ``sentence_bert_config.json`` (sentence-transformers' checks)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or raw.get("strategy") not in ("fixed", "min"):
        raise ValueError(
            f"query_expansion must be null or an object with strategy 'fixed' or 'min', got {raw!r}"
        )
    length, attend, token = raw.get("length"), raw.get("attend", False), raw.get("token")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"query_expansion length must be a positive integer, got {length!r}")
    if not isinstance(attend, bool):
        raise ValueError(f"query_expansion attend must be true or false, got {attend!r}")
    if token is not None:
        found = tokenizer.token_to_id(str(token))
        if found is None:
            raise ValueError(
                f"query_expansion token {token!r} is not in the tokenizer's vocabulary"
            )
        token_id = int(found)
    else:  # sentence-transformers' (PyLate's) chain: [MASK], else the end-of-text token
        fallback = _token_id(tokenizer, weights, ("mask_token", "eos_token"))
        if fallback is None:
            raise ValueError(
                "query_expansion needs a token: the tokenizer has no mask or eos token"
            )
        token_id = fallback
    return Expansion(str(raw["strategy"]), length, token_id, attend)


def _sides(transformer: dict[str, Any], limit: int, expansion: Expansion | None) -> dict[str, Side]:
    """Each side's token limit as sentence-transformers' ``Transformer.preprocess`` sets it."""

    def length(key: str) -> int:
        value = transformer.get(key)
        if value is None:
            return limit
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise ValueError(f"{key} must be an integer of at least 2, got {value!r}")
        return min(value, limit)

    query = length("query_length")
    if expansion is not None:
        if expansion.length > limit:
            raise ValueError(
                f"query_expansion length {expansion.length} is over max_seq_length {limit}"
            )
        if expansion.strategy == "fixed":
            query = expansion.length
        elif transformer.get("query_length") is not None:
            query = max(query, expansion.length)
    return {
        "query": Side(query, expansion),
        "document": Side(length("document_length")),
        "none": Side(limit),
    }


def read_multi_vector_folder(path: Path) -> MultiVectorFolder:
    """Read ``path``.

    Raises:
        ValueError: a missing file, a module attnserve does not run (named), a Transformer that
            is not one of our BERT-family encoders, or settings out of range; the message says
            which (the caller names the folder).
    """
    st = read_optional_json(path / "config_sentence_transformers.json")
    if st.get("model_type") == "ColBERT":
        raise ValueError(
            "is a PyLate ColBERT folder (model_type 'ColBERT'); load it once with "
            "sentence-transformers' MultiVectorEncoder and save it again to serve it"
        )
    modules = read_json(path / "modules.json")
    if not isinstance(modules, list) or not modules:
        raise ValueError("modules.json must list the model's modules")
    kinds = [(_kind(entry), entry) for entry in modules]
    for kind, entry in kinds:
        if kind not in _MODULE_KINDS:
            raise ValueError(
                f"modules.json module {entry.get('path') or entry.get('name')!r} is a "
                f"{entry.get('type')!r}, which attnserve does not run in a multi-vector model "
                f"(supported: {', '.join(_MODULE_KINDS)})"
            )
    order = [kind for kind, _ in kinds]
    if order[0] != "Transformer" or order.count("Transformer") != 1 or order.count(MASK_MODULE) > 1:
        raise ValueError(
            f"modules.json lists {order}; attnserve runs Transformer, then Dense, "
            f"{MASK_MODULE} and Normalize modules on token embeddings"
        )
    weights, config = read_weights_folder(module_dir(path, kinds[0][1]))
    if not isinstance(config, BertConfig):  # pragma: no cover - read_weights_folder's default
        raise ValueError("multi-vector models run on attnserve's own BERT-family encoders only")
    transformer = read_optional_json(weights / "sentence_bert_config.json")
    tokenizer = Tokenizer.from_file(str(weights / "tokenizer.json"))
    expansion = _expansion(transformer.get("query_expansion"), tokenizer, weights)
    prompts, default_prompt = read_prompts(st)
    similarity = st.get("similarity_fn_name") or "maxsim"
    if similarity not in SIMILARITIES:
        raise ValueError(
            f"similarity_fn_name {similarity!r} is not one of {', '.join(SIMILARITIES)}"
        )
    text = transformer_text_folder(
        path,
        weights,
        config,
        Pooling(("mean",)),  # unused: token vectors are not pooled
        transformer,
        prompts=prompts,
        default_prompt_name=default_prompt,
    )
    steps = tuple(
        (
            "dense" if kind == "Dense" else "normalize",
            module_dir(path, entry) if kind == "Dense" else None,
        )
        for kind, entry in kinds
        if kind in ("Dense", "Normalize")
    )
    spec = MultiVectorFolder(
        text, steps, _sides(transformer, text.max_tokens, expansion), MASK_MODULE in order
    )
    mask_entry = next((entry for kind, entry in kinds if kind == MASK_MODULE), None)
    if mask_entry is None:
        return _with_similarity(spec, similarity)
    return _with_similarity(_with_mask(spec, module_dir(path, mask_entry), tokenizer), similarity)


def _with_similarity(spec: MultiVectorFolder, similarity: str) -> MultiVectorFolder:
    return replace(spec, similarity=similarity)


def _with_mask(spec: MultiVectorFolder, folder: Path, tokenizer: Tokenizer) -> MultiVectorFolder:
    """``spec`` with the ``MultiVectorMask``'s settings. A skiplist word that is not one token
    of the vocabulary is dropped, as sentence-transformers drops it (it would otherwise mask
    every unknown token)."""
    raw = read_optional_json(folder / "config.json")
    words = raw.get("skiplist_words") or []
    tasks = raw.get("skiplist_tasks")
    tasks = [tasks] if isinstance(tasks, str) else (tasks if tasks is not None else ["document"])
    keep = raw.get("keep_only_token_ids")
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise ValueError(f"{folder.name}/config.json skiplist_words must be a list of strings")
    if not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise ValueError(f"{folder.name}/config.json skiplist_tasks must be a list of strings")
    if keep is not None and (
        not isinstance(keep, list) or not all(isinstance(t, int) and t >= 0 for t in keep)
    ):
        raise ValueError(f"{folder.name}/config.json keep_only_token_ids must be token ids")
    ids = {tokenizer.token_to_id(word) for word in words}
    return replace(
        spec,
        skiplist_ids=frozenset(int(i) for i in ids if i is not None),
        skiplist_words=tuple(words),
        skiplist_tasks=tuple(tasks),
        keep_only_token_ids=frozenset(keep) if keep else None,
    )
