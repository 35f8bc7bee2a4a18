"""Each month's demand, hour by hour, as the decide and bill jobs both read it, and the view the policy sizes from.

A simulation's demand is its drawn month's, with the history drawn before it. A real pool's is drawn from the
config's `[demand]` table with the month's start as the seed, so every job and every restart sees the same series
for the same month. The decide job never reads an hour's demand itself: it asks `view` for what the policy
believes of the hour, which the core's `demand_view` makes from the hours before it, as replay does.
"""

from __future__ import annotations

import numpy as np

from fleet.core.forecast import DemandView, demand_view


class MonthDemand:
    """Demand (tok/s) of each hour of a month, by the month's start; drawn once per month and kept."""

    def __init__(self, demand, month_hours: int, simulated_tps: np.ndarray | None = None,
                 simulated_history_tps: np.ndarray | None = None):
        self.demand = demand
        self.month_hours = month_hours
        self.simulated_tps = simulated_tps
        self.simulated_history_tps = simulated_history_tps
        self._drawn: dict[int, np.ndarray] = {}

    def of(self, month_start_ts: int) -> np.ndarray:
        if self.simulated_tps is not None:
            return self.simulated_tps
        if month_start_ts not in self._drawn:
            from fleet.core.month import demand_series

            self._drawn[month_start_ts] = demand_series(self.demand, self.month_hours, np.random.default_rng(month_start_ts))
        return self._drawn[month_start_ts]

    def history(self, month_start_ts: int) -> np.ndarray:
        """The demand of the hours before the month that a forecaster may read."""
        if self.simulated_tps is not None and self.simulated_history_tps is not None:
            return np.asarray(self.simulated_history_tps, dtype=np.float64)
        return np.empty(0)

    def view(self, month_start_ts: int, hour: int, parts) -> DemandView:
        """What the policy believes of month hour `hour`: its forecast from the demand before it, and held mode's
        peak (the same `demand_view` replay calls on the month, cut at the hour)."""
        month = np.asarray(self.of(month_start_ts), dtype=np.float64)
        history = self.history(month_start_ts)
        observed = np.concatenate([history, month[:hour]])
        p = parts.policy
        view = demand_view(parts.forecast, observed, history.size, p.forecast_quantile, p.forecast_error_hours,
                           known_tps=month if parts.knows_demand else None)
        return view.hour(hour)
