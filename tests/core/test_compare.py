"""`fleet compare`: grid expansion, common random numbers, summaries, the recommendation and the command."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fleet.cli.app import app
from fleet.core.compare import CHECKS, month_row, DEFAULT_EVICTION_WINDOWS, DEFAULT_SHARES, FIGURES, distinct, passing_headroom, Combo, ComboSummary, MonthFigures, combo_of, csv_rows, default_grid_axes, expand_grid, recommend, summarise
from fleet.sweep import combo_scenarios, run_grid
from fleet.core.scenario import ConfigError
from fleet.presets import load_preset
from fleet.core.ideal import ideal_greedy_usd_by_hour
from fleet.report.plot import plot_slice
from fleet.presets import draw, replay_scenario

SMALL = Path(__file__).parent / "compare_small.toml"


@pytest.fixture(scope="module")
def small():
    return load_preset(str(SMALL))


# --- the grid ---------------------------------------------------------------------------------


def test_axes_not_given_keep_the_preset_value(small):
    base = small.resolve()
    combos = expand_grid(base, window=["hour", "day"], share=[0.1, 0.2, 0.1])
    assert [(c.window, c.share) for c in combos] == [("hour", 0.1), ("hour", 0.2), ("day", 0.1), ("day", 0.2)]
    own = combo_of(base)
    assert {(c.size_window, c.mode, c.headroom, c.card_class) for c in combos} == {
        (own.size_window, own.mode, own.headroom, own.card_class)
    }


def test_no_axis_is_the_preset_itself(small):
    base = small.resolve(fix=True)
    assert expand_grid(base) == [combo_of(base)]
    assert combo_of(base) == Combo("day", "day", 0.1, "steady", 1.02, "flagship")


def test_combination_scenarios_carry_the_choices(small):
    combos = expand_grid(small.resolve(), window=["week"], size_window=["day"], share=[0.2], mode=["held"], headroom=[1.1], card_class=["bargain"])
    (s,) = combo_scenarios(small, combos)
    p = s.policy
    assert (p.eviction_window, p.window, p.eviction.share, p.mode, p.headroom, p.card_class) == ("week", "day", 0.2, "held", 1.1, "bargain")
    assert combo_of(s) == combos[0]


@pytest.mark.parametrize(
    "axis, values, message",
    [
        ("window", ["fortnight"], "unknown window 'fortnight'"),
        ("window", ["400h"], "longer than the 168 hours of warm-up"),
        ("mode", ["lazy"], "unknown sizing mode 'lazy'"),
        ("card_class", ["premium"], "policy.card_class 'premium' is not one of the classes"),
    ],
)
def test_bad_choices_fail_before_any_month_runs(small, axis, values, message):
    combos = expand_grid(small.resolve(), **{axis: values})
    with pytest.raises(ConfigError, match=message):
        combo_scenarios(small, combos)


def test_default_grid_searches_what_the_policy_uses(small):
    evicting = default_grid_axes(small.resolve(), True, ["mean", "dip-aware"], ["held", "steady"])
    assert evicting["window"] == DEFAULT_EVICTION_WINDOWS and evicting["size_window"] == ("day",)
    assert evicting["card_class"] == ("flagship", "bargain", "any")
    assert evicting["share"] == (0.0, *DEFAULT_SHARES)  # eviction off is always on the grid
    assert "headroom" not in evicting  # searched, not gridded
    quiet = default_grid_axes(small.resolve(overrides=["policy.eviction.rule=none"]), False, ["mean"], ["steady"])
    assert quiet["window"] == ("hour",) and quiet["share"] == (0.0,)
    assert quiet["score"] == ("mean",) and quiet["mode"] == ("steady",)


def test_eviction_off_makes_the_window_irrelevant(small):
    combos = distinct(expand_grid(small.resolve(), window=["hour", "day"], share=[0.0, 0.1]))
    assert [(c.window, c.share) for c in combos] == [("hour", 0.0), ("hour", 0.1), ("day", 0.1)]


@pytest.mark.parametrize(
    "desc, headrooms, min_pass, expected",
    [
        ("every month passes at once", [1.0] * 20, 0.95, 1.0),
        ("the 95th percentile month", [1.0] * 18 + [1.01, 1.2], 0.95, 1.01),
        ("one month in twenty may fail", [1.0] * 19 + [float("inf")], 0.95, 1.0),
        ("two months that no headroom passes", [1.0] * 18 + [float("inf")] * 2, 0.95, None),
        ("all months at 100%", [1.0] * 18 + [1.01, 1.2], 1.0, 1.2),
    ],
)
def test_passing_headroom(desc, headrooms, min_pass, expected):
    assert passing_headroom(np.array(headrooms), min_pass) == expected, desc


@pytest.mark.parametrize("months, confidence, kth", [(100, 0.8, 98), (200, 0.8, 194), (30, 0.8, 30), (100, 0.0, 95)])
def test_passing_headroom_with_confidence_bounds_the_quantile_on_unseen_months(months, confidence, kth):
    """The k-th smallest of n months' headrooms is an upper bound of the 95% quantile with the confidence asked."""
    from scipy.stats import binom

    h = 1.0 + np.arange(months) / 1000
    assert passing_headroom(np.random.default_rng(0).permutation(h), 0.95, confidence) == h[kth - 1]
    if confidence and kth < months:
        assert binom.cdf(kth - 1, months, 0.95) >= confidence > binom.cdf(kth - 2, months, 0.95)


