"""A simulated month keeps its journal in the month: what the act job does to a decision is stamped with the hour the
decision was for, however far a fast clock has run on by the time the job reaches it.

The act job runs on the wall, so a simulation at a high speed reaches its decisions when its clock has run on by days
or years. Here the clock is set seven years past the month (as `fleet serve --simulate --speed 1e9` gets within
seconds), then the month's hours are decided and acted.

Before: each action read "acted" in 2033 for a January 2026 month, and the records closing expired actions were
stamped in 2033 too, above every hour of the month in `fleet journal`."""

from __future__ import annotations

from fleet.presets import load_preset
from fleet.service.calendar import HOUR_S
from storage.repository import open_repository
from storage.values import ACTION_KINDS, Kind
from tests.service.serving import TINY_PRESET

SEVEN_YEARS_S = 7 * 365 * 24 * HOUR_S


def _served_late(tmp_path, wall_per_clock_s: float):
    """The tiny preset's month decided and acted with the clock seven years past its end: (service, month's end)."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SetClock, Simulation, simulation_config

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_PRESET)
    scenario = load_preset(str(path)).resolve()
    cfg = simulation_config(load_service_config(None), scenario)
    sim = Simulation.of(scenario, cfg.month.start_ts)
    clock = SetClock(sim.end_ts + SEVEN_YEARS_S, wall_per_clock_s)
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 't.db'}"), clock, simulation=sim)
    for _ in range(5):
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
    assert svc.month_done()
    return svc, sim


def test_a_fast_clock_acts_each_decision_in_its_own_hour(tmp_path):
    svc, sim = _served_late(tmp_path, wall_per_clock_s=1e-12)  # seven clock years are no wall time: nothing expires
    rows = svc.journal_store.decisions()
    actions = [r for r in rows if r.kind in ACTION_KINDS]
    assert actions and all(r.acted_ts is not None for r in actions)
    assert [r for r in rows if r.kind == Kind.ACT_EXPIRED] == []
    late = [(r.kind, r.ts, r.acted_ts) for r in rows if r.acted_ts is not None and r.acted_ts != r.ts]
    assert late == []
    assert max(r.acted_ts for r in rows if r.acted_ts is not None) < sim.end_ts


def test_an_action_that_expired_is_closed_in_its_own_hour(tmp_path):
    svc, sim = _served_late(tmp_path, wall_per_clock_s=1.0)  # seven years on the wall too: every action expired
    rows = svc.journal_store.decisions()
    expired = [r for r in rows if r.kind == Kind.ACT_EXPIRED]
    closed = {r.record.decision_id: r for r in expired}
    actions = [r for r in rows if r.kind in ACTION_KINDS]
    assert actions and sorted(closed) == sorted(r.id for r in actions)
    assert all(closed[r.id].ts == r.ts and r.acted_ts is None for r in actions)
    assert max(r.ts for r in rows) < sim.end_ts
