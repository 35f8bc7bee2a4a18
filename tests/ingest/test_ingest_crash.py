"""A killed ingest loses nothing and doubles nothing: SIGKILL `fleet ingest` mid-file a dozen times, run it again each time.

The killed runs are `fleet ingest` forked from this process (the CLI's own
`main()`, with its imports already paid), so a dozen kills take seconds; the
final run is the installed command in a fresh interpreter.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

T0 = 1_735_689_600
SAMPLES = 24_000
BATCH = 2_000
KILLS = 12


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


def _committed_batches(db: Path, after_run: int) -> int:
    """Batches committed by runs newer than `after_run` (0 before the new run starts)."""
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute("SELECT COUNT(*) FROM ingest_batches WHERE run_id > ?", (after_run,)).fetchone()[0]
    except sqlite3.OperationalError:
        return 0  # schema not there yet
    finally:
        con.close()


def _last_run(db: Path) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT COALESCE(MAX(id), 0) FROM ingest_runs").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
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


def _fleet_main(argv: list[str]) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.argv = ["fleet", *argv]
    from fleet.cli.app import main

    main()


def test_sigkill_at_random_points_then_rerun_stores_every_sample_once(tmp_path):
    src = tmp_path / "big.csv"
    keys = _write(src)
    db = tmp_path / "crash.db"
    argv = ["ingest", str(src), "--db", f"sqlite:///{db}", "--batch-size", str(BATCH), "--json"]
    import fleet.cli.app  # noqa: F401 - imported once here, so each forked run starts at once
    import fleet.ingest  # noqa: F401
    import storage.repository  # noqa: F401

    fork = multiprocessing.get_context("fork")
    rng = random.Random(20250101)
    batches = SAMPLES // BATCH + 1
    killed_mid_write = 0
    for _ in range(KILLS):
        wait_for = rng.randrange(1, batches - 1)  # kill after this many of the run's batches have committed...
        extra_s = rng.uniform(0.0, 0.05)  # ...plus a moment, so the kill lands anywhere inside a batch
        last = _last_run(db)
        proc = fork.Process(target=_fleet_main, args=(argv,))
        proc.start()
        deadline = time.monotonic() + 60
        while _committed_batches(db, last) < wait_for and proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(extra_s)
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=30)
        if proc.exitcode == -signal.SIGKILL:
            killed_mid_write += 1
        stored, _ = _check_consistent(db)
        assert stored <= len(keys)
    assert killed_mid_write >= KILLS - 2, "most kills must land before the ingest ends"

    final = subprocess.run([sys.executable, "-m", "fleet.cli.app", *argv], capture_output=True, text=True, timeout=120)
    assert final.returncode == 0, final.stderr
    stored, quarantined = _check_consistent(db)
    assert stored == len(keys) == SAMPLES
    assert quarantined == 1
    con = sqlite3.connect(db)
    got = {(k, ts) for k, ts in con.execute("SELECT c.card_key, s.ts FROM telemetry_samples s JOIN cards c ON c.id = s.card_id")}
    unfinished = con.execute("SELECT COUNT(*) FROM ingest_runs WHERE finished_ts IS NULL").fetchone()[0]
    last = con.execute("SELECT finished_ts IS NOT NULL, read, stored + duplicates + quarantined FROM ingest_runs ORDER BY id DESC LIMIT 1").fetchone()
    con.close()
    assert got == keys
    # a run killed before its last batch is never recorded as done (one killed after it may be)
    assert KILLS // 2 <= unfinished <= killed_mid_write
    assert last == (1, SAMPLES + 1, SAMPLES + 1)
