"""The whole-card greedy: cards best tokens-per-dollar first, added whole until the target is covered.

The greedy's definition is a sort: order the cards by tokens per dollar (ties by
card index), sum their rates in that order, stop at the first card whose running
sum reaches the target. Sorting every card every hour is what made a large pool
slow, so each hour is solved by selection instead: a histogram of tokens per
dollar, weighted by rate, finds the bucket where the running sum crosses the
target, and only that bucket's few cards are sorted. The histogram sums the
rates in another order than the sort would, so each hour's crossing is checked
against a bound on that rounding; an hour too close to call (in practice none)
is solved by the full sort. The run set is therefore exactly the sorted greedy's.

When the eligible cards share one rent and the rates are float32 (scores and
true rates are), tokens per dollar orders cards exactly as their rate does
(a float32 rate × `HOUR_S` over one rent never collides with another's). Then
each hour's rates are sorted by value alone (a vectorised sort, cheaper than
the histogram's binning): cards of equal rate add the same number, so their
order changes no running sum, and the run set is every card above the crossing
card's rate and, of the cards at it, the lowest indices. A large pool sorts only a
window of ranks around the hour before's crossing, selected from the rest. Elsewhere
the histogram buckets the key, and tokens per dollar is computed only for the few cards it sorts.
"""

from __future__ import annotations

import numpy as np

from fleet.core.units import HOUR_S

HOUR_S_F = float(HOUR_S)  # the rate × seconds product in float, as the tokens-per-dollar figures were always made

_TARGET_SLACK_TPS = 1e-9
"""A running sum this close under the target counts as covering it."""

_BLOCK_CELLS = 1 << 20
"""Card-hours solved at once: keeps the float64 temporaries (8 MiB each) in cache."""

_SLAB_CELLS = 1 << 22
"""Card-hours of rates turned hours-major at once (16 MiB of float32)."""

_TILE_CARDS = 128
"""Cards copied at once across a transpose (`copy_in_tiles`)."""

_UNIT_ROUNDOFF = np.finfo(np.float64).eps / 2

_CHUNK_CARDS = 64
"""Sorted rates summed this many at a time (`_greedy_by_sorted_rates`): the running sum of one chunk an hour."""

_PARTITION_CARDS = 10_000
"""Pools of at least this many cards (at one rent, on float32 rates) find each hour's crossing by a selection around
the hour before's (`_greedy_by_partition`); below it the vectorised sort of every hour at once is cheaper, and the
two cost about the same at this size."""

_WINDOW_CARDS = 192
"""The fewest cards on either side of an hour's guessed crossing that are sorted (`_greedy_by_partition`)."""

_SORT_CARDS = 48
_SORT_CELLS = 4096
"""Pools of at most `_SORT_CARDS` cards, or blocks of at most `_SORT_CELLS` card-hours, are solved by the sort itself
(the definition): there the histogram's fixed cost is more than the sort it saves."""


def tokens_per_dollar(rate_tps: np.ndarray, rent_usd_per_hour: np.ndarray) -> np.ndarray:
    """Tokens one dollar of rent buys at `rate_tps`: rate × `HOUR_S` over the hourly rent."""
    rent = np.asarray(rent_usd_per_hour, dtype=np.float64)
    if rate_tps.ndim == 2 and rent.ndim == 1:
        rent = rent[:, None]
    return np.asarray(rate_tps, dtype=np.float64) * HOUR_S_F / rent


