"""The GPU check's one report: its shape (every step, each with a status, its time, its limit and
its figures under fixed keys), its Markdown, and the file each step writes for the runner.

The shape is the same in a dry run (CPU, CUDA steps skipped) and on a GPU: :func:`problems`
names anything missing, and the dry run, its test and the runner all call it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.harness.report import table

STEPS = ("install", "environment", "tests", "attention", "service")
TITLES = {
    "install": "Install (carried wheels, offline)",
    "environment": "Environment",
    "tests": "tests/gpu",
    "attention": "Attention kernels (FlashAttention-2 paper shapes)",
    "service": "The service on the device under load",
}
# What each step's figures always hold, whatever its status (empty lists and None included).
FIGURE_KEYS = {
    "install": ("wheels", "wheel_bytes", "budget_bytes", "target"),
    "environment": ("python", "torch", "cuda", "device", "driver", "packages", "service_import"),
    "tests": ("passed", "failed", "errors", "skipped", "failures", "skip_reasons"),
    "attention": ("device", "rows", "sources"),
    "service": ("device", "models", "windows", "metrics"),
}
STEP_KEYS = ("name", "title", "status", "seconds", "limit_s", "message", "figures")
REPORT_KEYS = ("mode", "command", "started", "host", "budget_s", "total_s", "steps")


def step_record(
    name: str,
    status: str,
    seconds: float,
    limit_s: float,
    message: str = "",
    figures: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One step's entry, its figures completed with every key the shape requires."""
    full = {key: None for key in FIGURE_KEYS[name]}
    full.update(figures or {})
    return {
        "name": name,
        "title": TITLES[name],
        "status": status,
        "seconds": round(seconds, 1),
        "limit_s": limit_s,
        "message": message,
        "figures": full,
    }


