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


def test_the_chat_product_sized_to_throughput_breaks_its_promise_and_sized_to_it_keeps_it():
    rows = over_seeds("chat-latency", False)
    # By the fluid's count every token is served, and cheaper than the ideal that keeps the promise ...
    assert all(r["unmet_share"] < 0.005 and r["checks"]["convergence"]["pass"] for r in rows)
    # ... but streams at the rated batch run at 20 tok/s, under the 30 promised.
    assert all(not r["checks"]["latency"]["pass"] and not r["checks"]["capacity"]["pass"] for r in rows)
    fixed = over_seeds("chat-latency", True)
    assert all(r["checks"]["latency"]["pass"] for r in fixed)
    assert sum(all(c["pass"] for c in r["checks"].values()) for r in fixed) >= 0.9 * len(fixed)
    # The promise costs cards: a card at 30 tok/s a stream carries 64% of its rated rate.
    assert all(f["bill_usd"] > 1.2 * r["bill_usd"] for f, r in zip(fixed, rows))


def test_document_processing_on_the_same_pool_is_right_to_size_to_throughput():
    rows = over_seeds("document-batch", False)
    assert all(all(c["pass"] for c in r["checks"].values()) and "latency" not in r["checks"] for r in rows)
    chat = over_seeds("chat-latency", False)
    assert [r["bill_usd"] for r in rows] == [c["bill_usd"] for c in chat]  # one policy, one run, two products
    as_chat = over_seeds("document-batch", True)
    assert all(f["bill_usd"] > 1.2 * r["bill_usd"] for f, r in zip(as_chat, rows))
