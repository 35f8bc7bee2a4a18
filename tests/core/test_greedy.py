import numpy as np
import pytest

from fleet.core.greedy import greedy_run_set, tokens_per_dollar

RENT = np.array([1.0, 1.0, 1.0, 2.0])


@pytest.mark.parametrize(
    "desc, rates, target, eligible, expected",
    [
        ("best tokens per dollar first", [100, 300, 200, 500], 250, None, [False, True, False, False]),
        ("whole cards until covered, by tokens per dollar not by rate", [100, 300, 200, 500], 450, None, [False, True, False, True]),
        ("exact cover needs no extra card", [100, 300, 200, 500], 300, None, [False, True, False, False]),
        ("next best tokens per dollar after that", [100, 300, 200, 500], 850, None, [False, True, True, True]),
        ("short pool takes every eligible card", [100, 300, 200, 500], 10_000, None, [True, True, True, True]),
        ("ineligible cards never taken", [100, 300, 200, 500], 600, [True, False, True, True], [False, False, True, True]),
        ("zero target takes nothing", [100, 300, 200, 500], 0, None, [False, False, False, False]),
    ],
)
def test_greedy_cases(desc, rates, target, eligible, expected):
    got = greedy_run_set(np.array(rates, float), RENT, target, None if eligible is None else np.array(eligible))
    assert got.tolist() == expected, desc


def test_greedy_per_hour_matches_column_by_column():
    rng = np.random.default_rng(0)
    rates = rng.uniform(100, 1000, (20, 30))
    rent = rng.uniform(1, 3, 20)
    target = rng.uniform(500, 6000, 30)
    whole = greedy_run_set(rates, rent, target)
    for h in range(30):
        assert (whole[:, h] == greedy_run_set(rates[:, h], rent, target[h])).all()


def test_tokens_per_dollar_is_rate_times_3600_over_hourly_rent():
    assert tokens_per_dollar(np.array([1000.0]), np.array([4.0]))[0] == pytest.approx(900_000.0)


@pytest.mark.parametrize("sort_cards, sort_cells", [(0, 0), (48, 4096)], ids=["selection at every size", "sort for small pools"])
def test_greedy_by_selection_matches_the_sorted_definition(monkeypatch, sort_cards, sort_cells):
    """The histogram selection gives the stable sort's run sets: ties, zero rates, several rents, short pools."""
    from fleet.core import greedy

    monkeypatch.setattr(greedy, "_SORT_CARDS", sort_cards)
    monkeypatch.setattr(greedy, "_SORT_CELLS", sort_cells)
    rng = np.random.default_rng(11)
    for case in range(300):
        n, k = int(rng.integers(1, 400)), int(rng.integers(1, 12))
        if case % 3 == 0:
            rate = np.round(rng.uniform(0, 6, (n, k))) * 1000.0  # many exact ties
        elif case % 3 == 1:
            rate = rng.lognormal(8.7, 0.2, (n, k)).astype(np.float32)
        else:
            rate = np.where(rng.random((n, k)) < 0.2, 0.0, rng.uniform(-50, 8000, (n, k)))
        rent = rng.choice([3.736, 2.003, 1.868], n) if case % 2 else np.full(n, 3.736)
        eligible = rng.random(n) < 0.8
        pool_tps = float(np.clip(rate, 0, None).sum(axis=0).max()) + 1.0
        target = rng.uniform(-0.05, 1.1, k) * pool_tps
        assert (greedy_run_set(rate, rent, target, eligible) == _sorted_greedy(rate, rent, target, eligible)).all(), case


def test_subnormal_spread_of_rates_is_still_the_sorted_greedy(monkeypatch):
    from fleet.core import greedy

    monkeypatch.setattr(greedy, "_SORT_CARDS", 0)  # the histogram's own edge case
    monkeypatch.setattr(greedy, "_SORT_CELLS", 0)
    rates = np.array([[0.0, 1.0], [5e-324, 2.0]])
    got = greedy_run_set(rates, np.ones(2), np.array([0.0, 1.5]))
    assert got.tolist() == [[False, False], [False, True]]