def save_result(path: Path, status: str, figures: dict[str, Any], message: str = "") -> None:
    """What a step's process hands the runner (written again as it goes, so a step stopped at
    its time limit still leaves what it had measured). Replaced atomically: the runner never
    reads half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"status": status, "message": message, "figures": figures}))
    os.replace(tmp, path)


def problems(report: dict[str, Any]) -> list[str]:
    """What the report lacks against its shape (empty when complete)."""
    out = [f"report: no {key!r}" for key in REPORT_KEYS if key not in report]
    steps = report.get("steps", {})
    for name in STEPS:
        step = steps.get(name)
        if step is None:
            out.append(f"no step {name!r}")
            continue
        out += [f"{name}: no {key!r}" for key in STEP_KEYS if key not in step]
        figures = step.get("figures") or {}
        out += [f"{name}: no figure {key!r}" for key in FIGURE_KEYS[name] if key not in figures]
    return out


def _num(x: float | None, spec: str = ".1f") -> str:
    return "—" if x is None else format(x, spec)


def _install(f: dict[str, Any]) -> list[str]:
    wheels = f["wheels"] or []
    size = f["wheel_bytes"] or 0
    budget = f["budget_bytes"]
    line = f"{len(wheels)} wheels, {size / 2**20:.1f} MiB" + (
        f" (budget for wheels {budget / 2**20:.1f} MiB)" if budget else ""
    )
    return [line + (f"; installed into `{f['target']}`" if f["target"] else ""), ", ".join(wheels)]


def _environment(f: dict[str, Any]) -> list[str]:
    device = f["device"] or {}
    rows = [
        ["python", f["python"]],
        ["torch", f["torch"]],
        ["CUDA (torch) / driver", f"{f['cuda'] or '—'} / {f['driver'] or '—'}"],
        ["device", device.get("name", "—")],
        ["memory", _num(device.get("memory_gib"), ".1f") + " GiB"],
        ["service import", f["service_import"]],
    ]
    packages = f["packages"] or {}
    missing = sorted(n for n, p in packages.items() if not p.get("version"))
    off = sorted(n for n, p in packages.items() if p.get("version") and not p.get("in_range"))
    rows.append(["packages", f"{len(packages) - len(missing)} of {len(packages)} present"])
    rows.append(["missing", ", ".join(missing) or "none"])
    rows.append(["outside pyproject's range", ", ".join(off) or "none"])
    return [table(["", ""], rows)]


def _tests(f: dict[str, Any]) -> list[str]:
    out = [
        f"passed {f['passed']}, failed {f['failed']}, errors {f['errors']}, skipped {f['skipped']}"
    ]
    if f["failures"]:
        out.append(table(["test", "message"], [[t, m] for t, m in f["failures"]]))
    if f["skip_reasons"]:
        out.append(table(["skipped", "why"], [[n, r] for r, n in f["skip_reasons"].items()]))
    return out


def _cell(row: dict[str, Any]) -> str:
    """A TFLOP/s figure, or the kind of status (``skipped``, ``refused``, ``OOM``): the reasons
    are in the JSON, too long for a table cell."""
    return _num(row["fwd_tflops"], ".0f") if row["status"] == "ok" else row["status"].split(":")[0]


def _attention(f: dict[str, Any]) -> list[str]:
    rows = f["rows"] or []
    out = [
        "TFLOP/s as the FlashAttention-2 paper counts them (Sec. 4.1): forward "
        "4·B·H·L²·D, halved with a causal mask, forward+backward 3.5x that. For the "
        "approximations the same count over their time is an *effective* rate (they do less "
        "work). Published columns are other people's measurements, not this run's:",
        "\n".join(f"- **{k}**: {v}" for k, v in (f["sources"] or {}).items()),
        "### flash",
    ]
    flash = [r for r in rows if r["backend"] == "flash"]
    out.append(
        table(
            ["dtype", "causal", "D", "L", "B×H", "fwd TFLOP/s", "fwd+bwd TFLOP/s",
             "published H100 fwd", "published H100 fwd+bwd", "published A100 fwd+bwd", "status"],
            [
                [r["dtype"], r["causal"], r["head_dim"], r["seq_len"],
                 f"{r['batch']}×{r['heads']}", _num(r["fwd_tflops"], ".0f"),
                 _num(r["fwd_bwd_tflops"], ".0f"), _num(r["published"]["fa2_h100_fwd"], ".0f"),
                 _num(r["published"]["fa2_h100_fwd_bwd"], ".0f"),
                 _num(r["published"]["fa2_a100_fwd_bwd"], ".0f"), r["status"]]
                for r in flash
            ],
            "lllrrrrrrrl",
        )
    )  # fmt: skip
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    shapes = list(
        dict.fromkeys((r["dtype"], r["causal"], r["head_dim"], r["seq_len"]) for r in rows)
    )
    by = {(r["backend"], r["dtype"], r["causal"], r["head_dim"], r["seq_len"]): r for r in rows}
    out.append("### every backend, forward TFLOP/s (effective for the approximations)")
    out.append(
        table(
            ["dtype", "causal", "D", "L", *backends],
            [[*shape, *(_cell(by[(b, *shape)]) if (b, *shape) in by else "—" for b in backends)]
             for shape in shapes],
            "lllr" + "r" * len(backends),
        )
    )  # fmt: skip
    return out


def _service(f: dict[str, Any]) -> list[str]:
    out = [f"device {f['device']}; models: {', '.join(f['models'] or [])}"]
    windows = f["windows"] or []
    out.append(
        table(
            ["request", "model", "attention", "clients", "req/s", "p50 ms", "p99 ms",
             "mean batch", "max batch", "errors"],
            [
                [w["path"], w["model"], w["attention"], w["clients"], _num(w["rps"]),
                 _num(w["p50_ms"]), _num(w["p99_ms"]), _num(w["mean_batch"], ".2f"),
                 w["max_batch"] if w["max_batch"] is not None else "—", w["errors"] or "none"]
                for w in windows
            ],
            "lllrrrrrrl",
        )
    )  # fmt: skip
    metrics = f["metrics"] or {}
    if metrics:
        out.append("/metrics after the load:")
        out.append(table(["metric", "value"], [[k, _num(v, "g")] for k, v in metrics.items()]))
    return out


RENDER = {
    "install": _install,
    "environment": _environment,
    "tests": _tests,
    "attention": _attention,
    "service": _service,
}


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: the header, a summary table, then one section per step."""
    lines = [
        f"# GPU check ({report['mode']})",
        f"Command: `{report['command']}`; {report['host']}; {report['started']} UTC; "
        f"{report['total_s']:.0f} s of a {report['budget_s']:.0f} s budget.",
        table(
            ["step", "status", "seconds", "limit s"],
            [
                [s["title"], s["status"], _num(s["seconds"]), _num(s["limit_s"], ".0f")]
                for s in (report["steps"][n] for n in STEPS if n in report["steps"])
            ],
            "llrr",
        ),
    ]
    for name in STEPS:
        step = report["steps"].get(name)
        if step is None:
            continue
        lines.append(f"## {step['title']}")
        lines.append(
            f"Status: **{step['status']}** in {step['seconds']} s (limit {step['limit_s']} s)"
        )
        if step["message"]:
            lines.append(step["message"])
        lines += [s for s in RENDER[name](step["figures"]) if s]
    return "\n\n".join(lines) + "\n"


def write(out: Path, report: dict[str, Any]) -> tuple[Path, Path]:
    """``report.md`` and ``report.json`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "report.md", out / "report.json"
    md.write_text(markdown(report))
    js.write_text(json.dumps(report, indent=2) + "\n")
    return md, js


def failed(report: dict[str, Any], steps: Sequence[str] = STEPS) -> list[str]:
    """The steps whose status is neither ``ok`` nor a skip."""
    return [
        n for n in steps
        if n in report["steps"]
        and not (report["steps"][n]["status"] == "ok"
                 or report["steps"][n]["status"].startswith("skipped"))
    ]  # fmt: skip
