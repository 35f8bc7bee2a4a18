"""The decide job: the core's step, one hour at a time, on what the pool is known to run, journaled before it is
acted on.

Each hour goes sync, step, journal:

- **the carry**: what the hour before left (`Decisions.next`), kept by the job from
  hour to hour. It is the decided state: the run set the journal has open, the
  month's evictions and budget, the hysteresis' count. The store holds the same,
  keyed by card (the run-set intervals, the `evict` rows, the `size` record's
  held-out hours), and the carry is resumed from it (`Carry.resumed`) only when
  nothing carried it: when the service starts, or takes the lease (another leader
  may have written since). A month starts from `Carry.month_start`; a pool rebuilt
  (a card registered) takes the carry over card by card.
- **sync**: what the pool is known to run (`fleet.service.reconcile`) is the hour's
  input, never a reason to rebuild the carry: the decided run set less adds not
  carried out and cards retired by hand or silent, plus releases not carried out,
  with the budget counted on the cards the pool has now (`Carry.synced`). A silent
  or retired card may not be chosen this hour (`StepInput.unavailable`), and stays
  eligible in the carry: a silent card heard again may be chosen the hour after.
- **step**: `fleet.core.step.step` on the synced carry and the hour's scores and demand.
- **the reactive loop's cards** (`fleet.service.reactive`): those it added since the
  hour before began are in the run set the hour starts from, and those still in
  their cool-down stay warm whatever the step decides (`held_by_loop`).
- **journal**: the pure `hour_entries` turns the hour into the journal's rows, each
  detail its kind's record (`storage.records`: the read model, `fleet.service.
  readmodel`, reads them back for `fleet status`, `explain`, `plan` and the
  snapshot); the journal writes them with the run-set changes in one transaction,
  and only then does the actuator see them, under the epoch of the service's lease.
  What one leader journaled and did not act on, the next acts on first.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, AbstractSet, Callable, Protocol

import numpy as np

from fleet.core.units import NO_END_TS
from fleet.core.carry import Carry
from fleet.core.forecast import DemandView
from fleet.core.greedy import tokens_per_dollar
from fleet.core.latency import PoolAtPromise, PromiseView, card_steps, pool_at_promise, sizing_promise
from fleet.core.scenario import budget_left
from fleet.core.step import Decisions, StepInput, scores_at_promise, step
from fleet.service.calendar import HOUR_S
from fleet.service.frame import Frame, Lead
from fleet.service.pool import PoolIndex, pool_promise
from fleet.service.reactive import loop_cards
from fleet.service.reconcile import KnownRunSet, Reconciler
from storage.records import AddRecord, EvictionPassRecord, EvictRecord, ReleaseRecord, SizeRecord
from storage.values import JournalEntry, Kind

if TYPE_CHECKING:
    from fleet.service.scoring import ScoreJob
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


def held_by_loop(change: RunSetChange, held: AbstractSet[str]) -> RunSetChange:
    """The hour's run-set change with the reactive loop's cards still cooling down kept warm (an evicted one
    leaves): the plan may release them only after their cool-down (`fleet.service.reactive.loop_cards`)."""
    keep = (set(held) & set(change.closed)) - set(change.evicted)
    if not keep:
        return change
    return replace(change, closed=tuple(k for k in change.closed if k not in keep), run_set=change.run_set | keep)


def held_out_hours(decisions: Decisions, index: PoolIndex) -> dict[str, int]:
    """Warm cards the sizing mode has left out, with the hours it has (the hysteresis carries them to the next hour)."""
    d = decisions
    return {index.keys[i]: int(d.out_hours[i]) for i in np.flatnonzero(d.run_set & (d.out_hours > 0))}


@dataclass(frozen=True)
class DecidedHour:
    """One hour as the decide job decided it: the carry synced to what the pool is known to run, the step's inputs,
    the demand the policy believed, and the decisions."""

    hour_ts: int
    carry: Carry
    inp: StepInput
    demand: DemandView
    decisions: Decisions
    known: KnownRunSet = field(default_factory=lambda: KnownRunSet(frozenset()))
    demand_unmeasured_hours: int = 0  # hours just before it with no demand measured (the forecast's fallback)
    at_promise: HourAtPromise | None = None  # under a promise sized to: the cards' rates at it and the run set's figures


@dataclass(frozen=True)
class HourAtPromise:
    """An hour under a promise sized to: each card's rate at it as the step read it, and what the run set the hour
    leaves is expected to give the users at the hour's demand (`fleet.core.latency.pool_at_promise`)."""

    view: PromiseView
    rate_tps: np.ndarray  # (cards,)
    pool: PoolAtPromise


