"""Each card's curve from the store's serving samples (`fleet.service.curves`), on both stores: cards whose batch did
not move keep their class's beta, so a slow card still reads slow and a busy one reads its class's curve; the rate
at the promise reads off each card's own curve; no class curve and no promise are none."""

from __future__ import annotations

import numpy as np
import pytest

from fleet.core.latency import Slo
from fleet.core.serving import StepCurve
from fleet.core.units import HOUR_S
from fleet.ingest import IngestSettings, ingest_parsed, parse_bytes
from fleet.service.curves import read_card_curves
from fleet.service.pool import PoolWatch
from storage import ClassSpec

T0 = 1_767_225_600
ALPHA_S, BETA_S = 0.020, 0.00025
CLASS = {"flagship": StepCurve(ALPHA_S, BETA_S, 1_000_000)}
# card -> (its batch all along, its step's factor on the class's curve)
CARDS = {"gpu-a": (64, 1.0), "gpu-slow": (64, 1.25), "gpu-busy": (96, 1.0)}


@pytest.fixture
def pool(new_repo):
    repo = new_repo()
    repo.declare_classes([ClassSpec("flagship", 2500.0, 2690.0)])
    lines = ["card_id,ts,tokens_per_s,batch_mean,tpot_s,ttft_ok_share"]
    for card, (batch, factor) in CARDS.items():
        step = factor * (ALPHA_S + BETA_S * batch)
        lines += [f"{card},{T0 + 60 * k},{batch / step:.3f},{batch},{step!r},{0.5 if card == 'gpu-busy' else 1}"
                  for k in range(120)]
    out = ingest_parsed(repo, parse_bytes(("\n".join(lines) + "\n").encode(), "csv", "curves.csv"),
                        IngestSettings(now_ts=T0 + 3 * HOUR_S, default_class="flagship"))
    assert out.stored == 360
    return repo, PoolWatch(repo, 720).current()


def test_a_card_whose_batch_did_not_move_keeps_its_class_beta(pool):
    repo, index = pool
    got = read_card_curves(repo, index, T0 + 2 * HOUR_S, CLASS, Slo(stream_tps=30))
    at = {k: index.pos[k] for k in CARDS}
    assert not got.fitted.own_beta.any()
    np.testing.assert_allclose(got.fitted.beta_s, BETA_S)
    assert got.fitted.alpha_s[at["gpu-a"]] == pytest.approx(ALPHA_S)
    assert got.fitted.alpha_s[at["gpu-busy"]] == pytest.approx(ALPHA_S)  # busy: the class's curve further along
    assert got.fitted.alpha_s[at["gpu-slow"]] > 1.2 * ALPHA_S  # slow: its long step is its own
    rate = got.rate_at_promise_tps
    assert rate[at["gpu-busy"]] == pytest.approx(rate[at["gpu-a"]])
    assert rate[at["gpu-a"]] == pytest.approx(float(CLASS["flagship"].rate_at_floor_tps(30)))
    assert rate[at["gpu-slow"]] < 0.8 * rate[at["gpu-a"]]
    assert got.stream_tps[at["gpu-slow"]] == pytest.approx(1 / (1.25 * (ALPHA_S + BETA_S * 64)))
    assert got.slo_attainment_ratio == pytest.approx((1 + 1 + 0.5) / 3)


def test_no_class_curve_no_promise_and_no_samples_are_none(pool):
    repo, index = pool
    no_class = read_card_curves(repo, index, T0 + 2 * HOUR_S, {}, Slo(stream_tps=30))
    assert np.isnan(no_class.rate_at_promise_tps).all()  # a batch that never moved, and no beta to keep: no curve
    assert read_card_curves(repo, index, T0 + 2 * HOUR_S, CLASS).rate_at_promise_tps is None  # no promise
    assert read_card_curves(repo, index, T0 + 2 * HOUR_S, CLASS, Slo(ttft_ms=2000)).rate_at_promise_tps is None
    assert read_card_curves(repo, index, T0 - HOUR_S, CLASS, Slo(stream_tps=30), fit_hours=1) is None  # nothing yet
