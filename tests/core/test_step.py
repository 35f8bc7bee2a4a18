"""One core, two clocks: `fleet.core.step.step` taken hour by hour over a preset's month, as the service takes it,
gives `fleet replay`'s month, which takes it a stretch at a time."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.scenario import budget_cards
from fleet.presets import load_preset
from fleet.core.scores import window_scores
from fleet.presets import replay_scenario
from fleet.core.carry import Carry
from fleet.core.replay import month_class_mask, score_month
from fleet.core.step import CardAction, StepInput, is_decision_hour, step
from fleet.core.billing import bill_hours
from policies import resolve
from tests.conftest import make_scenario


def step_month(scenario, month, bill=True):
    """Step through every hour of `month` one at a time, as the service does, and bill each hour."""
    policy = scenario.policy
    parts = resolve(policy)
    W, H = month.warmup_hours, month.hours
    in_class = month_class_mask(month, policy)
    idx = np.flatnonzero(in_class)
    n = month.n_cards
    scored = score_month(month, parts)  # the estimator's scores, as the service's score job writes them
    score, evict_score = scored.score_tps, scored.evict_score_tps
    if parts.score.is_window_mean:  # a plain window mean is the same number scored the old way, card by card
        np.testing.assert_array_equal(score[idx], window_scores(month.measured_tps[idx], W, H, parts.size_window_hours))
    rent_h = month.rent_usd_per_hour
    carry = Carry.month_start(in_class, budget_cards(policy.eviction.share, int(idx.size)))
    warm = np.zeros((n, H), dtype=bool)
    evictions, passes, bills, evicted_at = [], [], [], []
    peak = float(month.demand_tps.max())
    for h in range(H):
        allowance = 0.0 if scored.allowance is None else float(scored.allowance[h])
        d = step(
            carry,
            StepInput(
                hours=np.array([h]), score_tps=score[:, h:h + 1], evict_score_tps=evict_score[:, h], rent_usd_per_hour=rent_h,
                demand_tps=month.demand_tps[h:h + 1], peak_demand_tps=np.array([peak]), pool_cards=int(idx.size),
                groups=month.card_class, in_dip=None if scored.in_dip is None else scored.in_dip[:, h:h + 1],
                allowance=np.array([allowance]) if allowance else None,
            ),
            parts,
        )
        if d.eviction is not None:
            passes.append(d.eviction)
        evictions += [(h, e.card) for e in d.evictions]
        carry = d.next
        warm[:, h] = d.run_set
        evicted_at.append(np.array([e.card for e in d.evictions], dtype=np.int64))
    if bill:
        # Billed in stretches of a day, as the service's billing job does after a pause.
        for a in range(0, H, 24):
            b = min(H, a + 24)
            bills.append(bill_hours(warm[:, a:b], rent_h, month.rent_usd_per_month, month.true_rate_tps[:, W + a:W + b],
                                    month.demand_tps[a:b], evicted_at[a:b]))
    return warm, evictions, passes, bills


def check_same_month(scenario, bill=True):
    """Same run sets, evictions and passes; with `bill`, the same bill, idle cost, convergence and unmet demand."""
    r = replay_scenario(scenario)
    warm, evictions, passes, bills = step_month(scenario, r.month, bill)
    assert np.array_equal(warm, r.warm)
    assert evictions == [(e.hour, e.card) for e in r.evictions]
    assert passes == r.passes  # the same eviction pass, decision for decision, reasons included
    if not bill:
        return r, passes
    f = r.figures
    total = {k: sum(float(getattr(b, k).sum()) for b in bills) for k in ("warm_usd", "churn_usd", "idle_usd", "ideal_usd",
                                                                           "demand_tps", "delivered_tps")}
    bill = total["warm_usd"] + total["churn_usd"]
    assert bill == pytest.approx(f["bill_usd"], rel=1e-9)
    assert total["churn_usd"] == pytest.approx(f["bill_churn_usd"], rel=1e-9, abs=1e-9)
    assert total["idle_usd"] == pytest.approx(f["idle_usd"], rel=1e-9)
    assert total["ideal_usd"] / bill == pytest.approx(f["convergence"], rel=1e-9)
    demand = total["demand_tps"]
    unmet = demand - total["delivered_tps"]
    assert unmet / demand == pytest.approx(f["unmet_share"], rel=1e-6, abs=1e-12)
    return r, passes


def test_noise_evictor_month_is_replays_month():
    r, passes = check_same_month(load_preset("noise-evictor").resolve())
    assert len(r.evictions) == 12 and len(passes) == len(r.passes) > 0


def test_noise_evictor_fix_month_is_replays_month():
    r, _ = check_same_month(load_preset("noise-evictor").resolve(fix=True))
    assert 0 < len(r.evictions) <= 3


@pytest.mark.parametrize("fix", [False, True])
def test_golden_idler_month_is_replays_month(fix):
    r, passes = check_same_month(load_preset("golden-idler").resolve(fix=fix))
    assert passes == []
    assert r.figures["bill_usd"] > 0


@pytest.mark.parametrize("fix", [False, True])
def test_bargain_month_is_replays_month(fix):
    """Two classes on the market: only the policy's class is eligible; the ideal sees both."""
    check_same_month(load_preset("bargain-shortfall").resolve(fix=fix))


