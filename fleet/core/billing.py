"""The bill: warm rent for run-set card-hours, a churn fee per eviction, and nothing for cards outside."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fleet.core.greedy import copy_in_tiles, run_set_usd_by_hour
from fleet.core.ideal import ideal_exact_usd_by_hour

CHURN_FEE_SHARE = 0.15
"""An evicted card bills 15% of a node-month of its class while it drains."""


def warm_usd_by_hour(warm: np.ndarray, rent_usd_per_hour: np.ndarray) -> np.ndarray:
    """Rent billed each hour by the cards warm in it (summed a block of hours at a time: no float copy of the month)."""
    return run_set_usd_by_hour(warm, rent_usd_per_hour)


def churn_fee_usd(rent_usd_per_month: np.ndarray) -> np.ndarray:
    """The churn fee of each evicted card, from its class's monthly rent."""
    return CHURN_FEE_SHARE * np.asarray(rent_usd_per_month, dtype=np.float64)


def delivered_tps(demand_tps: np.ndarray, capacity_tps: np.ndarray) -> np.ndarray:
    """Tokens/s served in each hour: demand, up to the run set's true capacity."""
    return np.minimum(demand_tps, capacity_tps)


def idle_usd_by_hour(warm_usd: np.ndarray, delivered: np.ndarray, capacity_tps: np.ndarray) -> np.ndarray:
    """Warm rent that bought capacity which moved no tokens: warm rent × (1 − delivered / capacity)."""
    used = np.divide(delivered, capacity_tps, out=np.zeros_like(warm_usd), where=capacity_tps > 0)
    return warm_usd * (1.0 - used)


def serving_share(warm: np.ndarray, boot_hours: np.ndarray, warm_before: np.ndarray | None = None) -> np.ndarray:
    """The share of each warm card-hour a card serves: a card added serves only once it has booted, and bills from
    its start, so the k-th hour after it turned warm (k = 0, 1, ...) serves clip(k + 1 − boot, 0, 1) of the hour.
    A card warm in the hour before the stretch (`warm_before`) has been up at least that long."""
    warm = np.asarray(warm, dtype=bool)
    boot = np.asarray(boot_hours, dtype=np.float64)
    share = warm.astype(np.float32)
    limit = int(np.ceil(boot.max())) if boot.size else 0
    if limit == 0:
        return share
    age = np.where(np.zeros(warm.shape[0], bool) if warm_before is None else np.asarray(warm_before, bool), limit, -1)
    for t in range(warm.shape[1]):
        age = np.where(warm[:, t], np.minimum(age + 1, limit), -1)
        young = warm[:, t] & (age < limit)
        if young.any():
            share[young, t] = np.clip(age[young] + 1 - boot[young], 0.0, 1.0)
    return share


_CAPACITY_BLOCK_HOURS = 96
"""Hours of true rates made at once from a drawn month's tickets and dips (`capacity_tps`)."""


def capacity_tps(true_rate_tps, serving: np.ndarray) -> np.ndarray:
    """The run set's true capacity each hour: the sum over cards of true rate × the share of the hour served.

    A drawn month's true rates (`DippedRates`: anything with `hours_major` and `cards_major`) are made a block of hours at a time
    instead of all at once (4 bytes a card-hour). The sums are the same to the last bit: a block of two hours or more
    is summed as a slice of the month's array was (hour by hour, cards in order), and a lone hour sits in a buffer
    two hours wide so that it too is summed over cards with a stride (a contiguous column is summed in another order).
    """
    if not hasattr(true_rate_tps, "hours_major"):
        return np.einsum("ch,ch->h", true_rate_tps, serving, dtype=np.float64)
    n, hours = true_rate_tps.shape
    out = np.empty(hours, dtype=np.float64)
    buffer = np.empty(n * min(hours, _CAPACITY_BLOCK_HOURS) + n, dtype=np.float32)
    for a in range(0, hours, _CAPACITY_BLOCK_HOURS):
        b = min(hours, a + _CAPACITY_BLOCK_HOURS)
        width = b - a
        shape = (n, width) if width > 1 else (n, 2)  # a lone hour is read with a stride, as a slice of a month's
        block = true_rate_tps.cards_major(a, b, buffer[: shape[0] * shape[1]].reshape(shape)[:, :width])
        out[a:b] = np.einsum("ch,ch->h", block, serving[:, a:b], dtype=np.float64)
    return out


