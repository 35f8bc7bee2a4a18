"""The walk's shortcuts are the loop's rules: a day's spares ranked at once rank as each hour's alone, the running
sum takes the cards the cumulative sum's search took, every step's need is each step's, and a walk read for its loss
alone loses what the whole walk loses."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.scenario import Reactive
from fleet.core.traffic import (TrafficInput, cards_to_cover, ranked_spares, ranked_spares_by_hour, reactive_need_tps,
                                run_traffic)


def _ranked_by_definition(tpd: np.ndarray, eligible: np.ndarray | None) -> np.ndarray:
    may = np.flatnonzero(eligible) if eligible is not None else np.arange(tpd.size)
    return may[np.argsort(-tpd[may], kind="stable")]


@pytest.mark.parametrize("seed", range(6))
def test_a_days_ranking_at_once_is_each_hours_ranking(seed):
    rng = np.random.default_rng(seed)
    tpd = np.round(rng.uniform(0, 5, size=(40, 24)), 0)  # rounded: many ties, broken by the lower card
    tpd[rng.random(tpd.shape) < 0.1] = np.nan if seed % 2 else 0.0
    eligible = rng.random(tpd.shape) < 0.7
    order, count = ranked_spares_by_hour(tpd, eligible)
    for h in range(24):
        want = _ranked_by_definition(tpd[:, h], eligible[:, h])
        np.testing.assert_array_equal(order[: count[h], h], want)
        np.testing.assert_array_equal(ranked_spares(tpd[:, h], eligible[:, h]), want)
    order, count = ranked_spares_by_hour(tpd, None)
    np.testing.assert_array_equal(order[: count[0], 0], _ranked_by_definition(tpd[:, 0], None))


@pytest.mark.parametrize("seed", range(6))
def test_the_running_sum_takes_the_cards_the_cumulative_search_took(seed):
    rng = np.random.default_rng(seed)
    score = rng.uniform(0, 900, size=30)
    score[rng.random(30) < 0.2] = 0.0
    for _ in range(200):
        free = rng.permutation(30)[: rng.integers(0, 31)]
        short = float(rng.uniform(0, 12_000))
        adds_left = int(rng.integers(0, 40))
        cum = np.cumsum(score[free])
        want = 0 if free.size == 0 else min(int(np.searchsorted(cum, short - 1e-6)) + 1, free.size, adds_left)
        assert cards_to_cover(free, score, short, adds_left) == max(want, 0)


def test_every_steps_need_at_once_is_each_steps_need():
    settings = Reactive(headroom=1.2)
    demand = np.random.default_rng(3).uniform(0, 300_000, size=500)
    at_once = reactive_need_tps(demand, 0.0, settings)
    assert at_once.tolist() == [reactive_need_tps(float(d), 0.0, settings) for d in demand]


def _month(stop: float | None) -> TrafficInput:
    rng = np.random.default_rng(11)
    cards, hours, per_hour = 12, 48, 6
    rates = rng.uniform(4000, 6000, size=(cards, hours)).astype(np.float32)
    plan = np.zeros((cards, hours), dtype=bool)
    plan[:5] = True
    demand = np.repeat(rng.uniform(20_000, 45_000, size=hours), per_hour)
    return TrafficInput(plan_warm=plan, true_rate_tps=rates, warmup_hours=0, rent_usd_per_hour=np.full(cards, 3.7),
                        step_demand_tps=demand, step_minutes=10, billing_minutes=10, max_wait_s=60.0,
                        reactive=Reactive(headroom=1.2, max_adds_per_hour=2), score_tps=rates * 0.95,
                        eligible=np.ones((cards, hours), dtype=bool), stop_lost_share=stop)


def test_a_walk_read_for_its_loss_alone_loses_what_the_whole_walk_loses():
    whole = run_traffic(_month(None))
    assert whole.lost_tokens > 0 and whole.reactive_usd > 0 and whole.reactive_adds > 0
    unstopped = run_traffic(_month(1.0))
    assert not unstopped.stopped
    assert unstopped.lost_tokens == whole.lost_tokens
    np.testing.assert_array_equal(unstopped.lost_step_tokens, whole.lost_step_tokens)
    assert unstopped.reactive_usd == 0.0  # not summed: such a walk is read for its loss
    stopped = run_traffic(_month(whole.lost_tokens / whole.demand_tokens / 2))
    assert stopped.stopped and stopped.lost_tokens > whole.lost_tokens / 2
