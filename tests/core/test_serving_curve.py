"""A class's throughput–latency curve (`fleet.core.serving`): the seed's serving figures, and what a promise leaves."""

import numpy as np
import pytest

from fleet.core.scenario import Serving
from fleet.core.serving import StepCurve, curve_rows, prefill_s, step_curve

H100_70B = {"memory_bandwidth_tb_s": 3.35, "weight_gb": 70}
# The seed's batch of 128 measured at 20 tok/s per user: a 50 ms step, the weights' 20.9 ms plus 0.23 ms a stream.
ALPHA_MS = 70 / 3.35
BATCH_128 = {"alpha_ms": ALPHA_MS, "beta_ms": (50 - ALPHA_MS) / 128, "batch": 128}


def test_the_seed_figures_one_stream_a_batch_of_16_and_a_batch_of_128():
    bytes_curve = step_curve(Serving(**H100_70B))
    assert round(float(bytes_curve.stream_tps(1))) == 48
    assert round(float(bytes_curve.aggregate_tps(16))) == 766
    measured = Serving(**BATCH_128)
    assert measured.curve.beta_s * 1000 == pytest.approx(0.227, abs=0.001)
    assert measured.stream_tps == pytest.approx(20.0)
    assert measured.aggregate_tps == pytest.approx(2560.0)


@pytest.mark.parametrize(("floor_tps", "batch", "share"), [
    (30, 54, 0.636),  # a chat product at 30 tok/s a user: a batch of about 55, 64% of the rated rate
    (25, 84, 0.820),  # at 25 tok/s: 82%
    (20, 128, 1.0),   # the rated batch itself keeps 20 tok/s
])
def test_a_stream_floor_caps_the_batch_and_the_usable_rate(floor_tps, batch, share):
    s = Serving(**BATCH_128)
    assert int(s.curve.batch_at_floor(floor_tps)) == batch
    assert s.curve.share_at_floor(floor_tps, s.batch) == pytest.approx(share, abs=0.001)


def test_a_slow_card_is_slow_at_every_batch_and_keeps_a_smaller_batch():
    curve = Serving(**BATCH_128).curve
    speed = np.array([1.0, 0.8, 0.5])
    np.testing.assert_allclose(curve.stream_tps(32, speed), curve.stream_tps(32) * speed)
    batches = curve.batch_at_floor(30, speed)
    assert batches[0] > batches[1] > batches[2] == 0  # at half speed, one stream (23.9 tok/s) misses a 30 tok/s floor
    assert curve.rate_at_floor_tps(30, speed)[2] == 0


def test_a_card_at_no_speed_has_no_rate_and_no_warning():
    import warnings

    from fleet.core.serving import StepCurve

    curve = Serving(**BATCH_128).curve
    per_card = StepCurve(np.full(3, curve.alpha_s), np.full(3, curve.beta_s), curve.max_batch)
    speed = np.array([0.0, 1.0, np.inf])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one, each = curve.rate_at_floor_tps(30, speed), per_card.rate_at_floor_tps(30, speed)
    assert one[0] == each[0] == 0 and one[1] == each[1] == curve.rate_at_floor_tps(30)
    assert one[2] == each[2] == np.inf  # endless speed: the memory's batch, each step instant


def test_memory_bounds_the_batch():
    s = Serving(**H100_70B, kv_cache_gb_per_stream=0.5, memory_gb=80, batch=16)
    assert s.max_batch == 20
    assert int(s.curve.batch_at_floor(1.0)) == 20  # a floor every batch meets: the memory decides


def test_the_curve_rows_climb_in_aggregate_and_fall_per_user():
    rows = curve_rows(Serving(**BATCH_128).curve)
    agg = [r["aggregate_tps"] for r in rows]
    user = [r["stream_tps"] for r in rows]
    assert agg == sorted(agg) and user == sorted(user, reverse=True)
    assert rows[0]["batch"] == 1 and rows[0]["step_ms"] == pytest.approx(ALPHA_MS + (50 - ALPHA_MS) / 128)


def test_prefill_is_two_flops_a_parameter_a_token():
    # 70B parameters, a 1,000-token prompt, 400 effective TFLOPS: 2 × 70e9 × 1000 / 400e12 = 0.35 s
    assert prefill_s(70, 1000, 400) == pytest.approx(0.35)


@pytest.mark.parametrize("alpha_s, beta_s, max_batch, rated_tps, floor_tps", [
    (0.0209, 0.000227, 1_000_000, 2562.25, 30.0),  # the chat class's curve
    (0.012, 0.0004, 1_000_000, 900.0, 12.5),
    (0.0209, 0.000227, 40, 2562.25, 30.0),  # the memory caps the batch: read the one way
])
def test_float32_rates_at_the_floor_are_the_float64_ones_to_the_bit(monkeypatch, alpha_s, beta_s, max_batch, rated_tps,
                                                                   floor_tps):
    """A month's float32 scores read at the promise without the float64 divisions: the very numbers, at every batch's
    edge too (where the float32 reading is not sure and the card-hour is worked out the long way)."""
    from fleet.core import serving

    curve = StepCurve(alpha_s, beta_s, max_batch)
    rng = np.random.default_rng(7)
    edges = (np.arange(0, 300) * beta_s + alpha_s) * floor_tps * rated_tps  # the rates where a batch begins
    near = np.concatenate([edges, np.nextafter(edges.astype(np.float32), np.float32(0)),
                           np.nextafter(edges.astype(np.float32), np.float32(np.inf))])
    rates = np.concatenate([rng.uniform(0, 3, 200_000) * rated_tps, near, [0.0]]).astype(np.float32)
    scores = np.asfortranarray(rates[: rates.size // 50 * 50].reshape(50, -1).T)  # hours-major, as a month's scores
    fast = serving.rates_at_floor_tps(curve, floor_tps, rated_tps, scores, np.float32)
    monkeypatch.setattr(serving, "_float32_rates_at_floor", lambda *a: False)
    slow = serving.rates_at_floor_tps(curve, floor_tps, rated_tps, scores, np.float32)
    assert fast.dtype == np.float32 and fast.flags.f_contiguous
    assert np.array_equal(fast, slow)
    assert (fast > 0).any() and (fast == 0).any()
