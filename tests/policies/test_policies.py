import numpy as np
import pytest

from fleet.core.scenario import ConfigError
from policies import EVICTION_RULES, SIZING_MODES, SizingInput, build, window_hours
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
