"""Each card's curve fitted from vLLM's own measurements, behind a real Prometheus: three stand-ins serve on curves of
their own (a card of the class's curve, a slow one, and a busy one on the class's curve), under loads that move
their batches; `fleet serve`'s ingest pulls the batch and the time per output token and to first token, the score
job fits every card's step against its batch, and each card's rate at the promise reads off its own curve.

The service runs in process on a `StepClock`, the stand-ins on timelines of their own stamped on every sample, so
nothing asserted depends on when Prometheus scraped or the jobs ran."""

from __future__ import annotations

import shutil
import textwrap

import numpy as np
import pytest

from fleet.core.serving import StepCurve
from fleet.core.units import HOUR_S
from fleet.ingest.prometheus import rate_query
from fleet.service.config import load_service_config
from fleet.service.metrics import FleetCollector
from storage.repository import open_repository
from tests.fake_prometheus import StepClock
from tests.vllm_standin import CurveTimeline, beside_prometheus

PROMETHEUS = shutil.which("prometheus")
T0 = 1_767_225_600  # 2026-01-01T00:00Z
STEP_S = 60
HOURS = 4
STREAM_TPS = 30.0  # the promise: 30 tok/s a stream
TTFT_S = 2.5  # ... and the first token within 2.5 s (one of the stand-ins' bucket bounds)
# (alpha_s, beta_s, offered requests/s in each hour): the class's curve is "a"'s; "slow" is longer at every batch;
# "busy" is on the class's curve with more offered (its last hour more than it can serve: its queue grows).
CARDS = {
    "a": (0.020, 0.00025, (1.0, 4.0, 8.0, 11.0)),
    "slow": (0.030, 0.00040, (1.0, 3.0, 5.0, 7.0)),
    "busy": (0.020, 0.00025, (4.0, 8.0, 11.0, 14.0)),
}


@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed (Debian: apt-get install -y prometheus)")
def test_each_cards_curve_is_fitted_from_vllm_behind_prometheus(tmp_path):
    timelines = {card: CurveTimeline(T0, STEP_S, a, b, rps, seed=i) for i, (card, (a, b, rps)) in enumerate(CARDS.items())}
    beside_prometheus(PROMETHEUS, tmp_path, timelines, lambda work, url, names: _serve(work, url, names, timelines))


def _serve(tmp_path, url: str, names: dict[str, str], timelines: dict[str, CurveTimeline]) -> None:
    from fleet.service.service import Service

    (tmp_path / "fleet.toml").write_text(textwrap.dedent(f"""\
        [month]
        start = 2026-01-01T00:00:00Z
        hours = 24
        [[pool.classes]]
        name = "flagship"
        rent_usd_per_month = 2690
        [pool.classes.serving]
        alpha_ms = 20
        beta_ms = 0.25
        batch = 128
        [slo]
        stream_tps = {STREAM_TPS}
        ttft_ms = {TTFT_S * 1000}
        [policy]
        card_class = "flagship"
        window = "hour"
        mode = "steady"
        forecast = "last-hour"
        [schedule]
        settle_s = 300
        [ingest]
        default_class = "flagship"
        [ingest.sources.prometheus]
        prometheus_url = "{url}"
        query = '{rate_query(window="90s")}'
        busy_query = ""
        serving = true
        serving_window = "90s"  # two of the stand-ins' one-minute steps: each point's rates read its own minute
        batch_window = "30s"  # the running requests' one sample of the point's minute
        ttft_within_s = {TTFT_S}
        """))
    cfg = load_service_config(tmp_path / "fleet.toml")
    clock = StepClock(T0 + 301)
    svc = Service(cfg, open_repository(f"sqlite:///{tmp_path / 'fleet.db'}"), clock)
    while clock.t <= T0 + HOURS * HOUR_S + 301 + 600:
        svc.ingest_job()
        svc.score_job()
        clock.t += 600
    curves = svc.scoring.card_curves
    assert curves is not None and curves.until_ts == T0 + HOURS * HOUR_S  # fitted over every hour the stand-ins served
    index = curves.index
    fitted = {card: (curves.fitted.alpha_s[index.pos[t]], curves.fitted.beta_s[index.pos[t]]) for t, card in names.items()}
    rate = svc.scoring.promise_rate_tps(curves.until_ts, index)
    rates = {card: float(rate[index.pos[t]]) for t, card in names.items()}
    print("fitted alpha ms, beta ms:", {c: (round(a * 1e3, 3), round(b * 1e3, 4)) for c, (a, b) in fitted.items()})
    print("rate at the promise tok/s:", {c: round(r, 1) for c, r in rates.items()})
    for card, (alpha_s, beta_s, _) in CARDS.items():
        assert curves.fitted.own_beta[index.pos[_target(names, card)]]
        assert fitted[card][0] == pytest.approx(alpha_s, rel=0.10)
        assert fitted[card][1] == pytest.approx(beta_s, rel=0.10)
        true_rate = float(StepCurve(alpha_s, beta_s, 10**6).rate_at_floor_tps(STREAM_TPS))
        assert rates[card] == pytest.approx(true_rate, rel=0.10)
    # The slow card keeps the floor at a smaller batch, each stream slower: less at the promise. The busy card ran
    # larger batches on the class's curve: the same rate at the promise as the card of the class's curve.
    assert rates["slow"] < 0.6 * rates["a"]
    assert rates["busy"] == pytest.approx(rates["a"], rel=0.10)
    _metrics(svc, names, timelines, curves.until_ts)


def _target(names: dict[str, str], card: str) -> str:
    return next(t for t, c in names.items() if c == card)


def _metrics(svc, names: dict[str, str], timelines: dict[str, CurveTimeline], until_ts: int) -> None:
    """`/metrics`: each card's stream speed in the last scored hour (one over its mean time per output token), its
    fitted step, and the share of first tokens within the promise's time, as the stand-ins served them."""
    svc.metrics_job()
    coll = FleetCollector(lambda: svc.snapshot, dict)
    fams = {f.name: f for f in coll.collect()}
    stream = {s.labels["card"]: s.value for s in fams["fleet_card_stream_tps"].samples}
    last = [(ts - T0) // STEP_S for ts in range(until_ts - HOUR_S, until_ts, STEP_S)]  # the last hour's steps
    shares = []
    for target, card in names.items():
        t = timelines[card]
        assert stream[target] == pytest.approx(1.0 / np.mean(t.step_s_at[last]), rel=0.02)
        shares.append(np.mean([t.ttft_ok_share(k, TTFT_S) for k in last if t.done[k] > 0]))
    assert {s.labels["card"] for s in fams["fleet_card_step_alpha_seconds"].samples} == set(names)
    attainment = fams["fleet_slo_attainment_ratio"].samples[0].value
    print("first tokens within the promise:", round(attainment, 3), "stand-ins:", [round(s, 3) for s in shares])
    assert attainment == pytest.approx(np.mean(shares), abs=0.03)
    assert attainment < 0.9  # the busy card's queue kept some of its first tokens late
    text = coll.exposition().decode()
    assert "fleet_card_stream_tps{" in text and "fleet_slo_attainment_ratio " in text
