import numpy as np
import pytest

from fleet.core.scenario import ConfigError
from policies import EVICTION_RULES, SIZING_MODES, SizingInput, build, resolve, window_hours
from fleet.core.registry import Registry


@pytest.mark.parametrize("name, hours", [("hour", 1), ("day", 24), ("week", 168), ("36h", 36), ("12", 12)])
def test_windows(name, hours):
    assert window_hours(name) == hours


@pytest.mark.parametrize("bad", ["fortnight", "0h", "-3", ""])
def test_unknown_window_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="window"):
        window_hours(bad)


def test_registry_refuses_a_name_twice_and_names_known_on_a_miss():
    r = Registry("thing")
    r.register("a", 1)
    with pytest.raises(ValueError, match="twice"):
        r.register("a", 2)
    with pytest.raises(ConfigError, match="known: a"):
        r.get("b")


@pytest.mark.parametrize(
    "desc, scores, run_set, fraction, expected",
    [
        ("below the mark, worst first", [100, 40, 95, 60, 105], [1, 1, 1, 1, 1], 0.7, [1, 3]),
        ("only run-set cards are judged", [100, 40, 95, 60, 105], [1, 0, 1, 1, 1], 0.7, [3]),
        ("nobody below the mark", [100, 90, 95, 99, 105], [1, 1, 1, 1, 1], 0.7, []),
        ("empty run set", [100, 40], [0, 0], 0.7, []),
    ],
)
def test_below_median(desc, scores, run_set, fraction, expected):
    rule = build(EVICTION_RULES, "below-median", {"fraction": fraction}, "policy.eviction")
    j = rule.judge(np.array(scores, float), np.array(run_set, bool))
    assert j.candidates.tolist() == expected, desc
    judged = np.flatnonzero(run_set)
    if judged.size:
        np.testing.assert_allclose(j.threshold_by_card_tps[judged], fraction * np.median(np.array(scores, float)[judged]))
    assert len(j.candidate_reasons) == len(expected)  # the rule says why each candidate falls under its line


def test_no_eviction_never_has_candidates():
    j = build(EVICTION_RULES, "none", {"fraction": 0.99}, "policy.eviction").judge(np.array([1.0, 100.0]), np.array([True, True]))
    assert j.candidates.size == 0


def _inp(previous=None, eligible=None):
    scores = np.array([[300.0, 300.0], [200.0, 200.0], [100.0, 100.0], [250.0, 250.0]])
    return SizingInput(
        hours=np.arange(2),
        score_tps=scores,
        rent_usd_per_hour=np.ones(4),
        eligible=np.ones(4, bool) if eligible is None else eligible,
        demand_tps=np.array([250.0, 500.0]),
        peak_demand_tps=500.0,
        headroom=1.0,
        previous=previous,
    )


def test_steady_sizes_each_hour_to_its_demand():
    warm = SIZING_MODES.get("steady").size(_inp())
    assert warm[:, 0].tolist() == [True, False, False, False]
    assert warm[:, 1].tolist() == [True, False, False, True]


def test_held_sizes_once_for_the_peak_and_holds():
    warm = SIZING_MODES.get("held").size(_inp())
    assert warm[:, 0].tolist() == warm[:, 1].tolist() == [True, False, False, True]


def test_held_replaces_an_evicted_card_with_the_best_spare():
    eligible = np.array([True, True, True, False])
    warm = SIZING_MODES.get("held").size(_inp(previous=np.array([True, False, False, True]), eligible=eligible))
    assert warm[:, 0].tolist() == [True, True, False, False]


# -- the admission and the hysteresis: registered plug-ins that own and validate their settings -----------------------

def _policy(eviction=None, **over):
    from tests.conftest import make_scenario

    ev = {"rule": "below-median", "fraction": 0.8, "cadence_hours": 24, "share": 0.25, **(eviction or {})}
    return make_scenario(policy={"card_class": "flagship", "window": "day", "mode": "steady", "eviction": ev, **over}).policy


@pytest.mark.parametrize(
    "eviction, over, expected",
    [
        ({}, {}, (1.0, 1.0, 0, 1)),  # the defaults never bind
        ({"breaker_share": 0.3, "disruption_share": 0.05, "drain_hours": 48}, {}, (0.3, 0.05, 48, 1)),
        ({}, {"release_after_hours": 4}, (1.0, 1.0, 0, 4)),
    ],
)
def test_admission_and_hysteresis_take_their_own_settings(eviction, over, expected):
    parts = resolve(_policy(eviction, **over))
    a = parts.admission
    assert (a.breaker_share, a.disruption_share, a.drain_hours, parts.hysteresis.release_after_hours) == expected
    assert parts.rule.fraction == 0.8  # the rule keeps its own key beside the admission's


@pytest.mark.parametrize(
    "eviction, over, named",
    [
        ({"breaker_share": 0}, {}, "policy.eviction ('limits'): breaker_share"),
        ({"drain_hours": -1}, {}, "policy.eviction ('limits'): drain_hours"),
        ({"fractoin": 0.5}, {}, "policy.eviction ('below-median'): fractoin"),
        ({}, {"release_after_hours": 0}, "policy ('release-after'): release_after_hours"),
    ],
)
def test_a_bad_setting_is_named_by_its_plugin(eviction, over, named):
    with pytest.raises(ConfigError) as err:
        resolve(_policy(eviction, **over))
    assert str(err.value).startswith(named)


def test_release_after_one_hour_is_the_mode_s_choice_among_eligible_cards():
    """Without hysteresis a card is warm exactly when chosen and eligible, and its count is 0 if chosen last, else 1,
    whatever the count before (none at month start); a stretch of no hours keeps the count it was handed."""
    from policies.hysteresis import hold

    rng = np.random.default_rng(17)
    for case in range(20):
        n, k = int(rng.integers(1, 30)), int(rng.integers(0, 6))
        chosen = rng.random((n, k)) < 0.5
        eligible = rng.random(n) < 0.8
        if case % 2:
            chosen &= eligible[:, None]  # the usual case: the mode chose no ineligible card
        before = None if case % 3 == 0 else rng.integers(0, 5, n)
        warm, out = hold(np.ascontiguousarray(chosen.T).T if case % 4 == 1 else chosen, eligible, before, 1)
        assert np.array_equal(warm, chosen & eligible[:, None])
        if k:
            assert out.dtype == np.int64 and np.array_equal(out, np.where(chosen[:, -1], 0, 1))
        else:
            assert np.array_equal(out, np.minimum(np.full(n, 1) if before is None else before, 1))
