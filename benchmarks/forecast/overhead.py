"""What a long-history forecast request costs over its own inference, through HTTP.

    python -m benchmarks.forecast.overhead                      # 2,048 x 7, ETTm1, probsparse
    python -m benchmarks.forecast.overhead --before /tmp/attn-before   # and an older checkout

One ``attnserve serve`` process (only ``--model``, ``--threads`` torch threads) per checkout,
and per server and client library one keep-alive connection sending one window per request,
one request at a time: ``http.client``, the leanest client, so the figure is the server's and
the transport's, and ``httpx.Client``, which adds that library's own time per request
(``--clients`` picks). Per payload format
the same ETTm1 test-split windows travel as

* ``rows + timestamps``: the README's row format (``timestamps`` + ``values``, one list per step);
* ``columns + start``: one list of numbers per channel and the first timestamp;
* ``base64 columns + start``: each channel's little-endian float32 bytes as base64.

Per request: the client's round trip (request sent to the response's last byte read; the body is
not decoded) and the server's own ``x-inference-time-ms`` (the batch's model call: windows
stacked, the forward pass, the forecast in original units) and ``x-queue-time-ms``. The overhead
is the round trip minus the inference time: HTTP, parsing, validation, the forecaster's checks
and calendar features, hand-offs and the response. p50/p95 over ``--requests`` requests per
payload and server after ``--warmup``, sent in turns of ``--block`` (every payload on every
server each turn), so a busy spell of a shared host lands on all of them alike.

``--before PATH`` (repeatable) also starts the server of another checkout (e.g. ``git archive <commit> |
tar -x -C PATH``) beside this one, measured the same way in the same turns. Writes
``benchmarks/results/forecast-overhead.md``.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.host import cpu_model
from benchmarks.service import ROOT, ServerProcess, load_average
from models.informer.checkpoint import shipped_dirs
from models.informer.timefeatures import format_timestamps
from models.training.source import source_of

RESULTS = ROOT / "benchmarks" / "results"
FORMATS = ("rows + timestamps", "columns + start", "base64 columns + start")
CLIENTS = ("http.client", "httpx")


def windows(model: str, n: int) -> dict[str, list[dict[str, Any]]]:
    """``n`` consecutive test-split histories of the model's context, per payload format."""
    meta = json.loads((shipped_dirs()[model] / "config.json").read_text())
    source = source_of(meta)
    context = int(meta["context"])
    table, _splits, _scaler = source.load(context)
    first = source.borders["test"][0] - context
    out: dict[str, list[dict[str, Any]]] = {f: [] for f in FORMATS}
    for i in range(n):
        rows = slice(first + i, first + i + context)
        values = table.values[rows]
        stamps = format_timestamps(table.stamps[rows])
        out["rows + timestamps"].append({"timestamps": stamps, "values": values.tolist()})
        out["columns + start"].append(
            {
                "start": stamps[0],
                "columns": {c: values[:, j].tolist() for j, c in enumerate(source.columns)},
            }
        )
        out["base64 columns + start"].append(
            {
                "start": stamps[0],
                "columns": {
                    c: base64.b64encode(values[:, j].astype("<f4").tobytes()).decode()
                    for j, c in enumerate(source.columns)
                },
            }
        )
    return out


class KeepAlive:
    """One keep-alive connection, as lean as a client gets (``http.client``), or ``httpx``'s
    (``kind`` "httpx", which costs the client more time per request)."""

    def __init__(self, url: str, kind: str) -> None:
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
        self._conn.close()
        if self._httpx is not None:
            self._httpx.close()


@dataclass
class Samples:
    """Per request: the client's round trip, the server's inference and queue time (ms)."""

    client: list[float] = field(default_factory=list)
    inference: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)

    def add(self, client_ms: float, headers: dict[str, str]) -> None:
        self.client.append(client_ms)
        self.inference.append(float(headers["x-inference-time-ms"]))
        self.queue.append(float(headers["x-queue-time-ms"]))

    def summary(self) -> dict[str, float]:
        over = [c - i for c, i in zip(self.client, self.inference, strict=True)]
        return {
            "client_p50": pct(self.client, 50),
            "inference_p50": pct(self.inference, 50),
            "queue_p50": pct(self.queue, 50),
            "overhead_p50": pct(over, 50),
            "overhead_p95": pct(over, 95),
            "requests": len(over),
        }


