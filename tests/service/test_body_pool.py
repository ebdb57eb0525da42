"""Large forecast bodies are parsed and validated in a helper process (``service.http.body_pool``):
the answers, refusals and error bodies are exactly those of parsing on the event loop."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from fastapi.testclient import TestClient

from service.http.body_pool import BodyParsePool, Parsed, parse_and_validate
from service.http.schemas.forecast import ForecastRequest
from tests.service.helpers import forecast_servable, hourly_series, make_app
from tests.service.pid_probe import PidProbe

CHANNELS = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]


@pytest.fixture(scope="module")
def servable(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return forecast_servable(tmp_path_factory.mktemp("forecaster"))


@pytest.fixture(scope="module")
def clients(servable: Any) -> Iterator[tuple[TestClient, TestClient, list[int]]]:
    """(helper process for every body over 1 kB, no helper), and the sizes the helper got."""
    offloaded = make_app([servable], body_parse_processes=1, body_parse_min_bytes=1024)
    inline = make_app([servable], body_parse_processes=0)
    with TestClient(offloaded) as a, TestClient(inline) as b:
        pool: BodyParsePool = offloaded.state.attnserve.body_pool
        sizes: list[int] = []
        parse = pool.parse

        async def counting(body: bytes, *args: Any) -> Parsed:
            sizes.append(len(body))
            return await parse(body, *args)

        pool.parse = counting  # type: ignore[method-assign]
        yield a, b, sizes


def _body(servable: Any, series: int = 4, rows: int = 200) -> dict[str, Any]:
    return {"model": servable.name, "series": [hourly_series(rows, seed=i) for i in range(series)]}


def _columns(servable: Any, rows: int = 200) -> dict[str, Any]:
    values = np.asarray(hourly_series(rows)["values"])
    columns = {name: values[:, c].tolist() for c, name in enumerate(CHANNELS)}
    return {
        "model": servable.name,
        "series": [{"start": "2017-01-01 00:00:00", "columns": columns}],
    }


def _base64_columns(servable: Any, rows: int = 200, bad: bool = False) -> dict[str, Any]:
    body = _columns(servable, rows)
    columns = body["series"][0]["columns"]
    for name, values in columns.items():
        columns[name] = base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()
    if bad:
        columns["OT"] = columns["OT"][:-4]  # 3 bytes short of the last value
    return body


def _variants(servable: Any) -> dict[str, bytes]:
    ok = _body(servable)
    ragged = copy.deepcopy(ok)
    ragged["series"][2]["values"][7] = [1.0, 2.0]
    text = copy.deepcopy(ok)
    text["series"][1]["values"][3][4] = "4.0"  # a number as a string: refused, not coerced
    extra = copy.deepcopy(ok)
    extra["series"][0]["colour"] = "blue"
    short = _body(servable, rows=10)
    nan = copy.deepcopy(ok)
    nan["series"][3]["values"][-1][0] = float("nan")
    cut = json.dumps(ok).encode()[:-3]
    return {
        "rows": json.dumps(ok).encode(),
        "columns": json.dumps(_columns(servable)).encode(),
        "base64 columns": json.dumps(_base64_columns(servable)).encode(),
        "bad base64 column": json.dumps(_base64_columns(servable, bad=True)).encode(),
        "horizon and options": json.dumps(
            {
                **ok,
                "horizon": 3,
                "attention": "performer",
                "attention_options": {"num_features": 64},
            }
        ).encode(),
        "ragged row": json.dumps(ragged).encode(),
        "number as string": json.dumps(text).encode(),
        "unknown field": json.dumps(extra).encode(),
        "too short": json.dumps(short).encode(),
        "NaN value": json.dumps(nan).encode(),
        "cut JSON": cut,
        "byte-order mark": b"\xef\xbb\xbf" + json.dumps(ok).encode(),
    }


@pytest.mark.parametrize(
    "name",
    [
        "rows",
        "columns",
        "base64 columns",
        "bad base64 column",
        "horizon and options",
        "ragged row",
        "number as string",
        "unknown field",
        "too short",
        "NaN value",
        "cut JSON",
        "byte-order mark",
    ],
)
def test_helper_answers_as_the_event_loop_does(
    clients: tuple[TestClient, TestClient, list[int]], servable: Any, name: str
) -> None:
    offloaded, inline, sizes = clients
    raw = _variants(servable)[name]
    assert len(raw) > 1024
    before = len(sizes)
    headers = {"content-type": "application/json"}
    a = offloaded.post("/forecast", content=raw, headers=headers)
    b = inline.post("/forecast", content=raw, headers=headers)
    assert sizes[before:] == [len(raw)]  # this body went to the helper
    assert (a.status_code, a.json()) == (b.status_code, b.json())
    expected = 200 if name in ("rows", "columns", "base64 columns", "horizon and options") else 422
    assert a.status_code == expected, a.text


def test_small_bodies_stay_on_the_event_loop(
    clients: tuple[TestClient, TestClient, list[int]], servable: Any
) -> None:
    offloaded, inline, sizes = clients
    small = json.dumps({"model": servable.name, "series": [hourly_series(5)]}).encode()
    assert len(small) < 1024
    before = len(sizes)
    a = offloaded.post("/forecast", content=small)
    b = inline.post("/forecast", content=small)
    assert sizes[before:] == []
    assert (a.status_code, a.json()) == (b.status_code, b.json())
    assert BodyParsePool(1, 1024).wants(b"x" * 1024) and not BodyParsePool(1, 1024).wants(b"x")
    assert not BodyParsePool(0, 0).wants(b"x" * 10_000)


def test_other_content_types_are_left_to_fastapi(
    clients: tuple[TestClient, TestClient, list[int]], servable: Any
) -> None:
    offloaded, inline, sizes = clients
    raw = json.dumps(_body(servable)).encode()
    before = len(sizes)
    a = offloaded.post("/forecast", content=raw, headers={"content-type": "text/plain"})
    b = inline.post("/forecast", content=raw, headers={"content-type": "text/plain"})
    assert sizes[before:] == []
    assert (a.status_code, a.json()) == (b.status_code, b.json()) and a.status_code == 422


def test_packed_request_revalidates_to_arrays() -> None:
    request = ForecastRequest.model_validate(
        {
            "model": "m",
            "series": [
                {"start": "2017-01-01", "values": [[1.0, 2.0], [3.0, 4.0]]},
                {"start": "2017-01-01", "values": [[1.0], [2.0, 3.0]]},  # ragged: stays a list
                {"start": "2017-01-01", "columns": {"a": [1.0, 2.0], "b": []}},
            ],
        }
    )
    packed = request.packed()
    again = ForecastRequest.model_validate(packed)
    first, ragged, columns = again.series
    assert isinstance(first.values, np.ndarray) and first.values.tolist() == [
        [1.0, 2.0],
        [3.0, 4.0],
    ]
    assert ragged.values == [[1.0], [2.0, 3.0]]
    assert columns.columns is not None
    assert [c.tolist() for c in columns.columns.values()] == [[1.0, 2.0], []]
    assert "horizon" not in packed and again.horizon is None


@pytest.mark.parametrize(
    "values",
    [np.zeros((3, 7), dtype=np.float32), np.zeros(7), np.array([["a"] * 7], dtype=object)],
)
def test_only_float64_arrays_of_the_right_rank_pass_unchecked(values: np.ndarray) -> None:
    with pytest.raises(ValueError, match=r"valid list|valid number"):
        ForecastRequest.model_validate(
            {"model": "m", "series": [{"start": "2017-01-01", "values": values}]}
        )


def test_openapi_still_documents_lists_of_numbers(
    clients: tuple[TestClient, TestClient, list[int]],
) -> None:
    schema = clients[0].get("/openapi.json").json()["components"]["schemas"]["Series"]
    values = schema["properties"]["values"]["anyOf"][0]
    # A null in a row is a missing value (zero-shot forecasters take it; the others name it).
    number_or_null = {"anyOf": [{"type": "number"}, {"type": "null"}]}
    assert values == {"type": "array", "items": {"type": "array", "items": number_or_null}}


def test_bodies_are_parsed_in_another_process_that_is_replaced_when_it_dies() -> None:
    pool = BodyParsePool(processes=1, min_bytes=0)

    def parse(n: int) -> Any:
        return asyncio.run(pool.parse(b'{"n": %d}' % n, None, PidProbe)).body

    try:
        pool.start()
        helper = parse(1)["pid"]
        assert helper != os.getpid()
        os.kill(helper, signal.SIGKILL)
        # The request in hand is still answered (parsed here), the next goes to a new helper.
        assert parse(2) == {"n": 2, "pid": os.getpid()}
        after = parse(3)
        assert after["n"] == 3 and after["pid"] not in (helper, os.getpid())
    finally:
        pool.close()


def test_helper_refusals_carry_locations_under_the_body() -> None:
    parsed = parse_and_validate(b'{"n": "1"}', None, PidProbe)
    assert parsed.body is None and parsed.errors is not None
    assert [e["loc"] for e in parsed.errors] == [("body", "n")]
    assert "input" not in parsed.errors[0]
    broken = parse_and_validate(b'{"n": 1', None, PidProbe)
    assert broken.json_error is not None and broken.json_error[1] > 0
    gzip = parse_and_validate(b'{"n": 1}', "gzip", PidProbe)
    assert gzip.json_error is not None and "Content-Encoding" in gzip.json_error[0]


def test_a_pool_that_cannot_start_turns_itself_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from concurrent.futures.process import BrokenProcessPool

    pool = BodyParsePool(processes=1, min_bytes=0)

    class Broken:
        def submit(self, *_: Any) -> Any:
            raise BrokenProcessPool("helper died at start")

        def shutdown(self, **_: Any) -> None:
            pass

    monkeypatch.setattr(pool, "_pool", lambda: Broken())
    pool.start()
    assert not pool.enabled and not pool.wants(b"x" * 10)
    assert "parsed on the event loop" in caplog.text


def test_pool_helpers_stop_with_the_app(servable: Any, tmp_path: Path) -> None:
    app = make_app([servable], body_parse_processes=1)
    with TestClient(app):
        pool: BodyParsePool = app.state.attnserve.body_pool
        executor = pool._executor
        assert executor is not None
        processes = list(executor._processes.values())  # type: ignore[union-attr]
        assert len(processes) == 1 and processes[0].is_alive()
    processes[0].join(timeout=10)
    assert not processes[0].is_alive()


def test_helpers_exit_when_their_server_is_killed(tmp_path: Path) -> None:
    # A server process (here: a bare interpreter holding a started pool) SIGKILLed: its helper
    # must not stay behind as an orphan.
    script = tmp_path / "server.py"
    script.write_text(
        "import asyncio, sys, time\n"
        "from service.http.body_pool import BodyParsePool\n"
        "from tests.service.pid_probe import PidProbe\n"
        "if __name__ == '__main__':\n"
        "    pool = BodyParsePool(1, 0)\n"
        "    pool.start()\n"
        "    print(asyncio.run(pool.parse(b'{\"n\": 1}', None, PidProbe)).body['pid'], flush=True)\n"
        "    time.sleep(60)\n"
    )
    root = Path(__file__).resolve().parents[2]
    server = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        assert server.stdout is not None
        helper = psutil.Process(int(server.stdout.readline()))
    finally:
        server.kill()
        server.wait()
    _, alive = psutil.wait_procs([helper], timeout=10)
    assert not alive, "the helper outlived its server"
