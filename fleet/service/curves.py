"""Each card's throughput–latency curve from the store's serving samples, and what the promise leaves of it.

The score job (`fleet.service.scoring`) fits every card's step against its batch over the hours before each hour
it scores (`fleet.core.curve_fit`), keeping the class's beta (`[classes.serving]`) where a card's batch did not
move. Under a promise on stream speed (`[slo] stream_tps`) each card's **rate at the promise** reads off its own
curve: what the decide job can size with in place of the class's curve scaled by the card's score. The measured
figures `/metrics` shows ride along: each card's stream speed in the last hour (one over its mean time per output
token) and the share of first tokens within the promise's time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

import numpy as np

from fleet.core.curve_fit import FittedCurves, fit_step_curves
from fleet.core.serving import UNLIMITED_BATCH, StepCurve
from fleet.core.units import HOUR_S
from fleet.service.pool import PoolIndex

if TYPE_CHECKING:
    from fleet.core.latency import Slo
    from storage.interfaces import TelemetryStore

FIT_HOURS = 6
"""The hours of samples each card's curve is fitted over: long enough for its batch to move with the day's load,
short enough to follow a card that turned slow."""


@dataclass(frozen=True)
class CardCurves:
    """Every card's fitted curve through `until_ts` (exclusive), in `index`'s order, and what was measured beside."""

    index: PoolIndex
    until_ts: int
    fitted: FittedCurves
    stream_tps: np.ndarray  # (cards,) measured in the last hour: one over the mean time per output token (NaN: none)
    ttft_ok_share: np.ndarray  # (cards,) the mean share of first tokens within the promise's time (NaN: none)
    rate_at_promise_tps: np.ndarray | None  # (cards,) under `[slo] stream_tps`: the rate the fitted curve keeps it at

    @property
    def slo_attainment_ratio(self) -> float:
        """The pool's share of first tokens within the promise's time in the last hour: the mean of the cards'."""
        got = self.ttft_ok_share[np.isfinite(self.ttft_ok_share)]
        return float(got.mean()) if got.size else float("nan")


def class_curves(pool) -> dict[str, StepCurve]:  # noqa: ANN001 - a `fleet.core.scenario.Pool` or None
    """Each class's curve from its `[classes.serving]` table (the classes without one have none)."""
    if pool is None:
        return {}
    return {c.name: c.serving.curve for c in pool.classes if c.serving is not None}


def read_card_curves(telemetry: TelemetryStore, index: PoolIndex, until_ts: int, classes: Mapping[str, StepCurve],
                     slo: Slo | None = None, fit_hours: int = FIT_HOURS) -> CardCurves | None:
    """The cards' curves fitted over the `fit_hours` before `until_ts`; None when no card's telemetry in them carried
    a batch and a time per output token."""
    got = telemetry.serving_samples(until_ts - fit_hours * HOUR_S, until_ts)
    pos = index.positions_of_ids(got["card_id"])
    both = (pos >= 0) & np.isfinite(got["batch_mean"]) & np.isfinite(got["tpot_s"])
    if not both.any():
        return None
    n = len(index)
    names = index.class_names
    beta = np.full(n, np.nan)
    max_batch = np.full(n, UNLIMITED_BATCH, dtype=np.int64)
    for name, curve in classes.items():  # a loop over the classes, not the cards
        rows = names == name
        beta[rows], max_batch[rows] = curve.beta_s, curve.max_batch
    fitted = fit_step_curves(pos[both], got["batch_mean"][both], got["tpot_s"][both], n, beta)
    last = (pos >= 0) & (got["ts"] >= until_ts - HOUR_S)
    stream_tps = 1.0 / _mean_by_card(pos, got["tpot_s"], last, n)
    ttft_ok = _mean_by_card(pos, got["ttft_ok_share"], last, n)
    rate = None
    if slo is not None and slo.stream_tps is not None:
        rate = fitted.rate_at_floor_tps(slo.stream_tps, max_batch)
    return CardCurves(index, until_ts, fitted, stream_tps, ttft_ok, rate)


def _mean_by_card(pos: np.ndarray, values: np.ndarray, pick: np.ndarray, n: int) -> np.ndarray:
    """Each card's mean of `values` over the samples `pick`ed that have one (NaN: none)."""
    use = pick & np.isfinite(values)
    count = np.bincount(pos[use], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, np.bincount(pos[use], values[use], n) / count, np.nan)
