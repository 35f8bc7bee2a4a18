"""Each month's demand, hour by hour, as the decide and bill jobs both read it, and the view the policy sizes from.

A simulation's demand is its drawn month's, with the history drawn before it (`SimulatedDemand`). A real pool's
is measured (`MeasuredDemand`): the store's demand samples and rollups of each hour, never drawn. The decide job never
reads an hour's demand itself: it asks `view` for what the policy believes of the hour, which the core's
`demand_view` makes from the hours before it, as replay does; the bill job reads the demand the billed hours had.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fleet.core.errors import ConfigError
from fleet.core.forecast import DemandView, demand_view
from fleet.core.units import HOUR_S

if TYPE_CHECKING:
    from storage.demand import DemandHour
    from storage.interfaces import TelemetryStore

HISTORY_HOURS = 168
"""A real pool's forecaster reads the measured hours of the month so far and of the week before it."""


def hour_demand_tps(h: DemandHour | None) -> float:
    """One hour's measured demand: the whole demand where a source measured it (`offered`), else what the pool
    served plus what it did not (the queue's part; none measured is none added, never below zero); NaN when
    nothing of the hour was measured."""
    if h is None:
        return float("nan")
    if h.offered_tps is not None:
        return h.offered_tps
    if h.served_tps is None and h.unserved_tps is None:
        return float("nan")
    return max(0.0, (h.served_tps or 0.0) + (h.unserved_tps or 0.0))


def _view(month_tps: np.ndarray, history_tps: np.ndarray, hour: int, parts) -> DemandView:
    """The core's view of month hour `hour` from the month's demand before it and the history before the month."""
    observed = np.concatenate([history_tps, month_tps[:hour]])
    p = parts.policy
    view = demand_view(parts.forecast, observed, history_tps.size, p.forecast_quantile, p.forecast_error_hours,
                       known_tps=month_tps if parts.knows_demand else None, cold_start_tps=p.cold_start)
    return view.hour(hour)


class SimulatedDemand:
    """A simulation's demand (tok/s) of each hour of its month, with the history drawn before it."""

    measured = False

    def __init__(self, simulated_tps: np.ndarray, simulated_history_tps: np.ndarray | None = None):
        self.simulated_tps = np.asarray(simulated_tps, dtype=np.float64)
        self.simulated_history_tps = np.asarray(simulated_history_tps if simulated_history_tps is not None else [],
                                                dtype=np.float64)

    def of(self, month_start_ts: int) -> np.ndarray:
        return self.simulated_tps

    def history(self, month_start_ts: int) -> np.ndarray:
        """The demand of the hours before the month that a forecaster may read."""
        return self.simulated_history_tps

    def billed(self, month_start_ts: int, h0: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(the demand the bill reads, the demand measured) of k month hours from h0: the simulation's, both."""
        d = self.simulated_tps[h0:h0 + k]
        return d, d

    def view(self, month_start_ts: int, hour: int, parts) -> DemandView:
        """What the policy believes of month hour `hour`: its forecast from the demand before it, and held mode's
        peak (the same `demand_view` replay calls on the month, cut at the hour)."""
        return _view(self.simulated_tps, self.simulated_history_tps, hour, parts)


class MeasuredDemand:
    """A real pool's demand: each hour's as the store measured it (NaN where nothing was), read when asked.

    The view of hour h reads the measured hours before h only (the month's and a week before it), so what the
    store holds of hour h itself cannot reach its own decision."""

    measured = True

    def __init__(self, store: TelemetryStore, month_hours: int):
        self.store = store
        self.month_hours = month_hours
        self._kept: dict[int, float] = {}  # settled hours the view has read, by hour start

    def _settled_tps(self, first_ts: int, k: int, fresh_ts: int) -> np.ndarray:
        """`hours_tps` for the view: hours before `fresh_ts` once read are kept (their telemetry had settled, as the
        scores that decided them had), so deciding an hour reads the newest hours, not a month and a week of a pool's
        rollups again. A sample that arrives later for a
        kept hour is in the store and the bill, not in the forecast."""
        hours = range(first_ts, first_ts + k * HOUR_S, HOUR_S)
        missing = [ts for ts in hours if ts >= fresh_ts or ts not in self._kept]
        if missing:
            lo = missing[0]
            got = self.hours_tps(lo, (first_ts + k * HOUR_S - lo) // HOUR_S)
            for j, v in enumerate(got.tolist()):
                if lo + j * HOUR_S < fresh_ts:
                    self._kept[lo + j * HOUR_S] = v
            fresh = dict(zip(range(lo, first_ts + k * HOUR_S, HOUR_S), got.tolist()))
        else:
            fresh = {}
        return np.array([fresh[ts] if ts in fresh else self._kept[ts] for ts in hours], dtype=np.float64)

    def hours_tps(self, first_ts: int, k: int) -> np.ndarray:
        """Measured demand of k hours from `first_ts` (NaN: none measured)."""
        got = self.store.demand_hours(first_ts, first_ts + k * HOUR_S) if k > 0 else {}
        return np.array([hour_demand_tps(got.get(first_ts + j * HOUR_S)) for j in range(k)], dtype=np.float64)

    def of(self, month_start_ts: int) -> np.ndarray:
        return self.hours_tps(month_start_ts, self.month_hours)

    def history(self, month_start_ts: int) -> np.ndarray:
        return self.hours_tps(month_start_ts - HISTORY_HOURS * HOUR_S, HISTORY_HOURS)

    def billed(self, month_start_ts: int, h0: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(the demand the bill reads: measured, 0 where none was; the measured demand, NaN where none was)."""
        measured = self.hours_tps(month_start_ts + h0 * HOUR_S, k)
        return np.nan_to_num(measured, nan=0.0), measured

    def view(self, month_start_ts: int, hour: int, parts) -> DemandView:
        if parts.knows_demand:
            raise ConfigError("a real pool's demand is measured, not known ahead: set policy.forecast to a forecaster")
        hour_ts = month_start_ts + hour * HOUR_S
        before = self._settled_tps(month_start_ts - HISTORY_HOURS * HOUR_S, HISTORY_HOURS + hour, hour_ts - HOUR_S)
        return _view(before[HISTORY_HOURS:], before[:HISTORY_HOURS], hour, parts)


def service_demand(store: TelemetryStore, month_hours: int, sim=None) -> SimulatedDemand | MeasuredDemand:
    """The demand a service reads: the simulation's own under `--simulate`, else the pool's measured demand."""
    if sim is not None:
        return SimulatedDemand(sim.month.demand_tps, sim.month.demand_history_tps)
    return MeasuredDemand(store, month_hours)
