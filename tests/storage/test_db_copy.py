"""`storage.copy.copy_store`: a whole store into an empty database, any direction, every table's rows and counts."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import inspect, text

from storage import BatchOrigin, ClassSpec, Rejected, SampleBatch, StoreError, current_revision, head_revision, open_repository
from storage.copy import CopyCheckFailed, copy_store
from storage.models import Base
from storage.service_store import HourFigures, JournalEntry, ServiceStore

T0 = 1_735_689_600
FAR_TS = 4_102_444_800  # 2100-01-01, past PostgreSQL's 32-bit integers


def populate(url: str) -> None:
    """A store with rows in every table `fleet` writes through its stores: classes, cards (one retired), two ingest
    runs with a quarantined record and a conflicting duplicate, samples with and without busy fractions, rollups,
    scores, the journal with run-set intervals, billed hours and bills; a timestamp in 2100 among them."""
    repo = open_repository(url)
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0), ClassSpec("bargain", 3030.0, 1442.0)])
    keys = np.array(["gpu-1", "gpu-2", "gpu-3"] * 40, dtype=object)
    ts = T0 + 60 * np.repeat(np.arange(40), 3)
    busy = np.where(np.arange(120) % 2 == 0, 0.5, np.nan)
    for digest, tps in (("d1", 5000.0), ("d2", 5001.0)):  # the second run: every sample a conflicting duplicate
        run = repo.begin_run(f"{digest}.csv", digest, T0)
        repo.write_batch(BatchOrigin(run, 0, 2, f"{digest}.csv", digest), SampleBatch(keys, ts, np.full(120, tps), busy, np.arange(2, 122)),
                         Rejected([1], ["gpu-1,x,1"], ["unparseable:ts"]), {"gpu-1": "flagship", "gpu-2": "flagship", "gpu-3": "bargain"},
                         T0)
        repo.finish_run(run, T0 + 1)
    store = ServiceStore(repo.engine)
    store.record_scores([(T0, 24, {"gpu-1": (5900.0, 5700.0), "gpu-2": (6100.5, 5900.25)})])
    store.journal_hour(T0, [JournalEntry(f"{T0}:evict:gpu-3", T0, "evict", "below 0.8 x median", "gpu-3", {"score_tps": 2000.0})],
                       {"gpu-1": "sized", "gpu-2": "sized"}, [], ["gpu-3"])
    store.journal_hour(FAR_TS, [JournalEntry(f"{FAR_TS}:size", FAR_TS, "size", "", acted=True)], {}, ["gpu-2"], [])
    store.record_hours([HourFigures(T0, T0, 6000.0, 6000.0, 6000.0, 5900.0, 2, 7.48, 0.0, 0.1, 7.38, 1, 0)],
                       [[("rent", 3.74, "gpu-1"), ("rent", 3.74, "gpu-2"), ("churn", 403.5, "gpu-3")]])
    repo.engine.dispose()


def tables_of(url: str) -> dict[str, list[tuple]]:
    """Every table of the models, its rows in key order (the store's whole content)."""
    engine = open_repository(url).engine
    out = {}
    with engine.connect() as conn:
        present = set(inspect(conn).get_table_names())
        for t in Base.metadata.sorted_tables:
            if t.name in present:
                order = ", ".join(c.name for c in t.primary_key.columns)
                cols = ", ".join(c.name for c in t.columns)
                out[t.name] = [tuple(r) for r in conn.execute(text(f"SELECT {cols} FROM {t.name} ORDER BY {order}")).all()]
    engine.dispose()
    return out


def test_a_store_copies_into_an_empty_database_with_every_row(tmp_path, store_url):
    source = f"sqlite:///{tmp_path / 'source.db'}"
    populate(source)
    want = tables_of(source)
    assert sum(1 for rows in want.values() if rows) >= 10  # most tables hold rows

    report = copy_store(source, store_url, batch_rows=7)  # small batches: many of them per table
    assert {t.name: t.rows for t in report.tables} == {name: len(rows) for name, rows in want.items()}
    assert report.revision == head_revision()
    assert tables_of(store_url) == want
    assert current_revision(open_repository(store_url).engine) == current_revision(open_repository(source).engine)

    # The copy takes new rows without colliding with copied ids (PostgreSQL's sequences were moved past them).
    repo = open_repository(store_url)
    run = repo.begin_run("after.csv", "d3", T0)
    assert run == max(r[0] for r in want["ingest_runs"]) + 1
    out = repo.write_batch(BatchOrigin(run, 0, 0, "after.csv", "d3"),
                           SampleBatch(np.array(["gpu-9"], dtype=object), np.array([FAR_TS]), np.array([1.0]), np.array([np.nan]),
                                       np.array([0])), Rejected(), {"gpu-9": "flagship"}, T0)
    assert out.stored == 1


def test_a_copy_goes_back_the_other_way(tmp_path, store_url):
    """Into the backend under test and out of it again into SQLite: the same rows."""
    source = f"sqlite:///{tmp_path / 'source.db'}"
    populate(source)
    copy_store(source, store_url)
    back = f"sqlite:///{tmp_path / 'back.db'}"
    copy_store(store_url, back, batch_rows=5)
    assert tables_of(back) == tables_of(source)


def test_a_non_empty_target_is_refused_and_left_alone(tmp_path, store_url):
    source = f"sqlite:///{tmp_path / 'source.db'}"
    populate(source)
    repo = open_repository(store_url)
    repo.declare_classes([ClassSpec("mine", 1.0, 1.0)])
    with pytest.raises(StoreError, match=r"is not empty \(card_classes has 1 rows\)"):
        copy_store(source, store_url)
    assert list(repo.classes()) == ["mine"]
    with pytest.raises(StoreError, match="same database"):
        copy_store(source, source)
    with pytest.raises(StoreError, match="no such file; nothing to copy"):
        copy_store(f"sqlite:///{tmp_path / 'nothing.db'}", f"sqlite:///{tmp_path / 'other.db'}")
    assert not (tmp_path / "nothing.db").exists() and not (tmp_path / "other.db").exists()
    import sqlite3

    sqlite3.connect(tmp_path / "empty.db").close()  # a SQLite file with no fleet schema
    with pytest.raises(StoreError, match="no fleet schema: nothing to copy"):
        copy_store(f"sqlite:///{tmp_path / 'empty.db'}", f"sqlite:///{tmp_path / 'other.db'}")


def test_a_count_that_differs_fails_the_copy_and_keeps_nothing(tmp_path, store_url, monkeypatch):
    """The count check can fail: a table copied short (one batch lost) is caught, and the copy rolls back."""
    import storage.copy as copy_module

    source = f"sqlite:///{tmp_path / 'source.db'}"
    populate(source)
    real = copy_module._copy_table

    def short(read, write, model, cols, batch_rows):
        if model.name != "scores":
            real(read, write, model, cols, batch_rows)

    monkeypatch.setattr(copy_module, "_copy_table", short)
    with pytest.raises(CopyCheckFailed, match=r"scores: 2 in the source, 0 copied"):
        copy_store(source, store_url)
    assert all(rows == [] for name, rows in tables_of(store_url).items() if name != "alembic_version")
    monkeypatch.setattr(copy_module, "_copy_table", real)
    copy_store(source, store_url)  # an empty store at the source's revision: the copy can be run again
    assert tables_of(store_url) == tables_of(source)
