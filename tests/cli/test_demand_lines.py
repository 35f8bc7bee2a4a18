"""`fleet status`, `fleet explain` and `fleet plan` show the forecast an hour was sized to beside the demand it had,
and say in one line when the policy knew the demand."""

from __future__ import annotations

import json

from fleet.cli.demand import KNEW_LINE, forecast_beside_measured
from fleet.core.units import NO_END_TS
from tests.cli.test_ingest_statuses import fleet
from tests.service.test_measured_demand import RATES, _pool

SERVED_TPS = sum(RATES.values())


def test_the_demand_line_says_what_is_not_there_yet():
    assert forecast_beside_measured(6000.0, 7500.0) == "forecast 6,000 tok/s, measured 7,500 tok/s (forecast off by -20.0%)"
    assert forecast_beside_measured(None, float("nan")).startswith("forecast none (nothing measured before it")
    assert forecast_beside_measured(6000.0, None).endswith("measured not yet")


def test_a_real_pools_forecast_is_shown_beside_its_measured_demand(tmp_path):
    svc, _ = _pool(tmp_path, "p", {0: 6000.0, 1: 8000.0, 3: 12000.0})
    for job in (svc.score_job, svc.decide_job, svc.billing_job):
        job()
    db = f"sqlite:///{tmp_path / 'p.db'}"
    p = fleet("status", "--db", db, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    # hour 4 was forecast from hour 3's 12,000 (last-hour) and measured at what its cards served
    assert (f"demand of 2026-01-01T04:00Z (last billed): forecast 12,000 tok/s, measured {SERVED_TPS:,.0f} tok/s "
            f"(forecast off by {12000 / SERVED_TPS - 1:+.1%})") in p.stdout
    assert KNEW_LINE not in p.stdout
    out = json.loads(fleet("status", "--db", db, "--json", cwd=tmp_path).stdout)
    assert out["last_billed"] == {"hour": "2026-01-01T04:00Z", "demand_forecast_tps": 12000.0, "demand_measured_tps": SERVED_TPS}
    assert out["knew_demand"] is False
    p = fleet("explain", "gpu-a", "--db", db, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"demand of 2026-01-01T05:00Z: forecast {SERVED_TPS:,.0f} tok/s, measured not yet" in p.stdout
    p = fleet("plan", "--db", db, "--config", str(tmp_path / "p.toml"), "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr


def test_a_clairvoyant_policy_says_so_in_one_line(tmp_path):
    """The tiny preset served with `policy.forecast = "known"`: status, explain and plan each say it once; served
    with its own forecaster, none does."""
    from fleet.presets import load_preset
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import Simulation, simulation_config
    from storage.repository import open_repository
    from tests.fake_prometheus import StepClock
    from tests.service.serving import TINY_PRESET

    for forecast in ("known", "last-hour"):
        preset = tmp_path / f"tiny-{forecast}.toml"
        preset.write_text(TINY_PRESET.replace("[policy]\n", f'[policy]\nforecast = "{forecast}"\n'))
        scenario = load_preset(str(preset)).resolve()
        cfg = simulation_config(load_service_config(None), scenario)
        url = f"sqlite:///{tmp_path / forecast}.db"
        sim = Simulation.of(scenario, cfg.month.start_ts)
        svc = Service(cfg, open_repository(url), StepClock(sim.start_ts + 10 * 3600 + 1), simulation=sim)  # ten hours in
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
        card = sorted(svc.journal_store.run_set_at(svc.journal_store.last_decided_ts(0, NO_END_TS)))[0]
        outputs = [fleet("status", "--db", url, cwd=tmp_path), fleet("explain", card, "--db", url, cwd=tmp_path),
                   fleet("plan", "--db", url, "--simulate", str(preset), cwd=tmp_path)]
        for p in outputs:
            assert p.returncode == 0, p.stderr
            assert p.stdout.count(KNEW_LINE) == (forecast == "known"), (forecast, p.args, p.stdout)
