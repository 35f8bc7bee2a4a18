"""Alembic owns the schema: the models match the migrations, and an old database upgrades with its data."""

from __future__ import annotations

import sqlite3

import numpy as np
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from storage import BatchOrigin, Rejected, SampleBatch, current_revision, head_revision, make_engine, open_repository, upgrade
from storage.models import Base
from tests.storage.stored import ingest_runs, quarantined


def test_models_and_migrations_do_not_drift(store_url):
    url = store_url
    engine = make_engine(url)
    upgrade(url, engine=engine)
    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diffs == []
    assert current_revision(engine) == head_revision()


def test_drift_check_can_fail(store_url):
    """The comparison above sees a missing column: a schema one revision behind differs from the models."""
    url = store_url
    engine = make_engine(url)
    upgrade(url, "0001", engine=engine)
    with engine.connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    kinds = {d[0] if isinstance(d, tuple) else d[0][0] for d in diffs}
    assert "add_column" in kinds


def test_upgrade_from_first_revision_keeps_data(tmp_path):
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    upgrade(url, "0001")
    con = sqlite3.connect(path)
    con.execute("PRAGMA foreign_keys = ON")
    con.executescript(
        """
        INSERT INTO card_classes (id, name, rated_tps, rent_usd_per_month) VALUES (1, 'flagship', 6000, 2690);
        INSERT INTO cards (id, card_key, class_id, registered_ts) VALUES (1, 'gpu-1', 1, 1700000000);
        INSERT INTO ingest_runs (id, source, source_digest, started_ts, finished_ts, read, stored, duplicates, quarantined)
            VALUES (1, 'a.csv', 'ab', 1700000000, 1700000001, 3, 2, 0, 1);
        INSERT INTO ingest_batches (id, run_id, part, first_record, read, stored, duplicates, quarantined, committed_ts)
            VALUES (1, 1, 0, 0, 3, 2, 0, 1, 1700000001);
        INSERT INTO telemetry_samples (card_id, ts, tokens_per_s, busy_fraction, batch_id) VALUES (1, 1700000000, 5800.5, NULL, 1);
        INSERT INTO telemetry_samples (card_id, ts, tokens_per_s, busy_fraction, batch_id) VALUES (1, 1700000060, 6100.0, 0.5, 1);
        INSERT INTO hourly_rollups VALUES (1, 1699999200, 2, 11900.5, 1, 0.5, 6100.0);
        INSERT INTO quarantined_input (batch_id, source, source_digest, record_no, raw_text, reason)
            VALUES (1, 'a.csv', 'ab', 2, 'gpu-1,x,1', 'unparseable:ts');
        """
    )
    con.commit()
    con.close()

    assert upgrade(url) == head_revision() != "0001"

    repo = open_repository(url)
    cols = {c["name"] for c in inspect(repo.engine).get_columns("cards")}
    assert "retired_ts" in cols
    assert repo.sample_count() == 2
    assert repo.cards()["gpu-1"].rated_tps == 6000
    roll = repo.hourly_rollups()
    assert roll["sample_count"].tolist() == [2]
    assert roll["busy_tps"].tolist() == [12200.0]  # 6100 tok/s at half busy
    assert quarantined(repo.engine)["raw_text"].tolist() == ["gpu-1,x,1"]
    assert ingest_runs(repo.engine)[0].stored == 2
    # and the upgraded store takes new batches
    run = repo.begin_run("b.csv", "cd", 1700000100)
    out = repo.write_batch(
        BatchOrigin(run, 0, 0, "b.csv", "cd"),
        SampleBatch(np.array(["gpu-1"], dtype=object), np.array([1700000120]), np.array([6000.0]), np.array([np.nan]), np.array([0])),
        Rejected(), {}, 1700000100,
    )
    assert (out.stored, out.duplicates) == (1, 0)
    assert repo.hourly_rollups()["sample_count"].tolist() == [3]


def test_schema_not_at_head_is_refused(store_url):
    import pytest

    from storage import StoreError

    url = store_url
    upgrade(url, "0001")
    with pytest.raises(StoreError, match="fleet db upgrade"):
        open_repository(url)


