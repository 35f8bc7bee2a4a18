"""`fleet compare --recommend` on a pool too small for its demand: no forecaster reaches the capacity mark within the
search's headroom, and the command says what fails instead of crashing (it once died formatting the forecaster's
missing headroom, exit 1, and exited 0 with --json). Nothing passing is exit status 4, in text and in JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fleet.cli.compare_view import forecast_note
from fleet.core.compare import HEADROOM_SEARCH
from fleet.core.demand_search import ForecastChoice

FLEET = [sys.executable, "-m", "fleet.cli.app"]
CARDS, RATED_TPS = 6, 6000

# Six flagship cards for a noisy diurnal demand whose peak is several times what they serve.
SMALL_POOL = f"""\
name = "small-pool"
story = "six flagships for a bursting diurnal demand whose peak is more than they serve"
seed = 3
hours = 72
warmup_hours = 168

[[classes]]
name = "flagship"
rated_tps = {RATED_TPS}
rent_usd_per_month = 2690
pool_cards = {CARDS}

[lottery]
sigma = 0.2

[dips]
start_prob_per_hour = 0.01
hours = 4
depth = 0.5

[demand]
shape = "diurnal"
avg_tps = 30000
peak_to_avg = 1.8
noise = 0.6
burst_prob_per_hour = 0.05
burst_mult = 2.5
burst_hours = 2

[policy]
card_class = "flagship"
window = "day"
mode = "steady"
headroom = 1.05
forecast = "last-hour"

