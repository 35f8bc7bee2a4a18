"""The demand the autoscaler sees: forecasts from the past only, margins from their own errors, held mode's peak."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import policies
from fleet.core.compare import MonthCache
from fleet.core.forecast import demand_view, error_margin, one_step
from fleet.core.month import draw_month
from fleet.core.replay import month_demand, replay
from fleet.core.scenario import Scenario

REAL = [n for n in policies.FORECASTERS.names() if n != "known"]


def scenario(forecast: str, mode: str = "steady", quantile: float | None = None, seed: int = 3) -> Scenario:
    return Scenario.model_validate({
        "seed": seed, "hours": 96, "warmup_hours": 48,
        "classes": [{"name": "flagship", "rated_tps": 6000, "rent_usd_per_month": 2690, "pool_cards": 24}],
        "dips": {"start_prob_per_hour": 0.01},
        "demand": {"shape": "diurnal", "avg_tps": 50_000, "peak_to_avg": 1.8, "noise": 0.08, "noise_hours": 4,
                   "burst_prob_per_hour": 0.02, "burst_mult": 1.5},
        "policy": {"card_class": "flagship", "mode": mode, "forecast": forecast, "forecast_quantile": quantile},
    })


def with_demand_changed(month, hour: int, factor: float):
    from dataclasses import replace

    d = month.demand_tps.copy()
    d[hour] *= factor
    return replace(month, demand_tps=d)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(REAL), st.sampled_from(["steady", "held"]), st.sampled_from([None, 0.8]),
       st.integers(0, 95), st.floats(0.2, 3.0))
def test_no_forecaster_reads_the_hour_it_sizes_in_replay(name, mode, quantile, hour, factor):
    """Changing the demand of hour h changes nothing the policy decided at or before h (the bill may change)."""
    s = scenario(name, mode, quantile)
    parts = policies.resolve(s.policy)
    month = draw_month(s)
    other = with_demand_changed(month, hour, factor)
    a, b = replay(s, parts, month=month), replay(s, parts, month=other)
    assert np.array_equal(a.warm[:, : hour + 1], b.warm[:, : hour + 1])
    va, vb = a.demand, b.demand
    assert np.array_equal(va.forecast_tps[: hour + 1], vb.forecast_tps[: hour + 1], equal_nan=True)
    assert np.array_equal(va.peak_tps[: hour + 1], vb.peak_tps[: hour + 1])


def test_the_known_view_reads_the_hour_and_says_so():
    s = scenario("known")
    parts = policies.resolve(s.policy)
    month = draw_month(s)
    view = month_demand(month, parts)
    assert view.knew_demand and parts.knows_demand
    assert np.array_equal(view.sizing_tps, month.demand_tps)
    assert np.all(view.peak_tps == month.demand_tps.max())  # the month's future peak: only the seed's model sees it
    changed = replay(s, parts, month=with_demand_changed(month, 10, 3.0))
    assert changed.figures["knew_demand"] is True and changed.demand.sizing_tps[10] == 3.0 * month.demand_tps[10]


@pytest.mark.parametrize("name", REAL)
def test_a_forecaster_is_never_handed_the_series(name):
    """The core hands a run one hour at a time, after asking for it: what a run holds is only what it was told."""
    told = []

    class Spy:
        knows_demand = False

        def start(self):
            inner = policies.forecaster(scenario(name).policy).start()

            class Run:
                def predict(self):
                    return inner.predict()

                def observe(self, x):
                    told.append(x)
                    inner.observe(x)

            return Run()

    series = np.arange(1.0, 50.0)
    f = one_step(Spy(), series)
    assert told == series.tolist() and f.size == series.size + 1


def test_the_service_and_replay_views_agree_hour_by_hour():
    """`demand_view` cut at hour h (the service's call) equals the month's view at h (replay's)."""
    s = scenario("holt-winters", "held", 0.8)
    parts = policies.resolve(s.policy)
    month = draw_month(s)
    whole = month_demand(month, parts)
    history = month.demand_history_tps
    for h in (0, 1, 23, 60, 95):
        observed = np.concatenate([history, month.demand_tps[:h]])
        cut = demand_view(parts.forecast, observed, history.size, 0.8, s.policy.forecast_error_hours).hour(h)
        assert cut.sizing_tps[0] == whole.sizing_tps[h] and cut.peak_tps[0] == whole.peak_tps[h]
        assert (h == 0 and np.isnan(cut.peak_before_tps)) or cut.peak_before_tps == whole.peak_tps[h - 1]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(1.0, 1e6), min_size=3, max_size=60), st.floats(0.05, 0.95), st.integers(1, 30))
def test_the_error_margin_is_the_quantile_of_the_errors_before_each_hour(demand, q, hours):
    d = np.array(demand)
    f = np.concatenate([[np.nan], d[:-1] * 1.1, [d[-1]]])  # a forecast per hour and one beyond
    first = 1
    got = error_margin(d, f, q, hours, first)
    ratio = d / f[: d.size]
    for i, t in enumerate(range(first, d.size + 1)):
        window = ratio[max(0, t - hours) : t]
        window = window[np.isfinite(window)]
        want = np.quantile(window, q) if window.size else 1.0
        assert got[i] == pytest.approx(want, rel=1e-12)


def test_held_mode_sizes_for_the_peak_seen_and_grows_with_it():
    """Held mode's peak at hour t is the most it has seen before t (a week back included) or sized for up to t; on a
    month whose demand climbs past its history, held mode adds cards as the peak rises and never releases one."""
    from dataclasses import replace

    s = scenario("last-hour", "held")
    parts = policies.resolve(s.policy)
    drawn = draw_month(s)
    month = replace(drawn, demand_history_tps=np.full(48, 40_000.0), demand_tps=np.linspace(40_000, 90_000, 96))
    r = MonthCache(month, exact=False).replay(s, parts)
    view = r.demand
    seen = np.concatenate([month.demand_history_tps, month.demand_tps])
    for t in (0, 10, 50, 95):
        want = max(seen[: 48 + t].max(), np.max(view.sizing_tps[: t + 1]))
        assert view.peak_tps[t] == pytest.approx(want)
    assert view.peak_tps[0] < month.demand_tps.max()  # it does not know the month's peak at hour 0
    warm = r.warm
    assert np.all(warm[:, 1:] >= warm[:, :-1])  # held mode adds when the peak rises, never releases
    assert warm[:, -1].sum() > warm[:, 0].sum()


def test_cold_start_takes_every_card():
    """With no demand before the month (a real trace, a new pool), hour 0 has nothing to forecast from."""
    from dataclasses import replace

    s = scenario("holt-winters")
    parts = policies.resolve(s.policy)
    month = replace(draw_month(s), demand_history_tps=np.empty(0))
    r = replay(s, parts, month=month)
    assert r.warm[:, 0].all() and not r.warm[:, 5].all()


def test_a_forecaster_setting_is_validated_by_the_forecaster():
    from fleet.core.errors import ConfigError

    bad = scenario("seasonal").policy.model_copy(update={"forecasters": {"seasonal": {"recent_hours": 0}}})
    with pytest.raises(ConfigError, match=r"policy\.forecasters\.seasonal: recent_hours"):
        policies.resolve(bad)
    unknown = scenario("last-hour").policy.model_copy(update={"forecasters": {"last-hour": {"alpha": 0.3}}})
    with pytest.raises(ConfigError, match=r"policy\.forecasters\.last-hour: alpha: unknown key"):
        policies.resolve(unknown)
