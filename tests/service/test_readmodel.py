"""The read model on a store written by hand: the month on view and one card's story, each figure read once and
the same whoever reads it (status, explain, plan, journal, the snapshot)."""

from __future__ import annotations

import pytest

from fleet.core.scenario import Checks, Eviction, Policy
from fleet.ingest.pool import declare_pool
from fleet.service.calendar import HOUR_S, Calendar
from fleet.service.pool import PoolWatch
from fleet.service.readmodel import CardView, HourPlan, MonthView, closed_by, stored_month_totals
from fleet.service.snapshot import build_snapshot
from storage.records import (AddRecord, EvictionPassRecord, EvictRecord, ReleaseRecord, SetAsideRecord, SizeRecord)
from storage.repository import ClassSpec, open_repository
from storage.service_store import HourFigures, JournalEntry, ServiceStore
from storage.values import Kind, ScoreKey

T0 = 1_767_225_600
CAL = Calendar(T0, 24)
POLICY = Policy(card_class="flagship", window="day", mode="steady",
                eviction=Eviction(rule="below-median", window="hour", cadence_hours=1, share=0.5,
                                  rules={"below-median": {"fraction": 0.8}}))
WINDOWS = {"day": 24, "hour": 1}
T1 = T0 + HOUR_S


def hour(ts: int, evictions=0) -> HourFigures:
    return HourFigures(hour_ts=ts, month_start_ts=CAL.month_of(ts)[0], demand_tps=10_000.0, capacity_tps=12_000.0,
                       delivered_tps=10_000.0, scored_capacity_tps=11_000.0, cards_warm=2, warm_usd=200.0, churn_usd=0.0,
                       idle_usd=1.0, ideal_usd=180.0, evictions=evictions, wrong_evictions=0)


def size(ts: int, demand: float, **more) -> JournalEntry:
    rec = SizeRecord(hour=(ts - CAL.month_of(ts)[0]) // HOUR_S, window="day", target_tps=demand * 1.05,
                     scored_capacity_tps=demand * 1.1, demand_tps=demand, budget_left=1, **more)
    return JournalEntry(f"{ts}:size", ts, Kind.SIZE, "sized", detail=rec.to_detail(), acted=True)


PASS = EvictionPassRecord(hour=1, rule="below-median", window="hour", judged=3, candidates=["gpu-c"], evicted=["gpu-c"],
                          median_score_tps=5000.0, threshold_tps=4000.0, budget_left_before=2, budget_left_after=1,
                          scores={"gpu-a": 5800.0, "gpu-b": 5000.0, "gpu-c": 1000.0},
                          thresholds={"gpu-a": 4000.0, "gpu-b": 4000.0, "gpu-c": 4000.0})


@pytest.fixture
def store(tmp_path):
    repo = open_repository(f"sqlite:///{tmp_path / 's.db'}")
    declare_pool(repo, [ClassSpec("flagship", 6000.0, 2690.0)],
                 {"gpu-a": "flagship", "gpu-b": "flagship", "gpu-c": "flagship", "gpu-d": "flagship"}, 0)
    st = ServiceStore(repo.engine)
    st.journal_hour(T0, [size(T0, 9000.0, demand_forecast_tps=8500.0),
                         JournalEntry(f"{T0}:add:gpu-a", T0, Kind.ADD, "added: a", "gpu-a", detail=AddRecord(0, 6000.0, "day", 2.0).to_detail()),
                         JournalEntry(f"{T0}:add:gpu-d", T0, Kind.ADD, "added: d", "gpu-d", detail=AddRecord(0, 5000.0, "day", 2.0).to_detail())],
                    {"gpu-a": "warm", "gpu-b": "warm", "gpu-c": "warm", "gpu-d": "warm"}, [], [])
    st.journal_hour(T1, [size(T1, 10_000.0, knew_demand=True),
                         JournalEntry(f"{T1}:eviction-pass", T1, Kind.EVICTION_PASS, "below-median", detail=PASS.to_detail(), acted=True),
                         JournalEntry(f"{T1}:evict:gpu-c", T1, Kind.EVICT, "slow", "gpu-c", detail=EvictRecord(hour=1, budget_left=1).to_detail()),
                         JournalEntry(f"{T1}:release:gpu-d", T1, Kind.RELEASE, "released: d", "gpu-d", detail=ReleaseRecord(1, 5000.0, "day").to_detail())],
                    {}, ["gpu-c", "gpu-d"], ["gpu-c"])
    add_a = st.decisions(card_key="gpu-a", kinds=[Kind.ADD])[0]
    st.set_aside(JournalEntry(f"{add_a.key}:act-failed", T1, Kind.ACT_FAILED, "set aside", "gpu-a",
                              detail=SetAsideRecord(add_a.key, add_a.id, "add", T0, 3, float(T0), "permanent", "no").to_detail(), acted=True))
    st.record_scores([(T1, 24, {"gpu-a": (6000.0, 0.0), "gpu-b": (5000.0, 0.0)}), (T1, 1, {"gpu-a": (5800.0, 0.0)}),
                      (T1, int(ScoreKey.POLICY), {"gpu-a": (6100.0, 0.0), "gpu-b": (4900.0, 0.0)})])
    st.record_hours([hour(T0), hour(T1, evictions=1)], [[("rent", 200.0, None)], [("rent", 200.0, None)]])
    return repo, st