def _slab(rate, made: bool, by_rate: bool, s0: int, s1: int) -> np.ndarray:
    """Hours [s0, s1) of `rate` hours-major, negative rates clipped to 0: float32 for the sort by rate, else float64."""
    n = rate.shape[0]
    if made:
        slab = rate.hours_major(s0, s1, np.empty((s1 - s0, n), dtype=rate.dtype))
        slab = slab if by_rate else slab.astype(np.float64, copy=False)
        np.maximum(slab, 0.0, out=slab)
    else:
        src = rate[:, s0:s1].T
        if by_rate and src.dtype == np.float32 and src.strides[1] == src.itemsize and src.size and np.min(src) >= 0:
            return src  # hours-major already (scores) with nothing to clip (a rate that is not a number is copied)
        slab = np.empty((s1 - s0, n), dtype=np.float32 if by_rate else np.float64)
        if src.dtype == slab.dtype and src.strides[1] == src.itemsize:  # hours-major already (scores): clipped on the way
            np.maximum(src, 0.0, out=slab)
        else:
            copy_in_tiles(slab, src, axis=1)
            np.maximum(slab, 0.0, out=slab)
    return slab


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
    shape as `rate_tps`, laid out hours-major (each hour's cards contiguous).
    """
    made = hasattr(rate_tps, "hours_major")  # a drawn month's true rates, made a slab at a time (`DippedRates`)
    rate = rate_tps if made else np.asarray(rate_tps)
    squeeze = rate.ndim == 1
    if squeeze:
        rate = rate[:, None]
    n, k = rate.shape
    target = np.broadcast_to(np.asarray(target_tps, dtype=np.float64), (k,))
    rent = np.asarray(rent_usd_per_hour, dtype=np.float64)
    elig = np.ones(n, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    all_eligible = bool(elig.all())
    # Cards left out of every hour alike: set apart by index in the histogram, not masked card-hour by card-hour.
    one_elig = elig.ndim == 1 and not all_eligible
    left_out = np.flatnonzero(~elig) if one_elig else None
    elig_rents = rent[elig.any(axis=1) if elig.ndim == 2 else elig]
    # One finite, positive rent (not so small that a float32 rate's tokens per dollar overflows).
    one_rent = elig_rents.size == 0 or (bool((elig_rents == elig_rents[0]).all()) and 1e-250 < elig_rents[0] < np.inf)
    by_rate = rate.dtype == np.float32 and one_rent
    sorted_rates = by_rate and (all_eligible or one_elig) and n > _SORT_CARDS
    chosen = np.empty((k, n), dtype=bool)  # hours-major, returned as its (cards, hours) transpose
    guess = {} if sorted_rates and n >= _PARTITION_CARDS else None  # the last hour's crossing, for the next hour's
    step = max(1, _BLOCK_CELLS // max(n, 1))
    # Rates are turned hours-major a slab at a time: reading a few hours from each card's
    # row is slow when the rows are long, so a slab spans many blocks.
    slab_hours = max(step, _SLAB_CELLS // max(n, 1))
    for s0 in range(0, k, slab_hours):
        s1 = min(k, s0 + slab_hours)
        slab = _slab(rate, made, by_rate, s0, s1)
        for a in range(s0, min(k, s0 + slab_hours), step):
            b = min(k, a + step, s0 + slab_hours)
            rate_hc = slab[a - s0 : b - s0]
            elig_hc = np.broadcast_to(elig[None, :] if elig.ndim == 1 else elig[:, a:b].T, rate_hc.shape)
            if by_rate:
                key_hc = rate_hc
            else:
                key_hc = rate_hc * HOUR_S_F
                key_hc /= rent[None, :]
            if not all_eligible and not one_elig:
                key_hc = np.where(elig_hc, key_hc, -np.inf)
            if n <= _SORT_CARDS or n * (b - a) <= _SORT_CELLS:
                # A small pool or a short stretch: the sort itself is cheaper than the histogram's fixed cost.
                rate_s = np.where(elig_hc, rate_hc.astype(np.float64), 0.0)
                tpd_s = np.where(elig_hc, rate_s * HOUR_S_F / rent[None, :], -np.inf)
                chosen[a:b] = _greedy_by_sort(rate_s, tpd_s, target[a:b], elig_hc)
                continue
            if sorted_rates:
                # Sorted rates first; an hour they cannot call goes to the histogram, and one it cannot to the sort.
                if guess is not None:
                    block, unsure = _greedy_by_partition(rate_hc, target[a:b], left_out, chosen[a:b], guess)
                else:
                    block, unsure = _greedy_by_sorted_rates(rate_hc, target[a:b], left_out, chosen[a:b])
                if unsure.size:
                    again, still = _greedy_by_selection(rate_hc[unsure], key_hc[unsure], rent, target[a:b][unsure], elig_hc[unsure],
                                                        all_eligible, left_out)
                    block[unsure] = again
                    unsure = unsure[still]
            else:
                block, unsure = _greedy_by_selection(rate_hc, key_hc, rent, target[a:b], elig_hc, all_eligible, left_out)
            if unsure.size:
                rate_u = np.where(elig_hc[unsure], rate_hc[unsure].astype(np.float64), 0.0)
                tpd_u = np.where(elig_hc[unsure], rate_u * HOUR_S_F / rent[None, :], -np.inf)
                block[unsure] = _greedy_by_sort(rate_u, tpd_u, target[a:b][unsure], elig_hc[unsure])
            if block.base is not chosen:  # the sorted rates' run sets are written in place
                chosen[a:b] = block
    return chosen[0] if squeeze else chosen.T


def _greedy_by_sorted_rates(rate_hc: np.ndarray, target: np.ndarray, left_out: np.ndarray | None,
                            out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The run sets of `_greedy_by_sort` at one rent on float32 rates (rate orders cards as tokens per dollar does),
    written into `out`, and the hours it could not call.

    Each hour's eligible rates are sorted best first (a vectorised sort of the values alone: cards of equal rate
    add the same number, so the order of a tie changes no sum). Their running sum is found a chunk of
    `_CHUNK_CARDS` at a time (chunk sums, then one running sum inside the crossing chunk), checked against the
    rounding bound as the histogram's is. The run set is then every card above the crossing card's rate, and of the
    cards at that rate, the lowest indices the count still takes. Per card-hour: a sort and one comparison, where
    the histogram bins and weighs every card.
    """
    k, n = rate_hc.shape
    need = target - _TARGET_SLACK_TPS
    n_elig = n - (0 if left_out is None else left_out.size)
    if n_elig == 0:
        return out, np.arange(k)
    width = -(-n_elig // _CHUNK_CARDS) * _CHUNK_CARDS  # whole chunks of eligible cards
    keys = np.empty((k, max(n, width)), dtype=rate_hc.dtype)
    np.negative(rate_hc, out=keys[:, :n])  # ascending = best first
    keys[:, n:] = np.inf  # after every card
    if left_out is not None:
        keys[:, left_out] = np.inf  # after every eligible card
    keys.sort(axis=1)
    unknown = np.isnan(keys[:, -1])  # a rate that is not a number sorts last: such an hour is left to the histogram
    keys[:, n_elig:] = 0.0  # ineligible cards (and the last chunk's padding) add nothing
    # Negated sums: rounding is symmetric, so the negative of a sum of negated rates is the sum of the rates.
    chunk = keys[:, :width].reshape(k, width // _CHUNK_CARDS, _CHUNK_CARDS)
    through = -np.cumsum(np.einsum("hqc->hq", chunk, dtype=np.float64), axis=1)  # through each chunk
    total = through[:, -1]
    q = (through < need[:, None]).sum(axis=1)  # chunks wholly short of the target
    nq = through.shape[1]
    rk = np.arange(k)
    base = np.where(q > 0, through[rk, np.clip(q - 1, 0, nq - 1)], 0.0)
    inside = np.zeros((k, _CHUNK_CARDS + 1))
    inside[:, 0] = base
    inside[:, 1:] = -chunk[rk, np.clip(q, 0, nq - 1)]
    np.cumsum(inside, axis=1, out=inside)  # [:, j]: through the crossing chunk's j-th card
    j = (inside < need[:, None]).sum(axis=1)  # the crossing card is the chunk's j-th (1-based)
    count = q * _CHUNK_CARDS + j  # cards taken
    before = inside[rk, np.clip(j - 1, 0, _CHUNK_CARDS)]
    after = inside[rk, np.clip(j, 0, _CHUNK_CARDS)]
    bound = 4.0 * (n + 1) * _UNIT_ROUNDOFF * np.abs(total)
    short = q >= nq  # every eligible card together falls short
    sure = np.where(short, total < need - bound,
                    (j >= 1) & (j <= _CHUNK_CARDS) & (count <= n_elig) & (before < need - bound) & (after >= need + bound))
    sure &= np.isfinite(total) & ~unknown & (need > 0)
    count = np.where(short, n_elig, np.clip(count, 1, n_elig))
    line = keys[rk, count - 1]  # the last card taken: its rate, negated
    np.greater_equal(rate_hc, -line[:, None], out=out)
    if left_out is not None:
        out[:, left_out] = False
    # The next card in the sorted order at the line's rate (a tie): of the cards at that rate, those with the
    # highest indices are not taken.
    for h in np.flatnonzero(sure & (count < n_elig) & (keys[rk, np.minimum(count, n_elig - 1)] == line)):
        tied = np.flatnonzero(out[h] & (rate_hc[h] == -line[h]))
        out[h, tied[tied.size - (np.count_nonzero(out[h]) - count[h]):]] = False
    none = target <= 0
    out[none] = False
    sure |= none
    return out, np.flatnonzero(~sure)


def _greedy_by_partition(rate_hc: np.ndarray, target: np.ndarray, left_out: np.ndarray | None, out: np.ndarray,
                         guess: dict) -> tuple[np.ndarray, np.ndarray]:
    """`_greedy_by_sorted_rates`' run sets, each hour's crossing found among a few hundred cards around the last hour's.

    An hour crosses its target near the rank the hour before crossed at, moved by the change of target over the
    crossing rate (`guess` carries them from hour to hour). So each hour's rates are partitioned (a selection, several
    times cheaper than a sort) into the cards above a window of ranks around that guess, the window, and the rest, and
    only the window is sorted. Its running sum from the sum of the cards above (in another order than the greedy's, so
    checked against the same rounding bound) gives the crossing card, and the run set is every card at or above its
    rate, trimmed of the highest-index ties as there. An hour whose crossing falls outside its window, or too close to
    call, goes to the sorted rates (and widens the next window).
    """
    k, n = rate_hc.shape
    need = target - _TARGET_SLACK_TPS
    n_elig = n - (0 if left_out is None else left_out.size)
    # Non-negative float32 rates order as their bit patterns do as int32, which select faster (-0.0, a negative int,
    # sorts below every other rate: with no more than zero to add, never at a crossing). A card left out counts as a
    # zero rate, multiplied out (one left out whose rate is not finite makes the hour's total not, and the hour is the
    # sorted rates').
    if left_out is None:
        vals = rate_hc.copy()
    else:
        elig = np.ones(n, dtype=bool)
        elig[left_out] = False
        vals = np.multiply(rate_hc, elig.astype(np.float32))
    keys = vals.view(np.int32)
    # Each hour's total to within a ten-thousandth, far wider than a float32 sum's rounding (not a number if a rate is
    # not): enough to tell a pool that falls short, and to bound the rounding (an overestimate of the total is safe).
    total = vals.sum(axis=1).astype(np.float64)
    bound = 4.0 * (n + 1) * _UNIT_ROUNDOFF * np.abs(total) * 1.001
    # Python floats: an hour's few comparisons are then not numpy scalars' (their overhead counts at 10,000 cards).
    with np.errstate(invalid="ignore"):  # a total without bound is called by the sorted rates
        low, high = total - bound - np.abs(total) * 1e-4, total + bound + np.abs(total) * 1e-4
    hours = zip(target.tolist(), need.tolist(), low.tolist(), high.tolist(), bound.tolist())
    line = np.zeros(k, dtype=np.float32)  # the crossing card's rate: the cards at or above it are taken
    count = [n_elig] * k
    called = {}  # hours the sorted rates sized (hour: its run set), and those they could not call (None)
    for h, (tgt, nd, low, high, bd) in enumerate(hours):
        if tgt <= 0:
            count[h] = 0  # the greedy takes no card
            continue
        c = -1  # not a number, or too close to call here
        if high < nd and nd > 0:
            c = n_elig  # every eligible card together falls short: all taken (line 0)
        elif low >= nd and nd > 0:
            c, line[h] = _crossing(keys[h], nd, bd, guess)
        if c < 0:  # not called here: the sorted rates' run set, and the crossing it gives for the next hour's guess
            row = np.empty((1, n), dtype=bool)
            _, left = _greedy_by_sorted_rates(rate_hc[h : h + 1], target[h : h + 1], left_out, row)
            called[h] = None if left.size else row[0]
            if left.size:
                continue
            c = int(np.count_nonzero(row))
            _guessed(guess, c, float(rate_hc[h][row[0]].min()) if c else 0.0, nd, n)
        else:
            _guessed(guess, c, float(line[h]), nd, n)
        count[h] = c
    np.greater_equal(rate_hc, line[:, None], out=out)
    if left_out is not None:
        np.logical_and(out, elig, out=out)
    for h in range(k):
        if h in called:
            if called[h] is not None:
                out[h] = called[h]
            continue
        excess = np.count_nonzero(out[h]) - count[h]
        if count[h] == 0:
            out[h] = False
        elif excess > 0:  # cards tied at the line's rate: of those, the highest indices are not taken
            tied = np.flatnonzero(out[h] & (rate_hc[h] == line[h]))
            out[h, tied[tied.size - excess :]] = False
    return out, np.array([h for h, row in called.items() if row is None], dtype=np.intp)


def _crossing(keys: np.ndarray, need: float, bound: float, guess: dict) -> tuple[int, float]:
    """The greedy's count of cards and the crossing card's rate for one hour, from `keys` (the rates' int32 bit
    patterns, reordered in place); (-1, 0) when the crossing is not within the guessed window by more than `bound`."""
    n = keys.size
    if "count" not in guess:
        return -1, 0.0
    line_tps = guess["line"]
    est = guess["count"] + ((need - guess["need"]) / line_tps if line_tps > 0 else 0.0)
    est = int(min(max(est, 0.0), float(n)))
    lo, hi = max(0, est - guess["margin"]), min(n, est + guess["margin"])
    guess["est"] = est
    if hi <= lo:
        return -1, 0.0
    if hi < n:
        keys.partition(n - hi)  # the top `hi` rates last
    top = keys[n - hi :]
    if lo > 0:
        top.partition(hi - lo)  # of those, the top `lo` last
    ranks = top[: hi - lo]
    ranks.sort()  # in place (the keys are this hour's scratch); methods, not numpy's wrappers: this runs every hour
    window = ranks.view(np.float32)[::-1]  # ranks lo + 1 .. hi, best first
    base = float(top[hi - lo :].view(np.float32).sum(dtype=np.float64)) if lo > 0 else 0.0
    running = window.cumsum(dtype=np.float64)
    running += base  # [j]: through rank lo + j + 1
    j = int(running.searchsorted(need))  # the first to reach the target
    before = float(running[j - 1]) if j > 0 else base
    if j < running.size and before < need - bound and running[j] >= need + bound:
        return lo + j + 1, float(window[j])
    return -1, 0.0


def _guessed(guess: dict, count: int, line_tps: float, need: float, n: int) -> None:
    """The crossing of an hour called, for the next hour's window: it and its margin, wider after a miss."""
    missed = abs(count - guess.get("est", count))
    guess.update(count=count, line=line_tps, need=need, margin=max(_WINDOW_CARDS, n >> 9, 4 * missed))
    guess.pop("est", None)


def _greedy_by_sort(rate_hc: np.ndarray, tpd_hc: np.ndarray, target: np.ndarray, elig_hc: np.ndarray) -> np.ndarray:
    """The greedy by its definition: a stable sort of each hour's cards by tokens per dollar, best first."""
    k, n = rate_hc.shape
    order = np.argsort(-tpd_hc, axis=1, kind="stable")
    cum = np.cumsum(np.take_along_axis(rate_hc, order, axis=1), axis=1)
    count = (cum < target[:, None] - _TARGET_SLACK_TPS).sum(axis=1) + 1
    count = np.where(target <= 0, 0, np.minimum(count, elig_hc.sum(axis=1)))
    chosen = np.zeros((k, n), dtype=bool)
    rows, ranks = np.nonzero(np.arange(n)[None, :] < count[:, None])
    chosen[rows, order[rows, ranks]] = True
    return chosen


def _buckets(key_hc: np.ndarray, elig_hc: np.ndarray, n_bins: int, all_eligible: bool,
             left_out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each card-hour's bucket (hour h's buckets start at `offset[h]`), each hour's offset, and whether its keys
    are finite (an hour that is not is for the sort)."""
    k = key_hc.shape[0]
    # Bucket 0 holds the best cards. The bucket is monotone in the key, so every card
    # of a bucket comes before every card of a later one in the sorted order, and
    # equal keys share a bucket (their tie stays the card index). The scale puts the
    # worst card the keys span in bucket n_bins − 2 at most; ineligible cards go to n_bins.
    hi = key_hc.max(axis=1, keepdims=True)
    masked = not all_eligible and left_out is None
    lo = (np.where(elig_hc, key_hc, np.inf) if masked else key_hc).min(axis=1, keepdims=True)
    finite = np.isfinite(hi[:, 0]) & np.isfinite(lo[:, 0])
    offset = (np.arange(k, dtype=np.intp) * (n_bins + 1))[:, None]
    with np.errstate(all="ignore"):
        scale = np.where(finite[:, None] & (hi > lo), (n_bins - 3) / (hi - lo), 0.0).astype(key_hc.dtype)
        # A spread of keys too small to invert (subnormal) puts every card in bucket 0, to be sorted there.
        np.copyto(scale, 0, where=~np.isfinite(scale))
        # offset + 0.5 + (hi − key) × scale, each step monotone in the key: from offset + 0.5 at the best card to
        # about offset + n_bins − 2.5 at the worst, so the rounding (a few units in the last place of the offset,
        # far under the half bucket) never takes a card into another hour's buckets; truncated to the bucket.
        spread = np.subtract(np.where(finite[:, None], hi, 0).astype(key_hc.dtype), key_hc)
        spread *= scale
        spread += (offset + 0.5).astype(key_hc.dtype)
        bucket = spread.astype(np.intp)  # bincount's own index type: no conversion there
    del spread
    if left_out is not None:
        bucket[:, left_out] = offset + n_bins
    elif not all_eligible:
        np.copyto(bucket, offset + n_bins, where=~elig_hc)
    bucket[~finite] = offset[~finite] + n_bins
    return bucket, offset, finite


def _greedy_by_selection(
    rate_hc: np.ndarray,
    key_hc: np.ndarray,
    rent: np.ndarray,
    target: np.ndarray,
    elig_hc: np.ndarray,
    all_eligible: bool = False,
    left_out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The run sets of `_greedy_by_sort`, each hour's crossing found with a rate-weighted histogram.

    `key_hc` orders cards as tokens per dollar does (higher is better; -inf for an
    ineligible card, unless `left_out` lists the cards ineligible in every hour: then their
    keys are anything). Returns the run sets and the hours it could not call.
    """
    k, n = rate_hc.shape
    if n == 0:
        return np.zeros((k, n), dtype=bool), np.empty(0, dtype=np.intp)
    need = target - _TARGET_SLACK_TPS
    n_bins = int(np.clip(n // 8, 16, 8192))
    bucket, offset, finite = _buckets(key_hc, elig_hc, n_bins, all_eligible, left_out)
    # Float64 weights: bincount converts float32 weights far more slowly than astype does.
    rate_by_bucket = np.bincount(bucket.ravel(), weights=rate_hc.astype(np.float64, copy=False).ravel(), minlength=k * (n_bins + 1))
    running = np.cumsum(rate_by_bucket.reshape(k, n_bins + 1)[:, :n_bins], axis=1)
    # The crossing bucket: the first whose running sum reaches the target.
    cross = (running < need[:, None]).sum(axis=1)
    short = cross >= n_bins  # even every eligible card together falls short
    total = running[:, -1]
    base = np.where(cross > 0, running[np.arange(k), np.clip(cross - 1, 0, n_bins - 1)], 0.0)
    # Any two summation orders of these rates differ by at most this.
    bound = 4.0 * (n + 1) * _UNIT_ROUNDOFF * np.abs(total)

    chosen = bucket < (np.minimum(cross, n_bins) + offset[:, 0])[:, None]
    # The crossing bucket's cards in the sorted order (tokens per dollar, then card), and their running sums.
    rows, cards = np.divmod(np.flatnonzero(bucket == (np.where(short, -1, cross) + offset[:, 0])[:, None]), n)
    rate_in = rate_hc[rows, cards].astype(np.float64)
    order = np.lexsort((cards, -(rate_in * HOUR_S_F / rent[cards]), rows))
    rows, cards, rate_in = rows[order], cards[order], rate_in[order]
    per_row = np.bincount(rows, minlength=k)
    pos = np.arange(rows.size) - (np.cumsum(per_row) - per_row)[rows]
    width = int(per_row.max()) if rows.size else 0
    padded = np.zeros((k, width + 1))
    padded[rows, pos + 1] = rate_in
    running_in = base[:, None] + np.cumsum(padded, axis=1)  # [:, q]: through the bucket's q-th card
    # The crossing card is the bucket's `taken`-th: the first whose running sum reaches the target.
    taken = (running_in < need[:, None]).sum(axis=1)
    chosen[rows, cards] = pos < taken[rows]
    rk = np.arange(k)
    before = running_in[rk, np.clip(taken - 1, 0, width)]
    after = running_in[rk, np.clip(taken, 0, width)]
    sure = np.where(
        short,
        total < need - bound,
        (taken >= 1) & (taken <= per_row) & (before < need - bound) & (after >= need + bound),
    )
    # Hours the histogram cannot call: a rate or rent that is not a finite number, no eligible
    # card, or a target within the slack of zero. A target of zero or less takes nothing.
    sure &= finite & (need > 0)
    sure |= target <= 0
    chosen[target <= 0] = False
    return chosen, np.flatnonzero(~sure)


def run_set_usd_by_hour(run_set: np.ndarray, rent_usd_per_hour: np.ndarray, block_hours: int = 96) -> np.ndarray:
    """Rent billed each hour by a (cards, hours) run set: rent @ run set, `block_hours` at a time.

    The product reads the run set cast to float64, as it always has (the same sums to the last bit), but one block
    of hours at a time, so the float copy is a few hours of cards, not the month's (8 bytes a card-hour). A
    cards-major block, reused: copying the bool block first and casting it after is cheaper than
    casting across the transpose (a block already contiguous, as the ideal's pieces are, is cast as it is).
    """
    chosen = np.asarray(run_set, dtype=bool)
    rent = np.asarray(rent_usd_per_hour, dtype=np.float64)
    hours = chosen.shape[1]
    out = np.empty(hours, dtype=np.float64)
    width = min(hours, block_hours)
    block = np.empty((rent.size, width), dtype=bool)
    block_f = np.empty((rent.size, width), dtype=np.float64)
    for a in range(0, hours, block_hours):
        b = min(hours, a + block_hours)
        if b - a < width:
            block, block_f = np.empty((rent.size, b - a), dtype=bool), np.empty((rent.size, b - a), dtype=np.float64)
        src = chosen[:, a:b]
        if not src.flags.c_contiguous:
            copy_in_tiles(block, src, axis=0)
            src = block
        np.copyto(block_f, src.view(np.uint8))  # the same 0.0 and 1.0; bytes cast faster than bools
        out[a:b] = rent @ block_f
    return out


def copy_in_tiles(out: np.ndarray, src: np.ndarray, axis: int, tile_cards: int = _TILE_CARDS) -> None:
    """`out[...] = src` (cast to `out`'s type), `tile_cards` cards at a time along `axis` (the cards' axis).

    A copy across a transpose (a cards-major month read hours-major, or back) touches a cache line of the source
    for every element when done whole; a tile of cards reads each line once for all the hours it holds. The values
    are copied, not computed.
    """
    if out.ndim != 2 or abs(src.strides[1]) <= abs(src.strides[0]) or out.shape[axis] <= tile_cards or out.dtype != src.dtype:
        np.copyto(out, src)  # laid out as `out` is (rows contiguous), small, or cast on the way (tiles do not help): one copy
        return
    for a in range(0, out.shape[axis], tile_cards):
        tile = (slice(a, a + tile_cards), slice(None)) if axis == 0 else (slice(None), slice(a, a + tile_cards))
        np.copyto(out[tile], src[tile])
