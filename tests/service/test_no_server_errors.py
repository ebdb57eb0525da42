"""No request gets a 5xx (issue 43, item 2): property-based requests over every route and field of
the OpenAPI schema, against the real server (``python -m service serve`` in a subprocess, its log
in a file) serving one model of every task, with a steady stream of valid requests beside them.

Two generators share the server:

- schemathesis, on the server's own ``/openapi.json`` with its name-like fields steered to what
  is loaded (:func:`tests.utils.fuzzing.steer_schema`): examples, coverage (each field's
  boundaries, and every way to break the schema) and fuzzing, positive and negative data;
- a Hypothesis strategy of our own for what the schema cannot say
  (:func:`tests.utils.edge_requests.edge_requests`): unicode edges, texts that tokenize to
  nothing, texts over the token limit under each long-text rule and direction, attention
  backends and options (unknown names, extreme values), precisions, ``auto`` and
  ``max_quality_loss``, ranking knobs, and forecast histories of the wrong length, channels,
  timestamps and base64 columns.

Every response must be under 500, every non-2xx must be the one error body, the server's log
must hold no traceback and no ERROR line, and every request of the steady stream must succeed
with the answer it got alone. Cases are deterministic (``derandomize``, schemathesis'
``deterministic``) and write no example database into the checkout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, example, given, settings
from schemathesis.core.result import Err
from schemathesis.pytest.lazy import get_all_tests

from models.precision import native_bf16
from tests.service.helpers import hourly_series
from tests.service.server_process import ServerProcess
from tests.utils.edge_requests import FORECASTER, edge_requests
from tests.utils.fuzzing import (
    LogWatch,
    SteadyLoad,
    error_body_problem,
    problems_in,
    steer_schema,
)
from tests.utils.informer import tiny_checkpoint
from tests.utils.live_server import (
    DROP_IN_CLASSIFIER,
    DROP_IN_ENCODER,
    DROP_IN_RERANKER,
    drop_in_folders,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.timeout(420),
    # Hypothesis warns when it prints a failing case holding the long texts drawn on purpose.
    pytest.mark.filterwarnings("ignore:Generating overly large repr"),
]

# Cases per schema operation (fuzzing phase; the coverage phase adds its own boundary cases) and
# for the semantic strategy: together about a minute on two CPU cores.
SCHEMA_EXAMPLES = 25
EDGE_EXAMPLES = 400


@dataclass
class Fuzzed:
    """The server under test, what it serves and what watches it."""

    server: ServerProcess
    cards: list[dict[str, Any]]
    openapi: dict[str, Any]
    log: LogWatch
    load: SteadyLoad

    def card(self, name: str) -> dict[str, Any]:
        return next(c for c in self.cards if c["name"] == name)

    def check(self, response: Any, reproduce: str) -> None:
        """The response keeps the contract, the log stays clean, the steady stream is unharmed."""
        # The log is read whatever the answer, so that a record is never blamed on a later case.
        problem = error_body_problem(response)
        logged = self.log.new_problems()
        assert problem is None and not logged, "\n".join(
            [
                problem or "",
                *(f"the server logged:\n{line}" for line in logged),
                f"reproduce: {reproduce}",
            ]
        )
        assert not self.load.failures, "the steady stream was harmed:\n" + "\n".join(
            self.load.failures[:5]
        )


def steady_requests(context: int) -> list[tuple[str, dict[str, Any]]]:
    """One valid request per task (and per text route family)."""
    return [
        ("/encode", {"model": DROP_IN_ENCODER, "inputs": ["steady load", "a second text"]}),
        ("/v1/rerank", {"model": DROP_IN_RERANKER, "query": "q", "documents": ["a", "b c"]}),
        ("/predict", {"model": DROP_IN_CLASSIFIER, "inputs": "classify me"}),
        ("/v1/embeddings", {"model": DROP_IN_ENCODER, "input": "openai shaped"}),
        ("/forecast", {"model": FORECASTER, "series": [hourly_series(context)]}),
    ]


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    """The server with an encoder, a reranker, a 3-label classifier and a forecaster, loaded in
    float32, int8 and (where the CPU has it) bfloat16, with the steady stream running."""
    root = tmp_path_factory.mktemp("no-5xx")
    folders = [*drop_in_folders(root), tiny_checkpoint(root / FORECASTER)]
    precisions = "float32,int8" + (",bfloat16" if native_bf16() else "")
    server = ServerProcess(
        root / "server.log",
        [str(p) for p in folders],
        ["--precisions", precisions, "--max-wait-ms", "5"],
    )
    load: SteadyLoad | None = None
    try:
        server.wait_ready()
        cards = httpx.get(server.url + "/models", timeout=30).json()["data"]
        openapi = httpx.get(server.url + "/openapi.json", timeout=30).json()
        context = next(c["context"] for c in cards if c["name"] == FORECASTER)
        load = SteadyLoad(server.url, steady_requests(context)).start()
        yield Fuzzed(server, cards, openapi, LogWatch(server.log_path), load)
    finally:
        if load is not None:
            load.stop()
        server.stop()


@pytest.fixture(scope="module")
def api_schema(fuzzed: Fuzzed) -> Any:
    """The server's OpenAPI schema, steered to its models, as schemathesis loads it."""
    config = schemathesis.Config.from_dict(
        {
            "base-url": fuzzed.server.url,
            "seed": 43,
            "request-timeout": 60,
            "suppress-health-check": ["too_slow", "filter_too_much", "data_too_large"],
            "generation": {
                "max-examples": SCHEMA_EXAMPLES,
                "deterministic": True,
                "database": "none",
            },
            "phases": {"stateful": {"enabled": False}},
        }
    )
    return schemathesis.openapi.from_dict(steer_schema(fuzzed.openapi, fuzzed.cards), config=config)