def test_the_month_on_view_is_the_same_with_a_calendar_or_without(store):
    _, st = store
    plain, by_calendar = MonthView.on_view(st), MonthView.on_view(st, CAL, T0 + 5 * HOUR_S)
    for v in (plain, by_calendar):
        assert (v.month_start_ts, v.last_billed_ts, v.last_decided_ts, v.hours_decided) == (T0, T1, T1, 2)
        assert v.run_set == ["gpu-a", "gpu-b"] and v.evicted == {"gpu-c": T1}
        assert (v.size.demand_tps, v.size.knew_demand, v.billed_size.demand_tps) == (10_000.0, True, 10_000.0)
        assert v.totals == stored_month_totals(v.hours) and v.breaker_open is False
        assert v.scores_by_window == {24: {"gpu-a": 6000.0, "gpu-b": 5000.0}, 1: {"gpu-a": 5800.0},
                                      ScoreKey.POLICY: {"gpu-a": 6100.0, "gpu-b": 4900.0}}
        assert [(r.card_key, rec.decision_kind, rec.tries) for r, rec in v.set_aside] == [("gpu-a", "add", 3)]
    assert plain.month_end_ts > by_calendar.month_end_ts == T0 + 24 * HOUR_S  # without a calendar, no end is known


def test_the_snapshot_reads_its_figures_from_the_month_on_view(store):
    repo, st = store
    snap = build_snapshot(st, repo, PoolWatch(repo, 24).current(), CAL, POLICY, WINDOWS, Checks(), now_ts=T0 + 5 * HOUR_S)
    v = MonthView.on_view(st, CAL, T0 + 5 * HOUR_S)
    assert (snap.demand_tps, snap.scored_capacity_tps, snap.knew_demand) == (v.size.demand_tps, v.size.scored_capacity_tps, True)
    assert (snap.run_set, snap.hours_billed, snap.hours_decided, snap.evictions) == (v.run_set, 2, 2, len(v.evicted))
    assert snap.totals == v.totals and snap.checks == v.checks(Checks())
    measured, error = v.recent_forecasts()
    assert measured != measured and error != error  # no measured demand stored: NaN, as the snapshot shows it


def test_recent_forecast_error_reads_each_hours_size_record(store):
    _, st = store
    t2 = T1 + HOUR_S
    st.journal_hour(t2, [size(t2, 9000.0, demand_forecast_tps=9500.0)], {}, [], [])
    st.record_hours([HourFigures(**{**hour(t2).__dict__, "demand_measured_tps": 9000.0})], [[("rent", 200.0, None)]])
    assert MonthView.on_view(st).recent_forecasts() == (9000.0, 500.0)


def test_a_month_with_no_billed_hour_has_no_view_without_a_calendar(tmp_path):
    repo = open_repository(f"sqlite:///{tmp_path / 'e.db'}")
    st = ServiceStore(repo.engine)
    assert MonthView.on_view(st) is None
    v = MonthView.on_view(st, CAL, T0 + 30 * HOUR_S)
    assert (v.month_start_ts, v.hours, v.last_decided_ts, v.size, v.run_set, v.evicted, v.checks(Checks())) == (
        T0 + 24 * HOUR_S, [], None, None, [], {}, {})


def test_a_card_story(store):
    _, st = store
    c = CardView(st, "gpu-c", "flagship")
    (j,) = c.judged
    assert (j.ts, j.hour, j.score_tps, j.threshold_tps, j.median_score_tps, j.verdict) == (T1, 1, 1000.0, 4000.0, 5000.0, "evicted")
    assert [r.kind for r in c.evictions] == [Kind.EVICT] and c.evictions[0].record.budget_left == 1
    assert c.warm is False and c.rank is None  # evicted: not scored at the last hour
    d = CardView(st, "gpu-d", "flagship")
    assert (d.times_moved(Kind.ADD), d.times_moved(Kind.RELEASE), d.judged) == (1, 1, [])
    a = CardView(st, "gpu-a", "flagship")
    assert a.warm and a.size.demand_tps == 10_000.0
    assert (a.rank.window_hours, a.rank.score_tps, a.rank.rank, a.rank.of) == (24, 6000.0, 1, 2)
    assert a.judged[0].verdict == "kept: at or above the threshold"
    assert [r.kind for r in a.unacted] == [Kind.ADD]  # set aside: closed, never carried out


def test_the_journal_marks_what_a_set_aside_record_closed(store):
    _, st = store
    add_a = st.decisions(card_key="gpu-a", kinds=[Kind.ADD])[0]
    assert closed_by(st) == {add_a.key: Kind.ACT_FAILED}


def test_an_hour_plan_shows_each_record_beside_its_reason_in_the_order_written():
    entries = [size(T1, 10_000.0), JournalEntry(f"{T1}:eviction-pass", T1, Kind.EVICTION_PASS, "below-median", detail=PASS.to_detail()),
               JournalEntry(f"{T1}:add:gpu-d", T1, Kind.ADD, "added: d", "gpu-d", detail=AddRecord(1, 5000.0, "day", 2.0).to_detail())]
    got = HourPlan(entries).as_json()
    assert list(got) == ["size", "add", "release", "evict", "eviction_pass"]
    assert list(got["size"]) == ["reason", *entries[0].detail]
    assert got["add"] == [{"card": "gpu-d", "reason": "added: d", "hour": 1, "score_tps": 5000.0, "window": "day", "tokens_per_usd": 2.0}]
    assert got["release"] == got["evict"] == [] and got["eviction_pass"] == {"reason": "below-median", **PASS.to_detail()}