[policy.eviction]
rule = "none"
"""


@pytest.fixture(scope="module")
def small_pool(tmp_path_factory):
    path = tmp_path_factory.mktemp("pool") / "small-pool.toml"
    path.write_text(SMALL_POOL)
    return path


def recommend(pool, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FLEET, "compare", "-p", str(pool), "--recommend", "--months", "3", "--jobs", "1", *extra],
                          capture_output=True, text=True, timeout=600)


def test_recommend_on_a_pool_too_small_for_its_demand_says_why_and_exits_4(small_pool):
    r = recommend(small_pool)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 4, r.stderr
    out = " ".join(r.stdout.split())
    assert f"no forecaster and margin covers the demand within headroom {HEADROOM_SEARCH[1]:g}" in out
    assert "No recommendation: none of the" in out
    assert "capacity: " in out and "--set checks.max_unmet_share=" in out
    assert "the pool is too small for its demand's peak" in out
    assert f"against {CARDS * RATED_TPS:,} tok/s rated for every card of the classes it rents" in out


def test_with_json_the_nearest_row_carries_its_shortfall_and_the_status_is_4(small_pool):
    r = recommend(small_pool, "--json")
    assert r.returncode == 4, r.stderr
    assert r.stderr.strip().startswith("fleet: no recommendation: none of the") and len(r.stderr.strip().splitlines()) == 1
    rows = json.loads(r.stdout)
    assert all(row["recommendation"] is None for row in rows)
    (nearest,) = [row for row in rows if "shortfall" in row]
    short = nearest["shortfall"]
    capacity = next(c for c in short["checks"] if c["check"] == "capacity")
    # The capacity check's own figure, against its mark; the mark that passes is no lower than the median month's.
    assert capacity["median"] == pytest.approx(nearest["unmet_share"]["median"])
    assert capacity["pass_rate"] == nearest["pass_rate"]["capacity"] < 0.95
    assert capacity["passing_mark"] >= capacity["median"] > capacity["mark"]
    assert capacity["set"] == f"checks.max_unmet_share={capacity['passing_mark']:g}"
    # Told the demand, the same policy still fails capacity: the demand's peak is past every card's rated rate.
    twin = short["clairvoyant"]
    assert 'policy.forecast="known"' in twin["set"] and twin["pass_rate"]["capacity"] < 0.95
    assert short["pool_rated_tps"] == CARDS * RATED_TPS < short["demand_peak_tps"]


def test_the_marks_named_pass_the_nearest_combination(small_pool):
    """Replaying the nearest combination at the marks the shortfall names, its checks pass where it said."""
    rows = json.loads(recommend(small_pool, "--json").stdout)
    (nearest,) = [row for row in rows if "shortfall" in row]
    marks = [f"--set={c['set']}" for c in nearest["shortfall"]["checks"]]
    fixed = [f"--set={s}" for s in nearest["set"]]
    # Two combinations (its own score and the other) give a recommendation a chance; the nearest is one of them.
    r = subprocess.run([*FLEET, "compare", "-p", str(small_pool), "--months", "3", "--jobs", "1", "--json",
                        "--score", "mean,dip-aware", *fixed, *marks], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    again = next(row for row in json.loads(r.stdout) if row["set"] == nearest["set"])
    assert again["all_checks_pass_rate"] == pytest.approx(nearest["shortfall"]["together_pass_rate"])


def test_the_forecast_line_says_when_no_forecaster_covers_the_demand():
    none = ForecastChoice("seasonal", None, None, float("inf"), 0.25)
    line = forecast_note(none, 0.95)
    assert "errs least (mean error 25.0% an hour)" in line and "inf" not in line
    found = ForecastChoice("last-hour", 0.75, 1.1, 1.234, 0.1)
    assert "sized to its errors' 0.75 quantile" in forecast_note(found, 0.95) and "1.234× demand" in forecast_note(found, 0.95)


@pytest.mark.parametrize("check, median, mark, passing, words", [
    ("capacity", 0.0154, 0.005, 0.1042, "capacity: 1.54% of demand in the median month against the mark 0.50% of "
                                        "demand; passes in 25% of months, 95% needed: a mark of 10.42% of demand"),
    ("convergence", 0.85, 0.9, 0.801, "convergence: 85.0% in the median month against the mark 90.0%; passes in 25% "
                                      "of months, 95% needed: a mark of 80.1% passes"),
    ("eviction", 2.0, 0.0, 3.0, "eviction: 2 wrong in the median month against the mark 0 wrong; passes in 25% of "
                                "months, 95% needed: a mark of 3 wrong passes"),
    # Once said "1 wrong in the median month against the mark 1 wrong" for a promise's share of tokens.
    ("latency", 0.982, 0.99, 0.8958, "latency: 98.20% of delivered tokens within the promise in the median month "
                                     "against the mark 99.00% of delivered tokens within the promise; passes in 25% "
                                     "of months, 95% needed: a mark of 89.58% of delivered tokens within the promise "
                                     "passes (--set checks.latency_share=0.8958)"),
])
def test_each_check_is_said_in_its_own_units(check, median, mark, passing, words):
    from fleet.cli.compare_view import shortfall_lines
    from fleet.core.shortfall import CheckShortfall, Shortfall

    short = Shortfall(combo=None, min_pass_rate=0.95, checks=(CheckShortfall(check, 0.25, mark, median, passing),),
                      together_pass_rate=1.0, clairvoyant=None, demand_peak_tps=1.0, pool_rated_tps=2.0)
    assert words in shortfall_lines(short)[1]


# Forty flagships for a flat demand whose level jumps 15% from hour to hour at random: no forecast sees the next hour.
_HEAD, _REST = SMALL_POOL.replace('name = "small-pool"', 'name = "bursty-pool"').replace(
    f"pool_cards = {CARDS}", "pool_cards = 40").split("[demand]")
BURSTY_POOL = _HEAD + '[demand]\nshape = "flat"\navg_tps = 120000\njitter = 0.15\n\n[policy]' + _REST.split("[policy]")[1]


def test_on_independent_hourly_noise_it_names_the_ceiling_no_forecast_passes(tmp_path):
    from fleet.core.noise_ceiling import noise_ceiling

    pool = tmp_path / "bursty-pool.toml"
    pool.write_text(BURSTY_POOL)
    ceiling = noise_ceiling(0.15, 0.005, 0.9)
    r = recommend(pool)
    assert r.returncode == 4, r.stdout + r.stderr
    out = " ".join(r.stdout.split())
    assert (f"needs headroom {ceiling.headroom:.3f} over the hour's level to keep unmet demand under 0.50%, and then "
            f"converges at most at {ceiling.convergence:.1%} against the ideal (mark 90.0%)") in out
    r = recommend(pool, "--json")
    assert r.returncode == 4
    (nearest,) = [row for row in json.loads(r.stdout) if "shortfall" in row]
    assert nearest["shortfall"]["noise_ceiling"] == pytest.approx(ceiling.as_dict())
    # The ceiling is an upper bound: the nearest policy's months converge under it.
    assert nearest["convergence"]["median"] < ceiling.convergence


def test_the_noise_line_is_said_only_where_the_noise_binds():
    from fleet.cli.compare_view import shortfall_lines
    from fleet.core.noise_ceiling import noise_ceiling
    from fleet.core.shortfall import Shortfall

    def lines(jitter):
        return shortfall_lines(Shortfall(combo=None, min_pass_rate=0.95, checks=(), together_pass_rate=1.0,
                                         clairvoyant=None, demand_peak_tps=1.0, pool_rated_tps=2.0,
                                         noise=noise_ceiling(jitter, 0.005, 0.9)))

    assert any("drawn afresh each hour" in line for line in lines(0.15))
    assert not any("drawn afresh each hour" in line for line in lines(0.05))
