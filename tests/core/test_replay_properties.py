"""Invariants of the month model over random pools and policies."""

import json
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.core.scenario import budget_cards
from fleet.report.export import run_set_intervals
from fleet.presets import replay_scenario
from tests.conftest import make_scenario


@st.composite
def scenarios(draw):
    n_flag = draw(st.integers(1, 25))
    n_barg = draw(st.integers(0, 8))
    classes = [{"name": "flagship", "rated_tps": 6000, "rent_usd_per_month": 2690, "pool_cards": n_flag}]
    if n_barg:
        classes.append({"name": "bargain", "rated_tps": 3000, "rent_usd_per_month": 1442, "pool_cards": n_barg})
    run_class = draw(st.sampled_from([c["name"] for c in classes]))
    return make_scenario(
        seed=draw(st.integers(0, 10_000)),
        hours=draw(st.integers(24, 120)),
        warmup_hours=48,
        classes=classes,
        lottery={"sigma": draw(st.floats(0, 0.5))},
        dips={"start_prob_per_hour": draw(st.floats(0, 0.05)), "hours": draw(st.integers(1, 12)), "depth": draw(st.floats(0, 0.9))},
        telemetry={"hour_noise": draw(st.floats(0, 0.4))},
        demand={
            "shape": draw(st.sampled_from(["flat", "diurnal"])),
            "avg_tps": draw(st.floats(1000, 150_000)),
            "peak_to_avg": draw(st.floats(1, 3)),
            "jitter": draw(st.floats(0, 0.3)),
        },
        policy={
            "card_class": run_class,
            "window": draw(st.sampled_from(["hour", "day", "6h", "48"])),
            "mode": draw(st.sampled_from(["held", "steady"])),
            "headroom": draw(st.floats(0.8, 1.5)),
            "eviction": {
                "rule": draw(st.sampled_from(["none", "below-median"])),
                "window": draw(st.sampled_from([None, "hour", "day"])),
                "cadence_hours": draw(st.integers(1, 48)),
                "share": draw(st.floats(0, 1)),
                "rules": {"below-median": {"fraction": draw(st.floats(0.3, 1.0))}},
            },
        },
    )


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_month_invariants(sc):
    r = replay_scenario(sc)
    f = r.figures
    m = r.month
    rent_h = m.rent_usd_per_hour

    # The bill is warm rent plus churn fees, and nothing else.
    assert np.isclose(f["bill_usd"], f["bill_warm_usd"] + f["bill_churn_usd"])
    assert np.isclose(f["bill_churn_usd"], sum(0.15 * m.rent_usd_per_month[e.card] for e in r.evictions))

    # Warm rent is exactly the run-set intervals' hours at each card's hourly rent.
    iv = run_set_intervals(r.warm, {e.card: e.hour for e in r.evictions})
    by_interval = float(((iv.end_hour - iv.start_hour) * rent_h[iv.card_id.to_numpy()]).sum()) if len(iv) else 0.0
    assert np.isclose(by_interval, f["bill_warm_usd"])

    # A card outside the run set never bills: cards never warm and never evicted cost nothing,
    # and no card of another class is ever warm.
    per_card = r.warm.sum(axis=1) * rent_h
    for e in r.evictions:
        per_card[e.card] += 0.15 * m.rent_usd_per_month[e.card]
    never = ~r.warm.any(axis=1) & ~np.isin(np.arange(m.n_cards), [e.card for e in r.evictions])
    assert (per_card[never] == 0).all()
    assert np.isclose(per_card.sum(), f["bill_usd"])
    run_class = m.class_names.index(sc.policy.card_class)
    assert not r.warm[m.card_class != run_class].any()

    # An evicted card is never warm again.
    for e in r.evictions:
        assert not r.warm[e.card, e.hour:].any()

    # Delivered never exceeds demand or capacity.
    assert (r.bill.delivered_tps <= r.bill.demand_tps + 1e-6).all()
    assert (r.bill.delivered_tps <= r.bill.capacity_tps + 1e-6).all()

    # The eviction share is never exceeded.
    pool = int((m.card_class == run_class).sum())
    assert f["evictions"] <= budget_cards(sc.policy.eviction.share, pool)
    assert f["wrong_evictions"] <= f["evictions"]

    # The ideal bill never exceeds the real bill when the real month has no shortage:
    # hour by hour, the real run set is one of the sets the ideal operator could have picked.
    covered = r.bill.capacity_tps >= r.bill.demand_tps
    assert (r.bill.ideal_usd[covered] <= r.bill.warm_usd[covered] + 1e-9).all()
    if f["unmet_avg_tps"] == 0:
        assert f["ideal_bill_usd"] <= f["bill_usd"] + 1e-9

    # Idle cost is part of the warm rent.
    assert -1e-9 <= f["idle_usd"] <= f["bill_warm_usd"] + 1e-9


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_same_seed_same_month_and_policy_does_not_change_the_draws(seed):
    a = replay_scenario(make_scenario(seed=seed))
    b = replay_scenario(make_scenario(seed=seed, policy={"card_class": "flagship", "window": "hour", "mode": "held"}))
    assert np.array_equal(a.month.measured_tps, b.month.measured_tps)
    assert np.isclose(a.figures["ideal_bill_usd"], b.figures["ideal_bill_usd"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.integers(1, 5), st.integers(1, 40))
def test_a_stretch_sized_in_pieces_is_the_stretch_sized_whole(sc, release_after_hours, piece_hours):
    import fleet.core.replay as replay_module

    held = {"release-after": {"release_after_hours": release_after_hours}}
    sc = sc.model_copy(update={"policy": sc.policy.model_copy(update={"hystereses": held})})
    whole = replay_scenario(sc)
    cells = replay_module._PIECE_CELLS
    replay_module._PIECE_CELLS = piece_hours * whole.month.n_cards
    try:
        pieced = replay_scenario(sc)
    finally:
        replay_module._PIECE_CELLS = cells
    assert np.array_equal(pieced.warm, whole.warm)
    assert json.dumps(pieced.figures, sort_keys=True, default=str) == json.dumps(whole.figures, sort_keys=True, default=str)
