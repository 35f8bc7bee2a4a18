"""The bill job: every decided hour that has ended, billed through the core's `bill_hours` and `wrong_evictions`.

The run sets come from the store's run-set intervals and the evictions from the
journal; the truth the bill reads is the simulation's (`SimulatedTruth`), or for
a real pool hindsight (`Hindsight`): the core's one rule (`fleet.core.hindsight`,
each card's mean over the hours it was measured in) over the month so far, where
the replay of a stored month reads it over the whole month. The demand is the simulation's,
or a real pool's measured demand (`MeasuredDemand`; an hour with none measured is
billed at demand 0 and its `demand_measured_tps` left NULL: the read model's checks skip it); the billed hour's
`size` record gains `demand_measured_tps` with it. Hours are billed in stretches of
up to a day, each stretch in one transaction, so a rerun bills nothing twice.

Under a promise (`[slo]`) each hour is read as replay's verdict reads it, from the same truth: its goodput (the
tokens/s within the promise, `fleet.core.latency`), its ideal under the promise (the ideal operator keeps it,
whatever the policy sizes to) and each card serving at the larger of its true rate and its rate at the promise.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np
import pandas as pd

from fleet.core.billing import bill_hours, churn_fee_usd
from fleet.core.hindsight import hindsight_tps
from fleet.core.ideal import ideal_exact_usd_by_hour, ideal_terms
from fleet.core.latency import PromiseFigures, card_rates_at_promise, promise_figures, promise_view
from fleet.core.replay import served_rate_tps
from fleet.core.verdict import wrong_evictions
from fleet.service.calendar import HOUR_S, Calendar
from fleet.service.pool import PoolIndex, PoolWatch, pool_promise
from storage.busy import measured_tps
from storage.values import HourFigures, Kind

if TYPE_CHECKING:
    from storage.interfaces import JournalStore, TelemetryStore

log = logging.getLogger(__name__)

STRETCH_HOURS = 24
"""Hours billed in one transaction at most."""


class Truth(Protocol):
    def rates(self, first_ts: int, k: int, index: PoolIndex) -> tuple[np.ndarray, np.ndarray]:
        """(each card's true rate in each of k hours, (cards, k); each card's ticket, (cards,))."""

    def boot_hours(self, index: PoolIndex) -> np.ndarray | None:
        """How long each card takes to serve once added (None: at once)."""


class SimulatedTruth:
    """The simulated month's true rates and lottery tickets."""

    def __init__(self, sim, calendar: Calendar):
        self.sim = sim
        self.calendar = calendar
        self._rows: tuple[PoolIndex, np.ndarray] | None = None  # the month's row of each card, for one pool

    def rates(self, first_ts: int, k: int, index: PoolIndex) -> tuple[np.ndarray, np.ndarray]:
        if self._rows is None or self._rows[0] is not index:
            self._rows = (index, self.sim.rows(index.keys))
        sel = self._rows[1]
        h = self.calendar.month_of(first_ts)[1]
        m = self.sim.month
        W = m.warmup_hours
        return m.true_rate_tps[sel, W + h:W + h + k].astype(np.float64), np.asarray(m.true_tps)[sel].astype(np.float64)

    def boot_hours(self, index: PoolIndex) -> np.ndarray | None:
        """The simulated classes' `boot_minutes`, as replay bills them (`fleet.core.billing.serving_share`)."""
        boot = self.sim.month.boot_hours
        if boot is None:
            return None
        if self._rows is None or self._rows[0] is not index:
            self._rows = (index, self.sim.rows(index.keys))
        return np.asarray(boot, dtype=np.float64)[self._rows[1]]


