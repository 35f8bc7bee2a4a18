"""The benchmark's quick mode runs and prints every figure at every quick size, with its reference and target."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import SIZES, WINDOWS  # noqa: E402


@pytest.fixture(scope="module")
def quick_output(tmp_path_factory) -> str:
    out_json = tmp_path_factory.mktemp("bench") / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--quick", "--repeats", "1", "--json", str(out_json)],
        capture_output=True, text=True, timeout=170, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _lines(out: str, name: str, size: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith(name) and f" {size} " in ln]


def test_every_replay_figure_at_every_quick_size(quick_output):
    for cards in SIZES["replay"]["quick"]:
        size = f"{cards:,} cards"
        for window in WINDOWS:
            (line,) = _lines(quick_output, f"replay month, {window} window", size)
            assert "x of sum over telemetry" in line, line
        assert _lines(quick_output, "peak memory", size)
        assert _lines(quick_output, "draw the month", size)
        assert f"stages of a replay, {size}: " in quick_output


def test_every_ingest_figure_with_its_plain_reference_and_target(quick_output):
    for samples in SIZES["ingest"]["quick"]:
        (line,) = _lines(quick_output, "fleet ingest CSV -> SQLite", f"{samples:,} samples")
        assert "x of plain executemany" in line and ">= 300,000/s" in line, line


def test_every_tick_and_metrics_figure_at_every_quick_size(quick_output):
    for cards in SIZES["tick"]["quick"]:
        size = f"{cards:,} cards"
        for name in ("scheduler tick, hour/day/week scored", "same, at a decision hour (+ eviction)", "scheduler tick, the policy's 2 windows"):
            assert len(_lines(quick_output, name, size)) == 1, name
        for name in ("/metrics scrape, per-card series on", "/metrics scrape, per-card series off"):
            assert len(_lines(quick_output, name, size)) == 1, name


def test_no_verdict_is_given_at_smoke_sizes(quick_output):
    # The targets name the full sizes; a smoke size that "misses" one says nothing about it.
    assert "MISSED" not in quick_output
    assert not [ln for ln in quick_output.splitlines() if ln.rstrip().endswith(" met")]


def test_the_full_sizes_are_the_ones_the_targets_name():
    assert SIZES["replay"]["full"] == (1_000, 10_000, 100_000)
    assert SIZES["tick"]["full"][-1] == SIZES["metrics"]["full"][-1] == 10_000
    assert all(len(s["full"]) == 3 and len(s["quick"]) == 3 for s in SIZES.values())
