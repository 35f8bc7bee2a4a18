"""Steady mode: the greedy re-run every hour on current scores against that hour's demand × headroom."""

from __future__ import annotations

import numpy as np

from fleet.core.greedy import greedy_run_set
from fleet.core.plugins import SizingInput


class Steady:
    name = "steady"

    def target_tps(self, demand_tps, peak_demand_tps: float, headroom: float):
        """This hour's demand × headroom."""
        return np.asarray(demand_tps, dtype=np.float64) * headroom

    def size(self, inp: SizingInput) -> np.ndarray:
        return greedy_run_set(inp.score_tps, inp.rent_usd_per_hour, inp.target_tps(self), inp.eligible)
