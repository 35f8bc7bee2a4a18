"""The snapshot `/metrics` serves: the service's state as the store has it, gathered at one refresh.

Scrapes read the last snapshot and never the store, so a scrape costs no query.
The figures come from the read model (`fleet.service.readmodel.MonthView`),
as `fleet status` reads them: month-to-date figures are the core's
`month_totals` over the billed hours and the checks are the core's `checks`
over them, as a replayed month's verdict is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import numpy as np

from fleet.core.greedy import tokens_per_dollar
from fleet.core.scenario import budget_cards, budget_left as budget_left_of
from fleet.service.calendar import Calendar
from fleet.service.pool import PoolIndex
from fleet.service.readmodel import FORECAST_ERROR_HOURS, MonthView, forecast_error_tps, stored_month_totals

__all__ = ["FORECAST_ERROR_HOURS", "Snapshot", "build_snapshot", "forecast_error_tps", "mismatch_counts", "stored_month_totals"]

if TYPE_CHECKING:
    from storage.interfaces import JournalStore, TelemetryStore


@dataclass
class Snapshot:
    """What `/metrics`, `fleet status` and the tests read: the service's state at one refresh."""

    clock_ts: float
    month_start_ts: int
    month_hours: int
    hours_billed: int
    hours_decided: int
    run_set: list[str]
    pool_cards: int
    eligible_cards: int
    scores: dict[str, dict[str, tuple[float, float]]]  # window name → card → (score_tps, tokens_per_usd)
    demand_tps: float
    scored_capacity_tps: float
    capacity_tps: float
    totals: dict[str, float]
    evictions: int
    wrong_evictions: int
    eviction_budget: int
    budget_left: int
    breaker_open: bool
    ingest: dict[str, int]
    quarantine: dict[str, int]
    decisions: dict[str, tuple[int, int]]
    checks: dict = field(default_factory=dict)
    demand_forecast_tps: float = float("nan")  # the forecast the last decided hour was sized to (NaN: none)
    demand_measured_tps: float = float("nan")  # the demand the last billed hour had (NaN: none measured)
    forecast_error_tps: float = float("nan")  # mean |forecast - measured| over the recent billed hours
    knew_demand: bool = False  # the policy was handed the hour's true demand (the seed's clairvoyant view)
    card_classes: dict[str, str] = field(default_factory=dict)  # card → its class, for the per-card series' label
    oldest_unacted_ts: int | None = None  # the hour of the oldest action neither carried out nor set aside
    curves: object | None = None  # each card's fitted curve and measured stream speed (`fleet.service.curves.CardCurves`)
    reconcile_mismatches: dict[str, int] = field(default_factory=dict)  # open mismatches by kind (silent, still-serving)
    demand_answered_ts: int | None = None  # a real pool's demand source's newest sample (None: none, or a simulation)
    pool_ttft_s: float | None = None  # under a promise: the run set's expected first-token wait at the percentile
    promised: bool = False  # the pool has a promise (`[slo]`): its goodput and latency check are shown from the start


def mismatch_counts(store: JournalStore) -> dict[str, int]:
    """Open reconcile mismatches by kind, every kind present (0 when none)."""
    from fleet.service.reconcile import MISMATCH_KINDS, open_mismatches

    counts = dict.fromkeys(MISMATCH_KINDS, 0)
    for _card, kind in open_mismatches(store):
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def build_snapshot(store: JournalStore, telemetry: TelemetryStore, index: PoolIndex, calendar: Calendar, policy,
                   windows: Mapping[str, int], marks, now_ts: float, measured_demand: bool = False,
                   promised: bool = False) -> Snapshot:
    """The snapshot of the month on view: the one last billed (at a month's end it stays on view until the next bills).

    `policy` gives the class the pool is counted in and the eviction budget's share,
    `windows` (name → hours) the scores shown, `marks` the checks' pass marks; `measured_demand` for a real pool
    (its checks skip the hours with no demand measured, as `fleet status`'s do); `promised` for a pool under a promise
    (its goodput and latency check, from the billed hours' goodput).
    """
    view = MonthView.on_view(store, calendar, now_ts, measured_demand)
    m0, last_dec = view.month_start_ts, view.last_decided_ts
    in_class = index.run_class_mask(policy)
    pool_cards = int(in_class.sum())
    retired = {k for k, ts in store.retired().items() if ts >= m0}
    evictions = len(view.evicted)
    scores: dict[str, dict[str, tuple[float, float]]] = {}
    if last_dec is not None:
        rent, pos = index.rent_usd_per_hour, index.pos
        for name, w in windows.items():
            got = store.scores_at(last_dec, w)
            scores[name] = {
                k: (v, float(tokens_per_dollar(np.array([v]), rent[pos[k]:pos[k] + 1])[0]))
                for k, v in got.items() if k in pos
            }
    size, totals = view.size, view.totals
    measured, error = view.recent_forecasts()
    return Snapshot(
        clock_ts=now_ts,
        month_start_ts=m0,
        month_hours=calendar.month_hours,
        hours_billed=len(view.hours),
        hours_decided=view.hours_decided,
        run_set=view.run_set,
        pool_cards=pool_cards,
        eligible_cards=int((in_class & ~index.mask(retired)).sum()),
        scores=scores,
        demand_tps=float(size.demand_tps or 0.0) if size else 0.0,
        scored_capacity_tps=float(size.scored_capacity_tps or 0.0) if size else 0.0,
        capacity_tps=view.hours[-1].capacity_tps if view.hours else 0.0,
        totals=totals,
        evictions=evictions,
        wrong_evictions=int(totals["wrong_evictions"]),
        eviction_budget=budget_cards(policy.eviction.share, pool_cards),
        budget_left=budget_left_of(policy.eviction.share, pool_cards, evictions),
        breaker_open=view.breaker_open,
        ingest=telemetry.ingest_totals(),
        quarantine=telemetry.quarantine_reasons(),
        decisions=store.decision_counts(m0, view.month_end_ts),
        checks=view.checks(marks),
        demand_forecast_tps=size.forecast_tps if size else float("nan"),
        demand_measured_tps=measured,
        forecast_error_tps=error,
        knew_demand=bool(size and size.knew_demand),
        card_classes=dict(zip(index.keys, map(str, index.class_names.tolist()))),
        oldest_unacted_ts=store.oldest_unacted_ts(),
        reconcile_mismatches=mismatch_counts(store),
        demand_answered_ts=telemetry.last_demand_sample_ts() if measured_demand else None,
        pool_ttft_s=size.ttft_s if size else None,
        promised=promised,
    )
