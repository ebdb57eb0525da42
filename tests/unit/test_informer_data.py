"""Calendar features, timestamp checks, scaling and the ETTh1 split protocol."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from models.informer import timefeatures
from models.informer.scaler import StandardScaler
from models.informer.timefeatures import (
    check_regular,
    feature_names,
    format_timestamps,
    freq_step,
    future_index,
    infer_freq,
    parse_timestamps,
    step_freq,
    time_features,
)
from models.training.data.ett import SPLIT_BORDERS, WindowDataset, data_dir, load_etth1, make_splits
from tests.utils.informer import needs_data

pytestmark = pytest.mark.usefixtures("one_thread")


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


@pytest.mark.parametrize(
    "stamps",
    [
        ["2017-10-24 22:00:00", "2017-10-24 23:00"],  # one short: the general parser
        ["2017-10-24 22:00:00", "2017-10-24 23:00:00.5"],  # a fraction
        ["2017-10-24 22:00:00", "2017/10/24 23:00:00"],  # another separator
        ["2017-10-24 22:00:00", "\uff12017-10-24 23:00:00"],  # not ASCII
        ["2017-10-24 22:00:00", "2017-13-24 23:00:00"],  # canonical shape, no such month
        ["2017-10-24 22:00:00", "2017-10-24 23:00:00Z"],  # a time zone
        ["2017-10-24T22:00:00", "2017-10-24 23:00:00"],
        [],
    ],
)
def test_canonical_stamps_parse_as_the_general_parser_does(stamps):
    # The fast path takes only YYYY-MM-DD[ T]HH:MM:SS; everything else, and every refusal, is
    # the pandas parser's, as before it existed.
    def general(values: list[Any]) -> Any:
        try:
            return timefeatures._parse_with_pandas(values)
        except ValueError as exc:
            return str(exc)

    got: Any
    try:
        got = parse_timestamps(stamps)
    except ValueError as exc:
        got = str(exc)
    expected = general(stamps)
    if isinstance(expected, str):
        assert got == expected
    else:
        np.testing.assert_array_equal(got, expected)


def _calendar_by_datetime(stamp: datetime) -> list[float]:
    """The "t" (15-minute) features of one stamp from Python's own calendar, in Informer's
    ``timeF`` order and scaling (Informer2020 ``utils/timefeatures.py``): minute of hour,
    hour of day, day of week (Monday 0), day of month and day of year (both 0-based)."""
    return [
        stamp.minute / 59.0 - 0.5,
        stamp.hour / 23.0 - 0.5,
        stamp.weekday() / 6.0 - 0.5,
        (stamp.day - 1) / 30.0 - 0.5,
        (stamp.timetuple().tm_yday - 1) / 365.0 - 0.5,
    ]


def test_calendar_features_before_1970_and_in_batches():
    """Stamps before the epoch have negative seconds: the integer day and time-of-day arithmetic
    must floor, not truncate, or every field before 1970 is off by one."""
    # Known by hand: 1969-12-31 was a Wednesday (1970-01-01 a Thursday), day 365 of 1969.
    got = time_features(parse_timestamps(["1969-12-31 23:45:00", "1970-01-01 00:00:00"]), "t")
    np.testing.assert_allclose(
        got,
        [
            [45 / 59 - 0.5, 0.5, 2 / 6 - 0.5, 0.5, 364 / 365 - 0.5],
            [-0.5, -0.5, 3 / 6 - 0.5, -0.5, -0.5],
        ],
        atol=1e-7,
    )
    # Every 15 minutes over three weeks across the epoch, against Python's datetime.
    start, step = datetime(1969, 12, 20), timedelta(minutes=15)
    stamps = [start + i * step for i in range(96 * 21 + 1)]
    expected = np.asarray([_calendar_by_datetime(t) for t in stamps], dtype=np.float32)
    flat = time_features(np.asarray(stamps, dtype="datetime64[s]"), "t")
    np.testing.assert_array_equal(flat, expected)
    # A [windows, steps] batch of stamps gives each stamp the features it has alone.
    batch = np.asarray(stamps[: 96 * 4], dtype="datetime64[s]").reshape(4, 96)
    np.testing.assert_array_equal(time_features(batch, "t"), expected[: 96 * 4].reshape(4, 96, 5))


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


@pytest.mark.parametrize("freq", ["h", "t", "5min", "2h", "D", "7D", "30s"])
def test_calendar_features_equal_pandas_fields(freq):
    # The integer arithmetic must agree with pandas' calendar over leap years and month ends.
    index = pd.date_range("2015-12-25", "2017-03-05", freq=freq_step(freq))
    fields = {
        "second_of_minute": index.second / 59.0,
        "minute_of_hour": index.minute / 59.0,
        "hour_of_day": index.hour / 23.0,
        "day_of_week": index.day_of_week / 6.0,
        "day_of_month": (index.day - 1) / 30.0,
        "day_of_year": (index.day_of_year - 1) / 365.0,
    }
    expected = np.stack(
        [np.asarray(fields[n] - 0.5, dtype=np.float32) for n in feature_names(freq)], axis=1
    )
    np.testing.assert_array_equal(time_features(index, freq), expected)
    np.testing.assert_array_equal(
        time_features(parse_timestamps(format_timestamps(index)), freq), expected
    )


HOURLY = ("hour_of_day", "day_of_week", "day_of_month", "day_of_year")


@pytest.mark.parametrize(
    ("freq", "step", "names"),
    [
        # The two frequencies checkpoints already store keep exactly their features.
        ("h", pd.Timedelta(hours=1), HOURLY),
        ("t", pd.Timedelta(minutes=15), ("minute_of_hour", *HOURLY)),
        ("5min", pd.Timedelta(minutes=5), ("minute_of_hour", *HOURLY)),
        ("90min", pd.Timedelta(minutes=90), ("minute_of_hour", *HOURLY)),  # minutes vary
        ("2h", pd.Timedelta(hours=2), HOURLY),
        ("D", pd.Timedelta(days=1), HOURLY[1:]),
        ("7D", pd.Timedelta(days=7), HOURLY[1:]),
        ("30s", pd.Timedelta(seconds=30), ("second_of_minute", "minute_of_hour", *HOURLY)),
    ],
)
def test_any_fixed_step_is_a_model_frequency(freq, step, names):
    assert freq_step(freq) == step
    assert feature_names(freq) == names
    assert time_features(pd.date_range("2017-01-01", periods=3, freq=step), freq).shape == (
        3,
        len(names),
    )


def test_daily_features_known_values():
    # 2016-07-01 was a Friday (dayofweek 4), day 183 of a leap year; the hour is ignored.
    f = time_features(parse_timestamps(["2016-07-01 00:00:00", "2016-07-02 00:00:00"]), "D")
    np.testing.assert_allclose(f[0], [4 / 6 - 0.5, -0.5, 182 / 365 - 0.5], atol=1e-6)
    np.testing.assert_allclose(f[1], [5 / 6 - 0.5, 1 / 30 - 0.5, 183 / 365 - 0.5], atol=1e-6)


def test_five_minute_features_known_values():
    f = time_features(parse_timestamps(["2016-07-01 13:55:00"]), "5min")
    np.testing.assert_allclose(
        f[0], [55 / 59 - 0.5, 13 / 23 - 0.5, 4 / 6 - 0.5, -0.5, 182 / 365 - 0.5], atol=1e-6
    )


@pytest.mark.parametrize(
    ("freq", "match"),
    [
        ("M", "calendar-dependent"),
        ("ME", "calendar-dependent"),
        ("B", "calendar-dependent"),
        ("W", "calendar-dependent"),
        ("H", "did you mean 'h'"),
        ("fortnightly", "unknown freq"),
        ("0h", "positive whole number of seconds"),
        ("ms", "positive whole number of seconds"),
    ],
)
def test_frequencies_without_a_fixed_step_are_refused(freq, match):
    with pytest.raises(ValueError, match=match):
        freq_step(freq)
    with pytest.raises(ValueError, match=match):
        time_features(parse_timestamps(["2017-01-01 00:00:00"]), freq)


@pytest.mark.parametrize(
    ("step", "alias"),
    [("1h", "h"), ("15min", "15min"), ("90min", "90min"), ("1D", "D"), ("7D", "7D"), ("2h", "2h")],
)
def test_infer_freq_gives_the_canonical_alias(step, alias):
    index = pd.date_range("2017-01-01", periods=5, freq=pd.Timedelta(step))
    assert infer_freq(index) == alias == step_freq(pd.Timedelta(step))
    assert freq_step(alias) == pd.Timedelta(step)
    assert infer_freq(parse_timestamps(format_timestamps(index))) == alias


@pytest.mark.parametrize(
    ("stamps", "match"),
    [
        (["2017-01-01 00:00:00"], "at least two"),
        (["2017-01-01 01:00:00", "2017-01-01 00:00:00"], "must increase"),
        (["2017-01-01 00:00:00", "2017-01-01 01:00:00", "2017-01-01 03:00:00"], "rows 1, 2"),
    ],
)
def test_infer_freq_refuses_irregular_stamps(stamps, match):
    with pytest.raises(ValueError, match=match):
        infer_freq(parse_timestamps(stamps))


@pytest.mark.parametrize(
    ("stamps", "freq"),
    [
        (["2017-01-01 00:15:00", "2017-01-01 00:30:00"], "15min"),
        # Steps that do not divide a day have no grid: any start is fine.
        (["2017-01-01 09:00:00", "2017-01-08 09:00:00"], "7D"),
        (["2017-01-01 00:03:00", "2017-01-01 00:10:00"], "7min"),
    ],
)
def test_stamps_on_the_step_grid_pass(stamps, freq):
    check_regular(parse_timestamps(stamps), freq)


@pytest.mark.parametrize(
    ("stamps", "freq", "match"),
    [
        (["2017-01-01 00:10:00", "2017-01-01 00:25:00"], "15min", "whole steps of 0 days 00:15"),
        (["2017-01-01 09:00:00", "2017-01-02 09:00:00"], "D", "row 0"),
        # Irregular hourly stamps: a skipped step, a step back, a half-hour offset.
        (["2017-01-01 00:00:00", "2017-01-01 02:00:00"], "h", "regular"),
        (["2017-01-01 01:00:00", "2017-01-01 00:00:00"], "h", "regular"),
        (["2017-01-01 00:30:00", "2017-01-01 01:30:00"], "h", "on the hour"),
    ],
)
def test_irregular_or_off_grid_stamps_are_refused(stamps, freq, match):
    with pytest.raises(ValueError, match=match):
        check_regular(parse_timestamps(stamps), freq)


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
