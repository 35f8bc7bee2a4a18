"""The hour-step: the eviction pass and the sizing step, pure, called by replay and by the service's tick.

- `eviction_pass`: at a decision hour (the rule's cadence, while budget is left) the
  rule judges the previous hour's run set through its window, the admission lets
  through what the breaker, the disruption budget and the month's budget allow, and
  each eviction is recorded as a `CardDecision` with its reason.
- `size_stretch`: the sizing mode's run set for a stretch of hours with no eviction
  in between, then the hysteresis. Replay sizes the hours between two decisions in
  one vectorised stretch; the service sizes one hour at a time. Same functions.
- `tick`: one service hour, both steps, and the cards added and released, as frozen
  `Decisions` that the journal, `explain`, `plan` and export read.

No clock, no I/O: the hour and every input are arguments; policies arrive resolved.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from fleet.core.greedy import tokens_per_dollar
from fleet.core.plugins import PolicyParts, SizingInput


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class CardDecision:
    """One card's decision: `evict`, `add` (to the run set) or `release` (from it), with the score it read and why."""

    kind: str
    hour: int  # the month hour it was decided at
    card: int
    score_tps: float
    tokens_per_usd: float
    reason: str


class CardLines(Mapping[int, float]):
    """The line each judged card was held to, by card: kept as the two arrays and read when asked, instead of a dict
    built at every pass (a Python object per judged card: 60,000 of them at 100,000 cards)."""

    __slots__ = ("_cards", "_tps")

    def __init__(self, cards: np.ndarray, tps: np.ndarray):
        self._cards = np.asarray(cards, dtype=np.int64)  # increasing
        self._tps = np.asarray(tps, dtype=np.float64)

    def __getitem__(self, card) -> float:
        if not isinstance(card, (int, np.integer)):
            raise KeyError(card)
        c = int(card)
        i = int(np.searchsorted(self._cards, c))
        if i < self._cards.size and int(self._cards[i]) == c:
            return float(self._tps[i])
        raise KeyError(card)

    def __iter__(self):
        return iter(self._cards.tolist())

    def values_or(self, cards: np.ndarray, default: float) -> np.ndarray:
        """The lines of many cards at once, `default` for a card not judged: the journal lists every judged card's."""
        cards = np.asarray(cards, dtype=np.int64)
        i = np.minimum(np.searchsorted(self._cards, cards), max(self._cards.size - 1, 0))
        found = (self._cards[i] == cards) if self._cards.size else np.zeros(cards.shape, dtype=bool)
        return np.where(found, self._tps[i] if self._cards.size else default, default)

    def __len__(self) -> int:
        return int(self._cards.size)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


@dataclass(frozen=True)
class EvictionPass:
    """One pass of the eviction policy: what it judged, who it would evict, who it evicted, what held the rest back."""

    hour: int
    rule: str
    window: str
    judged: int
    candidates: tuple[int, ...]
    candidate_median_tps: tuple[float, ...]  # each candidate's own reference score (below-median: its class's median)
    evicted: tuple[int, ...]
    evictions: tuple[CardDecision, ...]
    median_score_tps: float
    threshold_tps: float
    blocked_by_budget: int
    blocked_by_disruption: int
    breaker_open: bool
    draining: int
    allowed_now: int
    budget_left_before: int
    budget_left_after: int
    reason: str  # the rule's reason, or why the admission held every candidate back
    threshold_by_card_tps: Mapping[int, float] | None = None  # the line the rule held each judged card to

    def threshold_of(self, card: int) -> float:
        """The rule's line for a judged card (its own threshold, in the rule's terms)."""
        if self.threshold_by_card_tps is not None and card in self.threshold_by_card_tps:
            return self.threshold_by_card_tps[card]
        return self.threshold_tps

    def thresholds_of(self, cards: np.ndarray) -> np.ndarray:
        """`threshold_of` for many judged cards at once (float64)."""
        cards = np.asarray(cards, dtype=np.int64)
        if self.threshold_by_card_tps is None:
            return np.full(cards.shape, float(self.threshold_tps))
        return self.threshold_by_card_tps.values_or(cards, float(self.threshold_tps))


def is_decision_hour(hour: int, parts: PolicyParts, budget_left: int) -> bool:
    """The eviction policy runs at hours cadence, 2 × cadence, ... while its rule is on and budget is left."""
    return parts.evicts and budget_left > 0 and hour > 0 and hour % parts.policy.eviction.cadence_hours == 0


