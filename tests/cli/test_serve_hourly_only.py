"""The service plans by the hour: a finer clock or a queue it would not run is refused in one line (exit 2) before
any store is made, not served silently as an hourly plan; so is a reactive loop with no Prometheus to read the
queue from, and one asked of a simulated pool (which has no queue to read)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

POOL = """
[pool]
[[pool.classes]]
name = "flagship"
rated_tps = 6000
rent_usd_per_month = 2690
[policy]
card_class = "flagship"
"""


def fleet(*args, cwd):
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@pytest.mark.parametrize("extra, words", [
    ("[policy.reactive]\nheadroom = 1.2\n", "[policy.reactive]: the reactive job reads the pool's queue from Prometheus"),
    ("[demand]\nmax_wait_s = 60\n", "demand.max_wait_s: the service bills the hourly fluid, with no queue"),
])
def test_a_config_asking_for_what_the_service_does_not_run_is_refused(tmp_path, extra, words):
    (tmp_path / "svc.toml").write_text(POOL + extra)
    p = fleet("serve", "--config", "svc.toml", cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and words in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["svc.toml"]


PRESET = Path(__file__).resolve().parents[2] / "presets" / "noise-evictor.toml"


@pytest.mark.parametrize("top, tail, words", [
    ("step_minutes = 10\n", "", "step_minutes = 10: the service decides by the hour"),
    ("", "\n[policy.reactive]\nheadroom = 1.2\n", "[policy.reactive]: the reactive job reads a real pool's queue"),
])
def test_a_simulated_pool_on_a_finer_clock_is_refused(tmp_path, top, tail, words):
    (tmp_path / "pool.toml").write_text(top + PRESET.read_text() + tail)
    p = fleet("serve", "--simulate", "pool.toml", "--exit-when-done", cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and words in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["pool.toml"]


def test_a_reactive_loop_beside_prometheus_is_served(tmp_path):
    """`[policy.reactive]` with a Prometheus server to read is accepted: the reactive job is scheduled beside the
    hourly jobs, at `[schedule] reactive_interval_s`."""
    from fleet.service.config import load_service_config
    from fleet.service.service import Service
    from fleet.service.simulation import SetClock
    from storage.repository import open_repository

    (tmp_path / "svc.toml").write_text(POOL + '[policy.reactive]\nheadroom = 1.2\n[schedule]\nreactive_interval_s = 30\n'
                                       '[ingest.sources.prometheus]\nprometheus_url = "http://127.0.0.1:9"\n'
                                       'demand_source = "vllm-queue"\n[policy.forecast]\n'.replace("[policy.forecast]\n", ""))
    text = (tmp_path / "svc.toml").read_text().replace('card_class = "flagship"\n',
                                                        'card_class = "flagship"\nforecast = "last-hour"\n')
    (tmp_path / "svc.toml").write_text(text)
    cfg = load_service_config(tmp_path / "svc.toml")
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 'fleet.db'}"), SetClock(1_767_225_600))
    assert svc.intervals()["reactive"] == 30
    assert "reactive" in svc.stats and svc.reactive.queue.url == "http://127.0.0.1:9"