_BILL_BLOCK_HOURS = 96
"""Hours of run sets billed at once by `capacity_and_warm_usd`: `run_set_usd_by_hour`'s own blocks, so the rent
products are the same to the last bit."""

_BILL_TILE_CARDS = 1024
"""Cards of an hours-major block of run sets (a replay's) turned cards-major at once: a block that stays in cache
is turned round cheaper than the month's run sets whole (docs/benchmark.md has the figures)."""


def capacity_and_warm_usd(true_rate_tps, warm: np.ndarray, rent_usd_per_hour: np.ndarray, each_block=None
                          ) -> tuple[np.ndarray, np.ndarray]:
    """`capacity_tps(true_rate_tps, warm)` and `warm_usd_by_hour(warm, rent_usd_per_hour)` in one pass over the run
    sets, for a drawn month's rates (`DippedRates`) served whole (no boot).

    The rent product reads each block of run sets cast to float64; the capacity sums the same floats, with the true
    rates of the block made in float64 (the float32 rates cast, exactly), each hour over cards in order as before.
    Casting in einsum was most of the capacity's time: reading the one cast block twice is a third cheaper than
    casting it for each. A lone last hour is billed as the two functions bill it (its own summation order).

    `each_block(a, b, run_b, dips)`, when given, is handed every block of two hours or more as it is billed: its run sets
    cards-major (bool, (cards, b − a)) and the true rates' dip mask over it (None where the rates have no dips), which
    the capacity's rates are then made from (`cards_major`'s numbers): another sum over the same run sets rides on
    this pass (`fleet.core.run_set_sums.BlockSums`).
    """
    rent = np.asarray(rent_usd_per_hour, dtype=np.float64)
    n, hours = warm.shape
    capacity, usd = np.empty(hours), np.empty(hours)
    width = min(hours, _BILL_BLOCK_HOURS)
    run_b, run_f, rate_f = np.empty((n, width), dtype=bool), np.empty((n, width)), np.empty((n, width))
    for a in range(0, hours, _BILL_BLOCK_HOURS):
        b = min(hours, a + _BILL_BLOCK_HOURS)
        if b - a == 1:
            capacity[a:b], usd[a:b] = capacity_tps(true_rate_tps[:, a:b], warm[:, a:b]), warm_usd_by_hour(warm[:, a:b], rent)
            continue
        if b - a < width:
            run_b, run_f, rate_f = np.empty((n, b - a), dtype=bool), np.empty((n, b - a)), np.empty((n, b - a))
        copy_in_tiles(run_b, warm[:, a:b], axis=0, tile_cards=_BILL_TILE_CARDS)  # turned cards-major if hours-major
        dips = true_rate_tps.dip_mask(a, b) if each_block is not None and hasattr(true_rate_tps, "dip_mask") else None
        if each_block is not None:
            each_block(a, b, run_b, dips)  # while the block's run sets are in cache
        np.copyto(run_f, run_b.view(np.uint8))  # the same 0.0 and 1.0; bytes cast faster than bools
        usd[a:b] = rent @ run_f
        if dips is None:
            true_rate_tps.cards_major(a, b, rate_f)
        else:  # as `cards_major` makes them, from the dips unpacked once for both sums
            np.copyto(rate_f, np.asarray(true_rate_tps.ticket_tps)[:, None])
            np.copyto(rate_f, np.asarray(true_rate_tps.dipped_tps)[:, None], where=dips)
        capacity[a:b] = np.einsum("ch,ch->h", rate_f, run_f)
    return capacity, usd