def hour_at_promise(inp: StepInput, index: PoolIndex, run_set: AbstractSet[str], curves=None) -> HourAtPromise | None:
    """The promise's figures of a decided hour (None: not sized to a promise): the run set's cards' steps are their
    own fitted ones where `curves` (`fleet.service.curves.CardCurves`) has them, else their class's at their score."""
    view = inp.promise
    if view is None:
        return None
    rate = np.asarray(inp.at_promise().score_tps, dtype=np.float64)[:, 0]
    fitted = None if curves is None else curves.fitted
    steps = card_steps(view, np.asarray(inp.score_tps, dtype=np.float64)[:, 0],
                       None if fitted is None else fitted.alpha_s, None if fitted is None else fitted.beta_s)
    pool = pool_at_promise(view, steps, rate, index.mask(run_set), float(inp.demand_tps[0]))
    return HourAtPromise(view, rate, pool)


def hour_entries(hour: DecidedHour, index: PoolIndex, change: RunSetChange) -> list[JournalEntry]:
    """The journal rows of one decided hour: `size`, the `eviction-pass` if there was one, then each `evict`,
    `release` and `add`, in the order they are acted on, each detail its kind's record (`storage.records`).

    `change` is the run set's change from what the store had open before the hour (`run_set_change`): a card the
    store has open that the decisions did not release (the month's first hour) is released with that said.
    """
    hour_ts, d, inp, known = hour.hour_ts, hour.decisions, hour.inp, hour.known
    keys, pos = index.keys, index.pos
    score = np.asarray(inp.score_tps)[:, 0]
    allowance = float(inp.allowance[0]) if inp.allowance is not None else 0.0
    left_out, put_back = dict(known.left_out), dict(known.put_back)
    by_card = {keys[c.card]: c for c in d.adds + d.releases}
    forecast = float(hour.demand.forecast_tps[0])
    size = SizeRecord(
        hour=d.hour, mode=d.mode, window=d.window, target_tps=d.target_tps, scored_capacity_tps=d.scored_capacity_tps,
        demand_tps=float(inp.demand_tps[0]), demand_forecast_tps=forecast if np.isfinite(forecast) else None,
        knew_demand=bool(hour.demand.knew_demand), run_set_cards=len(change.run_set), budget_left=d.budget_left,
        held_out_hours=held_out_hours(d, index),
        in_dip=None if inp.in_dip is None else [keys[i] for i in np.flatnonzero(inp.in_dip[:, 0])],
        dip_allowance=allowance, not_counted=left_out, counted_running=put_back,
        demand_unmeasured_hours=hour.demand_unmeasured_hours,
        **_promise_fields(hour, index, change),
    )
    entries = [JournalEntry(f"{hour_ts}:size", hour_ts, Kind.SIZE, d.reason, detail=size.to_detail(), acted=True)]
    if d.eviction is not None:
        entries += _eviction_entries(hour, index)
    evicted = set(change.evicted)
    for k in change.closed:
        if k in evicted:
            continue
        c = by_card.get(k)
        why = (c.reason if c is not None else f"released: {left_out[k]}" if k in left_out
               else "released: not in the run set the month starts with")
        release = ReleaseRecord(hour=d.hour, score_tps=float(score[pos[k]]), window=d.window)
        entries.append(JournalEntry(f"{hour_ts}:release:{k}", hour_ts, Kind.RELEASE, why, k, detail=release.to_detail()))
    for k in change.opened:
        c = by_card.get(k)
        why = c.reason if c is not None else f"added; {d.reason}"
        i = pos[k]
        at = hour.at_promise
        add = AddRecord(hour=d.hour, score_tps=float(score[i]), window=d.window,
                        tokens_per_usd=float(tokens_per_dollar(score[i:i + 1], index.rent_usd_per_hour[i:i + 1])[0]),
                        rate_at_promise_tps=None if at is None else float(at.rate_tps[i]),
                        for_latency=c is not None and c.for_latency)
        entries.append(JournalEntry(f"{hour_ts}:add:{k}", hour_ts, Kind.ADD, why, k, detail=add.to_detail()))
    return entries


