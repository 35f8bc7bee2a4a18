"""The step both clocks take: an eviction pass, then the sizing, over a stretch of hours, pure.

`step(carry, inputs, parts)` decides a stretch of hours with no eviction after its
first: at a decision hour (the rule's cadence, while budget is left) the rule judges
the run set the hour before left through its window, the admission lets through
what the breaker, the disruption budget and the month's budget allow
(`eviction_pass`); then the sizing mode chooses each hour's run set and the
hysteresis holds what it carries on (`size_stretch`), vectorised over the stretch.
It returns `Decisions` with `next`, the `Carry` the step after takes. Replay steps
over the month's stretches; the service steps one hour at a time; the journal,
`explain`, `plan` and export read the decisions, each with its reason.

No clock, no I/O: the hours and every input are arguments; policies arrive resolved.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import Mapping, Protocol

import numpy as np

from fleet.core.carry import Carry
from fleet.core.greedy import tokens_per_dollar
from fleet.core.latency import PromiseView
from fleet.core.plugins import PolicyParts, SizingInput


class CardAction(StrEnum):
    """What a decision does to its card. The values are the journal's kinds of the same actions."""

    EVICT = "evict"  # out of the run set and the pool for the month
    ADD = "add"  # into the run set
    RELEASE = "release"  # out of the run set


@dataclass(frozen=True)
class CardDecision:
    """One card's decision, with the score it read and why."""

    kind: CardAction
    hour: int  # the month hour it was decided at
    card: int
    score_tps: float
    tokens_per_usd: float
    reason: str
    for_latency: bool = False  # an add under a promise: the tokens were covered without it, the first tokens not


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
                CardAction.EVICT,
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
class StepInput:
    """What a step reads beside the carry: a stretch of consecutive hours, with no eviction after its first."""

    hours: np.ndarray  # (k,) month hours
    score_tps: np.ndarray  # (cards, k) the sizing window's (or estimator's) score each hour
    rent_usd_per_hour: np.ndarray  # (cards,)
    demand_tps: np.ndarray  # (k,) the demand each hour is sized for: its forecast × the forecast-error margin
    peak_demand_tps: np.ndarray  # (k,) the peak held mode sizes for: seen or forecast so far (the month's, when known)
    pool_cards: int  # cards of the policy's class in the pool (the disruption budget's base)
    evict_score_tps: np.ndarray | None = None  # (cards,) the eviction window's score at the first hour: read at a decision hour
    groups: np.ndarray | None = None  # (cards,) class index: eviction judges each card against its own class
    peak_before_tps: float = float("nan")  # held mode's peak at the hour before the stretch (a rise adds the best spares)
    allowance: np.ndarray | None = None  # (k,) share of capacity held for dips to come; None: none
    in_dip: np.ndarray | None = None  # (cards, k) bool: the estimator scored the card on its recent level (a dip)
    unavailable: np.ndarray | None = None  # (cards,) bool: may not be chosen in the stretch (silent, retired by hand)
    promise: PromiseView | None = None  # under a promise sized to: scores and targets read at the promise
    # (cards,) each card's rate at the promise from its own fitted curve (NaN: none; its score is read on its class's
    # curve): the service's, from the serving stack's telemetry. None: every card's score read on its class's curve.
    promise_rate_tps: np.ndarray | None = None

    def at_promise(self) -> "StepInput":
        """The same stretch with each card's score (and eviction score) read as its rate at the promise: what the
        greedy sizes, ranks by tokens per dollar and the rule judges, so one step serves both readings. A card with
        a rate of its own at the promise (`promise_rate_tps`) is sized by it: its own curve knows it better than its
        score on its class's."""
        if self.promise is None:
            return self
        return replace(self, score_tps=scores_at_promise(self.promise, self.score_tps, self.promise_rate_tps),
                       evict_score_tps=None if self.evict_score_tps is None else self.promise.rates_tps(self.evict_score_tps))


def scores_at_promise(promise, score_tps: np.ndarray, own_rate_tps: np.ndarray | None = None) -> np.ndarray:
    """Scores (cards, hours) read as rates at the promise, a card's own curve's rate (`own_rate_tps`, (cards,); NaN
    where it has none) first: what the plan and the reactive loop both weigh cards by under a promise."""
    score = promise.rates_tps(score_tps)
    if own_rate_tps is not None:
        own = np.asarray(own_rate_tps, dtype=np.float64).reshape(-1, 1)
        score = np.where(np.isfinite(own), own, score).astype(score.dtype, copy=False)
    return score


