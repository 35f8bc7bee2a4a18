"""A new eviction rule with a setting of its own is its module, its registration and its test, and nothing else.

The rule here is written the way a rule in `policies/` is: a settings model it owns (`ceiling_tps`, written in its own
table, `[policy.eviction.rules.above-ceiling]`), a `judge` that gives its own threshold and reason. Registered, it is
read from a preset file's table, replayed, explained in its words and exported with its own threshold, with no change
anywhere else.
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import Field

import policies
from fleet.core.plugins import Judgement
from fleet.core.registry import Plugin
from fleet.core.scenario import ConfigError, Strict
from fleet.core.replay import replay
from fleet.core.month import draw_month
from fleet.presets import load_preset
from tests.conftest import make_scenario


class AboveCeilingSettings(Strict):
    ceiling_tps: float = Field(gt=0)  # no default: the rule needs it


class AboveCeiling:
    """Evicts every run-set card scoring above a fixed ceiling (a rule no one would run: it shows the shape)."""

    name = "above-ceiling"
    is_on = True

    def __init__(self, settings: AboveCeilingSettings):
        self.ceiling_tps = settings.ceiling_tps

    def judge(self, score_tps, run_set, groups=None) -> Judgement:
        judged = np.flatnonzero(run_set)
        over = judged[np.asarray(score_tps)[judged] > self.ceiling_tps]
        lines = np.full(np.asarray(score_tps).shape[0], np.nan)
        lines[judged] = self.ceiling_tps
        why = tuple(f"over the ceiling {self.ceiling_tps:.0f} tok/s" for _ in over)
        return Judgement(over, float("nan"), self.ceiling_tps, "score above the ceiling", None, lines, why)


@pytest.fixture(scope="module", autouse=True)
def registered():
    if "above-ceiling" not in policies.EVICTION_RULES:
        policies.EVICTION_RULES.register(Plugin("above-ceiling", AboveCeilingSettings, AboveCeiling))


def scenario(**settings):
    return make_scenario(policy={"card_class": "flagship", "mode": "steady", "forecast": "known",
                                 "eviction": {"rule": "above-ceiling", "window": "day", "share": 0.25,
                                              "rules": {"above-ceiling": settings}}})


PRESET = """\
name = "ceiling"
seed = 3
hours = 72
warmup_hours = 24

[[classes]]
name = "flagship"
rated_tps = 6000
rent_usd_per_month = 2690
pool_cards = 12

[demand]
shape = "diurnal"
avg_tps = 30000

[policy]
card_class = "flagship"
forecast = "known"

[policy.eviction]
rule = "above-ceiling"
window = "day"
share = 0.25

[policy.eviction.rules.above-ceiling]
ceiling_tps = 6000
"""


def test_the_rule_is_replayed_with_its_own_setting_threshold_and_reason(tmp_path):
    (tmp_path / "ceiling.toml").write_text(PRESET)
    s = load_preset(str(tmp_path / "ceiling.toml")).scenario  # the setting is read from the rule's own table
    parts = policies.resolve(s.policy)
    assert parts.rule.ceiling_tps == 6000
    r = replay(s, parts, month=draw_month(s))
    assert r.evictions, "a ceiling under the fast cards evicts"
    for p in r.passes:
        for e in p.evictions:
            assert e.score_tps > 6000 and "over the ceiling 6000 tok/s" in e.reason and e.reason.startswith("score above")
            assert p.threshold_of(e.card) == 6000


def test_the_rule_validates_its_own_setting():
    with pytest.raises(ConfigError, match=r"policy\.eviction\.rules\.above-ceiling: ceiling_tps: Field required"):
        policies.resolve(scenario().policy)
    with pytest.raises(ConfigError, match="ceiling: unknown key"):
        policies.resolve(scenario(ceiling_tps=1.0, ceiling=2.0).policy)
