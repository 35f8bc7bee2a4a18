"""The drawn month's true rates, kept as tickets and one dip bit a card-hour, read as the float array they stand for."""

import numpy as np
import pytest

from fleet.core.month import DippedRates


@pytest.fixture(params=[0.5, 0.7, 0.123], ids=["half", "seven tenths", "odd factor"])
def rates(request):
    rng = np.random.default_rng(5)
    ticket = rng.lognormal(8, 0.2, 7).astype(np.float32)
    in_dip = rng.random((7, 29)) < 0.3
    factor = np.float32(request.param)  # the float32 product ticket × factor, rounded unless the factor is a power of two
    return DippedRates(ticket, in_dip, factor), ticket[:, None] * np.where(in_dip, factor, np.float32(1.0))


def test_every_read_is_the_float_array(rates):
    dipped, full = rates
    assert dipped.shape == full.shape
    assert np.array_equal(np.asarray(dipped), full)
    for a, b in [(0, 29), (3, 17), (8, 16), (13, 14), (5, 5), (27, 29)]:
        part = dipped[:, a:b]
        assert part.shape == (7, b - a)
        assert np.array_equal(np.asarray(part), full[:, a:b])
        assert np.array_equal(part.hours_major(0, b - a, np.empty((b - a, 7), np.float32)), full[:, a:b].T)
        assert np.array_equal(part.cards_major(0, b - a, np.empty((7, b - a), np.float32)), full[:, a:b])
        assert np.array_equal(dipped[2:5, a:b][1:, 1:], full[2:5, a:b][1:, 1:])
    assert np.array_equal(dipped[[1, 4], 3:20], full[[1, 4], 3:20])
    assert np.array_equal(dipped[np.arange(7) % 2 == 0, 6:9], full[np.arange(7) % 2 == 0, 6:9])
    assert np.array_equal(dipped[4, 9:11], full[4, 9:11])
    assert np.array_equal(dipped[[1, 4], [3, 20]], full[[1, 4], [3, 20]])
    assert np.array_equal(dipped[:, 3:][:, 5:][2:, 1:12].in_dip, (full[:, 8:][2:, 1:12] != dipped.ticket_tps[2:, None]))


def test_rows_and_dip_mask_read_the_same_rates(rates):
    dipped, full = rates
    cards = np.array([6, 0, 3, 3, 1])
    part = dipped[:, 3:20]
    assert np.array_equal(np.asarray(part.rows(cards)), full[cards, 3:20])
    assert np.array_equal(part.rows(cards).dip_mask(2, 11), part.dip_mask(2, 11)[cards])
    assert np.array_equal(part.dip_mask(0, 17), full[:, 3:20] != dipped.ticket_tps[:, None])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_two_levels_a_card_read_as_the_float_array(rates, dtype):
    dipped, _ = rates
    in_dip = dipped.in_dip
    level = (np.arange(7) * 10.5).astype(dtype)
    low = (np.arange(7) * 0.25).astype(dtype)
    full = np.where(in_dip, low[:, None], level[:, None])
    levels = dipped.with_levels(level, low)
    assert levels.dtype == dtype and np.asarray(levels).dtype == dtype
    assert np.array_equal(np.asarray(levels), full)
    for a, b in [(0, 29), (3, 17), (13, 14), (5, 5)]:
        part = levels[:, a:b]
        assert np.array_equal(np.asarray(part), full[:, a:b])
        assert np.array_equal(part.hours_major(0, b - a, np.empty((b - a, 7), dtype)), full[:, a:b].T)
        assert np.array_equal(part.cards_major(0, b - a, np.empty((7, b - a), dtype)), full[:, a:b])
        assert np.array_equal(levels[2:5, a:b][1:, 1:], full[2:5, a:b][1:, 1:])
    assert np.array_equal(levels[[1, 4], 3:20], full[[1, 4], 3:20])
    assert np.array_equal(levels[4, 9:11], full[4, 9:11])
    assert np.array_equal(levels[[1, 4], [3, 20]], full[[1, 4], [3, 20]])
    cards = np.array([6, 0, 3, 3, 1])
    assert np.array_equal(np.asarray(levels[:, 3:20].rows(cards)), full[cards, 3:20])


def test_a_drawn_months_rates_at_a_few_hours_picked_are_the_dense_arrays():
    """Hours picked by index (the ideal's hours left to the greedy) read only the dips between them: the same numbers."""

    rng = np.random.default_rng(3)
    rates = DippedRates(rng.lognormal(7, 0.3, 40).astype(np.float32), rng.random((40, 300)) < 0.1, 0.7)
    levels = rates.with_levels(rng.random(40), rng.random(40))
    for x in (rates, levels):
        dense = np.asarray(x)
        for hours in (np.array([17]), np.array([250, 3, 99]), np.flatnonzero(rng.random(300) < 0.02)):
            assert np.array_equal(x[:, hours], dense[:, hours])
            assert np.array_equal(x[np.arange(5), hours[:1]], dense[np.arange(5), hours[:1]])
