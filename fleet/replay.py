"""Replay a month under a policy: size the run set, run the eviction policy, bill it, judge it.

The replay is a pure function of a scenario and its drawn month. Hours between
two eviction decisions are sized in one vectorised step; the only Python loop
is over decisions (30 a month at a daily cadence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from fleet.billing import churn_fee_usd, delivered_tps, idle_usd_by_hour, warm_usd_by_hour
from fleet.config import Scenario, budget_cards
from fleet.ideal_exact import ideal_exact_usd_by_hour
from fleet.model import Month, draw_month, window_scores_many
from policies import EVICTION_RULES, SIZING_MODES, SizingInput, window_hours
from policies.admission import admit, draining_cards
from policies.hysteresis import hold


@dataclass(frozen=True)
class Eviction:
    """One card thrown out: when, on what score, and whether its true rate said it was healthy."""

    hour: int
    card: int
    score_tps: float
    median_score_tps: float
    threshold_tps: float
    true_tps: float
    median_true_tps: float
    reason: str

    @property
    def wrong(self) -> bool:
        return self.true_tps >= self.median_true_tps


@dataclass(frozen=True)
class EvictionDecision:
    """One pass of the eviction policy: who it judged, who it would evict, who the budget let go."""

    hour: int
    judged: int
    candidates: int
    evicted: tuple[int, ...]
    blocked_by_budget: int
    budget_left_after: int
    reason: str


@dataclass
class MonthResult:
    scenario: Scenario
    month: Month
    warm: np.ndarray  # (cards, hours) bool: the run set of each hour
    evictions: list[Eviction]
    decisions: list[EvictionDecision]
    eviction_budget: int
    demand_tps: np.ndarray
    capacity_tps: np.ndarray
    delivered_tps: np.ndarray
    cards_warm: np.ndarray
    warm_usd: np.ndarray
    idle_usd: np.ndarray
    ideal_usd: np.ndarray
    churn_usd: float
    figures: dict = field(default_factory=dict)


def replay(
    scenario: Scenario,
    month: Month | None = None,
    base_dir: Path | None = None,
    ideal: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> MonthResult:
    """Replay one month of `scenario` (drawing it unless `month` is given) and compute its figures."""
    from fleet.verdict import figures

    month = month if month is not None else draw_month(scenario, base_dir)
    policy = scenario.policy
    mode = SIZING_MODES.get(policy.mode)
    rule = EVICTION_RULES.get(policy.eviction.rule)
    H, W = month.hours, month.warmup_hours
    n = month.n_cards
    rent_h = month.rent_usd_per_hour

    cls = month.class_names.index(policy.card_class)
    in_class = month.card_class == cls
    idx = np.flatnonzero(in_class)
    size_w, evict_w = window_hours(policy.window), window_hours(policy.eviction_window)
    scores = _class_scores(month, idx, (size_w,) if evict_w == size_w else (size_w, evict_w))
    score, evict_score = scores[0], scores[-1]

    eligible = in_class.copy()
    budget = budget_cards(policy.eviction.share, int(idx.size))
    budget_left = budget
    cadence = policy.eviction.cadence_hours
    decide = policy.eviction.rule != "none" and budget > 0
    decision_hours = list(range(cadence, H, cadence)) if decide else []
    bounds = [0, *decision_hours, H]
    peak = float(month.demand_tps.max()) if H else 0.0

    warm = np.zeros((n, H), dtype=bool)
    evictions: list[Eviction] = []
    decisions: list[EvictionDecision] = []
    previous: np.ndarray | None = None
    out_hours: np.ndarray | None = None  # hours the sizing mode has left each card out (hysteresis)
    true_month = month.true_rate_tps[:, W:]
    for a, b in zip(bounds[:-1], bounds[1:]):
        if a > 0 and decide:
            run_set = warm[:, a - 1]
            judgement = rule.judge(evict_score[:, a], run_set, policy.eviction.fraction)
            ev = policy.eviction
            admission = admit(
                judgement, int(run_set.sum()), budget_left, draining_cards([e.hour for e in evictions], a, ev.drain_hours),
                int(idx.size), ev.breaker_share, ev.disruption_share,
            )
            taken = admission.taken
            median_true = float(np.median(month.true_tps[run_set])) if run_set.any() else float("nan")
            for c in taken:
                evictions.append(
                    Eviction(
                        hour=a,
                        card=int(c),
                        score_tps=float(evict_score[c, a]),
                        median_score_tps=judgement.median_tps,
                        threshold_tps=judgement.threshold_tps,
                        true_tps=float(month.true_tps[c]),
                        median_true_tps=median_true,
                        reason=judgement.reason,
                    )
                )
            eligible[taken] = False
            budget_left -= int(taken.size)
            decisions.append(
                EvictionDecision(
                    hour=a,
                    judged=int(run_set.sum()),
                    candidates=int(judgement.candidates.size),
                    evicted=tuple(int(c) for c in taken),
                    blocked_by_budget=int(judgement.candidates.size - taken.size),
                    budget_left_after=budget_left,
                    reason=admission.reason,
                )
            )
            if budget_left == 0:
                decide = False
        inp = SizingInput(
            hours=np.arange(a, b),
            score_tps=score[:, a:b],
            rent_usd_per_hour=rent_h,
            eligible=eligible,
            demand_tps=month.demand_tps[a:b],
            peak_demand_tps=peak,
            headroom=policy.headroom,
            previous=previous,
        )
        warm[:, a:b], out_hours = hold(mode.size(inp), eligible, out_hours, policy.release_after_hours)
        previous = warm[:, b - 1].copy()
        if not decide and b < H:
            # Budget spent or no rule: the rest of the month is one stretch.
            inp = SizingInput(
                hours=np.arange(b, H),
                score_tps=score[:, b:H],
                rent_usd_per_hour=rent_h,
                eligible=eligible,
                demand_tps=month.demand_tps[b:H],
                peak_demand_tps=peak,
                headroom=policy.headroom,
                previous=previous,
            )
            warm[:, b:H], out_hours = hold(mode.size(inp), eligible, out_hours, policy.release_after_hours)
            break

    capacity = np.einsum("ch,ch->h", true_month, warm, dtype=np.float64) if n else np.zeros(H)
    demand = month.demand_tps.astype(np.float64)
    delivered = delivered_tps(demand, capacity)
    warm_usd = warm_usd_by_hour(warm, rent_h)
    idle = idle_usd_by_hour(warm_usd, delivered, capacity)
    if ideal is None:
        ideal_usd = ideal_exact_usd_by_hour(true_month, rent_h, demand)
    else:
        ideal_usd = ideal(true_month, rent_h, demand)
    churn = float(churn_fee_usd(month.rent_usd_per_month[[e.card for e in evictions]]).sum()) if evictions else 0.0

    result = MonthResult(
        scenario=scenario,
        month=month,
        warm=warm,
        evictions=evictions,
        decisions=decisions,
        eviction_budget=budget,
        demand_tps=demand,
        capacity_tps=capacity,
        delivered_tps=delivered,
        cards_warm=warm.sum(axis=0),
        warm_usd=warm_usd,
        idle_usd=idle,
        ideal_usd=ideal_usd,
        churn_usd=churn,
    )
    result.figures = figures(result)
    return result


def _class_scores(month: Month, idx: np.ndarray, windows: tuple[int, ...]) -> list[np.ndarray]:
    """Scores of the policy's class through each window, (cards, hours) hours-major; other classes score zero."""
    n, H, W = month.n_cards, month.hours, month.warmup_hours
    # Classes are drawn one after another, so a class is usually a run of rows: slice it, don't copy it.
    contiguous = idx.size > 0 and int(idx[-1]) - int(idx[0]) + 1 == idx.size
    rows = slice(int(idx[0]), int(idx[-1]) + 1) if contiguous else idx
    class_scores = window_scores_many(month.measured_tps[rows], W, H, windows)
    if idx.size == n:
        return class_scores
    out = []
    for s in class_scores:
        full = np.zeros((H, n), dtype=np.float32).T
        full[rows] = s
        out.append(full)
    return out
