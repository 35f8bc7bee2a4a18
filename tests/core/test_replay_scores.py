"""A month's sizing score and eviction mean from one running sum are the numbers each window gives alone."""

import numpy as np

from fleet.core.month import draw_month
from fleet.core.replay import score_month
from fleet.core.scores import window_mean
from policies import resolve
from tests.conftest import make_scenario


def test_sizing_score_and_eviction_mean_together_are_each_alone():
    sc = make_scenario(classes=[
        {"name": "flagship", "rated_tps": 6000, "rent_usd_per_month": 2690, "pool_cards": 12},
        {"name": "budget", "rated_tps": 2000, "rent_usd_per_month": 900, "pool_cards": 5},
    ], policy={"card_class": "flagship", "window": "day", "mode": "steady", "headroom": 1.05,
               "eviction": {"rule": "below-median", "window": "hour", "fraction": 0.8, "cadence_hours": 24, "share": 0.25}})
    month, parts = draw_month(sc), resolve(sc.policy)
    assert parts.score.is_window_mean and parts.evict_window_hours != parts.size_window_hours
    got = score_month(month, parts)
    rows = np.flatnonzero(month.card_class == month.class_names.index("flagship"))
    W, H = month.warmup_hours, month.hours
    size_alone = window_mean(month.measured_tps[rows], W, H, parts.size_window_hours)
    at = got.evict_score_tps.hours
    evict_alone = window_mean(month.measured_tps[rows], W, H, parts.evict_window_hours, at)
    assert np.array_equal(got.score_tps[rows], size_alone)
    assert np.array_equal(got.evict_score_tps.score_tps[rows], evict_alone)
    others = np.setdiff1d(np.arange(month.n_cards), rows)
    assert not got.score_tps[others].any() and not got.evict_score_tps.score_tps[others].any()
    other_hour = int(at[0]) + 1  # not kept: computed when read, the same number
    assert np.array_equal(got.evict_score_tps[rows, other_hour],
                          window_mean(month.measured_tps[rows], W, H, parts.evict_window_hours, np.array([other_hour]))[:, 0])
    assert got.in_dip is None and got.allowance is None


def test_all_finite_is_numpys_check_block_by_block(monkeypatch):
    """The finite check before the window means' one pass reads the telemetry in blocks of rows: same answer."""
    from fleet.core import replay as replay_module

    monkeypatch.setattr(replay_module, "_FINITE_CELLS", 20)
    rows = np.ones((50, 7), np.float32)
    assert replay_module._all_finite(rows) and replay_module._all_finite(rows[:0])
    for bad in (np.nan, np.inf, -np.inf):
        for row in (0, 23, 49):
            spoilt = rows.copy()
            spoilt[row, 3] = bad
            assert not replay_module._all_finite(spoilt)
