"""Below-median rule: evict run-set cards scoring under `fraction` of the run set's median score, worst first."""

from __future__ import annotations

import numpy as np

from fleet.core.plugins import Judgement


class BelowMedian:
    name = "below-median"
    is_on = True

    def judge(self, score_tps: np.ndarray, run_set: np.ndarray, fraction: float) -> Judgement:
        judged = np.flatnonzero(run_set)
        if judged.size == 0:
            return Judgement(judged, float("nan"), float("nan"), "empty run set")
        scores = score_tps[judged]
        median = float(np.median(scores))
        threshold = fraction * median
        below = scores < threshold
        order = np.argsort(scores[below], kind="stable")
        return Judgement(
            judged[below][order],
            median,
            threshold,
            f"score below {fraction:.0%} of the run set's median score",
        )
