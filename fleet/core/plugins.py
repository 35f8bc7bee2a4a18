"""The policy interfaces the core calls, and a policy resolved into its plug-ins.

The core never looks a policy up by name and never asks which one it holds: it
takes a `PolicyParts` (built by `policies.resolve` from a policy's settings) and
asks each part its own questions: the sizing mode its target and its run set, the
eviction rule whether it is on and whom it would evict, the admission what the
limits let through, the hysteresis what stays warm. All are pure: arrays in,
decisions out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fleet.core.forecast import Forecaster
from fleet.core.latency import PromiseView
from fleet.core.scenario import Policy


@dataclass(frozen=True)
class SizingInput:
    """What a sizing mode sees for a stretch of hours with no eviction in between."""

    hours: np.ndarray  # month hours of the stretch, (k,)
    score_tps: np.ndarray  # scores at those hours, (cards, k)
    rent_usd_per_hour: np.ndarray  # (cards,)
    eligible: np.ndarray  # cards it may run: the policy's class, not evicted, (cards,)
    demand_tps: np.ndarray  # (k,) the demand each hour is sized for: the forecast × its error margin
    peak_demand_tps: np.ndarray | float  # (k,) the peak held mode sizes for: seen or forecast so far (known: the month's)
    headroom: float
    previous: np.ndarray | None  # run set of the hour before the stretch, or None at month start
    allowance: np.ndarray | None = None  # (k,) share of capacity held for dips to come; None: none
    peak_before_tps: float = float("nan")  # the peak held mode had sized for at the hour before the stretch
    promise: "PromiseView | None" = None  # under a promise sized to: the target lifted to the first token's slots
    _targets: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # by mode: read once

    def target_tps(self, mode: "SizingMode") -> np.ndarray:
        """The mode's target each hour, with the capacity held for dips to come, and under a promise the slots its
        first-token percentile needs. Worked out once a mode (the mode sizes to it and the step reports it; the
        slots are a search per hour); read-only."""
        seen = self._targets.get(id(mode))
        if seen is not None and seen[0] is mode:
            return seen[1]
        base = np.asarray(mode.target_tps(self.demand_tps, self.peak_demand_tps, self.headroom), dtype=np.float64)
        base = base if self.allowance is None else base * (1.0 + self.allowance)
        out = base if self.promise is None else self.promise.target_tps(base)
        self._targets[id(mode)] = (mode, out)
        return out


class SizingMode(Protocol):
    name: str

    def target_tps(self, demand_tps: np.ndarray | float, peak_demand_tps: np.ndarray | float, headroom: float) -> np.ndarray | float:
        """The capacity the mode sizes the run set for, each hour."""

    def size(self, inp: SizingInput) -> np.ndarray:
        """Run set for each hour of the stretch, a bool (cards, k) mask within `eligible`."""


@dataclass(frozen=True)
class Scored:
    """A score estimator's output for a stretch of hours: the sizing score, plain window means, and dips seen."""

    score_tps: np.ndarray  # (cards, hours) hours-major float32: what the sizing greedy believes
    window_tps: tuple[np.ndarray, ...] = ()  # (cards, hours) plain window means for the other windows asked (eviction)
    in_dip: np.ndarray | None = None  # (cards, hours) bool: scored on its recent level because it looked in a dip
    dip_rate: np.ndarray | None = None  # (hours,) share of the pool's card-hours starting a dip, as measured so far
    dip_depth: np.ndarray | None = None  # (hours,) the measured dips' mean depth (share of the level lost)


class ScoreEstimator(Protocol):
    name: str
    is_window_mean: bool  # the score is the plain mean of its window (eviction may read it as is)

    def describe(self, window: str) -> str:
        """What the sizing believed, for reasons: "day window", "dip-aware score (...)"."""

    def history_hours(self, window_hours: int) -> int:
        """Hours of telemetry before an hour that its score reads."""

    def score(self, hourly_tps: np.ndarray, history_hours: int, hours: int, window_hours: int,
              other_windows: tuple[int, ...] = ()) -> Scored:
        """Scores at `hours` consecutive hours from (cards, history_hours + hours) hourly means (NaN: no telemetry).

        The score at hour h reads only the hours before it. It sees telemetry only,
        never a scenario's true rates or parameters.
        """


@dataclass(frozen=True)
class Judgement:
    """An eviction rule's opinion at one decision: the cards it would evict, worst first, and why."""

    candidates: np.ndarray  # card indices, worst first
    median_tps: float  # the rule's reference score (below-median: the run set's median; NaN when it differs by class)
    threshold_tps: float
    reason: str
    candidate_median_tps: np.ndarray | None = None  # each candidate's own reference, aligned with candidates
    threshold_by_card_tps: np.ndarray | None = None  # (cards,) the line each judged card was held to (NaN: not judged)
    candidate_reasons: tuple[str, ...] = ()  # why each candidate falls under its line, in the rule's words


class EvictionRule(Protocol):
    name: str
    is_on: bool  # False for a rule that never evicts: the policy then has no decision hours

    def judge(self, score_tps: np.ndarray, run_set: np.ndarray, groups: np.ndarray | None = None) -> Judgement:
        """Judge the run set on its scores, each card against its own group (class), by the rule's own settings;
        the budget is the admission's."""


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
    score: ScoreEstimator
    mode: SizingMode
    rule: EvictionRule
    admission: Admission
    hysteresis: Hysteresis
    size_window_hours: int
    evict_window_hours: int
    forecast: Forecaster | None = None  # None: the policy's own default, resolved by `policies.resolve`

    @property
    def knows_demand(self) -> bool:
        """The policy sizes each hour to its own demand (the seed's clairvoyant view)."""
        return bool(self.forecast is not None and self.forecast.knows_demand)

    @property
    def evicts(self) -> bool:
        """The eviction rule is on (its budget may still be zero for a pool)."""
        return bool(self.rule.is_on)
