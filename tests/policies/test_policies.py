import numpy as np
import pytest

from fleet.core.scenario import ConfigError
from policies import EVICTION_RULES, SIZING_MODES, SizingInput, resolve, window_hours
from fleet.core.registry import NoSettings, Plugin, Registry, constant


@pytest.mark.parametrize("name, hours", [("hour", 1), ("day", 24), ("week", 168), ("36h", 36), ("12", 12)])
def test_windows(name, hours):
    assert window_hours(name) == hours


@pytest.mark.parametrize("bad", ["fortnight", "0h", "-3", ""])
def test_unknown_window_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="window"):
        window_hours(bad)


def test_registry_refuses_a_name_twice_and_names_known_on_a_miss():
    r = Registry("thing")
    r.register(Plugin("a", NoSettings, constant(1)))
    with pytest.raises(ValueError, match="twice"):
        r.register(Plugin("a", NoSettings, constant(2)))
    with pytest.raises(ConfigError, match="known: a"):
        r.get("b")


def test_registry_builds_a_plugin_from_its_table_and_names_where_a_bad_key_is_written():
    r = Registry("thing")
    r.register(Plugin("a", NoSettings, constant(1)))
    assert r.build("a", {}, "things.a") == 1 and r.build("a", None, "things.a") == 1
    with pytest.raises(ConfigError, match=r"^things\.a: colour: unknown key$"):
        r.build("a", {"colour": "red"}, "things.a")


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
    rule = EVICTION_RULES.build("below-median", {"fraction": fraction}, "policy.eviction.rules.below-median")
    j = rule.judge(np.array(scores, float), np.array(run_set, bool))
    assert j.candidates.tolist() == expected, desc
    judged = np.flatnonzero(run_set)
    if judged.size:
        np.testing.assert_allclose(j.threshold_by_card_tps[judged], fraction * np.median(np.array(scores, float)[judged]))
    assert len(j.candidate_reasons) == len(expected)  # the rule says why each candidate falls under its line


def test_no_eviction_never_has_candidates():
    j = EVICTION_RULES.build("none", {"fraction": 0.99}, "policy.eviction.rules.none").judge(np.array([1.0, 100.0]), np.array([True, True]))
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
    warm = SIZING_MODES.build("steady", {}, "policy.modes.steady").size(_inp())
    assert warm[:, 0].tolist() == [True, False, False, False]
    assert warm[:, 1].tolist() == [True, False, False, True]


def test_held_sizes_once_for_the_peak_and_holds():
    warm = SIZING_MODES.build("held", {}, "policy.modes.held").size(_inp())
    assert warm[:, 0].tolist() == warm[:, 1].tolist() == [True, False, False, True]


def test_held_replaces_an_evicted_card_with_the_best_spare():
    eligible = np.array([True, True, True, False])
    warm = SIZING_MODES.build("held", {}, "policy.modes.held").size(_inp(previous=np.array([True, False, False, True]), eligible=eligible))
    assert warm[:, 0].tolist() == [True, True, False, False]


# -- the admission and the hysteresis: registered plug-ins that own and validate their settings -----------------------

def _policy(admission=None, release_after_hours=None):
    from tests.conftest import make_scenario

    ev = {"rule": "below-median", "cadence_hours": 24, "share": 0.25, "rules": {"below-median": {"fraction": 0.8}},
          "admissions": {"limits": admission or {}}}
    hystereses = {} if release_after_hours is None else {"release-after": {"release_after_hours": release_after_hours}}
    return make_scenario(policy={"card_class": "flagship", "window": "day", "mode": "steady", "eviction": ev,
                                 "hystereses": hystereses}).policy


@pytest.mark.parametrize(
    "admission, release_after_hours, expected",
    [
        ({}, None, (1.0, 1.0, 0, 1)),  # the defaults never bind
        ({"breaker_share": 0.3, "disruption_share": 0.05, "drain_hours": 48}, None, (0.3, 0.05, 48, 1)),
        ({}, 4, (1.0, 1.0, 0, 4)),
    ],
)
def test_admission_and_hysteresis_take_their_own_settings(admission, release_after_hours, expected):
    parts = resolve(_policy(admission, release_after_hours))
    a = parts.admission
    assert (a.breaker_share, a.disruption_share, a.drain_hours, parts.hysteresis.release_after_hours) == expected
    assert parts.rule.fraction == 0.8  # the rule keeps its own table beside the admission's


@pytest.mark.parametrize(
    "policy, named",
    [
        ({"eviction": {"admissions": {"limits": {"breaker_share": 0}}}}, "policy.eviction.admissions.limits: breaker_share"),
        ({"eviction": {"admissions": {"limits": {"drain_hours": -1}}}}, "policy.eviction.admissions.limits: drain_hours"),
        ({"eviction": {"rule": "below-median", "rules": {"below-median": {"fractoin": 0.5}}}},
         "policy.eviction.rules.below-median: fractoin: unknown key"),
        ({"hystereses": {"release-after": {"release_after_hours": 0}}}, "policy.hystereses.release-after: release_after_hours"),
        ({"scores": {"dip-awar": {}}}, "policy.scores.dip-awar: unknown score estimator 'dip-awar'"),
        ({"modes": {"steady": {"x": 1}}}, "policy.modes.steady: x: unknown key"),  # a table the policy does not use is checked too
        ({"eviction": {"admission": "lottery"}}, "unknown admission 'lottery' (known: limits)"),
        ({"hysteresis": "never"}, "unknown hysteresis 'never' (known: release-after)"),
    ],
)
def test_a_bad_setting_is_named_by_the_table_it_is_written_in(policy, named):
    from tests.conftest import make_scenario

    with pytest.raises(ConfigError) as err:
        resolve(make_scenario(policy={"card_class": "flagship", **policy}).policy)
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
