"""Goodput totals: what of a run of hours was served within the promise, as the checks under a promise read it.

A module of its own, below both `fleet.core.latency` (a replayed month's verdict) and the service's read model
(its billed hours), so the rule is written once and imports no cycle.
"""

from __future__ import annotations

import numpy as np


def goodput_totals(goodput_tps: np.ndarray, delivered_tps: np.ndarray, demand_tps: np.ndarray) -> dict:
    """Goodput over a run of hours under a promise: its mean, its share of the delivered tokens (the latency check's
    figure) and the demand not served within the promise (capacity's under a promise). A replayed month's verdict
    (`fleet.core.latency.promise_month_figures`) and the service's billed hours read them through this one rule."""
    hours = max(1, np.size(goodput_tps))
    good, delivered, demand = float(np.sum(goodput_tps)), float(np.sum(delivered_tps)), float(np.sum(demand_tps))
    return {
        "goodput_avg_tps": good / hours,
        "goodput_share": good / delivered if delivered > 0 else 1.0,
        "unmet_goodput_share": (demand - good) / demand if demand > 0 else 0.0,
    }
