"""The ideal operator: each hour, perfect knowledge of true rates, the cheapest whole-card set covering demand, no churn."""

from __future__ import annotations

import numpy as np

from fleet.sizing import greedy_run_set


def ideal_greedy_usd_by_hour(
    true_rate_tps: np.ndarray, rent_usd_per_hour: np.ndarray, demand_tps: np.ndarray, block_hours: int = 96
) -> np.ndarray:
    """The ideal bill of each hour by the greedy on true tokens per dollar over every card on the market.

    With one class this is the exact minimum (fewest cards, best first); with
    several it can overshoot by part of a card, which the exact ideal removes.
    The bill is summed `block_hours` at a time, bounding the float copy of the
    run set that the rent product makes.
    """
    hours = true_rate_tps.shape[1]
    out = np.empty(hours, dtype=np.float64)
    rent = rent_usd_per_hour.astype(np.float64)
    chosen = greedy_run_set(true_rate_tps, rent, demand_tps)
    # Cards-major blocks, reused: the product reads the bool block cast to float, as it
    # always has. Transposing the bool block first is several times faster than casting
    # across the transpose.
    width = min(hours, block_hours)
    block = np.empty((rent.size, width), dtype=bool)
    block_f = np.empty((rent.size, width), dtype=np.float64)
    for a in range(0, hours, block_hours):
        b = min(hours, a + block_hours)
        if b - a < width:
            block, block_f = block[:, : b - a].copy(), block_f[:, : b - a].copy()
        np.copyto(block, chosen[:, a:b])
        np.copyto(block_f, block)
        out[a:b] = rent @ block_f
    return out


def ideal_exact_usd_by_hour(
    true_rate_tps: np.ndarray,
    rent_usd_per_hour: np.ndarray,
    demand_tps: np.ndarray,
    card_class: np.ndarray | None = None,
    max_combinations: int = 200_000,
) -> np.ndarray:
    """The exact ideal bill of each hour: the cheapest whole-card set covering demand.

    Cards of one class share a rent, so the cheapest set holding k cards of a
    class holds that class's k fastest cards this hour. The problem shrinks to
    choosing a count per class: every count of the other classes is tried and
    the first class's count follows from a search on its sorted rates. With one
    class this is the greedy (fewest fastest cards).
    """
    if card_class is None:
        keys = np.unique(rent_usd_per_hour, return_inverse=True)[1]
    else:
        keys = np.unique(card_class, return_inverse=True)[1]
    classes = np.unique(keys)
    if classes.size == 1:
        return ideal_greedy_usd_by_hour(true_rate_tps, rent_usd_per_hour, demand_tps)
    hours = true_rate_tps.shape[1]
    rents = np.array([rent_usd_per_hour[keys == k][0] for k in classes], dtype=np.float64)
    # cum[k] is (cards_k + 1, hours): best-first cumulative rate of class k.
    cum = []
    for k in classes:
        r = -np.sort(-true_rate_tps[keys == k].astype(np.float64), axis=0)
        cum.append(np.vstack([np.zeros((1, hours)), np.cumsum(r, axis=0)]))
    # Search the class with the most cards; enumerate counts of the others.
    first = int(np.argmax([c.shape[0] for c in cum]))
    others = [i for i in range(classes.size) if i != first]
    sizes = [cum[i].shape[0] for i in others]
    if int(np.prod(sizes)) > max_combinations:
        raise ValueError(f"exact ideal: {int(np.prod(sizes))} count combinations exceed {max_combinations}")
    best = np.full(hours, np.inf)
    demand = np.asarray(demand_tps, dtype=np.float64)
    cf = cum[first]
    all_first = cf[-1]
    for counts in np.ndindex(*sizes):
        covered = np.zeros(hours)
        cost = 0.0
        for i, c in zip(others, counts):
            covered += cum[i][c]
            cost += c * rents[i]
        need = demand - covered
        # Fewest cards of the first class whose best-first sum reaches `need`.
        k_first = (cf < need[None, :] - 1e-9).sum(axis=0)
        feasible = need <= all_first + 1e-9
        total = cost + k_first * rents[first]
        best = np.where(feasible & (total < best), total, best)
    # An hour no set can cover takes every card.
    return np.where(np.isfinite(best), best, rent_usd_per_hour.sum())
