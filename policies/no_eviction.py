"""No eviction: the rule that never has a candidate."""

from __future__ import annotations

import numpy as np

from fleet.core.plugins import Judgement


class NoEviction:
    name = "none"
    is_on = False

    def judge(self, score_tps: np.ndarray, run_set: np.ndarray, fraction: float, groups: np.ndarray | None = None) -> Judgement:
        return Judgement(np.empty(0, dtype=np.int64), float("nan"), float("nan"), "eviction is off", np.empty(0))