class Hindsight:
    """A real pool's truth, in hindsight (`fleet.core.hindsight`): each card's mean over the hours of the month so far
    it was measured in, read for every hour of the stretch billed.

    The month's sums are kept between runs and only the hours not yet read are read, so a run costs the hours it
    bills, not the month so far (which would grow with every day billed). A sample that arrives for an hour already
    read is in the store but not in these sums.
    """

    def __init__(self, repo: TelemetryStore, calendar: Calendar):
        self.repo = repo
        self.calendar = calendar
        self._month_ts: int | None = None
        self._through_ts = 0
        self._sum: dict[str, float] = {}
        self._count: dict[str, int] = {}

    def rates(self, first_ts: int, k: int, index: PoolIndex) -> tuple[np.ndarray, np.ndarray]:
        m0 = self.calendar.month_of(first_ts)[0]
        end_ts = first_ts + k * HOUR_S
        if self._month_ts != m0 or end_ts < self._through_ts:
            self._month_ts, self._through_ts, self._sum, self._count = m0, m0, {}, {}
        if end_ts > self._through_ts:
            roll = self.repo.hourly_rollups(self._through_ts, end_ts)
            if len(roll):
                # An hour's rollup whose rate is not known (NaN) is an hour not measured: left out of sum and count.
                g = pd.DataFrame({"card": roll["card_key"].to_numpy(), "tps": measured_tps(roll)}).groupby("card")["tps"]
                sums, counts = g.sum(), g.count()
                for key, total, n in zip(sums.index, sums.to_numpy(), counts.to_numpy()):
                    self._sum[key] = self._sum.get(key, 0.0) + float(total)
                    self._count[key] = self._count.get(key, 0) + int(n)
            self._through_ts = end_ts
        total, hours = np.zeros(len(index)), np.zeros(len(index))
        for key, n in self._count.items():
            if key in index.pos:
                total[index.pos[key]], hours[index.pos[key]] = self._sum[key], n
        mean = hindsight_tps(total, hours)
        return np.repeat(mean[:, None], k, axis=1), mean

    def boot_hours(self, index: PoolIndex) -> np.ndarray | None:
        return None  # a real pool's measured rates already say when a card served


