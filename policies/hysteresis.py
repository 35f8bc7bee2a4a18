"""Hysteresis: removal slower than addition, so the run set does not flap.

A card the sizing mode adds is warm at once; a warm card the mode leaves out
stays warm until the mode has left it out for `release_after_hours`
consecutive hours (1, the default, releases it at once: no hysteresis). An
evicted card leaves at once. The state carried from one stretch of hours to
the next is, per card, how many hours the mode has left it out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import Field

from fleet.core.scenario import Strict


class ReleaseAfterSettings(Strict):
    """The hysteresis' one setting, in its table `[policy.hystereses.release-after]`."""

    release_after_hours: int = Field(default=1, ge=1, le=720)


@dataclass(frozen=True)
class ReleaseAfter:
    """Hysteresis of one policy, as the core's `Hysteresis`: release after `release_after_hours` left out."""

    release_after_hours: int = 1

    def hold(self, chosen: np.ndarray, eligible: np.ndarray, out_hours: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        return hold(chosen, eligible, out_hours, self.release_after_hours)


def hold(chosen: np.ndarray, eligible: np.ndarray, out_hours: np.ndarray | None, release_after_hours: int) -> tuple[np.ndarray, np.ndarray]:
    """Warm cards of a stretch, (cards, k), and each card's hours left out at its end.

    `chosen` is the sizing mode's run set per hour; `out_hours` the hours each
    card had been left out before the stretch (None: the month starts, nobody is warm).
    """
    chosen = np.asarray(chosen, dtype=bool)
    n, k = chosen.shape
    r = int(release_after_hours)
    if r == 1 and k > 0:
        # No hysteresis: warm exactly when chosen, without the (cards, k) index arrays below (nor the count before
        # the stretch, which it does not read). A mode that chose no ineligible card (the usual case) hands its run
        # sets on as they are: no copy of the stretch.
        elig = np.asarray(eligible, dtype=bool)
        out = ~elig
        warm = chosen & elig[:, None] if out.any() and chosen[out].any() else chosen
        return warm, (~chosen[:, -1]).astype(np.int64)  # 0 if chosen in the last hour, else 1
    if out_hours is None:
        out_hours = np.full(n, r, dtype=np.int64)
    out_before = np.minimum(np.asarray(out_hours, dtype=np.int64), r)
    if k == 0:
        return chosen.copy(), out_before
    # Hour index of the last time the mode chose each card, running over the stretch (before it: -1 - out_before).
    idx = np.where(chosen, np.arange(k)[None, :], -(1 + r))
    last = np.maximum.accumulate(np.maximum(idx, (-1 - out_before)[:, None]), axis=1)
    warm = ((np.arange(k)[None, :] - last) < r) & np.asarray(eligible, dtype=bool)[:, None]
    return warm, np.minimum((k - 1) - last[:, -1], r)
