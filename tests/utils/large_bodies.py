"""The largest legal body of each route, and what the server does beside it.

:func:`large_requests` builds, per route and rule (truncate, windows, base64 forecast columns),
a body just under the server's ``max_body_bytes``; :func:`beside` sends one while probing
``/healthz`` every 10 ms and a one-text ``/encode`` back to back, and returns the latencies.
Shared by ``tests/service/test_large_requests.py`` and ``benchmarks/service/large_requests.py``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks.harness.timing import percentile

MAX_BODY_BYTES = 4 * 1024 * 1024  # Settings.max_body_bytes' default
_WORDS = [
    "the",
    "model",
    "reads",
    "long",
    "documents",
    "and",
    "returns",
    "one",
    "score",
    "for",
    "each",
    "of",
    "them",
]


@dataclass(frozen=True)
class Large:
    """One large request: a label, its route and its body."""

    label: str
    path: str
    body: bytes


def _text(chars: int) -> str:
    words = (_WORDS[i % len(_WORDS)] + str(i % 7) for i in range(chars // 4 + 1))
    return " ".join(words)[:chars]


def _fill(path: str, label: str, make: Any, limit: int) -> Large:
    """``make(chars)`` (a body holding a text of ``chars`` characters) at the largest size
    under ``limit`` bytes."""
    overhead = len(json.dumps(make(0)).encode())
    body = json.dumps(make(limit - overhead - 64)).encode()
    assert len(body) < limit, len(body)
    return Large(label, path, body)


def large_requests(
    encoder: str,
    reranker: str,
    forecaster: str,
    channels: list[str],
    limit: int = MAX_BODY_BYTES,
    embed_all_texts: int = 40,
) -> list[Large]:
    """The largest legal body per route and rule (each just under ``limit`` bytes), and the
    largest ``/embed_all`` answer: ``embed_all_texts`` texts cut at the encoder's limit (40
    MiniLM texts of 256 tokens: 3.9 million numbers, just under the cap on one answer)."""

    def encode(rule: str) -> Any:
        return lambda n: {"model": encoder, "inputs": [_text(n)], "long_text": rule}

    def rerank(rule: str) -> Any:
        return lambda n: {
            "model": reranker,
            "query": "which document is about long documents",
            "documents": [_text(n)],
            **({"truncate": True} if rule == "truncate" else {"long_text": "windows"}),
        }

    steps = (limit - 1024) * 3 // 4 // 4 // len(channels)  # float32, base64: 4/3 bytes per byte
    values = array("f", (float(i % 97) / 10 for i in range(steps)))
    column = base64.b64encode(values.tobytes()).decode()
    forecast = {
        "model": forecaster,
        "series": [{"start": "2017-01-01 00:00:00", "columns": dict.fromkeys(channels, column)}],
    }
    return [
        _fill("/encode", "truncate", encode("truncate"), limit),
        _fill("/encode", "windows", encode("windows"), limit),
        _fill("/v1/rerank", "truncate", rerank("truncate"), limit),
        _fill("/v1/rerank", "windows", rerank("windows"), limit),
        _fill(
            "/predict",
            "truncate",
            lambda n: {"model": reranker, "inputs": _text(n), "truncate": True},
            limit,
        ),
        Large("base64 columns", "/forecast", json.dumps(forecast).encode()),
        # TEI's routes whose answers outgrow their bodies: every token of a text of megabytes,
        # and token embeddings at the most numbers one answer may hold.
        _fill("/tokenize", "whole text", lambda n: {"model": encoder, "inputs": _text(n)}, limit),
        Large(
            "largest answer",
            "/embed_all",
            json.dumps(
                {"model": encoder, "inputs": [_text(4000)] * embed_all_texts, "truncate": True}
            ).encode(),
        ),
    ]


@dataclass
class Observed:
    """One large request and what the server answered beside it (milliseconds)."""

    large: Large
    status: int = 0
    error_type: str | None = None
    latency_ms: float = 0.0
    health_ms: list[float] = field(default_factory=list)
    encode_ms: list[float] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        """The figures for a table row."""
        return {
            "route": self.large.path,
            "rule": self.large.label,
            "body_mb": len(self.large.body) / 2**20,
            "status": self.status
            if self.error_type is None
            else f"{self.status} {self.error_type}",
            "latency_ms": self.latency_ms,
            "health_p50": statistics.median(self.health_ms),
            "health_p99": percentile(self.health_ms, 99),
            "health_max": max(self.health_ms),
            "encode_p50": statistics.median(self.encode_ms),
            "encode_max": max(self.encode_ms),
        }


async def beside(
    url: str, large: Large, encoder: str, at_least_s: float = 1.0, timeout_s: float = 60.0
) -> Observed:
    """Send ``large`` while probing ``/healthz`` every 10 ms and a one-text ``/encode`` of
    ``encoder`` back to back, for as long as it runs and at least ``at_least_s`` seconds."""
    seen = Observed(large)
    done = asyncio.Event()
    headers = {"content-type": "application/json"}
    async with (
        httpx.AsyncClient(base_url=url, timeout=timeout_s) as big,
        httpx.AsyncClient(base_url=url, timeout=timeout_s) as probes,
    ):

        async def send() -> None:
            started = time.perf_counter()
            response = await big.post(large.path, content=large.body, headers=headers)
            seen.latency_ms = (time.perf_counter() - started) * 1000
            seen.status = response.status_code
            if response.status_code >= 400:
                seen.error_type = response.json().get("error", {}).get("type")
            done.set()

        async def until_done(probe: Any) -> None:
            ends = time.monotonic() + at_least_s
            while not done.is_set() or time.monotonic() < ends:
                await probe()

        async def health() -> None:
            started = time.perf_counter()
            (await probes.get("/healthz")).raise_for_status()
            seen.health_ms.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.01)

        async def encode() -> None:
            started = time.perf_counter()
            body = {"model": encoder, "inputs": ["one short text"]}
            (await probes.post("/encode", json=body)).raise_for_status()
            seen.encode_ms.append((time.perf_counter() - started) * 1000)

        await asyncio.gather(send(), until_done(health), until_done(encode))
    return seen
