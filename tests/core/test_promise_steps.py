"""The promise at the finer clock: judged step by step over the cards serving each step, against an ideal that keeps it."""

import numpy as np
import pytest

from fleet.presets import load_preset, replay_scenario

KEYS = ("goodput_avg_tps", "goodput_share", "unmet_goodput_share", "slow_hours", "ttft_missed_hours", "ideal_bill_usd")


@pytest.mark.parametrize("fix", [False, True])
def test_steps_that_change_nothing_within_the_hour_judge_the_promise_as_the_hour_does(fix):
    """A demand constant within each hour, no boot, no queue and no loop: ten-minute steps see what the hour saw."""
    p = load_preset("chat-latency")
    hourly = replay_scenario(p.resolve(fix=fix)).figures
    steps = replay_scenario(p.resolve(fix=fix, overrides=["step_minutes=10"])).figures
    for key in KEYS:
        assert steps[key] == pytest.approx(hourly[key], rel=1e-9), key
    assert steps["checks"]["capacity"]["value"] == pytest.approx(hourly["unmet_goodput_share"], rel=1e-9)


def test_the_loops_cards_serve_the_promise_and_the_ideal_keeps_it_at_every_step():
    p = load_preset("chat-latency")
    fine = ["step_minutes=10", "demand.max_wait_s=60"]
    plan = replay_scenario(p.resolve(overrides=fine)).figures
    looped = replay_scenario(p.resolve(overrides=[*fine, "policy.reactive.headroom=1.2"])).figures
    assert looped["traffic"]["reactive_adds"] > 0
    # The loop's cards carry first tokens too: more of the month is within the promise than under the plan alone.
    assert looped["goodput_avg_tps"] > plan["goodput_avg_tps"] * 1.05
    # The ideal keeps the promise at the finer clock as by the hour (a demand constant within the hour).
    hourly = replay_scenario(p.resolve()).figures
    assert looped["ideal_bill_usd"] == pytest.approx(hourly["ideal_bill_usd"], rel=1e-9)
    plain = load_preset("document-batch")  # the same pool and demand, no promise: a fluid ideal, cheaper
    assert replay_scenario(plain.resolve(overrides=fine)).figures["ideal_bill_usd"] < 0.9 * looped["ideal_bill_usd"]
    assert np.isfinite(looped["goodput_share"]) and looped["checks"]["capacity"]["mark"].startswith("tokens not served")


def test_the_loop_sizes_to_the_first_tokens_slots_as_the_plan_does():
    """Under a promise the plan sizes to, the loop's need is the plan's lift of the step's demand × its headroom (the
    slots its first tokens need at the percentile), never the demand alone."""
    from fleet.core.latency import sizing_promise

    p = load_preset("chat-latency")
    s = p.resolve(overrides=["step_minutes=10", "policy.reactive.headroom=1.2", "policy.size_to=\"promise\""])
    result = replay_scenario(s)
    adds = result.traffic.adds
    assert adds, "the loop adds cards on chat-latency at ten-minute steps"
    month = result.month
    view = sizing_promise(s, month.class_names, month.card_class)
    lifted = view.target_tps(np.array([a.observed_tps * a.headroom for a in adds]))
    for a, need in zip(adds, lifted):
        assert a.need_tps == pytest.approx(float(need) + a.backlog_tps, rel=1e-12)
        assert a.need_tps >= a.observed_tps * a.headroom + a.backlog_tps
    assert any(a.need_tps > a.observed_tps * a.headroom + 1 for a in adds), "the slots lift some step's need"
    assert any("first tokens' slots" in a.reason for a in adds)
