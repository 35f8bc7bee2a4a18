"""The repository on SQLite: pragmas on every connection, and the scheduler's side of the interface."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from storage import ClassSpec, Rejected, SampleBatch, make_engine, open_repository, sqlite_memory_repository

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


def test_two_writers_wait_for_each_other(tmp_path):
    """The busy timeout makes a second writer wait for the first instead of failing with 'database is locked'."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
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
                repo.write_batch(run, part, int(i[0]), batch, Rejected(), {f"c{offset}": "k"}, "t", f"d{offset}", 0)
        except Exception as err:  # noqa: BLE001 - collected and asserted below
            errors.append(err)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert open_repository(url).sample_count() == 3 * 5 * 2000


def test_scheduler_side_records():
    repo = sqlite_memory_repository()
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    repo.declare_cards({"gpu-1": "flagship", "gpu-2": "flagship"}, T0)
    repo.record_scores(T0, 24, {"gpu-1": (5900.0, 5700.0), "gpu-2": (6100.0, 5900.0)})
    repo.record_scores(T0, 24, {"gpu-1": (5800.0, 5600.0)})  # a rerun replaces
    repo.journal(T0, "evict", "below 0.8 x median", card_key="gpu-1", detail={"score_tps": 5800.0})
    repo.open_interval("gpu-2", T0, "sized")
    repo.close_interval("gpu-2", T0 + 3600)
    repo.add_bill("rent", 3.74, T0, T0 + 3600, card_key="gpu-2")
    repo.retire_card("gpu-1", T0 + 3600)
    with repo.engine.connect() as conn:
        scores = conn.execute(text("SELECT c.card_key, s.score_tps FROM scores s JOIN cards c ON c.id = s.card_id ORDER BY 1")).all()
        journal = conn.execute(text("SELECT kind, reason, detail_json FROM decisions")).one()
        interval = conn.execute(text("SELECT start_ts, end_ts FROM run_set_intervals")).one()
        bill = conn.execute(text("SELECT kind, usd FROM bills")).one()
        retired = conn.execute(text("SELECT retired_ts FROM cards WHERE card_key = 'gpu-1'")).scalar()
    assert [tuple(s) for s in scores] == [("gpu-1", 5800.0), ("gpu-2", 6100.0)]
    assert journal[:2] == ("evict", "below 0.8 x median") and json.loads(journal[2]) == {"score_tps": 5800.0}
    assert tuple(interval) == (T0, T0 + 3600)
    assert tuple(bill) == ("rent", 3.74)
    assert retired == T0 + 3600
    with pytest.raises(KeyError, match="unknown card"):
        repo.journal(T0, "evict", "x", card_key="nope")


def test_bad_urls_are_one_line_errors(tmp_path):
    from storage import StoreError

    with pytest.raises(StoreError, match="not a SQLAlchemy URL"):
        make_engine("fleet.db")
    with pytest.raises(StoreError, match="unable to open"):
        open_repository(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}")
    (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="junk.db.*not a database"):
        open_repository(f"sqlite:///{tmp_path / 'junk.db'}")
