"""The service's prune job: raw samples of rolled-up hours older than `prune_raw_after_days` go, nothing else."""

from __future__ import annotations

import pytest

from fleet.core.units import NO_END_TS
from fleet.presets import load_preset, replay_scenario
from fleet.service.calendar import HOUR_S
from tests.service.serving import TINY_PRESET
from fleet.service.simulation import SetClock


def served(tmp_path, days: float):
    """The tiny preset's month (96 hours after a 24-hour warm-up) served to its end on a stepped clock."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import Simulation, simulation_config
    from storage.repository import open_repository

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_PRESET)
    scenario = load_preset(str(path)).resolve()
    cfg = simulation_config(load_service_config(None, {"storage": {"prune_raw_after_days": days}}), scenario)
    sim = Simulation.of(scenario, cfg.month.start_ts)
    clock = SetClock(sim.end_ts + HOUR_S, wall_per_clock_s=1 / 3600)  # an hour a second
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 'p.db'}"), clock, simulation=sim)
    for _ in range(3):
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
    assert svc.month_done()
    return svc, scenario, sim, clock


def store_counts(svc) -> dict:
    store = svc.journal_store
    return {"rollups": len(svc.telemetry.hourly_rollups()), "decisions": len(store.decisions(limit=100_000)),
            "hours": len(store.hours(svc.sim.start_ts)), "bill": store.bill_by_part(0, NO_END_TS)}


def test_the_prune_job_deletes_raw_samples_older_than_the_age_and_nothing_else(tmp_path):
    svc, scenario, sim, clock = served(tmp_path, days=1)
    samples = svc.telemetry.sample_count()
    assert samples == 12 * (96 + 24)  # one sample per card and hour
    kept = store_counts(svc)
    deleted = svc.runner.run("prune", svc.prune_job)
    cut = int(clock.t) - 86_400  # on the hour: the month's end plus one hour, less a day
    hours_before_cut = (cut - sim.first_ts) // HOUR_S
    assert deleted == 12 * hours_before_cut
    assert svc.telemetry.sample_count() == samples - deleted
    assert store_counts(svc) == kept  # rollups, the journal, billed hours and bills stay
    assert svc.stats["prune"].runs == 1
    assert svc.runner.run("prune", svc.prune_job) == 0  # the next prune finds nothing more of that age
    assert svc.stats["prune"].runs == 2
    # The month is still replay's, and running every job again after the prune changes nothing.
    for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
        job()
    assert store_counts(svc) == kept
    snap = svc.metrics_job()
    r = replay_scenario(scenario)
    assert snap.totals["bill_usd"] == pytest.approx(r.figures["bill_usd"], rel=1e-9)
    assert snap.evictions == r.figures["evictions"]


def test_an_age_of_zero_keeps_every_sample(tmp_path):
    svc, *_ = served(tmp_path, days=0)
    samples = svc.telemetry.sample_count()
    assert svc.runner.run("prune", svc.prune_job) == 0
    assert svc.telemetry.sample_count() == samples


def test_the_prune_job_is_scheduled_hourly(tmp_path):
    svc, *_ = served(tmp_path, days=7)
    assert "prune" in svc.jobs()
    assert svc.intervals()["prune"] == pytest.approx(1.0)  # an hour of a clock that runs an hour a second
