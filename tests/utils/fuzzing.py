"""What the no-5xx property test (tests/service/test_no_server_errors.py) runs beside its cases:
the server's OpenAPI schema steered towards the loaded models, a steady stream of valid
requests that must all succeed, a watch on the server's log, and the check every response
passes (no 5xx; every non-2xx is the one error body).
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

PRECISIONS = ("float32", "bfloat16", "int8", "float16")

# A log line that means the server hit something it did not expect: Python's traceback header,
# or a record at ERROR/CRITICAL level in either format the server writes (ours:
# "<date> <time> ERROR [pid] attnserve: ...", uvicorn's: "ERROR:    Exception in ASGI application").
_LOG_PROBLEM = re.compile(
    r"Traceback \(most recent call last\)|^\S+ \S+ (ERROR|CRITICAL) \[|^(ERROR|CRITICAL):"
)


def _nullable(schema: dict[str, Any]) -> bool:
    return any(s.get("type") == "null" for s in schema.get("anyOf", ()))


def _choice(values: Sequence[Any], nullable: bool) -> dict[str, Any]:
    """A schema for one of ``values`` (or null)."""
    pick: dict[str, Any] = {"enum": list(values)}
    return {"anyOf": [pick, {"type": "null"}]} if nullable else pick


def backend_options(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A card's backends and their options' schemas: text cards list the backends, forecaster
    cards map each name to its entry."""
    entries = card.get("backends", ())
    if isinstance(entries, dict):
        return {name: entry.get("options", {}) for name, entry in entries.items()}
    return {entry["name"]: entry.get("options", {}) for entry in entries}


def _option_schemas(cards: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Every attention option any loaded model declares, each as its declared range *or* any
    value of its type: positive cases then send valid options as well as extreme ones."""
    options: dict[str, Any] = {}
    for card in cards:
        for backend in backend_options(card).values():
            for name, spec in backend.items():
                declared = {
                    k: v for k, v in spec.items() if k in ("type", "enum", "minimum", "maximum")
                }
                options[name] = {"anyOf": [declared, {"type": spec.get("type", "string")}]}
    return options


def steer_schema(schema: dict[str, Any], cards: list[dict[str, Any]]) -> dict[str, Any]:
    """A copy of the server's OpenAPI ``schema`` whose name-like fields name what the server has:
    ``model`` (in each route's body, required there, its ``x-model`` header or ``model`` query:
    the models whose card lists the route), ``attention`` (the backends and ``auto``), ``precision`` and the path
    parameter ``name``; and whose ``attention_options`` list the backends' options. As the schema
    says it, these fields are any string, so generated cases would nearly all stop at a 404
    before the code worth testing; steered, schemathesis' positive cases reach the models, and
    its negative ones still send everything outside the enums.
    """
    steered = copy.deepcopy(schema)
    components = steered.get("components", {}).get("schemas", {})
    all_names = [c["name"] for c in cards]
    backends = sorted({b for c in cards for b in backend_options(c)} | {"auto"})
    options = _option_schemas(cards)

    def steer_body(node: dict[str, Any], names: list[str]) -> dict[str, Any]:
        """``node`` (a body schema: a ref, a union of them, or an object) with its fields
        steered, each referenced model inlined as a copy: the same body model may serve routes
        of several tasks."""
        ref = node.get("$ref", "")
        if ref:
            return steer_body(copy.deepcopy(components.get(ref.rsplit("/", 1)[-1], {})), names)
        for union in ("anyOf", "oneOf"):
            if union in node:
                node[union] = [steer_body(branch, names) for branch in node[union]]
        props = node.get("properties", {})
        if "model" in props and props["model"].get("type") != "object":
            # Required here: with several models of a task, a body without one is refused
            # (negative cases still leave it out).
            props["model"] = {"enum": names}
            node["required"] = sorted({*node.get("required", ()), "model"})
        if "attention" in props:
            props["attention"] = _choice(backends, _nullable(props["attention"]))
        if "precision" in props:
            props["precision"] = _choice(PRECISIONS, _nullable(props["precision"]))
        if "attention_options" in props:
            props["attention_options"] = {
                "type": "object",
                "properties": options,
                # Unknown options are negative data: schemathesis sends them in its negative
                # cases, and positive cases carry only options some backend knows.
                "additionalProperties": False,
            }
        return node

    for path, operations in steered.get("paths", {}).items():
        names = [c["name"] for c in cards if path in c.get("routes", ())] or all_names
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", ()):
                where, name = parameter.get("in"), parameter.get("name")
                if (where, name) == ("path", "name"):
                    parameter["schema"] = {"enum": all_names}
                elif (where, name) in (("header", "x-model"), ("query", "model")):
                    parameter["schema"] = {"enum": names}
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" in content and "schema" in content["application/json"]:
                body = content["application/json"]["schema"]
                content["application/json"]["schema"] = steer_body(body, names)
    return steered


def error_body_problem(response: httpx.Response | Any) -> str | None:
    """Why ``response`` breaks the contract, or None: a status of 500 or more, or a non-2xx whose
    body is not ``{"error": {"type": str, "message": str}}``. Takes httpx's and requests'
    responses alike (schemathesis answers with its own ``Response``)."""
    status = int(response.status_code)
    if status >= 500:
        return f"server error {status}: {response.text[:2000]}"
    if status < 400:
        return None
    try:
        body = json.loads(response.content)
    except ValueError:
        return f"{status} with a body that is not JSON: {response.text[:500]!r}"
    error = body.get("error") if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or set(body) != {"error"}
        or not isinstance(error, dict)
        or not isinstance(error.get("type"), str)
        or not isinstance(error.get("message"), str)
    ):
        return f"{status} without the error body: {response.text[:500]}"
    return None


class LogWatch:
    """Reads what the server wrote to its log since the last look."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new_problems(self) -> list[str]:
        """Lines written since the last call that carry a traceback or an ERROR record."""
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        # Only whole lines: a record being written now is read on the next call.
        chunk = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(chunk)
        text = chunk.decode("utf-8", "replace")
        return problems_in(text)


def problems_in(text: str) -> list[str]:
    """The lines of a log ``text`` that carry a traceback or an ERROR record, each with the few
    lines after it (the exception)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if _LOG_PROBLEM.search(line):
            found.append("\n".join(lines[i : i + 30]))
    return found


def numbers(value: Any) -> list[float]:
    """Every number in a JSON value, depth first (base64 strings are left out)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in numbers(value[k])]
    if isinstance(value, list):
        return [x for item in value for x in numbers(item)]
    return []


