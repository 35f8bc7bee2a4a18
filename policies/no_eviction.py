"""No eviction: the rule that never has a candidate."""

from __future__ import annotations

import numpy as np

from pydantic import ConfigDict

from fleet.core.plugins import Judgement
from fleet.core.scenario import Strict


class NoEvictionSettings(Strict):
    """No rule, so nothing to set: another rule's settings written beside `rule = "none"` the old way (moved to this
    table) change nothing."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class NoEviction:
    name = "none"
    is_on = False

    def judge(self, score_tps: np.ndarray, run_set: np.ndarray, groups: np.ndarray | None = None) -> Judgement:
        return Judgement(np.empty(0, dtype=np.int64), float("nan"), float("nan"), "eviction is off", np.empty(0))
