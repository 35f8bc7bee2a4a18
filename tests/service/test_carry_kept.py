"""The decide job keeps the step's carry from hour to hour (`Decisions.next`): it resumes it from the store
(`Carry.resumed`) only when the service starts or takes the lease, and the carry it keeps is the one the store
gives back."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fleet.core.units import NO_END_TS
from fleet.core.carry import Carry
from fleet.presets import load_preset, replay_scenario
from fleet.service.calendar import HOUR_S
from fleet.service.simulation import SetClock
from storage.repository import open_repository
from tests.service.serving import TINY_PRESET


class Resumes:
    """`Carry.resumed`, counted: the month hour of each call (the hour its carry starts)."""

    def __init__(self, monkeypatch):
        self.hours: list[int] = []
        real = Carry.resumed.__func__

        def counted(cls, eligible, budget_left, run_set, evictions, held_out_hours, release_after_hours):
            self.hours.append(self.at)
            return real(cls, eligible, budget_left, run_set, evictions, held_out_hours, release_after_hours)

        self.at = None
        monkeypatch.setattr(Carry, "resumed", classmethod(counted))


class Lease:
    """A lease keeper that always leads, whose epoch the test moves on as a takeover does."""

    def __init__(self):
        self.elector = SimpleNamespace(epoch=1, observed=None)
        self.on_lead = None

    def leading(self) -> bool:
        return True


def _service(tmp_path, overrides=(), lease=None):
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import Simulation, simulation_config

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_PRESET)
    scenario = load_preset(str(path)).resolve(overrides=list(overrides))
    cfg = simulation_config(load_service_config(None), scenario)
    sim = Simulation.of(scenario, cfg.month.start_ts)
    clock = SetClock(cfg.month.start_ts + 1)
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 't.db'}"), clock, simulation=sim, lease=lease)
    return svc, clock, scenario, sim


def _serve_hours(svc, clock, hours, resumes=None) -> None:
    """Each hour in turn, as a running service meets it: ingest, score, decide (and act), bill."""
    for h in hours:
        clock.t = svc.sim.start_ts + h * HOUR_S + 1
        if resumes is not None:
            resumes.at = h
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()


OVERRIDES = ["policy.hystereses.release-after.release_after_hours=3"]  # the hysteresis' count is carried too


def test_a_served_month_resumes_the_carry_only_when_the_service_starts_again(tmp_path, monkeypatch):
    """A month served by one service, restarted at hour 50: the carry is resumed once, at the restart, and the
    month's run sets and evictions are replay's."""
    resumes = Resumes(monkeypatch)
    svc, clock, scenario, sim = _service(tmp_path, OVERRIDES)
    _serve_hours(svc, clock, range(50), resumes)
    assert resumes.hours == []  # the month began with the service: nothing to resume
    svc.telemetry.engine.dispose()
    again, clock, _, _ = _service(tmp_path, OVERRIDES)  # a restart: a new process on the same store
    _serve_hours(again, clock, range(50, sim.month.hours), resumes)
    assert resumes.hours == [50]
    clock.t = sim.end_ts + 1
    again.billing_job()  # the month's last hour, ended
    r = replay_scenario(scenario, month=sim.month)
    hours = again.journal_store.hours(sim.start_ts)
    assert np.array_equal(np.array([h.cards_warm for h in hours]), r.cards_warm)
    assert [row.card_key for row in again.journal_store.decisions(kinds=["evict"])] == [
        str(r.month.card_ids[e.card]) for e in r.evictions] and r.evictions


def test_a_lease_taken_again_resumes_the_carry_once(tmp_path, monkeypatch):
    """Under one epoch the carry is kept; a new epoch (the lease lost and taken again: another leader may have
    written meanwhile) resumes it from the store at its first hour, and keeps it after."""
    resumes = Resumes(monkeypatch)
    lease = Lease()
    svc, clock, _, sim = _service(tmp_path, OVERRIDES, lease)
    _serve_hours(svc, clock, range(30), resumes)
    lease.elector.epoch = 2
    _serve_hours(svc, clock, range(30, sim.month.hours), resumes)
    assert resumes.hours == [30]
    assert svc.journal_store.last_decided_ts(0, NO_END_TS) == sim.end_ts - HOUR_S


@pytest.mark.parametrize("overrides", [OVERRIDES, ["policy.mode=\"held\""]], ids=["steady-hysteresis", "held"])
def test_the_carry_kept_is_the_carry_the_store_gives_back(tmp_path, overrides):
    """Hour after hour, the carry the job keeps, synced to the run set the pool runs, is the one resumed from the
    store alone (what a restart reads): run set, cards eligible, budget, eviction hours and the hysteresis' count."""
    from fleet.service.decide import DecideJob

    svc, clock, _, sim = _service(tmp_path, overrides)
    r = svc.parts.hysteresis.release_after_hours
    for h in range(sim.month.hours - 1):
        _serve_hours(svc, clock, [h])
        kept = svc.decide.carried
        ts = kept.hour_ts + HOUR_S
        index = svc.pool.current()
        in_class = index.run_class_mask(svc.policy)
        fresh = DecideJob(svc.journal_store, svc.journal, svc.frame, svc.scoring, svc.reconciler)
        resumed, journal_open = fresh.carry_at(ts, index, in_class)
        assert journal_open == kept.run_set
        runs = index.mask(journal_open)
        a, b = (c.synced(runs, c.budget_left, r) for c in (kept.carry, resumed))
        assert np.array_equal(a.run_set, b.run_set) and np.array_equal(a.eligible, b.eligible), h
        assert (a.budget_left, a.eviction_hours) == (b.budget_left, b.eviction_hours), h
        assert np.array_equal(a.out_hours_before(r), b.out_hours_before(r)), h
    assert svc.decide.carried.carry.eviction_hours  # the month evicted: the carry's evictions were compared


def test_beside_a_real_pool_the_carry_is_resumed_only_at_a_restart(tmp_path, monkeypatch):
    """A real pool's hours (reconcile on, a card silent in hours 2 and 3): each hour syncs the kept carry to what the
    pool is known to run, and the carry is resumed once, at the restart at hour 4."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from tests.fake_prometheus import StepClock
    from tests.service.real_pool import T0
    from tests.service.test_reconcile import CONFIG, RATES, SILENT_AFTER_S, _drop_hour

    resumes = Resumes(monkeypatch)
    drop = tmp_path / "drop"
    drop.mkdir()
    (tmp_path / "fleet.toml").write_text(CONFIG.format(silent=SILENT_AFTER_S, drop=drop))
    db = f"sqlite:///{tmp_path / 'p.db'}"
    clock = StepClock(T0)
    svc = Service(load_service_config(tmp_path / "fleet.toml"), open_repository(db), clock)
    for h in range(-3, 0):
        _drop_hour(drop, h, RATES)
    for h in range(0, 8):
        if h == 4:
            svc.telemetry.engine.dispose()
            svc = Service(load_service_config(tmp_path / "fleet.toml"), open_repository(db), clock)  # a restart
        _drop_hour(drop, h, [c for c in RATES if c != "gpu-a" or not 2 <= h <= 3])
        clock.t = T0 + h * HOUR_S + 400
        resumes.at = h
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
    assert resumes.hours == [4]
    assert svc.journal_store.last_decided_ts(0, NO_END_TS) == T0 + 7 * HOUR_S
    released = svc.journal_store.decisions(kinds=["release"], card_key="gpu-a")
    assert [r.ts for r in released] == [T0 + 3 * HOUR_S] and "not serving" in released[0].reason  # the sync, kept carry