# --- running months ---------------------------------------------------------------------------


def test_each_combination_replays_the_seed_month_as_replay_does(small):
    """Common random numbers: the shared draw gives each combination exactly its own replay."""
    combos = expand_grid(small.resolve(), window=["hour", "day"], card_class=["flagship", "bargain"])
    scenarios = combo_scenarios(small, combos)
    months = run_grid(scenarios, [3, 4], exact=True, jobs=1)
    assert [m.seed for m in months] == [3, 4]
    for m in months:
        for i, s in enumerate(scenarios):
            f = replay_scenario(s.model_copy(update={"seed": m.seed})).figures  # the exact ideal, as the grid uses
            assert m.figures[i].tolist() == month_row(f)
            assert month_row(f)[FIGURES.index("convergence_capped")] == min(f["convergence"], 1.0)
        assert m.passes[i].tolist() == [f["checks"][c]["pass"] if c in f["checks"] else True for c in CHECKS]


def test_greedy_ideal_option_and_its_gap(small):
    scenarios = combo_scenarios(small, expand_grid(small.resolve()))
    exact = run_grid(scenarios, [3], exact=True, jobs=1)[0]
    greedy = run_grid(scenarios, [3], exact=False, jobs=1)[0]
    s = scenarios[0]
    m = draw(s)
    greedy_usd = ideal_greedy_usd_by_hour(m.true_rate_tps[:, m.warmup_hours:], m.rent_usd_per_hour, m.demand_tps)
    f = replay_scenario(s, month=m, ideal_usd=greedy_usd).figures
    assert greedy.figures[0][FIGURES.index("convergence")] == f["convergence"]
    assert exact.ideal_exact_usd < exact.ideal_greedy_usd  # two classes: the greedy overshoots
    assert exact.gap_hours > 0
    assert exact.figures[0][FIGURES.index("convergence")] < greedy.figures[0][FIGURES.index("convergence")]


def test_processes_give_the_same_months_as_one(small):
    scenarios = combo_scenarios(small, expand_grid(small.resolve(), window=["hour", "week"]))
    seen: list[int] = []
    one = run_grid(scenarios, range(10, 14), jobs=1)
    two = run_grid(scenarios, range(10, 14), jobs=2, on_months=seen.append)
    assert sum(seen) == 4
    for a, b in zip(one, two):
        assert a.seed == b.seed
        np.testing.assert_array_equal(a.figures, b.figures)
        np.testing.assert_array_equal(a.passes, b.passes)


