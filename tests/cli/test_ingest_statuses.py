"""`fleet ingest`'s exit statuses (0 all stored, 3 some quarantined, 1 all quarantined, 2 bad input) and
`fleet db current` on a store that is not there (exit 2, nothing created)."""

import json
import os
import subprocess
import sys
from pathlib import Path

HEADER = "card_id,ts,tokens_per_s\n"


def fleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FLEET_DB"}
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _write(path: Path, rows: list[str]) -> Path:
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    os.utime(path, (1, 1))  # long settled, for --watch
    return path


def test_ingest_statuses_tell_all_stored_some_and_all_quarantined(tmp_path):
    db = f"sqlite:///{tmp_path / 's.db'}"
    bad = _write(tmp_path / "bad.csv", ["gpu-1,1735689600,-5"])
    some = _write(tmp_path / "some.csv", ["gpu-1,1735689600,100", "gpu-2,1735689600,-5"])
    p = fleet("ingest", str(bad), "--db", db, cwd=tmp_path)
    assert p.returncode == 1, p.stderr  # on the old main: 0
    assert p.stdout.splitlines()[0] == f"{bad}: read 1 = stored 0 + duplicates 0 + quarantined 1"
    assert p.stderr.strip() == f"fleet: error: {bad}: every record was quarantined (1); nothing stored"
    p = fleet("ingest", str(some), "--db", db, cwd=tmp_path)
    assert p.returncode == 3, p.stderr  # on the old main: 0
    assert p.stdout.splitlines()[0] == f"{some}: read 2 = stored 1 + duplicates 0 + quarantined 1"
    p = fleet("ingest", str(_write(tmp_path / "good.csv", ["gpu-1,1735693200,100"])), "--db", db, cwd=tmp_path)
    assert (p.returncode, p.stderr) == (0, "")
    p = fleet("ingest", str(tmp_path / "good.csv"), "--db", db, cwd=tmp_path)  # all duplicates: nothing wrong
    assert (p.returncode, p.stderr) == (0, "")
    assert "stored 0 + duplicates 1" in p.stdout


def test_watch_once_statuses_and_the_failed_file_named_as_dropped(tmp_path):
    db = f"sqlite:///{tmp_path / 's.db'}"
    drop = tmp_path / "drop"
    drop.mkdir()
    _write(drop / "q.csv", ["gpu-1,1735689600,-5"])
    p = fleet("ingest", "--watch", str(drop), "--once", "--db", db, cwd=tmp_path)
    assert p.returncode == 1, p.stderr  # every record quarantined; on the old main: 0
    (drop / "bad.csv").write_text("card_id,when,tokens_per_s\ngpu-1,1,2\n")
    os.utime(drop / "bad.csv", (1, 1))
    p = fleet("ingest", "--watch", str(drop), "--once", "--db", db, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    line = p.stderr.strip()
    assert line.startswith(f"fleet: error: {str(drop / 'bad.csv')!r}: missing column ts"), line
    assert "processing" not in line and line.endswith("(moved to failed/)")
    assert (drop / "failed" / "bad.csv").is_file()


def test_db_current_on_a_missing_store_creates_nothing_and_is_status_2(tmp_path):
    p = fleet("db", "current", "--db", "sqlite:///typo.db", cwd=tmp_path)
    assert p.returncode == 2  # on the old main: 0, "None (head is …)" and an empty typo.db
    assert p.stderr.splitlines() == ["fleet: error: database 'sqlite:///typo.db': no such file; no store there (nothing was created)"]
    assert not (tmp_path / "typo.db").exists()
    p = fleet("db", "current", "--db", "postgresql+psycopg://fleet:SECRET@127.0.0.1:1/fleet", cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1
    assert "fleet:***@127.0.0.1:1/fleet" in p.stderr and "SECRET" not in p.stderr


def test_db_current_on_a_store_prints_its_revision(tmp_path):
    db = f"sqlite:///{tmp_path / 's.db'}"
    assert fleet("ingest", str(_write(tmp_path / "g.csv", ["gpu-1,1735693200,100"])), "--db", db, cwd=tmp_path).returncode == 0
    p = fleet("db", "current", "--db", db, cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.strip().endswith("(head)"), p.stderr