def _promise_fields(hour: DecidedHour, index: PoolIndex, change: RunSetChange) -> dict:
    """The size record's promise: the promise, the run set's cards' rates at it, and the run set's expected slowest
    stream and first-token wait at the percentile (none without a promise sized to)."""
    at = hour.at_promise
    if at is None:
        return {}
    slo, pos = at.view.slo, index.pos
    p = at.pool
    return dict(
        slo_stream_tps=slo.stream_tps, slo_ttft_ms=slo.ttft_ms, slo_percentile=slo.percentile,
        rate_at_promise_tps={k: float(at.rate_tps[pos[k]]) for k in sorted(change.run_set) if k in pos},
        run_set_rate_at_promise_tps=p.rate_at_promise_tps,
        stream_expected_tps=p.stream_tps if np.isfinite(p.stream_tps) else None,
        ttft_expected_s=p.ttft_s if p.ttft_s is not None and np.isfinite(p.ttft_s) else None,
        ttft_beyond_slots=p.ttft_s is not None and not np.isfinite(p.ttft_s),
        added_for_latency=sorted(index.keys[c.card] for c in hour.decisions.adds if c.for_latency),
    )


def _eviction_entries(hour: DecidedHour, index: PoolIndex) -> list[JournalEntry]:
    """The `eviction-pass` record and each `evict` of a decision hour: the run set judged is the synced carry's."""
    hour_ts, d, p = hour.hour_ts, hour.decisions, hour.decisions.eviction
    keys = index.keys
    evict_score = np.asarray(hour.inp.evict_score_tps)
    judged = np.flatnonzero(hour.carry.run_set) if hour.carry.run_set is not None else np.zeros(0, dtype=np.int64)
    judged_keys = [keys[c] for c in judged.tolist()]
    passed = EvictionPassRecord(
        hour=p.hour, rule=p.rule, window=p.window, judged=p.judged,
        candidates=[keys[c] for c in p.candidates], evicted=[keys[c] for c in p.evicted],
        median_score_tps=p.median_score_tps, threshold_tps=p.threshold_tps,
        blocked_by_budget=p.blocked_by_budget, blocked_by_disruption=p.blocked_by_disruption,
        breaker_open=p.breaker_open, draining=p.draining, allowed_now=p.allowed_now,
        budget_left_before=p.budget_left_before, budget_left_after=p.budget_left_after,
        scores=dict(zip(judged_keys, evict_score[judged].tolist())),
        thresholds=dict(zip(judged_keys, p.thresholds_of(judged).tolist())),
        class_median_score_tps=None if hour.inp.groups is None else _class_medians(evict_score, index, judged),
    )
    entries = [JournalEntry(f"{hour_ts}:eviction-pass", hour_ts, Kind.EVICTION_PASS, p.reason, detail=passed.to_detail(),
                            acted=True)]
    for n, e in enumerate(d.evictions, start=1):
        evict = EvictRecord(hour=p.hour, score_tps=e.score_tps, tokens_per_usd=e.tokens_per_usd, window=p.window,
                            threshold_tps=p.threshold_of(e.card), median_score_tps=p.median_score_tps,
                            budget_left=p.budget_left_before - n)  # after this card, as its reason says
        entries.append(JournalEntry(f"{hour_ts}:evict:{keys[e.card]}", hour_ts, Kind.EVICT, e.reason, keys[e.card],
                                    detail=evict.to_detail()))
    return entries


def _class_medians(evict_score_tps: np.ndarray, index: PoolIndex, judged) -> dict[str, float]:
    """Each class's median score among the run set judged: the line its own cards were held to."""
    judged = np.asarray(judged, dtype=np.int64)
    names = index.class_names[judged] if judged.size else np.zeros(0, dtype=object)
    return {str(c): float(np.median(evict_score_tps[judged[names == c]])) for c in dict.fromkeys(names.tolist())}


@dataclass(frozen=True)
class Carried:
    """The carry the last decided hour left, with what it is read against: the hour, the lease's epoch it was
    decided under, the pool index its arrays are in, and its run set by card (the journal's after that hour)."""

    hour_ts: int
    epoch: int | None
    index: PoolIndex
    carry: Carry
    run_set: frozenset[str]


class HourJournal(Protocol):
    """Where an hour's rows go: the service's `Journal` (written, then acted on), or a plan's kept in memory."""

    def write(self, hour_ts: int, entries: list[JournalEntry], open_cards: dict[str, str], close_cards: list[str],
              retire_cards: list[str]) -> None: ...

    def act_soon(self, stopping, epoch: int | None = None) -> object: ...