def test_combinations_must_share_the_month(small):
    a = small.resolve()
    b = small.resolve(overrides=["demand.avg_tps=50000"])
    with pytest.raises(ValueError, match="differ outside the policy"):
        run_grid([a, b], [1], jobs=1)


# --- summaries and the recommendation ---------------------------------------------------------


def _month(seed: int, convergence: list[float], capacity: list[bool], eviction: list[bool]) -> MonthFigures:
    n = len(convergence)
    figs = np.zeros((n, len(FIGURES)))
    figs[:, FIGURES.index("convergence")] = convergence
    figs[:, FIGURES.index("bill_usd")] = 1000.0 + seed
    passes = np.array([[c, True, e, True] for c, e in zip(capacity, eviction)])  # latency: no promise
    return MonthFigures(seed, figs, passes, 100.0, 100.0, 0)


def test_summary_quantiles_and_pass_rates():
    combos = [Combo("hour", "day", 0.1, "steady", 1.0, "flagship")]
    conv = np.linspace(0.8, 1.0, 21)
    months = [_month(i, [c], [i % 4 != 0], [True]) for i, c in enumerate(conv)]
    (s,) = summarise(combos, months)
    assert s.months == 21
    assert s.figures["convergence"]["median"] == pytest.approx(0.9)
    assert s.figures["convergence"]["p05"] == pytest.approx(np.percentile(conv, 5))
    assert s.figures["convergence"]["p95"] == pytest.approx(np.percentile(conv, 95))
    assert s.pass_rate == {"capacity": pytest.approx(15 / 21), "convergence": 1.0, "eviction": 1.0, "latency": 1.0}
    assert s.all_checks_pass_rate == pytest.approx(15 / 21)
    row = csv_rows([s])[0]
    assert row["convergence_p95"] == s.figures["convergence"]["p95"] and row["pass_rate_capacity"] == s.pass_rate["capacity"]


def _summary(name: str, conv: float, capacity: float, eviction: float, p05: float | None = None, together: float | None = None,
             bill: float = 0.0) -> ComboSummary:
    q = {"median": conv, "p05": conv - 0.02 if p05 is None else p05, "p95": conv + 0.02}
    zero = {"median": 0.0, "p05": 0.0, "p95": 0.0}
    figures = {k: dict(zero) for k in FIGURES}
    figures["convergence"] = q
    figures["convergence_capped"] = {k: min(v, 1.0) for k, v in q.items()}
    figures["bill_usd"] = {"median": bill, "p05": bill, "p95": bill}
    return ComboSummary(
        combo=Combo(name, "day", 0.1, "steady", 1.0, "flagship"),
        months=20,
        figures=figures,
        pass_rate={"capacity": capacity, "convergence": 1.0, "eviction": eviction, "latency": 1.0},
        all_checks_pass_rate=min(capacity, eviction) if together is None else together,
    )


@pytest.mark.parametrize(
    "case, rows, best, runner_up",
    [
        ("highest convergence among the passing", [("a", 0.95, 1, 1), ("b", 0.97, 1, 1), ("c", 0.96, 1, 1)], "b", "c"),
        ("a shortage rules out the higher convergence", [("a", 0.99, 0.9, 1), ("b", 0.93, 1, 1)], "b", None),
        ("a wrong eviction rules it out", [("a", 0.99, 1, 0.5), ("b", 0.93, 1, 0.95), ("c", 0.92, 1, 1)], "b", "c"),
        ("checks failing in different months add up", [("a", 0.99, 0.96, 0.96, None, 0.92), ("b", 0.93, 1, 1)], "b", None),
    ],
)
def test_recommendation(case, rows, best, runner_up):
    rec = recommend([_summary(*r) for r in rows], min_pass_rate=0.95)
    assert rec.best is not None and rec.best.combo.window == best, case
    assert (rec.runner_up.combo.window if rec.runner_up else None) == runner_up, case


