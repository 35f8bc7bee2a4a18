"""`fleet plan` on a store whose month is decided to its end is not an error: a simulation's store says there is
nothing to plan (exit 0); a real pool's plans the first hour of the month that follows.

Before: both exited 2 (the status of bad input) with "the month is decided to its last hour; nothing to plan"."""

from __future__ import annotations

import json
import subprocess
import sys

from fleet.service.calendar import HOUR_S
from tests.cli.served_month import serve_tiny_month
from tests.fake_prometheus import StepClock
from tests.service.real_pool import FLAGSHIP_POOL, T0
from tests.service.test_expired_release import _drop_hour


def fleet(*args):
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, timeout=300)


def test_plan_on_a_simulation_decided_to_its_end_says_so(tmp_path):
    month = serve_tiny_month(tmp_path)
    month.service.telemetry.engine.dispose()
    p = fleet("plan", "--db", month.url, "--simulate", str(month.preset))
    assert (p.returncode, p.stderr) == (0, ""), p.stderr
    assert p.stdout.splitlines() == [f"nothing to plan on {month.url}: its month from 2026-01-01T00:00Z is decided to "
                                     "its last hour (2026-01-04T23:00Z), and a simulation plays one month"]
    p = fleet("plan", "--db", month.url, "--simulate", str(month.preset), "--json")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert (got["month_decided_to_its_end"], got["hour"], got["last_decided"]) == (True, None, "2026-01-04T23:00Z")


SHORT_MONTH = """\
[month]
start = 2026-01-01T00:00:00Z
hours = 3
""" + FLAGSHIP_POOL + """\
[schedule]
settle_s = 300
[ingest]
default_class = "flagship"
[ingest.sources.drop-folder]
folder = "{drop}"
"""


def test_plan_on_a_real_pool_decided_to_its_month_end_plans_the_next_month(tmp_path, store_url):
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from storage import open_store

    drop = tmp_path / "drop"
    drop.mkdir()
    (tmp_path / "fleet.toml").write_text(SHORT_MONTH.format(drop=drop))
    cfg = load_service_config(tmp_path / "fleet.toml")
    clock = StepClock(T0)
    svc = Service(cfg, open_store(store_url, create=True), clock)
    for h in range(-3, 3):
        _drop_hour(drop, h)
    for h in range(3):  # the three hours of the first month, each decided and acted on time
        clock.t = T0 + h * HOUR_S + 400
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.act_job):
            job()
    assert svc.journal_store.last_decided_ts(0, 2**62) == T0 + 2 * HOUR_S
    svc.store.close()

    from fleet.cli.plan import plan_hour

    reader = open_store(store_url, read_only=True)
    try:
        got = plan_hour(cfg, reader, None, now_ts=T0 + 3 * HOUR_S + 400)
    finally:
        reader.close()
    assert (got["hour"], got["month_hour"]) == ("2026-01-01T03:00Z", 0)  # the next month's first hour
    assert got["run_set_cards"] > 0
