"""Score estimators: what the autoscaler believes a card serves, from its telemetry alone.

- `mean`: the mean measured rate over the window's hours before the hour. An hour
  is noisy (±25% in the presets), a day less, a week least; but a window mean only
  sees a dip as the dip fills the window, and keeps seeing it after it ends.
- `dip-aware`: a level that the dips inside a long window do not move (the median
  of its daily means), and a test of the last 1..`recent_hours` hours against that
  level in the card's own noise (estimated from the card's own hour-to-hour
  changes, `sigmas` of it). A card whose recent hours fall significantly below its
  level is scored on its recent level, and flagged as in a dip; otherwise it is
  scored on its level. A card whose last hour is back within one sigma of its
  level is out of its dip at once, though its longer recent means still hold dip
  hours (on heavy dips that is worth 0.35 points of convergence). The pool's measured dips (how often one starts, counting
  flags that last two hours or more, and how deep) come out beside the scores,
  for the capacity held for dips to come.

Both read hourly means that may have gaps (NaN: no telemetry that hour); an hour
without telemetry is left out of every mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pydantic import Field

from fleet.core.plugins import Scored
from fleet.core.scenario import Strict
from fleet.core.scores import window_scores_many, windowed_scores

_BLOCK_CELLS = 1 << 20
"""Card-hours of the month scored at once by the dip-aware estimator (bounds its temporaries)."""


@dataclass(frozen=True)
class WindowMean:
    name: str = "mean"
    is_window_mean = True  # its score is the plain mean of the window

    def describe(self, window: str) -> str:
        return f"{window} window"

    def history_hours(self, window_hours: int) -> int:
        return window_hours

    def score(self, hourly_tps: np.ndarray, history_hours: int, hours: int, window_hours: int,
              other_windows: tuple[int, ...] = ()) -> Scored:
        windows = (window_hours, *other_windows)
        if not np.isnan(hourly_tps).any():
            got = window_scores_many(hourly_tps, history_hours, hours, windows)
        else:
            got = [windowed_scores(hourly_tps, history_hours, hours, w) for w in windows]
        return Scored(score_tps=got[0], window_tps=tuple(got[1:]))


def _median_of_days(a: np.ndarray) -> np.ndarray:
    """The median along the first axis; days with no telemetry (NaN) left out (numpy's nanmedian only when needed)."""
    if a.shape[0] == 1:
        return a[0]
    if np.isnan(a).any():
        return np.nanmedian(a, axis=0)
    return np.median(a, axis=0)


def _undipped_level(day_mean: np.ndarray, median: np.ndarray, sigma: np.ndarray, sigmas: float) -> np.ndarray:
    """The median of the days a card was not in a dip. A day whose mean sits significantly below the upper quartile of
    the days (in the card's own noise over a day) had a dip; when a share p of the days did, the others are the healthy
    ones, and their median is the (p + (1 - p) / 2) quantile of all the days. With no dip it is the median; with a dip
    most days it still does not take the dips for the level."""
    with np.errstate(invalid="ignore"):
        upper = np.nanquantile(day_mean, 0.75, axis=0) if np.isnan(day_mean).any() else np.quantile(day_mean, 0.75, axis=0)
        low = day_mean < upper * (1.0 - sigmas * sigma / np.sqrt(24.0))
    share = low.mean(axis=0)
    q = share + (1.0 - share) / 2.0
    ranked = np.sort(day_mean, axis=0)  # NaN days sort last
    count = np.isfinite(day_mean).sum(axis=0)
    at = q * np.maximum(count - 1, 0)
    lo = np.floor(at).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(count - 1, 0))
    frac = at - lo
    pick = lambda i: np.take_along_axis(ranked, i[None], axis=0)[0]  # noqa: E731
    out = pick(lo) * (1.0 - frac) + pick(hi) * frac
    return np.where(count > 0, out, median)


