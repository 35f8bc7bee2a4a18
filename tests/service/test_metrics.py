"""/metrics: names, types and values through prometheus-client's own parser, on a fresh registry."""

from __future__ import annotations

import math
import urllib.error
import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleet.service.metrics import FleetCollector, make_registry, serve_metrics
from fleet.service.scheduler import JobStats
from fleet.service.snapshot import Snapshot


def snapshot(**over) -> Snapshot:
    base = dict(
        clock_ts=1_767_225_600.0 + 7200, month_start_ts=1_767_225_600, month_hours=720, hours_billed=2, hours_decided=3,
        run_set=["gpu-a", "gpu-b"], pool_cards=3, eligible_cards=2,
        scores={"day": {"gpu-a": (6000.0, 5_780_000.0), "gpu-b": (5500.0, 5_300_000.0), "gpu-c": (3000.0, 2_890_000.0)}},
        demand_tps=11_000.0, scored_capacity_tps=11_500.0, capacity_tps=11_800.0,
        totals={"bill_usd": 15.0, "bill_warm_usd": 7.5, "bill_churn_usd": 7.5, "idle_usd": 0.25, "ideal_bill_usd": 12.0,
                "convergence": 0.8, "demand_tokens": 7.92e7, "delivered_tokens": 7.9e7, "unmet_tokens": 2e5,
                "unmet_share": 2e5 / 7.92e7, "wrong_evictions": 1.0, "evictions": 1.0},
        evictions=1, wrong_evictions=1, eviction_budget=1, budget_left=0, breaker_open=False,
        ingest={"read": 10, "stored": 8, "duplicate": 1, "quarantined": 1}, quarantine={"negative:tokens_per_s": 1},
        decisions={"evict": (1, 1), "add": (2, 1)},
        checks={"capacity": {"pass": True}, "convergence": {"pass": False}, "eviction": {"pass": False}},
    )
    base.update(over)
    return Snapshot(**base)


def stats():
    return {"decide": JobStats(runs=4, errors=1, misses=2, duration_s_sum=0.5, last_success_ts=1_767_232_800.0),
            "ingest": JobStats()}


SCRAPE_TS = 1_767_232_800.0 + 90  # the service's clock at the scrape: 90 s after decide's last success


def families(per_card=True, snap=None, leadership=lambda: (True, 1)):
    coll = FleetCollector(lambda: snap or snapshot(), stats, per_card=per_card, quarantine_reasons=("unknown-card",),
                          leadership=leadership, now=lambda: SCRAPE_TS)
    text = generate_latest(make_registry(coll)).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}, text


