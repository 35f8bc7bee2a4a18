"""The decide job's side of the reactive loop, on a store: which of the loop's cards an hour starts with and which
it may not release yet (`fleet.service.reactive.loop_cards`), and the hour's run-set change with them kept
(`fleet.service.decide.held_by_loop`)."""

from __future__ import annotations

import pytest

from fleet.core.scenario import Reactive
from fleet.service.decide import RunSetChange, held_by_loop
from fleet.service.reactive import loop_cards
from storage.records import AddRecord
from storage.repository import sqlite_memory_repository
from storage.service_store import ServiceStore
from storage.values import JournalEntry, Kind

H = 3600
T0 = 100 * H


def _store():
    repo = sqlite_memory_repository()
    repo.declare_cards({k: "flagship" for k in "abcde"}, 0)
    store = ServiceStore(repo.engine)
    store.journal_hour(T0, [JournalEntry(f"{T0}:size", T0, Kind.SIZE, "sized", acted=True),
                            JournalEntry(f"{T0}:add:a", T0, Kind.ADD, "planned", "a", detail=AddRecord(hour=0).to_detail())],
                       {"a": "warm"}, [], [])
    for ts, card in ((T0 + 1200, "b"), (T0 + 3000, "c"), (T0 + H + 600, "d")):
        rec = AddRecord(hour=0, reactive=True, held_until_ts=ts + 90 * 60)
        store.journal_hour(ts, [JournalEntry(f"{ts}:reactive-add:{card}", ts, Kind.ADD, "reactive: ...", card,
                                             detail=rec.to_detail())], {card: "reactive add"}, [], [])
    return store


@pytest.mark.parametrize("hour_ts, cooldown_minutes, joined, held", [
    # 01:00: b (00:20) and c (00:50) joined in the hour before and cool down 90 minutes; d (01:10) is after the
    # hour began: it is open, and held whatever the cool-down.
    (T0 + H, 90, {"b", "c", "d"}, {"b", "c", "d"}),
    (T0 + H, 0, {"b", "c", "d"}, {"d"}),
    # 02:00: b cooled down at 01:50, c cools down at 02:20; d joined in the hour before.
    (T0 + 2 * H, 90, {"d"}, {"c", "d"}),
    (T0 + 3 * H, 90, set(), set()),  # 03:00: d cooled down at 02:40
])
def test_the_loop_cards_an_hour_starts_with(hour_ts, cooldown_minutes, joined, held):
    got = loop_cards(_store(), hour_ts, Reactive(cooldown_minutes=cooldown_minutes))
    assert (set(got.joined), set(got.held)) == (joined, held)


def test_a_plan_added_card_is_no_loop_card_and_no_loop_means_none():
    store = _store()
    assert "a" not in loop_cards(store, T0 + H, Reactive()).held
    assert loop_cards(store, T0 + H, None).held == frozenset()


def test_a_released_loop_card_is_no_longer_held():
    store = _store()
    store.journal_hour(T0 + H, [JournalEntry(f"{T0 + H}:release:b", T0 + H, Kind.RELEASE, "released", "b")], {},
                       ["b"], [])
    assert "b" not in loop_cards(store, T0 + H, Reactive(cooldown_minutes=90)).held


@pytest.mark.parametrize("closed, evicted, held, kept_closed, run_set", [
    (("b", "c"), (), {"b"}, ("c",), {"a", "b"}),
    (("b", "c"), ("b",), {"b"}, ("b", "c"), {"a"}),  # an evicted card leaves, whoever added it
    (("c",), (), {"b"}, ("c",), {"a"}),  # b was not released: nothing to keep
])
def test_the_plan_keeps_what_the_loop_holds(closed, evicted, held, kept_closed, run_set):
    change = RunSetChange(opened=(), closed=closed, evicted=evicted, run_set=frozenset({"a"}))
    got = held_by_loop(change, held)
    assert got.closed == kept_closed and got.run_set == run_set
