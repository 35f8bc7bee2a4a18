"""Steady mode: the greedy re-run every hour on current scores against that hour's demand × headroom."""

from __future__ import annotations

import numpy as np

from fleet.sizing import greedy_run_set
from policies.base import SizingInput


class Steady:
    name = "steady"

    def size(self, inp: SizingInput) -> np.ndarray:
        return greedy_run_set(inp.score_tps, inp.rent_usd_per_hour, inp.demand_tps * inp.headroom, inp.eligible)
