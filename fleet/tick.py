"""One service tick, pure: the pool as it stands at an hour in, frozen decisions out.

`tick(state, policy)` is what `fleet serve` runs every hour and what a replay
does hour by hour: at a decision hour (the eviction cadence, while budget is
left) the eviction rule judges the previous hour's run set through its window
and `policies.admission` lets through what the breaker, the disruption budget
and the month's budget allow; then the sizing mode sizes this hour's run set on
the cards still eligible. Both steps call the same policy objects `fleet replay`
calls, so stepping a month through `tick` gives replay's run sets and evictions.

`bill_hours` is a stretch of hours' bill, idle cost and ideal bill from the same billing
functions. No clock, no I/O: the hour and every input are arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleet.billing import churn_fee_usd, delivered_tps, idle_usd_by_hour, warm_usd_by_hour
from fleet.config import Policy
from fleet.ideal_exact import ideal_exact_usd_by_hour
from fleet.sizing import tokens_per_dollar
from policies import EVICTION_RULES, SIZING_MODES, SizingInput
from policies.admission import admit, draining_cards
from policies.hysteresis import hold


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class PoolState:
    """What the service knows at the start of month hour `hour`, before deciding it."""

    hour: int
    score_tps: np.ndarray  # (cards,) the sizing window's score at this hour
    evict_score_tps: np.ndarray  # (cards,) the eviction window's score at this hour
    rent_usd_per_hour: np.ndarray  # (cards,)
    eligible: np.ndarray  # (cards,) bool: the policy's class, not evicted
    run_set: np.ndarray | None  # (cards,) bool: warm in the previous hour; None at month start
    demand_tps: float  # this hour's demand
    peak_demand_tps: float  # the month's peak demand (held mode sizes for it)
    pool_cards: int  # cards of the policy's class at month start (the budget's base)
    budget_left: int  # evictions the month's budget still allows
    eviction_hours: tuple[int, ...] = ()  # month hours of this month's evictions so far
    out_hours: np.ndarray | None = None  # (cards,) hours the sizing mode has left each card out; None: warm cards were chosen


@dataclass(frozen=True)
class CardDecision:
    """One card's decision: `evict`, `add` (to the run set) or `release` (from it), with the score it read and why."""

    kind: str
    card: int
    score_tps: float
    tokens_per_usd: float
    reason: str


@dataclass(frozen=True)
class EvictionPass:
    """One pass of the eviction policy: what it judged, who it would evict, who it evicted, what held the rest back."""

    rule: str
    window: str
    fraction: float
    judged: int
    candidates: tuple[int, ...]
    evicted: tuple[int, ...]
    median_score_tps: float
    threshold_tps: float
    blocked_by_budget: int
    blocked_by_disruption: int
    breaker_open: bool
    draining: int
    allowed_now: int
    budget_left_before: int
    budget_left_after: int
    reason: str


@dataclass(frozen=True)
class Decisions:
    """Everything one tick decided. `run_set` and `eligible` are the state after it (read-only arrays)."""

    hour: int
    mode: str
    window: str
    target_tps: float
    scored_capacity_tps: float
    run_set: np.ndarray
    eligible: np.ndarray
    budget_left: int
    out_hours: np.ndarray | None = None  # (cards,) after this hour, for the next one (hysteresis)
    eviction: EvictionPass | None = None
    evictions: tuple[CardDecision, ...] = ()
    adds: tuple[CardDecision, ...] = ()
    releases: tuple[CardDecision, ...] = ()
    reason: str = ""

    @property
    def card_decisions(self) -> tuple[CardDecision, ...]:
        """In the order they are acted on: evictions first, then releases, then additions."""
        return self.evictions + self.releases + self.adds


def is_decision_hour(hour: int, policy: Policy, budget_left: int) -> bool:
    """The eviction policy runs at hours cadence, 2 × cadence, ... while its rule is on and budget is left."""
    ev = policy.eviction
    return ev.rule != "none" and budget_left > 0 and hour > 0 and hour % ev.cadence_hours == 0


