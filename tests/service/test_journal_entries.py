"""`hour_entries`: an hour's journal rows, a pure function of the hour as decided (the core's `Decisions`, the carry and
inputs they were made on) and the run set's change (`run_set_change`), as the decide job journals them."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.carry import Carry
from fleet.core.forecast import DemandView
from fleet.core.step import CardAction, CardDecision, Decisions, EvictionPass, Listed, StepInput, step
from fleet.service.decide import DecidedHour, hour_entries, run_set_change
from fleet.service.pool import PoolIndex
from policies import resolve
from storage.repository import CardInfo, ClassSpec
from tests.conftest import make_scenario

TS = 1_767_225_600 + 24 * 3600
KEYS = ("gpu-a", "gpu-b", "gpu-c", "gpu-d")
INDEX = PoolIndex.build({"flagship": ClassSpec("flagship", 6000.0, 2690.0)},
                        [CardInfo(i + 1, k, "flagship", 6000.0) for i, k in enumerate(KEYS)], 720)
SCORE = np.array([6000.0, 5000.0, 3000.0, 5500.0], dtype=np.float32)
EVICT_SCORE = np.array([5900.0, 5100.0, 2000.0, 5400.0], dtype=np.float32)
RENT = INDEX.rent_usd_per_hour


DEMAND = DemandView(np.array([np.nan]), np.ones(1), np.array([10_000.0]), np.array([12_000.0]), float("nan"), False)


def journal_entries(hour_ts, d, st, index, open_now):
    """The rows `DecideJob.decide_hour` journals for `d`, from the run set the store had open before the hour."""
    carry, inp = st
    return hour_entries(DecidedHour(hour_ts, carry, inp, DEMAND, d), index, run_set_change(d, index, open_now))


def mask(*cards: int) -> np.ndarray:
    m = np.zeros(len(KEYS), dtype=bool)
    m[list(cards)] = True
    return m


def state(run_set=None, hour=24) -> tuple[Carry, StepInput]:
    """(the carry, the hour's inputs) an hour is decided on."""
    return (Carry(eligible=mask(0, 1, 2, 3), budget_left=2, run_set=run_set),
            StepInput(hours=np.array([hour]), score_tps=SCORE[:, None], evict_score_tps=EVICT_SCORE, rent_usd_per_hour=RENT,
                      demand_tps=np.array([10_000.0]), peak_demand_tps=np.array([12_000.0]), pool_cards=4))


def card(kind: str, c: int, reason: str) -> CardDecision:
    return CardDecision(CardAction(kind), 24, c, float(SCORE[c]), float(SCORE[c]) * 3600 / RENT[c], reason)


def evicting(c: int) -> EvictionPass:
    ev = CardDecision(CardAction.EVICT, 24, c, float(EVICT_SCORE[c]), 1.0, f"below-median: {KEYS[c]} scored low")
    return EvictionPass(hour=24, rule="below-median", window="hour", judged=3, candidates=(c,), candidate_median_tps=(5100.0,), evicted=(c,),
                        evictions=(ev,), median_score_tps=5100.0, threshold_tps=4080.0, blocked_by_budget=0,
                        blocked_by_disruption=0, breaker_open=False, draining=0, allowed_now=1, budget_left_before=2,
                        budget_left_after=1, reason="below-median")


def decided(run_set, adds=(), releases=(), eviction=None, out_hours=(0, 0, 0, 0), hour=24) -> Decisions:
    after = Carry(eligible=mask(0, 1, 3) if eviction else mask(0, 1, 2, 3), budget_left=1 if eviction else 2, run_set=run_set,
                  out_hours=np.array(out_hours))
    return Decisions(hour=hour, mode="steady", window="day", target_tps=10_500.0, scored_capacity_tps=11_000.0,
                     next=after, eviction=eviction, changes=Listed(tuple(adds), tuple(releases)), reason="steady: why")


CASES = {
    "the month's first hour: what the store still has open is released": (
        {"gpu-c"}, state(None, hour=0),
        decided(mask(0, 1), adds=[card("add", 0, "added: best a"), card("add", 1, "added: best b")], hour=0),
        [("size", None, "steady: why"), ("release", "gpu-c", "released: not in the run set the month starts with"),
         ("add", "gpu-a", "added: best a"), ("add", "gpu-b", "added: best b")],
    ),
    "nothing changes": (
        {"gpu-a", "gpu-b"}, state(mask(0, 1)), decided(mask(0, 1)), [("size", None, "steady: why")],
    ),
    "a release and an add, each with its decision's reason": (
        {"gpu-a", "gpu-c"}, state(mask(0, 2)),
        decided(mask(0, 1), adds=[card("add", 1, "added: b")], releases=[card("release", 2, "released: c")]),
        [("size", None, "steady: why"), ("release", "gpu-c", "released: c"), ("add", "gpu-b", "added: b")],
    ),
    "an add the decisions do not name says the sizing's reason": (
        {"gpu-a"}, state(mask(0)), decided(mask(0, 1)),
        [("size", None, "steady: why"), ("add", "gpu-b", "added; steady: why")],
    ),
    "an eviction: the pass, the eviction, and no release of the evicted card": (
        {"gpu-a", "gpu-b", "gpu-c"}, state(mask(0, 1, 2)), decided(mask(0, 1), eviction=evicting(2)),
        [("size", None, "steady: why"), ("eviction-pass", None, "below-median"),
         ("evict", "gpu-c", "below-median: gpu-c scored low")],
    ),
    "an eviction and a card added in its place": (
        {"gpu-a", "gpu-b", "gpu-c"}, state(mask(0, 1, 2)),
        decided(mask(0, 1, 3), eviction=evicting(2), adds=[card("add", 3, "added: d")]),
        [("size", None, "steady: why"), ("eviction-pass", None, "below-median"),
         ("evict", "gpu-c", "below-median: gpu-c scored low"), ("add", "gpu-d", "added: d")],
    ),
}


@pytest.mark.parametrize("open_now, st, d, expected", CASES.values(), ids=list(CASES))
def test_entries(open_now, st, d, expected):
    entries = journal_entries(TS, d, st, INDEX, open_now)
    assert [(e.kind, e.card_key, e.reason) for e in entries] == expected
    assert [e.key for e in entries] == [f"{TS}:{e.kind}" + (f":{e.card_key}" if e.card_key else "") for e in entries]
    assert all(e.ts == TS for e in entries)
    assert [e.acted for e in entries] == [e.kind in ("size", "eviction-pass") for e in entries]  # records, nothing to act on
    assert all(e.detail["hour"] == d.hour for e in entries)


def test_size_detail_carries_the_held_hours():
    d = decided(mask(0, 1, 3), out_hours=(0, 0, 0, 2))
    (size, add) = journal_entries(TS, d, state(mask(0, 1, 3)), INDEX, {"gpu-a", "gpu-b"})
    assert size.detail == {"hour": 24, "mode": "steady", "window": "day", "target_tps": 10_500.0, "scored_capacity_tps": 11_000.0,
                           "demand_tps": 10_000.0, "run_set_cards": 3, "budget_left": 2, "held_out_hours": {"gpu-d": 2}}
    assert add.detail == {"hour": 24, "score_tps": 5500.0, "window": "day", "tokens_per_usd": pytest.approx(5500.0 * 3600 / RENT[3])}


def test_eviction_details():
    entries = journal_entries(TS, decided(mask(0, 1), eviction=evicting(2)), state(mask(0, 1, 2)), INDEX, {"gpu-a", "gpu-b", "gpu-c"})
    p, e = entries[1].detail, entries[2].detail
    assert p["scores"] == {"gpu-a": 5900.0, "gpu-b": 5100.0, "gpu-c": 2000.0}  # the run set judged, by the eviction window
    assert p["candidates"] == p["evicted"] == ["gpu-c"]
    assert (p["rule"], p["window"], p["budget_left_before"], p["budget_left_after"], p["breaker_open"]) == ("below-median", "hour", 2, 1, False)
    assert e == {"hour": 24, "score_tps": 2000.0, "tokens_per_usd": 1.0, "window": "hour", "threshold_tps": 4080.0,
                 "median_score_tps": 5100.0, "budget_left": 1}


def test_release_detail_reads_the_state_score():
    (_, release) = journal_entries(TS, decided(mask(0)), state(mask(0, 2)), INDEX, {"gpu-a", "gpu-c"})
    assert release.detail == {"hour": 24, "score_tps": 3000.0, "window": "day"}


def test_run_set_change_closes_evicted_cards_and_retires_them():
    ch = run_set_change(decided(mask(0, 1, 3), eviction=evicting(2)), INDEX, {"gpu-a", "gpu-b", "gpu-c"})
    assert (ch.opened, ch.closed, ch.evicted, ch.run_set) == (("gpu-d",), ("gpu-c",), ("gpu-c",), {"gpu-a", "gpu-b", "gpu-d"})


def test_entries_of_a_real_tick_name_each_of_its_decisions():
    parts = resolve(make_scenario().policy)
    st = state(mask(0, 1, 2))
    d = step(*st, parts)
    assert d.eviction is not None and d.evictions  # hour 24 is a decision hour; gpu-c is far below the median
    entries = journal_entries(TS, d, st, INDEX, {"gpu-a", "gpu-b", "gpu-c"})
    by_kind = {}
    for e in entries:
        by_kind.setdefault(e.kind, []).append(e.card_key)
    assert by_kind["evict"] == [KEYS[c.card] for c in d.evictions]
    assert by_kind.get("add", []) == [KEYS[c.card] for c in d.adds]
    assert by_kind.get("release", []) == [KEYS[c.card] for c in d.releases]
    assert [e.reason for e in entries if e.kind == "evict"] == [c.reason for c in d.evictions]


def test_each_eviction_carries_the_budget_left_after_it():
    """Two evictions in one pass: each record's budget_left is what its own reason says, not the pass's end."""
    from dataclasses import replace

    one, two = (CardDecision(CardAction.EVICT, 24, c, float(EVICT_SCORE[c]), 1.0, f"{KEYS[c]}: budget left after it {left}")
                for c, left in ((2, 4), (3, 3)))
    p = replace(evicting(2), candidates=(2, 3), evicted=(2, 3), evictions=(one, two), budget_left_before=5, budget_left_after=3)
    d = decided(mask(0, 1), eviction=p)
    entries = journal_entries(TS, d, state(mask(0, 1, 2, 3)), INDEX, {"gpu-a", "gpu-b", "gpu-c", "gpu-d"})
    evicts = [e for e in entries if e.kind == "evict"]
    assert [e.detail["budget_left"] for e in evicts] == [4, 3]
    assert all(e.reason.endswith(f"budget left after it {e.detail['budget_left']}") for e in evicts)
