"""The two policy interfaces: a sizing mode and an eviction rule. Both are pure: arrays in, decisions out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


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

    def judge(self, score_tps: np.ndarray, run_set: np.ndarray, fraction: float) -> Judgement:
        """Judge the run set on its scores; the budget is applied by the caller."""
