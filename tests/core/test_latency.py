"""A promise to the users (`[slo]`): goodput, the fourth check, and a promise that cannot be judged refused."""

import numpy as np
import pytest

from fleet.core.errors import ConfigError
from fleet.core.latency import RequestShape, Slo, card_rates_at_promise, class_servings, promise_figures
from fleet.core.queueing import admitted_in_time_share_many, erlang_c, wait_at_percentile_s
from fleet.core.scenario import CardClass, build_scenario

CHAT_CLASS = {"name": "h100-70b", "rent_usd_per_month": 2690,
              "serving": {"alpha_ms": 20.9, "beta_ms": 0.227, "batch": 128, "params_b": 70, "effective_tflops": 400}}


def scenario(**over):
    raw = {"classes": [{**CHAT_CLASS, "pool_cards": 8}], "policy": {"card_class": "h100-70b"},
           "demand": {"output_tokens_per_request": 250, "prompt_tokens_per_request": 600}}
    for k, v in over.items():
        raw[k] = {**raw.get(k, {}), **v} if isinstance(v, dict) else v
    return build_scenario(raw, "preset file 'x.toml'")


def test_a_card_at_the_promise_keeps_its_batch_and_a_slow_card_a_smaller_one():
    servings = class_servings([CardClass.model_validate(CHAT_CLASS)], RequestShape(250, 600))
    rated = servings[0].rated_tps
    true = np.array([[rated], [0.8 * rated]])
    rate, slots = card_rates_at_promise(true, np.array([0, 0]), servings, 30.0)
    assert slots[0, 0] == 54 and slots[1, 0] < 54
    assert rate[0, 0] == pytest.approx(54 / (0.0209 + 54 * 0.000227))
    rate_none, slots_none = card_rates_at_promise(true, np.array([0, 0]), servings, None)
    np.testing.assert_allclose(rate_none, true)
    assert (slots_none == 128).all()


def test_goodput_is_what_the_rate_at_the_promise_carries():
    warm = np.ones((2, 3), dtype=bool)
    rate = np.full((2, 3), 1000.0)
    slots = np.full((2, 3), 40.0)
    delivered = np.array([1500.0, 2500.0, 0.0])
    p = promise_figures(warm, rate, slots, delivered, delivered, Slo(stream_tps=25), None, 0.0)
    np.testing.assert_allclose(p.goodput_tps, [1500.0, 2000.0, 0.0])


def test_the_first_token_share_is_the_routers():
    warm = np.ones((1, 1), dtype=bool)
    rate, slots = np.array([[2000.0]]), np.array([[50.0]])
    demand = np.array([1800.0])
    shape = RequestShape(output_tokens=200)
    p = promise_figures(warm, rate, slots, demand, demand, Slo(stream_tps=25, ttft_ms=1500), shape, prefill=0.5)
    service_s = 200 * 50 / 2000.0  # a slot's request at the promised batch's stream speed
    load = 1800 / 200 * service_s
    want = float(admitted_in_time_share_many(np.array([50.0]), np.array([load]), service_s, 1.0)[0])
    fifo = 1 - erlang_c(50, load) * np.exp(-(50 - load) * 1.0 / service_s)
    assert p.ttft_ok_share[0] == pytest.approx(want) and fifo < want < 0.99  # the router beats holding everyone
    assert p.goodput_tps[0] == pytest.approx(1800 * want)  # the hour misses p99: requests not started in time are lost to it
    assert p.ttft_s[0] == pytest.approx(wait_at_percentile_s(50, 1800 / 200, service_s) + 0.5)


def test_an_hour_short_of_slots_loses_about_what_it_is_short():
    warm = np.ones((1, 2), dtype=bool)
    rate, slots = np.full((1, 2), 20_000.0), np.full((1, 2), 500.0)
    demand = np.array([20_000.0 * 1.02, 20_000.0 * 0.98])  # 2% over and 2% under the rate at the promise
    p = promise_figures(warm, rate, slots, demand, demand, Slo(stream_tps=25, ttft_ms=2000), RequestShape(200), 0.5)
    lost = 1 - p.goodput_tps / demand
    assert 0.02 < lost[0] < 0.2  # not the whole hour, as a queue that holds everyone would lose
    assert lost[1] == 0.0 and p.ttft_ok_share[1] >= 0.99  # 2% under keeps p99: every token


def test_an_hour_that_keeps_the_first_token_at_its_percentile_keeps_every_token():
    warm = np.ones((1, 2), dtype=bool)
    rate, slots = np.full((1, 2), 2000.0), np.full((1, 2), 50.0)
    demand = np.array([1500.0, 1900.0])
    p = promise_figures(warm, rate, slots, demand, demand, Slo(stream_tps=25, ttft_ms=1500, percentile=0.95),
                        RequestShape(output_tokens=200), prefill=0.5)
    assert 0.95 <= p.ttft_ok_share[0] < 1.0  # a few first tokens come late, within what p95 allows
    assert p.goodput_tps[0] == pytest.approx(1500.0)
    assert p.ttft_ok_share[1] < 0.95 and p.goodput_tps[1] == pytest.approx(1900.0 * p.ttft_ok_share[1])


