"""The finer clock: the queue's arithmetic, the reactive loop on a tenant's jump, billing by the period, and a month
at 10-minute steps with nothing within the hour replaying as the hourly model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleet.core.errors import ConfigError
from fleet.core.scenario import build_scenario
from fleet.core.scenario import Reactive
from fleet.core.traffic import TrafficInput, react, run_traffic
from fleet.core.traffic_figures import ideal_usd_by_period
from fleet.presets import load_preset, replay_scenario, resolve_scenario


def one_hour(demand_steps, rates, plan, step_minutes=1, **kw):
    """A one-hour month of cards with fixed true rates, the plan's run set given."""
    rates = np.asarray(rates, dtype=np.float64)[:, None]
    per_hour = 60 // step_minutes
    demand = np.zeros(per_hour)
    demand[: len(demand_steps)] = demand_steps
    return run_traffic(TrafficInput(plan_warm=np.asarray(plan, dtype=bool)[:, None], true_rate_tps=rates, warmup_hours=0,
                                    rent_usd_per_hour=np.full(rates.shape[0], 10.0), step_demand_tps=demand,
                                    step_minutes=step_minutes, billing_minutes=kw.pop("billing_minutes", step_minutes), **kw))


def test_unserved_tokens_wait_one_step_and_are_served_first():
    t = one_hour([50, 150, 50, 50], [100], [True], max_wait_s=60)
    assert t.lost_tokens == 0
    assert t.served_late_tokens == pytest.approx(50 * 60)  # step 1's deficit, served in step 2 before step 2's own
    assert t.wait_s(0.5) == t.wait_s(0.99) == 60
    assert t.drain_steps_max == 1


@pytest.mark.parametrize("max_wait_s", [None, 59.0])
def test_without_a_queue_or_with_a_patience_under_a_step_the_deficit_is_lost(max_wait_s):
    t = one_hour([50, 150, 50, 50], [100], [True], max_wait_s=max_wait_s)
    assert t.lost_tokens == pytest.approx(50 * 60)
    assert t.served_late_tokens == 0


def test_a_token_past_the_patience_is_abandoned():
    # 1 card of 100 tok/s, two steps at 200 tok/s, one step's patience: step 0 leaves 6,000 waiting; step 1 serves
    # them and leaves its own 12,000; step 2 serves 6,000 of those; at step 3 the rest have waited 2 steps: lost.
    t = one_hour([200, 200], [100], [True], max_wait_s=60)
    assert t.served_late_tokens == pytest.approx(6000 + 6000)
    assert t.lost_tokens == pytest.approx(6000)
    assert t.served_tokens + t.lost_tokens == pytest.approx(t.demand_tokens)


def test_the_reactive_loop_follows_a_tenants_jump():
    # A plan of 2 cards (100 tok/s each) for 150 tok/s; at minute 20 a tenant triples demand to 450 tok/s.
    # The loop sees step 20's demand at its end and adds ceil(450 × 1.2 / 100) − 2 = 4 cards, serving from
    # step 21 + their 2-step boot = 23: steps 20, 21 and 22 each lose (450 − 200) × 60 tokens.
    demand = [150] * 20 + [450] * 40
    settings = Reactive(headroom=1.2, max_adds_per_hour=16, cooldown_minutes=30)
    plan = [True, True] + [False] * 8
    t = one_hour(demand, [100] * 10, plan, reactive=settings, score_tps=np.full((10, 1), 100.0),
                 eligible=np.ones((10, 1), dtype=bool), boot_steps=np.array([0, 0] + [2] * 8))  # the plan's serve at once
    assert [a.step for a in t.adds] == [20] * 4
    assert "reactive: step demand 450 tok/s" in t.adds[0].reason
    assert t.lost_tokens == pytest.approx(3 * (450 - 200) * 60)
    assert t.capacity_step_tps[23] == 600
    # Each added card bills from step 21 to the hour's end: 39 one-minute periods of $10 an hour.
    assert t.reactive_usd == pytest.approx(4 * 39 * 10 / 60)


