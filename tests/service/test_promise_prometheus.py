"""Keeping the promise, behind a real Prometheus: stand-in vLLM servers, each on a decode step of its own
(alpha_i + beta_i × running) with a queue, and a stand-in gateway whose offered tokens are the pool's demand.
`fleet serve` fits every card's curve from what vLLM measures, and under a promise (`[slo]`) sizes the run set by
each card's own rate at it: the demand spread over that run set puts each card at a batch whose stream keeps the
floor. The same config without a promise sizes to throughput, and its streams fall below the floor. The journal,
`/metrics`, `fleet status` and `fleet explain` carry the figures.

The services run in process on a `StepClock`, the stand-ins on timelines of their own stamped on every sample, so
nothing asserted depends on when Prometheus scraped or the jobs ran."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
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
from tests.vllm_standin import CurveTimeline, GatewayTimeline, beside_prometheus

PROMETHEUS = shutil.which("prometheus")
T0 = 1_767_225_600  # 2026-01-01T00:00Z
STEP_S = 60
HOURS = 4  # the stand-ins' hours; the services decide the hour after them on curves fitted over them
TOKENS_PER_REQUEST = 250.0
STREAM_TPS = 30.0  # the promise: 30 tok/s a stream
TTFT_MS = 2500.0  # ... and the first token within 2.5 s at p99 (one of the stand-ins' bucket bounds)
DEMAND_TPS = 7000.0  # what the gateway offers the pool
# Each card's own step (alpha s, beta s) and its offered requests/s in each hour: the loads move every batch, so
# each card's curve is its own; its last hour is its score.
CARDS = {
    "c1": (0.018, 0.00022, (2.0, 5.0, 8.0, 10.0)),
    "c2": (0.019, 0.00026, (2.0, 5.0, 8.0, 9.5)),
    "c3": (0.020, 0.00025, (2.0, 5.0, 8.0, 10.5)),
    "c4": (0.021, 0.00024, (2.0, 5.0, 8.0, 9.0)),
    "c5": (0.022, 0.00028, (2.0, 5.0, 8.0, 10.0)),
    "c6": (0.020, 0.00030, (2.0, 5.0, 8.0, 9.5)),
    "c7": (0.019, 0.00023, (2.0, 5.0, 8.0, 10.0)),
    "c8": (0.024, 0.00035, (2.0, 5.0, 8.0, 9.0)),
}


@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed (Debian: apt-get install -y prometheus)")
def test_under_a_promise_the_run_set_keeps_every_stream_above_the_floor_and_without_one_it_does_not(tmp_path):
    timelines = {card: CurveTimeline(T0, STEP_S, a, b, rps, tokens_per_request=TOKENS_PER_REQUEST, seed=i)
                 for i, (card, (a, b, rps)) in enumerate(CARDS.items())}
    timelines["gateway"] = GatewayTimeline(T0, STEP_S, DEMAND_TPS, HOURS)
    beside_prometheus(PROMETHEUS, tmp_path, timelines, lambda work, url, names: _both(work, url), relabel=True)


def measured_stream_tps(run_set) -> float:
    """The slowest stream the demand gives the run set on the stand-ins' own steps: the demand spread evenly over
    its cards, each at the batch where its step's aggregate meets its share (one token a step for every stream)."""
    load = DEMAND_TPS / len(run_set)
    got = []
    for card in run_set:
        alpha, beta, _ = CARDS[card]
        batch = load * alpha / (1.0 - beta * load) if beta * load < 1 else np.inf
        got.append(1.0 / (alpha + beta * batch))
    return min(got)


def _config(url: str, promise: bool) -> str:
    slo = f"[slo]\nstream_tps = {STREAM_TPS}\nttft_ms = {TTFT_MS}\n" if promise else ""
    return textwrap.dedent(f"""\
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
        [policy]
        card_class = "flagship"
        window = "hour"
        mode = "steady"
        forecast = "last-hour"
        [demand]
        output_tokens_per_request = {TOKENS_PER_REQUEST}
        [schedule]
        settle_s = 300
        [ingest]
        default_class = "flagship"
        [ingest.sources.prometheus]
        prometheus_url = "{url}"
        query = '{rate_query(window="90s")}'
        busy_query = ""
        serving = true
        serving_window = "90s"
        batch_window = "30s"
        ttft_within_s = {TTFT_MS / 1000}
        demand_query = 'sum(rate(gateway_offered_tokens_total[90s]))'
        """) + slo


def _serve(work, url: str, promise: bool):
    from fleet.service.service import Service

    sub = work / ("promise" if promise else "throughput")
    sub.mkdir()
    (sub / "fleet.toml").write_text(_config(url, promise))
    cfg = load_service_config(sub / "fleet.toml")
    clock = StepClock(T0 + 301)
    db = f"sqlite:///{sub / 'fleet.db'}"
    svc = Service(cfg, open_repository(db), clock)
    while clock.t <= T0 + HOURS * HOUR_S + 301 + 600:
        for job in (svc.ingest_job, svc.score_job, svc.decide_job):
            job()
        clock.t += 600
    return svc, db


