"""A card class's rated rate from decode arithmetic (`[classes.serving]`): the seed's worked example comes out."""

import pytest

from fleet.core.errors import ConfigError
from fleet.core.scenario import CardClass, MarketClass, Pool, Serving, build_scenario

H100_70B = {"memory_bandwidth_tb_s": 3.35, "weight_gb": 70}


def test_one_user_gets_bandwidth_over_weight_bytes():
    s = Serving(**H100_70B)
    assert s.stream_tps == pytest.approx(3350 / 70)  # 47.86
    assert round(s.stream_tps) == 48 and s.aggregate_tps == s.stream_tps


def test_a_batch_of_16_reads_the_weights_once_a_step():
    s = Serving(**H100_70B, batch=16)
    assert round(s.aggregate_tps) == 766
    assert round(s.stream_tps) == 48  # per-user speed stays near 48 while only the weights are read


def test_the_cache_crowds_the_step_as_the_batch_grows():
    small = Serving(**H100_70B, batch=16, kv_cache_gb_per_stream=0.5)
    big = Serving(**H100_70B, batch=128, kv_cache_gb_per_stream=0.5)
    assert big.aggregate_tps > small.aggregate_tps  # aggregate climbs further...
    assert big.stream_tps < small.stream_tps < 3350 / 70  # ...and each user's stream slows
    assert big.step_s == pytest.approx((70 + 128 * 0.5) / 3350)


def test_a_class_takes_its_rated_rate_from_serving():
    c = CardClass.model_validate({"name": "h100", "rent_usd_per_month": 2690, "serving": {**H100_70B, "batch": 16}})
    assert c.rated_tps == pytest.approx(16 * 3350 / 70)
    pool = Pool.model_validate({"classes": [{"name": "h100", "rent_usd_per_month": 2690, "serving": H100_70B}]})
    assert pool.classes[0].rated_tps == pytest.approx(3350 / 70)


def test_a_preset_class_may_give_serving_and_replays_with_it():
    raw = {
        "classes": [{"name": "h100", "rent_usd_per_month": 2690, "pool_cards": 8, "serving": {**H100_70B, "batch": 16}}],
        "policy": {"card_class": "h100"},
    }
    s = build_scenario(raw, "preset file 'x.toml'")
    assert isinstance(s.classes[0], MarketClass) and round(s.classes[0].rated_tps) == 766


@pytest.mark.parametrize(
    "cls, needle",
    [
        ({"name": "h", "rated_tps": 766, "rent_usd_per_month": 1, "serving": H100_70B}, "give rated_tps or a [classes.serving] table, not both"),
        ({"name": "h", "rent_usd_per_month": 1, "serving": {**H100_70B, "batch": 0}}, "serving.batch"),
        ({"name": "h", "rent_usd_per_month": 1, "serving": {"weight_gb": 70}},
         "serving: give the step as memory_bandwidth_tb_s and weight_gb, or as a measured alpha_ms and beta_ms"),
        ({"name": "h", "rent_usd_per_month": 1, "serving": {**H100_70B, "alpha_ms": 20, "beta_ms": 0.2}}, "one of the two"),
        ({"name": "h", "rent_usd_per_month": 1, "serving": {**H100_70B, "batch": 16, "kv_cache_gb_per_stream": 1,
                                                             "memory_gb": 80}},
         "batch 16 needs 86 GB of weights and cache; the card's memory_gb 80 holds a batch of 10"),
        ({"name": "h", "rent_usd_per_month": 1, "serving": {"alpha_ms": 20, "beta_ms": 0.2, "memory_gb": 80}},
         "give weight_gb"),
        ({"name": "h", "rent_usd_per_month": 1, "serving": {**H100_70B, "params_b": 70}}, "needs both params_b and effective_tflops"),
        ({"name": "h", "rent_usd_per_month": 1, "serving": {**H100_70B, "bandwidth": 3}}, "serving.bandwidth: unknown key"),
    ],
)
def test_a_bad_serving_table_is_one_error_naming_the_key(cls, needle):
    with pytest.raises(ConfigError) as err:
        build_scenario({"classes": [{**cls, "pool_cards": 1}], "policy": {"card_class": "h"}}, "preset file 'x.toml'")
    assert needle in str(err.value)
    assert "rated_tps: Field required" not in str(err.value)
