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
    assert r.returncode == 3, r.stderr  # 1 of 3 records quarantined: stored, with the status that says so
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
    assert r.stderr.strip().splitlines() == ["fleet: error: 't.csv': missing column ts; unknown column 'when' (expected card_id, ts, tokens_per_s, optionally busy_fraction, card_class, batch_mean, tpot_s, ttft_s, ttft_ok_share)"]
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


def test_db_prune_deletes_old_raw_samples_and_keeps_the_rollups(tmp_path):
    import sqlite3
    import time

    day = 86_400
    now = int(time.time())
    old = now - now % 3600 - 40 * day  # an hour 40 days ago
    rows = "".join(f"gpu-{c},{old + 60 * k},6000\n" for c in range(2) for k in range(3))
    rows += f"gpu-0,{now - now % 3600 - 3600},6000\n"  # an hour ago: kept
    (tmp_path / "t.csv").write_text("card_id,ts,tokens_per_s\n" + rows)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert fleet("ingest", "t.csv", "--db", url, cwd=tmp_path).returncode == 0
    r = fleet("db", "prune", "--raw-older-than", "30", "--db", url, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["samples"], out["cards"]) == (6, 2)
    assert out["before_ts"] % 3600 == 0 and old + 3600 <= out["before_ts"] <= now - 30 * day
    con = sqlite3.connect(tmp_path / "store.db")
    assert con.execute("SELECT COUNT(*) FROM telemetry_samples").fetchone()[0] == 1
    assert con.execute("SELECT SUM(sample_count) FROM hourly_rollups").fetchone()[0] == 7
    con.close()
    text = fleet("db", "prune", "--raw-older-than", "30", "--db", url, cwd=tmp_path)
    assert text.returncode == 0 and "deleted 0 raw samples of 0 cards from hours before" in text.stdout
    again = json.loads(fleet("ingest", "t.csv", "--db", url, "--json", cwd=tmp_path).stdout)
    assert (again["stored"], again["duplicates"]) == (0, 7)  # the pruned hour's samples are not stored again


def test_db_prune_bad_age_is_status_2(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    for age in ("0", "soon"):
        r = fleet("db", "prune", "--raw-older-than", age, "--db", url, cwd=tmp_path)
        assert r.returncode == 2 and "--raw-older-than" in r.stderr, r.stderr
    assert fleet("db", "prune", "--db", url, cwd=tmp_path).returncode == 2
    assert not (tmp_path / "store.db").exists()
