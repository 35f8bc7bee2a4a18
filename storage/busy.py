"""Tokens per busy second of hourly rollups, one rule for every reader (the service's scores, a stored month)."""

from __future__ import annotations

import numpy as np

BUSY_FRACTION_FLOOR = 0.05
"""The least busy fraction an hour's tokens are divided by: a card busy 1% of an hour (a few requests, their share
measured coarsely) scores at most 20x its mean tok/s, never as a giant."""


def busy_rate_tps(busy_sum: np.ndarray, busy_n: np.ndarray, busy_tps_sum: np.ndarray, floor: float = BUSY_FRACTION_FLOOR) -> np.ndarray:
    """The tok/s of the samples carrying a busy fraction over their summed busy fraction, taken at least
    `floor` x their count; NaN for an hour never busy or without busy data (the reader falls back to the mean)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = busy_tps_sum / np.maximum(busy_sum, floor * busy_n)
    return np.where(busy_sum > 0, rate, np.nan)


MEASURED_TPS_SQL = (
    "CASE WHEN r.busy_fraction_sum > 0 THEN r.busy_tokens_per_s_sum / (CASE WHEN r.busy_fraction_sum > {floor} * "
    "r.busy_count THEN r.busy_fraction_sum ELSE {floor} * r.busy_count END) "
    "ELSE r.tokens_per_s_sum / NULLIF(r.sample_count, 0) END"
)
"""A rollup `r`'s measured rate in SQL, the same operations as `busy_rate_tps` (else the mean) in the same order, so
the same doubles (a test holds the two to the bit on both backends): an hour read as one value a card instead of
five spares the driver four fifths of its row building. `{floor}` is the bound busy floor's placeholder;
no telemetry (count 0) is NULL, read as NaN."""


def measured_tps(rollups) -> np.ndarray:
    """Each hourly rollup's measured rate: tokens per busy second where its samples carry a busy fraction, else the
    mean tok/s (a frame from `hourly_rollups`)."""
    return np.where(rollups["busy_tps"].notna(), rollups["busy_tps"], rollups["mean_tps"]).astype(np.float64)
