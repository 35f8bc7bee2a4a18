"""The recommendation's demand side: which forecaster, and which quantile of its errors, a pool should size for.

A forecast's cost does not depend on the cards: an hour sized to h × its forecast s is short by max(0, d − h s) of
its demand d and holds h s of capacity. So each candidate is judged on the search's months by demand alone, as the
capacity check judges a policy: the smallest headroom h at which a month's unmet share stays within the mark, the
`min_pass` quantile of it over the months, and at that headroom the capacity held over the demand served (the
median over months). The candidate holding least is the one the card-side search then runs with; every figure the
recommendation prints still comes from full replays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from fleet.core.forecast import Forecaster, error_margin, one_step

FORECAST_CANDIDATES = ("last-hour", "seasonal", "holt-winters")
QUANTILE_CANDIDATES: tuple[float | None, ...] = (None, 0.5, 0.75, 0.9)


@dataclass(frozen=True)
class ForecastChoice:
    """One forecaster and margin judged on demand alone."""

    forecast: str
    forecast_quantile: float | None
    headroom: float | None  # the least headroom covering demand in `min_pass` of the months (None: none in the search)
    held_over_demand: float  # median over months of capacity sized for / demand, at that headroom (inf: none)
    forecast_error: float  # median over months of the mean absolute relative error of the forecast


def scenario_demand(scenario, seed: int, demand_file_tps: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The (history, month) demand a scenario draws for `seed`: the very series its month draws, without its cards."""
    from fleet.core.month import draw_demand, stream

    return draw_demand(scenario.demand, scenario.hours, scenario.warmup_hours, stream(seed, "demand"), seed, demand_file_tps)


def _month_headroom(sizing: np.ndarray, demand: np.ndarray, grid: np.ndarray, max_unmet: float) -> float:
    """The least headroom on the grid at which the month's unmet share is within the mark (inf: none)."""
    s = np.where(np.isfinite(sizing), sizing, np.inf)
    short = np.maximum(0.0, demand[None, :] - grid[:, None] * s[None, :]).sum(axis=1) / max(demand.sum(), 1e-300)
    ok = np.flatnonzero(short <= max_unmet + 1e-12)
    return float(grid[ok[0]]) if ok.size else float("inf")


def rank_forecasts(
    months: Sequence[tuple[np.ndarray, np.ndarray]],
    forecasters: Callable[[str], Forecaster],
    candidates: Sequence[str] = FORECAST_CANDIDATES,
    quantiles: Sequence[float | None] = QUANTILE_CANDIDATES,
    error_hours: int = 168,
    min_pass: float = 0.95,
    max_unmet: float = 0.005,
    search: tuple[float, float, float] = (1.0, 1.5, 0.0025),
) -> list[ForecastChoice]:
    """Every (forecaster, quantile) over the months' (history, month) demand, least capacity held first."""
    lo, hi, step = search
    grid = np.round(np.arange(lo, hi + step / 2, step), 6)
    out = []
    for name in candidates:
        fc = forecasters(name)
        runs = []
        for history, month in months:
            observed = np.concatenate([np.asarray(history, np.float64), np.asarray(month, np.float64)[:-1]])
            f = one_step(fc, observed)
            runs.append((observed, f, len(history), np.asarray(month, np.float64)))
        for q in quantiles:
            need, sized, errors = [], [], []
            for observed, f, first, month in runs:
                margin = error_margin(observed, f, q, error_hours, first)
                fm = f[first:]
                sizing = np.where(np.isfinite(fm), fm * margin, np.inf)
                need.append(_month_headroom(sizing, month, grid, max_unmet))
                sized.append((np.where(np.isfinite(sizing), sizing, month), month))
                ok = np.isfinite(fm) & (month > 0)
                errors.append(float(np.mean(np.abs(fm[ok] - month[ok]) / month[ok])) if ok.any() else np.nan)
            h = np.sort(np.array(need))
            k = max(1, int(np.ceil(min_pass * h.size - 1e-9)))
            headroom = float(h[k - 1]) if np.isfinite(h[k - 1]) else None
            held = float(np.median([(headroom * s).sum() / d.sum() for s, d in sized])) if headroom is not None else float("inf")
            out.append(ForecastChoice(name, q, headroom, held, float(np.nanmedian(errors))))
    return sorted(out, key=lambda c: (c.held_over_demand, c.forecast_error))
