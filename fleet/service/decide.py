"""The decide job: the core's `tick` on the store's state, for every scored hour, journaled before it is acted on.

`state_at` reads the pool's state at the start of an hour from the store (or
from what the hour before left, `HourLeft`); `tick` decides it; the pure
`hour_entries` turns the `Decisions` into the journal's rows, each detail its
kind's record (`storage.records`: the read model, `fleet.service.readmodel`,
reads them back for `fleet status`, `explain`, `plan` and the snapshot);
the journal writes them with the run-set changes in one transaction, and only
then does the actuator see them, under the epoch of the service's lease. What
one leader journaled and did not act on, the next acts on first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, AbstractSet, Callable, Mapping, Sequence

import numpy as np

from fleet.core.greedy import tokens_per_dollar
from fleet.core.plugins import PolicyParts
from fleet.core.scenario import budget_left
from fleet.core.step import Carry, Decisions, PoolState, tick
from fleet.core.units import NO_END_TS
from fleet.service.calendar import HOUR_S, Calendar
from fleet.service.pool import PoolIndex, PoolWatch
from fleet.service.reconcile import KnownRunSet, known_run_set, not_carried_out, retired_by_hand
from storage.records import AddRecord, EvictionPassRecord, EvictRecord, ReleaseRecord, SizeRecord
from storage.values import JournalEntry, Kind

if TYPE_CHECKING:
    from fleet.service.journal import Journal
    from storage.interfaces import JournalStore


@dataclass(frozen=True)
class RunSetChange:
    """How an hour's decisions change the store's run set: cards that open, close (evicted ones too) and retire."""

    opened: tuple[str, ...]
    closed: tuple[str, ...]
    evicted: tuple[str, ...]
    run_set: frozenset[str]  # the run set after the hour


def run_set_change(decisions: Decisions, index: PoolIndex, open_now: AbstractSet[str]) -> RunSetChange:
    """From the run set the store has open before the hour (`open_now`) to the one the decisions leave."""
    keys = index.keys
    new = frozenset(keys[i] for i in np.flatnonzero(decisions.run_set))
    return RunSetChange(
        opened=tuple(sorted(new - open_now)),
        closed=tuple(sorted(open_now - new)),
        evicted=tuple(keys[e.card] for e in decisions.evictions),
        run_set=new,
    )


def held_out_hours(decisions: Decisions, index: PoolIndex) -> dict[str, int]:
    """Warm cards the sizing mode has left out, with the hours it has (the hysteresis carries them to the next hour)."""
    d = decisions
    return {index.keys[i]: int(d.out_hours[i]) for i in np.flatnonzero(d.run_set & (d.out_hours > 0))}


def hour_entries(hour_ts: int, d: Decisions, state: PoolState, index: PoolIndex, change: RunSetChange,
                 known: KnownRunSet | None = None) -> list[JournalEntry]:
    """The journal rows of one decided hour: `size`, the `eviction-pass` if there was one, then each `evict`,
    `release` and `add`, in the order they are acted on, each detail its kind's record (`storage.records`).

    `state` is what the hour was decided on and `change` the run set's change from what the store had open before
    it (`run_set_change`): a card the store has open that the decisions did not release (the month's first hour)
    is released with that said.
    """
    keys, pos = index.keys, index.pos
    left_out = dict(known.left_out) if known is not None else {}
    put_back = dict(known.put_back) if known is not None else {}
    by_card = {keys[c.card]: c for c in d.adds + d.releases}
    size = SizeRecord(
        hour=d.hour, mode=d.mode, window=d.window, target_tps=d.target_tps, scored_capacity_tps=d.scored_capacity_tps,
        demand_tps=state.demand_tps,
        demand_forecast_tps=state.demand_forecast_tps if np.isfinite(state.demand_forecast_tps) else None,
        knew_demand=bool(state.knew_demand), run_set_cards=len(change.run_set), budget_left=d.budget_left,
        held_out_hours=held_out_hours(d, index),
        in_dip=None if state.in_dip is None else [keys[i] for i in np.flatnonzero(state.in_dip)],
        dip_allowance=state.allowance or 0.0, not_counted=left_out, counted_running=put_back,
    )
    entries = [JournalEntry(f"{hour_ts}:size", hour_ts, Kind.SIZE, d.reason, detail=size.to_detail(), acted=True)]
    if d.eviction is not None:
        p = d.eviction
        judged = np.flatnonzero(state.run_set) if state.run_set is not None else np.zeros(0, dtype=np.int64)
        judged_keys = [keys[c] for c in judged.tolist()]
        passed = EvictionPassRecord(
            hour=d.hour, rule=p.rule, window=p.window, judged=p.judged,
            candidates=[keys[c] for c in p.candidates], evicted=[keys[c] for c in p.evicted],
            median_score_tps=p.median_score_tps, threshold_tps=p.threshold_tps,
            blocked_by_budget=p.blocked_by_budget, blocked_by_disruption=p.blocked_by_disruption,
            breaker_open=p.breaker_open, draining=p.draining, allowed_now=p.allowed_now,
            budget_left_before=p.budget_left_before, budget_left_after=p.budget_left_after,
            scores=dict(zip(judged_keys, np.asarray(state.evict_score_tps)[judged].tolist())),
            thresholds=dict(zip(judged_keys, p.thresholds_of(judged).tolist())),
            class_median_score_tps=None if state.groups is None else _class_medians(state, index, judged),
        )
        entries.append(JournalEntry(f"{hour_ts}:eviction-pass", hour_ts, Kind.EVICTION_PASS, p.reason,
                                    detail=passed.to_detail(), acted=True))
        for n, e in enumerate(d.evictions, start=1):
            evict = EvictRecord(hour=d.hour, score_tps=e.score_tps, tokens_per_usd=e.tokens_per_usd, window=p.window,
                                threshold_tps=p.threshold_of(e.card), median_score_tps=p.median_score_tps,
                                budget_left=p.budget_left_before - n)  # after this card, as its reason says
            entries.append(JournalEntry(f"{hour_ts}:evict:{keys[e.card]}", hour_ts, Kind.EVICT, e.reason, keys[e.card],
                                        detail=evict.to_detail()))
    evicted = set(change.evicted)
    for k in change.closed:
        if k in evicted:
            continue
        c = by_card.get(k)
        why = (c.reason if c is not None else f"released: {left_out[k]}" if k in left_out
               else "released: not in the run set the month starts with")
        release = ReleaseRecord(hour=d.hour, score_tps=float(state.score_tps[pos[k]]), window=d.window)
        entries.append(JournalEntry(f"{hour_ts}:release:{k}", hour_ts, Kind.RELEASE, why, k, detail=release.to_detail()))
    for k in change.opened:
        c = by_card.get(k)
        why = c.reason if c is not None else f"added; {d.reason}"
        i = pos[k]
        add = AddRecord(hour=d.hour, score_tps=float(state.score_tps[i]), window=d.window,
                        tokens_per_usd=float(tokens_per_dollar(state.score_tps[i:i + 1], index.rent_usd_per_hour[i:i + 1])[0]))
        entries.append(JournalEntry(f"{hour_ts}:add:{k}", hour_ts, Kind.ADD, why, k, detail=add.to_detail()))
    return entries


def _class_medians(state: PoolState, index: PoolIndex, judged) -> dict[str, float]:
    """Each class's median score among the run set judged: the line its own cards were held to."""
    judged = np.asarray(judged, dtype=np.int64)
    names = index.class_names[judged] if judged.size else np.zeros(0, dtype=object)
    return {str(c): float(np.median(np.asarray(state.evict_score_tps)[judged[names == c]])) for c in dict.fromkeys(names.tolist())}


@dataclass(frozen=True)
class HourLeft:
    """What a decided hour leaves for the next, so the next hour need not read it back from the store."""

    hour_ts: int
    month_start_ts: int
    run_set: frozenset[str]
    held_out_hours: Mapping[str, int]
    evictions: tuple[tuple[int, str], ...]  # (hour ts, card key) of the month's evictions so far

    def follows(self, hour_ts: int, month_start_ts: int) -> bool:
        return self.hour_ts == hour_ts - HOUR_S and self.month_start_ts == month_start_ts


@dataclass
class DecideJob:
    """Act on anything journaled and not acted, then decide, journal and act on every scored hour."""

    store: JournalStore
    journal: Journal
    pool: PoolWatch
    calendar: Calendar
    clock: object
    parts: PolicyParts
    scored_through_ts: Callable[[], int | None]
    kept_scores: Callable[[int, PoolIndex], Mapping[int, np.ndarray]]
    demand: object
    stopping: Callable[[], bool] = lambda: False
    policy_scores: Callable[[int, PoolIndex], tuple | None] = lambda hour_ts, index: None  # the estimator's, if not a mean
    epoch: Callable[[], int | None] = lambda: None  # the lease the service leads under, carried by every action
    # Warm cards silent at an hour's start (card -> why), from the reconcile check; none without one.
    silent: Callable[[int, AbstractSet[str]], Mapping[str, str]] = lambda hour_ts, warm: {}
    reconcile: Callable[[], object] = lambda: 0  # the check against the pool's telemetry, once a run (every tick)
    records: Callable | None = None  # journal rows by kind, read plainly (`storage.cards.records_of_kinds`)
    # Card -> its last action, set aside or expired (`storage.cards.last_actions_not_carried_out` on a SQL store).
    not_carried: Callable[[int, int], Mapping[str, object]] | None = None
    # What the last hour this job decided left (and the lease's epoch it was decided under): the next run's first hour
    # follows on from it instead of reading it back (the run set alone is a read of every open interval).
    _left: tuple[int | None, HourLeft] | None = field(default=None, init=False, repr=False)

    def _act(self) -> None:
        # `stopping` turns true as soon as the lease is lost: no action starts after that. A failed action is
        # retried or set aside by the acting pass, never raised here, so deciding goes on whatever the actuator does.
        self.journal.act_soon(self.stopping, epoch=self.epoch())

    def run(self) -> int:
        """Returns the hours decided."""
        self._act()
        if not self.stopping():
            self.reconcile()
        done = 0
        index = self.pool.current()
        cal = self.calendar
        # Under another epoch another leader may have written since: read the hour's state back from the store.
        left = self._left[1] if self._left is not None and self._left[0] == self.epoch() else None
        while not self.stopping():
            now = self.clock.now()
            nxt = cal.next_hour(self.store.last_decided_ts(cal.start_ts, NO_END_TS), now)
            if nxt > now or nxt > cal.last_hour_ts:
                break
            scored = self.scored_through_ts()
            if scored is None or scored < nxt:
                break
            left = self.decide_hour(nxt, index, left)
            self._left = (self.epoch(), left)
            done += 1
            self._act()
        return done

    def _scores(self, hour_ts: int, index: PoolIndex, window_hours: int, in_class: np.ndarray) -> np.ndarray:
        kept = self.kept_scores(hour_ts, index)
        if window_hours in kept:
            return np.where(in_class, kept[window_hours], np.float32(0))
        arr = np.zeros(len(index), dtype=np.float32)
        pos = index.pos
        for k, v in self.store.scores_at(hour_ts, window_hours).items():
            if k in pos:
                arr[pos[k]] = v
        return np.where(in_class, arr, np.float32(0))

    def state_at(self, hour_ts: int, index: PoolIndex, previous: AbstractSet[str] | None = None,
                 evictions: Sequence[tuple[int, str]] | None = None, ineligible: AbstractSet[str] = frozenset(),
                 retired: AbstractSet[str] = frozenset(), held_out_hours: Mapping[str, int] | None = None) -> PoolState:
        """The pool as the store has it at the start of `hour_ts`, in the tick's terms: the core's `Carry` resumed
        from the journal (the run set the pool is known to run, the month's evictions, the hysteresis' held-out
        hours), and the hour's scores and demand. `ineligible` cards may not be chosen this hour (silent, or retired
        by hand); `retired` ones have left the pool and count in it no more."""
        policy, parts = self.parts.policy, self.parts
        m0, h = self.calendar.month_of(hour_ts)
        in_class = index.run_class_mask(policy)
        if evictions is None:
            evictions = self.store.eviction_hours(m0, hour_ts)
        if previous is None and h > 0:
            previous = self.store.run_set_at(hour_ts - HOUR_S)
        pool_cards = int((in_class & ~index.mask(retired)).sum()) if retired else int(in_class.sum())
        pos = index.pos
        # A card leaves the pool for the month when it is evicted (its retirement is journaled with the eviction).
        carry = Carry.resumed(
            in_class & ~index.mask(ineligible) if ineligible else in_class,
            budget_left(policy.eviction.share, pool_cards, len(evictions)),
            None if h == 0 else index.mask(previous),
            [((ts - m0) // HOUR_S, pos.get(k)) for ts, k in evictions],
            None if held_out_hours is None else {pos[k]: v for k, v in held_out_hours.items() if k in pos},
            parts.hysteresis.release_after_hours,
        )
        view = self.demand.view(m0, h, parts)
        estimated = self.policy_scores(hour_ts, index)
        if estimated is None:
            score, in_dip, allowance = self._scores(hour_ts, index, parts.size_window_hours, in_class), None, 0.0
        else:
            score, in_dip, allowance = estimated
            score, in_dip = np.where(in_class, score, np.float32(0)), in_dip & in_class
        return PoolState.of(
            carry,
            hour=h,
            score_tps=score,
            evict_score_tps=self._scores(hour_ts, index, parts.evict_window_hours, in_class),
            rent_usd_per_hour=index.rent_usd_per_hour,
            demand_tps=float(view.sizing_tps[0]),
            peak_demand_tps=float(view.peak_tps[0]),
            peak_before_tps=view.peak_before_tps,
            demand_forecast_tps=float(view.forecast_tps[0]),
            knew_demand=view.knew_demand,
            pool_cards=pool_cards,
            groups=index.groups,
            in_dip=in_dip,
            allowance=float(allowance or 0.0),
        )

    def known_run_set(self, hour_ts: int, month_start_ts: int, journal_open: AbstractSet[str],
                      evictions: Sequence[tuple[int, str]]) -> KnownRunSet:
        """The run set the pool is known to run at `hour_ts` (`fleet.service.reconcile`): the journal's, less adds
        not carried out, retired and silent cards, plus releases not carried out."""
        not_carried = (self.not_carried(month_start_ts, hour_ts) if self.not_carried is not None
                       else not_carried_out(self.store, month_start_ts, hour_ts, self.records))
        return known_run_set(journal_open, not_carried,
                             retired_by_hand(self.store, self.records), self.silent(hour_ts, journal_open),
                             {k for _, k in evictions})

    def decide_hour(self, hour_ts: int, index: PoolIndex | None = None, left: HourLeft | None = None) -> HourLeft:
        """Decide one hour and journal it with the state it leaves (acting comes after, from the journal)."""
        index = self.pool.current() if index is None else index
        m0 = self.calendar.month_of(hour_ts)[0]
        if left is not None and left.follows(hour_ts, m0):
            open_now, month_evictions, held = left.run_set, list(left.evictions), left.held_out_hours
        else:
            open_now, month_evictions = self.store.run_set_at(hour_ts - HOUR_S), self.store.eviction_hours(m0, hour_ts)
            last = self.store.decisions(kinds=[Kind.SIZE], since_ts=hour_ts - HOUR_S, until_ts=hour_ts, limit=1)
            held = last[0].record.held_out_hours if last else {}
        known = self.known_run_set(hour_ts, m0, open_now, month_evictions)
        state = self.state_at(hour_ts, index, known.cards, month_evictions, known.ineligible, known.retired, held)
        d = tick(state, self.parts)
        # Actions from what the pool is known to run (and a silent card, which it may still hold, is released);
        # the store's run-set intervals from what the journal had open.
        change = run_set_change(d, index, known.cards | known.silent)
        entries = hour_entries(hour_ts, d, state, index, change, known)
        opened, closed = sorted(change.run_set - open_now), sorted(open_now - change.run_set)
        self.journal.write(hour_ts, entries, {k: "warm" for k in opened}, closed, list(change.evicted))
        return HourLeft(hour_ts, m0, change.run_set, held_out_hours(d, index),
                        tuple(month_evictions) + tuple((hour_ts, k) for k in change.evicted))
