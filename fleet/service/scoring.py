"""The score job: for every hour whose telemetry has settled, each card's windowed score, into the store.

Scores are the core's `windowed_scores` over the hourly means of the store's
rollups, and, when the policy's score estimator is not a plain window mean
(`dip-aware`), the estimator's own score over the same means: stored under
window key `POLICY_SCORE_KEY`, with the cards it scored as in a dip under
`IN_DIP_KEY`, so `fleet status` and `explain` read what the sizing read. Settled hours do not change, so the means of the longest window's
hours are kept between runs (`HourlyMeans`, a ring that moves on an hour by
writing one row) and a run that follows on reads only the hours after them:
usually one hour of the pool. The scores last
written are kept as well (`ScoredHours`), so the decide job that follows reads
them from memory instead of back from the store.

Where the telemetry carries the serving stack's batch and time per output token,
each pass also fits every card's curve through its last hour (`fleet.service.curves`)
and, under a promise on stream speed, hands on each card's rate at the promise
(`promise_rate_tps`) beside its windowed scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from fleet.core.units import NO_END_TS
from fleet.core.greedy import tokens_per_dollar
from fleet.core.scores import windowed_scores
from fleet.core.serving import StepCurve
from fleet.service.calendar import HOUR_S
from fleet.service.curves import CardCurves, read_card_curves
from fleet.service.frame import Frame, Lead
from fleet.service.pool import PoolIndex
from storage.busy import BUSY_FRACTION_FLOOR
from storage.values import ScoreColumn, ScoreKey

if TYPE_CHECKING:
    from fleet.core.latency import Slo
    from storage.interfaces import JournalStore

POLICY_SCORE_KEY, IN_DIP_KEY = ScoreKey.POLICY, ScoreKey.IN_DIP  # the `scores` rows' keys that are not windows

MAX_HOURS_PER_PASS = 168
"""Hours scored in one pass of a catch-up (a week): bounds the matrix a pass reads."""


class HourlyMeans:
    """The mean measured rate of every card (columns of `buf`, rows of `index`) in each of the last settled hours
    read, [since_ts, until_ts), at most `hours` of them; NaN: no telemetry.

    A ring written twice, an hour a row: hour h sits at row h mod `hours` and again `hours` rows on, so any `hours`
    consecutive hours are one block `buf[s:s + hours]`, oldest first, and its transpose is the (cards, hours)
    matrix, no copy. Moving on an hour writes that hour's row twice instead of copying the matrix (135 MB at
    100,000 cards and a week's hours). Hour-major, the matrix reads as fast as a copy of it: the window scores read
    it an hour at a time.
    """

    def __init__(self, index: PoolIndex, hours: int):
        self.index, self.hours = index, hours
        self.buf = np.full((2 * hours, len(index)), np.nan)
        self.since_ts: int | None = None  # nothing held yet
        self.until_ts: int | None = None

    def row(self, ts):
        """The first of an hour's two rows (hour ts, or an array of them)."""
        return (ts // HOUR_S) % self.hours

    def holds_start_of(self, index: PoolIndex, since_ts: int, until_ts: int) -> bool:
        """Whether the hours from `since_ts` up to what is held are held, in this pool, and none after `until_ts`."""
        return (self.index is index and self.since_ts is not None and self.since_ts <= since_ts <= self.until_ts <= until_ts
                and (since_ts - self.since_ts) % HOUR_S == 0)

    def view(self, since_ts: int, until_ts: int) -> np.ndarray:
        """(cards, hours) of [since_ts, until_ts), at most `hours` of them: a view of the ring, no copy."""
        s = self.row(since_ts)
        return self.buf[s:s + (until_ts - since_ts) // HOUR_S].T

    def clear(self, since_ts: int, until_ts: int) -> None:
        """No telemetry yet in the hours of [since_ts, until_ts) (at most `hours`), both rows of each."""
        rows = self.row(np.arange(since_ts, until_ts, HOUR_S, dtype=np.int64))
        if rows.size:
            self.buf[rows] = np.nan
            self.buf[rows + self.hours] = np.nan

    def put(self, pos: np.ndarray, hour_ts: np.ndarray, tps: np.ndarray) -> None:
        """Each (card, hour) its measured rate, in both of the hour's rows."""
        rows = self.row(hour_ts)
        self.buf[rows, pos] = tps
        self.buf[rows + self.hours, pos] = tps

    def hold(self, tps: np.ndarray, since_ts: int) -> None:
        """Hold `hours` consecutive hours from `since_ts` (a (cards, hours) matrix), in place of all held before."""
        n, s = self.hours, self.row(since_ts)
        self.buf[s:s + n] = tps.T
        self.buf[:s] = tps[:, n - s:].T
        self.buf[n + s:] = tps[:, :n - s].T
        self.since_ts, self.until_ts = since_ts, since_ts + n * HOUR_S


@dataclass(frozen=True)
class Promise:
    """What the score job fits each card's curve for: the promise (`[slo]`, None: none) and each class's curve
    (`[classes.serving]`), whose beta a card keeps when its batch did not move."""

    slo: Slo | None = None
    classes: Mapping[str, StepCurve] = field(default_factory=dict)


@dataclass(frozen=True)
class ScoredHours:
    """The scores last written, by hour ts and window hours, as the store reads them back (no score reads 0)."""

    index: PoolIndex
    hours: Mapping[int, Mapping[int, np.ndarray]]
    allowance: Mapping[int, float]  # hour ts -> the share of capacity held for dips to come


class ScoreJob:
    """Score every settled hour through each window; the last window's scores mark an hour scored.

    `writes` false (`fleet plan`): the scores a pass works out are kept in memory for the decide job that follows,
    never written, and the store is only read."""

    def __init__(self, journal_store: JournalStore, frame: Frame, windows: Mapping[str, int], watermark_ts: Callable[[float], int],
                 lead: Lead = Lead(), busy_floor: float = BUSY_FRACTION_FLOOR, writes: bool = True, promise: Promise = Promise()):
        if not windows:
            raise ValueError("the score job needs at least one window")
        parts = frame.parts
        self.parts = parts  # the policy, resolved: its estimator scores beside the window means unless it is one
        self.estimates = parts is not None and not parts.score.is_window_mean
        self.store = journal_store
        self.pool = frame.pool
        self.calendar = frame.calendar
        self.clock = frame.clock
        self.windows = dict(windows)  # window name -> hours, in the order they are written
        self.watermark_ts = watermark_ts
        self.stopping = lead.stopping
        self.busy_floor = busy_floor  # the least busy fraction an hour's tokens are divided by
        self.writes = writes
        self._marker_hours = list(self.windows.values())[-1]
        self._longest_hours = max(self.windows.values())
        if self.estimates:
            self._longest_hours = max(self._longest_hours, parts.score.history_hours(parts.size_window_hours))
        self._scored_empty_ts: int | None = None  # a later hour this process scored with no telemetry in its windows
        self._means: HourlyMeans | None = None
        self._scored: ScoredHours | None = None
        self.promise = promise
        self.card_curves: CardCurves | None = None  # each card's curve fitted at the last hour scored (`curves`)

    def scored_through_ts(self) -> int | None:
        """The last hour scored: the store's, or a later one this process scored with no telemetry in its windows."""
        last = self.store.last_scored_ts(self._marker_hours, self.calendar.start_ts, NO_END_TS)
        if self._scored_empty_ts is not None and (last is None or self._scored_empty_ts > last):
            return self._scored_empty_ts
        return last

    def run(self) -> int:
        """Score every hour whose telemetry has settled; returns the hours scored.

        An hour with no telemetry in any card's window has no scores: its sizing
        sees no capacity and keeps every eligible card warm (with no data, the safe
        side is capacity), and its eviction pass judges nobody below the median.
        """
        cal = self.calendar
        done = 0
        while not self.stopping():
            now = self.clock.now()
            nxt = cal.next_hour(self.scored_through_ts(), now)
            upto = min(self.watermark_ts(now), int(now), cal.month_end_ts(cal.month_of(nxt)[0]) - HOUR_S, cal.last_hour_ts)
            if nxt > upto:
                break
            k = min((upto - nxt) // HOUR_S + 1, MAX_HOURS_PER_PASS)
            self.score_hours(nxt, k)
            self._scored_empty_ts = nxt + (k - 1) * HOUR_S
            done += k
        return done

    def score_hours(self, first_ts: int, k: int) -> None:
        """Score k hours from `first_ts` through every window and write them in one transaction."""
        index = self.pool.current()
        maxw = self._longest_hours
        mat = self.hourly_means(first_ts - maxw * HOUR_S, first_ts + (k - 1) * HOUR_S, index)
        keys, rent = index.keys, index.rent_usd_per_hour
        batch = []
        scored: dict[int, dict[int, np.ndarray]] = {}
        by_window = {w: windowed_scores(mat, maxw, k, w) for w in self.windows.values()}
        allowance: dict[int, float] = {}
        if self.estimates:
            got = self._estimate(mat, maxw, k, index)
            by_window = {POLICY_SCORE_KEY: got.score_tps, IN_DIP_KEY: got.in_dip.astype(np.float32), **by_window}
            allowance = {first_ts + j * HOUR_S: float(a) for j, a in enumerate(got.allowance if got.allowance is not None else [])}
        for j in range(k):
            ts = first_ts + j * HOUR_S
            for w in by_window:  # the last window last: its presence marks the hour scored
                score = by_window[w][:, j]
                tpd = tokens_per_dollar(score.astype(np.float64), rent)
                have = np.flatnonzero(np.isfinite(score) & ((score > 0) if w == IN_DIP_KEY else True))
                batch.append((ts, w, ScoreColumn(keys, index.card_ids, have, score, tpd)))
                scored.setdefault(ts, {})[w] = np.where(np.isfinite(score), score, np.float32(0))
        if self.writes:
            self.store.record_scores(batch)
        self._scored = ScoredHours(index, scored, allowance)
        self.card_curves = read_card_curves(self.pool.repo, index, first_ts + (k - 1) * HOUR_S, self.promise.classes,
                                            self.promise.slo) or self.card_curves

    def promise_rate_tps(self, hour_ts: int, index: PoolIndex) -> np.ndarray | None:
        """Each card's rate at the promise from its own fitted curve for `hour_ts` (NaN: no curve), or None when the
        pool has no promise on stream speed, its telemetry no batch and time per output token, or the hour was not
        the last scored in this pool: the card's score at the promise, beside its windowed score."""
        c = self.curves_at(hour_ts, index)
        return None if c is None else c.rate_at_promise_tps

    def curves_at(self, hour_ts: int, index: PoolIndex) -> CardCurves | None:
        """The cards' curves fitted for `hour_ts` in this pool (None: the hour was not the last scored in it)."""
        c = self.card_curves
        return None if c is None or c.index is not index or c.until_ts != hour_ts else c

    def _estimate(self, mat: np.ndarray, history_hours: int, k: int, index: PoolIndex):
        """The policy's estimator over the run classes' cards (others score zero), as the replay scores a month."""
        from fleet.core.replay import MonthScores, estimate_scores

        score, in_dip, allowance = estimate_scores(mat, np.flatnonzero(index.run_class_mask(self.parts.policy)), history_hours, k,
                                                   self.parts)
        return MonthScores(score, score, np.zeros(score.shape, dtype=bool) if in_dip is None else in_dip, allowance)

    def policy_scores(self, hour_ts: int, index: PoolIndex) -> tuple[np.ndarray, np.ndarray, float] | None:
        """(score, in dip, allowance) the policy's estimator gives the hour, kept from the last pass or worked out
        again from the store's rollups (the same numbers); None when the policy's score is a plain window mean."""
        if not self.estimates:
            return None
        s = self._scored
        if s is not None and s.index is index and hour_ts in s.allowance:
            kept = s.hours[hour_ts]
            return kept[POLICY_SCORE_KEY], kept[IN_DIP_KEY] > 0, s.allowance[hour_ts]
        maxw = self._longest_hours
        mat = self.hourly_means(hour_ts - maxw * HOUR_S, hour_ts, index)
        got = self._estimate(mat, maxw, 1, index)
        score = np.where(np.isfinite(got.score_tps[:, 0]), got.score_tps[:, 0], np.float32(0))
        return score, got.in_dip[:, 0], float(got.allowance[0]) if got.allowance is not None else 0.0

    def kept(self, hour_ts: int, index: PoolIndex) -> Mapping[int, np.ndarray]:
        """Window hours -> the scores last written for `hour_ts` in this pool (empty: read them from the store)."""
        s = self._scored
        if s is None or s.index is not index:
            return {}
        return s.hours.get(hour_ts, {})

    def window_scores_at(self, hour_ts: int, index: PoolIndex, window_hours: int, in_class: np.ndarray) -> np.ndarray:
        """Every card's score through a window at `hour_ts` (zero: none, or not of the run classes): kept from the last
        pass, or read back from the store."""
        kept = self.kept(hour_ts, index)
        if window_hours in kept:
            return np.where(in_class, kept[window_hours], np.float32(0))
        arr = np.zeros(len(index), dtype=np.float32)
        pos = index.pos
        for k, v in self.store.scores_at(hour_ts, window_hours).items():
            if k in pos:
                arr[pos[k]] = v
        return np.where(in_class, arr, np.float32(0))

    def hourly_means(self, since_ts: int, until_ts: int, index: PoolIndex) -> np.ndarray:
        """(cards, hours) mean measured rate of every hour in [since_ts, until_ts); NaN where a card has no telemetry.
        Read only, and only until the next call: it is usually a view of the means kept between runs.

        The hours are settled (before the watermark), so the matrix is kept between
        runs: the longest window's hours of the last call, in the pool they were
        read for. A call that follows on reads only the hours after them, usually
        one hour of the pool; a gap, a step back or a changed pool reads all again.
        """
        cols = (until_ts - since_ts) // HOUR_S
        ring = self._means
        if ring is None or ring.index is not index:
            self._means = ring = None  # the old pool's means let go before the new pool's are made
            ring = self._means = HourlyMeans(index, self._longest_hours)
        read_from = ring.until_ts if ring.holds_start_of(index, since_ts, until_ts) else since_ts
        if cols > ring.hours:  # a pass of several hours: a matrix of its own, its last hours kept
            mat = np.full((len(index), cols), np.nan)
            if read_from > since_ts:
                mat[:, :(read_from - since_ts) // HOUR_S] = ring.view(since_ts, read_from)
            pos, hour_ts, mean_tps = self._rollups(read_from, until_ts, index)
            mat[pos, (hour_ts - since_ts) // HOUR_S] = mean_tps
            ring.hold(mat[:, cols - ring.hours:], until_ts - ring.hours * HOUR_S)
        else:
            ring.since_ts = ring.until_ts = None  # held again below, once written
            ring.clear(read_from, until_ts)
            ring.put(*self._rollups(read_from, until_ts, index))
            ring.since_ts, ring.until_ts = since_ts, until_ts
            mat = ring.view(since_ts, until_ts)
        mat.flags.writeable = False
        return mat

    def _rollups(self, since_ts: int, until_ts: int, index: PoolIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(card row, hour ts, mean rate) of the store's rollups in [since_ts, until_ts), of the cards in the pool."""
        if since_ts >= until_ts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
        card_id, hour_ts, mean_tps = self.pool.repo.rollup_means(since_ts, until_ts, self.busy_floor)
        pos = index.positions_of_ids(card_id)
        ok = pos >= 0
        return pos[ok], hour_ts[ok], mean_tps[ok]
