"""Below-median rule: evict run-set cards scoring under `fraction` of their class's median score in the run set, worst first.

Each card is judged against the cards of its own class (a bargain card is neither
healthy nor slow by a flagship's median); with one class that is the run set's median.
The rule owns its setting (`fraction`, in `[policy.eviction.rules.below-median]`), its threshold and its reason.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from fleet.core.plugins import Judgement
from fleet.core.scenario import Strict


class BelowMedianSettings(Strict):
    fraction: float = Field(default=0.8, gt=0, le=1)  # a card under this share of its class's median is a candidate


class BelowMedian:
    name = "below-median"
    is_on = True

    def __init__(self, settings: BelowMedianSettings = BelowMedianSettings()):
        self.fraction = settings.fraction

    def judge(self, score_tps: np.ndarray, run_set: np.ndarray, groups: np.ndarray | None = None) -> Judgement:
        fraction = self.fraction
        judged = np.flatnonzero(run_set)
        reason = f"score below {fraction:.0%} of the run set's median score"
        thresholds = np.full(np.asarray(score_tps).shape[0], np.nan)
        if judged.size == 0:
            return Judgement(judged, float("nan"), float("nan"), "empty run set", np.empty(0), thresholds)
        scores = np.asarray(score_tps)[judged]
        kinds = np.zeros(judged.size, dtype=np.int64) if groups is None else np.asarray(groups)[judged]
        one = bool((kinds == kinds[0]).all())
        if one:
            medians = np.full(judged.size, np.median(scores), dtype=np.float64)
        else:
            medians = np.empty(judged.size, dtype=np.float64)
            for g in np.unique(kinds):
                medians[kinds == g] = np.median(scores[kinds == g])
        thresholds[judged] = fraction * medians
        below = scores < fraction * medians
        # Worst first: lowest score against its own class's median (with one class, lowest score).
        order = np.argsort(scores[below], kind="stable") if one else np.argsort(scores[below] / medians[below], kind="stable")
        median = float(medians[0]) if one else float("nan")
        if not one:
            reason = f"score below {fraction:.0%} of its class's median score in the run set"
        cand_medians = medians[below][order]
        why = tuple(f"under the threshold {fraction * m:.0f} tok/s (median {m:.0f})" for m in cand_medians)
        return Judgement(judged[below][order], median, fraction * median, reason, cand_medians, thresholds, why)
