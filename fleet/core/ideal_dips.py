"""The one-rent ideal of a drawn month, from its cards sorted once and the few card-hours in a dip.

At one rent the ideal run set of an hour is the greedy's: cards by rate, best first (ties by card index), until
their float64 running sum reaches demand (`fleet.core.greedy`). A drawn month's true rate is a card's lottery ticket,
or the ticket × the dip factor while it dips (`DippedRates`; under a promise, each card's rate at the promise at
either rate, `DippedLevels`), and few card-hours dip (a few per cent). So the
tickets are sorted once for the month, and each hour's order is that order with its dipped cards moved down to
where their lower rates belong. The sum of any prefix of that order is the prefix sum of the sorted tickets, less
the tickets of the dipped cards inside it, plus the dipped rates inside it: found by binary search per hour over
the sorted tickets, with the dips' own running sums, for every hour at once. Nothing per card-hour but one
comparison (the run set's mask) and the bill's product.

These sums add the same rates in another order than the greedy's running sum, so each hour's crossing is checked
against a bound on that rounding, as the greedy's histogram does; an hour too close to call (or whose crossing
card is itself a dipped one) is sized by the greedy. The run sets, and so the bill, are the greedy's to the bit.
"""

from __future__ import annotations

import numpy as np

from fleet.core.greedy import greedy_run_set, run_set_usd_by_hour

_TARGET_SLACK_TPS = 1e-9
"""The greedy's own: a running sum this close under the target counts as covering it."""

_UNIT_ROUNDOFF = np.finfo(np.float64).eps / 2


def applies(true_rate_tps, rent_usd_per_hour: np.ndarray) -> bool:
    """Whether the shortcut gives the greedy's run sets: a drawn month's rates (tickets and dips, or two levels a card
    read off them, `DippedLevels`), one finite positive rent (so rate orders cards as tokens per dollar does),
    finite tickets, and dips that only lower a card's rate: tickets positive and a dip factor in (0, 1], or levels
    at least zero (a card too slow for a promise is at zero: sorted last, taken only when every card falls short)."""
    if not hasattr(true_rate_tps, "dip_mask"):
        return False
    rent = np.asarray(rent_usd_per_hour, dtype=np.float64)
    ticket = np.asarray(true_rate_tps.ticket_tps)
    f = float(true_rate_tps.dip_factor)
    if np.isnan(f):  # two levels a card
        dipped = np.asarray(true_rate_tps.dipped_tps)
        rates_ok = dipped.shape == ticket.shape and bool((ticket >= 0).all() and (dipped >= 0).all()
                                                          and (dipped <= ticket).all())
    else:
        rates_ok = bool((ticket > 0).all()) and 0.0 < f <= 1.0
    return (
        ticket.size > 0
        and rent.shape == ticket.shape
        and bool((rent == rent[0]).all())
        and 1e-250 < rent[0] < np.inf
        and bool(np.isfinite(ticket).all())
        and rates_ok
    )


def ideal_usd_by_hour(true_rate_tps, rent_usd_per_hour: np.ndarray, demand_tps: np.ndarray, piece_hours: int,
                      block_hours: int) -> np.ndarray | None:
    """The greedy ideal's bill of each hour (`ideal_greedy_usd_by_hour`), where `applies` holds; None when the
    dipped rates do not keep the tickets' order (a rounding tie, in practice never: then the greedy sizes the month).

    Hours go `piece_hours` at a time (a multiple of `block_hours`), each piece's run sets billed by
    `run_set_usd_by_hour` in blocks of `block_hours`, as the greedy's are.
    """
    rates = true_rate_tps
    rent = np.asarray(rent_usd_per_hour, dtype=np.float64)
    ticket = np.asarray(rates.ticket_tps, dtype=rates.dtype)
    n, hours = rates.shape
    demand = np.broadcast_to(np.asarray(demand_tps, dtype=np.float64), (hours,))
    order = np.argsort(-ticket, kind="stable")  # rate best first, ties by card index
    sorted_tps = ticket[order]
    rank = np.empty(n, dtype=np.int32 if n < 2**31 - 2 else np.int64)  # int32: the run set's mask compares half the bytes
    rank[order] = np.arange(n)
    prefix = np.zeros(n + 1)
    np.cumsum(sorted_tps.astype(np.float64), out=prefix[1:])
    dipped_tps = np.asarray(rates.dipped_tps)[order]  # by rank: the rates the month's dipped card-hours hold
    # A dipped card's place among the tickets: how many tickets come before it (higher rate, or equal and a lower index).
    neg = -sorted_tps
    before = np.searchsorted(neg, -dipped_tps, side="left")
    upto = np.searchsorted(neg, -dipped_tps, side="right")
    # A card dipped to zero (too slow for a promise) adds nothing wherever it sits: it goes after every ticket, taken
    # only when every card falls short, as the greedy takes it.
    at_zero = dipped_tps <= 0
    before[at_zero] = upto[at_zero] = n
    for r in np.flatnonzero(upto > before):
        before[r] += int((order[before[r] : upto[r]] < order[r]).sum())
    if (np.diff(before) < 0).any():
        return None  # two dipped rates out of their tickets' order
    total = prefix[-1]  # every rate is at most its ticket: no hour's sum exceeds this
    ranked = rates.rows(order)  # the cards in ticket order, once: each piece's dips then come out by rank
    out = np.empty(hours)
    for a in range(0, hours, piece_hours):
        b = min(hours, a + piece_hours)
        piece = rates[:, a:b]
        chosen, unsure = _piece_run_sets(piece, ranked.dip_mask(a, b), order, rank, before, sorted_tps, dipped_tps, prefix,
                                         demand[a:b], total)
        if unsure.size:
            chosen[:, unsure] = greedy_run_set(piece[:, unsure], rent, demand[a:b][unsure])
        out[a:b] = run_set_usd_by_hour(chosen, rent, block_hours)
    return out