def sample(fams, name, suffix="", **labels):
    got = [s.value for s in fams[name].samples if s.name == name + suffix and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(got) == 1, (name, labels, got)
    return got[0]


@pytest.mark.parametrize(
    "name, kind, suffix, labels, expected",
    [
        ("fleet_run_set_cards", "gauge", "", {}, 2),
        ("fleet_pool_cards", "gauge", "", {}, 3),
        ("fleet_demand_tokens_per_second", "gauge", "", {}, 11_000),
        ("fleet_capacity_tokens_per_second", "gauge", "", {}, 11_800),
        ("fleet_bill_usd", "counter", "_total", {"part": "rent"}, 7.5),
        ("fleet_bill_usd", "counter", "_total", {"part": "churn"}, 7.5),
        ("fleet_idle_usd", "counter", "_total", {}, 0.25),
        ("fleet_ideal_bill_usd", "counter", "_total", {}, 12.0),
        ("fleet_convergence_ratio", "gauge", "", {}, 0.8),
        ("fleet_delivered_tokens", "counter", "_total", {}, 7.9e7),
        ("fleet_unmet_demand_ratio", "gauge", "", {}, 2e5 / 7.92e7),
        ("fleet_evictions", "counter", "_total", {}, 1),
        ("fleet_eviction_budget_left_cards", "gauge", "", {}, 0),
        ("fleet_eviction_breaker_open", "gauge", "", {}, 0),
        ("fleet_check_pass", "gauge", "", {"check": "capacity"}, 1),
        ("fleet_check_pass", "gauge", "", {"check": "convergence"}, 0),
        ("fleet_decisions", "counter", "_total", {"kind": "add"}, 2),
        ("fleet_decisions_acted", "counter", "_total", {"kind": "add"}, 1),
        ("fleet_decisions", "counter", "_total", {"kind": "release"}, 0),  # known kinds appear before they happen
        ("fleet_ingest_records", "counter", "_total", {"outcome": "quarantined"}, 1),
        ("fleet_ingest_quarantined_records", "counter", "_total", {"reason": "negative:tokens_per_s"}, 1),
        ("fleet_ingest_quarantined_records", "counter", "_total", {"reason": "unknown-card"}, 0),
        ("fleet_job_duration_seconds", "summary", "_count", {"service_job": "decide"}, 4),
        ("fleet_job_duration_seconds", "summary", "_sum", {"service_job": "decide"}, 0.5),
        ("fleet_job_runs", "counter", "_total", {"service_job": "decide", "outcome": "error"}, 1),
        ("fleet_job_runs", "counter", "_total", {"service_job": "decide", "outcome": "missed"}, 2),
        ("fleet_job_last_success_timestamp_seconds", "gauge", "", {"service_job": "decide"}, 1_767_232_800),
        ("fleet_job_last_success_timestamp_seconds", "gauge", "", {"service_job": "ingest"}, 0),
        ("fleet_job_last_success_age_seconds", "gauge", "", {"service_job": "decide"}, 90),
        ("fleet_card_score_tokens_per_second", "gauge", "", {"card": "gpu-c", "window": "day"}, 3000),
        ("fleet_card_tokens_per_usd", "gauge", "", {"card": "gpu-a", "window": "day"}, 5_780_000),
        ("fleet_card_warm", "gauge", "", {"card": "gpu-c"}, 0),
    ],
)
def test_metric_table(name, kind, suffix, labels, expected):
    fams, _ = families()
    assert fams[name].type == kind
    assert sample(fams, name, suffix, **labels) == pytest.approx(expected)


def test_names_follow_the_rule():
    fams, text = families()
    units = ("_usd", "_tokens", "_tokens_per_second", "_seconds", "_cards", "_ratio", "_open", "_pass", "_billed",
             "_records", "_runs", "_decisions", "_acted", "_actions", "_evictions", "_warm", "_tokens_per_usd", "_tps")
    for name, fam in fams.items():
        assert name.startswith("fleet_")
        assert name.endswith(units) or name in ("fleet_evictions", "fleet_wrong_evictions", "fleet_decisions",
                                                "fleet_leader", "fleet_leader_epoch", "fleet_reconcile_mismatches"), name
        if fam.type == "counter":
            assert all(s.name.endswith("_total") for s in fam.samples), name
    assert {"fleet_leader", "fleet_leader_epoch"} <= set(fams)
    ratios = [f for n, f in fams.items() if n.endswith("_ratio")]
    assert ratios and all(0 <= s.value <= 1 for f in ratios for s in f.samples)


def test_job_age_reads_the_clock_at_the_scrape_not_the_snapshot():
    """Under --simulate the clock runs hours past the last snapshot between two metrics runs: the age is the clock at
    the scrape less the last success, never negative, and NaN for a job that has not yet succeeded."""
    clock = [1_767_232_800.0 + 5 * 3600]
    coll = FleetCollector(lambda: snapshot(clock_ts=1_767_225_600.0), stats, now=lambda: clock[0])
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(make_registry(coll)).decode())}
    assert sample(fams, "fleet_job_last_success_age_seconds", service_job="decide") == 5 * 3600
    assert math.isnan(sample(fams, "fleet_job_last_success_age_seconds", service_job="ingest"))
    clock[0] = 1_767_232_800.0 - 1  # a success stamped after the clock was read is age 0, not below
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(make_registry(coll)).decode())}
    assert sample(fams, "fleet_job_last_success_age_seconds", service_job="decide") == 0


def test_per_card_series_switch_off():
    on, _ = families(per_card=True)
    off, text = families(per_card=False)
    assert "fleet_card_score_tokens_per_second" in on
    assert not any(n.startswith("fleet_card_") for n in off)
    assert "card=" not in text


