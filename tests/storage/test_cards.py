"""The store's side of the reconcile check: which stopped cards still serve tokens. A card released, evicted or
retired by hand is stopped once that took effect; a sample with tokens after it (and recent) means the pool still
runs it, on SQLite and on PostgreSQL."""

from __future__ import annotations

from fleet.ingest import IngestSettings, ingest_parsed, read_file
from storage.cards import retire_card, still_serving
from storage.service_store import ServiceStore
from storage.values import ClassSpec, JournalEntry, Kind

T0 = 1_767_225_600  # 2026-01-01T00:00Z


def test_released_evicted_and_retired_cards_that_still_serve(new_repo, tmp_path):
    repo = new_repo()
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    repo.declare_cards({k: "flagship" for k in ("rel", "ev", "ret", "quiet", "warm")}, T0 - 3600)
    store = ServiceStore(repo.engine)
    store.journal_hour(T0 - 3600, [JournalEntry(f"{T0 - 3600}:size", T0 - 3600, Kind.SIZE, "", acted=True)],
                       dict.fromkeys(("rel", "ev", "ret", "quiet", "warm"), "warm"), [], [])
    entries = [JournalEntry(f"{T0}:release:rel", T0, Kind.RELEASE, "not needed", "rel"),
               JournalEntry(f"{T0}:evict:ev", T0, Kind.EVICT, "below the median", "ev"),
               JournalEntry(f"{T0}:release:quiet", T0, Kind.RELEASE, "not needed", "quiet")]
    store.journal_hour(T0, entries, {}, ["rel", "quiet"], ["ev"])
    ids = [r.id for r in store.decisions(kinds=[Kind.RELEASE, Kind.EVICT])]
    store.mark_acted_many(ids, T0 + 100)
    assert retire_card(repo.engine, "ret", T0 + 200, "burnt out", "ops")
    # Samples: each stopped card but `quiet` serves after it stopped; `quiet` served only before; `warm` was never
    # stopped; `rel` also served before it stopped (the later sample is the one that counts).
    rows = [("rel", T0 + 50, 5000), ("rel", T0 + 2000, 5000), ("ev", T0 + 1800, 4000), ("ret", T0 + 2400, 3000),
            ("quiet", T0 + 60, 5000), ("quiet", T0 + 2500, 0), ("warm", T0 + 2000, 6000)]
    (tmp_path / "t.csv").write_text("card_id,ts,tokens_per_s\n" + "".join(f"{c},{t},{v}\n" for c, t, v in rows))
    ingest_parsed(repo, read_file(tmp_path / "t.csv"), IngestSettings(now_ts=T0 + 3600))

    got = still_serving(repo.engine, T0 - 7200, T0)
    assert got == {"rel": (T0 + 100, T0 + 2000), "ev": (T0 + 100, T0 + 1800), "ret": (T0 + 200, T0 + 2400),
                   "quiet": (T0 + 100, None)}  # `quiet` sent only zeros after it stopped: not serving
    # Only recent serving counts: samples older than `recent_from_ts` are not the pool running the card now.
    assert still_serving(repo.engine, T0 - 7200, T0 + 2100)["ev"] == (T0 + 100, None)


def test_run_set_and_warm_starts_at_an_hour_read_from_the_open_intervals(new_repo):
    """`run_set_at` and `warm_since` read the intervals open at a time (open ones, and ones ending after it) through
    the open-interval index: the same cards as the plain definition, start <= t < end, at every hour asked."""
    from storage.cards import warm_since

    H = 3600
    repo = new_repo()
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    keys = ("a", "b", "c", "d")
    repo.declare_cards(dict.fromkeys(keys, "flagship"), T0 - H)
    store = ServiceStore(repo.engine)
    # a: warm all along; b: warm from hour 1 to 3; c: warm from hour 2, released at 4, warm again from 5; d: never.
    plan = {0: ({"a": "warm"}, []), 1: ({"b": "warm"}, []), 2: ({"c": "warm"}, []), 3: ({}, ["b"]), 4: ({}, ["c"]),
            5: ({"c": "warm"}, [])}
    for h, (opened, closed) in plan.items():
        store.journal_hour(T0 + h * H, [JournalEntry(f"{T0 + h * H}:size", T0 + h * H, Kind.SIZE, "", acted=True)],
                           opened, closed, [])
    spans = {"a": [(0, None)], "b": [(1, 3)], "c": [(2, 4), (5, None)], "d": []}
    for h in range(7):
        t = T0 + h * H
        want = {k: T0 + s * H for k, got in spans.items() for s, e in got if s <= h and (e is None or h < e)}
        assert warm_since(repo.engine, t) == want, h
        assert store.run_set_at(t) == set(want), h
        # A second before the hour: what the hour before left open (an interval ending at the hour still counts).
        assert warm_since(repo.engine, t - 1) == {k: T0 + s * H for k, got in spans.items() for s, e in got
                                                  if s < h and (e is None or e >= h)}, h
