"""No secret printed: a database URL's password is masked in everything `fleet` prints, logs or writes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

SECRET = "SECRET"
URL = f"postgresql+psycopg://fleet:{SECRET}@127.0.0.1:1/x"  # port 1: nothing listens (or the driver is absent)
MASKED = "postgresql+psycopg://fleet:***@127.0.0.1:1/x"
T0 = 1_735_689_600


def fleet(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    "args",
    [
        ["db", "upgrade", "--db", URL],
        ["db", "current", "--db", URL],
        ["db", "prune", "--raw-older-than", "7", "--db", URL],
        ["ingest", "t.csv", "--db", URL],
        ["replay", "-p", "noise-evictor", "--db", URL, "--json"],
        ["status", "--db", URL],
        ["explain", "gpu-1", "--db", URL],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_database_that_cannot_be_reached_is_one_line_with_the_password_masked(tmp_path, args):
    (tmp_path / "t.csv").write_text(f"card_id,ts,tokens_per_s\ngpu-1,{T0},6000\n")
    p = fleet(*args, cwd=tmp_path)
    assert SECRET not in p.stdout + p.stderr
    assert p.returncode == 2, p.stderr
    [line] = p.stderr.strip().splitlines()
    assert line.startswith("fleet: error: ") and MASKED in line


def test_the_older_schema_error_masks_the_password(tmp_path):
    from storage import StoreError, make_engine, upgrade
    from storage.db import ensure_schema

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    upgrade(url, "0001", engine=engine)
    with pytest.raises(StoreError) as err:
        ensure_schema(engine, URL)  # the engine's database, named by a URL with a password
    assert SECRET not in str(err.value) and MASKED in str(err.value) and "fleet db upgrade" in str(err.value)


def test_db_upgrade_and_prune_print_the_url_masked(tmp_path, monkeypatch):
    """The lines `fleet db upgrade` and `fleet db prune` print name the database: masked. (A SQLite URL cannot
    carry a password, so the password URL's engine is a SQLite file here.)"""
    import storage.db
    import storage.existing
    import storage.repository
    from fleet.cli.app import app

    real = storage.db.make_engine
    sqlite_url = f"sqlite:///{tmp_path / 's.db'}"
    monkeypatch.setattr(storage.db, "make_engine", lambda url, **kw: real(sqlite_url if url == URL else url, **kw))
    monkeypatch.setattr(storage.repository, "make_engine", storage.db.make_engine)
    monkeypatch.setattr(storage.existing, "make_engine", storage.db.make_engine)  # prune looks for the store first
    for args in (["db", "upgrade", "--db", URL], ["db", "upgrade", "--db", URL], ["db", "prune", "--raw-older-than", "7", "--db", URL]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output and MASKED in result.output


def test_replay_json_source_masks_the_password(tmp_path, monkeypatch):
    """`fleet replay --db URL --json` names its source; the month comes from a store of the preset's own month."""
    import fleet.ingest.stored_month as stored_month
    from fleet.cli.app import app
    from fleet.core.month import draw_month
    from fleet.presets import load_preset

    month = draw_month(load_preset("noise-evictor").resolve())
    seen = []
    monkeypatch.setattr(stored_month, "month_from_store", lambda url, scenario, **kw: seen.append(url) or month)
    out = tmp_path / "export"
    result = CliRunner().invoke(app, ["replay", "-p", "noise-evictor", "--db", URL, "--json", "--export", str(out)])
    assert result.exit_code == 0, result.output
    assert seen == [URL]  # the store is opened with the real URL...
    assert json.loads(result.stdout)["source"] == MASKED  # ...and named masked
    assert SECRET not in result.output and SECRET not in (out / "summary.json").read_text()