def test_scores_rekeyed_by_hour_keep_their_rows(store_url):
    """Revision 0007 keys `scores` by hour first and keeps every row, on SQLite (a rebuilt table) and PostgreSQL."""
    engine = make_engine(store_url)
    upgrade(store_url, "0006", engine=engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO card_classes (id, name, rated_tps, rent_usd_per_month) VALUES (1, 'flagship', 6000, 2690)")
        conn.exec_driver_sql("INSERT INTO cards (id, card_key, class_id, registered_ts) VALUES (1, 'gpu-1', 1, 1700000000)")
        conn.exec_driver_sql("INSERT INTO cards (id, card_key, class_id, registered_ts) VALUES (2, 'gpu-2', 1, 1700000000)")
        conn.exec_driver_sql("INSERT INTO scores VALUES (1, 1700000000, 24, 5900.5, 5700.25)")
        conn.exec_driver_sql("INSERT INTO scores VALUES (2, 1700000000, 24, 6100.0, 5900.0)")
    upgrade(store_url, engine=engine)
    pk = inspect(engine).get_pk_constraint("scores")
    assert pk["constrained_columns"] == ["hour_ts", "window_hours", "card_id"]
    assert [ix["name"] for ix in inspect(engine).get_indexes("scores")] == []
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT card_id, hour_ts, window_hours, score_tps, tokens_per_usd FROM scores "
                                    "ORDER BY card_id").all()
    assert [tuple(r) for r in rows] == [(1, 1700000000, 24, 5900.5, 5700.25), (2, 1700000000, 24, 6100.0, 5900.0)]


def _three_cards_and_a_batch(conn, samples: int) -> None:
    """A class, cards 1-3 and one ingest run and batch (id 901, clear of the sequences) of `samples` samples, written
    at an old revision as its own rows."""
    conn.exec_driver_sql("INSERT INTO card_classes (id, name, rated_tps, rent_usd_per_month) VALUES (1, 'flagship', 6000, 2690)")
    for i in (1, 2, 3):
        conn.exec_driver_sql(f"INSERT INTO cards (id, card_key, class_id, registered_ts) VALUES ({i}, 'gpu-{i}', 1, 1700000000)")
    conn.exec_driver_sql("INSERT INTO ingest_runs (id, source, source_digest, started_ts, read, stored, duplicates, "
                         f"quarantined) VALUES (901, 'a.csv', 'ab', 1700000000, {samples}, {samples}, 0, 0)")
    conn.exec_driver_sql("INSERT INTO ingest_batches (id, run_id, part, first_record, read, stored, duplicates, "
                         f"quarantined, committed_ts) VALUES (901, 901, 0, 0, {samples}, {samples}, 0, 0, 1700000001)")


def test_rollups_rekeyed_by_hour_and_last_heard_filled(store_url):
    """Revision 0008 keys `hourly_rollups` by hour first, keeps every row, indexes them by card, and fills each card's
    last telemetry: its last sample, else the end of its last rolled-up hour (samples pruned), else none."""
    engine = make_engine(store_url)
    upgrade(store_url, "0007", engine=engine)
    with engine.begin() as conn:
        _three_cards_and_a_batch(conn, samples=1)
        conn.exec_driver_sql("INSERT INTO telemetry_samples (card_id, ts, tokens_per_s, busy_fraction, batch_id) "
                             "VALUES (1, 1700000060, 6100.0, NULL, 901)")  # ids clear of the sequences
        conn.exec_driver_sql("INSERT INTO hourly_rollups VALUES (1, 1699999200, 1, 6100.0, 0, 0, 0)")
        conn.exec_driver_sql("INSERT INTO hourly_rollups VALUES (2, 1699999200, 60, 360000.0, 0, 0, 0)")
        conn.exec_driver_sql("INSERT INTO hourly_rollups VALUES (2, 1700002800, 60, 366000.0, 0, 0, 0)")
    upgrade(store_url, engine=engine)
    assert inspect(engine).get_pk_constraint("hourly_rollups")["constrained_columns"] == ["hour_ts", "card_id"]
    assert [ix["column_names"] for ix in inspect(engine).get_indexes("hourly_rollups")] == [["card_id", "hour_ts"]]
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT card_id, hour_ts, sample_count, tokens_per_s_sum FROM hourly_rollups "
                                    "ORDER BY card_id, hour_ts").all()
        heard = dict(conn.exec_driver_sql("SELECT card_key, last_heard_ts FROM cards").all())
    assert [tuple(r) for r in rows] == [(1, 1699999200, 1, 6100.0), (2, 1699999200, 60, 360000.0),
                                        (2, 1700002800, 60, 366000.0)]
    assert heard == {"gpu-1": 1700000060, "gpu-2": 1700002800 + 3599, "gpu-3": None}
    store = open_repository(store_url)
    # A newer sample moves a card's last telemetry on; an older one, stored late, does not move it back.
    for ts, want in ((1700000100, 1700000100), (1700000050, 1700000100)):
        run = store.begin_run(f"b{ts}.csv", f"cd{ts}", ts)
        store.write_batch(BatchOrigin(run, 0, 0, "b.csv", f"cd{ts}"), SampleBatch(np.array(["gpu-1"], dtype=object), np.array([ts]),
                                                 np.array([6000.0]), np.array([np.nan]), np.array([0])), Rejected(), {}, ts)
        with store.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT last_heard_ts FROM cards WHERE id = 1").scalar() == want


