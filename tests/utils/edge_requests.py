"""The semantic edges of the no-5xx property test (tests/service/test_no_server_errors.py): a
Hypothesis strategy of requests for what the OpenAPI schema cannot say. Unicode edges, texts
that tokenize to nothing, texts over the token limit under each long-text rule and direction,
attention backends and options (unknown names, extreme values), precisions, ``auto`` and
``max_quality_loss``, ranking knobs, and forecast histories of the wrong length, channels,
timestamps and base64 columns. Each part of a request is mostly valid, so that the other parts'
edges get past validation to the code behind it.
"""

from __future__ import annotations

import base64
from typing import Any, Protocol

import numpy as np
import pandas as pd
from hypothesis import strategies as st

from tests.utils.fuzzing import backend_options

# The forecaster's name on the server under test (the strategy draws its histories to its card).
FORECASTER = "tiny-forecaster"


class Served(Protocol):
    """What the strategies read of the server under test: its model cards and its schema."""

    cards: list[dict[str, Any]]
    openapi: dict[str, Any]

    def card(self, name: str) -> dict[str, Any]:
        """The card of the model ``name``."""
        ...


def percent(draw: st.DrawFn, chance: int) -> bool:
    """True ``chance`` times in a hundred. Hypothesis starts from, and shrinks towards, the
    simplest draw (0): True, the usual case, so a failure shrinks to the fewest oddities."""
    return draw(st.integers(0, 99)) < chance


def mostly(draw: st.DrawFn, valid: Any, edges: list[Any], chance: int = 70) -> Any:
    """``valid`` ``chance`` times in a hundred, else one of ``edges``: each part of a request is
    right often enough that the other parts' edges get past validation to the code behind it."""
    return valid if percent(draw, chance) else draw(st.sampled_from(edges))


@st.composite
def usually(
    draw: st.DrawFn, common: st.SearchStrategy[Any], *rare: st.SearchStrategy[Any], chance: int = 80
) -> Any:
    """A draw from ``common`` ``chance`` times in a hundred, else from one of ``rare`` (``one_of``
    would weigh them alike)."""
    return draw(common if not rare or percent(draw, chance) else st.one_of(*rare))


ORDINARY_TEXTS = ["hello world", "a short query about attention", "Paris is in France."]
EMPTY_TOKENS = ["\u200b", "\u200b\u200c\u200d\u2060\ufeff", "\x00", "\x01\x02\x7f"]
EDGE_TEXTS = [
    "",
    " ",
    " \t\n\r ",
    *EMPTY_TOKENS,  # zero-width and control characters: text that tokenizes to nothing
    "\ud800",  # unpaired surrogates (legal in JSON's \\u escapes, not in UTF-8)
    "a\udfffb",
    "🙂",
    "👩\u200d👩\u200d👧\u200d👦" * 40,
    "e" + "\u0301" * 300,  # one letter, hundreds of combining marks
    "\u202eRTL override\u202c",
    "[CLS] [SEP] [PAD] [MASK] [UNK]",
    "a" * 5000,  # one word past the tokenizer's word length: a single [UNK]
    "日本語のテキスト" * 30,
]


@st.composite
def long_texts(draw: st.DrawFn) -> str:
    """A text of some tens to hundreds of tokens: around and over the models' limits (64 and
    128 tokens)."""
    word = draw(st.sampled_from(["word", "🙂", "\u200b", "日本", "tok" * 9, "a-b"]))
    return " ".join([word] * draw(st.integers(20, 400)))


TEXT = usually(
    st.sampled_from(ORDINARY_TEXTS),
    st.sampled_from(EDGE_TEXTS),
    long_texts(),
    # Control, format, private-use and surrogate code points among ordinary ones.
    st.text(st.characters(codec=None, categories=["Cc", "Cf", "Cs", "Co", "Zs", "So", "L", "Mn"])),
    chance=50,
)


TEXTS = usually(st.lists(TEXT, min_size=1, max_size=4), st.just([]), st.just(["x"] * 65))
PAIR = st.tuples(TEXT, TEXT).map(list)
BOOL = st.booleans()
INTEGERS = st.sampled_from([-1, 0, 1, 2, 3, 7, 8, 9, 64, 100, 4096, 10**6, 2**31, 2**63, 10**30])
OPTION_VALUES = usually(
    st.sampled_from([8, 16, 64, 1, 2, 100, "mask"]),
    INTEGERS,
    st.sampled_from([0.5, -0.0, 1e308, True, False, None, "", "mask", "jagged", "softmax"]),
    st.sampled_from(["gaussian", "x", [], {}, [1, 2]]),
)