def sizing_target_tps(policy: Policy, demand_tps: float, peak_demand_tps: float) -> float:
    """The capacity the sizing mode aims at: the month's peak for `held`, this hour's demand otherwise, × headroom."""
    base = peak_demand_tps if policy.mode == "held" else demand_tps
    return float(base) * policy.headroom


def tick(state: PoolState, policy: Policy) -> Decisions:
    """Decide one hour: evictions at a decision hour, then the run set."""
    mode = SIZING_MODES.get(policy.mode)
    rule = EVICTION_RULES.get(policy.eviction.rule)
    rent = np.asarray(state.rent_usd_per_hour, dtype=np.float64)
    score = np.asarray(state.score_tps)
    evict_score = np.asarray(state.evict_score_tps)
    eligible = np.asarray(state.eligible, dtype=bool).copy()
    budget_left = int(state.budget_left)
    ev = policy.eviction

    eviction_pass = None
    evictions: list[CardDecision] = []
    if state.run_set is not None and is_decision_hour(state.hour, policy, budget_left):
        run_set = np.asarray(state.run_set, dtype=bool)
        judged = int(run_set.sum())
        judgement = rule.judge(evict_score, run_set, ev.fraction)
        draining = draining_cards(state.eviction_hours, state.hour, ev.drain_hours)
        adm = admit(judgement, judged, budget_left, draining, state.pool_cards, ev.breaker_share, ev.disruption_share)
        taken = adm.taken
        eligible[taken] = False
        tpd = tokens_per_dollar(evict_score[taken], rent[taken]) if taken.size else np.empty(0)
        left = budget_left
        for i, c in enumerate(taken):
            left -= 1
            evictions.append(
                CardDecision(
                    "evict",
                    int(c),
                    float(evict_score[c]),
                    float(tpd[i]),
                    f"{judgement.reason}: scored {float(evict_score[c]):.0f} tok/s through the {policy.eviction_window} window, "
                    f"under the threshold {judgement.threshold_tps:.0f} tok/s (median {judgement.median_tps:.0f}); "
                    f"budget left after it {left}",
                )
            )
        eviction_pass = EvictionPass(
            rule=ev.rule,
            window=policy.eviction_window,
            fraction=ev.fraction,
            judged=judged,
            candidates=tuple(int(c) for c in judgement.candidates),
            evicted=tuple(int(c) for c in taken),
            median_score_tps=float(judgement.median_tps),
            threshold_tps=float(judgement.threshold_tps),
            blocked_by_budget=adm.blocked_by_budget,
            blocked_by_disruption=adm.blocked_by_disruption,
            breaker_open=adm.breaker_open,
            draining=draining,
            allowed_now=adm.allowed_now,
            budget_left_before=budget_left,
            budget_left_after=budget_left - int(taken.size),
            reason=adm.reason,
        )
        budget_left -= int(taken.size)

    inp = SizingInput(
        hours=np.array([state.hour]),
        score_tps=score[:, None],
        rent_usd_per_hour=rent,
        eligible=eligible,
        demand_tps=np.array([state.demand_tps], dtype=np.float64),
        peak_demand_tps=float(state.peak_demand_tps),
        headroom=policy.headroom,
        previous=None if state.run_set is None else np.asarray(state.run_set, dtype=bool),
    )
    chosen = np.asarray(mode.size(inp))[:, :1].astype(bool)
    if state.run_set is None:
        out_before = None
    elif state.out_hours is not None:
        out_before = np.asarray(state.out_hours)
    else:
        out_before = np.where(np.asarray(state.run_set, dtype=bool), 0, policy.release_after_hours)
    warm_k, out_after = hold(chosen, eligible, out_before, policy.release_after_hours)
    warm = warm_k[:, 0]
    target = sizing_target_tps(policy, state.demand_tps, state.peak_demand_tps)
    capacity = float(np.asarray(score, dtype=np.float64)[warm].sum())
    before = np.zeros_like(warm) if state.run_set is None else np.asarray(state.run_set, dtype=bool)
    evicted = np.zeros_like(warm)
    evicted[[e.card for e in evictions]] = True
    added = np.flatnonzero(warm & ~before)
    released = np.flatnonzero(before & ~warm & ~evicted)
    held = int((warm & ~chosen[:, 0]).sum())
    tpd_all = tokens_per_dollar(score, rent)
    why = f"{policy.mode} mode through the {policy.window} window: target {target:.0f} tok/s, scored capacity {capacity:.0f} tok/s"
    if policy.release_after_hours > 1:
        why += f"; {held} cards held warm until left out {policy.release_after_hours} hours"
    adds = tuple(
        CardDecision("add", int(c), float(score[c]), float(tpd_all[c]), f"added: among the best tokens per dollar to cover the target; {why}")
        for c in added
    )
    releases = tuple(
        CardDecision("release", int(c), float(score[c]), float(tpd_all[c]), f"released: not needed to cover the target; {why}")
        for c in released
    )
    return Decisions(
        hour=state.hour,
        mode=policy.mode,
        window=policy.window,
        target_tps=target,
        scored_capacity_tps=capacity,
        run_set=_frozen(warm),
        eligible=_frozen(eligible),
        budget_left=budget_left,
        out_hours=_frozen(out_after),
        eviction=eviction_pass,
        evictions=tuple(evictions),
        adds=adds,
        releases=releases,
        reason=why,
    )


