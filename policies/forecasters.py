"""Demand forecasters: what the autoscaler expects the next hour to ask, from the hours before it.

Each is driven by the core one hour at a time (`fleet.core.forecast.one_step`): asked for the next hour, then told
what it was. None is given the series, so none can read the hour it sizes. Each declares its own settings
(`[policy.forecasters.NAME]`), validated when the policy is resolved.

- `known`: the seed's clairvoyant view, each hour's own demand. Only the seed's presets use it; every figure made
  under it says the policy knew the demand.
- `last-hour`: persistence, the hour before.
- `seasonal`: the same hour a day back and a week back, each rescaled by how the last `recent_hours` compare with
  the same hours then (a Monday morning read off a Sunday's is lifted by how much busier this morning already is).
- `holt-winters`: additive seasonal exponential smoothing of log-demand (a level, a damped trend, a season of
  `season_hours`), its smoothing constants and damping fitted once, on a grid run as one array, to the one-step
  errors of the first `fit_hours` it has seen, the season's start averaged over every whole season seen. `bench/forecasters.py` measures it beside statsmodels' `ExponentialSmoothing` on the same series.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from fleet.core.scenario import Strict

NAN = float("nan")


class Known:
    name = "known"
    knows_demand = True

    def start(self):
        raise TypeError("the known view is handed the month's demand, not run hour by hour")


class _LastRun:
    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = NAN

    def predict(self) -> float:
        return self.last

    def observe(self, demand_tps: float) -> None:
        if demand_tps == demand_tps:
            self.last = demand_tps


class LastHour:
    name = "last-hour"
    knows_demand = False

    def start(self) -> _LastRun:
        return _LastRun()


class SeasonalSettings(Strict):
    recent_hours: int = Field(default=3, ge=1, le=24)  # hours the recent level is read over
    lags_hours: tuple[int, ...] = Field(default=(24, 168), min_length=1)  # the seasons looked back to


class _SeasonalRun:
    __slots__ = ("seen", "recent", "lags")

    def __init__(self, recent: int, lags: tuple[int, ...]) -> None:
        self.seen: list[float] = []
        self.recent = recent
        self.lags = lags

    def predict(self) -> float:
        seen, r = self.seen, self.recent
        t = len(seen)
        if not t:
            return NAN
        refs = []
        now = sum(seen[t - r:]) if t >= r else 0.0
        for lag in self.lags:
            if t >= lag + r:
                then = sum(seen[t - lag - r : t - lag])
                if then > 0:
                    refs.append(seen[t - lag] * now / then)
        return sum(refs) / len(refs) if refs else seen[-1]

    def observe(self, demand_tps: float) -> None:
        if demand_tps != demand_tps:  # missing: carry what was expected, so the seasons stay aligned
            demand_tps = self.predict()
            if demand_tps != demand_tps:
                return
        self.seen.append(float(demand_tps))


class Seasonal:
    name = "seasonal"
    knows_demand = False

    def __init__(self, settings: SeasonalSettings = SeasonalSettings()):
        self.settings = settings

    def start(self) -> _SeasonalRun:
        return _SeasonalRun(self.settings.recent_hours, tuple(self.settings.lags_hours))


class HoltWintersSettings(Strict):
    season_hours: int = Field(default=24, ge=2, le=24 * 7)  # the season's length
    fit_hours: int = Field(default=168, ge=24, le=24 * 62)  # hours seen before the constants (and damping) are fitted


_ALPHAS = (0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 0.95)
_BETAS = (0.0, 0.03)
_GAMMAS = (0.02, 0.05, 0.1, 0.2, 0.35)
_DAMPINGS = (0.9, 0.98)
_DEFAULT = (0.35, 0.0, 0.15, 0.95)
_FLOOR_TPS = 1e-6
_LEAST_BELOW_LEVEL = math.log(20.0)
"""An hour is read as at least 1/20 of the level: in log space a zero hour would otherwise drag the level and the
season by many orders of magnitude, and the hours after it would be forecast as far above."""
_MOST_ABOVE_SEEN = math.log(2.0)
"""No forecast above twice the highest demand seen: a trend carried past every hour ever measured is the model
running away, not a forecast."""


def initial_state(log_tps: np.ndarray, season: int) -> tuple[float, np.ndarray]:
    """The level of the first season and the season's shape averaged over every whole season seen (one season
    alone carries its own noise into every later forecast)."""
    whole = (log_tps.size // season) * season
    cycles = log_tps[:whole].reshape(-1, season)
    shape = (cycles - cycles.mean(axis=1, keepdims=True)).mean(axis=0)
    return float(cycles[0].mean()), shape


def fit_constants(log_tps: np.ndarray, season: int) -> tuple[float, float, float, float]:
    """The grid's (alpha, beta, gamma, damping) with the least squared one-step error over `log_tps`, every
    candidate run at once."""
    grid = np.array([(a, b, g, d) for a in _ALPHAS for b in _BETAS for g in _GAMMAS for d in _DAMPINGS])
    alpha, beta, gamma, phi = grid.T
    first_level, shape = initial_state(log_tps, season)
    level = np.full(grid.shape[0], first_level)
    trend = np.zeros(grid.shape[0])
    seas = np.tile(shape, (grid.shape[0], 1))
    sse = np.zeros(grid.shape[0])
    for t in range(season, log_tps.size):
        i = t % season
        pred = level + phi * trend + seas[:, i]
        err = log_tps[t] - pred
        sse += err * err
        new_level = level + phi * trend + alpha * err
        trend = phi * trend + alpha * beta * err
        seas[:, i] += gamma * (1.0 - alpha) * err
        level = new_level
    a, b, g, d = grid[int(np.argmin(sse))]
    return float(a), float(b), float(g), float(d)


class _HoltWintersRun:
    __slots__ = ("m", "fit_hours", "phi", "alpha", "beta", "gamma", "logs", "level", "trend", "season", "t", "fitted",
                 "highest")

    def __init__(self, s: HoltWintersSettings) -> None:
        self.m, self.fit_hours = s.season_hours, s.fit_hours
        self.alpha, self.beta, self.gamma, self.phi = _DEFAULT
        self.logs: list[float] = []
        self.highest = -math.inf
        self.level = self.trend = 0.0
        self.season: list[float] = []
        self.t = 0
        self.fitted = False

    def predict(self) -> float:
        if self.t < self.m:
            return math.exp(self.logs[-1]) if self.logs else NAN
        guess = self.level + self.phi * self.trend + self.season[self.t % self.m]
        return math.exp(min(guess, self.highest + _MOST_ABOVE_SEEN))

    def _start(self) -> None:
        level, shape = initial_state(np.array(self.logs), self.m)
        self.level, self.trend, self.season = level, 0.0, shape.tolist()

    def _update(self, y: float) -> None:
        i = self.t % self.m
        err = y - (self.level + self.phi * self.trend + self.season[i])
        new_level = self.level + self.phi * self.trend + self.alpha * err
        self.trend = self.phi * self.trend + self.alpha * self.beta * err
        self.season[i] += self.gamma * (1.0 - self.alpha) * err
        self.level = new_level

    def observe(self, demand_tps: float) -> None:
        if demand_tps != demand_tps:  # missing: as expected, so the season stays aligned
            demand_tps = self.predict()
            if demand_tps != demand_tps:
                return
        y = math.log(max(float(demand_tps), _FLOOR_TPS))
        if self.t >= self.m:
            y = max(y, self.level - _LEAST_BELOW_LEVEL)  # a quiet hour, not a collapse of the level
        self.highest = max(self.highest, y)
        self.logs.append(y)
        if self.t >= self.m:
            self._update(y)
        self.t += 1
        if self.t == self.m:
            self._start()
        if self.t == self.fit_hours and not self.fitted:
            self.fitted = True
            self.alpha, self.beta, self.gamma, self.phi = fit_constants(np.array(self.logs), self.m)
            self._start()  # replay what was seen under the fitted constants
            for t in range(self.m, self.t):
                saved, self.t = self.t, t
                self._update(self.logs[t])
                self.t = saved


class HoltWinters:
    name = "holt-winters"
    knows_demand = False

    def __init__(self, settings: HoltWintersSettings = HoltWintersSettings()):
        self.settings = settings

    def start(self) -> _HoltWintersRun:
        return _HoltWintersRun(self.settings)
