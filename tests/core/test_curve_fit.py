"""Each card's curve fitted from its samples (`fleet.core.curve_fit`): the lines recovered, a slow card told from a
busy one, the class's beta kept where a card's batch did not move, and the rate a promise leaves of each."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fleet.core.curve_fit import MIN_BATCH_SPREAD_SHARE, fit_step_curves
from fleet.core.serving import StepCurve

ALPHA_S, BETA_S = 0.0209, 0.000227  # a 70B model on an H100: 20.9 ms a step and 0.227 ms a stream


def _samples(alphas, betas, batches_per_card, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    card, batch, step = [], [], []
    for i, (a, b, xs) in enumerate(zip(alphas, betas, batches_per_card)):
        xs = np.asarray(xs, dtype=float)
        card.append(np.full(xs.size, i))
        batch.append(xs)
        step.append((a + b * xs) * (1 + noise * rng.standard_normal(xs.size)))
    return np.concatenate(card), np.concatenate(batch), np.concatenate(step)


@given(alpha_ms=st.floats(1, 100), beta_ms=st.floats(0.01, 5), lo=st.integers(1, 50), width=st.integers(8, 200))
@settings(max_examples=60, deadline=None)
@example(alpha_ms=1.0, beta_ms=1.0, lo=47, width=8)  # too narrow a spread: not fitted
@example(alpha_ms=1.0, beta_ms=1.0, lo=1, width=8)
def test_a_noiseless_line_is_recovered(alpha_ms, beta_ms, lo, width):
    """Recovered wherever the batch moved enough to separate alpha from beta; where it did not (a spread under 5%
    of the mean batch: 47..55, say), not fitted at all rather than fitted wrong."""
    xs = np.linspace(lo, lo + width, 12)
    card, batch, step = _samples([alpha_ms / 1e3], [beta_ms / 1e3], [xs])
    got = fit_step_curves(card, batch, step, 1)
    if xs.std() < MIN_BATCH_SPREAD_SHARE * xs.mean():
        assert not got.own_beta[0] and np.isnan(got.alpha_s[0])  # no class beta to fall back on
        return
    assert got.own_beta[0]
    assert got.alpha_s[0] == pytest.approx(alpha_ms / 1e3, rel=1e-6)
    assert got.beta_s[0] == pytest.approx(beta_ms / 1e3, rel=1e-6)


def test_a_slow_card_and_a_busy_card_come_out_different():
    """Both serve streams slower than the class's at its rated batch; one because its step is longer at every batch
    (0.8 of the class's speed), the other because it runs twice the batch on the class's own curve."""
    rng = np.random.default_rng(1)
    batches = [rng.uniform(40, 80, 60), rng.uniform(40, 80, 60), rng.uniform(100, 160, 60)]
    alphas = [ALPHA_S, ALPHA_S / 0.8, ALPHA_S]
    betas = [BETA_S, BETA_S / 0.8, BETA_S]
    card, batch, step = _samples(alphas, betas, batches, noise=0.01, seed=2)
    got = fit_step_curves(card, batch, step, 3)
    assert got.own_beta.all()
    np.testing.assert_allclose(got.alpha_s, alphas, rtol=0.1)
    np.testing.assert_allclose(got.beta_s, betas, rtol=0.15)
    rate = got.rate_at_floor_tps(30)
    assert rate[2] == pytest.approx(rate[0], rel=0.05)  # busy: the class's curve, the same rate at the promise
    assert rate[1] < 0.8 * rate[0]  # slow: a smaller batch keeps the floor, each stream slower


def test_a_card_whose_batch_did_not_move_keeps_its_class_beta():
    # Card 0 ran at a batch of 64 all window on the class's curve; card 1 at 64 too, 0.8 of the speed; card 2 at 96
    # on the class's curve (busy, not slow).
    card, batch, step = _samples([ALPHA_S, ALPHA_S / 0.8, ALPHA_S], [BETA_S, BETA_S / 0.8, BETA_S], [[64] * 20, [64] * 20, [96] * 20])
    got = fit_step_curves(card, batch, step, 3, class_beta_s=np.full(3, BETA_S))
    assert not got.own_beta.any()
    np.testing.assert_allclose(got.beta_s, BETA_S)
    assert got.alpha_s[0] == pytest.approx(ALPHA_S)
    assert got.alpha_s[2] == pytest.approx(ALPHA_S)  # busy: the class's alpha once the batch is read along the line
    assert got.alpha_s[1] > 1.2 * ALPHA_S  # slow: the longer step is the card's, at the batch it ran
    rate = got.rate_at_floor_tps(30)
    assert rate[2] == pytest.approx(rate[0]) and rate[1] < rate[0]


def test_no_class_curve_and_no_spread_is_no_curve_and_no_samples_is_none():
    card, batch, step = _samples([ALPHA_S], [BETA_S], [[64] * 10])
    got = fit_step_curves(card, batch, step, 2)
    assert not got.known.any()
    assert np.isnan(got.rate_at_floor_tps(30)).all()
    assert got.samples.tolist() == [10, 0]


def test_the_fitted_rate_at_the_promise_is_the_class_curves_on_its_line():
    """Fitted from the class's own line, a card's rate at the promise is the class's `rate_at_floor_tps`."""
    card, batch, step = _samples([ALPHA_S], [BETA_S], [np.arange(1, 129)])
    got = fit_step_curves(card, batch, step, 1)
    for floor in (20, 25, 30, 45):
        assert got.rate_at_floor_tps(floor)[0] == pytest.approx(float(StepCurve(ALPHA_S, BETA_S, 10**6).rate_at_floor_tps(floor)),
                                                               rel=1e-9)
