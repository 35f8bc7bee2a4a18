"""`fleet serve`'s reactive job beside stand-in vLLM servers behind a real Prometheus: the pool's queue jumps within
the hour, the job adds the spare cards within two of its intervals, journaled with its reason before they are
acted on, and the hourly plan keeps them until their cool-down has passed, then releases them.

The service runs in process on a `StepClock` stepped one reactive interval at a time, the stand-ins on a timeline
of their own stamped on every sample, so nothing asserted depends on when Prometheus scraped or the jobs ran."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from fleet.core.units import HOUR_S
from fleet.ingest.demand.vllm_queue import generated_query
from fleet.service.config import load_service_config
from storage.repository import open_repository
from tests.fake_prometheus import StepClock
from tests.vllm_standin import STANDIN_WINDOW, Timeline, beside_prometheus, standin_pool_toml

PROMETHEUS = shutil.which("prometheus")
T0 = 1_767_225_600  # 2026-01-01T00:00Z
STEP_S = 60
HOURS = 3
CAPACITY_TPS = 3000.0
STEPS = HOURS * HOUR_S // STEP_S + 2
MINUTE_TOKENS = CAPACITY_TPS * STEP_S
JUMP_STEP = 80  # 01:20: 1,500,000 tokens arrive at card a at once
JUMP_TOKENS = 1_500_000.0
COOLDOWN_MINUTES = 90
# Cards a and b serve 2,000 tok/s; c and d serve at their 3,000 every other minute (in turn: the pool's demand is
# 9,000 tok/s every minute); e and f serve 1,000. The plan sizes hour 1 to hour 0's 9,000 with c, d, a and b
# (10,000 scored), leaving e and f spare; the loop (headroom 1.05: 9,450) adds nothing until the queue jumps.
TIMELINES = {
    "a": dict(offered_tps=(2000.0,) * HOURS, bursts={JUMP_STEP: JUMP_TOKENS}),
    "b": dict(offered_tps=(2000.0,) * HOURS),
    "c": dict(offered_tps=(0.0,) * HOURS, bursts={k: MINUTE_TOKENS for k in range(1, STEPS, 2)}),
    "d": dict(offered_tps=(0.0,) * HOURS, bursts={k: MINUTE_TOKENS for k in range(2, STEPS, 2)}),
    "e": dict(offered_tps=(1000.0,) * HOURS),
    "f": dict(offered_tps=(1000.0,) * HOURS),
}


@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed (Debian: apt-get install -y prometheus)")
def test_the_reactive_job_adds_cards_when_the_queue_jumps_and_the_plan_keeps_them_through_the_cool_down(tmp_path):
    timelines = {card: Timeline(T0, STEP_S, CAPACITY_TPS, **kw) for card, kw in TIMELINES.items()}
    beside_prometheus(PROMETHEUS, tmp_path, timelines, lambda work, url, names: _serve(work, url), relabel=True)


def _serve(tmp_path, url: str) -> None:
    from fleet.service.service import Service

    (tmp_path / "fleet.toml").write_text(standin_pool_toml(
        url, policy=f"[policy.reactive]\nheadroom = 1.05\ncooldown_minutes = {COOLDOWN_MINUTES}",
        schedule=f"reactive_interval_s = {STEP_S}", tables=f"[reactive]\ndemand_query = '{generated_query(STANDIN_WINDOW)}'"))
    cfg = load_service_config(tmp_path / "fleet.toml")
    clock = StepClock(T0 + 301)
    db = f"sqlite:///{tmp_path / 'fleet.db'}"
    svc = Service(cfg, open_repository(db), clock)
    added_at: dict[int, int] = {}
    while clock.t <= T0 + HOURS * HOUR_S + 301:
        if (clock.t - T0 - 301) % 600 == 0:
            for job in (svc.ingest_job, svc.score_job, svc.decide_job, svc.billing_job):
                job()
        n = svc.reactive_job()
        if n:
            added_at[int(clock.t)] = n
        if clock.t == T0 + 5401:  # 01:30: `fleet status` says the loop's adds within the plan's hour
            status, said = _fleet("status", "--db", db, "--json"), _fleet("status", "--db", db)
        clock.t += STEP_S
    store = svc.journal_store
    adds = [r for r in store.decisions(kinds=["add"], since_ts=T0) if r.record.reactive]
    jump_ts = T0 + JUMP_STEP * STEP_S
    print("reactive adds", [(r.ts - T0, r.card_key, r.reason) for r in adds])
    print("run sets", [sorted(store.run_set_at(T0 + h * HOUR_S)) for h in range(HOURS + 1)])
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)["reactive_adds"]
    assert [(a["card"], a["reason"]) for a in shown] == [(r.card_key, r.reason) for r in adds]
    print(said.stdout)
    assert "reactive adds since 2026-01-01T01:00Z: 2 (e, f); the latest at 2026-01-01T01:20Z" in " ".join(
        said.stdout.split())
    explained = _fleet("explain", "e", "--db", db)
    assert explained.returncode == 0, explained.stderr
    assert "add: reactive: " in " ".join(explained.stdout.split())
    listed = _fleet("journal", "--kind", "add", "--db", db, "--json")
    assert {(e["card"], e["reason"]) for e in json.loads(listed.stdout) if e["reason"].startswith("reactive: ")} == {
        (r.card_key, r.reason) for r in adds}
    # Nothing before the jump; within two intervals of it, both spares, each journaled with its reason and acted on.
    assert sorted(r.card_key for r in adds) == ["e", "f"]
    assert all(jump_ts <= r.ts <= jump_ts + 2 * STEP_S for r in adds)
    assert added_at == {adds[0].ts: 2}
    for r in adds:
        assert r.reason.startswith("reactive: ") and "backlog" in r.reason and "above the scored capacity" in r.reason
        assert r.record.backlog_tokens == pytest.approx(JUMP_TOKENS - (CAPACITY_TPS - 2000.0) * STEP_S, rel=0.01)
        assert r.record.scored_capacity_tps == pytest.approx(10_000, rel=0.05)
        assert r.record.held_until_ts == r.ts + COOLDOWN_MINUTES * 60
        assert r.acted_ts is not None
    added_ts = adds[0].ts
    # The plan: e and f not run at 01:00; kept at 02:00 (cooling down), released at 03:00 (cooled down).
    releases = {(r.ts, r.card_key) for r in store.decisions(kinds=["release"], since_ts=T0)}
    assert not {"e", "f"} & store.run_set_at(T0 + HOUR_S)
    assert not {k for ts, k in releases if ts == T0 + 2 * HOUR_S} & {"e", "f"}
    assert {"e", "f"} <= store.run_set_at(T0 + 2 * HOUR_S)
    assert T0 + 2 * HOUR_S < added_ts + COOLDOWN_MINUTES * 60 <= T0 + 3 * HOUR_S
    assert {(T0 + 3 * HOUR_S, "e"), (T0 + 3 * HOUR_S, "f")} <= releases
    # The bill: the loop's cards pay the hour they were added in (01:00), and the next, as the run set's others.
    assert [h.cards_warm for h in store.hours(T0)[:3]] == [0, 6, 6]
    assert not {"e", "f"} & store.run_set_at(T0 + 3 * HOUR_S)


def _fleet(*args):
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, timeout=120)
