"""A killed ingest loses nothing and doubles nothing: SIGKILL `fleet ingest` mid-file a dozen times, run it again each time.

Each kill lands at a chosen point, not at a wall-clock time: the ingest's test hook
(`FLEET_INGEST_TEST_KILL`, see `fleet/ingest/store.py`) makes the process SIGKILL
itself inside batch K's transaction just before its COMMIT (`commit:K`, the batch in
flight) or just after batch K committed (`batch:K`). So every run is killed, and
what is stored after each kill is known exactly.

The killed runs are `fleet ingest` forked from this process (the CLI's own
`main()`, with its imports already paid), so a dozen kills take seconds; the
final run is the installed command in a fresh interpreter.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

T0 = 1_735_689_600
SAMPLES = 24_000
BATCH = 2_000
PARTS = SAMPLES // BATCH + 1  # 12 batches of samples, then one holding the bad record
# (where, K): killed inside batch K's transaction ("commit") or right after batch K committed ("batch").
KILLS = [("commit", 0), ("batch", 0), ("commit", 3), ("commit", 2), ("batch", 4), ("commit", 5),
         ("batch", 7), ("commit", 1), ("commit", 9), ("batch", 9), ("commit", 12), ("batch", 11)]


def _write(path: Path) -> set[tuple[str, int]]:
    cards = 200
    keys = set()
    with open(path, "w") as f:
        f.write("card_id,ts,tokens_per_s,busy_fraction\n")
        for i in range(SAMPLES):
            card, ts = f"gpu-{i % cards:04d}", T0 + (i // cards) * 60
            f.write(f"{card},{ts},{5000 + (i * 7919) % 2000}.5,{(i % 10) / 10}\n")
            keys.add((card, ts))
        f.write("gpu-0000,not-a-time,1,0.5\n")  # one bad record: quarantined once however often it is read
    return keys


def _query(db: Path, sql: str, *args):
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, args).fetchone()
    finally:
        con.close()


def _check_consistent(db: Path) -> tuple[int, int]:
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        samples = con.execute("SELECT COUNT(*) FROM telemetry_samples").fetchone()[0]
        # the rollups moved with the samples, in the same transactions
        rolled = con.execute("SELECT COALESCE(SUM(sample_count), 0) FROM hourly_rollups").fetchone()[0]
        assert rolled == samples
        batches = con.execute("SELECT COALESCE(SUM(stored), 0) FROM ingest_batches").fetchone()[0]
        assert batches == samples
        return samples, con.execute("SELECT COUNT(*) FROM quarantined_input").fetchone()[0]
    finally:
        con.close()


def _fleet_main(argv: list[str], kill_at: str) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.environ["FLEET_INGEST_TEST_KILL"] = kill_at
    sys.argv = ["fleet", *argv]
    from fleet.cli.app import main

    main()


def test_sigkill_at_chosen_points_then_rerun_stores_every_sample_once(tmp_path):
    src = tmp_path / "big.csv"
    keys = _write(src)
    db = tmp_path / "crash.db"
    argv = ["ingest", str(src), "--db", f"sqlite:///{db}", "--batch-size", str(BATCH), "--json"]
    import fleet.cli.app  # noqa: F401 - imported once here, so each forked run starts at once
    import fleet.ingest  # noqa: F401
    import storage.repository  # noqa: F401

    fork = multiprocessing.get_context("fork")
    most_parts = 0  # the most batches any run has committed: the file's first most_parts batches are stored
    for run, (where, k) in enumerate(KILLS, start=1):
        proc = fork.Process(target=_fleet_main, args=(argv, f"{where}:{k}"))
        proc.start()
        proc.join(timeout=120)
        assert proc.exitcode == -signal.SIGKILL, f"run {run} ({where}:{k}) ended with {proc.exitcode}, not killed"
        committed = k if where == "commit" else k + 1  # the batch in flight rolled back with its rollups and counts
        assert _query(db, "SELECT COUNT(*) FROM ingest_batches WHERE run_id = ?", run) == (committed,)
        assert _query(db, "SELECT finished_ts FROM ingest_runs WHERE id = ?", run) == (None,)  # never recorded as done
        most_parts = max(most_parts, committed)
        stored, quarantined = _check_consistent(db)
        assert stored == BATCH * min(most_parts, SAMPLES // BATCH)
        assert quarantined == (1 if most_parts == PARTS else 0)

    final = subprocess.run([sys.executable, "-m", "fleet.cli.app", *argv], capture_output=True, text=True, timeout=120)
    assert final.returncode == 3, final.stderr  # the file holds one unparseable record on purpose
    stored, quarantined = _check_consistent(db)
    assert stored == len(keys) == SAMPLES
    assert quarantined == 1
    con = sqlite3.connect(db)
    got = {(k, ts) for k, ts in con.execute("SELECT c.card_key, s.ts FROM telemetry_samples s JOIN cards c ON c.id = s.card_id")}
    unfinished = con.execute("SELECT COUNT(*) FROM ingest_runs WHERE finished_ts IS NULL").fetchone()[0]
    last = con.execute("SELECT finished_ts IS NOT NULL, read, stored + duplicates + quarantined FROM ingest_runs ORDER BY id DESC LIMIT 1").fetchone()
    con.close()
    assert got == keys
    assert unfinished == len(KILLS)
    assert last == (1, SAMPLES + 1, SAMPLES + 1)
