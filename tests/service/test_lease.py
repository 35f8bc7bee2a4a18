"""The leader elector on stepped times, and two services on one store taking turns to lead (in process)."""

from __future__ import annotations

import logging

import pytest

from fleet.core.units import NO_END_TS
from fleet.presets import load_preset, replay_scenario
from fleet.service.journal import ACTIONS
from fleet.service.lease import LeaderElector, LeaseKeeper, default_holder
from storage import make_engine, upgrade
from storage.lease import LeaseStore
from tests.service.serving import TINY_PRESET

T0 = 1_767_225_600.0


@pytest.fixture
def leases(tmp_path):
    url = f"sqlite:///{tmp_path / 'lease.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield LeaseStore(engine)
    engine.dispose()


def elector(leases, holder, duration_s=15.0, deadline_s=10.0):
    return LeaderElector(leases, holder, duration_s, deadline_s)


def test_a_leader_leads_until_its_renew_deadline(leases):
    a = elector(leases, "a")
    assert not a.is_leader(T0)
    assert a.try_acquire_or_renew(T0) and a.epoch == 1
    assert a.is_leader(T0 + 9.99) and not a.is_leader(T0 + 10)
    assert a.try_acquire_or_renew(T0 + 8)  # a renewal moves the deadline on and keeps the epoch
    assert a.is_leader(T0 + 17.9) and a.epoch == 1


def test_a_standby_takes_over_once_the_lease_expires_and_the_old_leader_stops(leases):
    a, b = elector(leases, "a"), elector(leases, "b")
    assert a.try_acquire_or_renew(T0)
    assert not b.try_acquire_or_renew(T0 + 14.9) and not b.is_leader(T0 + 14.9)
    assert b.observed.holder == "a" and b.observed.epoch == 1
    assert b.try_acquire_or_renew(T0 + 15) and b.epoch == 2 and b.is_leader(T0 + 15)
    # a comes back after a pause: its renewal is refused and it no longer leads, whatever its deadline said.
    assert not a.try_acquire_or_renew(T0 + 16) and not a.is_leader(T0 + 16)
    assert a.observed.holder == "b"


def test_a_leader_that_cannot_renew_stops_before_anyone_can_take_over(leases):
    """The store fails every renewal after the first: at every instant either the old leader still leads or a
    standby can take over, never both."""
    a, b = elector(leases, "a"), elector(leases, "b")
    assert a.try_acquire_or_renew(T0)

    class Broken:
        def try_acquire(self, *args):
            raise OSError("disk I/O error")

    a.leases = Broken()
    for tenth in range(0, 200):
        t = T0 + tenth / 10
        with pytest.raises(OSError):
            a.try_acquire_or_renew(t)
        could_take = leases.read("fleet").expired(t)
        assert not (a.is_leader(t) and could_take), t
    assert b.try_acquire_or_renew(T0 + 20) and b.epoch == 2


def test_a_released_lease_is_taken_at_the_next_attempt(leases):
    a, b = elector(leases, "a"), elector(leases, "b")
    a.try_acquire_or_renew(T0)
    assert a.release(T0 + 1) and not a.is_leader(T0 + 1)
    assert b.try_acquire_or_renew(T0 + 1.5) and b.epoch == 2


def test_holders_are_unique_per_process_start():
    assert default_holder("replica-a") != default_holder("replica-a")
    assert default_holder("replica-a").startswith("replica-a#") and ":" in default_holder()


class Wall:
    def __init__(self, t: float):
        self.t = t

    def now(self) -> float:
        return self.t


def test_the_keeper_says_who_holds_the_store_once_and_on_each_change(leases, caplog):
    wall = Wall(T0)
    led = []
    a = LeaseKeeper(elector(leases, "a", 3, 2), 0.5, wall.now, on_lead=led.append)
    b = LeaseKeeper(elector(leases, "b", 3, 2), 0.5, wall.now, on_lead=led.append)
    with caplog.at_level(logging.INFO, logger="fleet.service.lease"):
        assert a.tick()
        for _ in range(4):
            assert not b.tick()
            wall.t += 0.5
            assert a.tick()
        wall.t += 3.2  # a stops renewing (killed): its lease, renewed last at T0 + 2, expires at T0 + 5
        assert b.tick() and b.leading()
        assert not a.tick() and not a.leading()
    lines = [r.getMessage() for r in caplog.records]
    standby = [m for m in lines if m.startswith("standby:")]
    assert standby == [f"standby: store held by a (epoch 1) until {_iso_of(T0 + 3)}",
                       f"standby: store held by b (epoch 2) until {_iso_of(T0 + 5.2 + 3)}"]
    took = [m for m in lines if "took over" in m]
    assert len(took) == 1 and took[0].startswith("leader: b holds the store's lease (epoch 2)")
    assert took[0].endswith("took over from a (epoch 1) 0.20 s after its lease expired")
    assert any(m.startswith("leader: lost the store's lease (epoch 1) to b") for m in lines)
    assert led == [1, 2]