def _piece_run_sets(piece, dips, order, rank, before, sorted_tps, dipped_tps, prefix, demand, total):
    """The run set of each hour of a piece, (cards, hours), and the hours left to the greedy.

    `dips` is the piece's dip mask with cards in ticket order, (cards, hours). Arrays indexed by ticket rank:
    `order` (its card), `before` (a dipped card's place among the tickets), `sorted_tps`, `dipped_tps`, `prefix`
    (running sums of the sorted tickets); `rank` by card.
    """
    n, k = piece.shape
    m = n + 2
    # Each dip as rank × k + hour (numpy's two-dimensional nonzero is slower than flatnonzero), then put
    # hour by hour, in ticket order within the hour: a sort of hour × n + rank (the keys are distinct), on 32 bits
    # where they fit (a third cheaper than a stable sort on the hour and two gathers).
    small = np.int32 if k * m < 2**31 else np.int64
    at_rank, hour = np.divmod(np.flatnonzero(dips).astype(small), small(k))
    flat = hour * small(n) + at_rank
    flat.sort()  # increasing
    hour, at_rank = np.divmod(flat, small(n))
    place = hour * small(m) + before.astype(small)[at_rank]  # non-decreasing: within an hour a dipped card's place follows its rank
    starts = np.searchsorted(flat, (np.arange(k) * n).astype(small))
    # Running sums over the month's dips, hour after hour: the tickets they take out, the dipped rates they put back.
    took_tps = np.zeros(flat.size + 1)
    np.cumsum(sorted_tps[at_rank], dtype=np.float64, out=took_tps[1:])
    put_tps = np.zeros(flat.size + 1)
    np.cumsum(dipped_tps[at_rank], dtype=np.float64, out=put_tps[1:])
    rows = np.arange(k)

    def running_before(p: np.ndarray) -> np.ndarray:
        """Each hour's running sum through the cards before the p-th ticket (its dipped cards placed among them)."""
        took = np.searchsorted(flat, (rows * n + p).astype(small))  # the dips' own integer type: no cast of theirs
        put = np.searchsorted(place, (rows * m + p).astype(small), side="right")
        return prefix[p] - (took_tps[took] - took_tps[starts]) + (put_tps[put] - put_tps[starts])

    # The rounding of these sums against the greedy's running sum: each at most the count of its terms × the unit
    # roundoff × their total, twice over for safety.
    bound = 8.0 * _UNIT_ROUNDOFF * ((n + 1) * total + (flat.size + 1) * (took_tps[-1] + put_tps[-1]))
    need = demand - _TARGET_SLACK_TPS
    # p: the last ticket rank whose running sum before it falls short (-1: none; n: every card falls short).
    lo, hi = np.full(k, -1, dtype=np.int64), np.full(k, n + 1, dtype=np.int64)
    while (open_ := hi - lo > 1).any():
        mid = np.minimum((lo + hi) // 2, n)
        short = running_before(np.maximum(mid, 0)) < need
        lo = np.where(open_ & short, mid, lo)
        hi = np.where(open_ & ~short, mid, hi)
    p = lo
    running = running_before(np.clip(p, 0, n))
    crossing = np.clip(p, 0, n - 1)
    # Sure: every card falls short by more than the rounding, or the p-th ticket's card (not dipped) crosses by more.
    sure = np.where(
        p >= n,
        running < need - bound,
        (p >= 0) & ~dips[crossing, rows] & (running < need - bound) & (running + sorted_tps[crossing] >= need + bound),
    )
    sure &= need > 0
    none = demand <= 0  # the greedy takes no card
    sure |= none
    cut = np.where(none, 0, np.where(p >= n, n + 1, p + 1))  # tickets (and dipped cards placed) before `cut` are taken
    chosen = rank[:, None] < cut.astype(rank.dtype)[None, :]
    chosen.reshape(-1)[order[at_rank] * k + hour] = before[at_rank] < cut[hour]
    return chosen, np.flatnonzero(~sure)