@dataclass
class SteadyLoad:
    """Valid requests sent round-robin at about ``rate`` per second from a background thread
    while the property test runs. Each is first sent alone; every later answer must be a 200 with
    the same numbers (within ``atol``: batched beside other rows, float sums may round
    differently), since a bad request never harms the requests batched beside it."""

    url: str
    requests: list[tuple[str, dict[str, Any]]]
    rate: float = 8.0
    atol: float = 1e-4
    sent: int = 0
    failures: list[str] = field(default_factory=list)
    alone: list[list[float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SteadyLoad:
        """Record each request's answer alone, then start the stream."""
        with httpx.Client(base_url=self.url, timeout=60) as client:
            for path, body in self.requests:
                response = client.post(path, json=body)
                assert response.status_code == 200, f"POST {path}: {response.text}"
                self.alone.append(numbers(response.json()))
        self._thread = threading.Thread(target=self._run, name="steady-load", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            i = 0
            while not self._stop.is_set():
                k = i % len(self.requests)
                path, body = self.requests[k]
                i += 1
                try:
                    response = client.post(path, json=body)
                except httpx.HTTPError as exc:
                    self.failures.append(f"POST {path}: {type(exc).__name__}: {exc}")
                else:
                    self._judge(k, path, response)
                self.sent += 1
                self._stop.wait(1 / self.rate)

    def _judge(self, k: int, path: str, response: httpx.Response) -> None:
        if response.status_code != 200:
            self.failures.append(f"POST {path} -> {response.status_code}: {response.text[:500]}")
            return
        got, alone = numbers(response.json()), self.alone[k]
        if len(got) != len(alone) or not all(
            abs(a - b) <= self.atol for a, b in zip(got, alone, strict=True)
        ):
            self.failures.append(f"POST {path}: an answer other than alone: {response.text[:500]}")