class CardChanges(Protocol):
    adds: tuple[CardDecision, ...]
    releases: tuple[CardDecision, ...]


@dataclass(frozen=True)
class Listed:
    """Cards added and released, given as they are."""

    adds: tuple[CardDecision, ...] = ()
    releases: tuple[CardDecision, ...] = ()


def sizing_reason(parts: PolicyParts, target_tps: float, capacity_tps: float, allowance: float, held_warm: int,
                  promise: PromiseView | None = None, tokens_tps: float | None = None) -> str:
    """Why an hour's run set is what it is, in the sizing's words; under a promise, what it was read at and how much
    of the target the first token's slots asked beyond the tokens."""
    policy = parts.policy
    at = "" if promise is None else f" at the promise ({promise.describe()})"
    why = (f"{policy.mode} mode through the {parts.score.describe(policy.window)}: target {target_tps:.0f} tok/s{at}, "
           f"scored capacity {capacity_tps:.0f} tok/s")
    if promise is not None and tokens_tps is not None and target_tps > tokens_tps + 0.5:
        why += f" ({tokens_tps:.0f} tok/s for the tokens, {target_tps - tokens_tps:.0f} more for the first token's slots)"
    if allowance:
        why += f" (holding {allowance:.1%} for dips to come)"
    r = parts.hysteresis.release_after_hours
    if r > 1:
        why += f"; {held_warm} cards held warm until left out {r} hours"
    return why


@dataclass(frozen=True, eq=False)
class StretchChanges:
    """The cards a stretch added to the run set and released from it, hour by hour, each with its hour's reason:
    worked out when first read, so a stretch whose changes nobody reads (replay's) pays nothing for them."""

    inp: StepInput
    parts: PolicyParts = field(repr=False)
    before: np.ndarray | None  # (cards,) the run set the hour before the stretch; None at month start
    warm: np.ndarray  # (cards, k)
    chosen: np.ndarray  # (cards, k) the mode's own choice, before the hysteresis
    evicted: tuple[int, ...]  # evicted at the stretch's first hour: they leave, and are not released
    targets_tps: np.ndarray  # (k,)
    tokens_tps: np.ndarray | None = None  # (k,) under a promise: the target before the first token's slots

    @cached_property
    def _both(self) -> tuple[tuple[CardDecision, ...], tuple[CardDecision, ...]]:
        warm = np.asarray(self.warm, dtype=bool)
        n, k = warm.shape
        adds: list[CardDecision] = []
        releases: list[CardDecision] = []
        was = np.zeros(n, dtype=bool) if self.before is None else np.asarray(self.before, dtype=bool)
        gone = np.zeros(n, dtype=bool)
        gone[list(self.evicted)] = True
        for j in range(k):
            now = warm[:, j]
            added = np.flatnonzero(now & ~was)
            released = np.flatnonzero(was & ~now & ~gone)
            if added.size or released.size:
                self._hour(j, added, released, adds, releases)
            was, gone = now, np.zeros(n, dtype=bool)
        return tuple(adds), tuple(releases)

    def _hour(self, j: int, added: np.ndarray, released: np.ndarray, adds: list, releases: list) -> None:
        inp = self.inp
        hour = int(inp.hours[j])
        score = np.asarray(inp.score_tps[:, j])
        now = np.asarray(self.warm[:, j], dtype=bool)
        capacity = float(np.asarray(score, dtype=np.float64)[now].sum())
        held = int((now & ~np.asarray(self.chosen[:, j], dtype=bool)).sum())
        allowance = float(inp.allowance[j]) if inp.allowance is not None else 0.0
        tokens = None if self.tokens_tps is None else float(self.tokens_tps[j])
        why = sizing_reason(self.parts, float(self.targets_tps[j]), capacity, allowance, held, inp.promise, tokens)
        tpd = tokens_per_dollar(score, inp.rent_usd_per_hour)
        # Added for latency: the run set without the hour's adds already carried the tokens, not the first tokens.
        for_latency = tokens is not None and capacity - float(np.asarray(score, dtype=np.float64)[added].sum()) >= tokens
        why_add = ("added for latency: the tokens were covered, the first token's slots were not" if for_latency
                   else "added: among the best tokens per dollar to cover the target")
        dip = None if inp.in_dip is None else np.asarray(inp.in_dip[:, j], dtype=bool)
        note = lambda c: "; scored on its recent hours: it looks in a dip" if dip is not None and dip[c] else ""  # noqa: E731
        adds.extend(CardDecision(CardAction.ADD, hour, int(c), float(score[c]), float(tpd[c]),
                                 f"{why_add}; {why}{note(c)}", for_latency) for c in added)
        releases.extend(CardDecision(CardAction.RELEASE, hour, int(c), float(score[c]), float(tpd[c]),
                                     f"released: not needed to cover the target; {why}{note(c)}") for c in released)

    @property
    def adds(self) -> tuple[CardDecision, ...]:
        return self._both[0]

    @property
    def releases(self) -> tuple[CardDecision, ...]:
        return self._both[1]


