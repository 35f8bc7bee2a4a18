"""`fleet db copy`: a served and ingested SQLite store moved into an empty database replays to the same month."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.service.serving import FLEET, TINY_PRESET

EXTRA = "card_id,ts,tokens_per_s,busy_fraction\ngpu-x1,1767225600,5000,0.5\ngpu-x1,1767225660,5100,\ngpu-x1,bad,1,\n"


def fleet(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(FLEET + list(args), capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A SQLite store with a short served month (journal, scores, billed hours, bills, the lease) and an ingest with
    a quarantined record."""
    work = tmp_path_factory.mktemp("copy")
    (work / "tiny.toml").write_text(TINY_PRESET)
    (work / "extra.csv").write_text(EXTRA)
    db = f"sqlite:///{work / 'served.db'}"
    r = fleet("serve", "--simulate", "tiny.toml", "--speed", "1e7", "--exit-when-done", "--db", db, "--metrics-port", "0", cwd=work)
    assert r.returncode == 0, r.stderr
    # `fleet ingest` refuses a simulation's store (a real pool's telemetry would be read as the preset's), so the
    # extra file goes in through the ingest's own function, as the simulated feed's files do.
    from fleet.ingest import IngestSettings, ingest_parsed, read_file
    from storage import open_repository

    repo = open_repository(db)
    report = ingest_parsed(repo, read_file(work / "extra.csv", None),
                           IngestSettings(now_ts=1767225600 + 86400, strict=False, default_class="flagship"))
    repo.engine.dispose()
    assert report.as_json()["quarantined"] == 1 and report.as_json()["stored"] == 2
    r = fleet("ingest", "extra.csv", "--db", db, "--class", "flagship", "--json", cwd=work)
    assert r.returncode == 2 and "holds a simulation of tiny-evictor" in r.stderr  # and the command refuses it
    return work, db


def test_a_copied_store_replays_to_the_same_month(served, store_url):
    work, db = served
    r = fleet("db", "copy", "--from", db, "--to", store_url, "--json", cwd=work)
    assert r.returncode == 0, r.stderr
    copied = json.loads(r.stdout)
    assert copied["tables"]["scores"] > 0 and copied["tables"]["decisions"] > 0 and copied["tables"]["quarantined_input"] == 1
    assert copied["tables"]["telemetry_samples"] == 2
    a = fleet("replay", "-p", "tiny.toml", "--db", db, "--json", cwd=work)
    b = fleet("replay", "-p", "tiny.toml", "--db", store_url, "--json", cwd=work)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    got_a, got_b = json.loads(a.stdout), json.loads(b.stdout)
    assert got_a.pop("source") != got_b.pop("source")
    assert got_a == got_b


def test_a_non_empty_target_is_one_line_and_exit_2(served, store_url):
    work, db = served
    assert fleet("db", "copy", "--from", db, "--to", store_url, cwd=work).returncode == 0
    again = fleet("db", "copy", "--from", db, "--to", store_url, cwd=work)
    assert again.returncode == 2
    [line] = again.stderr.splitlines()
    assert line.startswith("fleet: error: database ") and "is not empty (" in line and "fleet db copy writes into an empty store only" in line
    assert again.stdout == ""


def test_the_copy_prints_every_table_and_its_count(served, tmp_path):
    work, db = served
    r = fleet("db", "copy", "--from", db, "--to", f"sqlite:///{tmp_path / 'c.db'}", cwd=work)
    assert r.returncode == 0, r.stderr
    head, *rows = r.stdout.splitlines()
    assert "every table's count checked" in head
    counts = dict(line.split() for line in rows)
    assert counts["cards"] == "13" and int(counts["hourly_rollups"].replace(",", "")) > 1000
