"""A promise's sums over the run sets riding on the bill's pass (`BlockSums`): the very sums `run_set_sums` makes."""

import numpy as np
import pytest

from fleet.core.billing import capacity_and_warm_usd
from fleet.core.month import DippedRates
from fleet.core.run_set_sums import BlockSums, run_set_sums


@pytest.mark.parametrize("hours", [2, 95, 96, 97, 193, 200])
def test_the_sums_beside_the_bill_are_the_sums_on_their_own_and_the_bill_is_unchanged(hours):
    rng = np.random.default_rng(hours)
    cards = 2500
    warm = (rng.random((hours, cards)) < 0.4).T  # a replay's run sets: hours-major, read cards-major
    true = DippedRates(rng.lognormal(7, 0.3, cards).astype(np.float32), rng.random((cards, hours)) < 0.05, 0.7)
    rate = true.with_levels(rng.random(cards) * 1e3, rng.random(cards) * 1e2)
    top = np.floor(rng.random(cards) * 120)
    slots = true.with_levels(top, np.floor(top * rng.random(cards)))
    served = true[:, :].with_levels(np.asarray(true.ticket_tps), true.dipped_tps)  # the same dips, another view of them
    rent = np.full(cards, 2.5)
    want_bill = capacity_and_warm_usd(served, warm, rent)
    assert BlockSums.applies(rate, slots, cards, hours) == (hours % 96 != 1)
    if not BlockSums.applies(rate, slots, cards, hours):
        return  # a lone last hour: summed on their own (`run_set_sums`)
    for dips_from in (served, None):
        sums = BlockSums(rate, slots, cards, hours, dips_from)
        got_bill = capacity_and_warm_usd(served, warm, rent, sums.add)
        assert all(np.array_equal(g, w) for g, w in zip(got_bill, want_bill))
        got, want = sums.sums, run_set_sums(warm, rate, slots)
        assert got is not None and all(g.tolist() == w.tolist() for g, w in zip(got, want))
        assert got[0].tolist() == (np.asarray(rate) * warm).sum(axis=0).tolist()


def test_the_sums_are_none_until_every_hour_came():
    rng = np.random.default_rng(1)
    true = DippedRates(rng.lognormal(7, 0.3, 50).astype(np.float32), rng.random((50, 10)) < 0.1, 0.7)
    sums = BlockSums(true.with_levels(np.ones(50), np.zeros(50)), true.with_levels(np.ones(50), np.zeros(50)), 50, 10)
    sums.add(0, 4, np.ones((50, 4), dtype=bool), None)
    assert sums.sums is None
    sums.add(4, 10, np.ones((50, 6), dtype=bool), None)
    assert sums.sums[0].tolist() == [50.0 - d for d in true.dip_mask(0, 10).sum(axis=0)]  # the cards out of a dip
