"""`fleet serve --simulate`: the service on a fast clock gives `fleet replay`'s month, in the journal, the store and /metrics."""

from __future__ import annotations

import json
import os
import textwrap
import subprocess
import sys

from pathlib import Path

import numpy as np
import pytest

from fleet.presets import load_preset
from policies import resolve
from fleet.presets import replay_scenario
from fleet.service.calendar import HOUR_S
from storage.repository import open_repository
from storage.service_store import ServiceStore
from tests.service.serving import FLEET, TINY_PRESET, Served, value, wait_for
from tests.fake_prometheus import StepClock
from tests.service.real_pool import FLAGSHIP_DAY


@pytest.fixture(scope="module")
def noise_month(tmp_path_factory):
    """The noise evictor's month served on a fast clock; /metrics scraped once it is billed, then SIGTERM."""
    work = tmp_path_factory.mktemp("serve")
    db = f"sqlite:///{work / 'fleet.db'}"
    served = Served(["--simulate", "noise-evictor", "--speed", "1e7", "--db", db, "--metrics-port", "0"], work)
    try:
        fams = wait_for(lambda: (f := served.families()) and value(f, "fleet_month_hours_billed") == 720 and f, 150,
                        "the month to be billed", every_s=0.5)
        # One more refresh after the last hour, so the snapshot holds the month's end.
        wait_for(lambda: served.families()["fleet_clock_timestamp_seconds"].samples[0].value
                 > fams["fleet_clock_timestamp_seconds"].samples[0].value, 10, "a metrics refresh")
        fams = served.families()
        rc = served.terminate()
    finally:
        served.kill()
    r = replay_scenario(load_preset("noise-evictor").resolve())
    return {"db": db, "families": fams, "rc": rc, "stderr": served.stderr(), "replay": r, "work": work}


def test_sigterm_stops_cleanly(noise_month):
    assert noise_month["rc"] == 0, noise_month["stderr"]
    assert "fleet serve: stopped" in noise_month["stderr"]
    assert "Traceback" not in noise_month["stderr"]


