"""Each month's demand, hour by hour, as the decide and bill jobs both read it.

A simulation's demand is its drawn month's. A real pool's is drawn from the
config's `[demand]` table with the month's start as the seed, so every job and
every restart sees the same series for the same month.
"""

from __future__ import annotations

import numpy as np


class MonthDemand:
    """Demand (tok/s) of each hour of a month, by the month's start; drawn once per month and kept."""

    def __init__(self, demand, month_hours: int, simulated_tps: np.ndarray | None = None):
        self.demand = demand
        self.month_hours = month_hours
        self.simulated_tps = simulated_tps
        self._drawn: dict[int, np.ndarray] = {}

    def of(self, month_start_ts: int) -> np.ndarray:
        if self.simulated_tps is not None:
            return self.simulated_tps
        if month_start_ts not in self._drawn:
            from fleet.core.month import demand_series

            self._drawn[month_start_ts] = demand_series(self.demand, self.month_hours, np.random.default_rng(month_start_ts))
        return self._drawn[month_start_ts]