def test_with_a_queue_the_jump_is_served_late_and_drains():
    demand = [150] * 20 + [450] * 40
    settings = Reactive(headroom=1.2, max_adds_per_hour=16, cooldown_minutes=30)
    t = one_hour(demand, [100] * 10, [True, True] + [False] * 8, reactive=settings, score_tps=np.full((10, 1), 100.0),
                 eligible=np.ones((10, 1), dtype=bool), boot_steps=np.full(10, 0), max_wait_s=120)
    # Step 20 leaves 15,000 tokens waiting; the loop adds cards for 450 × 1.2 + 15,000 / 60 = 790 tok/s (6 cards,
    # 800 tok/s from step 21), and step 21 serves the backlog first with 800 − 450 = 350 tok/s to spare.
    assert len(t.adds) == 6
    assert t.lost_tokens == 0
    assert t.served_late_tokens == pytest.approx(15000)
    assert t.drain_steps_max == 1


def test_hourly_billing_charges_the_whole_hour_of_a_card_added_within_it():
    settings = Reactive(headroom=1.0, max_adds_per_hour=1, cooldown_minutes=0)
    t = one_hour([150] * 60, [100, 100], [True, False], reactive=settings, score_tps=np.full((2, 1), 100.0),
                 eligible=np.ones((2, 1), dtype=bool), billing_minutes=60)
    assert t.reactive_usd == pytest.approx(10.0)


def test_react_is_scale_up_only_and_within_its_budget():
    warm = np.array([True, False, False, False])
    score = np.full(4, 100.0)
    got = react(1000.0, 0.0, warm, np.arange(4), score, score / 10, Reactive(headroom=1.0), adds_left=2, step=5)
    assert [a.card for a in got] == [1, 2]
    assert react(50.0, 0.0, warm, np.arange(4), score, score / 10, Reactive(headroom=1.0), adds_left=2, step=5) == ()


def test_the_ideal_pays_each_period_for_its_highest_step():
    rates = np.array([[100.0], [100.0], [100.0]])
    demand = np.array([100.0] * 30 + [250.0] * 30)  # one hour at 1-minute steps
    by_minute = ideal_usd_by_period(rates, 0, np.full(3, 60.0), demand, 1, 1)
    assert by_minute.sum() == pytest.approx(30 * 1 + 30 * 3)  # 1 card then 3 cards, $1 a card-minute
    by_hour = ideal_usd_by_period(rates, 0, np.full(3, 60.0), demand, 1, 60)
    assert by_hour.sum() == pytest.approx(3 * 60)


@pytest.mark.parametrize("name", ["noise-evictor", "golden-idler", "bargain-shortfall"])
def test_ten_minute_steps_with_nothing_within_the_hour_replay_as_the_hourly_model(name):
    preset = load_preset(name)
    hourly = replay_scenario(resolve_scenario(preset))
    fine = replay_scenario(resolve_scenario(preset, overrides=["step_minutes=10"]))
    tf = fine.figures["traffic"]
    assert tf["reactive_adds"] == 0
    assert tf["lost_share"] == pytest.approx(hourly.figures["unmet_share"], abs=1e-12)
    assert fine.figures["bill_usd"] == pytest.approx(hourly.figures["bill_usd"], abs=0.005)
    assert fine.figures["ideal_bill_usd"] == pytest.approx(hourly.figures["ideal_bill_usd"], abs=0.005)


@pytest.mark.parametrize("change, words", [
    ({"step_minutes": 7}, "step_minutes = 7: a step must divide the hour"),
    ({"step_minutes": 10, "billing_minutes": 15}, "billing_minutes = 15"),
    ({"demand": {"max_wait_s": 0}}, "max_wait_s"),
])
def test_a_clock_that_does_not_fit_is_refused_in_one_line(change, words):
    raw = {"classes": [{"name": "flagship", "rated_tps": 6000, "rent_usd_per_month": 2690, "pool_cards": 8}],
           "policy": {"card_class": "flagship"}, **change}
    with pytest.raises(ConfigError) as err:
        build_scenario(raw, "pool.toml")
    assert words in str(err.value)
    assert "\n" not in str(err.value)


ROOT = Path(__file__).resolve().parents[2]


# (patience, mark, whether the walk stops early): at 600 s the few tokens lost are still waiting at the month's end.
@pytest.mark.parametrize("max_wait_s, mark, stops", [(60, 0.005, True), (60, 0.05, False), (600, 0.000005, False),
                                                     (600, 0.005, False)])