# The fields that carry the texts (every text route has some of them) ...
TEXT_FIELDS = {
    "inputs": usually(TEXTS, TEXT, PAIR, st.lists(st.one_of(TEXT, PAIR), max_size=3), chance=60),
    "input": usually(TEXTS, TEXT),
    "texts": TEXTS,
    "query": TEXT,
    "documents": usually(TEXTS, st.lists(st.fixed_dictionaries({"text": TEXT}), max_size=3)),
    "sentences": TEXTS,
    "source_sentence": TEXT,
    "ids": usually(
        st.lists(st.sampled_from([101, 2000, 102, 0, 30521, 30522, -1, 2**40]), max_size=6),
        st.lists(st.lists(st.integers(0, 30600), max_size=4), max_size=2),
    ),
}
# ... and the knobs, each sent now and then.
TEXT_KNOBS = {
    "top_n": st.sampled_from([None, -1, 0, 1, 2, 3, 10**9]),
    "return_documents": BOOL,
    "raw_scores": BOOL,
    "return_text": BOOL,
    "normalize": BOOL,
    "truncate": BOOL,
    "long_text": st.sampled_from(["error", "truncate", "windows", "nope", None]),
    "truncation_direction": st.sampled_from(["right", "left", "Right", "Left", "middle"]),
    "prompt_name": st.sampled_from(["query", "document", "nope", None]),
    "encoding_format": st.sampled_from(["float", "base64", "binary"]),
    "dimensions": st.sampled_from([None, -1, 0, 1, 8, 16, 32, 33, 10**6]),
    "input_type": st.sampled_from(["search_query", "search_document", "classification", "x"]),
    "embedding_types": st.lists(
        st.sampled_from(["float", "int8", "uint8", "binary", "ubinary", "base64", "x"]),
        max_size=3,
    ),
    "add_special_tokens": BOOL,
    "skip_special_tokens": BOOL,
    "return_tokens": BOOL,
    "max_tokens_per_doc": st.sampled_from([None, -1, 0, 1, 5, 10**6]),
}


@st.composite
def knobs(draw: st.DrawFn, fuzzed: Served, path: str) -> dict[str, Any]:
    """The fields every model route shares, each mostly valid so that their combinations reach
    the models (``auto`` in each loaded precision, a backend with its own options): a model that
    serves ``path`` (now and then another, or none); an attention backend or ``auto`` (now and
    then a wrong name), its options in and out of their ranges, unknown ones now and then; a
    precision; auto's budget."""
    names = [c["name"] for c in fuzzed.cards]
    serving = [c["name"] for c in fuzzed.cards if path in c.get("routes", ())] or names
    card = fuzzed.card(serving[0])
    backends = backend_options(card)
    body: dict[str, Any] = {}
    if percent(draw, 85):
        body["model"] = mostly(draw, draw(st.sampled_from(serving)), [*names, "no-such-model", ""])
    if percent(draw, 60):
        valid = draw(st.sampled_from(["auto", *sorted(backends)]))
        body["attention"] = mostly(draw, valid, ["AUTO", "sparse", ""], chance=90)
    attention = body.get("attention", card.get("default_attention"))
    if attention in backends and percent(draw, 30):
        declared = sorted(backends[attention])
        body["attention_options"] = draw(
            st.dictionaries(
                usually(st.sampled_from(declared), st.sampled_from(["kernel", "unknown", ""]))
                if declared
                else st.sampled_from(["kernel", "unknown", ""]),
                OPTION_VALUES,
                max_size=2,
            )
        )
    if percent(draw, 50):
        loaded = card.get("precisions") or ["float32"]
        body["precision"] = mostly(draw, draw(st.sampled_from(loaded)), ["float16", "fp8", ""], 90)
    if percent(draw, 50 if attention == "auto" else 5):
        budget = draw(st.sampled_from([0.01, 0, 0.5, 1]))
        body["max_quality_loss"] = mostly(draw, budget, [1e-12, 1e308, -1, "0.1"])
    return body


def body_variants(openapi: dict[str, Any], path: str) -> list[set[str]]:
    """The property names a route's JSON body may hold: one set per body it takes (TEI's ``/``
    takes any of four), each gathered through refs."""
    components = openapi.get("components", {}).get("schemas", {})
    operation = openapi["paths"].get(path, {}).get("post", {})
    content = operation.get("requestBody", {}).get("content", {})
    body = content.get("application/json", {}).get("schema", {})

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        ref = node.get("$ref", "")
        return resolve(components.get(ref.rsplit("/", 1)[-1], {})) if ref else node

    body = resolve(body)
    branches = body.get("anyOf") or body.get("oneOf") or [body]
    variants = [set(resolve(b).get("properties", {})) for b in branches]
    return [v for v in variants if v]


def route_families(fuzzed: Served) -> dict[str, list[str]]:
    """The POST routes with a JSON body, but ``/forecast``, grouped by the tasks of the models
    that answer them (encode, rerank, classify, TEI's any-text routes), so that each family is
    drawn as often as the others however many routes it has."""
    families: dict[str, list[str]] = {}
    for path, operations in fuzzed.openapi["paths"].items():
        if (
            path == "/forecast"
            or "post" not in operations
            or not body_variants(fuzzed.openapi, path)
        ):
            continue
        tasks = sorted({c["task"] for c in fuzzed.cards if path in c.get("routes", ())})
        families.setdefault(",".join(tasks) or "none", []).append(path)
    return families


