"""`storage.records`: each journal kind's detail as a typed record, read back from what stores hold today and held
before, and written key for key as it always was."""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, fields

import pytest

from storage.records import (RECORDS, AddRecord, EvictionPassRecord, EvictRecord, ReconcileRecord, ReleaseRecord,
                             RetireRecord, SetAsideRecord, SizeRecord, record_of)
from storage.values import JournalEntry, JournalRow, Kind, ScoreKey, score_key_label

# Detail objects as the producers write them (key order included): each reads into its record and back unchanged.
STORED = {
    "size, steady": (Kind.SIZE, {
        "hour": 24, "mode": "steady", "window": "day", "target_tps": 10500.0, "scored_capacity_tps": 11000.0,
        "demand_tps": 10000.0, "run_set_cards": 3, "budget_left": 2, "held_out_hours": {"gpu-d": 2}}),
    "size, with a forecast, a dip and cards not counted": (Kind.SIZE, {
        "hour": 5, "mode": "steady", "window": "day", "target_tps": 1.0, "scored_capacity_tps": 2.0, "demand_tps": 3.0,
        "demand_forecast_tps": 2.5, "knew_demand": True, "run_set_cards": 1, "budget_left": 0, "held_out_hours": {},
        "in_dip": ["a"], "dip_allowance": 0.25, "not_counted": {"b": "silent"}, "counted_running": {"c": "release failed"}}),
    "size, with an empty dip list": (Kind.SIZE, {
        "hour": 1, "mode": "steady", "window": "day", "target_tps": 1.0, "scored_capacity_tps": 2.0, "demand_tps": 3.0,
        "run_set_cards": 1, "budget_left": 0, "held_out_hours": {}, "in_dip": []}),
    "eviction pass, one class": (Kind.EVICTION_PASS, {
        "hour": 24, "rule": "below-median", "window": "hour", "judged": 3, "candidates": ["c"], "evicted": ["c"],
        "median_score_tps": 5100.0, "threshold_tps": 4080.0, "blocked_by_budget": 0, "blocked_by_disruption": 0,
        "breaker_open": False, "draining": 0, "allowed_now": 1, "budget_left_before": 2, "budget_left_after": 1,
        "scores": {"a": 5900.0, "c": 2000.0}, "thresholds": {"a": 4080.0, "c": 4080.0}}),
    "eviction pass, classes (an empty class median kept)": (Kind.EVICTION_PASS, {
        "hour": 48, "rule": "below-median", "window": "hour", "judged": 0, "candidates": [], "evicted": [],
        "median_score_tps": float("nan"), "threshold_tps": float("nan"), "blocked_by_budget": 0, "blocked_by_disruption": 0,
        "breaker_open": True, "draining": 0, "allowed_now": 0, "budget_left_before": 2, "budget_left_after": 2,
        "scores": {}, "thresholds": {}, "class_median_score_tps": {}}),
    "evict": (Kind.EVICT, {"hour": 24, "score_tps": 2000.0, "tokens_per_usd": 1.0, "window": "hour", "threshold_tps": 4080.0,
                           "median_score_tps": 5100.0, "budget_left": 1}),
    "release": (Kind.RELEASE, {"hour": 24, "score_tps": 3000.0, "window": "day"}),
    "add": (Kind.ADD, {"hour": 24, "score_tps": 5500.0, "window": "day", "tokens_per_usd": 3.5}),
    "act-failed": (Kind.ACT_FAILED, {"decision_key": "1:add:a", "decision_id": 7, "decision_kind": "add", "hour_ts": 3600,
                                     "tries": 3, "first_try_ts": 3700.0, "outcome": "permanent", "error": "exited 1"}),
    "act-expired": (Kind.ACT_EXPIRED, {"decision_key": "1:add:a", "decision_id": 7, "decision_kind": "add", "hour_ts": 3600}),
    "reconcile, seen": (Kind.RECONCILE, {"mismatch": "silent", "state": "seen", "since_ts": 9000}),
    "reconcile, cleared": (Kind.RECONCILE, {"mismatch": "silent", "state": "cleared", "seen_key": "reconcile:a:silent:9000"}),
    "retire": (Kind.RETIRE, {"by": "ops", "reason": "burnt out"}),
}


@pytest.mark.parametrize("kind, detail", STORED.values(), ids=list(STORED))
def test_a_stored_detail_reads_back_to_itself(kind, detail):
    record = record_of(kind, detail)
    assert type(record) is RECORDS[kind]
    got = record.to_detail()
    assert list(got) == list(detail)  # the order it was written in (`fleet plan --json` prints it so)
    assert json.dumps(got, sort_keys=True) == json.dumps(detail, sort_keys=True)  # as the store keeps it


