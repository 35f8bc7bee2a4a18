"""The policy interfaces the core calls, and a policy resolved into its plug-ins.

The core never looks a policy up by name and never asks which one it holds: it
takes a `PolicyParts` (built by `policies.resolve` from a policy's settings) and
asks each part its own questions: the sizing mode its target and its run set, the
eviction rule whether it is on and whom it would evict, the admission what the
limits let through, the hysteresis what stays warm. All are pure: arrays in,
decisions out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fleet.core.scenario import Policy


@dataclass(frozen=True)
class SizingInput:
    """What a sizing mode sees for a stretch of hours with no eviction in between."""

    hours: np.ndarray  # month hours of the stretch, (k,)
    score_tps: np.ndarray  # windowed scores at those hours, (cards, k)
    rent_usd_per_hour: np.ndarray  # (cards,)
    eligible: np.ndarray  # cards it may run: the policy's class, not evicted, (cards,)
    demand_tps: np.ndarray  # (k,)
    peak_demand_tps: float  # the month's peak demand, for modes that size once
    headroom: float
    previous: np.ndarray | None  # run set of the hour before the stretch, or None at month start


class SizingMode(Protocol):
    name: str

    def target_tps(self, demand_tps: np.ndarray | float, peak_demand_tps: float, headroom: float) -> np.ndarray | float:
        """The capacity the mode sizes the run set for, each hour."""

    def size(self, inp: SizingInput) -> np.ndarray:
        """Run set for each hour of the stretch, a bool (cards, k) mask within `eligible`."""


@dataclass(frozen=True)
class Judgement:
    """An eviction rule's opinion at one decision: the cards it would evict, worst first, and why."""

    candidates: np.ndarray  # card indices, worst first
    median_tps: float
    threshold_tps: float
    reason: str


class EvictionRule(Protocol):
    name: str
    is_on: bool  # False for a rule that never evicts: the policy then has no decision hours

    def judge(self, score_tps: np.ndarray, run_set: np.ndarray, fraction: float) -> Judgement:
        """Judge the run set on its scores; the budget is applied by the admission."""


@dataclass(frozen=True)
class Admitted:
    """The cards a pass evicts, worst first, and what held the other candidates back."""

    taken: np.ndarray
    blocked_by_budget: int  # held back by the month's budget
    blocked_by_disruption: int  # held back by the cards allowed to drain at once
    breaker_open: bool
    allowed_now: int  # cards the disruption budget allowed this pass
    reason: str


class Admission(Protocol):
    def draining(self, eviction_hours: tuple[int, ...] | list[int], hour: int) -> int:
        """Cards still draining at `hour`."""

    def admit(self, judgement: Judgement, judged: int, budget_left: int, draining: int, pool_cards: int) -> Admitted:
        """Which of the rule's candidates this pass may evict."""


class Hysteresis(Protocol):
    release_after_hours: int

    def hold(self, chosen: np.ndarray, eligible: np.ndarray, out_hours: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Warm cards of a stretch, (cards, k), and each card's hours left out at its end."""


@dataclass(frozen=True)
class PolicyParts:
    """A policy's settings with the plug-ins they name, resolved once (`policies.resolve`)."""

    policy: Policy
    mode: SizingMode
    rule: EvictionRule
    admission: Admission
    hysteresis: Hysteresis
    size_window_hours: int
    evict_window_hours: int

    @property
    def evicts(self) -> bool:
        """The eviction rule is on (its budget may still be zero for a pool)."""
        return bool(self.rule.is_on)
