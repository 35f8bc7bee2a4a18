"""A `file` demand at its own resolution: rows by `minute` or `hour`, resampled to the month's step, gaps reported."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from fleet.core.errors import ConfigError
from fleet.presets import read_demand_file


def write(tmp_path, text: str):
    p = tmp_path / "d.csv"
    p.write_text(text)
    return str(p)


def test_ten_minute_rows_are_averaged_into_hours(tmp_path):
    rng = np.random.default_rng(3)
    tenth = rng.uniform(0, 1000, 2 * 6)
    rows = "".join(f"{10 * i},{v}\n" for i, v in enumerate(tenth))
    got = read_demand_file(write(tmp_path, "# a comment line\nminute,demand_tps\n" + rows), 2, None)
    np.testing.assert_allclose(got, tenth.reshape(2, 6).mean(axis=1))


def test_hour_keyed_and_plain_rows_read_alike(tmp_path):
    plain = read_demand_file(write(tmp_path, "demand_tps\n5\n7\n9\n"), 3, None)
    keyed = read_demand_file(write(tmp_path, "hour,demand_tps\n0,5\n1,7\n2,9\n"), 3, None)
    np.testing.assert_array_equal(plain, keyed)
    np.testing.assert_array_equal(plain, [5, 7, 9])


def test_two_hour_rows_are_held_over_their_hours(tmp_path):
    got = read_demand_file(write(tmp_path, "minute,demand_tps\n0,4\n120,8\n"), 4, None)
    np.testing.assert_array_equal(got, [4, 4, 8, 8])


def test_a_gap_is_filled_from_its_neighbours_and_logged(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="fleet.demand"):
        got = read_demand_file(write(tmp_path, "minute,demand_tps\n0,60\n30,\n60,120\n90,120\n"), 2, None)
    np.testing.assert_allclose(got, [75, 120])  # (60 + 90) / 2, then 120
    assert "1 of 4 rows have no demand_tps" in caplog.text


@pytest.mark.parametrize(("text", "reason"), [
    ("minute,demand_tps\n0,1\n10,1\n25,1\n", "not evenly spaced by minute (row 3"),
    ("minute,demand_tps\n0,1\n10,-1\n", "finite and non-negative (row 2)"),
    ("minute,demand_tps\n0,1\n7,1\n", "rows 7 minutes apart do not fit the month's 60-minute step"),
    ("minute,demand_tps\n0,1\n10,1\n", "cover 0 hours, the month needs 1"),
    ("minute,demand_tps\n0,1\n0.5,1\n", "every minute must be a whole number"),
    ("minute,demand_tps\n0,\n10,\n", "no row gives a demand_tps"),
    ("minute,load\n0,1\n", "no demand_tps column"),
])
def test_bad_rows_are_one_line_naming_the_file(tmp_path, text, reason):
    with pytest.raises(ConfigError) as err:
        read_demand_file(write(tmp_path, text), 1, None)
    assert reason in str(err.value) and "d.csv" in str(err.value) and "\n" not in str(err.value)