def eviction_pass(
    hour: int,
    evict_score_tps: np.ndarray,
    run_set: np.ndarray,
    rent_usd_per_hour: np.ndarray,
    budget_left: int,
    eviction_hours: tuple[int, ...] | list[int],
    pool_cards: int,
    parts: PolicyParts,
    groups: np.ndarray | None = None,
) -> EvictionPass:
    """Judge the run set (each card against its own class, `groups`), admit what the limits allow, record each eviction."""
    policy = parts.policy
    ev = policy.eviction
    run_set = np.asarray(run_set, dtype=bool)
    judged = int(run_set.sum())
    judgement = parts.rule.judge(evict_score_tps, run_set, groups)
    draining = parts.admission.draining(eviction_hours, hour)
    adm = parts.admission.admit(judgement, judged, budget_left, draining, pool_cards)
    taken = adm.taken
    tpd = tokens_per_dollar(np.asarray(evict_score_tps)[taken], np.asarray(rent_usd_per_hour)[taken]) if taken.size else np.empty(0)
    evictions = []
    left = int(budget_left)
    candidates = np.asarray(judgement.candidates, dtype=np.int64).tolist()  # Python ints, without a loop over them
    why = dict(zip(candidates, judgement.candidate_reasons))
    for i, c in enumerate(taken):
        left -= 1
        score = float(evict_score_tps[c])
        own = why.get(int(c))
        evictions.append(
            CardDecision(
                "evict",
                int(hour),
                int(c),
                score,
                float(tpd[i]),
                f"{judgement.reason}: scored {score:.0f} tok/s through the {policy.eviction_window} window"
                + (f", {own}" if own else "") + f"; budget left after it {left}",
            )
        )
    lines = judgement.threshold_by_card_tps
    judged_cards = np.flatnonzero(run_set)
    return EvictionPass(
        hour=int(hour),
        rule=ev.rule,
        window=policy.eviction_window,
        judged=judged,
        candidates=tuple(candidates),
        candidate_median_tps=tuple(np.asarray(judgement.candidate_median_tps if judgement.candidate_median_tps is not None else (),
                                              dtype=np.float64).tolist()),
        threshold_by_card_tps=None if lines is None else CardLines(judged_cards, np.asarray(lines, dtype=np.float64)[judged_cards]),
        evicted=tuple(int(c) for c in taken),
        evictions=tuple(evictions),
        median_score_tps=float(judgement.median_tps),
        threshold_tps=float(judgement.threshold_tps),
        blocked_by_budget=adm.blocked_by_budget,
        blocked_by_disruption=adm.blocked_by_disruption,
        breaker_open=adm.breaker_open,
        draining=draining,
        allowed_now=adm.allowed_now,
        budget_left_before=int(budget_left),
        budget_left_after=int(budget_left) - int(taken.size),
        reason=adm.reason,
    )


@dataclass(frozen=True)
class Sized:
    """A stretch sized: the run set of each hour after the hysteresis, (cards, k); the mode's own choice before it;
    and the hours the mode has left each card out at the stretch's end (the hysteresis carries them on)."""

    warm: np.ndarray
    chosen: np.ndarray
    out_hours: np.ndarray


def size_stretch(inp: SizingInput, out_hours: np.ndarray | None, parts: PolicyParts) -> Sized:
    """The run set of each hour of a stretch: the sizing mode's, then the hysteresis.

    `out_hours` is how many hours the mode had left each card out before the stretch
    (None: the month starts, nobody is warm).
    """
    chosen = np.asarray(parts.mode.size(inp), dtype=bool)  # no copy when the mode gives bools already
    warm, after = parts.hysteresis.hold(chosen, inp.eligible, out_hours)
    return Sized(warm, chosen, after)


