"""The presets reproduce the seed's figures, computed by the model from each preset's parameters."""

import pytest

from fleet.presets import load_preset
from fleet.presets import replay_scenario


def figures(name, fix):
    return replay_scenario(load_preset(name).resolve(fix=fix)).figures


def within(value, target, rel):
    return abs(value - target) <= rel * abs(target)


def test_golden_idler():
    f = figures("golden-idler", False)
    assert f["cards_warm_max"] == 26 and f["cards_warm_avg"] == 26
    assert f["bill_usd"] == pytest.approx(69_940, abs=0.01)
    assert f["bill_churn_usd"] == 0
    assert within(f["idle_usd"], 44_348, 0.01)
    assert f["unmet_avg_tps"] == 0
    assert f["wrong_evictions"] == 0
    assert f["checks"]["capacity"]["pass"] and f["checks"]["eviction"]["pass"]
    assert not f["checks"]["convergence"]["pass"]


def test_golden_idler_fix():
    f = figures("golden-idler", True)
    assert within(f["bill_usd"], 25_740, 0.01)
    assert abs(f["convergence"] - 0.909) <= 0.005
    assert f["demand_avg_tps"] == pytest.approx(60_000)
    assert all(c["pass"] for c in f["checks"].values())


def test_noise_evictor():
    f = figures("noise-evictor", False)
    assert f["pool_cards"] == 32
    assert f["evictions"] == 12
    assert f["wrong_evictions"] == 4
    assert abs(f["wrong_eviction_share"] - 0.33) <= 0.005
    assert not f["checks"]["eviction"]["pass"]
    assert f["checks"]["capacity"]["pass"]


def test_noise_evictor_fix():
    f = figures("noise-evictor", True)
    assert abs(f["convergence"] - 0.979) <= 0.005
    assert f["wrong_evictions"] == 0
    assert f["evictions"] <= 3
    assert all(c["pass"] for c in f["checks"].values())


def test_bargain_shortfall():
    f = figures("bargain-shortfall", False)
    assert f["card_class"] == "bargain"
    assert f["bill_usd"] == pytest.approx(28_840, abs=0.01)
    assert within(f["delivered_avg_tps"], 61_015, 0.01)
    assert f["demand_avg_tps"] == pytest.approx(90_000)
    assert abs(f["unmet_share"] - 0.32) <= 0.005
    assert not f["checks"]["capacity"]["pass"]
    assert f["checks"]["eviction"]["pass"]


def test_bargain_shortfall_fix():
    f = figures("bargain-shortfall", True)
    assert f["card_class"] == "flagship"
    assert within(f["bill_usd"], 35_360, 0.01)
    assert abs(f["convergence"] - 0.956) <= 0.005
    assert f["checks"]["capacity"]["pass"]
    assert all(c["pass"] for c in f["checks"].values())
