"""What the nearest combination fails by when none passes: each check's figure against its mark, the mark at which it
would pass in `min_pass` of the months, and whether the clairvoyant view passes at all."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.compare import FIGURES, Combo
from fleet.core.scenario import KNOWN_FORECAST, Checks
from fleet.core.shortfall import clairvoyant_twin, passing_mark, pool_rated_tps, shortfall
from tests.conftest import make_scenario

MARKS = Checks()


def _months(unmet_share=None, convergence=None, wrong=None, n: int = 20, marks: Checks = MARKS, goodput=None):
    """(figures, passes) of n months: every figure within its mark unless given."""
    figs = np.zeros((n, len(FIGURES)))
    figs[:, FIGURES.index("convergence")] = 0.95
    figs[:, FIGURES.index("goodput_share")] = 1.0
    for key, given in (("unmet_share", unmet_share), ("convergence", convergence), ("wrong_evictions", wrong),
                       ("goodput_share", goodput)):
        if given is not None:
            figs[:, FIGURES.index(key)] = given
    passes = np.stack([figs[:, FIGURES.index("unmet_share")] <= marks.max_unmet_share + 1e-12,
                       figs[:, FIGURES.index("convergence")] >= marks.min_convergence - 1e-12,
                       figs[:, FIGURES.index("wrong_evictions")] <= marks.max_wrong_evictions,
                       figs[:, FIGURES.index("goodput_share")] >= marks.latency_share - 1e-12], axis=1)
    return figs, passes


@pytest.mark.parametrize(
    "check, values, min_pass, mark",
    [
        ("capacity", np.linspace(0.01, 0.20, 20), 0.95, 0.19),  # the 19th smallest of 20 unmet shares
        ("capacity", np.full(20, 0.123456), 0.95, 0.1235),  # rounded up: the rounded mark still passes
        ("convergence", np.linspace(0.70, 0.89, 20), 0.95, 0.71),  # the 19th largest of 20
        ("convergence", np.full(20, 0.87654), 0.95, 0.876),  # rounded down
        ("eviction", np.array([0] * 15 + [1, 1, 2, 3, 5]), 0.95, 3.0),
        ("eviction", np.array([0] * 15 + [1, 1, 2, 3, 5]), 0.75, 0.0),
        ("latency", np.linspace(0.950, 0.969, 20), 0.95, 0.951),  # the 19th largest share within the promise
        ("latency", np.full(20, 0.987654), 0.95, 0.9876),  # rounded down
    ],
)
def test_the_passing_mark_passes_in_min_pass_of_the_months(check, values, min_pass, mark):
    got = passing_mark(check, values, min_pass)
    assert got == pytest.approx(mark)
    ok = values >= got - 1e-12 if check in ("convergence", "latency") else values <= got + 1e-12
    assert ok.mean() >= min_pass


def test_a_shortfall_names_each_failing_check_and_the_mark_that_passes():
    unmet = np.linspace(0.10, 0.29, 20)
    figs, passes = _months(unmet_share=unmet, wrong=np.array([1] + [0] * 19))
    combo = Combo("day", "day", 0.0, "steady", 1.5, "flagship", forecast="last-hour")
    short = shortfall(combo, figs, passes, MARKS, 0.95, None, 120_000.0, 36_000.0)
    assert [c.check for c in short.checks] == ["capacity", "eviction"]  # in CHECKS order; convergence passes
    capacity, eviction = short.checks
    assert capacity.pass_rate == 0.0 and capacity.mark == MARKS.max_unmet_share
    assert capacity.median == pytest.approx(np.median(unmet))
    assert capacity.passing_mark == pytest.approx(0.28) and capacity.setting == "checks.max_unmet_share=0.28"
    # eviction fails in one month of 20: within 95% alone, so its mark need not move
    assert eviction.pass_rate == 0.95 and eviction.passing_mark == MARKS.max_wrong_evictions
    assert short.binding == (capacity,)
    assert short.together_pass_rate == pytest.approx(0.90)  # the month over 0.28, and the first month's wrong eviction


def test_a_promise_kept_too_rarely_is_named_with_the_share_that_passes():
    goodput = np.linspace(0.95, 0.999, 20)
    figs, passes = _months(goodput=goodput)
    combo = Combo("day", "day", 0.0, "steady", 1.1, "h100-70b", size_to="throughput", stream_tps=30.0)
    short = shortfall(combo, figs, passes, MARKS, 0.95, None, 72_000.0, 160_000.0)
    (latency,) = short.checks
    assert latency.check == "latency" and latency.pass_rate == pytest.approx(float((goodput >= 0.99 - 1e-12).mean()))
    assert latency.setting == f"checks.latency_share={latency.passing_mark:g}" and latency.passing_mark <= goodput[1]


def test_the_clairvoyant_twin_knows_the_demand_and_nothing_else_changes():
    combo = Combo("day", "day", 0.1, "held", 1.2, "flagship", forecast="holt-winters", forecast_quantile=0.9)
    twin = clairvoyant_twin(combo)
    assert twin.knows_demand and twin.forecast == KNOWN_FORECAST and twin.forecast_quantile is None
    assert [a for a in ("window", "size_window", "share", "mode", "headroom", "card_class", "score")
            if getattr(twin, a) != getattr(combo, a)] == []
    assert clairvoyant_twin(twin) is None


def test_the_pools_rated_rate_counts_the_classes_the_policy_rents():
    classes = [{"name": "flagship", "rated_tps": 6000, "rent_usd_per_month": 2690, "pool_cards": 6},
               {"name": "bargain", "rated_tps": 3030, "rent_usd_per_month": 1442, "pool_cards": 4}]
    one = make_scenario(classes=classes)
    assert pool_rated_tps(one) == 6 * 6000
    both = make_scenario(classes=classes, policy={**one.policy.model_dump(), "card_class": "any"})
    assert pool_rated_tps(both) == 6 * 6000 + 4 * 3030

