"""A card's own rate at the promise (its fitted curve's) in the step, and a run set's expected stream speed and
first-token wait at an hour's demand."""

import numpy as np
import pytest

from fleet.core.carry import Carry
from fleet.core.latency import card_steps, pool_at_promise, promise_figures, promise_view
from fleet.core.serving import StepCurve
from fleet.core.step import StepInput, step
from fleet.presets import resolve_policy
from tests.core.test_latency import scenario

N = 4
RATED_TPS = 2560.0


def view_of(**slo):
    s = scenario(slo=slo, demand={"prompt_tokens_per_request": 0},
                 policy={"card_class": "h100-70b", "mode": "steady", "headroom": 1.0})
    return s, promise_view(s, ("h100-70b",), np.zeros(N, dtype=np.int64))


def hour(s, view, demand_tps, own=None):
    parts = resolve_policy(s)
    carry = Carry.month_start(np.ones(N, dtype=bool), 0)
    return step(carry, StepInput(hours=np.array([0]), score_tps=np.full((N, 1), RATED_TPS),
                                 rent_usd_per_hour=np.full(N, 2690 / 720), demand_tps=np.array([demand_tps]),
                                 peak_demand_tps=np.array([demand_tps]), pool_cards=N,
                                 groups=np.zeros(N, dtype=np.int64), promise=view, promise_rate_tps=own), parts)


def test_a_cards_own_rate_at_the_promise_stands_for_its_score_on_the_class_curve():
    s, view = view_of(stream_tps=30)
    class_rate = float(view.rates_tps(np.full((1, 1), RATED_TPS))[0, 0])
    own = np.array([np.nan, 0.5 * class_rate, np.nan, 2.0 * class_rate])
    inp = StepInput(hours=np.array([0]), score_tps=np.full((N, 1), RATED_TPS), rent_usd_per_hour=np.ones(N),
                    demand_tps=np.array([1.0]), peak_demand_tps=np.array([1.0]), pool_cards=N, promise=view,
                    promise_rate_tps=own)
    read = inp.at_promise().score_tps[:, 0]
    np.testing.assert_allclose(read, [class_rate, 0.5 * class_rate, class_rate, 2.0 * class_rate])
    # Sizing reads the card's own: the fast card alone carries what two of the class's would.
    d = hour(s, view, 1.5 * class_rate, own)
    assert np.flatnonzero(d.warm[:, 0]).tolist() == [3]
    assert d.adds[0].score_tps == pytest.approx(2.0 * class_rate)
    without = hour(s, view, 1.5 * class_rate)
    assert without.warm[:, 0].sum() == 2


def test_no_own_rates_read_as_before():
    s, view = view_of(stream_tps=30)
    a, b = hour(s, view, 3000.0), hour(s, view, 3000.0, np.full(N, np.nan))
    np.testing.assert_array_equal(a.warm, b.warm)
    assert a.scored_capacity_tps == b.scored_capacity_tps


def test_within_its_rate_at_the_promise_every_stream_keeps_the_floor_and_beyond_it_not():
    _, view = view_of(stream_tps=30, ttft_ms=2000)
    rate = np.array([RATED_TPS, RATED_TPS, 0.8 * RATED_TPS, RATED_TPS])
    own_alpha = np.array([np.nan, 0.030, np.nan, np.nan])  # card 1 slower than its class by its own curve
    own_beta = np.array([np.nan, 0.0003, np.nan, np.nan])
    steps = card_steps(view, rate, own_alpha, own_beta)
    at = steps.batch / (steps.curve.alpha_s + steps.curve.beta_s * steps.batch)
    assert steps.batch[1] == int(StepCurve(0.030, 0.0003, 10**6).batch_at_floor(30.0))
    assert steps.batch[2] < steps.batch[0]  # a card at 0.8 of its class keeps the floor at a smaller batch
    warm = np.array([True, True, True, False])
    total = float(at[warm].sum())
    within = pool_at_promise(view, steps, at, warm, 0.95 * total)
    beyond = pool_at_promise(view, steps, at, warm, 1.2 * total)
    assert within.rate_at_promise_tps == pytest.approx(total)
    assert within.stream_tps >= 30.0 > beyond.stream_tps
    # The first token's wait is the promise's queue over the run set's slots.
    want = promise_figures(warm[:, None], at[:, None], np.where(warm, steps.batch, 0)[:, None].astype(float),
                           np.array([0.95 * total]), np.array([0.95 * total]), view.slo, view.shape, view.prefill_s)
    assert within.ttft_s == pytest.approx(float(want.ttft_s[0]))
    assert beyond.ttft_s == np.inf  # the slots cannot carry the requests


def test_at_the_promise_exactly_the_slowest_stream_is_the_floor():
    _, view = view_of(stream_tps=30)
    steps = card_steps(view, np.full(N, RATED_TPS))
    at = steps.batch / (steps.curve.alpha_s + steps.curve.beta_s * steps.batch)
    got = pool_at_promise(view, steps, at, np.ones(N, dtype=bool), float(at.sum()))
    stream_at_batch = 1.0 / (steps.curve.alpha_s[0] + steps.curve.beta_s[0] * steps.batch[0])
    assert got.stream_tps == pytest.approx(stream_at_batch) and got.stream_tps >= 30.0
    assert got.ttft_s is None  # no first-token promise
    empty = pool_at_promise(view, steps, at, np.zeros(N, dtype=bool), 100.0)
    assert empty.stream_tps == 0.0 and empty.rate_at_promise_tps == 0.0


def test_a_cold_start_with_no_demand_to_read_at_reads_no_stream_and_no_first_token():
    """A cold start sizes to every card (an infinite target): the run set's rate stands, its users' figures are not
    read at a demand nobody has seen."""
    _, view = view_of(stream_tps=30, ttft_ms=2000)
    steps = card_steps(view, np.full(N, RATED_TPS))
    at = steps.batch / (steps.curve.alpha_s + steps.curve.beta_s * steps.batch)
    with np.errstate(all="raise"):
        got = pool_at_promise(view, steps, at, np.ones(N, dtype=bool), float("inf"))
    assert got.rate_at_promise_tps == pytest.approx(float(at.sum()))
    assert np.isnan(got.stream_tps) and got.ttft_s is None
