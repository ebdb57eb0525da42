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
``benchmarks/results/forecast-parsing.md``. ``--smoke``: 2 repeats.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from pydantic_core import from_json

from benchmarks.forecast.common import request_body
from benchmarks.harness import cli
from benchmarks.harness.report import RESULTS, Report
from benchmarks.harness.timing import median_ms
from models.informer import InformerForecaster
from models.informer.timefeatures import format_timestamps
from models.training.data.ett import data_dir
from models.training.data.table import load_series_csv
from service.http.schemas.forecast import ForecastRequest

# The table's payload labels and the request form each one is (benchmarks.forecast.common).
PAYLOADS = {
    "rows": "rows",
    "columns": "columns",
    "columns + timestamps": "columns + timestamps",
    "columns as base64": "base64",
}


def payloads(rows: int, channels: list[str], model: str) -> dict[str, bytes]:
    """The same history as four request bodies."""
    table = load_series_csv(data_dir() / "ETT" / "ETTm1.csv", "date", channels)
    values, stamps = table.values[-rows:], format_timestamps(table.stamps[-rows:])
    return {
        label: request_body(stamps, values, channels, form, model=model)
        for label, form in PAYLOADS.items()
    }


def main(argv: list[str] | None = None) -> None:
    p = cli.parser(
        __doc__, cli.repeats(30), cli.threads(1), cli.out(RESULTS / "forecast-parsing.md")
    )
    p.add_argument("--model", default="informer-ettm1-h96-c2048")
    p.add_argument("--rows", type=int, default=None, help="history rows (default: the context)")
    args = cli.parse(p, argv, repeats=2)
    torch.set_num_threads(args.threads)
    report = Report("benchmarks.forecast.parsing", argv)
    forecaster = InformerForecaster.load(args.model)
    rows = args.rows or forecaster.context
    bodies = payloads(rows, forecaster.channels, forecaster.name)
    request = ForecastRequest.model_validate_json(bodies["columns"])
    window = forecaster.prepare(**request.series[0].model_dump(exclude_none=True))
    flash_ms = median_ms(lambda: forecaster.predict([window], backend="flash"), 5)
    cells = [["*reference: one `flash` forward*", "", "", "", "", f"{flash_ms:.1f}", "100%"]]
    totals = {}
    for name, body in bodies.items():
        parsed = from_json(body)
        s = ForecastRequest.model_validate(parsed).series[0]
        kwargs: dict[str, Any] = {
            "timestamps": s.timestamps,
            "start": s.start,
            "values": s.values,
            "columns": s.columns,
        }
        json_ms = median_ms(partial(from_json, body), args.repeats)
        schema_ms = median_ms(partial(ForecastRequest.model_validate, parsed), args.repeats)
        prep_ms = median_ms(partial(forecaster.prepare, **kwargs), args.repeats)
        totals[name] = total = json_ms + schema_ms + prep_ms
        cells.append(
            [name, f"{len(body):,}", f"{json_ms:.2f}", f"{schema_ms:.2f}", f"{prep_ms:.2f}",
             f"{total:.2f}", f"{total / flash_ms:.1%}"]
        )  # fmt: skip
    report.add(
        f"{forecaster.name}: {rows} x {len(forecaster.channels)} history, "
        f"{args.threads} thread(s), median of {args.repeats}"
    )
    report.table(
        [
            "payload",
            "bytes",
            "JSON ms",
            "schema ms",
            "prepare ms",
            "total ms",
            "share of a flash forward",
        ],
        cells,
        "lrrrrrr",
    )
    report.add(
        f"`columns` costs {totals['columns'] / totals['rows']:.2f}x what `rows` costs "
        f"({totals['rows'] / totals['columns']:.1f}x cheaper); `columns as base64` "
        f"{totals['columns as base64'] / totals['rows']:.2f}x "
        f"({totals['rows'] / totals['columns as base64']:.1f}x cheaper)."
    )
    report.write(args.out)


if __name__ == "__main__":
    main()