@dataclass(frozen=True, eq=False)
class Decisions:
    """What a step decided, and `next`: the carry it leaves for the step after (read-only arrays).

    `hour` and the figures (`target_tps`, `scored_capacity_tps`, `held_warm`, `reason`) are the stretch's last
    hour's: the service's step is one hour. `warm` is the run set of each hour of the stretch; `eviction` the
    pass at its first hour, if it was a decision hour; `adds` and `releases` the cards each hour added and
    released, read through `changes`.
    """

    hour: int
    mode: str
    window: str
    target_tps: float
    scored_capacity_tps: float
    next: Carry
    eviction: EvictionPass | None = None
    held_warm: int = 0  # warm cards the mode left out, kept by the hysteresis
    reason: str = ""
    changes: CardChanges = Listed()
    warm: np.ndarray | None = None  # (cards, k); None: the one hour of `next.run_set`

    @property
    def adds(self) -> tuple[CardDecision, ...]:
        return self.changes.adds

    @property
    def releases(self) -> tuple[CardDecision, ...]:
        return self.changes.releases

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


def step(carry: Carry, inp: StepInput, parts: PolicyParts) -> Decisions:
    """Decide a stretch of hours: the eviction pass at its first hour when that is a decision hour, then each
    hour's run set; the same for a month's stretch in replay and for one hour of the service."""
    policy = parts.policy
    inp = inp.at_promise()
    hours = np.asarray(inp.hours)
    first = int(hours[0])
    rent = inp.rent_usd_per_hour
    passed = None
    after = carry
    if carry.run_set is not None and is_decision_hour(first, parts, carry.budget_left):
        if inp.evict_score_tps is None:
            raise ValueError(f"month hour {first} is a decision hour: its step needs the eviction window's scores")
        passed = eviction_pass(first, np.asarray(inp.evict_score_tps), carry.run_set, rent, carry.budget_left,
                               carry.eviction_hours, inp.pool_cards, parts, inp.groups)
        after = carry.evicted(passed)
    eligible = np.asarray(after.eligible, dtype=bool)
    if inp.unavailable is not None:
        eligible = eligible & ~np.asarray(inp.unavailable, dtype=bool)
    before = None if after.run_set is None else np.asarray(after.run_set, dtype=bool)
    sizing = SizingInput(hours=hours, score_tps=inp.score_tps, rent_usd_per_hour=rent, eligible=eligible,
                         demand_tps=inp.demand_tps, peak_demand_tps=inp.peak_demand_tps, headroom=policy.headroom,
                         previous=before, allowance=inp.allowance, peak_before_tps=float(inp.peak_before_tps),
                         promise=inp.promise)
    sized = size_stretch(sizing, after.out_hours_before(parts.hysteresis.release_after_hours), parts)
    warm, chosen = sized.warm, sized.chosen
    last = warm[:, -1]
    targets = np.asarray(sizing.target_tps(parts.mode), dtype=np.float64).reshape(-1)
    targets = np.broadcast_to(targets, hours.shape) if targets.size == 1 else targets
    tokens = None
    if inp.promise is not None:
        tokens = np.asarray(replace(sizing, promise=None).target_tps(parts.mode), dtype=np.float64).reshape(-1)
        tokens = np.broadcast_to(tokens, hours.shape) if tokens.size == 1 else tokens
    capacity = float(np.asarray(inp.score_tps[:, -1], dtype=np.float64)[last].sum())
    held = int((last & ~chosen[:, -1]).sum())
    allowance = float(inp.allowance[-1]) if inp.allowance is not None else 0.0
    changes = StretchChanges(inp, parts, before, warm, chosen, () if passed is None else passed.evicted, targets, tokens)
    return Decisions(
        hour=int(hours[-1]),
        mode=policy.mode,
        window=policy.window,
        target_tps=float(targets[-1]),
        scored_capacity_tps=capacity,
        next=after.sized(last, sized.out_hours),
        eviction=passed,
        held_warm=held,
        reason=sizing_reason(parts, float(targets[-1]), capacity, allowance, held, inp.promise,
                             None if tokens is None else float(tokens[-1])),
        changes=changes,
        warm=warm,
    )