def warm_matrix(intervals, index: PoolIndex, first_ts: int, k: int) -> np.ndarray:
    """(cards, k + 1) run sets of the hour before `first_ts` and the k hours from it, from run-set intervals. A card
    warm in any part of an hour is warm in it (the reactive job opens an interval within the hour: its card pays
    the whole hour)."""
    warm = np.zeros((len(index), k + 1), dtype=bool)
    lo = first_ts - HOUR_S
    for key, start, end in intervals:
        if key in index.pos:
            a = max(0, (start - lo) // HOUR_S)
            b = k + 1 if end is None else min(k + 1, (end - lo + HOUR_S - 1) // HOUR_S)
            warm[index.pos[key], a:b] = True
    return warm


@dataclass
class BillJob:
    """Bill every decided hour that has ended."""

    store: JournalStore
    pool: PoolWatch
    calendar: Calendar
    clock: object
    demand: object
    truth: Truth
    stopping: Callable[[], bool] = lambda: False
    terms: object = None  # the pool's promise read as a scenario's (`ServiceConfig`: slo, policy, demand, classes)
    _promise: tuple | None = field(default=None, init=False, repr=False)  # (index, its `PromiseView` or None)

    def promise(self, index: PoolIndex):
        """The promise the month is judged by in this pool (`promise_view`, the verdict's): None without `[slo]`."""
        if self._promise is None or self._promise[0] is not index:
            self._promise = (index, pool_promise(self.terms, index, promise_view))
        return self._promise[1]

    def run(self) -> int:
        """Returns the hours billed."""
        cal = self.calendar
        done = 0
        index = self.pool.current()
        while not self.stopping():
            now = self.clock.now()
            nxt = cal.next_hour(self.store.last_billed_ts(), now)
            m0 = cal.month_of(nxt)[0]
            last_dec = self.store.last_decided_ts(nxt, cal.month_end_ts(m0))
            if last_dec is None:
                break
            # An hour is billed once it has ended; a measured one once its telemetry has settled too, as it is scored.
            settle = int(cal.settle_s) if self.demand.measured else 0
            upto = min(last_dec, int(now) - HOUR_S - settle, nxt + (STRETCH_HOURS - 1) * HOUR_S)
            if upto < nxt:
                break
            k = (upto - nxt) // HOUR_S + 1
            self.bill(nxt, k, index)
            done += k
        return done

    def bill(self, first_ts: int, k: int, index: PoolIndex | None = None) -> list[HourFigures]:
        """Bill k decided hours from `first_ts` (one month): warm rent, churn fees, idle cost, ideal bill, wrong evictions,
        and under a promise each hour's goodput."""
        index = self.pool.current() if index is None else index
        m0, h0 = self.calendar.month_of(first_ts)
        hi = first_ts + k * HOUR_S
        # Run sets of hour h0 - 1 .. h0 + k - 1 (the first is the one judged at h0).
        warm = warm_matrix(self.store.intervals(first_ts - HOUR_S, hi), index, first_ts, k)
        evictions = self.store.eviction_hours(first_ts, hi)
        evicted = [[index.pos[key] for ts, key in evictions if ts == first_ts + j * HOUR_S] for j in range(k)]
        rate, ticket = self.truth.rates(first_ts, k, index)
        demand, measured = self.demand.billed(m0, h0, k)
        for line in self.demand.unsaid(first_ts, k):
            log.warning("%s", line)
        view = self.promise(index)
        ideal, at_promise = None, None
        if view is not None:
            # Each card's true rate at the promise and its slots, as `true_at_promise` reads a replayed month's.
            at_promise = card_rates_at_promise(rate, view.card_class, list(view.servings), view.slo.stream_tps)
            ideal_rate, ideal_demand = ideal_terms(rate, demand, view, at_promise[0])
            ideal = ideal_exact_usd_by_hour(ideal_rate, index.rent_usd_per_hour, ideal_demand)
            rate = served_rate_tps(rate, at_promise[0])
        # A card added serves once booted (a card warm the hour before the stretch has: exact for boots up to an hour).
        b = bill_hours(warm[:, 1:], index.rent_usd_per_hour, index.rent_usd_per_month, rate, demand, evicted, ideal,
                       boot_hours=self.truth.boot_hours(index), warm_before=warm[:, 0])
        good: PromiseFigures | None = None
        if view is not None:
            good = promise_figures(warm[:, 1:], at_promise[0], at_promise[1], b.delivered_tps, b.demand_tps, view.slo,
                                   view.shape, view.prefill_s)
        sizes = {r.ts: r.detail for r in self.store.decisions(kinds=[Kind.SIZE], since_ts=first_ts, until_ts=hi)}
        fees = churn_fee_usd(index.rent_usd_per_month)
        figs, lines = [], []
        for j in range(k):
            ts = first_ts + j * HOUR_S
            wrong = 0
            if evicted[j] and h0 + j > 0:
                wrong = int(wrong_evictions(np.array(evicted[j], dtype=np.int64), warm[:, j], ticket, index.groups).sum())
            figs.append(HourFigures(
                hour_ts=ts, month_start_ts=m0, demand_tps=float(demand[j]), capacity_tps=float(b.capacity_tps[j]),
                delivered_tps=float(b.delivered_tps[j]), scored_capacity_tps=float(sizes.get(ts, {}).get("scored_capacity_tps", 0.0)),
                cards_warm=int(b.cards_warm[j]), warm_usd=float(b.warm_usd[j]), churn_usd=float(b.churn_usd[j]),
                idle_usd=float(b.idle_usd[j]), ideal_usd=float(b.ideal_usd[j]), evictions=len(evicted[j]), wrong_evictions=wrong,
                demand_measured_tps=float(measured[j]) if np.isfinite(measured[j]) else None,
                goodput_tps=None if good is None else float(good.goodput_tps[j]),
            ))
            lines.append([("rent", float(b.warm_usd[j]), None)] + [("churn", float(fees[c]), index.keys[c]) for c in evicted[j]])
        self.store.record_hours(figs, lines)
        return figs
