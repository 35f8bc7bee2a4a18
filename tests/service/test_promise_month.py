"""Under a promise the service's month is replay's: the bill, goodput, the ideal under the promise, convergence and
the four checks, in the store, the read model, `fleet status` and `/metrics`."""

from __future__ import annotations

import json

import numpy as np

import pytest

from fleet.presets import load_preset, replay_scenario
from storage.repository import open_repository
from storage.values import Kind
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


def test_the_loop_weighs_cards_as_the_hours_plan_did(served):
    """The reactive job's view of an hour (`DecideJob.loop_scores`) is the plan's: under the promise sized to, each
    run-set card at the rate its size record carries and the demand lifted to the first tokens' slots; sized to
    throughput, the scores as they are and no lift."""
    svc = served["svc"]
    decide, store = svc.decide, svc.journal_store
    index = svc.frame.pool.current()
    in_class = index.run_class_mask(svc.frame.parts.policy)
    sizes = [r for r in store.decisions(kinds=[Kind.SIZE], since_ts=svc.calendar.start_ts, limit=200)
             if r.record.rate_at_promise_tps]
    score, target = decide.loop_scores(sizes[-1].ts, index, in_class) if sizes else decide.loop_scores(
        svc.calendar.start_ts + 50 * 3600, index, in_class)
    assert bool(sizes) == (svc.frame.parts.policy.size_to == "promise")
    if not sizes:  # sized to throughput: the loop reads the plan's own scores, unlifted
        assert target is None
        plain = decide.hour_scores(svc.calendar.start_ts + 50 * 3600, index, in_class)[0]
        assert score == pytest.approx(plain)
        return
    pos = {k: i for i, k in enumerate(index.keys)}
    for card, rate in sizes[-1].record.rate_at_promise_tps.items():
        assert score[pos[card]] == pytest.approx(rate, rel=1e-6), card
    demand = np.array([1000.0, 5000.0])
    assert np.all(target(demand) >= demand) and target(demand)[0] > demand[0]