def test_journal_has_replays_evictions(noise_month):
    r = noise_month["replay"]
    store = ServiceStore(open_repository(noise_month["db"]).engine)
    rows = store.decisions(kinds=["evict"])
    start = rows[0].ts - r.evictions[0].hour * HOUR_S
    assert [((row.ts - start) // HOUR_S, row.card_key) for row in rows] == [(e.hour, str(r.month.card_ids[e.card])) for e in r.evictions]
    assert len(rows) == 12
    assert all(row.acted_ts is not None for row in store.decisions())  # every decision carried out (dry-run)
    passes = store.decisions(kinds=["eviction-pass"])
    assert [p.detail["budget_left_after"] for p in passes] == [d.budget_left_after for d in r.passes]


def test_store_has_replays_bill_and_run_sets(noise_month):
    r = noise_month["replay"]
    f = r.figures
    store = ServiceStore(open_repository(noise_month["db"]).engine)
    m0 = store.month_start_of(store.last_billed_ts())
    hours = store.hours(m0)
    assert len(hours) == 720
    bill = sum(h.warm_usd + h.churn_usd for h in hours)
    assert bill == pytest.approx(f["bill_usd"], rel=1e-9)
    assert sum(h.ideal_usd for h in hours) / bill == pytest.approx(f["convergence"], rel=1e-9)
    assert sum(h.idle_usd for h in hours) == pytest.approx(f["idle_usd"], rel=1e-9)
    assert sum(h.wrong_evictions for h in hours) == f["wrong_evictions"] == 4
    parts = store.bill_by_part(m0, m0 + 720 * HOUR_S)
    assert parts["rent"] + parts["churn"] == pytest.approx(f["bill_usd"], rel=1e-9)
    assert parts["churn"] == pytest.approx(f["bill_churn_usd"], rel=1e-9)
    assert np.array_equal(np.array([h.cards_warm for h in hours]), r.cards_warm)
    # The run set of a few hours, card by card, from the run-set intervals.
    for h in (0, 23, 24, 300, 719):
        warm = {str(k) for k in r.month.card_ids[r.warm[:, h]]}
        assert store.run_set_at(m0 + h * HOUR_S) == warm


def test_metrics_carry_replays_figures(noise_month):
    f = noise_month["replay"].figures
    fams = noise_month["families"]
    assert fams["fleet_bill_usd"].type == "counter"
    rent = value(fams, "fleet_bill_usd", part="rent")
    churn = value(fams, "fleet_bill_usd", part="churn")
    assert rent + churn == pytest.approx(f["bill_usd"], rel=1e-9)
    assert churn == pytest.approx(f["bill_churn_usd"], rel=1e-9)
    assert fams["fleet_evictions"].type == "counter" and value(fams, "fleet_evictions") == f["evictions"] == 12
    assert value(fams, "fleet_wrong_evictions") == f["wrong_evictions"]
    assert fams["fleet_convergence_ratio"].type == "gauge"
    assert value(fams, "fleet_convergence_ratio") == pytest.approx(f["convergence"], rel=1e-9)
    assert value(fams, "fleet_idle_usd") == pytest.approx(f["idle_usd"], rel=1e-9)
    assert value(fams, "fleet_eviction_budget_left_cards") == 0
    assert value(fams, "fleet_eviction_budget_cards") == f["eviction_budget"]
    assert value(fams, "fleet_run_set_cards") == noise_month["replay"].cards_warm[-1]
    assert value(fams, "fleet_check_pass", check="eviction") == 0  # 4 wrong evictions fail the check
    assert value(fams, "fleet_unmet_demand_ratio") == pytest.approx(f["unmet_share"], rel=1e-6)
    assert value(fams, "fleet_ingest_records", outcome="stored") == 32 * (720 + 168)
    assert value(fams, "fleet_job_runs", service_job="decide", outcome="error") == 0


def run_fleet(*args, cwd=None):
    """`fleet ARGS` as a process."""
    return subprocess.run(FLEET + list(args), capture_output=True, text=True, timeout=120, cwd=cwd)


def run_cli(capsys, *args):
    """`fleet ARGS` in this process, through the same `main` (exit status, one-line errors): returns (status, out, err)."""
    from fleet.cli.app import main

    capsys.readouterr()
    old = sys.argv
    sys.argv = ["fleet", *args]
    try:
        main()
        code = 0
    except SystemExit as done:
        code = done.code or 0
    finally:
        sys.argv = old
    got = capsys.readouterr()
    return code, got.out, got.err


def test_explain_says_why(noise_month, capsys):
    r = noise_month["replay"]
    evicted = str(r.month.card_ids[r.evictions[0].card])
    code, out, err = run_cli(capsys, "explain", evicted, "--db", noise_month["db"])
    assert code == 0, err
    assert f"{evicted} (flagship) was evicted at" in out
    assert "through the hour window" in out and "under the threshold" in out
    kept = sorted(set(map(str, r.month.card_ids)) - {str(r.month.card_ids[e.card]) for e in r.evictions})
    code, out, err = run_cli(capsys, "explain", kept[0], "--db", noise_month["db"], "--json")
    judged_kept = json.loads(out)
    assert judged_kept["evicted"] is False and judged_kept["judged"]
    assert 1 <= judged_kept["latest"]["rank"] <= 32 and judged_kept["latest"]["window_hours"] == 24
    assert all(j["verdict"].startswith(("kept", "candidate")) for j in judged_kept["judged"])
    code, out, err = run_cli(capsys, "explain", "no-such-card", "--db", noise_month["db"])
    assert code == 2 and "no-such-card" in err and "Traceback" not in err


def test_status_shows_the_month(noise_month, capsys):
    f = noise_month["replay"].figures
    code, out, err = run_cli(capsys, "status", "--db", noise_month["db"], "--json")
    assert code == 0, err
    s = json.loads(out)
    assert s["hours_billed"] == 720
    assert s["bill_usd"] == pytest.approx(f["bill_usd"], rel=1e-9)
    assert s["budget_left"] == 0 and s["evictions"] == 12
    assert s["checks"]["eviction"]["pass"] is False and s["checks"]["capacity"]["pass"] is f["checks"]["capacity"]["pass"]
    assert s["run_set_cards"] == len(s["run_set"]) > 0
    code, out, err = run_cli(capsys, "status", "--db", noise_month["db"])
    assert "check convergence" in out and "bill so far" in out


def test_status_says_replays_bill_to_the_cent(noise_month, capsys):
    """The status line's bill, rent and churn are replay's JSON figures, cent for cent. Before, the rent was the bill
    lines summed apart (49,462.374999...), a cent below replay's 49,462.38."""
    code, out, err = run_cli(capsys, "replay", "-p", "noise-evictor", "--json")
    assert code == 0, err
    r = json.loads(out)
    code, out, err = run_cli(capsys, "status", "--db", noise_month["db"])
    assert code == 0, err
    (line,) = [x.strip() for x in out.splitlines() if x.strip().startswith("bill so far:")]
    assert line == (f"bill so far: ${r['bill_usd']:,.2f} (rent ${r['bill_warm_usd']:,.2f}, "
                    f"churn ${r['bill_churn_usd']:,.2f})")


@pytest.mark.parametrize(
    "config, message",
    [
        ("[schedule]\ntick_every_s = -1\n", "schedule.tick_every_s"),
        ("[metrics]\nport = 70000\n", "metrics.port"),
        ("[actuator]\nkind = 'command'\n", "needs command"),
        ("[polcy]\nmode = 'steady'\n", "polcy: unknown key"),
        ("[month]\nstart = 2026-01-01T00:30:00Z\n", "on the hour"),
        ("this is = not toml [", "not valid TOML"),
    ],
)
def test_bad_config_is_one_clear_error(tmp_path, capsys, config, message):
    path = tmp_path / "fleet.toml"
    path.write_text(config)
    code, out, err = run_cli(capsys, "serve", "--config", str(path), "--simulate", "noise-evictor", "--db", f"sqlite:///{tmp_path / 'x.db'}")
    assert code == 2, err
    assert message in err and str(path) in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bad_config_exits_2_from_the_command(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text("[metrics]\nport = 'nine'\n")
    out = run_fleet("serve", "--config", str(path), "--simulate", "noise-evictor")
    assert out.returncode == 2 and out.stderr.startswith("fleet: error: config file") and "metrics.port" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_real_pool_needs_pool_and_policy(tmp_path, capsys):
    code, out, err = run_cli(capsys, "serve", "--db", f"sqlite:///{tmp_path / 'x.db'}")
    assert code == 2 and "[pool] is missing" in err


def test_tiny_month_in_process_matches_replay(tmp_path):
    """The service's jobs stepped by hand on a simulated clock (no scheduler): the same month as replay."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, simulation_config

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_PRESET)
    scenario = load_preset(str(path)).resolve()
    cfg = simulation_config(load_service_config(None), scenario)
    clock = SimClock(cfg.month.start_ts, 1e9)
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 't.db'}"), clock, simulation=Simulation.of(scenario, cfg.month.start_ts))
    for _ in range(5):
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
        if svc.month_done():
            break
    assert svc.month_done()
    snap = svc.metrics_job()
    r = replay_scenario(scenario)
    assert snap.totals["bill_usd"] == pytest.approx(r.figures["bill_usd"], rel=1e-9)
    assert snap.evictions == r.figures["evictions"] == 3
    assert snap.totals["convergence"] == pytest.approx(r.figures["convergence"], rel=1e-9)
    # Running the jobs again changes nothing: every hour is journaled and billed once.
    before = len(svc.journal_store.decisions())
    for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
        job()
    assert len(svc.journal_store.decisions()) == before and len(svc.journal_store.hours(cfg.month.start_ts)) == scenario.hours


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))


def test_example_config_is_valid():
    from pathlib import Path

    from fleet.service.config import load_service_config

    cfg = load_service_config(Path(__file__).resolve().parents[2] / "docs" / "serve-config.example.toml")
    cfg.require_pool("example")
    assert cfg.metrics.host == "127.0.0.1" and resolve(cfg.policy).admission.breaker_share == 0.3


def _in_process(tmp_path, overrides=(), mutate=None):
    """The tiny preset served in process on a simulated clock, its jobs stepped by hand until the month is billed."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, simulation_config

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_PRESET)
    scenario = load_preset(str(path)).resolve(overrides=list(overrides))
    cfg = simulation_config(load_service_config(None), scenario)
    sim = Simulation.of(scenario, cfg.month.start_ts)
    if mutate:
        mutate(sim.month)
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 't.db'}"), SimClock(cfg.month.start_ts, 1e9), simulation=sim)
    for _ in range(5):
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
    assert svc.month_done()
    return svc, scenario, sim


def resumed_at(svc, ts: int):
    """The carry the decide job resumes at `ts` from the store alone, as after a restart (nothing carried)."""
    from fleet.service.decide import DecideJob

    job = DecideJob(svc.journal_store, svc.journal, svc.frame, svc.scoring, svc.reconciler)
    index = svc.pool.current()
    return job.carry_at(ts, index, index.run_class_mask(svc.policy))[0]


def test_hysteresis_in_the_service_is_replays(tmp_path):
    """Removal slower than addition: the service carries the held hours through the journal, as replay does."""
    svc, scenario, sim = _in_process(tmp_path, ["policy.hystereses.release-after.release_after_hours=3"])
    r = replay_scenario(scenario, month=sim.month)
    hours = svc.journal_store.hours(sim.start_ts)
    assert np.array_equal(np.array([h.cards_warm for h in hours]), r.cards_warm)
    assert sum(h.warm_usd + h.churn_usd for h in hours) == pytest.approx(r.figures["bill_usd"], rel=1e-9)
    assert any(row.detail.get("held_out_hours") for row in svc.journal_store.decisions(kinds=["size"]))
    # A restart mid-month reads the held hours back from the journal: deciding again from the store gives the same hour.
    h = 50
    ts = sim.start_ts + h * HOUR_S
    assert resumed_at(svc, ts).run_set.sum() == r.warm[:, h - 1].sum()


def test_circuit_breaker_opens_on_a_telemetry_fault_and_says_so(tmp_path):
    """Half the pool's telemetry reads zero for a day: the breaker keeps every card and the journal says why."""
    def outage(month):
        W = month.warmup_hours
        month.measured_tps[::2, W + 23] = 0.0  # the hour before the first decision: every other card reads nothing

    svc, scenario, sim = _in_process(tmp_path, ["policy.eviction.admissions.limits.breaker_share=0.3"], outage)
    first = svc.journal_store.decisions(kinds=["eviction-pass"])[0]
    assert first.detail["breaker_open"] is True and "circuit breaker open" in first.reason
    assert first.detail["evicted"] == [] and first.detail["budget_left_after"] == first.detail["budget_left_before"]
    assert not [r for r in svc.journal_store.decisions(kinds=["evict"]) if r.ts == first.ts]
    r = replay_scenario(scenario, month=sim.month)
    assert [d.reason for d in r.passes][0].startswith("circuit breaker open")  # replay does the same
    assert len(svc.journal_store.decisions(kinds=["evict"])) == len(r.evictions)


def test_real_pool_from_a_drop_folder_on_an_injected_clock(tmp_path):
    """A pool's telemetry dropped as files: taken once, scored after it settles, decided, billed on hindsight rates.
    Its demand is dropped too (`NAME.demand.csv`): measured, not drawn from `[demand]`."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service

    drop = tmp_path / "drop"
    drop.mkdir()
    t0 = 1_767_225_600  # 2026-01-01T00:00Z
    (tmp_path / "fleet.toml").write_text(FLAGSHIP_DAY + textwrap.dedent(f"""\
        [schedule]
        settle_s = 300
        [ingest]
        default_class = "flagship"
        [ingest.sources.drop-folder]
        folder = "{drop}"
        """))
    cfg = load_service_config(tmp_path / "fleet.toml")
    rates = {"gpu-a": 6000.0, "gpu-b": 5000.0, "gpu-c": 3000.0, "gpu-d": 5500.0}
    rows = ["card_id,ts,tokens_per_s"] + [
        f"{card},{t0 + h * HOUR_S + 60 * m},{rate * (1 + 0.01 * m)}" for h in range(-3, 5) for m in range(3) for card, rate in rates.items()
    ]
    (drop / "part-1.csv").write_text("\n".join(rows) + "\n")
    demand = ["ts,demand_tps"] + [f"{t0 + h * HOUR_S + 60 * m},10000" for h in range(5) for m in range(3)]
    (drop / "gateway.demand.csv").write_text("\n".join(demand) + "\n")
    (drop / ".part-2.csv").write_text("card_id,ts\n")  # still being written: not taken
    (drop / "broken.csv").write_text("no,such,columns\n1,2,3\n")
    for p in drop.iterdir():
        os.utime(p, (t0, t0))  # written before the clock's time: settled
    clock = StepClock(t0 + 4 * HOUR_S + 301)
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 'p.db'}"), clock)
    for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
        job()
    assert (drop / "done" / "part-1.csv").exists() and (drop / "failed" / "broken.csv").exists()
    assert (drop / "done" / "gateway.demand.csv").exists() and (drop / ".part-2.csv").exists()
    assert svc.journal_store.last_decided_ts(t0, t0 + 24 * HOUR_S) == t0 + 4 * HOUR_S
    hours = svc.journal_store.hours(t0)
    assert [h.hour_ts for h in hours] == [t0 + h * HOUR_S for h in range(4)]  # hour 4 has not ended
    # Steady: the best tokens per dollar first until 10,000 tok/s of scores are covered: gpu-a and gpu-d.
    assert svc.journal_store.run_set_at(t0 + 2 * HOUR_S) == {"gpu-a", "gpu-d"}
    # Hour 0 has no demand before it to forecast from: every card is warm; from hour 1 the forecast sizes the set.
    assert hours[0].warm_usd == pytest.approx(4 * 2690 / 24)
    assert all(h.warm_usd == pytest.approx(2 * 2690 / 24) for h in hours[1:])
    assert all(0 < h.ideal_usd <= h.warm_usd + 1e-9 for h in hours)
    assert all(h.demand_tps == h.demand_measured_tps == pytest.approx(10_000) for h in hours)
    clock.t += 10 * HOUR_S  # telemetry stops after hour 4: the hours go on, and with no scores every card is kept warm
    for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
        job()
    assert svc.journal_store.last_decided_ts(t0, t0 + 24 * HOUR_S) == t0 + 14 * HOUR_S
    assert svc.journal_store.run_set_at(t0 + 10 * HOUR_S) == set(rates)
    assert svc.journal_store.last_billed_ts(t0) == t0 + 13 * HOUR_S
    unmeasured = svc.journal_store.hours(t0)[5:]  # no telemetry and no demand: billed at demand 0, none measured
    assert all(h.demand_tps == 0 and h.demand_measured_tps is None for h in unmeasured)


def _served(tmp_path, preset_path, overrides=()):
    """A preset served in process on a simulated clock, its jobs stepped by hand until the month is billed."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, simulation_config

    scenario = load_preset(str(preset_path)).resolve(overrides=list(overrides))
    cfg = simulation_config(load_service_config(None), scenario)
    sim = Simulation.of(scenario, cfg.month.start_ts)
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 's.db'}"), SimClock(cfg.month.start_ts, 1e9), simulation=sim)
    for _ in range(5):
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
    assert svc.month_done()
    return svc, scenario, sim


