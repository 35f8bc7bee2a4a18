"""Under a promise the service's month is replay's: the bill, goodput, the ideal under the promise, convergence and
the four checks, in the store, the read model, `fleet status` and `/metrics`."""

from __future__ import annotations

import json

import pytest

from fleet.presets import load_preset, replay_scenario
from storage.repository import open_repository
from tests.service.test_service import run_cli


def serve_month(tmp_path, fix: bool):
    """chat-latency (or its fix) served in process on a simulated clock, its jobs stepped by hand until billed."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, simulation_config

    scenario = load_preset("chat-latency").resolve(fix=fix)
    cfg = simulation_config(load_service_config(None), scenario)
    sim = Simulation.of(scenario, cfg.month.start_ts)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    svc = Service(cfg, open_repository(db), SimClock(cfg.month.start_ts, 1e9), simulation=sim)
    for _ in range(5):
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
        if svc.month_done():
            break
    assert svc.month_done()
    return svc, db, replay_scenario(scenario, month=sim.month).figures


@pytest.fixture(scope="module", params=[False, True], ids=["throughput", "fix"])
def served(request, tmp_path_factory):
    svc, db, figures = serve_month(tmp_path_factory.mktemp("promise"), request.param)
    return {"svc": svc, "db": db, "replay": figures, "snapshot": svc.metrics_job()}


def test_the_served_month_is_replays_under_the_promise(served):
    f, snap = served["replay"], served["snapshot"]
    t = snap.totals
    assert round(t["bill_usd"], 2) == round(f["bill_usd"], 2)
    assert round(t["ideal_bill_usd"], 2) == round(f["ideal_bill_usd"], 2)
    for key in ("bill_usd", "ideal_bill_usd", "convergence", "goodput_avg_tps", "goodput_share", "unmet_goodput_share",
                "unmet_share"):
        assert t[key] == pytest.approx(f[key], rel=1e-9), key
    assert set(snap.checks) == set(f["checks"]) == {"capacity", "convergence", "eviction", "latency"}
    for name, c in f["checks"].items():
        got = snap.checks[name]
        assert (got["pass"], got["mark"]) == (c["pass"], c["mark"]), name
        assert got["value"] == pytest.approx(c["value"], rel=1e-9), name


def test_each_billed_hour_carries_its_goodput(served):
    svc = served["svc"]
    hours = svc.journal_store.hours(svc.calendar.start_ts)
    assert len(hours) == 720 and all(h.goodput_tps is not None and 0 <= h.goodput_tps <= h.delivered_tps * (1 + 1e-12)
                                      for h in hours)


def test_status_and_metrics_say_the_promise(served, capsys):
    f = served["replay"]
    code, out, err = run_cli(capsys, "status", "--db", served["db"], "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["goodput_avg_tps"] == pytest.approx(f["goodput_avg_tps"], rel=1e-9)
    assert s["goodput_share"] == pytest.approx(f["goodput_share"], rel=1e-9)
    assert s["ideal_bill_usd"] == pytest.approx(f["ideal_bill_usd"], rel=1e-9)
    assert {k: c["pass"] for k, c in s["checks"].items()} == {k: c["pass"] for k, c in f["checks"].items()}
    code, out, err = run_cli(capsys, "status", "--db", served["db"])
    assert code == 0, err
    assert (f"goodput {f['goodput_avg_tps']:,.0f} tok/s, {f['goodput_share']:.1%} of delivered within the promise"
            in out)
    assert f"check latency: {'pass' if f['checks']['latency']['pass'] else 'FAIL'} (tokens within the promise" in out
    assert "(served within the promise)" in out

    from tests.service.test_metrics import families, sample

    fams, _ = families(snap=served["snapshot"])
    for name, c in f["checks"].items():
        assert sample(fams, "fleet_check_pass", check=name) == (1.0 if c["pass"] else 0.0), name
    assert sample(fams, "fleet_goodput_ratio") == pytest.approx(f["goodput_share"], rel=1e-9)
    assert sample(fams, "fleet_goodput_tokens_per_second") == pytest.approx(f["goodput_avg_tps"], rel=1e-9)