def test_before_the_first_refresh_only_job_series_show():
    coll = FleetCollector(lambda: None, stats)
    fams = {f.name for f in text_string_to_metric_families(generate_latest(make_registry(coll)).decode())}
    assert fams == {"fleet_job_duration_seconds", "fleet_job_runs", "fleet_job_last_success_timestamp_seconds"}


def test_a_promise_adds_goodput_and_the_latency_check_from_the_first_scrape():
    """Under a promise the latency check and goodput are there before the first bill (NaN) and then read the month's
    figures; without one neither family nor label shows."""
    unbilled, _ = families(snap=snapshot(promised=True))
    assert math.isnan(sample(unbilled, "fleet_check_pass", check="latency"))
    assert math.isnan(sample(unbilled, "fleet_goodput_ratio")) and math.isnan(sample(unbilled, "fleet_goodput_tokens_per_second"))
    checks = {**snapshot().checks, "latency": {"pass": False}}
    totals = {**snapshot().totals, "goodput_avg_tps": 6_000.0, "goodput_share": 0.6}
    billed, _ = families(snap=snapshot(promised=True, checks=checks, totals=totals))
    assert sample(billed, "fleet_check_pass", check="latency") == 0
    assert sample(billed, "fleet_goodput_tokens_per_second") == 6_000.0 and sample(billed, "fleet_goodput_ratio") == 0.6
    plain, text = families()
    assert not {"fleet_goodput_ratio", "fleet_goodput_tokens_per_second"} & set(plain) and 'check="latency"' not in text


def test_nan_convergence_is_exported_as_nan():
    fams, _ = families(snap=snapshot(totals={**snapshot().totals, "convergence": float("nan")}))
    assert math.isnan(sample(fams, "fleet_convergence_ratio"))


def test_http_server_binds_localhost_and_serves_the_collector():
    server, _ = serve_metrics(make_registry(FleetCollector(snapshot, stats)), port=0)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            fams = {f.name: f for f in text_string_to_metric_families(resp.read().decode())}
        assert sample(fams, "fleet_run_set_cards") == 2
    finally:
        server.shutdown()


def test_a_path_other_than_metrics_is_404():
    server, _ = serve_metrics(make_registry(FleetCollector(snapshot, stats)), port=0)
    try:
        port = server.server_address[1]
        for path in ("/nope", "/", "/metrics/x"):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5)
            assert err.value.code == 404, path
            assert b"fleet_" not in err.value.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?x=1", timeout=5) as resp:
            assert resp.status == 200
    finally:
        server.shutdown()


def test_grafana_dashboard_reads_only_metrics_the_service_exports():
    import json
    import re
    from pathlib import Path

    from tests.service.test_metrics_curves import curves

    dash = json.loads((Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json").read_text())
    fams, text = families(snap=snapshot(curves=curves(), pool_ttft_s=0.42))  # a pool under a promise: every series
    exported = {s.name for f in fams.values() for s in f.samples}
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"fleet_[a-z_]+", e)}
    assert len(dash["panels"]) >= 10 and used
    assert used <= exported, used - exported
    assert {"fleet_run_set_cards", "fleet_bill_usd_total", "fleet_convergence_ratio", "fleet_evictions_total"} <= used


def reference_text(coll: FleetCollector) -> str:
    """The rendering of prometheus-client itself: every family, per-card ones included, through `generate_latest`."""
    return generate_latest(make_registry(coll)).decode()


def parsed(text: str) -> dict:
    return {f.name: (f.type, f.documentation, [(s.name, s.labels, s.value) for s in f.samples])
            for f in text_string_to_metric_families(text)}


def same_values(a: dict, b: dict) -> bool:
    """Equal families, with NaN equal to NaN."""
    def norm(fams):
        return {n: (t, d, [(sn, lb, "NaN" if math.isnan(v) else v) for sn, lb, v in ss]) for n, (t, d, ss) in fams.items()}
    return norm(a) == norm(b)


