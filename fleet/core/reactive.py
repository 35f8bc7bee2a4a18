"""The reactive loop beside a real pool: what `fleet serve`'s reactive job decides from a measured queue and demand,
and how long a card it added is held from the hourly plan.

The decision is replay's (`fleet.core.traffic.react`): the measured demand × the loop's headroom plus the backlog
drained within one interval, against the run set's scored capacity; the best spares by scored tokens per dollar
first, at most `max_adds_per_hour` an hour. Here it reads clock seconds where replay reads steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleet.core.greedy import tokens_per_dollar
from fleet.core.scenario import Reactive
from fleet.core.traffic import ReactiveAdd, ranked_spares, react


@dataclass(frozen=True)
class Measured:
    """What the serving stack said over the interval before a reactive run."""

    backlog_tokens: float  # tokens waiting: requests waiting × mean tokens generated per request
    demand_tps: float  # tokens generated per second over the interval


def reactive_adds(measured: Measured, interval_s: float, warm: np.ndarray, eligible: np.ndarray, score_tps: np.ndarray,
                  rent_usd_per_hour: np.ndarray, settings: Reactive, adds_this_hour: int, step: int = 0,
                  target=None) -> tuple[ReactiveAdd, ...]:
    """The cards a reactive run adds: `warm` is the run set now, `eligible` the cards it may add (run classes, not
    evicted, retired or silent), `score_tps` the plan's scores (a card without one is no spare: it would add no
    scored capacity; under a promise sized to, its rate at it). The backlog is cleared within one interval. Under
    a promise, `target` (`PromiseView.target_tps`) lifts the demand to the slots its first tokens need."""
    warm = np.asarray(warm, dtype=bool)
    score = np.asarray(score_tps, dtype=np.float64)
    tpd = tokens_per_dollar(score, np.asarray(rent_usd_per_hour, dtype=np.float64))
    spares = ranked_spares(tpd, np.asarray(eligible, dtype=bool) & (score > 0))  # no score: it adds no capacity
    return react(max(measured.demand_tps, 0.0), max(measured.backlog_tokens, 0.0) / interval_s, warm, spares, score, tpd,
                 settings, settings.max_adds_per_hour - adds_this_hour, step, target)


def cooling_down(added_ts: float, cooldown_minutes: int, hour_ts: float) -> bool:
    """Whether a card the loop added at `added_ts` is still held at the start of the hour `hour_ts`: the plan may
    release it only once `cooldown_minutes` have passed since it was added."""
    return hour_ts < added_ts + cooldown_minutes * 60
