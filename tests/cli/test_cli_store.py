"""The command line of the store: `fleet ingest` and `fleet db`, run as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

T0 = 1_735_689_600


def fleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_ingest_json_and_default_database_in_working_folder(tmp_path):
    (tmp_path / "t.csv").write_text(f"card_id,ts,tokens_per_s\ngpu-1,{T0},6000\ngpu-1,{T0 + 60},-3\ngpu-2,{T0},5000\n")
    r = fleet("ingest", "t.csv", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {k: out[k] for k in ("read", "stored", "duplicates", "quarantined", "reasons")} == {
        "read": 3, "stored": 2, "duplicates": 0, "quarantined": 1, "reasons": {"negative:tokens_per_s": 1}
    }
    assert (tmp_path / "fleet.db").is_file()
    again = json.loads(fleet("ingest", "t.csv", "--json", cwd=tmp_path).stdout)
    assert (again["stored"], again["duplicates"], again["quarantined"]) == (0, 2, 1)


def test_bad_file_exits_2_with_one_line_and_no_database(tmp_path):
    (tmp_path / "t.csv").write_text("card_id,when,tokens_per_s\ngpu-1,1,2\n")
    r = fleet("ingest", "t.csv", "--db", f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["fleet: error: 't.csv': missing column ts; unknown column 'when' (expected card_id, ts, tokens_per_s, optionally busy_fraction, card_class)"]
    assert not (tmp_path / "x.db").exists()


def test_bad_pool_file_exits_2(tmp_path):
    (tmp_path / "t.csv").write_text(f"card_id,ts,tokens_per_s\ngpu-1,{T0},6000\n")
    (tmp_path / "pool.toml").write_text('[[classes]]\nname = "flagship"\nrated_tps = -1\n')
    r = fleet("ingest", "t.csv", "--pool", "pool.toml", cwd=tmp_path)
    assert r.returncode == 2 and "pool file 'pool.toml': classes.0.rated_tps: Input should be greater than 0" in r.stderr
    assert not (tmp_path / "fleet.db").exists()


def test_db_upgrade_and_current_from_any_folder(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    up = fleet("db", "upgrade", "--db", url, cwd=elsewhere)
    assert up.returncode == 0, up.stderr
    cur = fleet("db", "current", "--db", url, cwd=elsewhere)
    assert cur.returncode == 0 and cur.stdout.strip().endswith("(head)")
    bad = fleet("db", "current", "--db", "notaurl", cwd=elsewhere)
    assert bad.returncode == 2 and "not a SQLAlchemy URL" in bad.stderr
