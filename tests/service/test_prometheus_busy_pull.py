"""The service's Prometheus pull: the rate and busy queries through the ingest's own fetch, with the configured
credentials (never in a log line, never sent on a redirect), and a real Debian Prometheus scraping a stand-in vLLM
exporter, whose half-idle card is measured at its busy rate."""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import textwrap
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleet.ingest import (
    DEFAULT_BUSY_QUERY, DEFAULT_PROMETHEUS_QUERY, BadSource, IngestSettings, busy_query, fetch_prometheus, ingest_parsed, pull_prometheus, rate_query,
)
from fleet.ingest.demand.vllm_queue import DEFAULT_UNSERVED_QUERY
from fleet.service.config import load_service_config
from storage import sqlite_memory_repository
from storage.repository import open_repository
from storage.service_store import ServiceStore
from tests.fake_prometheus import StepClock, fake_prometheus, matrix, reply
from tests.service.serving import wait_for
from fleet.core.units import HOUR_S
from tests.service.real_pool import DAY_MONTH, FLAGSHIP_CLASS

PROMETHEUS = shutil.which("prometheus")
T0 = 1_767_225_600  # 2026-01-01T00:00Z
SECRET = "pull-s3cret-9f1c"


def half_idle_hour(hour_ts: int) -> dict[str, bytes]:
    """One hour at a point a minute, as vLLM's queries answer it: card a serves 6,000 tok/s in alternate minutes and
    idles between; card b serves 3,000 tok/s all hour. Both average 3,000 tok/s."""
    minutes = range(60)
    rate = matrix({"metric": {"instance": "a"}, "values": [[hour_ts + 60 * m, "6000" if m % 2 == 0 else "0"] for m in minutes]},
                  {"metric": {"instance": "b"}, "values": [[hour_ts + 60 * m, "3000"] for m in minutes]})
    busy = matrix({"metric": {"instance": "a"}, "values": [[hour_ts + 60 * m, "1" if m % 2 == 0 else "0"] for m in minutes]},
                  {"metric": {"instance": "b"}, "values": [[hour_ts + 60 * m, "1"] for m in minutes]})
    return {DEFAULT_PROMETHEUS_QUERY: rate, DEFAULT_BUSY_QUERY: busy}


@pytest.fixture
def canned():
    with fake_prometheus() as prom:
        yield prom


POOL_TOML = DAY_MONTH + FLAGSHIP_CLASS + """\
[policy]
card_class = "flagship"
window = "hour"
mode = "steady"
[demand]
avg_tps = 3000
[schedule]
settle_s = 300
"""


def _config(tmp_path, url: str, pool: bool = False):
    (tmp_path / "fleet.toml").write_text((POOL_TOML if pool else "") + textwrap.dedent(f"""\
        [ingest]
        default_class = "flagship"
        [ingest.sources.prometheus]
        prometheus_url = "{url}"
        [ingest.sources.prometheus.auth]
        bearer_token_env = "FLEET_PROM_TOKEN"
        """))
    return load_service_config(tmp_path / "fleet.toml")


def test_the_service_pulls_rate_and_busy_with_its_token_and_logs_no_secret(tmp_path, canned, monkeypatch, caplog):
    from fleet.service.telemetry import IngestJob

    monkeypatch.setenv("FLEET_PROM_TOKEN", SECRET)
    canned.answers = half_idle_hour(T0)
    repo = sqlite_memory_repository()
    job = IngestJob(_config(tmp_path, canned.url), repo, ServiceStore(repo.engine), StepClock(T0 + HOUR_S + 301))
    with caplog.at_level(logging.DEBUG):
        assert job.run() == 120
    # The rate, the busy fraction, and the pool's demand (the part vLLM's queue did not serve), each with the token.
    assert [(r.query, r.authorization) for r in canned.requests] == [
        (DEFAULT_PROMETHEUS_QUERY, f"Bearer {SECRET}"), (DEFAULT_BUSY_QUERY, f"Bearer {SECRET}"), (DEFAULT_UNSERVED_QUERY, f"Bearer {SECRET}")]
    roll = repo.hourly_rollups().set_index("card_key")
    assert roll.loc["a", "busy_tps"] == pytest.approx(6000) and roll.loc["b", "busy_tps"] == pytest.approx(3000)
    assert roll.loc["a", "mean_tps"] == pytest.approx(3000)
    canned.redirect("http://127.0.0.1:9/stolen", 301)
    with caplog.at_level(logging.DEBUG), pytest.raises(BadSource, match="HTTP 301.*not followed") as err:
        job.run()
    assert SECRET not in str(err.value) and SECRET not in caplog.text
    assert [r.path for r in canned.requests][-1] == "/api/v1/query_range"  # the Location was never asked


def test_a_pulled_half_idle_card_scores_its_busy_rate_in_the_service(tmp_path, canned, monkeypatch):
    from fleet.service.service import Service

    monkeypatch.setenv("FLEET_PROM_TOKEN", SECRET)
    canned.answers = half_idle_hour(T0)
    svc = Service(_config(tmp_path, canned.url, pool=True), open_repository(f"sqlite:///{tmp_path / 'p.db'}"), StepClock(T0 + HOUR_S + 301))
    svc.ingest_job()
    svc.score_job()
    scores = svc.journal_store.scores_at(T0 + HOUR_S, 1)  # the hour after the pulled one, through the hour window
    assert scores["b"] == pytest.approx(3000)
    assert scores["a"] == pytest.approx(6000)  # its busy rate, not the 3,000 it averaged