@dataclass(frozen=True)
class HoursBill:
    """A stretch of hours billed as the replay bills them: one array entry per hour."""

    warm_usd: np.ndarray
    churn_usd: np.ndarray
    capacity_tps: np.ndarray
    delivered_tps: np.ndarray
    demand_tps: np.ndarray
    idle_usd: np.ndarray
    ideal_usd: np.ndarray
    cards_warm: np.ndarray

    @property
    def bill_usd(self) -> np.ndarray:
        return self.warm_usd + self.churn_usd


def bill_hours(
    run_set: np.ndarray,
    rent_usd_per_hour: np.ndarray,
    rent_usd_per_month: np.ndarray,
    true_rate_tps: np.ndarray,
    demand_tps: np.ndarray,
    evicted: list[np.ndarray],
) -> HoursBill:
    """Warm rent, churn fees, capacity, delivered, idle cost and the ideal bill of a stretch of hours.

    `run_set` and `true_rate_tps` are (cards, hours); `evicted[j]` holds the cards
    evicted at hour j. The true rate is the simulation's truth, or hindsight
    (each card's month mean) for a real pool.
    """
    warm = np.asarray(run_set, dtype=bool)
    rate = np.asarray(true_rate_tps, dtype=np.float64)
    rent_h = np.asarray(rent_usd_per_hour, dtype=np.float64)
    demand = np.asarray(demand_tps, dtype=np.float64)
    capacity = np.einsum("ch,ch->h", rate, warm, dtype=np.float64)
    delivered = delivered_tps(demand, capacity)
    warm_usd = warm_usd_by_hour(warm, rent_h)
    fees = churn_fee_usd(np.asarray(rent_usd_per_month, dtype=np.float64))
    churn = np.array([float(fees[np.asarray(e, dtype=np.int64)].sum()) for e in evicted])
    return HoursBill(
        warm_usd=warm_usd,
        churn_usd=churn,
        capacity_tps=capacity,
        delivered_tps=delivered,
        demand_tps=demand,
        idle_usd=idle_usd_by_hour(warm_usd, delivered, capacity),
        ideal_usd=ideal_exact_usd_by_hour(rate, rent_h, demand),
        cards_warm=warm.sum(axis=0),
    )
