"""The service decides by the hour: a finer clock, a queue or a reactive loop it would not run is refused in one
line (exit 2) before any store is made, not served silently as an hourly plan."""

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
    ("[policy.reactive]\nheadroom = 1.2\n", "[policy.reactive]: the service has no reactive loop yet"),
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
    ("", "\n[policy.reactive]\nheadroom = 1.2\n", "[policy.reactive]: the service has no reactive loop yet"),
])
def test_a_simulated_pool_on_a_finer_clock_is_refused(tmp_path, top, tail, words):
    (tmp_path / "pool.toml").write_text(top + PRESET.read_text() + tail)
    p = fleet("serve", "--simulate", "pool.toml", "--exit-when-done", cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and words in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["pool.toml"]