@dataclass(frozen=True)
class HoursBill:
    """A stretch of hours billed: one array entry per hour. Replay bills its month as one stretch, the service a day at a time."""

    warm_usd: np.ndarray
    churn_usd: np.ndarray
    capacity_tps: np.ndarray
    delivered_tps: np.ndarray
    demand_tps: np.ndarray
    idle_usd: np.ndarray
    ideal_usd: np.ndarray
    cards_warm: np.ndarray


def bill_hours(
    run_set: np.ndarray,
    rent_usd_per_hour: np.ndarray,
    rent_usd_per_month: np.ndarray,
    true_rate_tps: np.ndarray,
    demand_tps: np.ndarray,
    evicted: Sequence[np.ndarray],
    ideal_usd: np.ndarray | None = None,
    boot_hours: np.ndarray | None = None,
    warm_before: np.ndarray | None = None,
    each_block=None,
) -> HoursBill:
    """Warm rent, churn fees, capacity, delivered, idle cost and the ideal bill of a stretch of hours.

    `run_set` and `true_rate_tps` are (cards, hours); `evicted[j]` holds the cards
    evicted at hour j. The true rate is the simulation's truth, or hindsight (each
    card's month mean) for a real pool; it is read as given (float32 stays float32,
    so the ideal's greedy buckets it by rate). `ideal_usd` is the stretch's ideal
    bill when the caller has it already (a sweep computes it once per month). `boot_hours` (cards,) is how long a
    card takes to serve once added (`serving_share`); `warm_before` the run set of the hour before the stretch.
    `each_block` rides on the one pass over a drawn month's run sets, when it is taken (`capacity_and_warm_usd`).
    """
    warm = np.asarray(run_set, dtype=bool)
    one_pass = boot_hours is None and hasattr(true_rate_tps, "cards_major") and warm.size > 0
    if not one_pass and warm.ndim == 2 and warm.strides[0] < warm.strides[1]:
        warm = np.ascontiguousarray(warm)  # cards-major, as the capacity's einsum has always summed it (over cards in order)
    rent_h = np.asarray(rent_usd_per_hour, dtype=np.float64)
    demand = np.asarray(demand_tps, dtype=np.float64)
    if one_pass:
        capacity, warm_usd = capacity_and_warm_usd(true_rate_tps, warm, rent_h, each_block)
    else:
        serving = warm if boot_hours is None else serving_share(warm, boot_hours, warm_before)
        capacity = capacity_tps(true_rate_tps, serving) if warm.shape[0] else np.zeros(demand.size)
        warm_usd = warm_usd_by_hour(warm, rent_h)
    delivered = delivered_tps(demand, capacity)
    fees = churn_fee_usd(rent_usd_per_month)
    some = [(j, e) for j, e in enumerate(evicted) if len(e)]
    hour_of = np.repeat(np.array([j for j, _ in some], dtype=np.int64), [len(e) for _, e in some]) if some else np.zeros(0, np.int64)
    cards = np.concatenate([np.asarray(e, dtype=np.int64) for _, e in some]) if some else np.zeros(0, dtype=np.int64)
    churn = np.bincount(hour_of, weights=fees[cards], minlength=len(evicted)).astype(np.float64)
    if ideal_usd is None:
        ideal_usd = ideal_exact_usd_by_hour(true_rate_tps, rent_h, demand)
    return HoursBill(
        warm_usd=warm_usd,
        churn_usd=churn,
        capacity_tps=capacity,
        delivered_tps=delivered,
        demand_tps=demand,
        idle_usd=idle_usd_by_hour(warm_usd, delivered, capacity),
        ideal_usd=np.asarray(ideal_usd, dtype=np.float64),
        cards_warm=warm.sum(axis=0),
    )
