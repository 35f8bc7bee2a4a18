"""/metrics: names, types and values through prometheus-client's own parser, on a fresh registry."""

from __future__ import annotations

import math
import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleet.metrics import FleetCollector, make_registry, serve_metrics
from fleet.service import JobStats, Snapshot


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


def families(per_card=True, snap=None):
    coll = FleetCollector(lambda: snap or snapshot(), stats, per_card=per_card, quarantine_reasons=("unknown-card",))
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
        ("fleet_job_duration_seconds", "summary", "_count", {"job": "decide"}, 4),
        ("fleet_job_duration_seconds", "summary", "_sum", {"job": "decide"}, 0.5),
        ("fleet_job_runs", "counter", "_total", {"job": "decide", "outcome": "error"}, 1),
        ("fleet_job_runs", "counter", "_total", {"job": "decide", "outcome": "missed"}, 2),
        ("fleet_job_last_success_timestamp_seconds", "gauge", "", {"job": "decide"}, 1_767_232_800),
        ("fleet_job_last_success_timestamp_seconds", "gauge", "", {"job": "ingest"}, 0),
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
             "_records", "_runs", "_decisions", "_acted", "_evictions", "_warm", "_tokens_per_usd")
    for name, fam in fams.items():
        assert name.startswith("fleet_")
        assert name.endswith(units) or name in ("fleet_evictions", "fleet_wrong_evictions", "fleet_decisions"), name
        if fam.type == "counter":
            assert all(s.name.endswith("_total") for s in fam.samples), name
    ratios = [f for n, f in fams.items() if n.endswith("_ratio")]
    assert ratios and all(0 <= s.value <= 1 for f in ratios for s in f.samples)


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


def test_grafana_dashboard_reads_only_metrics_the_service_exports():
    import json
    import re
    from pathlib import Path

    dash = json.loads((Path(__file__).resolve().parent.parent / "docs" / "grafana-dashboard.json").read_text())
    fams, text = families()
    exported = {s.name for f in fams.values() for s in f.samples}
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"fleet_[a-z_]+", e)}
    assert len(dash["panels"]) >= 10 and used
    assert used <= exported, used - exported
    assert {"fleet_run_set_cards", "fleet_bill_usd_total", "fleet_convergence_ratio", "fleet_evictions_total"} <= used
