"""`fleet ingest --demand FILE`: a CSV of the pool's measured demand (ts, demand_tps) into the store; exit 0 when
every sample is stored or already there, 2 for a bad file (one `fleet: error:` line naming it, the line and why;
nothing stored), and no other source given with it."""

import json

from storage.repository import open_repository
from tests.cli.test_ingest_statuses import fleet

T0 = 1_767_225_600


def test_a_demand_file_is_stored_once_and_a_bad_one_is_refused_whole(tmp_path):
    db = f"sqlite:///{tmp_path / 's.db'}"
    good = tmp_path / "gateway.csv"
    good.write_text(f"ts,demand_tps\n{T0},5000\n{T0 + 1800},7000\n2026-01-01T01:00:00Z,6000\n")
    p = fleet("ingest", "--demand", str(good), "--db", db, cwd=tmp_path)
    assert (p.returncode, p.stderr) == (0, "")
    assert p.stdout.strip() == f"{good}: read 3 = stored 3 + duplicates 0 + quarantined 0"
    p = fleet("ingest", "--demand", str(good), "--db", db, "--json", cwd=tmp_path)
    assert p.returncode == 0 and json.loads(p.stdout)["duplicates"] == 3
    hours = open_repository(db).demand_hours(T0, T0 + 7200)
    assert [(h.hour_ts, h.offered_tps) for h in hours.values()] == [(T0, 6000.0), (T0 + 3600, 6000.0)]
    cases = {
        "header.csv": ("time,tps\n1,2\n", "line 1: expected the header ts,demand_tps"),
        "negative.csv": (f"ts,demand_tps\n{T0 + 7200},100\n{T0 + 7260},-4\n", "line 3: demand_tps '-4' is not a number >= 0"),
        "when.csv": ("ts,demand_tps\nyesterday,100\n", "line 2: ts 'yesterday' is neither epoch seconds nor an ISO 8601 time"),
        "fields.csv": ("ts,demand_tps\n1,2,3\n", "line 2: expected 2 fields (ts, demand_tps), got 3"),
        "empty.csv": ("ts,demand_tps\n", "no samples after the header"),
    }
    for name, (text, why) in cases.items():
        (tmp_path / name).write_text(text)
        p = fleet("ingest", "--demand", str(tmp_path / name), "--db", db, cwd=tmp_path)
        assert p.returncode == 2, (name, p.stderr)
        assert p.stderr.startswith(f"fleet: error: demand file '{tmp_path / name}': {why}") and p.stderr.count("\n") == 1
    assert len(open_repository(db).demand_hours(T0, T0 + 10 * 3600)) == 2  # nothing of the bad files
    p = fleet("ingest", "--demand", str(tmp_path / "missing.csv"), "--db", db, cwd=tmp_path)
    assert p.returncode == 2 and "cannot read" in p.stderr
    p = fleet("ingest", str(good), "--demand", str(good), "--db", db, cwd=tmp_path)
    assert p.returncode == 2 and "give one of FILE, --watch DIR, --prometheus URL or --demand FILE" in p.stderr
