"""The bill's one pass over a drawn month's run sets gives the capacity and warm rent of the two passes, bit for bit."""

import numpy as np
import pytest

from fleet.core.billing import capacity_and_warm_usd, capacity_tps, warm_usd_by_hour
from fleet.core.month import DippedRates


@pytest.mark.parametrize("cards, hours", [(1, 1), (5, 2), (37, 95), (37, 96), (40, 97), (23, 193), (300, 250), (64, 720)])
@pytest.mark.parametrize("factor", [0.5, 0.7])
def test_one_pass_is_the_capacity_and_the_warm_rent(cards, hours, factor):
    rng = np.random.default_rng(cards * 1000 + hours)
    ticket = rng.lognormal(8.7, 0.2, cards).astype(np.float32)
    rates = DippedRates(ticket, rng.random((cards, hours + 7)) < 0.05, np.float32(factor))[:, 7:]
    warm = rng.random((cards, hours)) < 0.6
    rent = rng.choice([3.736, 2.003], cards)
    capacity, usd = capacity_and_warm_usd(rates, warm, rent)
    assert np.array_equal(capacity, capacity_tps(rates, warm))
    assert np.array_equal(usd, warm_usd_by_hour(warm, rent))
    hours_major = np.ascontiguousarray(warm.T).T  # a replay's run sets, each hour's contiguous
    for got, want in zip(capacity_and_warm_usd(rates, hours_major, rent), (capacity, usd)):
        assert np.array_equal(got, want)
    # Each hour's capacity is its cards' true rates summed in card order, in float64.
    dense = np.asarray(rates, dtype=np.float64)
    for h in (0, hours // 2, hours - 1):
        total = 0.0
        for c in np.flatnonzero(warm[:, h]):
            total += dense[c, h]
        assert capacity[h] == total


@pytest.mark.parametrize("boot", [False, True])
def test_the_bill_reads_run_sets_in_either_layout(boot):
    """A replay's run sets are kept hours-major; the bill is the same bit for bit as of the cards-major array."""
    from fleet.core.billing import bill_hours

    rng = np.random.default_rng(41)
    cards, hours = 130, 97
    ticket = rng.lognormal(8.7, 0.2, cards).astype(np.float32)
    drawn = DippedRates(ticket, rng.random((cards, hours)) < 0.05, np.float32(0.7))
    warm = rng.random((cards, hours)) < 0.6
    rent_h, rent_m = np.full(cards, 3.736), np.full(cards, 2690.0)
    demand = rng.uniform(1e5, 4e5, hours)
    evicted = [np.array([3, 7]) if h == 24 else np.zeros(0, np.int64) for h in range(hours)]
    boot_hours = rng.choice([0.0, 0.5, 1.5], cards) if boot else None
    for rates in (drawn, np.asarray(drawn)):
        want = bill_hours(warm, rent_h, rent_m, rates, demand, evicted, boot_hours=boot_hours)
        got = bill_hours(np.ascontiguousarray(warm.T).T, rent_h, rent_m, rates, demand, evicted, boot_hours=boot_hours)
        for field in ("warm_usd", "churn_usd", "capacity_tps", "delivered_tps", "idle_usd", "ideal_usd", "cards_warm"):
            assert np.array_equal(getattr(got, field), getattr(want, field)), field
