"""`fleet plan`: the coming hour as the service would decide it, from the store, with nothing written.

The service is stepped by hand on an injected clock (as the service tests do) to
just before an hour H; `fleet plan` runs on its store; then the service decides H
and the journal's rows for H must be the plan's, card for card and reason for reason.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.core.units import NO_END_TS
from fleet.presets import load_preset
from fleet.service.calendar import HOUR_S
from tests.service.serving import TINY_PRESET
from fleet.service.simulation import SetClock as StepClock


def fleet(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, cwd=cwd, env=env)


def digest(folder: Path) -> dict[str, str]:
    """Every file of the store (the database, and its WAL and shared-memory files if any), by content."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("served.db*"))}


DIP_AWARE = TINY_PRESET.replace('mode = "steady"\n', 'mode = "steady"\nscore = "dip-aware"\n')


def serve_until(tmp_path: Path, hour: int, jobs: tuple[str, ...], preset: str = TINY_PRESET):
    """A service of the tiny preset whose clock is just past the start of month hour `hour`, with every hour before
    it decided; then only `jobs` run at that time (say, ingest alone: hour `hour` is fed and not yet scored)."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import Simulation, simulation_config
    from storage.repository import open_repository

    (tmp_path / "tiny.toml").write_text(preset)
    scenario = load_preset(str(tmp_path / "tiny.toml")).resolve()
    cfg = simulation_config(load_service_config(None), scenario)
    url = f"sqlite:///{tmp_path / 'served.db'}"
    clock = StepClock(cfg.month.start_ts + 1)
    svc = Service(cfg, open_repository(url), clock, simulation=Simulation.of(scenario, cfg.month.start_ts))
    # Hour by hour, as a running service meets them: each hour's actions carried out within it (a store caught up
    # in one go would expire all but the last hours' actions, and plan from a pool that ran none of them).
    for h in range(hour):
        clock.t = cfg.month.start_ts + h * HOUR_S + 1
        for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
            job()
    assert svc.journal_store.last_decided_ts(0, NO_END_TS) == cfg.month.start_ts + (hour - 1) * HOUR_S
    clock.t += HOUR_S
    for name in jobs:
        getattr(svc, f"{name}_job")()
    return svc, url, cfg.month.start_ts + hour * HOUR_S


def journal_of(svc, hour_ts: int) -> list[tuple]:
    rows = svc.journal_store.decisions(since_ts=hour_ts, until_ts=hour_ts + 1)
    return sorted((r.kind, r.card_key or "", r.reason) for r in rows)


def plan_of(plan: dict) -> list[tuple]:
    return sorted((e["kind"], e["card"] or "", e["reason"]) for e in plan["entries"])


@pytest.mark.parametrize("hour,jobs,preset", [(48, ("ingest",), TINY_PRESET), (48, ("ingest", "score"), TINY_PRESET),
                                              (37, ("ingest",), TINY_PRESET), (48, ("ingest",), DIP_AWARE),
                                              (48, ("ingest", "score"), DIP_AWARE)],
                         ids=["eviction-hour-unscored", "eviction-hour-scored", "sizing-hour", "dip-aware-unscored", "dip-aware-scored"])
def test_plan_is_what_the_service_then_decides_and_writes_nothing(tmp_path, hour, jobs, preset):
    assert preset == TINY_PRESET or 'score = "dip-aware"' in preset
    svc, url, hour_ts = serve_until(tmp_path, hour, jobs, preset)
    svc.telemetry.engine.dispose()  # the service's connections closed: its WAL is checkpointed into the file
    before = digest(tmp_path)
    got = fleet("plan", "--db", url, "--simulate", str(tmp_path / "tiny.toml"), "--json")
    assert got.returncode == 0, got.stderr
    assert digest(tmp_path) == before  # byte for byte: nothing journaled, scored or acted
    plan = json.loads(got.stdout)
    assert plan["hour_ts"] == hour_ts and plan["month_hour"] == hour
    assert (plan["eviction_pass"] is not None) == (hour % 24 == 0)

    svc.score_job()
    svc.decide_job()
    assert svc.journal_store.last_decided_ts(0, NO_END_TS) == hour_ts
    assert plan_of(plan) == journal_of(svc, hour_ts)
    assert set(plan["run_set"]) == svc.journal_store.run_set_at(hour_ts)
    if plan["eviction_pass"] is not None:
        stored = svc.journal_store.decisions(kinds=["eviction-pass"], since_ts=hour_ts, until_ts=hour_ts + 1)[0].detail
        for key in ("candidates", "evicted", "threshold_tps", "median_score_tps", "budget_left_before", "budget_left_after", "scores"):
            assert plan["eviction_pass"][key] == pytest.approx(stored[key]), key


def test_plan_text_names_the_hour_the_pass_and_each_candidate(tmp_path):
    svc, url, hour_ts = serve_until(tmp_path, 48, ("ingest",))
    got = fleet("plan", "--db", url, "--simulate", str(tmp_path / "tiny.toml"))
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[0].startswith("plan for 2026-01-03T00:00Z (month hour 48)") and "nothing journaled or acted" in lines[0]
    assert any(line.startswith("eviction pass (below-median, hour window): judged ") and "threshold" in line and "budget" in line
               for line in lines)


def test_plan_of_a_simulated_store_asks_for_its_preset_when_it_is_a_file(tmp_path):
    svc, url, _ = serve_until(tmp_path, 30, ())
    got = fleet("plan", "--db", url)
    assert got.returncode == 2
    assert got.stderr.startswith("fleet: error: database ") and "tiny-evictor" in got.stderr and "--simulate" in got.stderr


def test_plan_on_a_store_that_is_not_there_creates_nothing(tmp_path):
    # Before `fleet plan` there was no such command (exit 2, "No such command 'plan'").
    got = fleet("plan", "--db", f"sqlite:///{tmp_path / 'typo.db'}", cwd=tmp_path)
    assert got.returncode == 2
    assert got.stderr.splitlines()[0] == f"fleet: error: database 'sqlite:///{tmp_path / 'typo.db'}': no such file; no store there (nothing was created)"
    assert list(tmp_path.iterdir()) == []
