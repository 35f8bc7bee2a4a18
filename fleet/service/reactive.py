"""The reactive job: within the hour, scale up when the pool's measured queue or demand says the plan is short.

`[policy.reactive]` turns it on. Every `[schedule] reactive_interval_s` it reads from Prometheus (`[reactive]`:
the server `[ingest.sources.prometheus]` reads, by default) the backlog in tokens (vLLM's requests waiting over
the pool × the mean tokens generated per request) and the tokens generated per second over the last minutes, and
asks the core (`fleet.core.reactive.reactive_adds`, replay's rule) which spares to add: the demand × the loop's
headroom plus the backlog cleared within one interval, against the scored capacity of the run set open now, by
the plan's scores of the hour in force. Each add is an `add` row whose record says `reactive`, journaled with its
reason before the actuator sees it, and acted on as the plan's adds are (`Journal.act_soon`).

The hourly plan keeps a card the loop added until `cooldown_minutes` have passed since the add
(`fleet.core.reactive.cooling_down`); after that it may release it as any other (`loop_cards`, read by the
decide job's `held_by_loop`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from fleet.core.reactive import Measured, cooling_down, reactive_adds
from fleet.core.units import NO_END_TS
from fleet.service.calendar import HOUR_S
from storage.records import AddRecord
from storage.values import JournalEntry, Kind

if TYPE_CHECKING:
    from fleet.core.scenario import Reactive
    from fleet.credentials import Credentials
    from fleet.service.frame import Frame, Lead
    from fleet.service.journal import Journal
    from storage.interfaces import JournalStore

log = logging.getLogger("fleet.service.reactive")

ROWS_READ = 10_000_000
"""The `add` rows read to find the loop's among them: all of an hour's (a month's first hour adds the whole pool)."""


def _latest_sum(body: bytes, name: str, at_ts: float) -> float | None:
    """The answer's series summed at its latest time not after `at_ts` (None: no point, or NaN)."""
    from fleet.ingest.prometheus import _matrix

    points: dict[float, float] = {}
    for series in _matrix(body, name):
        for point in (series.get("values") if isinstance(series, dict) else None) or []:
            try:
                t, v = float(point[0]), float(point[1])
            except (TypeError, ValueError, IndexError):
                continue
            if t <= at_ts and math.isfinite(v):
                points[t] = points.get(t, 0.0) + v
    return points[max(points)] if points else None


@dataclass(frozen=True)
class PrometheusQueue:
    """The pool's backlog and recent demand, read from a Prometheus server through the ingest's client."""

    url: str
    backlog_query: str
    demand_query: str
    auth: Credentials | None = None

    def measure(self, now_ts: float, interval_s: float) -> Measured | None:
        """What the server says at `now_ts` (None when it holds no demand yet); `BadSource` when it cannot be read."""
        from fleet.ingest.prometheus import fetch_prometheus

        got = []
        for query in (self.backlog_query, self.demand_query):
            body, name = fetch_prometheus(self.url, query, now_ts - interval_s, now_ts, interval_s, auth=self.auth)
            got.append(_latest_sum(body, name, now_ts))
        backlog, demand = got
        if demand is None:
            return None
        return Measured(backlog_tokens=backlog or 0.0, demand_tps=demand)


@dataclass(frozen=True)
class LoopCards:
    """The loop's cards an hour's decision must know: those it added since the hour before began that are still open
    (the run set the hour starts from holds them), and those still cooling down (the plan may not release them)."""

    joined: frozenset[str] = frozenset()
    held: frozenset[str] = frozenset()


def loop_cards(store: JournalStore, hour_ts: int, settings: Reactive | None) -> LoopCards:
    """The loop's cards at the start of `hour_ts`, from the journal's reactive adds and the run set's open intervals.
    An add after the hour began (its decision runs late) is held whatever the cool-down."""
    if settings is None:
        return LoopCards()
    since = hour_ts - max(HOUR_S, settings.cooldown_minutes * 60)
    adds = [r for r in store.decisions(kinds=[Kind.ADD], since_ts=since + 1, limit=ROWS_READ)
            if r.record.reactive and r.card_key]
    if not adds:
        return LoopCards()
    open_now = {k for k, _, end in store.intervals(since, NO_END_TS) if end is None}
    last = {r.card_key: r.ts for r in adds}  # oldest first: the latest add of each card
    still = {k: ts for k, ts in last.items() if k in open_now}
    return LoopCards(frozenset(k for k, ts in still.items() if ts > hour_ts - HOUR_S),
                     frozenset(k for k, ts in still.items() if cooling_down(ts, settings.cooldown_minutes, hour_ts)))


class ReactiveJob:
    """Every interval: measure, decide through the core, journal each add with its reason, then act."""

    def __init__(self, frame: Frame, store: JournalStore, journal: Journal, hour_scores: Callable, lead: Lead,
                 queue: PrometheusQueue | None, interval_s: float):
        """`hour_scores(hour_ts, index, in_class)`: the decide job's scores of an hour for the loop, and under a
        promise the lift of demand to its first-token slots (`DecideJob.loop_scores`)."""
        self.frame, self.store, self.journal, self.hour_scores, self.lead = frame, store, journal, hour_scores, lead
        self.queue = queue
        self.interval_s = float(interval_s)

    @property
    def settings(self) -> Reactive | None:
        return self.frame.parts.policy.reactive

    def run(self) -> int:
        """Returns the cards added."""
        settings = self.settings
        if settings is None or self.queue is None or self.lead.stopping():
            return 0
        f = self.frame
        cal = f.calendar
        now = int(f.clock.now())
        plan_ts = self.store.last_decided_ts(cal.start_ts, now + 1)
        if plan_ts is None:
            return 0  # no hour decided yet: no scores to weigh the run set by
        measured = self.queue.measure(now, self.interval_s)
        if measured is None:
            return 0
        index = f.pool.current()
        policy = f.parts.policy
        in_class = index.run_class_mask(policy)
        score, target = self.hour_scores(plan_ts, index, in_class)
        m0, _ = cal.month_of(plan_ts)
        gone = {k for _, k in self.store.eviction_hours(m0, now + 1)} | set(self.store.retired())
        warm = index.mask(self.store.run_set_at(now))
        hour_ts = now // HOUR_S * HOUR_S
        this_hour = [r for r in self.store.decisions(kinds=[Kind.ADD], since_ts=hour_ts, until_ts=now + 1,
                                                     limit=ROWS_READ) if r.record.reactive]
        adds = reactive_adds(measured, self.interval_s, warm, in_class & ~index.mask(gone), score,
                             index.rent_usd_per_hour, settings, len(this_hour),
                             step=int((now - cal.start_ts) // self.interval_s), target=target)
        if not adds:
            return 0
        scored = float(adds[0].scored_tps)
        h = cal.month_of(hour_ts)[1] if hour_ts >= cal.start_ts else None
        entries = []
        for a in adds:
            k = index.keys[a.card]
            record = AddRecord(hour=h, score_tps=a.score_tps, window=policy.window, tokens_per_usd=a.tokens_per_usd,
                               reactive=True, backlog_tokens=measured.backlog_tokens, demand_tps=measured.demand_tps,
                               scored_capacity_tps=scored, held_until_ts=now + settings.cooldown_minutes * 60)
            entries.append(JournalEntry(f"{now}:reactive-add:{k}", now, Kind.ADD, a.reason, k, detail=record.to_detail()))
        opened = {e.card_key: "reactive add" for e in entries}
        if not self.journal.write(now, entries, opened, [], []):
            return 0  # journaled already (this second's run was done)
        log.info("reactive: added %d cards (%s)", len(entries), adds[0].reason)
        self.journal.act_soon(self.lead.stopping, epoch=self.lead.epoch())
        return len(entries)
