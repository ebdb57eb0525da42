"""Any user's CSV: every refusal names the line and column, frequencies, split borders, scaling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from models.training.data import ett as data
from models.training.data.csv_file import DataError
from models.training.data.splits import SPLIT_PRESETS, make_splits, split_borders
from models.training.data.table import load_series_csv
from tests.utils.informer import needs_data

HEADER = "date,a,b\n"


def write(tmp_path: Path, text: str, name: str = "series.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def write_lines(tmp_path: Path, lines: list[str]) -> Path:
    """A CSV of :data:`HEADER` and ``lines`` (edited :func:`rows`), each ended by a newline."""
    return write(tmp_path, HEADER + "\n".join(lines) + "\n")


def rows(n: int, start: str = "2020-01-01 00:00:00", step: str = "1h") -> str:
    """``n`` regular CSV lines ``date,a,b`` (a = row number, b = 10 × row number)."""
    stamps = pd.date_range(start, periods=n, freq=pd.Timedelta(step))
    return "".join(f"{t:%Y-%m-%d %H:%M:%S},{i},{10 * i}\n" for i, t in enumerate(stamps))


def refused(path: Path, *parts: str, **kwargs) -> str:
    """Load ``path``, expect a DataError whose message holds every one of ``parts``."""
    with pytest.raises(DataError) as info:
        load_series_csv(path, **kwargs)
    message = str(info.value)
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"
    return message


# ---------------------------------------------------------------------------------- reading


def test_a_clean_file_loads_with_every_other_column(tmp_path):
    table = load_series_csv(write(tmp_path, HEADER + rows(5)))
    assert table.channels == ["a", "b"] and table.date_column == "date"
    assert table.values.shape == (5, 2) and table.values.dtype == np.float64
    np.testing.assert_array_equal(table.values[:, 1], [0, 10, 20, 30, 40])
    assert table.stamps.dtype == np.dtype("datetime64[s]") and len(table) == 5
    assert table.stamps[0] == np.datetime64("2020-01-01T00:00:00")
    assert table.freq == "h"


def test_columns_are_chosen_and_ordered_by_the_caller(tmp_path):
    path = write(
        tmp_path,
        "when,a,b,c\n" + "".join(f"{r.strip()},{i}\n" for i, r in enumerate(rows(3).splitlines())),
    )
    table = load_series_csv(path, date_column="when", columns=["c", "a"])
    assert table.channels == ["c", "a"] and table.date_column == "when"
    np.testing.assert_array_equal(table.values[:, 0], [0, 1, 2])
    np.testing.assert_array_equal(table.values[:, 1], [0, 1, 2])


def test_header_spaces_and_a_byte_order_mark_are_tolerated(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(("\ufeffdate, a ,b\n" + rows(3)).encode())
    assert load_series_csv(path).channels == ["a", "b"]


def test_blank_lines_at_the_end_are_ignored(tmp_path):
    assert len(load_series_csv(write(tmp_path, HEADER + rows(3) + "\n\n"))) == 3


def test_another_single_date_format_is_inferred(tmp_path):
    text = "date,a\n07/01/2016 00:00,1\n07/01/2016 01:00,2\n07/01/2016 02:00,3\n"
    table = load_series_csv(write(tmp_path, text))
    assert table.stamps[-1] == np.datetime64("2016-07-01T02:00:00") and table.freq == "h"


@pytest.mark.parametrize(
    ("step", "freq"), [("1h", "h"), ("15min", "15min"), ("1D", "D"), ("5min", "5min")]
)
def test_frequency_is_inferred(tmp_path, step, freq):
    assert load_series_csv(write(tmp_path, HEADER + rows(6, step=step))).freq == freq


def test_an_explicit_frequency_is_checked_and_kept(tmp_path):
    path = write(tmp_path, HEADER + rows(6, step="15min"))
    assert load_series_csv(path, freq="15min").freq == "15min"
    assert load_series_csv(path, freq="t").freq == "t"  # the legacy 15-minute alias
    refused(path, "the rows step 15min but freq 'h' (h) was given", "--freq 15min", freq="h")
    refused(path, "calendar-dependent", "--freq", freq="ME")


def test_a_missing_file(tmp_path):
    refused(tmp_path / "nope.csv", "nope.csv", "no such file")
    refused(tmp_path, "not a file")


def test_an_empty_file(tmp_path):
    refused(write(tmp_path, ""), "the file is empty")


def test_a_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("date,a\n2020-01-01 00:00:00,é\n".encode("latin-1"))
    refused(path, "not UTF-8", "save the file as UTF-8")


@pytest.mark.parametrize("body", ["", rows(1)])
def test_fewer_than_two_rows(tmp_path, body):
    refused(write(tmp_path, HEADER + body), "at least 2 rows")


def test_a_missing_date_column_lists_the_columns(tmp_path):
    path = write(tmp_path, "time,a,b\n" + rows(3))
    refused(path, "no date column 'date'", "'time', 'a', 'b'", "--date-column")


def test_a_missing_value_column_lists_the_columns(tmp_path):
    path = write(tmp_path, HEADER + rows(3))
    refused(path, "no column 'OT'", "'date', 'a', 'b'", "--columns", columns=["a", "OT"])
    refused(path, "'date' is the date column", columns=["date"])
    refused(path, "chosen twice", columns=["a", "a"])
    refused(path, "no value columns chosen", columns=[])


def test_header_problems(tmp_path):
    refused(write(tmp_path, "date,a,a\n" + rows(3)), "'a' appears twice", "columns 2 and 3")
    unnamed = ",date,a,b\n" + "".join(f"{i},{r}\n" for i, r in enumerate(rows(3).splitlines()))
    refused(write(tmp_path, unnamed), "column 1 has no name", "--columns")
    refused(write(tmp_path, "date\n" + "2020-01-01\n2020-01-02\n"), "no value columns besides")


@pytest.mark.parametrize(
    ("cell", "why"),
    [
        ("abc", "'abc' is not a number"),
        ("", "is empty"),
        ("NaN", "is 'NaN', a missing value"),
        ("n/a", "is 'n/a', a missing value"),
        ("inf", "'inf' is not a finite number"),
        ("1,5", "fields"),  # a decimal comma splits the line: the field count is wrong
    ],
)
def test_a_bad_value_names_line_column_and_text(tmp_path, cell, why):
    lines = rows(6).splitlines()
    lines[3] = lines[3].rsplit(",", 1)[0] + f",{cell}"  # data row 3: line 5 in an editor
    path = write_lines(tmp_path, lines)
    message = refused(path, "line 5", why)
    if cell != "1,5":
        assert "column 'b'" in message


def test_a_bad_value_reports_the_first_cell_and_counts_the_rest(tmp_path):
    lines = rows(6).splitlines()
    lines[4] = lines[4].split(",")[0] + ",x,1"  # line 6, column a
    lines[2] = lines[2].split(",")[0] + ",1,y"  # line 4, column b: first in the file
    refused(write_lines(tmp_path, lines), "line 4, column 'b'", "1 more")


def test_a_short_line_is_an_empty_cell(tmp_path):
    lines = rows(4).splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0]
    refused(write_lines(tmp_path, lines), "line 3, column 'b'", "fewer fields")


def test_a_blank_line_inside_the_data(tmp_path):
    lines = rows(4).splitlines()
    lines.insert(2, "")
    refused(write_lines(tmp_path, lines), "line 4 is blank")


def test_a_quoted_line_break(tmp_path):
    text = HEADER + rows(2) + '"2020-01-01\n02:00:00",1,2\n'
    refused(write(tmp_path, text), "line 4, column 'date'", "line breaks")


@pytest.mark.parametrize(
    ("stamp", "why"),
    [
        ("2020-01-01 0x:00:00", "'2020-01-01 0x:00:00' is not a date-time"),
        ("2020-13-01 02:00:00", "is not a date-time"),
        ("", "the date is empty"),
        ("2020-01-01 02:00:00+01:00", "time zone"),
        ("2020-01-01T02:00:00Z", "time zone"),
        ("2020-01-01 02:00:00.5", "fraction of a second"),
    ],
)
def test_a_bad_timestamp_names_line_and_text(tmp_path, stamp, why):
    lines = rows(4).splitlines()
    lines[2] = stamp + "," + lines[2].split(",", 1)[1]  # data row 2: line 4
    refused(write_lines(tmp_path, lines), "line 4", "column 'date'", why)


def test_duplicate_timestamps_name_both_lines(tmp_path):
    lines = rows(5).splitlines()
    lines[3] = lines[1].split(",")[0] + "," + lines[3].split(",", 1)[1]
    refused(write_lines(tmp_path, lines), "lines 3 and 5", "2020-01-01 01:00:00", "appear once")


def test_unsorted_timestamps(tmp_path):
    lines = rows(5).splitlines()
    lines[2], lines[3] = lines[3], lines[2]
    refused(
        write_lines(tmp_path, lines),
        "not in order",
        "line 5 (2020-01-01 02:00:00) comes after line 4 (2020-01-01 03:00:00)",
        "sort",
    )


def test_a_gap_names_both_lines_and_both_steps(tmp_path):
    lines = rows(8).splitlines()
    del lines[4]  # 04:00 missing: line 5 (03:00) -> line 6 (05:00)
    path = write_lines(tmp_path, lines)
    refused(
        path,
        "line 5 (2020-01-01 03:00:00) to line 6 (2020-01-01 05:00:00)",
        "a step of 2h, expected the file's usual step h",
        "1 irregular step",
        "fill the missing rows",
    )
    refused(path, "expected one step of freq 'h'", freq="h")


def test_calendar_months_are_refused_with_a_reason(tmp_path):
    stamps = pd.date_range("2020-01-01", periods=5, freq="MS")
    text = "date,a\n" + "".join(f"{t:%Y-%m-%d},{i}\n" for i, t in enumerate(stamps))
    refused(write(tmp_path, text), "calendar months vary in length")


def test_hourly_stamps_off_the_hour_are_refused(tmp_path):
    path = write(tmp_path, HEADER + rows(4, start="2020-01-01 00:30:00"))
    refused(path, "line 2", "2020-01-01 00:30:00", "not on the h grid")


# ---------------------------------------------------------------------------------- splits


def test_default_ratios_follow_the_custom_data_convention():
    # Autoformer / DLinear Dataset_Custom: int(0.7 n) train, int(0.2 n) test, val the rest.
    assert split_borders(1000, 96, 24) == {
        "train": (0, 700),
        "val": (700, 800),
        "test": (800, 1000),
    }
    assert split_borders(17420, 96, 24)["val"] == (12194, 17420 - 3484)


def test_ratios_summing_below_one_leave_the_tail_unused():
    assert split_borders(1000, 10, 5, ratios=[0.5, 0.1, 0.2]) == {
        "train": (0, 500),
        "val": (500, 600),
        "test": (600, 800),
    }


@pytest.mark.parametrize(
    ("ratios", "match"),
    [
        ([0.7, 0.2, 0.2], "sum to 1.1"),
        ([0.7, 0.0, 0.2], "positive"),
        ([0.7, -0.1, 0.2], "positive"),
        ([0.7, 0.3], "3 numbers"),
    ],
)
def test_bad_ratios_are_refused(ratios, match):
    with pytest.raises(DataError, match=match):
        split_borders(1000, 10, 5, ratios=ratios)


def test_too_few_rows_for_ratios_say_how_many_are_needed():
    with pytest.raises(DataError) as info:
        split_borders(100, 96, 24)
    message = str(info.value)
    assert "100 rows are too few" in message
    assert "train gets 70 rows but needs at least 120 (context + horizon)" in message
    need = int(message.split("need at least ")[1].split(" rows")[0])
    split_borders(need, 96, 24)  # exactly enough
    with pytest.raises(DataError, match="too few"):
        split_borders(need - 1, 96, 24)


def test_too_short_val_or_test_is_refused():
    with pytest.raises(DataError, match="val gets 10 rows but needs at least 24"):
        split_borders(10_000, 96, 24, borders=[5000, 5010, 6000])


@pytest.mark.parametrize(
    ("borders", "expected"),
    [
        ([700, 800, 1000], {"train": (0, 700), "val": (700, 800), "test": (800, 1000)}),
        ([100, 700, 800, 900], {"train": (100, 700), "val": (700, 800), "test": (800, 900)}),
    ],
)
def test_explicit_borders(borders, expected):
    assert split_borders(1000, 96, 24, borders=borders) == expected


@pytest.mark.parametrize(
    ("borders", "match"),
    [
        ([700, 800, 1001], r"outside the file's rows \[0, 1000\]"),
        ([-1, 700, 800, 900], "outside"),
        ([800, 700, 1000], "increase strictly"),
        ([700, 1000], "3 numbers"),
        ([0, 50, 800, 900], "train gets 50 rows but needs at least 120"),
    ],
)
def test_bad_borders_are_refused(borders, match):
    with pytest.raises(DataError, match=match):
        split_borders(1000, 96, 24, borders=borders)


def test_split_presets():
    assert split_borders(17420, 96, 24, preset="ett-hour") == {
        "train": (0, 8640),
        "val": (8640, 11520),
        "test": (11520, 14400),
    }
    assert split_borders(69680, 96, 24, preset="ett-minute") == {
        "train": (0, 34560),
        "val": (34560, 46080),
        "test": (46080, 57600),
    }
    with pytest.raises(DataError, match=r"'ett-minute' needs 57600 rows .* the file has 17420"):
        split_borders(17420, 96, 24, preset="ett-minute")
    with pytest.raises(DataError, match="unknown split preset"):
        split_borders(17420, 96, 24, preset="ett-day")
    with pytest.raises(DataError, match="not several"):
        split_borders(17420, 96, 24, preset="ett-hour", ratios=[0.7, 0.1, 0.2])
    with pytest.raises(DataError, match="val gets 2880 rows but needs at least 3000"):
        split_borders(17420, 96, 3000, preset="ett-hour")
    assert set(SPLIT_PRESETS) == {"ett-hour", "ett-minute"}


# ---------------------------------------------------------------------------------- scaling


def test_make_splits_prepends_the_look_back_and_fits_on_train_only(tmp_path):
    table = load_series_csv(write(tmp_path, HEADER + rows(100)))
    borders = split_borders(len(table), 8, 4)
    assert borders == {"train": (0, 70), "val": (70, 80), "test": (80, 100)}
    splits, scaler = make_splits(table, borders, seq_len=8)
    np.testing.assert_array_equal(scaler.mean, table.values[:70].mean(axis=0))
    assert [len(splits[k].values) for k in ("train", "val", "test")] == [70, 18, 28]
    assert splits["val"].index[8] == pd.Timestamp(table.stamps[70])
    assert splits["test"].marks.shape == (28, 4) and splits["test"].values.dtype == np.float32
    np.testing.assert_allclose(scaler.inverse(splits["test"].values[-1]), table.values[-1], 1e-5)


@needs_data
def test_etth1_preset_reproduces_the_reference_loader():
    table = load_series_csv(data.etth1_path())
    assert table.channels == list(data.ETTH1_CHANNELS) and table.freq == "h"
    assert table.values.shape == (17420, 7)
    borders = split_borders(len(table), 96, 24, preset="ett-hour")
    assert borders == data.SPLIT_BORDERS
    ours, our_scaler = make_splits(table, borders, 96)
    ref, ref_scaler = data.make_splits(96)
    np.testing.assert_array_equal(our_scaler.mean, ref_scaler.mean)
    np.testing.assert_array_equal(our_scaler.std, ref_scaler.std)
    for name in ("train", "val", "test"):
        np.testing.assert_array_equal(ours[name].values, ref[name].values)
        np.testing.assert_array_equal(ours[name].marks, ref[name].marks)
        assert (ours[name].index == ref[name].index).all()
        assert len(ours[name].index) == len(ref[name].index)
