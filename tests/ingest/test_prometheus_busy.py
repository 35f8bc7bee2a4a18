"""The Prometheus pull's busy signal and credentials: the rate and busy answers joined on (card, ts) into records
with busy_fraction, cards named by one label or several, a half-idle card's busy rate, the Authorization header
sent and never shown, and a redirect refused rather than followed."""

from __future__ import annotations

import base64

import pytest

from fleet.core.errors import ConfigError
from fleet.credentials import Credentials
from fleet.ingest import (
    DEFAULT_BUSY_QUERY, DEFAULT_PROMETHEUS_QUERY, BadSource, IngestSettings, busy_query, card_labels, fetch_prometheus,
    ingest_parsed, parse_prometheus, pull_prometheus, rate_query,
)
from storage import sqlite_memory_repository
from tests.fake_prometheus import fake_prometheus, matrix

T0 = 1_767_225_600  # 2026-01-01T00:00Z
NOW = T0 + 2 * 3600
SECRET = "s3cr3t-token-value"


def records(parsed) -> list[dict]:
    (piece,) = list(parsed.batches(10_000))
    cols = {k: v.to_pylist() for k, v in piece.columns.items()}
    return [dict(zip(cols, row)) for row in zip(*cols.values())]


def test_the_default_queries_are_vllm_rate_and_busy_share_by_instance():
    assert DEFAULT_PROMETHEUS_QUERY == "sum by (instance) (rate(vllm:generation_tokens_total[1m]))"
    assert DEFAULT_BUSY_QUERY == "avg_over_time((sum by (instance) (vllm:num_requests_running) > bool 0)[1m:5s])"
    assert rate_query(("Hostname", "gpu"), "5m") == "sum by (Hostname, gpu) (rate(vllm:generation_tokens_total[5m]))"
    assert busy_query("pod", "30s", "1s") == "avg_over_time((sum by (pod) (vllm:num_requests_running) > bool 0)[30s:1s])"
    assert card_labels("instance") == ("instance",) and card_labels(["Hostname", "gpu"]) == ("Hostname", "gpu")
    with pytest.raises(ConfigError, match="card label"):
        card_labels(())


def test_rate_and_busy_answers_are_joined_on_card_and_ts():
    rate = matrix(
        {"metric": {"instance": "a:8000"}, "values": [[T0, "6000"], [T0 + 60, "3000"], [T0 + 120, "10"]]},
        {"metric": {"instance": "b:8000"}, "values": [[T0 + 0.5, "2500"]]},
    )
    busy = matrix(
        {"metric": {"instance": "a:8000"}, "values": [[T0, "1"], [T0 + 60, "0.5"]]},  # none at T0 + 120
        {"metric": {"instance": "b:8000"}, "values": [[T0 + 0.5, "0.25"], [T0 + 60.5, "1"]]},  # a busy point with no rate: dropped
        {"metric": {"instance": "c:8000"}, "values": [[T0, "1"]]},  # a card with no rate at all: dropped
    )
    got = records(parse_prometheus(rate, "prom", "instance", busy))
    assert got == [
        {"card_id": "a:8000", "ts": str(T0), "tokens_per_s": "6000", "busy_fraction": "1"},
        {"card_id": "a:8000", "ts": str(T0 + 60), "tokens_per_s": "3000", "busy_fraction": "0.5"},
        {"card_id": "a:8000", "ts": str(T0 + 120), "tokens_per_s": "10", "busy_fraction": ""},
        {"card_id": "b:8000", "ts": str(T0 + 0.5), "tokens_per_s": "2500", "busy_fraction": "0.25"},
    ]
    assert "busy_fraction" not in records(parse_prometheus(rate, "prom"))[0]  # no busy query: no busy column
    repo = sqlite_memory_repository()
    report = ingest_parsed(repo, parse_prometheus(rate, "prom", "instance", busy), IngestSettings(now_ts=NOW))
    assert (report.read, report.stored, report.quarantined) == (4, 4, 0)
    roll = repo.hourly_rollups().set_index("card_key")
    assert roll.loc["a:8000", "busy_fraction"] == pytest.approx(0.75)  # the two points that carry one
    assert roll.loc["b:8000", "busy_tps"] == pytest.approx(2500 / 0.25)


