"""Score estimators, table-driven: the window mean, and the dip-aware score on telemetry with known dips."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.scores import window_scores_many
from policies import EVICTION_RULES, SCORES, resolve
from tests.conftest import make_scenario

W, H = 168, 48


def estimator(name: str, **settings):
    import policies

    policy = {"card_class": "flagship", "score": name, "scores": {name: settings}}
    return policies.resolve(make_scenario(policy=policy).policy).score


def telemetry(noise: float = 0.1, seed: int = 0, cards: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """Cards at 6,000 tok/s with `noise` hour noise; card i in [0, cards/2) dips to half from month hour 20 to 30."""
    rng = np.random.default_rng(seed)
    true = np.full((cards, W + H), 6000.0)
    true[: cards // 2, W + 20 : W + 30] = 3000.0
    return true * (1 + noise * rng.standard_normal(true.shape)), true


def test_mean_is_the_window_mean():
    x, _ = telemetry()
    got = estimator("mean").score(x, W, H, 24, (1,))
    want = window_scores_many(x, W, H, (24, 1))
    np.testing.assert_array_equal(got.score_tps, want[0])
    np.testing.assert_array_equal(got.window_tps[0], want[1])
    assert got.in_dip is None


@pytest.mark.parametrize(
    "desc, hour, dipped, expect_dip, expect_near",
    [
        ("before the dip: the level", 19, True, False, 6000),
        ("the dip's first hour is not seen yet (the score reads the hours before it)", 20, True, False, 6000),
        ("two hours into the dip: seen, scored on the recent level", 22, True, True, 3000),
        ("late in the dip", 29, True, True, 3000),
        ("after the dip: back on the level within the recent hours", 33, True, False, 6000),
        ("a card that never dips", 25, False, False, 6000),
    ],
)
def test_dip_aware_sees_a_dip_and_lets_it_go(desc, hour, dipped, expect_dip, expect_near):
    x, _ = telemetry()
    got = estimator("dip-aware").score(x, W, H, 24)
    rows = slice(0, 200) if dipped else slice(200, 400)
    flagged = got.in_dip[rows, hour].mean()
    assert (flagged > 0.9) if expect_dip else (flagged < 0.1), desc
    assert np.median(got.score_tps[rows, hour]) == pytest.approx(expect_near, rel=0.08), desc


def test_dip_aware_level_is_not_moved_by_the_dips_inside_it():
    """Every card dips 6 hours in every 72; its level stays the healthy rate, a week mean does not."""
    rng = np.random.default_rng(1)
    true = np.full((50, W + H), 6000.0)
    for d in range(0, W + H, 72):
        true[:, d : d + 6] = 3000.0
    x = true * (1 + 0.1 * rng.standard_normal(true.shape))
    got = estimator("dip-aware").score(x, W, H, 24, (168,))
    healthy = ~got.in_dip
    assert np.median(got.score_tps[healthy]) == pytest.approx(6000, rel=0.03)
    assert np.median(got.window_tps[0]) < 5800  # the week mean carries the dips


def test_dip_aware_reads_gaps_as_no_news():
    x, _ = telemetry(cards=20)
    x[:, W + 10 : W + 14] = np.nan  # four hours with no telemetry
    got = estimator("dip-aware").score(x, W, H, 24)
    assert np.isfinite(got.score_tps).all()
    assert not got.in_dip[10:, 14].any()  # healthy cards are not taken for dipped ones over a gap


def test_dip_aware_settings_come_from_the_policy():
    e = estimator("dip-aware", level_hours=72, recent_hours=2, sigmas=3.0)
    assert (e.level_hours, e.recent_hours, e.sigmas) == (72, 2, 3.0)
    assert resolve(make_scenario(policy={"card_class": "flagship", "score": "dip-aware"}).policy).score.name == "dip-aware"


def test_dip_rate_and_depth_are_measured_from_telemetry():
    x, _ = telemetry(noise=0.05)
    got = estimator("dip-aware").score(x, W, H, 24)
    # Half the cards start a 50% dip at hour 20: hour 21 is the first to see it, in about half the pool, half deep.
    assert got.dip_rate[21] == pytest.approx(0.5, abs=0.05)
    assert got.dip_depth[21] == pytest.approx(0.5, abs=0.1)
    assert got.dip_rate[25] < 0.02 and got.dip_rate[10] < 0.02  # in the dip, or before it: no dip is starting



def test_each_hour_reads_only_the_hours_before_it():
    """Scoring the month from hour 18 on gives the same figures for those hours: batching never changes a score."""
    x, _ = telemetry()
    whole = estimator("dip-aware").score(x, W, H, 24)
    late = estimator("dip-aware").score(x[:, 18:], W, H - 18, 24)
    np.testing.assert_array_equal(late.score_tps, whole.score_tps[:, 18:])
    np.testing.assert_array_equal(late.in_dip, whole.in_dip[:, 18:])
    np.testing.assert_array_equal(late.dip_rate, whole.dip_rate[18:])


@pytest.mark.parametrize(
    "desc, scores, groups, expected",
    [
        ("one class: the run set's median", [100, 40, 95, 60, 105], [0, 0, 0, 0, 0], [1, 3]),
        ("two classes: each card against its own class", [6000, 5900, 2000, 3000, 2950, 3050], [0, 0, 0, 1, 1, 1], [2]),
        ("a bargain card is not slow by a flagship's median", [6000, 6100, 5900, 3000, 3100, 2900], [0, 0, 0, 1, 1, 1], []),
    ],
)
def test_below_median_judges_within_the_class(desc, scores, groups, expected):
    rule = EVICTION_RULES.build("below-median", {"fraction": 0.7}, "policy.eviction.rules.below-median")
    j = rule.judge(np.array(scores, float), np.ones(len(scores), bool), np.array(groups))
    assert j.candidates.tolist() == expected, desc
    assert len(j.candidate_median_tps) == len(expected)


def test_dip_aware_level_holds_when_most_days_have_a_dip():
    """Heavy dips: a 12-hour dip at 70% depth on 5 days of each 7. The median day is a dipped one; the level is not."""
    rng = np.random.default_rng(2)
    true = np.full((60, W + H), 6000.0)
    for day in range((W + H) // 24):
        if day % 7 < 5:
            true[:, day * 24 + 6 : day * 24 + 18] = 1800.0
    x = true * (1 + 0.2 * rng.standard_normal(true.shape))
    got = estimator("dip-aware").score(x, W, H, 24, (168,))
    healthy_hours = [h for h in range(H) if not (((W + h) // 24) % 7 < 5 and 6 <= (W + h) % 24 < 18)]
    settled = [h for h in healthy_hours if h >= 4 and all(hh in healthy_hours for hh in range(h - 3, h))]
    assert np.median(got.score_tps[:, settled]) == pytest.approx(6000, rel=0.04)
    assert np.median(got.window_tps[0]) < 5000  # the week mean carries the dips