def test_a_throughput_sized_chat_pool_fails_latency_and_without_a_promise_has_three_checks():
    from fleet.presets import replay_scenario

    throughput = {"card_class": "h100-70b", "headroom": 1.02, "size_to": "throughput"}
    promised = replay_scenario(scenario(slo={"stream_tps": 30}, demand={"avg_tps": 8000}, policy=throughput))
    f = promised.figures
    assert set(f["checks"]) == {"capacity", "convergence", "eviction", "latency"}
    assert not f["checks"]["latency"]["pass"] and f["goodput_share"] < 0.9
    plain = replay_scenario(scenario(demand={"avg_tps": 8000}, policy={"card_class": "h100-70b", "headroom": 1.02}))
    assert set(plain.figures["checks"]) == {"capacity", "convergence", "eviction"} and "goodput_share" not in plain.figures
    assert plain.figures["bill_usd"] == f["bill_usd"]  # sized to throughput, the promise judges the month, not the run


def test_sized_to_the_promise_the_same_pool_keeps_it_with_more_cards():
    from fleet.presets import replay_scenario

    pool = {"classes": [{**CHAT_CLASS, "pool_cards": 12}], "slo": {"stream_tps": 30}, "demand": {"avg_tps": 8000}}
    by = {to: replay_scenario(scenario(**pool, policy={"card_class": "h100-70b", "headroom": 1.02, "size_to": to})).figures
          for to in ("throughput", "promise")}
    kept, missed = by["promise"], by["throughput"]
    assert kept["checks"]["latency"]["pass"] and kept["checks"]["capacity"]["pass"]
    assert not missed["checks"]["latency"]["pass"]
    # Each card carries 1,629 of its 2,560 tok/s at 30 tok/s a stream: the promise needs about 2,560 / 1,629 the cards.
    assert kept["cards_warm_avg"] > missed["cards_warm_avg"] * 1.3
    # The ideal operator keeps the promise whatever the policy sizes to: one ideal for both.
    assert kept["ideal_bill_usd"] == missed["ideal_bill_usd"]


@pytest.mark.parametrize(("over", "reason"), [
    ({"slo": {"stream_tps": 60}}, "slo.stream_tps 60: no card of class 'h100-70b' meets it even at batch 1 (47.3 tok/s a stream)"),
    ({"slo": {"ttft_ms": 500}, "demand": {"output_tokens_per_request": None}}, "needs demand.output_tokens_per_request"),
    ({"demand": {"output_tokens_per_request": -5}}, "demand.output_tokens_per_request"),
    # 2 x 70e9 x 600 / 400e12 = 210 ms of prefill: a first token within 200 ms leaves no wait for a slot.
    ({"slo": {"ttft_ms": 200}}, "slo.ttft_ms 200: a prompt's prefill alone takes 210 ms on class 'h100-70b' (2 x 70 B "
                                "parameters x 600 prompt tokens over 400 TFLOPS)"),
])
def test_a_promise_that_cannot_be_judged_is_one_error(over, reason):
    with pytest.raises(ConfigError) as err:
        scenario(**over)
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_a_first_token_promise_the_prefill_just_fits_is_kept():
    """A promise at the prefill itself, or with no prompt size, is a promise a run set can keep: no error."""
    assert scenario(slo={"ttft_ms": 210.0}).slo.ttft_ms == 210.0
    assert scenario(slo={"ttft_ms": 100}, demand={"prompt_tokens_per_request": None}).slo.ttft_ms == 100


def test_a_promise_on_a_class_without_a_curve_is_refused():
    raw = {"classes": [{"name": "f", "rated_tps": 6000, "rent_usd_per_month": 1, "pool_cards": 2}],
           "policy": {"card_class": "f"}, "slo": {"stream_tps": 20}}
    with pytest.raises(ConfigError, match="class 'f' gives rated_tps alone; a promise needs its"):
        build_scenario(raw, "preset file 'x.toml'")


def test_the_first_token_asks_for_spare_slots_and_a_small_pool_more_of_them():
    from fleet.core.latency import target_for_first_token_tps
    from fleet.core.queueing import wait_at_percentile_s

    slo = Slo(stream_tps=30, ttft_ms=1000)
    shape = RequestShape(output_tokens=250)
    slot_tps = 30.2
    demand = np.array([3_000.0, 30_000.0, 300_000.0, 0.0])
    target = target_for_first_token_tps(demand, slo, shape, slot_tps, prefill=0.2)
    assert (target[:3] > demand[:3]).all() and target[3] == 0.0
    spare = target[:3] / demand[:3] - 1
    assert spare[0] > spare[1] > spare[2]  # the square-root law: a small pool needs proportionally more
    service_s = 250 / slot_tps
    for d, t in zip(demand[:3], target[:3]):  # each target's slots keep the wait within the promise, one fewer does not
        slots = round(t / slot_tps)
        assert wait_at_percentile_s(slots, d / 250, service_s) <= 0.8 < wait_at_percentile_s(slots - 1, d / 250, service_s)
    no_ttft = target_for_first_token_tps(demand, Slo(stream_tps=30), shape, slot_tps, 0.2)
    np.testing.assert_array_equal(no_ttft, demand)