def test_a_card_named_by_several_labels_and_a_series_lacking_one():
    rate = matrix(
        {"metric": {"Hostname": "node-1", "gpu": "0"}, "values": [[T0, "100"]]},
        {"metric": {"Hostname": "node-1", "gpu": "1"}, "values": [[T0, "200"]]},
        {"metric": {"Hostname": "node-2"}, "values": [[T0, "300"]]},
    )
    busy = matrix(
        {"metric": {"Hostname": "node-1", "gpu": "0"}, "values": [[T0, "0.5"]]},
        {"metric": {"Hostname": "node-1", "gpu": "1"}, "values": [[T0, "0.25"]]},
    )
    got = records(parse_prometheus(rate, "prom", ("Hostname", "gpu"), busy))
    assert [(r["card_id"], r["busy_fraction"]) for r in got] == [("node-1/0", "0.5"), ("node-1/1", "0.25"), ("", "")]
    repo = sqlite_memory_repository()
    report = ingest_parsed(repo, parse_prometheus(rate, "prom", ["Hostname", "gpu"], busy), IngestSettings(now_ts=NOW))
    assert report.reasons == {"missing:card_id": 1} and set(repo.cards()) == {"node-1/0", "node-1/1"}


def test_a_busy_point_two_series_disagree_on_is_not_taken():
    rate = matrix({"metric": {"instance": "a"}, "values": [[T0, "100"]]})
    busy = matrix({"metric": {"instance": "a", "model": "x"}, "values": [[T0, "0.5"]]},
                  {"metric": {"instance": "a", "model": "y"}, "values": [[T0, "1"]]})
    assert records(parse_prometheus(rate, "prom", "instance", busy))[0]["busy_fraction"] == ""


def test_a_half_idle_card_scores_its_busy_rate_not_half_of_it():
    """An hour pulled at one point a minute: card a serves 6,000 tok/s in alternate minutes and idles between, card b
    serves 3,000 tok/s all hour. Both average 3,000 tok/s; per busy second a is twice b, and that is its rate."""
    a_rate = [[T0 + 60 * m, "6000" if m % 2 == 0 else "0"] for m in range(60)]
    a_busy = [[T0 + 60 * m, "1" if m % 2 == 0 else "0"] for m in range(60)]
    rate = matrix({"metric": {"instance": "a"}, "values": a_rate},
                  {"metric": {"instance": "b"}, "values": [[T0 + 60 * m, "3000"] for m in range(60)]})
    busy = matrix({"metric": {"instance": "a"}, "values": a_busy},
                  {"metric": {"instance": "b"}, "values": [[T0 + 60 * m, "1"] for m in range(60)]})
    repo = sqlite_memory_repository()
    ingest_parsed(repo, parse_prometheus(rate, "prom", "instance", busy), IngestSettings(now_ts=NOW))
    roll = repo.hourly_rollups().set_index("card_key")
    assert roll.loc["a", "mean_tps"] == pytest.approx(3000) == roll.loc["b", "mean_tps"]
    assert roll.loc["a", "busy_fraction"] == pytest.approx(0.5)
    assert roll.loc["a", "busy_tps"] == pytest.approx(6000)
    assert roll.loc["b", "busy_tps"] == pytest.approx(3000)


# -- over HTTP ----------------------------------------------------------------------


@pytest.fixture
def server():
    with fake_prometheus() as prom:
        yield prom


