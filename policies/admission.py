"""Admission: which of an eviction rule's candidates a pass may actually evict.

The rule judges; admission applies the limits, in this order, each as plain data:
1. the circuit breaker: when more than `breaker_share` of the judged run set
   looks bad at once, a telemetry or demand fault is likelier than that many bad
   cards, so the pass evicts nobody and says so;
2. the disruption budget: at most the share `disruption_share` of the pool
   (rounded up) may be draining at once, less the cards already draining
   (evicted within the last `drain_hours`);
3. the month's budget left (`fleet.core.scenario.budget_cards`, the share rounded down).
The defaults (breaker 1.0, disruption 1.0, drain 0 hours) never bind, so a
policy that does not set them evicts exactly what its rule and month budget allow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pydantic import Field

from fleet.core.plugins import Admitted, Judgement
from fleet.core.scenario import Strict


class LimitsSettings(Strict):
    """The admission's own table, `[policy.eviction.admissions.limits]`; the defaults never bind."""

    breaker_share: float = Field(default=1.0, gt=0, le=1)  # more of the run set than this looking bad at once: evict nobody
    disruption_share: float = Field(default=1.0, gt=0, le=1)  # share of the pool (rounded up) that may drain at once
    drain_hours: int = Field(default=0, ge=0)  # hours an evicted card counts as draining


@dataclass(frozen=True)
class Limits:
    """The breaker, the disruption budget and the drain time of one policy, as the core's `Admission`."""

    breaker_share: float = 1.0
    disruption_share: float = 1.0
    drain_hours: int = 0

    @classmethod
    def of(cls, settings: LimitsSettings) -> "Limits":
        return cls(settings.breaker_share, settings.disruption_share, settings.drain_hours)

    def draining(self, eviction_hours, hour: int) -> int:
        return draining_cards(eviction_hours, hour, self.drain_hours)

    def admit(self, judgement: Judgement, judged: int, budget_left: int, draining: int, pool_cards: int) -> Admitted:
        return admit(judgement, judged, budget_left, draining, pool_cards, self.breaker_share, self.disruption_share)


def admit(
    judgement: Judgement,
    judged: int,
    budget_left: int,
    draining: int,
    pool_cards: int,
    breaker_share: float = 1.0,
    disruption_share: float = 1.0,
) -> Admitted:
    """Apply the breaker, the disruption budget and the month's budget to a rule's candidates."""
    cand = judgement.candidates
    allowed_now = max(0, int(math.ceil(disruption_share * pool_cards - 1e-9)) - int(draining))
    if judged > 0 and cand.size > breaker_share * judged + 1e-9:
        return Admitted(
            cand[:0],
            0,
            0,
            True,
            allowed_now,
            f"circuit breaker open: {cand.size} of {judged} run-set cards look bad at once "
            f"(more than {breaker_share:.0%}); a telemetry or demand fault is likelier, nobody evicted",
        )
    by_disruption = min(int(cand.size), allowed_now)
    taken = cand[: min(by_disruption, max(0, int(budget_left)))]
    return Admitted(
        taken,
        blocked_by_budget=by_disruption - int(taken.size),
        blocked_by_disruption=int(cand.size) - by_disruption,
        breaker_open=False,
        allowed_now=allowed_now,
        reason=judgement.reason,
    )


def draining_cards(eviction_hours: np.ndarray | list[int], hour: int, drain_hours: int) -> int:
    """Cards still draining at `hour`: evicted within the last `drain_hours` hours."""
    if drain_hours <= 0:
        return 0
    h = np.asarray(eviction_hours, dtype=np.int64)
    return int(((h > hour - drain_hours) & (h <= hour)).sum())
