"""The headroom a recommendation runs at: from each searched month's least passing headroom, the one that passes
the capacity check in `--min-pass` of months drawn like them, with a stated confidence."""

from __future__ import annotations

from typing import Callable

import numpy as np

HEADROOM_SEARCH = (1.0, 1.5, 0.0025)
"""The headroom a recommendation searches, lowest to highest, and its step: for each combination of the other
axes, the smallest headroom whose months pass the capacity check in `--min-pass` of them."""

REACTIVE_HEADROOM_SEARCH = (0.5, 1.5, 0.0025)
"""With the reactive loop the plan may size under the demand it forecasts (the loop covers what it leaves within
the hour, often for less): its headroom is searched from 0.5."""


def headroom_search(scenario) -> tuple:
    """The headroom range a recommendation searches for this pool's plan."""
    return REACTIVE_HEADROOM_SEARCH if scenario.policy.reactive is not None else HEADROOM_SEARCH


def least_passing_step(passes: Callable[[int], bool], top: int, start: int = 0) -> int | None:
    """The least step in 0..top that passes (None: none does), for a test that, once it passes, passes at every
    step above: gallop from `start`, down while it passes and up while it fails, then halve the bracket. Wherever it
    starts, it finds the same step; a good start (another month's answer) takes fewer tests."""
    if passes(start):
        above, d = start, 1
        while True:  # gallop down to a step that fails
            if above == 0:
                return 0
            k = max(0, above - d)
            if not passes(k):
                below = k
                break
            above, d = k, d * 2
    else:
        if start >= top:
            return None
        below, d = start, 1
        while True:  # gallop up to a step that passes
            k = min(top, start + d)
            if passes(k):
                above = k
                break
            if k >= top:
                return None
            below, d = k, d * 2
    while above - below > 1:
        mid = (above + below) // 2
        if passes(mid):
            above = mid
        else:
            below = mid
    return above


SEARCH_CONFIDENCE = 0.8
"""The recommendation's headroom must pass capacity in `--min-pass` of months it has not seen, not only of the months
it was searched on: it is the order statistic of the months' least passing headrooms that bounds the `min_pass`
quantile from above with this confidence (for 200 months at 95%: the 194th, 97% of them)."""


def passing_headroom(month_headrooms: np.ndarray, min_pass_rate: float, confidence: float = 0.0) -> float | None:
    """The smallest headroom at which at least `min_pass_rate` of the months pass capacity (None: none within the search).

    With `confidence` > 0, the headroom that passes `min_pass_rate` of months drawn like these with that confidence:
    the k-th smallest month, k the least with P(Binomial(n, min_pass_rate) < k) >= confidence (at most n).
    """
    h = np.sort(np.asarray(month_headrooms, dtype=np.float64))
    need = max(1, int(np.ceil(min_pass_rate * h.size - 1e-9)))
    if confidence > 0:
        from scipy.stats import binom

        ks = np.arange(need, h.size + 1)
        ok = binom.cdf(ks - 1, h.size, min_pass_rate) >= confidence
        need = int(ks[np.argmax(ok)]) if ok.any() else h.size
    return float(h[need - 1]) if np.isfinite(h[need - 1]) else None
