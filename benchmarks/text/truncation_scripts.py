"""Truncating, and refusing over a token cap, 2 MB texts of one script each, per tokenizer
family: before and after the cut rules of :mod:`models.text.tokens.cuts` (issue 50 item 3).

    .venv/bin/python -m benchmarks.text.truncation_scripts --before REV [--out PATH]

Each text (CJK, Thai, newline-, tab-, NBSP- and ", "-separated words, one long word; none holds
a U+0020 after a letter, the only cut before) goes through the tiny tokenizers of
``tests/utils/tiny_tokenizers.py`` (WordPiece, byte-level BPE, ModernBERT's NFC + byte-level
BPE, XLM-R's NFKC + Unigram) with a 64-token limit:

- ``truncate``: ``tokenizer([text], truncate=True)``, the first 64 tokens;
- ``cap``: ``with_special_mask([text], max_tokens=2000)``, the windows request over its
  budget, refused (``OverTokenBudget``) once 2,000 tokens are counted.

``before`` runs the same measurements in the tree of ``--before`` (``git archive``, unpacked in
a temporary folder) with this virtualenv's interpreter; ``after`` in this checkout; the two
alternate for ``--rounds`` rounds, so load from other work falls on both. Times are the best,
over rounds, of 3 runs (1 when a run takes over 0.3 s) in milliseconds of wall time, one
process, one text at a time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SCRIPTS = {
    "CJK": "東京は日本の首都です" * 70_000,
    "Thai": "ภาษาไทยที่ใช้ในประเทศไทย" * 30_000,
    "newline": "value\n" * 350_000,
    "tab": "value\t" * 350_000,
    "NBSP": "value\u00a0" * 350_000,
    "comma-space": "value, " * 300_000,
    "one word": "abcdefghij" * 200_000,
}
FAMILIES = ("wordpiece", "bytelevel", "modernbert", "unigram")


def _best(work: Any) -> float:
    """Best wall milliseconds of up to three runs of ``work``."""
    times: list[float] = []
    while len(times) < 3:
        start = time.perf_counter()
        work()
        times.append(1000 * (time.perf_counter() - start))
        if times[-1] > 300:
            break
    return min(times)


def measure() -> dict[str, dict[str, float]]:
    """``{"family/script": {"truncate": ms, "cap": ms}}`` for the tree on ``sys.path``."""
    from models.text.tokens.bounded import OverTokenBudget
    from models.text.tokens.pairs import PairTokenizer
    from tests.utils.tiny_tokenizers import save_tokenizer

    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as root:
        for family in FAMILIES:
            tok = PairTokenizer(save_tokenizer(Path(root) / family, family), 64)
            tok(["warm up"], truncate=True)

            def refuse(text: str, tok: Any = tok) -> None:
                with contextlib.suppress(OverTokenBudget):
                    tok.with_special_mask([text], max_tokens=2_000)

            for name, text in SCRIPTS.items():
                out[f"{family}/{name}"] = {
                    "truncate": _best(lambda t=text, k=tok: k([t], truncate=True)),
                    "cap": _best(lambda t=text: refuse(t)),
                }
    return out


def _run_in(tree: Path) -> dict[str, dict[str, float]]:
    code = "import json, benchmarks.text.truncation_scripts as b; print(json.dumps(b.measure()))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _host() -> str:
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    model = next((x.split(":", 1)[1].strip() for x in lines if "model name" in x), "unknown CPU")
    return f"{model}, {os.cpu_count()} cores; load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="git revision measured as 'before'")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    parser.add_argument("--rounds", type=int, default=2, help="before/after runs, alternated")
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[2]
    load_before = _host()
    rev = subprocess.run(
        ["git", "rev-parse", "--short", args.before], cwd=here, capture_output=True, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", args.before], cwd=here, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        # The "before" tree runs this file's measurements on its own models/ and tests/.
        target = Path(tmp) / "benchmarks" / "text" / "truncation_scripts.py"
        target.write_text(Path(__file__).read_text())
        runs: dict[str, list[dict[str, dict[str, float]]]] = {"before": [], "after": []}
        for _ in range(args.rounds):  # alternated: load from other work falls on both
            runs["before"].append(_run_in(Path(tmp)))
            runs["after"].append(_run_in(here))
    before, after = (
        {k: {op: min(r[k][op] for r in rs) for op in rs[0][k]} for k in rs[0]}
        for rs in (runs["before"], runs["after"])
    )
    lines = [
        "# Truncating 2 MB texts of one script each, per tokenizer family (CPU)",
        "",
        f"Command: `.venv/bin/python -m benchmarks.text.truncation_scripts --before {args.before} "
        f"--rounds {args.rounds}`",
        "",
        f"Host: {load_before} (before the runs). Tiny tokenizers of "
        "`tests/utils/tiny_tokenizers.py`, limit 64 tokens; wall ms, best of up to 3 runs in "
        "each of the alternated rounds.",
        "`truncate`: `tokenizer([text], truncate=True)`. `cap`: `with_special_mask([text], "
        "max_tokens=2000)` (a windows request over its budget; WordPiece makes one `[UNK]` of "
        "a word without spaces, so its Thai and one-word texts are 3 tokens and not refused).",
        f"`before`: {args.before} ({rev}: one boundary, U+0020 after a letter or digit); "
        "`after`: this checkout (the cut rules of `models/text/tokens/cuts.py`).",
        "",
        "| family | script | truncate before → after ms | cap before → after ms |",
        "|---|---|---|---|",
    ]
    for key, now in after.items():
        family, script = key.split("/", 1)
        was = before[key]
        lines.append(
            f"| {family} | {script} | {was['truncate']:.0f} → {now['truncate']:.1f} "
            f"| {was['cap']:.0f} → {now['cap']:.1f} |"
        )
    lines += ["", f"Load average after: {_host().rsplit('load average ', 1)[1]}", ""]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
