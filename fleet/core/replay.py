"""Replay a month under a policy: size the run set, run the eviction policy, bill it, judge it.

The replay is a pure function of a scenario, its resolved policy and its month
(drawn or stored). It walks the month through the hour-step (`fleet.core.step`):
an eviction pass at each decision hour, and the hours between two decisions sized
in one vectorised stretch by the same sizing step the service's tick calls one
hour at a time. The only Python loop is over decisions (30 a month at a daily cadence).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fleet.core.billing import HoursBill, bill_hours
from fleet.core.month import Month, draw_month
from fleet.core.plugins import PolicyParts, SizingInput
from fleet.core.scenario import Scenario, budget_cards
from fleet.core.scores import rows_scores
from fleet.core.step import CardDecision, EvictionPass, eviction_pass, is_decision_hour, size_stretch
from fleet.core.verdict import figures, median_ticket_tps, wrong_evictions


@dataclass
class MonthResult:
    """A replayed month: its run sets, eviction passes, bill, and the verdict's figures."""

    scenario: Scenario
    month: Month
    warm: np.ndarray  # (cards, hours) bool: the run set of each hour
    passes: list[EvictionPass]
    eviction_budget: int
    bill: HoursBill
    wrong: np.ndarray  # (evictions,) bool, in the order of `evictions`
    median_ticket_tps: np.ndarray  # (evictions,) the median ticket of the run set each eviction was judged in
    figures: dict = field(default_factory=dict)

    @property
    def evictions(self) -> list[CardDecision]:
        """Every eviction, in the order they were made."""
        return [e for p in self.passes for e in p.evictions]

    @property
    def cards_warm(self) -> np.ndarray:
        """Cards warm in each hour (the bill's count)."""
        return self.bill.cards_warm


def replay(scenario: Scenario, parts: PolicyParts, month: Month | None = None, ideal_usd: np.ndarray | None = None) -> MonthResult:
    """Replay one month of `scenario` under its resolved policy (drawing the month unless given) and judge it.

    `ideal_usd` is the month's ideal bill by hour when the caller has it (a sweep
    computes it once per month for every policy); otherwise the exact ideal is computed.
    """
    month = month if month is not None else draw_month(scenario)
    policy = parts.policy
    H, W = month.hours, month.warmup_hours
    n = month.n_cards
    rent_h = month.rent_usd_per_hour

    in_class = month.card_class == month.class_names.index(policy.card_class)
    idx = np.flatnonzero(in_class)
    size_w, evict_w = parts.size_window_hours, parts.evict_window_hours
    scores = rows_scores(month.measured_tps, idx, W, H, (size_w,) if evict_w == size_w else (size_w, evict_w))
    score, evict_score = scores[0], scores[-1]

    eligible = in_class.copy()
    budget = budget_cards(policy.eviction.share, int(idx.size))
    budget_left = budget
    peak = float(month.demand_tps.max()) if H else 0.0
    cadence = policy.eviction.cadence_hours
    decision_hours = [h for h in range(cadence, H, cadence) if is_decision_hour(h, parts, budget)]

    warm = np.zeros((n, H), dtype=bool)
    passes: list[EvictionPass] = []
    eviction_hours: list[int] = []
    previous: np.ndarray | None = None
    out_hours: np.ndarray | None = None  # hours the sizing mode has left each card out (hysteresis)
    a = 0
    for b in [*decision_hours, H]:
        if a > 0:
            p = eviction_pass(a, evict_score[:, a], warm[:, a - 1], rent_h, budget_left, eviction_hours, int(idx.size), parts)
            passes.append(p)
            eligible[list(p.evicted)] = False
            eviction_hours += [a] * len(p.evicted)
            budget_left = p.budget_left_after
        if budget_left == 0 or b == H:
            b = H  # budget spent: the rest of the month is one stretch
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
        warm[:, a:b], out_hours = size_stretch(inp, out_hours, parts)
        previous = warm[:, b - 1].copy() if b > a else previous
        if b == H:
            break
        a = b

    evicted_at: list[list[int]] = [[] for _ in range(H)]
    for p in passes:
        evicted_at[p.hour] = list(p.evicted)
    bill = bill_hours(warm, rent_h, month.rent_usd_per_month, month.true_rate_tps[:, W:], month.demand_tps, evicted_at, ideal_usd)
    wrong, medians = [], []
    for p in passes:
        judged = warm[:, p.hour - 1]
        wrong.extend(wrong_evictions(np.array(p.evicted, dtype=np.int64), judged, month.true_tps).tolist())
        medians.extend([median_ticket_tps(judged, month.true_tps)] * len(p.evicted))
    result = MonthResult(
        scenario=scenario,
        month=month,
        warm=warm,
        passes=passes,
        eviction_budget=budget,
        bill=bill,
        wrong=np.array(wrong, dtype=bool),
        median_ticket_tps=np.array(medians, dtype=np.float64),
    )
    result.figures = figures(scenario, month, warm, bill, result.wrong, budget)
    return result