def test_revision_0008_downgrades_with_its_rollups_and_upgrades_again(store_url):
    """Down to 0007 the rollups are keyed by card again, with every row, and the added column and indexes are gone;
    up again they are as an upgrade leaves them."""
    from alembic import command

    from storage.db import alembic_config

    engine = make_engine(store_url)
    upgrade(store_url, "0008", engine=engine)
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO card_classes (id, name, rated_tps, rent_usd_per_month) VALUES (1, 'flagship', 6000, 2690)")
        conn.exec_driver_sql("INSERT INTO cards (id, card_key, class_id, registered_ts) VALUES (1, 'gpu-1', 1, 1700000000)")
        conn.exec_driver_sql("INSERT INTO hourly_rollups VALUES (1, 1699999200, 2, 11900.5, 1, 0.5, 6100.0)")
        conn.exec_driver_sql("INSERT INTO hourly_rollups VALUES (1, 1700002800, 1, 6000.0, 0, 0, 0)")
    with engine.begin() as conn:
        command.downgrade(alembic_config(store_url, conn), "0007")
    assert current_revision(engine) == "0007"
    insp = inspect(engine)
    assert insp.get_pk_constraint("hourly_rollups")["constrained_columns"] == ["card_id", "hour_ts"]
    assert insp.get_indexes("hourly_rollups") == []
    assert "last_heard_ts" not in {c["name"] for c in insp.get_columns("cards")}
    assert "ix_run_set_intervals_open" not in {ix["name"] for ix in insp.get_indexes("run_set_intervals")}
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT card_id, hour_ts, sample_count FROM hourly_rollups ORDER BY hour_ts").all()
    assert [tuple(r) for r in rows] == [(1, 1699999200, 2), (1, 1700002800, 1)]
    upgrade(store_url, engine=engine)
    assert inspect(engine).get_pk_constraint("hourly_rollups")["constrained_columns"] == ["hour_ts", "card_id"]
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT last_heard_ts FROM cards").scalar() == 1700002800 + 3599


