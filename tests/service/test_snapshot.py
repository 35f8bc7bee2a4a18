"""The snapshot builder on a store written by hand: the month on view, its totals and checks by the core's functions."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.scenario import Checks, Eviction, Policy
from fleet.core.verdict import checks, month_totals
from fleet.service.calendar import HOUR_S, Calendar
from fleet.ingest.pool import declare_pool
from fleet.service.pool import PoolWatch
from fleet.service.snapshot import build_snapshot, stored_month_totals
from storage.repository import ClassSpec, open_repository
from storage.service_store import HourFigures, JournalEntry, ServiceStore

T0 = 1_767_225_600
CAL = Calendar(T0, 24)
POLICY = Policy(card_class="flagship", window="day", mode="steady",
                eviction=Eviction(rule="below-median", window="hour", cadence_hours=1, share=0.5,
                                  rules={"below-median": {"fraction": 0.8}}))
WINDOWS = {"day": 24, "hour": 1}
RENT_H = 2690.0 / 24


def hour(ts: int, warm_usd: float, churn_usd=0.0, evictions=0, wrong=0, capacity=12_000.0) -> HourFigures:
    return HourFigures(hour_ts=ts, month_start_ts=CAL.month_of(ts)[0], demand_tps=10_000.0, capacity_tps=capacity,
                       delivered_tps=min(10_000.0, capacity), scored_capacity_tps=11_000.0, cards_warm=2, warm_usd=warm_usd,
                       churn_usd=churn_usd, idle_usd=1.0, ideal_usd=warm_usd * 0.9, evictions=evictions, wrong_evictions=wrong)


def size(ts: int, demand: float) -> JournalEntry:
    return JournalEntry(f"{ts}:size", ts, "size", "sized", detail={"demand_tps": demand, "scored_capacity_tps": demand * 1.1}, acted=True)


@pytest.fixture
def store(tmp_path):
    repo = open_repository(f"sqlite:///{tmp_path / 's.db'}")
    declare_pool(repo, [ClassSpec("flagship", 6000.0, 2690.0), ClassSpec("budget", 2000.0, 700.0)],
                 {"gpu-a": "flagship", "gpu-b": "flagship", "gpu-c": "flagship", "gpu-d": "flagship", "gpu-z": "budget"}, 0)
    store = ServiceStore(repo.engine)
    store.journal_hour(T0, [size(T0, 9000.0)], {"gpu-a": "warm", "gpu-b": "warm", "gpu-c": "warm"}, [], [])
    t1 = T0 + HOUR_S
    store.journal_hour(t1, [size(t1, 10_000.0),
                            JournalEntry(f"{t1}:eviction-pass", t1, "eviction-pass", "below-median", detail={"breaker_open": False}, acted=True),
                            JournalEntry(f"{t1}:evict:gpu-c", t1, "evict", "slow", "gpu-c")], {}, ["gpu-c"], ["gpu-c"])
    store.record_scores([(t1, 24, {"gpu-a": (6000.0, 0.0), "gpu-b": (5000.0, 0.0)}), (t1, 1, {"gpu-a": (5800.0, 0.0)})])
    h0 = hour(T0, 2 * RENT_H)
    h1 = hour(t1, 2 * RENT_H, churn_usd=403.5, evictions=1, wrong=1, capacity=9_000.0)
    store.record_hours([h0, h1], [[("rent", h0.warm_usd, None)], [("rent", h1.warm_usd, None), ("churn", 403.5, "gpu-c")]])
    return repo, store, [h0, h1]


def test_the_month_so_far(store):
    repo, st, hours = store
    index = PoolWatch(repo, 24).current()
    snap = build_snapshot(st, repo, index, CAL, POLICY, WINDOWS, Checks(), now_ts=T0 + 2 * HOUR_S + 5)
    assert (snap.clock_ts, snap.month_start_ts, snap.month_hours, snap.hours_billed, snap.hours_decided) == (T0 + 2 * HOUR_S + 5, T0, 24, 2, 2)
    assert snap.run_set == ["gpu-a", "gpu-b"]
    assert (snap.pool_cards, snap.eligible_cards) == (4, 3)  # the class's cards; gpu-c retired with its eviction
    assert (snap.evictions, snap.eviction_budget, snap.budget_left, snap.wrong_evictions) == (1, 2, 1, 1)
    assert (snap.demand_tps, snap.scored_capacity_tps, snap.capacity_tps) == (10_000.0, pytest.approx(11_000.0), 9_000.0)
    assert snap.breaker_open is False
    assert snap.scores == {"day": {"gpu-a": (6000.0, pytest.approx(6000.0 * 3600 / RENT_H)), "gpu-b": (5000.0, pytest.approx(5000.0 * 3600 / RENT_H))},
                           "hour": {"gpu-a": (5800.0, pytest.approx(5800.0 * 3600 / RENT_H))}}
    assert snap.decisions == {"size": (2, 2), "eviction-pass": (1, 1), "evict": (1, 0)}
    col = lambda name: np.array([getattr(h, name) for h in hours])  # noqa: E731
    expected = month_totals(col("warm_usd"), col("churn_usd"), col("idle_usd"), col("ideal_usd"), col("demand_tps"),
                                 col("delivered_tps"), 1, 1)
    assert snap.totals == expected == stored_month_totals(hours)
    assert snap.checks == checks(expected, Checks())
    assert snap.checks["eviction"]["pass"] is (1 <= Checks().max_wrong_evictions)


def test_an_empty_store_shows_the_current_month(tmp_path):
    repo = open_repository(f"sqlite:///{tmp_path / 'e.db'}")
    declare_pool(repo, [ClassSpec("flagship", 6000.0, 2690.0)], {"gpu-a": "flagship"}, 0)
    st = ServiceStore(repo.engine)
    snap = build_snapshot(st, repo, PoolWatch(repo, 24).current(), CAL, POLICY, WINDOWS, Checks(), now_ts=T0 + 30 * HOUR_S)
    assert snap.month_start_ts == T0 + 24 * HOUR_S
    assert (snap.hours_billed, snap.hours_decided, snap.run_set, snap.scores, snap.checks) == (0, 0, [], {}, {})
    assert (snap.pool_cards, snap.eligible_cards, snap.eviction_budget, snap.evictions) == (1, 1, 0, 0)
    assert snap.totals["bill_usd"] == 0.0 and snap.capacity_tps == 0.0


def test_the_last_billed_month_stays_on_view_until_the_next_bills(store):
    repo, st, _ = store
    index = PoolWatch(repo, 24).current()
    later = build_snapshot(st, repo, index, CAL, POLICY, WINDOWS, Checks(), now_ts=T0 + 40 * HOUR_S)
    assert later.month_start_ts == T0 and later.hours_billed == 2
    t = T0 + 24 * HOUR_S
    st.journal_hour(t, [size(t, 8000.0)], {}, [], [])
    st.record_hours([hour(t, RENT_H)], [[("rent", RENT_H, None)]])
    nxt = build_snapshot(st, repo, index, CAL, POLICY, WINDOWS, Checks(), now_ts=T0 + 40 * HOUR_S)
    assert (nxt.month_start_ts, nxt.hours_billed, nxt.hours_decided, nxt.evictions, nxt.budget_left) == (t, 1, 1, 0, 2)
    assert nxt.eligible_cards == 4  # gpu-c left the pool for last month only
    assert nxt.demand_tps == 8000.0 and nxt.scores == {"day": {}, "hour": {}}
