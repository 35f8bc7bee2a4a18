"""The other sources: a drop folder (each file taken once, a half-written one never read) and a Prometheus range query."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from fleet.ingest import DEFAULT_PROMETHEUS_QUERY, BadSource, IngestSettings, drain_drop_folder, ingest_parsed, pull_prometheus
from tests.fake_prometheus import fake_prometheus
from tests.storage.stored import ingest_runs

NOW = 1_767_225_600
T0 = 1_735_689_600


def settings() -> IngestSettings:
    return IngestSettings(now_ts=NOW)


def _csv(path, rows, age_s=600):
    path.write_text("card_id,ts,tokens_per_s\n" + "".join(f"{c},{t},{v}\n" for c, t, v in rows))
    old = time.time() - age_s
    os.utime(path, (old, old))


def test_drop_folder_takes_each_ready_file_once(tmp_path, new_repo):
    repo = new_repo()
    _csv(tmp_path / "a.csv", [("gpu-1", T0, 100), ("gpu-1", T0 + 60, 200)])
    _csv(tmp_path / "b.csv.part", [("gpu-2", T0, 100)])  # still being written, by convention
    _csv(tmp_path / "c.csv", [("gpu-3", T0, 100)], age_s=0)  # just touched: not settled yet
    (tmp_path / "bad.csv").write_text("card,ts\n1,2\n")
    os.utime(tmp_path / "bad.csv", (time.time() - 600, time.time() - 600))
    (tmp_path / "notes.txt").write_text("not telemetry")

    first = {r.name: r for r in drain_drop_folder(repo, tmp_path, settings, settle_s=30)}
    assert set(first) == {"a.csv", "bad.csv"}
    assert first["a.csv"].report.stored == 2
    assert "missing column" in first["bad.csv"].error
    assert (tmp_path / "done" / "a.csv").is_file() and not (tmp_path / "a.csv").exists()
    assert "missing column" in (tmp_path / "failed" / "bad.csv.error.txt").read_text()
    assert (tmp_path / "b.csv.part").exists() and (tmp_path / "c.csv").exists() and (tmp_path / "notes.txt").exists()
    assert repo.sample_count() == 2

    assert drain_drop_folder(repo, tmp_path, settings, settle_s=30) == []  # nothing is taken twice

    (tmp_path / "b.csv.part").rename(tmp_path / "b.csv")  # the writer is done: an atomic rename
    os.utime(tmp_path / "c.csv", (time.time() - 600, time.time() - 600))
    third = {r.name for r in drain_drop_folder(repo, tmp_path, settings, settle_s=30)}
    assert third == {"b.csv", "c.csv"}
    assert repo.sample_count() == 4
    # the same name dropped again is taken again; its samples are duplicates
    _csv(tmp_path / "a.csv", [("gpu-1", T0, 100), ("gpu-1", T0 + 60, 200)])
    again = drain_drop_folder(repo, tmp_path, settings, settle_s=30)
    assert [(r.name, r.report.duplicates) for r in again] == [("a.csv", 2)]
    assert (tmp_path / "done" / "a.1.csv").is_file()


def test_drop_folder_resumes_a_file_left_in_processing(tmp_path, new_repo):
    repo = new_repo()
    (tmp_path / "processing").mkdir()
    _csv(tmp_path / "processing" / "x.csv", [("gpu-1", T0, 100)], age_s=0)
    out = drain_drop_folder(repo, tmp_path, settings, settle_s=30)
    assert [r.name for r in out] == ["x.csv"] and repo.sample_count() == 1
    assert (tmp_path / "done" / "x.csv").exists()


def test_drop_folder_that_is_not_a_folder(tmp_path, new_repo):
    from fleet.core.scenario import ConfigError

    with pytest.raises(ConfigError, match="not a folder"):
        drain_drop_folder(new_repo(), tmp_path / "nope", settings)


@pytest.fixture
def prometheus():
    with fake_prometheus() as prom:
        yield prom


MATRIX = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [
            {"metric": {"instance": "10.0.0.1:8000"}, "values": [[T0, "5800.5"], [T0 + 60, "5900"], [T0 + 120, "NaN"]]},
            {"metric": {"instance": "10.0.0.2:8000"}, "values": [[T0 + 0.25, "6100"], [T0 + 60, "-1"]]},
            {"metric": {"job": "vllm"}, "values": [[T0, "1"]]},
        ],
    },
}


def test_prometheus_range_query_is_ingested(prometheus, new_repo):
    prometheus.otherwise = MATRIX
    repo = new_repo()
    out = ingest_parsed(repo, pull_prometheus(prometheus.url, DEFAULT_PROMETHEUS_QUERY, T0, T0 + 180, 60), settings())
    path, params = prometheus.requests[0].path, prometheus.requests[0].params
    assert path == "/api/v1/query_range"
    assert params["query"] == ["sum by (instance) (rate(vllm:generation_tokens_total[1m]))"]
    assert (float(params["start"][0]), float(params["end"][0]), params["step"][0]) == (T0, T0 + 180, "60")
    assert (out.read, out.stored, out.quarantined) == (6, 3, 3)
    assert out.reasons == {"non-finite:tokens_per_s": 1, "negative:tokens_per_s": 1, "missing:card_id": 1}
    assert set(repo.cards()) == {"10.0.0.1:8000", "10.0.0.2:8000"}
    again = ingest_parsed(repo, pull_prometheus(prometheus.url, DEFAULT_PROMETHEUS_QUERY, T0, T0 + 180, 60), settings())
    assert (again.stored, again.duplicates) == (0, 3)


def test_prometheus_errors_name_the_source(prometheus, new_repo):
    prometheus.otherwise = {"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}
    prometheus.status = 400
    repo = new_repo()
    with pytest.raises(BadSource, match="HTTP 400: parse error at char 5"):
        ingest_parsed(repo, pull_prometheus(prometheus.url, "rate(", T0, T0 + 60, 60), settings())
    prometheus.status = 200
    prometheus.otherwise = {"status": "success", "data": {"resultType": "vector", "result": []}}
    with pytest.raises(BadSource, match="expected a range query's matrix, got vector"):
        ingest_parsed(repo, pull_prometheus(prometheus.url, "up", T0, T0 + 60, 60), settings())
    with pytest.raises(BadSource, match="cannot reach"):
        ingest_parsed(repo, pull_prometheus("http://127.0.0.1:9", "up", T0, T0 + 60, 60), settings())
    assert ingest_runs(repo.engine) == []


def test_cli_prometheus_and_watch(prometheus, tmp_path, store_url):
    prometheus.otherwise = MATRIX
    db = store_url
    r = subprocess.run(
        [sys.executable, "-m", "fleet.cli.app", "ingest", "--prometheus", prometheus.url, "--start", str(T0), "--end", str(T0 + 180), "--db", db, "--json",
         "--busy-query", ""],  # this fake answers every query with the rate matrix (the busy query: test_ingest_pull_flags.py)
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 3, r.stderr  # 3 of 6 records quarantined
    assert json.loads(r.stdout)["stored"] == 3
    drop = tmp_path / "drop"
    drop.mkdir()
    _csv(drop / "m.csv", [("gpu-1", T0, 100)])
    r = subprocess.run([sys.executable, "-m", "fleet.cli.app", "ingest", "--watch", str(drop), "--once", "--db", db, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert [json.loads(line)["stored"] for line in r.stdout.splitlines()] == [1]
