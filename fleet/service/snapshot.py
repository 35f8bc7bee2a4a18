"""The snapshot `/metrics` serves: the service's state as the store has it, gathered at one refresh.

Scrapes read the last snapshot and never the store, so a scrape costs no query.
Month-to-date figures are the core's `month_totals` over the billed hours and
the checks are the core's `checks` over them, as a replayed month's verdict is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from fleet.core.greedy import tokens_per_dollar
from fleet.core.scenario import budget_cards, budget_left as budget_left_of
from fleet.core.verdict import checks as judge_checks
from fleet.core.verdict import month_totals as core_month_totals
from fleet.service.calendar import HOUR_S, Calendar
from fleet.service.pool import PoolIndex
from storage.values import HourFigures, Kind

if TYPE_CHECKING:
    from storage.interfaces import JournalStore


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
    reconcile_mismatches: dict[str, int] = field(default_factory=dict)  # open mismatches by kind (silent, still-serving)


def month_totals(hours: Sequence[HourFigures]) -> dict[str, float]:
    """Month-to-date sums of billed hours (`fleet.core.verdict.month_totals` over the stored hours)."""
    col = lambda name: np.array([getattr(h, name) for h in hours], dtype=np.float64)  # noqa: E731
    return core_month_totals(col("warm_usd"), col("churn_usd"), col("idle_usd"), col("ideal_usd"), col("demand_tps"),
                             col("delivered_tps"), int(sum(h.evictions for h in hours)),
                             int(sum(h.wrong_evictions for h in hours)))


FORECAST_ERROR_HOURS = 24
"""The recent forecast error is measured over the last day of billed hours."""


def forecast_error_tps(forecast_tps: Sequence[float], measured_tps: Sequence[float]) -> float:
    """Mean |forecast − measured| over the hours that have both (NaN when none has)."""
    f, m = np.asarray(forecast_tps, dtype=np.float64), np.asarray(measured_tps, dtype=np.float64)
    ok = np.isfinite(f) & np.isfinite(m)
    return float(np.mean(np.abs(f[ok] - m[ok]))) if ok.any() else float("nan")


def _recent_forecasts(store: JournalStore, hours: Sequence[HourFigures]) -> tuple[float, float]:
    """(the last billed hour's measured demand, the recent forecast error) from the billed hours and their size records."""
    recent = list(hours[-FORECAST_ERROR_HOURS:])
    if not recent:
        return float("nan"), float("nan")
    sizes = {r.ts: r.detail for r in store.decisions(kinds=[Kind.SIZE], since_ts=recent[0].hour_ts, until_ts=recent[-1].hour_ts + 1)}
    nan = float("nan")
    measured = [nan if h.demand_measured_tps is None else h.demand_measured_tps for h in recent]
    forecast = [float(sizes.get(h.hour_ts, {}).get("demand_forecast_tps", nan)) for h in recent]
    return measured[-1], forecast_error_tps(forecast, measured)


def mismatch_counts(store: JournalStore) -> dict[str, int]:
    """Open reconcile mismatches by kind, every kind present (0 when none)."""
    from fleet.service.reconcile import MISMATCH_KINDS, open_mismatches

    counts = dict.fromkeys(MISMATCH_KINDS, 0)
    for _card, kind in open_mismatches(store):
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def build_snapshot(store: JournalStore, index: PoolIndex, calendar: Calendar, policy, windows: Mapping[str, int], marks,
                   now_ts: float) -> Snapshot:
    """The snapshot of the month on view: the one last billed (at a month's end it stays on view until the next bills).

    `policy` gives the class the pool is counted in and the eviction budget's share,
    `windows` (name → hours) the scores shown, `marks` the checks' pass marks.
    """
    last_b = store.last_billed_ts()
    m0 = calendar.month_of(last_b)[0] if last_b is not None else calendar.current_month_start(now_ts)
    m1 = calendar.month_end_ts(m0)
    hours = store.hours(m0)
    totals = month_totals(hours)
    last_dec = store.last_decided_ts(m0, m1)
    run_set = sorted(store.run_set_at(last_dec)) if last_dec is not None else []
    in_class = index.run_class_mask(policy)
    pool_cards = int(in_class.sum())
    retired = {k for k, ts in store.retired().items() if ts >= m0}
    budget = budget_cards(policy.eviction.share, pool_cards)
    evictions = len(store.eviction_hours(m0, m1))
    scores: dict[str, dict[str, tuple[float, float]]] = {}
    if last_dec is not None:
        rent, pos = index.rent_usd_per_hour, index.pos
        for name, w in windows.items():
            got = store.scores_at(last_dec, w)
            scores[name] = {
                k: (v, float(tokens_per_dollar(np.array([v]), rent[pos[k]:pos[k] + 1])[0]))
                for k, v in got.items() if k in pos
            }
    size = store.decisions(kinds=[Kind.SIZE], since_ts=last_dec, until_ts=last_dec + 1, limit=1) if last_dec is not None else []
    passes = store.decisions(kinds=[Kind.EVICTION_PASS], since_ts=m0, until_ts=m1)
    figs = {**totals, "wrong_evictions": int(totals["wrong_evictions"])}
    measured, error = _recent_forecasts(store, hours)
    return Snapshot(
        clock_ts=now_ts,
        month_start_ts=m0,
        month_hours=calendar.month_hours,
        hours_billed=len(hours),
        hours_decided=0 if last_dec is None else (last_dec - m0) // HOUR_S + 1,
        run_set=run_set,
        pool_cards=pool_cards,
        eligible_cards=int((in_class & ~index.mask(retired)).sum()),
        scores=scores,
        demand_tps=float(size[0].detail.get("demand_tps", 0.0)) if size else 0.0,
        scored_capacity_tps=float(size[0].detail.get("scored_capacity_tps", 0.0)) if size else 0.0,
        capacity_tps=hours[-1].capacity_tps if hours else 0.0,
        totals=totals,
        evictions=evictions,
        wrong_evictions=int(totals["wrong_evictions"]),
        eviction_budget=budget,
        budget_left=budget_left_of(policy.eviction.share, pool_cards, evictions),
        breaker_open=bool(passes and passes[-1].detail.get("breaker_open")),
        ingest=store.ingest_totals(),
        quarantine=store.quarantine_reasons(),
        decisions=store.decision_counts(m0, m1),
        checks=judge_checks(figs, marks) if hours else {},
        demand_forecast_tps=float(size[0].detail.get("demand_forecast_tps", float("nan"))) if size else float("nan"),
        demand_measured_tps=measured,
        forecast_error_tps=error,
        knew_demand=bool(size and size[0].detail.get("knew_demand")),
        card_classes=dict(zip(index.keys, map(str, index.class_names.tolist()))),
        oldest_unacted_ts=store.oldest_unacted_ts(),
        reconcile_mismatches=mismatch_counts(store),
    )
