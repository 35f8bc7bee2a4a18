"""The ideal operator: each hour, perfect knowledge of true rates, the cheapest whole-card set covering demand, no churn."""

from __future__ import annotations

import numpy as np

from fleet.sizing import greedy_run_set


def ideal_greedy_usd_by_hour(
    true_rate_tps: np.ndarray, rent_usd_per_hour: np.ndarray, demand_tps: np.ndarray, block_hours: int = 96
) -> np.ndarray:
    """The ideal bill of each hour by the greedy on true tokens per dollar over every card on the market.

    With one class this is the exact minimum (fewest cards, best first); with
    several it can overshoot by part of a card, which the exact ideal removes.
    The bill is summed `block_hours` at a time, bounding the float copy of the
    run set that the rent product makes.
    """
    hours = true_rate_tps.shape[1]
    out = np.empty(hours, dtype=np.float64)
    rent = rent_usd_per_hour.astype(np.float64)
    chosen = greedy_run_set(true_rate_tps, rent, demand_tps)
    # Cards-major blocks, reused: the product reads the bool block cast to float, as it
    # always has. Transposing the bool block first is several times faster than casting
    # across the transpose.
    width = min(hours, block_hours)
    block = np.empty((rent.size, width), dtype=bool)
    block_f = np.empty((rent.size, width), dtype=np.float64)
    for a in range(0, hours, block_hours):
        b = min(hours, a + block_hours)
        if b - a < width:
            block, block_f = block[:, : b - a].copy(), block_f[:, : b - a].copy()
        np.copyto(block, chosen[:, a:b])
        np.copyto(block_f, block)
        out[a:b] = rent @ block_f
    return out

