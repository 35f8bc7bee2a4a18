"""A stored month of a preset's telemetry replays to the same decisions as the preset itself."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from fleet.core.scenario import ConfigError
from fleet.presets import load_preset
from fleet.core.month import draw_month
from fleet.presets import replay_scenario
from fleet.ingest.stored_month import load_telemetry_file, month_from_rollups, month_from_store

T0 = 1_735_689_600  # 2025-01-01T00:00:00Z


def write_month_telemetry(path, month) -> None:
    """One sample per card-hour: the preset's measured rate, somewhere inside the hour."""
    cards, hours = month.measured_tps.shape
    c = np.repeat(np.arange(cards), hours)
    h = np.tile(np.arange(hours), cards)
    pd.DataFrame(
        {
            "card_id": month.card_ids[c],
            "ts": T0 + h * 3600 + (c * 37) % 3600,
            "tokens_per_s": month.measured_tps.ravel().astype(np.float64),
        }
    ).to_csv(path, index=False)


def decisions(result):
    ids = result.month.card_ids
    return (
        [(e.hour, ids[e.card], e.score_tps) for e in result.evictions],
        [(d.hour, d.judged, d.candidates, tuple(ids[list(d.evicted)]), d.blocked_by_budget) for d in result.passes],
    )


def warm_by_card(result) -> dict[str, tuple[int, ...]]:
    return {cid: tuple(np.flatnonzero(result.warm[i])) for i, cid in enumerate(result.month.card_ids)}


@pytest.mark.parametrize("preset, fix", [("noise-evictor", False), ("golden-idler", True)])
def test_stored_month_replays_to_the_presets_decisions(tmp_path, preset, fix):
    scenario = load_preset(preset).resolve(fix=fix)
    drawn = draw_month(scenario)
    src = tmp_path / "telemetry.csv"
    write_month_telemetry(src, drawn)

    month, report = load_telemetry_file(src, scenario)
    assert report.stored == drawn.measured_tps.size and report.quarantined == 0
    np.testing.assert_array_equal(month.measured_tps, drawn.measured_tps)
    np.testing.assert_array_equal(month.demand_tps, drawn.demand_tps)

    want = replay_scenario(scenario, month=drawn)
    got = replay_scenario(scenario, month=month)
    assert warm_by_card(got) == warm_by_card(want)
    assert decisions(got) == decisions(want)
    if scenario.policy.eviction.rule != "none":
        assert want.evictions, "the preset evicts, so the comparison covers eviction decisions"
    # the truth is hindsight: each card's mean measured rate over the month
    np.testing.assert_allclose(month.true_tps, drawn.measured_tps[:, scenario.warmup_hours :].mean(axis=1), rtol=1e-6)


def test_month_from_store_after_fleet_ingest(tmp_path, store_url):
    scenario = load_preset("noise-evictor").resolve()
    drawn = draw_month(scenario)
    src = tmp_path / "telemetry.csv"
    write_month_telemetry(src, drawn)
    url = store_url
    pool = tmp_path / "pool.toml"
    c = scenario.classes[0]
    pool.write_text(f'default_class = "{c.name}"\n[[classes]]\nname = "{c.name}"\nrated_tps = {c.rated_tps}\nrent_usd_per_month = {c.rent_usd_per_month}\n')
    r = subprocess.run([sys.executable, "-m", "fleet.cli.app", "ingest", str(src), "--db", url, "--pool", str(pool), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    month = month_from_store(url, scenario)
    assert decisions(replay_scenario(scenario, month=month)) == decisions(replay_scenario(scenario, month=drawn))


def _rollups(rows):
    return pd.DataFrame(rows, columns=["card_key", "card_class", "hour_ts", "sample_count", "mean_tps", "busy_fraction", "busy_tps"])


def test_gaps_stay_unmeasured_busy_hours_score_capacity_and_short_spans_are_refused():
    scenario = load_preset("noise-evictor").resolve(overrides=["hours=2", "warmup_hours=1", "policy.window=1"])
    cls = scenario.classes[0].name
    rows = [
        ("a", cls, T0, 60, 3000.0, 0.5, 6000.0),  # half busy: capacity 6000 per busy second
        ("a", cls, T0 + 7200, 60, 5000.0, np.nan, np.nan),
        ("b", cls, T0 + 3600, 60, 4000.0, np.nan, np.nan),
    ]
    m = month_from_rollups(_rollups(rows), scenario)
    # An hour without telemetry is not measured (NaN), as the service's score job has it; the true rate (the bill's)
    # is the mean of the month's measured hours (`fleet.core.hindsight`): a's 5000 (its 6000 is the warm-up's), b's 4000.
    nan = np.nan
    np.testing.assert_array_equal(m.measured_tps, np.array([[6000, nan, 5000], [nan, 4000, nan]], dtype=np.float32))
    np.testing.assert_allclose(m.true_tps, [5000.0, 4000.0])
    with pytest.raises(ConfigError, match="covers 2 hours"):
        month_from_rollups(_rollups(rows), scenario, start_ts=T0 + 3600)
    with pytest.raises(ConfigError, match="class"):
        month_from_rollups(_rollups([(*rows[0][:1], "mystery", *rows[0][2:])] + rows[1:]), scenario)


def test_a_gappy_stored_month_is_scored_as_the_service_scores_it():
    """One rule for an hour without telemetry: replay of a stored month scores each hour as the service's score job
    does from the same hourly means (the hour left out of its window; a card with none in its window scores zero)."""
    from fleet.core.replay import score_month
    from fleet.core.scores import unscored_as_zero, windowed_scores
    from policies import resolve

    scenario = load_preset("noise-evictor").resolve(overrides=["hours=6", "warmup_hours=3", "policy.window=3"])
    cls = scenario.classes[0].name
    rng = np.random.default_rng(5)
    rows = [(k, cls, T0 + h * 3600, 60, float(rng.uniform(3000, 7000)), np.nan, np.nan)
            for k in ("a", "b", "c") for h in range(9) if not (k == "b" and 2 <= h <= 6) and not (k == "c" and h % 2)]
    m = month_from_rollups(_rollups(rows), scenario)
    assert np.isnan(m.measured_tps).any()
    parts = resolve(scenario.policy)
    replayed = score_month(m, parts).score_tps
    served = unscored_as_zero(windowed_scores(m.measured_tps.astype(np.float64), 3, 6, 3))
    np.testing.assert_allclose(replayed, served, rtol=1e-6)
    assert (replayed[1] == 0).any()  # b has a window with no telemetry at all: no capacity counted on it
