"""A real pool's truth, in hindsight: the rate the bill, the ideal and the wrong-eviction check read for a card whose
lottery ticket nobody knows.

The rule: each card's truth is the mean of its hourly means over the month's hours it was measured in. An hour
without telemetry is left out, as the scores' windows leave it out (`fleet.core.scores`): nobody measured the card
then, and carrying a rate over the gap would weigh one measured hour as many. A card measured in none of the hours
has a truth of 0, since nothing the month saw of it served. The warm-up's hours are not the month's and are not read.

The billing job (`fleet.service.billing.Hindsight`) applies it to the month so far, from sums it keeps as each
stretch is billed; the replay of a stored month (`fleet.ingest.stored_month`) to the whole month. On the same
telemetry the two read the same truth for the month's last stretch.
"""

from __future__ import annotations

import numpy as np


def hindsight_tps(sum_tps: np.ndarray, measured_hours: np.ndarray) -> np.ndarray:
    """Each card's truth from the sum of its hourly means over the hours it was measured in and how many they were:
    their mean, 0 where there were none."""
    total = np.asarray(sum_tps, dtype=np.float64)
    count = np.asarray(measured_hours, dtype=np.float64)
    return np.divide(total, count, out=np.zeros_like(total), where=count > 0)


def measured_sums(measured_tps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each card's sum of hourly means over the hours it was measured in, how many those were) of a (cards, hours)
    block of hourly means (NaN: not measured)."""
    m = np.asarray(measured_tps, dtype=np.float64)
    seen = np.isfinite(m)
    return np.where(seen, m, 0.0).sum(axis=1), seen.sum(axis=1)


def hindsight_of_hours(measured_tps: np.ndarray) -> np.ndarray:
    """Each card's truth over a (cards, hours) block of the month's hourly means (NaN: not measured)."""
    return hindsight_tps(*measured_sums(measured_tps))
