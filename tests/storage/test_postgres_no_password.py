"""No password in any output, log or file of a run against a PostgreSQL URL that carries one.

Every command that takes `--db` runs against `postgresql+psycopg://USER:PASSWORD@...` (the test server's URL, with
its password), and every byte it printed, logged or wrote is searched for the password: `fleet db upgrade`,
`current`, `prune` and `copy`, `fleet ingest` (the summary and `--json`), `fleet replay --db` (`--json`, `--export`),
a served month with its log, `status`, `explain`, `journal` and `quarantine`, and the older-schema and no-database
errors.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from tests.service.serving import FLEET, TINY_PRESET

CSV = "card_id,ts,tokens_per_s,busy_fraction\ngpu-1,1767225600,5000,0.5\ngpu-1,1767225660,5100,\ngpu-1,bad,1,\n"


def run(work: Path, *args: str, status: int = 0) -> str:
    # Wide lines: a password cut by the console's wrapping would slip past the search.
    r = subprocess.run(FLEET + list(args), capture_output=True, text=True, timeout=300, cwd=work, env={**os.environ, "COLUMNS": "5000"})
    assert r.returncode == status, (args, r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    with (work.parent / "outputs.txt").open("a") as f:  # beside the work folder: the command line holds the password
        f.write(f"$ fleet {args[0]}\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def files_holding(root: Path, secret: bytes) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and secret in p.read_bytes())


@pytest.fixture
def pg_url(pg_server) -> str:
    if pg_server is None:
        pytest.skip("PostgreSQL: no server (FLEET_TEST_PG_URL or --pg-url)")
    if not pg_server.password:
        pytest.skip("the PostgreSQL test server's URL has no password to look for")
    url = pg_server.create()
    yield url
    pg_server.drop(url)


def test_no_password_in_any_output_log_or_file(pg_url, pg_server, tmp_path):
    password = make_url(pg_url).password
    secret = password.encode()
    assert password in pg_url and len(password) >= 4
    work = tmp_path / "work"
    work.mkdir()
    (work / "tiny.toml").write_text(TINY_PRESET)
    (work / "t.csv").write_text(CSV)
    (work / "control.txt").write_text(pg_url)  # the search finds the password where it is
    assert files_holding(work, secret) == ["control.txt"]
    (work / "control.txt").unlink()

    out = run(work, "db", "upgrade", "--db", pg_url)
    assert "***" in out and "schema empty -> " in out
    run(work, "db", "current", "--db", pg_url)
    run(work, "ingest", "t.csv", "--db", pg_url, "--class", "flagship", status=3)  # one record quarantined on purpose
    assert json.loads(run(work, "ingest", "t.csv", "--db", pg_url, "--json", status=3))["duplicates"] == 2
    run(work, "db", "prune", "--raw-older-than", "1", "--db", pg_url)
    run(work, "quarantine", "--db", pg_url)

    served = pg_server.create()
    try:
        log = run(work, "serve", "--simulate", "tiny.toml", "--speed", "1e7", "--exit-when-done", "--db", served, "--metrics-port", "0")
        assert "fleet serve: stopped" in log
        run(work, "status", "--db", served)
        run(work, "journal", "--db", served)
        run(work, "explain", "flagship-00000", "--db", served)
        replay = json.loads(run(work, "replay", "-p", "tiny.toml", "--db", served, "--json"))
        assert "***" in replay["source"]
        run(work, "replay", "-p", "tiny.toml", "--db", served, "--export", "out")
        assert (work / "out" / "summary.json").is_file()
        run(work, "db", "copy", "--from", served, "--to", f"sqlite:///{work / 'copy.db'}")
        run(work, "db", "copy", "--from", f"sqlite:///{work / 'copy.db'}", "--to", served, status=2)  # not empty
    finally:
        pg_server.drop(served)

    old = pg_server.create()
    try:
        run(work, "db", "upgrade", "--db", old, "--revision", "0003")
        err = run(work, "ingest", "t.csv", "--db", old, status=2)
        assert "is at schema revision 0003" in err and "fleet db upgrade --db" in err
        run(work, "replay", "-p", "tiny.toml", "--db", old, status=2)
    finally:
        pg_server.drop(old)
    missing = make_url(pg_url).set(database="fleet_test_no_such_database").render_as_string(hide_password=False)
    run(work, "ingest", "t.csv", "--db", missing, status=2)

    assert files_holding(work, secret) == []
    said = (work.parent / "outputs.txt").read_bytes()
    assert b":***@" in said  # the URLs were shown, masked
    assert secret not in said