def test_ties_on_the_median_go_to_the_lower_bill():
    rec = recommend([_summary("a", 0.95, 1, 1, bill=30_000), _summary("b", 0.95, 1, 1, bill=29_000)])
    assert (rec.best.combo.window, rec.runner_up.combo.window) == ("b", "a")


def test_a_shortfall_cannot_raise_the_rank():
    """Convergence above 100% (a month short of capacity) counts as 100%: the cheaper of two at the cap wins."""
    rec = recommend([_summary("short", 1.04, 0.96, 1, bill=30_000), _summary("covered", 1.0, 1, 1, bill=29_000)])
    assert rec.best.combo.window == "covered"


def test_no_recommendation_names_the_closest():
    rec = recommend([_summary("a", 0.99, 0.5, 1), _summary("b", 0.9, 0.8, 0.9)], min_pass_rate=0.95)
    assert rec.best is None and rec.eligible == 0
    assert rec.closest.combo.window == "b"


def test_plot_holds_the_other_axes_at_the_anchor():
    rows = [_summary(w, 0.9, 1, 1) for w in ("hour", "day")]
    other = _summary("hour", 0.9, 1, 1)
    other = ComboSummary(Combo("hour", "day", 0.1, "held", 1.0, "flagship"), 20, other.figures, other.pass_rate, 1.0)
    chosen, x_axis, held = plot_slice(rows + [other], anchor=rows[0].combo)
    assert x_axis == "window"
    assert [s.combo.window for s in chosen] == ["hour", "day"]
    assert held == {"size_window": "day", "mode": "steady", "headroom": 1.0, "card_class": "flagship", "score": "mean",
                    "forecast": "holt-winters", "forecast_quantile": None, "size_to": "promise", "stream_tps": None,
                    "ttft_ms": None}


# --- the command ------------------------------------------------------------------------------


def test_json_lists_every_combination_with_figures_and_pass_rates():
    result = CliRunner().invoke(
        app, ["compare", "--preset", str(SMALL), "--window", "hour,day", "--share", "0.1", "--months", "3", "--jobs", "1", "--json"]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["window"], r["share"]) for r in rows] == [("hour", 0.1), ("day", 0.1)]
    for r in rows:
        assert r["months"] == 3 and r["mode"] == "steady" and r["card_class"] == "flagship"
        for k in FIGURES:
            assert r[k]["p05"] <= r[k]["median"] <= r[k]["p95"]
        assert set(r["pass_rate"]) == set(CHECKS)
        assert all(0.0 <= v <= 1.0 for v in r["pass_rate"].values())
        assert r["ideal"]["method"] == "exact" and r["ideal"]["greedy_gap_usd"]["median"] > 0
    assert sum(r["recommendation"] == "best" for r in rows) <= 1


def test_table_plot_and_csv(tmp_path):
    png, out_csv = tmp_path / "c.png", tmp_path / "c.csv"
    result = CliRunner().invoke(
        app,
        ["compare", "--preset", str(SMALL), "--window", "hour,day,week", "--share", "0.1,0.3", "--months", "4",
         "--jobs", "1", "--plot", str(png), "--csv", str(out_csv), "--greedy-ideal"],
    )
    assert result.exit_code == 0, result.output
    assert "evict window" in result.stdout and "pass cap" in result.stdout
    assert "Recommended" in result.stdout or "No recommendation" in result.stdout
    assert "ideal: greedy" in result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 200_000
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 6 and {r["window"] for r in rows} == {"hour", "day", "week"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--share", "0.1,abc"], "--share '0.1,abc': 'abc' is not a number"),
        (["--share", "1.5"], "--share '1.5': 1.5 is outside 0..1"),
        (["--window", "hour,,day"], "--window 'hour,,day': expected a comma-separated list"),
        (["--window", "fortnight"], "unknown window 'fortnight'"),
        (["--class", "premium"], "policy.card_class 'premium' is not one of the classes"),
        (["--plot", "out.jpg"], "--plot 'out.jpg': expected a file ending in .png"),
        (["--csv", "/no/such/folder/x.csv"], "folder '/no/such/folder' does not exist"),
    ],
)
def test_bad_input_is_refused_with_the_reason(args, message):
    from fleet.cli.app import UsageError

    result = CliRunner().invoke(app, ["compare", "--preset", str(SMALL), "--months", "1", "--jobs", "1", *args])
    assert isinstance(result.exception, (UsageError, ConfigError))
    assert message in str(result.exception)