@dataclass(frozen=True)
class Carry:
    """What one hour hands the next: the run set, the cards that may still run, the month's eviction budget and
    hours, and the hysteresis' count. `tick` hands it on as `Decisions.next`; replay moves it with `evicted` and
    `sized` over a stretch of hours; the decide job resumes it from the store once. Nobody rebuilds it by hand.
    """

    eligible: np.ndarray  # (cards,) bool: the policy's class, not evicted
    budget_left: int  # evictions the month's budget still allows
    run_set: np.ndarray | None = None  # (cards,) bool: warm in the previous hour; None at month start
    eviction_hours: tuple[int, ...] = ()  # month hours of this month's evictions so far
    out_hours: np.ndarray | None = None  # (cards,) hours the sizing mode has left each card out; None: warm cards were chosen

    @classmethod
    def month_start(cls, eligible: np.ndarray, budget_left: int) -> Carry:
        return cls(_frozen(np.asarray(eligible, dtype=bool)), int(budget_left))

    @classmethod
    def resumed(cls, eligible: np.ndarray, budget_left: int, run_set: np.ndarray | None, evictions: Sequence[tuple[int, int | None]],
                held_out_hours: Mapping[int, int] | None, release_after_hours: int) -> Carry:
        """The carry at an hour's start, from a record of the month so far (the service's journal): the cards that
        may run (`eligible`, before this month's evictions), the budget left, the run set the pool is known to run,
        the month's evictions as (month hour, card; None for a card no longer in the pool), and the hysteresis'
        held-out hours by card. The same rules as
        `evicted` and `sized` move it, so an hour resumed from the record is the hour the record left."""
        eligible = np.array(eligible, dtype=bool)
        gone = [int(c) for _, c in evictions if c is not None]
        if gone:
            eligible[gone] = False
        c = cls(_frozen(eligible), int(budget_left), None if run_set is None else _frozen(np.asarray(run_set, dtype=bool)),
                tuple(int(h) for h, _ in evictions))
        return c.held_out(held_out_hours, release_after_hours) if release_after_hours > 1 and held_out_hours is not None else c

    def evicted(self, p: EvictionPass) -> Carry:
        """After an eviction pass: its cards leave the pool for the month and spend the budget."""
        if not p.evicted:
            return replace(self, budget_left=p.budget_left_after)
        eligible = np.array(self.eligible, dtype=bool)
        eligible[list(p.evicted)] = False
        return replace(self, eligible=_frozen(eligible), budget_left=p.budget_left_after,
                       eviction_hours=self.eviction_hours + (p.hour,) * len(p.evicted))

    def sized(self, run_set: np.ndarray, out_hours: np.ndarray | None) -> Carry:
        """After a sized hour (or the last hour of a stretch): its run set and the hysteresis' count."""
        return replace(self, run_set=_frozen(np.asarray(run_set, dtype=bool)),
                       out_hours=None if out_hours is None else _frozen(out_hours))

    def held_out(self, hours_by_card: Mapping[int, int], release_after_hours: int) -> Carry:
        """The hysteresis' count resumed from a record of it: warm cards were chosen unless the record says they are
        held, cards out of the run set are out for good."""
        out = self.out_hours_before(release_after_hours)
        if out is None:
            return self
        out = np.array(out, dtype=np.int64)
        for c, v in hours_by_card.items():
            out[int(c)] = int(v)
        return replace(self, out_hours=_frozen(out))

    def out_hours_before(self, release_after_hours: int) -> np.ndarray | None:
        """The hours each card has been left out, as the hysteresis reads them before an hour (None at month start)."""
        if self.run_set is None:
            return None
        if self.out_hours is not None:
            return np.asarray(self.out_hours)
        return np.where(np.asarray(self.run_set, dtype=bool), 0, release_after_hours)


@dataclass(frozen=True)
class PoolState:
    """What the service knows at the start of month hour `hour`, before deciding it: the carry of the hours before
    and this hour's own inputs (its scores, rent and demand)."""

    hour: int
    score_tps: np.ndarray  # (cards,) the sizing window's score at this hour
    evict_score_tps: np.ndarray  # (cards,) the eviction window's score at this hour
    rent_usd_per_hour: np.ndarray  # (cards,)
    eligible: np.ndarray  # (cards,) bool: the policy's class, not evicted
    run_set: np.ndarray | None  # (cards,) bool: warm in the previous hour; None at month start
    demand_tps: float  # the demand this hour is sized for: its forecast × the forecast-error margin
    peak_demand_tps: float  # the peak held mode sizes for: seen or forecast so far (the month's, when known)
    pool_cards: int  # cards of the policy's class at month start (the budget's base)
    budget_left: int  # evictions the month's budget still allows
    eviction_hours: tuple[int, ...] = ()  # month hours of this month's evictions so far
    out_hours: np.ndarray | None = None  # (cards,) hours the sizing mode has left each card out; None: warm cards were chosen
    groups: np.ndarray | None = None  # (cards,) class index: eviction judges each card against its own class
    in_dip: np.ndarray | None = None  # (cards,) bool: the score estimator scored the card on its recent level (a dip)
    allowance: float = 0.0  # share of capacity held for dips to come
    peak_before_tps: float = float("nan")  # held mode's peak at the hour before (a rise adds the best spares)
    demand_forecast_tps: float = float("nan")  # the forecast alone, before the margin
    knew_demand: bool = False  # the forecast is the hour's own demand (the seed's clairvoyant view)

    @classmethod
    def of(cls, carry: Carry, **hour_inputs) -> PoolState:
        """The state of an hour: what the hours before carried, and the hour's own inputs."""
        return cls(eligible=carry.eligible, run_set=carry.run_set, budget_left=carry.budget_left,
                   eviction_hours=carry.eviction_hours, out_hours=carry.out_hours, **hour_inputs)

    @property
    def carry(self) -> Carry:
        return Carry(np.asarray(self.eligible, dtype=bool), int(self.budget_left), self.run_set, tuple(self.eviction_hours),
                     self.out_hours)


