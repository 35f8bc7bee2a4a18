"""The acceptance at test scale: 100,000 samples with one malformed record in every hundred (bench/ingest_bench.py runs 1,000,000)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/
from bench.telemetry_data import BASE_TS, write_csv  # noqa: E402

from fleet.ingest import IngestSettings, ingest_file  # noqa: E402
from storage import ClassSpec, open_repository  # noqa: E402
from tests.storage.stored import quarantined  # noqa: E402

SAMPLES = 100_000
CARDS = 1000
NOW = 1_767_225_600


def test_one_bad_in_a_hundred_all_valid_stored_all_bad_quarantined_and_again_nothing_new(tmp_path, store_url):
    src = tmp_path / "month.csv"
    expected_reasons = write_csv(src, SAMPLES, cards=CARDS, bad_every=100)
    n_bad = SAMPLES // 100
    repo = open_repository(store_url)
    repo.declare_classes([ClassSpec("flagship", 6000.0, 2690.0)])
    s = IngestSettings(now_ts=NOW, default_class="flagship")

    t = time.perf_counter()
    first = ingest_file(repo, src, s)
    seconds = time.perf_counter() - t
    print(f"\n{SAMPLES:,} records in {seconds:.2f} s: {SAMPLES / seconds:,.0f} records/s")

    assert first.read == SAMPLES == first.stored + first.duplicates + first.quarantined
    assert (first.stored, first.duplicates, first.quarantined) == (SAMPLES - n_bad, 0, n_bad)
    assert first.reasons == expected_reasons
    assert repo.sample_count() == SAMPLES - n_bad
    assert repo.quarantine_reasons() == expected_reasons  # what the service's metrics read

    # every valid record is stored with its value: compare against the file read independently
    lines = src.read_text().splitlines()[1:]
    valid = [ln.split(",") for i, ln in enumerate(lines) if (i + 1) % 100]
    want_tps = np.array([float(v[2]) for v in valid])
    with repo.engine.connect() as conn:
        got = conn.exec_driver_sql("SELECT COUNT(*), SUM(tokens_per_s), MIN(ts), MAX(ts) FROM telemetry_samples").one()
    assert got[0] == len(valid)
    assert abs(got[1] - want_tps.sum()) < 1e-6 * want_tps.sum()
    assert (got[2], got[3]) == (BASE_TS, BASE_TS + (SAMPLES // CARDS - 1) * 60)
    roll = repo.hourly_rollups()
    assert roll["sample_count"].sum() == len(valid)
    # each bad record is quarantined with its raw text and line number
    q = quarantined(repo.engine)
    assert len(q) == n_bad
    assert all(lines[no - 2] == raw for no, raw in zip(q["record_no"], q["raw_text"]))

    again = ingest_file(repo, src, s)
    assert (again.read, again.stored, again.duplicates, again.quarantined) == (SAMPLES, 0, SAMPLES - n_bad, n_bad)
    assert repo.sample_count() == SAMPLES - n_bad
    assert len(quarantined(repo.engine)) == n_bad
    assert repo.hourly_rollups()["sample_count"].sum() == len(valid)
