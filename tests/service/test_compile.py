"""torch.compile behind the settings: shape buckets, warm-up before ready, same numbers.

The graphs are traced with the ``aot_eager`` compiler (dynamo + AOT autograd, no code
generation), which checks everything the server owns — tracing through every attention
backend, padding to buckets, warm-up covering every shape — in seconds on CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from models.compile import bucket_for, pad_rows
from service.engine.servables.forecast import ForecastServable
from tests.service.helpers import (
    TINY_FORECAST,
    hourly_series,
    make_app,
    tiny_encoder,
    tiny_forecaster,
)


def test_bucket_for_and_pad_rows():
    assert [bucket_for(n, (1, 4, 16)) for n in (1, 2, 4, 5, 16, 17)] == [1, 4, 4, 16, 16, None]
    t = torch.arange(6.0).reshape(3, 2)
    padded = pad_rows(t, 5)
    assert padded.shape == (5, 2) and torch.equal(padded[3:], t[-1:].expand(2, 2))
    assert pad_rows(t, 3) is t


@pytest.fixture
def forecaster(tmp_path: Path):
    return tiny_forecaster(tmp_path / "tiny")


@pytest.mark.parametrize("backend", ["full", "flash", "probsparse", "performer", "nystrom"])
def test_compiled_forecaster_matches_eager_and_never_recompiles(forecaster, backend):
    torch._dynamo.reset()
    series = [hourly_series(30, seed=i) for i in range(5)]
    windows = [forecaster.prepare(s["timestamps"], s["values"]) for s in series]
    eager = {n: forecaster.predict(windows[:n], backend) for n in (1, 3, 5)}
    forecaster.compile([backend], (1, 4), compiler="aot_eager")
    for n in forecaster.warmup_batch_sizes(backend):  # what the server's warm-up runs
        forecaster.predict(windows[:1] * n, backend)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for n in (1, 3, 5):  # 3 pads to bucket 4; 5 is over every bucket and runs eagerly
            got = forecaster.predict(windows[:n], backend)
            assert [f.timestamps for f in got] == [f.timestamps for f in eager[n]]
            torch.testing.assert_close(
                torch.tensor([f.values for f in got]),
                torch.tensor([f.values for f in eager[n]]),
                rtol=1e-5,
                atol=1e-5,
            )


def test_compiled_text_encoder_matches_eager():
    torch._dynamo.reset()
    encoder = tiny_encoder()
    ids = encoder.tokenize(["a short one", "a somewhat longer text to pad the batch", "x"], True)
    eager = encoder.embed(ids, "flash")
    encoder.compile(["flash"], compiler="aot_eager")
    torch.testing.assert_close(encoder.embed(ids, "flash"), eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(encoder.embed(ids[:1], "flash"), eager[:1], rtol=1e-5, atol=1e-5)


def test_text_encoder_compiles_with_inductor_on_cpu():
    """The default compiler generates code for the packed text forward with symbolic shapes
    (the fused oneDNN linear op stays out of the traced graph: Inductor cannot lower it)."""
    torch._dynamo.reset()
    encoder = tiny_encoder()
    ids = encoder.tokenize(["a short one", "a somewhat longer text to pad the batch", "x"], True)
    eager = encoder.embed(ids, "flash")
    encoder.compile(["flash"])  # inductor
    torch.testing.assert_close(encoder.embed(ids, "flash"), eager, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(encoder.embed(ids[1:], "flash"), eager[1:], rtol=1e-4, atol=1e-5)


def test_server_compiles_during_warm_up_then_serves(tmp_path: Path):
    torch._dynamo.reset()
    servable = ForecastServable(tiny_forecaster(tmp_path / TINY_FORECAST))
    app = make_app(
        [servable],
        compile_backends=["full"],
        compile_backend="aot_eager",
        batch_buckets=[1, 4],
        max_wait_ms=0,
    )
    with TestClient(app) as c:
        assert c.get("/readyz").status_code == 200
        assert servable.model.compiled_backends == {"full"}
        with torch._dynamo.config.patch(error_on_recompile=True):
            series = [hourly_series(24, seed=i) for i in range(3)]  # 3 rows: padded to 4
            body = {"model": TINY_FORECAST, "series": series, "attention": "full"}
            r = c.post("/forecast", json=body)
        assert r.status_code == 200, r.text
        assert r.headers["x-batch-size"] == "3"
        uncompiled = c.post("/forecast", json={**body, "attention": "flash"})
        assert uncompiled.status_code == 200, uncompiled.text
        assert servable.model.compiled_backends == {"full"}  # flash ran eagerly
    # flash is exact attention: the eager flash forecast is the compiled full one.
    torch.testing.assert_close(
        torch.tensor([f["values"] for f in uncompiled.json()["forecasts"]]),
        torch.tensor([f["values"] for f in r.json()["forecasts"]]),
        rtol=1e-5,
        atol=1e-5,
    )
