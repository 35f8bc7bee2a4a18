"""The exact ideal operator: brute force on small pools, never above the greedy, and its gap reported."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.presets import load_preset
from fleet.core.ideal import ideal_greedy_usd_by_hour
from fleet.core.ideal import ideal_exact_usd_by_hour, ideal_gap, one_rent, rent_groups
from fleet.presets import draw, replay_scenario

SMALL = Path(__file__).parent / "compare_small.toml"


def brute_force_usd_by_hour(rate: np.ndarray, rent: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Every subset of the pool, each hour: the cheapest covering one (all cards when none covers)."""
    n, hours = rate.shape
    masks = np.array(list(itertools.product([False, True], repeat=n)), dtype=bool)  # (2^n, n)
    cap = masks.astype(np.float64) @ rate  # (2^n, hours)
    cost = masks.astype(np.float64) @ rent  # (2^n,)
    out = np.empty(hours)
    for h in range(hours):
        ok = cap[:, h] >= demand[h] - 1e-9
        out[h] = cost[ok].min() if ok.any() else rent.sum()
    return out


@st.composite
def small_pools(draw):
    n = draw(st.integers(1, 9))
    hours = draw(st.integers(1, 4))
    rents = draw(st.lists(st.sampled_from([1.0, 1.6, 2.3, 3.7]), min_size=n, max_size=n))
    rate = np.array(draw(st.lists(st.floats(0.0, 10.0), min_size=n * hours, max_size=n * hours))).reshape(n, hours)
    fractions = np.array(draw(st.lists(st.floats(0.0, 1.2), min_size=hours, max_size=hours)))
    demand = fractions * rate.sum(axis=0)
    return rate, np.array(rents), demand


@settings(max_examples=150, deadline=None)
@given(small_pools())
def test_exact_matches_brute_force_and_never_exceeds_greedy(pool):
    rate, rent, demand = pool
    brute = brute_force_usd_by_hour(rate, rent, demand)
    greedy = ideal_greedy_usd_by_hour(rate, rent, demand)
    for method in ("auto", "enumerate", "milp"):
        exact = ideal_exact_usd_by_hour(rate, rent, demand, method=method)
        np.testing.assert_allclose(exact, brute, rtol=1e-9, atol=1e-9, err_msg=method)
    assert np.all(exact <= greedy + 1e-9)


def test_greedy_overspends_where_a_cheaper_mix_covers():
    # One fast card at $1.00 per 1 tok/s, two slower at $7 per 6 tok/s. For 12 tok/s the greedy
    # takes the fast card then one slow one ($17); two slow cards cover it for $14.
    rate = np.array([[10.0], [6.0], [6.0]])
    rent = np.array([10.0, 7.0, 7.0])
    demand = np.array([12.0])
    greedy = ideal_greedy_usd_by_hour(rate, rent, demand)
    exact = ideal_exact_usd_by_hour(rate, rent, demand)
    assert greedy.tolist() == [17.0]
    assert exact.tolist() == [14.0]
    gap = ideal_gap(greedy, exact)
    assert (gap.gap_usd, gap.hours_with_gap) == (3.0, 1)
    assert gap.gap_share == pytest.approx(3.0 / 14.0)


@pytest.mark.parametrize(
    "case, demand, expected",
    [
        ("no demand bills nothing", 0.0, 0.0),
        ("demand no set covers takes every card", 100.0, 24.0),
        ("exactly the fastest card", 10.0, 10.0),
    ],
)
def test_edge_hours(case, demand, expected):
    rate = np.array([[10.0], [6.0], [6.0]])
    rent = np.array([10.0, 7.0, 7.0])
    assert ideal_exact_usd_by_hour(rate, rent, np.array([demand])).tolist() == [expected], case


def test_one_class_is_the_greedy():
    rng = np.random.default_rng(5)
    rate = rng.uniform(3000, 8000, (40, 300)).astype(np.float32)
    rent = np.full(40, 2690 / 720)
    demand = rng.uniform(10_000, 200_000, 300)
    np.testing.assert_allclose(ideal_exact_usd_by_hour(rate, rent, demand), ideal_greedy_usd_by_hour(rate, rent, demand))


