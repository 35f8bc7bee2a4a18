"""`fleet plan` on a freshly ingested real pool: the store's class rows have no rated rate or rent until `fleet serve`
writes the config's, yet the plan is what serve then decides (before, it planned an empty run set)."""

from __future__ import annotations

import subprocess
import sys

from fleet.service.calendar import HOUR_S
from fleet.service.simulation import SetClock as StepClock

T0 = 1_767_225_600  # 2026-01-01T00:00Z, the config's month start
CARDS = 5
CONFIG = """\
[month]
start = 2026-01-01T00:00:00Z

[[pool.classes]]
name = "flagship"
rated_tps = 6000
rent_usd_per_month = 2690

[policy]
card_class = "flagship"
window = "hour"
mode = "steady"
headroom = 1.0
forecast = "last-hour"         # a real pool's demand is measured and forecast, never known ahead

[demand]
shape = "flat"
avg_tps = 15000
"""


def _ingest(tmp_path) -> str:
    rows = "".join(f"gpu-{c},{T0 - 3 * HOUR_S + 60 * k},{5000 + 300 * c}\n" for c in range(CARDS) for k in range(3 * 60))
    (tmp_path / "t.csv").write_text("card_id,ts,tokens_per_s\n" + rows)
    url = f"sqlite:///{tmp_path / 's.db'}"
    p = subprocess.run([sys.executable, "-m", "fleet.cli.app", "ingest", str(tmp_path / "t.csv"), "--db", url,
                        "--class", "flagship"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return url


def test_plan_on_a_freshly_ingested_pool_is_what_serve_decides(tmp_path):
    from fleet.cli.plan import plan_hour
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from storage import open_store

    url = _ingest(tmp_path)
    (tmp_path / "serve.toml").write_text(CONFIG)
    cfg = load_service_config(str(tmp_path / "serve.toml"), {"storage": {"url": url}})
    now = T0 + 600  # past the hour's settle time (300 s), so serve scores and decides it
    reader = open_store(url)
    assert not any(c.rent_usd_per_month for c in reader.telemetry.classes().values())  # as ingested: no rent yet
    plan = plan_hour(cfg, reader, None, now_ts=now)
    reader.close()
    assert plan["hour_ts"] == T0
    assert plan["run_set_cards"] > 0  # the store's classes as serve will declare them (before, an empty run set)

    svc = Service(cfg, open_store(url, create=True), StepClock(now))
    svc.score_job()
    svc.decide_job()
    journal = sorted((r.kind, r.card_key or "", r.reason) for r in svc.journal_store.decisions(since_ts=T0, until_ts=T0 + 1))
    assert sorted((e["kind"], e["card"] or "", e["reason"]) for e in plan["entries"]) == journal
    assert set(plan["run_set"]) == svc.journal_store.run_set_at(T0)


class RefuseAdds:
    """An actuator that refuses every add of one card, for good (its adds are set aside), and does the rest."""

    name = "refuse-adds"

    def __init__(self, card: str):
        self.card = card

    def act(self, row, epoch=None):
        from fleet.core.retry import PERMANENT
        from fleet.service.acting import ActuatorError

        if row.card_key == self.card and row.kind == "add":
            raise ActuatorError(f"no capacity for {row.card_key}", PERMANENT)

    def close(self):
        pass


def test_the_plan_is_what_serve_journals_beside_a_real_pool_with_an_add_set_aside_and_a_silent_card(tmp_path):
    """Reconcile on, as beside any real pool: gpu-d's adds are always refused (set aside), and gpu-a, warm from the
    first hour, sends nothing in hours 2 and 3. Before serve decides each hour, `fleet plan` (a read-only store) plans
    it: the plan's rows are the rows serve then journals, card for card and reason for reason, and the hours where
    the pool ran other than the journal decided say so in both."""
    from fleet.cli.plan import plan_hour
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from storage import open_store
    from tests.fake_prometheus import StepClock as Clock
    from tests.service.test_reconcile import CONFIG, RATES, SILENT_AFTER_S, _drop_hour

    drop = tmp_path / "drop"
    drop.mkdir()
    (tmp_path / "fleet.toml").write_text(CONFIG.format(silent=SILENT_AFTER_S, drop=drop))
    url = f"sqlite:///{tmp_path / 'p.db'}"
    cfg = load_service_config(str(tmp_path / "fleet.toml"), {"storage": {"url": url}})
    clock = Clock(T0)
    svc = Service(cfg, open_store(url, create=True), clock, actuator=RefuseAdds("gpu-d"))
    for h in range(-3, 0):
        _drop_hour(drop, h, RATES)
    said: dict[str, list[str]] = {"not carried out": [], "silent": []}
    for h in range(0, 5):
        _drop_hour(drop, h, [c for c in RATES if c != "gpu-a" or h <= 1 or h >= 4])
        clock.t = T0 + h * HOUR_S + 400
        svc.ingest_job()
        reader = open_store(url, read_only=True)
        plan = plan_hour(cfg, reader, None, now_ts=clock.t)
        reader.close()
        assert plan["hour_ts"] == T0 + h * HOUR_S
        svc.score_job()
        svc.decide_job()
        svc.billing_job()
        rows = svc.journal_store.decisions(since_ts=plan["hour_ts"], until_ts=plan["hour_ts"] + 1)
        assert sorted((e["kind"], e["card"] or "", e["reason"]) for e in plan["entries"]) == sorted(
            (r.kind, r.card_key or "", r.reason) for r in rows), h
        assert set(plan["run_set"]) == svc.journal_store.run_set_at(plan["hour_ts"])
        size = next(r for r in rows if r.kind == "size").detail
        assert plan["size"].get("not_counted", {}) == size.get("not_counted", {})
        for why in size.get("not_counted", {}).values():
            said["not carried out" if "not carried out" in why else "silent"].append(why)
    assert svc.journal_store.decisions(kinds=["act-failed"], card_key="gpu-d")  # its adds were set aside
    assert said["not carried out"] and any("no telemetry since" in w for w in said["silent"])  # both were planned
