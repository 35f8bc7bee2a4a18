"""`fleet ingest --prometheus`'s pull flags: the busy query (vLLM's by default, "" for none), several card labels,
and credentials from a file or an environment variable, sent as the Authorization header and never shown."""

import base64
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from fleet.ingest import DEFAULT_BUSY_QUERY, DEFAULT_PROMETHEUS_QUERY
from fleet.ingest.prometheus import busy_query, rate_query
from tests.fake_prometheus import fake_prometheus, matrix

T0 = 1735689600
SECRET = "s3cret-token-value"


def _answer(labels: dict):
    """Answers a busy query (one on vLLM's num_requests_running) with busy fractions, any other with rates."""

    def answer(query: str) -> bytes:
        busy = "num_requests_running" in query
        return matrix({"metric": labels, "values": [[T0, "0.5"], [T0 + 60, "1"]] if busy else [[T0, "3000"], [T0 + 60, "6000"]]})

    return answer


@pytest.fixture
def prometheus():
    with fake_prometheus() as prom:
        prom.otherwise = _answer({"instance": "10.0.0.1:8000"})
        yield prom


def pull(url: str, tmp_path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "FLEET_DB"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "fleet.cli.app", "ingest", "--prometheus", url, "--start", str(T0), "--end", str(T0 + 120),
         "--db", f"sqlite:///{tmp_path / 's.db'}", "--json", *args],
        cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=120,
    )


def _busy_stored(tmp_path) -> list:
    with sqlite3.connect(tmp_path / "s.db") as conn:
        return [r[0] for r in conn.execute("SELECT busy_fraction FROM telemetry_samples ORDER BY ts")]


def test_the_default_busy_query_is_pulled_and_stored(prometheus, tmp_path):
    p = pull(prometheus.url, tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["stored"] == 2
    assert [r.query for r in prometheus.requests] == [DEFAULT_PROMETHEUS_QUERY, DEFAULT_BUSY_QUERY]  # on the old main: no busy query
    assert _busy_stored(tmp_path) == [0.5, 1.0]


def test_an_empty_busy_query_pulls_the_rate_alone(prometheus, tmp_path):
    p = pull(prometheus.url, tmp_path, "--busy-query", "")
    assert p.returncode == 0, p.stderr  # on the old main: 2, no such option
    assert [r.query for r in prometheus.requests] == [DEFAULT_PROMETHEUS_QUERY]
    assert _busy_stored(tmp_path) == [None, None]


def test_several_card_labels_name_the_card_and_shape_the_default_queries(prometheus, tmp_path):
    prometheus.otherwise = _answer({"Hostname": "node-7", "gpu": "3"})
    p = pull(prometheus.url, tmp_path, "--card-label", "Hostname", "--card-label", "gpu")
    assert p.returncode == 0, p.stderr  # on the old main: 2 (--card-label given twice), or one label only
    assert [r.query for r in prometheus.requests] == [rate_query(("Hostname", "gpu")), busy_query(("Hostname", "gpu"))]
    with sqlite3.connect(tmp_path / "s.db") as conn:
        assert [r[0] for r in conn.execute("SELECT card_key FROM cards")] == ["node-7/3"]


def test_a_bearer_token_file_is_sent_and_never_shown(prometheus, tmp_path):
    token = tmp_path / "token"
    token.write_text(SECRET + "\n")
    p = pull(prometheus.url, tmp_path, "--bearer-token-file", str(token))
    assert p.returncode == 0, p.stderr  # on the old main: 2, no such option
    assert {r.authorization for r in prometheus.requests} == {f"Bearer {SECRET}"}
    assert SECRET not in p.stdout + p.stderr


def test_basic_auth_from_an_environment_variable(prometheus, tmp_path):
    p = pull(prometheus.url, tmp_path, "--username", "fleet", "--password-env", "PROM_PASSWORD", env={"PROM_PASSWORD": SECRET})
    assert p.returncode == 0, p.stderr
    expected = "Basic " + base64.b64encode(f"fleet:{SECRET}".encode()).decode()
    assert {r.authorization for r in prometheus.requests} == {expected}
    assert SECRET not in p.stdout + p.stderr


@pytest.mark.parametrize("args, reason", [
    (("--username", "fleet"), "basic auth needs username and one of password_file or password_env"),
    (("--bearer-token-env", "A", "--username", "u", "--password-env", "B"), "give a bearer token or basic auth (username and password), not both"),
    (("--password-env", "A", "--password-file", "f"), "give each secret once: a file or an environment variable, not both"),
])
def test_a_bad_combination_of_credentials_is_its_config_error(prometheus, tmp_path, args, reason):
    p = pull(prometheus.url, tmp_path, *args)
    assert p.returncode == 2
    assert len(p.stderr.splitlines()) == 1 and p.stderr.startswith("fleet: error: credentials (") and p.stderr.strip().endswith(reason)
    assert prometheus.requests == [] and not (tmp_path / "s.db").exists()


def test_a_missing_secret_is_named_before_anything_is_pulled_or_created(prometheus, tmp_path):
    p = pull(prometheus.url, tmp_path, "--bearer-token-env", "FLEET_TEST_NO_SUCH_VAR")
    assert p.returncode == 2
    assert p.stderr.splitlines() == ["fleet: error: bearer token: environment variable 'FLEET_TEST_NO_SUCH_VAR' is not set"]
    assert prometheus.requests == [] and not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("args, first", [
    (("--busy-query", "x"), "fleet: error: --busy-query goes with --prometheus"),
    (("--card-label", "gpu"), "fleet: error: --card-label goes with --prometheus"),
    (("--settle", "1"), "fleet: error: --settle goes with --watch"),
])
def test_pull_and_watch_flags_without_their_source_are_refused(tmp_path, args, first):
    f = tmp_path / "t.csv"
    f.write_text("card_id,ts,tokens_per_s\ngpu-1,1735689600,100\n")
    p = subprocess.run([sys.executable, "-m", "fleet.cli.app", "ingest", str(f), "--db", f"sqlite:///{tmp_path / 's.db'}", *args],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.splitlines() == [first]
    assert not (tmp_path / "s.db").exists()