@pytest.mark.parametrize("per_card", [True, False])
def test_fast_exposition_matches_prometheus_client(per_card):
    odd = 'gpu-"q"\\x\nz'  # a card id needing every escape of the text format
    snap = snapshot(
        run_set=["gpu-a", "gpu-b", "gpu-spare"],  # a warm card without scores still gets fleet_card_warm
        scores={
            "day": {"gpu-b": (5500.0, 5_300_000.0), "gpu-a": (6000.0, 5_780_000.0), odd: (0.1, 1e22),
                    "gpu-c": (float("nan"), float("inf")), "gpu-d": (None, -3.5), "gpu-e": (123456.789, 1234567.0)},
            "hour": {"gpu-a": (6100.5, 999_999.0), "gpu-c": (2e-7, 0.0)},
        },
    )
    coll = FleetCollector(lambda: snap, stats, per_card=per_card, quarantine_reasons=("unknown-card",))
    fast = coll.exposition().decode()
    ref = reference_text(coll)
    assert fast == ref
    assert same_values(parsed(fast), parsed(ref))
    assert fast == coll.exposition().decode()  # the cached label prefixes give the same text on the next scrape
    fams = parsed(fast)
    if per_card:
        assert ("fleet_card_warm", {"card": odd}, 0.0) in fams["fleet_card_warm"][2]
        assert ("fleet_card_tokens_per_usd", {"card": "gpu-a", "window": "day"}, 5_780_000.0) in fams["fleet_card_tokens_per_usd"][2]
    else:
        assert not any(n.startswith("fleet_card_") for n in fams)


def test_fast_exposition_follows_a_new_card_set():
    snaps = [snapshot(), snapshot(run_set=["gpu-z"], scores={"day": {"gpu-z": (7000.0, 6e6)}, "week": {"gpu-a": (1.0, 2.0)}})]
    coll = FleetCollector(lambda: snaps[0], stats)
    assert coll.exposition().decode() == reference_text(coll)
    snaps.pop(0)
    text = coll.exposition().decode()
    assert text == reference_text(coll)
    assert 'fleet_card_warm{card="gpu-z"} 1.0' in text and 'card="gpu-b"' not in text


def test_fast_exposition_before_the_first_refresh():
    coll = FleetCollector(lambda: None, stats)
    assert coll.exposition().decode() == reference_text(coll)


def test_http_server_serves_the_same_text_as_prometheus_client():
    coll = FleetCollector(snapshot, stats, quarantine_reasons=("unknown-card",))
    server, _ = serve_metrics(make_registry(coll), port=0)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert resp.read().decode() == reference_text(coll)
    finally:
        server.shutdown()


def test_values_format_as_prometheus_client_formats_them():
    import numpy as np
    from prometheus_client.utils import floatToGoString

    from fleet.service.metrics import _finite, _go_floats

    rng = np.random.default_rng(7)
    values = np.concatenate([
        rng.uniform(-1e7, 1e7, 2000), 10.0 ** rng.uniform(-12, 30, 2000), rng.integers(0, 10**9, 1000).astype(float),
        [0.0, -0.0, 1e6, 999_999.9999999999, 1e16, 9_999_999_999_999_998.0, 1e-7, 5e-324, np.nan, np.inf, -np.inf, -1e20],
    ])
    assert _go_floats(values) == [floatToGoString(_finite(v)) for v in values.tolist()]


def test_actions_by_outcome_and_the_oldest_waiting_one():
    snap = snapshot(decisions={"evict": (1, 1), "add": (3, 1), "release": (2, 2), "act-failed": (1, 1), "act-expired": (1, 1)},
                    oldest_unacted_ts=int(SCRAPE_TS) - 5400)
    coll = FleetCollector(lambda: snap, stats, leadership=lambda: (True, 1), now=lambda: SCRAPE_TS, retried=lambda: 4)
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(make_registry(coll)).decode())}
    got = {o: sample(fams, "fleet_actions", "_total", outcome=o) for o in ("done", "retried", "set-aside", "expired")}
    assert got == {"done": 4, "retried": 4, "set-aside": 1, "expired": 1}
    assert sample(fams, "fleet_oldest_unacted_decision_age_seconds") == 5400
    fams, _ = families()  # nothing waiting, no retries known: every series is there, at zero
    assert sample(fams, "fleet_oldest_unacted_decision_age_seconds") == 0
    assert sample(fams, "fleet_actions", "_total", outcome="set-aside") == 0
