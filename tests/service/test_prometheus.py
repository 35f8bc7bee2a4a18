"""A real Prometheus server scrapes `fleet serve --simulate` (negotiating OpenMetrics and gzip, as it does) and gives
back the run-set size through its HTTP API; every query of the Grafana dashboard runs on it."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from fleet.core.units import NO_END_TS
from storage.repository import open_repository
from storage.service_store import ServiceStore
from tests.service.serving import Served, value, wait_for

PROMETHEUS = shutil.which("prometheus")
DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def instant(port: int, expr: str) -> dict:
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{q}", timeout=5) as resp:
        return json.load(resp)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed (Debian: apt-get install -y prometheus)")
def test_prometheus_scrapes_the_run_set_size(tmp_path):
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    # The golden idler holds its run set all month, so the server's sample and the store agree whenever it scrapes.
    served = Served(["--simulate", "golden-idler", "--speed", "36000", "--db", db, "--metrics-port", "0"], tmp_path)
    prom = None
    try:
        port = free_port()
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n"
            "scrape_configs:\n  - job_name: fleet\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{served.port}']\n"
        )
        prom = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"),
        )

        def query():
            q = urllib.parse.urlencode({"query": 'fleet_run_set_cards{job="fleet"}'})
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{q}", timeout=5) as resp:
                    doc = json.load(resp)
            except OSError:
                return None
            result = doc["data"]["result"]
            return result and float(result[0]["value"][1]) > 0 and result

        result = wait_for(query, 60, "Prometheus to scrape fleet_run_set_cards", every_s=0.5)
        from_server = float(result[0]["value"][1])
        store = ServiceStore(open_repository(db).engine)
        last = store.last_decided_ts(0, NO_END_TS)
        assert from_server == len(store.run_set_at(last)) == 26
        assert value(served.families(), "fleet_run_set_cards") == from_server
        assert instant(port, 'up{job="fleet"}')["data"]["result"][0]["value"][1] == "1"
        targets = wait_for(lambda: json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5)),
                           30, "the targets API")
        assert targets["data"]["activeTargets"][0]["lastError"] == ""  # OpenMetrics, gzipped, parsed without complaint
        for panel in json.loads(DASHBOARD.read_text())["panels"]:
            for target in panel["targets"]:
                doc = instant(port, target["expr"])
                assert doc["status"] == "success", (panel["title"], target["expr"], doc)
        ages = instant(port, "fleet_job_last_success_age_seconds")["data"]["result"]
        assert {r["metric"]["service_job"] for r in ages} >= {"decide", "billing"}
        assert all(float(r["value"][1]) >= 0 for r in ages if r["value"][1] != "NaN")
        lowest = instant(port, "bottomk by (window) (10, fleet_card_score_tokens_per_second)")["data"]["result"]
        by_window: dict = {}
        for r in lowest:
            by_window.setdefault(r["metric"]["window"], []).append(r)
        assert by_window and all(len(rs) == 10 for rs in by_window.values())  # ten of each window, not ten in all
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(20)
        served.kill()