def _running(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Running sums of the present values and of their count along each row, with a leading zero column."""
    have = np.isfinite(x)
    s = np.zeros((x.shape[0], x.shape[1] + 1))
    np.cumsum(np.where(have, x, 0.0), axis=1, out=s[:, 1:])
    c = np.zeros_like(s)
    np.cumsum(have, axis=1, out=c[:, 1:])
    return s, c


class DipAwareSettings(Strict):
    """Settings of the `dip-aware` score (`[policy.scores.dip-aware]`): a robust long level, a short test for a dip."""

    level_hours: int = Field(default=168, ge=24, le=24 * 31)  # the level: median of the daily means over these hours
    recent_hours: int = Field(default=3, ge=1, le=24)  # the test reads the last 1..recent_hours hours
    sigmas: float = Field(default=2.5, gt=0, le=10)  # how far below the level, in the card's own noise, is a dip


@dataclass(frozen=True)
class DipAware:
    """The dip-aware estimator with its settings (see the module's docstring)."""

    level_hours: int = 168
    recent_hours: int = 3
    sigmas: float = 2.5
    name: str = "dip-aware"
    is_window_mean = False

    def history_hours(self, window_hours: int) -> int:
        return max(self.level_hours, self.recent_hours + 1)

    def describe(self, window: str) -> str:
        return f"dip-aware score (the level of {self.level_hours} h unless the last {self.recent_hours} h fall {self.sigmas:g} sigma below it)"

    def score(self, hourly_tps: np.ndarray, history_hours: int, hours: int, window_hours: int,
              other_windows: tuple[int, ...] = ()) -> Scored:
        x = np.asarray(hourly_tps, dtype=np.float64)
        n = x.shape[0]
        if self.level_hours > history_hours:
            from fleet.core.errors import ConfigError

            raise ConfigError(f"dip-aware level of {self.level_hours} hours is longer than the {history_hours} hours of history")
        score = np.empty((hours, n), dtype=np.float32)
        in_dip = np.empty((hours, n), dtype=bool)
        onsets = np.zeros(hours)
        depth_sum = np.zeros(hours)
        block = max(1, _BLOCK_CELLS // max(hours + history_hours, 1))
        for a in range(0, n, block):
            b = min(n, a + block)
            s, d, onset, lost = self._block(x[a:b], history_hours, hours)
            score[:, a:b] = s.T
            in_dip[:, a:b] = d.T
            onsets += onset
            depth_sum += lost
        others = WindowMean().score(hourly_tps, history_hours, hours, other_windows[0], other_windows[1:]) if other_windows else None
        # The pool's dips as they start: the share of its cards whose last hour fell significantly below a level their
        # hours before it still held, and how deep. Each hour's figure reads only the telemetry before that hour, so
        # it is the same however the hours are batched (a replay's month, a service's pass).
        rate = onsets / max(n, 1)
        depth = np.divide(depth_sum, onsets, out=np.zeros(hours), where=onsets > 0)
        return Scored(
            score_tps=score.T,
            window_tps=() if others is None else (others.score_tps, *others.window_tps),
            in_dip=in_dip.T,
            dip_rate=rate,
            dip_depth=depth,
        )

    def _block(self, x: np.ndarray, history_hours: int, hours: int):
        """Scores, dip flags, dip onsets and lost share of a block of cards, (cards, hours) each."""
        s, c = _running(x)
        have = np.isfinite(x)
        step = np.abs(np.diff(np.where(have, x, 0.0), axis=1))
        both = have[:, 1:] & have[:, :-1]
        ds, dc = _running(np.where(both, step, np.nan))  # column k + 1: changes up to the one into hour k + 1
        end = history_hours + np.arange(hours)  # the score at month hour h reads hours before history + h
        days = self.level_hours // 24
        day_mean = np.empty((days, x.shape[0], hours))
        day_step = np.empty((days, x.shape[0], hours))
        with np.errstate(invalid="ignore", divide="ignore"):
            for j in range(days):
                e = end - 24 * j
                day_mean[j] = (s[:, e] - s[:, e - 24]) / (c[:, e] - c[:, e - 24])
                # Changes between the day's consecutive hours: into hours e-23 .. e-1.
                day_step[j] = (ds[:, e - 1] - ds[:, e - 24]) / (dc[:, e - 1] - dc[:, e - 24])
            level = _median_of_days(day_mean)
            # For independent normal errors, E|x_t - x_t-1| = 2 sigma / sqrt(pi).
            sigma = _median_of_days(day_step) * (np.sqrt(np.pi) / 2) / level
            if days > 2:
                level = _undipped_level(day_mean, level, sigma, self.sigmas)
        sigma = np.where(np.isfinite(sigma), sigma, 0.0)
        score = level.copy()
        in_dip = np.zeros(level.shape, dtype=bool)
        with np.errstate(invalid="ignore", divide="ignore"):
            last_hour = (s[:, end] - s[:, end - 1]) / (c[:, end] - c[:, end - 1])
            # A card whose last hour is back within one sigma of its level is out of its dip: the longer recent
            # windows still hold dip hours and would keep it marked for hours after it recovered.
            recovered = last_hour >= level * (1.0 - sigma)
        for k in range(1, self.recent_hours + 1):
            with np.errstate(invalid="ignore", divide="ignore"):
                count = c[:, end] - c[:, end - k]
                recent = (s[:, end] - s[:, end - k]) / count
                low = (count > 0) & (recent < level * (1.0 - self.sigmas * sigma / np.sqrt(np.maximum(count, 1))))
                if k > 1:
                    low &= ~recovered
            score = np.where(low, np.fmin(score, recent), score)  # the lowest significantly low recent level: safe side
            in_dip |= low
        score = np.where(np.isfinite(score), score, np.nan)
        # A fresh dip: the last hour significantly low while the hours before it were not (tested as above).
        k = self.recent_hours
        with np.errstate(invalid="ignore", divide="ignore"):
            last_n = c[:, end] - c[:, end - 1]
            last = (s[:, end] - s[:, end - 1]) / last_n
            before_n = c[:, end - 1] - c[:, end - 1 - k]
            before = (s[:, end - 1] - s[:, end - 1 - k]) / before_n
            band = self.sigmas * sigma
            fresh = (last_n > 0) & (before_n > 0) & (last < level * (1.0 - band)) & ~(before < level * (1.0 - band / np.sqrt(np.maximum(before_n, 1))))
            lost = np.where(fresh, 1.0 - last / level, 0.0)
        onset = fresh.sum(axis=0).astype(np.float64)
        lost = np.where(np.isfinite(lost), lost, 0.0).sum(axis=0)
        return score, in_dip, onset, lost
