"""The calendar: month boundaries, the next hour after an absence, the last hour and the watermark, with no clock."""

from __future__ import annotations

import dataclasses
import math

import pytest

from fleet.service.calendar import HOUR_S, Calendar

T0 = 1_767_225_600  # 2026-01-01T00:00Z
MONTH = 720 * HOUR_S
real = Calendar(T0, 720, settle_s=300)
played = Calendar(T0, 720, settle_s=300, played_start_ts=T0, played_end_ts=T0 + MONTH, feed_first_ts=T0 - 168 * HOUR_S)


@pytest.mark.parametrize(
    "ts, month_start_ts, hour",
    [
        (T0, T0, 0),
        (T0 + 1, T0, 0),  # inside the first hour
        (T0 + 719 * HOUR_S, T0, 719),  # the month's last hour
        (T0 + MONTH, T0 + MONTH, 0),  # the next month's first
        (T0 + MONTH - 1, T0, 719),
        (T0 + 3 * MONTH + 5 * HOUR_S, T0 + 3 * MONTH, 5),
        (T0 - HOUR_S, T0, -1),  # before the first month: the first month's hour -1 (warm-up)
    ],
)
def test_month_of(ts, month_start_ts, hour):
    assert real.month_of(ts) == (month_start_ts, hour)
    assert real.month_end_ts(month_start_ts) == month_start_ts + MONTH


@pytest.mark.parametrize(
    "last, now, expected",
    [
        (None, T0 + 10 * HOUR_S, T0),  # nothing done yet: the current month's first hour
        (T0 + 4 * HOUR_S, T0 + 10 * HOUR_S, T0 + 5 * HOUR_S),
        (T0 + 719 * HOUR_S, T0 + MONTH + HOUR_S, T0 + MONTH),  # across the month's end
        (T0 + 100 * HOUR_S, T0 + MONTH + 3 * HOUR_S, T0 + 101 * HOUR_S),  # away less than a month: catch up on last month
        (T0, T0 + MONTH + 3 * HOUR_S, T0 + HOUR_S),  # the previous month's first hour is still caught up on
        (T0 - HOUR_S, T0 + MONTH + 3 * HOUR_S, T0 + MONTH),  # away more than a month: start with the current month
        (T0 + 5 * HOUR_S, T0 + 4 * MONTH, T0 + 4 * MONTH),  # a long absence
    ],
)
def test_next_hour(last, now, expected):
    assert real.next_hour(last, now) == expected


def test_a_simulation_plays_its_one_month_whatever_the_clock_says():
    assert played.simulated and not real.simulated
    assert played.current_month_start(T0 + 5 * MONTH) == T0
    assert played.next_hour(None, T0 + 5 * MONTH) == T0
    assert played.last_hour_ts == T0 + 719 * HOUR_S
    assert real.last_hour_ts == math.inf
    assert real.current_month_start(T0 + MONTH + 1) == T0 + MONTH


def test_watermark_is_the_feed_or_the_clock_less_the_settle_time():
    assert real.watermark_ts(T0 + HOUR_S, fed_through_ts=None) == T0 + HOUR_S - 300
    assert real.watermark_ts(T0 + HOUR_S, fed_through_ts=T0 - MONTH) == T0 + HOUR_S - 300  # a real pool has no feed
    assert played.watermark_ts(T0 + 10 * HOUR_S, fed_through_ts=T0 + 3 * HOUR_S) == T0 + 3 * HOUR_S
    assert played.watermark_ts(T0 + 10 * HOUR_S, fed_through_ts=None) == T0 - 168 * HOUR_S  # nothing fed yet


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        real.month_hours = 24


@pytest.mark.parametrize(
    "last_ts, now_ts, expire_after_s, behind, late",
    [
        (T0 + 9 * HOUR_S, T0 + 10 * HOUR_S + 60, 6 * HOUR_S, 0, 0),  # up to date: the hour before decided
        (T0 + 5 * HOUR_S, T0 + 10 * HOUR_S + 60, 6 * HOUR_S, 4, 0),  # four hours behind, none ended 6 h ago
        # hours 1..9 not decided at 10:01; those ending more than 6 h ago (hours 1, 2, 3: ended by 04:00) are late
        (T0, T0 + 10 * HOUR_S + 60, 6 * HOUR_S, 9, 3),
        (T0, T0 + 10 * HOUR_S, 6 * HOUR_S, 9, 2),  # at 10:00 hour 3 ended exactly 6 h ago: not later than allowed
        (T0, T0 + 10 * HOUR_S + 60, 0, 9, 0),  # expire_after_s 0: nothing expires
        (None, T0 + 3 * HOUR_S + 60, HOUR_S, 3, 2),  # a new store: from the month's start; hours 0 and 1 ended over 1 h ago
        (T0 - 2 * MONTH, T0 + 2 * HOUR_S, 0.5 * HOUR_S, 2, 1),  # away more than a month: this month only
    ],
)
def test_catch_up_counts_the_hours_behind_and_those_too_late_to_act(last_ts, now_ts, expire_after_s, behind, late):
    assert real.catch_up(last_ts, now_ts, expire_after_s) == (behind, late)