class DecideJob:
    """Act on anything journaled and not acted, then decide, journal and act on every scored hour."""

    def __init__(self, journal_store: JournalStore, journal: HourJournal, frame: Frame, scores: ScoreJob, known: Reconciler,
                 lead: Lead = Lead(), terms=None):
        self.journal_store, self.journal, self.frame = journal_store, journal, frame
        # What the pool promises its users, read as a scenario's (`ServiceConfig`: its slo, policy, demand and
        # classes); None: no promise.
        self.terms = terms
        self._promise: tuple[PoolIndex, PromiseView | None] | None = None
        self.scores = scores  # the score job: each hour's scores, kept from its pass or read back from the store
        self.known = known  # what the pool is known to run, and the check against its telemetry
        self.lead = lead
        self.carried: Carried | None = None  # what the last hour this job decided left, under the lease it led

    def _act(self) -> None:
        # `stopping` turns true as soon as the lease is lost: no action starts after that. A failed action is
        # retried or set aside by the acting pass, never raised here, so deciding goes on whatever the actuator does.
        self.journal.act_soon(self.lead.stopping, epoch=self.lead.epoch())

    def run(self) -> int:
        """Returns the hours decided."""
        self._act()
        if not self.lead.stopping():
            self.known.run()
        done = 0
        f = self.frame
        index = f.pool.current()
        cal = f.calendar
        while not self.lead.stopping():
            now = f.clock.now()
            nxt = cal.next_hour(self.journal_store.last_decided_ts(cal.start_ts, NO_END_TS), now)
            if nxt > now or nxt > cal.last_hour_ts:
                break
            scored = self.scores.scored_through_ts()
            if scored is None or scored < nxt:
                break
            self.decide_hour(nxt, index)
            done += 1
            self._act()
        return done

    def carry_at(self, hour_ts: int, index: PoolIndex, in_class: np.ndarray) -> tuple[Carry, frozenset[str]]:
        """(the carry at the start of `hour_ts`, the journal's run set by card): what the hour before left when this
        job decided it under the same lease, else resumed from the store; a month's first hour starts afresh."""
        m0, h = self.frame.calendar.month_of(hour_ts)
        kept = self.carried
        follows = kept is not None and kept.hour_ts == hour_ts - HOUR_S and kept.epoch == self.lead.epoch()
        journal_open = kept.run_set if follows else frozenset(self.journal_store.run_set_at(hour_ts - HOUR_S))
        parts = self.frame.parts
        if h == 0:
            return Carry.month_start(in_class, 0), journal_open  # its budget is the hour's (`synced`)
        if follows:
            if kept.index is index:
                return kept.carry, journal_open
            old = np.array([kept.index.pos.get(k, -1) for k in index.keys], dtype=np.int64)
            return kept.carry.reindexed(old, in_class, parts.hysteresis.release_after_hours), journal_open
        # Nothing carried the hour before: the service started, or took the lease (another leader may have written).
        evictions = self.journal_store.eviction_hours(m0, hour_ts)
        last = self.journal_store.decisions(kinds=[Kind.SIZE], since_ts=hour_ts - HOUR_S, until_ts=hour_ts, limit=1)
        held = last[0].record.held_out_hours if last else {}
        pos = index.pos
        carry = Carry.resumed(in_class, budget_left(parts.policy.eviction.share, int(in_class.sum()), len(evictions)),
                              index.mask(journal_open), [((ts - m0) // HOUR_S, pos.get(k)) for ts, k in evictions],
                              {pos[k]: v for k, v in held.items() if k in pos}, parts.hysteresis.release_after_hours)
        return carry, journal_open

    def hour_scores(self, hour_ts: int, index: PoolIndex, in_class: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, float]:
        """(each card's score, in dip, the dip allowance) the hour is sized by: the policy's estimator's, or the
        sizing window's mean. The reactive job weighs the run set by the same scores."""
        estimated = self.scores.policy_scores(hour_ts, index)
        if estimated is None:
            return self.scores.window_scores_at(hour_ts, index, self.frame.parts.size_window_hours, in_class), None, 0.0
        score, in_dip, allowance = estimated
        return np.where(in_class, score, np.float32(0)), in_dip & in_class, allowance

    def loop_scores(self, hour_ts: int, index: PoolIndex, in_class: np.ndarray) -> tuple[np.ndarray, Callable | None]:
        """What the reactive loop weighs cards by after the hour `hour_ts` was decided: the hour's scores, and under
        a promise sized to, each card's rate at it (its own curve's first, as the step sizes) with the lift of demand
        to the slots its first tokens need: replay's loop reads the same."""
        score = self.hour_scores(hour_ts, index, in_class)[0]
        promise = self.promise(index)
        if promise is None:
            return score, None
        own = self.scores.promise_rate_tps(hour_ts, index)
        own = None if own is None else np.where(in_class, own, np.nan)
        at = scores_at_promise(promise, np.asarray(score)[:, None], own)[:, 0]
        return np.where(in_class, at, 0.0), promise.target_tps

    def promise(self, index: PoolIndex) -> PromiseView | None:
        """The promise the policy sizes to in this pool (`sizing_promise`, the replay's), built once a pool."""
        kept = self._promise
        if kept is not None and kept[0] is index:
            return kept[1]
        view = pool_promise(self.terms, index, sizing_promise)
        self._promise = (index, view)
        return view

    def hour_input(self, hour_ts: int, index: PoolIndex, in_class: np.ndarray, pool_cards: int, known: KnownRunSet
                   ) -> tuple[StepInput, DemandView]:
        """The step's inputs for `hour_ts` (its scores, rent and demand; the cards the pool cannot run this hour),
        and the demand the policy believes of it."""
        f = self.frame
        parts = f.parts
        m0, h = f.calendar.month_of(hour_ts)
        view = f.demand.view(m0, h, parts)
        score, in_dip, allowance = self.hour_scores(hour_ts, index, in_class)
        inp = StepInput(
            hours=np.array([h]),
            score_tps=score[:, None],
            rent_usd_per_hour=index.rent_usd_per_hour,
            demand_tps=np.array([view.sizing_tps[0]], dtype=np.float64),
            peak_demand_tps=np.array([view.peak_tps[0]], dtype=np.float64),
            pool_cards=pool_cards,
            evict_score_tps=self.scores.window_scores_at(hour_ts, index, parts.evict_window_hours, in_class),
            groups=index.groups,
            peak_before_tps=float(view.peak_before_tps),
            allowance=np.array([float(allowance)]) if allowance else None,
            in_dip=None if in_dip is None else in_dip[:, None],
            unavailable=index.mask(known.ineligible) if known.ineligible else None,
        )
        promise = self.promise(index)
        if promise is not None:
            own = self.scores.promise_rate_tps(hour_ts, index)  # each card's own curve's, where it has one
            inp = replace(inp, promise=promise, promise_rate_tps=None if own is None else np.where(in_class, own, np.nan))
        return inp, view

    def decide_hour(self, hour_ts: int, index: PoolIndex | None = None) -> DecidedHour:
        """Decide one hour and journal it (acting comes after, from the journal); the carry it leaves is kept."""
        f = self.frame
        index = f.pool.current() if index is None else index
        policy = f.parts.policy
        m0, h = f.calendar.month_of(hour_ts)
        in_class = index.run_class_mask(policy)
        carry, journal_open = self.carry_at(hour_ts, index, in_class)
        loop = loop_cards(self.journal_store, hour_ts, policy.reactive)
        journal_open = journal_open | loop.joined
        evicted = frozenset(index.keys[i] for i in np.flatnonzero(in_class & ~np.asarray(carry.eligible)))
        known = self.known.known_run_set(hour_ts, m0, journal_open, evicted)
        pool_cards = int((in_class & ~index.mask(known.retired)).sum()) if known.retired else int(in_class.sum())
        carry = carry.synced(None if h == 0 else index.mask(known.cards),
                             budget_left(policy.eviction.share, pool_cards, len(carry.eviction_hours)),
                             f.parts.hysteresis.release_after_hours)
        inp, view = self.hour_input(hour_ts, index, in_class, pool_cards, known)
        d = step(carry, inp, f.parts)
        # Actions from what the pool is known to run (and a silent card, which it may still hold, is released);
        # the store's run-set intervals from what the journal had open.
        change = held_by_loop(run_set_change(d, index, known.cards | known.silent), loop.held & known.cards)
        hour = DecidedHour(hour_ts, carry, inp, view, d, known, f.demand.unmeasured_hours_before(m0, h),
                           hour_at_promise(inp, index, change.run_set, self.scores.curves_at(hour_ts, index)))
        entries = hour_entries(hour, index, change)
        opened, closed = sorted(change.run_set - journal_open), sorted(journal_open - change.run_set)
        self.journal.write(hour_ts, entries, {k: "warm" for k in opened}, closed, list(change.evicted))
        self.carried = Carried(hour_ts, self.lead.epoch(), index, d.next, change.run_set)
        return hour
