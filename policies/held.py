"""Held mode: the greedy sized once for the month's peak demand × headroom and kept warm all month.

An evicted card is replaced by the best spares until the scored capacity covers the target again.
"""

from __future__ import annotations

import numpy as np

from fleet.core.greedy import greedy_run_set
from fleet.core.plugins import SizingInput


class Held:
    name = "held"

    def target_tps(self, demand_tps, peak_demand_tps: float, headroom: float):
        """The month's peak × headroom, every hour."""
        return np.zeros_like(np.asarray(demand_tps, dtype=np.float64)) + float(peak_demand_tps) * headroom

    def size(self, inp: SizingInput) -> np.ndarray:
        target = float(inp.target_tps(self)[0]) if len(inp.hours) else inp.peak_demand_tps * inp.headroom
        score = inp.score_tps[:, 0]
        if inp.previous is None:
            chosen = greedy_run_set(score, inp.rent_usd_per_hour, target, inp.eligible)
        else:
            keep = inp.previous & inp.eligible
            chosen = keep
            if (inp.previous & ~inp.eligible).any():
                short = target - float(score[keep].sum())
                if short > 0:
                    chosen = keep | greedy_run_set(score, inp.rent_usd_per_hour, short, inp.eligible & ~keep)
        return np.repeat(chosen[:, None], len(inp.hours), axis=1)
