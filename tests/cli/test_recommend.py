"""The recommendation's `set` replays what compare reported, and the search finds each combination's headroom."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleet.cli.app import app

SMALL = Path(__file__).resolve().parent.parent / "core" / "compare_small.toml"
MONTHS = 4


@pytest.fixture(scope="module")
def recommended() -> list[dict]:
    result = CliRunner().invoke(app, ["compare", "-p", str(SMALL), "--recommend", "--months", str(MONTHS), "--jobs", "1", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_recommended_set_replays_the_figures_compare_reported(recommended):
    best = next(r for r in recommended if r["recommendation"] == "best")
    args = ["replay", "-p", str(SMALL), "--seeds", str(MONTHS), "--seed", "3", "--json"]
    for kv in best["set"]:
        args += ["--set", kv]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    spread = json.loads(result.stdout)["spread"]
    for key in ("convergence", "bill_usd", "idle_usd", "evictions", "wrong_evictions"):
        cent = 0.005 if key.endswith("_usd") else 1e-9  # --json prints dollars to the cent
        assert spread[key]["median"] == pytest.approx(best[key]["median"], rel=1e-12, abs=cent), key
    assert spread["pass_rate"]["capacity"] == best["pass_rate"]["capacity"]


def test_every_row_has_the_smallest_headroom_that_passes_capacity(recommended):
    """Each row's headroom passes capacity in >= 95% of months, one step less does not (or it is the search's floor)."""
    for row in recommended:
        if row["headroom"] >= 1.5:
            continue  # no headroom reaches it: shown at the top, failing
        assert row["pass_rate"]["capacity"] >= 0.95
        if row["headroom"] > 1.0:
            lower = ["replay", "-p", str(SMALL), "--seeds", str(MONTHS), "--seed", "3", "--json"]
            for kv in row["set"]:
                lower += ["--set", kv if not kv.startswith("policy.headroom=") else f"policy.headroom={row['headroom'] - 0.0025!r}"]
            spread = json.loads(CliRunner().invoke(app, lower).stdout)["spread"]
            assert spread["pass_rate"]["capacity"] < 0.95
            break  # one row is enough to show the search stops at the first passing step


def test_eviction_off_and_every_class_are_on_the_grid(recommended):
    assert {r["share"] for r in recommended} >= {0.0}
    assert {r["card_class"] for r in recommended} == {"flagship", "bargain", "any"}
    assert {r["score"] for r in recommended} == {"mean", "dip-aware"}
