"""Over 20 seeds the draws change but each preset's story holds."""

import numpy as np

from fleet.presets import load_preset
from fleet.presets import replay_scenario

SEEDS = range(20)


def over_seeds(name, fix):
    p = load_preset(name)
    return [replay_scenario(p.resolve(fix=fix, seed=s)).figures for s in SEEDS]


def test_golden_idler_idle_cost_is_most_of_the_bill_on_every_seed():
    rows = over_seeds("golden-idler", False)
    assert all(r["idle_usd"] > 0.5 * r["bill_usd"] for r in rows)
    assert all(r["checks"]["capacity"]["pass"] and r["wrong_evictions"] == 0 for r in rows)


def test_noise_evictor_hour_window_keeps_evicting_healthy_cards():
    rows = over_seeds("noise-evictor", False)
    assert all(r["evictions"] == 12 for r in rows)
    assert all(r["wrong_evictions"] >= 1 for r in rows)
    fixed = over_seeds("noise-evictor", True)
    assert all(r["wrong_evictions"] == 0 for r in fixed)
    assert np.median([r["convergence"] for r in fixed]) > np.median([r["convergence"] for r in rows]) + 0.1


def test_bargain_month_stays_short_and_the_swap_covers_it():
    rows = over_seeds("bargain-shortfall", False)
    assert all(r["unmet_share"] > 0.2 and r["bill_usd"] < 30_000 for r in rows)
    fixed = over_seeds("bargain-shortfall", True)
    assert all(r["unmet_share"] < 0.01 for r in fixed)
