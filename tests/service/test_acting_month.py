"""A month served in process with one card's actions always refused: every hour is still decided and billed as
replay bills it, every other card's actions are done, and `fleet status` lists what was set aside."""

from __future__ import annotations

import json

import numpy as np

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
    # Every hour decided and billed; replay's month differs, since an add set aside leaves its card cold, and the
    # next hour is decided from what the pool is known to run, with that said.
    assert len(svc.journal_store.hours(cfg.month.start_ts)) == sim.month.hours
    assert np.isfinite(snap.totals["bill_usd"]) and snap.totals["bill_usd"] > 0
    sizes = {r.ts: r for r in svc.journal_store.decisions(kinds=["size"])}
    refused_adds = [r for r in svc.journal_store.decisions(kinds=["add"], card_key=refused)]
    followed = [a for a in refused_adds if a.ts + 3600 in sizes]
    assert followed and all(refused in sizes[a.ts + 3600].detail["not_counted"] for a in followed)
    assert replay_scenario(scenario).figures["bill_usd"] > 0
    actions = [r for r in svc.journal_store.decisions() if r.kind in ("add", "release", "evict")]
    mine = [r.key for r in actions if r.card_key == refused]
    aside = svc.journal_store.decisions(kinds=["act-failed"])
    assert mine and sorted(r.detail["decision_key"] for r in aside) == sorted(mine)
    assert all(act.calls.count(k) == 1 for k in mine)  # a permanent refusal: tried once
    assert all(r.acted_ts is not None for r in actions if r.card_key != refused)
    code, out, err = run_cli(capsys, "status", "--db", db, "--json")
    assert code == 0, err
    assert sorted(s["decision"] for s in json.loads(out)["set_aside"]) == sorted(mine)
    code, out, err = run_cli(capsys, "status", "--db", db)
    assert f"set aside this month ({len(mine)})" in out and refused in out


def test_an_add_set_aside_is_not_warm_in_the_next_hours_state(tmp_path):
    """The next hour starts from the run set the pool is known to run: the journal opened the card, its add was
    set aside, so the state the next hour is decided on has it cold."""
    from fleet.service.calendar import HOUR_S
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SimClock, Simulation, simulation_config

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_PRESET)
    scenario = load_preset(str(path)).resolve()
    cfg = simulation_config(load_service_config(None), scenario)
    sim = Simulation.of(scenario, cfg.month.start_ts)
    m0 = cfg.month.start_ts
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 't.db'}"), SimClock(m0, 1e9),
                  actuator=RefuseOne("no card yet"), simulation=sim)
    svc.ingest_job(), svc.score_job()
    svc.decide.decide_hour(m0)
    added = sorted(r.card_key for r in svc.journal_store.decisions(kinds=["add"]))
    svc.journal.actuator.card = added[0]  # only its add is refused
    svc.journal.act_pending()
    assert [r.detail["decision_key"] for r in svc.journal_store.decisions(kinds=["act-failed"])] == [f"{m0}:add:{added[0]}"]
    nxt = m0 + HOUR_S
    journal_open = svc.journal_store.run_set_at(m0)
    assert added[0] in journal_open  # the journal decided it warm
    known = svc.reconciler.known_run_set(nxt, m0, journal_open)
    assert added[0] not in known.cards and set(added[1:]) <= known.cards
    hour = svc.decide.decide_hour(nxt)
    pos = svc.pool.current().pos
    assert not hour.carry.run_set[pos[added[0]]] and all(hour.carry.run_set[pos[k]] for k in added[1:])
    assert svc.decide.carried.carry.eligible[pos[added[0]]]  # not running, and still the policy's to choose
    size = svc.journal_store.decisions(kinds=["size"], since_ts=nxt, limit=1)[0]
    assert "was not carried out" in size.detail["not_counted"][added[0]]


def test_a_webhook_refusing_one_card_and_down_ten_minutes_decides_and_bills_the_month(tmp_path):
    """The acceptance trial with a webhook, served in process on a clock stepped ten minutes at a time: 400 for one
    card always, 503 to every request in the month's first ten minutes. Every hour is decided and billed, every
    other card's action is done exactly once, the refused card's are set aside after one try each."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from fleet.service.config import load_service_config
    from fleet.service.actuators import Webhook
    from fleet.service.service import Service
    from fleet.service.simulation import Simulation, simulation_config
    from tests.fake_prometheus import StepClock

    path = tmp_path / "tiny.toml"
    path.write_text(TINY_PRESET)
    scenario = load_preset(str(path)).resolve()
    cfg = simulation_config(load_service_config(None), scenario)
    sim = Simulation.of(scenario, cfg.month.start_ts)
    refused = str(sim.month.card_ids[0])
    clock = StepClock(cfg.month.start_ts)
    outage_until = cfg.month.start_ts + 600
    done: list[str] = []
    answered = {400: 0, 503: 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            code = 400 if body["card"] == refused else 503 if clock.t < outage_until else 200
            if code == 200:
                done.append(body["key"])
            else:
                answered[code] += 1
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 't.db'}"), clock,
                      actuator=Webhook(f"http://127.0.0.1:{server.server_address[1]}/act", 5), simulation=sim)
        while not svc.month_done() and clock.t < sim.end_ts + 2 * 3600:
            for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.act_job, svc.billing_job):
                job()
            clock.t += 600
    finally:
        server.shutdown()
        server.server_close()
    assert svc.month_done()
    assert len(svc.journal_store.hours(cfg.month.start_ts)) == sim.month.hours
    actions = [r for r in svc.journal_store.decisions() if r.kind in ("add", "release", "evict")]
    others = sorted(r.key for r in actions if r.card_key != refused)
    assert sorted(done) == others  # each once: none lost, none doubled
    aside = svc.journal_store.decisions(kinds=["act-failed"])
    assert sorted(r.detail["decision_key"] for r in aside) == sorted(r.key for r in actions if r.card_key == refused)
    assert aside and all(r.detail["tries"] == 1 and r.detail["outcome"] == "permanent" for r in aside)
    assert answered[503] > 0 and svc.journal_store.unacted() == []
