"""A new score estimator with a setting of its own is its module, its registration and its test, and nothing else.

The score here is written the way one in `policies/scores.py` is: a settings model it owns (`factor`, written in its
own table, `[policy.scores.discounted]`), what it reads of the telemetry and its scores. Registered, it is read from
a preset file's table, the replay sizes the run set on it and the reasons name it, with no change anywhere else (in
particular, nothing in the core's `Policy` names it).
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import Field

import policies
from fleet.core.errors import ConfigError
from fleet.core.plugins import Scored
from fleet.core.registry import Plugin
from fleet.core.scenario import Policy, Strict
from fleet.presets import load_preset, replay_scenario
from policies.scores import WindowMean


# -- the score's module -----------------------------------------------------------------------------------------


class DiscountedSettings(Strict):
    factor: float = Field(gt=0, le=1)  # no default: the score needs it


class Discounted:
    """The window mean times a fixed factor: a pessimist's score (no one would run it: it shows the shape)."""

    name = "discounted"
    is_window_mean = False

    def __init__(self, settings: DiscountedSettings):
        self.factor = settings.factor

    def describe(self, window: str) -> str:
        return f"{window} window discounted to {self.factor:.0%}"

    def history_hours(self, window_hours: int) -> int:
        return window_hours

    def score(self, hourly_tps, history_hours, hours, window_hours, other_windows=()) -> Scored:
        mean = WindowMean().score(hourly_tps, history_hours, hours, window_hours, other_windows)
        return Scored(score_tps=(mean.score_tps * self.factor).astype(mean.score_tps.dtype), window_tps=mean.window_tps)


# -- its registration -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def registered():
    if "discounted" not in policies.SCORES:
        policies.SCORES.register(Plugin("discounted", DiscountedSettings, Discounted))


# -- its test ---------------------------------------------------------------------------------------------------


PRESET = """\
name = "pessimist"
seed = 4
hours = 72
warmup_hours = 48

[[classes]]
name = "flagship"
rated_tps = 6000
rent_usd_per_month = 2690
pool_cards = 20

[demand]
avg_tps = 30000

[policy]
card_class = "flagship"
mode = "steady"
forecast = "known"
score = "{score}"

[policy.scores.discounted]
factor = 0.5
"""


def test_the_score_is_read_from_its_table_and_the_run_set_is_sized_on_it(tmp_path):
    def replayed(score):
        (tmp_path / f"{score}.toml").write_text(PRESET.format(score=score))
        return replay_scenario(load_preset(str(tmp_path / f"{score}.toml")).scenario)

    assert "discounted" not in Policy.model_fields and "factor" not in str(Policy.model_json_schema())
    half, mean = replayed("discounted"), replayed("mean")
    # Believing each card serves half its mean, the run set holds about twice the cards for the same demand.
    assert half.cards_warm.mean() > 1.8 * mean.cards_warm.mean()
    assert half.figures["delivered_avg_tps"] >= mean.figures["delivered_avg_tps"]


def test_the_score_says_what_it_believed_and_validates_its_own_table():
    from tests.conftest import make_scenario

    parts = policies.resolve(make_scenario(policy={"card_class": "flagship", "score": "discounted",
                                                   "scores": {"discounted": {"factor": 0.8}}}).policy)
    assert parts.score.factor == 0.8 and parts.score.describe("day") == "day window discounted to 80%"
    with pytest.raises(ConfigError, match=r"^policy\.scores\.discounted: factor: Field required$"):
        policies.resolve(make_scenario(policy={"card_class": "flagship", "score": "discounted"}).policy)
    with pytest.raises(ConfigError, match=r"^policy\.scores\.discounted: factor: Input should be less than or equal to 1$"):
        policies.resolve(make_scenario(policy={"card_class": "flagship", "scores": {"discounted": {"factor": 2}}}).policy)