def test_a_search_that_stops_once_the_month_fails_reads_the_same_capacity_check(max_wait_s, mark, stops):
    """A headroom search asks pass or fail only: the walk may stop once the month has lost more than the mark."""
    from fleet.core.compare import MonthCache
    from fleet.core.month import draw_month
    from fleet.presets import demand_file_tps
    from policies import resolve

    pool = ROOT / "bench" / "pools" / "servegen-m-mid.toml"
    s = resolve_scenario(load_preset(str(pool)), overrides=[
        "step_minutes=10", f"demand.max_wait_s={max_wait_s}", "policy.reactive.headroom=1.2",
        f"checks.max_unmet_share={mark}"])
    cache = MonthCache(draw_month(s, demand_file_tps(s, pool.parent)), exact=False)
    full = cache.replay(s, resolve(s.policy))
    quick = cache.replay(s, resolve(s.policy), capacity_only=True)
    passed = full.figures["checks"]["capacity"]["pass"]
    assert quick.figures["checks"]["capacity"]["pass"] == passed
    assert quick.traffic.stopped == stops
    assert not (stops and passed)
    assert quick.traffic.lost_tokens <= full.traffic.lost_tokens + 1e-6



@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_wait_s, lost, late, p99_s", [(180, 0.0, [72000, 21000, 0], 120),
                                                           (120, 0.0, [72000, 21000], 120),
                                                           (60, 18000.0, [57000], 60)])
def test_a_tenant_tripling_demand_at_a_random_minute_is_caught_by_the_loop(seed, max_wait_s, lost, late, p99_s):
    """A 3-hour month of 100 tok/s cards at 1-minute steps; the plan runs 2 of them for 150 tok/s, and at a random
    minute m a tenant triples demand to 450 tok/s (27,000 tokens a step; the plan serves 12,000). The step model's
    arithmetic by hand (headroom 1.2, a 2-step boot, the oldest tokens served first):
    m: 15,000 wait; the loop adds 6 cards for 450 × 1.2 + 15,000 / 60 = 790 tok/s.
    m + 1: 12,000 of m's served (1 step late), m + 1's 27,000 wait (30,000 in all); 3 more cards (1,040 tok/s).
    m + 2: m's last 3,000 (2 late) and 9,000 of m + 1's (1 late); 45,000 wait; 2 more cards (1,290 tok/s).
    m + 3: the first 6 serve (48,000): m + 1's 18,000 (2 late), m + 2's 27,000 (1 late), 3,000 of its own.
    m + 4: all 11 serve (66,000): m + 3's 24,000 (1 late) and its own 27,000. The backlog lasted 4 steps.
    With a patience of one step, m's last 3,000 are abandoned at m + 2 and m + 1's 15,000 at m + 3.
    """
    minute = int(np.random.default_rng(seed).integers(0, 3 * 60 - 5))
    demand = np.full(3 * 60, 150.0)
    demand[minute:] = 450.0
    cards = 16
    settings = Reactive(headroom=1.2, max_adds_per_hour=16, cooldown_minutes=180)  # the plan never releases them
    t = run_traffic(TrafficInput(
        plan_warm=np.repeat(np.array([True, True] + [False] * (cards - 2))[:, None], 3, axis=1),
        true_rate_tps=np.full((cards, 3), 100.0), warmup_hours=0, rent_usd_per_hour=np.full(cards, 10.0),
        step_demand_tps=demand, step_minutes=1, billing_minutes=1, boot_steps=np.array([0, 0] + [2] * (cards - 2)),
        max_wait_s=max_wait_s, reactive=settings, score_tps=np.full((cards, 3), 100.0),
        eligible=np.ones((cards, 3), dtype=bool)))
    assert [len([a for a in t.adds if a.step == minute + k]) for k in range(5)] == [6, 3, 2, 0, 0]
    assert t.lost_tokens == pytest.approx(lost)
    assert t.drain_steps_max == 4
    assert list(t.late_by_steps[1:]) == pytest.approx(late)
    assert (t.wait_s(0.5), t.wait_s(0.99)) == (60, p99_s)


def test_on_the_finer_clock_the_unmet_rate_is_the_tokens_lost_over_the_month():
    pool = ROOT / "bench" / "pools" / "servegen-m-mid.toml"
    s = resolve_scenario(load_preset(str(pool)), overrides=["step_minutes=10", "policy.reactive.headroom=1.2"])
    f = replay_scenario(s, base_dir=pool.parent).figures
    assert f["traffic"]["lost_tokens"] > 0
    assert f["unmet_avg_tps"] == pytest.approx(f["traffic"]["lost_tokens"] / (s.hours * 3600))
    assert f["unmet_avg_tps"] == pytest.approx(f["unmet_share"] * f["traffic"]["demand_tokens"] / (s.hours * 3600))
