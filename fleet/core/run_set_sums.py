"""A promise's rate and slots summed over a month's run sets, each hour over the warm cards in order.

The promise reads a run set through its rate and slots at the promise each hour (`fleet.core.latency.month_promise`):
`(rate × warm).sum(axis=0)` to the bit. Summed a block of hours at a time, a tile of cards at a time, so what is summed
stays in cache; either on its own (`run_set_sums`) or riding on the bill's pass over the same run sets
(`BlockSums`, handed each block the bill has turned cards-major, with the dips it unpacked).
"""

from __future__ import annotations

import numpy as np

from fleet.core.billing import _BILL_BLOCK_HOURS
from fleet.core.greedy import copy_in_tiles

_SUM_BLOCK_HOURS = _BILL_BLOCK_HOURS
"""Hours of a run set summed at once by `run_set_sums`: the bill's blocks (`fleet.core.billing`), so the two can share."""

_SUM_TILE_CARDS = 512
"""Cards of a block summed at once (a tile of its run set and rates in cache)."""


def run_set_sums(warm: np.ndarray, rate_tps, slots) -> tuple[np.ndarray, np.ndarray]:
    """The warm cards' summed rate and slots each hour, (hours,) each: `(rate × warm).sum(axis=0)` to the bit (every
    hour over cards in order), from rates as arrays or as two levels a card (`DippedLevels`, made a tile at a time).

    A block of hours at a time, a tile of cards at a time: what is summed stays in cache. Blocks are at least two hours
    wide, summed with the hours along their rows as the month's array is: `numpy.einsum` of a tile and its run set
    adds the products card after card, and a first row of the sums so far (times 1.0) carries them to the next tile.
    Whole-number slots two levels a card (a drawn month's) are summed beside, exactly, in any order: so as matrix
    products, a tile's full slots less what its dipped warm cards lack."""
    warm = np.asarray(warm, dtype=bool)
    if np.dtype(rate_tps.dtype) != np.float64 or np.dtype(slots.dtype) != np.float64:  # summed in their own type
        return tuple((np.asarray(x[:, :warm.shape[1]]) * warm).sum(axis=0) for x in (rate_tps, slots))
    whole = _whole_levels(slots, warm.shape[0])
    rate_h, slots_h = _summed_in_order(warm, rate_tps, slots if whole else None)
    return rate_h, slots_h if whole else _summed_in_order(warm, slots)[0]


def _summed_in_order(warm: np.ndarray, src, whole=None) -> tuple[np.ndarray, np.ndarray | None]:
    """`run_set_sums`' sums of `src` over the warm cards, and of the `whole` slots beside them (None: none)."""
    n, hours = warm.shape
    edges = list(range(0, hours, _SUM_BLOCK_HOURS)) + [hours]
    if len(edges) > 2 and edges[-1] - edges[-2] < 2:
        edges.pop(-2)  # a lone last hour joins the block before it
    sums = _Tiles(src, whole, n, hours, max((b - a for a, b in zip(edges, edges[1:])), default=0))
    run_b = np.empty((n, sums.width), dtype=bool)
    for a, b in zip(edges, edges[1:]):
        if b - a == 1:  # a month of one hour: a column of its own
            for x, into in ((src, sums.out), (whole, sums.out_whole))[: 1 + (whole is not None)]:
                into[a:b] = (np.asarray(x[:, a:b]) * warm[:, a:b]).sum(axis=0)
            continue
        run = run_b[:, : b - a]
        copy_in_tiles(run, warm[:, a:b], axis=0, tile_cards=_SUM_TILE_CARDS)  # cards-major, whatever the layout
        sums.add(a, b, run, None)
    return sums.out, sums.out_whole