SMALL = Path(__file__).resolve().parent.parent / "core" / "compare_small.toml"


@pytest.mark.parametrize(
    "overrides",
    [
        ["policy.score=\"dip-aware\"", "policy.card_class=\"any\""],
        ["policy.score=\"dip-aware\"", "policy.dip_allowance_hours=2", "policy.card_class=\"flagship\""],
        ["policy.card_class=[\"flagship\", \"bargain\"]", "policy.mode=\"held\""],
    ],
    ids=["dip-aware, any class, evicting", "dip-aware with capacity held for dips", "held mode on a list of classes"],
)
def test_the_service_serves_replays_month_with_every_plug_in(tmp_path, overrides):
    """The dip-aware score, run sets across classes and eviction within a class: the same month as replay's."""
    svc, scenario, sim = _served(tmp_path, SMALL, overrides)
    r = replay_scenario(scenario, month=sim.month)
    hours = svc.journal_store.hours(sim.start_ts)
    assert np.array_equal(np.array([h.cards_warm for h in hours]), r.cards_warm)
    assert sum(h.warm_usd + h.churn_usd for h in hours) == pytest.approx(r.figures["bill_usd"], rel=1e-9)
    assert sum(h.evictions for h in hours) == r.figures["evictions"]
    assert sum(h.wrong_evictions for h in hours) == r.figures["wrong_evictions"]
    evicted = [row.card_key for row in svc.journal_store.decisions(kinds=["evict"])]
    assert evicted == [str(r.month.card_ids[e.card]) for e in r.evictions]
    if "dip-aware" in " ".join(overrides):
        # The journal names the cards scored as in a dip, hour by hour, as replay flagged them.
        sizes = svc.journal_store.decisions(kinds=["size"])
        flagged = {row.detail["hour"]: set(row.detail["in_dip"]) for row in sizes}
        for h in (10, 50, 90):
            want = {str(r.month.card_ids[c]) for c in np.flatnonzero(r.in_dip[:, h])}
            assert flagged[h] == want
    # Deciding an hour again from the store (a restart) gives the state the hour was decided on.
    h = 50
    ts = sim.start_ts + h * HOUR_S
    assert resumed_at(svc, ts).run_set.sum() == r.warm[:, h - 1].sum()


