"""The export's JSON reads as `--json` does: dollars to the cent, and `"seeds"` naming every seed replayed."""

from __future__ import annotations

import json
import subprocess
import sys


def fleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, timeout=600)


def _dollar_figures(obj, dollars: bool = False):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _dollar_figures(v, dollars or k.endswith("_usd"))
    elif isinstance(obj, list):
        for v in obj:
            yield from _dollar_figures(v, dollars)
    elif dollars and isinstance(obj, float):
        yield obj


def test_summary_json_gives_dollars_to_the_cent_as_json_does(tmp_path):
    p = fleet("replay", "-p", "bargain-shortfall", "--export", str(tmp_path / "out"), "--json")
    assert p.returncode == 0, p.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["bill_usd"] == 28840.0  # the sum's float noise was 28839.999999999993
    figures = list(_dollar_figures(summary))
    assert figures and all(round(v, 2) == v for v in figures)
    printed = json.loads(p.stdout)
    assert {k: v for k, v in summary.items() if k.endswith("_usd")} == {k: v for k, v in printed.items() if k.endswith("_usd")}


def test_seeds_lists_every_seed_replayed(tmp_path):
    p = fleet("replay", "-p", "noise-evictor", "--seeds", "3", "--seed", "10", "--export", str(tmp_path / "out"), "--json")
    assert p.returncode == 0, p.stderr
    spread = json.loads((tmp_path / "out" / "spread.json").read_text())
    assert json.loads(p.stdout)["seeds"] == spread["seeds"] == [10, 11, 12]
    assert all(round(v, 2) == v for v in _dollar_figures(spread))