def test_a_card_added_for_the_first_token_says_so_and_the_step_reads_scores_at_the_promise():
    from fleet.core.carry import Carry
    from fleet.core.latency import promise_view
    from fleet.core.step import StepInput, step
    from fleet.presets import resolve_policy

    s = scenario(slo={"stream_tps": 30, "ttft_ms": 300}, demand={"prompt_tokens_per_request": 0},
                 policy={"card_class": "h100-70b", "mode": "steady", "headroom": 1.0})
    parts = resolve_policy(s)
    n = 4
    view = promise_view(s, ("h100-70b",), np.zeros(n, dtype=np.int64))
    rated = np.full((n, 1), 2560.0)
    carry = Carry.month_start(np.ones(n, dtype=bool), 0)

    def hour(h, demand_tps, carry):
        return step(carry, StepInput(hours=np.array([h]), score_tps=rated, rent_usd_per_hour=np.full(n, 2690 / 720),
                                     demand_tps=np.array([demand_tps]), peak_demand_tps=np.array([demand_tps]),
                                     pool_cards=n, groups=np.zeros(n, dtype=np.int64), promise=view), parts)

    first = hour(0, 100.0, carry)
    assert first.warm[:, 0].sum() == 1
    one_card_tps = float(view.rates_tps(rated)[0, 0])  # 54 streams at 30.2 tok/s: 1,629 of its rated 2,560
    assert 1600 < one_card_tps < 1650 and first.scored_capacity_tps == pytest.approx(one_card_tps)
    # 1,500 tok/s: one card carries the tokens at the promise, but 54 slots hold 50 streams' load, so the p99 first
    # token waits longer than 300 ms: the second card is there for the first token alone.
    second = hour(1, 1500.0, first.next)
    (added,) = second.adds
    assert added.reason.startswith("added for latency") and "more for the first token's slots" in added.reason
    assert "at the promise (30 tok/s a stream, first token within 300 ms at p99)" in added.reason
    assert added.score_tps == pytest.approx(one_card_tps)  # the journal carries the card's rate at the promise


def test_a_drawn_months_rates_at_the_promise_are_two_levels_a_card_with_the_same_numbers():
    from fleet.core.latency import promise_view, true_at_promise
    from fleet.core.month import draw_month

    s = scenario(slo={"stream_tps": 30, "ttft_ms": 2000}, demand={"avg_tps": 8000})
    month = draw_month(s)
    W, H = month.warmup_hours, month.hours
    dense = np.asarray(month.true_rate_tps)[:, W:W + H]
    view = promise_view(s, month.class_names, month.card_class)
    want_rate, want_slots = card_rates_at_promise(dense, month.card_class, list(view.servings), 30)
    rate, slots = true_at_promise(s, month)
    assert hasattr(rate, "dip_mask")  # kept as levels, not a month-sized array
    assert np.array_equal(np.asarray(rate), want_rate) and np.array_equal(np.asarray(slots), want_slots)
    assert np.array_equal(np.asarray(view.rates_tps(month.true_rate_tps[:, W:])), view.rates_tps(dense))


@pytest.mark.parametrize("hours", [1, 2, 95, 96, 97, 193, 720])
def test_the_run_sets_sums_are_the_products_summed_to_the_bit(hours):
    from fleet.core.latency import run_set_sums
    from fleet.core.month import DippedRates

    rng = np.random.default_rng(hours)
    cards = 3000
    warm_hm = rng.random((hours, cards)) < 0.4  # a replay's run sets, hours-major
    rates = DippedRates(rng.lognormal(7, 0.3, cards).astype(np.float32), rng.random((cards, hours)) < 0.05, 0.7)
    level = rates.with_levels(rng.random(cards) * 1e3, rng.random(cards) * 1e2)
    top = np.floor(rng.random(cards) * 120)
    # Slots as a month's array, as two levels a card of whole numbers (a drawn month's), and as levels that are not.
    for slots in (np.floor(rng.random((cards, hours)) * 60), rates.with_levels(top, np.floor(top * rng.random(cards))),
                  rates.with_levels(top + 0.5, top * 0.3)):
        for warm in (warm_hm.T, np.ascontiguousarray(warm_hm.T)):
            got_rate, got_slots = run_set_sums(warm, level, slots)
            assert got_rate.tolist() == (np.asarray(level) * warm).sum(axis=0).tolist()
            assert got_slots.tolist() == (np.asarray(slots) * warm).sum(axis=0).tolist()
