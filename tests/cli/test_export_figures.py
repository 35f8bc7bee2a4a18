"""The export's JSON reads as `--json` does: dollars to the cent, and `"seeds"` naming every seed replayed; a month at
the finer clock adds up from its hours as an hourly one does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest


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


def test_a_month_at_the_finer_clock_adds_up_from_its_hours(tmp_path):
    """With a queue and the reactive loop at 10-minute steps, hours.csv is read from the walk: the plan's rent and the
    loop's add up to the bill, delivered tokens (on time or late) to the month's, and idle cost and the finer clock's
    ideal to the summary's; adds.csv lists the loop's adds."""
    pool = Path(__file__).resolve().parents[2] / "bench" / "pools" / "servegen-m-mid.toml"
    out = tmp_path / "out"
    p = fleet("replay", "-p", str(pool), "--set", "step_minutes=10", "--set", "demand.max_wait_s=1200",
              "--set", "policy.reactive.headroom=1.2", "--export", str(out))
    assert p.returncode == 0, p.stderr
    s = json.loads((out / "summary.json").read_text())
    hours, cards, ev = (pd.read_csv(out / f) for f in ("hours.csv", "cards.csv", "evictions.csv"))
    assert len(hours) == s["hours"]
    churn = 0.15 * float(cards.set_index("card_id").loc[ev.card_id, "rent_usd_per_month"].sum())
    assert s["traffic"]["reactive_usd"] > 0 and s["traffic"]["served_late_tokens"] > 0  # the loop and the queue both ran
    kept = s["traffic"]["loop_cards_avg"]
    assert kept > 0 and f"the reactive loop kept {kept:.2f} more an hour on average" in p.stdout
    assert hours.reactive_usd.sum() == pytest.approx(s["traffic"]["reactive_usd"], abs=0.005)
    assert hours.warm_usd.sum() + hours.reactive_usd.sum() + churn == pytest.approx(s["bill_usd"], abs=0.01)
    assert (hours.delivered_tps <= hours.capacity_tps * (1 + 1e-9)).all()
    assert hours.delivered_tps.mean() == pytest.approx(s["delivered_avg_tps"])
    lost = (hours.demand_tps.sum() - hours.delivered_tps.sum()) / hours.demand_tps.sum()
    assert lost == pytest.approx(s["unmet_share"], abs=1e-9)
    idle = ((hours.warm_usd + hours.reactive_usd) * (1 - hours.delivered_tps / hours.capacity_tps)).sum()
    assert idle == pytest.approx(s["idle_usd"], abs=0.005)
    assert hours.ideal_usd.sum() == pytest.approx(s["ideal_bill_usd"], abs=0.005)
    assert s["convergence"] == pytest.approx(s["ideal_bill_usd"] / s["bill_usd"])
    # adds.csv: the loop's every add with its reason, each a card the plan did not run that hour.
    adds, iv = pd.read_csv(out / "adds.csv"), pd.read_csv(out / "intervals.csv")
    assert len(adds) == s["traffic"]["reactive_adds"] > 0
    assert adds.reason.str.startswith("reactive: step demand").all()
    planned = {(c, h) for c, a, b in zip(iv.card_id, iv.start_hour, iv.end_hour) for h in range(a, b)}
    assert not any((c, h) in planned for c, h in zip(adds.card_id, adds.hour))



def test_under_a_promise_at_the_finer_clock_goodput_is_read_step_by_step_hour_by_hour(tmp_path):
    out = tmp_path / "out"
    p = fleet("replay", "-p", "chat-latency", "--set", "step_minutes=10", "--set", "demand.max_wait_s=1200",
              "--set", "policy.reactive.headroom=1.2", "--export", str(out))
    assert p.returncode == 0, p.stderr
    s = json.loads((out / "summary.json").read_text())
    hours = pd.read_csv(out / "hours.csv")
    assert (hours.goodput_tps <= hours[["delivered_tps", "rate_at_promise_tps"]].min(axis=1) + 1e-6).all()
    assert hours.goodput_tps.mean() == pytest.approx(s["goodput_avg_tps"])
    assert hours.goodput_tps.sum() / hours.delivered_tps.sum() == pytest.approx(s["goodput_share"])
    demand = hours.demand_tps.sum()
    assert (demand - hours.goodput_tps.sum()) / demand == pytest.approx(s["checks"]["capacity"]["value"])
