"""Demand as the autoscaler sees it: each hour's forecast made from the hours before it, the margin the forecaster's
own recent errors ask for, and the peak held mode sizes for.

The core drives every forecaster the same way, in replay and in the service (`one_step`): it asks for an hour's
forecast, and only then hands over that hour's demand. A forecaster is never given the series, so it cannot read
the hour it sizes. The one exception is the seed's clairvoyant view (`knows_demand`): it is handed the month's true
demand, and every figure made under it says so.

`demand_view` is the one function both clocks call: replay with the month's whole series (the forecasts still look
only backwards), the service with the demand measured so far, taking the last hour of the view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class ForecastRun(Protocol):
    """One forecaster's state as it walks a series: asked for the next hour, then told what it was."""

    def predict(self) -> float:
        """The next hour's demand in tokens/s (NaN: nothing to forecast from yet)."""

    def observe(self, demand_tps: float) -> None:
        """The demand of the hour just forecast (NaN where it is missing)."""


class Forecaster(Protocol):
    name: str
    knows_demand: bool  # True only for the seed's clairvoyant view: it is handed the hour's own demand

    def start(self) -> ForecastRun:
        """A run that has seen nothing yet."""


def one_step(forecaster: Forecaster, demand_tps: np.ndarray) -> np.ndarray:
    """`f[t]` for t in 0..n, each made from `demand_tps[:t]` only; n + 1 values, the last the hour after the series.

    An hour with no demand measured is handed to the forecaster as NaN; it may skip it or impute.
    """
    run = forecaster.start()
    values = np.asarray(demand_tps, dtype=np.float64).tolist()
    out = np.empty(len(values) + 1)
    for t, x in enumerate(values):
        out[t] = run.predict()
        run.observe(x)
    out[len(values)] = run.predict()
    return out


def error_margin(demand_tps: np.ndarray, forecast_tps: np.ndarray, quantile: float | None, error_hours: int,
                 first: int) -> np.ndarray:
    """The margin at each hour from `first` to `len(demand_tps)`: the `quantile` of actual / forecast over the
    `error_hours` before it that have both (1.0 where none has, or with no quantile set).

    Measured as it goes: the margin of hour t reads the errors of hours before t only.
    """
    n = len(demand_tps)
    hours = n - first + 1
    if quantile is None:
        return np.ones(hours)
    d = np.asarray(demand_tps, dtype=np.float64)
    f = np.asarray(forecast_tps[:n], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.isfinite(d) & np.isfinite(f) & (f > 0), d / f, np.nan)
    padded = np.concatenate([np.full(error_hours, np.nan), ratio])
    # Window of hour t (t = first..n): ratio[t - error_hours : t], i.e. padded[t : t + error_hours].
    windows = np.lib.stride_tricks.sliding_window_view(padded, error_hours)[first : n + 1]
    ordered = np.sort(windows, axis=1)  # NaN sort last
    count = np.isfinite(ordered).sum(axis=1)
    pos = quantile * np.maximum(count - 1, 0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(count - 1, 0))
    rows = np.arange(hours)
    a, b = ordered[rows, lo], ordered[rows, hi]
    value = a + (pos - lo) * (b - a)
    return np.where(count > 0, value, 1.0)


@dataclass(frozen=True)
class DemandView:
    """What the autoscaler believes of each hour's demand, for a run of hours of one month."""

    forecast_tps: np.ndarray  # (hours,) the forecast of each hour (the truth when the policy knew it; NaN: none yet)
    margin: np.ndarray  # (hours,) the forecast-error quantile the sizing multiplies by (1.0 when none is set)
    sizing_tps: np.ndarray  # (hours,) forecast × margin: what steady mode sizes for (inf: nothing to forecast from)
    peak_tps: np.ndarray  # (hours,) what held mode sizes for: the highest demand seen or sized for so far
    peak_before_tps: float  # held mode's peak at the hour before the view's first (NaN: the month starts with it)
    knew_demand: bool

    def hour(self, i: int) -> "DemandView":
        """The view of one of its hours (the service's)."""
        s = slice(i, i + 1)
        before = float(self.peak_tps[i - 1]) if i > 0 else self.peak_before_tps
        return DemandView(self.forecast_tps[s], self.margin[s], self.sizing_tps[s], self.peak_tps[s], before, self.knew_demand)


def demand_view(forecaster: Forecaster, observed_tps: np.ndarray, first: int, quantile: float | None = None,
                error_hours: int = 168, known_tps: np.ndarray | None = None, cold_start_tps: float | None = None
                ) -> DemandView:
    """The view of every hour from `first` (the month's first hour in `observed_tps`) to `len(observed_tps)`.

    `observed_tps` is the demand measured so far, the history before the month included; hour t's forecast reads
    `observed_tps[:t]` only (`one_step`). Held mode's peak is the highest demand observed from a week before the
    month up to the hour before, or sized for in the month so far. A forecaster that `knows_demand` reads
    `known_tps`, the month's true demand (its future peak included): the seed's model, said so by `knew_demand`.
    An hour with nothing to forecast from yet is sized for `cold_start_tps` (the level the operator declared), or,
    with none declared, for every card.
    """
    observed = np.asarray(observed_tps, dtype=np.float64)
    n = len(observed)
    hours = n - first + 1
    if forecaster.knows_demand:
        if known_tps is None:
            raise ValueError("a forecaster that knows the demand needs the month's true demand")
        truth = np.asarray(known_tps, dtype=np.float64)[:hours]
        if truth.size < hours:
            truth = np.concatenate([truth, np.full(hours - truth.size, truth[-1] if truth.size else np.nan)])
        peak = float(np.max(known_tps)) if len(known_tps) else 0.0
        ones = np.ones(hours)
        return DemandView(truth, ones, truth.copy(), np.full(hours, peak), peak, True)
    forecast = one_step(forecaster, observed)
    margin = error_margin(observed, forecast, quantile, error_hours, first)
    f = forecast[first:]
    with np.errstate(invalid="ignore"):
        cold = np.inf if cold_start_tps is None else float(cold_start_tps)
        sizing = np.where(np.isfinite(f), f * margin, cold)
    seen_from = max(0, first - 168)
    seen = np.concatenate([[np.nan], observed[seen_from:]])  # seen[i]: the demand up to the hour before
    seen_max = np.fmax.accumulate(seen)[first - seen_from :]
    sized_max = np.fmax.accumulate(np.where(np.isfinite(sizing), sizing, np.nan))
    peak = np.fmax(seen_max, sized_max)
    peak = np.where(np.isnan(peak), cold, peak)  # nothing seen or forecast yet: the declared level, or every card
    before = float(seen_max[0]) if first > 0 and np.isfinite(seen_max[0]) else float("nan")
    return DemandView(f, margin, sizing, peak, before, False)