def test_revision_0009_indexes_the_journal_by_kind_and_keeps_each_cards_last_served(store_url):
    """Revision 0009 indexes the journal by (kind, ts) and fills each card's last sample with tokens (a card that
    sent only zeros, or nothing, has none); ingest moves it on with a newer sample with tokens, never back, and a
    sample without tokens moves only the card's last telemetry. Down to 0008 both are gone; up again they are back."""
    from alembic import command

    from storage.db import alembic_config

    engine = make_engine(store_url)
    upgrade(store_url, "0008", engine=engine)
    with engine.begin() as conn:
        _three_cards_and_a_batch(conn, samples=3)
        for card, ts, tps in ((1, 1700000060, 6100.0), (1, 1700000120, 0.0), (2, 1700000060, 0.0)):
            conn.exec_driver_sql("INSERT INTO telemetry_samples (card_id, ts, tokens_per_s, busy_fraction, batch_id) "
                                 f"VALUES ({card}, {ts}, {tps}, NULL, 901)")
        # Reconcile records: card 1 silent seen then cleared, then still serving; card 2 silent (ids clear of the
        # sequences).
        for i, card, mismatch, state in ((901, 1, "silent", "seen"), (902, 1, "silent", "cleared"),
                                         (903, 1, "still-serving", "seen"), (904, 2, "silent", "seen")):
            conn.exec_driver_sql(
                "INSERT INTO decisions (id, ts, kind, card_id, reason, detail_json, decision_key, acted_ts) VALUES "
                f"({i}, {1700000000 + i}, 'reconcile', {card}, '', '{{\"mismatch\": \"{mismatch}\", \"state\": "
                f"\"{state}\"}}', 'reconcile:{i}', {1700000000 + i})")
    upgrade(store_url, engine=engine)
    assert "ix_decisions_kind_ts" in {ix["name"] for ix in inspect(engine).get_indexes("decisions")}
    with engine.connect() as conn:
        kept = conn.exec_driver_sql("SELECT card_id, mismatch, decision_id FROM reconcile_open ORDER BY card_id").all()
    assert [tuple(r) for r in kept] == [(1, "still-serving", 903), (2, "silent", 904)]

    def last(card: int) -> tuple:
        with engine.connect() as conn:
            return tuple(conn.exec_driver_sql(f"SELECT last_heard_ts, last_served_ts FROM cards WHERE id = {card}").one())

    assert [last(c)[1] for c in (1, 2, 3)] == [1700000060, None, None]
    store = open_repository(store_url)
    for ts, tps, want in ((1700000180, 0.0, (1700000180, 1700000060)), (1700000240, 5000.0, (1700000240, 1700000240)),
                          (1700000200, 5000.0, (1700000240, 1700000240))):
        run = store.begin_run(f"s{ts}.csv", f"ef{ts}", ts)
        store.write_batch(BatchOrigin(run, 0, 0, "s.csv", f"ef{ts}"), SampleBatch(np.array(["gpu-1"], dtype=object), np.array([ts]),
                                                 np.array([tps]), np.array([np.nan]), np.array([0])), Rejected(), {}, ts)
        assert last(1) == want, ts
    store.engine.dispose()
    with engine.begin() as conn:
        command.downgrade(alembic_config(store_url, conn), "0008")
    insp = inspect(engine)
    assert "last_served_ts" not in {c["name"] for c in insp.get_columns("cards")}
    assert "ix_decisions_kind_ts" not in {ix["name"] for ix in insp.get_indexes("decisions")}
    assert "reconcile_open" not in insp.get_table_names()
    upgrade(store_url, engine=engine)
    assert [last(c)[1] for c in (1, 2, 3)] == [1700000240, None, None]


def test_revision_0011_keeps_billed_hours_with_no_goodput_and_downgrades(store_url):
    """An hour billed before revision 0011 has no goodput (NULL: billed with no promise) and reads back as such; a
    billed hour then writes its goodput. Down to 0010 the column is gone with the rows kept; up again it is back."""
    from alembic import command

    from storage.db import alembic_config
    from storage.service_store import ServiceStore
    from storage.values import HourFigures

    engine = make_engine(store_url)
    upgrade(store_url, "0010", engine=engine)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO service_hours (hour_ts, month_start_ts, demand_tps, capacity_tps, delivered_tps, "
            "scored_capacity_tps, cards_warm, warm_usd, churn_usd, idle_usd, ideal_usd, evictions, wrong_evictions, "
            "demand_measured_tps) VALUES (1767225600, 1767225600, 100.0, 120.0, 100.0, 110.0, 2, 7.5, 0.0, 1.25, 3.75, 0, 0, NULL)")
    upgrade(store_url, engine=engine)
    store = ServiceStore(engine)
    (old,) = store.hours(1767225600)
    assert old.goodput_tps is None and old.delivered_tps == 100.0
    new = HourFigures(1767229200, 1767225600, 100.0, 120.0, 100.0, 110.0, 2, 7.5, 0.0, 1.25, 3.75, 0, 0, None, 62.5)
    assert store.record_hours([new], [[("rent", 7.5, None)]])
    assert [h.goodput_tps for h in store.hours(1767225600)] == [None, 62.5]
    with engine.begin() as conn:
        command.downgrade(alembic_config(store_url, conn), "0010")
    assert "goodput_tps" not in {c["name"] for c in inspect(engine).get_columns("service_hours")}
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM service_hours").scalar() == 2
    upgrade(store_url, engine=engine)
    assert [h.goodput_tps for h in store.hours(1767225600)] == [None, None]