@st.composite
def text_requests(draw: st.DrawFn, fuzzed: Served, paths: list[str]) -> tuple[str, dict[str, Any]]:
    """(route, body) for one of the text routes ``paths``: one of the bodies it takes; the shared
    knobs, every text field and some text knobs drawn, then kept to those that body names (so
    routes added later are covered as they land)."""
    path = draw(st.sampled_from(paths))
    fields = draw(st.sampled_from(body_variants(fuzzed.openapi, path)))
    body = draw(knobs(fuzzed, path))
    for name, strategy in TEXT_FIELDS.items():
        if name in fields:
            body[name] = draw(strategy)
    for name, strategy in TEXT_KNOBS.items():
        if name in fields and percent(draw, 35):
            body[name] = draw(strategy)
    return path, {k: v for k, v in body.items() if k in fields}


@st.composite
def timestamps(draw: st.DrawFn, rows: int) -> dict[str, Any]:
    """``timestamps`` (regular, irregular, another frequency, unparsable, the wrong count) or
    ``start``, from an ordinary date or one where the forecast's own future timestamps leave
    the calendar pandas can hold."""
    kind = mostly(draw, "regular", ["shuffled", "minutes", "garbage", "short", "start"])
    last = pd.Timestamp.max.floor("h") - pd.Timedelta(hours=max(rows - 1, 0))
    start = str(mostly(draw, pd.Timestamp("2017-01-01"), [last, pd.Timestamp("1677-09-22")]))
    if kind == "start":
        return {"start": draw(st.sampled_from([start, "yesterday", "", "2017-13-45"]))}
    index = [
        str(t) for t in pd.date_range(start, periods=rows, freq="min" if kind == "minutes" else "h")
    ]
    if kind == "shuffled" and rows > 2:
        index[1], index[2] = index[2], index[1]
    if kind == "garbage":
        index = ["not a date"] * rows
    if kind == "short":
        index = index[:-1]
    return {"timestamps": index}


@st.composite
def series(draw: st.DrawFn, channels: list[str], context: int) -> dict[str, Any]:
    """One history: rows around the model's context, the right or wrong channels, values as
    rows or columns (numbers or base64 float32 bytes), plausible or extreme numbers."""
    rows = mostly(
        draw, draw(st.sampled_from([context, context + 5])), [0, 1, context - 1, 10 * context]
    )
    names = mostly(draw, channels, [channels[:-1], [*channels, "extra"], channels[::-1]])
    scale = mostly(draw, "normal", ["constant", "huge", "tiny", "nonfinite"])
    values = np.sin(np.arange(rows * len(names)) / 5.0).reshape(rows, len(names)) + 3.0
    if scale == "constant":
        values = np.zeros_like(values)
    elif scale == "huge":  # past float32's range once cast: infinities in base64 columns
        values = values * 1e39
    elif scale == "tiny":
        values = values * 1e-45
    elif scale == "nonfinite" and values.size:
        values[0, 0] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    item = draw(timestamps(rows))
    layout = mostly(
        draw, draw(st.sampled_from(["rows", "columns", "base64"])), ["bad-base64", "both", "none"]
    )
    if layout in ("rows", "both"):
        item["values"] = values.tolist()
    if layout in ("columns", "both"):
        item["columns"] = {n: values[:, i].tolist() for i, n in enumerate(names)}
    if layout == "base64":
        with np.errstate(over="ignore"):
            item["columns"] = {
                n: base64.b64encode(values[:, i].astype("<f4").tobytes()).decode()
                for i, n in enumerate(names)
            }
    if layout == "bad-base64":
        bad = draw(st.sampled_from(["!!!not base64", "AAA", base64.b64encode(b"\0" * 5).decode()]))
        item["columns"] = dict.fromkeys(names, bad)
    return item


def forecast_requests(fuzzed: Served) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """(``/forecast``, body): histories from :func:`series` with the horizon, quantiles and seed
    at and past their limits."""
    card = fuzzed.card(FORECASTER)
    one = series(card["channels"], card["context"])
    horizon = card["horizon"]
    body = st.fixed_dictionaries(
        {
            "series": st.one_of(
                st.lists(one, min_size=1, max_size=3), st.just([]), one.map(lambda s: [s] * 65)
            )
        },
        optional={
            "horizon": st.sampled_from([horizon, 1, None, -1, 0, horizon + 1]),
            "quantiles": st.sampled_from([None, [0.5], [0.1, 0.9], [], [0.0], [1.0], [0.5] * 99]),
            "seed": st.sampled_from([0, 1, 2**63 - 1, 2**63, -1]),
        },
    )
    return st.tuples(
        st.just("/forecast"),
        st.tuples(knobs(fuzzed, "/forecast"), body).map(lambda kb: {**kb[0], **kb[1]}),
    )


@st.composite
def edge_requests(draw: st.DrawFn, fuzzed: Served) -> tuple[str, dict[str, Any]]:
    """(route, body): a route family drawn first (each text family and ``/forecast`` alike),
    then a request of it."""
    families = route_families(fuzzed)
    family = draw(st.sampled_from([*sorted(families), "forecast"]))
    if family == "forecast":
        return draw(forecast_requests(fuzzed))
    return draw(text_requests(fuzzed, families[family]))
