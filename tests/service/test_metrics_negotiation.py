"""`/metrics` as Prometheus asks for it: OpenMetrics when the scraper's Accept names it, gzip when it takes gzip,
and the per-card fast path writing what prometheus-client's own OpenMetrics writer writes."""

from __future__ import annotations

import gzip
import urllib.request

import pytest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

from fleet.service.metrics import FleetCollector, make_registry, serve_metrics
from tests.service.test_metrics import reference_text, snapshot, stats

# What Prometheus 2.x and 3.x send when they scrape (the scrape_protocols default puts OpenMetrics first).
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def odd_snapshot():
    return snapshot(run_set=["gpu-a", "gpu-spare"],
                    scores={"day": {"gpu-a": (6000.0, 5_780_000.0), 'gpu-"q"\\x\nz': (0.1, 1e22), "gpu-c": (float("nan"), float("inf"))},
                            "hour": {"gpu-a": (6100.5, 999_999.0)}})


@pytest.mark.parametrize("per_card", [True, False])
def test_fast_openmetrics_matches_prometheus_client(per_card):
    from functools import partial

    coll = FleetCollector(odd_snapshot, stats, per_card=per_card, quarantine_reasons=("unknown-card",), leadership=lambda: (True, 3))
    encoder = partial(openmetrics_latest, version="1.0.0")
    fast = coll.exposition(encoder, openmetrics=True).decode()
    assert fast == encoder(make_registry(coll)).decode()
    assert fast.endswith("# EOF\n") and fast.count("# EOF") == 1
    names = {f.name for f in openmetrics_families(fast)}  # the strict OpenMetrics parser takes it whole
    assert ("fleet_card_warm" in names) == per_card and "fleet_leader" in names


def scrape(port: int, headers: dict) -> tuple[dict, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return dict(resp.headers), resp.read()


@pytest.fixture
def served():
    coll = FleetCollector(odd_snapshot, stats, quarantine_reasons=("unknown-card",))
    server, _ = serve_metrics(make_registry(coll), port=0)
    try:
        yield coll, server.server_address[1]
    finally:
        server.shutdown()


def test_a_scraper_naming_neither_gets_the_text_format_unzipped(served):
    coll, port = served
    head, body = scrape(port, {})
    assert head["Content-Type"].startswith("text/plain; version=0.0.4") and "Content-Encoding" not in head
    assert body.decode() == reference_text(coll)


def test_prometheus_gets_openmetrics_gzipped(served):
    coll, port = served
    head, body = scrape(port, {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
    assert head["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert head["Content-Encoding"] == "gzip" and int(head["Content-Length"]) == len(body)
    text = gzip.decompress(body).decode()
    assert text.endswith("# EOF\n")
    assert 'fleet_card_warm{card="gpu-spare"} 1.0' in text
    assert {f.name for f in openmetrics_families(text)} >= {"fleet_card_score_tokens_per_second", "fleet_job_runs"}


@pytest.mark.parametrize("encoding", ["gzip", "deflate, gzip;q=1.0", "br,GZIP"])
def test_gzip_whenever_the_scraper_takes_it(served, encoding):
    coll, port = served
    head, body = scrape(port, {"Accept-Encoding": encoding})
    assert head["Content-Encoding"] == "gzip"
    assert gzip.decompress(body).decode() == reference_text(coll)


def test_no_gzip_when_the_scraper_does_not_take_it(served):
    _coll, port = served
    head, body = scrape(port, {"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in head and body.startswith(b"# HELP")
