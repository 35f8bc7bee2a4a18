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