def test_a_released_lease_is_taken_at_once_and_said_to_be_released(leases, caplog):
    wall = Wall(T0)
    a = LeaseKeeper(elector(leases, "a", 15, 10), 2, wall.now)
    b = LeaseKeeper(elector(leases, "b", 15, 10), 2, wall.now)
    with caplog.at_level(logging.INFO, logger="fleet.service.lease"):
        assert a.tick() and not b.tick()
        wall.t += 1
        a.stop(release=True)  # a clean stop, 14 s before the lease would run out
        wall.t += 0.5
        assert b.tick() and b.elector.epoch == 2
    took = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
    assert took == [f"leader: b holds the store's lease (epoch 2) from {_iso_of(T0 + 1.5)}; "
                    "took over from a (epoch 1), which released it"]


def test_a_standby_tries_again_the_moment_its_leaders_lease_runs_out(leases):
    wall = Wall(T0)
    a = LeaseKeeper(elector(leases, "a", 3, 2), 2, wall.now)
    b = LeaseKeeper(elector(leases, "b", 3, 2), 2, wall.now)
    assert a.tick() and not b.tick()
    wall.t += 2.5
    assert b._next_wait_s() == pytest.approx(0.51)
    assert a._next_wait_s() == 2


def _iso_of(ts: float) -> str:
    from fleet.service.lease import _iso

    return _iso(ts)


# -- two services on one store ------------------------------------------------------------------------------------


class Recorder:
    """An actuator that records (key, epoch, service) and can run a hook at its k-th action."""

    name = "recorder"

    def __init__(self, log: list, who: str, at=None):
        self.log, self.who, self.at = log, who, at or {}

    def act(self, row, epoch=None) -> None:
        n = sum(1 for e in self.log if e[2] == self.who)
        if n in self.at:
            self.at.pop(n)()
        self.log.append((row.key, epoch, self.who))

    def close(self) -> None:
        pass


def _two_services(tmp_path, log, at_a):
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, simulation_config
    from storage.repository import open_repository

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_PRESET)
    scenario = load_preset(str(path)).resolve()
    cfg = simulation_config(load_service_config(None, {"lease": {"duration_s": 3, "renew_every_s": 0.5,
                                                                 "renew_deadline_s": 2}}), scenario)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    wall = Wall(T0)
    services = {}
    for who in ("a", "b"):
        repo = open_repository(url)
        keeper = LeaseKeeper(LeaderElector(LeaseStore(repo.engine), who, 3, 2), 0.5, wall.now)
        services[who] = Service(cfg, repo, SimClock(cfg.month.start_ts, 1e9), Recorder(log, who, at_a if who == "a" else None),
                                simulation=Simulation.of(scenario, cfg.month.start_ts), lease=keeper)
    return services, wall, scenario


def _step(svc) -> None:
    for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
        job()


