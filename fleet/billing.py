"""The bill: warm rent for run-set card-hours, a churn fee per eviction, and nothing for cards outside."""

from __future__ import annotations

import numpy as np

CHURN_FEE_SHARE = 0.15
"""An evicted card bills 15% of a node-month of its class while it drains."""


def warm_usd_by_hour(warm: np.ndarray, rent_usd_per_hour: np.ndarray) -> np.ndarray:
    """Rent billed each hour by the cards warm in it."""
    return rent_usd_per_hour.astype(np.float64) @ warm


def churn_fee_usd(rent_usd_per_month: np.ndarray) -> np.ndarray:
    """The churn fee of each evicted card, from its class's monthly rent."""
    return CHURN_FEE_SHARE * np.asarray(rent_usd_per_month, dtype=np.float64)


def delivered_tps(demand_tps: np.ndarray, capacity_tps: np.ndarray) -> np.ndarray:
    """Tokens/s served in each hour: demand, up to the run set's true capacity."""
    return np.minimum(demand_tps, capacity_tps)


def idle_usd_by_hour(warm_usd: np.ndarray, delivered: np.ndarray, capacity_tps: np.ndarray) -> np.ndarray:
    """Warm rent that bought capacity which moved no tokens: warm rent × (1 − delivered / capacity)."""
    used = np.divide(delivered, capacity_tps, out=np.zeros_like(warm_usd), where=capacity_tps > 0)
    return warm_usd * (1.0 - used)
