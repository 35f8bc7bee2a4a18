"""The store: SQLite's pragmas on every connection, writers that wait for each other, and the service's side (on both backends)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from storage import BatchOrigin, ClassSpec, Rejected, SampleBatch, make_engine, open_repository
from storage.service_store import HourFigures, JournalEntry, ServiceStore

T0 = 1_735_689_600


def test_sqlite_pragmas_on_every_connection(tmp_path):
    repo = open_repository(f"sqlite:///{tmp_path / 'p.db'}")
    with repo.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    with pytest.raises(IntegrityError):  # foreign keys are enforced
        with repo.engine.begin() as conn:
            conn.execute(text("INSERT INTO cards (card_key, class_id, registered_ts) VALUES ('x', 999, 0)"))


def test_two_writers_wait_for_each_other(store_url):
    """Writers at once wait for each other: on SQLite the busy timeout makes a second writer wait for the first
    instead of failing with 'database is locked'."""
    url = store_url
    open_repository(url)
    errors = []

    def write(offset):
        try:
            repo = open_repository(url)
            run = repo.begin_run("t", f"d{offset}", 0)
            for part in range(5):
                n = 2000
                i = np.arange(part * n, (part + 1) * n)
                batch = SampleBatch(np.array([f"c{offset}"] * n, dtype=object), T0 + i, np.full(n, 1.0), np.full(n, np.nan), i)
                repo.write_batch(BatchOrigin(run, part, int(i[0]), "t", f"d{offset}"), batch, Rejected(), {f"c{offset}": "k"}, 0)
        except Exception as err:  # noqa: BLE001 - collected and asserted below
            errors.append(err)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert open_repository(url).sample_count() == 3 * 5 * 2000


def _hour(hour_ts: int) -> HourFigures:
    return HourFigures(hour_ts, T0, 6000.0, 6000.0, 6000.0, 5900.0, 1, 3.74, 0.0, 0.0, 3.74, 0, 0)


def test_the_services_side_records_through_the_service_store(new_repo):
    """Scores, the journal with its run-set intervals and retirements, and billed hours, through `ServiceStore`:
    the only way `fleet` writes them."""
    repo = new_repo()
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    repo.declare_cards({"gpu-1": "flagship", "gpu-2": "flagship"}, T0)
    store = ServiceStore(repo.engine)
    store.record_scores([(T0, 24, {"gpu-1": (5900.0, 5700.0), "gpu-2": (6100.0, 5900.0)})])
    store.record_scores([(T0, 24, {"gpu-1": (5800.0, 5600.0)})])  # a rerun replaces
    assert store.scores_at(T0, 24) == {"gpu-1": 5800.0, "gpu-2": 6100.0}

    evict = JournalEntry(f"{T0}:evict:gpu-1", T0, "evict", "below 0.8 x median", "gpu-1", {"score_tps": 5800.0})
    assert store.journal_hour(T0, [evict], {"gpu-2": "sized"}, [], ["gpu-1"])
    assert not store.journal_hour(T0, [evict], {"gpu-2": "sized"}, [], ["gpu-1"])  # an hour is journaled once
    assert store.journal_hour(T0 + 3600, [JournalEntry(f"{T0 + 3600}:size", T0 + 3600, "size", "", acted=True)], {}, ["gpu-2"], [])
    [row] = store.decisions(kinds=["evict"])
    assert (row.kind, row.card_key, row.reason, row.detail, row.acted_ts) == ("evict", "gpu-1", "below 0.8 x median", {"score_tps": 5800.0}, None)
    assert store.intervals(T0, T0 + 7200) == [("gpu-2", T0, T0 + 3600)]
    assert store.run_set_at(T0) == {"gpu-2"} and store.run_set_at(T0 + 3600) == set()
    assert store.retired() == {"gpu-1": T0}

    assert store.record_hours([_hour(T0)], [[("rent", 3.74, "gpu-2")]])
    assert not store.record_hours([_hour(T0)], [[("rent", 3.74, "gpu-2")]])  # an hour is billed once
    assert store.bill_by_part(T0, T0 + 3600) == {"rent": 3.74}
    assert store.hours(T0) == [_hour(T0)]

    with pytest.raises(KeyError, match="unknown card"):
        store.journal_hour(T0 + 7200, [JournalEntry("x", T0 + 7200, "evict", "x", "nope")], {}, [], [])
    assert store.decisions(since_ts=T0 + 7200) == []


def test_scores_from_arrays_and_a_batch_marked_acted(new_repo):
    """The score job's arrays go in as plain rows would (on PostgreSQL by COPY), a repeated (card, hour, window)
    keeps its last row, and a batch of decisions is marked acted in one call, each once."""
    from storage.values import ScoreColumn

    repo = new_repo()
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    keys = ("gpu-1", "gpu-2", "gpu-3")
    repo.declare_cards(dict.fromkeys(keys, "flagship"), T0)
    store = ServiceStore(repo.engine)
    ids = np.array([repo.cards()[k].id for k in keys])
    score = np.array([5900.0, np.nan, 6100.5], dtype=np.float32)
    column = ScoreColumn(keys, ids, np.array([0, 2]), score, np.array([5700.0, 0.0, 5900.25]))
    assert dict(column) == {"gpu-1": (5900.0, 5700.0), "gpu-3": (6100.5, 5900.25)}
    store.record_scores([(T0, 24, column), (T0, 1, {"gpu-2": (10.0, 1.0)}), (T0, 1, {"gpu-2": (20.0, 2.0)})])
    assert store.scores_at(T0, 24) == {"gpu-1": 5900.0, "gpu-3": 6100.5}
    assert store.scores_by_window(T0) == {24: {"gpu-1": 5900.0, "gpu-3": 6100.5}, 1: {"gpu-2": 20.0}}
    store.record_scores([(T0, 24, {"gpu-3": (1.0, 1.0)})])  # a rerun replaces
    assert store.scores_at(T0, 24) == {"gpu-1": 5900.0, "gpu-3": 1.0}
    assert store.last_scored_ts(24, T0, T0 + 3600) == T0

    entries = [JournalEntry(f"{T0}:evict:{k}", T0, "evict", "x", k) for k in keys]
    assert store.journal_hour(T0, entries, {}, [], [])
    rows = store.unacted()
    assert store.mark_acted_many([r.id for r in rows[:2]], T0 + 60) == 2
    assert store.mark_acted_many([r.id for r in rows], T0 + 120) == 1  # the marked two are not marked again
    assert [r.acted_ts for r in store.decisions(kinds=["evict"])] == [T0 + 60, T0 + 60, T0 + 120]
    assert store.unacted() == [] and store.mark_acted_many([], T0) == 0


def test_bad_urls_are_one_line_errors(tmp_path):
    from storage import StoreError

    with pytest.raises(StoreError, match="not a SQLAlchemy URL"):
        make_engine("fleet.db")
    with pytest.raises(StoreError, match="no folder .*such.* to hold it"):
        open_repository(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}")
    assert not (tmp_path / "no").exists()
    (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="junk.db.*not a database"):
        open_repository(f"sqlite:///{tmp_path / 'junk.db'}")
