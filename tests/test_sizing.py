import numpy as np
import pytest

from fleet.sizing import greedy_run_set, tokens_per_dollar

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
