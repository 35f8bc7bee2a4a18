"""The finer clock read by the hour (`fine_hours`): tokens that wait across an hour count in the hour that serves
them, the loop's rent in the hour it was billed, and the idle cost of both adds up to the month's."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.scenario import Reactive
from fleet.core.traffic import TrafficInput, run_traffic
from fleet.core.traffic_figures import fine_hours, traffic_figures


def _two_hours(demand, cards=1, **kw):
    """A two-hour month of 100 tok/s cards at 1-minute steps, rent $10 an hour, the plan running the first card."""
    plan = np.zeros((cards, 2), dtype=bool)
    plan[0] = True
    return run_traffic(TrafficInput(plan_warm=plan, true_rate_tps=np.full((cards, 2), 100.0), warmup_hours=0,
                                    rent_usd_per_hour=np.full(cards, 10.0), step_demand_tps=np.asarray(demand, float),
                                    step_minutes=1, billing_minutes=1, **kw))


def test_tokens_waiting_across_the_hour_count_in_the_hour_that_serves_them():
    """150 tok/s in hour 0's last minute: 6,000 served, 3,000 wait; hour 1's first minute serves them and its own
    3,000 (50 tok/s). Each hour served 6,000 tokens of a capacity of 360,000."""
    demand = np.zeros(120)
    demand[59], demand[60] = 150.0, 50.0
    t = _two_hours(demand, max_wait_s=120)
    assert t.lost_tokens == 0 and t.served_late_tokens == pytest.approx(3000)
    h = fine_hours(t, np.array([10.0, 10.0]), demand)
    assert h.demand_tps * 3600 == pytest.approx([9000, 3000])
    assert h.delivered_tps * 3600 == pytest.approx([6000, 6000])
    assert h.capacity_tps == pytest.approx([100, 100])
    assert h.idle_usd == pytest.approx([10 * (1 - 6000 / 360000)] * 2)


def test_tokens_lost_never_count_as_delivered():
    demand = np.zeros(120)
    demand[59] = 150.0  # no queue: 3,000 lost in hour 0
    h = fine_hours(_two_hours(demand), np.array([10.0, 10.0]), demand)
    assert h.delivered_tps * 3600 == pytest.approx([6000, 0])
    assert h.idle_usd == pytest.approx([10 * (1 - 6000 / 360000), 10])


def test_the_loop_s_cards_pay_rent_and_idle_in_the_hour_they_were_billed():
    """A jump to 250 tok/s from minute 30 of hour 1: the loop adds two cards (250 × 1.2 = 300 tok/s, the plan has
    100), billed for the 29 minutes after the step it read the jump; the month's idle cost is the sum of its hours'."""
    demand = np.full(120, 50.0)
    demand[90:] = 250.0
    t = _two_hours(demand, cards=3, max_wait_s=120, reactive=Reactive(headroom=1.2, max_adds_per_hour=3,
                                                                      cooldown_minutes=600),
                   score_tps=np.full((3, 2), 100.0), eligible=np.ones((3, 2), dtype=bool))
    assert t.reactive_adds == 2
    assert list(t.loop_cards_hour) == [0, 2]  # the two cards it keeps beyond the plan in hour 1
    tr = traffic_figures(t, 20.0, 20.0, 1, 1, 120.0, True)
    assert (tr["loop_cards_avg"], tr["loop_cards_max"]) == (1.0, 2)
    h = fine_hours(t, np.array([10.0, 10.0]), demand)
    assert h.reactive_usd.sum() == pytest.approx(t.reactive_usd)
    assert h.reactive_usd[0] == 0 and h.reactive_usd[1] == pytest.approx(2 * 10 * 29 / 60)
    assert (h.delivered_tps <= h.capacity_tps + 1e-9).all()
    assert h.delivered_tps.sum() * 3600 == pytest.approx(t.served_tokens)
    used = h.delivered_tps / h.capacity_tps
    assert h.idle_usd == pytest.approx((np.array([10.0, 10.0]) + h.reactive_usd) * (1 - used))
