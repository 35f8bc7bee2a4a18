"""Held mode: the greedy sized once for the peak demand × headroom and kept warm all month.

The peak is the month's own only under the seed's clairvoyant view; otherwise it is the highest demand seen or
forecast so far, and when it rises the best spares are added to cover it. An evicted card is replaced by the best
spares until the scored capacity covers the target again. Held mode never releases a card.
"""

from __future__ import annotations

import numpy as np

from fleet.core.greedy import greedy_run_set
from fleet.core.plugins import SizingInput


class Held:
    name = "held"

    def target_tps(self, demand_tps, peak_demand_tps, headroom: float):
        """The peak × headroom, each hour."""
        return np.zeros_like(np.asarray(demand_tps, dtype=np.float64)) + np.asarray(peak_demand_tps, dtype=np.float64) * headroom

    def size(self, inp: SizingInput) -> np.ndarray:
        k = len(inp.hours)
        if not k:
            return np.zeros((inp.eligible.size, 0), dtype=bool)
        target = inp.target_tps(self)
        peak = np.broadcast_to(np.asarray(inp.peak_demand_tps, dtype=np.float64), (k,))
        score = inp.score_tps[:, 0]
        if inp.previous is None:
            chosen = greedy_run_set(score, inp.rent_usd_per_hour, float(target[0]), inp.eligible)
        else:
            keep = inp.previous & inp.eligible
            chosen = keep
            if (inp.previous & ~inp.eligible).any() or peak[0] > inp.peak_before_tps:
                chosen = keep | _top_up(score, inp, float(target[0]), keep)
        out = np.empty((chosen.size, k), dtype=bool)
        start = 0
        for j in np.flatnonzero(peak[1:] > peak[:-1]) + 1:  # the peak rose: cover it from the spares
            out[:, start:j] = chosen[:, None]
            chosen = chosen | _top_up(inp.score_tps[:, j], inp, float(target[j]), chosen)
            start = j
        out[:, start:] = chosen[:, None]
        return out


def _top_up(score: np.ndarray, inp: SizingInput, target: float, keep: np.ndarray) -> np.ndarray:
    """The best spares that bring the kept cards' scored capacity up to the target (none if it covers it)."""
    short = target - float(score[keep].sum())
    if short <= 0:
        return np.zeros_like(keep)
    return greedy_run_set(score, inp.rent_usd_per_hour, short, inp.eligible & ~keep)
