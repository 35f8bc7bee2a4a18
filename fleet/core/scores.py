"""Window scores: each card's mean measured rate over the trailing hours of a window.

Replay scores a drawn or stored month in one pass; the service scores the hours
its store holds, where an hour may have no telemetry. Both are here, and with
every hour present they are the same numbers.
"""

from __future__ import annotations

import numpy as np

from fleet.core.errors import ConfigError


def window_scores(measured_tps: np.ndarray, warmup_hours: int, hours: int, window_hours: int) -> np.ndarray:
    """Each card's score at each month hour: the mean measured rate over the `window_hours` before it."""
    return window_scores_many(measured_tps, warmup_hours, hours, (window_hours,))[0]


_SCORE_BLOCK_CELLS = 1 << 20
"""Card-hours of running sum held at once (8 MiB of float64)."""

_SCORE_BAND_HOURS = 32
"""Hours of a block's running sum made, then read for the scores, at once (a quarter of a MiB: they stay in cache
between, where a whole block's sum is read back from memory)."""

_SCORE_TILE_CARDS = 256
"""Cards of a block turned hours-major at once (a cache line of each card's telemetry read once for all its hours)."""


def window_scores_many(measured_tps: np.ndarray, warmup_hours: int, hours: int, windows: tuple[int, ...],
                       at_hours: np.ndarray | None = None, each_at: tuple[np.ndarray | None, ...] | None = None,
                       finite_only: bool = False) -> list[np.ndarray] | None:
    """`window_scores` for several windows from one running sum of the telemetry.

    Each score is (running sum at the hour − running sum a window earlier) / window,
    the running sum taken in float64 hour by hour from the first hour of history.
    The sum is built across a block of cards at a time, one hour per step, which is
    the same sequence of additions as a cumulative sum along each card's row but
    vectorises over cards; a band of hours at a time, each band's scores taken while its sums are in cache.
    Returns (cards, hours) float32 arrays laid out hours-major,
    so one hour's scores of every card are contiguous; with `at_hours`, (cards, len(at_hours))
    of those month hours only (the same numbers). `each_at` gives each window hours of its own
    (None: every hour): a replay's sizing window every hour and its eviction window at decision
    hours alone, from the one running sum the two share. With `finite_only`, None as soon as a card's telemetry
    holds a value that is not finite: its running sum is then not finite at the end (a sum through a NaN or an
    infinity never is again, and float64 sums of float32 telemetry cannot overflow), so no separate pass checks.
    """
    for w in windows:
        if w > warmup_hours:
            raise ConfigError(f"window of {w} hours is longer than the {warmup_hours} hours of warm-up history")
    n, total = measured_tps.shape
    if each_at is None:
        each_at = (at_hours,) * len(windows)
    ats = [np.arange(hours) if at is None else np.asarray(at, dtype=np.int64) for at in each_at]
    scores = [np.empty((at.size, n), dtype=np.float32) for at in ats]
    block = max(1, min(n, _SCORE_BLOCK_CELLS // max(total, 1)))
    band = _SCORE_BAND_HOURS
    running = np.empty((total + 1, block), dtype=np.float64)
    diff = np.empty((band, block), dtype=np.float64)
    for a in range(0, n, block):
        b = min(n, a + block)
        r = running[:, : b - a]
        r[0] = 0.0
        src = measured_tps[a:b].T
        for c in range(0, b - a, _SCORE_TILE_CARDS):
            r[1:, c : c + _SCORE_TILE_CARDS] = src[:, c : c + _SCORE_TILE_CARDS]
        rows = list(r)
        for h0 in range(0, total, band):
            h1 = min(total, h0 + band)
            for h in range(h0 + 1, h1 + 1):
                np.add(rows[h], rows[h - 1], out=rows[h])
            t0, t1 = max(0, h0 + 1 - warmup_hours), min(hours, h1 + 1 - warmup_hours)  # the month hours ending here
            for w, given, out in zip(windows, each_at, scores):
                if given is None and t1 > t0:
                    d = diff[: t1 - t0, : b - a]
                    np.subtract(r[warmup_hours + t0 : warmup_hours + t1], r[warmup_hours - w + t0 : warmup_hours - w + t1], out=d)
                    if w == 1:
                        np.copyto(out[t0:t1, a:b], d)  # over one hour the sum itself (x / 1 is x)
                    else:
                        np.divide(d, w, out=out[t0:t1, a:b])
        if finite_only and not np.isfinite(rows[total]).all():
            return None
        for w, at, given, out in zip(windows, ats, each_at, scores):
            if given is not None:
                out[:, a:b] = (r[warmup_hours + at] - r[warmup_hours - w + at]) / w
    return [s.T for s in scores]


def windowed_scores(hourly_tps: np.ndarray, history_hours: int, hours: int, window_hours: int,
                    at_hours: np.ndarray | None = None) -> np.ndarray:
    """Scores at `hours` consecutive hours from a (cards, history_hours + hours - 1) matrix of hourly means.

    With every hour present this is `window_scores` itself; hours with no telemetry
    (NaN) are left out of their window's mean, and a card with none in its window
    has no score (NaN). `at_hours`: those hours only.
    """
    full = hourly_tps
    if not np.isnan(hourly_tps).any():
        return window_scores_many(full, history_hours, hours, (window_hours,), at_hours)[0].astype(np.float32)
    have = np.isfinite(full)
    vals = np.where(have, full, 0.0)
    cs = np.zeros((vals.shape[0], vals.shape[1] + 1))
    np.cumsum(vals, axis=1, out=cs[:, 1:])
    cn = np.zeros_like(cs)
    np.cumsum(have, axis=1, out=cn[:, 1:])
    end = history_hours + (np.arange(hours) if at_hours is None else np.asarray(at_hours, dtype=np.int64))
    s = cs[:, end] - cs[:, end - window_hours]
    c = cn[:, end] - cn[:, end - window_hours]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(c > 0, s / np.maximum(c, 1), np.nan).astype(np.float32)


def window_mean(hourly_tps: np.ndarray, history_hours: int, hours: int, window_hours: int,
                at_hours: np.ndarray | None = None) -> np.ndarray:
    """The plain mean of the window before each hour (an hour without telemetry, NaN, left out of the mean);
    with `at_hours`, before those hours only."""
    if not np.isnan(hourly_tps).any():
        return window_scores_many(hourly_tps, history_hours, hours, (window_hours,), at_hours)[0]
    return windowed_scores(hourly_tps, history_hours, hours, window_hours, at_hours)


class AtHours:
    """A (cards, hours) score kept at some hours only, read one hour at a time: `score[:, h]`.

    The eviction rule reads its window's mean at decision hours alone (30 of a month's 720 at a daily
    cadence): keeping those hours, not the month, spares 4 bytes a card-hour. Another hour is computed
    when read (`of_hours(hours)` gives (cards, len(hours)), the same numbers); `score_tps` is `of_hours(hours)`
    when the caller has it already."""

    def __init__(self, hours: np.ndarray, of_hours, score_tps: np.ndarray | None = None):
        self.hours = np.asarray(hours, dtype=np.int64)
        self._of_hours = of_hours
        self.score_tps = of_hours(self.hours) if score_tps is None else score_tps  # (cards, len(hours))
        self._column = {int(h): i for i, h in enumerate(self.hours)}

    def __getitem__(self, key):
        rows, hour = key
        if int(hour) in self._column:
            return self.score_tps[rows, self._column[int(hour)]]
        return self._of_hours(np.array([int(hour)]))[rows, 0]


def unscored_as_zero(score_tps: np.ndarray) -> np.ndarray:
    """A card with no telemetry in its window has no score (NaN); sizing and eviction read it as zero: no capacity
    counted on it. The one rule for an unscored card, in replay and in the service."""
    score_tps = np.asarray(score_tps)
    if not np.isnan(score_tps).any():
        return score_tps
    return np.where(np.isnan(score_tps), score_tps.dtype.type(0), score_tps)


def of_rows(measured_tps: np.ndarray, rows: np.ndarray, hours: int | tuple[int, ...], fn) -> list[np.ndarray]:
    """`fn` over the cards in `rows` only, each (cards, hours) array it returns widened to every card (others zero).

    Classes are drawn one after another, so a run set's classes are usually a run of
    rows: slice it, don't copy it. A result that is None stays None. `hours` may give each result's own.
    """
    n = measured_tps.shape[0]
    contiguous = rows.size > 0 and int(rows[-1]) - int(rows[0]) + 1 == rows.size
    sel = slice(int(rows[0]), int(rows[-1]) + 1) if contiguous else rows
    got = fn(measured_tps[sel])
    if rows.size == n:
        return list(got)
    out = []
    for j, s in enumerate(got):
        if s is None:
            out.append(None)
            continue
        full = np.zeros((hours if isinstance(hours, int) else hours[j], n), dtype=s.dtype).T
        full[sel] = s
        out.append(full)
    return out
