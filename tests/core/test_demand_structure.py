"""The structure real traffic has on top of the shape: off by default, each part doing what it says."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.billing import serving_share
from fleet.core.month import draw_demand, stream
from fleet.core.scenario import Demand


def draw(seed: int = 1, hours: int = 720, history: int = 168, **table):
    d = Demand(**({"avg_tps": 10_000.0} | table))
    return draw_demand(d, hours, history, stream(seed, "demand"), seed)


def test_off_by_default_is_the_shape_alone():
    past, month = draw(shape="diurnal", peak_to_avg=2.0)
    assert not Demand().structured
    assert month.mean() == pytest.approx(10_000.0)
    assert np.allclose(month[:24], month[24:48])  # a day is a day
    assert np.allclose(past[-24:], month[:24])  # the history is the same bump carried back


@pytest.mark.parametrize("table", [
    {"noise": 0.1}, {"day_to_day": 0.05}, {"weekend_factor": 0.6}, {"burst_prob_per_hour": 0.02},
])
def test_each_part_moves_the_series_and_keeps_the_average(table):
    flat = draw()[1]
    past, month = draw(**table)
    assert month.mean() == pytest.approx(10_000.0)
    assert not np.allclose(month, flat) and past.size == 168


def test_weekends_are_the_factor_of_a_weekday():
    _, month = draw(weekend_factor=0.5)
    days = month.reshape(30, 24).mean(axis=1)
    weekday = np.mod(np.arange(30), 7) < 5  # month hour 0 is a Monday
    assert days[~weekday].mean() / days[weekday].mean() == pytest.approx(0.5)


def test_noise_is_persistent_with_its_correlation_time():
    _, month = draw(hours=24 * 300, noise=0.1, noise_hours=10)
    x = np.log(month)
    x -= x.mean()
    lag1 = np.corrcoef(x[:-1], x[1:])[0, 1]
    assert lag1 == pytest.approx(np.exp(-1 / 10), abs=0.03)
    assert x.std() == pytest.approx(0.1, rel=0.15)


def test_bursts_multiply_for_their_hours():
    _, month = draw(burst_prob_per_hour=0.01, burst_mult=3.0, burst_hours=4)
    ratio = month / month.min()
    assert set(np.round(np.unique(ratio), 6)) <= {1.0, 3.0}  # a flat demand, lifted 3x while a burst runs
    edges = np.diff(np.concatenate([[0], (ratio > 2).astype(int), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    inside = (starts > 0) & (ends < month.size)  # a burst cut by the month's edges may be shorter
    assert starts.size > 0 and np.all(ends[inside] - starts[inside] >= 4)


def test_a_card_serves_once_booted_and_bills_from_its_start():
    warm = np.array([[False, True, True, True], [True, True, False, True]])
    share = serving_share(warm, np.array([1.5, 0.5]), warm_before=np.array([False, True]))
    assert share.tolist() == [[0.0, 0.0, 0.5, 1.0], [1.0, 1.0, 0.0, 0.5]]
