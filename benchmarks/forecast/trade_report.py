"""The tables, summaries and plot of :mod:`benchmarks.forecast.trade`."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from typing import Any

from benchmarks.harness.report import Report, figure, table
from models.names import BACKEND_NAMES

# An approximate backend's speed-up over flash through HTTP should keep this share of its
# in-process speed-up (the bar: within 20 %).
KEEP_GAIN = 0.8
# The capacity an approximation within 10 % test MSE should buy over flash at 8 clients on the
# long-context models (issue 45 item 3).
CAPACITY_TARGET = 2.0
Row = dict[str, Any]


def median(xs: list[float]) -> float:
    """The median, NaN for no values."""
    return statistics.median(xs) if xs else float("nan")


def by_model(rows: list[Row]) -> Iterator[tuple[str, dict[str, Row]]]:
    """Each model with its rows by backend label, in the order measured."""
    for model in dict.fromkeys(r["model"] for r in rows):
        yield model, {r["backend"]: r for r in rows if r["model"] == model}


def vs_reference(r: Row, ref: Row) -> float:
    """``r``'s test MSE relative to ``ref``'s, minus 1; backends scored on different windows
    compare through the linear baseline on their own windows."""
    return (r["test_mse"] / r["linear_mse"]) / (ref["test_mse"] / ref["linear_mse"]) - 1


def gains(group: dict[str, Row]) -> dict[str, tuple[float, float]]:
    """Per backend of one model: its speed-up over ``flash`` through HTTP (p50 at 1 client)
    and in process (one window's predict)."""
    flash = group.get("flash")
    if flash is None:
        return {}
    return {
        name: (
            flash["p50_ms_1_client"] / r["p50_ms_1_client"],
            flash["in_process_ms"] / r["in_process_ms"],
        )
        for name, r in group.items()
    }


def cheapest_summary(
    rows: list[Row], default: dict[str, str], within: float = 0.10
) -> Iterator[str]:
    """Per model: the fastest approximate backend whose test MSE is within ``within`` of the
    default backend's (compared through the linear baseline on each one's own windows), against
    ``flash`` and ``full``."""
    for model, group in by_model(rows):
        ref, flash, full = group.get(default[model]), group.get("flash"), group.get("full")
        if ref is None or flash is None or full is None or not ref["test_mse"]:
            continue
        ok = [
            r
            for name, r in group.items()
            if name not in ("full", "flash", "auto")
            and r["test_mse"]
            and vs_reference(r, ref) <= within
        ]
        if not ok:
            continue
        best = min(ok, key=lambda r: r["p50_ms_1_client"])
        yield (
            f"- {model}: the fastest approximate backend with test MSE within {within:.0%} of "
            f"the default's is **{best['backend']}**, p50 {best['p50_ms_1_client']:.0f} ms: "
            f"{flash['p50_ms_1_client'] / best['p50_ms_1_client']:.2f}x faster than flash "
            f"({flash['p50_ms_1_client']:.0f} ms), "
            f"{full['p50_ms_1_client'] / best['p50_ms_1_client']:.1f}x faster than full "
            f"({full['p50_ms_1_client']:.0f} ms)."
        )


def capacity_summary(
    rows: list[Row], default: dict[str, str], within: float = 0.10, target: float = CAPACITY_TARGET
) -> Iterator[str]:
    """Per model: the approximate backend (or variant, or ``auto``) that serves the most
    requests/s at 8 clients with test MSE within ``within`` of the default backend's, against
    ``flash``'s requests/s and the ``target`` ratio, beside its one-request speed-up."""
    for model, group in by_model(rows):
        ref, flash = group.get(default[model]), group.get("flash")
        if ref is None or flash is None or not ref["test_mse"]:
            continue
        ok = [
            r
            for r in group.values()
            if r["approximate"] and r["test_mse"] and vs_reference(r, ref) <= within
        ]
        if not ok:
            continue
        best = max(ok, key=lambda r: r["requests_per_s_8_clients"])
        ratio = best["requests_per_s_8_clients"] / flash["requests_per_s_8_clients"]
        name = best["backend"] if best["backend"] != "auto" else f"auto → {best['ran']}"
        yield (
            f"- {model}: **capacity** — the most requests/s at 8 clients with test MSE within "
            f"{within:.0%} of the default's: **{name}**, "
            f"{best['requests_per_s_8_clients']:.1f} req/s against flash's "
            f"{flash['requests_per_s_8_clients']:.1f}: **{ratio:.2f}x** (target ≥ {target:g}x: "
            f"{'met' if ratio >= target else 'not met'}); one request alone it is "
            f"{flash['p50_ms_1_client'] / best['p50_ms_1_client']:.2f}x faster (server cores at "
            f"1 client: flash {flash['server_cores_1_client']:.2f}, "
            f"{name} {best['server_cores_1_client']:.2f})."
        )


def auto_summary(rows: list[Row]) -> Iterator[str]:
    """Per model: ``auto`` against the fastest fixed backend whose measured loss is within the
    same budget, and against ``flash``."""
    for r in rows:
        if r["backend"] != "auto":
            continue
        group = [g for g in rows if g["model"] == r["model"] and g["backend"] != "auto"]
        within = [g for g in group if (g["quality_loss"] or 0.0) <= r["budget"]]
        best = min(within, key=lambda g: g["p50_ms_1_client"], default=None)
        flash = next((g for g in group if g["backend"] == "flash"), None)
        if best is None or flash is None:
            continue
        yield (
            f"- {r['model']}: `auto` (max_quality_loss {r['budget']:g}) ran **{r['ran']}** "
            f"(`x-attention-choice: {r['choice']}`); p50 {r['p50_ms_1_client']:.0f} ms vs the "
            f"fastest fixed backend within the budget ({best['backend']}) "
            f"{best['p50_ms_1_client']:.0f} ms: {r['p50_ms_1_client'] / best['p50_ms_1_client']:.2f}x "
            f"its latency, {r['requests_per_s_8_clients'] / best['requests_per_s_8_clients']:.2f}x "
            f"its throughput at 8 clients; {flash['p50_ms_1_client'] / r['p50_ms_1_client']:.2f}x "
            "faster than flash."
        )


def _cells(model: str, r: Row, group: dict[str, Row], default: str) -> list[str]:
    """One backend's cells in the main table."""
    full, ref = group.get("full"), group.get(default)
    http, local = gains(group).get(r["backend"], (float("nan"), float("nan")))
    vs_full = full["p50_ms_1_client"] / r["p50_ms_1_client"] if full else float("nan")
    flash = group.get("flash")
    eight = (
        r["requests_per_s_8_clients"] / flash["requests_per_s_8_clients"] if flash else float("nan")
    )
    mse = r["test_mse"]
    vs = f"{vs_reference(r, ref):+.2%}" if ref and mse and ref["test_mse"] else "—"
    label = f"**{r['backend']}** (default)" if r["backend"] == default else r["backend"]
    if r["backend"] == "auto":
        label = f"auto (max_quality_loss {r['budget']:g}) → {r['ran']}"
    every = "" if r["stride"] == 1 else f" (every {r['stride']}th window)"
    return [
        model, label, f"{r['p50_ms_1_client']:.1f}", f"{r['overhead_p50_ms']:.1f}",
        f"{r['in_process_ms']:.1f}", f"{http:.2f}x", f"{local:.2f}x",
        f"{http / local:.0%}" if r["approximate"] else "", f"{vs_full:.1f}x",
        f"{r['requests_per_s_8_clients']:.2f}", f"**{eight:.2f}x**",
        f"{r['server_cores_1_client']:.2f} / {r['server_cores_8_clients']:.2f}",
        f"{r['peak_extra_mib']:.0f}",
        *([f"{mse:.4f}{every}", vs] if mse is not None else ["—", "—"]),
    ]  # fmt: skip


def main_table(rows: list[Row], default: dict[str, str]) -> str:
    """Every backend of every model, under the model's linear baseline."""
    cells = []
    for model, group in by_model(rows):
        lin = next(iter(group.values()))["linear_mse_all"]
        cells.append([model, "*linear baseline*", *[""] * 11, f"{lin:.4f}", ""])
        cells += [_cells(model, r, group, default[model]) for r in group.values()]
    columns = [
        "model", "backend", "p50 ms @1 client", "overhead ms", "in-process ms", "× flash @1",
        "× flash in-process", "kept", "× full", "req/s @8 clients", "× flash @8",
        "server cores @1 / @8", "peak extra MiB", "test MSE", "MSE vs default",
    ]  # fmt: skip
    return table(columns, cells, "ll" + "r" * 13)


def gain_summary(rows: list[Row]) -> Iterator[str]:
    """Per model: how much of each approximate backend's in-process speed-up over ``flash``
    survives HTTP (the bar: :data:`KEEP_GAIN`)."""
    for model, group in by_model(rows):
        speed = gains(group)
        kept = {
            name: speed[name][0] / speed[name][1]
            for name, r in group.items()
            if r["approximate"] and name in speed
        }
        if not kept:
            continue
        short = [b for b, k in kept.items() if k < KEEP_GAIN]
        worst = min(kept, key=lambda b: kept[b])
        yield (
            f"- {model}: the approximate backends keep {min(kept.values()):.0%}-"
            f"{max(kept.values()):.0%} of their in-process speed-up over flash through HTTP "
            f"(least: {worst}, {speed[worst][0]:.2f}x vs {speed[worst][1]:.2f}x); "
            + (
                f"under {KEEP_GAIN:.0%}: {', '.join(short)}."
                if short
                else f"every one within {1 - KEEP_GAIN:.0%} of its in-process gain."
            )
        )


def plot(rows: list[Row], path: Any) -> None:
    """Latency at 1 client against test MSE (relative to the linear baseline), one panel per
    model."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    with figure(path, len(models), (5 * len(models), 4)) as axes:
        for ax, (model, group) in zip(axes, by_model(rows), strict=True):
            scored = [r for r in group.values() if r["test_mse"] is not None]
            variants = [r for r in scored if r["backend"] not in (*BACKEND_NAMES, "auto")]
            for r in scored:
                y = r["test_mse"] / r["linear_mse"]  # same windows: comparable across strides
                if r in variants:  # unlabelled: they crowd the backends they vary
                    ax.scatter(r["p50_ms_1_client"], y, marker="x", color="grey")
                    continue
                ax.scatter(r["p50_ms_1_client"], y)
                name = r["backend"] if r["backend"] != "auto" else f"auto→{r['ran']}"
                ax.annotate(name, (r["p50_ms_1_client"], y), fontsize=8, rotation=20)
            if variants:
                ax.scatter([], [], marker="x", color="grey", label="option variants (table)")
            ax.axhline(1.0, ls="--", color="grey", label="linear baseline")
            ax.set_xscale("log")
            ax.set_xlabel("p50 latency at 1 client (ms, log)")
            ax.set_ylabel("test MSE / linear baseline's (same windows)")
            ax.set_title(model, fontsize=9)
            ax.legend(fontsize=8)


def write(
    report: Report,
    rows: list[Row],
    default: dict[str, str],
    loads: list[str],
    args: Any,
    repeats: int,
) -> None:
    """The page, its JSON and the plot, at ``args.out`` (.md, .json, .png); ``repeats``: the
    in-process timings per round."""
    how = "base64 float32 columns" if args.payload == "base64" else "columns as JSON numbers"
    report.add(
        "Two figures, not one: **capacity** (req/s @8 clients, × flash @8) is what a backend "
        "buys a server — the trade to choose by; **one-request latency** (p50 @1 client, × "
        "flash @1) is a separate column, and smaller, because flash alone spreads one request "
        "over every thread (server cores @1) while the approximations need fewer.",
        f"Through HTTP (`attnserve serve`, {args.workers or 'the default number of'} "
        f"process(es) with {args.threads} torch thread(s) each, clients on the same "
        f"machine, histories as {how}), {args.seconds:g} s per phase in {args.rounds} "
        "round-robin rounds (every backend in each round, so drift of the host hits all alike); "
        "p50 at 1 client: one keep-alive `http.client` connection; overhead: the median of "
        "each of those requests' latency minus the server's x-inference-time-ms; in-process: "
        "one window's `predict` in the benchmark process, same thread count, median of "
        f"{repeats} per round while the server idles; kept: the speed-up over flash "
        "through HTTP as a share of the in-process one (approximate backends). Peak memory = "
        "the server's resident memory above its level at the start of the backend's phases "
        "(the largest over the rounds). req/s @8 clients: the harness's raw-socket driver, 8 "
        "closed-loop keep-alive clients; server cores: the server's CPU seconds per wall "
        "second in the 1-client and 8-client phases. Test MSE from each checkpoint's "
        "quality.json.",
        main_table(rows, default),
        "\n".join(
            [
                *capacity_summary(rows, default),
                *gain_summary(rows),
                *cheapest_summary(rows, default),
                *auto_summary(rows),
            ]
        ),
    )
    report.add("Load average (1, 5, 15 min) at each round's start: " + "; ".join(loads))
    report.write(args.out.with_suffix(".md"), data=rows)
    plot(rows, args.out.with_suffix(".png"))
