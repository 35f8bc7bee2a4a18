"""The convergence ceiling of a plan set before the hour, against the demand's independent hourly noise: the headroom
it names loses exactly the capacity mark on the month's own demand draws, a little less loses more, and it caps
convergence only where the noise is large enough."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.month import draw_demand
from fleet.core.noise_ceiling import noise_ceiling
from fleet.core.scenario import Demand

HOURS = 400_000  # enough hours that the drawn shortfall is within a few percent of its expectation


def _unmet_share(jitter: float, headroom: float, seed: int = 5) -> float:
    """The share of demand a flat plan at `headroom` × the level misses, on the month model's own demand draw."""
    demand = Demand(shape="flat", avg_tps=1000.0, jitter=jitter)
    _, tps = draw_demand(demand, HOURS, 0, np.random.default_rng(seed))
    level = demand.avg_tps  # the flat demand's level: no forecast error at all
    return float(np.maximum(tps - level * headroom, 0.0).sum() / tps.sum())


@pytest.mark.parametrize("jitter, mark", [(0.1, 0.005), (0.15, 0.005), (0.2, 0.01), (0.05, 0.002)])
def test_the_headroom_loses_the_mark_on_the_months_own_draws(jitter, mark):
    c = noise_ceiling(jitter, mark, 0.9)
    assert c is not None and c.convergence == pytest.approx(1.0 / c.headroom)
    assert _unmet_share(jitter, c.headroom) == pytest.approx(mark, rel=0.05)
    # The ceiling is tight: a plan one point under it misses the mark.
    assert _unmet_share(jitter, c.headroom - 0.01) > mark * 1.05


@pytest.mark.parametrize("jitter, mark, binds", [
    (0.128, 0.005, True),  # a bursty pool of the bench: 85.1% at most
    (0.2, 0.005, True),
    (0.05, 0.005, False),  # 95.7%: the noise leaves room
    (0.1, 0.02, False),  # a looser capacity mark leaves room too
])
def test_it_binds_only_where_the_noise_outruns_the_convergence_mark(jitter, mark, binds):
    assert noise_ceiling(jitter, mark, 0.9).binds is binds


def test_more_noise_takes_more_headroom():
    ceilings = [noise_ceiling(j, 0.005, 0.9).headroom for j in (0.02, 0.05, 0.1, 0.15, 0.2, 0.3)]
    assert all(a < b for a, b in zip(ceilings, ceilings[1:]))


def test_no_noise_or_a_mark_the_noise_never_reaches_caps_nothing():
    assert noise_ceiling(0.0, 0.005, 0.9) is None
    assert noise_ceiling(0.01, 0.005, 0.9) is None  # E[(σZ)+] = 0.4% < 0.5% with no headroom at all


def test_a_mark_of_zero_takes_every_card():
    c = noise_ceiling(0.1, 0.0, 0.9)
    assert c.headroom == float("inf") and c.convergence == 0.0 and c.binds
