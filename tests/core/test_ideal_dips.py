"""The one-rent ideal from sorted tickets and sparse dips gives the greedy's run sets, hour by hour, to the bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.core import ideal_dips
from fleet.core.greedy import greedy_run_set, run_set_usd_by_hour
from fleet.core.ideal import ideal_greedy_usd_by_hour
from fleet.core.month import DippedRates


@st.composite
def dipped_months(draw):
    """Tickets with ties, dips anywhere, a dip factor that rounds or not, and demand from none to past every card."""
    n = draw(st.integers(1, 40))
    hours = draw(st.integers(1, 30))
    levels = [1500.0, 3000.0, 3030.0, 6000.0, 6000.5, 7123.5]
    ticket = np.array(draw(st.lists(st.one_of(st.sampled_from(levels), st.floats(1.0, 9000.0, width=32)),
                                    min_size=n, max_size=n)), dtype=np.float32)
    in_dip = np.array(draw(st.lists(st.booleans(), min_size=n * hours, max_size=n * hours))).reshape(n, hours)
    factor = draw(st.sampled_from([0.5, 0.7, 1.0, 1 / 3, 0.999]))
    rent = draw(st.sampled_from([2690 / 720, 1.0, 0.37]))
    fractions = np.array(draw(st.lists(st.one_of(st.sampled_from([0.0, -0.1, 1e-15, 0.5, 1.0, 1.2]), st.floats(0.0, 1.1)),
                                       min_size=hours, max_size=hours)))
    first = draw(st.integers(0, 9))  # rates starting off a byte of their dip bits
    rates = DippedRates(ticket, np.concatenate([np.zeros((n, first), bool), in_dip], axis=1), factor)[:, first:]
    demand = fractions * np.asarray(rates, dtype=np.float64).sum(axis=0)
    return rates, np.full(n, rent), demand


@settings(max_examples=300, deadline=None)
@given(dipped_months(), st.sampled_from([1, 4, 96]))
def test_the_run_sets_and_bill_are_the_greedys(month, block_hours):
    rates, rent, demand = month
    assert ideal_dips.applies(rates, rent)
    want = greedy_run_set(np.asarray(rates), rent, demand)
    billed = []

    def bill(chosen, rent_usd_per_hour, hours):
        billed.append(chosen.copy())
        return run_set_usd_by_hour(chosen, rent_usd_per_hour, hours)

    ideal_dips.run_set_usd_by_hour, real = bill, ideal_dips.run_set_usd_by_hour
    try:
        got = ideal_dips.ideal_usd_by_hour(rates, rent, demand, block_hours * 2, block_hours)
    finally:
        ideal_dips.run_set_usd_by_hour = real
    if got is None:  # dipped rates out of their tickets' order: the greedy sizes the month
        return
    assert np.array_equal(np.concatenate(billed, axis=1), want)
    assert got.tolist() == run_set_usd_by_hour(want, rent, block_hours).tolist()
    assert ideal_greedy_usd_by_hour(rates, rent, demand, block_hours).tolist() == ideal_greedy_usd_by_hour(
        np.asarray(rates), rent, demand, block_hours).tolist()


def test_the_shortcut_is_taken_only_where_it_holds():
    ticket = np.array([5.0, 3.0, 4.0], dtype=np.float32)
    rates = DippedRates(ticket, np.eye(3, 4, dtype=bool), 0.5)
    assert ideal_dips.applies(rates, np.full(3, 2.0))
    assert not ideal_dips.applies(rates, np.array([2.0, 2.0, 3.0]))  # two rents: tokens per dollar is not the rate
    assert not ideal_dips.applies(np.asarray(rates), np.full(3, 2.0))  # a stored month's rates: no tickets
    assert not ideal_dips.applies(DippedRates(np.array([5.0, 0.0, 4.0], np.float32), np.eye(3, 4, dtype=bool), 0.5), np.full(3, 2.0))


@st.composite
def promised_months(draw):
    """Two levels a card read off a drawn month's rates, as a promise reads them: float64 or float32, some cards at
    zero outside or inside their dips (too slow for the floor), ties among levels."""
    rates, rent, _ = draw(dipped_months())
    n = rates.shape[0]
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    level = np.floor(np.asarray(rates.ticket_tps, dtype=np.float64) / 100.0) * 37.5  # coarse: ties
    level[np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))] = 0.0
    dipped = np.minimum(level, np.asarray(rates.dipped_tps, dtype=np.float64) * 0.3)
    dipped[np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))] = 0.0
    levels = rates.with_levels(level.astype(dtype), dipped.astype(dtype))
    fractions = np.array(draw(st.lists(st.floats(0.0, 1.1), min_size=rates.shape[1], max_size=rates.shape[1])))
    return levels, rent, fractions * np.asarray(levels, dtype=np.float64).sum(axis=0)


@settings(max_examples=300, deadline=None)
@given(promised_months(), st.sampled_from([1, 4, 96]))
def test_two_levels_a_card_bill_as_the_greedy(month, block_hours):
    levels, rent, demand = month
    assert ideal_dips.applies(levels, rent)
    want = ideal_greedy_usd_by_hour(np.asarray(levels), rent, demand, block_hours)
    assert ideal_greedy_usd_by_hour(levels, rent, demand, block_hours).tolist() == want.tolist()
    assert np.array_equal(greedy_run_set(levels, rent, demand), greedy_run_set(np.asarray(levels), rent, demand))