def test_both_queries_are_pulled_with_the_configured_bearer_token(server, monkeypatch):
    monkeypatch.setenv("PROM_TOKEN", SECRET)
    server.answers = {
        "tps": matrix({"metric": {"instance": "a"}, "values": [[T0, "4000"], [T0 + 60, "2000"]]}),
        "busy": matrix({"metric": {"instance": "a"}, "values": [[T0, "1"], [T0 + 60, "0.5"]]}),
    }
    repo = sqlite_memory_repository()
    pulled = pull_prometheus(server.url, "tps", T0, T0 + 60, 60, "instance", busy_query="busy",
                             auth=Credentials(bearer_token_env="PROM_TOKEN"))
    report = ingest_parsed(repo, pulled, IngestSettings(now_ts=NOW))
    assert [(r.query, r.authorization) for r in server.requests] == [("tps", f"Bearer {SECRET}"), ("busy", f"Bearer {SECRET}")]
    assert report.stored == 2
    assert repo.hourly_rollups()["busy_tps"].tolist() == [pytest.approx(6000 / 1.5)]


def test_basic_auth_and_no_credentials(server, tmp_path):
    (tmp_path / "pw").write_text(SECRET + "\n")
    fetch_prometheus(server.url, "up", T0, T0 + 60, 60, auth=Credentials(username="fleet", password_file=str(tmp_path / "pw")))
    fetch_prometheus(server.url, "up", T0, T0 + 60, 60)
    assert [r.authorization for r in server.requests] == ["Basic " + base64.b64encode(f"fleet:{SECRET}".encode()).decode(), None]


def test_a_redirect_is_refused_and_the_token_never_goes_on(server, monkeypatch):
    monkeypatch.setenv("PROM_TOKEN", SECRET)
    server.redirect(server.url + "/elsewhere")
    with pytest.raises(BadSource) as err:
        fetch_prometheus(server.url, "up", T0, T0 + 60, 60, auth=Credentials(bearer_token_env="PROM_TOKEN"))
    message = str(err.value)
    assert "HTTP 302" in message and f"{server.url}/elsewhere" in message and "not followed" in message
    assert SECRET not in message
    assert [r.path for r in server.requests] == ["/api/v1/query_range"]  # /elsewhere was never asked


def test_no_secret_in_errors_or_names(server, monkeypatch):
    monkeypatch.delenv("PROM_TOKEN", raising=False)
    with pytest.raises(ConfigError) as err:
        fetch_prometheus(server.url, "up", T0, T0 + 60, 60, auth=Credentials(bearer_token_env="PROM_TOKEN"))
    assert "PROM_TOKEN" in str(err.value) and server.requests == []  # nothing is sent without the secret
    with pytest.raises(ConfigError) as err:
        fetch_prometheus(f"ftp://fleet:{SECRET}@example.org", "up", T0, T0 + 60, 60)
    assert SECRET not in str(err.value)
    monkeypatch.setenv("PROM_TOKEN", SECRET)
    with pytest.raises(BadSource) as err:
        fetch_prometheus("http://127.0.0.1:9", "up", T0, T0 + 60, 60, auth=Credentials(bearer_token_env="PROM_TOKEN"))
    assert "cannot reach" in str(err.value) and SECRET not in str(err.value)


def test_a_card_busy_one_percent_of_an_hour_is_not_scored_as_a_giant():
    """60 tok/s on average from a card busy 1% of the hour would be 6,000 tok/s per busy second; a share that small
    is measured too coarsely to trust, so it counts as the floor's 5%: 1,200 tok/s, never above its true busy rate."""
    rate = matrix({"metric": {"instance": "a"}, "values": [[T0 + 60 * m, "60"] for m in range(60)]})
    busy = matrix({"metric": {"instance": "a"}, "values": [[T0 + 60 * m, "0.01"] for m in range(60)]})
    repo = sqlite_memory_repository()
    ingest_parsed(repo, parse_prometheus(rate, "prom", "instance", busy), IngestSettings(now_ts=NOW))
    assert repo.hourly_rollups()["busy_tps"].tolist() == [pytest.approx(60 / 0.05)]