def test_two_services_on_one_store_act_on_each_decision_once(tmp_path):
    """a leads and acts until a stall carries the wall clock past its renew deadline mid-hour: it stops at once
    (before its lease has expired), b takes over when the lease has expired and acts the rest under epoch 2,
    starting with what a journaled and did not act on. The month is replay's."""
    log: list = []

    def stall() -> None:
        wall.t += 2.5  # past a's renew deadline (2 s), not yet past its lease (3 s)

    services, wall, scenario = _two_services(tmp_path, log, {17: stall})  # the 18th action: an eviction mid-hour
    a, b = services["a"], services["b"]
    assert a.renew_lease() and not b.renew_lease()
    _step(b)  # a standby does nothing
    assert log == [] and b.journal_store.last_decided_ts(0, NO_END_TS) is None
    _step(a)
    assert len(log) == 18 and {e[2] for e in log} == {"a"}  # the 18th started before the stall; none after it
    assert not a.leading() and not b.renew_lease()  # a has stopped; its lease has not expired yet
    assert a.journal_store.unacted()  # journaled by a, not acted
    wall.t += 0.5
    assert b.renew_lease() and b.epoch() == 2
    for _ in range(5):
        _step(a)  # a no longer leads: nothing
        _step(b)
    assert b.month_done()
    actions = [r for r in b.journal_store.decisions(limit=100_000) if r.kind in ACTIONS]
    assert sorted(e[0] for e in log) == sorted(r.key for r in actions)  # each decision acted once
    assert [e[0] for e in log] == [r.key for r in actions]  # in journal order
    assert {(e[1], e[2]) for e in log} == {(1, "a"), (2, "b")}
    assert all(r.acted_ts is not None for r in actions)
    r = replay_scenario(scenario)
    snap = b.metrics_job()
    assert snap.totals["bill_usd"] == pytest.approx(r.figures["bill_usd"], rel=1e-9)
    assert snap.evictions == r.figures["evictions"]


def test_a_standby_runs_no_writing_job_and_counts_none(tmp_path):
    log: list = []
    services, wall, _ = _two_services(tmp_path, log, {})
    a, b = services["a"], services["b"]
    assert a.renew_lease() and not b.renew_lease()
    for name, fn in b.jobs().items():
        b.runner.run(name, fn)
        b.runner.record(name, "ok")
    counted = {name for name, st in b.stats.items() if st.runs or st.last_success_ts}
    assert counted == {"metrics"}
    assert b.leadership() == (False, 1) and a.leadership() == (True, 1)


def test_the_keeper_of_a_leader_whose_store_fails_leads_until_the_deadline_and_says_so_once(leases, caplog):
    wall = Wall(T0)
    keeper = LeaseKeeper(elector(leases, "a", 3, 2), 0.5, wall.now)
    assert keeper.tick()

    class Broken:
        def try_acquire(self, *args):
            raise OSError("database is locked (postgresql://fleet:hunter2@db/fleet)")

    keeper.elector.leases = Broken()
    with caplog.at_level(logging.INFO, logger="fleet.service.lease"):
        leading = []
        for _ in range(6):
            wall.t += 0.5
            leading.append(keeper.tick() and keeper.leading())
    assert leading == [True, True, True, False, False, False]  # renewed at T0, deadline T0 + 2
    lines = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith("lease: cannot renew") for m in lines) == 1
    assert sum(m.startswith("leader: lost the store's lease (epoch 1): not renewed within 2.0 s") for m in lines) == 1
    assert not any("hunter2" in m for m in lines)


FULL_DISK = """\
import sqlite3, sys
from storage.lease import LeaseStore
taken = LeaseStore.try_acquire
calls = []
def full(self, *args):  # the first attempt takes the lease; from then on the disk is full
    calls.append(args)
    if len(calls) > 1:
        raise sqlite3.OperationalError("database or disk is full")
    return taken(self, *args)
LeaseStore.try_acquire = full
from fleet.cli.app import main
sys.argv = ["fleet", *sys.argv[1:]]
main()
"""


def test_serve_exit_when_done_ends_in_one_line_when_a_full_disk_loses_it_the_lease(tmp_path):
    """Its lease not renewed within the deadline, the service would stand by for ever and its month never be done:
    `--exit-when-done` ends it with status 1 and one line saying why, no traceback."""
    import os
    import subprocess
    import sys

    (tmp_path / "tiny.toml").write_text(TINY_PRESET)
    (tmp_path / "serve.toml").write_text("[lease]\nduration_s = 3\nrenew_every_s = 0.1\nrenew_deadline_s = 0.5\n")
    env = {k: v for k, v in os.environ.items() if k != "FLEET_DB"}
    # At speed 1 the 96-hour month would take four days: only the lost lease can end the run.
    p = subprocess.run([sys.executable, "-c", FULL_DISK, "serve", "--simulate", "tiny.toml", "--speed", "1",
                        "--exit-when-done", "--config", "serve.toml", "--db", "sqlite:///s.db", "--metrics-port", "0"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    errors = [x for x in p.stderr.splitlines() if x.startswith("fleet: error:")]
    assert errors == ["fleet: error: --exit-when-done: lost the store's lease (epoch 1): not renewed within 0.5 s "
                      "(database or disk is full); the month is not billed to its end"], p.stderr
    assert "Traceback" not in p.stderr
