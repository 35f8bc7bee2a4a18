"""A populated store at revision 0003 (32-bit timestamps on PostgreSQL) upgrades in place on both backends, keeps
its rows, and then takes times past 2038."""

from __future__ import annotations

import numpy as np
from sqlalchemy import inspect, text

from storage import BatchOrigin, Rejected, SampleBatch, head_revision, make_engine, open_repository, upgrade

TS = 1_700_000_000
FAR_TS = 4_102_444_800  # 2100-01-01

ROWS = [  # ids from the sequences: each table's first row is id 1
    ("INSERT INTO card_classes (name, rated_tps, rent_usd_per_month) VALUES ('flagship', 6000, 2690)", {}),
    ("INSERT INTO cards (card_key, class_id, registered_ts) VALUES ('gpu-1', 1, :t)", {"t": TS}),
    ("INSERT INTO ingest_runs (source, source_digest, started_ts, finished_ts, read, stored, duplicates, quarantined) "
     "VALUES ('a.csv', 'ab', :t, :t, 1, 1, 0, 0)", {"t": TS}),
    ("INSERT INTO ingest_batches (run_id, part, first_record, read, stored, duplicates, quarantined, committed_ts) "
     "VALUES (1, 0, 0, 1, 1, 0, 0, :t)", {"t": TS}),
    ("INSERT INTO telemetry_samples (card_id, ts, tokens_per_s, busy_fraction, batch_id) VALUES (1, :t, 5800.5, 0.5, 1)", {"t": TS}),
    ("INSERT INTO hourly_rollups VALUES (1, :h, 1, 5800.5, 1, 0.5, 5800.5)", {"h": TS - TS % 3600}),
    ("INSERT INTO decisions (ts, kind, card_id, reason, detail_json, decision_key) VALUES (:t, 'size', NULL, '', '{}', 'k1')", {"t": TS}),
]


def test_a_populated_0003_store_upgrades_in_place_and_takes_2100(store_url):
    engine = make_engine(store_url)
    upgrade(store_url, "0003", engine=engine)
    with engine.begin() as conn:
        for sql, params in ROWS:
            conn.execute(text(sql), params)
    assert upgrade(store_url, engine=engine) == head_revision()

    repo = open_repository(store_url)
    assert repo.sample_count() == 1 and repo.cards()["gpu-1"].rated_tps == 6000
    assert repo.hourly_rollups()["busy_tps"].tolist() == [11601.0]
    if engine.dialect.name == "postgresql":
        types = {c["name"]: str(c["type"]) for c in inspect(engine).get_columns("telemetry_samples")}
        assert types["ts"] == "BIGINT"
    run = repo.begin_run("far.csv", "cd", FAR_TS)
    out = repo.write_batch(BatchOrigin(run, 0, 0, "far.csv", "cd"), SampleBatch(np.array(["gpu-1"], dtype=object), np.array([FAR_TS]),
                                                  np.array([6000.0]), np.array([np.nan]), np.array([0])), Rejected(), {}, FAR_TS)
    assert out.stored == 1
    with repo.engine.connect() as conn:
        assert conn.execute(text("SELECT MAX(ts) FROM telemetry_samples")).scalar_one() == FAR_TS
