"""What the forecast benchmarks send: ETTm1 histories in each request format, and one lean
keep-alive client that reads the server's timing headers."""

from __future__ import annotations

import base64
import http.client
import json
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from models.informer.timefeatures import format_timestamps
from models.training.data.source import source_of

# How a history travels (the API's forms): one list per step with timestamps, one list per
# channel with the first timestamp or with every timestamp, or each channel's little-endian
# float32 bytes as base64 (the numbers rounded to float32, which the model computes in anyway).
FORMS = ("rows", "columns", "columns + timestamps", "base64")


def test_windows(model_dir: Path, n: int) -> tuple[list[str], list[tuple[list[str], Any]]]:
    """The model's channels and ``n`` consecutive test-split histories of its context, each as
    (timestamps, values[context, channels])."""
    meta = json.loads((Path(model_dir) / "config.json").read_text())
    source = source_of(meta)
    context = int(meta["context"])
    table, _splits, _scaler = source.load(context)
    first = source.borders["test"][0] - context
    out = []
    for i in range(n):
        rows = slice(first + i, first + i + context)
        out.append((format_timestamps(table.stamps[rows]), table.values[rows]))
    return list(source.columns), out


def series(stamps: list[str], values: Any, channels: list[str], form: str) -> dict[str, Any]:
    """One history as a request's series in ``form`` (one of :data:`FORMS`)."""
    values = np.asarray(values)
    if form == "rows":
        return {"timestamps": stamps, "values": values.tolist()}
    if form == "base64":
        columns: dict[str, Any] = {
            c: base64.b64encode(values[:, j].astype("<f4").tobytes()).decode()
            for j, c in enumerate(channels)
        }
    else:
        columns = {c: values[:, j].tolist() for j, c in enumerate(channels)}
    when = {"timestamps": stamps} if form == "columns + timestamps" else {"start": stamps[0]}
    return {**when, "columns": columns}


def request_body(
    stamps: list[str], values: Any, channels: list[str], form: str, **fields: Any
) -> bytes:
    """A ``/forecast`` body: the other ``fields`` (model, attention, ...), then one history as
    the series in ``form``."""
    return json.dumps({**fields, "series": [series(stamps, values, channels, form)]}).encode()


class KeepAlive:
    """One keep-alive connection, as lean as a client gets (``http.client``), or ``httpx``'s
    (``kind`` "httpx", which costs the client more time per request)."""

    def __init__(self, url: str, kind: str = "http.client") -> None:
        self.kind = kind
        host, port = url.removeprefix("http://").split(":")
        self._conn = http.client.HTTPConnection(host, int(port), timeout=120)
        self._httpx = httpx.Client(base_url=url, timeout=120) if kind == "httpx" else None

    def post(self, body: bytes) -> tuple[float, dict[str, str]]:
        """The round trip in ms (sent to the last byte read) and the response headers."""
        headers = {"content-type": "application/json"}
        if self._httpx is not None:
            sent = time.perf_counter()
            r = self._httpx.post("/forecast", content=body, headers=headers)
            r.read()
            done = time.perf_counter()
            status, got, text = r.status_code, dict(r.headers), r.text
        else:
            sent = time.perf_counter()
            self._conn.request("POST", "/forecast", body=body, headers=headers)
            response = self._conn.getresponse()
            raw = response.read()
            done = time.perf_counter()
            status, got = response.status, {k.lower(): v for k, v in response.getheaders()}
            text = raw.decode(errors="replace")
        if status != 200:
            raise RuntimeError(f"{status}: {text[:300]}")
        return (done - sent) * 1e3, got

    def close(self) -> None:
        """Close the connection(s)."""
        self._conn.close()
        if self._httpx is not None:
            self._httpx.close()