def _both(work, url: str) -> None:
    hour_ts = T0 + HOURS * HOUR_S
    kept, kept_db = _serve(work, url, promise=True)
    plain, _ = _serve(work, url, promise=False)
    store = kept.journal_store
    assert store.last_decided_ts(T0, T0 + 24 * HOUR_S) == hour_ts
    promised = sorted(store.run_set_at(hour_ts))
    throughput = sorted(plain.journal_store.run_set_at(hour_ts))
    stream, stream_plain = measured_stream_tps(promised), measured_stream_tps(throughput)
    print("run set under the promise:", promised, f"slowest stream {stream:.1f} tok/s")
    print("run set sized to throughput:", throughput, f"slowest stream {stream_plain:.1f} tok/s")
    assert stream >= STREAM_TPS > stream_plain
    assert len(promised) > len(throughput)

    # The journal: the size record carries the promise, each run-set card's rate at it (its own fitted curve's, near
    # its true one), the run set's rate and its expected stream and first-token wait.
    (size_row,) = store.decisions(kinds=["size"], since_ts=hour_ts, until_ts=hour_ts + 1)
    size = size_row.record
    print("size:", size_row.reason)
    print("rates at the promise:", {k: round(v) for k, v in size.rate_at_promise_tps.items()},
          "expected stream", size.stream_expected_tps, "first token", size.ttft_expected_s)
    assert (size.slo_stream_tps, size.slo_ttft_ms) == (STREAM_TPS, TTFT_MS)
    assert sorted(size.rate_at_promise_tps) == promised
    for card, rate in size.rate_at_promise_tps.items():
        alpha, beta, _ = CARDS[card]
        assert rate == pytest.approx(float(StepCurve(alpha, beta, 10**6).rate_at_floor_tps(STREAM_TPS)), rel=0.10)
    assert size.run_set_rate_at_promise_tps == pytest.approx(sum(size.rate_at_promise_tps.values()))
    assert size.run_set_rate_at_promise_tps >= DEMAND_TPS
    assert size.stream_expected_tps >= STREAM_TPS
    # The first token waits at p99 for a slot (none: the promised slots outnumber the requests' load by far) and no
    # prefill (the class gives none): within the promise.
    assert size.ttft_expected_s is not None and 0 <= size.ttft_expected_s <= TTFT_MS / 1000
    assert "at the promise (30 tok/s a stream, first token within 2500 ms at p99)" in size_row.reason
    adds = {r.card_key: r.record for r in store.decisions(kinds=["add"], since_ts=T0)}
    assert adds and all(a.rate_at_promise_tps is not None for a in adds.values())
    no_promise = plain.journal_store.decisions(kinds=["size"], since_ts=hour_ts, until_ts=hour_ts + 1)[0].record
    assert not no_promise.promised and not no_promise.rate_at_promise_tps

    # /metrics: the expected first-token wait beside the measured stream speed and attainment.
    kept.metrics_job()
    fams = {f.name: f for f in FleetCollector(lambda: kept.snapshot, dict).collect()}
    assert fams["fleet_pool_ttft_seconds"].samples[0].value == pytest.approx(size.ttft_expected_s)
    assert {s.labels["card"] for s in fams["fleet_card_stream_tps"].samples} == set(CARDS)
    plain.metrics_job()
    fams_plain = {f.name: f for f in FleetCollector(lambda: plain.snapshot, dict).collect()}
    assert np.isnan(fams_plain["fleet_pool_ttft_seconds"].samples[0].value)

    # `fleet status` and `fleet explain` say what the hour was sized to and each card's rate at the promise.
    status = _fleet("status", "--db", kept_db, "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)["promise"]
    assert shown["stream_expected_tps"] == pytest.approx(size.stream_expected_tps)
    assert shown["ttft_expected_s"] == pytest.approx(size.ttft_expected_s)
    said = " ".join(_fleet("status", "--db", kept_db).stdout.split())
    assert "promise: 30 tok/s a stream, first token within 2500 ms at p99; the run set's rate at it" in said
    card = promised[0]
    explained = _fleet("explain", card, "--db", kept_db)
    assert explained.returncode == 0, explained.stderr
    text = " ".join(explained.stdout.split())
    print(explained.stdout)
    assert f"its rate at the promise {size.rate_at_promise_tps[card]:,.0f} tok/s" in text
    assert "expected at the demand: the slowest stream" in text
    if card in adds:
        assert "its rate at the promise" in text and ("for latency" in text or "for tokens" in text)


def _fleet(*args):
    return subprocess.run([sys.executable, "-m", "fleet.cli.app", *args], capture_output=True, text=True, timeout=120)
