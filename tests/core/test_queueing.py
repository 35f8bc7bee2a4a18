"""The first-token wait's queueing model (`fleet.core.queueing`) held to a discrete-event simulation of the same slots."""

import numpy as np
import pytest

from fleet.core.queueing import (admitted_in_time_share_many, erlang_c, simulated_router_shares, simulated_waits_s,
                                   slots_for_wait, wait_at_percentile_s)
from scipy.stats import poisson


def erlang_b(slots: int, load: float) -> float:
    return float(poisson.pmf(slots, load) / poisson.cdf(slots, load))

SLOTS_PER_CARD = 8
SERVICE_S = 10.0  # a decode of 200 tokens at 20 tok/s


@pytest.mark.parametrize("cards", [4, 40, 400])
@pytest.mark.parametrize("utilisation", [0.5, 0.8, 0.95])
def test_the_p99_wait_is_within_10_percent_of_a_simulation(cards, utilisation):
    slots = cards * SLOTS_PER_CARD
    rate = utilisation * slots / SERVICE_S
    rng = np.random.default_rng(cards * 1000 + int(utilisation * 100))
    # A near-full small pool's queue relaxes slowly: it takes millions of requests to pin its p99 down.
    requests = 4_000_000 if utilisation > 0.9 and cards < 40 else 400_000
    waits = simulated_waits_s(slots, rate, SERVICE_S, requests, rng)[requests // 20:]  # the first 5% warm the queue up
    simulated = float(np.quantile(waits, 0.99))
    model = wait_at_percentile_s(slots, rate, SERVICE_S, 0.99)
    # Within 10% of the larger, or within 2% of a decode where both are about zero (fewer than 1% wait at all).
    assert abs(model - simulated) <= 0.10 * max(model, simulated) + 0.02 * SERVICE_S, (model, simulated)


def test_erlang_c_at_known_values():
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: the chance to wait is the utilisation
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(10, 10.0) == 1.0 and erlang_c(10, 0.0) == 0.0
    assert 0.0 < erlang_c(50_000, 49_500.0) < 1.0  # no overflow at tens of thousands of slots


def test_a_small_pool_needs_proportionally_more_spare_slots():
    spare = []
    for load in (8.0, 80.0, 800.0, 8000.0):  # the same utilisation asked of pools 10 times apart
        slots = slots_for_wait(load / SERVICE_S, SERVICE_S, wait_s=0.5, percentile=0.99)
        assert wait_at_percentile_s(slots, load / SERVICE_S, SERVICE_S) <= 0.5 < wait_at_percentile_s(slots - 1, load / SERVICE_S, SERVICE_S)
        spare.append((slots - load) / slots)
    assert spare == sorted(spare, reverse=True) and spare[0] > 3 * spare[-1]


def test_a_load_the_slots_cannot_carry_waits_forever():
    assert wait_at_percentile_s(10, 1.0, 10.0) == float("inf")
    assert slots_for_wait(0.0, 10.0, 1.0) == 0


@pytest.mark.parametrize("cards", [4, 40, 400])
@pytest.mark.parametrize("utilisation", [0.5, 0.8, 0.95, 1.0, 1.05, 1.3])
def test_the_routers_share_in_time_matches_a_simulation(cards, utilisation):
    """The router that queues a request only where it is expected to start within the budget, past a full load too."""
    slots, budget_s = cards * SLOTS_PER_CARD, 0.5
    rate = utilisation * slots / SERVICE_S
    rng = np.random.default_rng(cards * 1000 + int(utilisation * 100))
    simulated = simulated_router_shares(slots, rate, SERVICE_S, budget_s, 400_000, rng)
    model = float(admitted_in_time_share_many(np.array([slots]), np.array([rate * SERVICE_S]), SERVICE_S, budget_s)[0])
    assert abs(model - simulated) <= 0.02, (model, simulated)


def test_the_routers_share_at_its_edges():
    share = admitted_in_time_share_many(np.array([8.0, 8.0, 8.0, 8.0]), np.array([4.0, 0.0, 4.0, 80.0]), 10.0,
                                        np.array([-0.1, 1.0, 0.0, 1.0]))
    assert share[0] == 0.0 and share[1] == 1.0  # the prefill alone misses; no load
    assert share[2] == pytest.approx(1 - erlang_b(8, 4.0))  # no time to queue: Erlang's loss formula
    assert share[3] < 0.11  # ten times the load the slots carry: about a tenth starts in time


@pytest.mark.parametrize("hours", [5, 40, 720])
@pytest.mark.parametrize(("service_s", "wait_s", "percentile"), [(8.0, 1.5, 0.99), (1.0, 0.0, 0.9), (30.0, 10.0, 0.999)])
def test_the_slots_of_many_hours_are_each_hours_own(hours, service_s, wait_s, percentile):
    from fleet.core.queueing import erlang_c_many, slots_for_wait_many

    rng = np.random.default_rng(hours)
    arrival = rng.lognormal(1.0, 1.5, hours)
    arrival[::7] = 0.0  # hours with no requests need no slots
    got = slots_for_wait_many(arrival, service_s, wait_s, percentile)
    assert got.tolist() == [slots_for_wait(float(x), service_s, wait_s, percentile) for x in arrival]
    c = np.array([3.0, 50.0, 400.0])
    assert erlang_c_many(c, c * 0.8).tolist() == [erlang_c(int(k), float(k) * 0.8) for k in c]