def pct(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def measure(
    servers: dict[str, ServerProcess], args: argparse.Namespace, bodies: dict[str, list[bytes]]
) -> dict[tuple[str, str, str], Samples]:
    """Per (server, client, format): the samples of ``--requests`` requests. Blocks of
    ``--block`` requests take turns: every format with every client on every server, round
    after round, so a busy spell of the host lands on all of them alike."""
    clients = {
        (label, kind): KeepAlive(s.url, kind)
        for label, s in servers.items()
        for kind in args.clients
    }
    got = {(*key, fmt): Samples() for key in clients for fmt in FORMATS}
    try:
        for client in clients.values():  # warm-up
            for fmt in FORMATS:
                for i in range(args.warmup):
                    client.post(bodies[fmt][i % len(bodies[fmt])])
        for turn in range(-(-args.requests // args.block)):
            for fmt in FORMATS:
                for key, client in clients.items():
                    for i in range(turn * args.block, (turn + 1) * args.block):
                        client_ms, headers = client.post(bodies[fmt][i % len(bodies[fmt])])
                        got[(*key, fmt)].add(client_ms, headers)
    finally:
        for client in clients.values():
            client.close()
    return got


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="informer-ettm1-h96-c2048")
    p.add_argument("--attention", default="probsparse")
    p.add_argument("--requests", type=int, default=300, help="measured requests per format")
    p.add_argument("--block", type=int, default=10, help="requests per turn")
    p.add_argument("--warmup", type=int, default=10, help="unmeasured requests per format")
    p.add_argument("--threads", type=int, default=1, help="the server's torch threads")
    p.add_argument(
        "--clients",
        nargs="+",
        choices=CLIENTS,
        default=list(CLIENTS),
        help="client libraries, each with its own connection",
    )
    p.add_argument(
        "--before",
        type=Path,
        action="append",
        default=[],
        help="also measure the server of this checkout (repeatable)",
    )
    p.add_argument("--log-dir", default="/tmp")
    p.add_argument("--out", type=Path, default=RESULTS / "forecast-overhead.md")
    args = p.parse_args(argv)
    series = windows(args.model, 16)
    bodies = {
        fmt: [
            json.dumps({"model": args.model, "attention": args.attention, "series": [s]}).encode()
            for s in items
        ]
        for fmt, items in series.items()
    }
    load0 = load_average()
    roots: dict[str, Path] = {}
    for before in args.before:
        commit = subprocess.run(
            ["git", "-C", str(before), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        roots[f"before ({commit or before.name})"] = before
    roots["after"] = ROOT
    servers = {
        label: ServerProcess(
            [args.model], args.threads, 32, Path(args.log_dir) / f"overhead-{i}.log", root=root
        )
        for i, (label, root) in enumerate(roots.items())
    }
    try:
        for server in servers.values():
            server.wait_ready()
        got = measure(servers, args, bodies)
    finally:
        for server in servers.values():
            server.stop()
    lines = [
        f"{args.model}, attention {args.attention}; per server one keep-alive connection per "
        f"client library, one request at a time, {args.requests} requests per payload, client "
        f"and server in turns of {args.block} (every combination each turn); servers: "
        f"{args.threads} torch thread(s), all running throughout; {cpu_model()}, "
        f"{len(os.sched_getaffinity(0))} cores; load average before {load0}, after "
        f"{load_average()} (other work shares this host). Overhead = client round trip - the "
        "server's x-inference-time-ms, per request.",
        "",
        "| client | server | payload | bytes | round trip ms p50 | inference ms p50 | "
        "queue ms p50 | overhead ms p50 | overhead ms p95 |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in args.clients:
        for label in servers:
            for fmt in FORMATS:
                r = got[label, kind, fmt].summary()
                lines.append(
                    f"| {kind} | {label} | {fmt} | {len(bodies[fmt][0]):,} | "
                    f"{r['client_p50']:.1f} | "
                    f"{r['inference_p50']:.1f} | {r['queue_p50']:.2f} | "
                    f"{r['overhead_p50']:.2f} | {r['overhead_p95']:.2f} |"
                )
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    flags = " --before <checkout of an older commit>" * len(args.before)
    args.out.write_text(
        "# Forecast request overhead over inference (2,048 x 7 history)\n\n"
        + text
        + f"\nRegenerate: `python -m benchmarks.forecast.overhead{flags}`\n"
    )


if __name__ == "__main__":
    main()