def test_a_dip_aware_month_across_classes_is_replays_month():
    """The dip-aware score and a run set over every class, stepped an hour at a time, give replay's month."""
    check_same_month(load_preset("bargain-shortfall").resolve(overrides=["policy.score=\"dip-aware\"", "policy.card_class=\"any\"",
                                                                          "policy.mode=\"steady\""]))


def test_small_held_month_with_evictions_replaces_evicted_cards():
    """Held mode tops the run set up after an eviction, on the hour's scores, as replay does."""
    s = make_scenario(policy={"card_class": "flagship", "window": "day", "mode": "held", "headroom": 1.1,
                              "eviction": {"rule": "below-median", "window": "hour", "cadence_hours": 12, "share": 0.3, "rules": {"below-median": {"fraction": 0.9}}}})
    r, passes = check_same_month(s)
    assert len(r.evictions) > 0 and len(passes) > 0


def _state(**over):
    """(carry, input) of one hour at a decision hour of a six-card pool, with `over` in place of either's fields."""
    n = 6
    carry = dict(eligible=np.ones(n, dtype=bool), run_set=np.ones(n, dtype=bool), budget_left=2)
    hour = dict(hour=24, score_tps=np.array([6000, 5900, 3000, 6100, 2500, 6050], dtype=np.float32),
                evict_score_tps=np.array([6000, 5900, 3000, 6100, 2500, 6050], dtype=np.float32),
                rent_usd_per_hour=np.full(n, 2690 / 720), demand_tps=20_000.0, peak_demand_tps=20_000.0, pool_cards=n)
    for k, v in over.items():
        (carry if k in ("eligible", "run_set", "budget_left", "eviction_hours") else hour)[k] = v
    h = hour.pop("hour")
    inp = StepInput(hours=np.array([h]), score_tps=hour.pop("score_tps")[:, None], demand_tps=np.array([hour.pop("demand_tps")]),
                    peak_demand_tps=np.array([hour.pop("peak_demand_tps")]), **hour)
    return Carry(**carry), inp


def _tick(state, parts):
    return step(*state, parts)


def _policy(**limits):
    ev = {"rule": "below-median", "window": "hour", "cadence_hours": 24, "share": 0.5, "rules": {"below-median": {"fraction": 0.8}},
          "admissions": {"limits": limits}}
    return resolve(make_scenario(policy={"card_class": "flagship", "window": "day", "mode": "steady", "headroom": 1.0, "eviction": ev}).policy)


@pytest.mark.parametrize(
    "desc, state, eviction, evicted, reason_part",
    [
        ("two below 80% of the median, worst first", {}, {}, (4, 2), "below 80%"),
        ("budget of one takes the worst", {"budget_left": 1}, {}, (4,), "below 80%"),
        ("no budget, no pass", {"budget_left": 0}, {}, None, None),
        ("not a decision hour", {"hour": 25}, {}, None, None),
        ("no pass at month start", {"hour": 0, "run_set": None}, {}, None, None),
        ("breaker: 2 of 6 bad is above a quarter", {}, {"breaker_share": 0.25}, (), "circuit breaker open"),
        ("breaker at half lets them go", {}, {"breaker_share": 0.5}, (4, 2), "below 80%"),
        ("disruption: one of six may drain, one already is", {"eviction_hours": (23,)},
         {"disruption_share": 0.2, "drain_hours": 48}, (4,), "below 80%"),
        ("disruption: drained long ago", {"eviction_hours": (0,)}, {"disruption_share": 0.2, "drain_hours": 12}, (4, 2), "below 80%"),
    ],
)
def test_eviction_pass_table(desc, state, eviction, evicted, reason_part):
    d = _tick(_state(**state), _policy(**eviction))
    if evicted is None:
        assert d.eviction is None and d.evictions == (), desc
        return
    assert d.eviction.evicted == evicted, desc
    assert tuple(e.card for e in d.evictions) == evicted
    assert reason_part in d.eviction.reason
    assert not d.run_set[list(evicted)].any() and not d.eligible[list(evicted)].any()
    assert d.budget_left == _state(**state)[0].budget_left - len(evicted)


