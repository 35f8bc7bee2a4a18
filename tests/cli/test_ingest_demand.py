"""`fleet ingest --demand FILE` and dropped demand files, held to telemetry's standard: every record stored, a
duplicate or quarantined with its line and reason (exit 0, 3, or 1 when every record was), a file that cannot be read
as a whole one `fleet: error:` line (exit 2, nothing stored), and in a drop folder a bad file in failed/ that never
holds another file back."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from storage.repository import open_repository
from tests.cli.test_ingest_statuses import fleet

T0 = 1_767_225_600  # 2026-01-01T00:00Z

ABSURD = {  # a value or time telemetry would refuse, and its reason
    f"{T0},1e308": "implausible:demand_tps",
    f"{T0 * 1000},5000": "out-of-range:ts",  # epoch milliseconds: the year 57,970
    "2100-01-01T00:00:00Z,5000": "out-of-range:ts",
    "1970-01-01T00:00:00Z,5000": "out-of-range:ts",
    "-5,5000": "out-of-range:ts",
    f"{2**63 - 1},5000": "out-of-range:ts",
    "99999999999999999999999,1000": "out-of-range:ts",
    f"{T0 + 60},-4": "negative:demand_tps",
    f"{T0 + 120},nan": "non-finite:demand_tps",
    f"{T0 + 180},lots": "unparseable:demand_tps",
    "yesterday,100": "unparseable:ts",
    f"{T0 + 240},1,2": "malformed-line",
}


def test_a_demand_file_is_stored_once_and_a_bad_file_is_refused_whole(tmp_path):
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
        "header.csv": ("time,tps\n1,2\n", "missing columns ts, demand_tps"),
        "empty.csv": ("", "empty first line; a CSV demand file starts with a header line (ts, demand_tps)"),
        "binary.csv": (b"ts,demand_tps\n\xff\xfe\x00\x01\n", "not UTF-8 text"),
    }
    for name, (text, why) in cases.items():
        (tmp_path / name).write_bytes(text if isinstance(text, bytes) else text.encode())
        p = fleet("ingest", "--demand", str(tmp_path / name), "--db", db, cwd=tmp_path)
        assert p.returncode == 2, (name, p.stderr)
        assert p.stderr.startswith(f"fleet: error: '{tmp_path / name}': {why}") and p.stderr.count("\n") == 1, p.stderr
    assert len(open_repository(db).demand_hours(T0, T0 + 10 * 3600)) == 2  # nothing of the bad files
    p = fleet("ingest", "--demand", str(tmp_path / "missing.csv"), "--db", db, cwd=tmp_path)
    assert p.returncode == 2 and "no such file" in p.stderr
    p = fleet("ingest", str(good), "--demand", str(good), "--db", db, cwd=tmp_path)
    assert p.returncode == 2 and "give one of FILE, --watch DIR, --prometheus URL or --demand FILE" in p.stderr


def test_a_huge_timestamp_is_quarantined_not_a_traceback(tmp_path):
    """The first thing a new user tried: one line whose time is past any integer, exit 1 with a traceback."""
    (tmp_path / "huge.csv").write_text("ts,demand_tps\n99999999999999999999999,1000\n")
    p = fleet("ingest", "--demand", "huge.csv", "--db", "sqlite:///x.db", cwd=tmp_path)
    assert "Traceback" not in p.stderr
    assert p.returncode == 1 and p.stdout.startswith("huge.csv: read 1 = stored 0 + duplicates 0 + quarantined 1")
    assert p.stderr == "fleet: error: huge.csv: every record was quarantined (1); nothing stored\n"
    rows, n = open_repository(f"sqlite:///{tmp_path / 'x.db'}").quarantined()
    assert n == 1 and (rows[0]["line"], rows[0]["reason"]) == (2, "out-of-range:ts")


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_each_bad_line_is_quarantined_with_its_number_and_reason_whatever_the_line_ends(tmp_path, end):
    lines = [f"{T0 + 3600},6000", *ABSURD, f"{T0 + 7200},7000"]
    (tmp_path / "d.csv").write_text(end.join(["ts,demand_tps", *lines]) + end, newline="")
    db = f"sqlite:///{tmp_path / 's.db'}"
    p = fleet("ingest", "--demand", "d.csv", "--db", db, "--json", cwd=tmp_path)
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr  # some quarantined, the rest stored
    out = json.loads(p.stdout)
    assert (out["read"], out["stored"], out["quarantined"]) == (len(lines), 2, len(ABSURD))
    repo = open_repository(db)
    rows, n = repo.quarantined(limit=100)
    assert n == len(ABSURD)
    assert {r["line"]: r["reason"] for r in rows} == {i + 3: why for i, why in enumerate(ABSURD.values())}
    hours = repo.demand_hours(T0 - 3600, T0 + 4 * 3600)
    assert [(h - T0, d.offered_tps) for h, d in hours.items()] == [(3600, 6000.0), (7200, 7000.0)]


def test_json_lines_demand_is_judged_as_csv_is(tmp_path):
    (tmp_path / "d.jsonl").write_text(json.dumps({"ts": T0, "demand_tps": 5000}) + "\n" + json.dumps({"ts": T0 + 60, "demand_tps": 1e308})
                                      + "\n[1]\n" + json.dumps({"ts": T0 + 120, "demand_tps": 5000, "card_id": "x"}) + "\n")
    p = fleet("ingest", "--demand", "d.jsonl", "--db", "sqlite:///s.db", "--json", cwd=tmp_path)
    assert p.returncode == 3, p.stderr
    assert json.loads(p.stdout)["reasons"] == {"implausible:demand_tps": 1, "not-an-object": 1, "unknown-field": 1}


def test_a_demand_ceiling_follows_the_pools_rated_capacity(tmp_path):
    """Declared: two cards rated 6,000 tok/s; a demand above 5 × 12,000 is quarantined, one below is stored."""
    (tmp_path / "pool.toml").write_text('[[classes]]\nname = "flagship"\nrated_tps = 6000\nrent_usd_per_month = 2000\n'
                                        + "".join(f'[[cards]]\ncard_id = "gpu-{i}"\ncard_class = "flagship"\n' for i in (1, 2)))
    (tmp_path / "t.csv").write_text(f"card_id,ts,tokens_per_s\ngpu-1,{T0},6000\n")
    p = fleet("ingest", "t.csv", "--pool", "pool.toml", "--db", "sqlite:///s.db", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (tmp_path / "d.csv").write_text(f"ts,demand_tps\n{T0},59000\n{T0 + 60},61000\n")
    p = fleet("ingest", "--demand", "d.csv", "--db", "sqlite:///s.db", "--json", cwd=tmp_path)
    assert p.returncode == 3 and json.loads(p.stdout)["reasons"] == {"implausible:demand_tps": 1}, p.stderr


def _drop_folder(drop):
    """Every bad demand file tried beside good telemetry and demand files: {name: where it must go}."""
    files = {
        "good.csv": (f"card_id,ts,tokens_per_s\ngpu-1,{T0},6000\ngpu-2,{T0},5000\n", "done"),
        "gw.demand.csv": (f"ts,demand_tps\n{T0},9000\n", "done"),
        "gw.demand.jsonl": (json.dumps({"ts": T0 + 3600, "demand_tps": 8000}) + "\n", "done"),
        "cr.demand.csv": (f"ts,demand_tps\r{T0 + 7200},7000\r", "done"),
        "huge.demand.csv": ("ts,demand_tps\n99999999999999999999999,1000\n", "done"),  # its line quarantined
        "absurd.demand.csv": ("ts,demand_tps\n" + "\n".join(ABSURD) + "\n", "done"),
        "header.demand.csv": ("time,tps\n1,2\n", "failed"),
        "binary.demand.csv": (b"\x00\xff\xfe garbage", "failed"),
        "empty.demand.jsonl": ("", "done"),
        "nul.demand.jsonl": (b'{"ts": 1}\n\x00\x00\n', "failed"),
        "array.demand.jsonl": ("[1, 2]\n", "failed"),
    }
    for name, (text, _) in files.items():
        (drop / name).write_bytes(text if isinstance(text, bytes) else text.encode())
        os.utime(drop / name, (1, 1))
    return {name: where for name, (_, where) in files.items()}


def _check_moved(drop, where, db):
    for name, folder in where.items():
        assert (drop / folder / name).is_file(), (name, folder)
        assert (drop / "failed" / f"{name}.error.txt").is_file() == (folder == "failed"), name
    assert not any((drop / "processing").iterdir())
    repo = open_repository(db)
    assert repo.sample_count() == 2
    hours = repo.demand_hours(T0, T0 + 3 * 3600)
    assert [(h - T0, d.offered_tps) for h, d in hours.items()] == [(0, 9000.0), (3600, 8000.0), (7200, 7000.0)]
    assert repo.quarantine_reasons()["out-of-range:ts"] == 1 + sum(r == "out-of-range:ts" for r in ABSURD.values())


def test_a_drop_folder_of_every_bad_demand_file_stores_the_good_ones_in_one_once_run(tmp_path):
    drop = tmp_path / "drop"
    drop.mkdir()
    where = _drop_folder(drop)
    db = f"sqlite:///{tmp_path / 's.db'}"
    p = fleet("ingest", "--watch", str(drop), "--once", "--json", "--db", db, cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr  # files went to failed/
    results = {os.path.basename(r["source"]): r for r in map(json.loads, p.stdout.splitlines())}
    assert sorted(results) == sorted(where)
    assert "not UTF-8" in results["binary.demand.csv"]["error"] and "missing columns" in results["header.demand.csv"]["error"]
    _check_moved(drop, where, db)


def test_a_running_watcher_takes_every_good_file_beside_the_bad_demand_files(tmp_path):
    drop = tmp_path / "drop"
    drop.mkdir()
    where = _drop_folder(drop)
    db = f"sqlite:///{tmp_path / 's.db'}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "fleet.cli.app", "ingest", "--watch", str(drop), "--interval", "0.1",
                             "--json", "--db", db], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120  # a guard against a hang, not a measurement
        while not all((drop / f / n).is_file() for n, f in where.items()):
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, "the watcher did not take every file"
            time.sleep(0.1)
        time.sleep(0.5)  # a further pass or two: nothing fails the next time round
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    assert b"Traceback" not in err
    _check_moved(drop, where, db)


def test_a_corrected_hour_is_quarantined_unless_replace_is_asked_and_then_journaled(tmp_path, store_url):
    """A second file with a new value for a stored second: conflicting-duplicate, exit 3, the stored value stands
    (it was "stored 0 + duplicates 1", exit 0); inside one file the same; `--replace` takes it and journals it."""
    (tmp_path / "a.csv").write_text(f"ts,demand_tps\n{T0},5000\n{T0 + 60},5000\n")
    assert fleet("ingest", "--demand", "a.csv", "--db", store_url, cwd=tmp_path).returncode == 0
    (tmp_path / "b.csv").write_text(f"ts,demand_tps\n{T0},7000\n{T0 + 60},5000\n{T0 + 120},6000\n{T0 + 120},6500\n")
    p = fleet("ingest", "--demand", "b.csv", "--db", store_url, "--json", cwd=tmp_path)
    assert p.returncode == 3, p.stderr
    out = json.loads(p.stdout)
    assert (out["stored"], out["duplicates"], out["quarantined"]) == (1, 1, 2)
    assert out["reasons"] == {"conflicting-duplicate": 2} and "replaced" not in out
    repo = open_repository(store_url)
    rows, _ = repo.quarantined(reason="conflicting-duplicate")
    assert sorted(r["line"] for r in rows) == [2, 5]  # the stored second's, then the file's own repeat
    assert repo.demand_hours(T0, T0 + 3600)[T0].offered_tps == pytest.approx(16000 / 3)  # 5000, 5000, 6000: the stored values stand
    (tmp_path / "fix.csv").write_text(f"ts,demand_tps\n{T0},7000\n{T0 + 60},5000\n")
    p = fleet("ingest", "--demand", "fix.csv", "--replace", "--db", store_url, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "replaced             1  stored demand samples, each change journaled" in p.stdout
    assert repo.demand_hours(T0, T0 + 3600)[T0].offered_tps == 6000.0  # 7000, 5000, 6000
    p = fleet("journal", "--db", store_url, "--json", cwd=tmp_path)
    [event] = [e for e in json.loads(p.stdout) if e["kind"] == "demand-correction"]
    assert event["detail"]["changes"] == [[T0, 5000.0, 7000.0]] and event["detail"]["replaced"] == 1
    assert "1 offered demand sample replaced (first at 2026-01-01T00:00:00Z: 5000 -> 7000 tok/s)" in event["reason"]
    p = fleet("ingest", "t.csv", "--replace", "--db", store_url, cwd=tmp_path)
    assert p.returncode == 2 and "--replace goes with --demand" in p.stderr