def test_every_kind_has_a_record_and_every_field_a_default():
    assert set(RECORDS) == set(Kind)
    for cls in set(RECORDS.values()):
        for f in fields(cls):
            assert f.default is not MISSING or f.default_factory is not MISSING, f"{cls.__name__}.{f.name}"
        assert cls.from_detail(None) == cls.from_detail({}) == cls()


def test_an_older_store_reads_with_defaults_and_unknown_keys_aside():
    size = SizeRecord.from_detail({"hour": 3, "window": "day", "target_tps": 7.0, "written_by_a_later_version": 1})
    assert (size.hour, size.window, size.target_tps) == (3, "day", 7.0)
    assert (size.demand_tps, size.budget_left, size.held_out_hours, size.knew_demand) == (None, None, {}, False)
    assert math.isnan(size.forecast_tps)
    p = EvictionPassRecord.from_detail({"threshold_tps": 4000.0, "scores": {"a": 1.0}})
    assert p.threshold_of("a") == 4000.0  # no per-card lines stored: the pass's one line


def test_the_bill_jobs_measured_demand_reads_from_the_size_record():
    assert SizeRecord.from_detail({"hour": 0, "demand_measured_tps": 900.0}).demand_measured_tps == 900.0


CLASS_PASS = EvictionPassRecord(median_score_tps=float("nan"), class_median_score_tps={"flagship": 5000.0, "budget": 900.0},
                                threshold_tps=4000.0, thresholds={"a": 720.0}, scores={"a": 500.0, "b": 6000.0, "c": 600.0},
                                candidates=["a", "c"], evicted=["a"])


@pytest.mark.parametrize("card, card_class, threshold, median, verdict", [
    ("a", "budget", 720.0, 900.0, "evicted"),
    ("c", "budget", 4000.0, 900.0, "candidate, not evicted: held back by the budget (month's or cards draining at once)"),
    ("b", "flagship", 4000.0, 5000.0, "kept: at or above the threshold"),
])
def test_a_pass_says_each_cards_line_median_and_verdict(card, card_class, threshold, median, verdict):
    assert (CLASS_PASS.threshold_of(card), CLASS_PASS.median_of(card_class), CLASS_PASS.verdict_of(card)) == (threshold, median, verdict)


def test_an_open_breaker_holds_a_candidate_back():
    p = EvictionPassRecord(candidates=["a"], breaker_open=True, median_score_tps=10.0)
    assert p.verdict_of("a") == "candidate, not evicted: the circuit breaker was open"
    assert p.median_of("any") == 10.0


def test_a_failed_action_writes_its_tries_and_an_expired_one_none():
    closed = SetAsideRecord(decision_key="k", decision_id=1, decision_kind="add", hour_ts=0)
    assert "tries" not in closed.to_detail()
    tried = SetAsideRecord(decision_key="k", decision_id=1, decision_kind="add", hour_ts=0, tries=2, first_try_ts=1.0,
                           outcome="transient", error=None)
    assert tried.to_detail()["error"] is None  # written with the tries, even when empty


def test_rows_and_entries_read_their_record():
    row = JournalRow(1, "r", 0, Kind.RETIRE, "a", "gone", {"by": "ops", "reason": "gone"}, None)
    assert row.record == RetireRecord(by="ops", reason="gone")
    entry = JournalEntry("k", 0, Kind.ADD, "added", "a", detail=AddRecord(hour=1, score_tps=2.0).to_detail())
    assert entry.record.score_tps == 2.0
    assert ReconcileRecord.from_detail({"state": "seen"}).seen
    assert EvictRecord.from_detail({"budget_left": 3}).budget_left == 3
    assert ReleaseRecord.from_detail({"window": "day"}).window == "day"


def test_an_unknown_kind_is_named():
    with pytest.raises(ValueError, match="journal kind 'promote'"):
        record_of("promote", {})


def test_score_keys_are_named_and_stored_as_their_numbers():
    assert (int(ScoreKey.POLICY), int(ScoreKey.IN_DIP)) == (0, -1)
    assert {0: "x"}[ScoreKey.POLICY] == "x"  # a stored row's key finds the named one
    assert [score_key_label(w) for w in (0, -1, 24)] == ["policy", "in_dip", "24"]
