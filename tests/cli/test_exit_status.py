"""Exit statuses that tell the truth, with real faults: 0 ok, 1 a failed write or run-time failure, 2 bad input or
usage, 130 interrupted. A failure is never reported with status 0.

The faults are ones root cannot write through either (CI runs as root): a database opened read-only by its URL
(`mode=ro`), and a write lock another connection holds for the whole command, with a short busy timeout
(`FLEET_DB_BUSY_TIMEOUT`), so the command fails at once and no timing decides the outcome.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from storage.db import upgrade
from tests.signals import sigint_default

T0 = 1_735_689_600


def fleet(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


def _telemetry(path: Path, cards: int = 2, samples: int = 3) -> Path:
    rows = "".join(f"gpu-{c},{T0 + 60 * k},6000\n" for c in range(cards) for k in range(samples))
    path.write_text("card_id,ts,tokens_per_s\n" + rows)
    return path


def _store(path: Path) -> str:
    url = f"sqlite:///{path}"
    upgrade(url)
    return url


def _one_error_line(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    return lines[0]


def test_a_write_to_a_read_only_database_exits_1(tmp_path):
    db = tmp_path / "s.db"
    _store(db)
    src = _telemetry(tmp_path / "t.csv")
    p = fleet("ingest", str(src), "--db", f"sqlite:///file:{db}?mode=ro&uri=true", cwd=tmp_path)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert _one_error_line(p) == "fleet: error: database: read-only: the store refused a write (attempt to write a readonly database)"
    assert p.stdout == ""


def test_a_write_lock_held_past_the_busy_timeout_exits_1(tmp_path):
    db = tmp_path / "s.db"
    url = _store(db)
    src = _telemetry(tmp_path / "t.csv")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # held for the whole command: it cannot get the write lock
    try:
        p = fleet("ingest", str(src), "--db", url, "--json", cwd=tmp_path, env={"FLEET_DB_BUSY_TIMEOUT": "0.2"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert p.returncode == 1, (p.returncode, p.stderr)
    line = _one_error_line(p)
    assert line.startswith("fleet: error: database: database is locked") and "FLEET_DB_BUSY_TIMEOUT" in line
    assert p.stdout == ""  # no report of an ingest that did not happen


def test_a_lock_on_a_new_store_at_first_use_exits_1_not_2(tmp_path):
    """A lock is a run-time failure, not a database that cannot be used: even when it is met opening a new store."""
    db = tmp_path / "new.db"
    src = _telemetry(tmp_path / "t.csv")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        p = fleet("ingest", str(src), "--db", f"sqlite:///{db}", cwd=tmp_path, env={"FLEET_DB_BUSY_TIMEOUT": "0.2"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert _one_error_line(p).startswith("fleet: error: database: database is locked")


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_busy_timeout_is_bad_input(tmp_path, value):
    p = fleet("db", "current", "--db", f"sqlite:///{tmp_path / 's.db'}", cwd=tmp_path, env={"FLEET_DB_BUSY_TIMEOUT": value})
    assert p.returncode == 2
    assert _one_error_line(p).startswith(f"fleet: error: FLEET_DB_BUSY_TIMEOUT {value!r}: ")


def test_a_drop_folder_file_moved_to_failed_is_not_status_0(tmp_path):
    drop = tmp_path / "drop"
    drop.mkdir()
    _telemetry(drop / "good.csv")
    (drop / "bad.csv").write_text("card_id,when,tokens_per_s\ngpu-1,1,2\n")
    p = fleet("ingest", "--watch", str(drop), "--once", "--settle", "0", "--json", "--db", f"sqlite:///{tmp_path / 's.db'}", cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    results = {Path(r["source"]).name: r for r in map(json.loads, p.stdout.splitlines())}
    assert results["good.csv"]["stored"] == 6 and "missing column ts" in results["bad.csv"]["error"]
    assert (drop / "done" / "good.csv").is_file() and (drop / "failed" / "bad.csv").is_file()


@pytest.mark.sigint
def test_ctrl_c_exits_130_and_says_so(tmp_path):
    drop = tmp_path / "drop"
    drop.mkdir()
    _telemetry(drop / "a.csv")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet.cli.app", "ingest", "--watch", str(drop), "--settle", "0", "--interval", "0.05",
         "--json", "--db", f"sqlite:///{tmp_path / 's.db'}"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=sigint_default,  # Ctrl-C as at a terminal, whatever the suite was started with
    )
    try:
        first = proc.stdout.readline()  # the file is in: the command is now in its watch loop
        assert json.loads(first)["stored"] == 6
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "fleet: interrupted"
    assert "Traceback" not in err


def _old_samples(path: Path) -> str:
    """A store with a few samples of an hour long past, for `fleet db prune` to delete."""
    import numpy as np

    from storage import BatchOrigin, Rejected, SampleBatch, open_repository

    url = f"sqlite:///{path}"
    repo = open_repository(url)
    run = repo.begin_run("t", "d", T0)
    batch = SampleBatch(np.array(["gpu-1"] * 3, dtype=object), T0 + 60 * np.arange(3), np.full(3, 6000.0), np.full(3, np.nan), np.arange(3))
    repo.write_batch(BatchOrigin(run, 0, 0, "t", "d"), batch, Rejected(), {"gpu-1": "flagship"}, T0)
    repo.engine.dispose()
    return url


def test_a_prune_refused_by_a_read_only_database_or_a_lock_exits_1(tmp_path):
    db = tmp_path / "s.db"
    url = _old_samples(db)
    ro = fleet("db", "prune", "--raw-older-than", "1", "--db", f"sqlite:///file:{db}?mode=ro&uri=true", cwd=tmp_path)
    assert ro.returncode == 1, ro.stderr
    assert _one_error_line(ro) == "fleet: error: database: read-only: the store refused a write (attempt to write a readonly database)"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        locked = fleet("db", "prune", "--raw-older-than", "1", "--db", url, "--json", cwd=tmp_path, env={"FLEET_DB_BUSY_TIMEOUT": "0.2"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert locked.returncode == 1, locked.stderr
    assert _one_error_line(locked).startswith("fleet: error: database: database is locked") and locked.stdout == ""
    done = fleet("db", "prune", "--raw-older-than", "1", "--db", url, "--json", cwd=tmp_path)
    assert done.returncode == 0 and json.loads(done.stdout)["samples"] == 3