class _Tiles:
    """The running sums of a rate (and of whole-number slots beside it) over run sets handed a block at a time."""

    def __init__(self, src, whole, n: int, hours: int, width: int):
        self.src, self.whole = src, whole
        self.out, self.out_whole = np.zeros(hours), None if whole is None else np.zeros(hours)
        self.width, self.tile = width, max(1, min(n, _SUM_TILE_CARDS))
        self.run_d = np.empty((self.tile, width), dtype=bool)
        self.run_f, self.level = np.empty((self.tile + 1, width)), np.empty((self.tile + 1, width))
        self.run_f[0] = 1.0  # the first row carries the sums so far
        self.levels = hasattr(src, "dip_mask")
        if whole is not None:
            self.full = np.asarray(whole.ticket_tps)
            self.lack = self.full - np.asarray(whole.dipped_tps)
            self.own = not (self.levels and src.same_dips(whole))  # levels made from the same dips unpack them once

    def add(self, a: int, b: int, run_b: np.ndarray, dips: np.ndarray | None) -> None:
        """Hours a..b (two or more) of run sets `run_b` (cards-major bool, (cards, b − a)); `dips` the block's dip mask
        when the caller unpacked the very dips the levels read (None: unpacked here)."""
        src, whole, k = self.src, self.whole, b - a
        if self.levels and dips is None:
            dips = src.dip_mask(a, b)  # unpacked once a block (a byte a card-hour)
        dips_whole = None if whole is None else whole.dip_mask(a, b) if self.own else dips
        out, out_whole, n = self.out, self.out_whole, run_b.shape[0]
        for c0 in range(0, n, self.tile):
            c1 = min(n, c0 + self.tile)
            t = c1 - c0
            run, ran, block = run_b[c0:c1], self.run_f[: t + 1, :k], self.level[: t + 1, :k]
            np.copyto(ran[1:], run.view(np.uint8))  # 0.0 and 1.0, the bools as the product casts them
            block[0] = out[a:b]
            if self.levels:  # two levels a card: the level, and in its dips the other
                np.copyto(block[1:], np.asarray(src.ticket_tps)[c0:c1, None])
                np.copyto(block[1:], np.asarray(src.dipped_tps)[c0:c1, None], where=dips[c0:c1])
            else:
                np.copyto(block[1:], np.asarray(src[c0:c1, a:b]))
            np.einsum("ch,ch->h", block, ran, out=out[a:b])
            if whole is not None:
                out_whole[a:b] += self.full[c0:c1] @ ran[1:]  # less what dipped warm cards lack
                np.logical_and(dips_whole[c0:c1], run, out=self.run_d[:t, :k])
                np.copyto(block[1:], self.run_d[:t, :k].view(np.uint8))
                out_whole[a:b] -= self.lack[c0:c1] @ block[1:]


class BlockSums:
    """`run_set_sums` of a promise's rate and slots at it (two levels a card each, from a drawn month's dips), fed the
    blocks of run sets another pass over them has turned cards-major (the bill's, `capacity_and_warm_usd`), with the
    dips it unpacked from `dips_from` (its rates): the same sums, without turning the run sets round again, nor
    unpacking the dips again where they are the levels' own. `add` takes each block; `sums` is None
    unless every hour came (a lone last hour, or a pass that did not hand its blocks over: then `run_set_sums`)."""

    def __init__(self, rate_tps, slots, n: int, hours: int, dips_from=None):
        self._tiles = _Tiles(rate_tps, slots, n, hours, min(hours, _SUM_BLOCK_HOURS))
        self._shared = dips_from is not None and rate_tps.same_dips(dips_from)  # the other pass's dips are these
        self._hours = hours
        self._got = 0

    @staticmethod
    def applies(rate_tps, slots, n: int, hours: int) -> bool:
        """Whether the sums can ride on another pass: float64 levels from dips, whole slots, blocks of two hours."""
        return (hasattr(rate_tps, "dip_mask") and np.dtype(rate_tps.dtype) == np.float64
                and np.dtype(slots.dtype) == np.float64 and _whole_levels(slots, n) and hours >= 2
                and hours % _SUM_BLOCK_HOURS != 1)

    def add(self, a: int, b: int, run_b: np.ndarray, dips: np.ndarray | None) -> None:
        """Hours a..b of the run sets, cards-major; `dips` the block's dips as `dips_from` unpacked them (None: none)."""
        self._tiles.add(a, b, run_b, dips if self._shared else None)
        self._got += b - a

    @property
    def sums(self) -> tuple[np.ndarray, np.ndarray] | None:
        return (self._tiles.out, self._tiles.out_whole) if self._got == self._hours else None


def _whole_levels(slots, n: int) -> bool:
    """Whether `slots` are two levels a card (`DippedLevels`) of whole numbers from 0 whose sum over `n` cards stays
    below 2^52 in float64: then every partial sum is exact, in any order."""
    if not hasattr(slots, "dip_mask") or not hasattr(slots, "dipped_tps"):
        return False
    levels = np.concatenate([np.asarray(slots.ticket_tps), np.asarray(slots.dipped_tps)])
    return bool(((levels >= 0) & (levels == np.floor(levels))).all() and levels.max(initial=0.0) * max(n, 1) < 2.0**52)
