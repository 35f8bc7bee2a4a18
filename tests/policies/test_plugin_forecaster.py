"""A new demand forecaster with a setting of its own is its module, its registration and its test, and nothing else.

The forecaster here is written the way one in `policies/forecasters.py` is: a settings model it owns (`hours`,
written in its own table, `[policy.forecasters.trailing-mean]`) and a `start` that walks the series an hour at a time,
asked before it is told. Registered, it is read from a preset file's table and the replay sizes each hour to it, with
no change anywhere else.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import Field

import policies
from fleet.core.errors import ConfigError
from fleet.core.registry import Plugin
from fleet.core.scenario import Strict
from fleet.presets import load_preset, replay_scenario


# -- the forecaster's module ------------------------------------------------------------------------------------


class TrailingMeanSettings(Strict):
    hours: int = Field(default=24, ge=1, le=24 * 31)  # the hours before the next one it averages


class _Run:
    def __init__(self, hours: int):
        self.hours, self.seen = hours, []

    def predict(self) -> float:
        recent = [x for x in self.seen[-self.hours:] if not math.isnan(x)]
        return sum(recent) / len(recent) if recent else math.nan

    def observe(self, demand_tps: float) -> None:
        self.seen.append(demand_tps)


class TrailingMean:
    """Each hour sized to the mean of the `hours` before it (a forecaster no one would pick: it shows the shape)."""

    name = "trailing-mean"
    knows_demand = False

    def __init__(self, settings: TrailingMeanSettings):
        self.hours = settings.hours

    def start(self) -> _Run:
        return _Run(self.hours)


# -- its registration -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def registered():
    if "trailing-mean" not in policies.FORECASTERS:
        policies.FORECASTERS.register(Plugin("trailing-mean", TrailingMeanSettings, TrailingMean))


# -- its test ---------------------------------------------------------------------------------------------------


PRESET = """\
name = "trailing"
seed = 4
hours = 96
warmup_hours = 48

[[classes]]
name = "flagship"
rated_tps = 6000
rent_usd_per_month = 2690
pool_cards = 14

[demand]
shape = "diurnal"
avg_tps = 30000
peak_to_avg = 1.8

[policy]
card_class = "flagship"
mode = "steady"
forecast = "trailing-mean"

[policy.forecasters.trailing-mean]
hours = 6
"""


def test_the_forecaster_is_read_from_its_table_and_each_hour_is_sized_to_it(tmp_path):
    (tmp_path / "trailing.toml").write_text(PRESET)
    scenario = load_preset(str(tmp_path / "trailing.toml")).scenario
    assert policies.resolve(scenario.policy).forecast.hours == 6  # its setting, from its own table
    r = replay_scenario(scenario)
    assert r.figures["forecast"] == "trailing-mean" and not r.demand.knew_demand
    series = np.concatenate([r.month.demand_history_tps, r.month.demand_tps])
    first = r.month.demand_history_tps.size
    expected = [series[first + h - 6 : first + h].mean() for h in range(r.month.hours)]
    np.testing.assert_allclose(r.demand.forecast_tps, expected, rtol=1e-12)


def test_the_forecaster_validates_its_own_table():
    from tests.conftest import make_scenario

    policy = make_scenario(policy={"card_class": "flagship", "forecast": "trailing-mean",
                                   "forecasters": {"trailing-mean": {"hours": 0}}}).policy
    with pytest.raises(ConfigError, match=r"^policy\.forecasters\.trailing-mean: hours: Input should be greater than or equal to 1$"):
        policies.resolve(policy)
