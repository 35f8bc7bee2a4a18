"""The whole-card greedy: cards best tokens-per-dollar first, added whole until the target is covered."""

from __future__ import annotations

import numpy as np


def tokens_per_dollar(rate_tps: np.ndarray, rent_usd_per_hour: np.ndarray) -> np.ndarray:
    """Tokens one dollar of rent buys at `rate_tps`: rate × 3600 over the hourly rent."""
    rent = np.asarray(rent_usd_per_hour, dtype=np.float64)
    if rate_tps.ndim == 2 and rent.ndim == 1:
        rent = rent[:, None]
    return np.asarray(rate_tps, dtype=np.float64) * 3600.0 / rent


def greedy_run_set(
    rate_tps: np.ndarray,
    rent_usd_per_hour: np.ndarray,
    target_tps: np.ndarray | float,
    eligible: np.ndarray | None = None,
) -> np.ndarray:
    """Run set per hour from the whole-card greedy.

    `rate_tps` is (cards,) or (cards, hours): the rate the greedy believes (a score,
    or the truth for the ideal operator). Cards are taken best tokens per dollar
    first until their summed rate reaches `target_tps`; if every eligible card
    together falls short, all of them are taken. Returns a bool mask of the same
    shape as `rate_tps`.
    """
    rate = np.asarray(rate_tps, dtype=np.float64)
    squeeze = rate.ndim == 1
    if squeeze:
        rate = rate[:, None]
    n, k = rate.shape
    target = np.broadcast_to(np.asarray(target_tps, dtype=np.float64), (k,))
    rent = np.asarray(rent_usd_per_hour, dtype=np.float64)
    elig = np.ones(n, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    if elig.ndim == 1:
        elig = np.broadcast_to(elig[:, None], (n, k))
    rate = np.where(elig, np.maximum(rate, 0.0), 0.0)
    tpd = np.where(elig, rate * 3600.0 / rent[:, None], -np.inf)
    # Ties on tokens per dollar break by card index, so the same inputs give the same set.
    order = np.argsort(-tpd, axis=0, kind="stable")
    cum = np.cumsum(np.take_along_axis(rate, order, axis=0), axis=0)
    count = (cum < target[None, :] - 1e-9).sum(axis=0) + 1
    count = np.where(target <= 0, 0, np.minimum(count, elig.sum(axis=0)))
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(n)[:, None].repeat(k, axis=1), axis=0)
    chosen = ranks < count[None, :]
    return chosen[:, 0] if squeeze else chosen
