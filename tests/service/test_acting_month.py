"""A month served in process with one card's actions always refused: every hour is still decided and billed as
replay bills it, every other card's actions are done, and `fleet status` lists what was set aside."""

from __future__ import annotations

import json

import pytest

from fleet.presets import load_preset, replay_scenario
from fleet.service.acting import ActuatorError
from fleet.core.retry import PERMANENT
from storage.repository import open_repository
from tests.service.serving import TINY_PRESET
from tests.service.test_service import run_cli


class RefuseOne:
    name = "refuse-one"

    def __init__(self, card: str):
        self.card, self.calls = card, []

    def act(self, row, epoch=None):
        self.calls.append(row.key)
        if row.card_key == self.card:
            raise ActuatorError(f"no such card {row.card_key}", PERMANENT)

    def close(self):
        pass


def test_one_card_refused_for_the_whole_month(tmp_path, capsys):
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, simulation_config

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_PRESET)
    scenario = load_preset(str(path)).resolve()
    cfg = simulation_config(load_service_config(None), scenario)
    sim = Simulation.of(scenario, cfg.month.start_ts)
    refused = str(sim.month.card_ids[0])
    act = RefuseOne(refused)
    db = f"sqlite:///{tmp_path / 't.db'}"
    svc = Service(cfg, open_repository(db), SimClock(cfg.month.start_ts, 1e9), actuator=act, simulation=sim)
    for _ in range(5):
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
        if svc.month_done():
            break
    assert svc.month_done()
    snap = svc.metrics_job()
    assert snap.totals["bill_usd"] == pytest.approx(replay_scenario(scenario).figures["bill_usd"], rel=1e-9)
    actions = [r for r in svc.store.decisions() if r.kind in ("add", "release", "evict")]
    mine = [r.key for r in actions if r.card_key == refused]
    aside = svc.store.decisions(kinds=["act-failed"])
    assert mine and sorted(r.detail["decision_key"] for r in aside) == sorted(mine)
    assert all(act.calls.count(k) == 1 for k in mine)  # a permanent refusal: tried once
    assert all(r.acted_ts is not None for r in actions if r.card_key != refused)
    code, out, err = run_cli(capsys, "status", "--db", db, "--json")
    assert code == 0, err
    assert sorted(s["decision"] for s in json.loads(out)["set_aside"]) == sorted(mine)
    code, out, err = run_cli(capsys, "status", "--db", db)
    assert f"set aside this month ({len(mine)})" in out and refused in out