# -- a real Prometheus ----------------------------------------------------------------

PERIOD_S = 2.0  # the stand-in's load cycle: busy the first `duty` of each period, idle the rest


class _VllmStandIn(BaseHTTPRequestHandler):
    """vLLM's two series as a function of the time of the scrape: requests running while busy, and a token counter
    that grows at `busy_tps` while busy, so its rate over whole periods is busy_tps × duty."""

    busy_tps = 0.0
    duty = 1.0
    t0 = 0.0

    def do_GET(self):  # noqa: N802
        cls = type(self)
        k, r = divmod(time.time() - cls.t0, PERIOD_S)
        on_s = PERIOD_S * cls.duty
        busy_s = k * on_s + min(r, on_s)
        running = 3 if r < on_s else 0
        body = ("# TYPE vllm:generation_tokens_total counter\n"
                f'vllm:generation_tokens_total{{model_name="m"}} {cls.busy_tps * busy_s}\n'
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{model_name="m"}} {running}\n').encode()
        reply(self, 200, body, {"Content-Type": "text/plain; version=0.0.4"})

    def log_message(self, *args):
        pass


def _stand_in(busy_tps: float, duty: float) -> ThreadingHTTPServer:
    handler = type("StandIn", (_VllmStandIn,), {"busy_tps": busy_tps, "duty": duty, "t0": time.time()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed (Debian: apt-get install -y prometheus)")
def test_a_real_prometheus_measures_a_half_idle_vllm_card_at_its_busy_rate(tmp_path):
    """Card a serves 6,000 tok/s half the time, card b 3,000 tok/s all the time: the same tokens/s on average, and
    a's busy rate twice b's. The queries are the default ones with windows of five load cycles, so a short test
    sees whole cycles; the default queries themselves are checked to be valid PromQL on this server."""
    stand_ins = {"half": _stand_in(6000, 0.5), "full": _stand_in(3000, 1.0)}
    names = {f"127.0.0.1:{srv.server_address[1]}": card for card, srv in stand_ins.items()}
    port = _free_port()
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 100ms\n"
        "scrape_configs:\n  - job_name: vllm\n    static_configs:\n"
        f"      - targets: {json.dumps(sorted(names))}\n"
    )
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"),
    )
    url = f"http://127.0.0.1:{port}"
    window = f"{5 * PERIOD_S:g}s"
    rate_q, busy_q = rate_query(window=window), busy_query(window=window, resolution="50ms")
    try:
        lag_s = 2 * PERIOD_S  # the pull ends this far back, so every window it reads is scraped to its end
        span_s = 5 * PERIOD_S + 4 * PERIOD_S + lag_s  # and a whole window behind each of its points

        def held() -> bool:
            """Both stand-ins scraped all through the span (most of its 100 ms scrapes are in)."""
            q = urllib.parse.urlencode({"query": f"count_over_time(vllm:num_requests_running[{span_s:g}s])"})
            try:
                with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as resp:
                    result = json.load(resp)["data"]["result"]
            except OSError:
                return False
            counts = {r["metric"]["instance"]: float(r["value"][1]) for r in result}
            return set(counts) == set(names) and min(counts.values()) >= 0.8 * span_s / 0.1

        wait_for(held, 120, "Prometheus to hold both stand-ins' samples over the span", every_s=0.5)
        end = time.time() - lag_s
        repo = sqlite_memory_repository()
        report = ingest_parsed(repo, pull_prometheus(url, rate_q, end - 4 * PERIOD_S, end, PERIOD_S, busy_query=busy_q),
                               IngestSettings(now_ts=int(end) + 60))
        assert report.quarantined == 0 and report.stored >= 10
        roll = repo.hourly_rollups()
        got = {}
        for card, rows in roll.assign(card=roll["card_key"].map(names)).groupby("card"):
            n, busy = rows["sample_count"], rows["busy_fraction"] * rows["sample_count"]
            got[card] = {"busy": busy.sum() / n.sum(), "mean_tps": (rows["mean_tps"] * n).sum() / n.sum(),
                         "busy_tps": (rows["busy_tps"] * busy).sum() / busy.sum()}
        half, full = got["half"], got["full"]
        assert half["busy"] == pytest.approx(0.5, abs=0.1) and full["busy"] == pytest.approx(1.0)
        # The same tokens/s on average; per busy second the half-idle card is twice the other: its busy rate, 6,000.
        assert half["mean_tps"] == pytest.approx(full["mean_tps"], rel=0.1)
        assert half["busy_tps"] == pytest.approx(2 * full["busy_tps"], rel=0.1)
        # Prometheus's rate() reads a little low on a loaded machine (a late scrape at a window's edge is not
        # extrapolated over), the same for both cards; the levels are within a quarter of the truth.
        assert half["busy_tps"] == pytest.approx(6000, rel=0.25) and full["busy_tps"] == pytest.approx(3000, rel=0.25)
        for q in (DEFAULT_PROMETHEUS_QUERY, DEFAULT_BUSY_QUERY):  # valid PromQL on this server (an error would raise)
            body, _ = fetch_prometheus(url, q, end - 60, end, 15)
            assert json.loads(body)["status"] == "success"
    finally:
        prom.terminate()
        prom.wait(20)
        for srv in stand_ins.values():
            srv.shutdown()
            srv.server_close()