def test_the_service_bills_a_cards_boot_as_replay_does(tmp_path):
    """A class whose cards take 30 minutes to serve once added: the service's capacity, idle cost and unmet demand
    are replay's, hour by hour (`fleet.core.billing.serving_share`), and differ from a class that serves at once."""
    path = tmp_path / "boot.toml"
    path.write_text(TINY_PRESET.replace("pool_cards = 12\n", "pool_cards = 12\nboot_minutes = 30\n", 1))
    svc, scenario, sim = _served(tmp_path, path)
    r = replay_scenario(scenario, month=sim.month)
    hours = svc.journal_store.hours(sim.start_ts)
    assert np.array_equal(np.array([h.cards_warm for h in hours]), r.cards_warm)
    billed = {k: sum(getattr(h, k) for h in hours) for k in ("idle_usd", "delivered_tps")}
    assert billed["idle_usd"] == pytest.approx(r.figures["idle_usd"], rel=1e-9)
    assert np.allclose([h.capacity_tps for h in hours], r.bill.capacity_tps, rtol=1e-9)
    assert billed["delivered_tps"] / len(hours) == pytest.approx(r.figures["delivered_avg_tps"], rel=1e-9)
    (tmp_path / "at-once").mkdir()
    (tmp_path / "at-once" / "tiny.toml").write_text(TINY_PRESET)
    other, _, _ = _served(tmp_path / "at-once", tmp_path / "at-once" / "tiny.toml")
    assert sum(h.idle_usd for h in other.journal_store.hours(sim.start_ts)) != pytest.approx(billed["idle_usd"], rel=1e-6)