def test_breaker_says_so_and_keeps_the_budget():
    d = _tick(_state(), _policy(breaker_share=0.25))
    assert d.eviction.breaker_open and d.budget_left == 2
    assert d.eviction.candidates == (4, 2)


def test_decisions_are_frozen_and_name_their_inputs():
    d = _tick(_state(run_set=np.array([1, 1, 0, 0, 0, 0], dtype=bool), hour=5), _policy())
    with pytest.raises(ValueError):
        d.run_set[0] = False
    assert d.target_tps == 20_000.0
    assert {c.card for c in d.adds} == set(np.flatnonzero(d.run_set & ~np.array([1, 1, 0, 0, 0, 0], dtype=bool)))
    assert all("target 20000 tok/s" in c.reason for c in d.adds + d.releases)
    assert {c.kind for c in d.adds} == {CardAction.ADD} and {c.kind for c in d.releases} <= {CardAction.RELEASE}
    assert is_decision_hour(48, _policy(), 1) and not is_decision_hour(48, _policy(), 0)


def test_hysteresis_month_is_replays_month():
    """Removal slower than addition (release after 4 hours left out): the same in replay and in the tick."""
    base = load_preset("noise-evictor")
    r0, _ = check_same_month(base.resolve(), bill=False)
    r, _ = check_same_month(base.resolve(overrides=["policy.hystereses.release-after.release_after_hours=4"]), bill=False)
    flips = lambda w: int((w[:, 1:] != w[:, :-1]).sum())
    assert flips(r.warm) < flips(r0.warm)  # the run set flaps less
    assert r.figures["cards_warm_avg"] >= r0.figures["cards_warm_avg"]  # and holds spare capacity for it


def test_hold_table():
    from policies.hysteresis import hold

    chosen = np.array([[1, 0, 0, 0, 1, 0], [0, 1, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]], dtype=bool)
    warm, out = hold(chosen, np.ones(3, dtype=bool), None, 3)
    assert warm.astype(int).tolist() == [[1, 1, 1, 0, 1, 1], [0, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0]]
    assert out.tolist() == [1, 3, 3]
    # Split in two stretches, the carried hours give the same hours.
    w1, o1 = hold(chosen[:, :2], np.ones(3, dtype=bool), None, 3)
    w2, _ = hold(chosen[:, 2:], np.ones(3, dtype=bool), o1, 3)
    assert np.array_equal(np.hstack([w1, w2]), warm)
    # Release after 1 hour is no hysteresis; an ineligible card leaves at once.
    assert np.array_equal(hold(chosen, np.ones(3, dtype=bool), None, 1)[0], chosen)
    assert not hold(chosen, np.array([False, True, True]), None, 3)[0][0].any()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_other_seeds_same_month(seed):
    """Not a property of one draw: other seeds of the noise evictor (with its limits switched on) step to replay's month."""
    s = load_preset("noise-evictor").resolve(
        seed=seed, overrides=["policy.eviction.admissions.limits.disruption_share=0.1", "policy.eviction.admissions.limits.drain_hours=48",
                                "policy.hystereses.release-after.release_after_hours=2"]
    )
    r, passes = check_same_month(s, bill=False)
    assert len(r.evictions) > 0


def test_card_lines_read_as_the_dict_of_judged_cards():
    from fleet.core.step import CardLines

    lines = CardLines(np.array([2, 5, 9]), np.array([10.0, 20.5, 30.0]))
    as_dict = {2: 10.0, 5: 20.5, 9: 30.0}
    assert lines == as_dict and dict(lines) == as_dict and len(lines) == 3 and list(lines) == [2, 5, 9]
    assert lines[np.int64(5)] == 20.5 and 9 in lines and 3 not in lines and 10 not in lines and "5" not in lines
    assert repr(lines) == repr(as_dict)


