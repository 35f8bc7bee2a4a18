"""A month's sizing score and eviction mean from one running sum are the numbers each window gives alone."""

import numpy as np
import pytest

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
               "eviction": {"rule": "below-median", "window": "hour", "cadence_hours": 24, "share": 0.25, "rules": {"below-median": {"fraction": 0.8}}}})
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



@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_scores_finite_only_refuse_telemetry_that_is_not_finite(monkeypatch, bad):
    """The window means' one pass takes a month only where every value is finite: the running sums tell, whichever
    block of cards the bad value is in; the finite telemetry gives the same numbers with or without the check."""
    from fleet.core import scores

    monkeypatch.setattr(scores, "_SCORE_BLOCK_CELLS", 100)
    rng = np.random.default_rng(9)
    rows = (6000 * rng.lognormal(0, 0.3, (23, 30))).astype(np.float32)
    plain = scores.window_scores_many(rows, 24, 6, (24, 1))
    assert all(np.array_equal(x, y) for x, y in zip(plain, scores.window_scores_many(rows, 24, 6, (24, 1), finite_only=True)))
    for card, hour in [(0, 0), (11, 29), (22, 13)]:
        spoilt = rows.copy()
        spoilt[card, hour] = bad
        with np.errstate(invalid="ignore"):
            assert scores.window_scores_many(spoilt, 24, 6, (24, 1), finite_only=True) is None


def test_a_month_with_a_gap_is_scored_window_by_window():
    """Telemetry that is not finite sends the month the usual way (the one pass refuses it): the scores of its
    windows are each window's own, a gap left out of its window's mean."""
    from fleet.core.scores import unscored_as_zero

    sc = make_scenario(policy={"card_class": "flagship", "window": "day", "mode": "steady", "headroom": 1.05,
                               "eviction": {"rule": "below-median", "window": "hour", "cadence_hours": 24, "share": 0.25, "rules": {"below-median": {"fraction": 0.8}}}})
    month, parts = draw_month(sc), resolve(sc.policy)
    month.measured_tps[3, 30] = np.nan
    got = score_month(month, parts)
    W, H = month.warmup_hours, month.hours
    assert np.array_equal(got.score_tps, unscored_as_zero(window_mean(month.measured_tps, W, H, parts.size_window_hours)))
    at = got.evict_score_tps.hours
    want = unscored_as_zero(window_mean(month.measured_tps, W, H, parts.evict_window_hours, at))
    assert np.array_equal(got.evict_score_tps.score_tps, want)
