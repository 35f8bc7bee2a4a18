"""Plug-in settings written where they used to be are still read: each moved to its plug-in's own table, with one
warning naming where it is written now, and the policy is the one its new keys give."""

from __future__ import annotations

import warnings

import pytest

import policies
from fleet.core.errors import MovedKey
from fleet.core.preset import Preset
from tests.conftest import make_scenario


def _policy(**policy):
    return make_scenario(policy={"card_class": "flagship", **policy}).policy


@pytest.mark.parametrize(
    "old, new, told",
    [
        ({"score": "dip-aware", "dip_aware": {"sigmas": 3.0}},
         {"score": "dip-aware", "scores": {"dip-aware": {"sigmas": 3.0}}},
         "[policy.dip_aware] is deprecated: write it in [policy.scores.dip-aware]"),
        ({"forecast": "seasonal", "forecaster": {"recent_hours": 6}},
         {"forecast": "seasonal", "forecasters": {"seasonal": {"recent_hours": 6}}},
         "[policy.forecaster] is deprecated: write it in [policy.forecasters.seasonal]"),
        ({"release_after_hours": 4},
         {"hystereses": {"release-after": {"release_after_hours": 4}}},
         "policy.release_after_hours is deprecated: write it in [policy.hystereses.release-after]"),
        ({"eviction": {"rule": "below-median", "fraction": 0.7}},
         {"eviction": {"rule": "below-median", "rules": {"below-median": {"fraction": 0.7}}}},
         "policy.eviction.fraction is deprecated: write it in [policy.eviction.rules.below-median]"),
        ({"eviction": {"rule": "below-median", "breaker_share": 0.3, "drain_hours": 48}},
         {"eviction": {"rule": "below-median", "admissions": {"limits": {"breaker_share": 0.3, "drain_hours": 48}}}},
         "policy.eviction.breaker_share, policy.eviction.drain_hours are deprecated: write them in "
         "[policy.eviction.admissions.limits]"),
    ],
)
def test_an_old_key_reads_as_its_new_table_with_one_line(old, new, told):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        moved = _policy(**old)
    assert [str(w.message) for w in caught] == [told] and caught[0].category is MovedKey
    assert moved == _policy(**new)
    a, b = policies.resolve(moved), policies.resolve(_policy(**new))
    for part in ("score", "rule", "admission", "hysteresis"):
        assert vars(getattr(a, part)) == vars(getattr(b, part)), part


def test_an_old_key_is_settable_and_wins_over_the_table_it_moves_to():
    """A `--set` of an old key lands on top of the new table a preset gives, as any override does."""
    raw = make_scenario().model_dump(mode="json")
    preset = Preset(raw, "preset 'tiny'")
    with pytest.warns(MovedKey, match=r"write it in \[policy\.eviction\.rules\.below-median\]"):
        s = preset.resolve(overrides=["policy.eviction.fraction=0.6"])
    assert s.policy.eviction.rules == {"below-median": {"fraction": 0.6}}
    assert policies.resolve(s.policy).rule.fraction == 0.6


def test_a_typo_at_an_old_place_is_still_named():
    with pytest.warns(MovedKey):
        policy = _policy(eviction={"rule": "below-median", "fractoin": 0.7})
    with pytest.raises(ValueError, match=r"policy\.eviction\.rules\.below-median: fractoin: unknown key"):
        policies.resolve(policy)

