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
from fleet.core.units import HOUR_S, iso_minute

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


def served_alone(h: DemandHour | None) -> bool:
    """The hour's demand is what the pool served and nothing else: its telemetry came, but no demand source measured
    any of it (neither the queue's part nor the whole demand), so the demand was at least that and may have been more
    (a Prometheus demand source down beside a drop folder feeding the telemetry)."""
    return h is not None and h.served_tps is not None and h.offered_tps is None and h.unserved_tps is None


def stretches(hours_ts: list[int]) -> str:
    """Hours as the log says them: `2026-01-01T06:00Z to 2026-01-01T08:00Z` (the first to the last)."""
    first, last = iso_minute(hours_ts[0]), iso_minute(hours_ts[-1])
    return first if len(hours_ts) == 1 else f"{first} to {last}"


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

    def unmeasured_hours_before(self, month_start_ts: int, hour: int) -> int:
        return 0  # a simulation's demand is never missing

    def unsaid(self, first_ts: int, k: int) -> list[str]:
        return []


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

    def unmeasured_hours_before(self, month_start_ts: int, hour: int) -> int:
        """How many hours just before month hour `hour` had no demand measured (the week before the month counted):
        the forecaster read them as missing, so the hour was sized on the last measured level (`last-hour` holds it;
        `holt-winters` and `seasonal` carry their own forecast over the gap). The size record journals it."""
        hour_ts = month_start_ts + hour * HOUR_S
        before = self._settled_tps(month_start_ts - HISTORY_HOURS * HOUR_S, HISTORY_HOURS + hour, hour_ts - HOUR_S)
        measured = np.flatnonzero(np.isfinite(before))
        return int(before.size - 1 - measured[-1]) if measured.size else int(before.size)

    def unsaid(self, first_ts: int, k: int) -> list[str]:
        """What the bill of k hours from `first_ts` must say of their demand, as log lines: hours billed at demand 0
        because nothing of them was measured, and hours billed on what the pool served alone."""
        got = self.store.demand_hours(first_ts, first_ts + k * HOUR_S) if k > 0 else {}
        hours = range(first_ts, first_ts + k * HOUR_S, HOUR_S)
        none = [ts for ts in hours if np.isnan(hour_demand_tps(got.get(ts)))]
        alone = [ts for ts in hours if served_alone(got.get(ts))]
        lines = []
        if none:
            lines.append(f"demand: {len(none)} hour(s) billed unmeasured ({stretches(none)}): no demand source answered "
                         "and no telemetry came; billed at demand 0, the month's checks skip them")
        if alone:
            lines.append(f"demand: {len(alone)} hour(s) billed on what the pool served alone ({stretches(alone)}): no "
                         "demand source answered; their demand was at least that and may have been more")
        return lines

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