def test_no_route_answers_5xx_to_schema_cases(fuzzed: Fuzzed, api_schema: Any) -> None:
    """Every operation of the schema, each phase (examples, coverage, fuzzing) as
    ``@schema.parametrize()`` would run it. ``schemathesis.pytest.from_fixture`` cannot be used:
    its parametrize renames pytest's node through ``Node._nodeid``, which pytest 9.2 no longer
    has; so this runs the same per-operation tests it builds (``get_all_tests``) in one test,
    every operation to the end, and reports each failing one."""

    def call(case: Any) -> None:
        fuzzed.check(case.call(timeout=60), case.as_curl_command())

    failures: list[str] = []
    tested: list[str] = []
    for result in get_all_tests(schema=api_schema, test_func=call, settings=None, given_kwargs={}):
        if isinstance(result, Err):  # an operation the schema defines badly
            failures.append(f"{result.err()}")
            continue
        operation, run = result.ok()
        tested.append(operation.label)
        try:
            run()
        except Exception as exc:  # every operation runs; each failure is reported below
            failures.append(f"{operation.label}:\n{exc}")
    assert "POST /forecast" in tested and "GET /models/{name}" in tested, tested
    assert not failures, "\n\n".join(failures)


# --- The semantic edges the schema cannot express ---------------------------------------------


def send(fuzzed: Fuzzed, path: str, body: dict[str, Any]) -> None:
    """POST ``body`` as JSON (``\\u`` escapes for surrogates; NaN and Infinity as Python writes
    them, which is not JSON) and check the answer."""
    content = json.dumps(body)
    response = httpx.post(
        fuzzed.server.url + path,
        content=content,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    fuzzed.check(response, f"POST {path} {content[:3000]}")


EDGE_SETTINGS = settings(
    max_examples=EDGE_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# Defects found before this test (issue 43), always sent besides the drawn cases.
KNOWN = [
    # windows with a query over the limit and a document that tokenizes to nothing
    (
        "/v1/rerank",
        {
            "model": DROP_IN_RERANKER,
            "query": "word " * 200,
            "documents": ["\u200b", "\x01"],
            "long_text": "windows",
        },
    ),
    # auto in a precision without measured figures
    ("/v1/rerank", {"query": "q", "documents": ["d"], "attention": "auto", "precision": "int8"}),
    (
        "/predict",
        {"model": DROP_IN_CLASSIFIER, "inputs": "x", "attention": "auto", "precision": "int8"},
    ),
    ("/encode", {"inputs": ["x"], "attention": "auto", "precision": "int8"}),
]


def test_no_route_answers_5xx_to_semantic_edges(fuzzed: Fuzzed) -> None:
    @EDGE_SETTINGS
    @given(request=edge_requests(fuzzed))
    def case(request: tuple[str, dict[str, Any]]) -> None:
        send(fuzzed, *request)

    for known in KNOWN:
        case = example(request=known)(case)
    case()


def test_steady_stream_succeeded_and_log_is_clean(fuzzed: Fuzzed) -> None:
    """Run last: the stream beside every case above succeeded, and nothing in the whole log is a
    traceback or an ERROR record."""
    fuzzed.load.stop()
    assert fuzzed.load.sent > 0
    assert not fuzzed.load.failures, "\n".join(fuzzed.load.failures[:10])
    problems = problems_in(Path(fuzzed.server.log_path).read_text())
    assert not problems, "\n\n".join(problems)
