"""Each forecaster answers its own questions, table-driven: what it forecasts from a series it is walked through."""

from __future__ import annotations

import numpy as np
import pytest

import policies
from fleet.core.forecast import one_step
from fleet.core.scenario import Policy


def forecaster(name: str, **settings):
    return policies.forecaster(Policy(card_class="x", forecast=name, forecasters={name: settings}))


DAY = 24
hours = np.arange(24 * 21, dtype=np.float64)
PERIODIC = 1000.0 + 400.0 * np.sin(2 * np.pi * hours / DAY)
RAMP = np.linspace(100.0, 500.0, 200)


@pytest.mark.parametrize("name, series, after, max_error", [
    ("last-hour", RAMP, 1, 0.03),  # persistence trails a ramp by one step
    ("seasonal", PERIODIC, 8 * DAY, 1e-9),  # a series that repeats daily is forecast exactly once a week is seen
    ("holt-winters", PERIODIC, 8 * DAY, 0.01),
    ("holt-winters", np.full(300, 750.0), DAY, 1e-9),
])
def test_forecasts_of_a_known_series(name, series, after, max_error):
    f = one_step(forecaster(name), series)[:-1]
    rel = np.abs(f[after:] - series[after:]) / series[after:]
    assert rel.max() <= max_error


@pytest.mark.parametrize("name", ["last-hour", "seasonal", "holt-winters"])
def test_nothing_seen_is_nothing_forecast_and_a_missing_hour_is_carried(name):
    f = one_step(forecaster(name), np.array([np.nan, 500.0, np.nan, 500.0]))
    assert np.isnan(f[0]) and np.isnan(f[1])  # nothing seen yet
    assert f[2] == pytest.approx(500.0) and f[3] == pytest.approx(500.0) and f[4] == pytest.approx(500.0)


def test_seasonal_rescales_by_the_recent_level():
    """A day twice as busy as the week before it: the same-hour references are lifted by the last hours' ratio."""
    base = PERIODIC[: 8 * DAY].copy()
    base[7 * DAY :] *= 2.0
    f = one_step(forecaster("seasonal", recent_hours=3, lags_hours=[168]), base)
    assert f[-1] == pytest.approx(2.0 * PERIODIC[8 * DAY % (7 * DAY)], rel=1e-9)


def test_the_known_view_is_not_walked():
    fc = forecaster("known")
    assert fc.knows_demand
    with pytest.raises(TypeError):
        fc.start()


def test_every_forecaster_is_registered_with_its_settings():
    assert set(policies.FORECASTERS.names()) == {"known", "last-hour", "seasonal", "holt-winters"}
    for plugin in policies.FORECASTERS:
        assert plugin.settings.model_validate({}) is not None  # every setting has a default


def test_holt_winters_survives_hours_with_no_demand():
    # Two weeks of a daily cycle with 7 hours of no demand at all (a trace whose tenants all went quiet). In log
    # space a zero hour would drag the level by orders of magnitude, and the hours after it would be forecast far
    # above anything seen; read as a quiet hour, the forecasts stay within twice the highest demand seen.
    from fleet.core.forecast import one_step
    from policies.forecasters import HoltWinters

    rng = np.random.default_rng(3)
    h = np.arange(24 * 14)
    demand = 36_000 * (1 + 0.5 * np.sin(2 * np.pi * h / 24)) * rng.lognormal(0, 0.1, h.size)
    demand[rng.choice(np.arange(30, h.size), 7, replace=False)] = 0.0
    f = one_step(HoltWinters(), demand)[:-1]
    seen_max = np.fmax.accumulate(np.concatenate([[np.nan], demand[:-1]]))
    ok = np.isfinite(f)
    assert np.all(f[ok] <= 2 * seen_max[ok] + 1e-6)
    busy = ok & (demand > 0)
    assert np.mean(np.abs(f[busy] - demand[busy]) / demand[busy]) < 0.25


def test_a_cold_start_sizes_for_the_declared_level_not_every_card():
    from fleet.core.forecast import demand_view
    from policies.forecasters import LastHour

    cold = demand_view(LastHour(), np.array([]), 0, cold_start_tps=5_000.0)
    assert cold.sizing_tps[0] == 5_000.0 and cold.peak_tps[0] == 5_000.0
    assert np.isinf(demand_view(LastHour(), np.array([]), 0).sizing_tps[0])  # none declared: every card, as before
