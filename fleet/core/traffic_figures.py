"""The finer clock's figures: the ideal operator at the month's step and billing period, and the verdict's figures
the checks read in place of the hourly fluid's (`fleet.core.traffic` walks the month they are read from)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleet.core.billing import idle_usd_by_hour
from fleet.core.ideal import ideal_exact_usd_by_hour
from fleet.core.traffic import _BLOCK_HOURS, Traffic


def ideal_usd_by_period(true_rate_tps, warmup_hours: int, rent_usd_per_hour: np.ndarray, step_demand_tps: np.ndarray,
                        step_minutes: int, billing_minutes: int) -> np.ndarray:
    """The ideal operator at the finer clock: each billing period, the cheapest whole-card set whose true rates cover
    the period's highest step, paid for the period (it boots nothing and knows every step)."""
    per_hour = 60 // step_minutes
    period = billing_minutes // step_minutes
    per_hour_periods = per_hour // period
    demand = np.asarray(step_demand_tps, dtype=np.float64)
    hours = demand.size // per_hour
    peaks = demand[: hours * per_hour].reshape(hours * per_hour_periods, period).max(axis=1)
    out = np.empty(peaks.size)
    for a in range(0, hours, _BLOCK_HOURS):
        b = min(hours, a + _BLOCK_HOURS)
        rates = np.asarray(true_rate_tps[:, warmup_hours + a: warmup_hours + b])
        rates = np.repeat(rates, per_hour_periods, axis=1)
        out[a * per_hour_periods: b * per_hour_periods] = ideal_exact_usd_by_hour(
            rates, rent_usd_per_hour, peaks[a * per_hour_periods: b * per_hour_periods])
    return out * billing_minutes / 60.0


def traffic_figures(t: Traffic, plan_bill_usd: float, ideal_usd: float, step_minutes: int, billing_minutes: int,
                    max_wait_s: float | None, reactive: bool) -> dict:
    """The verdict's figures of the finer clock: what the checks read in place of the hourly fluid's."""
    bill = plan_bill_usd + t.reactive_usd
    return {
        "step_minutes": step_minutes,
        "billing_minutes": billing_minutes,
        "max_wait_s": max_wait_s,
        "reactive": reactive,
        "demand_tokens": t.demand_tokens,
        "served_tokens": t.served_tokens,
        "served_late_tokens": t.served_late_tokens,
        "served_late_share": t.served_late_tokens / t.demand_tokens if t.demand_tokens > 0 else 0.0,
        "lost_tokens": t.lost_tokens,
        "lost_share": t.lost_tokens / t.demand_tokens if t.demand_tokens > 0 else 0.0,
        "wait_p50_s": t.wait_s(0.5),
        "wait_p99_s": t.wait_s(0.99),
        "drain_minutes_max": t.drain_steps_max * step_minutes,
        "reactive_adds": t.reactive_adds,
        "reactive_usd": t.reactive_usd,
        "loop_cards_avg": float(t.loop_cards_hour.mean()) if t.loop_cards_hour is not None and t.loop_cards_hour.size else 0.0,
        "loop_cards_max": int(t.loop_cards_hour.max()) if t.loop_cards_hour is not None and t.loop_cards_hour.size else 0,
        "plan_bill_usd": plan_bill_usd,
        "bill_usd": bill,
        "ideal_bill_usd": ideal_usd,
        "convergence": ideal_usd / bill if bill > 0 else float("nan"),
    }


@dataclass(frozen=True)
class FineHours:
    """The month at the finer clock read by the hour, as the hourly bill is: what the verdict's idle cost and the
    export's hours.csv read, so a month on the finer clock adds up from its hours as an hourly one does."""

    demand_tps: np.ndarray  # (hours,) the mean of the hour's steps
    capacity_tps: np.ndarray  # (hours,) true capacity of the cards serving, the mean of the hour's steps (the loop's
    # cards and booting ones counted from the step they serve)
    delivered_tps: np.ndarray  # (hours,) tokens served in the hour, on time or from the queue, a second
    reactive_usd: np.ndarray  # (hours,) the loop's rent
    idle_usd: np.ndarray  # (hours,) the plan's warm rent and the loop's, × (1 − delivered / capacity)

    def figures(self, bill_usd: float) -> dict:
        """The verdict's figures read from the hours, in place of the plan's."""
        hours, idle = max(1, self.capacity_tps.size), float(self.idle_usd.sum())
        return {"capacity_avg_tps": float(self.capacity_tps.sum()) / hours,
                "delivered_avg_tps": float(self.delivered_tps.sum()) / hours,
                "idle_usd": idle, "idle_share": idle / bill_usd if bill_usd > 0 else 0.0}


def fine_hours(t: Traffic, plan_warm_usd: np.ndarray, step_demand_tps: np.ndarray) -> FineHours:
    """A walked month (not one stopped early) by the hour. An hour served what arrived in it and what waited into
    it, less what waits past it and what was lost in it."""
    plan_warm_usd = np.asarray(plan_warm_usd, dtype=np.float64)
    hours = plan_warm_usd.size
    per_hour = t.capacity_step_tps.size // max(1, hours)
    by_hour = lambda a: np.asarray(a, dtype=np.float64)[: hours * per_hour].reshape(hours, per_hour)  # noqa: E731
    arrived = by_hour(step_demand_tps).sum(axis=1) * t.step_s
    waiting = np.asarray(t.backlog_hour_end_tokens, dtype=np.float64)
    served = arrived + np.concatenate(([0.0], waiting[:-1])) - waiting - by_hour(t.lost_step_tokens).sum(axis=1)
    delivered = np.maximum(served, 0.0) / 3600.0
    capacity = by_hour(t.capacity_step_tps).mean(axis=1)
    loop = np.asarray(t.reactive_usd_hour, dtype=np.float64)
    return FineHours(arrived / 3600.0, capacity, delivered, loop, idle_usd_by_hour(plan_warm_usd + loop, delivered, capacity))
