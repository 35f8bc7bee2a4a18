"""The store's side of the reconcile check: which stopped cards still serve tokens. A card released, evicted or
retired by hand is stopped once that took effect; a sample with tokens after it (and recent) means the pool still
runs it, on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest

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
    # `quiet` sent only zeros after it stopped: not serving; `warm` was never stopped.
    assert got == {"rel": (T0 + 100, T0 + 2000), "ev": (T0 + 100, T0 + 1800), "ret": (T0 + 200, T0 + 2400)}
    # Only recent serving counts: samples older than `recent_from_ts` are not the pool running the card now.
    assert set(still_serving(repo.engine, T0 - 7200, T0 + 2100)) == {"ret"}
    # A card warm again (the caller's run set) is not stopped, whatever it served.
    assert set(still_serving(repo.engine, T0 - 7200, T0, warm={"rel", "warm"})) == {"ev", "ret"}
    # Stops before the lookback do not count.
    assert still_serving(repo.engine, T0 + 201, T0) == {}


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


# The reads as they were before revision 0009: every stop of the lookback, and every action of the month. Kept as
# the oracles the faster reads are held to.
OLD_STILL_SERVING = (
    "SELECT c.card_key, x.stopped_ts, (SELECT MAX(s.ts) FROM telemetry_samples s WHERE s.card_id = c.id "
    "AND s.ts > x.stopped_ts AND s.ts > :recent AND s.tokens_per_s > 0) "
    "FROM (SELECT card_id, MAX(acted_ts) AS stopped_ts FROM decisions "
    "WHERE kind IN ('release', 'evict', 'retire') AND ts >= :lo AND acted_ts IS NOT NULL "
    "AND card_id IS NOT NULL GROUP BY card_id) x JOIN cards c ON c.id = x.card_id")
OLD_NOT_CARRIED = (
    "SELECT c.card_key, d.id FROM decisions d JOIN cards c ON c.id = d.card_id "
    "WHERE d.id IN (SELECT MAX(a.id) FROM decisions a WHERE a.kind IN ('add', 'release', 'evict') "
    "AND a.ts >= :lo AND a.ts < :hi AND a.card_id IS NOT NULL GROUP BY a.card_id) "
    r"AND EXISTS (SELECT 1 FROM decisions s WHERE s.decision_key IN (d.decision_key || '\:act-failed', "
    r"d.decision_key || '\:act-expired'))")


def _random_pool(repo, tmp_path, seed: int):
    """Eight cards through ten hours of random actions: some carried out, some set aside or expired, some retired by
    hand, and samples with and without tokens around them."""
    import random

    from storage.records import SetAsideRecord

    rng = random.Random(seed)
    keys = [f"gpu-{i}" for i in range(8)]
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    repo.declare_cards(dict.fromkeys(keys, "flagship"), T0 - 3600)
    store = ServiceStore(repo.engine)
    H = 3600
    for h in range(10):
        t = T0 + h * H
        entries = [JournalEntry(f"{t}:size", t, Kind.SIZE, "", acted=True)]
        for key in rng.sample(keys, 4):
            kind = rng.choice([Kind.ADD, Kind.RELEASE, Kind.EVICT])
            entries.append(JournalEntry(f"{t}:{kind}:{key}", t, kind, "random", key))
        store.journal_hour(t, entries, {}, [], [])
        for row in store.decisions(since_ts=t, until_ts=t + 1, kinds=[Kind.ADD, Kind.RELEASE, Kind.EVICT]):
            fate = rng.random()
            if fate < 0.5:
                store.mark_acted_many([row.id], t + rng.randrange(1, 900))
            elif fate < 0.8:
                kind = rng.choice([Kind.ACT_FAILED, Kind.ACT_EXPIRED])
                store.set_aside(JournalEntry(f"{row.key}:{kind}", t + 1200, kind, "random", row.card_key,
                                             detail=SetAsideRecord(decision_key=row.key, decision_id=row.id,
                                                                   decision_kind=row.kind, hour_ts=t).to_detail(),
                                             acted=True))
    for key in rng.sample(keys, 2):
        retire_card(repo.engine, key, T0 + rng.randrange(0, 10 * H), "random", "ops")
    rows = sorted({(rng.choice(keys), T0 + rng.randrange(0, 11 * H), rng.choice([0, 0, 4000, 5500])) for _ in range(80)})
    (tmp_path / f"r{seed}.csv").write_text("card_id,ts,tokens_per_s\n" + "".join(f"{c},{t},{v}\n" for c, t, v in rows))
    ingest_parsed(repo, read_file(tmp_path / f"r{seed}.csv"), IngestSettings(now_ts=T0 + 12 * H))
    return store, keys


def not_carried_out(store, month_start_ts: int, hour_ts: int) -> dict:
    """The rule in Python, over every row of the journal: card -> its last run-set action before `hour_ts`, for each
    card whose last one was set aside or expired (the store's `last_actions_not_carried_out` finds them in SQL)."""
    from storage.values import ACTION_KINDS, SET_ASIDE_KINDS

    rows = store.decisions(since_ts=month_start_ts, limit=1_000_000)
    closed: dict[str, set[str]] = {}
    for rec in rows:
        if rec.kind in SET_ASIDE_KINDS and rec.card_key and rec.record.decision_kind in ACTION_KINDS:
            closed.setdefault(rec.card_key, set()).add(rec.record.decision_key)
    last = {}
    for row in sorted((r for r in rows if r.kind in ACTION_KINDS), key=lambda r: r.id):  # the last one stays
        if row.ts < hour_ts and row.card_key in closed:
            last[row.card_key] = row
    return {card: row for card, row in last.items() if row.key in closed[card]}


@pytest.mark.parametrize("seed", range(4))
def test_the_journal_reads_agree_with_the_reads_they_replace(new_repo, tmp_path, seed):
    """On random journals and samples: the stopped cards still serving and the actions not carried out are those the
    earlier reads (every stop of the lookback, every action of the month) found, and what a plain reading of the
    journal's rows finds (`not_carried_out`, the rule in Python)."""
    import random

    from sqlalchemy import text

    from storage.cards import last_actions_not_carried_out

    repo = new_repo()
    store, keys = _random_pool(repo, tmp_path, seed)
    rng = random.Random(100 + seed)
    H = 3600
    for _ in range(6):
        lo, recent = T0 + rng.randrange(-H, 6 * H), T0 + rng.randrange(0, 11 * H)
        warm = set(rng.sample(keys, rng.randrange(0, 4)))
        with repo.engine.connect() as conn:
            old = conn.execute(text(OLD_STILL_SERVING), {"lo": lo, "recent": recent}).all()
        want = {k: (int(stop), int(served)) for k, stop, served in old if served is not None and k not in warm}
        assert still_serving(repo.engine, lo, recent, warm) == want
        hi = lo + rng.randrange(1, 8 * H)
        with repo.engine.connect() as conn:
            old_ids = dict(conn.execute(text(OLD_NOT_CARRIED), {"lo": lo, "hi": hi}).all())
        got = last_actions_not_carried_out(repo.engine, lo, hi)
        assert {k: r.id for k, r in got.items()} == old_ids
        assert {k: r.id for k, r in not_carried_out(store, lo, hi).items()} == old_ids


@pytest.mark.parametrize("seed", range(3))
def test_open_mismatches_kept_as_written_are_the_fold_over_every_record(new_repo, seed):
    """After each run's reconcile records (mismatches seen and cleared at random, some runs written twice): the
    mismatches the store keeps open are those the fold over every reconcile record finds, on SQLite and PostgreSQL."""
    import random

    from fleet.service.reconcile import RECONCILE_KIND, fold_mismatches, mismatch_entries, open_mismatches
    from fleet.service.reconcile import Mismatch
    from storage.cards import journal_records

    rng = random.Random(seed)
    repo = new_repo()
    keys = [f"gpu-{i}" for i in range(6)]
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    repo.declare_cards(dict.fromkeys(keys, "flagship"), T0)
    store = ServiceStore(repo.engine)
    for run in range(12):
        now = T0 + 3600 * run
        found = [Mismatch(card, kind, now - 60, "random") for card in keys for kind in ("silent", "still-serving")
                 if rng.random() < 0.3]
        entries = mismatch_entries(now, found, open_mismatches(store))
        for _ in range(2 if run % 3 == 0 else 1):  # a run written again changes nothing
            journal_records(repo.engine, entries)
        every = fold_mismatches(store.decisions(kinds=[RECONCILE_KIND], limit=1_000_000))
        kept = open_mismatches(store)
        assert {k: r.id for k, r in kept.items()} == {k: r.id for k, r in every.items()}, run
        assert set(kept) == {(m.card, m.kind) for m in found}, run
