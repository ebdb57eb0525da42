"""Calendar features, timestamp checks, scaling and the ETTh1 split protocol."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from models.informer.data import (
    SPLIT_BORDERS,
    StandardScaler,
    WindowDataset,
    data_dir,
    load_etth1,
    make_splits,
)
from models.informer.timefeatures import (
    FEATURE_NAMES,
    check_regular,
    format_timestamps,
    future_index,
    parse_timestamps,
    time_features,
)
from tests.unit.test_informer_helpers import needs_data, one_thread  # noqa: F401


def test_hourly_calendar_features_known_values():
    # 2016-07-01 00:00 was a Friday (dayofweek 4), day 183 of a leap year.
    idx = pd.DatetimeIndex(["2016-07-01 00:00:00", "2016-12-31 23:00:00"])
    f = time_features(idx, "h")
    assert f.shape == (2, 4) and f.dtype == np.float32
    np.testing.assert_allclose(f[0], [-0.5, 4 / 6 - 0.5, -0.5, 182 / 365 - 0.5], atol=1e-6)
    np.testing.assert_allclose(f[1], [0.5, 5 / 6 - 0.5, 30 / 30 - 0.5, 365 / 365 - 0.5], atol=1e-6)


def test_calendar_features_stay_in_range_over_a_year():
    f = time_features(pd.date_range("2017-01-01", periods=24 * 366, freq="h"), "h")
    assert f.min() >= -0.5 and f.max() <= 0.5 + 1e-6


def test_timestamps_round_trip_and_future_steps():
    stamps = ["2017-10-24 22:00:00", "2017-10-24 23:00:00", "2017-10-25 00:00:00"]
    idx = parse_timestamps(stamps)
    assert format_timestamps(idx) == stamps
    assert format_timestamps(future_index(idx[-1], 2, "h")) == [
        "2017-10-25 01:00:00",
        "2017-10-25 02:00:00",
    ]
    # ISO 8601 with a "T" separator parses to the same instants.
    assert np.array_equal(parse_timestamps([s.replace(" ", "T") for s in stamps]), idx)
    # Other ISO 8601 forms take the general (pandas) parser to the same instants.
    assert np.array_equal(
        parse_timestamps(["2017-10-24 22:00", "2017-10-24T23", "2017-10-25"]), idx
    )


def test_future_index_of_many_windows_at_once():
    lasts = parse_timestamps(["2017-12-31 23:00:00", "2016-02-28 23:00:00"])
    got = future_index(lasts, 3, "h")
    assert got.shape == (2, 3)
    assert format_timestamps(got[1]) == [
        "2016-02-29 00:00:00",
        "2016-02-29 01:00:00",
        "2016-02-29 02:00:00",
    ]
    assert format_timestamps(got[0])[0] == "2018-01-01 00:00:00"


@pytest.mark.parametrize("freq", ["h", "t"])
def test_calendar_features_equal_pandas_fields(freq):
    # The integer arithmetic must agree with pandas' calendar over leap years and month ends.
    index = pd.date_range("2015-12-25", "2017-03-05", freq="h" if freq == "h" else "15min")
    fields = {
        "minute_of_hour": index.minute / 59.0,
        "hour_of_day": index.hour / 23.0,
        "day_of_week": index.day_of_week / 6.0,
        "day_of_month": (index.day - 1) / 30.0,
        "day_of_year": (index.day_of_year - 1) / 365.0,
    }
    expected = np.stack(
        [np.asarray(fields[n] - 0.5, dtype=np.float32) for n in FEATURE_NAMES[freq]], axis=1
    )
    np.testing.assert_array_equal(time_features(index, freq), expected)
    np.testing.assert_array_equal(
        time_features(parse_timestamps(format_timestamps(index)), freq), expected
    )


@pytest.mark.parametrize(
    ("stamps", "match"),
    [
        (["2017-01-01 00:00:00", "2017-01-01 02:00:00"], "regular"),
        (["2017-01-01 01:00:00", "2017-01-01 00:00:00"], "regular"),
        (["2017-01-01 00:30:00", "2017-01-01 01:30:00"], "on the hour"),
    ],
)
def test_irregular_timestamps_are_refused(stamps, match):
    with pytest.raises(ValueError, match=match):
        check_regular(parse_timestamps(stamps), "h")


@pytest.mark.parametrize(
    ("stamps", "match"),
    [
        (["2017-01-01 00:00:00", "yesterday-ish"], "timestamp 1"),
        (["2017-01-01 00:00:00", "2017-13-01 00:00:00"], "timestamp 1"),
        (["2017-01-01 00:00:00", ""], "timestamp 1"),
        (["2017-01-01 00:00:00", "NaT"], "timestamp 1"),
        (["2017-01-01 00:00:00+01:00", "2017-01-01 01:00:00+01:00"], "time zone"),
        (["2017-01-01 00:00:00Z", "2017-01-01 01:00:00Z"], "time zone"),
        (["2017-01-01 00:00:00.5", "2017-01-01 01:00:00.5"], "whole seconds"),
    ],
)
def test_unusable_timestamps_say_why(stamps, match):
    with pytest.raises(ValueError, match=match):
        parse_timestamps(stamps)


def test_scaler_round_trip():
    rng = np.random.default_rng(0)
    x = rng.normal(5.0, 3.0, size=(500, 7))
    s = StandardScaler.fit(x)
    z = s.transform(x)
    np.testing.assert_allclose(z.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(z.std(axis=0), 1, atol=1e-12)
    np.testing.assert_allclose(s.inverse(z), x, atol=1e-12)


def test_data_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNSERVE_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    monkeypatch.delenv("ATTNSERVE_DATA_DIR")
    assert data_dir() == Path(__file__).resolve().parents[2] / "data"


@needs_data
def test_split_protocol_on_etth1():
    index, raw = load_etth1()
    assert raw.shape == (17420, 7)
    seq, label, pred = 96, 48, 24
    splits, scaler = make_splits(seq)
    # Scaler fit on train rows only.
    np.testing.assert_allclose(scaler.mean, raw[:8640].mean(axis=0))
    np.testing.assert_allclose(scaler.std, raw[:8640].std(axis=0))
    # Val and test arrays start seq_len rows before their boundary.
    assert splits["train"].index[0] == index[0] and len(splits["train"].values) == 8640
    assert splits["val"].index[seq] == pd.Timestamp("2017-06-26 00:00:00")
    assert splits["test"].index[seq] == pd.Timestamp("2017-10-24 00:00:00")
    assert len(splits["test"].values) == SPLIT_BORDERS["test"][1] - SPLIT_BORDERS["test"][0] + seq
    test = WindowDataset(splits["test"], seq, label, pred)
    assert len(test) == 2880 - pred + 1  # every window, none dropped
    x, xm, y, ym = test[0]
    assert ym.shape == (label + pred, 4)
    assert x.shape == (seq, 7) and xm.shape == (seq, 4) and y.shape == (label + pred, 7)
    # The first target step is the first test row; the start token repeats the last history rows.
    np.testing.assert_allclose(y[label].numpy(), scaler.transform(raw[11520]), rtol=1e-5)
    np.testing.assert_array_equal(y[:label].numpy(), x[-label:].numpy())
    np.testing.assert_allclose(
        scaler.inverse(x.numpy().astype(np.float64)), raw[11424:11520], rtol=1e-5, atol=1e-5
    )
