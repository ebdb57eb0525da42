"""What a long text costs through HTTP, script by script: truncation and the windows' budget
should read only what they keep, whatever separates the words.

    .venv/bin/python -m benchmarks.service.attacks_scripts [--repeats 5]

Issue 50 item 3: cutting a text used to need an ASCII space after a letter or digit, so 1 MB of
CJK with ``truncate: true`` took 1.3 s (4 ms with spaces), and a windows request over the budget
was refused only after tokenising all of it. Each text here is 2 MB (UTF-8) of one script or
separator; each is sent to all-MiniLM-L6-v2 (one worker) with ``truncate: true`` (target:
answered in ≤ 0.4 s) and with ``long_text: "windows"`` (over the compute budget: target,
refused in ≤ 0.1 s). The tokenizer-level table for every tokenizer family (WordPiece, byte-level
BPE, Unigram) is ``benchmarks/text/truncation_scripts.py``'s.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness import cli
from benchmarks.harness.process import attnserve
from benchmarks.harness.report import RESULTS, Report

OUT = RESULTS / "attacks-scripts-cpu.md"
MODEL = "all-MiniLM-L6-v2"
TARGET_BYTES = 2_000_000

# One unit of each script or separator, repeated to TARGET_BYTES.
UNITS = {
    "spaces": "value ",
    "CJK": "東京は日本の首都です",
    "Thai": "ภาษาไทยเป็นภาษาที่มีระดับเสียง",
    "newlines": "value\n",
    "tabs": "value\t",
    "NBSP": "value\u00a0",
    "commas": "value,",
    "comma-space": "value, ",
    "one word": "abcdefghij",
}


def text_of(unit: str, size: int = TARGET_BYTES) -> str:
    """``unit`` repeated to about ``size`` bytes of UTF-8."""
    return unit * max(1, size // len(unit.encode("utf-8")))


def timed_post(client: httpx.Client, path: str, body: dict[str, Any]) -> tuple[int, float]:
    """Status and wall seconds of one POST."""
    started = time.perf_counter()
    status = client.post(path, json=body).status_code
    return status, time.perf_counter() - started


def script_costs(base_url: str, repeats: int, size: int = TARGET_BYTES) -> list[dict[str, Any]]:
    """For each script: the median seconds (and statuses) of ``truncate: true`` and of a windows
    request over the budget, ``repeats`` times each."""
    rows = []
    with httpx.Client(base_url=base_url, timeout=120) as client:
        for name, unit in UNITS.items():
            text = text_of(unit, size)
            found: dict[str, Any] = {"script": name, "bytes": len(text.encode("utf-8"))}
            for label, extra in (
                ("truncate", {"truncate": True}),
                ("windows", {"long_text": "windows"}),
            ):
                seen = [
                    timed_post(client, "/encode", {"model": MODEL, "inputs": [text], **extra})
                    for _ in range(repeats)
                ]
                found[f"{label}_s"] = statistics.median(s for _, s in seen)
                found[f"{label}_status"] = sorted({status for status, _ in seen})
            rows.append(found)
    return rows


COLUMNS = ["text (2 MB)", "truncate: s", "status", "windows: s", "status"]


def table_rows(rows: list[dict[str, Any]]) -> list[list[object]]:
    """The table of :func:`script_costs`' figures."""
    return [
        [
            r["script"],
            f"{r['truncate_s']:.3f}",
            "/".join(map(str, r["truncate_status"])),
            f"{r['windows_s']:.3f}",
            "/".join(map(str, r["windows_status"])),
        ]
        for r in rows
    ]


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(__doc__, cli.repeats(5), cli.out(OUT))
    p.add_argument("--bytes", type=int, default=TARGET_BYTES)
    p.add_argument("--log", type=Path, default=Path("/tmp/attacks-scripts.log"))
    args = cli.parse(p, argv, repeats=1, bytes=20_000)
    report = Report("benchmarks.service.attacks_scripts", argv)
    server = attnserve([MODEL], threads=0, max_batch_size=32, log=args.log)
    try:
        server.wait_ready()
        rows = script_costs(server.url, args.repeats, args.bytes)
    finally:
        server.stop()
    report.table(COLUMNS, table_rows(rows))
    report.write(args.out, "A long text's cost, script by script (HTTP)", rows)


if __name__ == "__main__":
    main()