def test_rent_groups_sort_each_class_fastest_first():
    rate = np.array([[1.0, 5.0], [4.0, 2.0], [3.0, 3.0]])
    groups = rent_groups(rate, np.array([2.0, 1.0, 2.0]))
    assert groups.rent_usd_per_hour.tolist() == [1.0, 2.0]
    assert groups.cards.tolist() == [1, 2]
    assert groups.prefix_tps[1].tolist() == [[0.0, 0.0], [3.0, 5.0], [4.0, 8.0]]


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="method 'simplex'"):
        ideal_exact_usd_by_hour(np.ones((1, 1)), np.ones(1), np.ones(1), method="simplex")


def test_replay_with_the_exact_ideal_on_a_two_class_market():
    scenario = load_preset(str(SMALL)).resolve()
    m = draw(scenario)
    greedy_usd = ideal_greedy_usd_by_hour(m.true_rate_tps[:, m.warmup_hours:], m.rent_usd_per_hour, m.demand_tps)
    greedy = replay_scenario(scenario, month=m, ideal_usd=greedy_usd)
    exact = replay_scenario(scenario, month=m)
    assert exact.figures["bill_usd"] == greedy.figures["bill_usd"]
    # The bargain class beside the flagship lets the exact ideal mix classes where the greedy overshoots.
    assert exact.figures["ideal_bill_usd"] < greedy.figures["ideal_bill_usd"]
    assert exact.figures["convergence"] < greedy.figures["convergence"]



@st.composite
def one_class_months(draw):
    """A month of one card class: every card at one rent, rates drawn (ties, zeros and dips included)."""
    n = draw(st.integers(1, 30))
    hours = draw(st.integers(1, 12))
    rent = draw(st.sampled_from([2690 / 720, 1442 / 720, 1.0, 0.37]))
    levels = draw(st.lists(st.sampled_from([0.0, 1500.0, 3000.0, 3030.0, 6000.0, 7123.5]), min_size=1, max_size=4))
    rate = np.array(draw(st.lists(st.one_of(st.sampled_from(levels), st.floats(0.0, 9000.0, width=32)),
                                  min_size=n * hours, max_size=n * hours)), dtype=np.float32).reshape(n, hours)
    fractions = np.array(draw(st.lists(st.one_of(st.just(0.0), st.floats(0.0, 1.1)), min_size=hours, max_size=hours)))
    return rate, np.full(n, rent), fractions * rate.astype(np.float64).sum(axis=0)


@settings(max_examples=200, deadline=None)
@given(one_class_months())
def test_one_rent_shortcut_is_the_exact_solve(month):
    """At one rent the exact ideal is the greedy's (`one_rent`'s argument): the same cards' count every hour as the
    search over counts and the integer program, and so the same bill."""
    rate, rent, demand = month
    assert one_rent(rent)
    shortcut = ideal_exact_usd_by_hour(rate, rent, demand)
    for method in ("enumerate", "milp"):
        solved = ideal_exact_usd_by_hour(rate, rent, demand, method=method)
        assert np.rint(shortcut / rent[0]).tolist() == np.rint(solved / rent[0]).tolist(), method
        np.testing.assert_allclose(shortcut, solved, rtol=1e-12, atol=0, err_msg=method)
    greedy = ideal_greedy_usd_by_hour(rate, rent, demand)
    assert ideal_exact_usd_by_hour(rate, rent, demand, greedy_usd=greedy).tolist() == shortcut.tolist()


@pytest.mark.parametrize("block_hours", [1, 5, 24])
def test_the_greedy_ideal_found_a_piece_of_hours_at_a_time_is_the_month_found_whole(monkeypatch, block_hours):
    import fleet.core.ideal as ideal_module
    from fleet.core.month import draw_month
    from tests.conftest import make_scenario

    m = draw_month(make_scenario(seed=3, hours=100, warmup_hours=24, dips={"start_prob_per_hour": 0.05, "hours": 5, "depth": 0.5}))
    rates = m.true_rate_tps[:, m.warmup_hours + 3:]  # a month's rates starting off a byte of its dip bits
    demand = m.demand_tps[3:]
    whole = ideal_greedy_usd_by_hour(rates, m.rent_usd_per_hour, demand, block_hours)
    monkeypatch.setattr(ideal_module, "_PIECE_CELLS", m.n_cards * block_hours * 2)
    pieced = ideal_greedy_usd_by_hour(rates, m.rent_usd_per_hour, demand, block_hours)
    assert np.array_equal(pieced, whole)
    assert np.array_equal(ideal_greedy_usd_by_hour(np.asarray(rates), m.rent_usd_per_hour, demand, block_hours), whole)