@pytest.mark.parametrize("judged", [[2, 5, 9], [], [0], [7, 8]])
def test_many_thresholds_at_once_are_each_cards_own(judged):
    """`thresholds_of` (what the journal's pass record lists) is `threshold_of` card by card, judged or not."""
    from fleet.core.step import CardLines, EvictionPass

    judged = np.array(judged, dtype=np.int64)
    lines = CardLines(judged, np.arange(judged.size, dtype=np.float64) * 3.5 + 1.25)
    asked = np.arange(12)
    for by_card in (lines, None):
        p = EvictionPass(hour=24, rule="r", window="hour", judged=int(judged.size), candidates=(), candidate_median_tps=(),
                         evicted=(), evictions=(), median_score_tps=2.0, threshold_tps=1.6, blocked_by_budget=0,
                         blocked_by_disruption=0, breaker_open=False, draining=0, allowed_now=0, budget_left_before=1,
                         budget_left_after=1, reason="", threshold_by_card_tps=by_card)
        assert p.thresholds_of(asked).tolist() == [p.threshold_of(int(c)) for c in asked]


def _month_inputs(scenario):
    from fleet.core.month import draw_month

    month = draw_month(scenario)
    parts = resolve(scenario.policy)
    in_class = month_class_mask(month, scenario.policy)
    scored = score_month(month, parts)
    peak = float(month.demand_tps.max())

    def inputs(a: int, b: int) -> StepInput:
        return StepInput(hours=np.arange(a, b), score_tps=scored.score_tps[:, a:b], evict_score_tps=scored.evict_score_tps[:, a],
                         rent_usd_per_hour=month.rent_usd_per_hour, demand_tps=month.demand_tps[a:b],
                         peak_demand_tps=np.full(b - a, peak), pool_cards=int(in_class.sum()), groups=month.card_class)

    return parts, Carry.month_start(in_class, budget_cards(scenario.policy.eviction.share, int(in_class.sum()))), inputs


@pytest.mark.parametrize("release_after_hours", [1, 3])
def test_a_stretch_decides_what_its_hours_decide_one_at_a_time(release_after_hours):
    """A stretch stepped at once (replay's way) and its hours stepped one at a time (the service's) give the same run
    sets, the same carry, and the same cards added and released with the same reasons: the stretch's, worked out
    only when read, hour by hour."""
    scenario = load_preset("noise-evictor").resolve(overrides=[f"policy.hystereses.release-after.release_after_hours={release_after_hours}"])
    parts, carry, inputs = _month_inputs(scenario)
    first = step(carry, inputs(0, 24), parts)
    stretch = step(first.next, inputs(24, 48), parts)
    assert stretch.eviction is not None and stretch.eviction.evicted  # hour 24 is a decision hour of the preset
    one, hours = first.next, []
    for h in range(24, 48):
        hours.append(step(one, inputs(h, h + 1), parts))
        one = hours[-1].next
    assert hours[0].eviction == stretch.eviction and all(d.eviction is None for d in hours[1:])
    assert np.array_equal(stretch.warm, np.column_stack([d.run_set for d in hours]))
    assert np.array_equal(stretch.next.run_set, one.run_set) and np.array_equal(stretch.next.eligible, one.eligible)
    assert np.array_equal(stretch.next.out_hours, one.out_hours) and stretch.next.budget_left == one.budget_left
    assert stretch.adds == tuple(c for d in hours for c in d.adds) and stretch.adds
    assert stretch.releases == tuple(c for d in hours for c in d.releases) and stretch.releases
    assert (stretch.hour, stretch.target_tps, stretch.reason) == (hours[-1].hour, hours[-1].target_tps, hours[-1].reason)


def test_the_changes_of_a_stretch_are_worked_out_only_when_read():
    scenario = load_preset("noise-evictor").resolve()
    parts, carry, inputs = _month_inputs(scenario)
    d = step(carry, inputs(0, 24), parts)
    assert "_both" not in vars(d.changes)
    assert d.adds and "_both" in vars(d.changes)


def test_a_decision_hour_without_the_eviction_windows_scores_is_refused():
    carry, inp = _state()
    from dataclasses import replace

    with pytest.raises(ValueError, match="decision hour"):
        step(carry, replace(inp, evict_score_tps=None), _policy())


def test_an_unavailable_card_is_not_chosen_and_stays_eligible():
    """A card the pool cannot run this hour (silent, retired by hand) is left out of the hour's run set, and the carry
    keeps it eligible: the next hour may choose it again."""
    carry, inp = _state(hour=5, demand_tps=30_000.0, peak_demand_tps=30_000.0)
    from dataclasses import replace

    everyone = step(carry, inp, _policy())
    assert everyone.run_set[3]
    without = step(carry, replace(inp, unavailable=np.eye(6, dtype=bool)[3]), _policy())
    assert not without.run_set[3] and without.eligible[3]
    assert without.run_set.sum() >= everyone.run_set.sum() - 1
