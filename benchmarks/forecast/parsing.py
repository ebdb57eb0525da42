"""What a long history costs before the model sees it: JSON parsing, schema validation and the
forecaster's checks, against one ``flash`` forward of the same window.

    python -m benchmarks.forecast.parsing                       # 2,048 x 7, ETTm1 rows
    python -m benchmarks.forecast.parsing --rows 4096 --model informer-ettm1-h96-c2048

Four payloads carry the same history (the last ``rows`` rows of the shipped ETTm1 test split):
``rows`` (``timestamps`` + ``values``, one list per step), ``columns`` (``start`` + one list per
channel), ``columns + timestamps`` and ``columns as base64`` (each channel's float32 bytes,
base64: the numbers rounded to float32, which the model computes in anyway). Each is parsed exactly as the server does it
(:class:`~service.http.routes.fast_json.FastJSONRequest`'s pydantic-core reader, the
:class:`~service.http.schemas.forecast.ForecastRequest` model,
:meth:`InformerForecaster.prepare`); the reference row is the model's forward pass on one window
under ``flash`` (median of repeats, the same thread count). Writes
``benchmarks/results/forecast-parsing.md``.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from pydantic_core import from_json

from benchmarks.harness.report import RESULTS
from models.informer import InformerForecaster
from models.informer.timefeatures import format_timestamps
from models.training.data import data_dir
from models.training.table import load_series_csv
from service.http.schemas.forecast import ForecastRequest


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def payloads(rows: int, channels: list[str], model: str) -> dict[str, bytes]:
    """The same history as four request bodies."""
    table = load_series_csv(data_dir() / "ETT" / "ETTm1.csv", "date", channels)
    values = table.values[-rows:]
    stamps = format_timestamps(table.stamps[-rows:])
    columns = {c: values[:, i].tolist() for i, c in enumerate(channels)}
    bodies = {
        "rows": {"timestamps": stamps, "values": values.tolist()},
        "columns": {"start": stamps[0], "columns": columns},
        "columns + timestamps": {"timestamps": stamps, "columns": columns},
        "columns as base64": {
            "start": stamps[0],
            "columns": {
                c: base64.b64encode(values[:, i].astype("<f4").tobytes()).decode()
                for i, c in enumerate(channels)
            },
        },
    }
    return {k: json.dumps({"model": model, "series": [v]}).encode() for k, v in bodies.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="informer-ettm1-h96-c2048")
    p.add_argument("--rows", type=int, default=None, help="history rows (default: the context)")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=RESULTS / "forecast-parsing.md")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    forecaster = InformerForecaster.load(args.model)
    rows = args.rows or forecaster.context
    bodies = payloads(rows, forecaster.channels, forecaster.name)

    window = forecaster.prepare(
        **ForecastRequest.model_validate_json(bodies["columns"])
        .series[0]
        .model_dump(exclude_none=True)
    )
    flash_ms = _median_ms(lambda: forecaster.predict([window], backend="flash"), 5)
    lines = [
        f"{forecaster.name}: {rows} x {len(forecaster.channels)} history, "
        f"{args.threads} thread(s), median of {args.repeats}",
        "",
        "| payload | bytes | JSON ms | schema ms | prepare ms | total ms | share of a flash "
        "forward |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| *reference: one `flash` forward* | | | | | {flash_ms:.1f} | 100% |",
    ]
    totals = {}
    for name, body in bodies.items():
        parsed = from_json(body)
        request = ForecastRequest.model_validate(parsed)
        s = request.series[0]
        kwargs = {
            "timestamps": s.timestamps,
            "start": s.start,
            "values": s.values,
            "columns": s.columns,
        }
        json_ms = _median_ms(lambda body=body: from_json(body), args.repeats)
        schema_ms = _median_ms(
            lambda parsed=parsed: ForecastRequest.model_validate(parsed), args.repeats
        )
        prep_ms = _median_ms(lambda kwargs=kwargs: forecaster.prepare(**kwargs), args.repeats)
        total = json_ms + schema_ms + prep_ms
        totals[name] = total
        lines.append(
            f"| {name} | {len(body):,} | {json_ms:.2f} | {schema_ms:.2f} | {prep_ms:.2f} | "
            f"{total:.2f} | {total / flash_ms:.1%} |"
        )
    lines += [
        "",
        f"`columns` costs {totals['columns'] / totals['rows']:.2f}x what `rows` costs "
        f"({totals['rows'] / totals['columns']:.1f}x cheaper); `columns as base64` "
        f"{totals['columns as base64'] / totals['rows']:.2f}x "
        f"({totals['rows'] / totals['columns as base64']:.1f}x cheaper).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\nRegenerate: `python -m benchmarks.forecast.parsing`\n")


if __name__ == "__main__":
    main()