@dataclass(frozen=True)
class Decisions:
    """Everything one hour decided, and `next`: the carry it leaves for the next hour (read-only arrays)."""

    hour: int
    mode: str
    window: str
    target_tps: float
    scored_capacity_tps: float
    next: Carry
    eviction: EvictionPass | None = None
    adds: tuple[CardDecision, ...] = ()
    releases: tuple[CardDecision, ...] = ()
    held_warm: int = 0  # warm cards the mode left out, kept by the hysteresis
    reason: str = ""

    @property
    def evictions(self) -> tuple[CardDecision, ...]:
        return self.eviction.evictions if self.eviction is not None else ()

    @property
    def run_set(self) -> np.ndarray:
        return self.next.run_set

    @property
    def eligible(self) -> np.ndarray:
        return self.next.eligible

    @property
    def budget_left(self) -> int:
        return self.next.budget_left

    @property
    def out_hours(self) -> np.ndarray | None:
        return self.next.out_hours


def tick(state: PoolState, parts: PolicyParts) -> Decisions:
    """Decide one hour: evictions at a decision hour, then the run set."""
    policy = parts.policy
    rent = np.asarray(state.rent_usd_per_hour, dtype=np.float64)
    score = np.asarray(state.score_tps)
    carry = state.carry

    passed = None
    if carry.run_set is not None and is_decision_hour(state.hour, parts, carry.budget_left):
        passed = eviction_pass(state.hour, np.asarray(state.evict_score_tps), carry.run_set, rent, carry.budget_left,
                               carry.eviction_hours, state.pool_cards, parts, state.groups)
        carry = carry.evicted(passed)
    eligible = np.asarray(carry.eligible, dtype=bool)

    before = None if carry.run_set is None else np.asarray(carry.run_set, dtype=bool)
    inp = SizingInput(
        hours=np.array([state.hour]),
        score_tps=score[:, None],
        rent_usd_per_hour=rent,
        eligible=eligible,
        demand_tps=np.array([state.demand_tps], dtype=np.float64),
        peak_demand_tps=float(state.peak_demand_tps),
        headroom=policy.headroom,
        previous=before,
        allowance=np.array([state.allowance]) if state.allowance else None,
        peak_before_tps=float(state.peak_before_tps),
    )
    out_before = carry.out_hours_before(parts.hysteresis.release_after_hours)
    sized = size_stretch(inp, out_before, parts)
    warm, chosen, out_after = sized.warm[:, 0], sized.chosen[:, :1], sized.out_hours
    target = float(inp.target_tps(parts.mode)[0])
    capacity = float(np.asarray(score, dtype=np.float64)[warm].sum())
    was = np.zeros_like(warm) if before is None else before
    evicted = np.zeros_like(warm)
    if passed is not None:
        evicted[list(passed.evicted)] = True
    added = np.flatnonzero(warm & ~was)
    released = np.flatnonzero(was & ~warm & ~evicted)
    held = int((warm & ~chosen[:, 0]).sum())
    tpd_all = tokens_per_dollar(score, rent)
    why = f"{policy.mode} mode through the {parts.score.describe(policy.window)}: target {target:.0f} tok/s, scored capacity {capacity:.0f} tok/s"
    if state.allowance:
        why += f" (holding {state.allowance:.1%} for dips to come)"
    if parts.hysteresis.release_after_hours > 1:
        why += f"; {held} cards held warm until left out {parts.hysteresis.release_after_hours} hours"
    dip = np.zeros(warm.shape, dtype=bool) if state.in_dip is None else np.asarray(state.in_dip, dtype=bool)
    note = lambda c: "; scored on its recent hours: it looks in a dip" if dip[c] else ""  # noqa: E731
    adds = tuple(
        CardDecision("add", state.hour, int(c), float(score[c]), float(tpd_all[c]),
                     f"added: among the best tokens per dollar to cover the target; {why}{note(c)}")
        for c in added
    )
    releases = tuple(
        CardDecision("release", state.hour, int(c), float(score[c]), float(tpd_all[c]),
                     f"released: not needed to cover the target; {why}{note(c)}")
        for c in released
    )
    return Decisions(
        hour=state.hour,
        mode=policy.mode,
        window=policy.window,
        target_tps=target,
        scored_capacity_tps=capacity,
        next=carry.sized(warm, out_after),
        eviction=passed,
        adds=adds,
        releases=releases,
        held_warm=held,
        reason=why,
    )