def test_bad_input_exits_2_without_a_traceback():
    proc = subprocess.run(
        [sys.executable, "-c", "from fleet.cli.app import main; main()", "compare", "--preset", str(SMALL), "--share", "abc"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--share 'abc': 'abc' is not a number" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_names_the_default_grid():
    from fleet.cli.compare import HELP

    assert " and ".join(DEFAULT_EVICTION_WINDOWS) in HELP and ", ".join(f"{v:g}" for v in DEFAULT_SHARES) in HELP
    assert "capped at 100%" in HELP and "eviction off" in HELP


def test_an_option_out_of_range_is_a_usage_error_not_a_traceback():
    proc = subprocess.run(
        [sys.executable, "-c", "from fleet.cli.app import main; main()", "compare", "--preset", str(SMALL), "--months", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--months" in proc.stderr
    assert "Traceback" not in proc.stderr


STORED_TOML = """
name = "stored-small"
seed = 4
hours = 48
warmup_hours = 24

[[classes]]
name = "flagship"
rated_tps = 6000
rent_usd_per_month = 2690
pool_cards = 8

[dips]
start_prob_per_hour = 0.02

[demand]
avg_tps = 20000

[policy]
card_class = "flagship"
window = "day"
mode = "steady"
headroom = 1.02

[policy.eviction]
rule = "below-median"
window = "hour"
share = 0.25
"""


def test_a_stored_month_is_compared_as_one_month(tmp_path):
    import pandas as pd

    from fleet.core.month import draw_month
    from fleet.ingest.stored_month import month_from_telemetry_file

    preset_path = tmp_path / "stored-small.toml"
    preset_path.write_text(STORED_TOML)
    preset = load_preset(str(preset_path))
    drawn = draw_month(preset.resolve())
    cards, hours = drawn.measured_tps.shape
    c, h = np.repeat(np.arange(cards), hours), np.tile(np.arange(hours), cards)
    telemetry = tmp_path / "telemetry.csv"
    pd.DataFrame({"card_id": drawn.card_ids[c], "ts": 1_767_225_600 + h * 3600, "tokens_per_s": drawn.measured_tps.ravel().astype(float)}).to_csv(
        telemetry, index=False
    )

    result = CliRunner().invoke(app, ["compare", "-p", str(preset_path), "--telemetry", str(telemetry), "--window", "hour,day", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["window"] for r in rows] == ["hour", "day"] and all(r["months"] == 1 for r in rows)

    month = month_from_telemetry_file(telemetry, preset.resolve(), base_dir=tmp_path)
    for r, scenario in zip(rows, combo_scenarios(preset, expand_grid(preset.resolve(), window=["hour", "day"]))):
        f = replay_scenario(scenario, month=month).figures
        assert r["convergence"] == {"median": f["convergence"], "p05": f["convergence"], "p95": f["convergence"]}
        assert r["wrong_evictions"]["median"] == f["wrong_evictions"]
        assert r["pass_rate"] == {c: float(f["checks"][c]["pass"]) if c in f["checks"] else 1.0 for c in CHECKS}

    refused = CliRunner().invoke(app, ["compare", "-p", str(preset_path), "--telemetry", str(telemetry), "--months", "5"])
    assert "a stored month has one draw" in str(refused.exception)