@pytest.mark.parametrize("sort_cards", [0, 48])
def test_sorted_rates_match_the_sorted_definition(monkeypatch, sort_cards):
    """At one rent on float32 rates the sorted rates give the stable sort's run sets: exact ties (the lowest indices
    taken), zero and negative rates, rates that are not numbers, cards left out, short pools, targets of zero."""
    from fleet.core import greedy

    monkeypatch.setattr(greedy, "_SORT_CARDS", sort_cards)
    monkeypatch.setattr(greedy, "_SORT_CELLS", 0)
    called, left = [], []
    inner = greedy._greedy_by_sorted_rates

    def spy(*args):
        got = inner(*args)
        called.append(args[0].shape[0])
        left.append(got[1].size)
        return got

    monkeypatch.setattr(greedy, "_greedy_by_sorted_rates", spy)
    rng = np.random.default_rng(23)
    for case in range(240):
        n, k = int(rng.integers(49, 700)), int(rng.integers(1, 10))
        if case % 4 == 0:
            rate = (np.round(rng.uniform(0, 8, (n, k))) * 750.0).astype(np.float32)  # many exact ties
        elif case % 4 == 1:
            rate = np.where(rng.random((n, k)) < 0.2, 0.0, rng.uniform(-50, 8000, (n, k))).astype(np.float32)
        elif case % 4 == 2:
            rate = rng.lognormal(8.7, 0.2, (n, k)).astype(np.float32)
            rate[rng.integers(0, n), rng.integers(0, k)] = np.nan
        else:
            rate = rng.lognormal(8.7, 0.2, (n, k)).astype(np.float32)
        eligible = rng.random(n) < 0.8 if case % 2 else np.ones(n, dtype=bool)
        rent = np.full(n, 3.736)
        pool_tps = float(np.nansum(np.clip(rate, 0, None), axis=0).max()) + 1.0
        target = rng.uniform(-0.05, 1.1, k) * pool_tps
        assert (greedy_run_set(rate, rent, target, eligible) == _sorted_greedy(rate, rent, target, eligible)).all(), case
    assert sum(called) > 0 and sum(left) < 0.2 * sum(called)  # the sorted rates called most hours themselves


@pytest.mark.parametrize("window_cards", [1, 8, 192])
def test_selection_around_the_last_crossing_matches_the_sorted_definition(monkeypatch, window_cards):
    """The selection around the hour before's crossing (large pools) gives the stable sort's run sets: hours whose
    targets jump (the window missed), exact ties at the line, zero and negative rates, rates that are not numbers and
    cards left out, short pools, targets of zero, rates without bound; and it calls most hours itself when the targets
    move little."""
    from fleet.core import greedy

    monkeypatch.setattr(greedy, "_PARTITION_CARDS", 49)
    monkeypatch.setattr(greedy, "_WINDOW_CARDS", window_cards)
    monkeypatch.setattr(greedy, "_SORT_CELLS", 0)
    crossings, hours = [], []
    inner = greedy._crossing

    def spy(*args):
        got = inner(*args)
        crossings.append(got[0] >= 0)
        return got

    monkeypatch.setattr(greedy, "_crossing", spy)
    rng = np.random.default_rng(29)
    for case in range(240):
        n, k = int(rng.integers(49, 900)), int(rng.integers(1, 40))
        base = rng.lognormal(8.7, 0.2, n)
        if case % 5 == 0:
            rate = (np.round(rng.uniform(0, 8, (n, k))) * 750.0).astype(np.float32)  # many exact ties
        elif case % 5 == 1:
            rate = np.where(rng.random((n, k)) < 0.2, 0.0, rng.uniform(-50, 8000, (n, k))).astype(np.float32)
            rate[rng.random((n, k)) < 0.05] = -0.0
        elif case % 5 == 2:
            rate = (base[:, None] * rng.uniform(0.9, 1.1, (n, k))).astype(np.float32)
            rate[rng.integers(0, n), rng.integers(0, k)] = np.nan
            rate[rng.integers(0, n), rng.integers(0, k)] = np.inf
        else:
            rate = (base[:, None] * rng.uniform(0.97, 1.03, (n, k))).astype(np.float32)  # scores moving a little
        eligible = rng.random(n) < 0.8 if case % 2 else np.ones(n, dtype=bool)
        rent = np.full(n, 3.736)
        pool_tps = float(np.nansum(np.clip(rate, 0, None), axis=0).max()) + 1.0
        if case % 3 == 0:
            target = rng.uniform(-0.05, 1.1, k) * pool_tps  # jumps about
        else:
            target = (0.5 + 0.2 * np.sin(np.arange(k) / 4.0 + case)) * pool_tps  # a diurnal walk
        hours.append(k)
        with np.errstate(invalid="ignore"):  # a rate without bound makes an infinite running sum, less itself
            assert (greedy_run_set(rate, rent, target, eligible) == _sorted_greedy(rate, rent, target, eligible)).all(), case
    assert sum(crossings) > 0.5 * sum(hours)  # the window called most hours itself


def test_no_eligible_card_takes_none():
    rate = np.full((60, 3), 5000.0, dtype=np.float32)
    assert not greedy_run_set(rate, np.full(60, 3.736), np.array([1e4, 0.0, 1e9]), np.zeros(60, dtype=bool)).any()


def _sorted_greedy(rate, rent, target, eligible):
    """The plain sort's run sets (cards × hours), the reference every faster path must match to the card."""
    from fleet.core.greedy import _greedy_by_sort

    rate_hc = np.where(eligible, np.maximum(rate.T.astype(np.float64), 0.0), 0.0)
    tpd_hc = np.where(eligible, rate_hc * 3600.0 / rent, -np.inf)
    return _greedy_by_sort(rate_hc, tpd_hc, target, np.broadcast_to(eligible, rate_hc.shape)).T
