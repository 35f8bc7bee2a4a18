"""The reactive loop's rule as `fleet serve` asks it (`fleet.core.reactive`): the measured backlog and demand
against the run set's scored capacity, the best spares by tokens per dollar, the hour's cap, and the cool-down."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.reactive import Measured, cooling_down, reactive_adds
from fleet.core.scenario import Reactive

# Four cards at one rent: 0 and 1 warm (3,000 tok/s scored each), 2 and 3 spare; card 3 buys more tokens a dollar.
SCORE_TPS = np.array([3000.0, 3000.0, 1000.0, 2000.0])
RENT_USD_PER_HOUR = np.full(4, 3.7)
WARM = np.array([True, True, False, False])
INTERVAL_S = 60.0


@pytest.mark.parametrize("backlog_tokens, demand_tps, headroom, eligible, adds_this_hour, max_adds, added", [
    (0, 5000, 1.2, (1, 1, 1, 1), 0, 16, []),  # 6,000 asked of 6,000 scored: none
    (0, 5100, 1.2, (1, 1, 1, 1), 0, 16, [3]),  # 6,120 asked: the best spare covers it
    (60 * 1500, 5000, 1.2, (1, 1, 1, 1), 0, 16, [3]),  # 6,000 + a backlog of 1,500 tok/s a minute: 7,500 ≤ 8,000
    (60 * 2500, 5000, 1.2, (1, 1, 1, 1), 0, 16, [3, 2]),  # 8,500 asked: both spares
    (60 * 90_000, 5000, 1.2, (1, 1, 1, 1), 0, 16, [3, 2]),  # far short: every spare, no more
    (60 * 2500, 5000, 1.2, (1, 1, 1, 1), 15, 16, [3]),  # the hour's cap: one add left
    (60 * 2500, 5000, 1.2, (1, 1, 1, 1), 16, 16, []),  # the cap reached
    (60 * 2500, 5000, 1.2, (1, 1, 1, 0), 0, 16, [2]),  # card 3 may not be added (evicted, retired)
    (0, 5100, 1.0, (1, 1, 1, 1), 0, 16, []),  # headroom 1: 5,100 within 6,000
    (-60 * 500, 5100, 1.2, (1, 1, 1, 1), 0, 16, [3]),  # a negative backlog reads as none
])
def test_the_reactive_rule(backlog_tokens, demand_tps, headroom, eligible, adds_this_hour, max_adds, added):
    _check(SCORE_TPS, backlog_tokens, demand_tps, headroom, eligible, adds_this_hour, max_adds, added)


def test_a_card_without_a_score_is_no_spare():
    _check(np.array([3000.0, 3000.0, 0.0, 2000.0]), 60 * 90_000, 5000, 1.2, (1, 1, 1, 1), 0, 16, [3])


def _check(score_tps, backlog_tokens, demand_tps, headroom, eligible, adds_this_hour, max_adds, added):
    settings = Reactive(headroom=headroom, max_adds_per_hour=max_adds, cooldown_minutes=60)
    got = reactive_adds(Measured(backlog_tokens, demand_tps), INTERVAL_S, WARM, np.array(eligible, dtype=bool),
                        score_tps, RENT_USD_PER_HOUR, settings, adds_this_hour)
    assert [a.card for a in got] == added
    for a in got:
        assert a.scored_tps == 6000.0 and a.observed_tps == demand_tps
        assert a.backlog_tps == max(backlog_tokens, 0) / INTERVAL_S
        assert a.reason.startswith("reactive: ") and "above the scored capacity 6000 tok/s" in a.reason


@pytest.mark.parametrize("added_ts, cooldown_minutes, hour_ts, held", [
    (1000, 60, 1000 + 3599, True),
    (1000, 60, 1000 + 3600, False),
    (1000, 0, 1000, False),
    (1000, 0, 999, True),  # added after the hour began: its plan cannot release it
    (1000, 90, 1000 + 3600, True),
])
def test_the_plan_releases_a_loop_card_only_after_its_cool_down(added_ts, cooldown_minutes, hour_ts, held):
    assert cooling_down(added_ts, cooldown_minutes, hour_ts) is held


def test_under_a_promise_the_demand_is_lifted_to_its_first_token_slots():
    """The lift (`PromiseView.target_tps` in the service and in replay) is applied to the demand × headroom before
    the backlog is added: 5,000 × 1.0 lifted to 6,500 asks for card 3 where the plain rule asks for none."""
    settings = Reactive(headroom=1.0, max_adds_per_hour=16, cooldown_minutes=60)
    lift = lambda tps: np.maximum(np.asarray(tps) * 1.3, 0.0)  # noqa: E731
    measured, eligible = Measured(0.0, 5000.0), np.ones(4, dtype=bool)
    plain = reactive_adds(measured, INTERVAL_S, WARM, eligible, SCORE_TPS, RENT_USD_PER_HOUR, settings, 0)
    lifted = reactive_adds(measured, INTERVAL_S, WARM, eligible, SCORE_TPS, RENT_USD_PER_HOUR, settings, 0,
                           target=lift)
    assert plain == ()
    assert [a.card for a in lifted] == [3]
    assert lifted[0].need_tps == pytest.approx(6500.0)
    assert "lifted to 6500 tok/s for the first tokens' slots" in lifted[0].reason
