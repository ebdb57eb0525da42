"""What a long-history forecast request costs over its own inference, through HTTP.

    python -m benchmarks.forecast.overhead                      # 2,048 x 7, ETTm1, probsparse

One ``attnserve serve`` process (only ``--model``, ``--threads`` torch threads);
per client library (``--clients``: ``http.client``, the leanest, so the figure is the
server's and the transport's, and ``httpx.Client``, which adds its own time) one keep-alive
connection sending one ETTm1 test-split window per request, one at a time, in each payload of
:data:`FORMATS`. Per request: the round trip (sent to the last byte read, the body not decoded)
and the server's ``x-inference-time-ms`` (the batch's model call) and ``x-queue-time-ms``; the
overhead is the round trip minus the inference time (HTTP, parsing, validation, the
forecaster's checks and calendar features, hand-offs, the response). p50/p95 over
``--requests`` per payload and server after ``--warmup``, in turns of ``--block`` (every
payload each turn), so a busy spell of a shared host lands on all alike. Writes ``benchmarks/results/forecast-overhead.md``.
``--smoke``: 4 requests per payload, one client.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.forecast.common import KeepAlive, request_body, test_windows
from benchmarks.harness import cli
from benchmarks.harness.process import ServerProcess, attnserve
from benchmarks.harness.report import RESULTS, Report
from benchmarks.harness.timing import percentile
from models.informer.checkpoint import shipped_dirs

# The table's payload labels and the request form each one is (benchmarks.forecast.common).
FORMATS = {
    "rows + timestamps": "rows",
    "columns + start": "columns",
    "base64 columns + start": "base64",
}
CLIENTS = ("http.client", "httpx")


@dataclass
class Samples:
    """Per request: the client's round trip, the server's inference and queue time (ms)."""

    client: list[float] = field(default_factory=list)
    inference: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)

    def add(self, client_ms: float, headers: dict[str, str]) -> None:
        """Record one request."""
        self.client.append(client_ms)
        self.inference.append(float(headers["x-inference-time-ms"]))
        self.queue.append(float(headers["x-queue-time-ms"]))

    def cells(self) -> list[str]:
        """Round trip, inference and queue p50, overhead p50 and p95 (ms), as table cells."""
        over = [c - i for c, i in zip(self.client, self.inference, strict=True)]
        return [
            f"{percentile(self.client, 50):.1f}",
            f"{percentile(self.inference, 50):.1f}",
            f"{percentile(self.queue, 50):.2f}",
            f"{percentile(over, 50):.2f}",
            f"{percentile(over, 95):.2f}",
        ]


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
    p = cli.parser(
        __doc__,
        cli.threads(1, "the server's torch threads"),
        cli.names("--clients", CLIENTS, "client libraries, each its own connection", CLIENTS),
        cli.out(RESULTS / "forecast-overhead.md"),
    )
    p.add_argument("--model", default="informer-ettm1-h96-c2048")
    p.add_argument("--attention", default="probsparse")
    p.add_argument("--requests", type=int, default=300, help="measured requests per format")
    p.add_argument("--block", type=int, default=10, help="requests per turn")
    p.add_argument("--warmup", type=int, default=10, help="unmeasured requests per format")
    p.add_argument("--log-dir", default="/tmp")
    args = cli.parse(p, argv, requests=4, block=2, warmup=1, clients=["http.client"])
    channels, histories = test_windows(shipped_dirs()[args.model], 16)
    bodies = {
        label: [
            request_body(*h, channels, form, model=args.model, attention=args.attention)
            for h in histories
        ]
        for label, form in FORMATS.items()
    }
    report = Report("benchmarks.forecast.overhead", argv)
    servers = {
        "attnserve": attnserve(
            [args.model], args.threads, 32, Path(args.log_dir) / "overhead-0.log"
        )
    }
    try:
        for server in servers.values():
            server.wait_ready()
        got = measure(servers, args, bodies)
    finally:
        for server in servers.values():
            server.stop()
    report.add(
        f"{args.model}, attention {args.attention}; per server one keep-alive connection per "
        f"client library, one request at a time, {args.requests} requests per payload, client "
        f"and server in turns of {args.block} (every combination each turn); servers: "
        f"{args.threads} torch thread(s), all running throughout. Overhead = client round trip "
        "- the server's x-inference-time-ms, per request."
    )
    report.table(
        ["client", "server", "payload", "bytes", "round trip ms p50", "inference ms p50",
         "queue ms p50", "overhead ms p50", "overhead ms p95"],
        [
            [kind, label, fmt, f"{len(bodies[fmt][0]):,}", *got[label, kind, fmt].cells()]
            for kind in args.clients
            for label in servers
            for fmt in FORMATS
        ],
        "lllrrrrrr",
    )  # fmt: skip
    report.write(args.out, "Forecast request overhead over inference (2,048 x 7 history)")


if __name__ == "__main__":
    main()
