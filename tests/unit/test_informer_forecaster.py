"""The servable forecaster: input validation, batched prediction, card, fallback reporting."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import numpy as np
import pytest
import torch

from models.attention import BACKENDS, AttentionError
from models.errors import ModelInputError
from models.informer import InformerForecaster
from models.informer.timefeatures import format_timestamps
from tests.utils.informer import hourly_series, tiny_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def forecaster(tmp_path_factory):
    path = tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "informer-tiny")
    return InformerForecaster.load(str(path))


def test_load_reads_config(forecaster):
    f = forecaster
    assert (f.name, f.context, f.horizon, f.label_len, f.freq) == ("informer-tiny", 24, 8, 12, "h")
    assert f.channels == ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]


def test_load_unknown_name_lists_shipped():
    with pytest.raises(FileNotFoundError, match="shipped models"):
        InformerForecaster.load("informer-nope")


def test_prepare_scales_last_context_rows(forecaster):
    stamps, values = hourly_series(40)
    w = forecaster.prepare(stamps, values)
    assert w.values.shape == (24, 7)
    np.testing.assert_allclose(
        forecaster.scaler.inverse(w.values.astype(np.float64)), values[-24:], rtol=1e-5
    )
    assert format_timestamps(w.last_timestamp) == [stamps[-1]]
    # The marks belong to the same last 24 rows: 2017-01-01 16:00 (a Sunday) to 01-02 15:00.
    first = datetime(2017, 1, 1, 16)
    expected = _hourly_marks([first + timedelta(hours=i) for i in range(24)])
    np.testing.assert_allclose(w.marks, expected, atol=1e-7)
    assert w.marks[0, 1] == 0.5 and w.marks[-1, 1] == -0.5  # Sunday, then Monday


def _bad(kind):
    stamps, values = hourly_series(30)
    if kind == "short":
        return stamps[:10], values[:10], "at least 24 rows"
    if kind == "count":
        return stamps[:-1], values, "timestamps but"
    if kind == "channels":
        return stamps, [r[:6] for r in values], "needs 7 values"
    if kind == "ragged":
        values[7] = values[7][:5]
        return stamps, values, "row 7 has 5 values"
    if kind == "nan":
        values[-3][2] = math.nan
        return stamps, values, "finite"
    if kind == "inf":
        values[-1][0] = math.inf
        return stamps, values, "finite"
    if kind == "huge":
        values[-2][6] = 1e12
        return stamps, values, "implausibly large"
    if kind == "text":
        values[-2][1] = "abc"
        return stamps, values, "numbers"
    if kind == "stamp":
        stamps[4] = "not a time"
        return stamps, values, "timestamp 4"
    if kind == "gap":
        del stamps[10]
        stamps.append("2099-01-01 00:00:00")
        return stamps, values, "regular"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind", ["short", "count", "channels", "ragged", "nan", "inf", "huge", "text", "stamp", "gap"]
)
def test_prepare_rejects_bad_input(forecaster, kind):
    stamps, values, match = _bad(kind)
    with pytest.raises(ModelInputError, match=match):
        forecaster.prepare(stamps, values)


def test_predict_batches_and_generates_future_timestamps(forecaster):
    s1, v1 = hourly_series(30, seed=1)
    s2, v2 = hourly_series(24, start="2018-03-01 05:00:00", seed=2)
    w1, w2 = forecaster.prepare(s1, v1), forecaster.prepare(s2, v2)
    both = forecaster.predict([w1, w2])
    assert len(both) == 2
    assert both[1].timestamps[0] == "2018-03-02 05:00:00"
    assert len(both[0].timestamps) == 8 and len(both[0].values[0]) == 7
    alone = forecaster.predict([w2])[0]
    np.testing.assert_allclose(alone.values, both[1].values, rtol=1e-5, atol=1e-5)
    short = forecaster.predict([w1], horizon=3)[0]
    assert len(short.values) == 3
    np.testing.assert_allclose(short.values, both[0].values[:3], rtol=1e-6)
    assert forecaster.predict([]) == []


def test_predict_unscales_model_output(forecaster):
    s, v = hourly_series(24)
    w = forecaster.prepare(s, v)
    got = np.asarray(forecaster.predict([w], backend="full")[0].values)
    x = torch.from_numpy(w.values)[None]
    m = torch.from_numpy(w.marks)[None]
    f = forecaster
    # The 8 steps after 2017-01-01 23:00, worked out here rather than by the forecaster's helpers.
    future = [datetime(2017, 1, 2) + timedelta(hours=i) for i in range(f.horizon)]
    fut = torch.from_numpy(_hourly_marks(future))[None]
    xd = torch.cat([x[:, -f.label_len :], torch.zeros(1, f.horizon, 7)], dim=1)
    md = torch.cat([m[:, -f.label_len :], fut], dim=1)
    with torch.no_grad():
        raw = f.model(x, m, xd, md, "full")[0].double().numpy()
    np.testing.assert_allclose(got, f.scaler.inverse(raw), rtol=1e-5, atol=1e-5)


def _hourly_marks(stamps: list[datetime]) -> np.ndarray:
    """Hourly calendar features from Python's calendar, in Informer's ``timeF`` order and
    [-0.5, 0.5] scaling: hour of day, day of week (Monday 0), day of month, day of year."""
    rows = [
        [
            t.hour / 23.0 - 0.5,
            t.weekday() / 6.0 - 0.5,
            (t.day - 1) / 30.0 - 0.5,
            (t.timetuple().tm_yday - 1) / 365.0 - 0.5,
        ]
        for t in stamps
    ]
    return np.asarray(rows, dtype=np.float32)


@pytest.mark.parametrize("horizon", [0, 9, -1, 2.5, True])
def test_horizon_out_of_range(forecaster, horizon):
    s, v = hourly_series(24)
    with pytest.raises(ModelInputError, match="horizon"):
        forecaster.predict([forecaster.prepare(s, v)], horizon=horizon)


def test_check_attention(forecaster):
    assert forecaster.check_attention("probsparse", None) == {"factor": 5}
    assert forecaster.check_attention("probsparse", {"factor": 3}) == {"factor": 3}
    assert forecaster.check_attention("full", {}) == {}
    with pytest.raises(AttentionError):
        forecaster.check_attention("nystrom", {"num_landmarks": -4})
    with pytest.raises(AttentionError):
        forecaster.check_attention("sparse-magic", None)
    s, v = hourly_series(24)
    with pytest.raises(AttentionError):
        forecaster.predict([forecaster.prepare(s, v)], backend="performer", options={"bad": 1})


def test_layer_backends_and_card_report_fallbacks(forecaster):
    assert forecaster.layer_backends("nystrom") == {
        "encoder.0.self": "nystrom",
        "encoder.1.self": "nystrom",
        "decoder.0.self": "flash",
        "decoder.0.cross": "nystrom",
    }
    assert forecaster.layer_backends("probsparse")["decoder.0.cross"] == "flash"
    card = forecaster.card()
    assert card["task"] == "forecast" and card["default_attention"] == "probsparse"
    assert set(card["backends"]) == set(BACKENDS)
    assert "decoder.0.self" in card["backends"]["nystrom"]["fallbacks"]
    assert card["backends"]["full"]["fallbacks"] == {}
    assert card["backends"]["probsparse"]["options"]["factor"]["default"] == 5


def test_columns_and_start_give_the_very_window_of_rows_and_timestamps(forecaster):
    stamps, values = hourly_series(40, seed=4)
    rows = forecaster.prepare(stamps, values)
    columns = {c: [r[i] for r in values] for i, c in enumerate(forecaster.channels)}
    for window in (
        forecaster.prepare(start=stamps[0], columns=columns),
        forecaster.prepare(stamps, columns=columns),
        forecaster.prepare(start=stamps[0], values=values),
    ):
        assert np.array_equal(window.values, rows.values)
        assert np.array_equal(window.marks, rows.marks)
        assert window.last_timestamp == rows.last_timestamp


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "either 'values'"),
        ({"values": [], "columns": {}}, "either 'values'"),
        ({"columns": {"OT": [1.0]}}, "'timestamps'.*'start'"),
        ({"columns": {"OT": [1.0]}, "start": "2017-01-01", "timestamps": []}, "'start'"),
        ({"columns": [[1.0]], "start": "2017-01-01"}, "map each channel"),
        ({"values": "1,2,3", "start": "2017-01-01"}, "list of rows"),
    ],
)
def test_prepare_names_a_wrong_layout(forecaster, kwargs, match):
    with pytest.raises(ModelInputError, match=match):
        forecaster.prepare(**kwargs)


def test_column_values_must_be_numbers(forecaster):
    stamps, values = hourly_series(24)
    columns = {c: [r[i] for r in values] for i, c in enumerate(forecaster.channels)}
    columns["OT"][3] = "warm"
    with pytest.raises(ModelInputError, match="column values must be numbers"):
        forecaster.prepare(start=stamps[0], columns=columns)
